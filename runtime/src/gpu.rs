//! A thin, checked layer over the CUDA driver: one device, one stream per handle, raw buffers.
//!
//! Kernels take plain device addresses (tables of segment pointers, run tables), so buffers here
//! are raw allocations that hand out their address, not cudarc's tracked slices. Every driver
//! call's status is checked and turned into a [`GpuError`] naming the call.
//!
//! A [`Gpu`] queues everything on its one stream; [`Gpu::with_new_stream`] gives a second handle
//! on the same context with a stream of its own, so that two stores and decoders can run
//! concurrently (memory of either handle is valid on both). Pinned host memory is counted per
//! context ([`Gpu::pinned_bytes`]) and may be capped ([`Gpu::limit_pinned`]).
//!
//! A foreign caller (PyTorch) brings its own stream and memory: [`Gpu::borrow_stream`] and
//! [`Gpu::on_stream`] queue on a stream someone else owns, in the device's primary context
//! (the one the CUDA runtime, and so PyTorch, uses), and [`Gpu::borrowed_buffer`] views memory
//! someone else allocated ([`borrowed`]). Launch error checks never query a stream that is being
//! captured, by us or by the caller ([`capture`]).

pub mod borrowed;
pub mod capture;

pub use borrowed::{Marker, PointerPlace, StreamHandle};
pub use capture::CaptureStatus;

use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use cudarc::driver::{
    result, sys, CudaContext, CudaFunction, CudaGraph, CudaModule, CudaStream, DriverError,
};
use thiserror::Error;

/// A failure of the GPU layer, naming what was being done.
#[derive(Debug, Error)]
pub enum GpuError {
    #[error(
        "no CUDA driver library (libcuda.so.1) can be loaded: this machine has no NVIDIA driver; \
         run on a machine with an NVIDIA GPU and its driver"
    )]
    NoDriver,
    #[error("no CUDA GPU with ordinal {ordinal}: the driver sees {count}")]
    NoDevice { ordinal: usize, count: i32 },
    #[error("out of {memory} memory: {what} needs {bytes} bytes")]
    OutOfMemory {
        memory: &'static str,
        what: String,
        bytes: usize,
    },
    #[error("{call} failed: {source}")]
    Driver {
        call: &'static str,
        #[source]
        source: DriverError,
    },
    #[error(transparent)]
    Nvrtc(#[from] codegen::nvrtc::NvrtcError),
    #[error("the stream capture recorded no work, so there is no graph to launch")]
    EmptyGraph,
    #[error(
        "{what} is not allowed while the stream is being captured into a CUDA graph (it would \
         end the capture); run the same call once before capturing, so that everything it \
         allocates, uploads or compiles exists already"
    )]
    Capturing { what: &'static str },
    #[error("{var}={got:?} is not a setting: expected {allowed}")]
    Setting {
        var: &'static str,
        got: String,
        allowed: &'static str,
    },
    #[error(
        "stream {stream:#x} belongs to another CUDA context than device {ordinal}'s primary \
         context; pass a stream of that device's primary context (PyTorch's streams are)"
    )]
    ForeignContext { stream: u64, ordinal: usize },
}

fn check<T>(call: &'static str, r: Result<T, DriverError>) -> Result<T, GpuError> {
    r.map_err(|source| GpuError::Driver { call, source })
}

/// The environment variable that sets programmatic dependent launch
/// ([`Gpu::set_programmatic_launch`]) for every handle opened after it is set ([`Pdl`]).
pub const PDL_VAR: &str = "FATHOM_PDL";

/// How kernels are launched one after another (`FATHOM_PDL`). On by default: with each
/// kernel's trigger at its blocks' exit, the HBM step at 32k took 2.4-2.8% less time than with
/// plain launches, and 1M the same (H100, 2026-12-06, `bench/results/pdl-exit-h100-*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pdl {
    /// `0`: plain launches, each kernel scheduled once the one before it has finished.
    Off,
    /// `1` or `early`: programmatic launches, and every kernel lets the next be scheduled right
    /// after its own wait (compiled with [`PDL_EARLY_DEFINE`]); 2-3% slower than `Off` on the
    /// H200 (2026-12-02): the next kernel's blocks sit resident beside the running one.
    Early,
    /// `exit`, or unset or empty (the default): programmatic launches, the next kernel
    /// scheduled as this one's blocks exit.
    AtExit,
}

