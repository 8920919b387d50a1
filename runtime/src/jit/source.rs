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
