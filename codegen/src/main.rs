//! `codegen`: the command line of the kernel generator.
//!
//! `codegen emit --model qwen3-8b --out DIR [--arch sm_90]` (or `--config config.json`) writes
//! one `.cu` and one `.ptx` per kernel of the model's default set, and `manifest.json`. Nothing
//! is written unless every kernel renders and compiles.
//!
//! `codegen machine-code --specs specs.json --out DIR [--arch sm_90]` compiles the kernel specs
//! of a JSON file (one, or a list, spelled as a tuning record's: `{"family": "scan", ...}`) to
//! machine code: `<name>.cu`, `<name>.cubin` (`nvdisasm -c` prints its SASS) and
//! `resources.json`, and prints what each entry point uses, local memory first.

use clap::{Args, Parser, Subcommand};
use codegen::emit::emit;
use codegen::machine_code::{self, MachineCode};
use codegen::model::{self, ModelShape};
use codegen::{KernelSetOptions, KernelSpec};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "codegen", about = "Fathom's kernel generator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Render and compile a model's kernels into a directory.
    Emit(EmitArgs),
    /// Compile kernel specs to machine code (CUBIN) and report their registers, shared and local
    /// memory, no GPU needed.
    MachineCode(MachineCodeArgs),
}

#[derive(Args)]
struct MachineCodeArgs {
    /// A JSON file of one kernel spec or a list of them, as a tuning record or
    /// `resources.json` spells them: `{"family": "scan", "head_dim": 128, ...}`.
    #[arg(long)]
    specs: PathBuf,
    /// Output directory (created, or replaced as a whole).
    #[arg(long)]
    out: PathBuf,
    /// Target architecture: a real one (`sm_XY`), whose machine code ptxas makes.
    #[arg(long, default_value = "sm_90")]
    arch: String,
    /// Map each instruction to its source line (`-lineinfo`; `nvdisasm -g -c` prints them).
    #[arg(long)]
    lineinfo: bool,
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("shape").required(true).args(["model", "config"])))]
struct EmitArgs {
    /// A model preset of SPEC §10 (e.g. qwen3-8b).
    #[arg(long)]
    model: Option<String>,
    /// A Hugging Face config.json to read the shape from.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Output directory (created, or replaced as a whole).
    #[arg(long)]
    out: PathBuf,
    /// Target architecture.
    #[arg(long, default_value = "sm_90")]
    arch: String,
    /// Tokens per scale block (32, 64 or 128).
    #[arg(long, default_value_t = KernelSetOptions::default().block)]
    block: usize,
    /// Words per plane per segment.
    #[arg(long, default_value_t = KernelSetOptions::default().segment_words)]
    segment_words: usize,
}

fn shape(args: &EmitArgs) -> Result<ModelShape, model::ModelError> {
    match (&args.model, &args.config) {
        (Some(name), _) => model::preset(name),
        (None, Some(path)) => model::from_config_path(path),
        (None, None) => unreachable!("clap requires --model or --config"),
    }
}

fn run(args: EmitArgs) -> Result<(), String> {
    let shape = shape(&args).map_err(|e| e.to_string())?;
    let options = KernelSetOptions {
        block: args.block,
        segment_words: args.segment_words,
    };
    let manifest = emit(&shape, &options, &args.arch, &args.out).map_err(|e| chain(&e))?;
    println!(
        "wrote {} kernels for {} ({}) to {}",
        manifest.kernels.len(),
        shape.name,
        args.arch,
        args.out.display()
    );
    let entries = manifest.kernels.iter().flat_map(|k| &k.resources);
    if let Some(most) = entries.clone().max_by_key(|r| r.registers) {
        println!(
            "registers per thread: at most {} ({})",
            most.registers, most.entry
        );
    }
    for r in entries.filter(|r| r.spills() || r.stack_bytes > 0) {
        println!(
            "note: {} keeps data in local memory ({} bytes of stack frame, {} bytes spilled, {} \
             loaded back, {} registers): an array indexed at run time or registers spilled; \
             `codegen machine-code` gives its SASS",
            r.entry, r.stack_bytes, r.spill_store_bytes, r.spill_load_bytes, r.registers
        );
    }
    Ok(())
}

/// The specs of a `--specs` file: one spec or a list.
fn read_specs(path: &std::path::Path) -> Result<Vec<KernelSpec>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
    let items = match value {
        serde_json::Value::Array(items) => items,
        one => vec![one],
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            serde_json::from_value::<KernelSpec>(item).map_err(|e| {
                format!(
                    "{} item {i} is not a kernel spec ({e}); a spec names its family and every \
                     field of it, e.g. {{\"family\": \"scan\", \"head_dim\": 128, \"group\": 4, \
                     \"block\": 64, \"segment_words\": 512, \"tile_words\": 8, \"threads\": \
                     128, \"placement\": \"hbm\"}}",
                    path.display()
                )
            })
        })
        .collect()
}

fn machine_code(args: MachineCodeArgs) -> Result<(), String> {
    let specs = read_specs(&args.specs)?;
    if specs.is_empty() {
        return Err(format!("{} holds no kernel spec", args.specs.display()));
    }
    let mut kernels: Vec<MachineCode> = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        eprintln!("[{}/{}] {}", i + 1, specs.len(), spec.kernel_name());
        kernels.push(machine_code::build(spec, &args.arch, args.lineinfo).map_err(|e| chain(&e))?);
    }
    machine_code::write(&args.out, &kernels).map_err(|e| chain(&e))?;
    for k in &kernels {
        for r in &k.resources {
            println!("{}", machine_code::describe(r));
        }
    }
    println!(
        "wrote {} kernels ({}) to {}: <name>.cu, <name>.cubin (SASS: nvdisasm -c), resources.json",
        kernels.len(),
        args.arch,
        args.out.display()
    );
    Ok(())
}

/// An error with its sources, each once.
fn chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = s.source();
    }
    message
}

fn main() -> ExitCode {
    let (what, result) = match Cli::parse().command {
        Command::Emit(args) => ("emit", run(args)),
        Command::MachineCode(args) => ("machine-code", machine_code(args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("codegen {what}: {message}; nothing was written");
            ExitCode::FAILURE
        }
    }
}
