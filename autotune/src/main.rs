//! `autotune`: tunes the kernel variants of every preset's distinct shape on this GPU and
//! records the winners per GPU model (SPEC §9).
//!
//! It detects the GPU, measures the ceilings (pinned copy, mapped read, HBM copy), tunes every
//! case of the selection (scan in host and HBM, gather, transfer, plan, select, attention,
//! oracle, landmark, fetch in host and HBM, pariskv_vote and pariskv_rerank in host and HBM,
//! pariskv_topc in HBM; contexts 32k, 128k, 1M) with a progress bar (one line per case when
//! standard error is not a terminal, e.g. a log), compiling every candidate's kernel on all
//! cores before the first case; `--timings` ends with the seconds spent per phase. It merges the result into `<dir>/<gpu-model>.json` (refusing a record there
//! whose header differs, with the reason), prints a summary table and writes an SVG plot of
//! every candidate's achieved bandwidth beside the record.
//!
//! `cargo run --release -p autotune -- [--model qwen3-8b] [--config path/to/config.json] [--only scan/hbm/128k] [--quick] [--timings]`
//! `cargo run --release -p autotune -- --report runtime/records/nvidia-h200.json [--machine-code DIR]` (no GPU)

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use autotune::candidates::{candidate_checksum, enumerate, run_specs, Case, OptIn};
use autotune::gpu::{GpuBench, PlanSource};
use autotune::records::{default_dir, merge_by_key, merge_into, record_path};
use autotune::report::{bandwidth_svg, summary_table};
use autotune::selection::select_shapes;
use autotune::tuner::{case_line, tune_case, Observer, Phase, Settings, Timings};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use runtime::gpu::Gpu;
use runtime::tuning::{CandidateRecord, EntryRecord, MetaCheck, Outcome, RecordMeta, TuningRecord};
use runtime::tuning::{Subject, TunedFamily};

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
    /// Contexts 32k and 128k only, a thinner grid (the tiles that have won on some GPU and
    /// their neighbours), fewer repetitions: a first record in half a minute. Its entries do
    /// not replace those of a fuller run already in the record.
    #[arg(long)]
    quick: bool,
    /// Also try the candidates of NAME, left out of a default run (repeatable):
    /// `select-fused`, the one-read select with its `_final` folded into `_chunk` (exact on the
    /// H200, no faster); `select-cluster`, the select by a thread-block cluster of eight blocks
    /// a query head (exact on an H100 but slower there than the one-block selects; sm_90);
    /// `attention-splits16`, every attention tile also with 16 blocks a query head. The
    /// record gets its own candidate checksum: write it to a scratch `--out` (`--merge` takes
    /// its entries into a default record).
    #[arg(long = "opt-in", value_name = "NAME")]
    opt_in: Vec<String>,
    /// The most timed runs per candidate (default 25, 10 with --quick; after 5, a candidate
    /// stops once its runs add up to 250 ms, 50 ms with --quick).
    #[arg(long)]
    reps: Option<usize>,
    /// Directory of the record (default: $FATHOM_TUNING_DIR, else <cache dir>/tuning).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// End with the seconds spent per phase (ceilings, compile, prepare, verify, time).
    #[arg(long)]
    timings: bool,
    /// Where the plan of the store cases (scan, gather, transfer, plan) takes its queries and
    /// channel variances: `synthetic` (the default since 2026-12-07), step-bench's SPEC §11
    /// layers, whose plans read fewer channels at more depths, as a model's do, or `random`
    /// (uniform queries and variances, as every record made before then).
    #[arg(long, value_enum, default_value_t = PlanSource::default(), value_name = "SOURCE")]
    plan_inputs: PlanSource,
    /// Tune nothing: print the summary table of this record and rewrite its SVG plot beside
    /// it (no GPU needed).
    #[arg(long, value_name = "RECORD.json", conflicts_with_all = ["model", "config", "only", "quick", "reps", "out", "timings", "opt_in"])]
    report: Option<std::path::PathBuf>,
    /// With `--report`: also compile every winner's kernel to machine code (NVRTC, no GPU) into
    /// DIR (`<name>.cu`, `<name>.cubin` for `nvdisasm -c`, `resources.json`) and list each entry
    /// point's registers, shared and local memory, those with local memory first.
    #[arg(long, value_name = "DIR", requires = "report")]
    machine_code: Option<std::path::PathBuf>,
    /// The architecture `--machine-code` compiles for (a real one, `sm_XY`).
    #[arg(long, default_value = "sm_90", requires = "machine_code")]
    arch: String,
    /// Tune nothing: put every entry of the record FROM (a partial run written to a scratch
    /// `--out`) in place of the same key's entry of the record given by `--into`, and rewrite
    /// that record and its plot (no GPU needed). The headers must match but for the candidate
    /// set; the merged record keeps `--into`'s header.
    #[arg(long, value_name = "FROM.json", requires = "into", conflicts_with_all = ["model", "config", "only", "quick", "reps", "out", "timings", "opt_in", "report"])]
    merge: Option<std::path::PathBuf>,
    /// The record `--merge` writes into.
    #[arg(long, value_name = "RECORD.json", requires = "merge")]
    into: Option<std::path::PathBuf>,
}

