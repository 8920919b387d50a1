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
//! - `gpu_step_fused_select_g4`, `gpu_step_fused_select_g7`: the same with its fused form
//!   (`algorithm: fused`: one launch writes the selection; its arrival counters are the
//!   workspace's, reused by every step and graph replay).
//! - `gpu_step_cluster_select_g4`, `gpu_step_cluster_select_g7`: the same with the cluster
//!   select (`algorithm: cluster`: eight blocks a query head in a thread-block cluster; sm_90);
//!   `gpu_step_scan_peaks_cluster_select_g4`, `gpu_step_scan_peaks_cluster_tensor_core_scan_g7`:
//!   its form reading the scan's peaks (`scan_peaks_cluster`), after the plain scan or the
//!   tensor-core one, the other methods running the cluster select that reads the scores.
//! - `gpu_step_scan_peaks_select_g4/_g7`, `gpu_step_scan_peaks_head_select_g4`,
//!   `gpu_step_scan_peaks_tensor_core_scan_g4`, `gpu_step_scan_peaks_head_tensor_core_scan_g7`:
//!   the selects that read the peaks the scan wrote (`algorithm: scan_peaks`,
//!   `scan_peaks_head`), after the plain scan or the tensor-core one (which then write peaks,
//!   `ScanSpec::peaks`; the tail past `n_stored` is the oracle's, which the select reads from the
//!   scores), through a record of those tiles; the methods without a plane scan run the
//!   peaks select that reads the scores.
//! - `gpu_step_tensor_core_scan_g4`, `gpu_step_tensor_core_scan_g7`: the first two cases with
//!   the scan on the tensor cores (`ScanSpec::tensor_cores`, both placements), through a record
//!   whose only entry it is; ties are then judged within that scan's bound
//!   (`StepCheck::for_plan`, as every case does from its step's launch plan).
//! - `gpu_step_split_attention_g4`, `gpu_step_split_attention_g7`,
//!   `gpu_step_split_attention_16_g4`: the first two cases with attention over 4, 3 and 16
//!   blocks a query head (`splits`; their arrival counters are the workspace's, reused by every
//!   step and graph replay).
//! - The tail (tokens past `n_stored`) is scored in blocks of the plan's launch in every case
//!   (`Tiles::tail_in_plan`, the default); `gpu_step_tail_in_the_oracle_g4/_g7` score it in
//!   the oracle's launch after the scan instead.
//! - `gpu_step_plan_batched_runs_g4`: the first case with the plan's run tables written from
//!   batched pointer loads (`Tiles::plan_batched_runs`, opt-in).
//! - `gpu_step_plan_run_blocks_g4`: the first case with the plan's run tables shared among 4
//!   blocks a head (`Tiles::plan_run_blocks`; the default shares them at long contexts only).
//! - `gpu_step_scan_stripes_g4`: the first case with the plane scan's grid at one block a
//!   segment (`Tiles::scan_stripes` 1) with the default tiles and the tensor-core scan's, and
//!   at 3 blocks a segment of 16 tiles (uneven stripes) with the tensor-core scan's.
//! - `gpu_step_scan_one_wave_g4`: the first case with the HBM scan's grid fitted to one wave
//!   (`Tiles::scan_one_wave`, the default) and with the spec's grid, default and tensor-core
//!   tiles.
//! - `gpu_step_attention_cluster_merge_g4`: the first case with attention's splits merged in a
//!   thread-block cluster (`Tiles::attention_cluster_merge`, opt-in), at 8 and 3 splits.
//! - `gpu_step_attention_prefetch_rows_g4`: the first case with attention's rows prefetched
//!   into L2 (`Tiles::attention_prefetch_rows`, opt-in), at one block a head and at the
//!   record's tiles.
//! - `gpu_step_plan_unpaired_runs_g4`: the first case with the plan's run-table entries written
//!   by one lane each (`Tiles::plan_paired_runs` false; lane pairs are the default), with one
//!   block a head and with 4.
//! - `gpu_step_select_coarse_floor_g4`, `gpu_step_select_coarse_floor_g7`: the first two cases
//!   with the peaks selects' coarse floor (`Tiles::select_coarse_floor`, the default) through a
//!   record of `scan_peaks` (G = 4) and `scan_peaks_head` (G = 7): the methods without a plane
//!   scan run `peaks` and `peaks_head`, so every step's select has the coarse floor.
//! - `gpu_step_select_full_floor_g4`: the G = 4 case with the floor from all three passes
//!   (`Tiles::select_coarse_floor` false).
//! - `gpu_step_select_owned_tiles_g4`, `gpu_step_select_owned_tiles_g7`: the first two cases
//!   with owned peak tiles (`Tiles::select_owned_tiles`, opt-in) through a record of `peaks`
//!   (G = 4) and `peaks_head` (G = 7), so that every step's select owns its tiles.
//! - `gpu_step_resident_select_g4`: the first case through a record of the resident select
//!   at 256 threads x 4 items (rows of several tiles, read again by every pass);
//!   `gpu_step_select_resident_g7`: the second with `Tiles::select_resident` (opt-in) over a
//!   record of `peaks_head`, so that every step's select is the resident one at 1,024 x 32
//!   (rows of one tile, read once).
//! - `gpu_step_plan_direct_line_g4`, `gpu_step_plan_direct_line_g7`: the first two cases with
//!   fathom's water line found directly (`Tiles::plan_direct_line`, opt-in), the G = 7 one
//!   rotated.
//!
//! Graphs: every capturable step is captured, its outputs poisoned, replayed, and compared bit
//! for bit with the eager step. The memcpy transfer must refuse capture.
//! `gpu_step_refuses_bad_input`: the typed errors of bad queries, k, layer and calibration.

