//! End-to-end GPU test of decoding (SPEC §8): the key store (`runtime::store::KeyStore`) fed by
//! prefill and per-token appends, and decode steps (`runtime::step::Decoder`) over its
//! `layer_view`, for every method of §4, against the f64 reference step of every query group
//! (`reference::step::step_group`) run on reference `HeadStore`s fed the same keys
//! (rotated as the encode kernel rotates them: `fathom_tests::store_kernels::rotate_keys`).
//!
//! Each case builds four stores (HBM, and mapped host memory of each `HostMemory` mode:
//! `pinned`, `registered`, `vmm2m`; the last two must step bit for bit as `pinned`), two layers, H = 2 KV heads,
//! D = 128 (96 in one case), BLK = 64, S = 128 words (8,192-token segments), and prefills three sequences: one
//! under 100 tokens (every token is selected), one of a few thousand that is not a multiple of
//! the block (a tail), and one long one, in two chunks (the second continues a tail). Layer 0
//! gets other keys, so that a view or encode of the wrong layer shows.
//!
//! - `gpu_decode_raw_g4`: a raw store (QK-norm, qwen3-like with fewer heads), G = 4, a long
//!   sequence of about 300k tokens; `fathom` with the uncalibrated `σ²` (the mean square scale
//!   of each reference store, recomputed as blocks are encoded) passed in a device buffer.
//! - `gpu_decode_klt_g7`: a KLT store, G = 7, a long sequence of 20k–50k tokens; rotations from
//!   the reference `Klt` fit, given to the store config and the decoder's calibration (with
//!   `σ²` and `double_sparsity`'s channels), plus `loki(32)`.
//! - `gpu_decode_onepass_raw_g4`, `gpu_decode_onepass_klt_g7`: the same with the one-read select
//!   (`algorithm: onepass`), through a tuning record whose only entry it is.
//! - `gpu_decode_fused_raw_g4`: the same with its fused form (`algorithm: fused`).
//! - `gpu_decode_klt_d96_g16`: the same at D = 96 (Phi-3) and G = 16 (GLM-4).
//! - `gpu_decode_adjacent_rows_klt_g7`: `gpu_decode_klt_g7` over stores of K/V-adjacent rows
//!   (`StoreConfig::kv_rows = Adjacent`: every store, encode, append and step kernel that
//!   reads the rows takes their `2*D` stride).
//!
//! Decoding: steps at three checkpoints, after the prefill, after one appended token and after
//! 64 more (so every sequence crosses a block boundary and the append encodes a block
//! mid-decode); every token is appended to both layers of both stores, the queries are new at
//! every checkpoint and written in place. At each checkpoint every method runs over each
//! store's view (the host store with the fused, copy-kernel and memcpy transfers for plane
//! methods) and is compared with the reference as `fathom_tests::step_check` says: selections
//! equal apart from ties within fp32 rounding, attention relative error `<= 1e-3`. The host
//! lengths of the store are checked against the reference store's.
//!
//! Graphs: every capturable step of the first checkpoint is captured and replayed at the later
//! ones, after the appends, and must equal the eager step there bit for bit. A graph serves a
//! view of the same layer of the same store with the same batch (`StepGraph::serves`): the
//! store rewrites that layer's tables in place, so a replay reads the new lengths and rows, as
//! long as no sequence needs more segments than the captured `max_seg` and the longest stays
//! within the graph's token capacity. The long length is drawn so that the appends cross
//! neither (the replays must be served).
//!
//! Finally every sequence is freed and `trim()` returns each store to its baseline memory.

use std::collections::HashMap;
use std::sync::Arc;

