//! [`KernelSource`]: where the key store and the decoder get their compiled kernels. [`Jit`]
//! is the runtime's one source (NVRTC for the device's own architecture, through the disk
//! cache); tests inject their own, e.g. to count or fail loads.

use codegen::spec::KernelSpec;
use cudarc::driver::CudaFunction;

use super::error::JitError;
use super::loader::Jit;

/// Compiled kernels by spec and entry point, loaded on one GPU: the GPU of the store or decoder
/// that uses the source (a function of another device's context cannot be launched there).
pub trait KernelSource: Send + Sync {
    /// The function `entry` of the kernel of `spec`; the same spec is compiled and loaded once.
    fn function(&self, spec: &KernelSpec, entry: &str) -> Result<CudaFunction, JitError>;
}

impl KernelSource for Jit {
    fn function(&self, spec: &KernelSpec, entry: &str) -> Result<CudaFunction, JitError> {
        Ok(self.kernel(spec)?.function(entry)?.clone())
    }
}

#[cfg(test)]
mod tests {
    use codegen::nvrtc::NvrtcError;

    use super::JitError;
    use crate::step::StepError;
    use crate::store::StoreError;

    fn missing() -> JitError {
        JitError::Nvrtc(NvrtcError::NotFound {
            searched: vec!["$FATHOM_NVRTC: not set".into()],
        })
    }

    /// The store and the step pass a missing NVRTC on as itself: matchable, with NVRTC's own
    /// message (where it looked and how to fix it).
    #[test]
    fn a_missing_nvrtc_stays_typed_through_the_store_and_the_step() {
        let store = StoreError::from(missing());
        assert!(matches!(
            &store,
            StoreError::Jit(JitError::Nvrtc(NvrtcError::NotFound { .. }))
        ));
        let step = StepError::from(missing());
        assert!(matches!(
            &step,
            StepError::Jit(JitError::Nvrtc(NvrtcError::NotFound { .. }))
        ));
        for message in [store.to_string(), step.to_string()] {
            assert!(message.contains("was not found"), "{message}");
            assert!(message.contains("$FATHOM_NVRTC: not set"), "{message}");
        }
    }
}
