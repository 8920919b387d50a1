//! Cross-crate integration tests of fathom: the generated kernels and the step against the f64
//! reference. The tests live in `tests/tests/`; this library holds what they share: opening the
//! GPU, fresh random inputs, and the key store laid out on the device as `templates/ABI.md` says.

pub mod device_store;
pub mod inputs;
pub mod kernel_check;
pub mod pariskv_kernels;
pub mod select_kernels;
pub mod step_check;
pub mod store_check;
pub mod store_kernels;

use std::sync::{Arc, OnceLock};

use runtime::gpu::Gpu;
use runtime::jit::{Jit, JitCache, JitError};

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

/// The JIT every kernel test compiles through (the runtime's one road to a module), into a
/// temporary cache of this test binary, so a spec checked on several inputs compiles once and
/// no test reads PTX another build left. It holds its own handle of device 0, whose primary
/// context every [`gpu`] shares, so its modules launch on any test's stream; `gpu` must be
/// device 0's handle (checked by its architecture).
pub fn kernels(gpu: &Gpu) -> Result<&'static Jit, JitError> {
    static JIT: OnceLock<(tempfile::TempDir, Jit)> = OnceLock::new();
    if let Some((_, jit)) = JIT.get() {
        assert_eq!(
            jit.arch(),
            gpu.info().arch(),
            "the tests' JIT is device 0's"
        );
        return Ok(jit);
    }
    let dir = tempfile::Builder::new()
        .prefix("fathom-test-kernels-")
        .tempdir()
        .expect("a temporary kernel cache");
    let jit = Jit::new(
        Arc::new(self::gpu()),
        JitCache::new(dir.path().to_path_buf()),
    )?;
    let (_, jit) = JIT.get_or_init(|| (dir, jit));
    assert_eq!(
        jit.arch(),
        gpu.info().arch(),
        "the tests' JIT is device 0's"
    );
    Ok(jit)
}
