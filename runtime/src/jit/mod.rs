//! Kernels compiled by NVRTC for the device's own architecture on first use, cached on disk.
//!
//! A kernel's PTX is a function of its generated source, the NVRTC version, the architecture and
//! the compile options, so [`cache_key`] hashes exactly those; [`JitCache`] keeps one verified
//! file per key (see [`entry`] for the format) and is safe for concurrent threads and
//! processes; [`Jit`] loads the PTX into modules on one [`crate::gpu::Gpu`] and keeps them in
//! memory, so a second request for a kernel is free. Everything but module loading works without
//! a GPU ([`JitCache::get_or_build`]).
//!
//! [`KernelSource`] is how the key store and the decoder ask for kernels; [`Jit`] implements it
//! and is what both use unless they are given another source.

mod cache;
pub mod entry;
mod error;
mod image;
mod key;
mod loader;
mod report;
mod source;

pub use cache::{compile, CacheStats, Fetched, JitCache, Lookup, Origin, KERNEL_CACHE_VAR};
/// The function handle of [`LoadedKernel::functions`], to launch with [`crate::gpu::Gpu::launch`].
pub use cudarc::driver::CudaFunction;
pub use entry::{CacheEntry, CorruptReason};
pub use error::JitError;
pub use image::{cubin_key, ModuleImage, JIT_IMAGE_VAR};
pub use key::{cache_key, compile_options, prepare, prepare_among, Prepared, FORMAT_VERSION};
pub use loader::{Jit, LoadedKernel};
pub use report::{KernelLoad, LoadReport};
pub use source::KernelSource;
