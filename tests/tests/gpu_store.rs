//! GPU tests of the key store (`runtime::store::KeyStore`, SPEC §2, §5, §7, §8) against the f64
//! reference store (`reference::store::HeadStore`).
//!
//! What is checked, on fresh random keys (the seed is printed and named in every failure):
//!
//! - prefill and per-token appends of three sequences of different lengths (one under 100
//!   tokens, one not a multiple of the block, one prefilled in two chunks), two layers, small
//!   segments so that sequences span several, in both placements, raw (qwen3-8b's shape) and
//!   rotated (qwen2.5-7b's shape, G = 7, KLT: the keys rotated on the CPU exactly as the kernel
//!   rounds them; and Phi-3-mini's D = 96 and GLM-4-9B's G = 16, from their `config.json`). Read back through a `LayerView`'s tables: every segment's words and scales
//!   equal the reference store's byte for byte (unfilled blocks zero, a segment the tail reaches
//!   into all zero, no entry past the last segment), the K/V rows equal what was appended,
//!   `n_stored`/`n_total` are right, and the landmark means equal the fp32-sum fp16 means.
//! - the same with K/V-adjacent rows (`KvRows::Adjacent`, `[cap][2][D]`: prefill's strided
//!   copy, the append kernel, the region growth's one-run copy, and every row reader) raw from
//!   host memory and rotated in HBM, and their footprint equal to the separate rows'.
//! - the same for the host placement's large-page allocations (`HostMemory::Registered`,
//!   `HostMemory::Vmm2M`, required so that a driver without them fails): equal contents, and
//!   after `trim()` the context's pinned ledger is back where it was.
//! - free and re-create: the pools are reused (memory() unchanged, the re-created sequences again
//!   equal the reference, so reused segments were cleared), and trim() returns to the baseline.
//! - capacity: a prefill or an append past `capacity_tokens` is refused and changes nothing; the
//!   store keeps working, and freeing makes room.
//! - bad input: unknown and freed ids, layer out of range, wrong key shape.
//! - a non-finite key is reported with its sequence, layer, head, token and channel: by prefill
//!   at once (the sequence left unchanged), by check() after an append.

use std::sync::Arc;

use codegen::model::{from_config_json, preset, ModelShape};
use codegen::spec::Placement;
use fathom_tests::kit::GpuTest;
use fathom_tests::store_check::read_rows;
use fathom_tests::store_kernels::{self, rotate_keys, rotations, Mismatches};
use fathom_tests::{gpu_test, inputs};
use half::{bf16, f16};
use rand::Rng;
use reference::store::{BlockSize, HeadId, HeadStore, StoreLayout};
use runtime::gpu::{DeviceBuffer, Gpu};
use runtime::store::device::{read_back, settle};
use runtime::store::{HostMemory, KeyStore, KvRows, SequenceId, StoreConfig, StoreError};

const BLK: usize = 64;
/// Words per plane per segment: 256-token segments, so short sequences span several.
const S: usize = 4;
const LAYERS: usize = 2;

fn shape(name: &str) -> ModelShape {
    ModelShape {
        layers: LAYERS,
        ..preset(name).expect("a preset of SPEC §10")
    }
}

fn config(model: ModelShape, placement: Placement, capacity: usize) -> StoreConfig {
    StoreConfig {
        block: BLK,
        segment_words: S,
        max_batch: 8,
        keep_landmarks: true,
        ..StoreConfig::new(model, placement, capacity)
    }
}

fn store(gpu: &Arc<Gpu>, config: StoreConfig) -> KeyStore {
    KeyStore::new(gpu.clone(), config).unwrap_or_else(|e| panic!("building the store: {e}"))
}

/// A device buffer holding `data`, its copy finished: `Gpu::upload` runs on the legacy stream,
/// which the store's non-blocking stream does not wait for.
fn upload<T: Copy>(gpu: &Gpu, data: &[T], what: &str) -> DeviceBuffer<T> {
    let buffer = store_kernels::upload(gpu, data, what);
    settle(gpu).unwrap_or_else(|e| panic!("uploading {what}: {e}"));
    buffer
}

fn bits(x: &[bf16]) -> Vec<u16> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// What one sequence should hold: raw keys and values per `[layer][head]`, token-major.
#[derive(Clone)]
struct Expected {
    keys: Vec<Vec<Vec<bf16>>>,
    values: Vec<Vec<Vec<bf16>>>,
}

