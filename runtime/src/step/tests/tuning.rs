//! What a tuning record changes in a plan: tiles, the transfer, the select and attention
//! variants.

use super::*;
use codegen::spec::select::CLUSTER_BLOCKS;

struct Record {
    scan: Option<Tile>,
    transfer: Option<Transfer>,
    everything: bool,
}

impl Tuning for Record {
    fn tile(&self, key: &TuneKey) -> Option<Tile> {
        match key.family {
            TunedFamily::Scan => self.scan,
            TunedFamily::Select if self.everything => {
                Some(Tile::select(512, 8, SelectAlgorithm::Radix))
            }
            TunedFamily::Attention if self.everything => Some(Tile::Attention {
                threads: 128,
                rows_per_warp: 2,
                splits: 1,
            }),
            _ if self.everything => Some(Tile::Threads(128)),
            _ => None,
        }
    }

    fn transfer(&self, _: usize, _: usize, _: u32) -> Option<Transfer> {
        self.transfer
    }
}

#[test]
fn tuning_records_set_tiles_and_the_transfer() {
    let s = shape(4, 10_000, Placement::Host);
    let record = Record {
        scan: Some(Tile::Scan {
            tile_words: 32,
            threads: 512,
            tensor_cores: false,
        }),
        transfer: Some(Transfer::CopyKernel),
        everything: false,
    };
    let plan = plan_of(s, Method::Thumbnail, None, 64, Some(&record)).unwrap();
    assert_eq!(plan.transfer, Some(Transfer::CopyKernel));
    let scan = plan.specs.scan.unwrap();
    assert_eq!((scan.tile_words, scan.threads), (32, 512));
    assert!(!plan.tuned, "select, fetch ... fell back to defaults");
    assert_eq!(
        plan.untuned,
        ["fetch", "attention", "plan", "gather", "oracle", "select"],
        "the lookups the record did not answer, in order"
    );
    // An asked transfer wins over the record.
    let fused = plan_of(
        s,
        Method::Thumbnail,
        Some(Transfer::Fused),
        64,
        Some(&record),
    )
    .unwrap();
    assert_eq!(fused.transfer, Some(Transfer::Fused));

    let full = Record {
        everything: true,
        transfer: Some(Transfer::Fused),
        ..record
    };
    let plan = plan_of(s, Method::Thumbnail, None, 64, Some(&full)).unwrap();
    assert!(plan.tuned);
    assert!(plan.untuned.is_empty());
    assert_eq!(plan.specs.select.unwrap().threads, 512);
    assert_eq!(plan.specs.attention.rows_per_warp, 2);
    assert_eq!(plan.specs.fetch.threads, 128);

    let wrong = Record {
        scan: Some(Tile::Threads(64)),
        transfer: None,
        everything: false,
    };
    assert!(matches!(
        plan_of(s, Method::Thumbnail, None, 64, Some(&wrong)),
        Err(StepError::Tuning { family: "scan", .. })
    ));
    // A tuned tile the segment cannot hold is refused by the spec's validation.
    let bad = Record {
        scan: Some(Tile::Scan {
            tile_words: 128,
            threads: 1024,
            tensor_cores: false,
        }),
        transfer: None,
        everything: false,
    };
    assert!(matches!(
        plan_of(s, Method::Thumbnail, None, 64, Some(&bad)),
        Err(StepError::Spec(e)) if e.field == "tile_words"
    ));
}

#[test]
fn default_scan_tiles_fit_small_segments() {
    assert_eq!(fit_scan_tile((64, 1024), 512), (64, 1024));
    assert_eq!(fit_scan_tile((64, 1024), 8), (8, 128));
    assert_eq!(fit_scan_tile((16, 256), 6), (6, 96));
    assert_eq!(fit_scan_tile((16, 256), 2), (2, 32));
    for s in [2, 4, 6, 8, 12, 64, 96, 512] {
        for tile in [(16, 256), (64, 1024)] {
            let (tile_words, threads) = fit_scan_tile(tile, s);
            let spec = codegen::spec::ScanSpec {
                segment_words: s,
                tile_words,
                threads,
                ..codegen::spec::ScanSpec::new(128, 4, Placement::Hbm)
            };
            spec.validate()
                .unwrap_or_else(|e| panic!("S = {s}, {tile:?}: {e}"));
        }
    }
}

