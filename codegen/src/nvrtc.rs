//! Finding, loading and calling NVRTC, for everything that compiles CUDA C (codegen's `emit`,
//! the runtime's JIT, autotune).
//!
//! cudarc (features `dynamic-loading`, `cuda-13000`) opens libnvrtc by bare name (`libnvrtc.so`,
//! `libnvrtc.so.13`, ...) on first use and panics when none of them loads. So before any cudarc
//! NVRTC call, [`load`] finds the library file itself and opens it by absolute path, keeping the
//! handle for the life of the process: the dynamic loader then answers cudarc's later
//! `dlopen("libnvrtc.so.13")` with the object already loaded under that soname. [`load`] then
//! checks that cudarc sees NVRTC, and that what it sees is the same library, so no cudarc call can
//! panic or silently use another NVRTC. The `libnvrtc-builtins.so.<major>.<minor>` beside the
//! library is preloaded the same way, because NVRTC too opens it by bare name.
//!
//! Code that calls cudarc's NVRTC API directly must call [`load`] first; [`compile`] and
//! [`version`] do.
//!
//! # Search order ([`locate`])
//!
//! In each directory the file names tried are `libnvrtc.so.13`, then `libnvrtc.so`.
//!
//! 1. `FATHOM_NVRTC`: the library file, or a directory holding it. When set, it must be right:
//!    nothing else is tried, so an explicit choice is never silently replaced.
//! 2. `CUDA_PATH`: its `lib64/` and `lib/`.
//! 3. `LD_LIBRARY_PATH`'s directories, in order, then the usual toolkit places:
//!    `/usr/local/cuda/lib64`, `/usr/local/cuda-13*/lib64` (newest first),
//!    `/usr/lib/<arch>-linux-gnu`, `/opt/cuda/lib64`, and pip's `nvidia/cu13/lib` in the active
//!    virtualenv, `~/.local/lib/python3*/site-packages`, `/usr/local/lib/python3*/{dist,site}-packages`
//!    and `/usr/lib/python3/dist-packages`.
//! 4. fathom's cache ([`cache_dir`]): the pinned wheel `nvidia-cuda-nvrtc==13.0.88`, installed by
//!    `scripts/install-nvrtc.sh` with `pip install --target <cache>/nvrtc-13.0.88`, at
//!    `<cache>/nvrtc-13.0.88/nvidia/cu13/lib/libnvrtc.so.13`.

use std::ffi::{c_char, c_int, CString, OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

use cudarc::nvrtc::{result, sys};
use thiserror::Error;

/// The NVRTC wheel version `scripts/install-nvrtc.sh` installs into the cache.
pub const PINNED_NVRTC_VERSION: &str = "13.0.88";

/// File names tried in every searched directory, in order.
pub const LIBRARY_NAMES: [&str; 2] = ["libnvrtc.so.13", "libnvrtc.so"];

/// Symbols a file must export to be taken for NVRTC.
const REQUIRED_SYMBOLS: [&str; 6] = [
    "nvrtcVersion",
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcGetPTX",
    "nvrtcGetProgramLog",
    "nvrtcDestroyProgram",
];

const FIX: &str = "set FATHOM_NVRTC to libnvrtc.so.13 (or its directory), install the CUDA 13 \
                   toolkit, or run `scripts/install-nvrtc.sh` (also run by `scripts/test.sh`), \
                   which installs the pinned wheel nvidia-cuda-nvrtc==13.0.88 into fathom's cache";

/// Which rule of the search order found the library.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The `FATHOM_NVRTC` variable.
    FathomNvrtc,
    /// `CUDA_PATH`'s `lib64/` or `lib/`.
    CudaPath,
    /// A directory of `LD_LIBRARY_PATH`.
    LdLibraryPath,
    /// A usual toolkit or pip location.
    Toolkit,
    /// The pinned wheel in fathom's cache directory.
    Cache,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::FathomNvrtc => "FATHOM_NVRTC",
            Source::CudaPath => "CUDA_PATH",
            Source::LdLibraryPath => "LD_LIBRARY_PATH",
            Source::Toolkit => "toolkit location",
            Source::Cache => "fathom cache (pinned wheel)",
        })
    }
}

/// An NVRTC library file and the rule that found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvrtcLibrary {
    /// Absolute path of the shared library.
    pub path: PathBuf,
    /// The rule of the search order that found it.
    pub source: Source,
}

/// The output of one compilation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compiled {
    /// The PTX text.
    pub ptx: String,
    /// NVRTC's log (warnings; usually empty on success).
    pub log: String,
}