impl Expected {
    fn new(heads: usize) -> Self {
        Expected {
            keys: vec![vec![Vec::new(); heads]; LAYERS],
            values: vec![vec![Vec::new(); heads]; LAYERS],
        }
    }

    fn tokens(&self, layer: usize, d: usize) -> usize {
        self.keys[layer][0].len() / d
    }
}

/// Prefills `n` random tokens into `layer` of `id` and records them.
fn prefill(
    gpu: &Gpu,
    store: &mut KeyStore,
    rng: &mut impl Rng,
    (id, expected): (SequenceId, &mut Expected),
    layer: usize,
    n: usize,
) -> Result<(), StoreError> {
    let (heads, d) = (store.config().model.kv_heads, store.config().model.head_dim);
    let keys: Vec<Vec<bf16>> = (0..heads).map(|_| inputs::keys(rng, n, d)).collect();
    let values: Vec<Vec<bf16>> = (0..heads).map(|_| inputs::keys(rng, n, d)).collect();
    let k = upload(gpu, &bits(&keys.concat()), "prefill keys");
    let v = upload(gpu, &bits(&values.concat()), "prefill values");
    store.prefill(id, layer, &k, &v)?;
    for h in 0..heads {
        expected.keys[layer][h].extend(&keys[h]);
        expected.values[layer][h].extend(&values[h]);
    }
    Ok(())
}

/// Appends one random token to `layer` of every sequence of `batch` and records it.
fn append(
    gpu: &Gpu,
    store: &mut KeyStore,
    rng: &mut impl Rng,
    batch: &mut [(SequenceId, &mut Expected)],
    layer: usize,
) -> Result<(), StoreError> {
    let (heads, d) = (store.config().model.kv_heads, store.config().model.head_dim);
    let keys: Vec<bf16> = inputs::keys(rng, batch.len() * heads, d);
    let values: Vec<bf16> = inputs::keys(rng, batch.len() * heads, d);
    let ids: Vec<SequenceId> = batch.iter().map(|(id, _)| *id).collect();
    let k = upload(gpu, &bits(&keys), "append keys");
    let v = upload(gpu, &bits(&values), "append values");
    store.append(&ids, layer, &k, &v)?;
    for (b, (_, expected)) in batch.iter_mut().enumerate() {
        for h in 0..heads {
            let row = (b * heads + h) * d..(b * heads + h + 1) * d;
            expected.keys[layer][h].extend(&keys[row.clone()]);
            expected.values[layer][h].extend(&values[row]);
        }
    }
    Ok(())
}

fn download<T: Copy + Default>(buffer: &DeviceBuffer<T>, what: &str) -> Vec<T> {
    buffer
        .download()
        .unwrap_or_else(|e| panic!("downloading {what}: {e}"))
}

fn read<T: Copy + Default>(gpu: &Gpu, addr: u64, len: usize, what: &str) -> Vec<T> {
    read_back(gpu, addr, len).unwrap_or_else(|e| panic!("reading {what} at {addr:#x}: {e}"))
}