use codegen::model::Basis;
use codegen::spec::{Placement, SelectAlgorithm};
use fathom_tests::kit::GpuTest;
use fathom_tests::select_kernels::Mismatches;
use fathom_tests::step_check::{
    checked_eager_step, methods, reference_steps, replay_difference, replayed, Expected, GroupData,
    OnlyTile, StepCheck,
};
use fathom_tests::step_setup::{
    decoder_config, model, short_lengths, transfers, HeadCalibration, BLOCK, KV_HEADS, LAYER,
    LAYERS, MAX_RELATIVE_ERROR, SEGMENT_WORDS,
};
use fathom_tests::store_check::bits;
use fathom_tests::store_kernels::rotate_keys;
use fathom_tests::{gpu_test, inputs};
use half::bf16;
use rand::seq::SliceRandom;
use rand::Rng;
use reference::klt::Klt;
use reference::store::{BlockSize, HeadId, HeadStore, StoreLayout};
use runtime::gpu::{DeviceBuffer, Gpu};
use runtime::jit::Jit;
use runtime::step::launches::token_capacity;
use runtime::step::{Calibration, Decoder, Method, StepGraph, StepRequest, Transfer};
use runtime::store::{HostMemory, KeyStore, KvRows, SequenceId, StoreConfig};
use runtime::tuning::{Tile, TunedFamily};

const BATCH: usize = 3;
/// The head dimension of every case but the D = 96 one.
const D: usize = 128;
/// Tokens per segment: `S · 64`.
const SEGMENT_TOKENS: usize = SEGMENT_WORDS * 64;
const K: usize = 96;
/// Tokens appended before each checkpoint: one, then a whole block.
const APPENDS: [usize; 3] = [0, 1, BLOCK];
/// The stores of a case: HBM, and host memory of every allocation mode (`HostMemory`, each
/// required, so a driver without one fails the test); the large-page host stores must step
/// bit for bit as the `pinned` one.
const PLACEMENTS: [(Placement, HostMemory); 4] = [
    (Placement::Hbm, HostMemory::Pinned),
    (Placement::Host, HostMemory::Pinned),
    (Placement::Host, HostMemory::Registered),
    (Placement::Host, HostMemory::Vmm2M),
];

/// What the reference knows of one sequence at `LAYER`: raw keys and values, and the store.
struct Sequence {
    /// `[h]` raw bf16 keys `[n][D]`.
    keys: Vec<Vec<bf16>>,
    values: Vec<Vec<bf16>>,
    /// `[h]` in the store basis.
    stores: Vec<HeadStore>,
}

/// One case: the model, its calibration, the reference sequences and the stores on the GPU.
struct Case {
    d: usize,
    group: usize,
    basis: Basis,
    /// What is fitted for every KV head of `LAYER`.
    fitted: HeadCalibration,
    /// The calibrated `σ²` of `LAYER` `[H][D]` (rotated stores), else none: the stand-in is
    /// passed with the request.
    calibrated_sigma2: Option<Vec<f32>>,
    calibration: Calibration,
    sequences: Vec<Sequence>,
    /// Raw queries of the current checkpoint `[B][H][G][D]`.
    queries: Vec<f32>,
}

/// The lengths of the batch: short, one with a tail, and a long one drawn from `long` so that
/// the appends of the test cross neither a segment nor a token-capacity boundary.
fn lengths(rng: &mut impl Rng, long: std::ops::Range<usize>) -> Vec<usize> {
    let appended: usize = APPENDS.iter().sum();
    let long = loop {
        let n = rng.gen_range(long.clone());
        let end = n + appended;
        if n.div_ceil(SEGMENT_TOKENS) == end.div_ceil(SEGMENT_TOKENS)
            && token_capacity(n) == token_capacity(end)
        {
            break n;
        }
    };
    let mut lengths = short_lengths(rng);
    lengths.push(long);
    lengths.shuffle(rng);
    lengths
}

