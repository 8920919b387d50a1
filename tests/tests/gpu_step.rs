//! GPU tests of the decode step (`runtime::step`, SPEC §8) against the f64 reference step of
//! one query group (`reference::step::step_group`), for every method of §4.
//!
//! Fixture: B = 3 sequences of different lengths (one under 100 tokens, so that every token is
//! selected; one of a few thousand tokens that is not a multiple of the block, so there is a
//! tail; one of 20k–50k tokens over several segments), H = 2 KV heads, D = 128 (96 in the
//! G = 16 case), BLK = 64,
//! S = 128 words (8,192 tokens per segment). The reference `HeadStore` of every (sequence,
//! head) is laid out on the device by hand (`DeviceStore`, in HBM or in mapped host memory),
//! with the K/V row tables and the landmark means (computed as the landmark build kernel
//! does: fp32 sum in token order, times 1/8, fp16 round-to-nearest-even) in the same placement.
//!
//! Cases:
//! - `gpu_step_raw_store_g4`: a raw store (QK-norm model), G = 4; `fathom` with the
//!   uncalibrated `σ²` (the mean square scale of each head's store) passed as a device buffer.
//! - `gpu_step_rotated_store_g7`: a KLT store (G = 7, Qwen2.5's group), rotations and `σ²`
//!   from a `Calibration`, plus `loki(32)`.
//! - `gpu_step_rotated_store_d96_g16`: the same at D = 96 and G = 16 (Phi-3's head dimension,
//!   GLM-4's group; both are KLT models).
//!
//! In each: both placements, and for the host placement every plane method with all three
//! transfers; each step is compared with the reference as `fathom_tests::step_check` says
//! (selections equal apart from ties within fp32 rounding, attention relative error
//! `<= 1e-3`, `dense` selecting every token).
//!
//! - `gpu_step_compact_select_g4`: the raw store of the first case with a tuning record whose
//!   select winner is the compacting variant (every launch plan that selects must run it).
//! - `gpu_step_onepass_select_g4`, `gpu_step_onepass_select_g7`: the first two cases with the
//!   one-read select (`algorithm: onepass`), through a record whose only entry it is.
//!
//! Graphs: every capturable step is captured, its outputs poisoned, replayed, and compared bit
//! for bit with the eager step. The memcpy transfer must refuse capture.
//! `gpu_step_refuses_bad_input`: the typed errors of bad queries, k, layer and calibration.

use std::sync::Arc;

use codegen::model::{Basis, ModelShape};
use codegen::spec::{KvRows, Placement, SelectAlgorithm};
use fathom_tests::device_store::DeviceStore;
use fathom_tests::select_kernels::{HeadTable, Mismatches};
use fathom_tests::step_check::{
    calibration_rows, check_step, is_plane_method, methods, poison, reference_steps,
    replay_difference, GroupData, SelectRecord, StepCheck,
};
use fathom_tests::store_kernels::rotate_keys;
use fathom_tests::{gpu, inputs};
use half::{bf16, f16};
use rand::seq::SliceRandom;
use rand::Rng;
use reference::klt::Klt;
use reference::plans::DoubleSparsityCalibration;
use reference::store::{BlockSize, HeadId, HeadStore, StoreLayout};
use runtime::gpu::{DeviceBuffer, Gpu};
use runtime::step::{
    Calibration, Decoder, DecoderConfig, HostStepOutput, Method, StepError, StepOutput,
    StepRequest, Transfer,
};
use runtime::tuning::Tile;
use runtime::view::LayerView;

const BATCH: usize = 3;
const KV_HEADS: usize = 2;
/// The head dimension of every case but the D = 96 one.
const D: usize = 128;
const BLOCK: usize = 64;
const SEGMENT_WORDS: usize = 128;
const LAYERS: usize = 2;
/// The layer every view is of (calibration of the other layers differs, so a wrong slice
/// shows).
const LAYER: usize = 1;
const K: usize = 96;
const K_MAX: usize = 512;
const MAX_RELATIVE_ERROR: f64 = 1e-3;

