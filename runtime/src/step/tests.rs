//! CPU tests of the step API: argument validation, workspace sizing and the launch plan of
//! every method and transfer (the GPU tests are `tests/tests/gpu_step.rs`).

use codegen::model::{Basis, ModelShape};
use codegen::spec::select::SelectStage;
use codegen::spec::{Family, Placement, PlanMethod, SelectSpec};

use super::launches::{launch_plan, token_capacity, PlanInputs, Role, StepShape, ALWAYS};
use super::request::{Method, Scoring};
use super::validate::{check_host_queries, check_needs, check_query_len, check_view, ViewShape};
use super::workspace::dense_tables;
use super::{Calibration, CalibrationError, DecoderConfig, StepError};
use crate::tuning::Transfer;
use crate::tuning::{context_bucket, fit_scan_tile, Tile, Tiles, TuneKey, TunedFamily, Tuning};

fn model(basis: Basis, group: usize) -> ModelShape {
    ModelShape {
        name: "test".into(),
        layers: 4,
        query_heads: 2 * group,
        kv_heads: 2,
        head_dim: 128,
        qk_norm: basis == Basis::Raw,
        basis,
    }
}

fn view(batch: usize, max_tokens: usize, placement: Placement) -> ViewShape {
    let (heads, max_seg) = (batch * 2, 3);
    ViewShape {
        layer: 1,
        batch,
        kv_heads: 2,
        head_dim: 128,
        placement,
        max_seg,
        max_tokens,
        seg_words_len: heads * max_seg,
        seg_scales_len: heads * max_seg,
        n_stored_len: batch,
        n_total_len: batch,
        k_rows_len: heads,
        v_rows_len: heads,
        landmarks_len: Some(heads),
        pariskv_len: None,
    }
}

fn shape(group: usize, max_tokens: usize, placement: Placement) -> StepShape {
    StepShape {
        batch: 3,
        kv_heads: 2,
        head_dim: 128,
        group,
        block: 64,
        segment_words: 64,
        max_seg: 3,
        max_tokens,
        placement,
        basis: Basis::Raw,
    }
}

fn plan_of(
    shape: StepShape,
    method: Method,
    transfer: Option<Transfer>,
    k: usize,
    tuning: Option<&dyn Tuning>,
) -> Result<super::LaunchPlan, StepError> {
    let scoring = Scoring::of(method, shape.head_dim, shape.block, Basis::Klt)?;
    launch_plan(&PlanInputs {
        shape,
        scoring,
        transfer,
        k,
        k_max: 512,
        tiles: &Tiles::default(),
        tuning,
    })
}

fn roles(plan: &super::LaunchPlan) -> Vec<Role> {
    plan.operations.iter().map(|op| op.role).collect()
}

fn select_roles() -> Vec<Role> {
    SelectStage::ORDER
        .iter()
        .map(|&s| Role::Select(s))
        .collect()
}

