//! The select family: names, validation, rendering of every stage, launch plan and buffer sizes.

mod family_checks;

use codegen::spec::select::{
    SelectParam, SelectPlan, SelectSpec, SelectStage, CANDIDATES_PER_K, COMPACT_STATE_WORDS,
    ONEPASS_TARGET_BLOCKS, STATE_WORDS,
};
use codegen::spec::{Family, SelectAlgorithm};
use family_checks::{assert_compiles, assert_compiles_for, assert_renders, grid4};
use serde_json::json;

fn base() -> SelectSpec {
    SelectSpec {
        group: 4,
        k_max: 512,
        threads: 256,
        items_per_thread: 16,
        algorithm: SelectAlgorithm::Radix,
        coarse_floor: false,
        owned_tiles: false,
    }
}

fn compact() -> SelectSpec {
    SelectSpec {
        algorithm: SelectAlgorithm::Compact,
        ..base()
    }
}

fn onepass() -> SelectSpec {
    SelectSpec {
        algorithm: SelectAlgorithm::Onepass,
        ..base()
    }
}

fn fused() -> SelectSpec {
    SelectSpec {
        algorithm: SelectAlgorithm::Fused,
        ..base()
    }
}

/// Every variant of every cell (the one-read variant where its buffer holds `k_max`), the
/// peaks ones also with the coarse floor.
fn grid() -> Vec<SelectSpec> {
    grid4(
        &[1, 2, 3, 4, 5, 6, 7, 8],
        &[1, 128, 4096],
        &[32, 256, 1024],
        &[1, 16, 32],
        |group, k_max, threads, items_per_thread| SelectSpec {
            group,
            k_max,
            threads,
            items_per_thread,
            algorithm: SelectAlgorithm::Radix,
            owned_tiles: false,
            coarse_floor: false,
        },
    )
    .into_iter()
    .flat_map(|spec| SelectAlgorithm::ALL.map(|algorithm| SelectSpec { algorithm, ..spec }))
    .flat_map(|spec| {
        let coarse = SelectSpec {
            coarse_floor: true,
            ..spec
        };
        std::iter::once(spec).chain(spec.algorithm.peaks().then_some(coarse))
    })
    .flat_map(|spec| {
        let owned = SelectSpec {
            owned_tiles: true,
            ..spec
        };
        std::iter::once(spec).chain(spec.algorithm.owns_tiles().then_some(owned))
    })
    .filter(|spec| spec.validate().is_ok())
    .collect()
}

family_checks::family_tests! {
    base: base(),
    grid: grid(),
    alternatives: [
        ("group", json!(7)),
        ("k_max", json!(4096)),
        ("threads", json!(512)),
        ("items_per_thread", json!(8)),
        ("algorithm", json!("compact")),
    ],
    bad_fields: [
        ("group", json!(0)),
        ("k_max", json!(0)),
        ("k_max", json!(4097)),
        ("threads", json!(1000)),
        ("items_per_thread", json!(0)),
        ("items_per_thread", json!(33)),
    ],
}

#[test]
fn the_name_spells_the_fields() {
    assert_eq!(base().kernel_name(), "fathom_select_g4_k512_t256_i16");
    assert_eq!(
        base().entry(SelectStage::Hist(2)),
        "fathom_select_g4_k512_t256_i16_hist"
    );
    assert_eq!(
        compact().kernel_name(),
        "fathom_select_g4_k512_t256_i16_compact"
    );
    assert_eq!(
        compact().entry(SelectStage::Filter(1)),
        "fathom_select_g4_k512_t256_i16_compact_filter"
    );
    assert_eq!(
        onepass().entry(SelectStage::Chunk),
        "fathom_select_g4_k512_t256_i16_onepass_chunk"
    );
    assert_eq!(
        onepass().entry(SelectStage::Final),
        "fathom_select_g4_k512_t256_i16_onepass_final"
    );
    assert_eq!(
        fused().entry(SelectStage::Chunk),
        "fathom_select_g4_k512_t256_i16_fused_chunk"
    );
}