impl Pdl {
    /// Whether kernels are launched with programmatic stream serialization.
    pub fn launches(self) -> bool {
        self != Pdl::Off
    }
}

/// The define that compiles every kernel to let the next one be scheduled right after its own
/// wait (`templates/common.cuh.tera`, `await_previous_kernel`): with [`Pdl::Early`].
pub const PDL_EARLY_DEFINE: &str = "-DFATHOM_PDL_TRIGGER_EARLY";

/// What `FATHOM_PDL` says ([`parse_programmatic`]); [`Pdl::AtExit`] when it is unset.
pub fn programmatic_from_env() -> Result<Pdl, GpuError> {
    match std::env::var(PDL_VAR) {
        Ok(text) => parse_programmatic(&text),
        Err(std::env::VarError::NotPresent) => Ok(Pdl::AtExit),
        Err(std::env::VarError::NotUnicode(raw)) => parse_programmatic(&raw.to_string_lossy()),
    }
}

/// A `FATHOM_PDL` value: `exit` or empty [`Pdl::AtExit`], `1` or `early` [`Pdl::Early`], `0`
/// [`Pdl::Off`]; anything else an error that says what is allowed.
pub fn parse_programmatic(text: &str) -> Result<Pdl, GpuError> {
    match text.trim() {
        "" | "exit" => Ok(Pdl::AtExit),
        "1" | "early" => Ok(Pdl::Early),
        "0" => Ok(Pdl::Off),
        other => Err(GpuError::Setting {
            var: PDL_VAR,
            got: other.to_string(),
            allowed: "exit (the default: launch with programmatic stream serialization, each \
                      kernel letting the next be scheduled as its blocks exit), 1 or early (the \
                      same, the next scheduled right after each kernel's wait) or 0 (plain \
                      launches)",
        }),
    }
}

fn is_oom(e: &DriverError) -> bool {
    e.0 == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY
}

/// A failed allocation: out of memory names the memory and what was asked for; anything else
/// is the driver call's own error.
pub(crate) fn allocation_error(
    e: DriverError,
    call: &'static str,
    memory: &'static str,
    what: impl FnOnce() -> String,
    bytes: usize,
) -> GpuError {
    if is_oom(&e) {
        GpuError::OutOfMemory {
            memory,
            what: what(),
            bytes,
        }
    } else {
        GpuError::Driver { call, source: e }
    }
}

/// What the device is, for records and error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: i32,
    pub total_memory: usize,
    /// The driver's CUDA version, e.g. 13000 for 13.0.
    pub driver_version: i32,
    /// The host NUMA node nearest the device (`CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID`; `None` where
    /// the driver names none), where its pinned host memory is preferred ([`crate::numa`]).
    pub host_numa_node: Option<i32>,
}

impl DeviceInfo {
    /// The NVRTC target of this device, `sm_XY`.
    pub fn arch(&self) -> String {
        format!(
            "sm_{}{}",
            self.compute_capability.0, self.compute_capability.1
        )
    }

    /// The compute capability as records write it, `X.Y`.
    pub fn compute_capability_text(&self) -> String {
        format!(
            "{}.{}",
            self.compute_capability.0, self.compute_capability.1
        )
    }

    /// The driver's CUDA version as records write it, `major.minor` (13000 is `13.0`).
    pub fn driver_cuda(&self) -> String {
        format!(
            "{}.{}",
            self.driver_version / 1000,
            self.driver_version % 1000 / 10
        )
    }
}

