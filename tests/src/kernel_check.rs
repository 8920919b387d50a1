//! What every kernel test shares: poisoned outputs, the error of preparing or running a kernel,
//! compiling a spec and launching one of its entry points, buffers in either placement,
//! per-head tables, mismatch reports, and the tolerances the results are checked with.

use std::fmt;

use codegen::render::RenderError;
use codegen::spec::launch::{Launch, SizeError};
use codegen::spec::{Family, Placement};
use runtime::abi::SelectArgsError;
use runtime::gpu::{Arg, DeviceBuffer, Gpu, GpuError, MappedBuffer, Module};
use runtime::jit::JitError;
use runtime::launch::{DevicePtr, DevicePtrMut};

/// The byte every output is filled with before a kernel runs.
pub const POISON: u8 = 0xff;
/// An `i32` element that nobody wrote.
pub const POISON_I32: i32 = -1;
/// A 16-bit element (bf16, fp16) that nobody wrote.
pub const POISON_U16: u16 = 0xffff;
/// The bits of an `f32` element that nobody wrote (a NaN, which no kernel produces).
pub const POISON_F32_BITS: u32 = 0xffff_ffff;

/// Why a kernel could not be prepared or run.
#[derive(Debug)]
pub enum KernelError {
    /// The spec did not render.
    Render(RenderError),
    /// A run-time size the spec's launch cannot serve.
    Size(SizeError),
    /// The driver failed.
    Gpu(GpuError),
    /// The JIT could not compile or load the kernel.
    Jit(JitError),
    /// The buffers do not fit the select's argument list.
    SelectArgs(SelectArgsError),
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::Render(e) => write!(f, "{e}"),
            KernelError::Size(e) => write!(f, "{e}"),
            KernelError::Gpu(e) => write!(f, "{e}"),
            KernelError::Jit(e) => write!(f, "{e}"),
            KernelError::SelectArgs(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for KernelError {}

impl From<RenderError> for KernelError {
    fn from(e: RenderError) -> Self {
        KernelError::Render(e)
    }
}

impl From<SizeError> for KernelError {
    fn from(e: SizeError) -> Self {
        KernelError::Size(e)
    }
}

impl From<JitError> for KernelError {
    fn from(e: JitError) -> Self {
        KernelError::Jit(e)
    }
}

impl From<SelectArgsError> for KernelError {
    fn from(e: SelectArgsError) -> Self {
        KernelError::SelectArgs(e)
    }
}

impl From<GpuError> for KernelError {
    fn from(e: GpuError) -> Self {
        KernelError::Gpu(e)
    }
}

/// The module of `spec`, compiled for this device through the JIT's cache
/// ([`crate::kernel_ptx`]).
pub(crate) fn compile<F>(gpu: &Gpu, spec: &F) -> Result<Module, KernelError>
where
    F: Family + Copy + Into<codegen::KernelSpec>,
{
    let ptx = crate::kernel_ptx(gpu, &(*spec).into())?;
    Ok(gpu.load_ptx(&ptx)?)
}

/// Launches entry point `entry` of `module` with the geometry `launch`.
pub(crate) fn launch(
    gpu: &Gpu,
    module: &Module,
    entry: &str,
    launch: Launch,
    args: &[Arg],
) -> Result<(), GpuError> {
    let function = module.function(entry)?;
    let [gx, gy, gz] = launch.grid;
    let [bx, by, bz] = launch.block;
    gpu.launch(
        &function,
        (gx, gy, gz),
        (bx, by, bz),
        launch.shared_bytes,
        args,
    )
}

/// A run-time integer argument; the tests' sizes always fit an `int`.
pub(crate) fn i32_of(value: usize, what: &str) -> i32 {
    i32::try_from(value).unwrap_or_else(|_| panic!("{what} = {value} exceeds an int"))
}

/// The device address `addr` as a parameter the kernel reads (the tests pass HBM and mapped
/// host buffers alike, as addresses); its element type is the parameter's.
pub(crate) fn at<T>(addr: u64) -> DevicePtr<T> {
    DevicePtr::from_addr(addr)
}

/// The device address `addr` as a parameter the kernel writes.
pub(crate) fn out<T>(addr: u64) -> DevicePtrMut<T> {
    DevicePtrMut::from_addr(addr)
}

/// `launch` with its grid's x replaced: every row kernel is correct for any `x >= 1`, and
/// `x = 1` makes one block stride over the whole range.
pub fn with_grid_x(launch: Launch, x: u32) -> Launch {
    Launch {
        grid: [x, launch.grid[1], launch.grid[2]],
        ..launch
    }
}

/// A buffer in either placement of SPEC §7.
pub enum Placed<T> {
    /// Device memory.
    Device(DeviceBuffer<T>),
    /// Page-locked host memory mapped into the device's address space.
    Mapped(MappedBuffer<T>),
}

impl<T: Copy + Default> Placed<T> {
    /// A buffer holding `data` in `placement`.
    pub fn upload(gpu: &Gpu, placement: Placement, data: &[T]) -> Result<Self, GpuError> {
        Ok(match placement {
            Placement::Hbm => Placed::Device(gpu.upload(data)?),
            Placement::Host => {
                let mut mapped = gpu.mapped::<T>(data.len(), 0)?;
                mapped.as_mut_slice().copy_from_slice(data);
                Placed::Mapped(mapped)
            }
        })
    }

    /// A buffer of `len` elements in `placement`, every byte `byte`.
    pub fn filled(gpu: &Gpu, placement: Placement, len: usize, byte: u8) -> Result<Self, GpuError> {
        Ok(match placement {
            Placement::Hbm => Placed::Device(gpu.filled(len, byte)?),
            Placement::Host => Placed::Mapped(gpu.mapped(len, byte)?),
        })
    }

    /// The address a kernel reads it through.
    pub fn addr(&self) -> u64 {
        match self {
            Placed::Device(b) => b.addr(),
            Placed::Mapped(b) => b.addr(),
        }
    }

    /// Its contents; synchronise the stream first.
    pub fn read(&self) -> Result<Vec<T>, GpuError> {
        match self {
            Placed::Device(b) => b.download(),
            Placed::Mapped(b) => Ok(b.as_slice().to_vec()),
        }
    }
}

/// One buffer per KV head (`[b*H + h]`) in one placement and the device table of their
/// addresses, as the `k_rows`, `v_rows` and landmark `means` parameters take them.
pub struct HeadTable<T> {
    /// The per-head buffers, `[b*H + h]`.
    pub heads: Vec<Placed<T>>,
    /// Their addresses, in device memory.
    pub table: DeviceBuffer<u64>,
}

impl<T: Copy + Default> HeadTable<T> {
    /// One buffer per entry of `per_head`, holding it.
    pub fn upload(gpu: &Gpu, placement: Placement, per_head: &[Vec<T>]) -> Result<Self, GpuError> {
        let heads = per_head
            .iter()
            .map(|data| Placed::upload(gpu, placement, data))
            .collect::<Result<Vec<_>, _>>()?;
        Self::with(gpu, heads)
    }

    /// One buffer of `lens[i]` elements per head, every byte `byte`.
    pub fn filled(
        gpu: &Gpu,
        placement: Placement,
        lens: &[usize],
        byte: u8,
    ) -> Result<Self, GpuError> {
        let heads = lens
            .iter()
            .map(|&len| Placed::filled(gpu, placement, len, byte))
            .collect::<Result<Vec<_>, _>>()?;
        Self::with(gpu, heads)
    }

    fn with(gpu: &Gpu, heads: Vec<Placed<T>>) -> Result<Self, GpuError> {
        let addrs: Vec<u64> = heads.iter().map(Placed::addr).collect();
        let table = gpu.upload(&addrs)?;
        Ok(HeadTable { heads, table })
    }

    /// The address of the pointer table.
    pub fn addr(&self) -> u64 {
        self.table.addr()
    }

    /// A second pointer table whose every entry is this one's plus `elements` elements (the V
    /// rows of K/V-adjacent rows are the K rows' table plus `D`).
    pub fn shifted(&self, gpu: &Gpu, elements: usize) -> Result<DeviceBuffer<u64>, GpuError> {
        let bytes = (elements * std::mem::size_of::<T>()) as u64;
        let addrs: Vec<u64> = self.heads.iter().map(|h| h.addr() + bytes).collect();
        gpu.upload(&addrs)
    }

    /// The contents of head `head`'s buffer; synchronise the stream first.
    pub fn read(&self, head: usize) -> Result<Vec<T>, GpuError> {
        self.heads[head].read()
    }
}

/// Failures of one comparison, collected so that a failing test prints the first few with their
/// indices, how many there were, and the seed that replays them.
pub struct Mismatches {
    what: String,
    seed: u64,
    first: Vec<String>,
    count: usize,
    checked: usize,
}

/// Mismatches printed in a failure message.
const SHOWN: usize = 12;

impl Mismatches {
    /// A comparison named `what` of a test run with `seed`.
    pub fn new(what: impl Into<String>, seed: u64) -> Self {
        Mismatches {
            what: what.into(),
            seed,
            first: Vec::new(),
            count: 0,
            checked: 0,
        }
    }

    /// Records a failure (described by `detail`) unless `ok`.
    pub fn check(&mut self, ok: bool, detail: impl FnOnce() -> String) {
        self.checked += 1;
        if !ok {
            self.count += 1;
            if self.first.len() < SHOWN {
                self.first.push(detail());
            }
        }
    }

    /// Failures so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The failures, the first few listed, if there were any.
    pub fn report(&self) -> Option<String> {
        (self.count > 0).then(|| {
            format!(
                "{}: {} of {} checks failed (FATHOM_TEST_SEED={} replays it); first:\n  {}",
                self.what,
                self.count,
                self.checked,
                self.seed,
                self.first.join("\n  ")
            )
        })
    }

    /// Panics, listing the first failures, if there were any.
    pub fn finish(self) {
        if let Some(report) = self.report() {
            panic!("{report}");
        }
    }
}

/// `γ_n = n·u / (1 − n·u)` for unit roundoff `u`: any sum of `n` products computed in that
/// precision, in any order, with or without fused multiply-adds, is within
/// `γ_n · Σ|a_i·b_i|` of the exact value (Higham, *Accuracy and Stability*, §3.1).
fn gamma(n: usize, unit_roundoff: f64) -> f64 {
    let nu = n as f64 * unit_roundoff;
    nu / (1.0 - nu)
}

/// How far an fp32 dot product of `q` with `k` may lie from the f64 reference value: the
/// fp32 bound `γ_D · Σ|q_c·k_c|` with `u = 2⁻²⁴`, plus the f64 reference's own `γ_D` with
/// `u = 2⁻⁵³`, plus `D` times the smallest normal fp32 for products that underflow.
///
/// The inputs are exact in both: queries are fp32 values and keys bf16 (or fp16) values, so the
/// only error is the rounding of the accumulation. The kernels add 8 channels per lane with
/// `fmaf` and then `log2(D/8)` butterfly shuffles, so each product passes through at most
/// `8 + log2(D/8)` roundings, well inside `γ_D`; the bound is the order-independent one so that
/// a retuned reduction order keeps it.
pub fn dot_tolerance(q: &[f64], k: impl IntoIterator<Item = f64>) -> f64 {
    let d = q.len();
    let magnitude: f64 = q.iter().zip(k).map(|(a, b)| (a * b).abs()).sum();
    (gamma(d, f64::from(f32::EPSILON) / 2.0) + gamma(d, f64::EPSILON / 2.0)) * magnitude
        + d as f64 * f64::from(f32::MIN_POSITIVE)
}

pub use reference::attention::relative_error;