#[test]
fn the_algorithm_is_spelled_as_in_names_and_records() {
    for algorithm in SelectAlgorithm::ALL {
        let spelled = serde_json::to_value(algorithm).unwrap();
        assert_eq!(spelled, json!(algorithm.as_str()));
        let spec = SelectSpec {
            algorithm,
            ..base()
        };
        let name = spec.kernel_name();
        match algorithm {
            SelectAlgorithm::Radix => assert!(name.ends_with("_i16"), "{name}"),
            _ => assert!(
                name.ends_with(&format!("_{}", algorithm.as_str())),
                "{name}"
            ),
        }
    }
}

#[test]
fn a_spec_without_the_algorithm_field_is_the_plain_select() {
    let json = json!({"group": 4, "k_max": 512, "threads": 256, "items_per_thread": 16});
    let spec: SelectSpec = serde_json::from_value(json).unwrap();
    assert_eq!(spec, base());
}

/// The coarse floor (`coarse_floor`): the peaks selects take it, with `_cf` after the
/// algorithm's suffix and the same stages and plan; every other algorithm is refused, naming
/// the field and the algorithms that take it.
#[test]
fn the_coarse_floor_is_named_and_only_for_the_peaks_selects() {
    let takers = [
        SelectAlgorithm::Peaks,
        SelectAlgorithm::PeaksHead,
        SelectAlgorithm::ScanPeaks,
        SelectAlgorithm::ScanPeaksHead,
    ];
    for algorithm in SelectAlgorithm::ALL {
        let plain = SelectSpec {
            algorithm,
            ..base()
        };
        let coarse = SelectSpec {
            coarse_floor: true,
            ..plain
        };
        assert_eq!(algorithm.peaks(), takers.contains(&algorithm));
        if algorithm.peaks() {
            coarse.validate().unwrap();
            assert_eq!(coarse.kernel_name(), format!("{}_cf", plain.kernel_name()));
            assert_eq!(
                coarse.entry(SelectStage::Chunk),
                format!("{}_cf_chunk", plain.kernel_name())
            );
            assert_eq!(coarse.stages(), plain.stages());
            assert_eq!(
                coarse.plan(2, 8, 1 << 20, 512).unwrap(),
                plain.plan(2, 8, 1 << 20, 512).unwrap()
            );
            let source = codegen::render::render(&coarse).unwrap();
            let plain_source = codegen::render::render(&plain).unwrap();
            assert!(source.contains("return max(prefix, 1u);"));
            assert!(!plain_source.contains("return max(prefix, 1u);"));
            assert!(!plain_source.contains("coarse_floor"));
        } else {
            let err = coarse.validate().unwrap_err();
            assert_eq!((err.family, err.field), ("select", "coarse_floor"));
            assert!(err.got.contains(algorithm.as_str()), "{err}");
            for taker in takers {
                assert!(err.allowed.contains(taker.as_str()), "{err}");
            }
            assert!(matches!(
                codegen::render::render(&coarse),
                Err(codegen::render::RenderError::Spec(_))
            ));
        }
    }
}

/// Specs written before the coarse floor (no such field) read as without it, and a spec
/// without it is written as before; with it, it round-trips.
#[test]
fn the_coarse_floor_is_false_when_absent_and_written_only_when_true() {
    let json = json!({"group": 4, "k_max": 512, "threads": 256, "items_per_thread": 16,
                      "algorithm": "scan_peaks"});
    let spec: SelectSpec = serde_json::from_value(json.clone()).unwrap();
    assert!(!spec.coarse_floor);
    assert_eq!(serde_json::to_value(spec).unwrap(), json);
    let coarse = SelectSpec {
        coarse_floor: true,
        ..spec
    };
    let written = serde_json::to_value(coarse).unwrap();
    assert_eq!(written["coarse_floor"], json!(true));
    assert_eq!(
        serde_json::from_value::<SelectSpec>(written).unwrap(),
        coarse
    );
    let mut explicit = json;
    explicit["coarse_floor"] = json!(false);
    assert_eq!(
        serde_json::from_value::<SelectSpec>(explicit).unwrap(),
        spec
    );
}

