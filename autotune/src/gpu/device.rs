//! What every bench of the GPU shares: the device, the kernel loader, the L2 flush, the
//! ceilings, and how a candidate's launches are run once and timed.

use codegen::spec::Placement;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codegen::spec::launch::Launch as Geometry;
use codegen::spec::KernelSpec;
use cudarc::driver::CudaFunction;
use runtime::ceilings::Ceilings;
use runtime::gpu::{Arg, DeviceBuffer, Gpu, GpuError, MappedBuffer};
use runtime::jit::Jit;

use crate::tuner::Reps;

/// Bytes overwritten between timed runs: several times any L2 cache.
pub const FLUSH_BYTES: usize = 256 << 20;

/// One kernel launch: function, grid, block, arguments.
pub type Launch = (CudaFunction, (u32, u32, u32), (u32, u32, u32), Vec<Arg>);

/// A driver error as a candidate's reason.
pub fn gpu_err(e: GpuError) -> String {
    e.to_string()
}

/// The device and what runs on it.
pub struct Device {
    pub gpu: Arc<Gpu>,
    /// Kernels compiled on all cores and cached on disk (a second run compiles nothing).
    pub jit: Arc<Jit>,
    pub ceilings: Ceilings,
    flush: DeviceBuffer<u8>,
    read_back: Mutex<ReadBack>,
}

/// The pinned host buffer verification reads scores back into ([`Device::read_back`]).
#[derive(Default)]
struct ReadBack {
    buffer: Option<MappedBuffer<f32>>,
    /// The first read of the run was compared with a plain download.
    checked: bool,
    /// Reads download plainly: the pinned road failed or differed.
    plain: bool,
}

impl Device {
    /// The ceiling a kernel reading `placement` is judged against: the HBM stream rate, or
    /// the rate of a kernel reading mapped host memory.
    pub fn read_ceiling(&self, placement: Placement) -> (String, f64) {
        match placement {
            Placement::Hbm => (
                runtime::ceilings::HBM_CEILING.to_string(),
                self.ceilings.hbm_stream_gbps(),
            ),
            Placement::Host => ("mapped read".to_string(), self.ceilings.mapped_read_gbps),
        }
    }

    /// The device of `gpu`, judging rates against `ceilings`, loading kernels through a
    /// [`Jit`] on the default kernel cache.
    pub fn new(gpu: Arc<Gpu>, ceilings: Ceilings) -> Result<Self, String> {
        Ok(Device {
            jit: Arc::new(Jit::with_default_cache(gpu.clone()).map_err(|e| e.to_string())?),
            flush: gpu.filled(FLUSH_BYTES, 0).map_err(gpu_err)?,
            gpu,
            ceilings,
            read_back: Mutex::new(ReadBack::default()),
        })
    }

    /// Entry point `entry` of the kernel of `spec`, compiled or loaded from the cache.
    pub fn entry(&self, spec: KernelSpec, entry: &str) -> Result<CudaFunction, String> {
        let kernel = self.jit.kernel(&spec).map_err(|e| e.to_string())?;
        let f = kernel.function(entry).map_err(|e| e.to_string())?;
        Ok(f.clone())
    }

    /// The kernel of `spec` whose entry point is its name.
    pub fn function(&self, spec: KernelSpec) -> Result<CudaFunction, String> {
        self.entry(spec, &spec.kernel_name())
    }

    /// Compiles every spec of `specs` on all cores. A spec that fails is reported when its
    /// candidate is verified, by its own error, so failures here are ignored.
    pub fn preload(&self, specs: &[KernelSpec]) {
        let _ = self.jit.load_set(specs);
    }

