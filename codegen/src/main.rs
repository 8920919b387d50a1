//! `codegen`: the command line of the kernel generator.
//!
//! `codegen emit --model qwen3-8b --out DIR [--arch sm_90]` (or `--config config.json`) writes
//! one `.cu` and one `.ptx` per kernel of the model's default set, and `manifest.json`. Nothing
//! is written unless every kernel renders and compiles.

use clap::{Args, Parser, Subcommand};
use codegen::emit::emit;
use codegen::model::{self, ModelShape};
use codegen::KernelSetOptions;
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
    let manifest = emit(&shape, &options, &args.arch, &args.out).map_err(|e| {
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            let text = s.to_string();
            if !message.contains(&text) {
                message.push_str(": ");
                message.push_str(&text);
            }
            source = s.source();
        }
        message
    })?;
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
    for r in entries.filter(|r| r.spills()) {
        println!(
            "note: {} spills to local memory ({} bytes stored, {} loaded, {} registers)",
            r.entry, r.spill_store_bytes, r.spill_load_bytes, r.registers
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let Command::Emit(args) = Cli::parse().command;
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("codegen emit: {message}; nothing was written");
            ExitCode::FAILURE
        }
    }
}