impl Case {
    fn new(rng: &mut impl Rng, d: usize, group: usize, basis: Basis, lengths: &[usize]) -> Case {
        let rotated = basis == Basis::Klt;
        let fitted = HeadCalibration::fit(rng, d, group, rotated);
        let (calibration, calibrated_sigma2) = fitted.decoder_calibration(rng, d, rotated);

        let layout = StoreLayout::new(d, BlockSize::B64, SEGMENT_WORDS).expect("valid layout");
        let sequences = lengths
            .iter()
            .map(|&n| {
                let keys: Vec<Vec<bf16>> = (0..KV_HEADS).map(|_| inputs::keys(rng, n, d)).collect();
                let values = (0..KV_HEADS).map(|_| inputs::values(rng, n, d)).collect();
                let stores = keys
                    .iter()
                    .enumerate()
                    .map(|(h, k)| {
                        let id = HeadId {
                            layer: LAYER,
                            kv_head: h,
                        };
                        let stored = match fitted.rotations.get(h) {
                            Some(rot) => rotate_keys(rot, d, k),
                            None => k.clone(),
                        };
                        HeadStore::from_keys(layout, id, &stored).expect("random keys encode")
                    })
                    .collect();
                Sequence {
                    keys,
                    values,
                    stores,
                }
            })
            .collect();
        Case {
            d,
            group,
            basis,
            fitted,
            calibrated_sigma2,
            calibration,
            sequences,
            queries: Vec::new(),
        }
    }

    /// The store rotations `[L][H][self.d][self.d]`: LAYER's fitted ones, layer 0 another valid basis.
    fn store_rotations(&self, rng: &mut impl Rng) -> Option<Vec<f32>> {
        if self.basis != Basis::Klt {
            return None;
        }
        let mut all = Vec::with_capacity(LAYERS * KV_HEADS * self.d * self.d);
        for l in 0..LAYERS {
            for h in 0..KV_HEADS {
                if l == LAYER {
                    all.extend(&self.fitted.rotations[h]);
                } else {
                    let klt = Klt::fit(
                        &inputs::calibration_rows(rng, 2 * self.d, self.d),
                        &inputs::calibration_rows(rng, 8, self.d),
                    )
                    .expect("calibration rows are valid");
                    all.extend(klt.basis_row_major().iter().map(|&x| x as f32));
                }
            }
        }
        Some(all)
    }

    /// Appends one token to every sequence of the reference, returning the raw keys and values
    /// `[B][H][self.d]`.
    fn append(&mut self, rng: &mut impl Rng) -> (Vec<bf16>, Vec<bf16>) {
        let keys = inputs::keys(rng, BATCH * KV_HEADS, self.d);
        let vals = inputs::values(rng, BATCH * KV_HEADS, self.d);
        for (b, sequence) in self.sequences.iter_mut().enumerate() {
            for h in 0..KV_HEADS {
                let row = (b * KV_HEADS + h) * self.d..(b * KV_HEADS + h + 1) * self.d;
                sequence.keys[h].extend(&keys[row.clone()]);
                sequence.values[h].extend(&vals[row.clone()]);
                let stored = match self.fitted.rotations.get(h) {
                    Some(rot) => rotate_keys(rot, self.d, &keys[row]),
                    None => keys[row].to_vec(),
                };
                sequence.stores[h]
                    .append(&stored)
                    .expect("random keys encode");
            }
        }
        (keys, vals)
    }

    /// `σ²` `[B][H][self.d]` as the GPU reads it: the calibration's, or the stand-in of each store.
    fn sigma2(&self) -> Vec<f32> {
        match &self.calibrated_sigma2 {
            Some(s) => (0..BATCH).flat_map(|_| s.iter().copied()).collect(),
            None => self
                .sequences
                .iter()
                .flat_map(|s| &s.stores)
                .flat_map(|s| s.mean_square_scale().into_iter().map(|x| x as f32))
                .collect(),
        }
    }

    /// Every (sequence, head) as the reference sees it, `[b*H + h]`.
    fn groups(&self) -> Vec<GroupData<'_>> {
        let sigma2 = self.sigma2();
        let mut out = Vec::new();
        for (b, s) in self.sequences.iter().enumerate() {
            for h in 0..KV_HEADS {
                let bh = b * KV_HEADS + h;
                out.push(GroupData {
                    store: &s.stores[h],
                    keys: &s.keys[h],
                    values: &s.values[h],
                    queries: inputs::group_queries(&self.queries, bh, self.group, self.d),
                    klt: self.fitted.klts.get(h),
                    sigma2: sigma2[bh * self.d..][..self.d]
                        .iter()
                        .map(|&x| f64::from(x))
                        .collect(),
                    double_sparsity: Some(&self.fitted.double_sparsity[h]),
                });
            }
        }
        out
    }
}

