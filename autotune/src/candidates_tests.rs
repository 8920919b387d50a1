//! The candidate grids: what each family tries, the prunes the module docs state, and the
//! opt-ins' names and checksums.

use super::*;
use codegen::spec::Family;

fn case(subject: Subject, placement: Placement, group: usize) -> Case {
    Case {
        opt_in: OptIn::default(),
        grid: Default::default(),
        subject,
        head_dim: 128,
        group,
        kv_heads: 8,
        placement,
        tokens: 1 << 15,
    }
}

#[test]
fn scan_candidates_are_the_valid_part_of_the_grid() {
    for placement in [Placement::Hbm, Placement::Host] {
        let c = case(Subject::Kernel(TunedFamily::Scan), placement, 4);
        let all = grid(c.subject, c.placement);
        let valid = enumerate(&c);
        assert!(!valid.is_empty() && valid.len() < all.len());
        for v in &all {
            let Variant::Tile(Tile::Scan {
                tile_words,
                threads,
                tensor_cores,
            }) = *v
            else {
                panic!("{v:?}")
            };
            let ok = scan_spec(&c, tile_words, threads, tensor_cores)
                .validate()
                .is_ok();
            assert_eq!(valid.contains(v), ok, "{}", v.name());
            // Tokens per thread outside 1, 2, 4, 8 never survive.
            if ok {
                assert!([1, 2, 4, 8].contains(&(tile_words * 64 / threads)));
            }
        }
    }
}

#[test]
fn gather_and_transfer_candidates() {
    let g = enumerate(&case(
        Subject::Kernel(TunedFamily::Gather),
        Placement::Host,
        4,
    ));
    assert_eq!(g.len(), GATHER_LOADS.len() * GATHER_THREADS.len());
    let t = enumerate(&case(Subject::Transfer, Placement::Host, 4));
    assert_eq!(
        t,
        [
            Variant::Transfer(Transfer::Fused),
            Variant::Transfer(Transfer::CopyKernel)
        ]
    );
    // The transfer is a host-placement choice only.
    assert!(enumerate(&case(Subject::Transfer, Placement::Hbm, 4)).is_empty());
}

/// Every preset's distinct (D, G), and the extremes the specs allow.
fn shapes() -> Vec<(usize, usize)> {
    let mut shapes: Vec<(usize, usize)> = codegen::model::presets()
        .iter()
        .map(|p| (p.shape().head_dim, p.shape().group_size()))
        .collect();
    shapes.extend([(64, 1), (256, 8)]);
    shapes.sort();
    shapes.dedup();
    shapes
}

#[test]
fn every_candidate_of_every_subject_validates_for_every_shape() {
    for (d, g) in shapes() {
        for &(subject, placement) in &SUBJECTS {
            let c = Case {
                head_dim: d,
                group: g,
                ..case(subject, placement, g)
            };
            let all = grid(subject, placement);
            let valid = enumerate(&c);
            assert!(!valid.is_empty(), "{subject} {placement:?} D={d} G={g}");
            for v in &valid {
                if let Variant::Tile(_) = v {
                    let spec = tile_spec(&c, v).unwrap();
                    assert_eq!(spec.family(), subject.as_str());
                    spec.validate()
                        .unwrap_or_else(|e| panic!("{} D={d} G={g}: {e}", v.name()));
                }
            }
            // Only the scan's grid holds tiles a shape refuses (tiles a segment cannot
            // hold) and the rerank's (a many-block top-k of 64 threads cannot hold two
            // k_max = 2048 a block); every other family's grid is valid as a whole.
            if !matches!(
                subject,
                Subject::Kernel(TunedFamily::Scan | TunedFamily::PariskvRerank)
            ) {
                assert_eq!(valid, all, "{subject} {placement:?}");
            }
        }
    }
}

