//! CPU tests of the step API: argument validation, workspace sizing and the launch plan of
//! every method and transfer (the GPU tests are `tests/tests/gpu_step.rs`).

use codegen::model::{Basis, ModelShape};
use codegen::spec::select::SelectStage;
use codegen::spec::{
    AttentionRows, Family, KvRows, Placement, PlanMethod, SelectAlgorithm, SelectSpec,
};

use super::launches::{launch_plan, token_capacity, PlanInputs, Role, StepShape, ALWAYS};
use super::request::{Method, Scoring};
use super::validate::{check_host_queries, check_needs, check_query_len, check_view, ViewShape};
use super::workspace::dense_tables;
use super::{Calibration, CalibrationError, Decoder, DecoderConfig, StepError};
use crate::tuning::Transfer;
use crate::tuning::{context_bucket, fit_scan_tile, Tile, Tiles, TuneKey, TunedFamily, Tuning};

mod plans;
mod tuning;

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
        kv_rows: KvRows::Separate,
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
        kv_rows: KvRows::Separate,
    }
}

fn plan_of(
    shape: StepShape,
    method: Method,
    transfer: Option<Transfer>,
    k: usize,
    tuning: Option<&dyn Tuning>,
) -> Result<super::LaunchPlan, StepError> {
    plan_inputs(shape, method, transfer, k, &fetched(), tuning)
}

/// [`plan_of`] with `tiles` in place of [`fetched`] and no record.
fn plan_with(
    shape: StepShape,
    method: Method,
    k: usize,
    tiles: &Tiles,
) -> Result<super::LaunchPlan, StepError> {
    plan_inputs(shape, method, None, k, tiles, None)
}

fn plan_inputs(
    shape: StepShape,
    method: Method,
    transfer: Option<Transfer>,
    k: usize,
    tiles: &Tiles,
    tuning: Option<&dyn Tuning>,
) -> Result<super::LaunchPlan, StepError> {
    let scoring = Scoring::of(method, shape.head_dim, shape.block, Basis::Klt)?;
    launch_plan(&PlanInputs {
        shape,
        scoring,
        transfer,
        k,
        k_max: 512,
        union: true,
        tiles,
        tuning,
    })
}

/// The default tiles with the rows fetched in HBM too, the radix select and the tail in the
/// oracle's launch: the roads these plans test (attention from the store's rows, the default,
/// has its own tests in `plans.rs`, as has the tail in the plan's launch; the default select,
/// the one reading the scan's peaks, in `tuning.rs`).
fn fetched() -> Tiles {
    Tiles {
        attention_rows: codegen::spec::AttentionRows::Fetched,
        select: (256, 16),
        select_algorithm: SelectAlgorithm::Radix,
        tail_in_plan: false,
        // Each run-table entry from one lane, the select's floor from all three passes: the
        // forms the tests of the two options compare against.
        plan_paired_runs: false,
        select_coarse_floor: false,
        ..Tiles::default()
    }
}

fn roles(plan: &crate::step::LaunchPlan) -> Vec<Role> {
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
        DecoderConfig {
            head_groups: 0,
            ..Default::default()
        },
        DecoderConfig {
            head_groups: 2,
            overlap_tail: true,
            ..Default::default()
        },
    ];
    let fields = [
        "block",
        "segment_words",
        "segment_words",
        "k_max",
        "k_max",
        "head_groups",
        "overlap_tail",
    ];
    for (config, field) in bad.iter().zip(fields) {
        match config.validate() {
            Err(StepError::Config { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{config:?}: {other:?}"),
        }
    }
}

#[test]
fn head_groups_must_divide_the_model_s_kv_heads() {
    // The test model has 2 KV heads: 1 and 2 groups divide them, 3 and 4 do not.
    let m = model(Basis::Raw, 4);
    let config = |head_groups| DecoderConfig {
        head_groups,
        ..Default::default()
    };
    assert!(Decoder::check(&m, &config(1)).is_ok());
    assert!(Decoder::check(&m, &config(2)).is_ok());
    for groups in [3, 4] {
        match Decoder::check(&m, &config(groups)) {
            Err(StepError::Config {
                field: "head_groups",
                got,
                allowed,
            }) => {
                assert_eq!(got, groups.to_string());
                assert!(allowed.ends_with("2 KV heads: 1, 2"), "{allowed}");
            }
            other => panic!("{groups} groups: {other:?}"),
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