/// Owned tiles (`owned_tiles`): the two peaks selects that stream the scores take them, with
/// `_ot` after the name (after `_cf`) and the same stages and plan; every other algorithm is
/// refused, naming the field and the two. Absent, false; written only when true.
#[test]
fn owned_tiles_are_named_and_only_for_the_streaming_peaks_selects() {
    let takers = [SelectAlgorithm::Peaks, SelectAlgorithm::PeaksHead];
    for algorithm in SelectAlgorithm::ALL {
        for coarse_floor in [false, algorithm.peaks()] {
            let plain = SelectSpec {
                algorithm,
                coarse_floor,
                ..base()
            };
            let owned = SelectSpec {
                owned_tiles: true,
                ..plain
            };
            assert_eq!(algorithm.owns_tiles(), takers.contains(&algorithm));
            if algorithm.owns_tiles() {
                owned.validate().unwrap();
                assert_eq!(owned.kernel_name(), format!("{}_ot", plain.kernel_name()));
                assert_eq!(owned.stages(), plain.stages());
                assert_eq!(
                    owned.plan(2, 8, 1 << 20, 512).unwrap(),
                    plain.plan(2, 8, 1 << 20, 512).unwrap()
                );
                let source = codegen::render::render(&owned).unwrap();
                let plain_source = codegen::render::render(&plain).unwrap();
                assert!(source.contains("owned_peak("));
                assert!(!plain_source.contains("owned_peak("));
            } else {
                let err = owned.validate().unwrap_err();
                assert_eq!((err.family, err.field), ("select", "owned_tiles"));
                assert!(err.got.contains(algorithm.as_str()), "{err}");
                for taker in takers {
                    assert!(err.allowed.contains(taker.as_str()), "{err}");
                }
            }
        }
    }
    let json = json!({"group": 4, "k_max": 512, "threads": 256, "items_per_thread": 16,
                      "algorithm": "peaks_head", "coarse_floor": true});
    let spec: SelectSpec = serde_json::from_value(json.clone()).unwrap();
    assert!(!spec.owned_tiles);
    assert_eq!(serde_json::to_value(spec).unwrap(), json);
    let owned = SelectSpec {
        owned_tiles: true,
        ..spec
    };
    let written = serde_json::to_value(owned).unwrap();
    assert_eq!(written["owned_tiles"], json!(true));
    assert_eq!(
        serde_json::from_value::<SelectSpec>(written).unwrap(),
        owned
    );
}

#[test]
fn every_spec_of_the_grid_renders_every_stage() {
    for spec in grid() {
        let entries: Vec<String> = spec.stages().iter().map(|&s| spec.entry(s)).collect();
        let source = assert_renders(&spec, &entries);
        // Each variant renders its own template: only the compacting one has a filter, only
        // the one-read ones, the cluster ones and the resident one a chunk pass, only the fused
        // one arrival counters, only the cluster one a cluster barrier.
        assert_eq!(source.contains("_filter("), spec.compact());
        let cluster = spec.algorithm.cluster();
        assert_eq!(
            source.contains("_chunk("),
            spec.algorithm.one_read() || spec.algorithm.radix_blocks()
        );
        assert_eq!(source.contains("barrier.cluster"), cluster);
        assert_eq!(
            source.contains("arrivals"),
            spec.algorithm == SelectAlgorithm::Fused
        );
    }
}

