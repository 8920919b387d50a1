//! Emitting a model's kernels: render and compile every one in memory, then write `<name>.cu`,
//! `<name>.ptx` and `manifest.json` (with what each entry point uses, `crate::resources`) into
//! a directory in one step, so that a failure leaves nothing behind.

use crate::kernels::{kernels_for, KernelSetOptions};
use crate::model::ModelShape;
use crate::nvrtc::{self, NvrtcError};
use crate::render::{render_any, RenderError};
use crate::resources::{self, EntryResources, ResourcesError};
use crate::spec::KernelSpec;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// NVRTC options every kernel is compiled with (after `--gpu-architecture`).
pub const COMPILE_OPTIONS: [&str; 1] = ["--std=c++17"];

/// One kernel of a manifest: enough to find its files and to know what produced them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// The kernel (and file stem) name.
    pub name: String,
    /// The family, e.g. `scan`.
    pub family: String,
    /// The family's spec fields.
    pub spec: serde_json::Value,
    /// SHA-256 of the `.cu` source, lower-case hex.
    pub source_sha256: String,
    /// NVRTC `major.minor` that compiled the `.ptx`.
    pub nvrtc_version: String,
    /// The target architecture, e.g. `sm_90`.
    pub arch: String,
    /// The module's entry points in launch order (several for the families of several stages).
    pub entry_points: Vec<String>,
    /// What each entry point uses (registers, shared memory, stack, spills), as ptxas reports
    /// it for `arch`, in `entry_points` order; empty for a virtual architecture (`compute_XY`),
    /// for which ptxas does not run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<EntryResources>,
}

/// `manifest.json`: the model and its kernels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The shape the kernels were generated for.
    pub model: ModelShape,
    /// Every kernel, in generation order.
    pub kernels: Vec<ManifestEntry>,
}

/// A rendered and compiled kernel.
#[derive(Clone, Debug)]
pub struct EmittedKernel {
    /// Its spec.
    pub spec: KernelSpec,
    /// The CUDA C source.
    pub source: String,
    /// The PTX.
    pub ptx: String,
}

/// Why nothing was emitted.
#[derive(Debug, Error)]
pub enum EmitError {
    #[error("kernel {name}: {source}")]
    Render {
        name: String,
        #[source]
        source: RenderError,
    },
    #[error("kernel {name}: {source}")]
    Compile {
        name: String,
        #[source]
        source: NvrtcError,
    },
    #[error("kernel {name}: resources: {source}")]
    Resources {
        name: String,
        #[source]
        source: ResourcesError,
    },
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// SHA-256 of `text`, lower-case hex.
pub fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The kernel name and rendered source of `spec`.
pub fn render_kernel(spec: &KernelSpec) -> Result<(String, String), EmitError> {
    let name = spec.kernel_name();
    let source = render_any(spec).map_err(|source| EmitError::Render {
        name: name.clone(),
        source,
    })?;
    Ok((name, source))
}

/// Renders and compiles one spec for `arch`.
pub fn build_kernel(spec: &KernelSpec, arch: &str) -> Result<EmittedKernel, EmitError> {
    let (name, source) = render_kernel(spec)?;
    let options: Vec<String> = COMPILE_OPTIONS.iter().map(|o| o.to_string()).collect();
    let compiled = nvrtc::compile(&source, &format!("{name}.cu"), arch, &options)
        .map_err(|source| EmitError::Compile { name, source })?;
    Ok(EmittedKernel {
        spec: *spec,
        source,
        ptx: compiled.ptx,
    })
}

/// Renders and compiles the default kernel set of `model` for `arch`, all in memory.
pub fn build_model(
    model: &ModelShape,
    options: &KernelSetOptions,
    arch: &str,
) -> Result<(Vec<EmittedKernel>, Manifest), EmitError> {
    let kernels = kernels_for(model, options)
        .iter()
        .map(|spec| build_kernel(spec, arch))
        .collect::<Result<Vec<_>, _>>()?;
    let (major, minor) = nvrtc::version().map_err(|source| EmitError::Compile {
        name: "(nvrtc version)".into(),
        source,
    })?;
    let entries = kernels
        .iter()
        .map(|k| {
            let name = k.spec.kernel_name();
            let entry_points = k.spec.entry_points();
            let resources = if arch.starts_with("sm_") {
                let options: Vec<String> = COMPILE_OPTIONS.iter().map(|o| o.to_string()).collect();
                resources::measure(
                    &k.source,
                    &format!("{name}.cu"),
                    arch,
                    &options,
                    &entry_points,
                )
                .map_err(|source| EmitError::Resources {
                    name: name.clone(),
                    source,
                })?
            } else {
                Vec::new()
            };
            Ok(ManifestEntry {
                name,
                family: k.spec.family().to_string(),
                spec: k.spec.fields_json(),
                source_sha256: sha256_hex(&k.source),
                nvrtc_version: format!("{major}.{minor}"),
                arch: arch.to_string(),
                entry_points,
                resources,
            })
        })
        .collect::<Result<Vec<_>, EmitError>>()?;
    let manifest = Manifest {
        model: model.clone(),
        kernels: entries,
    };
    Ok((kernels, manifest))
}

/// Builds everything, then writes it into `out` (created or replaced) through a temporary
/// directory beside it that is renamed into place: on any error `out` is left as it was.
pub fn emit(
    model: &ModelShape,
    options: &KernelSetOptions,
    arch: &str,
    out: &Path,
) -> Result<Manifest, EmitError> {
    let (kernels, manifest) = build_model(model, options, arch)?;
    let mut files = Vec::new();
    for k in &kernels {
        let name = k.spec.kernel_name();
        files.push((format!("{name}.cu"), k.source.clone().into_bytes()));
        files.push((format!("{name}.ptx"), k.ptx.clone().into_bytes()));
    }
    let json = serde_json::to_string_pretty(&manifest).expect("the manifest is plain data");
    files.push(("manifest.json".into(), (json + "\n").into_bytes()));
    write_dir(out, &files)?;
    Ok(manifest)
}

/// Writes `files` (name, bytes) into the directory `out` in one step: into a temporary directory
/// beside it that is renamed into place (replacing `out` as a whole), so that on any error `out`
/// is left as it was.
pub fn write_dir(out: &Path, files: &[(String, Vec<u8>)]) -> Result<(), EmitError> {
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(io("creating", &parent))?;
    let stem = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let staging = parent.join(format!(".{stem}.partial-{}", std::process::id()));
    let result = (|| {
        std::fs::create_dir(&staging).map_err(io("creating", &staging))?;
        for (name, bytes) in files {
            let path = staging.join(name);
            std::fs::write(&path, bytes).map_err(io("writing", &path))?;
        }
        replace_dir(&staging, out)
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result
}

/// The error of an I/O `action` on `path`, for `map_err`.
fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> EmitError {
    let path = path.to_path_buf();
    move |source| EmitError::Io {
        action,
        path,
        source,
    }
}

/// Moves `from` to `to`; an existing `to` is moved aside first and removed after.
fn replace_dir(from: &Path, to: &Path) -> Result<(), EmitError> {
    if to.exists() {
        let aside = from.with_extension("old");
        std::fs::rename(to, &aside).map_err(io("moving aside", to))?;
        if let Err(e) = std::fs::rename(from, to) {
            let _ = std::fs::rename(&aside, to);
            return Err(io("renaming into place", to)(e));
        }
        std::fs::remove_dir_all(&aside).map_err(io("removing", &aside))?;
    } else {
        std::fs::rename(from, to).map_err(io("renaming into place", to))?;
    }
    Ok(())
}
