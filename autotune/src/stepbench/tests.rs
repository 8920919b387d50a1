//! GPU-free tests of the benchmark: arguments, figures, record, plots, targets, table
//! composition, data and the reference comparison.

use clap::Parser;
use codegen::model::preset;
use codegen::spec::{KvRows, Placement};
use reference::metrics::bytes_per_step;
use reference::plans::Method;
use reference::store::BlockSize;
use reference::synthetic::{generate_head, SyntheticHead, SyntheticSettings};
use runtime::step::launches::WorkspaceSizes;
use runtime::step::{HostStepOutput, OutputLayout};

use super::args::{context_label, parse_context, parse_methods, Args, ArgsError, Options};
use super::data;
use super::figures::{
    fill_ratios, floor_ms, group_bytes, median, pariskv_index_bytes, recall, recall_k, steps_within,
};
use super::plots::{fidelity_vs_bits, pareto_front, time_vs_context};
use super::record::{date_of, file_stem, gpu_slug, Record, Row};
use super::reference::{compare, context_truth, ContextTruth};
use super::stores::{compose, histograms, per_head, SlotIndex, SlotTables};
use super::targets::verdicts;

fn options(cli: &[&str]) -> Result<Options, ArgsError> {
    let mut argv = vec!["step-bench"];
    argv.extend(cli);
    Options::from_args(&Args::try_parse_from(argv).expect("clap accepts it"), None)
}

#[test]
fn default_grid_is_the_issue_grid() {
    let o = options(&[]).unwrap();
    assert_eq!(o.contexts, vec![32 << 10, 128 << 10, 256 << 10, 1 << 20]);
    assert_eq!(o.batches, vec![1, 4]);
    assert_eq!(o.placements, vec![Placement::Host, Placement::Hbm]);
    let names: Vec<String> = o.methods.iter().map(Method::to_string).collect();
    assert_eq!(
        names,
        [
            "fathom(48)",
            "fathom(64)",
            "fathom(92)",
            "sparq(16)",
            "sparq(32)",
            "double_sparsity(32)",
            "loki(32)",
            "thumbnail",
            "landmark",
            "oracle",
            "dense",
            "pariskv(100)",
            "pariskv(512)"
        ]
    );
    assert_eq!((o.steps, o.commit.as_str()), (20, "unknown"));
    let q = options(&["--quick"]).unwrap();
    assert_eq!(
        (q.contexts, q.batches, q.steps),
        (vec![32 << 10, 128 << 10], vec![1], 5)
    );
    let q = options(&["--quick", "--steps", "7", "--batch", "4,1,4"]).unwrap();
    assert_eq!((q.batches, q.steps), (vec![1, 4], 7));
}

#[test]
fn bad_arguments_are_typed_errors() {
    assert!(matches!(
        options(&["--contexts", "33"]),
        Err(ArgsError::Context { .. })
    ));
    assert!(matches!(
        options(&["--contexts", ""]),
        Err(ArgsError::Empty { flag: "contexts" })
    ));
    assert!(matches!(
        options(&["--batch", "0"]),
        Err(ArgsError::Batch { .. })
    ));
    assert!(matches!(
        options(&["--placement", "disk"]),
        Err(ArgsError::Placement { .. })
    ));
    assert!(matches!(
        options(&["--methods", "fathom(48),sparq"]),
        Err(ArgsError::Method(_))
    ));
    assert!(matches!(options(&["--steps", "0"]), Err(ArgsError::Steps)));
    assert!(matches!(
        options(&["--slots", "0"]),
        Err(ArgsError::Slots(0))
    ));
    assert!(matches!(
        options(&["--cell-seconds=-1"]),
        Err(ArgsError::CellSeconds(_))
    ));
    let msg = options(&["--placement", "disk"]).unwrap_err().to_string();
    assert!(msg.contains("host, hbm"), "{msg}");
}

#[test]
fn contexts_and_methods_parse() {
    assert_eq!(parse_context("32k").unwrap(), 32768);
    assert_eq!(parse_context("1M").unwrap(), 1 << 20);
    assert_eq!(parse_context("4096").unwrap(), 4096);
    assert!(parse_context("1g").is_err());
    assert!(parse_context("0").is_err());
    assert_eq!(context_label(1 << 20), "1m");
    assert_eq!(context_label(256 << 10), "256k");
    let m = parse_methods(" fathom(48), sparq(32) ,dense,fathom(48)").unwrap();
    assert_eq!(
        m,
        vec![
            Method::Fathom { bits: 48.0 },
            Method::Sparq { r: 32 },
            Method::Dense
        ]
    );
    assert_eq!(m[0].to_string(), "fathom(48)");
    let o = Options::from_args(
        &Args::parse_from(["x", "--contexts", "128k,32k,32k"]),
        Some("abc1234".into()),
    )
    .unwrap();
    assert_eq!(
        (o.contexts, o.commit.as_str()),
        (vec![32768, 131072], "abc1234")
    );
    let o = Options::from_args(
        &Args::parse_from(["x", "--commit", "def"]),
        Some("abc".into()),
    )
    .unwrap();
    assert_eq!(o.commit, "def");
}