/// One CUDA device with its own stream.
///
/// Everything the store and the decoder queue runs on its stream, in order.
///
/// ```no_run
/// use runtime::gpu::{Gpu, GpuError};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let gpu = match Gpu::open(0) {
///     Ok(gpu) => gpu,
///     // Typed: a machine without a driver or a GPU says so.
///     Err(e @ (GpuError::NoDriver | GpuError::NoDevice { .. })) => {
///         eprintln!("{e}");
///         return Ok(());
///     }
///     Err(e) => return Err(e.into()),
/// };
/// println!("{} ({})", gpu.info().name, gpu.info().arch());
/// let buffer = gpu.upload(&[1.0f32, 2.0, 3.0])?;
/// assert_eq!(buffer.download()?, [1.0, 2.0, 3.0]);
/// # Ok(())
/// # }
/// ```
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    /// The stream is being captured into a graph: querying it would end the capture.
    capturing: AtomicBool,
    /// Kernels are launched with programmatic stream serialization ([`Gpu::set_programmatic_launch`]).
    programmatic: AtomicBool,
    /// Pinned host memory of this context, shared by every handle of it.
    pinned: Arc<PinnedLedger>,
}

/// Pinned (page-locked) host bytes held through one context's handles, and the cap on them.
///
/// Page-locked memory cannot be swapped, so a process that pins too much starves the host; a
/// serving stack caps it here, and tests use the cap to provoke running out of pinned memory
/// without taking the machine's RAM.
#[derive(Debug)]
struct PinnedLedger {
    in_use: AtomicUsize,
    /// `usize::MAX` when there is no cap.
    limit: AtomicUsize,
}

/// Pinned bytes held in a context's ledger by one allocation ([`Gpu::reserve_pinned`]).
#[derive(Debug)]
pub struct PinnedReservation {
    ledger: Arc<PinnedLedger>,
    bytes: usize,
}

impl PinnedReservation {
    /// The bytes reserved.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for PinnedReservation {
    fn drop(&mut self) {
        self.ledger.release(self.bytes);
    }
}

impl PinnedLedger {
    /// Takes `bytes` from the cap; the limit in effect when refused.
    fn reserve(&self, bytes: usize) -> Result<(), usize> {
        let limit = self.limit.load(Ordering::Relaxed);
        let mut now = self.in_use.load(Ordering::Relaxed);
        loop {
            let after = now
                .checked_add(bytes)
                .filter(|&a| a <= limit)
                .ok_or(limit)?;
            match self.in_use.compare_exchange_weak(
                now,
                after,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(seen) => now = seen,
            }
        }
    }

    fn release(&self, bytes: usize) {
        self.in_use.fetch_sub(bytes, Ordering::Relaxed);
    }
}

impl Gpu {
    /// Opens device `ordinal`; a typed error when there is no driver or no such device.
    pub fn open(ordinal: usize) -> Result<Gpu, GpuError> {
        let (ctx, info) = Self::primary_context(ordinal)?;
        let stream = check("cuStreamCreate", ctx.new_stream())?;
        let gpu = Gpu::with_stream(ctx, stream, info);
        gpu.set_programmatic_launch(programmatic_from_env()?.launches());
        Ok(gpu)
    }