/// What went wrong finding, loading or calling NVRTC.
#[derive(Debug, Error)]
pub enum NvrtcError {
    /// No rule of the search order found a library.
    #[error(
        "NVRTC (libnvrtc.so.13) was not found. Looked in:\n{}\nFix: {FIX}",
        searched.iter().map(|s| format!("  - {s}")).collect::<Vec<_>>().join("\n")
    )]
    NotFound {
        /// Every place looked at, in order, one line each.
        searched: Vec<String>,
    },
    /// `FATHOM_NVRTC` is set but names neither the library nor a directory holding it.
    #[error(
        "FATHOM_NVRTC={} is neither an NVRTC library file nor a directory holding one of {}; \
         point it at libnvrtc.so.13, or unset it to search the usual places",
        path.display(), LIBRARY_NAMES.join(", ")
    )]
    BadFathomNvrtc {
        /// The variable's value.
        path: PathBuf,
    },
    /// The file exists but the dynamic loader refused it.
    #[error("cannot load {} as a shared library: {message}. Fix: {FIX}", path.display())]
    Load {
        /// The file.
        path: PathBuf,
        /// The loader's message.
        message: String,
    },
    /// The file is a shared library but not NVRTC.
    #[error("{} is a shared library but not NVRTC: it lacks `{missing}`. Fix: {FIX}", path.display())]
    NotNvrtc {
        /// The file.
        path: PathBuf,
        /// The first missing entry point.
        missing: &'static str,
    },
    /// cudarc cannot open NVRTC by any name it knows, even with the library loaded.
    #[error(
        "{} is loaded, but cudarc cannot open NVRTC by any of its names (libnvrtc.so, \
         libnvrtc.so.13, ...); the file's soname must be one of them. Fix: {FIX}",
        path.display()
    )]
    NotVisible {
        /// The library fathom loaded.
        path: PathBuf,
    },
    /// cudarc opened a different NVRTC than the one fathom found.
    #[error(
        "fathom loaded NVRTC from {}, but cudarc resolved its name to another libnvrtc (one the \
         dynamic loader finds first, e.g. a libnvrtc.so on LD_LIBRARY_PATH or in the system \
         library cache, or one opened before fathom's). Fix: set FATHOM_NVRTC to the library \
         you want, or remove the other one from the loader's path",
        path.display()
    )]
    Conflict {
        /// The library fathom loaded.
        path: PathBuf,
    },
    /// The target architecture is not of the form NVRTC accepts.
    #[error(
        "invalid GPU architecture `{arch}`; expected `sm_<major><minor>` or \
         `compute_<major><minor>`, optionally with an `a`/`f` suffix, e.g. sm_80, sm_90, sm_90a"
    )]
    InvalidArch {
        /// The argument.
        arch: String,
    },
    /// The source, file name or an option cannot be passed to NVRTC.
    #[error("invalid {what} for `{file_name}`: {reason}")]
    InvalidInput {
        /// `source`, `file name` or `option`.
        what: &'static str,
        /// The file name of the compilation.
        file_name: String,
        /// Why.
        reason: String,
    },
    /// NVRTC rejected the program; the log names the file and line.
    #[error("NVRTC could not compile `{file_name}` for {arch} ({code}):\n{log}")]
    Compile {
        /// The file name given to NVRTC, as it appears in the log.
        file_name: String,
        /// The target architecture.
        arch: String,
        /// NVRTC's result code.
        code: String,
        /// NVRTC's log.
        log: String,
    },
    /// An NVRTC call other than the compilation failed.
    #[error("{call} failed: {code}")]
    Api {
        /// The NVRTC function.
        call: &'static str,
        /// NVRTC's result code.
        code: String,
    },
}

/// The inputs of the search: the environment, as plain values so that the search order can be
/// exercised on fake directories.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchEnv {
    /// `FATHOM_NVRTC`.
    pub fathom_nvrtc: Option<PathBuf>,
    /// `CUDA_PATH`.
    pub cuda_path: Option<PathBuf>,
    /// `LD_LIBRARY_PATH`, split.
    pub ld_library_path: Vec<PathBuf>,
    /// The usual toolkit and pip directories of rule 3, globs already expanded.
    pub toolkit_dirs: Vec<PathBuf>,
    /// fathom's cache directory ([`cache_dir`]).
    pub cache_dir: PathBuf,
}