fn row(method: &str, context: usize, placement: &str, gpu_ms: f64) -> Row {
    Row {
        status: "ok".into(),
        gpu_ms: Some(gpu_ms),
        ..Row::not_run("qwen3-8b", method, context, 1, placement, String::new())
    }
}

#[test]
fn figures() {
    assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(3.0));
    assert_eq!(median(&[]), None);
    assert_eq!(median(&[1.0, f64::NAN]), None);
    // 55 GB at 55 GB/s is one second.
    assert!((floor_ms(55_000_000_000, 55.0).unwrap() - 1000.0).abs() < 1e-9);
    assert_eq!(floor_ms(1, 0.0), None);
    assert_eq!(steps_within(20, 0.01, 3.0, 3), 20);
    assert_eq!(steps_within(20, 0.5, 3.0, 3), 6);
    assert_eq!(steps_within(20, 10.0, 3.0, 3), 3);
    assert_eq!(steps_within(2, 10.0, 3.0, 3), 2);
    assert_eq!(recall(&[1, 5, 9], &[5, 9, 11, 12]), Some(0.5));
    assert_eq!(recall(&[1], &[]), None);

    let mut rows = vec![
        row("fathom(48)", 1 << 20, "host", 10.0),
        row("sparq(32)", 1 << 20, "host", 25.0),
        row("fathom(48)", 1 << 20, "hbm", 2.0),
    ];
    fill_ratios(&mut rows);
    assert_eq!(rows[0].ratio_to_sparq32, Some(2.5));
    assert_eq!(rows[1].ratio_to_sparq32, Some(1.0));
    assert_eq!(rows[2].ratio_to_sparq32, None);
}

#[test]
fn bytes_per_group() {
    let (n, d, b) = (4096, 128, BlockSize::B64);
    let depths: Vec<u8> = (0..d).map(|c| (c % 5) as u8).collect();
    let plane = group_bytes(Method::Sparq { r: 32 }, Some(&depths), n, d, b, 100);
    assert_eq!(plane, bytes_per_step(&depths, n, b, 100));
    let dense = group_bytes(Method::Dense, None, n, d, b, 0);
    assert_eq!(dense.total(), n * d * 4);
    let oracle = group_bytes(Method::Oracle, None, n, d, b, 10);
    assert_eq!(oracle.total(), n * d * 2 + 10 * d * 4);
    let landmark = group_bytes(Method::Landmark, None, n, d, b, 0);
    assert_eq!(landmark.total(), n / 8 * d * 2);
    let sizes = WorkspaceSizes {
        rows: 10,
        sel: 3,
        depths: 5,
        scores: 2,
        ..WorkspaceSizes::default()
    };
    assert_eq!(sizes.bytes(), 10 * 4 + 3 * 8 + 5 + 2 * 4);
    // The compacting select's candidates and their runs count too.
    let compact = WorkspaceSizes {
        select_candidates: 6,
        select_candidate_runs: 7,
        ..sizes
    };
    assert_eq!(compact.bytes(), sizes.bytes() + (6 + 7) * 4);
}

#[test]
fn record_round_trips_and_names() {
    let mut r = row("fathom(48)", 32768, "host", 1.5);
    r.fidelity = Some(0.01);
    r.bytes_per_step = Some(123);
    let json = serde_json::to_value(&r).unwrap();
    for field in [
        "model",
        "method",
        "bits",
        "context",
        "batch",
        "placement",
        "gpu_ms",
        "wall_ms",
        "floor_ms",
        "ratio_to_sparq32",
        "bytes_per_step",
        "fidelity",
        "recall",
        "recall_k",
        "status",
    ] {
        assert!(json.get(field).is_some(), "row lacks {field}");
    }
    assert_eq!(json["method"], "fathom(48)");
    let back: Row = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, r);
    // A record written before `recall_k` existed still reads, without one.
    let mut old = json;
    old.as_object_mut().unwrap().remove("recall_k");
    let back: Row = serde_json::from_value(old).unwrap();
    assert_eq!(back.recall_k, None);
    assert_eq!(gpu_slug("NVIDIA H200"), "h200");
    assert_eq!(gpu_slug("NVIDIA A100-SXM4-80GB"), "a100-sxm4-80gb");
    assert_eq!(gpu_slug("  "), "gpu");
    assert_eq!(date_of(0), "1970-01-01");
    assert_eq!(date_of(951_782_400), "2000-02-29");
    assert_eq!(date_of(1_764_374_400), "2025-11-29");
    assert_eq!(
        file_stem("NVIDIA H200", "2026-11-29", "abc/12"),
        "step-h200-2026-11-29-abc-12"
    );
}

