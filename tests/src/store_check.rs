//! What a raw-basis key store (`runtime::store::KeyStore`) should hold, and a read-back check of
//! it against the f64 reference store, for tests that drive a store through faults and many
//! rounds of appends and frees (`gpu_faults.rs`).

use half::bf16;
use rand::Rng;
use reference::store::{HeadId, HeadStore};
use runtime::gpu::{DeviceBuffer, Gpu};
use runtime::store::device::read_back;
use runtime::store::{KeyStore, KvRows, SequenceId};

use crate::inputs;
use crate::select_kernels::Mismatches;

/// The raw keys and values one sequence should hold, `[layer][head]` token-major `[n][D]`.
#[derive(Clone, Debug, Default)]
pub struct Contents {
    pub keys: Vec<Vec<Vec<bf16>>>,
    pub values: Vec<Vec<Vec<bf16>>>,
}

impl Contents {
    /// Nothing yet, for a store of `layers` layers and `heads` KV heads.
    pub fn new(layers: usize, heads: usize) -> Self {
        Contents {
            keys: vec![vec![Vec::new(); heads]; layers],
            values: vec![vec![Vec::new(); heads]; layers],
        }
    }

    /// Tokens of `layer`.
    pub fn tokens(&self, layer: usize, d: usize) -> usize {
        self.keys[layer][0].len() / d
    }
}

/// bf16 bits.
pub fn bits(x: &[bf16]) -> Vec<u16> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// Random tokens for a prefill of `n` tokens: `(keys, values)` per head, and their device
/// buffers `[H][n][D]`, uploaded and settled (the store's stream does not wait for uploads).
pub struct Chunk {
    pub keys: Vec<Vec<bf16>>,
    pub values: Vec<Vec<bf16>>,
    pub device_keys: DeviceBuffer<u16>,
    pub device_values: DeviceBuffer<u16>,
}

impl Chunk {
    /// `n` random tokens of `heads` heads of `d` channels.
    pub fn new(gpu: &Gpu, rng: &mut impl Rng, heads: usize, n: usize, d: usize) -> Chunk {
        let keys: Vec<Vec<bf16>> = (0..heads).map(|_| inputs::keys(rng, n, d)).collect();
        let values: Vec<Vec<bf16>> = (0..heads).map(|_| inputs::keys(rng, n, d)).collect();
        let device_keys = gpu.upload(&bits(&keys.concat())).expect("upload keys");
        let device_values = gpu.upload(&bits(&values.concat())).expect("upload values");
        Chunk {
            keys,
            values,
            device_keys,
            device_values,
        }
    }

    /// Records the chunk as prefilled into `layer` of `contents`.
    pub fn record(&self, contents: &mut Contents, layer: usize) {
        for (h, (k, v)) in self.keys.iter().zip(&self.values).enumerate() {
            contents.keys[layer][h].extend(k);
            contents.values[layer][h].extend(v);
        }
    }

    /// Records the chunk, read as one token of a batch `[B][H][D]`, as appended to `layer` of
    /// `batch[b]`.
    pub fn record_append(&self, batch: &mut [&mut Contents], layer: usize, d: usize) {
        let heads = batch.first().map_or(0, |c| c.keys[layer].len());
        let keys = self.keys.concat();
        let values = self.values.concat();
        for (b, contents) in batch.iter_mut().enumerate() {
            for h in 0..heads {
                let row = (b * heads + h) * d..(b * heads + h + 1) * d;
                contents.keys[layer][h].extend(&keys[row.clone()]);
                contents.values[layer][h].extend(&values[row]);
            }
        }
    }
}

