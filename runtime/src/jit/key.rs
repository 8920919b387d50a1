//! The cache key: what a kernel's PTX is a function of, and nothing else.
//!
//! PTX is a pure function of the generated source, the compiler and its arguments, so the key is
//! the hash of exactly those (DESIGN.md "Compilation and the JIT cache"): never a path, a time
//! or the spec (two specs that render the same source share their PTX).

use codegen::emit::{sha256_hex, COMPILE_OPTIONS};
use codegen::spec::KernelSpec;
use sha2::{Digest, Sha256};

use super::error::JitError;
use crate::gpu::{programmatic_from_env, Pdl, PDL_EARLY_DEFINE};

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

/// Set to `1`, kernels are compiled with `-lineinfo`, so that a profiler (`ncu --page source
/// --print-source cuda,sass`) maps machine code to template lines. The option is part of the
/// cache key; the PTX otherwise is unchanged.
pub const JIT_LINEINFO_VAR: &str = "FATHOM_JIT_LINEINFO";

/// The options every kernel is compiled with: codegen's, so that the JIT's PTX is the PTX of
/// `codegen::emit::build_kernel`; `-lineinfo` when [`JIT_LINEINFO_VAR`] asks for it;
/// [`PDL_EARLY_DEFINE`] when `FATHOM_PDL` is `1` or `early` (both part of the cache key). An
/// invalid `FATHOM_PDL` compiles as the default: opening the GPU handle refuses it.
pub fn compile_options() -> Vec<String> {
    options_for(
        std::env::var(JIT_LINEINFO_VAR).is_ok_and(|v| v == "1"),
        programmatic_from_env().is_ok_and(|p| p == Pdl::Early),
    )
}

/// [`compile_options`] for these settings.
fn options_for(lineinfo: bool, pdl_early: bool) -> Vec<String> {
    let mut options: Vec<String> = COMPILE_OPTIONS.iter().map(|o| o.to_string()).collect();
    if lineinfo {
        options.push("-lineinfo".to_string());
    }
    if pdl_early {
        options.push(PDL_EARLY_DEFINE.to_string());
    }
    options
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
    prepare_among(&[], spec, arch, nvrtc_version)
}

/// [`prepare`], with the source taken from the embedded sets `embedded` when one has the
/// kernel (`crate::embedded::find`; the spec is still validated), else rendered.
pub fn prepare_among(
    embedded: &[&'static [(&'static str, &'static str)]],
    spec: &KernelSpec,
    arch: &str,
    nvrtc_version: (i32, i32),
) -> Result<Prepared, JitError> {
    let name = spec.kernel_name();
    let render_error = |source| JitError::Render {
        kernel: name.clone(),
        source,
    };
    let source = match crate::embedded::find(embedded, &name) {
        Some(source) => {
            spec.validate()
                .map_err(|e| render_error(codegen::render::RenderError::Spec(e)))?;
            source.to_string()
        }
        None => spec.render().map_err(render_error)?,
    };
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

#[cfg(test)]
mod tests {
    use codegen::spec::{OracleSpec, Placement};

    use super::*;

    fn spec() -> KernelSpec {
        OracleSpec {
            head_dim: 128,
            group: 4,
            threads: 256,
            placement: Placement::Hbm,
            kv_rows: Default::default(),
        }
        .into()
    }

    #[test]
    fn an_embedded_source_is_taken_as_it_is_and_keyed_by_its_content() {
        static MARKED: std::sync::OnceLock<Vec<(&'static str, &'static str)>> =
            std::sync::OnceLock::new();
        let set = MARKED.get_or_init(|| {
            let name: &'static str = Box::leak(spec().kernel_name().into_boxed_str());
            let source = format!("{}// embedded\n", spec().render().unwrap());
            vec![(name, Box::leak(source.into_boxed_str()) as &'static str)]
        });
        let rendered = prepare(&spec(), "sm_90", (13, 0)).unwrap();
        let embedded = prepare_among(&[set.as_slice()], &spec(), "sm_90", (13, 0)).unwrap();
        assert!(embedded.source.ends_with("// embedded\n"));
        assert_eq!(embedded.source, set[0].1);
        assert_ne!(embedded.key, rendered.key, "the key follows the source");
        // A set without the kernel, or none at all: rendered.
        let other = prepare_among(&[&[("fathom_other", "//")]], &spec(), "sm_90", (13, 0));
        assert_eq!(other.unwrap().key, rendered.key);
        assert_eq!(
            prepare_among(&[crate::embedded::SOURCES], &spec(), "sm_90", (13, 0))
                .unwrap()
                .key,
            rendered.key,
            "the runtime's embedded source is the rendering"
        );
    }

    /// `FATHOM_PDL=1` compiles with the define that moves the trigger to right after each
    /// kernel's wait: another key, the same options otherwise; without it (the default, the
    /// trigger at the blocks' exit) the PTX waits and has no explicit trigger, with it the
    /// trigger is there (NVRTC, when this machine has it: `FATHOM_NVRTC`).
    #[test]
    fn the_early_trigger_is_its_own_key_and_puts_the_trigger_in() {
        let plain = options_for(false, false);
        let early = options_for(false, true);
        assert_eq!(early.len(), plain.len() + 1);
        assert_eq!(early.last().map(String::as_str), Some(PDL_EARLY_DEFINE));
        let source = spec().render().unwrap();
        assert_ne!(
            cache_key(&source, (13, 0), "sm_90", &plain),
            cache_key(&source, (13, 0), "sm_90", &early)
        );
        if std::env::var_os("FATHOM_NVRTC").is_none() {
            return;
        }
        let ptx = |options: &[String]| {
            codegen::nvrtc::compile(&source, "oracle.cu", "sm_90", options)
                .unwrap()
                .ptx
        };
        let (at_exit, early) = (ptx(&plain), ptx(&early));
        assert!(early.contains("griddepcontrol.launch_dependents"));
        assert!(!at_exit.contains("griddepcontrol.launch_dependents"));
        assert!(early.contains("griddepcontrol.wait") && at_exit.contains("griddepcontrol.wait"));
    }

    #[test]
    fn an_embedded_kernel_of_an_invalid_spec_is_refused() {
        let mut bad = spec();
        if let KernelSpec::Oracle(s) = &mut bad {
            s.threads = 100;
        }
        let name: &'static str = Box::leak(bad.kernel_name().into_boxed_str());
        let set: &'static [(&'static str, &'static str)] = Box::leak(Box::new([(name, "//")]));
        let err = prepare_among(&[set], &bad, "sm_90", (13, 0)).unwrap_err();
        assert!(matches!(err, JitError::Render { .. }), "{err}");
    }
}