#[test]
fn record_header_round_trips() {
    let text = r#"{"header":{"gpu":"g","compute_capability":"9.0","driver_cuda":"13.0","nvrtc":"13.0",
      "commit":"c","date":"2026-01-01","date_unix":1,"model":"m","layers":36,"kv_heads":8,"group":4,
      "head_dim":128,"block":64,"segment_words":512,"k":"512","steps":20,"cell_seconds":3.0,
      "ceilings":{"pinned_copy_gbps":55.0,"mapped_read_gbps":50.0,"hbm_copy_gbps":4000.0,"bytes":1,"repetitions":2},
      "floor_rates":[["host","pinned copy",55.0]],
      "generator":{"describe":"d","seed":1,"slots":4,"tokens":2,"scale_sigma":0.5,"outlier_channels":4,
      "outlier_factor":10.0,"mean_factor":1.0,"rope_base":1e6,"sink_tokens":1,"sink_norm":8.0,"needles":4,
      "needle_norm":3.0,"logit_std":2.0,"calibration":"c"},"sample":"s"},
      "rows":[],"targets":[["t","met"]]}"#;
    let record: Record = serde_json::from_str(text).unwrap();
    let again: Record = serde_json::from_str(&serde_json::to_string(&record).unwrap()).unwrap();
    assert_eq!(record, again);
    assert_eq!(record.header.generator.logit_std, 2.0);
    // Options added since: their defaults in a record written before them.
    assert!(!record.header.plan_batched_runs);
    assert!(!record.header.select_coarse_floor);
    assert!(!record.header.select_owned_tiles);
    assert!(!record.header.plan_direct_line);
}

#[test]
fn plots() {
    let front = pareto_front(&[
        (48.0, 0.02),
        (64.0, 0.03),
        (136.0, 0.01),
        (30.0, 0.5),
        (136.0, 0.2),
    ]);
    assert_eq!(front, vec![(30.0, 0.5), (48.0, 0.02), (136.0, 0.01)]);
    let mut rows = vec![
        row("fathom(48)", 32768, "host", 1.0),
        row("fathom(48)", 1 << 20, "host", 20.0),
        row("sparq(32)", 32768, "host", 2.0),
        row("sparq(32)", 1 << 20, "hbm", 9.0),
    ];
    rows[1].bits = Some(48.0);
    rows[1].fidelity = Some(0.02);
    let svg = time_vs_context(&rows, "host", 1, "t <&>");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("fathom(48)") && svg.contains("sparq(32)"));
    assert!(svg.contains("t &lt;&amp;&gt;"));
    assert_eq!(
        svg.matches("<polyline").count(),
        1,
        "only fathom(48) has two host points"
    );
    let svg = fidelity_vs_bits(&rows, 1 << 20, "f");
    assert!(svg.contains("Pareto front") && svg.contains("fathom(48)"));
    assert!(
        !svg.contains("sparq(32)"),
        "sparq(32) has no fidelity at 1m"
    );
}

