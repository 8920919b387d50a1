//! A generated kernel's CUDA run on the CPU, for kernels that have not met a GPU yet.
//!
//! `tests/cpu/cuda_host.h` makes every thread of a block a fiber of one OS thread, switched only
//! where CUDA threads wait for each other, in a seeded random order, and fails loudly on what a
//! GPU leaves undefined (a barrier not every thread reaches, a warp collective whose lanes
//! disagree). The kernel's source, exactly as rendered, is compiled by the host's C++ compiler
//! (`c++`, C++17) together with a driver generated from the entry points' parameter types;
//! the driver reads a script of launches and the buffers from files, runs them in order and
//! writes the buffers back. Binaries are cached by the hash of their source.
//!
//! It checks a kernel's logic (offsets, orders, tie-breaks, what is read before it is written),
//! not its speed, and only kernels that use the CUDA the header provides (no texture or
//! cooperative-group calls). Inline PTX runs where the template's helper around it has a
//! `FATHOM_CPU_EMULATION` branch (which the header defines and NVRTC never does) calling the
//! header's emulation of the instruction: `cp.async` with its asynchrony (a copy lands in shared
//! memory only when a `wait_group` completes its group; one never waited for is an error), the
//! fp16 and bf16 conversions, `prmt`, `lop3`, and `mma.sync` m16n8k16 (f16 operands, f32
//! accumulators) as a warp collective in the PTX ISA's fragment layouts. So the scans run here
//! too (`tests/tests/cpu_scan.rs`); an `asm` statement without such a branch does not compile.
//! An entry point declared with `__cluster_dims__(N, 1, 1)` runs as thread-block clusters of N
//! blocks at once, each with its own shared memory, with cluster barriers and distributed
//! shared memory loads (`cluster_sync`, `cluster_shared`), so the cluster select runs here too.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use codegen::emit::sha256_hex;
use codegen::signature::{entry_params, CType as SignatureType, Scalar};

/// The C type of one kernel parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CType {
    /// A pointer, in `codegen::signature`'s spelling (`const float*`, `uint2*`).
    Ptr(String),
    /// `int`.
    Int,
    /// `float`.
    Float,
}

/// One entry point of the source: its name and parameter types, in order, and the blocks of
/// its thread-block clusters (1 unless it declares `__cluster_dims__(N, 1, 1)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub params: Vec<CType>,
    pub cluster: u32,
}

impl Entry {
    /// The entry point `name` of `source`, its parameter types read from the source itself
    /// (`codegen::signature`, as `runtime::abi` reads them), so that no test writes a kernel's
    /// argument list again.
    pub fn from_source(source: &str, name: String) -> Result<Entry, String> {
        let params = entry_params(source, &name)
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|p| match &p.ty {
                SignatureType::Ptr { .. } => Ok(CType::Ptr(p.ty.canonical())),
                SignatureType::Scalar(Scalar::I32) => Ok(CType::Int),
                SignatureType::Scalar(Scalar::F32) => Ok(CType::Float),
                SignatureType::Scalar(_) => Err(format!(
                    "{name}: parameter `{}` is a `{}`; the CPU driver passes int, float and \
                     pointers",
                    p.name,
                    p.ty.canonical()
                )),
            })
            .collect::<Result<_, _>>()?;
        let cluster = cluster_dims(source, &name)?;
        Ok(Entry {
            name,
            params,
            cluster,
        })
    }
}

/// The blocks of entry point `name`'s clusters: `N` of a `__cluster_dims__(N, 1, 1)` in its
/// declaration (between the `extern "C"` before it and its name), else 1.
fn cluster_dims(source: &str, name: &str) -> Result<u32, String> {
    let Some(at) = source.find(&format!(" {name}(")) else {
        return Ok(1);
    };
    let declaration = &source[source[..at].rfind("extern \"C\"").unwrap_or(0)..at];
    let Some(dims) = declaration.split("__cluster_dims__(").nth(1) else {
        return Ok(1);
    };
    let parts: Vec<&str> = dims.split(')').next().unwrap_or("").split(',').collect();
    match parts
        .iter()
        .map(|p| p.trim().parse::<u32>())
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(v) if v.len() == 3 && v[1] == 1 && v[2] == 1 => Ok(v[0]),
        _ => Err(format!(
            "{name}: `__cluster_dims__({dims_text})`; the CPU runs take clusters of (N, 1, 1) \
             with N a literal",
            dims_text = dims.split(')').next().unwrap_or("")
        )),
    }
}

/// A run-time argument of a launch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// The address of buffer `i` of the run.
    Buffer(usize),
    /// A null pointer (an optional input or output the launch goes without).
    Null,
    /// An integer.
    Int(i64),
    /// A float.
    Float(f32),
}