#[test]
fn the_compact_order_is_the_plain_one_with_a_filter_after_the_first_two_picks() {
    assert_eq!(base().stages(), SelectStage::ORDER);
    assert_eq!(compact().stages(), SelectStage::COMPACT_ORDER);
    let without_filters: Vec<SelectStage> = SelectStage::COMPACT_ORDER
        .iter()
        .copied()
        .filter(|s| !matches!(s, SelectStage::Filter(_)))
        .collect();
    assert_eq!(without_filters, SelectStage::ORDER);
    let order = SelectStage::COMPACT_ORDER;
    for pass in [0u8, 1] {
        let pick = order
            .iter()
            .position(|&s| s == SelectStage::Pick(pass))
            .unwrap();
        assert_eq!(order[pick + 1], SelectStage::Filter(pass));
    }
    assert!(!order.contains(&SelectStage::Filter(2)));
    assert_eq!(SelectStage::Filter(1).pass(), Some(1));
    assert_eq!(SelectStage::Count.pass(), None);
}

/// `params` as the names of its parameters, for comparing with the lists the docs spell out.
fn spelled(spec: &SelectSpec, stage: SelectStage) -> String {
    let names: Vec<String> = spec
        .params(stage)
        .iter()
        .map(|p| format!("{p:?}"))
        .collect();
    names.join(" ")
}

/// The launch ABI of every variant, spelled out (not derived from each other, as `params`
/// derives the compacting variant's lists): `params` must not change it. The compacting
/// variant's chunked stages take the candidates and their runs after the state.
#[test]
fn the_parameter_lists_are_the_documented_ones() {
    let chunked = "Scores LdScores NTotal State";
    let with_candidates = "Scores LdScores NTotal State Candidates CandidateRuns";
    let lists = [
        (
            base(),
            SelectStage::Init,
            "NTotal K State SelCount NumKvHeads".into(),
        ),
        (
            base(),
            SelectStage::Hist(1),
            format!("{chunked} Pass NumKvHeads"),
        ),
        (base(), SelectStage::Pick(2), "State Pass".into()),
        (
            base(),
            SelectStage::Count,
            format!("{chunked} ChunkCounts NumKvHeads"),
        ),
        (
            base(),
            SelectStage::Write,
            format!("{chunked} ChunkCounts Sel K NumKvHeads"),
        ),
        (
            base(),
            SelectStage::Union,
            "Sel SelCount SelPos Uni UniCount Scratch K".into(),
        ),
        (
            compact(),
            SelectStage::Hist(0),
            format!("{with_candidates} Pass NumKvHeads"),
        ),
        (
            compact(),
            SelectStage::Filter(0),
            format!("{with_candidates} Pass NumKvHeads"),
        ),
        (
            compact(),
            SelectStage::Filter(1),
            format!("{with_candidates} Pass NumKvHeads"),
        ),
        (
            compact(),
            SelectStage::Count,
            format!("{with_candidates} ChunkCounts NumKvHeads"),
        ),
        (
            compact(),
            SelectStage::Write,
            format!("{with_candidates} ChunkCounts Sel K NumKvHeads"),
        ),
        (
            onepass(),
            SelectStage::Chunk,
            "Scores LdScores NTotal K Candidates ChunkCounts NumKvHeads".into(),
        ),
        (
            onepass(),
            SelectStage::Final,
            "Candidates ChunkCounts Chunks NTotal Sel SelCount K NumKvHeads".into(),
        ),
        (
            onepass(),
            SelectStage::Union,
            "Sel SelCount SelPos Uni UniCount Scratch K".into(),
        ),
        (
            fused(),
            SelectStage::Chunk,
            "Scores LdScores NTotal K Candidates ChunkCounts Arrivals Sel SelCount NumKvHeads"
                .into(),
        ),
        (
            fused(),
            SelectStage::Union,
            "Sel SelCount SelPos Uni UniCount Scratch K".into(),
        ),
    ];
    for (spec, stage, want) in lists {
        assert_eq!(spelled(&spec, stage), want, "{stage:?} of {spec:?}");
    }
}

