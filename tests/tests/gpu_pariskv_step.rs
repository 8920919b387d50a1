//! End-to-end GPU test of the `pariskv(k)` method (SPEC §12): a key store that keeps the
//! ParisKV index (`StoreConfig::pariskv_index`), fed by prefill and per-token appends, and
//! decode steps (`runtime::step::Decoder`) over its `layer_view`, against the f64 reference
//! `reference::pariskv::pariskv_step` of every query group, run on reference indexes
//! built from the same keys.
//!
//! Each case builds a store per placement (index rows in HBM or in mapped host memory), two
//! layers (layer 0 gets other keys, so that a view or index of the wrong layer shows), H = 2 KV
//! heads, BLK = 64, S = 128 words, and prefills three sequences: one under 100 tokens (every
//! token is selected), one of a few thousand that is not a multiple of the block (a partial
//! block in the tail), and one of 5k–12k tokens in two chunks (the second continues the first,
//! crossing the 5k ρ/β boundary for some draws). Steps at three checkpoints: after the prefill,
//! after one appended token and after 64 more; every token is appended to both layers.
//!
//! The kernels reproduce the reference bit for bit in everything that decides the selection
//! (`tests/tests/gpu_pariskv.rs`), so the selections, the unions and their positions must be
//! identical; the attention output's relative error must be `<= 1e-3` (fp32 attention vs f64).
//!
//! Also: a prefill with a non-finite key in the tail is refused with
//! `StoreError::IndexNonFiniteKey` and leaves the sequence and its index as they were (the
//! later steps still match a reference that never saw those keys); a view without the index
//! and a `k` above `k_max` are refused with typed errors; the step of the first checkpoint is
//! captured in a CUDA graph and replayed at the later ones (when it still serves the view),
//! equal to the eager step bit for bit; finally every sequence is freed and `trim()` returns the
//! store to its baseline memory.

use std::sync::Arc;

use codegen::model::Basis;
use codegen::spec::pariskv::RerankSelect;
use codegen::spec::Placement;
use fathom_tests::kit::GpuTest;
use fathom_tests::select_kernels::{relative_error, Mismatches};
use fathom_tests::step_setup::{
    decoder_config, model, BLOCK, KV_HEADS, K_MAX, LAYER, LAYERS, MAX_RELATIVE_ERROR, SEGMENT_WORDS,
};
use fathom_tests::store_check::bits;
use fathom_tests::{gpu_test, inputs};
use half::bf16;
use rand::seq::SliceRandom;
use rand::Rng;
use reference::pariskv::{pariskv_step, PariskvIndex, PariskvInput};
use runtime::gpu::Gpu;
use runtime::jit::Jit;
use runtime::step::{Decoder, DecoderConfig, HostStepOutput, Method, StepError, StepRequest};
use runtime::store::{KeyStore, KvRows, SequenceId, StoreConfig, StoreError};
use runtime::tuning::Tiles;
use runtime::view::LayerView;

const K: usize = 100;
/// Tokens appended before each checkpoint.
const APPENDS: [usize; 3] = [0, 1, BLOCK];
const PLACEMENTS: [Placement; 2] = [Placement::Hbm, Placement::Host];

/// `[h]` rows `[n][D]` as the store's `[H][n][D]` upload.
fn heads_rows(gpu: &Gpu, rows: &[Vec<bf16>]) -> runtime::gpu::DeviceBuffer<u16> {
    let flat: Vec<u16> = rows.iter().flat_map(|r| bits(r)).collect();
    gpu.upload(&flat).expect("rows upload")
}

/// What the reference knows of one sequence at `LAYER`: `[h]` raw keys and values `[n][D]`.
struct Sequence {
    keys: Vec<Vec<bf16>>,
    values: Vec<Vec<bf16>>,
}