fn upload<T: Copy>(gpu: &Gpu, data: &[T], what: &str) -> DeviceBuffer<T> {
    gpu.upload(data)
        .unwrap_or_else(|e| panic!("uploading {what}: {e}"))
}

/// `[H][n][d]` bits of tokens `range` of every head.
fn head_major(rows: &[Vec<bf16>], range: std::ops::Range<usize>, d: usize) -> Vec<u16> {
    rows.iter()
        .flat_map(|r| bits(&r[range.start * d..range.end * d]))
        .collect()
}

/// Prefills every sequence of `case` into `store` (the long one in two chunks), and layer 0
/// with other keys.
fn prefill(gpu: &Gpu, store: &mut KeyStore, case: &Case, rng: &mut impl Rng) -> Vec<SequenceId> {
    let mut ids = Vec::new();
    for s in &case.sequences {
        let id = store.create_sequence();
        let n = s.keys[0].len() / case.d;
        let cut = if n > 10_000 { n / 3 } else { n };
        for range in [0..cut, cut..n] {
            if range.is_empty() {
                continue;
            }
            let k = upload(
                gpu,
                &head_major(&s.keys, range.clone(), case.d),
                "prefill keys",
            );
            let v = upload(gpu, &head_major(&s.values, range, case.d), "prefill values");
            store
                .prefill(id, LAYER, &k, &v)
                .unwrap_or_else(|e| panic!("prefill: {e}"));
        }
        let other = n.min(1_000);
        let k = upload(
            gpu,
            &bits(&inputs::keys(rng, KV_HEADS * other, case.d)),
            "layer 0 keys",
        );
        store
            .prefill(id, 0, &k, &k)
            .unwrap_or_else(|e| panic!("prefill of layer 0: {e}"));
        ids.push(id);
    }
    ids
}

fn run_case(t: &mut GpuTest, d: usize, group: usize, basis: Basis, long: std::ops::Range<usize>) {
    run_case_with(t, d, group, basis, long, None, KvRows::Separate);
}