/// Checks every layer of the batch `ids` through its view against the reference.
fn verify(
    gpu: &Gpu,
    store: &KeyStore,
    ids: &[SequenceId],
    expected: &[&Expected],
    rot: Option<&[f32]>,
    label: &str,
    seed: u64,
) {
    let model = &store.config().model;
    let (heads, d) = (model.kv_heads, model.head_dim);
    let layout = StoreLayout::new(d, BlockSize::from_tokens(BLK).unwrap(), S).unwrap();
    let seg_tokens = layout.segment_tokens();
    for layer in 0..LAYERS {
        let view = store
            .layer_view(ids, layer)
            .unwrap_or_else(|e| panic!("{label}: layer_view: {e}"));
        assert_eq!(
            (view.batch, view.kv_heads, view.head_dim),
            (ids.len(), heads, d)
        );
        // The tables are queued on the store's stream; downloads run on the legacy one.
        gpu.synchronize().unwrap();
        let n_stored = download(view.n_stored, "n_stored");
        let n_total = download(view.n_total, "n_total");
        let seg_words = download(view.seg_words, "seg_words");
        let seg_scales = download(view.seg_scales, "seg_scales");
        let k_rows = download(view.k_rows, "k_rows");
        let v_rows = download(view.v_rows, "v_rows");
        let means = download(view.landmarks.expect("landmarks kept"), "landmarks");
        let mut bad = Mismatches::new(format!("{label}, layer {layer}"), seed);
        let mut max_total = 0;
        for (b, e) in expected.iter().enumerate() {
            let n = e.tokens(layer, d);
            max_total = max_total.max(n);
            let stored = n / BLK * BLK;
            assert_eq!(
                (n_stored[b] as usize, n_total[b] as usize),
                (stored, n),
                "{label}, layer {layer}, sequence {b}: n_stored/n_total (FATHOM_TEST_SEED={seed})"
            );
            assert_eq!(
                store.lengths(ids[b], layer).unwrap(),
                (stored, n),
                "{label}: host lengths"
            );
            for h in 0..heads {
                let bh = b * heads + h;
                let store_keys = match rot {
                    Some(r) => {
                        let at = (layer * heads + h) * d * d;
                        rotate_keys(&r[at..at + d * d], d, &e.keys[layer][h])
                    }
                    None => e.keys[layer][h].clone(),
                };
                let reference =
                    HeadStore::from_keys(layout, HeadId { layer, kv_head: h }, &store_keys)
                        .expect("valid keys");
                let segments = n.div_ceil(seg_tokens);
                for s in 0..view.max_seg {
                    let (wa, sa) = (
                        seg_words[bh * view.max_seg + s],
                        seg_scales[bh * view.max_seg + s],
                    );
                    if s >= segments {
                        bad.check(wa == 0 && sa == 0, || {
                            format!("b {b} h {h} segment {s} past the last: {wa:#x} {sa:#x}")
                        });
                        continue;
                    }
                    let words: Vec<u64> = read(gpu, wa, layout.words_len(), "segment words");
                    let scales: Vec<u16> = read(gpu, sa, layout.scales_len(), "segment scales");
                    let (want_words, want_scales) = match reference.segments().get(s) {
                        Some(seg) => (seg.words.clone(), seg.scales.clone()),
                        // A segment the tail reaches into holds nothing yet.
                        None => (vec![0; layout.words_len()], vec![0; layout.scales_len()]),
                    };
                    for (i, (&got, &want)) in words.iter().zip(&want_words).enumerate() {
                        bad.check(got == want, || {
                            format!(
                                "b {b} h {h} segment {s} word {i}: {got:#018x}, want {want:#018x}"
                            )
                        });
                    }
                    for (i, (&got, &want)) in scales.iter().zip(&want_scales).enumerate() {
                        bad.check(got == want, || {
                            format!(
                                "b {b} h {h} segment {s} scale {i}: {got:#06x}, want {want:#06x}"
                            )
                        });
                    }
                }
                let got_k = read_rows(gpu, k_rows[bh], n, d, view.kv_rows);
                let got_v = read_rows(gpu, v_rows[bh], n, d, view.kv_rows);
                for (what, got, want) in [
                    ("K", &got_k, bits(&e.keys[layer][h])),
                    ("V", &got_v, bits(&e.values[layer][h])),
                ] {
                    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                        bad.check(g == w, || {
                            format!(
                                "b {b} h {h} {what} row {} channel {}: {g:#06x}, want {w:#06x}",
                                i / d,
                                i % d
                            )
                        });
                    }
                }
                let groups = stored / 8;
                let got_means: Vec<u16> = read(gpu, means[bh], groups * d, "landmark means");
                let keys = &e.keys[layer][h];
                for j in 0..groups {
                    for c in 0..d {
                        let sum =
                            (0..8).fold(0.0f32, |acc, r| acc + keys[(8 * j + r) * d + c].to_f32());
                        let want = f16::from_f32(sum * 0.125).to_bits();
                        let got = got_means[j * d + c];
                        bad.check(got == want, || {
                            format!("b {b} h {h} mean of group {j} channel {c}: {got:#06x}, want {want:#06x}")
                        });
                    }
                }
            }
        }
        assert_eq!(view.max_tokens, max_total, "{label}: max_tokens");
        bad.assert_none();
    }
}