#[test]
fn targets() {
    let m = 1 << 20;
    let mut rows = vec![
        row("fathom(48)", m, "host", 10.0),
        row("sparq(32)", m, "host", 30.0),
        row("fathom(48)", 256 << 10, "host", 10.0),
        row("sparq(32)", 256 << 10, "host", 15.0),
        row("fathom(48)", m, "hbm", 1.0),
        row("sparq(32)", m, "hbm", 1.2),
        row("sparq(16)", m, "host", 11.0),
        row("fathom(92)", m, "host", 20.0),
        row("loki(32)", m, "host", 30.0),
    ];
    rows[0].floor_ms = Some(9.0);
    rows[0].bytes_per_step = Some(70);
    rows[6].bytes_per_step = Some(100);
    rows[0].fidelity = Some(0.01);
    rows[6].fidelity = Some(0.02);
    rows[7].fidelity = Some(0.005);
    rows[8].fidelity = Some(0.004);
    let v = verdicts(&rows, m, 36);
    let get = |prefix: &str| {
        v.iter()
            .find(|x| x.target.starts_with(prefix))
            .unwrap_or_else(|| panic!("no target {prefix}"))
            .outcome
            .clone()
    };
    assert!(get("host 1m: fathom(48) at least 2.3x").starts_with("met (3.00x)"));
    assert!(
        get("host 256k").starts_with("missed by 1.33x"),
        "{}",
        get("host 256k")
    );
    assert!(get("host 1m: fathom(48) within").starts_with("met"));
    assert!(get("hbm 1m: fathom(48) at least").starts_with("missed by 1.25x"));
    assert!(get("host 1m: fathom(48) reads").starts_with("met (30.0% fewer"));
    assert!(get("hbm 1m: fathom(48) reads").starts_with("not measured"));
    let f = get("host 1m: fathom(92)");
    assert!(
        f.starts_with("missed by 1.25x") && f.contains("loki(32)"),
        "{f}"
    );
    // Issue #15's sharper targets, after issue #6's: the same cells, other bounds.
    assert!(get("host 1m: fathom(48) at least 2.6x").starts_with("met (3.00x)"));
    assert!(
        v.iter()
            .any(|x| x.target
                == "host 1m: fathom(48) at least 2.6x faster than sparq(32) (issue #15)")
    );
    assert!(get("host 256k: fathom(48) at least 2.4x").starts_with("missed by 1.60x"));
    assert!(get("host 1m: fathom(48) within 1.1x").starts_with("missed by 1.01x (1.11x"));
    assert!(get("hbm 1m: fathom(48) at least 2x").starts_with("missed by 1.67x"));
    // 1.0 ms over 36 layers is 27.8 us a layer, under the 1M target's 100.
    assert!(get("hbm 1m: fathom(48) at most 100 us").starts_with("met (27.8 us a layer)"));
    assert!(get("hbm 32k: fathom(48) at most 30 us").starts_with("not measured"));
    rows.push(row("fathom(48)", 32 << 10, "hbm", 1.8));
    let v32 = verdicts(&rows, m, 36);
    let o = &v32
        .iter()
        .find(|x| x.target.starts_with("hbm 32k: fathom(48) at most 30 us"))
        .unwrap()
        .outcome;
    assert!(o.starts_with("missed by 1.67x (50.0 us a layer)"), "{o}");
    rows.pop();
    rows[0].gpu_ms = Some(12.0);
    let v = verdicts(&rows, m, 36);
    let o = &v
        .iter()
        .find(|x| x.target.starts_with("host 1m: fathom(48) reads"))
        .unwrap()
        .outcome;
    assert!(o.contains("time 1.09x"), "{o}");
    // A verdict on a cell timed over fewer steps than the protocol's 20 says so.
    let all_twenty =
        |v: &[super::targets::Verdict]| v.iter().all(|x| !x.outcome.contains("fewer than 20"));
    rows.iter_mut().for_each(|r| r.steps = 20);
    assert!(all_twenty(&verdicts(&rows, m, 36)));
    rows[1].steps = 7;
    let v = verdicts(&rows, m, 36);
    let o = &v
        .iter()
        .find(|x| x.target.starts_with("host 1m: fathom(48) at least"))
        .unwrap()
        .outcome;
    assert!(
        o.ends_with("[medians of 20, 7 steps: fewer than 20]"),
        "{o}"
    );
}

#[test]
fn tables_compose_per_batch_element() {
    let slot = |base: u64| SlotTables {
        seg_words: per_head(&[base, base + 1, base + 2, base + 3], 2, 2),
        seg_scales: per_head(&[base + 10, base + 11, base + 12, base + 13], 2, 2),
        k_rows: vec![base + 20, base + 21],
        v_rows: vec![base + 30, base + 31],
        landmarks: Some(vec![base + 40, base + 41]),
        pariskv: Some(SlotIndex {
            ids: vec![base + 50, base + 51],
            codes: vec![base + 60, base + 61],
            weights: vec![base + 70, base + 71],
        }),
        kv_rows: KvRows::Separate,
    };
    let (a, b) = (slot(100), slot(200));
    let t = compose(&[&a, &b], 1).unwrap();
    assert_eq!(t.seg_words, vec![100, 102, 200, 202]);
    assert_eq!(t.seg_scales, vec![110, 112, 210, 212]);
    assert_eq!(t.k_rows, vec![120, 121, 220, 221]);
    assert_eq!(t.landmarks, Some(vec![140, 141, 240, 241]));
    let index = t.pariskv.expect("both slots have the index");
    assert_eq!(index.ids, vec![150, 151, 250, 251]);
    assert_eq!(index.codes, vec![160, 161, 260, 261]);
    assert_eq!(index.weights, vec![170, 171, 270, 271]);
    let t = compose(&[&b], 2).unwrap();
    assert_eq!(t.seg_words, vec![200, 201, 202, 203]);
    assert!(compose(&[&a], 3).is_none());
    // Slots of one layout compose with it; two layouts do not compose.
    let adjacent = SlotTables {
        kv_rows: KvRows::Adjacent,
        ..slot(300)
    };
    assert_eq!(compose(&[&adjacent], 1).unwrap().kv_rows, KvRows::Adjacent);
    assert_eq!(compose(&[&a, &b], 1).unwrap().kv_rows, KvRows::Separate);
    assert!(compose(&[&a, &adjacent], 1).is_none());
    let no_landmarks = SlotTables {
        landmarks: None,
        ..slot(0)
    };
    assert_eq!(compose(&[&a, &no_landmarks], 1).unwrap().landmarks, None);
    let no_index = SlotTables {
        pariskv: None,
        ..slot(0)
    };
    assert_eq!(compose(&[&no_index, &a], 1).unwrap().pariskv, None);
    // A slot downloaded from a store with room for a larger batch holds only its own heads;
    // one that lacks a head's entry cannot be composed.
    let short = SlotTables {
        pariskv: Some(SlotIndex {
            ids: vec![1],
            codes: vec![2],
            weights: vec![3],
        }),
        ..slot(0)
    };
    assert!(compose(&[&short], 1).is_none());
}

