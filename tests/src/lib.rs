//! Cross-crate integration tests of fathom: the generated kernels and the step against the f64
//! reference. The tests live in `tests/tests/`; this library holds what they share: the GPU test
//! kit (`gpu_test!`, `kit`), fresh random inputs, and the key store laid out on the device as
//! `templates/ABI.md` says.

pub mod cpu_cuda;
pub mod device_store;
pub mod inputs;
pub mod kernel_check;
pub mod kit;
pub mod kv_rows;
pub mod pariskv_kernels;
pub mod pariskv_select_cpu;
pub mod plan_check;
pub mod plan_cpu;
pub mod scan_check;
pub mod scan_cpu;
pub mod select_case;
pub mod select_cpu;
pub mod select_kernels;
pub mod select_scores;
pub mod shapes;
pub mod step_check;
pub mod step_setup;
pub mod store_check;
pub mod store_kernels;

use std::sync::OnceLock;

use codegen::KernelSpec;
use runtime::gpu::Gpu;
use runtime::jit::{JitCache, JitError};

/// Whether compute-sanitizer runs this process (`scripts/sanitize.sh` sets `FATHOM_SANITIZER=1`):
/// the device's free memory then counts the tool's own allocations, so a check of it would fail
/// for reasons outside fathom.
pub fn under_sanitizer() -> bool {
    std::env::var_os("FATHOM_SANITIZER").is_some_and(|v| v == "1")
}

/// The GPU the tests run on. A GPU test must fail, never pass, without one.
pub fn gpu() -> Gpu {
    match Gpu::open(0) {
        Ok(gpu) => gpu,
        Err(e) => panic!("this GPU test needs a CUDA GPU: {e}"),
    }
}

/// The PTX of `spec` for `gpu`'s architecture, through the runtime's JIT cache (its render,
/// compile options and content key: the one road to a module) in a temporary directory of this
/// test binary, so a spec checked on several inputs compiles once and no test reads PTX another
/// build left. The caller loads it on its own device handle ([`Gpu::load_ptx`]).
pub fn kernel_ptx(gpu: &Gpu, spec: &KernelSpec) -> Result<String, JitError> {
    static CACHE: OnceLock<(tempfile::TempDir, JitCache)> = OnceLock::new();
    let (_, cache) = CACHE.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("fathom-test-kernels-")
            .tempdir()
            .expect("a temporary kernel cache");
        let cache = JitCache::new(dir.path().to_path_buf());
        (dir, cache)
    });
    let nvrtc = codegen::nvrtc::version().map_err(JitError::Nvrtc)?;
    let (ptx, _) = cache.get_or_build(spec, &gpu.info().arch(), nvrtc)?;
    Ok(ptx)
}