/// Builds three sequences (prefill, then appends in changing batches) and returns their ids and
/// contents.
fn build(
    gpu: &Gpu,
    store: &mut KeyStore,
    rng: &mut impl Rng,
    lengths: &[usize; 3],
    appends: usize,
) -> (Vec<SequenceId>, Vec<Expected>) {
    let heads = store.config().model.kv_heads;
    let ids: Vec<SequenceId> = (0..3).map(|_| store.create_sequence()).collect();
    let mut expected = vec![Expected::new(heads); 3];
    for layer in 0..LAYERS {
        for (b, e) in expected.iter_mut().enumerate() {
            if b == 2 {
                // Two chunks: the second continues a tail.
                let first = lengths[b] / 3;
                prefill(gpu, store, rng, (ids[b], e), layer, first).unwrap();
                prefill(gpu, store, rng, (ids[b], e), layer, lengths[b] - first).unwrap();
            } else {
                prefill(gpu, store, rng, (ids[b], e), layer, lengths[b]).unwrap();
            }
        }
    }
    for step in 0..appends {
        for layer in 0..LAYERS {
            let [e0, e1, e2] = &mut expected[..] else {
                unreachable!()
            };
            // Every third step leaves the first sequence out: batches change.
            let mut batch: Vec<(SequenceId, &mut Expected)> = if step % 3 == 2 {
                vec![(ids[2], e2), (ids[1], e1)]
            } else {
                vec![(ids[0], e0), (ids[1], e1), (ids[2], e2)]
            };
            append(gpu, store, rng, &mut batch, layer)
                .unwrap_or_else(|e| panic!("append step {step}: {e}"));
        }
    }
    store
        .check()
        .unwrap_or_else(|e| panic!("check after valid appends: {e}"));
    (ids, expected)
}

fn prefill_append_case(
    t: &mut GpuTest,
    model: ModelShape,
    placement: Placement,
    rotate: bool,
    host: HostMemory,
) {
    prefill_append_rows_case(t, model, placement, rotate, host, KvRows::Separate);
}

fn prefill_append_rows_case(
    t: &mut GpuTest,
    model: ModelShape,
    placement: Placement,
    rotate: bool,
    host: HostMemory,
    kv_rows: KvRows,
) {
    let label = format!("{} {placement:?} {host} {kv_rows}", model.name);
    let (gpu, seed, rng) = (t.gpu.clone(), t.seed, &mut t.rng);
    let (heads, d) = (model.kv_heads, model.head_dim);
    let rot = rotate.then(|| {
        (0..LAYERS)
            .flat_map(|_| rotations(rng, heads, d))
            .collect::<Vec<f32>>()
    });
    let mut store = store(
        &gpu,
        StoreConfig {
            rotations: rot.clone(),
            host_memory: host,
            // A driver without the mode fails the test rather than testing `pinned` again.
            require_host_memory: true,
            kv_rows,
            ..config(model, placement, 1 << 16)
        },
    );
    assert_eq!(store.host_memory(), host, "{label}");
    assert_eq!(store.kv_rows(), kv_rows, "{label}");
    let pinned_baseline = gpu.pinned_bytes();
    let baseline = store.memory();
    let lengths = [
        rng.gen_range(1..100),
        rng.gen_range(5..12) * BLK + rng.gen_range(1..BLK),
        rng.gen_range(600..1100),
    ];
    let appends = 150;
    let (ids, expected) = build(&gpu, &mut store, rng, &lengths, appends);
    let refs: Vec<&Expected> = expected.iter().collect();
    verify(&gpu, &store, &ids, &refs, rot.as_deref(), &label, seed);
    // A batch in another order, and one sequence alone.
    verify(
        &gpu,
        &store,
        &[ids[2], ids[0]],
        &[refs[2], refs[0]],
        rot.as_deref(),
        &format!("{label} (reordered batch)"),
        seed,
    );
    verify(
        &gpu,
        &store,
        &ids[1..2],
        &refs[1..2],
        rot.as_deref(),
        &label,
        seed,
    );

    let full = store.memory();
    assert!(full.pool_bytes_in_use > 0);
    for &id in &ids {
        store.free_sequence(id).unwrap();
    }
    assert_eq!(store.tokens_in_use(), 0);
    let freed = store.memory();
    assert_eq!(
        freed.pool_bytes_in_use, 0,
        "{label}: freed sequences use no pool memory"
    );
    assert_eq!(
        (freed.device_bytes, freed.pinned_bytes),
        (full.device_bytes, full.pinned_bytes),
        "{label}: the pools keep freed memory"
    );
    assert!(matches!(
        store.layer_view(&ids, 0),
        Err(StoreError::FreedSequence { .. })
    ));

    // The same lengths again: everything comes from the pools, and reused segments are clean.
    let (ids, expected) = build(&gpu, &mut store, rng, &lengths, appends);
    assert_eq!(
        store.memory(),
        full,
        "{label}: re-created sequences reuse the pools"
    );
    let refs: Vec<&Expected> = expected.iter().collect();
    verify(
        &gpu,
        &store,
        &ids,
        &refs,
        rot.as_deref(),
        &format!("{label} (reused)"),
        seed,
    );
    for &id in &ids {
        store.free_sequence(id).unwrap();
    }
    store.trim().unwrap();
    assert_eq!(
        store.memory(),
        baseline,
        "{label}: trim returns to the baseline"
    );
    assert_eq!(
        gpu.pinned_bytes(),
        pinned_baseline,
        "{label}: trim gives the pinned ledger back what the pools held"
    );
}