#[test]
fn prefix_histograms_count_each_subspace() {
    // Two subspaces, three tokens: ids (0, 5), (0, 255), (7, 5).
    let ids = [0u8, 5, 0, 255, 7, 5];
    let h = histograms(&ids, 2);
    assert_eq!(h.len(), 2 * 256);
    assert_eq!((h[0], h[7], h[256 + 5], h[256 + 255]), (2, 1, 2, 1));
    assert_eq!(h.iter().sum::<u32>(), 6);
    // A prefix counts only its tokens.
    assert_eq!(histograms(&ids[..2], 2).iter().sum::<u32>(), 2);
}

#[test]
fn pariskv_bytes_follow_the_reference() {
    use reference::pariskv::{
        pariskv_step, PariskvIndex, PariskvInput, CENTROIDS, HISTOGRAM_BIN_BYTES,
    };
    let (n, d) = (6_000, 64);
    let keys: Vec<half::bf16> = (0..n * d)
        .map(|i| half::bf16::from_f32(((i * 7919) % 201) as f32 / 100.0 - 1.0))
        .collect();
    let index = PariskvIndex::build(&keys, d).unwrap();
    let queries = vec![(0..d).map(|c| (c % 5) as f64 - 2.0).collect::<Vec<f64>>()];
    let step = pariskv_step(
        &PariskvInput {
            index: &index,
            keys: &keys,
            values: &keys,
            queries: &queries,
            n_total: n,
        },
        100,
        0.125,
    )
    .unwrap();
    let want = step.bytes.histograms + step.bytes.ids + step.bytes.rerank;
    assert_eq!(pariskv_index_bytes(n, d), want);
    let b = group_bytes(Method::Pariskv { k: 100 }, None, n, d, BlockSize::B64, 140);
    assert_eq!(b.planes, want);
    assert_eq!(b.rows, step.bytes.rows * 140 / step.selection.union.len());
    // N_r = 5964 retrievable tokens, C = ceil(.25 N_r) = 1491 candidates at D = 64.
    assert_eq!(
        pariskv_index_bytes(n, d),
        5_964 * 8 + 1_491 * (32 + 16) + 8 * CENTROIDS * HISTOGRAM_BIN_BYTES
    );
    // Below the sink and window nothing is retrievable: only the histograms.
    assert_eq!(pariskv_index_bytes(30, d), 8 * 256 * 4);
}

fn small_settings(n: usize) -> SyntheticSettings {
    SyntheticSettings {
        seed: 3,
        n,
        head_dim: 32,
        kv_heads: 2,
        group: 2,
        ..SyntheticSettings::default()
    }
}

#[test]
fn data_slots_queries_and_calibration() {
    let shape = preset("qwen3-8b").unwrap();
    let s = data::settings(&shape, 10, 2, 4096);
    assert_eq!(
        (s.seed, s.n, s.kv_heads, s.group, s.head_dim),
        (12, 4096, 8, 4, 128)
    );

    let settings = vec![
        small_settings(2048),
        SyntheticSettings {
            seed: 4,
            ..small_settings(2048)
        },
    ];
    let count = std::sync::atomic::AtomicUsize::new(0);
    let slots = data::generate_slots(&settings, 3, &|| {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    })
    .unwrap();
    assert_eq!(count.into_inner(), 4);
    assert_eq!(slots[1][1], generate_head(&settings[1], 1).unwrap());
    assert_ne!(slots[0][0].keys, slots[1][0].keys);

    let head = &slots[0][0];
    let back = data::rope_shift(&data::rope_shift(&head.queries[0], -1000, 1e6), 1000, 1e6);
    for (a, b) in back.iter().zip(&head.queries[0]) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
    }
    assert_eq!(data::queries_at(head, 2048, 2048, 1e6), head.queries);
    let moved = data::queries_at(head, 2048, 1024, 1e6);
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm(&moved[0]) - norm(&head.queries[0])).abs() < 1e-4 * norm(&head.queries[0]));
    assert_ne!(moved[0], head.queries[0]);

    let cal = data::calibrate(head, &settings[0], 0, 0, 8).unwrap();
    assert_eq!(cal.sigma2.len(), 32);
    assert_eq!(cal.double_sparsity.channels().len(), 8);
    assert_eq!(cal.klt.head_dim(), 32);
}