/// Keys, values, queries and the reference stores of one batch, with the calibration the
/// methods need.
struct Fixture {
    d: usize,
    group: usize,
    basis: Basis,
    lengths: Vec<usize>,
    /// `[b][h]` raw bf16 keys `[n][d]`.
    keys: Vec<Vec<Vec<bf16>>>,
    values: Vec<Vec<Vec<bf16>>>,
    /// `[B][H][G][d]`.
    queries: Vec<f32>,
    stores: Vec<Vec<HeadStore>>,
    /// Per KV head (of layer `LAYER`), rotated stores only.
    klts: Vec<Klt>,
    /// Per KV head.
    double_sparsity: Vec<DoubleSparsityCalibration>,
    /// `σ²` `[B][H][d]` as the GPU reads it (f64 of these floats for the reference).
    sigma2: Vec<f32>,
    /// Whether `σ²` comes from the calibration (else passed with the request).
    calibrated_sigma2: bool,
    calibration: Calibration,
}

fn values(rng: &mut impl Rng, n: usize, d: usize) -> Vec<bf16> {
    (0..n * d)
        .map(|_| bf16::from_f32(rng.gen_range(-1.0f32..1.0)))
        .collect()
}

impl Fixture {
    fn new(rng: &mut impl Rng, d: usize, group: usize, basis: Basis) -> Fixture {
        let mut lengths = vec![
            rng.gen_range(40..100),
            loop {
                let n = rng.gen_range(3_000..9_000);
                if n % BLOCK != 0 {
                    break n;
                }
            },
            rng.gen_range(20_000..50_000),
        ];
        lengths.shuffle(rng);
        let layout = StoreLayout::new(d, BlockSize::B64, SEGMENT_WORDS).expect("valid layout");
        let rotated = basis == Basis::Klt;
        let mut klts = Vec::new();
        let mut double_sparsity = Vec::new();
        for _ in 0..KV_HEADS {
            let cal_keys = calibration_rows(rng, 2 * d, d);
            let cal_queries = calibration_rows(rng, 8 * group, d);
            if rotated {
                klts.push(Klt::fit(&cal_keys, &cal_queries).expect("calibration rows are valid"));
            }
            double_sparsity.push(
                DoubleSparsityCalibration::fit(&cal_queries, &cal_keys, 32)
                    .expect("calibration rows are valid"),
            );
        }
        let rot_f32: Vec<Vec<f32>> = klts
            .iter()
            .map(|k| k.basis_row_major().iter().map(|&x| x as f32).collect())
            .collect();
        let mut keys = Vec::new();
        let mut vals = Vec::new();
        let mut stores = Vec::new();
        for &n in &lengths {
            let (mut ks, mut vs, mut ss) = (Vec::new(), Vec::new(), Vec::new());
            for h in 0..KV_HEADS {
                let k = inputs::keys(rng, n, d);
                let stored = match rot_f32.get(h) {
                    Some(rot) => rotate_keys(rot, d, &k),
                    None => k.clone(),
                };
                let id = HeadId {
                    layer: LAYER,
                    kv_head: h,
                };
                ss.push(HeadStore::from_keys(layout, id, &stored).expect("random keys encode"));
                ks.push(k);
                vs.push(values(rng, n, d));
            }
            keys.push(ks);
            vals.push(vs);
            stores.push(ss);
        }
        let queries = inputs::vectors(rng, BATCH * KV_HEADS * group, d);

        // Calibration of every layer; layer LAYER holds the fitted data, the other layer
        // garbage that would show if the wrong layer were read.
        let per_layer = KV_HEADS * d;
        let mut masks = vec![0u8; LAYERS * per_layer];
        let mut rotation = vec![0f32; LAYERS * KV_HEADS * d * d];
        let cal_sigma2: Vec<f32> = (0..LAYERS * per_layer)
            .map(|_| rng.gen_range(0.01f32..4.0))
            .collect();
        for l in 0..LAYERS {
            for h in 0..KV_HEADS {
                let mask = if l == LAYER {
                    double_sparsity[h].mask()
                } else {
                    let mut m = vec![0u8; d];
                    m[d - 32..].iter_mut().for_each(|x| *x = 1);
                    m
                };
                masks[(l * KV_HEADS + h) * d..][..d].copy_from_slice(&mask);
                if rotated && l == LAYER {
                    rotation[(l * KV_HEADS + h) * d * d..][..d * d].copy_from_slice(&rot_f32[h]);
                }
            }
        }
        let calibrated_sigma2 = rotated;
        let sigma2: Vec<f32> = if calibrated_sigma2 {
            (0..BATCH)
                .flat_map(|_| cal_sigma2[LAYER * per_layer..][..per_layer].to_vec())
                .collect()
        } else {
            // The uncalibrated stand-in of every (sequence, head).
            stores
                .iter()
                .flatten()
                .flat_map(|s| s.mean_square_scale().into_iter().map(|x| x as f32))
                .collect()
        };
        let mut calibration = Calibration::new(LAYERS, KV_HEADS, d)
            .with_double_sparsity(32, masks)
            .expect("fitted masks select 32 channels");
        if calibrated_sigma2 {
            calibration = calibration
                .with_sigma2(cal_sigma2)
                .expect("random variances are valid");
        }
        if rotated {
            calibration = calibration
                .with_rotation(rotation)
                .expect("fitted bases are finite");
        }
        Fixture {
            d,
            group,
            basis,
            lengths,
            keys,
            values: vals,
            queries,
            stores,
            klts,
            double_sparsity,
            sigma2,
            calibrated_sigma2,
            calibration,
        }
    }