/// Compares a step with the reference of every query group of the batch.
fn check(
    host: &HostStepOutput,
    sequences: &[Sequence],
    queries: &[f32],
    d: usize,
    group: usize,
    what: &str,
    m: &mut Mismatches,
) {
    let scale = 1.0 / (d as f64).sqrt();
    for (b, s) in sequences.iter().enumerate() {
        for h in 0..KV_HEADS {
            let n_total = s.keys[h].len() / d;
            let index = PariskvIndex::build(&s.keys[h], d).expect("finite keys index");
            let group_queries = inputs::group_queries(queries, b * KV_HEADS + h, group, d);
            let want = pariskv_step(
                &PariskvInput {
                    index: &index,
                    keys: &s.keys[h],
                    values: &s.values[h],
                    queries: &group_queries,
                    n_total,
                },
                K,
                scale,
            )
            .expect("the reference step runs");
            let at = format!("{what} seq {b} (n = {n_total}) head {h}");
            let as_i32 = |v: &[usize]| v.iter().map(|&t| t as i32).collect::<Vec<_>>();
            m.check(host.union(b, h) == as_i32(&want.selection.union), || {
                format!(
                    "{at}: union {:?}, reference {:?}",
                    host.union(b, h),
                    want.selection.union
                )
            });
            for g in 0..group {
                let sel = host.selected(b, h, g);
                m.check(sel == as_i32(&want.selection.heads[g]), || {
                    format!(
                        "{at} query {g}: selected {sel:?}, reference {:?}",
                        want.selection.heads[g]
                    )
                });
                let pos = host.positions(b, h, g);
                m.check(pos == as_i32(&want.selection.rows[g]), || {
                    format!(
                        "{at} query {g}: positions {pos:?}, reference {:?}",
                        want.selection.rows[g]
                    )
                });
                let error = relative_error(host.output(b, h, g), &want.outputs[g]);
                m.check(error <= MAX_RELATIVE_ERROR, || {
                    format!("{at} query {g}: attention relative error {error:.3e}")
                });
            }
        }
    }
}

/// The batch's lengths: under 100, a partial block of a few thousand, and 5k–12k (prefilled
/// in two chunks).
fn lengths(rng: &mut impl Rng) -> Vec<usize> {
    let partial = loop {
        let n = rng.gen_range(1_000..4_000);
        if n % BLOCK != 0 {
            break n;
        }
    };
    let mut lengths = vec![
        rng.gen_range(40..100),
        partial,
        rng.gen_range(5_000..12_000),
    ];
    lengths.shuffle(rng);
    lengths
}

fn run_case(t: &mut GpuTest, d: usize, group: usize) {
    run_case_with(t, d, group, Tiles::default(), KvRows::Separate);
}