    /// The device's primary context (retained: cudarc's `CudaContext::new` calls
    /// `cuDevicePrimaryCtxRetain`, and its drop releases it) and what the device is.
    fn primary_context(ordinal: usize) -> Result<(Arc<CudaContext>, DeviceInfo), GpuError> {
        // cudarc panics when libcuda is missing: ask first.
        if !unsafe { sys::is_culib_present() } {
            return Err(GpuError::NoDriver);
        }
        check("cuInit", result::init())?;
        let count = check("cuDeviceGetCount", CudaContext::device_count())?;
        if ordinal as i64 >= count as i64 {
            return Err(GpuError::NoDevice { ordinal, count });
        }
        let ctx = check("cuDevicePrimaryCtxRetain", CudaContext::new(ordinal))?;
        // Buffers here are raw addresses, so cudarc's per-slice event tracking has nothing to do.
        unsafe { ctx.disable_event_tracking() };
        let mut driver_version = 0;
        check("cuDriverGetVersion", unsafe {
            sys::cuDriverGetVersion(&mut driver_version).result()
        })?;
        let info = DeviceInfo {
            name: check("cuDeviceGetName", ctx.name())?,
            compute_capability: check("cuDeviceGetAttribute", ctx.compute_capability())?,
            multiprocessors: check(
                "cuDeviceGetAttribute",
                ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            )?,
            total_memory: check("cuDeviceTotalMem", ctx.total_mem())?,
            driver_version,
            // Older drivers do not know the attribute: no node, as on a machine without NUMA.
            host_numa_node: ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID)
                .ok()
                .filter(|&n| n >= 0),
        };
        Ok((ctx, info))
    }

    fn with_stream(ctx: Arc<CudaContext>, stream: Arc<CudaStream>, info: DeviceInfo) -> Gpu {
        Gpu {
            ctx,
            stream,
            info,
            capturing: AtomicBool::new(false),
            programmatic: AtomicBool::new(false),
            pinned: Arc::new(PinnedLedger {
                in_use: AtomicUsize::new(0),
                limit: AtomicUsize::new(usize::MAX),
            }),
        }
    }

    /// A second handle on the same device and context with a new stream of its own: work
    /// queued through it runs concurrently with this handle's (buffers of either are valid on
    /// both; order work between the two streams yourself, e.g. by synchronising). The pinned
    /// memory count and cap are shared.
    pub fn with_new_stream(&self) -> Result<Gpu, GpuError> {
        check("cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        let stream = check("cuStreamCreate", self.ctx.new_stream())?;
        Ok(Gpu {
            ctx: self.ctx.clone(),
            stream,
            info: self.info.clone(),
            capturing: AtomicBool::new(false),
            programmatic: AtomicBool::new(self.programmatic_launch()),
            pinned: self.pinned.clone(),
        })
    }

    /// Launches this handle's kernels from now on with programmatic stream serialization
    /// (Hopper's programmatic dependent launch: a kernel may be scheduled while the one before
    /// it drains, and waits for it in `await_previous_kernel()`), where the device has it
    /// (compute capability 9.0 and later; elsewhere this keeps plain launches). On by default;
    /// `FATHOM_PDL=0` turns it off for handles opened after it is set. Launches captured into a
    /// graph keep the setting they were captured with. Every kernel launched through the
    /// handle while it is on must wait for its predecessor before touching memory, as every
    /// fathom kernel does (`await_previous_kernel()`, `griddepcontrol.wait`).
    pub fn set_programmatic_launch(&self, on: bool) {
        let able = self.info.compute_capability.0 >= 9;
        self.programmatic.store(on && able, Ordering::Relaxed);
    }

    /// Whether kernels are launched with programmatic stream serialization.
    pub fn programmatic_launch(&self) -> bool {
        self.programmatic.load(Ordering::Relaxed)
    }

    /// Pinned host bytes held now by [`MappedBuffer`]s of this context (every handle).
    pub fn pinned_bytes(&self) -> usize {
        self.pinned.in_use.load(Ordering::Relaxed)
    }

    /// Caps the pinned host memory of this context at `limit` bytes (`None`: no cap, the
    /// default). A [`Gpu::mapped`] allocation past the cap fails as the driver's would, with
    /// [`GpuError::OutOfMemory`] of `"pinned host"` memory; buffers already held are kept.
    pub fn limit_pinned(&self, limit: Option<usize>) {
        self.pinned
            .limit
            .store(limit.unwrap_or(usize::MAX), Ordering::Relaxed);
    }

    /// Takes `bytes` of pinned host memory from this context's ledger for an allocation made
    /// outside [`Gpu::mapped`] (the store's registered and VMM host memory,
    /// `runtime::store::host_memory`), refused past [`Gpu::limit_pinned`]'s cap as `mapped`
    /// refuses; the bytes are given back when the reservation is dropped.
    pub fn reserve_pinned(
        &self,
        bytes: usize,
        what: impl FnOnce() -> String,
    ) -> Result<PinnedReservation, GpuError> {
        self.pinned
            .reserve(bytes)
            .map_err(|limit| GpuError::OutOfMemory {
                memory: "pinned host",
                what: format!(
                    "{} (past the cap of {limit} pinned bytes, {} held)",
                    what(),
                    self.pinned_bytes()
                ),
                bytes,
            })?;
        Ok(PinnedReservation {
            ledger: self.pinned.clone(),
            bytes,
        })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// How many thread blocks of `function` (`threads` a block, `shared_bytes` of dynamic
    /// shared memory) the GPU holds at once: its occupancy times the multiprocessors.
    pub fn resident_blocks(
        &self,
        function: &CudaFunction,
        threads: u32,
        shared_bytes: usize,
    ) -> Result<usize, GpuError> {
        let per_multiprocessor = check(
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            function.occupancy_max_active_blocks_per_multiprocessor(threads, shared_bytes, None),
        )?;
        Ok(per_multiprocessor as usize * self.info.multiprocessors.max(0) as usize)
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Loads PTX text already compiled. The one road to PTX is the JIT ([`crate::jit::Jit`]:
    /// a template family's spec, rendered or embedded, compiled by NVRTC with the project's
    /// options and cached by content); this loads what it (or a test's copy of its cache) made.
    pub fn load_ptx(&self, ptx: &str) -> Result<Module, GpuError> {
        self.refuse_while_capturing("loading a module")?;
        let module = check(
            "cuModuleLoadData",
            self.ctx
                .load_module(cudarc::nvrtc::Ptx::from_src(ptx.to_string())),
        )?;
        Ok(Module { module })
    }

    /// Loads a CUBIN (machine code for this GPU's architecture) that the JIT made with NVRTC
    /// ([`crate::jit::ModuleImage::Cubin`]): no compile happens in the driver.
    pub fn load_cubin(&self, cubin: Vec<u8>) -> Result<Module, GpuError> {
        self.refuse_while_capturing("loading a module")?;
        let module = check(
            "cuModuleLoadData",
            self.ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin)),
        )?;
        Ok(Module { module })
    }

    /// A device buffer holding `data`, ready for any stream when this returns: the copy is
    /// queued on this handle's stream, which is then waited for (not the whole context: a
    /// borrowed stream's owner keeps its other streams running). Inside a decode step use
    /// [`Gpu::upload_async`], which does not wait.
    pub fn upload<T: Copy>(&self, data: &[T]) -> Result<DeviceBuffer<T>, GpuError> {
        let buffer = self.upload_async(data)?;
        if !data.is_empty() {
            self.synchronize()?;
        }
        Ok(buffer)
    }

    /// A device buffer of `len` elements, every byte set to `byte` (poison it before a kernel
    /// writes it, so that unwritten elements are visible), ready for any stream when this
    /// returns (see [`Gpu::upload`]; [`Gpu::zeroed_async`] does not wait).
    pub fn filled<T: Copy>(&self, len: usize, byte: u8) -> Result<DeviceBuffer<T>, GpuError> {
        let buffer = self.alloc::<T>(len)?;
        if len > 0 {
            check("cuMemsetD8Async", unsafe {
                result::memset_d8_async(buffer.ptr, byte, buffer.bytes(), self.stream.cu_stream())
            })?;
            self.synchronize()?;
        }
        Ok(buffer)
    }

    fn alloc<T: Copy>(&self, len: usize) -> Result<DeviceBuffer<T>, GpuError> {
        let bytes = len * std::mem::size_of::<T>();
        self.refuse_while_capturing("a device allocation")?;
        check("cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        // A zero-byte allocation is an error for the driver; keep one byte so every buffer has
        // a valid address.
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }.map_err(|e| {
            allocation_error(
                e,
                "cuMemAlloc",
                "device",
                || format!("a buffer of {len} {}", std::any::type_name::<T>()),
                bytes,
            )
        })?;
        Ok(DeviceBuffer {
            ptr,
            len,
            ctx: self.ctx.clone(),
            owned: true,
            _t: PhantomData,
        })
    }

    /// Page-locked host memory mapped into the device's address space (SPEC §7's host placement),
    /// every byte set to `byte`.
    pub fn mapped<T: Copy>(&self, len: usize, byte: u8) -> Result<MappedBuffer<T>, GpuError> {
        let bytes = (len * std::mem::size_of::<T>()).max(1);
        let what = || format!("a mapped buffer of {len} {}", std::any::type_name::<T>());
        if let Err(limit) = self.pinned.reserve(bytes) {
            return Err(GpuError::OutOfMemory {
                memory: "pinned host",
                what: format!(
                    "{} (past the cap of {limit} pinned bytes, {} held)",
                    what(),
                    self.pinned_bytes()
                ),
                bytes,
            });
        }
        let allocated = self.alloc_mapped::<T>(len, bytes, byte, what);
        if allocated.is_err() {
            self.pinned.release(bytes);
        }
        allocated
    }

    /// The driver's half of [`Gpu::mapped`], `bytes` already reserved in the pinned ledger.
    fn alloc_mapped<T: Copy>(
        &self,
        len: usize,
        bytes: usize,
        byte: u8,
        what: impl FnOnce() -> String,
    ) -> Result<MappedBuffer<T>, GpuError> {
        self.refuse_while_capturing("a pinned host allocation")?;
        check("cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        // Not write-combined: the host reads these buffers back too.
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // The driver pins the pages as it allocates them, on the node the thread prefers.
        let near = crate::numa::PreferredNode::near(self.info.host_numa_node);
        let host = unsafe { result::malloc_host(bytes, flags) }
            .map_err(|e| allocation_error(e, "cuMemHostAlloc", "pinned host", what, bytes))?;
        unsafe { std::ptr::write_bytes(host as *mut u8, byte, bytes) };
        drop(near);
        let mut device: sys::CUdeviceptr = 0;
        let mut mapped = MappedBuffer {
            host: host as *mut T,
            device: 0,
            len,
            bytes,
            ctx: self.ctx.clone(),
            pinned: self.pinned.clone(),
        };
        // From here `mapped` frees the allocation (and releases the ledger) if anything fails.
        check("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0).result()
        })?;
        mapped.device = device;
        Ok(mapped)
    }

    /// Launches `function` on this device's stream.
    pub fn launch(
        &self,
        function: &CudaFunction,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &[Arg],
    ) -> Result<(), GpuError> {
        let mut values: Vec<Arg> = args.to_vec();
        let mut pointers: Vec<*mut c_void> = values.iter_mut().map(Arg::as_kernel_param).collect();
        check("cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        if shared_bytes > 48 * 1024 {
            check("cuFuncSetAttribute", unsafe {
                result::function::set_function_attribute(
                    function.cu_function(),
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared_bytes as i32,
                )
            })?;
        }
        if self.programmatic_launch() {
            // Every fathom kernel begins with `await_previous_kernel()` (common.cuh.tera), which
            // is what makes the attribute safe.
            let mut attribute: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            attribute.id =
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attribute.value.programmaticStreamSerializationAllowed = 1;
            let config = sys::CUlaunchConfig {
                gridDimX: grid.0,
                gridDimY: grid.1,
                gridDimZ: grid.2,
                blockDimX: block.0,
                blockDimY: block.1,
                blockDimZ: block.2,
                sharedMemBytes: shared_bytes,
                hStream: self.stream.cu_stream(),
                attrs: &mut attribute,
                numAttrs: 1,
            };
            check("cuLaunchKernelEx", unsafe {
                sys::cuLaunchKernelEx(
                    &config,
                    function.cu_function(),
                    pointers.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
                .result()
            })?;
        } else {
            check("cuLaunchKernel", unsafe {
                result::launch_kernel(
                    function.cu_function(),
                    grid,
                    block,
                    shared_bytes,
                    self.stream.cu_stream(),
                    &mut pointers,
                )
            })?;
        }
        // Launch errors surface asynchronously; a cheap query catches configuration errors now,
        // but not while the stream is captured, by us or by its owner: a query of a capturing
        // stream invalidates the capture.
        let own = self.capturing.load(Ordering::Relaxed);
        capture::check_after_launch(&capture::RawStream(self.stream.cu_stream()), own)
            .map_err(|(call, source)| GpuError::Driver { call, source })
    }

    /// Starts capturing the stream's work into a graph (thread-local mode: other threads may
    /// keep using the driver). Until [`Gpu::end_capture`], work queued on the stream is recorded,
    /// not run.
    pub fn begin_capture(&self) -> Result<(), GpuError> {
        check(
            "cuStreamBeginCapture",
            self.stream
                .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
        )?;
        self.capturing.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Ends the capture begun by [`Gpu::begin_capture`] and instantiates the graph. Call it
    /// also after a failed recording: the stream is usable again afterwards either way.
    pub fn end_capture(&self) -> Result<Graph, GpuError> {
        self.capturing.store(false, Ordering::Relaxed);
        let graph = check(
            "cuStreamEndCapture",
            self.stream.end_capture(sys::CUgraphInstantiate_flags(0)),
        )?;
        graph
            .map(|graph| Graph { graph })
            .ok_or(GpuError::EmptyGraph)
    }

    /// Queues a copy of `bytes` bytes between two device-visible addresses (device memory or
    /// mapped host memory, told apart by unified addressing).
    ///
    /// # Safety
    /// Both ranges must be valid allocations of at least `bytes` bytes until the copy has run.
    pub unsafe fn copy_raw(&self, dst: u64, src: u64, bytes: usize) -> Result<(), GpuError> {
        if bytes == 0 {
            return Ok(());
        }
        check("cuMemcpyAsync", unsafe {
            sys::cuMemcpyAsync(dst, src, bytes, self.stream.cu_stream()).result()
        })
    }

    /// Queues a copy of host `data` into the start of `dst`, ordered with the stream's other
    /// work (so a kernel still reading `dst` is not overtaken).
    pub fn write<T: Copy>(&self, dst: &DeviceBuffer<T>, data: &[T]) -> Result<(), GpuError> {
        assert!(data.len() <= dst.len(), "write past the end of a buffer");
        if data.is_empty() {
            return Ok(());
        }
        check("cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        check("cuMemcpyHtoDAsync", unsafe {
            result::memcpy_htod_async(dst.ptr, data, self.stream.cu_stream())
        })
    }

    /// Waits for all work on the stream; kernel faults surface here.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.refuse_while_capturing("waiting for the stream")?;
        check("cuStreamSynchronize", self.stream.synchronize())
    }

    /// Device time of `work` in milliseconds, measured with events on the stream.
    pub fn time_ms(&self, work: impl FnOnce() -> Result<(), GpuError>) -> Result<f32, GpuError> {
        let timed = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = check("cuEventCreate", self.ctx.new_event(timed))?;
        let end = check("cuEventCreate", self.ctx.new_event(timed))?;
        check("cuEventRecord", start.record(&self.stream))?;
        work()?;
        check("cuEventRecord", end.record(&self.stream))?;
        check("cuEventSynchronize", end.synchronize())?;
        check("cuEventElapsedTime", start.elapsed_ms(&end))
    }

    /// Queues a copy of a mapped (pinned) host buffer into a device buffer of the same length.
    pub fn copy_from_host<T>(
        &self,
        src: &MappedBuffer<T>,
        dst: &DeviceBuffer<T>,
    ) -> Result<(), GpuError> {
        assert_eq!(
            src.len(),
            dst.len(),
            "copy between buffers of different lengths"
        );
        check("cuMemcpyHtoDAsync", unsafe {
            result::memcpy_htod_async(dst.ptr, src.as_slice(), self.stream.cu_stream())
        })
    }

    /// Queues a device-to-device copy of `src` into `dst` (same length).
    pub fn copy_device<T>(
        &self,
        src: &DeviceBuffer<T>,
        dst: &DeviceBuffer<T>,
    ) -> Result<(), GpuError> {
        assert_eq!(
            src.len(),
            dst.len(),
            "copy between buffers of different lengths"
        );
        check("cuMemcpyDtoDAsync", unsafe {
            result::memcpy_dtod_async(dst.ptr, src.ptr, src.bytes(), self.stream.cu_stream())
        })
    }

    /// Queues setting every byte of `dst` to `byte`.
    pub fn fill<T>(&self, dst: &DeviceBuffer<T>, byte: u8) -> Result<(), GpuError> {
        check("cuMemsetD8Async", unsafe {
            result::memset_d8_async(dst.ptr, byte, dst.bytes(), self.stream.cu_stream())
        })
    }

    /// Free and total device memory, in bytes.
    pub fn memory(&self) -> Result<(usize, usize), GpuError> {
        check("cuMemGetInfo", self.ctx.mem_get_info())
    }
}

/// An instantiated CUDA graph of work captured on a [`Gpu`]'s stream.
pub struct Graph {
    graph: CudaGraph,
}

impl Graph {
    /// Queues one replay of the graph on the stream it was captured on.
    pub fn launch(&self) -> Result<(), GpuError> {
        check("cuGraphLaunch", self.graph.launch())
    }
}

/// A loaded module.
pub struct Module {
    module: Arc<CudaModule>,
}

impl Module {
    pub fn function(&self, name: &str) -> Result<CudaFunction, GpuError> {
        check("cuModuleGetFunction", self.module.load_function(name))
    }
}

/// A kernel argument, by value.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// A device address (pointer parameter).
    Ptr(u64),
    I32(i32),
    U32(u32),
    U64(u64),
    F32(f32),
}