/// The compacting variant's per-head stages and union are the plain ones, and only the
/// stages with a pass take one.
#[test]
fn the_compact_parameter_lists_add_the_candidates() {
    let (plain, spec) = (base(), compact());
    for stage in [SelectStage::Init, SelectStage::Pick(0), SelectStage::Union] {
        assert_eq!(spec.params(stage), plain.params(stage), "{stage:?}");
    }
    for &stage in spec.stages() {
        assert_eq!(
            spec.params(stage).contains(&SelectParam::Pass),
            stage.pass().is_some(),
            "{stage:?}"
        );
    }
}

/// Every parameter of every entry point appears in the rendered source, in order.
#[test]
fn the_rendered_signatures_follow_params() {
    let spelled = |p: SelectParam| match p {
        SelectParam::Scores => "scores",
        SelectParam::LdScores => "ld_scores",
        SelectParam::NTotal => "n_total",
        SelectParam::K => "int k",
        SelectParam::Pass => "int pass",
        SelectParam::Chunks => "int chunks",
        SelectParam::NumKvHeads => "num_kv_heads",
        SelectParam::State => "state",
        SelectParam::ChunkCounts => "chunk_counts",
        SelectParam::Candidates => "candidates",
        SelectParam::CandidateRuns => "candidate_runs",
        SelectParam::Scratch => "scratch",
        SelectParam::Sel => "int* __restrict__ sel",
        SelectParam::SelPos => "sel_pos",
        SelectParam::SelCount => "sel_count",
        SelectParam::Uni => "int* __restrict__ uni",
        SelectParam::UniCount => "uni_count",
        SelectParam::Arrivals => "arrivals",
        SelectParam::NStored => "n_stored",
        SelectParam::Peaks => "unsigned int* __restrict__ peaks",
        SelectParam::LdPeaks => "int ld_peaks",
    };
    let with = |algorithm| SelectSpec {
        algorithm,
        ..onepass()
    };
    for spec in [
        base(),
        compact(),
        onepass(),
        fused(),
        with(SelectAlgorithm::Peaks),
        with(SelectAlgorithm::PeaksHead),
        with(SelectAlgorithm::ScanPeaks),
        with(SelectAlgorithm::ScanPeaksHead),
    ] {
        let source = codegen::render::render(&spec).unwrap();
        for &stage in spec.stages() {
            let entry = format!("{}(", spec.entry(stage));
            let start = source.find(&entry).unwrap() + entry.len();
            let signature = &source[start..start + source[start..].find(')').unwrap()];
            let params: Vec<&str> = signature.split(',').map(str::trim).collect();
            let want = spec.params(stage);
            assert_eq!(params.len(), want.len(), "{stage:?}: {signature}");
            for (got, &p) in params.iter().zip(want) {
                assert!(got.contains(spelled(p)), "{stage:?}: {got} is not {p:?}");
            }
        }
    }
}

/// `plan` launches `order`, the per-head stages one block per query head, the union one per
/// KV head and the chunked stages `chunks` blocks per query head; all with 256 threads.
fn assert_launches(plan: &SelectPlan, order: &[SelectStage], kv: u64, heads: u64, chunks: u64) {
    let stages: Vec<SelectStage> = plan.launches.iter().map(|(s, _)| *s).collect();
    assert_eq!(stages, order);
    for (stage, launch) in &plan.launches {
        let expected = match stage {
            SelectStage::Init | SelectStage::Pick(_) | SelectStage::Final => [heads as u32, 1, 1],
            SelectStage::Union => [kv as u32, 1, 1],
            _ => [chunks as u32, heads as u32, 1],
        };
        assert_eq!(launch.grid, expected, "{stage:?}");
        assert_eq!(launch.block, [256, 1, 1]);
    }
}