/// Two KV heads of G = 2 at D = 32 from the §11 generator, their queries, and the truth of
/// their first 512 tokens at `k` (with `threads`).
fn small_truth(k: usize, threads: usize) -> (Vec<SyntheticHead>, Vec<Vec<Vec<f64>>>, ContextTruth) {
    let settings = small_settings(1024);
    let heads: Vec<_> = (0..2)
        .map(|h| generate_head(&settings, h).unwrap())
        .collect();
    let queries: Vec<Vec<Vec<f64>>> = heads.iter().map(|h| h.queries.clone()).collect();
    let truth = context_truth(
        &heads,
        &queries,
        512,
        k,
        1.0 / (SMALL_D as f64).sqrt(),
        threads,
    );
    (heads, queries, truth)
}

const SMALL_D: usize = 32;

/// A step's output for `truth` (k = `truth.k`): each query head selected the first `selected`
/// tokens of its truth, and its attention output is `out`.
fn output_selecting(truth: &ContextTruth, selected: usize, out: Vec<f32>) -> HostStepOutput {
    let layout = OutputLayout {
        batch: 1,
        kv_heads: 2,
        group: 2,
        head_dim: SMALL_D,
        k: truth.k,
        union: true,
    };
    let stride = layout.sel_stride();
    let mut output = HostStepOutput {
        layout,
        sel: vec![-1; 4 * stride],
        sel_pos: vec![0; 4 * stride],
        sel_count: vec![selected as i32; 4],
        uni: vec![0; 2 * layout.uni_stride()],
        uni_count: vec![0; 2],
        out,
    };
    for (i, t) in truth.queries.iter().enumerate() {
        for (j, &tok) in t.top_at(selected).iter().enumerate() {
            output.sel[i * stride + j] = tok as i32;
        }
    }
    output
}

#[test]
fn reference_comparison() {
    let (k, d) = (16, SMALL_D);
    let (heads, queries, truth) = small_truth(k, 3);
    assert_eq!(truth.queries.len(), 4);
    assert!(truth
        .queries
        .iter()
        .all(|t| t.top.len() == k && t.output.len() == d));
    // A step that got everything right: outputs of the truth, selections = top-k.
    let outputs = truth
        .queries
        .iter()
        .flat_map(|t| t.output.iter().map(|&x| x as f32))
        .collect();
    let mut out = output_selecting(&truth, k, outputs);
    let stride = out.layout.sel_stride();
    let (error, rec) = compare(&truth, &out, Some(k));
    assert!(error < 1e-6, "{error}");
    assert_eq!(rec, Some(1.0));
    // The truth is in rank order: each head's top is the exact top-k by score, descending.
    for (i, t) in truth.queries.iter().enumerate() {
        let (h, g) = (i / 2, i % 2);
        let q = &queries[h][g];
        let score =
            |tok: usize| reference::attention::dot_bf16(q, &heads[h].keys[tok * d..(tok + 1) * d]);
        assert!(t.top.windows(2).all(|w| score(w[0]) >= score(w[1])));
    }
    // Half the selection wrong and the outputs off.
    for i in 0..4 {
        for j in 0..k / 2 {
            out.sel[i * stride + j] = -1;
        }
    }
    out.out.iter_mut().for_each(|x| *x *= 1.5);
    let (error, rec) = compare(&truth, &out, Some(k));
    assert!((error - 0.5).abs() < 1e-3, "{error}");
    assert_eq!(rec, Some(0.5));
    assert_eq!(compare(&truth, &out, None).1, None);
}

/// A method that selects fewer tokens than the truth holds is measured at its own `k`: a
/// selection of exactly the top-`k'` has recall 1 at `k'`, and only `k'/k` at `k`.
#[test]
fn recall_is_measured_at_the_methods_own_k() {
    let (k, small) = (32, 8);
    let (_, _, truth) = small_truth(k, 2);
    assert_eq!(truth.k, k);
    for t in &truth.queries {
        assert_eq!(t.top_at(small), &t.top[..small]);
        assert_eq!(t.top_at(10 * k).len(), k);
    }
    let out = output_selecting(&truth, small, vec![0.0; 4 * SMALL_D]);
    assert_eq!(compare(&truth, &out, Some(small)).1, Some(1.0));
    let at_k = compare(&truth, &out, Some(k)).1.unwrap();
    assert!((at_k - small as f64 / k as f64).abs() < 1e-12, "{at_k}");
    // Which k each method's recall is at.
    assert_eq!(recall_k(Method::Pariskv { k: 100 }, 1 << 20), Some(100));
    assert_eq!(recall_k(Method::Oracle, 1 << 20), Some(512));
    assert_eq!(
        recall_k(Method::Fathom { bits: 48.0 }, 1 << 15),
        Some(reference::select::paper_k(1 << 15))
    );
    assert_eq!(recall_k(Method::Dense, 1 << 15), None);
}

#[test]
fn per_head_strides_by_the_views_segments_not_the_buffer() {
    use super::stores::per_head;
    // A store's table sized for 4 segments of 2 heads, viewed with one segment each.
    let flat = [10, 20, 0, 0, 0, 0, 0, 0];
    assert_eq!(per_head(&flat, 2, 1), vec![vec![10], vec![20]]);
    assert_eq!(per_head(&flat[..4], 2, 2), vec![vec![10, 20], vec![0, 0]]);
}

