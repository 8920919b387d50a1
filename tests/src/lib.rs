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

use runtime::gpu::Gpu;

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
