//! [`KernelSource`]: where the step gets its compiled kernels. [`NvrtcKernels`] renders and
//! compiles each spec once per process run with `codegen::emit::build_kernel` (the production
//! options) for the device's own architecture; the JIT cache will implement the same trait.

use std::collections::HashMap;
use std::sync::Mutex;

use codegen::spec::KernelSpec;
use cudarc::driver::CudaFunction;

use crate::gpu::{Gpu, Module};

/// A failure to produce a kernel, as the source reports it.
pub type KernelSourceError = Box<dyn std::error::Error + Send + Sync>;

/// Compiled kernels by spec and entry point.
pub trait KernelSource {
    /// The function `entry` of the module of `spec`, loaded on `gpu`.
    fn function(
        &self,
        gpu: &Gpu,
        spec: &KernelSpec,
        entry: &str,
    ) -> Result<CudaFunction, KernelSourceError>;
}

/// Renders, compiles (NVRTC) and loads every spec on first use and keeps its module: the
/// kernel name carries every specialisation parameter, so it keys the cache.
#[derive(Default)]
pub struct NvrtcKernels {
    modules: Mutex<HashMap<String, Module>>,
}

impl NvrtcKernels {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }
}

impl KernelSource for NvrtcKernels {
    fn function(
        &self,
        gpu: &Gpu,
        spec: &KernelSpec,
        entry: &str,
    ) -> Result<CudaFunction, KernelSourceError> {
        let name = spec.kernel_name();
        let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        if !modules.contains_key(&name) {
            let built = codegen::emit::build_kernel(spec, &gpu.info().arch())?;
            modules.insert(name.clone(), gpu.load_ptx(&built.ptx)?);
        }
        Ok(modules[&name].function(entry)?)
    }
}
