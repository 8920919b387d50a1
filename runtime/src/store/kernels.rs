//! Where the store gets its kernels: a [`KernelSource`] turns a spec and an entry point into a
//! loaded function. [`NvrtcKernels`] compiles through the production path
//! (`codegen::emit::build_kernel`) for the device's architecture and keeps each module loaded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use codegen::emit::build_kernel;
use codegen::spec::KernelSpec;
use cudarc::driver::CudaFunction;

use super::error::StoreError;
use crate::gpu::{Gpu, Module};

/// Loads the function `entry` of the kernel `spec`.
pub trait KernelSource {
    /// The loaded function; the same spec is compiled once.
    fn function(&self, spec: &KernelSpec, entry: &str) -> Result<CudaFunction, StoreError>;
}

/// Compiles with NVRTC on first use and memoizes the module per kernel name.
pub struct NvrtcKernels {
    gpu: Arc<Gpu>,
    modules: Mutex<HashMap<String, Module>>,
}

impl NvrtcKernels {
    /// Kernels for `gpu`'s architecture.
    pub fn new(gpu: Arc<Gpu>) -> Self {
        NvrtcKernels {
            gpu,
            modules: Mutex::new(HashMap::new()),
        }
    }
}

impl KernelSource for NvrtcKernels {
    fn function(&self, spec: &KernelSpec, entry: &str) -> Result<CudaFunction, StoreError> {
        let name = spec.kernel_name();
        let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        if !modules.contains_key(&name) {
            let built =
                build_kernel(spec, &self.gpu.info().arch()).map_err(|e| StoreError::Kernel {
                    name: name.clone(),
                    message: e.to_string(),
                })?;
            modules.insert(name.clone(), self.gpu.load_ptx(&built.ptx)?);
        }
        Ok(modules[&name].function(entry)?)
    }
}