/// `--merge FROM --into RECORD`.
fn merge(from: &std::path::Path, into: &std::path::Path) -> Result<(), String> {
    let (record, merge) = merge_by_key(from, into).map_err(|e| e.to_string())?;
    for key in &merge.replaced {
        eprintln!("autotune: replaced {key}");
    }
    for key in &merge.added {
        eprintln!("autotune: added {key}");
    }
    let svg = into.with_extension("svg");
    std::fs::write(&svg, bandwidth_svg(&record, record.ceilings.as_ref()))
        .map_err(|e| format!("cannot write {}: {e}", svg.display()))?;
    eprintln!(
        "autotune: {} of {} entries from {} ({} replaced, {} added); record {}, plot {}",
        merge.replaced.len() + merge.added.len(),
        record.entries.len(),
        from.display(),
        merge.replaced.len(),
        merge.added.len(),
        into.display(),
        svg.display()
    );
    Ok(())
}

/// `--report`: the table and plot of a record already written; returns the record.
fn report(path: &std::path::Path) -> Result<TuningRecord, String> {
    let record = TuningRecord::read(path).map_err(|e| e.to_string())?;
    println!("{}", summary_table(&record));
    let svg = path.with_extension("svg");
    std::fs::write(&svg, bandwidth_svg(&record, record.ceilings.as_ref()))
        .map_err(|e| format!("cannot write {}: {e}", svg.display()))?;
    eprintln!("autotune: plot {}", svg.display());
    Ok(record)
}

/// What a run shows as it goes: a progress bar, one tick per candidate, on a terminal; else
/// (a log) one line per case when it is done. It also sums the phases' times.
struct Reporter {
    bar: Option<ProgressBar>,
    cases: usize,
    done: usize,
    timings: Timings,
    /// The phases of the case under way, for its log line.
    case_timings: Timings,
}

impl Reporter {
    fn println(&self, line: String) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }
}

impl Observer for Reporter {
    fn case_started(&mut self, case: &Case, _candidates: usize) {
        self.case_timings = Timings::default();
        if let Some(bar) = &self.bar {
            bar.set_message(case.key().to_string());
        }
    }