#[test]
fn plan_at_a_million_tokens() {
    let spec = base();
    let (batch, kv_heads, n, k) = (4u64, 8u64, 1u64 << 20, 512u64);
    let plan = spec.plan(batch, kv_heads, n, k).unwrap();
    let heads = batch * kv_heads * 4;
    let chunks = n.div_ceil(256 * 16);
    assert_eq!(plan.chunks, chunks);
    // Many blocks per query head at 1M tokens.
    assert!(plan.chunks >= 128);
    assert_launches(&plan, &SelectStage::ORDER, batch * kv_heads, heads, chunks);
    assert_eq!(plan.state_words, heads * STATE_WORDS);
    assert_eq!(plan.chunk_count_words, heads * chunks * 2);
    assert_eq!(plan.sel_words, heads * (k + 36));
    assert_eq!(plan.scratch_words, heads * 2 * (k + 36));
    assert_eq!(plan.uni_words, batch * kv_heads * (4 * k + 36));
    assert_eq!(plan.candidate_words, 0);
    assert_eq!(plan.candidate_run_words, 0);
}

#[test]
fn compact_plan_at_a_million_tokens() {
    let spec = compact();
    let (batch, kv_heads, n, k) = (4u64, 8u64, 1u64 << 20, 512u64);
    let plan = spec.plan(batch, kv_heads, n, k).unwrap();
    let plain = base().plan(batch, kv_heads, n, k).unwrap();
    let heads = batch * kv_heads * 4;
    let chunks = n.div_ceil(256 * 16);
    assert_eq!(plan.chunks, chunks);
    assert_launches(
        &plan,
        &SelectStage::COMPACT_ORDER,
        batch * kv_heads,
        heads,
        chunks,
    );
    assert_eq!(spec.candidates(), CANDIDATES_PER_K * 512);
    assert_eq!(plan.state_words, heads * COMPACT_STATE_WORDS);
    assert_eq!(plan.candidate_words, heads * CANDIDATES_PER_K * 512 * 2);
    assert_eq!(plan.candidate_run_words, heads * chunks * 2);
    // The outputs and the other workspaces are the plain variant's.
    assert_eq!(plan.chunk_count_words, plain.chunk_count_words);
    assert_eq!(plan.scratch_words, plain.scratch_words);
    assert_eq!(plan.sel_words, plain.sel_words);
    assert_eq!(plan.uni_words, plain.uni_words);
    // The candidates do not depend on the run-time k or the context: they are sized by k_max.
    let small = spec.plan(1, 1, 100, 0).unwrap();
    assert_eq!(small.candidate_words, 4 * CANDIDATES_PER_K * 512 * 2);
    assert_eq!(small.candidate_run_words, 4 * 2);
}

#[test]
fn plan_refuses_sizes_it_cannot_serve() {
    let spec = base();
    assert_eq!(spec.plan(1, 8, 4096, 513).unwrap_err().field, "k");
    assert!(spec.plan(1, 8, 4096, 512).is_ok());
    assert!(spec.plan(1, 8, 0, 0).is_ok());
    assert!(spec.plan(0, 8, 4096, 16).is_err());
    assert!(spec.plan(10_000, 8, 4096, 16).is_err());
    for spec in [compact(), onepass(), fused()] {
        assert_eq!(spec.plan(1, 8, 4096, 513).unwrap_err().field, "k");
        assert!(spec.plan(0, 8, 4096, 16).is_err());
    }
}