#[test]
fn the_new_grids_have_their_stated_sizes() {
    let size = |family, placement| enumerate(&case(Subject::Kernel(family), placement, 4)).len();
    assert_eq!(size(TunedFamily::Plan, Placement::Hbm), 6);
    assert_eq!(size(TunedFamily::Select, Placement::Hbm), 140);
    assert_eq!(size(TunedFamily::Attention, Placement::Hbm), 80);
    for family in [
        TunedFamily::Oracle,
        TunedFamily::Landmark,
        TunedFamily::Fetch,
    ] {
        for placement in [Placement::Hbm, Placement::Host] {
            assert_eq!(size(family, placement), 5, "{family:?} {placement:?}");
        }
    }
    for &(subject, placement) in &SUBJECTS {
        if let Subject::Kernel(
            f @ (TunedFamily::PariskvVote | TunedFamily::PariskvTopc | TunedFamily::PariskvRerank),
        ) = subject
        {
            // The rerank's two `_score` variants at every thread count, each with the
            // one-block top-k and, from 128 threads on, the many-block one, each with and
            // without decode tables.
            let expected = if f == TunedFamily::PariskvRerank {
                2 * (2 * PARISKV_THREADS.len() + 2 * (PARISKV_THREADS.len() - 1))
            } else {
                PARISKV_THREADS.len()
            };
            assert_eq!(size(f, placement), expected, "{f:?}");
        }
    }
}

/// The ParisKV subjects are keyed as the step looks them up: vote and rerank in both
/// placements of the index rows, the top-C in HBM only; their specs are the step's (the
/// rerank at the decoder's `k_max`), and the default threads are among the candidates.
#[test]
fn pariskv_subjects_follow_the_steps_lookups() {
    let pariskv: Vec<(TunedFamily, Placement)> = SUBJECTS
        .iter()
        .filter_map(|&(s, p)| match s {
            Subject::Kernel(f) if f.as_str().starts_with("pariskv") => Some((f, p)),
            _ => None,
        })
        .collect();
    assert_eq!(
        pariskv,
        [
            (TunedFamily::PariskvVote, Placement::Hbm),
            (TunedFamily::PariskvTopc, Placement::Hbm),
            (TunedFamily::PariskvRerank, Placement::Hbm),
            (TunedFamily::PariskvVote, Placement::Host),
            (TunedFamily::PariskvRerank, Placement::Host),
        ]
    );
    let defaults = runtime::tuning::Tiles::default();
    for (family, placement) in pariskv {
        let default = Variant::Tile(match family {
            TunedFamily::PariskvRerank => Tile::Rerank {
                threads: defaults.pariskv_threads,
                vector_loads: defaults.rerank_vector_loads,
                multiblock: false,
                decode_table: false,
            },
            _ => Tile::Threads(defaults.pariskv_threads),
        });
        let c = case(Subject::Kernel(family), placement, 7);
        assert!(enumerate(&c).contains(&default), "{family:?}");
        let spec = tile_spec(&c, &Variant::Tile(Tile::Threads(512))).unwrap();
        assert_eq!(spec.family(), family.as_str());
        match spec {
            KernelSpec::PariskvVote(s) => {
                assert_eq!((s.threads, s.placement, s.head_dim), (512, placement, 128))
            }
            KernelSpec::PariskvTopc(s) => assert_eq!((s.threads, s.head_dim), (512, 128)),
            KernelSpec::PariskvRerank(s) => {
                assert_eq!((s.threads, s.placement, s.group), (512, placement, 7));
                assert_eq!(s.k_max as usize, bench_k_max());
                assert!(!s.vector_loads);
                let wide = Tile::Rerank {
                    threads: 256,
                    vector_loads: true,
                    multiblock: false,
                    decode_table: false,
                };
                assert!(enumerate(&c).contains(&Variant::Tile(wide)));
                match tile_spec(&c, &Variant::Tile(wide)).unwrap() {
                    KernelSpec::PariskvRerank(s) => {
                        assert_eq!((s.threads, s.vector_loads), (256, true))
                    }
                    other => panic!("{other:?}"),
                }
            }
            other => panic!("{other:?}"),
        }
    }
}

