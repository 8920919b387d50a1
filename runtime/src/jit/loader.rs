//! [`Jit`]: kernels loaded on one GPU, each compiled or read from the cache on first use.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use codegen::nvrtc;
use codegen::spec::KernelSpec;
use cudarc::driver::CudaFunction;

use super::cache::{JitCache, Origin};
use super::entry::CorruptReason;
use super::error::JitError;
use super::image::{compile_cubin_hex, cubin_from_hex, cubin_key, ModuleImage};
use super::key::prepare_among;
use super::report::{KernelLoad, LoadReport};
use crate::gpu::{Gpu, Module};

/// One kernel's module on the GPU, with every entry point of its spec resolved.
pub struct LoadedKernel {
    /// The spec.
    pub spec: KernelSpec,
    /// The kernel's name.
    pub name: String,
    /// The loaded module (the functions keep it alive too).
    pub module: Module,
    /// Entry point name to function, for every entry point of the spec.
    pub functions: HashMap<String, CudaFunction>,
    /// The entry points in launch order.
    pub entry_points: Vec<String>,
    /// SHA-256 of the generated source, lower-case hex.
    pub source_sha256: String,
    /// The cache key (of the CUBIN when the module was loaded from one).
    pub key: String,
    /// What the module was loaded from.
    pub image: ModuleImage,
    /// Whether the PTX (or CUBIN) came from the disk cache or NVRTC.
    pub from: Origin,
    /// When a damaged cache entry was replaced: why it was rejected.
    pub rebuilt: Option<CorruptReason>,
    /// Milliseconds to have the PTX: rendering, hashing, then reading the cache or compiling.
    pub compile_ms: f64,
    /// Milliseconds to load the module and resolve its entry points.
    pub load_ms: f64,
}

impl LoadedKernel {
    /// The function of entry point `entry`; a typed error naming the kernel's entry points when
    /// it has no such one.
    pub fn function(&self, entry: &str) -> Result<&CudaFunction, JitError> {
        self.functions
            .get(entry)
            .ok_or_else(|| JitError::UnknownEntryPoint {
                kernel: self.name.clone(),
                entry: entry.to_string(),
                known: self.entry_points.clone(),
            })
    }
}

impl std::fmt::Debug for LoadedKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedKernel")
            .field("name", &self.name)
            .field("entry_points", &self.entry_points)
            .field("key", &self.key)
            .field("from", &self.from)
            .finish_non_exhaustive()
    }
}

/// A kernel's slot: filled once, by whichever caller gets its lock first.
type Slot = Arc<Mutex<Option<Arc<LoadedKernel>>>>;

/// Kernels of one GPU, compiled for its architecture by the loaded NVRTC through a [`JitCache`].
///
/// The runtime's [`super::KernelSource`]: [`crate::store::KeyStore::new`] and
/// [`crate::step::Decoder::new`] each make one on the default cache; share one between them
/// with their `with_kernels` constructors.
///
/// ```no_run
/// use std::sync::Arc;
/// use codegen::{model::preset, spec::Placement};
/// use runtime::gpu::Gpu;
/// use runtime::jit::Jit;
/// use runtime::step::{Decoder, DecoderConfig};
/// use runtime::store::{KeyStore, StoreConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let gpu = Arc::new(Gpu::open(0)?);
/// // Fails with JitError::Nvrtc (NvrtcError::NotFound lists where it looked) without NVRTC.
/// let jit = Arc::new(Jit::with_default_cache(gpu.clone())?);
/// let model = preset("qwen3-8b")?;
/// let config = StoreConfig::new(model.clone(), Placement::Hbm, 1 << 20);
/// let store = KeyStore::with_kernels(gpu.clone(), config, jit.as_ref())?;
/// let decoder = Decoder::with_kernels(gpu, model, DecoderConfig::default(), jit.clone())?;
/// println!("{:?} in {}", jit.cache().stats(), jit.cache().dir().display());
/// # Ok(())
/// # }
/// ```
pub struct Jit {
    gpu: Arc<Gpu>,
    cache: JitCache,
    arch: String,
    nvrtc_version: (i32, i32),
    /// Sources embedded at build time, searched in order before a spec is rendered.
    embedded: Vec<&'static [(&'static str, &'static str)]>,
    image: ModuleImage,
    loaded: Mutex<HashMap<KernelSpec, Slot>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves a map or slot that is still consistent: a slot is
    // only ever written whole.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

impl Jit {
    /// A JIT for `gpu` (its own compute capability) through `cache`, loading modules from the
    /// image `FATHOM_JIT_IMAGE` names (CUBIN unless it says `ptx`; [`ModuleImage`]). Fails when
    /// NVRTC cannot be found or loaded (its version is part of every key) or the variable has
    /// another value.
    pub fn new(gpu: Arc<Gpu>, cache: JitCache) -> Result<Jit, JitError> {
        let nvrtc_version = nvrtc::version().map_err(JitError::Nvrtc)?;
        Ok(Jit {
            arch: gpu.info().arch(),
            gpu,
            cache,
            nvrtc_version,
            embedded: vec![crate::embedded::SOURCES],
            image: ModuleImage::from_env()?,
            loaded: Mutex::new(HashMap::new()),
        })
    }

    /// The same JIT, loading the modules it has not loaded yet from `image`.
    pub fn with_image(mut self, image: ModuleImage) -> Jit {
        self.image = image;
        self
    }

