//! `fathom-fidelity`: SPEC §9 fidelity and recall@k of every §4 method on the real SmolLM2
//! activations (§11), through the f64 reference step, and fathom's equal-error byte savings.
//!
//! Prints a table on stdout and writes `bench/results/fidelity-smollm2-<date>-<commit>.json`.
//! The split (what calibration sees, what is measured) is described in [`research::fidelity`].

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use reference::activations::{data_dir, Activations, SMOLLM2_CODE_8K};
use reference::select::paper_k;
use research::fidelity::{
    default_arms, equal_error, evaluate, ArmSummary, EqualError, FidelityConfig, FidelityReport,
    Reach, Split, FATHOM_BUDGETS,
};
use research::provenance::ResultNaming;
use serde_json::json;

/// Fidelity and recall@k per method and store basis on real activations.
#[derive(Parser, Debug)]
#[command(name = "fathom-fidelity")]
struct Args {
    /// The capture (safetensors, with its .json beside it). Default: the SmolLM2 code capture
    /// in the data directory ($FATHOM_DATA_DIR or shared/data).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Layers to evaluate, comma-separated. Default: every captured layer.
    #[arg(long, value_delimiter = ',')]
    layers: Vec<usize>,
    /// Evaluate every n-th position of the second half of the captured positions (ending at the
    /// last one).
    #[arg(long, default_value_t = 1)]
    stride: usize,
    /// Top-k per query head. Default: the paper's protocol for the context (`paper_k`).
    #[arg(long)]
    k: Option<usize>,
    /// Worker threads. Default: every core.
    #[arg(long)]
    threads: Option<usize>,
    /// Directory of the JSON result. Default: bench/results of the workspace.
    #[arg(long)]
    out_dir: Option<PathBuf>,
    #[command(flatten)]
    result: ResultNaming,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fathom-fidelity: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), Box<dyn Error>> {
    let path = args
        .data
        .unwrap_or_else(|| data_dir().join(SMOLLM2_CODE_8K));
    let acts = Activations::open(&path)?;
    let layer_ids = if args.layers.is_empty() {
        acts.layers().to_vec()
    } else {
        args.layers.clone()
    };
    let layers = layer_ids
        .iter()
        .map(|&l| acts.layer(l))
        .collect::<Result<Vec<_>, _>>()?;
    let queries = layers.first().map_or(0, |l| l.query_count());
    let split = Split::halves(acts.tokens(), queries, args.stride)?;
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let config = FidelityConfig {
        split,
        k: args.k.unwrap_or_else(|| paper_k(acts.tokens())),
        double_sparsity_r: 32,
        arms: default_arms(),
        threads,
    };
    let started = std::time::Instant::now();
    let report = evaluate(&layers, None, &config)?;
    let seconds = started.elapsed().as_secs_f64();
    let savings = savings(&report);
    print_table(&report, &savings, &path, seconds);
    if !args.result.no_json {
        let commit = args.result.commit();
        let date = args.result.date();
        let out_dir = args
            .out_dir
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/results"));
        std::fs::create_dir_all(&out_dir)?;
        let file = out_dir.join(format!("fidelity-smollm2-{date}-{commit}.json"));
        let value = json!({
            "data": path.file_name().map(|f| f.to_string_lossy().into_owned()),
            "commit": commit,
            "date": date,
            "threads": threads,
            "seconds": seconds,
            "split_note": "sigma^2, KLT basis and double_sparsity channels fitted per (layer, KV \
                head) on the keys of tokens 0..calibration_keys and the queries (all G heads) of \
                the captured indices calibration_queries; evaluated positions are other \
                captured indices. The calibration keys are part of every evaluated context \
                (one capture only).",
            "recall_note": "recall@k over the tokens top-k chooses from (sink and local window \
                excluded), per query head, against the oracle's exact-score top-k",
            "bytes_note": "per step per query group (one KV head of one layer): scan = planes + \
                fp16 scales (landmark: its fp16 means; oracle: 16 D bits/token); rows = bf16 K \
                and V of the union",
            "report": report,
            "equal_error": savings,
        });
        std::fs::write(&file, serde_json::to_string_pretty(&value)? + "\n")?;
        println!("\nwrote {}", file.display());
    }
    Ok(())
}