#[test]
fn only_the_reference_baselines_are_cut_short() {
    use super::figures::time_capped;
    use runtime::step::Method;
    assert!(time_capped(Method::Oracle) && time_capped(Method::Dense));
    for m in [
        "fathom(48)",
        "sparq(32)",
        "double_sparsity(32)",
        "loki(32)",
        "thumbnail",
        "landmark",
        "pariskv(100)",
    ] {
        let method: Method = m.parse().unwrap();
        assert!(!time_capped(method), "{m} must be timed over every step");
    }
}

#[test]
fn the_standing_batch_and_footprint_targets() {
    use super::targets::{FOOTPRINT_TARGET, STANDING_BATCH};
    let m = 1 << 20;
    let mut b16 = row("fathom(48)", 128 << 10, "host", 11.0);
    b16.batch = STANDING_BATCH;
    b16.floor_ms = Some(10.0);
    let mut one = row("fathom(48)", m, "host", 10.0);
    one.hbm_footprint_bytes = Some(FOOTPRINT_TARGET + (1 << 20));
    one.hbm_footprint = Some(vec![
        ("store tables".into(), 1 << 20),
        ("workspace scores".into(), FOOTPRINT_TARGET),
    ]);
    let mut rows = vec![b16, one];
    let get = |rows: &[Row], prefix: &str| {
        verdicts(rows, m, 36)
            .into_iter()
            .find(|x| x.target.starts_with(prefix))
            .unwrap_or_else(|| panic!("no target {prefix}"))
            .outcome
    };
    assert!(get(&rows, "host 128k, batch 16").starts_with("met (1.10x"));
    let o = get(&rows, "host 1m: HBM footprint");
    assert!(
        o.starts_with("missed by") && o.contains("workspace scores"),
        "{o}"
    );
    rows[1].hbm_footprint_bytes = Some(100 << 20);
    assert!(get(&rows, "host 1m: HBM footprint").starts_with("met (100.0 MiB"));
    rows[0].gpu_ms = Some(12.0);
    assert!(get(&rows, "host 128k, batch 16").starts_with("missed by 1.04x"));
    rows[0].batch = 1;
    assert!(get(&rows, "host 128k, batch 16").starts_with("not measured"));
}

#[test]
fn footprint_parts_scale_the_store_by_the_batch_not_the_workspace() {
    let store = [("a", 1), ("b", 2), ("c", 0), ("d", 10)];
    let workspace = [
        ("scores", 100),
        ("rows", 7),
        ("x", 0),
        ("y", 0),
        ("z", 0),
        ("w", 0),
        ("v", 0),
        ("u", 1),
    ];
    let parts = super::figures::footprint_parts(store, 4, workspace);
    let total: u64 = parts.iter().map(|p| p.1).sum();
    assert_eq!(total, 4 * 13 + 108);
    assert_eq!(parts[4], ("workspace scores".to_string(), 100));
}