struct Asked {
    keys: std::cell::RefCell<Vec<TuneKey>>,
}

impl Tuning for Asked {
    fn tile(&self, key: &TuneKey) -> Option<Tile> {
        self.keys.borrow_mut().push(*key);
        match key.family {
            TunedFamily::Select => Some(Tile::select(1024, 2, SelectAlgorithm::Radix)),
            TunedFamily::Attention => Some(Tile::Attention {
                threads: 512,
                rows_per_warp: 8,
                splits: 4,
            }),
            _ => None,
        }
    }

    fn transfer(&self, _: usize, _: usize, _: u32) -> Option<Transfer> {
        None
    }
}

#[test]
fn select_and_attention_winners_change_the_specs_and_their_launches() {
    let tokens = 100_000;
    for placement in [Placement::Hbm, Placement::Host] {
        let s = shape(4, tokens, placement);
        let method = Method::Fathom { bits: 48.0 };
        let untuned = plan_of(s, method, None, 64, None).unwrap();
        let record = Asked {
            keys: Default::default(),
        };
        let tuned = plan_of(s, method, None, 64, Some(&record)).unwrap();
        let (before, after) = (untuned.specs, tuned.specs);
        let defaults = fetched();
        let select = |p: &crate::step::LaunchPlan| p.specs.select.unwrap();
        assert_eq!(
            (select(&untuned).threads, select(&untuned).items_per_thread),
            defaults.select
        );
        assert_eq!(
            (select(&tuned).threads, select(&tuned).items_per_thread),
            (1024, 2)
        );
        assert_eq!(
            (before.attention.threads, before.attention.rows_per_warp),
            defaults.attention
        );
        assert_eq!(
            (after.attention.threads, after.attention.rows_per_warp),
            (512, 8)
        );
        // A split tile: four blocks a query head, and their partials and counters.
        assert_eq!((before.attention.splits, after.attention.splits), (1, 4));
        let query_heads = (s.batch * s.kv_heads * s.group) as u64;
        assert_eq!(
            (
                untuned.sizes.attention_partials,
                untuned.sizes.attention_arrivals
            ),
            (0, 0)
        );
        assert_eq!(
            (
                tuned.sizes.attention_partials as u64,
                tuned.sizes.attention_arrivals as u64
            ),
            (
                after.attention.partial_words(query_heads),
                after.attention.arrival_words(query_heads)
            )
        );
        assert!(tuned.sizes.attention_partials > 0);
        // Everything the record does not answer keeps its default.
        assert_eq!(after.fetch, before.fetch);
        assert_eq!(after.plan, before.plan);
        assert_eq!(after.oracle, before.oracle);
        assert!(!tuned.tuned);
        // The launches are built from the tuned specs: blocks, the chunked grids, entry names.
        let capacity = token_capacity(tokens) as u64;
        for op in &tuned.operations {
            let kernel = op.kernel.as_ref();
            match op.role {
                Role::Select(stage) => {
                    let k = kernel.unwrap();
                    assert_eq!(k.launch.block[0], 1024);
                    assert_eq!(k.entry, select(&tuned).entry(stage));
                    if matches!(stage, SelectStage::Hist(_) | SelectStage::Count) {
                        assert_eq!(u64::from(k.launch.grid[0]), capacity.div_ceil(2048));
                    }
                }
                Role::Attention => {
                    let k = kernel.unwrap();
                    assert_eq!(k.launch.block[0], 512);
                    assert_eq!(k.launch.grid[1], 4);
                    assert!(k.entry.contains("_t512_r8_s4"), "{}", k.entry);
                }
                _ => {}
            }
        }
        // Each family is looked up under the key its records are written with: select,
        // attention and the plan read device memory only (HBM); the row kernels the K/V
        // rows' placement.
        let keys = record.keys.borrow();
        let asked = |family: TunedFamily| {
            keys.iter()
                .find(|k| k.family == family)
                .unwrap_or_else(|| panic!("{family:?} was not looked up"))
                .placement
        };
        assert_eq!(asked(TunedFamily::Select), Placement::Hbm);
        assert_eq!(asked(TunedFamily::Attention), Placement::Hbm);
        assert_eq!(asked(TunedFamily::Plan), Placement::Hbm);
        assert_eq!(asked(TunedFamily::Oracle), placement);
        assert_eq!(asked(TunedFamily::Fetch), placement);
        assert!(keys.iter().all(
            |k| (k.head_dim, k.group) == (128, 4) && k.context_bucket == context_bucket(tokens)
        ));
    }
    // Landmark scoring looks its tile up in the rows' placement too.
    let record = Asked {
        keys: Default::default(),
    };
    plan_of(
        shape(4, tokens, Placement::Host),
        Method::Landmark,
        None,
        64,
        Some(&record),
    )
    .unwrap();
    assert!(record
        .keys
        .borrow()
        .iter()
        .any(|k| k.family == TunedFamily::Landmark && k.placement == Placement::Host));
}

