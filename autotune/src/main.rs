//! `autotune`: tunes the kernel variants of every preset's distinct shape on this GPU and
//! records the winners per GPU model (SPEC §9).
//!
//! It detects the GPU, measures the ceilings (pinned copy, mapped read, HBM copy), tunes every
//! case of the selection (scan in host and HBM, gather, transfer, plan, select, attention,
//! oracle, landmark, fetch in host and HBM, pariskv_vote and pariskv_rerank in host and HBM,
//! pariskv_topc in HBM; contexts 32k, 128k, 1M) with a progress bar, merges the result into `<dir>/<gpu-model>.json` (refusing a record there
//! whose header differs, with the reason), prints a summary table and writes an SVG plot of
//! every candidate's achieved bandwidth beside the record.
//!
//! `cargo run --release -p autotune -- [--model qwen3-8b] [--config path/to/config.json] [--only scan/hbm/128k] [--quick]`
//! `cargo run --release -p autotune -- --report runtime/records/nvidia-h200.json` (no GPU)

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use autotune::candidates::{candidate_checksum, enumerate, Case};
use autotune::gpu::GpuBench;
use autotune::records::{default_dir, merge_into, record_path};
use autotune::report::{bandwidth_svg, summary_table};
use autotune::selection::select_shapes;
use autotune::tuner::{tune_case, Observer, Settings};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use runtime::gpu::Gpu;
use runtime::tuning::{CandidateRecord, MetaCheck, Outcome, RecordMeta, TuningRecord};

/// Tunes kernel variants on this GPU and records the winners per GPU model.
#[derive(Parser, Debug)]
#[command(name = "autotune")]
struct Args {
    /// Tune only these presets' shapes (repeatable; default: every preset's distinct shape).
    #[arg(long)]
    model: Vec<String>,
    /// Tune the shape of a model's Hugging Face `config.json` (repeatable).
    #[arg(long)]
    config: Vec<std::path::PathBuf>,
    /// Tune only SUBJECT[/PLACEMENT[/CONTEXT]], e.g. `scan/hbm/128k` or `select` (repeatable).
    #[arg(long)]
    only: Vec<String>,
    /// Contexts 32k and 128k only, fewer repetitions.
    #[arg(long)]
    quick: bool,
    /// Timed runs per candidate (default 25, 10 with --quick).
    #[arg(long)]
    reps: Option<usize>,
    /// Directory of the record (default: $FATHOM_TUNING_DIR, else <cache dir>/tuning).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Tune nothing: print the summary table of this record and rewrite its SVG plot beside
    /// it (no GPU needed).
    #[arg(long, value_name = "RECORD.json", conflicts_with_all = ["model", "config", "only", "quick", "reps", "out"])]
    report: Option<std::path::PathBuf>,
}

/// `--report`: the table and plot of a record already written.
fn report(path: &std::path::Path) -> Result<(), String> {
    let record = TuningRecord::read(path).map_err(|e| e.to_string())?;
    println!("{}", summary_table(&record));
    let svg = path.with_extension("svg");
    std::fs::write(&svg, bandwidth_svg(&record, record.ceilings.as_ref()))
        .map_err(|e| format!("cannot write {}: {e}", svg.display()))?;
    eprintln!("autotune: plot {}", svg.display());
    Ok(())
}

/// The progress bar, one tick per candidate.
struct Bar(ProgressBar);

impl Observer for Bar {
    fn case_started(&mut self, case: &Case, _candidates: usize) {
        self.0.set_message(case.key().to_string());
    }

    fn candidate_done(&mut self, _case: &Case, candidate: &CandidateRecord) {
        if let Outcome::Disqualified { reason } = &candidate.outcome {
            self.0
                .println(format!("  disqualified {}: {reason}", candidate.name));
        }
        self.0.inc(1);
    }
}

fn run(args: &Args) -> Result<(), String> {
    if let Some(path) = &args.report {
        return report(path);
    }
    let shapes = args
        .config
        .iter()
        .map(codegen::model::from_config_path)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let cases =
        select_shapes(&args.model, &shapes, &args.only, args.quick).map_err(|e| e.to_string())?;
    let gpu = Arc::new(Gpu::open(args.device).map_err(|e| e.to_string())?);
    let info = gpu.info().clone();
    let nvrtc = codegen::nvrtc::version().map_err(|e| e.to_string())?;
    let nvrtc = format!("{}.{}", nvrtc.0, nvrtc.1);
    let meta = RecordMeta::current(&info, nvrtc, candidate_checksum());
    eprintln!(
        "autotune: {} (compute capability {}, {} SMs, {:.1} GiB), driver CUDA {}, NVRTC {}",
        meta.gpu,
        meta.compute_capability,
        meta.multiprocessors,
        info.total_memory as f64 / (1u64 << 30) as f64,
        meta.driver,
        meta.nvrtc
    );
    let path = record_path(&args.out.clone().unwrap_or_else(default_dir), &meta.gpu);
    // Refuse a record of another header now, not after the run.
    if path.exists() {
        let old = TuningRecord::read(&path).map_err(|e| e.to_string())?;
        old.meta
            .check(&meta, MetaCheck::Full)
            .map_err(|reason| format!("the record {} is refused: {reason}", path.display()))?;
    }
    let (ceiling_bytes, ceiling_reps) = if args.quick {
        (256 << 20, 10)
    } else {
        (1 << 30, 20)
    };
    let ceilings = runtime::ceilings::measure(&gpu, ceiling_bytes, ceiling_reps)
        .map_err(|e| format!("measuring the ceilings: {e}"))?;
    eprintln!(
        "autotune: ceilings: pinned copy {:.1} GB/s, mapped read {:.1} GB/s, HBM copy {:.1} GB/s",
        ceilings.pinned_copy_gbps, ceilings.mapped_read_gbps, ceilings.hbm_copy_gbps
    );
    let settings = Settings {
        reps: args.reps.unwrap_or(if args.quick { 10 } else { 25 }).max(1),
        ..Settings::default()
    };
    let total: usize = cases.iter().map(|c| enumerate(c).len()).sum();
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} candidates, ETA {eta} {msg}",
        )
        .map_err(|e| e.to_string())?
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(500));
    let mut bench = GpuBench::new(gpu.clone(), ceilings.clone())?;
    let mut record = TuningRecord::new(meta);
    let mut observer = Bar(bar);
    for case in &cases {
        let entry = tune_case(&mut bench, case, &settings, &mut observer);
        bench.adopt(&entry);
        record.insert(entry);
    }
    observer.0.finish_and_clear();
    record.ceilings = Some(ceilings.clone());
    println!("{}", summary_table(&record));
    let merged = merge_into(&path, record).map_err(|e| e.to_string())?;
    let svg = path.with_extension("svg");
    std::fs::write(&svg, bandwidth_svg(&merged, Some(&ceilings)))
        .map_err(|e| format!("cannot write {}: {e}", svg.display()))?;
    eprintln!(
        "autotune: record {} ({} entries), plot {}",
        path.display(),
        merged.entries.len(),
        svg.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("autotune: {e}");
            ExitCode::FAILURE
        }
    }
}