impl Arg {
    fn as_kernel_param(&mut self) -> *mut c_void {
        match self {
            Arg::Ptr(v) | Arg::U64(v) => v as *mut u64 as *mut c_void,
            Arg::I32(v) => v as *mut i32 as *mut c_void,
            Arg::U32(v) => v as *mut u32 as *mut c_void,
            Arg::F32(v) => v as *mut f32 as *mut c_void,
        }
    }
}

/// Device memory of `len` elements of `T`.
pub struct DeviceBuffer<T> {
    ptr: sys::CUdeviceptr,
    len: usize,
    ctx: Arc<CudaContext>,
    /// Whether dropping it frees the memory: not for a view of borrowed memory
    /// ([`Gpu::borrowed_buffer`]).
    owned: bool,
    _t: PhantomData<T>,
}

impl<T: Copy + Default> DeviceBuffer<T> {
    /// Copies the buffer back to the host (synchronous).
    pub fn download(&self) -> Result<Vec<T>, GpuError> {
        let mut out = vec![T::default(); self.len];
        if self.len > 0 {
            check("cuCtxSetCurrent", self.ctx.bind_to_thread())?;
            // Kernels that write the buffer may still run on any stream.
            check("cuCtxSynchronize", self.ctx.synchronize())?;
            check("cuMemcpyDtoH", unsafe {
                result::memcpy_dtoh_sync(&mut out, self.ptr)
            })?;
        }
        Ok(out)
    }
}