/// A record whose select winner is the compacting variant.
struct CompactSelect;

impl Tuning for CompactSelect {
    fn tile(&self, key: &TuneKey) -> Option<Tile> {
        (key.family == TunedFamily::Select).then_some(Tile::select(
            512,
            4,
            SelectAlgorithm::Compact,
        ))
    }

    fn transfer(&self, _: usize, _: usize, _: u32) -> Option<Transfer> {
        None
    }
}

#[test]
fn a_compact_select_winner_plans_its_twelve_launches_and_candidate_buffers() {
    let (b, h, g, k, tokens) = (3, 2, 4, 200, 70_000);
    let s = shape(g, tokens, Placement::Hbm);
    let method = Method::Fathom { bits: 48.0 };
    let plain = plan_of(s, method, None, k, None).unwrap();
    let plan = plan_of(s, method, None, k, Some(&CompactSelect)).unwrap();
    let spec = plan.specs.select.unwrap();
    assert!(spec.compact() && !plain.specs.select.unwrap().compact());
    assert_eq!((spec.threads, spec.items_per_thread), (512, 4));
    // The select launches are the compact order, in place of the plain ten; the rest is alike.
    let select_stages = |p: &crate::step::LaunchPlan| -> Vec<SelectStage> {
        p.operations
            .iter()
            .filter_map(|op| match op.role {
                Role::Select(stage) => Some(stage),
                _ => None,
            })
            .collect()
    };
    assert_eq!(select_stages(&plan), SelectStage::COMPACT_ORDER);
    assert_eq!(select_stages(&plain), SelectStage::ORDER);
    let others = |p: &crate::step::LaunchPlan| -> Vec<Role> {
        roles(p)
            .into_iter()
            .filter(|r| !matches!(r, Role::Select(_)))
            .collect()
    };
    assert_eq!(others(&plan), others(&plain));
    let capacity = token_capacity(tokens) as u64;
    for op in &plan.operations {
        if let Role::Select(stage) = op.role {
            let kernel = op.kernel.as_ref().unwrap();
            assert_eq!(kernel.entry, spec.entry(stage));
            assert!(kernel.entry.contains("_compact_"), "{}", kernel.entry);
            if matches!(stage, SelectStage::Filter(_) | SelectStage::Write) {
                assert_eq!(u64::from(kernel.launch.grid[0]), capacity.div_ceil(2048));
            }
        }
    }
    // The workspace gains the candidates and their runs, sized by the spec's plan.
    let want = spec.plan(b as u64, h as u64, capacity, k as u64).unwrap();
    let z = plan.sizes;
    assert_eq!(z.select_state as u64, want.state_words);
    assert_eq!(z.select_candidates as u64, want.candidate_words);
    assert_eq!(z.select_candidate_runs as u64, want.candidate_run_words);
    assert_eq!(z.select_candidates, b * h * g * 8 * 512 * 2);
    assert_eq!(
        z.select_candidate_runs,
        b * h * g * capacity.div_ceil(2048) as usize * 2
    );
    assert_eq!(
        z.bytes() - plain.sizes.bytes(),
        4 * (z.select_candidates + z.select_candidate_runs)
            + 4 * (z.select_state - plain.sizes.select_state)
            + 4 * (z.chunk_counts - plain.sizes.chunk_counts)
    );
}

#[test]
fn default_tiles_can_ask_for_the_compact_select() {
    let s = shape(4, 10_000, Placement::Hbm);
    let tiles = Tiles {
        select_algorithm: SelectAlgorithm::Compact,
        ..Tiles::default()
    };
    let plan = plan_with(s, Method::Oracle, 64, &tiles).unwrap();
    assert!(plan.specs.select.unwrap().compact());
    assert!(plan.sizes.select_candidates > 0);
    assert_eq!(
        Tiles::default().select_algorithm,
        SelectAlgorithm::ScanPeaks,
        "the default reads the scan's peaks"
    );
}