    fn candidate_done(&mut self, _case: &Case, candidate: &CandidateRecord) {
        if let Outcome::Disqualified { reason } = &candidate.outcome {
            self.println(format!("  disqualified {}: {reason}", candidate.name));
        }
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    fn phase_done(&mut self, case: &Case, phase: Phase, took: Duration) {
        self.timings.phase_done(case, phase, took);
        self.case_timings.phase_done(case, phase, took);
    }

    fn case_done(&mut self, case: &Case, entry: &EntryRecord, took: Duration) {
        self.done += 1;
        if self.bar.is_none() {
            eprintln!(
                "{}",
                case_line(self.done, self.cases, case, entry, took, &self.case_timings)
            );
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    if let Some(path) = &args.report {
        let record = report(path)?;
        if let Some(dir) = &args.machine_code {
            for line in autotune::machine_code::report(&record, &args.arch, dir)? {
                println!("{line}");
            }
            eprintln!("autotune: machine code of the winners in {}", dir.display());
        }
        return Ok(());
    }
    if let (Some(from), Some(into)) = (&args.merge, &args.into) {
        return merge(from, into);
    }
    let shapes = args
        .config
        .iter()
        .map(codegen::model::from_config_path)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let opt_in = OptIn::parse(&args.opt_in)?;
    let cases = select_shapes(&args.model, &shapes, &args.only, args.quick, opt_in)
        .map_err(|e| e.to_string())?;
    let gpu = Arc::new(Gpu::open(args.device).map_err(|e| e.to_string())?);
    let info = gpu.info().clone();
    let nvrtc = codegen::nvrtc::version().map_err(|e| e.to_string())?;
    let nvrtc = format!("{}.{}", nvrtc.0, nvrtc.1);
    let meta = RecordMeta::current(&info, nvrtc, candidate_checksum(opt_in));
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
    let mut timings = Timings::default();
    let started = Instant::now();
    let (ceiling_bytes, ceiling_reps) = if args.quick {
        (256 << 20, 10)
    } else {
        (1 << 30, 20)
    };
    let probe_jit =
        runtime::jit::Jit::with_default_cache(gpu.clone()).map_err(|e| e.to_string())?;
    let ceilings = runtime::ceilings::measure(&probe_jit, ceiling_bytes, ceiling_reps)
        .map_err(|e| format!("measuring the ceilings: {e}"))?;
    timings.add(Phase::Ceilings, started.elapsed());
    eprintln!(
        "autotune: ceilings: pinned copy {:.1} GB/s, mapped read {:.1} GB/s, HBM copy {:.1} GB/s",
        ceilings.pinned_copy_gbps, ceilings.mapped_read_gbps, ceilings.hbm_copy_gbps
    );
    if let Some(warning) = ceilings.mapped_read_warning() {
        eprintln!("autotune: warning: {warning}");
    }
    let mut settings = if args.quick {
        Settings::quick()
    } else {
        Settings::full()
    };
    if let Some(reps) = args.reps {
        settings = settings.with_max_reps(reps);
    }
    let total: usize = cases.iter().map(|c| enumerate(c).len()).sum();
    let mut bench = GpuBench::new(gpu.clone(), ceilings.clone())?;
    bench.set_plan_source(args.plan_inputs);
    // Whether a scan case is timed writing its peaks follows the select the step runs: one
    // tuned in this run, else the one of the record the runtime reads now (a run of the scans
    // alone, `--only scan`, then times them as the step under that record runs them).
    if let Some(record) = runtime::tuning::record_for(&info) {
        for entry in record
            .entries
            .iter()
            .filter(|e| e.key.subject == Subject::Kernel(TunedFamily::Select))
        {
            bench.adopt(entry);
        }
    }
    // Every candidate's kernel, in the order the cases need them, on all cores but the one
    // that runs the cases meanwhile: a case alone has too few kernels to fill the cores, and
    // the cases' CPU work (reference stores, comparisons) need not wait for the compiler.
    let specs = run_specs(&cases);
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .saturating_sub(1)
        .max(1);
    eprintln!(
        "autotune: {} cases, {total} candidates; loading their {} kernels on {threads} threads \
         while the cases run",
        cases.len(),
        specs.len(),
    );
    let compiling = bench.preload_in_background(specs, threads);
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::new(total as u64);
        if let Ok(style) = ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} candidates, ETA {eta} {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.enable_steady_tick(Duration::from_millis(500));
        bar
    });
    let mut record = TuningRecord::new(meta);
    let mut observer = Reporter {
        bar,
        cases: cases.len(),
        done: 0,
        timings,
        case_timings: Timings::default(),
    };
    for case in &cases {
        let entry = tune_case(&mut bench, case, &settings, &mut observer);
        bench.adopt(&entry);
        record.insert(entry);
    }
    if let Some(bar) = &observer.bar {
        bar.finish_and_clear();
    }
    // The cases needed every kernel, so the set is loaded by now: this only collects the time.
    let compiled = compiling
        .join()
        .map_err(|_| "the thread loading the kernels panicked".to_string())?;
    observer.timings.add(Phase::Compile, compiled);
    eprintln!(
        "autotune: the kernels were all loaded {:.1} s into the cases",
        compiled.as_secs_f64()
    );
    record.ceilings = Some(ceilings.clone());
    println!("{}", summary_table(&record));
    let (merged, kept) = merge_into(&path, record).map_err(|e| e.to_string())?;
    if !kept.is_empty() {
        eprintln!(
            "autotune: kept {} entries of a fuller grid already in the record over this run's \
             (run without --quick to re-time them): {}",
            kept.len(),
            kept.join(", ")
        );
    }
    let svg = path.with_extension("svg");
    std::fs::write(&svg, bandwidth_svg(&merged, Some(&ceilings)))
        .map_err(|e| format!("cannot write {}: {e}", svg.display()))?;
    eprintln!(
        "autotune: record {} ({} entries), plot {}",
        path.display(),
        merged.entries.len(),
        svg.display()
    );
    if args.timings {
        eprintln!(
            "autotune: {:.1} s in all\n{}",
            started.elapsed().as_secs_f64(),
            observer.timings.summary()
        );
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_inputs_are_synthetic_unless_asked_otherwise() {
        let args = Args::try_parse_from(["autotune"]).unwrap();
        assert_eq!(args.plan_inputs, PlanSource::Synthetic);
        let args = Args::try_parse_from(["autotune", "--plan-inputs", "random"]).unwrap();
        assert_eq!(args.plan_inputs, PlanSource::Random);
        let bad = Args::try_parse_from(["autotune", "--plan-inputs", "real"]).unwrap_err();
        assert!(bad.to_string().contains("synthetic"), "{bad}");
        assert!(bad.to_string().contains("random"), "{bad}");
    }
}