/// One baseline's equal-error fathom budgets (raw and KLT store) and the bytes they read
/// against `double_sparsity(32)` on the raw store.
#[derive(serde::Serialize)]
struct Saving {
    baseline: String,
    error: f64,
    raw: EqualError,
    klt: EqualError,
    /// `1 - fathom scan bytes / double_sparsity(32) scan bytes`, per fathom store.
    scan_saving_vs_ds32: [Option<f64>; 2],
    /// The same with winner rows counted.
    total_saving_vs_ds32: [Option<f64>; 2],
}

fn curve<'a>(report: &'a FidelityReport, suffix: &str) -> Vec<(f64, &'a ArmSummary)> {
    FATHOM_BUDGETS
        .iter()
        .filter_map(|&b| report.arm(&format!("fathom({b}){suffix}")).map(|s| (b, s)))
        .collect()
}

fn savings(report: &FidelityReport) -> Vec<Saving> {
    let (raw, klt) = (curve(report, ""), curve(report, "/klt"));
    let ds = report.arm("double_sparsity(32)");
    report
        .arms
        .iter()
        .filter(|a| !a.method.starts_with("fathom") && a.method != "dense")
        .map(|a| {
            let points = [equal_error(&raw, a.error), equal_error(&klt, a.error)];
            let saving = |bytes: &dyn Fn(&EqualError) -> Option<f64>, base: Option<f64>| {
                points.map(|p| Some(1.0 - bytes(&p)? / base?))
            };
            Saving {
                baseline: a.label.clone(),
                error: a.error,
                scan_saving_vs_ds32: saving(&|p| p.scan_bytes, ds.map(|d| d.scan_bytes)),
                total_saving_vs_ds32: saving(
                    &|p| p.total_bytes,
                    ds.map(|d| d.scan_bytes + d.row_bytes),
                ),
                raw: points[0],
                klt: points[1],
            }
        })
        .collect()
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.digits$}"))
}

fn budget(e: &EqualError) -> String {
    match e.reach {
        Reach::NotReached => "> 92".into(),
        Reach::AtMost => format!("<= {}", opt(e.budget, 0)),
        Reach::Interpolated => opt(e.budget, 1),
    }
}

fn percent(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{:+.0}%", -100.0 * v))
}

fn print_table(report: &FidelityReport, savings: &[Saving], path: &Path, seconds: f64) {
    let s = &report.split;
    println!(
        "fidelity on {}: layers {:?}, KV heads {:?}, {} positions {}..={}, k = {}",
        path.display(),
        report.layers,
        report.kv_heads,
        report.positions.len(),
        report.positions.first().unwrap_or(&0),
        report.positions.last().unwrap_or(&0),
        report.k
    );
    println!(
        "calibration: keys 0..{}, queries of captured indices {:?}; {seconds:.1} s\n",
        s.calibration_keys, s.calibration_queries
    );
    println!(
        "{:<24} {:>9} {:>11} {:>11} {:>9} {:>9}",
        "method", "bits/tok", "scan KB", "rows KB", "error", "recall@k"
    );
    for a in &report.arms {
        println!(
            "{:<24} {:>9} {:>11.1} {:>11.1} {:>9.4} {:>9}",
            a.label,
            opt(a.bits_per_token, 1),
            a.scan_bytes / 1024.0,
            a.row_bytes / 1024.0,
            a.error,
            opt(a.recall, 3)
        );
    }
    println!(
        "\nequal error: smallest fathom budget at each baseline's error, and its bytes against \
         double_sparsity(32) (scan bytes; scan + rows)"
    );
    println!(
        "{:<24} {:>8} {:>10} {:>9} {:>9} {:>10} {:>9} {:>9}",
        "baseline", "error", "B raw", "scan", "total", "B klt", "scan", "total"
    );
    for v in savings {
        println!(
            "{:<24} {:>8.4} {:>10} {:>9} {:>9} {:>10} {:>9} {:>9}",
            v.baseline,
            v.error,
            budget(&v.raw),
            percent(v.scan_saving_vs_ds32[0]),
            percent(v.total_saving_vs_ds32[0]),
            budget(&v.klt),
            percent(v.scan_saving_vs_ds32[1]),
            percent(v.total_saving_vs_ds32[1]),
        );
    }
}