/// The one-read selects, asked for by the decoder's tiles or by a record: their three (fused:
/// two) launches in place of the plain ten, their slots and counts sized by the spec's plan
/// (the fused one's arrival counters too), no radix state, and the `_chunk` grid's x as the
/// plan's `select_chunks` (which `_final` is given).
#[test]
fn the_one_read_selects_plan_their_launches_and_slots() {
    for algorithm in [
        SelectAlgorithm::Onepass,
        SelectAlgorithm::Fused,
        SelectAlgorithm::Peaks,
        SelectAlgorithm::PeaksHead,
        SelectAlgorithm::Cluster,
        SelectAlgorithm::ScanPeaksCluster,
    ] {
        one_read_plans(algorithm);
    }
}

fn one_read_plans(algorithm: SelectAlgorithm) {
    let (b, h, g, k, tokens) = (3, 2, 4, 200, 70_000);
    let s = shape(g, tokens, Placement::Hbm);
    let method = Method::Fathom { bits: 48.0 };
    let plain = plan_of(s, method, None, k, None).unwrap();
    struct OneRead(SelectAlgorithm);
    impl Tuning for OneRead {
        fn tile(&self, key: &TuneKey) -> Option<Tile> {
            (key.family == TunedFamily::Select).then_some(Tile::select(512, 8, self.0))
        }
        fn transfer(&self, _: usize, _: usize, _: u32) -> Option<Transfer> {
            None
        }
    }
    let recorded = plan_of(s, method, None, k, Some(&OneRead(algorithm))).unwrap();
    let scoring = Scoring::of(method, s.head_dim, s.block, Basis::Raw).unwrap();
    let tiles = Tiles {
        select: (512, 8),
        select_algorithm: algorithm,
        ..fetched()
    };
    let asked = launch_plan(&PlanInputs {
        shape: s,
        scoring,
        transfer: None,
        k,
        k_max: 512,
        union: true,
        tiles: &tiles,
        tuning: None,
    })
    .unwrap();
    for plan in [&recorded, &asked] {
        let spec = plan.specs.select.unwrap();
        assert_eq!(spec.algorithm, algorithm);
        let capacity = token_capacity(tokens) as u64;
        let want = spec.plan(b as u64, h as u64, capacity, k as u64).unwrap();
        let stages: Vec<(SelectStage, [u32; 3])> = plan
            .operations
            .iter()
            .filter_map(|op| match op.role {
                Role::Select(stage) => Some((stage, op.kernel.as_ref().unwrap().launch.grid)),
                _ => None,
            })
            .collect();
        let want_stages: Vec<(SelectStage, [u32; 3])> =
            want.launches.iter().map(|(s, l)| (*s, l.grid)).collect();
        assert_eq!(stages, want_stages);
        assert_eq!(
            stages.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            spec.stages()
        );
        // The one-block peaks select: one block a query head, which writes the selection; the
        // cluster select: a cluster of blocks a query head, which do.
        let one_block = algorithm == SelectAlgorithm::PeaksHead;
        let writes = algorithm.writes_selection();
        assert_eq!(
            stages.len(),
            if algorithm == SelectAlgorithm::Fused || writes {
                2
            } else {
                3
            }
        );
        assert_eq!(plan.select_chunks as u64, want.chunks);
        assert_eq!(stages[0].1[0] as usize, plan.select_chunks);
        assert_eq!(plan.select_chunks == 1, one_block);
        if algorithm.cluster() {
            assert_eq!(plan.select_chunks as u64, CLUSTER_BLOCKS);
        }
        let z = plan.sizes;
        assert_eq!(z.select_state, 0);
        assert_eq!(z.select_candidate_runs, 0);
        assert_eq!(z.select_candidates as u64, want.candidate_words);
        assert_eq!(z.chunk_counts as u64, want.chunk_count_words);
        let slots = if writes { 0 } else { plan.select_chunks };
        assert_eq!(z.select_candidates, b * h * g * slots * k * 2);
        assert_eq!(z.chunk_counts, b * h * g * slots);
        assert_eq!(z.select_arrivals as u64, want.arrival_words);
        let arrivals = if algorithm == SelectAlgorithm::Fused {
            b * h * g
        } else {
            0
        };
        assert_eq!(z.select_arrivals, arrivals);
        // Everything but the select is the plain plan's.
        let others = |p: &crate::step::LaunchPlan| -> Vec<Role> {
            roles(p)
                .into_iter()
                .filter(|r| !matches!(r, Role::Select(_)))
                .collect()
        };
        assert_eq!(others(plan), others(&plain));
    }
    assert!(plain.select_chunks > recorded.select_chunks);
}