use codegen::model::{Basis, ModelShape};
use codegen::spec::{AttentionRows, KvRows, Placement, SelectAlgorithm};
use fathom_tests::device_store::DeviceStore;
use fathom_tests::kit::GpuTest;
use fathom_tests::select_kernels::{HeadTable, Mismatches};
use fathom_tests::step_check::{
    checked_eager_step, eager_step, methods, poison, reference_steps, replay_difference, replayed,
    Expected, GroupData, OnlyTile, OnlyTiles, StepCheck,
};
use fathom_tests::step_setup::{
    decoder_config, model, short_lengths, transfers, HeadCalibration, KV_HEADS, K_MAX, LAYER,
    LAYERS, MAX_RELATIVE_ERROR, SEGMENT_WORDS,
};
use fathom_tests::store_kernels::rotate_keys;
use fathom_tests::{gpu_test, inputs};
use half::{bf16, f16};
use rand::seq::SliceRandom;
use rand::Rng;
use reference::store::{BlockSize, HeadId, HeadStore, StoreLayout};
use runtime::gpu::{DeviceBuffer, Gpu};
use runtime::shard::HeadShard;
use runtime::step::launches::Role;
use runtime::step::{
    Calibration, Decoder, DecoderConfig, HostStepOutput, Method, StepError, StepOutput,
    StepRequest, Transfer,
};
use runtime::tuning::{Tile, TunedFamily};
use runtime::view::LayerView;
use std::ops::Range;
use std::sync::Arc;

const BATCH: usize = 3;
/// The head dimension of every case but the D = 96 one.
const D: usize = 128;
const K: usize = 96;

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
    /// What is fitted for every KV head of `LAYER`.
    fitted: HeadCalibration,
    /// `σ²` `[B][H][d]` as the GPU reads it (f64 of these floats for the reference).
    sigma2: Vec<f32>,
    /// Whether `σ²` comes from the calibration (else passed with the request).
    calibrated_sigma2: bool,
    calibration: Calibration,
}

impl Fixture {
    fn new(rng: &mut impl Rng, d: usize, group: usize, basis: Basis) -> Fixture {
        let mut lengths = short_lengths(rng);
        lengths.push(rng.gen_range(20_000..50_000));
        lengths.shuffle(rng);
        let layout = StoreLayout::new(d, BlockSize::B64, SEGMENT_WORDS).expect("valid layout");
        let rotated = basis == Basis::Klt;
        let fitted = HeadCalibration::fit(rng, d, group, rotated);
        let mut keys = Vec::new();
        let mut vals = Vec::new();
        let mut stores = Vec::new();
        for &n in &lengths {
            let (mut ks, mut vs, mut ss) = (Vec::new(), Vec::new(), Vec::new());
            for h in 0..KV_HEADS {
                let k = inputs::keys(rng, n, d);
                let stored = match fitted.rotations.get(h) {
                    Some(rot) => rotate_keys(rot, d, &k),
                    None => k.clone(),
                };
                let id = HeadId {
                    layer: LAYER,
                    kv_head: h,
                };
                ss.push(HeadStore::from_keys(layout, id, &stored).expect("random keys encode"));
                ks.push(k);
                vs.push(inputs::values(rng, n, d));
            }
            keys.push(ks);
            vals.push(vs);
            stores.push(ss);
        }
        let queries = inputs::vectors(rng, BATCH * KV_HEADS * group, d);
        let (calibration, layer_sigma2) = fitted.decoder_calibration(rng, d, rotated);
        let calibrated_sigma2 = layer_sigma2.is_some();
        let sigma2: Vec<f32> = match layer_sigma2 {
            Some(s) => (0..BATCH).flat_map(|_| s.clone()).collect(),
            // The uncalibrated stand-in of every (sequence, head).
            None => stores
                .iter()
                .flatten()
                .flat_map(|s| s.mean_square_scale().into_iter().map(|x| x as f32))
                .collect(),
        };
        Fixture {
            d,
            group,
            basis,
            lengths,
            keys,
            values: vals,
            queries,
            stores,
            fitted,
            sigma2,
            calibrated_sigma2,
            calibration,
        }
    }

    fn model(&self) -> ModelShape {
        model(
            format!("test-g{}", self.group),
            self.d,
            self.group,
            self.basis,
        )
    }