    fn model(&self) -> ModelShape {
        ModelShape {
            name: format!("test-g{}", self.group),
            layers: LAYERS,
            query_heads: KV_HEADS * self.group,
            kv_heads: KV_HEADS,
            head_dim: self.d,
            qk_norm: self.basis == Basis::Raw,
            basis: self.basis,
        }
    }

    fn query(&self, b: usize, h: usize, g: usize) -> Vec<f64> {
        let qh = (b * KV_HEADS + h) * self.group + g;
        self.queries[qh * self.d..(qh + 1) * self.d]
            .iter()
            .map(|&x| f64::from(x))
            .collect()
    }

    /// Every (sequence, head) as the reference sees it, `[b*H + h]`.
    fn groups(&self) -> Vec<GroupData<'_>> {
        let mut out = Vec::new();
        for b in 0..BATCH {
            for h in 0..KV_HEADS {
                out.push(GroupData {
                    store: &self.stores[b][h],
                    keys: &self.keys[b][h],
                    values: &self.values[b][h],
                    queries: (0..self.group).map(|g| self.query(b, h, g)).collect(),
                    klt: self.klts.get(h),
                    sigma2: self.sigma2[(b * KV_HEADS + h) * self.d..][..self.d]
                        .iter()
                        .map(|&x| f64::from(x))
                        .collect(),
                    double_sparsity: Some(&self.double_sparsity[h]),
                });
            }
        }
        out
    }

    fn check(&self) -> StepCheck {
        StepCheck {
            k: K,
            scale: 1.0 / (self.d as f64).sqrt(),
            rotated: self.basis == Basis::Klt,
            max_relative_error: MAX_RELATIVE_ERROR,
        }
    }
}

/// The fixture's store and rows on the device, in one placement.
struct DeviceBatch {
    placement: Placement,
    store: DeviceStore,
    n_total: DeviceBuffer<i32>,
    k_rows: HeadTable<u16>,
    v_rows: HeadTable<u16>,
    landmarks: HeadTable<u16>,
    max_tokens: usize,
    queries: DeviceBuffer<f32>,
    sigma2: DeviceBuffer<f32>,
    head_dim: usize,
}