/// A buffer that is a table of pointers into other buffers (a `[B*H]` table like `k_rows`): its
/// `u64` entry `i` is set, before the launches, to the address of buffer `entries[i].0` plus
/// `entries[i].1` bytes (addresses exist only in the run). It comes back holding them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PointerTable {
    /// The table's buffer (at least `2 * entries.len()` words).
    pub buffer: usize,
    /// `(buffer, byte offset)` of each entry.
    pub entries: Vec<(usize, usize)>,
}

/// One `u64` of a buffer, set before the launches to the address of buffer `target` plus
/// `offset` bytes (a pointer inside a table of other data, like a run table's segment
/// addresses). It comes back holding that address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Address {
    /// The buffer holding the pointer.
    pub buffer: usize,
    /// The pointer's `u64` index in that buffer (words `2 * index` and `2 * index + 1`).
    pub index: usize,
    /// The buffer it points into.
    pub target: usize,
    /// Bytes into `target`.
    pub offset: usize,
}

/// One launch: entry point (index into the program's entries), grid and threads per block.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub entry: usize,
    pub grid: [u32; 3],
    pub threads: u32,
    pub args: Vec<Value>,
}

/// A compiled kernel source with its driver.
pub struct Program {
    binary: PathBuf,
    entries: Vec<Entry>,
}

/// Where binaries and runs live: under the system's temporary directory.
fn work_dir() -> PathBuf {
    std::env::temp_dir().join("fathom-cpu-cuda")
}

fn header_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cpu")
}

/// The driver: reads `script` (buffer sizes, then launches) and the buffers, runs the launches,
/// writes the buffers back.
fn driver(entries: &[Entry]) -> String {
    let mut d = String::from(
        r#"
#include <fstream>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
    if (argc != 2) { std::fprintf(stderr, "usage: prog DIR\n"); return 2; }
    const std::string dir = argv[1];
    std::ifstream script(dir + "/script");
    unsigned long long seed = 0;
    size_t buffers = 0;
    script >> seed >> buffers;
    fathom_cpu::seed(seed);
    std::vector<std::vector<unsigned int>> buf(buffers);
    for (size_t i = 0; i < buffers; ++i) {
        size_t words = 0;
        script >> words;
        buf[i].resize(words + 1);  // one spare word: no buffer has address 0
        std::ifstream in(dir + "/b" + std::to_string(i), std::ios::binary);
        in.read(reinterpret_cast<char*>(buf[i].data()), (std::streamsize)(4 * words));
        if ((size_t)in.gcount() != 4 * words) { std::fprintf(stderr, "short buffer %zu\n", i); return 2; }
    }
    size_t addresses = 0;
    script >> addresses;
    for (size_t a = 0; a < addresses; ++a) {
        size_t table = 0, index = 0, target = 0, offset = 0;
        script >> table >> index >> target >> offset;
        if (buf.at(table).size() < 2 * index + 3) { std::fprintf(stderr, "address %zu past buffer %zu\n", index, table); return 2; }
        const unsigned long long addr =
            (unsigned long long)(reinterpret_cast<const char*>(buf.at(target).data()) + offset);
        std::memcpy(buf[table].data() + 2 * index, &addr, 8);
    }
    size_t launches = 0;
    script >> launches;
    for (size_t l = 0; l < launches; ++l) {
        int entry = 0, nargs = 0;
        dim3 grid, block;
        script >> entry >> grid.x >> grid.y >> grid.z >> block.x >> nargs;
        std::vector<std::string> kind(nargs);
        std::vector<double> num(nargs);
        for (int a = 0; a < nargs; ++a) script >> kind[a] >> num[a];
        auto ptr = [&](int a) -> void* {
            if (kind[a] == "n") return nullptr;
            if (kind[a] != "b") { std::fprintf(stderr, "argument %d is not a buffer\n", a); std::exit(2); }
            return buf.at((size_t)num[a]).data();
        };
        auto val = [&](int a) -> double {
            if (kind[a] != "v") { std::fprintf(stderr, "argument %d is not a value\n", a); std::exit(2); }
            return num[a];
        };
        (void)ptr;
        (void)val;
        switch (entry) {
"#,
    );
    for (e, entry) in entries.iter().enumerate() {
        let args: Vec<String> = entry
            .params
            .iter()
            .enumerate()
            .map(|(a, t)| match t {
                CType::Ptr(ty) => format!("({ty})ptr({a})"),
                CType::Int => format!("(int)val({a})"),
                CType::Float => format!("(float)val({a})"),
            })
            .collect();
        let _ = writeln!(
            d,
            "        case {e}:\n            if (nargs != {n}) {{ std::fprintf(stderr, \"{name}: {n} arguments\\n\"); return 2; }}\n            fathom_cpu::launch(grid, block, {cluster}, [&] {{ {name}({args}); }});\n            break;",
            n = entry.params.len(),
            cluster = entry.cluster,
            name = entry.name,
            args = args.join(", ")
        );
    }
    d.push_str(
        r#"        default:
            std::fprintf(stderr, "no entry %d\n", entry);
            return 2;
        }
    }
    for (size_t i = 0; i < buffers; ++i) {
        std::ofstream out(dir + "/b" + std::to_string(i), std::ios::binary);
        out.write(reinterpret_cast<const char*>(buf[i].data()), (std::streamsize)(4 * (buf[i].size() - 1)));
    }
    return 0;
}
"#,
    );
    d
}