    /// Every (sequence, head) as the reference sees it, `[b*H + h]`.
    fn groups(&self) -> Vec<GroupData<'_>> {
        let mut out = Vec::new();
        for b in 0..BATCH {
            for h in 0..KV_HEADS {
                let bh = b * KV_HEADS + h;
                out.push(GroupData {
                    store: &self.stores[b][h],
                    keys: &self.keys[b][h],
                    values: &self.values[b][h],
                    queries: inputs::group_queries(&self.queries, bh, self.group, self.d),
                    klt: self.fitted.klts.get(h),
                    sigma2: self.sigma2[bh * self.d..][..self.d]
                        .iter()
                        .map(|&x| f64::from(x))
                        .collect(),
                    double_sparsity: Some(&self.fitted.double_sparsity[h]),
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
            tensor_core_scan: false,
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
    batch: usize,
    kv_heads: usize,
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
        DeviceBatch::of_heads(gpu, f, placement, 0..KV_HEADS)
    }

    /// The KV heads `heads` of every sequence only (with their query heads and `σ²`): what a
    /// tensor-parallel rank holding them sees.
    fn of_heads(gpu: &Gpu, f: &Fixture, placement: Placement, heads: Range<usize>) -> DeviceBatch {
        DeviceBatch::of(gpu, f, placement, 0..BATCH, heads)
    }

    /// Sequence `b` of the fixture alone, every KV head: a batch of one.
    fn of_sequence(gpu: &Gpu, f: &Fixture, placement: Placement, b: usize) -> DeviceBatch {
        DeviceBatch::of(gpu, f, placement, b..b + 1, 0..KV_HEADS)
    }

    /// The KV heads `heads` of the sequences `sequences`.
    fn of(
        gpu: &Gpu,
        f: &Fixture,
        placement: Placement,
        sequences: Range<usize>,
        heads: Range<usize>,
    ) -> DeviceBatch {
        let pick = |b: usize| heads.clone().map(move |h| (b, h));
        let each: Vec<(usize, usize)> = sequences.clone().flat_map(pick).collect();
        let stores: Vec<Vec<HeadStore>> = sequences
            .clone()
            .map(|b| f.stores[b][heads.clone()].to_vec())
            .collect();
        let max_seg = f
            .stores
            .iter()
            .flatten()
            .map(|s| s.segments().len())
            .max()
            .unwrap_or(1)
            .max(1);
        let bits = |rows: &Vec<Vec<Vec<bf16>>>| -> Vec<Vec<u16>> {
            each.iter()
                .map(|&(b, h)| rows[b][h].iter().map(|x| x.to_bits()).collect())
                .collect()
        };
        let means: Vec<Vec<u16>> = each
            .iter()
            .map(|&(b, h)| landmark_means(&f.keys[b][h], f.d))
            .collect();
        let per_head = |values: &[f32], n: usize| -> Vec<f32> {
            each.iter()
                .flat_map(|&(b, h)| &values[(b * KV_HEADS + h) * n..][..n])
                .copied()
                .collect()
        };
        let lengths = &f.lengths[sequences.clone()];
        let totals: Vec<i32> = lengths.iter().map(|&n| n as i32).collect();
        DeviceBatch {
            placement,
            batch: sequences.len(),
            store: DeviceStore::new(gpu, placement, &stores, max_seg).expect("store uploads"),
            n_total: gpu.upload(&totals).expect("n_total uploads"),
            k_rows: HeadTable::upload(gpu, placement, &bits(&f.keys)).expect("keys upload"),
            v_rows: HeadTable::upload(gpu, placement, &bits(&f.values)).expect("values upload"),
            landmarks: HeadTable::upload(gpu, placement, &means).expect("means upload"),
            head_dim: f.d,
            kv_heads: heads.len(),
            max_tokens: *lengths.iter().max().expect("a batch"),
            queries: gpu
                .upload(&per_head(&f.queries, f.group * f.d))
                .expect("queries upload"),
            sigma2: gpu.upload(&per_head(&f.sigma2, f.d)).expect("σ² uploads"),
        }
    }

    fn view(&self) -> LayerView<'_> {
        LayerView {
            layer: LAYER,
            batch: self.batch,
            kv_heads: self.kv_heads,
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
enum Tuned {
    /// Whatever the GPU's record (or the default tiles) say.
    Default,
    /// This select variant (256 threads, 4 items), through an [`OnlyTile`] record.
    Only(SelectAlgorithm),
    /// Attention over this many blocks a query head (256 threads, 4 rows a warp), through an
    /// [`OnlyTile`] record.
    SplitAttention(u32),
    /// The scan on the tensor cores (8-word tiles of 128 threads), through an [`OnlyTile`] record.
    TensorCoreScan,
    /// A select reading the scan's peaks (256 threads, 4 items) after the plain scan or (with
    /// `true`) the tensor-core one, through an [`OnlyTiles`] record: the plane methods' scans
    /// then write the peaks, the others run the peaks select that reads the scores.
    ScanPeaks(SelectAlgorithm, bool),
}

fn run_case(t: &mut GpuTest, d: usize, group: usize, basis: Basis) {
    run_case_with(t, d, group, basis, Tuned::Default);
}

fn run_case_with(t: &mut GpuTest, d: usize, group: usize, basis: Basis, select: Tuned) {
    run_case_configured(t, d, group, basis, select, decoder_config());
}

fn run_case_configured(
    t: &mut GpuTest,
    d: usize,
    group: usize,
    basis: Basis,
    select: Tuned,
    config: DecoderConfig,
) {
    let (gpu, test, seed) = (t.gpu.clone(), t.name, t.seed);
    let coarse_floor = config.tiles.select_coarse_floor;
    let owned_tiles = config.tiles.select_owned_tiles;
    let tiles = config.tiles;
    let f = Fixture::new(&mut t.rng, d, group, basis);
    eprintln!("{test}: lengths {:?}", f.lengths);
    let mut decoder = Decoder::new(gpu.clone(), f.model(), config)
        .expect("a valid decoder")
        .with_calibration(f.calibration.clone())
        .expect("calibration of the model");
    match select {
        Tuned::Default => {}
        Tuned::Only(algorithm) => {
            let tile = Tile::select(256, 4, algorithm);
            decoder = decoder.with_tuning(Box::new(OnlyTile(TunedFamily::Select, tile)));
        }
        Tuned::SplitAttention(splits) => {
            let tile = Tile::Attention {
                threads: 256,
                rows_per_warp: 4,
                splits,
            };
            decoder = decoder.with_tuning(Box::new(OnlyTile(TunedFamily::Attention, tile)));
        }
        Tuned::TensorCoreScan => {
            let tile = Tile::Scan {
                tile_words: 8,
                threads: 128,
                tensor_cores: true,
            };
            decoder = decoder.with_tuning(Box::new(OnlyTile(TunedFamily::Scan, tile)));
        }
        Tuned::ScanPeaks(algorithm, tensor_cores) => {
            let mut tiles = vec![(TunedFamily::Select, Tile::select(256, 4, algorithm))];
            if tensor_cores {
                let scan = Tile::Scan {
                    tile_words: 8,
                    threads: 128,
                    tensor_cores: true,
                };
                tiles.push((TunedFamily::Scan, scan));
            }
            decoder = decoder.with_tuning(Box::new(OnlyTiles(tiles)));
        }
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
        let expected = Expected {
            check: &check,
            groups: &groups,
            want,
        };
        for batch in &batches {
            for transfer in transfers(batch.placement, method) {
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
                    union: true,
                };
                let (plan, eager) = checked_eager_step(
                    &mut decoder,
                    &view,
                    &batch.queries,
                    request,
                    &expected,
                    &format!("{test}: {what}"),
                    seed,
                );
                if let Some(spec) = plan.specs.select {
                    assert_eq!(
                        spec.coarse_floor,
                        coarse_floor && spec.algorithm.peaks(),
                        "{what}: the select's coarse floor"
                    );
                    assert_eq!(
                        spec.owned_tiles,
                        owned_tiles && spec.algorithm.owns_tiles(),
                        "{what}: the select's owned tiles"
                    );
                }
                match select {
                    Tuned::Default => {}
                    Tuned::Only(algorithm) => {
                        if let Some(spec) = plan.specs.select {
                            assert_eq!(
                                spec.algorithm,
                                tiles.resident_for((256, 4, algorithm)).2,
                                "{what}: the record's select is not used"
                            );
                        }
                    }
                    Tuned::SplitAttention(splits) => assert_eq!(
                        plan.specs.attention.splits, splits,
                        "{what}: the record's attention is not used"
                    ),
                    Tuned::TensorCoreScan => {
                        if let Some(scan) = plan.specs.scan {
                            assert!(scan.tensor_cores, "{what}: the record's scan is not used");
                        }
                    }
                    Tuned::ScanPeaks(algorithm, tensor_cores) => {
                        let select = plan.specs.select.map(|s| s.algorithm);
                        match plan.specs.scan {
                            Some(scan) => {
                                assert_eq!(select, Some(algorithm), "{what}: the record's select");
                                assert!(scan.peaks, "{what}: the scan writes no peaks");
                                assert_eq!(scan.tensor_cores, tensor_cores, "{what}: the scan");
                            }
                            None => assert!(
                                select.is_none_or(|a| a == algorithm.without_scan_peaks()),
                                "{what}: a method without a plane scan runs {select:?}"
                            ),
                        }
                    }
                }

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
                let replayed = replayed(&gpu, &graph, method == Method::Dense);
                let differs = replay_difference(&eager, &replayed);
                m.check(differs.is_none(), || {
                    format!(
                        "{what}: the replayed graph differs from the eager step: {}",
                        differs.unwrap_or_default()
                    )
                });
                without_union(&gpu, &mut decoder, batch, request, &eager, &what, &mut m);
            }
        }
    }
    m.finish();
}

/// A request with `union: false`: where attention reads the store's rows the step drops the
/// union's launch and its sets and outputs stay the eager step's bit for bit (eager, over
/// outputs poisoned after a whole step, and replayed); elsewhere nothing changes.
fn without_union(
    gpu: &Gpu,
    decoder: &mut Decoder,
    batch: &DeviceBatch,
    request: StepRequest<'_>,
    whole: &HostStepOutput,
    what: &str,
    m: &mut Mismatches,
) {
    let view = batch.view();
    let bare = StepRequest {
        union: false,
        ..request
    };
    let with = decoder.launch_plan(&view, &request).expect("plan");
    let plan = decoder.launch_plan(&view, &bare).expect("plan");
    let skips = plan.specs.select.is_some()
        && plan.specs.attention.rows == AttentionRows::Store
        && batch.placement == Placement::Hbm;
    m.check(plan.union != skips, || {
        format!(
            "{what}: union = {} where it should be {}",
            plan.union, !skips
        )
    });
    m.check(
        plan.operations.len() + usize::from(skips) == with.operations.len(),
        || {
            format!(
                "{what}: {} launches without the union, {} with",
                plan.operations.len(),
                with.operations.len()
            )
        },
    );
    if !skips {
        return;
    }
    let dense = request.method == Method::Dense;
    {
        let out = decoder.step(&view, &batch.queries, request).expect("step");
        poison(gpu, &out, dense);
    }
    let bare_what = format!("{what} without the union");
    let eager = eager_step(decoder, &view, &batch.queries, bare, &bare_what);
    let graph = decoder
        .capture(&view, &batch.queries, bare)
        .unwrap_or_else(|e| panic!("{bare_what}: capture: {e}"));
    let replay = replayed(gpu, &graph, dense);
    for (how, got) in [("eager", &eager), ("replayed", &replay)] {
        m.check(!got.layout.union && got.uni.is_empty(), || {
            format!("{bare_what} ({how}): the output claims a union")
        });
        // The rows' tails past sel_count are not outputs: only the sets and outputs compare.
        let l = whole.layout;
        for b in 0..l.batch {
            for h in 0..l.kv_heads {
                for g in 0..l.group {
                    m.check(got.selected(b, h, g) == whole.selected(b, h, g), || {
                        format!("{bare_what} ({how}): ({b}, {h}, {g}) selected another set")
                    });
                    let same = got
                        .output(b, h, g)
                        .iter()
                        .zip(whole.output(b, h, g))
                        .all(|(x, y)| x.to_bits() == y.to_bits());
                    m.check(same, || {
                        format!("{bare_what} ({how}): ({b}, {h}, {g}) attention output differs")
                    });
                }
            }
        }
    }
}

gpu_test!(gpu_step_raw_store_g4, |t| {
    run_case(&mut t, D, 4, Basis::Raw);
});

gpu_test!(gpu_step_compact_select_g4, |t| {
    run_case_with(
        &mut t,
        D,
        4,
        Basis::Raw,
        Tuned::Only(SelectAlgorithm::Compact),
    );
});

gpu_test!(gpu_step_onepass_select_g4, |t| {
    run_case_with(
        &mut t,
        D,
        4,
        Basis::Raw,
        Tuned::Only(SelectAlgorithm::Onepass),
    );
});

gpu_test!(gpu_step_onepass_select_g7, |t| {
    run_case_with(
        &mut t,
        D,
        7,
        Basis::Klt,
        Tuned::Only(SelectAlgorithm::Onepass),
    );
});

gpu_test!(gpu_step_fused_select_g4, |t| {
    run_case_with(
        &mut t,
        D,
        4,
        Basis::Raw,
        Tuned::Only(SelectAlgorithm::Fused),
    );
});

gpu_test!(gpu_step_fused_select_g7, |t| {
    run_case_with(
        &mut t,
        D,
        7,
        Basis::Klt,
        Tuned::Only(SelectAlgorithm::Fused),
    );
});

gpu_test!(gpu_step_peaks_select_g4, |t| {
    run_case_with(
        &mut t,
        D,
        4,
        Basis::Raw,
        Tuned::Only(SelectAlgorithm::Peaks),
    );
});

gpu_test!(gpu_step_peaks_select_g7, |t| {
    run_case_with(
        &mut t,
        D,
        7,
        Basis::Klt,
        Tuned::Only(SelectAlgorithm::Peaks),
    );
});

gpu_test!(gpu_step_peaks_head_select_g4, |t| {
    run_case_with(
        &mut t,
        D,
        4,
        Basis::Raw,
        Tuned::Only(SelectAlgorithm::PeaksHead),
    );
});

gpu_test!(gpu_step_peaks_head_select_g7, |t| {
    run_case_with(
        &mut t,
        D,
        7,
        Basis::Klt,
        Tuned::Only(SelectAlgorithm::PeaksHead),
    );
});

gpu_test!(gpu_step_cluster_select_g4, |t| {
    run_case_with(
        &mut t,
        D,
        4,
        Basis::Raw,
        Tuned::Only(SelectAlgorithm::Cluster),
    );
});

gpu_test!(gpu_step_cluster_select_g7, |t| {
    run_case_with(
        &mut t,
        D,
        7,
        Basis::Klt,
        Tuned::Only(SelectAlgorithm::Cluster),
    );
});

gpu_test!(gpu_step_scan_peaks_cluster_select_g4, |t| {
    let select = Tuned::ScanPeaks(SelectAlgorithm::ScanPeaksCluster, false);
    run_case_with(&mut t, D, 4, Basis::Raw, select);
});

gpu_test!(gpu_step_scan_peaks_cluster_tensor_core_scan_g7, |t| {
    let select = Tuned::ScanPeaks(SelectAlgorithm::ScanPeaksCluster, true);
    run_case_with(&mut t, D, 7, Basis::Klt, select);
});

gpu_test!(gpu_step_scan_peaks_select_g4, |t| {
    let select = Tuned::ScanPeaks(SelectAlgorithm::ScanPeaks, false);
    run_case_with(&mut t, D, 4, Basis::Raw, select);
});

gpu_test!(gpu_step_scan_peaks_select_g7, |t| {
    let select = Tuned::ScanPeaks(SelectAlgorithm::ScanPeaks, false);
    run_case_with(&mut t, D, 7, Basis::Klt, select);
});

gpu_test!(gpu_step_scan_peaks_head_select_g4, |t| {
    let select = Tuned::ScanPeaks(SelectAlgorithm::ScanPeaksHead, false);
    run_case_with(&mut t, D, 4, Basis::Raw, select);
});

gpu_test!(gpu_step_scan_peaks_tensor_core_scan_g4, |t| {
    let select = Tuned::ScanPeaks(SelectAlgorithm::ScanPeaks, true);
    run_case_with(&mut t, D, 4, Basis::Raw, select);
});

gpu_test!(gpu_step_scan_peaks_head_tensor_core_scan_g7, |t| {
    let select = Tuned::ScanPeaks(SelectAlgorithm::ScanPeaksHead, true);
    run_case_with(&mut t, D, 7, Basis::Klt, select);
});

gpu_test!(gpu_step_tensor_core_scan_g4, |t| {
    run_case_with(&mut t, D, 4, Basis::Raw, Tuned::TensorCoreScan);
});

gpu_test!(gpu_step_tensor_core_scan_g7, |t| {
    run_case_with(&mut t, D, 7, Basis::Klt, Tuned::TensorCoreScan);
});

gpu_test!(gpu_step_split_attention_g4, |t| {
    run_case_with(&mut t, D, 4, Basis::Raw, Tuned::SplitAttention(4));
});

gpu_test!(gpu_step_split_attention_g7, |t| {
    run_case_with(&mut t, D, 7, Basis::Klt, Tuned::SplitAttention(3));
});

// The most blocks a query head (`MAX_SPLITS`, autotune's `--opt-in attention-splits16`): most
// of the fixture's heads have fewer rows a split than a block has warps, some none at all.
gpu_test!(gpu_step_split_attention_16_g4, |t| {
    run_case_with(&mut t, D, 4, Basis::Raw, Tuned::SplitAttention(16));
});

gpu_test!(gpu_step_rotated_store_g7, |t| {
    run_case(&mut t, D, 7, Basis::Klt);
});

gpu_test!(gpu_step_rotated_store_d96_g16, |t| {
    run_case(&mut t, 96, 16, Basis::Klt);
});

/// The request of the shard test: `σ²` from the batch where the calibration has none.
fn shard_request<'a>(method: Method, f: &Fixture, b: &'a DeviceBatch) -> StepRequest<'a> {
    StepRequest {
        method,
        transfer: None,
        k: K,
        scale: None,
        sigma2: (!f.calibrated_sigma2).then_some(&b.sigma2),
        union: true,
    }
}

// Tensor parallelism over KV heads (issue #17), P ranks simulated by P streams of one GPU: each
// rank's decoder is made for its `HeadShard` of the model, with the shard's slice of the
// calibration, over a view of its KV heads only, on a stream of its own; side by side the ranks'
// outputs are the whole model's step bit for bit, for every method, in both placements.
gpu_test!(gpu_step_head_shards_equal_the_whole_step, |t| {
    let f = Fixture::new(&mut t.rng, D, 4, Basis::Raw);
    let model = f.model();
    let whole_gpu = t.gpu.clone();
    let mut whole = Decoder::new(whole_gpu.clone(), model.clone(), decoder_config())
        .expect("a valid decoder")
        .with_calibration(f.calibration.clone())
        .expect("calibration of the model");
    let shards = HeadShard::all(&model, KV_HEADS).expect("one KV head a rank");
    let mut ranks: Vec<(HeadShard, Arc<Gpu>, Decoder)> = shards
        .into_iter()
        .map(|s| {
            let gpu = Arc::new(t.gpu.with_new_stream().expect("a stream a rank"));
            let calibration = s
                .calibration(&model, &f.calibration)
                .expect("the rank's calibration");
            let decoder = Decoder::new(gpu.clone(), s.model(&model), decoder_config())
                .expect("the rank's decoder")
                .with_calibration(calibration)
                .expect("the rank's calibration fits its model");
            (s, gpu, decoder)
        })
        .collect();
    let mut m = Mismatches::new(t.name, t.seed);
    for placement in [Placement::Hbm, Placement::Host] {
        let batch = DeviceBatch::new(&whole_gpu, &f, placement);
        let parts: Vec<DeviceBatch> = ranks
            .iter()
            .map(|(s, gpu, _)| DeviceBatch::of_heads(gpu, &f, placement, s.kv_heads.clone()))
            .collect();
        for method in methods(false) {
            let what = format!("{method} {}", placement.as_str());
            let want = eager_step(
                &mut whole,
                &batch.view(),
                &batch.queries,
                shard_request(method, &f, &batch),
                &what,
            );
            for ((s, _, decoder), part) in ranks.iter_mut().zip(&parts) {
                let got = eager_step(
                    decoder,
                    &part.view(),
                    &part.queries,
                    shard_request(method, &f, part),
                    &what,
                );
                for b in 0..BATCH {
                    for (i, h) in s.kv_heads.clone().enumerate() {
                        for g in 0..f.group {
                            let (a, w) = (got.output(b, i, g), want.output(b, h, g));
                            let same = a.iter().zip(w).all(|(x, y)| x.to_bits() == y.to_bits());
                            m.check(same, || {
                                format!(
                                    "{what}: rank {} of {}, sequence {b}, KV head {h}, query {g}: \
                                     {:?}... against the whole step's {:?}...",
                                    s.rank,
                                    s.ranks,
                                    &a[..4],
                                    &w[..4]
                                )
                            });
                        }
                    }
                }
            }
        }
    }
    m.finish();
});

// Attention straight from the store's rows in HBM (`Tiles::attention_rows = store`, opt-in): no
// fetch; every method, eager and replayed, against the reference (the host placement, which
// still fetches, runs beside it).
gpu_test!(gpu_step_attention_from_the_store_g4, |t| {
    let mut config = decoder_config();
    config.tiles.attention_rows = AttentionRows::Store;
    run_case_configured(&mut t, D, 4, Basis::Raw, Tuned::Default, config);
});

gpu_test!(gpu_step_attention_from_the_store_g7, |t| {
    let mut config = decoder_config();
    config.tiles.attention_rows = AttentionRows::Store;
    run_case_configured(&mut t, D, 7, Basis::Klt, Tuned::Default, config);
});

// Programmatic dependent launch (`Gpu::set_programmatic_launch`, on by default, `FATHOM_PDL`):
// every kernel of the step, eager and replayed from its graph, may be scheduled while the one
// before it drains, and waits for it in `await_previous_kernel()`; the step must not change by
// a bit, with it and with plain launches (`FATHOM_PDL=0`).
gpu_test!(gpu_step_with_and_without_programmatic_launch_g4, |t| {
    let default = t.gpu.programmatic_launch();
    let able = t.gpu.info().compute_capability.0 >= 9;
    for on in [true, false] {
        t.gpu.set_programmatic_launch(on);
        assert_eq!(
            t.gpu.programmatic_launch(),
            on && able,
            "programmatic launch is on exactly where asked and the device has it"
        );
        run_case(&mut t, D, 4, Basis::Raw);
    }
    t.gpu.set_programmatic_launch(default);
});

// The tail's oracle on a second stream beside the plan and the scan
// (`DecoderConfig::overlap_tail`), forked and joined inside the graph too: the step must not
// change by a bit, eager or replayed, in either placement.
gpu_test!(gpu_step_tail_on_a_second_stream_g4, |t| {
    let mut config = decoder_config();
    config.overlap_tail = true;
    run_case_configured(&mut t, D, 4, Basis::Raw, Tuned::Default, config);
});

// KV heads in groups pipelined on two streams (`DecoderConfig::head_groups`, opt-in): each
// sequence alone (batch 1, where grouping applies), every method and transfer, both
// placements, one KV head a group: the step runs grouped wherever it should, and its sets,
// union and outputs are the whole step's bit for bit, eager (over poisoned outputs) and
// replayed from a graph that forks and joins the second stream.
gpu_test!(gpu_step_head_groups_equal_the_whole_step_g4, |t| {
    let f = Fixture::new(&mut t.rng, D, 4, Basis::Raw);
    let gpu = t.gpu.clone();
    let decoder = |head_groups| {
        let config = DecoderConfig {
            head_groups,
            ..decoder_config()
        };
        Decoder::new(gpu.clone(), f.model(), config)
            .expect("a valid decoder")
            .with_calibration(f.calibration.clone())
            .expect("calibration of the model")
    };
    let (mut whole, mut grouped) = (decoder(1), decoder(KV_HEADS));
    let mut m = Mismatches::new(t.name, t.seed);
    for placement in [Placement::Hbm, Placement::Host] {
        for b in 0..BATCH {
            let batch = DeviceBatch::of_sequence(&gpu, &f, placement, b);
            let view = batch.view();
            for method in methods(false) {
                for transfer in transfers(placement, method) {
                    let what = format!(
                        "{method} {} {} sequence {b} ({} tokens)",
                        placement.as_str(),
                        transfer.map_or("-", Transfer::as_str),
                        f.lengths[b]
                    );
                    let request = StepRequest {
                        method,
                        transfer,
                        ..shard_request(method, &f, &batch)
                    };
                    let groups = grouped.head_groups_for(&view, &request).expect("plan");
                    let expect = if method == Method::Dense || transfer == Some(Transfer::Memcpy) {
                        1
                    } else {
                        KV_HEADS
                    };
                    m.check(groups == expect, || {
                        format!("{what}: {groups} head groups where {expect} were due")
                    });
                    let want = eager_step(&mut whole, &view, &batch.queries, request, &what);
                    let dense = method == Method::Dense;
                    {
                        let out = grouped.step(&view, &batch.queries, request).expect("step");
                        poison(&gpu, &out, dense);
                    }
                    let got = eager_step(&mut grouped, &view, &batch.queries, request, &what);
                    let differs = replay_difference(&want, &got);
                    m.check(differs.is_none(), || {
                        format!(
                            "{what}: the grouped step differs from the whole one: {}",
                            differs.unwrap_or_default()
                        )
                    });
                    if transfer == Some(Transfer::Memcpy) {
                        continue;
                    }
                    let graph = grouped
                        .capture(&view, &batch.queries, request)
                        .unwrap_or_else(|e| panic!("{what}: capture: {e}"));
                    let replay = replayed(&gpu, &graph, dense);
                    let differs = replay_difference(&want, &replay);
                    m.check(differs.is_none(), || {
                        format!(
                            "{what}: the grouped step's graph differs from the whole step: {}",
                            differs.unwrap_or_default()
                        )
                    });
                }
            }
        }
    }
    m.finish();
});

// The tail scored in the oracle's launch after the scan (`Tiles::tail_in_plan` false; the
// default scores it in blocks of the plan's launch, as every other test here runs): the plan
// carries no tail and the oracle launch follows the scan; every method, eager and replayed, both
// placements, against the reference (the fixture's lengths leave tails).
gpu_test!(gpu_step_tail_in_the_oracle_g4, |t| {
    let mut config = decoder_config();
    config.tiles.tail_in_plan = false;
    {
        let f = Fixture::new(&mut t.rng, D, 4, Basis::Raw);
        let batch = DeviceBatch::new(&t.gpu, &f, Placement::Host);
        let decoder = Decoder::new(t.gpu.clone(), f.model(), config)
            .expect("a valid decoder")
            .with_calibration(f.calibration.clone())
            .expect("calibration of the model");
        let request = StepRequest::new(Method::Sparq { r: 16 }, K);
        let plan = decoder.launch_plan(&batch.view(), &request).expect("plan");
        assert!(
            plan.specs.plan.is_some_and(|p| p.tail.is_none()),
            "the plan scores the tail"
        );
        assert!(
            plan.operations
                .iter()
                .any(|op| op.role == Role::Oracle { whole: false }),
            "no oracle launch scores the tail"
        );
    }
    run_case_configured(&mut t, D, 4, Basis::Raw, Tuned::Default, config);
});

// The plan's run tables from segment pointers loaded in batches (`Tiles::plan_batched_runs`,
// opt-in, not yet run on a GPU when written): every method, eager and replayed, both
// placements, against the reference.
gpu_test!(gpu_step_plan_batched_runs_g4, |t| {
    let mut config = decoder_config();
    config.tiles.plan_batched_runs = true;
    run_case_configured(&mut t, D, 4, Basis::Raw, Tuned::Default, config);
});

// The plan's run tables shared among 4 blocks a head (`Tiles::plan_run_blocks`; the default
// gives the shapes of these cases one): every method, eager and replayed, both placements,
// against the reference.
gpu_test!(gpu_step_plan_run_blocks_g4, |t| {
    let mut config = decoder_config();
    config.tiles.plan_run_blocks = Some(4);
    run_case_configured(&mut t, D, 4, Basis::Raw, Tuned::Default, config);
});

// The plane scan at 1 thread block a segment (`Tiles::scan_stripes`; every block then scores
// its whole segment) with the default tiles and the tensor-core scan's 8-word tiles (16 a
// segment), and at 3 (uneven stripes of 5 and 6 tiles) with the latter: every method, eager
// and replayed, both placements, against the reference.
gpu_test!(gpu_step_scan_stripes_g4, |t| {
    for (stripes, tuned) in [
        (1, Tuned::Default),
        (1, Tuned::TensorCoreScan),
        (3, Tuned::TensorCoreScan),
    ] {
        let mut config = decoder_config();
        config.tiles.scan_stripes = Some(stripes);
        run_case_configured(&mut t, D, 4, Basis::Raw, tuned, config);
    }
});

// The HBM plane scan's grid fitted to one wave (`Tiles::scan_one_wave`, the default: the scan
// kernel's occupancy asked of the driver every step) and the spec's grid, with the default
// tiles and the tensor-core scan's: every method, eager and replayed, both placements, against
// the reference.
gpu_test!(gpu_step_scan_one_wave_g4, |t| {
    for one_wave in [true, false] {
        for tuned in [Tuned::Default, Tuned::TensorCoreScan] {
            let mut config = decoder_config();
            config.tiles.scan_one_wave = one_wave;
            run_case_configured(&mut t, D, 4, Basis::Raw, tuned, config);
        }
    }
});

// Attention's splits merged in a thread-block cluster (`Tiles::attention_cluster_merge`,
// opt-in) at 8 and 3 blocks a query head: every method, eager and replayed, both placements,
// against the reference.
gpu_test!(gpu_step_attention_cluster_merge_g4, |t| {
    for splits in [8, 3] {
        let mut config = decoder_config();
        config.tiles.attention_cluster_merge = true;
        run_case_configured(
            &mut t,
            D,
            4,
            Basis::Raw,
            Tuned::SplitAttention(splits),
            config,
        );
    }
});

// Attention's rows prefetched into L2 before its first batch (`Tiles::attention_prefetch_rows`,
// opt-in), with one block a query head and with the GPU's record's tiles: every method, eager
// and replayed, both placements (the store's rows in HBM, the fetched rows from host), against
// the reference.
gpu_test!(gpu_step_attention_prefetch_rows_g4, |t| {
    for tuned in [Tuned::SplitAttention(1), Tuned::Default] {
        let mut config = decoder_config();
        config.tiles.attention_prefetch_rows = true;
        run_case_configured(&mut t, D, 4, Basis::Raw, tuned, config);
    }
});

// The plan's run-table entries written by one lane each (`Tiles::plan_paired_runs` false;
// the default writes them by lane pairs since 2026-12-06), with one block a head and with 4:
// every method, eager and replayed, both placements, against the reference.
gpu_test!(gpu_step_plan_unpaired_runs_g4, |t| {
    for blocks in [None, Some(4)] {
        let mut config = decoder_config();
        config.tiles.plan_paired_runs = false;
        config.tiles.plan_run_blocks = blocks;
        run_case_configured(&mut t, D, 4, Basis::Raw, Tuned::Default, config);
    }
});

// Fathom's water line found directly (`Tiles::plan_direct_line`, opt-in): every method (the
// others ignore it), eager and replayed, both placements, against the reference; raw at G = 4,
// rotated at G = 7.
gpu_test!(gpu_step_plan_direct_line_g4, |t| {
    let mut config = decoder_config();
    config.tiles.plan_direct_line = true;
    run_case_configured(&mut t, D, 4, Basis::Raw, Tuned::Default, config);
});

gpu_test!(gpu_step_plan_direct_line_g7, |t| {
    let mut config = decoder_config();
    config.tiles.plan_direct_line = true;
    run_case_configured(&mut t, D, 7, Basis::Klt, Tuned::Default, config);
});

// The peaks selects' floor from two of the three radix passes over the peaks
// (`Tiles::select_coarse_floor`, the default since 2026-12-06), through a record
// of a peaks select so that every step's select is one (the plane methods' reading the scan's
// peaks, the others' the scores; the many-block forms at G = 4, the one-block ones at G = 7):
// every method, eager and replayed, both placements, against the reference.
gpu_test!(gpu_step_select_coarse_floor_g4, |t| {
    let mut config = decoder_config();
    config.tiles.select_coarse_floor = true;
    let select = Tuned::ScanPeaks(SelectAlgorithm::ScanPeaks, false);
    run_case_configured(&mut t, D, 4, Basis::Raw, select, config);
});

gpu_test!(gpu_step_select_coarse_floor_g7, |t| {
    let mut config = decoder_config();
    config.tiles.select_coarse_floor = true;
    let select = Tuned::ScanPeaks(SelectAlgorithm::ScanPeaksHead, false);
    run_case_configured(&mut t, D, 7, Basis::Klt, select, config);
});

// The peaks selects' floor from all three passes, the exact k-th peak (`Tiles::select_coarse_floor`
// false, the default before 2026-12-06), through the same record as the G = 4 case above.
gpu_test!(gpu_step_select_full_floor_g4, |t| {
    let mut config = decoder_config();
    config.tiles.select_coarse_floor = false;
    let select = Tuned::ScanPeaks(SelectAlgorithm::ScanPeaks, false);
    run_case_configured(&mut t, D, 4, Basis::Raw, select, config);
});

// The peaks selects that stream the scores with owned tiles (`Tiles::select_owned_tiles`,
// opt-in), through a record of one (the many-block form at G = 4, the one-block form at G = 7,
// with the coarse floor as by default) so that every method's select owns its tiles: every
// method, eager and replayed, both placements, against the reference.
gpu_test!(gpu_step_select_owned_tiles_g4, |t| {
    let mut config = decoder_config();
    config.tiles.select_owned_tiles = true;
    let select = Tuned::Only(SelectAlgorithm::Peaks);
    run_case_configured(&mut t, D, 4, Basis::Raw, select, config);
});

gpu_test!(gpu_step_select_owned_tiles_g7, |t| {
    let mut config = decoder_config();
    config.tiles.select_owned_tiles = true;
    let select = Tuned::Only(SelectAlgorithm::PeaksHead);
    run_case_configured(&mut t, D, 7, Basis::Klt, select, config);
});

gpu_test!(gpu_step_resident_select_g4, |t| {
    run_case_with(
        &mut t,
        D,
        4,
        Basis::Raw,
        Tuned::Only(SelectAlgorithm::Resident),
    );
});

gpu_test!(gpu_step_select_resident_g7, |t| {
    let mut config = decoder_config();
    config.tiles.select_resident = true;
    let select = Tuned::Only(SelectAlgorithm::PeaksHead);
    run_case_configured(&mut t, D, 7, Basis::Klt, select, config);
});

gpu_test!(gpu_step_tail_in_the_oracle_g7, |t| {
    let mut config = decoder_config();
    config.tiles.tail_in_plan = false;
    run_case_configured(&mut t, D, 7, Basis::Klt, Tuned::Default, config);
});

gpu_test!(gpu_step_refuses_bad_input, |t| {
    let f = Fixture::new(&mut t.rng, D, 4, Basis::Raw);
    let batch = DeviceBatch::new(&t.gpu, &f, Placement::Hbm);
    // No calibration: double_sparsity cannot run, nor fathom without σ².
    let mut decoder =
        Decoder::new(t.gpu.clone(), f.model(), decoder_config()).expect("a valid decoder");
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
    let short = t.gpu.upload(&f.queries[1..]).expect("upload");
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
});