#[test]
fn config_fields_are_checked() {
    assert!(DecoderConfig::default().validate().is_ok());
    let bad = [
        DecoderConfig {
            block: 48,
            ..Default::default()
        },
        DecoderConfig {
            segment_words: 7,
            ..Default::default()
        },
        DecoderConfig {
            segment_words: 0,
            ..Default::default()
        },
        DecoderConfig {
            k_max: 0,
            ..Default::default()
        },
        DecoderConfig {
            k_max: 4097,
            ..Default::default()
        },
    ];
    let fields = ["block", "segment_words", "segment_words", "k_max", "k_max"];
    for (config, field) in bad.iter().zip(fields) {
        match config.validate() {
            Err(StepError::Config { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{config:?}: {other:?}"),
        }
    }
}

#[test]
fn methods_are_checked_against_the_store() {
    let of = |m: Method, basis| Scoring::of(m, 128, 64, basis);
    // fathom: at least one channel at depth 1 plus its scale, 1 + 16/64 bits.
    assert!(matches!(
        of(Method::Fathom { bits: 1.2 }, Basis::Raw),
        Err(StepError::Budget { min, .. }) if min == 1.25
    ));
    assert!(of(Method::Fathom { bits: 1.25 }, Basis::Raw).is_ok());
    assert!(of(Method::Fathom { bits: f64::NAN }, Basis::Raw).is_err());
    assert!(matches!(
        Scoring::of(Method::Fathom { bits: 1.4 }, 128, 32, Basis::Raw),
        Err(StepError::Budget { min, .. }) if min == 1.5
    ));
    for r in [0, 129] {
        for m in [
            Method::Sparq { r },
            Method::DoubleSparsity { r },
            Method::Loki { r },
        ] {
            assert!(
                matches!(of(m, Basis::Klt), Err(StepError::ChannelCount { .. })),
                "{m}"
            );
        }
    }
    assert!(of(Method::Sparq { r: 128 }, Basis::Raw).is_ok());
    assert!(matches!(
        of(Method::Loki { r: 32 }, Basis::Raw),
        Err(StepError::NeedsRotatedStore)
    ));
    for t in [0, 5] {
        assert!(matches!(
            of(Method::Uniform { t }, Basis::Raw),
            Err(StepError::Depth { .. })
        ));
    }
    let planes = |m| match of(m, Basis::Klt).unwrap() {
        Scoring::Planes { max_planes, .. } => max_planes,
        other => panic!("{other:?}"),
    };
    assert_eq!(planes(Method::Fathom { bits: 48.0 }), 48);
    assert_eq!(planes(Method::Fathom { bits: 92.7 }), 92);
    assert_eq!(planes(Method::Fathom { bits: 1e6 }), 512);
    assert_eq!(planes(Method::Sparq { r: 16 }), 64);
    assert_eq!(planes(Method::Loki { r: 32 }), 128);
    assert_eq!(planes(Method::Thumbnail), 256);
    assert_eq!(planes(Method::Uniform { t: 3 }), 384);
    assert_eq!(of(Method::Dense, Basis::Raw).unwrap(), Scoring::Dense);
}

#[test]
fn views_are_checked_against_the_model() {
    let m = model(Basis::Raw, 4);
    let good = view(3, 1000, Placement::Hbm);
    assert!(check_view(&m, &good).is_ok());
    // A store's tables have room for its largest batch: longer tables are fine.
    let roomy = ViewShape {
        seg_words_len: good.seg_words_len * 4,
        seg_scales_len: good.seg_scales_len * 4,
        n_stored_len: 64,
        n_total_len: 64,
        k_rows_len: good.k_rows_len * 4,
        v_rows_len: good.v_rows_len * 4,
        ..good
    };
    assert!(check_view(&m, &roomy).is_ok());
    let cases: Vec<(ViewShape, &str)> = vec![
        (ViewShape { layer: 4, ..good }, "layer"),
        (
            ViewShape {
                head_dim: 64,
                ..good
            },
            "head_dim",
        ),
        (
            ViewShape {
                kv_heads: 3,
                ..good
            },
            "kv_heads",
        ),
        (ViewShape { max_seg: 0, ..good }, "max_seg"),
        (
            ViewShape {
                seg_words_len: 17,
                ..good
            },
            "seg_words length (B*H*max_seg)",
        ),
        (
            ViewShape {
                seg_scales_len: 13,
                ..good
            },
            "seg_scales length (B*H*max_seg)",
        ),
        (
            ViewShape {
                n_stored_len: 2,
                ..good
            },
            "n_stored length (B)",
        ),
        (
            ViewShape {
                n_total_len: 1,
                ..good
            },
            "n_total length (B)",
        ),
        (
            ViewShape {
                k_rows_len: 5,
                ..good
            },
            "k_rows length (B*H)",
        ),
        (
            ViewShape {
                v_rows_len: 3,
                ..good
            },
            "v_rows length (B*H)",
        ),
        (
            ViewShape {
                landmarks_len: Some(1),
                ..good
            },
            "landmarks length (B*H)",
        ),
        (
            ViewShape {
                max_tokens: 1 << 31,
                ..good
            },
            "max_tokens",
        ),
    ];
    for (v, what) in cases {
        match check_view(&m, &v) {
            Err(StepError::Layer {
                layer: 4,
                layers: 4,
            }) => assert_eq!(what, "layer"),
            Err(StepError::ViewShape { field, .. }) => assert_eq!(field, what),
            other => panic!("{what}: {other:?}"),
        }
    }
    let empty = ViewShape {
        batch: 0,
        ..view(0, 0, Placement::Hbm)
    };
    assert!(matches!(check_view(&m, &empty), Err(StepError::EmptyBatch)));
}

#[test]
fn queries_are_checked() {
    let v = view(3, 1000, Placement::Host);
    let len = 3 * 2 * 4 * 128;
    assert!(check_query_len(&v, 4, len).is_ok());
    assert!(matches!(
        check_query_len(&v, 4, len - 1),
        Err(StepError::QueryShape { want, .. }) if want == len
    ));
    let mut q = vec![0.5f32; len];
    assert!(check_host_queries(&v, 4, &q).is_ok());
    // Sequence 2, query head 5 (KV head 1, g 1), channel 17.
    q[2 * 1024 + 5 * 128 + 17] = f32::NAN;
    match check_host_queries(&v, 4, &q) {
        Err(StepError::NonFiniteQuery {
            sequence,
            query_head,
            channel,
            ..
        }) => assert_eq!((sequence, query_head, channel), (2, 5, 17)),
        other => panic!("{other:?}"),
    }
}

fn calibration() -> Calibration {
    let (l, h, d) = (4, 2, 128);
    let mut masks = vec![0u8; l * h * d];
    for head in masks.chunks_mut(d) {
        head[..32].iter_mut().for_each(|m| *m = 1);
    }
    Calibration::new(l, h, d)
        .with_sigma2((0..l * h * d).map(|i| i as f32).collect())
        .unwrap()
        .with_double_sparsity(32, masks)
        .unwrap()
        .with_rotation(vec![0.0; l * h * d * d])
        .unwrap()
}

#[test]
fn calibration_is_checked_and_sliced_per_layer() {
    let c = calibration();
    assert_eq!(c.sigma2(2).unwrap()[0], (2 * 2 * 128) as f32);
    assert_eq!(c.sigma2(2).unwrap().len(), 256);
    assert_eq!(c.double_sparsity(3).unwrap().0, 32);
    assert_eq!(c.rotation(1).unwrap().len(), 2 * 128 * 128);
    assert!(c.sigma2(4).is_none());
    let empty = Calibration::new(4, 2, 128);
    assert!(matches!(
        empty.clone().with_sigma2(vec![1.0; 10]),
        Err(CalibrationError::Shape { want: 1024, .. })
    ));
    let mut negative = vec![1.0f32; 1024];
    negative[700] = -1.0;
    assert!(matches!(
        empty.clone().with_sigma2(negative),
        Err(CalibrationError::Value { index: 700, .. })
    ));
    let mut masks = vec![0u8; 1024];
    masks[..32].iter_mut().for_each(|m| *m = 1);
    assert!(matches!(
        empty.clone().with_double_sparsity(32, masks),
        Err(CalibrationError::MaskCount {
            layer: 0,
            head: 1,
            got: 0,
            r: 32
        })
    ));
    assert!(empty
        .clone()
        .with_double_sparsity(0, vec![0; 1024])
        .is_err());
    let mut rotation = vec![0.0f32; 4 * 2 * 128 * 128];
    rotation[3] = f32::INFINITY;
    assert!(empty.with_rotation(rotation).is_err());
}

#[test]
fn methods_get_what_they_need() {
    let v = view(3, 1000, Placement::Hbm);
    let cal = calibration();
    let check = |m: Method, basis, cal: Option<&Calibration>, sigma2: Option<usize>| {
        let scoring = Scoring::of(m, 128, 64, basis)?;
        check_needs(&scoring, &m.to_string(), basis, &v, cal, sigma2)
    };
    let ds = Method::DoubleSparsity { r: 32 };
    assert!(matches!(
        check(ds, Basis::Raw, None, None),
        Err(StepError::MissingCalibration { layer: 1, .. })
    ));
    assert!(check(ds, Basis::Raw, Some(&cal), None).is_ok());
    assert!(matches!(
        check(
            Method::DoubleSparsity { r: 16 },
            Basis::Raw,
            Some(&cal),
            None
        ),
        Err(StepError::CalibrationMismatch { r: 16, fitted: 32 })
    ));
    let fathom = Method::Fathom { bits: 48.0 };
    assert!(matches!(
        check(fathom, Basis::Raw, None, None),
        Err(StepError::MissingCalibration { .. })
    ));
    assert!(check(fathom, Basis::Raw, None, Some(3 * 2 * 128)).is_ok());
    assert!(check(fathom, Basis::Raw, Some(&cal), None).is_ok());
    assert!(matches!(
        check(fathom, Basis::Raw, None, Some(2 * 128)),
        Err(StepError::Sigma2Shape { want: 768, .. })
    ));
    // A rotated store needs its rotation for every plane method, not for the others.
    let sparq = Method::Sparq { r: 16 };
    assert!(matches!(
        check(sparq, Basis::Klt, None, None),
        Err(StepError::MissingCalibration { .. })
    ));
    assert!(check(sparq, Basis::Klt, Some(&cal), None).is_ok());
    assert!(check(Method::Oracle, Basis::Klt, None, None).is_ok());
    let no_landmarks = ViewShape {
        landmarks_len: None,
        ..v
    };
    let scoring = Scoring::Landmark;
    assert!(matches!(
        check_needs(&scoring, "landmark", Basis::Raw, &no_landmarks, None, None),
        Err(StepError::MissingLandmarks)
    ));
}

#[test]
fn token_capacity_rounds_up_by_at_most_an_eighth() {
    assert_eq!(token_capacity(0), 4096);
    assert_eq!(token_capacity(4096), 4096);
    assert_eq!(token_capacity(4097), 4608);
    assert_eq!(token_capacity(5000), 5120);
    assert_eq!(token_capacity(1 << 20), 1 << 20);
    assert_eq!(token_capacity((1 << 20) + 1), (1 << 20) + (1 << 17));
    let mut last = 0;
    for n in (0..3_000_000).step_by(997) {
        let c = token_capacity(n);
        assert!(c >= n && c >= last, "{n} -> {c}");
        assert!(n <= 4096 || (c - n) * 8 <= n, "{n} -> {c}");
        last = c;
    }
    assert_eq!(context_bucket(0), 0);
    assert_eq!(context_bucket(1000), 10);
    assert_eq!(context_bucket(1024), 10);
    assert_eq!(context_bucket(1025), 11);
}

#[test]
fn plane_methods_launch_plan_scan_tail_select_fetch_attention() {
    let s = shape(4, 40_000, Placement::Hbm);
    let plan = plan_of(
        s,
        Method::Fathom { bits: 48.0 },
        Some(Transfer::Memcpy),
        256,
        None,
    )
    .unwrap();
    // In HBM the transfer is ignored: the scan reads the store in place.
    assert_eq!(plan.transfer, None);
    let mut want = vec![
        Role::Plan { staged: false },
        Role::Scan { staged: false },
        Role::Oracle { whole: false },
    ];
    want.extend(select_roles());
    want.extend([Role::Fetch, Role::Attention]);
    assert_eq!(roles(&plan), want);
    assert!(plan.capturable);
    let ops = &plan.operations;
    let plan_kernel = ops[0].kernel.as_ref().unwrap();
    assert_eq!(plan_kernel.launch.grid, [2, 3, 1]);
    assert!(plan_kernel
        .entry
        .starts_with("fathom_plan_d128_g4_b64_s64_fathom_raw"));
    let scan = ops[1].kernel.as_ref().unwrap();
    assert!(scan.entry.contains("_hbm_"), "{}", scan.entry);
    // One block per 16-word tile of each of the 3 segments of the 6 (sequence, head) pairs.
    assert_eq!(scan.launch.grid, [64 / 16, 3, 6]);
    let tail = ops[2].kernel.as_ref().unwrap();
    assert_eq!(&tail.launch.grid[1..], &[2, 3]);
    let capacity = token_capacity(40_000);
    assert_eq!(plan.token_capacity, capacity);
    let select = SelectSpec {
        group: 4,
        k_max: 512,
        threads: 256,
        items_per_thread: 16,
        compact: false,
    };
    let expected = select.plan(3, 2, capacity as u64, 256).unwrap();
    for ((stage, launch), op) in expected.launches.iter().zip(&ops[3..13]) {
        let kernel = op.kernel.as_ref().unwrap();
        assert_eq!(op.role, Role::Select(*stage));
        assert_eq!(kernel.launch, *launch);
        assert_eq!(kernel.entry, select.entry(*stage));
    }
    let attention = ops[14].kernel.as_ref().unwrap();
    assert_eq!(attention.launch.grid, [3 * 2 * 4, 1, 1]);

    // Every spec of the plan is valid and named for the shape.
    for op in ops {
        if let Some(k) = &op.kernel {
            k.spec.validate().unwrap();
            assert!(k.spec.entry_points().contains(&k.entry), "{}", k.entry);
        }
    }
}

#[test]
fn host_transfers_differ_only_in_how_planes_reach_the_scan() {
    let s = shape(7, 20_000, Placement::Host);
    let method = Method::Sparq { r: 16 };
    let fused = plan_of(s, method, Some(Transfer::Fused), 128, None).unwrap();
    let copy = plan_of(s, method, Some(Transfer::CopyKernel), 128, None).unwrap();
    let memcpy = plan_of(s, method, Some(Transfer::Memcpy), 128, None).unwrap();
    let head = |p: &super::LaunchPlan, n| roles(p)[..n].to_vec();
    assert_eq!(
        head(&fused, 2),
        [Role::Plan { staged: false }, Role::Scan { staged: false }]
    );
    assert_eq!(
        head(&copy, 4),
        [
            Role::ClearStatus,
            Role::Plan { staged: true },
            Role::Gather,
            Role::Scan { staged: true }
        ]
    );
    assert_eq!(
        head(&memcpy, 4),
        [
            Role::ClearStatus,
            Role::Plan { staged: true },
            Role::RunCopies,
            Role::Scan { staged: true }
        ]
    );
    // The same tail, selection, fetch and attention after the scan.
    assert_eq!(roles(&fused)[2..], roles(&copy)[4..]);
    assert_eq!(roles(&fused)[2..], roles(&memcpy)[4..]);
    let scan_entry = |p: &super::LaunchPlan| {
        p.operations
            .iter()
            .find(|op| matches!(op.role, Role::Scan { .. }))
            .and_then(|op| op.kernel.clone())
            .unwrap()
            .entry
    };
    assert!(scan_entry(&fused).contains("_host_"));
    assert!(scan_entry(&copy).contains("_hbm_"));
    assert!(fused.capturable && copy.capturable && !memcpy.capturable);
    // Row kernels read the host placement whatever the transfer.
    let fetch = fused
        .operations
        .iter()
        .find(|op| op.role == Role::Fetch)
        .unwrap();
    assert!(fetch.kernel.as_ref().unwrap().entry.ends_with("_host"));
    // Staging only for the copy transfers: 4r planes per (sequence, head, segment).
    assert_eq!((fused.stage_planes, copy.stage_planes), (0, 64));
    assert_eq!(fused.sizes.stage_words, 0);
    assert_eq!(copy.sizes.stage_words, 3 * 2 * 3 * 64 * 64);
    assert_eq!(copy.sizes.stage_scales, 3 * 2 * 3 * 128 * 64);
    assert_eq!(copy.sizes.staged_runs, copy.sizes.runs);
    // No transfer asked and no record: fused.
    assert_eq!(
        plan_of(s, method, None, 128, None).unwrap().transfer,
        Some(Transfer::Fused)
    );
}

#[test]
fn landmark_oracle_and_dense_skip_the_plane_stages() {
    let s = shape(4, 50_000, Placement::Host);
    let landmark = plan_of(s, Method::Landmark, Some(Transfer::CopyKernel), 64, None).unwrap();
    let mut want = vec![Role::LandmarkScan, Role::Oracle { whole: false }];
    want.extend(select_roles());
    want.extend([Role::Fetch, Role::Attention]);
    assert_eq!(roles(&landmark), want);
    assert_eq!(landmark.transfer, None);
    assert!(landmark.operations[0]
        .kernel
        .as_ref()
        .unwrap()
        .entry
        .ends_with("_host_scan"));

    let oracle = plan_of(s, Method::Oracle, None, 64, None).unwrap();
    let mut want = vec![Role::Oracle { whole: true }];
    want.extend(select_roles());
    want.extend([Role::Fetch, Role::Attention]);
    assert_eq!(roles(&oracle), want);
    assert_eq!(oracle.sizes.runs, 0);

    // Dense ignores k (even beyond k_max) and selects every token of the capacity.
    let dense = plan_of(s, Method::Dense, None, 100_000, None).unwrap();
    assert_eq!(
        roles(&dense),
        [Role::DenseCounts, Role::Fetch, Role::Attention]
    );
    let capacity = token_capacity(50_000);
    assert_eq!(dense.k, capacity - ALWAYS);
    assert_eq!(dense.sizes.scores, 0);
    assert_eq!(dense.sizes.dense_sel, 3 * 2 * 4 * capacity);
    assert_eq!(
        dense.sizes.dense_uni,
        3 * 2 * (4 * (capacity - ALWAYS) + ALWAYS)
    );
    assert_eq!(dense.sizes.rows, dense.sizes.dense_uni * 128);
    assert!(dense.capturable);
}

#[test]
fn workspace_sizes_follow_the_abi_layouts() {
    let (b, h, g, d, max_seg, k) = (3, 2, 7, 128, 3, 200);
    let s = shape(g, 30_000, Placement::Hbm);
    let plan = plan_of(s, Method::Thumbnail, None, k, None).unwrap();
    let z = plan.sizes;
    let cap = token_capacity(30_000);
    assert_eq!(z.q_store, b * h * g * d);
    assert_eq!(z.depths, b * h * d);
    assert_eq!(z.class_count, b * h * 4);
    assert_eq!(z.runs, b * h * max_seg * d * 4);
    assert_eq!(z.plan_status, 3);
    assert_eq!((z.staged_runs, z.stage_words, z.stage_scales), (0, 0, 0));
    assert_eq!(z.scores, b * h * g * cap);
    assert_eq!(plan.ld_scores, cap);
    assert_eq!(z.sel, b * h * g * (k + ALWAYS));
    assert_eq!(z.sel_count, b * h * g);
    assert_eq!(z.uni, b * h * (g * k + ALWAYS));
    assert_eq!(z.uni_count, b * h);
    assert_eq!(z.rows, b * h * (g * k + ALWAYS) * d);
    assert_eq!(z.out, b * h * g * d);
    let select = SelectSpec {
        group: g as u32,
        k_max: 512,
        threads: 256,
        items_per_thread: 16,
        compact: false,
    }
    .plan(b as u64, h as u64, cap as u64, k as u64)
    .unwrap();
    assert_eq!((z.select_candidates, z.select_candidate_runs), (0, 0));
    assert_eq!(z.select_state as u64, select.state_words);
    assert_eq!(z.chunk_counts as u64, select.chunk_count_words);
    assert_eq!(z.scratch as u64, select.scratch_words);
    let bytes = 4 * (z.q_store + z.class_count + z.plan_status + z.scores + z.out)
        + z.depths
        + 8 * z.runs
        + 2 * 2 * z.rows
        + 4 * (z.select_state + z.chunk_counts + z.scratch + 2 * z.sel)
        + 4 * (z.sel_count + z.uni + z.uni_count);
    assert_eq!(z.bytes(), bytes);
}

#[test]
fn k_beyond_k_max_and_bad_grids_are_refused() {
    let s = shape(4, 1000, Placement::Hbm);
    assert!(matches!(
        plan_of(s, Method::Oracle, None, 513, None),
        Err(StepError::K { k: 513, k_max: 512 })
    ));
    assert!(plan_of(s, Method::Oracle, None, 512, None).is_ok());
    // B*H*G query heads beyond a grid's y limit.
    let huge = StepShape { batch: 9000, ..s };
    assert!(matches!(
        plan_of(huge, Method::Oracle, None, 16, None),
        Err(StepError::Size(_))
    ));
}

struct Record {
    scan: Option<Tile>,
    transfer: Option<Transfer>,
    everything: bool,
}

impl Tuning for Record {
    fn tile(&self, key: &TuneKey) -> Option<Tile> {
        match key.family {
            TunedFamily::Scan => self.scan,
            TunedFamily::Select if self.everything => Some(Tile::Select {
                threads: 512,
                items_per_thread: 8,
                compact: false,
            }),
            TunedFamily::Attention if self.everything => Some(Tile::Attention {
                threads: 128,
                rows_per_warp: 2,
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

#[test]
fn dense_tables_are_the_identity_per_row() {
    let (uni, sel) = dense_tables((2, 5, 3, 4));
    assert_eq!(uni, [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]);
    assert_eq!(sel, [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]);
}

#[test]
fn rotated_stores_plan_with_rotation_and_loki_reads_its_channels() {
    let s = StepShape {
        basis: Basis::Klt,
        ..shape(7, 5000, Placement::Hbm)
    };
    let plan = plan_of(s, Method::Loki { r: 32 }, None, 64, None).unwrap();
    let spec = plan.specs.plan.unwrap();
    assert!(spec.rotate);
    assert_eq!(spec.method, PlanMethod::Loki { r: 32 });
    assert!(spec.kernel_name().contains("_loki32_rot_"));
}

/// A record holding only select and attention winners, remembering every key asked.
struct Asked {
    keys: std::cell::RefCell<Vec<TuneKey>>,
}

impl Tuning for Asked {
    fn tile(&self, key: &TuneKey) -> Option<Tile> {
        self.keys.borrow_mut().push(*key);
        match key.family {
            TunedFamily::Select => Some(Tile::Select {
                threads: 1024,
                items_per_thread: 2,
                compact: false,
            }),
            TunedFamily::Attention => Some(Tile::Attention {
                threads: 512,
                rows_per_warp: 8,
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
        let defaults = Tiles::default();
        let select = |p: &super::LaunchPlan| p.specs.select.unwrap();
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
                    assert!(k.entry.ends_with("_t512_r8"), "{}", k.entry);
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
        (key.family == TunedFamily::Select).then_some(Tile::Select {
            threads: 512,
            items_per_thread: 4,
            compact: true,
        })
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
    assert!(spec.compact && !plain.specs.select.unwrap().compact);
    assert_eq!((spec.threads, spec.items_per_thread), (512, 4));
    // The select launches are the compact order, in place of the plain ten; the rest is alike.
    let select_stages = |p: &super::LaunchPlan| -> Vec<SelectStage> {
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
    let others = |p: &super::LaunchPlan| -> Vec<Role> {
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
    let scoring = Scoring::of(Method::Oracle, s.head_dim, s.block, Basis::Klt).unwrap();
    let tiles = Tiles {
        select_compact: true,
        ..Tiles::default()
    };
    let plan = launch_plan(&PlanInputs {
        shape: s,
        scoring,
        transfer: None,
        k: 64,
        k_max: 512,
        tiles: &tiles,
        tuning: None,
    })
    .unwrap();
    assert!(plan.specs.select.unwrap().compact);
    assert!(plan.sizes.select_candidates > 0);
    assert!(
        !Tiles::default().select_compact,
        "the default stays the plain select"
    );
}

#[test]
fn select_tiles_of_older_records_are_the_plain_select() {
    let old: Tile =
        serde_json::from_str(r#"{"select": {"threads": 256, "items_per_thread": 16}}"#).unwrap();
    let plain = Tile::Select {
        threads: 256,
        items_per_thread: 16,
        compact: false,
    };
    assert_eq!(old, plain);
    let compact = Tile::Select {
        threads: 256,
        items_per_thread: 16,
        compact: true,
    };
    let back: Tile = serde_json::from_str(&serde_json::to_string(&compact).unwrap()).unwrap();
    assert_eq!(back, compact);
    use crate::tuning::Variant;
    assert_eq!(Variant::Tile(plain).name(), "select t256 i16");
    assert_eq!(Variant::Tile(compact).name(), "select t256 i16 compact");
}