impl<T> DeviceBuffer<T> {
    /// The device address, for kernel parameters and pointer tables.
    pub fn addr(&self) -> u64 {
        self.ptr
    }

    pub fn arg(&self) -> Arg {
        Arg::Ptr(self.ptr)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if self.owned && self.ctx.bind_to_thread().is_ok() {
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// Page-locked, device-mapped host memory of `len` elements of `T`.
pub struct MappedBuffer<T> {
    host: *mut T,
    device: sys::CUdeviceptr,
    len: usize,
    /// Bytes allocated (at least one), as counted in the ledger.
    bytes: usize,
    ctx: Arc<CudaContext>,
    pinned: Arc<PinnedLedger>,
}

impl<T> MappedBuffer<T> {
    /// The address kernels read it through.
    pub fn addr(&self) -> u64 {
        self.device
    }

    pub fn arg(&self) -> Arg {
        Arg::Ptr(self.device)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The host's view; read it only after the stream is synchronised.
    pub fn as_slice(&self) -> &[T] {
        unsafe { std::slice::from_raw_parts(self.host, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        unsafe { std::slice::from_raw_parts_mut(self.host, self.len) }
    }
}

// SAFETY: the buffer owns its page-locked allocation alone, as a `Box<[T]>` owns its memory;
// the raw pointer is what makes the auto traits conservative, not shared state.
unsafe impl<T: Send> Send for MappedBuffer<T> {}
unsafe impl<T: Sync> Sync for MappedBuffer<T> {}

impl<T> Drop for MappedBuffer<T> {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            let _ = unsafe { result::free_host(self.host as *mut c_void) };
        }
        self.pinned.release(self.bytes);
    }
}

#[cfg(test)]
mod tests;
