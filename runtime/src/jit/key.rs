//! The cache key: what a kernel's PTX is a function of, and nothing else.
//!
//! PTX is a pure function of the generated source, the compiler and its arguments, so the key is
//! the hash of exactly those (DESIGN.md "Compilation and the JIT cache"): never a path, a time
//! or the spec (two specs that render the same source share their PTX).

use codegen::emit::{sha256_hex, COMPILE_OPTIONS};
use codegen::spec::KernelSpec;
use sha2::{Digest, Sha256};

use super::error::JitError;

/// The version of the key derivation and of the entry file format; bumping it orphans every
/// existing entry instead of misreading it.
pub const FORMAT_VERSION: u32 = 1;

/// The cache key of PTX compiled from `source` by NVRTC `nvrtc_version` for `arch` with
/// `options` (after `--gpu-architecture`): SHA-256, lower-case hex.
///
/// Every field is length-prefixed, so no two different inputs encode to the same bytes (an
/// option moved into the architecture string changes the key).
pub fn cache_key(
    source: &str,
    nvrtc_version: (i32, i32),
    arch: &str,
    options: &[impl AsRef<str>],
) -> String {
    fn field(hasher: &mut Sha256, bytes: &[u8]) {
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    }
    let mut hasher = Sha256::new();
    field(&mut hasher, b"fathom-jit-key");
    field(&mut hasher, &FORMAT_VERSION.to_le_bytes());
    field(&mut hasher, &Sha256::digest(source.as_bytes()));
    field(
        &mut hasher,
        format!("{}.{}", nvrtc_version.0, nvrtc_version.1).as_bytes(),
    );
    field(&mut hasher, arch.as_bytes());
    hasher.update((options.len() as u64).to_le_bytes());
    for option in options {
        field(&mut hasher, option.as_ref().as_bytes());
    }
    hex(&hasher.finalize())
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The options every kernel is compiled with: codegen's, so that the JIT's PTX is the PTX of
/// `codegen::emit::build_kernel`.
pub fn compile_options() -> Vec<String> {
    COMPILE_OPTIONS.iter().map(|o| o.to_string()).collect()
}

/// A kernel ready to be looked up or compiled: its rendered source and key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// The spec.
    pub spec: KernelSpec,
    /// The kernel's name (its `.cu` file stem and, for one-stage families, its entry point).
    pub name: String,
    /// The generated CUDA C.
    pub source: String,
    /// SHA-256 of `source`, lower-case hex.
    pub source_sha256: String,
    /// The target architecture, e.g. `sm_90`.
    pub arch: String,
    /// The NVRTC version the key was made with.
    pub nvrtc_version: (i32, i32),
    /// The NVRTC options after `--gpu-architecture`.
    pub options: Vec<String>,
    /// [`cache_key`] of the above.
    pub key: String,
}

/// Renders `spec` and computes its key for `arch` and `nvrtc_version` with the standard
/// [`compile_options`]. Needs no GPU and no NVRTC.
pub fn prepare(
    spec: &KernelSpec,
    arch: &str,
    nvrtc_version: (i32, i32),
) -> Result<Prepared, JitError> {
    let name = spec.kernel_name();
    let source = spec.render().map_err(|source| JitError::Render {
        kernel: name.clone(),
        source,
    })?;
    let options = compile_options();
    let key = cache_key(&source, nvrtc_version, arch, &options);
    Ok(Prepared {
        spec: *spec,
        source_sha256: sha256_hex(&source),
        name,
        source,
        arch: arch.to_string(),
        nvrtc_version,
        options,
        key,
    })
}