/// A case; with `select`, every step runs that select tile (a record whose only entry it is);
/// the stores' K/V rows are laid out as `kv_rows` says.
fn run_case_with(
    t: &mut GpuTest,
    d: usize,
    group: usize,
    basis: Basis,
    long: std::ops::Range<usize>,
    select: Option<Tile>,
    kv_rows: KvRows,
) {
    let (gpu, test, seed, rng) = (t.gpu.clone(), t.name, t.seed, &mut t.rng);
    let lengths = lengths(rng, long);
    eprintln!("{test}: lengths {lengths:?}");
    let mut case = Case::new(rng, d, group, basis, &lengths);
    let model = model(format!("decode-d{d}-g{group}"), d, group, basis);

    let rotations = case.store_rotations(rng);
    let capacity = lengths.iter().sum::<usize>() + BATCH * APPENDS.iter().sum::<usize>();
    let mut stores: Vec<KeyStore> = PLACEMENTS
        .iter()
        .map(|&(placement, host_memory)| {
            let config = StoreConfig {
                block: BLOCK,
                segment_words: SEGMENT_WORDS,
                max_batch: 4,
                rotations: rotations.clone(),
                keep_landmarks: true,
                host_memory,
                require_host_memory: true,
                kv_rows,
                ..StoreConfig::new(model.clone(), placement, capacity)
            };
            KeyStore::new(gpu.clone(), config).unwrap_or_else(|e| panic!("building the store: {e}"))
        })
        .collect();
    let baselines: Vec<_> = stores.iter().map(KeyStore::memory).collect();
    let ids: Vec<Vec<SequenceId>> = stores
        .iter_mut()
        .map(|store| prefill(&gpu, store, &case, rng))
        .collect();

    // The decoder's kernels through one JIT (the disk cache), as a serving stack shares it.
    let jit = Arc::new(Jit::with_default_cache(gpu.clone()).expect("NVRTC"));
    let mut decoder = Decoder::with_kernels(gpu.clone(), model, decoder_config(), jit.clone())
        .expect("a valid decoder")
        .with_calibration(case.calibration.clone())
        .expect("calibration of the model");
    if let Some(tile) = select {
        decoder = decoder.with_tuning(Box::new(OnlyTile(TunedFamily::Select, tile)));
    }

    let check = StepCheck {
        k: K,
        scale: 1.0 / (d as f64).sqrt(),
        rotated: basis == Basis::Klt,
        max_relative_error: MAX_RELATIVE_ERROR,
        tensor_core_scan: false,
    };
    let methods = methods(basis == Basis::Klt);
    let queries = gpu
        .filled::<f32>(BATCH * KV_HEADS * group * d, 0)
        .expect("queries");
    let sigma2 = gpu.filled::<f32>(BATCH * KV_HEADS * d, 0).expect("σ²");
    let mut graphs: HashMap<(usize, usize, Option<Transfer>), StepGraph> = HashMap::new();
    let mut replays = 0;
    let mut m = Mismatches::new(test, seed);

    for (checkpoint, &appends) in APPENDS.iter().enumerate() {
        for _ in 0..appends {
            let (keys, vals) = case.append(rng);
            let (k, v) = (
                upload(&gpu, &bits(&keys), "append keys"),
                upload(&gpu, &bits(&vals), "append values"),
            );
            let other = upload(
                &gpu,
                &bits(&inputs::keys(rng, BATCH * KV_HEADS, d)),
                "layer 0 keys",
            );
            for (store, ids) in stores.iter_mut().zip(&ids) {
                store
                    .append(ids, LAYER, &k, &v)
                    .unwrap_or_else(|e| panic!("append: {e}"));
                store
                    .append(ids, 0, &other, &other)
                    .unwrap_or_else(|e| panic!("append to layer 0: {e}"));
            }
        }
        for (store, ids) in stores.iter().zip(&ids) {
            store
                .check()
                .unwrap_or_else(|e| panic!("check after valid appends: {e}"));
            for (s, &id) in case.sequences.iter().zip(ids) {
                let want = (s.stores[0].stored_tokens(), s.stores[0].total_tokens());
                assert_eq!(
                    store.lengths(id, LAYER).expect("a live sequence"),
                    want,
                    "{test} checkpoint {checkpoint}: store lengths (FATHOM_TEST_SEED={seed})"
                );
            }
        }

        // New queries (and σ²) in place: the graphs read these buffers.
        case.queries = inputs::vectors(rng, BATCH * KV_HEADS * group, d);
        gpu.write(&queries, &case.queries).expect("queries");
        gpu.write(&sigma2, &case.sigma2()).expect("σ²");
        let groups = case.groups();
        let references = reference_steps(&groups, &methods, &check);

        for (mi, (&method, want)) in methods.iter().zip(&references).enumerate() {
            let expected = Expected {
                check: &check,
                groups: &groups,
                want,
            };
            // The `pinned` host store's eager steps, which the other host stores must equal.
            let mut pinned_steps = HashMap::new();
            for (p, (store, ids)) in stores.iter().zip(&ids).enumerate() {
                let (placement, host_memory) = PLACEMENTS[p];
                for transfer in transfers(placement, method) {
                    let what = format!(
                        "checkpoint {checkpoint}: {method} {} {host_memory} {}",
                        placement.as_str(),
                        transfer.map_or("-", Transfer::as_str)
                    );
                    let view = store
                        .layer_view(ids, LAYER)
                        .unwrap_or_else(|e| panic!("{what}: layer_view: {e}"));
                    let request = StepRequest {
                        method,
                        transfer,
                        k: K,
                        scale: None,
                        sigma2: case.calibrated_sigma2.is_none().then_some(&sigma2),
                        union: true,
                    };
                    let (_, eager) = checked_eager_step(
                        &mut decoder,
                        &view,
                        &queries,
                        request,
                        &expected,
                        &format!("{test}: {what}"),
                        seed,
                    );
                    if placement == Placement::Host {
                        match pinned_steps.get(&transfer) {
                            None => {
                                pinned_steps.insert(transfer, eager.clone());
                            }
                            Some(pinned) => {
                                let differs = replay_difference(pinned, &eager);
                                m.check(differs.is_none(), || {
                                    format!(
                                        "{what}: differs from the pinned host store's step: {}",
                                        differs.unwrap_or_default()
                                    )
                                });
                            }
                        }
                    }

                    if transfer == Some(Transfer::Memcpy) {
                        continue;
                    }
                    let key = (mi, p, transfer);
                    if checkpoint == 0 {
                        let graph = decoder
                            .capture(&view, &queries, request)
                            .unwrap_or_else(|e| panic!("{what}: capture: {e}"));
                        graphs.insert(key, graph);
                        continue;
                    }
                    let graph = &graphs[&key];
                    graph
                        .serves(&view)
                        .unwrap_or_else(|e| panic!("{what}: the graph must serve: {e}"));
                    let replayed = replayed(&gpu, graph, method == Method::Dense);
                    let differs = replay_difference(&eager, &replayed);
                    m.check(differs.is_none(), || {
                        format!(
                            "{what}: the graph captured at checkpoint 0, replayed, differs from \
                             the eager step: {}",
                            differs.unwrap_or_default()
                        )
                    });
                    replays += 1;
                }
            }
        }
    }
    m.finish();
    assert!(replays > 0, "no graph was replayed");
    let stats = jit.cache().stats();
    assert!(
        stats.hits + stats.compiled > 0,
        "the decoder's kernels came through its JIT"
    );

    // Everything back: free every sequence, trim, and the stores hold their baseline.
    drop(graphs);
    drop(decoder);
    for ((store, ids), baseline) in stores.iter_mut().zip(&ids).zip(&baselines) {
        let used = store.memory();
        assert!(used.pool_bytes_in_use > 0);
        for &id in ids {
            store.free_sequence(id).expect("a live sequence");
        }
        assert_eq!(store.tokens_in_use(), 0);
        assert_eq!(store.memory().pool_bytes_in_use, 0);
        store.trim().expect("trim");
        assert_eq!(
            store.memory(),
            *baseline,
            "{test}: freeing every sequence and trimming returns to the baseline"
        );
    }
}

