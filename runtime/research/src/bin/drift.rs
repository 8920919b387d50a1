//! `fathom-drift`: issue #8 item 5, recall@k over a long generation whose keys drift away from
//! the prefill's, for `fathom(48)`, `fathom(92)` and `pariskv(100)`, on the f64 reference.
//!
//! Prints a table on stdout, writes the JSON (settings, seed, rows) to `--out` (default
//! `bench/results/drift-<date>-<commit>.json`) and an SVG plot of recall@k over the decode steps
//! beside it. The scenario is described in [`research::drift`], the drift in
//! [`reference::drift`].

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use research::drift::{run, DriftArm, DriftConfig, DriftReport, DriftRow, Sigma2, PROFILE_WINDOW};
use research::plot::{line_chart_svg, Chart, Series};
use research::provenance::ResultNaming;
use serde_json::json;

/// Recall@k over a long generation with drifting keys (qwen3-8b head shape: D = 128, G = 4).
#[derive(Parser, Debug)]
#[command(name = "fathom-drift")]
struct Args {
    /// Prefill tokens N.
    #[arg(long, default_value_t = 8192)]
    prefill: usize,
    /// Decode steps T (one appended token per KV head each).
    #[arg(long, default_value_t = 4000)]
    steps: usize,
    /// Evaluate every this many decode steps (from step 0, and the last step).
    #[arg(long, default_value_t = 100)]
    every: usize,
    /// KV heads (each runs the whole scenario on its own streams).
    #[arg(long, default_value_t = 2)]
    kv_heads: usize,
    /// Top-k of the fathom arms' recall (pariskv(100) uses its own k = 100).
    #[arg(long, default_value_t = 100)]
    k: usize,
    /// Seed of the prefill (§11) and of the drift.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Radians every plane of the key basis has turned by at the last step (0..=π).
    #[arg(long, default_value_t = std::f64::consts::FRAC_PI_4)]
    rotation: f64,
    /// Also measure fathom(48) and fathom(92) with σ² re-measured over every token so far.
    #[arg(long)]
    live_sigma2: bool,
    /// Worker threads. Default: every core.
    #[arg(long)]
    threads: Option<usize>,
    /// The JSON result (the SVG goes beside it). Default:
    /// bench/results/drift-DATE-COMMIT.json of the workspace.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    result: ResultNaming,
}

fn main() -> ExitCode {
    match run_program(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fathom-drift: {e}");
            ExitCode::FAILURE
        }
    }
}

fn config(args: &Args) -> DriftConfig {
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let mut config = DriftConfig::new(threads);
    config.drift.prefill.n = args.prefill;
    config.drift.prefill.kv_heads = args.kv_heads;
    config.drift.prefill.seed = args.seed;
    config.drift.steps = args.steps;
    config.drift.rotation = args.rotation;
    config.every = args.every;
    config.k = args.k;
    if args.live_sigma2 {
        for bits in [48.0, 92.0] {
            config.arms.push(DriftArm::Fathom {
                bits,
                sigma2: Sigma2::Live,
            });
        }
    }
    config
}

fn run_program(args: Args) -> Result<(), Box<dyn Error>> {
    let config = config(&args);
    let started = std::time::Instant::now();
    let report = run(&config)?;
    let seconds = started.elapsed().as_secs_f64();
    print_table(&config, &report, seconds);
    if args.result.no_json {
        return Ok(());
    }
    let commit = args.result.commit();
    let date = args.result.date();
    let out = args.out.unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../bench/results")
            .join(format!("drift-{date}-{commit}.json"))
    });
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let s = &config.drift.prefill;
    let value = json!({
        "commit": commit,
        "date": date,
        "seconds": seconds,
        "threads": config.threads,
        "seed": s.seed,
        "settings": {
            "describe": config.drift.describe(),
            "prefill_tokens": s.n,
            "decode_steps": config.drift.steps,
            "rotation_rad": config.drift.rotation,
            "every": config.every,
            "k": config.k,
            "kv_heads": s.kv_heads,
            "head_dim": s.head_dim,
            "group": s.group,
            "block": config.block.tokens(),
            "scale_sigma": s.scale_sigma,
            "outlier_channels": s.outlier_channels,
            "outlier_factor": s.outlier_factor,
            "mean_factor": s.mean_factor,
            "rope_base": s.rope_base,
            "logit_std": s.logit_std,
        },
        "drift_note": "decode step t of T has progress lambda = t/(T-1), theta = lambda*pi/2. \
            Pre-RoPE channel scales: ln sigma_c = cos(theta) l0_c + sin(theta) l1_c + \
            ln(outlier_factor) ((1-lambda)[c in O0] + lambda [c in O1]), l1 and O1 an \
            independent second draw of the section 11 scales and outlier channels; means \
            mean_factor sigma_c (cos(theta) m0_c + sin(theta) m1_c); the key basis turns by \
            lambda*rotation in each of D/2 random orthonormal planes; key = \
            RoPE(R (mu + sigma z), N + t), queries drawn the same way at the same step and \
            scaled to logit_std over the keys so far. See reference::drift.",
        "sigma2_note": "fathom arms without /live-sigma2 use sigma^2 measured once on the \
            prefill's N keys (never updated); /live-sigma2 re-measures it over every token \
            so far at each evaluated step",
        "recall_note": "recall@k per query head against the exact top-k of f64 scores over \
            the tokens top-k chooses from (SINK..n-LOCAL: sink and local window excluded), \
            averaged over query heads and KV heads; pariskv selects once per query group \
            (group-mean query) and is scored against each head's oracle; fathom's k is the \
            same as pariskv(100)'s",
        "profile_note": format!(
            "profile_distance: total-variation distance between the channel-variance profile \
             of the last {PROFILE_WINDOW} keys and the prefill's (0 same, 1 disjoint)"
        ),
        "report": report,
    });
    std::fs::write(&out, serde_json::to_string_pretty(&value)? + "\n")?;
    let svg_path = out.with_extension("svg");
    std::fs::write(&svg_path, svg(&config, &report))?;
    println!("\nwrote {} and {}", out.display(), svg_path.display());
    Ok(())
}