#[test]
fn the_standing_cell_joins_runs_that_reach_it_and_not_others() {
    let o = options(&[]).unwrap();
    assert_eq!(o.standing.len(), 1);
    let (p, n, b, m) = &o.standing[0];
    assert_eq!((*p, *n, *b), (Placement::Host, 128 << 10, 16));
    let names: Vec<String> = m.iter().map(Method::to_string).collect();
    assert_eq!(names, ["fathom(48)", "sparq(32)"]);
    assert!(options(&["--no-standing"]).unwrap().standing.is_empty());
    assert!(options(&["--placement", "hbm"])
        .unwrap()
        .standing
        .is_empty());
    assert!(options(&["--contexts", "32k"]).unwrap().standing.is_empty());
    assert!(options(&["--batch", "16", "--contexts", "128k"])
        .unwrap()
        .standing
        .is_empty());
    assert!(options(&["--methods", "dense"])
        .unwrap()
        .standing
        .is_empty());
    let only = options(&["--methods", "sparq(32),dense"]).unwrap();
    assert_eq!(only.standing[0].3.len(), 1);
    assert_eq!(
        options(&["--host-memory", "vmm2m"]).unwrap().host_memory,
        runtime::store::HostMemory::Vmm2M
    );
    assert!(matches!(
        options(&["--host-memory", "huge"]),
        Err(ArgsError::HostMemory(_))
    ));
    assert_eq!(options(&[]).unwrap().kv_rows, KvRows::Adjacent);
    assert_eq!(
        options(&["--kv-rows", "separate"]).unwrap().kv_rows,
        KvRows::Separate
    );
    let bad = options(&["--kv-rows", "interleaved"]).unwrap_err();
    assert!(matches!(bad, ArgsError::KvRows(_)));
    assert!(
        bad.to_string().contains("--kv-rows") && bad.to_string().contains("adjacent"),
        "{bad}"
    );
    use codegen::spec::AttentionRows;
    assert_eq!(options(&[]).unwrap().attention_rows, AttentionRows::Store);
    assert_eq!(
        options(&["--attention-rows", "fetched"])
            .unwrap()
            .attention_rows,
        AttentionRows::Fetched
    );
    let bad = options(&["--attention-rows", "staged"]).unwrap_err();
    assert!(matches!(bad, ArgsError::AttentionRows(_)));
    assert!(
        bad.to_string().contains("--attention-rows") && bad.to_string().contains("store"),
        "{bad}"
    );
    // The ParisKV query's blocks a head: the runtime's default (16) unless asked; 0 is
    // refused by the parser.
    assert_eq!(options(&[]).unwrap().pariskv_query_blocks, 16);
    assert_eq!(
        options(&["--pariskv-query-blocks", "1"])
            .unwrap()
            .pariskv_query_blocks,
        1
    );
    let zero = Args::try_parse_from(["step-bench", "--pariskv-query-blocks", "0"]).unwrap_err();
    assert!(zero.to_string().contains("pariskv-query-blocks"), "{zero}");
    // The tail on a second stream: off unless asked.
    assert!(!options(&[]).unwrap().overlap_tail);
    assert!(options(&["--overlap-tail"]).unwrap().overlap_tail);
    assert_eq!(options(&[]).unwrap().head_groups, 1);
    assert_eq!(options(&["--head-groups", "4"]).unwrap().head_groups, 4);
    // The tail in the plan's launch: on unless asked otherwise.
    assert!(options(&[]).unwrap().tail_in_plan);
    assert!(!options(&["--tail-in-oracle"]).unwrap().tail_in_plan);
    assert!(!options(&[]).unwrap().plan_batched_runs);
    assert!(options(&["--plan-batched-runs"]).unwrap().plan_batched_runs);
    assert_eq!(options(&[]).unwrap().plan_run_blocks, None);
    // Run-table entries by lane pairs: on unless asked otherwise or with batched loads.
    assert!(options(&[]).unwrap().plan_paired_runs);
    assert!(!options(&["--plan-unpaired-runs"]).unwrap().plan_paired_runs);
    assert!(!options(&["--plan-batched-runs"]).unwrap().plan_paired_runs);
    assert!(!options(&[]).unwrap().attention_cluster_merge);
    assert!(!options(&[]).unwrap().attention_prefetch_rows);
    assert!(
        options(&["--attention-prefetch"])
            .unwrap()
            .attention_prefetch_rows
    );
    assert!(
        options(&["--attention-cluster-merge"])
            .unwrap()
            .attention_cluster_merge
    );
    assert!(
        options(&["--plan-run-blocks", "4"])
            .unwrap()
            .plan_paired_runs
    );
    assert_eq!(
        options(&["--plan-run-blocks", "4"])
            .unwrap()
            .plan_run_blocks,
        Some(4)
    );
    assert!(options(&["--plan-run-blocks", "1", "--plan-batched-runs"]).is_ok());
    // The scan's blocks a segment: the spec's unless asked; 0 refused by the parser (the upper
    // bound depends on the scan's tile: the step refuses it with a typed error).
    assert_eq!(options(&[]).unwrap().scan_stripes, None);
    assert_eq!(
        options(&["--scan-stripes", "7"]).unwrap().scan_stripes,
        Some(7)
    );
    assert!(Args::try_parse_from(["step-bench", "--scan-stripes", "0"]).is_err());
    // One wave: on unless the spec's grid is asked, and an explicit stripe count wins over it.
    assert!(options(&[]).unwrap().scan_one_wave);
    assert!(!options(&["--scan-spec-grid"]).unwrap().scan_one_wave);
    assert!(!options(&["--scan-stripes", "3"]).unwrap().scan_one_wave);
    for bad in ["0", "17"] {
        assert!(Args::try_parse_from(["step-bench", "--plan-run-blocks", bad]).is_err());
    }
    assert_eq!(
        options(&["--plan-run-blocks", "4", "--plan-batched-runs"]).unwrap_err(),
        ArgsError::PlanRuns(4)
    );
    // The peaks selects' coarse floor: on unless asked otherwise.
    assert!(options(&[]).unwrap().select_coarse_floor);
    assert!(
        !options(&["--select-full-floor"])
            .unwrap()
            .select_coarse_floor
    );
    // The plan's direct water line: off unless asked for.
    assert!(!options(&[]).unwrap().plan_direct_line);
    assert!(options(&["--plan-direct-line"]).unwrap().plan_direct_line);
    // Owned peak tiles: off unless asked for.
    assert!(!options(&[]).unwrap().select_owned_tiles);
    assert!(
        options(&["--select-owned-tiles"])
            .unwrap()
            .select_owned_tiles
    );
}
