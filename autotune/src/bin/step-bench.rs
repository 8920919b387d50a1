//! `step-bench`: the SPEC §9 decode-step benchmark (issue #6) on the GPU: every method,
//! context, batch and placement of a preset, all layers per step, with the floor, the ratio to
//! sparq(32), fidelity and recall; a table on stdout, a JSON record and two SVG plots under
//! `--out`, and the targets.
//!
//! `cargo run --release -p autotune --bin step-bench -- --model qwen3-8b --commit $(git rev-parse --short HEAD)`

use std::path::Path;
use std::process::ExitCode;

use autotune::stepbench::args::{Args, Options};
use autotune::stepbench::figures::fill_ratios;
use autotune::stepbench::plots::{fidelity_vs_bits, time_vs_context};
use autotune::stepbench::record::{file_stem, Header, Record, Row};
use autotune::stepbench::run::run;
use autotune::stepbench::table::table;
use autotune::stepbench::targets::verdicts;
use clap::Parser;

/// The record of `rows` with ratios and targets filled in.
fn record(header: &Header, rows: &[Row], largest: usize) -> Record {
    let mut rows = rows.to_vec();
    fill_ratios(&mut rows);
    let targets = verdicts(&rows, largest, header.layers)
        .into_iter()
        .map(|v| (v.target, v.outcome))
        .collect();
    Record {
        header: header.clone(),
        rows,
        targets,
    }
}

/// Writes the JSON and the plots; returns the JSON path.
fn write(dir: &Path, record: &Record, largest: usize) -> Result<String, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let h = &record.header;
    let stem = file_stem(&h.gpu, &h.date, &h.commit);
    // A run away from a runtime default does not overwrite the default run's files: each
    // option that differs adds its suffix, in this order.
    let default_tiles = runtime::tuning::Tiles::default();
    let suffixes = [
        // K/V rows other than the store's default (`--kv-rows`).
        (
            h.kv_rows != runtime::store::StoreConfig::DEFAULT_KV_ROWS.as_str(),
            format!("-kv{}", h.kv_rows),
        ),
        // The ParisKV query over other blocks a head (`--pariskv-query-blocks`).
        (
            h.pariskv_query_blocks != default_tiles.pariskv_query_blocks,
            format!("-pkq{}", h.pariskv_query_blocks),
        ),
        // The tail on a second stream (`--overlap-tail`).
        (h.overlap_tail, "-overlaptail".to_string()),
        // The tail in the oracle's launch (`--tail-in-oracle`).
        (!h.tail_in_plan, "-tailoracle".to_string()),
        // The plan's run tables from batched loads (`--plan-batched-runs`).
        (h.plan_batched_runs, "-planrb".to_string()),
        // The plan's run tables shared among blocks (`--plan-run-blocks N`).
        (
            h.plan_run_blocks.is_some(),
            format!("-planrt{}", h.plan_run_blocks.unwrap_or(1)),
        ),
        // The plane scan's blocks a segment (`--scan-stripes N`).
        (
            h.scan_stripes.is_some(),
            format!("-scanstripes{}", h.scan_stripes.unwrap_or(0)),
        ),
        // The plane scan's spec grid (`--scan-spec-grid`; with `--scan-stripes` the stripes
        // name the file).
        (
            !h.scan_one_wave && h.scan_stripes.is_none(),
            "-scanspecgrid".to_string(),
        ),
        // Each run-table entry written by one lane (`--plan-unpaired-runs`; batched loads,
        // `-planrb`, write them so too).
        (
            !h.plan_paired_runs && !h.plan_batched_runs,
            "-planunpaired".to_string(),
        ),
        // Fathom's water line found directly (`--plan-direct-line`).
        (h.plan_direct_line, "-plandl".to_string()),
        // Attention's splits merged in a cluster (`--attention-cluster-merge`).
        (h.attention_cluster_merge, "-attncm".to_string()),
        // Attention's rows prefetched into L2 (`--attention-prefetch`).
        (h.attention_prefetch_rows, "-attnpf".to_string()),
        // The peaks selects' floor from all three passes (`--select-full-floor`).
        (!h.select_coarse_floor, "-selfull".to_string()),
        // The peaks selects' tiles owned by threads (`--select-owned-tiles`).
        (h.select_owned_tiles, "-selot".to_string()),
        // The one-block selects as the resident select (`--select-resident`).
        (h.select_resident, "-selres".to_string()),
        // The KV heads in groups (`--head-groups N`).
        (h.head_groups != 1, format!("-hg{}", h.head_groups)),
    ];
    let stem = suffixes
        .iter()
        .filter(|(differs, _)| *differs)
        .fold(stem, |stem, (_, suffix)| stem + suffix);
    let json = serde_json::to_string_pretty(record).map_err(|e| e.to_string())?;
    let path = dir.join(format!("{stem}.json"));
    std::fs::write(&path, json).map_err(|e| format!("writing {}: {e}", path.display()))?;
    let mut placements: Vec<&str> = Vec::new();
    for r in &record.rows {
        if !placements.contains(&r.placement.as_str()) {
            placements.push(&r.placement);
        }
    }
    for p in placements {
        let title = format!(
            "{} {}: GPU time per decode step (batch 1, {p})",
            h.model, h.gpu
        );
        let svg = time_vs_context(&record.rows, p, 1, &title);
        let file = dir.join(format!("{stem}-time-{p}.svg"));
        std::fs::write(&file, svg).map_err(|e| format!("writing {}: {e}", file.display()))?;
    }
    let title = format!("{}: error vs bits read at {} tokens", h.model, largest);
    let file = dir.join(format!("{stem}-fidelity.svg"));
    std::fs::write(&file, fidelity_vs_bits(&record.rows, largest, &title))
        .map_err(|e| format!("writing {}: {e}", file.display()))?;
    Ok(path.display().to_string())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let options = match Options::from_args(&args, std::env::var("FATHOM_COMMIT").ok()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("step-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let (dir, largest) = (options.out.clone(), options.max_context());
    let mut partial = |header: &Header, rows: &[Row]| {
        if let Err(e) = write(&dir, &record(header, rows, largest), largest) {
            eprintln!("step-bench: {e}");
        }
    };
    let finish = |header: &Header, rows: &[Row]| {
        let record = record(header, rows, largest);
        print!("{}", table(&record.rows));
        println!("targets (batch 1):");
        for (target, outcome) in &record.targets {
            println!("  {target}: {outcome}");
        }
        match write(&dir, &record, largest) {
            Ok(path) => {
                println!("record: {path} (plots beside it)");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("step-bench: {e}");
                ExitCode::FAILURE
            }
        }
    };
    match run(options, &mut partial, finish) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("step-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