#[test]
fn onepass_plan_at_a_million_and_at_32k_tokens() {
    let spec = onepass();
    let plain = base().plan(1, 8, 1 << 20, 512).unwrap();
    for (batch, n) in [(1u64, 1u64 << 20), (1, 1 << 15), (16, 1 << 17), (1, 100)] {
        let (kv_heads, k) = (8u64, 512u64);
        let plan = spec.plan(batch, kv_heads, n, k).unwrap();
        let heads = batch * kv_heads * 4;
        // At most ONEPASS_TARGET_BLOCKS in all (one wave), at least one per query head,
        // never more than one per chunk.
        let chunks = (ONEPASS_TARGET_BLOCKS / heads)
            .min(n.div_ceil(spec.chunk()))
            .max(1);
        assert!(heads * chunks <= ONEPASS_TARGET_BLOCKS.max(heads));
        assert_eq!(plan.chunks, chunks, "B={batch} n={n}");
        assert!(plan.chunks >= 1);
        assert_launches(
            &plan,
            &SelectStage::ONEPASS_ORDER,
            batch * kv_heads,
            heads,
            chunks,
        );
        // A slot of k candidates per block and its count; no radix state, no runs.
        assert_eq!(plan.candidate_words, heads * chunks * k * 2);
        assert_eq!(plan.chunk_count_words, heads * chunks);
        assert_eq!(plan.state_words, 0);
        assert_eq!(plan.candidate_run_words, 0);
        assert_eq!(plan.sel_words, heads * (k + 36));
        assert_eq!(plan.scratch_words, heads * 2 * (k + 36));
        assert_eq!(plan.uni_words, batch * kv_heads * (4 * k + 36));
    }
    assert_eq!(plan_arrivals(&spec), 0);
    // 32 query heads at 1M: 8 blocks each (256 in all), 4,096 candidates per head for _final.
    assert_eq!(spec.plan(1, 8, 1 << 20, 512).unwrap().chunks, 8);
    assert!(plain.chunks > 200);
    // k = 0 needs no candidates.
    assert_eq!(spec.plan(1, 8, 1 << 20, 0).unwrap().candidate_words, 0);
}

/// The block buffer is whole entries per thread, at least 4,096 candidates from 128 threads
/// on, and fits the static shared memory a block may declare with the rest of the block's
/// shared data; k_max above it is refused, naming k_max.
#[test]
fn the_onepass_buffer_holds_k_max_and_fits_shared_memory() {
    for threads in (32..=1024).step_by(32) {
        let spec = SelectSpec {
            threads,
            k_max: 1,
            ..onepass()
        };
        let buffer = spec.onepass_buffer();
        assert_eq!(buffer % u64::from(threads), 0);
        assert!(buffer / u64::from(threads) <= 32);
        if threads >= 128 {
            assert!(buffer >= 4096, "{threads}: {buffer}");
        }
        assert!(spec.onepass_shared_bytes() <= 48 * 1024, "{threads}");
        // The peaks form adds a bit per peak tile and a segment's list of hot tiles (whole
        // words of bits, at least one): it fits at every power of two, and where it does not
        // fit (some other thread counts) its spec is refused, naming the threads.
        let peaks = SelectSpec {
            algorithm: SelectAlgorithm::Peaks,
            ..spec
        };
        assert!(
            peaks.hot_tiles() >= 32 && peaks.hot_tiles().is_multiple_of(32),
            "{threads}"
        );
        assert!(peaks.onepass_shared_bytes() > spec.onepass_shared_bytes());
        let fits = peaks.onepass_shared_bytes() <= 48 * 1024;
        assert!(fits || !threads.is_power_of_two(), "{threads}");
        match peaks.validate() {
            Ok(()) => assert!(fits, "{threads}"),
            Err(e) => assert!(!fits && e.to_string().contains("threads"), "{threads}: {e}"),
        }
        let fits = SelectSpec {
            k_max: buffer.min(4096) as u32,
            ..spec
        };
        assert!(fits.validate().is_ok(), "{threads}");
        if buffer < 4096 {
            let over = SelectSpec {
                k_max: buffer as u32 + 1,
                ..spec
            };
            let e = over.validate().unwrap_err().to_string();
            assert!(
                e.contains("k_max") && e.contains(&buffer.to_string()),
                "{e}"
            );
        }
    }
}