gpu_test!(gpu_decode_raw_g4, |t| {
    run_case(&mut t, D, 4, Basis::Raw, 280_000..320_000);
});

gpu_test!(gpu_decode_klt_g7, |t| {
    run_case(&mut t, D, 7, Basis::Klt, 20_000..50_000);
});

// Phi-3's head dimension with GLM-4's group (both KLT models).
gpu_test!(gpu_decode_klt_d96_g16, |t| {
    run_case(&mut t, 96, 16, Basis::Klt, 20_000..50_000);
});

gpu_test!(gpu_decode_adjacent_rows_klt_g7, |t| {
    run_case_with(
        &mut t,
        D,
        7,
        Basis::Klt,
        20_000..50_000,
        None,
        KvRows::Adjacent,
    );
});

gpu_test!(gpu_decode_onepass_raw_g4, |t| {
    let tile = Tile::select(512, 8, SelectAlgorithm::Onepass);
    run_case_with(
        &mut t,
        D,
        4,
        Basis::Raw,
        280_000..320_000,
        Some(tile),
        KvRows::Separate,
    );
});

gpu_test!(gpu_decode_fused_raw_g4, |t| {
    let tile = Tile::select(512, 8, SelectAlgorithm::Fused);
    run_case_with(
        &mut t,
        D,
        4,
        Basis::Raw,
        280_000..320_000,
        Some(tile),
        KvRows::Separate,
    );
});

gpu_test!(gpu_decode_onepass_klt_g7, |t| {
    let tile = Tile::select(1024, 4, SelectAlgorithm::Onepass);
    run_case_with(
        &mut t,
        D,
        7,
        Basis::Klt,
        20_000..50_000,
        Some(tile),
        KvRows::Separate,
    );
});