/// The prefill/append cases, one test each: model, placement, rotated store, host memory, rows.
macro_rules! prefill_append_tests {
    ($($name:ident: $model:literal, $placement:ident, $rotate:literal, $host:ident, $rows:ident;)*) => {
        $(gpu_test!($name, |t| {
            let model = shape($model);
            let (placement, host) = (Placement::$placement, HostMemory::$host);
            prefill_append_rows_case(&mut t, model, placement, $rotate, host, KvRows::$rows);
        });)*
    };
}

prefill_append_tests! {
    prefill_and_append_raw_hbm: "qwen3-8b", Hbm, false, Pinned, Separate;
    prefill_and_append_raw_host: "qwen3-8b", Host, false, Pinned, Separate;
    prefill_and_append_raw_host_adjacent_rows: "qwen3-8b", Host, false, Pinned, Adjacent;
    prefill_and_append_rotated_hbm_adjacent_rows: "qwen2.5-7b", Hbm, true, Pinned, Adjacent;
    prefill_and_append_raw_host_registered: "qwen3-8b", Host, false, Registered, Separate;
    prefill_and_append_raw_host_vmm: "qwen3-8b", Host, false, Vmm2M, Separate;
    prefill_and_append_rotated_host_vmm: "qwen2.5-7b", Host, true, Vmm2M, Separate;
    prefill_and_append_rotated_hbm: "qwen2.5-7b", Hbm, true, Pinned, Separate;
    prefill_and_append_rotated_host: "qwen2.5-7b", Host, true, Pinned, Separate;
}

/// The real `config.json` of Phi-3-mini (D = 96, 32 KV heads, G = 1) and of GLM-4-9B (D = 128,
/// G = 16, ChatGLM's field names), compiled in so the packed test needs no source tree.
const NEW_SHAPES: [&str; 2] = [
    include_str!("../../codegen/tests/fixtures/phi-3-mini-4k-instruct.json"),
    include_str!("../../codegen/tests/fixtures/glm-4-9b-chat.json"),
];

fn config_shape(config: &str) -> ModelShape {
    ModelShape {
        layers: LAYERS,
        ..from_config_json(config).expect("a real config.json of a supported shape")
    }
}

gpu_test!(prefill_and_append_d96_and_g16_hbm, |t| {
    for config in NEW_SHAPES {
        prefill_append_case(
            &mut t,
            config_shape(config),
            Placement::Hbm,
            true,
            HostMemory::Pinned,
        );
    }
});

gpu_test!(prefill_and_append_d96_and_g16_host, |t| {
    for config in NEW_SHAPES {
        prefill_append_case(
            &mut t,
            config_shape(config),
            Placement::Host,
            true,
            HostMemory::Pinned,
        );
    }
});