#[test]
fn a_select_tile_of_two_variants_is_refused() {
    struct Conflicting(bool, bool, bool, bool, bool, bool, bool);
    impl Tuning for Conflicting {
        fn tile(&self, key: &TuneKey) -> Option<Tile> {
            (key.family == TunedFamily::Select).then_some(Tile::Select {
                threads: 256,
                items_per_thread: 16,
                compact: self.0,
                onepass: self.1,
                fused: self.2,
                peaks: self.3,
                scan_peaks: self.4,
                cluster: self.5,
                resident: self.6,
            })
        }
        fn transfer(&self, _: usize, _: usize, _: u32) -> Option<Transfer> {
            None
        }
    }
    let s = shape(4, 10_000, Placement::Hbm);
    // Compacting and one-read; compacting and fused; fused without one-read; compacting with
    // the one-block peaks flags; peaks without one-read; fused peaks without one-read; the
    // scan's peaks without peaks, on the one-read or fused select, or with compacting; the
    // cluster select with any other flag; the resident select without the fused flag, or with
    // the one-read or cluster flags.
    for flags in [
        (true, true, false, false, false, false, false),
        (true, true, true, false, false, false, false),
        (false, false, true, false, false, false, false),
        (true, true, true, true, false, false, false),
        (false, false, false, true, false, false, false),
        (false, false, true, true, false, false, false),
        (false, true, false, false, true, false, false),
        (false, true, true, false, true, false, false),
        (true, true, false, true, true, false, false),
        (false, false, false, false, true, false, false),
        (true, false, false, false, false, true, false),
        (false, true, false, false, false, true, false),
        (false, true, true, true, false, true, false),
        (false, false, false, false, false, false, true),
        (false, true, true, false, false, false, true),
        (false, false, true, false, false, true, true),
    ] {
        let tuning = Conflicting(
            flags.0, flags.1, flags.2, flags.3, flags.4, flags.5, flags.6,
        );
        let e = plan_of(s, Method::Fathom { bits: 48.0 }, None, 64, Some(&tuning)).unwrap_err();
        assert!(
            matches!(
                e,
                StepError::Tuning {
                    family: "select",
                    ..
                }
            ),
            "{flags:?}: {e}"
        );
    }
}

#[test]
fn an_attention_tile_of_bad_splits_is_refused_naming_them() {
    struct Splits(u32);
    impl Tuning for Splits {
        fn tile(&self, key: &TuneKey) -> Option<Tile> {
            (key.family == TunedFamily::Attention).then_some(Tile::Attention {
                threads: 256,
                rows_per_warp: 4,
                splits: self.0,
            })
        }
        fn transfer(&self, _: usize, _: usize, _: u32) -> Option<Transfer> {
            None
        }
    }
    let s = shape(4, 10_000, Placement::Hbm);
    for splits in [0, 17] {
        let e = plan_of(
            s,
            Method::Fathom { bits: 48.0 },
            None,
            64,
            Some(&Splits(splits)),
        )
        .unwrap_err();
        assert!(
            matches!(&e, StepError::Spec(spec) if spec.field == "splits"),
            "splits {splits}: {e}"
        );
    }
}

