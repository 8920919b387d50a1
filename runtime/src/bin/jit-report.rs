//! `fathom-jit-report`: cold and warm load times of a preset's whole kernel set on this GPU.
//!
//! Clears a cache directory, loads every kernel cold (compiled by NVRTC, stored), then again in a
//! new JIT over the same directory (every kernel must come from the cache), and prints a table
//! of each pass and a JSON summary (GPU, NVRTC version, cold and warm totals) on stdout.

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use codegen::kernels::{kernels_for, KernelSetOptions};
use codegen::model::preset;
use codegen::nvrtc;
use runtime::gpu::Gpu;
use runtime::jit::{Jit, JitCache};

/// Cold and warm JIT load times of a model preset's kernel set.
#[derive(Parser, Debug)]
#[command(name = "fathom-jit-report")]
struct Args {
    /// The model preset whose default kernel set is loaded.
    #[arg(long, default_value = "qwen3-8b")]
    model: String,
    /// The cache directory to use; it is emptied first. Default: a new directory under the
    /// system's temporary directory, removed afterwards.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// The CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            let mut message = format!("fathom-jit-report: {e}");
            let mut source = e.source();
            while let Some(s) = source {
                message += &format!(": {s}");
                source = s.source();
            }
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

/// Runs both passes; `Ok(false)` when the warm pass compiled anything.
fn run(args: Args) -> Result<bool, Box<dyn Error>> {
    let shape = preset(&args.model)?;
    let specs = kernels_for(&shape, &KernelSetOptions::default());
    let gpu = Arc::new(Gpu::open(args.device)?);
    let temporary = args.cache_dir.is_none();
    let dir = args.cache_dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("fathom-jit-report-{}", std::process::id()))
    });
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .map_err(|e| format!("cannot empty the cache directory {}: {e}", dir.display()))?;
    }

    let cold_jit = Jit::new(gpu.clone(), JitCache::new(dir.clone()))?;
    let cold = cold_jit.load_set(&specs)?;
    let warm_jit = Jit::new(gpu.clone(), JitCache::new(dir.clone()))?;
    let warm = warm_jit.load_set(&specs)?;
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }

    let info = gpu.info();
    let (major, minor) = warm_jit.nvrtc_version();
    let library = nvrtc::load()?;
    println!(
        "{} kernels of {} on {} ({}), NVRTC {major}.{minor} ({})",
        specs.len(),
        args.model,
        info.name,
        info.arch(),
        library.path.display()
    );
    println!("\ncold (empty cache {}):\n{}", dir.display(), cold.table());
    println!("warm (new JIT, same cache):\n{}", warm.table());
    let summary = serde_json::json!({
        "model": args.model,
        "kernels": specs.len(),
        "gpu": info.name,
        "arch": info.arch(),
        "driver_version": info.driver_version,
        "nvrtc_version": format!("{major}.{minor}"),
        "nvrtc_library": library.path,
        "cold_total_ms": cold.wall_ms,
        "warm_total_ms": warm.wall_ms,
        "cold": cold,
        "warm": warm,
    });
    println!("{}", serde_json::to_string_pretty(&summary)?);

    if !warm.all_cached() {
        eprintln!(
            "fathom-jit-report: the warm pass compiled {} kernels; every one should have come \
             from the cache",
            warm.compiled
        );
        return Ok(false);
    }
    Ok(true)
}
