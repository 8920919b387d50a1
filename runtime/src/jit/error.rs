//! [`JitError`]: why a kernel could not be had, naming the kernel.

use std::path::PathBuf;

use codegen::nvrtc::NvrtcError;
use codegen::render::RenderError;
use thiserror::Error;

use crate::gpu::GpuError;

/// A failure of the JIT: finding NVRTC, rendering, compiling, loading, or reading the cache.
///
/// A cache directory that cannot be created or written is not an error: the kernel is compiled
/// without caching and a warning is printed once (see [`super::JitCache`]).
#[derive(Debug, Error)]
pub enum JitError {
    /// NVRTC is missing or could not be loaded or queried.
    #[error("NVRTC is needed to compile kernels: {0}")]
    Nvrtc(#[source] NvrtcError),
    /// The kernel's source could not be rendered from its spec.
    #[error("kernel {kernel}: cannot render its source: {source}")]
    Render {
        /// The kernel's name.
        kernel: String,
        #[source]
        source: RenderError,
    },
    /// NVRTC rejected the generated source; the error carries NVRTC's log with the `.cu` file
    /// name and line.
    #[error("kernel {kernel}: {source}")]
    Compile {
        /// The kernel's name.
        kernel: String,
        #[source]
        source: NvrtcError,
    },
    /// The key was computed for one NVRTC but another one is loaded: compiling would store PTX
    /// of the loaded NVRTC under the other one's key.
    #[error(
        "kernel {kernel}: the cache key is for NVRTC {}.{} but NVRTC {}.{} is loaded; \
         pass codegen::nvrtc::version()",
        keyed.0, keyed.1, loaded.0, loaded.1
    )]
    NvrtcVersionMismatch {
        /// The kernel's name.
        kernel: String,
        /// The version the key was made with.
        keyed: (i32, i32),
        /// The version of the loaded library.
        loaded: (i32, i32),
    },
    /// The driver refused the PTX.
    #[error("kernel {kernel}: cannot load its module: {source}")]
    ModuleLoad {
        /// The kernel's name.
        kernel: String,
        // Boxed: GpuError is large, and every JIT result carries this type.
        #[source]
        source: Box<GpuError>,
    },
    /// An entry point the spec names is not in the loaded module.
    #[error("kernel {kernel}: entry point `{entry}` is not in its module: {source}")]
    MissingEntryPoint {
        /// The kernel's name.
        kernel: String,
        /// The entry point looked up.
        entry: String,
        // Boxed: GpuError is large, and every JIT result carries this type.
        #[source]
        source: Box<GpuError>,
    },
    /// A caller asked a loaded kernel for an entry point its spec does not have.
    #[error("kernel {kernel} has no entry point `{entry}`; its entry points are: {}", known.join(", "))]
    UnknownEntryPoint {
        /// The kernel's name.
        kernel: String,
        /// The name asked for.
        entry: String,
        /// The kernel's entry points, in launch order.
        known: Vec<String>,
    },
    /// An environment variable the JIT reads has a value it does not know.
    #[error("{var}=`{got}` is not understood; allowed: {allowed}")]
    Setting {
        /// The variable.
        var: &'static str,
        /// Its value.
        got: String,
        /// What it may be.
        allowed: &'static str,
    },
    /// A cached CUBIN entry passed its hash check but is not hex text (written by another
    /// program under a fathom key).
    #[error("kernel {kernel}: the cached CUBIN is not hex text; delete {} and load again", path.display())]
    CubinEntry {
        /// The kernel.
        kernel: String,
        /// The entry file.
        path: PathBuf,
    },
    /// Reading an existing cache entry failed for a reason other than its absence.
    #[error("kernel cache: {action} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. `reading`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