/// Reads `layer` of every sequence of `ids` back through the store's view and compares it
/// with `expected`: the lengths, every segment's words and scales with the reference store of
/// the keys (a segment the tail reaches into all zero, no entry past the last), and the K/V
/// rows with what was written.
pub fn check_contents(
    gpu: &Gpu,
    store: &KeyStore,
    ids: &[SequenceId],
    expected: &[&Contents],
    layer: usize,
    m: &mut Mismatches,
) {
    let layout = *store.layout();
    let (heads, d) = (store.config().model.kv_heads, store.config().model.head_dim);
    let view = store
        .layer_view(ids, layer)
        .expect("a view of live sequences");
    let download = |b: &DeviceBuffer<i32>| b.download().expect("download a table");
    let download64 = |b: &DeviceBuffer<u64>| b.download().expect("download a table");
    let (n_stored, n_total) = (download(view.n_stored), download(view.n_total));
    let (seg_words, seg_scales) = (download64(view.seg_words), download64(view.seg_scales));
    let (k_rows, v_rows) = (download64(view.k_rows), download64(view.v_rows));
    let read = |addr: u64, len: usize| -> Vec<u16> { read_back(gpu, addr, len).expect("read") };
    for (b, e) in expected.iter().enumerate() {
        let n = e.tokens(layer, d);
        let stored = n / layout.block().tokens() * layout.block().tokens();
        m.check(
            (n_stored[b] as usize, n_total[b] as usize) == (stored, n),
            || {
                format!(
                    "sequence {b} layer {layer}: n_stored/n_total {}/{}, want {stored}/{n}",
                    n_stored[b], n_total[b]
                )
            },
        );
        for h in 0..heads {
            let bh = b * heads + h;
            let reference =
                HeadStore::from_keys(layout, HeadId { layer, kv_head: h }, &e.keys[layer][h])
                    .expect("random keys encode");
            let segments = n.div_ceil(layout.segment_tokens());
            for s in 0..view.max_seg {
                let (wa, sa) = (
                    seg_words[bh * view.max_seg + s],
                    seg_scales[bh * view.max_seg + s],
                );
                if s >= segments {
                    m.check(wa == 0 && sa == 0, || {
                        format!("sequence {b} head {h} segment {s} past the last is set")
                    });
                    continue;
                }
                let words: Vec<u64> =
                    read_back(gpu, wa, layout.words_len()).expect("read segment words");
                let scales = read(sa, layout.scales_len());
                let (want_words, want_scales) = match reference.segments().get(s) {
                    Some(seg) => (seg.words.clone(), seg.scales.clone()),
                    None => (vec![0; layout.words_len()], vec![0; layout.scales_len()]),
                };
                let bad_words = words
                    .iter()
                    .zip(&want_words)
                    .filter(|(a, b)| a != b)
                    .count();
                let bad_scales = scales
                    .iter()
                    .zip(&want_scales)
                    .filter(|(a, b)| a != b)
                    .count();
                m.check(bad_words == 0 && bad_scales == 0, || {
                    format!(
                        "sequence {b} layer {layer} head {h} segment {s}: {bad_words} words and \
                         {bad_scales} scales differ from the reference store"
                    )
                });
            }
            for (what, addr, want) in [
                ("K", k_rows[bh], &e.keys[layer][h]),
                ("V", v_rows[bh], &e.values[layer][h]),
            ] {
                let got = read_rows(gpu, addr, n, d, view.kv_rows);
                let first = got.iter().zip(bits(want)).position(|(&g, w)| g != w);
                m.check(first.is_none(), || {
                    let i = first.unwrap_or_default();
                    format!(
                        "sequence {b} layer {layer} head {h}: {what} row {} channel {} differs",
                        i / d,
                        i % d
                    )
                });
            }
        }
    }
}

/// The first `n` rows of `d` bf16 values at the unified address `addr` of a store whose rows
/// are laid out as `kv_rows` says (`kv_rows.row_stride(d)` values apart), packed `[n][d]`.
pub fn read_rows(gpu: &Gpu, addr: u64, n: usize, d: usize, kv_rows: KvRows) -> Vec<u16> {
    let stride = kv_rows.row_stride(d);
    let span = if n == 0 { 0 } else { (n - 1) * stride + d };
    let all: Vec<u16> = read_back(gpu, addr, span).expect("read rows");
    crate::kv_rows::unstride(&all, n, d, stride)
}