    /// What this JIT loads modules from.
    pub fn image(&self) -> ModuleImage {
        self.image
    }

    /// The same JIT, also taking kernel sources from `sources` (a module of
    /// `fathom_macros::kernels!`'s `SOURCES`: a user's crate embeds its own model's kernels),
    /// searched before the runtime's own ([`crate::embedded`]); a spec in none is rendered.
    pub fn with_sources(mut self, sources: &'static [(&'static str, &'static str)]) -> Jit {
        self.embedded.insert(0, sources);
        self
    }

    /// A JIT for `gpu` through the cache in [`JitCache::default_dir`] (`$FATHOM_KERNEL_CACHE`,
    /// else `kernels/` in fathom's cache directory): what [`crate::store::KeyStore::new`] and
    /// [`crate::step::Decoder::new`] use.
    pub fn with_default_cache(gpu: Arc<Gpu>) -> Result<Jit, JitError> {
        Jit::new(gpu, JitCache::new(JitCache::default_dir()))
    }

    /// The GPU.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The disk cache (its directory and counters).
    pub fn cache(&self) -> &JitCache {
        &self.cache
    }

    /// The architecture kernels are compiled for, e.g. `sm_90`.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The loaded NVRTC's `(major, minor)`.
    pub fn nvrtc_version(&self) -> (i32, i32) {
        self.nvrtc_version
    }

    /// The kernel of `spec`, loaded: from memory after the first call, else from the disk cache
    /// or compiled. Concurrent calls for one spec load it once.
    pub fn kernel(&self, spec: &KernelSpec) -> Result<Arc<LoadedKernel>, JitError> {
        self.kernel_reused(spec).map(|(kernel, _)| kernel)
    }

    /// [`Jit::kernel`], and whether it was already in memory.
    fn kernel_reused(&self, spec: &KernelSpec) -> Result<(Arc<LoadedKernel>, bool), JitError> {
        let slot = lock(&self.loaded).entry(*spec).or_default().clone();
        let mut slot = lock(&slot);
        if let Some(kernel) = slot.as_ref() {
            return Ok((kernel.clone(), true));
        }
        let kernel = Arc::new(self.load(spec)?);
        *slot = Some(kernel.clone());
        Ok((kernel, false))
    }

    fn load(&self, spec: &KernelSpec) -> Result<LoadedKernel, JitError> {
        let start = Instant::now();
        let prepared = prepare_among(&self.embedded, spec, &self.arch, self.nvrtc_version)?;
        let (key, fetched) = match self.image {
            ModuleImage::Ptx => (prepared.key.clone(), self.cache.fetch(&prepared)?),
            ModuleImage::Cubin => {
                let key = cubin_key(&prepared.key);
                let fetched = self
                    .cache
                    .get_or_build_with(&key, &prepared.name, || compile_cubin_hex(&prepared))?;
                (key, fetched)
            }
        };
        let compile_ms = ms(start);

        let start = Instant::now();
        let name = prepared.name;
        let loaded = match self.image {
            ModuleImage::Ptx => self.gpu.load_ptx(&fetched.ptx),
            ModuleImage::Cubin => {
                let cubin = cubin_from_hex(&fetched.ptx).ok_or_else(|| JitError::CubinEntry {
                    kernel: name.clone(),
                    path: self.cache.entry_path(&key),
                })?;
                self.gpu.load_cubin(cubin)
            }
        };
        let module = loaded.map_err(|source| JitError::ModuleLoad {
            kernel: name.clone(),
            source: Box::new(source),
        })?;
        let entry_points = spec.entry_points();
        let mut functions = HashMap::with_capacity(entry_points.len());
        for entry in &entry_points {
            let function =
                module
                    .function(entry)
                    .map_err(|source| JitError::MissingEntryPoint {
                        kernel: name.clone(),
                        entry: entry.clone(),
                        source: Box::new(source),
                    })?;
            functions.insert(entry.clone(), function);
        }
        Ok(LoadedKernel {
            spec: *spec,
            name,
            module,
            functions,
            entry_points,
            source_sha256: prepared.source_sha256,
            key,
            image: self.image,
            from: fetched.origin,
            rebuilt: fetched.rebuilt,
            compile_ms,
            load_ms: ms(start),
        })
    }

    /// Loads every kernel of `specs` (a preset's set), compiling on as many threads as the
    /// machine has cores, and reports where each came from and what it cost. The first error,
    /// in the order of `specs`, is returned.
    pub fn load_set(&self, specs: &[KernelSpec]) -> Result<LoadReport, JitError> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.load_set_on(specs, cores)
    }

    /// [`Jit::load_set`] on at most `threads` threads (at least one): a caller that keeps
    /// working while the set loads in the background leaves itself a core.
    pub fn load_set_on(
        &self,
        specs: &[KernelSpec],
        threads: usize,
    ) -> Result<LoadReport, JitError> {
        let start = Instant::now();
        let threads = threads.clamp(1, specs.len().max(1));
        let next = AtomicUsize::new(0);
        let mut results: Vec<_> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut done = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(spec) = specs.get(i) else { break };
                            done.push((i, self.kernel_reused(spec)));
                        }
                        done
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        results.sort_by_key(|(i, _)| *i);
        let mut kernels = Vec::with_capacity(specs.len());
        for (_, result) in results {
            let (kernel, reused) = result?;
            kernels.push(KernelLoad::of(&kernel, reused));
        }
        Ok(LoadReport::new(kernels, threads, ms(start)))
    }
}