/// The cluster selects hold their histograms (max(2048, k_max) entries) at most 32 entries a
/// thread: fewer threads are refused, naming the field and the least thread count that fits;
/// from there to 1,024 every thread count fits, at any items per thread, in 48 KiB.
#[test]
fn cluster_selects_refuse_too_few_threads_and_fit_the_rest() {
    for algorithm in [SelectAlgorithm::Cluster, SelectAlgorithm::ScanPeaksCluster] {
        for (k_max, least) in [(1, 64), (2048, 64), (3000, 96), (4096, 128)] {
            let spec = |threads| SelectSpec {
                group: 4,
                k_max,
                threads,
                items_per_thread: 32,
                owned_tiles: false,
                algorithm,
                coarse_floor: false,
            };
            for threads in (32..=1024).step_by(32) {
                let spec = spec(threads);
                if threads < least {
                    let e = spec.validate().unwrap_err().to_string();
                    assert!(
                        e.contains("threads") && e.contains(&format!("at least {least}")),
                        "{e}"
                    );
                } else {
                    assert!(spec.validate().is_ok(), "{}", spec.kernel_name());
                    assert!(spec.cluster_buffer() >= 2048.max(u64::from(k_max)));
                    assert!(spec.cluster_shared_bytes() <= 48 * 1024);
                }
            }
        }
    }
}

#[test]
fn a_sampled_grid_compiles_without_warnings() {
    let samples = [
        (7, 512, 256, 16),
        (1, 1, 32, 1),
        (8, 4096, 1024, 32),
        (4, 128, 512, 8),
    ];
    for (group, k_max, threads, items_per_thread) in samples {
        for algorithm in SelectAlgorithm::ALL {
            let spec = SelectSpec {
                group,
                k_max,
                threads,
                owned_tiles: false,
                items_per_thread,
                algorithm,
                coarse_floor: false,
            };
            if spec.validate().is_err() {
                // The one-read buffer of 32 threads holds 1,024 candidates; the cluster and
                // resident selects' histograms are more than 32 entries a thread of 32.
                assert!(
                    (algorithm.one_read() && k_max > 1024)
                        || (algorithm.radix_blocks() && threads == 32)
                );
                continue;
            }
            let entries: Vec<String> = spec.stages().iter().map(|&s| spec.entry(s)).collect();
            if algorithm.cluster() {
                // Thread-block clusters are Hopper's: NVRTC says so for the A100.
                assert_compiles_for(&spec, &entries, &["sm_90"]);
                let source = codegen::render::render(&spec).unwrap();
                let err = codegen::nvrtc::compile(&source, "cluster.cu", "sm_80", &[])
                    .expect_err("no clusters before sm_90")
                    .to_string();
                assert!(err.contains("__cluster_dims__ is not supported"), "{err}");
            } else {
                assert_compiles(&spec, &entries);
            }
        }
    }
}

fn plan_arrivals(spec: &SelectSpec) -> u64 {
    spec.plan(2, 8, 1 << 15, 512).unwrap().arrival_words
}

/// The fused variant plans the one-read variant's grid and slots, without `_final`, and one
/// arrival counter per query head.
#[test]
fn fused_plan_is_the_onepass_plan_without_final() {
    for (batch, n) in [(1u64, 1u64 << 20), (1, 1 << 15), (16, 1 << 17), (1, 100)] {
        let (kv_heads, k) = (8u64, 512u64);
        let one = onepass().plan(batch, kv_heads, n, k).unwrap();
        let plan = fused().plan(batch, kv_heads, n, k).unwrap();
        let heads = batch * kv_heads * 4;
        assert_launches(
            &plan,
            &SelectStage::FUSED_ORDER,
            batch * kv_heads,
            heads,
            one.chunks,
        );
        assert_eq!(plan.arrival_words, heads, "B={batch} n={n}");
        let without = |p: &codegen::spec::select::SelectPlan| {
            let mut p = p.clone();
            p.launches.retain(|(s, _)| *s != SelectStage::Final);
            p.arrival_words = 0;
            p
        };
        assert_eq!(without(&plan), without(&one), "B={batch} n={n}");
    }
    assert_eq!(plan_arrivals(&fused()), 2 * 8 * 4);
}