/// The case with the decoder's default `tiles` replaced (a rerank variant) over stores whose K/V
/// rows are laid out as `kv_rows` says.
fn run_case_with(t: &mut GpuTest, d: usize, group: usize, tiles: Tiles, kv_rows: KvRows) {
    let (gpu, seed, rng) = (t.gpu.clone(), t.seed, &mut t.rng);
    // A test may run several cases: the label says which.
    let mut m = Mismatches::new(format!("{}: D = {d}, G = {group}", t.name), seed);
    let model = model(format!("pariskv-d{d}-g{group}"), d, group, Basis::Raw);
    let jit = Arc::new(Jit::with_default_cache(gpu.clone()).expect("NVRTC"));
    let lengths = lengths(rng);
    for placement in PLACEMENTS {
        let config = StoreConfig {
            block: BLOCK,
            segment_words: SEGMENT_WORDS,
            max_batch: 4,
            pariskv_index: true,
            kv_rows,
            ..StoreConfig::new(model.clone(), placement, 64_000)
        };
        let mut store = KeyStore::with_kernels(gpu.clone(), config, jit.as_ref())
            .unwrap_or_else(|e| panic!("building the store: {e}"));
        let baseline = store.memory();
        let mut decoder = Decoder::with_kernels(
            gpu.clone(),
            model.clone(),
            DecoderConfig {
                tiles,
                ..decoder_config()
            },
            jit.clone(),
        )
        .expect("decoder");
        let p = placement.as_str();

        // Prefill: layer 0 other keys, LAYER the reference's; the long one in two chunks.
        let mut sequences = Vec::new();
        let mut ids: Vec<SequenceId> = Vec::new();
        for &n in &lengths {
            let id = store.create_sequence();
            let keys: Vec<Vec<bf16>> = (0..KV_HEADS).map(|_| inputs::keys(rng, n, d)).collect();
            let vals: Vec<Vec<bf16>> = (0..KV_HEADS).map(|_| inputs::values(rng, n, d)).collect();
            let other: Vec<Vec<bf16>> = (0..KV_HEADS).map(|_| inputs::keys(rng, n, d)).collect();
            let rows = heads_rows(&gpu, &other);
            store.prefill(id, 0, &rows, &rows).expect("layer 0 prefill");
            let cut = if n > 5_000 { rng.gen_range(1..n) } else { n };
            for range in [0..cut, cut..n] {
                if range.is_empty() {
                    continue;
                }
                let part = |x: &[Vec<bf16>]| -> Vec<Vec<bf16>> {
                    x.iter()
                        .map(|r| r[range.start * d..range.end * d].to_vec())
                        .collect()
                };
                store
                    .prefill(
                        id,
                        LAYER,
                        &heads_rows(&gpu, &part(&keys)),
                        &heads_rows(&gpu, &part(&vals)),
                    )
                    .unwrap_or_else(|e| panic!("{p}: prefill of {n} tokens: {e}"));
            }
            ids.push(id);
            sequences.push(Sequence { keys, values: vals });
        }

        // A non-finite key in a prefill's tail: refused, nothing changes.
        {
            let b = lengths
                .iter()
                .position(|&n| n < 100)
                .expect("a short sequence");
            let before = store.lengths(ids[b], LAYER).unwrap();
            let mut bad: Vec<Vec<bf16>> = (0..KV_HEADS).map(|_| inputs::keys(rng, 5, d)).collect();
            bad[1][2 * d + 3] = bf16::NAN;
            let rows = heads_rows(&gpu, &bad);
            match store.prefill(ids[b], LAYER, &rows, &rows) {
                Err(StoreError::IndexNonFiniteKey {
                    head: 1,
                    token,
                    layer: LAYER,
                    ..
                }) => {
                    assert_eq!(token, before.1 + 2, "{p}: the faulty token")
                }
                other => panic!("{p}: a NaN key was not refused by the index: {other:?}"),
            }
            assert_eq!(
                store.lengths(ids[b], LAYER).unwrap(),
                before,
                "{p}: lengths moved"
            );
        }

        // One queries buffer, written in place: a captured graph reads it at every replay.
        let queries = gpu
            .upload(&vec![0f32; ids.len() * KV_HEADS * group * d])
            .expect("queries");
        let mut graph = None;
        for (checkpoint, &appends) in APPENDS.iter().enumerate() {
            for _ in 0..appends {
                for layer in 0..LAYERS {
                    let keys: Vec<bf16> = (0..ids.len() * KV_HEADS)
                        .flat_map(|_| inputs::keys(rng, 1, d))
                        .collect();
                    let vals = inputs::values(rng, ids.len() * KV_HEADS, d);
                    store
                        .append(
                            &ids,
                            layer,
                            &gpu.upload(&bits(&keys)).unwrap(),
                            &gpu.upload(&bits(&vals)).unwrap(),
                        )
                        .expect("append");
                    if layer == LAYER {
                        for (b, s) in sequences.iter_mut().enumerate() {
                            for h in 0..KV_HEADS {
                                let at = (b * KV_HEADS + h) * d;
                                s.keys[h].extend_from_slice(&keys[at..at + d]);
                                s.values[h].extend_from_slice(&vals[at..at + d]);
                            }
                        }
                    }
                }
            }
            store
                .check()
                .unwrap_or_else(|e| panic!("{p}: appended keys: {e}"));
            for (b, s) in sequences.iter().enumerate() {
                let (_, n_total) = store.lengths(ids[b], LAYER).unwrap();
                assert_eq!(
                    n_total,
                    s.keys[0].len() / d,
                    "{p}: host length of sequence {b}"
                );
            }
            let q = inputs::vectors(rng, ids.len() * KV_HEADS * group, d);
            gpu.write(&queries, &q).expect("queries");
            let view = store.layer_view(&ids, LAYER).expect("view");
            let request = StepRequest::new(Method::Pariskv { k: K }, 7);
            let what = format!("{p} checkpoint {checkpoint}");
            let eager = decoder
                .step(&view, &queries, request)
                .unwrap_or_else(|e| panic!("{what}: step: {e}"));
            eager.check().unwrap_or_else(|e| panic!("{what}: {e}"));
            let eager = eager.download().expect("download");
            check(&eager, &sequences, &q, d, group, &what, &mut m);

            if checkpoint == 0 {
                // Bad input, on the view of this checkpoint.
                let no_index = LayerView {
                    pariskv: None,
                    ..store.layer_view(&ids, LAYER).unwrap()
                };
                assert!(matches!(
                    decoder.step(&no_index, &queries, request).err(),
                    Some(StepError::MissingPariskvIndex)
                ));
                let big = StepRequest::new(Method::Pariskv { k: K_MAX + 1 }, 7);
                assert!(matches!(
                    decoder.step(&view, &queries, big).err(),
                    Some(StepError::K { k, .. }) if k == K_MAX + 1
                ));
                let view = store.layer_view(&ids, LAYER).unwrap();
                graph = Some(
                    decoder
                        .capture(&view, &queries, request)
                        .expect("capturable"),
                );
            } else if let Some(g) = &graph {
                let view = store.layer_view(&ids, LAYER).unwrap();
                if g.serves(&view).is_ok() {
                    g.replay(&gpu).expect("replay");
                    let replayed = g.output(&gpu).download().expect("download");
                    m.check(replayed == eager, || {
                        format!("{what}: the graph replay differs from the eager step")
                    });
                }
            }
        }
        drop(graph);
        for id in ids {
            store.free_sequence(id).expect("free");
        }
        store.trim().expect("trim");
        assert_eq!(store.memory(), baseline, "{p}: memory after free and trim");
    }
    m.finish();
}