impl SearchEnv {
    /// The search inputs of this process: its environment variables and the toolkit
    /// directories that exist on this machine.
    pub fn from_process() -> SearchEnv {
        SearchEnv {
            fathom_nvrtc: non_empty_var("FATHOM_NVRTC").map(PathBuf::from),
            cuda_path: non_empty_var("CUDA_PATH").map(PathBuf::from),
            ld_library_path: std::env::var_os("LD_LIBRARY_PATH")
                .map(|v| {
                    std::env::split_paths(&v)
                        .filter(|p| !p.as_os_str().is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            toolkit_dirs: toolkit_dirs(),
            cache_dir: cache_dir(),
        }
    }
}

/// fathom's cache directory: `$FATHOM_CACHE_DIR`, else `$XDG_CACHE_HOME/fathom`, else
/// `~/.cache/fathom` (the system temporary directory's `fathom` when there is no home).
pub fn cache_dir() -> PathBuf {
    cache_dir_from(
        non_empty_var("FATHOM_CACHE_DIR").as_deref(),
        non_empty_var("XDG_CACHE_HOME").as_deref(),
        non_empty_var("HOME").as_deref(),
    )
}

/// The rule behind [`cache_dir`], on given values of `FATHOM_CACHE_DIR`, `XDG_CACHE_HOME` and
/// `HOME`. A relative `XDG_CACHE_HOME` is ignored, as the XDG specification asks.
pub fn cache_dir_from(
    fathom_cache_dir: Option<&OsStr>,
    xdg_cache_home: Option<&OsStr>,
    home: Option<&OsStr>,
) -> PathBuf {
    let set = |v: Option<&OsStr>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(fathom_cache_dir) {
        return dir;
    }
    if let Some(xdg) = set(xdg_cache_home).filter(|p| p.is_absolute()) {
        return xdg.join("fathom");
    }
    match set(home) {
        Some(home) => home.join(".cache").join("fathom"),
        None => std::env::temp_dir().join("fathom"),
    }
}

/// Where the pinned wheel keeps its library inside the cache directory `cache`.
pub fn pinned_wheel_lib_dir(cache: &Path) -> PathBuf {
    cache
        .join(format!("nvrtc-{PINNED_NVRTC_VERSION}"))
        .join("nvidia")
        .join("cu13")
        .join("lib")
}

/// Finds the NVRTC library of this process's environment by the search order of the module
/// docs. Only looks at files; [`load`] opens it.
pub fn locate() -> Result<NvrtcLibrary, NvrtcError> {
    locate_in(&SearchEnv::from_process())
}

/// [`locate`] on given search inputs.
pub fn locate_in(env: &SearchEnv) -> Result<NvrtcLibrary, NvrtcError> {
    let mut searched = Vec::new();

    match &env.fathom_nvrtc {
        Some(given) => {
            if given.is_file() {
                return Ok(found(given, Source::FathomNvrtc));
            }
            if given.is_dir() {
                if let Some(path) = find_in_dir(given) {
                    return Ok(found(&path, Source::FathomNvrtc));
                }
            }
            return Err(NvrtcError::BadFathomNvrtc {
                path: given.clone(),
            });
        }
        None => searched.push("FATHOM_NVRTC: not set".to_string()),
    }

    let mut rules: Vec<(Source, PathBuf)> = Vec::new();
    match &env.cuda_path {
        Some(cuda) => {
            rules.push((Source::CudaPath, cuda.join("lib64")));
            rules.push((Source::CudaPath, cuda.join("lib")));
        }
        None => searched.push("CUDA_PATH: not set".to_string()),
    }
    if env.ld_library_path.is_empty() {
        searched.push("LD_LIBRARY_PATH: not set".to_string());
    }
    rules.extend(
        env.ld_library_path
            .iter()
            .map(|d| (Source::LdLibraryPath, d.clone())),
    );
    rules.extend(
        env.toolkit_dirs
            .iter()
            .map(|d| (Source::Toolkit, d.clone())),
    );
    rules.push((Source::Cache, pinned_wheel_lib_dir(&env.cache_dir)));

    for (source, dir) in rules {
        if let Some(path) = find_in_dir(&dir) {
            return Ok(found(&path, source));
        }
        searched.push(format!("{source}: {}", dir.display()));
    }
    Err(NvrtcError::NotFound { searched })
}

/// Opens `path` as a shared library and checks that it exports NVRTC's entry points; the
/// library is closed again. [`load`] does the same before keeping a library.
pub fn check_library(path: &Path) -> Result<(), NvrtcError> {
    open(path).map(drop)
}

/// The library fathom loaded, and the handles that keep it loaded for the life of the process.
struct Loaded {
    library: NvrtcLibrary,
    _handle: libloading::Library,
    _builtins: Option<libloading::Library>,
}

static LOADED: OnceLock<Loaded> = OnceLock::new();
static LOADING: Mutex<()> = Mutex::new(());

/// Locates NVRTC, loads it by absolute path for the rest of the process, and checks that
/// cudarc's NVRTC calls reach that same library. Idempotent: after the first success it returns
/// the loaded library at once; after a failure the next call searches again.
pub fn load() -> Result<&'static NvrtcLibrary, NvrtcError> {
    if let Some(loaded) = LOADED.get() {
        return Ok(&loaded.library);
    }
    // One loader at a time, so that two threads do not race to open different files.
    let _guard = LOADING.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(loaded) = LOADED.get() {
        return Ok(&loaded.library);
    }
    let library = locate()?;
    let handle = open(&library.path)?;
    let builtins = preload_builtins(&handle, &library.path)?;

    // SAFETY: is_culib_present only tries to open libraries by name; with ours loaded one of
    // its names resolves to it by soname.
    if !unsafe { sys::is_culib_present() } {
        return Err(NvrtcError::NotVisible { path: library.path });
    }
    let theirs = cudarc_version_address();
    let ours = symbol_address(&handle, "nvrtcVersion");
    if theirs.is_none() || theirs != ours {
        return Err(NvrtcError::Conflict { path: library.path });
    }

    let _ = LOADED.set(Loaded {
        library,
        _handle: handle,
        _builtins: builtins,
    });
    match LOADED.get() {
        Some(loaded) => Ok(&loaded.library),
        None => unreachable!("LOADED was set under the lock"),
    }
}

/// Loads the `libnvrtc-builtins.so.<major>.<minor>` that sits beside the library, if any.
///
/// NVRTC opens its builtins by bare name when it first compiles; outside the loader's search
/// path (the pip wheel, a toolkit not in `ld.so.conf`) that fails with
/// `NVRTC_ERROR_BUILTIN_OPERATION_FAILURE`. Loaded by absolute path first, the builtins are found
/// by their soname, like NVRTC itself. Without a copy beside the library the loader's own search
/// is left to find one.
fn preload_builtins(
    nvrtc: &libloading::Library,
    path: &Path,
) -> Result<Option<libloading::Library>, NvrtcError> {
    type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> sys::nvrtcResult;
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: `open` checked the symbol exists; nvrtcVersion has this C signature and only
    // writes the two integers.
    unsafe {
        let f = nvrtc
            .get::<VersionFn>(b"nvrtcVersion")
            .map_err(|e| NvrtcError::Load {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        f(&mut major, &mut minor)
            .result()
            .map_err(|e| api("nvrtcVersion", e))?;
    }
    let name = format!("libnvrtc-builtins.so.{major}.{minor}");
    // Beside the path as found, and beside the file it resolves to (a toolkit's symlinks).
    let dirs = [
        path.parent().map(Path::to_path_buf),
        std::fs::canonicalize(path)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf)),
    ];
    let Some(builtins) = dirs
        .into_iter()
        .flatten()
        .map(|d| d.join(&name))
        .find(|p| p.is_file())
    else {
        return Ok(None);
    };
    // SAFETY: as in `open`: loading runs only the library's initialisers.
    unsafe { libloading::Library::new(&builtins) }
        .map(Some)
        .map_err(|e| NvrtcError::Load {
            path: builtins,
            message: e.to_string(),
        })
}

/// NVRTC's `(major, minor)` version, e.g. `(13, 0)` for the pinned wheel.
pub fn version() -> Result<(i32, i32), NvrtcError> {
    load()?;
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: load() verified that cudarc's NVRTC is loaded; both pointers are valid.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| api("nvrtcVersion", e))?;
    Ok((major, minor))
}

/// Compiles CUDA C `source` to PTX for `arch` (e.g. `"sm_90"`). `file_name` is the name NVRTC
/// reports in its log (`file_name(line): error: ...`). `--gpu-architecture=<arch>` is always
/// passed first, then `options`. The same source, arch, options and NVRTC give the same PTX.
pub fn compile(
    source: &str,
    file_name: &str,
    arch: &str,
    options: &[String],
) -> Result<Compiled, NvrtcError> {
    compile_with(source, file_name, arch, options, false).map(|(compiled, _)| compiled)
}

/// What [`compile_cubin`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledCubin {
    /// The CUBIN (an ELF image of the GPU's own machine code), loadable as it is.
    pub cubin: Vec<u8>,
    /// NVRTC's log (warnings; usually empty on success).
    pub log: String,
}

/// Compiles CUDA C `source` as [`compile`] does, for a real architecture `arch` (`sm_XY`, not
/// `compute_XY`), and returns the machine code NVRTC made from its PTX: a module loaded from it
/// skips the driver's PTX compile at load time, which is most of the cost of loading a large
/// kernel set cold.
pub fn compile_cubin(
    source: &str,
    file_name: &str,
    arch: &str,
    options: &[String],
) -> Result<CompiledCubin, NvrtcError> {
    if !arch.starts_with("sm_") {
        return Err(NvrtcError::InvalidInput {
            what: "option",
            file_name: file_name.to_string(),
            reason: format!(
                "a CUBIN needs a real architecture (`sm_90`, not `{arch}`); ask for PTX instead"
            ),
        });
    }
    let (compiled, cubin) = compile_with(source, file_name, arch, options, true)?;
    Ok(CompiledCubin {
        cubin: cubin.unwrap_or_default(),
        log: compiled.log,
    })
}

fn compile_with(
    source: &str,
    file_name: &str,
    arch: &str,
    options: &[String],
    want_cubin: bool,
) -> Result<(Compiled, Option<Vec<u8>>), NvrtcError> {
    check_arch(arch)?;
    let invalid = |what, reason: &str| NvrtcError::InvalidInput {
        what,
        file_name: file_name.to_string(),
        reason: reason.to_string(),
    };
    for option in options {
        if option.contains('\0') {
            return Err(invalid("option", "an option contains a NUL byte"));
        }
        if option.starts_with("--gpu-architecture")
            || option.starts_with("-arch")
            || option.starts_with("--gpu-name")
        {
            return Err(invalid(
                "option",
                &format!("`{option}`: the architecture is given by the `arch` argument only"),
            ));
        }
    }
    let src = CString::new(source).map_err(|_| invalid("source", "it contains a NUL byte"))?;
    let name =
        CString::new(file_name).map_err(|_| invalid("file name", "it contains a NUL byte"))?;
    load()?;

    let mut all_options = Vec::with_capacity(options.len() + 1);
    all_options.push(format!("--gpu-architecture={arch}"));
    all_options.extend(options.iter().cloned());

    let program = Program(
        result::create_program(&src, Some(&name)).map_err(|e| api("nvrtcCreateProgram", e))?,
    );
    // SAFETY: the program was created above and is destroyed only when `program` drops; `src`
    // and `name`, which it may point into, outlive it (declared before it).
    let status = unsafe { result::compile_program(program.0, &all_options) };
    // SAFETY: as above.
    let log = unsafe { result::get_program_log(program.0) }
        .map(|raw| c_text(&raw))
        .map_err(|e| api("nvrtcGetProgramLog", e))?;
    if let Err(e) = status {
        return Err(NvrtcError::Compile {
            file_name: file_name.to_string(),
            arch: arch.to_string(),
            code: format!("{:?}", e.0),
            log,
        });
    }
    // SAFETY: as above; the program compiled.
    let ptx = unsafe { result::get_ptx(program.0) }.map_err(|e| api("nvrtcGetPTX", e))?;
    let cubin = if want_cubin {
        // SAFETY: as above; the program compiled for a real architecture (checked by the
        // caller), so NVRTC holds a CUBIN of the size it reports.
        Some(unsafe { get_cubin(program.0) }.map_err(|e| api("nvrtcGetCUBIN", e))?)
    } else {
        None
    };
    Ok((
        Compiled {
            ptx: c_text(&ptx),
            log,
        },
        cubin,
    ))
}

/// The CUBIN of a compiled program.
///
/// # Safety
/// `program` must be a live program that compiled for a real architecture.
unsafe fn get_cubin(program: sys::nvrtcProgram) -> Result<Vec<u8>, result::NvrtcError> {
    let mut size: usize = 0;
    // SAFETY: per this function's contract; `size` is a valid out-pointer.
    unsafe { sys::nvrtcGetCUBINSize(program, &mut size) }.result()?;
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` has the `size` bytes NVRTC just reported.
    unsafe { sys::nvrtcGetCUBIN(program, cubin.as_mut_ptr().cast()) }.result()?;
    Ok(cubin)
}

/// Owns an NVRTC program and destroys it on every exit path.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by create_program and is destroyed only here. A
        // failure to free cannot be reported from drop and leaks at worst.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

fn api(call: &'static str, e: result::NvrtcError) -> NvrtcError {
    NvrtcError::Api {
        call,
        code: format!("{:?}", e.0),
    }
}

/// NVRTC text (PTX, log) without its terminating NUL.
fn c_text(raw: &[c_char]) -> String {
    let bytes: Vec<u8> = raw.iter().map(|&c| c as u8).collect();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// `sm_XY` / `compute_XY` (two or three digits), optionally suffixed `a` or `f`.
fn check_arch(arch: &str) -> Result<(), NvrtcError> {
    let rest = arch
        .strip_prefix("sm_")
        .or_else(|| arch.strip_prefix("compute_"));
    let ok = rest.is_some_and(|rest| {
        let digits = rest.strip_suffix(['a', 'f']).unwrap_or(rest);
        (2..=3).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit())
    });
    if ok {
        Ok(())
    } else {
        Err(NvrtcError::InvalidArch {
            arch: arch.to_string(),
        })
    }
}

fn open(path: &Path) -> Result<libloading::Library, NvrtcError> {
    // SAFETY: loading runs the library's initialisers; NVRTC's have no preconditions. A path
    // with a slash is never searched for, so this opens exactly this file.
    let lib = unsafe { libloading::Library::new(path) }.map_err(|e| NvrtcError::Load {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    for symbol in REQUIRED_SYMBOLS {
        if symbol_address(&lib, symbol).is_none() {
            return Err(NvrtcError::NotNvrtc {
                path: path.to_path_buf(),
                missing: symbol,
            });
        }
    }
    Ok(lib)
}

/// The address of `symbol` in `lib`, to tell whether two handles are the same object.
fn symbol_address(lib: &libloading::Library, symbol: &str) -> Option<usize> {
    // SAFETY: the symbol is only read as an address, never called.
    unsafe { lib.get::<*const ()>(symbol.as_bytes()) }
        .ok()
        .map(|s| *s as usize)
}

/// The address of `nvrtcVersion` in the library cudarc opened.
fn cudarc_version_address() -> Option<usize> {
    // SAFETY: only called after `is_culib_present()` succeeded, so `culib()` finds a library
    // and does not panic; the symbol is only read as an address, never called. (cudarc's
    // libloading is another major version than ours, hence no shared helper.)
    unsafe { sys::culib().get::<*const ()>(b"nvrtcVersion".as_slice()) }
        .ok()
        .map(|s| *s as usize)
}

fn found(path: &Path, source: Source) -> NvrtcLibrary {
    NvrtcLibrary {
        // An absolute path keeps dlopen from searching for it by name.
        path: std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
        source,
    }
}

fn find_in_dir(dir: &Path) -> Option<PathBuf> {
    LIBRARY_NAMES
        .iter()
        .map(|name| dir.join(name))
        .find(|p| p.is_file())
}

fn non_empty_var(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// Rule 3's toolkit and pip directories (cheap: a few `read_dir`s).
fn toolkit_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/local/cuda/lib64")];
    let mut versioned = matching_children(Path::new("/usr/local"), "cuda-13");
    versioned.sort();
    versioned.reverse();
    dirs.extend(versioned.into_iter().map(|d| d.join("lib64")));
    dirs.push(PathBuf::from(format!(
        "/usr/lib/{}-linux-gnu",
        std::env::consts::ARCH
    )));
    dirs.push(PathBuf::from("/opt/cuda/lib64"));

    // pip locations are only listed where they exist, to keep the not-found report short.
    let wheel_lib = |site: PathBuf| site.join("nvidia").join("cu13").join("lib");
    let mut pip_dirs = Vec::new();
    let mut lib_dirs = Vec::new();
    if let Some(venv) = non_empty_var("VIRTUAL_ENV") {
        lib_dirs.push(PathBuf::from(venv).join("lib"));
    }
    if let Some(home) = non_empty_var("HOME") {
        lib_dirs.push(PathBuf::from(home).join(".local").join("lib"));
    }
    lib_dirs.push(PathBuf::from("/usr/local/lib"));
    for lib in lib_dirs {
        for python in matching_children(&lib, "python3") {
            for site in ["site-packages", "dist-packages"] {
                pip_dirs.push(wheel_lib(python.join(site)));
            }
        }
    }
    pip_dirs.push(wheel_lib(PathBuf::from("/usr/lib/python3/dist-packages")));
    dirs.extend(pip_dirs.into_iter().filter(|d| d.is_dir()));
    dirs
}

fn matching_children(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}