/// The landmark means of `keys` (`d` channels) as the build kernel writes them.
fn landmark_means(keys: &[bf16], d: usize) -> Vec<u16> {
    let groups = keys.len() / d / 8;
    let mut out = Vec::with_capacity(groups * d);
    for j in 0..groups {
        for c in 0..d {
            let sum = (0..8).fold(0f32, |acc, r| acc + keys[(8 * j + r) * d + c].to_f32());
            out.push(f16::from_f32(sum * 0.125).to_bits());
        }
    }
    out
}

impl DeviceBatch {
    fn new(gpu: &Gpu, f: &Fixture, placement: Placement) -> DeviceBatch {
        let max_seg = f
            .stores
            .iter()
            .flatten()
            .map(|s| s.segments().len())
            .max()
            .unwrap_or(1)
            .max(1);
        let bits = |rows: &Vec<Vec<Vec<bf16>>>| -> Vec<Vec<u16>> {
            rows.iter()
                .flatten()
                .map(|r| r.iter().map(|x| x.to_bits()).collect())
                .collect()
        };
        let means: Vec<Vec<u16>> = f
            .keys
            .iter()
            .flatten()
            .map(|k| landmark_means(k, f.d))
            .collect();
        let totals: Vec<i32> = f.lengths.iter().map(|&n| n as i32).collect();
        DeviceBatch {
            placement,
            store: DeviceStore::new(gpu, placement, &f.stores, max_seg).expect("store uploads"),
            n_total: gpu.upload(&totals).expect("n_total uploads"),
            k_rows: HeadTable::upload(gpu, placement, &bits(&f.keys)).expect("keys upload"),
            v_rows: HeadTable::upload(gpu, placement, &bits(&f.values)).expect("values upload"),
            landmarks: HeadTable::upload(gpu, placement, &means).expect("means upload"),
            head_dim: f.d,
            max_tokens: *f.lengths.iter().max().expect("a batch"),
            queries: gpu.upload(&f.queries).expect("queries upload"),
            sigma2: gpu.upload(&f.sigma2).expect("σ² uploads"),
        }
    }

    fn view(&self) -> LayerView<'_> {
        LayerView {
            layer: LAYER,
            batch: BATCH,
            kv_heads: KV_HEADS,
            head_dim: self.head_dim,
            placement: self.placement,
            max_seg: self.store.max_seg,
            seg_words: &self.store.seg_words,
            seg_scales: &self.store.seg_scales,
            n_stored: &self.store.n_stored,
            n_total: &self.n_total,
            k_rows: &self.k_rows.table,
            v_rows: &self.v_rows.table,
            kv_rows: KvRows::Separate,
            max_tokens: self.max_tokens,
            landmarks: Some(&self.landmarks.table),
            pariskv: None,
        }
    }
}

fn bits(out: &HostStepOutput) -> Vec<u32> {
    out.out.iter().map(|x| x.to_bits()).collect()
}

/// Which select the decoder of a case runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SelectVariant {
    /// Whatever the GPU's record (or the default tiles) say.
    Default,
    /// This variant (256 threads, 4 items), through a [`SelectRecord`].
    Only(SelectAlgorithm),
}

fn run_case(test: &str, d: usize, group: usize, basis: Basis) {
    run_case_with(test, d, group, basis, SelectVariant::Default);
}