    /// Runs `check` on `src` copied to the host. A verification reads a few thousand tokens of
    /// a score buffer of up to 268 MB, once per candidate: the copy goes into a pinned buffer
    /// kept from one read to the next (one DMA, no allocation or first touch of a fresh `Vec`,
    /// which took ~90-250 ms a candidate at 1M). The run's first read is also downloaded
    /// plainly and compared bit for bit; if the pinned road fails or differs, every read
    /// downloads plainly from then on, and the log says so once.
    pub fn read_back<R>(
        &self,
        src: &DeviceBuffer<f32>,
        check: impl FnOnce(&[f32]) -> R,
    ) -> Result<R, String> {
        let mut rb = self.read_back.lock().unwrap_or_else(|e| e.into_inner());
        if !rb.plain {
            match self.pinned_copy(&mut rb, src) {
                Ok(()) if rb.checked => {
                    let host = rb.buffer.as_ref().expect("copied into it");
                    return Ok(check(&host.as_slice()[..src.len()]));
                }
                Ok(()) => {
                    rb.checked = true;
                    let plain = src.download().map_err(gpu_err)?;
                    let host = rb.buffer.as_ref().expect("copied into it");
                    let pinned = &host.as_slice()[..src.len()];
                    if pinned
                        .iter()
                        .map(|x| x.to_bits())
                        .eq(plain.iter().map(|x| x.to_bits()))
                    {
                        eprintln!(
                            "autotune: scores are read back through pinned memory (the first read \
                             matched a plain download bit for bit)"
                        );
                        return Ok(check(pinned));
                    }
                    eprintln!(
                        "autotune: scores read back through pinned memory differ from a plain \
                         download; downloading plainly from now on"
                    );
                    rb.plain = true;
                    return Ok(check(&plain));
                }
                Err(e) => {
                    eprintln!(
                        "autotune: reading scores back through pinned memory failed ({e}); \
                         downloading plainly from now on"
                    );
                    rb.plain = true;
                }
            }
        }
        let plain = src.download().map_err(gpu_err)?;
        Ok(check(&plain))
    }

    /// `src` into the pinned buffer (grown to fit), the stream waited for.
    fn pinned_copy(&self, rb: &mut ReadBack, src: &DeviceBuffer<f32>) -> Result<(), GpuError> {
        if rb.buffer.as_ref().is_none_or(|b| b.len() < src.len()) {
            rb.buffer = None;
            rb.buffer = Some(self.gpu.mapped::<f32>(src.len(), 0)?);
        }
        let host = rb.buffer.as_ref().expect("allocated above");
        // SAFETY: both ranges hold `src.bytes()` bytes: the pinned buffer at least `src.len()`
        // floats, and the copy is waited for before either is touched again.
        unsafe { self.gpu.copy_raw(host.addr(), src.addr(), src.bytes())? };
        self.gpu.synchronize()
    }

    /// Queues `launches` in order.
    pub fn run(&self, launches: &[Launch]) -> Result<(), GpuError> {
        for (f, grid, block, args) in launches {
            self.gpu.launch(f, *grid, *block, 0, args)?;
        }
        Ok(())
    }

    /// Runs `launches` once and waits for them: kernel faults surface here.
    pub fn run_once(&self, launches: &[Launch]) -> Result<(), String> {
        self.run(launches).map_err(gpu_err)?;
        self.gpu.synchronize().map_err(gpu_err)
    }

    /// Two warm-up runs of `launches`, then as many runs as `reps` asks, timed with CUDA
    /// events, each after the L2 cache is overwritten outside the timed window; milliseconds.
    pub fn time(&self, launches: &[Launch], reps: Reps) -> Result<Vec<f64>, String> {
        for _ in 0..2 {
            self.run(launches).map_err(gpu_err)?;
        }
        self.gpu.synchronize().map_err(gpu_err)?;
        reps.collect(|_| {
            self.gpu.fill(&self.flush, 0x5a).map_err(gpu_err)?;
            let ms = self.gpu.time_ms(|| self.run(launches)).map_err(gpu_err)?;
            Ok(f64::from(ms))
        })
    }

    /// Starts loading every spec of `specs`, in their order, on `threads` threads beside the
    /// caller, which keeps working: a kernel it asks for meanwhile is loaded once, by
    /// whichever asks first ([`Jit::kernel`]). The handle gives the wall time the whole set
    /// took; failures are reported when their candidates are verified, as with
    /// [`Device::preload`].
    pub fn preload_in_background(
        &self,
        specs: Vec<KernelSpec>,
        threads: usize,
    ) -> std::thread::JoinHandle<Duration> {
        let jit = self.jit.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            let _ = jit.load_set_on(&specs, threads);
            start.elapsed()
        })
    }
}

/// A launch of `function` with the geometry `codegen` computed; the kernels of this project
/// take no dynamic shared memory, which [`Device::run`] relies on.
pub fn launch(
    function: CudaFunction,
    geometry: Geometry,
    args: Vec<Arg>,
) -> Result<Launch, String> {
    if geometry.shared_bytes != 0 {
        return Err(format!(
            "the launch asks for {} bytes of dynamic shared memory; the bench passes none",
            geometry.shared_bytes
        ));
    }
    let [gx, gy, gz] = geometry.grid;
    let [bx, by, bz] = geometry.block;
    Ok((function, (gx, gy, gz), (bx, by, bz), args))
}

/// A run-time integer argument, refused when it does not fit an `int`.
pub fn int(value: usize, what: &str) -> Result<i32, String> {
    i32::try_from(value).map_err(|_| format!("{what} = {value} does not fit a kernel's int"))
}