gpu_test!(gpu_pariskv_step_d64_g4, |t| {
    run_case(&mut t, 64, 4);
});

gpu_test!(gpu_pariskv_step_d128_g7, |t| {
    run_case(&mut t, 128, 7);
});

// D = 96 (zero-padded to 128 for the transform) with G = 16.
gpu_test!(gpu_pariskv_step_d96_g16, |t| {
    run_case(&mut t, 96, 16);
});

// D = 80 (padded to 128) and D = 192 (padded to 256).
gpu_test!(gpu_pariskv_step_d80_g5_and_d192_g2, |t| {
    run_case(&mut t, 80, 5);
    run_case(&mut t, 192, 2);
});

// D = 128, G = 4 with the rerank's many-block top-k (`Tiles::rerank_select`): `_chunk` and
// `_write` (three chunks of 1,024 candidates at `k_max` = 512) in place of `_select`, the same
// selections, eager and in a captured graph.
gpu_test!(gpu_pariskv_step_d128_g4_many_block_select, |t| {
    let tiles = Tiles {
        rerank_select: RerankSelect::Multiblock,
        ..Tiles::default()
    };
    run_case_with(&mut t, 128, 4, tiles, KvRows::Separate);
});

// D = 128, G = 4 with the rerank's `_score` reading its operands from shared-memory tables
// (`Tiles::rerank_decode_table`, `PariskvRerankSpec::decode_table`) in both `_score` forms: the
// same selections, eager and in a captured graph.
gpu_test!(gpu_pariskv_step_d128_g4_decode_tables, |t| {
    for rerank_vector_loads in [false, true] {
        let tiles = Tiles {
            rerank_decode_table: true,
            rerank_vector_loads,
            ..Tiles::default()
        };
        run_case_with(&mut t, 128, 4, tiles, KvRows::Separate);
    }
});

// D = 128, G = 4 with the query kernel split over one block a subspace
// (`Tiles::pariskv_query_blocks`, `PariskvQuerySpec::subspace_blocks`): the same selections,
// eager and in a captured graph.
gpu_test!(gpu_pariskv_step_d128_g4_split_query, |t| {
    let tiles = Tiles {
        pariskv_query_blocks: 16,
        ..Tiles::default()
    };
    run_case_with(&mut t, 128, 4, tiles, KvRows::Separate);
});

// The index built from K/V-adjacent rows (its keys `2*D` apart), D = 96 padded, both
// placements.
gpu_test!(gpu_pariskv_step_adjacent_rows_d96_g4, |t| {
    run_case_with(&mut t, 96, 4, Tiles::default(), KvRows::Adjacent);
});