/// The tuner times each select as the step would run it: the peaks forms with the coarse
/// floor of `Tiles::select_coarse_floor`, the others without (they have no floor to coarsen).
#[test]
fn select_candidates_carry_the_steps_floor() {
    assert!(Tiles::default().select_coarse_floor);
    let c = case(Subject::Kernel(TunedFamily::Select), Placement::Hbm, 7);
    let (mut peaks, mut others) = (0, 0);
    for v in enumerate(&c) {
        let Variant::Tile(tile) = v else { continue };
        match tile_spec(&c, &v).unwrap() {
            KernelSpec::Select(s) => {
                assert_eq!(Some(s.algorithm), tile.select_algorithm());
                assert_eq!(s.coarse_floor, s.algorithm.peaks(), "{}", v.name());
                if s.algorithm.peaks() {
                    peaks += 1;
                } else {
                    others += 1;
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(peaks > 0 && others > 0, "{peaks} peaks, {others} others");
}

#[test]
fn the_select_grid_is_the_spec_domain_less_the_stated_prunes() {
    let fused = OptIn::parse(&["select-fused".to_string()]).unwrap();
    let cluster = OptIn::parse(&["select-cluster".to_string()]).unwrap();
    let both = OptIn::parse(&["select-cluster".to_string(), "select-fused".to_string()]).unwrap();
    for opt_in in [
        OptIn::default(),
        OptIn::parse(&[]).unwrap(),
        fused,
        cluster,
        both,
    ] {
        let c = Case {
            opt_in,
            ..case(Subject::Kernel(TunedFamily::Select), Placement::Hbm, 7)
        };
        let valid = enumerate(&c);
        let mut domain = 0;
        for threads in 1..=1100u32 {
            for items_per_thread in 0..=40u32 {
                for algorithm in SelectAlgorithm::ALL {
                    let spec = SelectSpec {
                        group: 7,
                        k_max: bench_k_max() as u32,
                        threads,
                        items_per_thread,
                        algorithm,
                        coarse_floor: false,
                        owned_tiles: false,
                    };
                    let tile = Variant::Tile(Tile::select(threads, items_per_thread, algorithm));
                    if spec.validate().is_err() {
                        assert!(!valid.contains(&tile), "{}", tile.name());
                        continue;
                    }
                    domain += 1;
                    let kept = threads.is_power_of_two()
                        && threads >= 64
                        && items_per_thread.is_power_of_two()
                        && threads * items_per_thread >= SELECT_MIN_CHUNK
                        && (algorithm != SelectAlgorithm::Fused || opt_in.select_fused)
                        && (!algorithm.cluster() || opt_in.select_cluster)
                        && algorithm != SelectAlgorithm::Peaks;
                    assert_eq!(valid.contains(&tile), kept, "{}", tile.name());
                }
            }
        }
        // Multiples of 32 up to 1,024 threads, 1 to 32 items, the plain and compacting
        // variants: the spec's whole domain; the one-read variants wherever their buffer holds
        // k_max = 2048 (from 64 threads on), the two peaks ones where their block also fits 48
        // KiB of shared memory (all but 576, 640, 672, 768, 800, 896, 928, 960 and 992 threads),
        // as the two reading the scan's peaks; the two cluster ones from 64 threads on (their
        // histograms are at most 32 entries a thread), and the resident one likewise.
        assert_eq!(domain, 32 * 32 * 2 + 31 * 32 * 5 + 22 * 32 * 4);
        // The runtime's default select tile is among the candidates.
        let defaults = runtime::tuning::Tiles::default();
        let (threads, items_per_thread) = defaults.select;
        assert!(valid.contains(&Variant::Tile(Tile::select(
            threads,
            items_per_thread,
            defaults.select_algorithm,
        ))));
        // Every tile is tried as each of the seven variants (plain, compacting, one-read, the
        // one-block peaks one, the two reading the scan's peaks and the resident one), and as
        // the fused one with `select-fused`, as the two cluster ones with `select-cluster`.
        let variants =
            7 + usize::from(opt_in.select_fused) + 2 * usize::from(opt_in.select_cluster);
        assert_eq!(valid.len(), 20 * variants);
    }
}

#[test]
fn a_graduated_opt_in_is_refused_with_why_and_an_unknown_one_with_the_known_ones() {
    assert_eq!(OptIn::parse(&[]).unwrap(), OptIn::default());
    for graduated in [
        "select-onepass",
        "pariskv-select-multiblock",
        "scan-tc",
        "select-peaks",
        "select-scan-peaks",
        "pariskv-decode-table",
        "select-resident",
    ] {
        let e = OptIn::parse(&[graduated.to_string()]).unwrap_err();
        assert!(e.contains("default grid") && e.contains("drop"), "{e}");
    }
    let e = OptIn::parse(&["select-fast".to_string()]).unwrap_err();
    assert!(
        e.contains("select-fast") && e.contains("select-fused"),
        "{e}"
    );
    let fused = OptIn::parse(&["select-fused".to_string()]).unwrap();
    assert!(fused.select_fused);
    let cluster = OptIn::parse(&["select-cluster".to_string()]).unwrap();
    assert!(cluster.select_cluster && !cluster.select_fused);
    assert_ne!(candidate_checksum(cluster), candidate_checksum(fused));
    // A graduated variant needs no opt-in.
    assert_eq!(
        OptIn::needed_for(&Variant::Tile(Tile::select(
            1024,
            32,
            SelectAlgorithm::Resident
        ))),
        OptIn::default()
    );
    let with = grid_with(
        Subject::Kernel(TunedFamily::Select),
        Placement::Hbm,
        cluster,
    );
    let cluster_tiles = with
        .iter()
        .filter(|v| v.name().contains(" cluster"))
        .count();
    // Two of the nine variants a tile (the seven of the default grid and the two cluster ones).
    assert_eq!(cluster_tiles * 9, with.len() * 2);
    for algorithm in [SelectAlgorithm::Cluster, SelectAlgorithm::ScanPeaksCluster] {
        let tile = Variant::Tile(Tile::select(256, 4, algorithm));
        assert_eq!(OptIn::needed_for(&tile), cluster);
    }
    assert_ne!(
        candidate_checksum(fused),
        candidate_checksum(OptIn::default())
    );
    let with = grid_with(Subject::Kernel(TunedFamily::Select), Placement::Hbm, fused);
    let fused_tiles = with.iter().filter(|v| v.name().ends_with("fused")).count();
    assert_eq!(fused_tiles * 8, with.len());
    // The default grid holds every select tile as the one-read variant too.
    let select = grid(Subject::Kernel(TunedFamily::Select), Placement::Hbm);
    let onepass = select
        .iter()
        .filter(|v| v.name().ends_with("onepass"))
        .count();
    assert_eq!(onepass * 7, select.len());
}

#[test]
fn attention_splits16_adds_sixteen_blocks_a_head_to_every_attention_tile() {
    let opt_in = OptIn::parse(&["attention-splits16".to_string()]).unwrap();
    assert_eq!(
        opt_in,
        OptIn {
            attention_splits16: true,
            ..OptIn::default()
        }
    );
    let subject = Subject::Kernel(TunedFamily::Attention);
    let plain = grid(subject, Placement::Hbm);
    let with = grid_with(subject, Placement::Hbm, opt_in);
    let tiles = ATTENTION_THREADS.len() * ATTENTION_ROWS.len();
    assert_eq!(plain.len(), tiles * ATTENTION_SPLITS.len());
    assert_eq!(with.len(), plain.len() + tiles);
    let added: Vec<_> = with.iter().filter(|v| !plain.contains(v)).collect();
    assert_eq!(added.len(), tiles);
    for v in added {
        assert!(v.name().ends_with(" s16"), "{}", v.name());
        assert_eq!(OptIn::needed_for(v), opt_in);
    }
    for v in &plain {
        assert_eq!(OptIn::needed_for(v), OptIn::default(), "{}", v.name());
    }
    // Every added tile builds a valid spec for a 32-head model (splits up to MAX_SPLITS).
    let c = Case {
        opt_in,
        ..case(subject, Placement::Hbm, 4)
    };
    let valid = enumerate(&c);
    assert_eq!(
        valid.iter().filter(|v| v.name().ends_with(" s16")).count(),
        tiles
    );
    assert_ne!(
        candidate_checksum(opt_in),
        candidate_checksum(OptIn::default())
    );
}

#[test]
fn the_defaults_of_every_family_are_candidates() {
    let t = runtime::tuning::Tiles::default();
    let has = |family, placement, tile| {
        enumerate(&case(Subject::Kernel(family), placement, 4)).contains(&Variant::Tile(tile))
    };
    assert!(has(
        TunedFamily::Plan,
        Placement::Hbm,
        Tile::Threads(t.plan_threads as u32)
    ));
    let (threads, rows_per_warp) = t.attention;
    assert!(has(
        TunedFamily::Attention,
        Placement::Hbm,
        Tile::Attention {
            threads,
            rows_per_warp,
            splits: t.attention_splits,
        }
    ));
    for family in [
        TunedFamily::Oracle,
        TunedFamily::Landmark,
        TunedFamily::Fetch,
    ] {
        assert!(has(family, Placement::Host, Tile::Threads(t.row_threads)));
    }
}

#[test]
fn a_tile_of_another_family_has_no_spec() {
    let c = case(Subject::Kernel(TunedFamily::Select), Placement::Hbm, 4);
    assert!(tile_spec(&c, &Variant::Tile(Tile::Threads(256))).is_err());
    assert!(tile_spec(&c, &Variant::Transfer(Transfer::Fused)).is_err());
}

#[test]
fn names_are_distinct_and_the_checksum_is_stable_hex() {
    for &(s, p) in &SUBJECTS {
        let mut names: Vec<String> = grid(s, p).iter().map(Variant::name).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n);
    }
    let sum = candidate_checksum(OptIn::default());
    assert_eq!(sum.len(), 64);
    assert!(sum.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(sum, candidate_checksum(OptIn::default()));
}

#[test]
fn keys_carry_the_context_bucket_and_k_follows_the_paper() {
    let mut c = case(Subject::Kernel(TunedFamily::Scan), Placement::Hbm, 7);
    c.tokens = 1 << 20;
    assert_eq!(c.key().context_bucket, 20);
    assert_eq!(c.key().group, 7);
    assert!(CONTEXTS.iter().all(|&t| bench_k(t) == 512));
    assert!(bench_k(1 << 15) <= bench_k_max());
}

#[test]
fn the_quick_grid_is_part_of_the_full_one_and_keeps_every_recorded_winner() {
    // Every committed record (H200, H100): at the contexts a quick run tunes, it tries each
    // winner or a candidate within the winner's noise band (the H100's 32k host scan, w8 t64,
    // ties w16 t256).
    for gpu in ["nvidia-h200", "nvidia-h100-80gb-hbm3"] {
        let path = format!(
            "{}/../runtime/records/{gpu}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let record = runtime::tuning::TuningRecord::read(std::path::Path::new(&path)).unwrap();
        let mut winners = 0;
        for entry in &record.entries {
            let Some(winner) = &entry.winner else {
                continue;
            };
            if !QUICK_CONTEXTS.contains(&entry.tokens) {
                continue;
            }
            let quick = enumerate(&Case::of_entry(entry, 8, Grid::Quick));
            assert!(
                quick
                    .iter()
                    .any(|v| v == &winner.variant || winner.within_noise.contains(&v.name())),
                "{gpu} {}: neither the winner {} nor a tie of it is in the quick grid",
                entry.key,
                winner.name
            );
            winners += 1;
        }
        assert!(winners >= 60, "{gpu}: {winners} winners");
    }
    for (d, g) in shapes() {
        for &(subject, placement) in &SUBJECTS {
            let full = case(subject, placement, g);
            let full = Case {
                head_dim: d,
                ..full
            };
            let quick = Case {
                grid: Grid::Quick,
                ..full.clone()
            };
            let (f, q) = (enumerate(&full), enumerate(&quick));
            assert!(q.iter().all(|v| f.contains(v)), "{subject} {placement:?}");
            assert!(!q.is_empty() || f.is_empty(), "{subject} {placement:?}");
        }
    }
    // The kernels a quick run compiles: under half of a full run's at the same contexts.
    let select = |quick| crate::selection::select(&[], &[], quick).unwrap();
    let quick_kernels = run_specs(&select(true)).len();
    let full_grid: Vec<Case> = select(true)
        .into_iter()
        .map(|c| Case {
            grid: Grid::Full,
            ..c
        })
        .collect();
    let full_kernels = run_specs(&full_grid).len();
    assert!(
        2 * quick_kernels < full_kernels,
        "quick {quick_kernels} of {full_kernels} kernels"
    );
}

/// The select is tuned before the scans of its shape and context, whose peaks follow it
/// (`GpuBench::scan_peaks`), and the scan and gather before the transfer built from them.
#[test]
fn the_select_is_tuned_before_the_scans() {
    let at = |subject: Subject, placement: Placement| {
        SUBJECTS
            .iter()
            .position(|&x| x == (subject, placement))
            .expect("a tuned subject")
    };
    let select = at(Subject::Kernel(TunedFamily::Select), Placement::Hbm);
    for placement in [Placement::Hbm, Placement::Host] {
        assert!(select < at(Subject::Kernel(TunedFamily::Scan), placement));
    }
    let transfer = at(Subject::Transfer, Placement::Host);
    assert!(at(Subject::Kernel(TunedFamily::Scan), Placement::Host) < transfer);
    assert!(at(Subject::Kernel(TunedFamily::Gather), Placement::Host) < transfer);
}
