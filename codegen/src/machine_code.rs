//! A kernel as the GPU runs it, without a GPU: a spec's source compiled by NVRTC to machine code
//! (a CUBIN for a real architecture, which CUDA's `nvdisasm -c` prints as SASS) with ptxas's
//! report of what each entry point uses. The report shows where a kernel keeps data in local
//! memory (a stack frame: an array indexed at run time, or registers spilled), which costs a
//! round trip through the caches for every access and is otherwise found only by timing: the
//! ParisKV rerank's `_score` stored its 64-byte table of levels to local memory again before
//! every nibble it decoded, unseen until its SASS was read (`bench/NOTES.md`, third session of
//! 2026-12-05).

use std::path::Path;

use serde::Serialize;

use crate::emit::{render_kernel, write_dir, EmitError, COMPILE_OPTIONS};
use crate::nvrtc;
use crate::resources::{self, EntryResources};
use crate::spec::KernelSpec;

/// One spec's source, machine code and resources.
#[derive(Clone, Debug)]
pub struct MachineCode {
    pub spec: KernelSpec,
    pub source: String,
    /// The CUBIN (an ELF image of the GPU's machine code).
    pub cubin: Vec<u8>,
    /// What each entry point uses, in `KernelSpec::entry_points` order.
    pub resources: Vec<EntryResources>,
}

/// A row of `resources.json`.
#[derive(Serialize)]
struct Row<'a> {
    kernel: String,
    spec: serde_json::Value,
    resources: &'a [EntryResources],
}

/// Renders `spec` and compiles it for the real architecture `arch` (`sm_XY`); with `lineinfo`
/// the CUBIN maps each instruction to its line of `<name>.cu` (`nvdisasm -g -c`), which puts
/// a profiler's per-instruction counts on template lines without profiling again. The machine
/// code is otherwise the runtime's (its `-lineinfo` changes no instruction).
pub fn build(spec: &KernelSpec, arch: &str, lineinfo: bool) -> Result<MachineCode, EmitError> {
    let (name, source) = render_kernel(spec)?;
    let file = format!("{name}.cu");
    let mut options: Vec<String> = COMPILE_OPTIONS.iter().map(|o| o.to_string()).collect();
    if lineinfo {
        options.push("-lineinfo".to_string());
    }
    let resources = resources::measure(&source, &file, arch, &options, &spec.entry_points())
        .map_err(|source| EmitError::Resources {
            name: name.clone(),
            source,
        })?;
    let cubin = nvrtc::compile_cubin(&source, &file, arch, &options)
        .map_err(|source| EmitError::Compile { name, source })?
        .cubin;
    Ok(MachineCode {
        spec: *spec,
        source,
        cubin,
        resources,
    })
}

/// Writes `<name>.cu` and `<name>.cubin` of every kernel and `resources.json` into `out` in one
/// step (created, or replaced as a whole; nothing is written on an error).
pub fn write(out: &Path, kernels: &[MachineCode]) -> Result<(), EmitError> {
    let mut files = Vec::new();
    for k in kernels {
        let name = k.spec.kernel_name();
        files.push((format!("{name}.cu"), k.source.clone().into_bytes()));
        files.push((format!("{name}.cubin"), k.cubin.clone()));
    }
    let rows: Vec<Row<'_>> = kernels
        .iter()
        .map(|k| Row {
            kernel: k.spec.kernel_name(),
            spec: serde_json::to_value(k.spec).expect("a spec is plain data"),
            resources: &k.resources,
        })
        .collect();
    let json = serde_json::to_string_pretty(&rows).expect("the rows are plain data");
    files.push(("resources.json".into(), (json + "\n").into_bytes()));
    write_dir(out, &files)
}

/// One line of what `entry` uses, saying whether it keeps anything in local memory.
pub fn describe(r: &EntryResources) -> String {
    let local = if r.stack_bytes == 0 && !r.spills() {
        "no local memory".to_string()
    } else {
        format!(
            "LOCAL MEMORY: {} bytes of stack frame, {} bytes spilled ({} loaded back)",
            r.stack_bytes, r.spill_store_bytes, r.spill_load_bytes
        )
    };
    format!(
        "{}: {} registers, {} bytes of shared memory, {local}",
        r.entry, r.registers, r.shared_bytes
    )
}
