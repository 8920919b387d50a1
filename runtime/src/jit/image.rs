//! What a kernel's module is loaded from. By default ([`ModuleImage::Cubin`]) NVRTC hands back
//! the machine code it made for the device's own architecture, the cache keeps it (as hex text
//! under [`cubin_key`], beside any PTX entries) and the load is a copy. From PTX
//! (`FATHOM_JIT_IMAGE=ptx`, or [`super::Jit::with_image`]) the driver compiles the PTX to machine
//! code inside `cuModuleLoadData`, in every process: on the H200 a cold autotune's 585 kernels
//! took 254 s to become loadable from PTX and 37.6 s from CUBIN
//! (`bench/results/autotune-cubin-h200-2026-12-02-bef9816.txt`).

use sha2::{Digest, Sha256};

use super::cache::with_nvrtc;
use super::error::JitError;
use super::key::{hex, Prepared};

/// The environment variable that picks the image: `cubin` (the default when unset or empty) or
/// `ptx`.
pub const JIT_IMAGE_VAR: &str = "FATHOM_JIT_IMAGE";

/// What a module is loaded from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ModuleImage {
    /// PTX text, compiled by the driver at load.
    Ptx,
    /// NVRTC's machine code for the device's architecture, loaded as it is.
    #[default]
    Cubin,
}

impl ModuleImage {
    /// The image named by `text` (`cubin` or `ptx`; empty is the default, CUBIN).
    pub fn parse(text: &str) -> Result<ModuleImage, JitError> {
        match text.trim() {
            "ptx" => Ok(ModuleImage::Ptx),
            "" | "cubin" => Ok(ModuleImage::Cubin),
            other => Err(JitError::Setting {
                var: JIT_IMAGE_VAR,
                got: other.to_string(),
                allowed: "cubin (the default) or ptx",
            }),
        }
    }

    /// The image `FATHOM_JIT_IMAGE` names; CUBIN when it is unset.
    pub fn from_env() -> Result<ModuleImage, JitError> {
        match std::env::var(JIT_IMAGE_VAR) {
            Ok(text) => ModuleImage::parse(&text),
            Err(std::env::VarError::NotPresent) => Ok(ModuleImage::Cubin),
            Err(std::env::VarError::NotUnicode(raw)) => Err(JitError::Setting {
                var: JIT_IMAGE_VAR,
                got: raw.to_string_lossy().into_owned(),
                allowed: "cubin (the default) or ptx",
            }),
        }
    }
}

/// The cache key of the CUBIN of the kernel whose PTX key is `ptx_key`: a function of the same
/// inputs, distinct from every PTX key, so both kinds live in one cache directory.
pub fn cubin_key(ptx_key: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"fathom-jit-cubin\0");
    hasher.update(ptx_key.as_bytes());
    hex(&hasher.finalize())
}

/// The CUBIN of a prepared kernel as hex text (a cache entry's body is text).
pub fn compile_cubin_hex(prepared: &Prepared) -> Result<String, JitError> {
    with_nvrtc(prepared, codegen::nvrtc::compile_cubin).map(|compiled| hex(&compiled.cubin))
}

/// The bytes of hex text written by [`compile_cubin_hex`]; `None` when it is not such text.
pub fn cubin_from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.as_bytes()
        .chunks(2)
        .map(|pair| {
            let digit = |b: u8| (b as char).to_digit(16);
            Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_is_named_ptx_or_cubin_and_anything_else_says_what_is_allowed() {
        assert_eq!(ModuleImage::parse("").unwrap(), ModuleImage::Cubin);
        assert_eq!(ModuleImage::parse("ptx").unwrap(), ModuleImage::Ptx);
        assert_eq!(ModuleImage::parse(" cubin\n").unwrap(), ModuleImage::Cubin);
        let e = ModuleImage::parse("sass").unwrap_err().to_string();
        assert!(
            e.contains(JIT_IMAGE_VAR) && e.contains("sass") && e.contains("cubin"),
            "{e}"
        );
    }

    #[test]
    fn a_cubin_key_is_its_own_and_stable() {
        let ptx_key = "ab".repeat(32);
        assert_eq!(cubin_key(&ptx_key), cubin_key(&ptx_key));
        assert_ne!(cubin_key(&ptx_key), ptx_key);
        assert_ne!(cubin_key(&ptx_key), cubin_key(&"cd".repeat(32)));
        assert_eq!(cubin_key(&ptx_key).len(), 64);
    }

    /// Needs NVRTC (as every compile test; `scripts/test.sh` provides it), not a GPU.
    #[test]
    fn a_kernels_cubin_is_cached_under_its_own_key_and_reads_back() {
        use crate::jit::{prepare, JitCache, Origin};
        let spec: codegen::spec::KernelSpec = codegen::spec::ConvertSpec { threads: 256 }.into();
        let version = codegen::nvrtc::version().expect("NVRTC loads");
        let prepared = prepare(&spec, "sm_90", version).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache = JitCache::new(dir.path().to_path_buf());
        let key = cubin_key(&prepared.key);
        let build = || compile_cubin_hex(&prepared);
        let first = cache
            .get_or_build_with(&key, &prepared.name, build)
            .unwrap();
        assert_eq!(first.origin, Origin::Compiled);
        let again = cache
            .get_or_build_with(&key, &prepared.name, build)
            .unwrap();
        assert_eq!(again.origin, Origin::CacheHit);
        let cubin = cubin_from_hex(&again.ptx).expect("hex text");
        assert_eq!(&cubin[..4], b"\x7fELF");
        // The PTX of the same kernel is another entry: both are in the directory.
        let (ptx, _) = cache.get_or_build(&spec, "sm_90", version).unwrap();
        assert!(ptx.contains(".entry"), "PTX text");
        assert!(cache.entry_path(&key).exists() && cache.entry_path(&prepared.key).exists());
    }

    #[test]
    fn hex_text_round_trips_and_other_text_is_refused() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(cubin_from_hex(&hex(&bytes)).unwrap(), bytes);
        assert_eq!(cubin_from_hex("").unwrap(), Vec::<u8>::new());
        assert!(cubin_from_hex("abc").is_none());
        assert!(cubin_from_hex("zz").is_none());
    }
}