gpu_test!(capacity_and_bad_input_leave_the_store_usable, |t| {
    let model = shape("qwen3-8b");
    let (heads, d) = (model.kv_heads, model.head_dim);
    let mut store = store(&t.gpu, config(model, Placement::Hbm, 300));
    let (a, b) = (store.create_sequence(), store.create_sequence());
    let mut ea = Expected::new(heads);
    let mut eb = Expected::new(heads);
    prefill(&t.gpu, &mut store, &mut t.rng, (a, &mut ea), 0, 200).unwrap();
    prefill(&t.gpu, &mut store, &mut t.rng, (a, &mut ea), 1, 190).unwrap();
    // 200 + 150 > 300: refused, nothing written.
    let mut scratch = eb.clone();
    assert!(matches!(
        prefill(&t.gpu, &mut store, &mut t.rng, (b, &mut scratch), 0, 150),
        Err(StoreError::CapacityExceeded {
            requested: 150,
            used: 200,
            capacity: 300
        })
    ));
    assert_eq!(store.lengths(b, 0).unwrap(), (0, 0));
    assert_eq!(store.tokens_in_use(), 200);
    // Appends to both until the store is full: 200 + 2k <= 300.
    for _ in 0..50 {
        append(
            &t.gpu,
            &mut store,
            &mut t.rng,
            &mut [(a, &mut ea), (b, &mut eb)],
            0,
        )
        .unwrap();
    }
    let mut scratch = (ea.clone(), eb.clone());
    assert!(matches!(
        append(
            &t.gpu,
            &mut store,
            &mut t.rng,
            &mut [(a, &mut scratch.0), (b, &mut scratch.1)],
            0
        ),
        Err(StoreError::CapacityExceeded { .. })
    ));
    assert_eq!(store.lengths(a, 0).unwrap(), (192, 250));
    assert_eq!(store.lengths(b, 0).unwrap(), (0, 50));
    // Layer 1 of `a` may still grow up to its layer 0.
    for _ in 0..60 {
        append(&t.gpu, &mut store, &mut t.rng, &mut [(a, &mut ea)], 1).unwrap();
    }
    assert!(append(
        &t.gpu,
        &mut store,
        &mut t.rng,
        &mut [(a, &mut scratch.0)],
        1
    )
    .is_err());

    // Bad input, each refused with what is wrong.
    let one = upload(&t.gpu, &vec![0u16; heads * d], "one token");
    let odd = upload(&t.gpu, &vec![0u16; heads * d + 1], "odd");
    assert!(matches!(
        store.append(&[a], LAYERS, &one, &one),
        Err(StoreError::LayerOutOfRange {
            layer: LAYERS,
            layers: LAYERS
        })
    ));
    assert!(matches!(
        store.append(&[a], 0, &odd, &one),
        Err(StoreError::Shape { .. })
    ));
    assert!(matches!(
        store.prefill(a, 0, &one, &odd),
        Err(StoreError::Shape { .. })
    ));
    assert!(matches!(
        store.append(&[a, a], 0, &one, &one),
        Err(StoreError::DuplicateSequence { .. })
    ));
    assert!(matches!(
        store.layer_view(&[], 0),
        Err(StoreError::EmptyBatch)
    ));

    // Freeing `b` makes room; the store still holds `a` exactly.
    store.free_sequence(b).unwrap();
    assert!(matches!(
        store.append(&[b], 0, &one, &one),
        Err(StoreError::FreedSequence { .. })
    ));
    assert!(matches!(
        store.free_sequence(b),
        Err(StoreError::FreedSequence { .. })
    ));
    for _ in 0..40 {
        append(&t.gpu, &mut store, &mut t.rng, &mut [(a, &mut ea)], 0).unwrap();
        append(&t.gpu, &mut store, &mut t.rng, &mut [(a, &mut ea)], 1).unwrap();
    }
    store.check().unwrap();
    verify(&t.gpu, &store, &[a], &[&ea], None, "capacity", t.seed);
});