fn svg(config: &DriftConfig, report: &DriftReport) -> String {
    let s = &config.drift.prefill;
    let chart = Chart {
        title: format!(
            "recall@k over {} decode steps after a {}-token prefill, drifting keys",
            config.drift.steps, s.n
        ),
        subtitle: format!(
            "seed {}, D={}, G={}, {} KV heads, k={}, rotation {:.3} rad; fathom σ² from the prefill",
            s.seed, s.head_dim, s.group, s.kv_heads, config.k, config.drift.rotation
        ),
        x_label: "decode step".into(),
        y_label: "recall@k".into(),
        y_range: Some((0.0, 1.0)),
    };
    let series: Vec<Series> = report
        .arms
        .iter()
        .enumerate()
        .map(|(a, label)| Series {
            label: label.clone(),
            points: report
                .rows
                .iter()
                .map(|r| (r.step as f64, r.recall[a]))
                .collect(),
        })
        .collect();
    line_chart_svg(&chart, &series)
}

fn print_table(config: &DriftConfig, report: &DriftReport, seconds: f64) {
    println!("{}", config.drift.describe());
    println!(
        "every {} steps, k = {} (fathom) / own k (pariskv); fathom σ² from the prefill unless \
         /live-sigma2; {seconds:.1} s on {} threads\n",
        config.every, config.k, config.threads
    );
    print!(
        "{:>6} {:>7} {:>6} {:>6} {:>6}",
        "step", "tokens", "λ", "dist", "late"
    );
    for label in &report.arms {
        print!(" {label:>24}");
    }
    println!();
    for row in &report.rows {
        print!(
            "{:>6} {:>7} {:>6.3} {:>6.3} {:>6.3}",
            row.step, row.tokens, row.progress, row.profile_distance, row.oracle_decode_share
        );
        for r in &row.recall {
            print!(" {r:>24.3}");
        }
        println!();
    }
    println!(
        "\ndist: variance-profile distance of the last {PROFILE_WINDOW} keys to the prefill's; \
         late: share of the oracle's top-k appended during decode"
    );
    let rows = &report.rows;
    let w = (rows.len() / 8).max(1);
    if rows.is_empty() {
        return;
    }
    let (head, tail) = (&rows[..w], &rows[rows.len() - w..]);
    let avg = |rows: &[DriftRow], f: &dyn Fn(&DriftRow) -> f64| {
        rows.iter().map(f).sum::<f64>() / rows.len() as f64
    };
    println!(
        "\nmean over the first / last {w} evaluated steps (steps {}..={} / {}..={}):",
        head[0].step,
        head[w - 1].step,
        tail[0].step,
        tail[w - 1].step
    );
    println!(
        "  {:<26} {:>15} {:>17} {:>20}",
        "arm", "recall@k", "attention error", "mean-query recall"
    );
    for (a, label) in report.arms.iter().enumerate() {
        let own = match (
            rows[0].mean_query_recall[a],
            rows[rows.len() - 1].mean_query_recall[a],
        ) {
            (Some(_), Some(_)) => format!(
                "{:.3} → {:.3}",
                avg(head, &|r| r.mean_query_recall[a].unwrap_or(f64::NAN)),
                avg(tail, &|r| r.mean_query_recall[a].unwrap_or(f64::NAN))
            ),
            _ => "-".into(),
        };
        println!(
            "  {label:<26} {:>6.3} → {:>6.3} {:>7.3} → {:>7.3} {own:>20}",
            avg(head, &|r| r.recall[a]),
            avg(tail, &|r| r.recall[a]),
            avg(head, &|r| r.error[a]),
            avg(tail, &|r| r.error[a]),
        );
    }
}