fn run_case_with(test: &str, d: usize, group: usize, basis: Basis, select: SelectVariant) {
    let gpu = Arc::new(gpu());
    let (mut rng, seed) = inputs::rng_and_seed(test);
    let f = Fixture::new(&mut rng, d, group, basis);
    eprintln!("{test}: lengths {:?}", f.lengths);
    let config = DecoderConfig {
        block: BLOCK,
        segment_words: SEGMENT_WORDS,
        k_max: K_MAX,
        ..DecoderConfig::default()
    };
    let mut decoder = Decoder::new(gpu.clone(), f.model(), config)
        .expect("a valid decoder")
        .with_calibration(f.calibration.clone())
        .expect("calibration of the model");
    if let SelectVariant::Only(algorithm) = select {
        let tile = Tile::select(256, 4, algorithm);
        decoder = decoder.with_tuning(Box::new(SelectRecord(tile)));
    }
    let batches: Vec<DeviceBatch> = [Placement::Hbm, Placement::Host]
        .into_iter()
        .map(|p| DeviceBatch::new(&gpu, &f, p))
        .collect();
    let mut m = Mismatches::new(test, seed);
    let methods = methods(basis == Basis::Klt);
    let groups = f.groups();
    let check = f.check();
    let references = reference_steps(&groups, &methods, &check);
    for (&method, want) in methods.iter().zip(&references) {
        for batch in &batches {
            let transfers: Vec<Option<Transfer>> =
                if batch.placement == Placement::Host && is_plane_method(method) {
                    vec![
                        Some(Transfer::Fused),
                        Some(Transfer::CopyKernel),
                        Some(Transfer::Memcpy),
                    ]
                } else {
                    vec![None]
                };
            for transfer in transfers {
                let what = format!(
                    "{method} {} {}",
                    batch.placement.as_str(),
                    transfer.map_or("-", Transfer::as_str)
                );
                let view = batch.view();
                let request = StepRequest {
                    method,
                    transfer,
                    k: K,
                    scale: None,
                    sigma2: (!f.calibrated_sigma2).then_some(&batch.sigma2),
                };
                if let SelectVariant::Only(algorithm) = select {
                    let plan = decoder
                        .launch_plan(&view, &request)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    if let Some(spec) = plan.specs.select {
                        assert_eq!(
                            spec.algorithm, algorithm,
                            "{what}: the record's select is not used"
                        );
                    }
                }
                let eager = {
                    let out = decoder
                        .step(&view, &batch.queries, request)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    out.check().unwrap_or_else(|e| panic!("{what}: {e}"));
                    out.download().unwrap_or_else(|e| panic!("{what}: {e}"))
                };
                let mut cm = Mismatches::new(format!("{test}: {what}"), seed);
                check_step(&check, method, &eager, &groups, want, &mut cm);
                cm.finish();

                if transfer == Some(Transfer::Memcpy) {
                    assert!(
                        matches!(
                            decoder.capture(&view, &batch.queries, request),
                            Err(StepError::NotCapturable)
                        ),
                        "{what}: the memcpy transfer must refuse capture"
                    );
                    continue;
                }
                let graph = decoder
                    .capture(&view, &batch.queries, request)
                    .unwrap_or_else(|e| panic!("{what}: capture: {e}"));
                graph.serves(&view).expect("the captured view");
                poison(&gpu, &graph.output(&gpu), method == Method::Dense);
                graph.replay(&gpu).expect("replay");
                let replayed = graph.output(&gpu).download().expect("download replay");
                let differs = replay_difference(&eager, &replayed);
                m.check(differs.is_none(), || {
                    format!(
                        "{what}: the replayed graph differs from the eager step: {}",
                        differs.unwrap_or_default()
                    )
                });
            }
        }
    }
    m.finish();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_step_raw_store_g4() {
    run_case("gpu_step_raw_store_g4", D, 4, Basis::Raw);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_step_compact_select_g4() {
    run_case_with(
        "gpu_step_compact_select_g4",
        D,
        4,
        Basis::Raw,
        SelectVariant::Only(SelectAlgorithm::Compact),
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_step_onepass_select_g4() {
    run_case_with(
        "gpu_step_onepass_select_g4",
        D,
        4,
        Basis::Raw,
        SelectVariant::Only(SelectAlgorithm::Onepass),
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_step_onepass_select_g7() {
    run_case_with(
        "gpu_step_onepass_select_g7",
        D,
        7,
        Basis::Klt,
        SelectVariant::Only(SelectAlgorithm::Onepass),
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_step_rotated_store_g7() {
    run_case("gpu_step_rotated_store_g7", D, 7, Basis::Klt);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_step_rotated_store_d96_g16() {
    run_case("gpu_step_rotated_store_d96_g16", 96, 16, Basis::Klt);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_step_refuses_bad_input() {
    let test = "gpu_step_refuses_bad_input";
    let gpu = Arc::new(gpu());
    let (mut rng, _) = inputs::rng_and_seed(test);
    let f = Fixture::new(&mut rng, D, 4, Basis::Raw);
    let batch = DeviceBatch::new(&gpu, &f, Placement::Hbm);
    let config = DecoderConfig {
        block: BLOCK,
        segment_words: SEGMENT_WORDS,
        k_max: K_MAX,
        ..DecoderConfig::default()
    };
    // No calibration: double_sparsity cannot run, nor fathom without σ².
    let mut decoder = Decoder::new(gpu.clone(), f.model(), config).expect("a valid decoder");
    let view = batch.view();
    let request = |method| StepRequest::new(method, K);
    let err = |r: Result<StepOutput<'_>, StepError>| r.err().expect("an error");
    assert!(matches!(
        err(decoder.step(
            &view,
            &batch.queries,
            request(Method::DoubleSparsity { r: 32 })
        )),
        StepError::MissingCalibration { .. }
    ));
    assert!(matches!(
        err(decoder.step(
            &view,
            &batch.queries,
            request(Method::Fathom { bits: 48.0 })
        )),
        StepError::MissingCalibration { .. }
    ));
    assert!(matches!(
        err(decoder.step(&view, &batch.queries, request(Method::Fathom { bits: 1.0 }))),
        StepError::Budget { .. }
    ));
    assert!(matches!(
        err(decoder.step(&view, &batch.queries, request(Method::Sparq { r: 129 }))),
        StepError::ChannelCount { .. }
    ));
    assert!(matches!(
        err(decoder.step(&view, &batch.queries, request(Method::Loki { r: 32 }))),
        StepError::NeedsRotatedStore
    ));
    assert!(matches!(
        err(decoder.step(
            &view,
            &batch.queries,
            StepRequest::new(Method::Oracle, K_MAX + 1)
        )),
        StepError::K { .. }
    ));
    let short = gpu.upload(&f.queries[1..]).expect("upload");
    assert!(matches!(
        err(decoder.step(&view, &short, request(Method::Oracle))),
        StepError::QueryShape { .. }
    ));
    let mut nan = f.queries.clone();
    nan[D + 3] = f32::NAN;
    assert!(matches!(
        err(decoder.step_host(&view, &nan, request(Method::Oracle))),
        StepError::NonFiniteQuery {
            sequence: 0,
            query_head: 1,
            channel: 3,
            ..
        }
    ));
    let wrong_layer = LayerView {
        layer: LAYERS,
        ..batch.view()
    };
    assert!(matches!(
        err(decoder.step(&wrong_layer, &batch.queries, request(Method::Oracle))),
        StepError::Layer { .. }
    ));
    let no_landmarks = LayerView {
        landmarks: None,
        ..batch.view()
    };
    assert!(matches!(
        err(decoder.step(&no_landmarks, &batch.queries, request(Method::Landmark))),
        StepError::MissingLandmarks
    ));
    // Host queries that are fine run, and equal the device-query step bit for bit.
    let from_host = decoder
        .step_host(&view, &f.queries, request(Method::Oracle))
        .expect("valid host queries")
        .download()
        .expect("download");
    let from_device = decoder
        .step(&view, &batch.queries, request(Method::Oracle))
        .expect("valid device queries")
        .download()
        .expect("download");
    assert_eq!(from_host.sel, from_device.sel);
    assert_eq!(bits(&from_host), bits(&from_device));
}