gpu_test!(non_finite_keys_are_reported_with_their_location, |t| {
    let model = shape("qwen3-8b");
    let (heads, d) = (model.kv_heads, model.head_dim);
    let mut store = store(&t.gpu, config(model, Placement::Host, 1 << 14));
    let a = store.create_sequence();
    let mut ea = Expected::new(heads);

    // Prefill: reported at once, the sequence unchanged.
    let n = 200;
    let mut keys = vec![bf16::from_f32(0.5); heads * n * d];
    let (h, token, channel) = (
        t.rng.gen_range(0..heads),
        t.rng.gen_range(0..192),
        t.rng.gen_range(0..d),
    );
    keys[(h * n + token) * d + channel] = bf16::NAN;
    let k = upload(&t.gpu, &bits(&keys), "keys");
    match store.prefill(a, 1, &k, &k) {
        Err(StoreError::NonFiniteKey {
            sequence,
            layer: 1,
            head,
            token: at,
            channel: c,
        }) => assert_eq!(
            (sequence, head, at, c),
            (a, h, token, channel),
            "FATHOM_TEST_SEED={}",
            t.seed
        ),
        other => panic!(
            "prefill of a NaN key: {other:?} (FATHOM_TEST_SEED={})",
            t.seed
        ),
    }
    assert_eq!(store.lengths(a, 1).unwrap(), (0, 0));
    assert_eq!(store.tokens_in_use(), 0);

    // The store still works for the same sequence.
    prefill(&t.gpu, &mut store, &mut t.rng, (a, &mut ea), 0, 60).unwrap();
    prefill(&t.gpu, &mut store, &mut t.rng, (a, &mut ea), 1, 60).unwrap();
    store.check().unwrap();

    // Append: token 62 of head `h` has an infinite channel; its block fills at token 63 and the
    // next check reports it.
    let (h, channel) = (t.rng.gen_range(0..heads), t.rng.gen_range(0..d));
    for i in 60..64 {
        let mut keys = inputs::keys(&mut t.rng, heads, d);
        if i == 62 {
            keys[h * d + channel] = bf16::INFINITY;
        }
        let k = upload(&t.gpu, &bits(&keys), "append keys");
        store.append(&[a], 0, &k, &k).unwrap();
    }
    match store.check() {
        Err(StoreError::NonFiniteKey {
            sequence,
            layer: 0,
            head,
            token: 62,
            channel: c,
        }) => assert_eq!((sequence, head, c), (a, h, channel)),
        other => panic!(
            "check after an infinite key: {other:?} (FATHOM_TEST_SEED={})",
            t.seed
        ),
    }
    // Reported once.
    store.check().unwrap();
});

/// `resident_footprint` is what one sequence takes from the pools, to the byte, in HBM; from
/// host memory its pool part is 0 while the sequence still uses as many (host) pool bytes.
fn footprint_case(t: &mut GpuTest, placement: Placement) {
    let label = format!("footprint {placement:?}");
    let (gpu, rng) = (t.gpu.clone(), &mut t.rng);
    let model = shape("qwen3-8b");
    let (heads, d) = (model.kv_heads, model.head_dim);
    let mut store = store(&gpu, config(model, placement, 1 << 16));
    let id = store.create_sequence();
    let n = rng.gen_range(3000..5000);
    for layer in 0..LAYERS {
        let keys: Vec<u16> = (0..heads * n * d)
            .map(|_| bf16::from_f32(rng.gen_range(-1.0..1.0)).to_bits())
            .collect();
        let rows = upload(&gpu, &keys, "keys");
        store.prefill(id, layer, &rows, &rows).unwrap();
    }
    let f = store.resident_footprint(n, LAYERS);
    let used = store.memory().pool_bytes_in_use;
    match placement {
        Placement::Hbm => assert_eq!(f.segments + f.rows + f.histograms, used, "{label}: n = {n}"),
        Placement::Host => {
            assert_eq!(f.segments + f.rows, 0, "{label}");
            let hbm = StoreConfig::new(shape("qwen3-8b"), Placement::Hbm, 1 << 16);
            let other = KeyStore::new(
                gpu.clone(),
                StoreConfig {
                    block: BLK,
                    segment_words: S,
                    max_batch: 8,
                    keep_landmarks: true,
                    ..hbm
                },
            )
            .expect("an HBM store");
            let g = other.resident_footprint(n, LAYERS);
            assert_eq!(
                g.segments + g.rows,
                used,
                "{label}: the same pool bytes, in host memory"
            );
        }
    }
    assert!(f.tables > 0 && f.bytes() == f.parts().iter().map(|p| p.1).sum::<usize>());
    // Either K/V row layout takes the same bytes (the store above has the default's).
    for kv_rows in KvRows::ALL {
        let other = KeyStore::new(
            gpu.clone(),
            StoreConfig {
                kv_rows,
                ..config(shape("qwen3-8b"), placement, 1 << 16)
            },
        )
        .expect("a store of either row layout");
        assert_eq!(
            other.resident_footprint(n, LAYERS),
            f,
            "{label}: {kv_rows} rows"
        );
    }
}

gpu_test!(
    resident_footprint_is_what_a_sequence_takes_from_the_pools,
    |t| {
        footprint_case(&mut t, Placement::Hbm);
        footprint_case(&mut t, Placement::Host);
    }
);