impl Program {
    /// Compiles `source` (a rendered kernel) with a driver for `entries`, or reuses the binary
    /// an earlier build of the same text left.
    pub fn build(source: &str, entries: Vec<Entry>) -> Result<Program, String> {
        let text = format!("#include \"cuda_host.h\"\n{source}\n{}", driver(&entries));
        let header = fs::read_to_string(header_dir().join("cuda_host.h"))
            .map_err(|e| format!("cuda_host.h: {e}"))?;
        // More compiler flags for a debugging run, e.g. `-g -fsanitize=address`.
        let extra = std::env::var("FATHOM_CPU_CUDA_FLAGS").unwrap_or_default();
        let hash = sha256_hex(&format!("{header}\n{extra}\n{text}"));
        let dir = work_dir();
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let binary = dir.join(format!("prog-{}", &hash[..24]));
        if !binary.exists() {
            let unique = format!("{}-{}", &hash[..24], std::process::id());
            let cpp = dir.join(format!("src-{unique}.cpp"));
            fs::write(&cpp, &text).map_err(|e| format!("{}: {e}", cpp.display()))?;
            let tmp = dir.join(format!("tmp-{unique}"));
            let out = Command::new("c++")
                .args(["-std=c++17", "-O2", "-w"])
                .args(extra.split_whitespace())
                .arg("-I")
                .arg(header_dir())
                .arg(&cpp)
                .arg("-o")
                .arg(&tmp)
                .output()
                .map_err(|e| {
                    format!("running c++: {e} (the CPU runs of CUDA need a C++17 compiler)")
                })?;
            if !out.status.success() {
                return Err(format!(
                    "c++ failed on {}:\n{}",
                    cpp.display(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            fs::rename(&tmp, &binary).map_err(|e| format!("{}: {e}", binary.display()))?;
            let _ = fs::remove_file(&cpp);
        }
        Ok(Program { binary, entries })
    }

    /// The index of entry point `name`.
    pub fn entry(&self, name: &str) -> usize {
        self.entries
            .iter()
            .position(|e| e.name == name)
            .unwrap_or_else(|| panic!("no entry point {name}"))
    }

    /// Runs `launches` in order over `buffers` (32-bit words each; every kernel sees them at
    /// distinct addresses), with the fibers scheduled from `seed`. The buffers hold what the
    /// kernels left in them afterwards.
    pub fn run(
        &self,
        buffers: &mut [Vec<u32>],
        launches: &[Launch],
        seed: u64,
    ) -> Result<(), String> {
        self.run_with_tables(buffers, &[], launches, seed)
    }

    /// [`Program::run`], with `tables` filled with the buffers' addresses first.
    pub fn run_with_tables(
        &self,
        buffers: &mut [Vec<u32>],
        tables: &[PointerTable],
        launches: &[Launch],
        seed: u64,
    ) -> Result<(), String> {
        let addresses: Vec<Address> = tables
            .iter()
            .flat_map(|t| {
                t.entries
                    .iter()
                    .enumerate()
                    .map(|(index, &(target, offset))| Address {
                        buffer: t.buffer,
                        index,
                        target,
                        offset,
                    })
            })
            .collect();
        self.run_with_addresses(buffers, &addresses, launches, seed)
    }

    /// [`Program::run`], with the pointers `addresses` set first.
    pub fn run_with_addresses(
        &self,
        buffers: &mut [Vec<u32>],
        addresses: &[Address],
        launches: &[Launch],
        seed: u64,
    ) -> Result<(), String> {
        let dir = tempdir_in(&work_dir())?;
        let mut script = format!("{seed} {}\n", buffers.len());
        for (i, b) in buffers.iter().enumerate() {
            let bytes: Vec<u8> = b.iter().flat_map(|w| w.to_le_bytes()).collect();
            fs::write(dir.join(format!("b{i}")), bytes).map_err(|e| e.to_string())?;
            let _ = writeln!(script, "{}", b.len());
        }
        let _ = writeln!(script, "{}", addresses.len());
        for a in addresses {
            let _ = writeln!(script, "{} {} {} {}", a.buffer, a.index, a.target, a.offset);
        }
        let _ = writeln!(script, "{}", launches.len());
        for l in launches {
            let entry = &self.entries[l.entry];
            assert_eq!(
                entry.params.len(),
                l.args.len(),
                "{}: argument count",
                entry.name
            );
            let _ = write!(
                script,
                "{} {} {} {} {} {}",
                l.entry,
                l.grid[0],
                l.grid[1],
                l.grid[2],
                l.threads,
                l.args.len()
            );
            for a in &l.args {
                let _ = match a {
                    Value::Buffer(i) => write!(script, " b {i}"),
                    Value::Null => write!(script, " n 0"),
                    Value::Int(v) => write!(script, " v {v}"),
                    Value::Float(v) => write!(script, " v {v:e}"),
                };
            }
            script.push('\n');
        }
        fs::write(dir.join("script"), script).map_err(|e| e.to_string())?;
        let out = Command::new(&self.binary)
            .arg(&dir)
            .output()
            .map_err(|e| format!("{}: {e}", self.binary.display()))?;
        let result = if out.status.success() {
            buffers.iter_mut().enumerate().try_for_each(|(i, b)| {
                let bytes = fs::read(dir.join(format!("b{i}"))).map_err(|e| e.to_string())?;
                if bytes.len() != 4 * b.len() {
                    return Err(format!("buffer {i} came back with {} bytes", bytes.len()));
                }
                for (w, c) in b.iter_mut().zip(bytes.chunks_exact(4)) {
                    *w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
                Ok(())
            })
        } else {
            Err(format!(
                "the CPU run failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        };
        let _ = fs::remove_dir_all(&dir);
        result
    }
}

/// A fresh directory under `parent`.
fn tempdir_in(parent: &Path) -> Result<PathBuf, String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = parent.join(format!("run-{}-{n}", std::process::id()));
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// One kernel spec's rendered source compiled for the CPU with its one entry point: the road the
/// CPU runners of the families (`scan_cpu`, `plan_cpu`) share; each adds its own `run`.
pub struct CpuKernel<S> {
    pub spec: S,
    program: Program,
}

impl<S: codegen::spec::Family + Copy> CpuKernel<S> {
    /// Renders `spec` and compiles it for the CPU.
    pub fn build(spec: S) -> Result<Self, String> {
        let source = codegen::render::render(&spec).map_err(|e| e.to_string())?;
        Self::build_source(spec, &source)
    }

    /// Compiles `source` as if it were `spec`'s rendering (a test may mutate the text).
    pub fn build_source(spec: S, source: &str) -> Result<Self, String> {
        let entry = Entry::from_source(source, spec.kernel_name())?;
        let program = Program::build(source, vec![entry])?;
        Ok(CpuKernel { spec, program })
    }

    /// The kernel's name.
    pub fn name(&self) -> String {
        self.spec.kernel_name()
    }

    /// The compiled program (its one entry point is entry 0).
    pub fn program(&self) -> &Program {
        &self.program
    }
}

/// Host data as the 32-bit words the CPU runs' buffers hold (little-endian, the last word
/// zero-padded), and back.
pub mod words {
    /// Each `u64` as two words, low first.
    pub fn from_u64(x: &[u64]) -> Vec<u32> {
        x.iter()
            .flat_map(|&w| [w as u32, (w >> 32) as u32])
            .collect()
    }

    /// Pairs of words as `u64`s, low first.
    pub fn to_u64(x: &[u32]) -> Vec<u64> {
        x.chunks_exact(2)
            .map(|p| u64::from(p[0]) | u64::from(p[1]) << 32)
            .collect()
    }

    /// Two `u16`s a word, the first in the low half.
    pub fn from_u16(x: &[u16]) -> Vec<u32> {
        x.chunks(2)
            .map(|p| u32::from(p[0]) | u32::from(*p.get(1).unwrap_or(&0)) << 16)
            .collect()
    }

    /// Four bytes a word, the first in the low byte.
    pub fn from_u8(x: &[u8]) -> Vec<u32> {
        x.chunks(4)
            .map(|p| {
                let mut b = [0u8; 4];
                b[..p.len()].copy_from_slice(p);
                u32::from_le_bytes(b)
            })
            .collect()
    }
}