#[test]
fn attention_tiles_of_older_records_have_one_block_a_head() {
    let old: Tile =
        serde_json::from_str(r#"{"attention": {"threads": 512, "rows_per_warp": 8}}"#).unwrap();
    let one = Tile::Attention {
        threads: 512,
        rows_per_warp: 8,
        splits: 1,
    };
    assert_eq!(old, one);
    // One block a head is written as before; more are written.
    assert!(!serde_json::to_string(&one).unwrap().contains("splits"));
    let four = Tile::Attention {
        threads: 512,
        rows_per_warp: 8,
        splits: 4,
    };
    let back: Tile = serde_json::from_str(&serde_json::to_string(&four).unwrap()).unwrap();
    assert_eq!(back, four);
}

#[test]
fn select_tiles_of_older_records_are_the_plain_select() {
    let old: Tile =
        serde_json::from_str(r#"{"select": {"threads": 256, "items_per_thread": 16}}"#).unwrap();
    let plain = Tile::select(256, 16, SelectAlgorithm::Radix);
    assert_eq!(old, plain);
    assert_eq!(plain.select_algorithm(), Some(SelectAlgorithm::Radix));
    let compact = Tile::select(256, 16, SelectAlgorithm::Compact);
    // A record written before the one-read variant reads and writes back unchanged.
    let spelled = r#"{"select":{"threads":256,"items_per_thread":16,"compact":true}}"#;
    assert_eq!(serde_json::to_string(&compact).unwrap(), spelled);
    assert_eq!(serde_json::from_str::<Tile>(spelled).unwrap(), compact);
    let onepass = Tile::select(512, 8, SelectAlgorithm::Onepass);
    let back: Tile = serde_json::from_str(&serde_json::to_string(&onepass).unwrap()).unwrap();
    assert_eq!(back, onepass);
    assert_eq!(back.select_algorithm(), Some(SelectAlgorithm::Onepass));
    use crate::tuning::Variant;
    assert_eq!(Variant::Tile(plain).name(), "select t256 i16");
    assert_eq!(Variant::Tile(compact).name(), "select t256 i16 compact");
    assert_eq!(Variant::Tile(onepass).name(), "select t512 i8 onepass");
    let fused = Tile::select(512, 8, SelectAlgorithm::Fused);
    let spelled = r#"{"select":{"threads":512,"items_per_thread":8,"compact":false,"onepass":true,"fused":true}}"#;
    assert_eq!(serde_json::to_string(&fused).unwrap(), spelled);
    assert_eq!(serde_json::from_str::<Tile>(spelled).unwrap(), fused);
    assert_eq!(fused.select_algorithm(), Some(SelectAlgorithm::Fused));
    assert_eq!(Variant::Tile(fused).name(), "select t512 i8 onepass fused");
    let peaks = Tile::select(512, 8, SelectAlgorithm::Peaks);
    let spelled = r#"{"select":{"threads":512,"items_per_thread":8,"compact":false,"onepass":true,"peaks":true}}"#;
    assert_eq!(serde_json::to_string(&peaks).unwrap(), spelled);
    assert_eq!(serde_json::from_str::<Tile>(spelled).unwrap(), peaks);
    assert_eq!(peaks.select_algorithm(), Some(SelectAlgorithm::Peaks));
    assert_eq!(Variant::Tile(peaks).name(), "select t512 i8 onepass peaks");
}

/// A record whose select reads the scan's peaks: a plane method's scan writes them (and the
/// workspace holds them, a word per 32 tokens of every query head); a method without a plane
/// scan runs the peaks select of the same tile that reads the scores, and no peaks buffer.
#[test]
fn a_scan_peaks_select_makes_the_plane_scan_write_peaks() {
    struct ScanPeaks(SelectAlgorithm);
    impl Tuning for ScanPeaks {
        fn tile(&self, key: &TuneKey) -> Option<Tile> {
            (key.family == TunedFamily::Select).then_some(Tile::select(256, 4, self.0))
        }
        fn transfer(&self, _: usize, _: usize, _: u32) -> Option<Transfer> {
            None
        }
    }
    for (algorithm, streaming) in [
        (SelectAlgorithm::ScanPeaks, SelectAlgorithm::Peaks),
        (SelectAlgorithm::ScanPeaksHead, SelectAlgorithm::PeaksHead),
    ] {
        let tuning = ScanPeaks(algorithm);
        for placement in [Placement::Hbm, Placement::Host] {
            let s = shape(7, 10_000, placement);
            for method in [Method::Fathom { bits: 48.0 }, Method::Sparq { r: 32 }] {
                let plan = plan_of(s, method, None, 64, Some(&tuning)).unwrap();
                assert_eq!(plan.specs.select.unwrap().algorithm, algorithm, "{method}");
                assert!(
                    plan.specs.scan.unwrap().peaks,
                    "{method}: the scan writes peaks"
                );
                let query_heads = s.batch * s.kv_heads * s.group;
                assert_eq!(plan.ld_peaks, plan.ld_scores.div_ceil(32));
                assert_eq!(plan.sizes.peaks, query_heads * plan.ld_peaks, "{method}");
            }
            for method in [Method::Oracle, Method::Landmark] {
                let plan = plan_of(s, method, None, 64, Some(&tuning)).unwrap();
                assert_eq!(plan.specs.select.unwrap().algorithm, streaming, "{method}");
                assert_eq!(plan.sizes.peaks, 0, "{method}: no peaks buffer");
            }
        }
    }
    // Without a scan-peaks select, the scan writes none.
    let s = shape(4, 10_000, Placement::Hbm);
    let plan = plan_of(s, Method::Fathom { bits: 48.0 }, None, 64, None).unwrap();
    assert!(!plan.specs.scan.unwrap().peaks);
    assert_eq!(plan.sizes.peaks, 0);
}

/// Without a record the step selects from the scan's peaks (`Tiles::default()`, t512 i4): a
/// plane method's scan writes them; a method without a plane scan runs the streaming form.
#[test]
fn without_a_record_the_select_reads_the_scan_s_peaks() {
    let defaults = Tiles::default();
    assert_eq!(defaults.select, (512, 4));
    assert_eq!(defaults.select_algorithm, SelectAlgorithm::ScanPeaks);
    for placement in [Placement::Hbm, Placement::Host] {
        let s = shape(3, 20_000, placement);
        for (method, algorithm) in [
            (Method::Fathom { bits: 48.0 }, SelectAlgorithm::ScanPeaks),
            (Method::Sparq { r: 32 }, SelectAlgorithm::ScanPeaks),
            (Method::Oracle, SelectAlgorithm::Peaks),
            (Method::Landmark, SelectAlgorithm::Peaks),
        ] {
            let plan = plan_with(s, method, 64, &defaults).unwrap();
            let select = plan.specs.select.unwrap();
            assert_eq!(select.algorithm, algorithm, "{method} {placement:?}");
            assert_eq!((select.threads, select.items_per_thread), (512, 4));
            let peaks = algorithm == SelectAlgorithm::ScanPeaks;
            assert_eq!(plan.specs.scan.is_some_and(|scan| scan.peaks), peaks);
            assert_eq!(plan.sizes.peaks > 0, peaks, "{method} {placement:?}");
        }
    }
}

#[test]
fn a_cluster_merge_reaches_split_attention_of_at_most_eight_blocks_only() {
    // Off unless asked for (not yet timed on a GPU).
    assert!(!Tiles::default().attention_cluster_merge);
    let s = shape(4, 100_000, Placement::Hbm);
    let method = Method::Fathom { bits: 48.0 };
    for (splits, merged) in [(1, false), (2, true), (8, true), (16, false)] {
        let tiles = Tiles {
            attention_splits: splits,
            attention_cluster_merge: true,
            ..fetched()
        };
        let plan = plan_inputs(s, method, None, 64, &tiles, None).unwrap();
        let spec = plan.specs.attention;
        assert_eq!((spec.splits, spec.cluster_merge), (splits, merged));
        let op = plan
            .operations
            .iter()
            .find(|op| op.role == Role::Attention)
            .unwrap();
        let kernel = op.kernel.as_ref().unwrap();
        assert_eq!(kernel.entry, spec.kernel_name());
        let query_heads = (s.batch * s.kv_heads * s.group) as u32;
        let want = if merged {
            [query_heads * splits, 1, 1]
        } else {
            [query_heads, splits, 1]
        };
        assert_eq!(kernel.launch.grid, want, "{splits} splits");
    }
}

#[test]
fn prefetched_rows_reach_attention_only_when_asked_for() {
    // Off unless asked for (exact on an H100 but slower there, 2026-12-07).
    assert!(!Tiles::default().attention_prefetch_rows);
    let s = shape(4, 100_000, Placement::Hbm);
    let method = Method::Fathom { bits: 48.0 };
    for asked in [false, true] {
        let tiles = Tiles {
            attention_prefetch_rows: asked,
            ..fetched()
        };
        let plan = plan_inputs(s, method, None, 64, &tiles, None).unwrap();
        let spec = plan.specs.attention;
        assert_eq!(spec.prefetch_rows, asked);
        let op = plan
            .operations
            .iter()
            .find(|op| op.role == Role::Attention)
            .unwrap();
        let entry = &op.kernel.as_ref().unwrap().entry;
        assert_eq!(entry, &spec.kernel_name());
        assert_eq!(entry.ends_with("_pf"), asked, "{entry}");
    }
}
