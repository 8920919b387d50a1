//! [`LayerView`]: what the kernels of one layer's step read of the key store, for a batch of
//! sequences, in the layout of `templates/ABI.md`. The store builds it; the step consumes it.
//! Every array lives on the device (tables of addresses into device or mapped host memory), so
//! a step launches its kernels without reading anything back.

use crate::gpu::DeviceBuffer;
use crate::pariskv::IndexTables;
use codegen::spec::{KvRows, Placement};

/// The ParisKV index of a view's batch (SPEC §12): `[(b*H + h)]` addresses, laid out as
/// `templates/ABI.md` ("ParisKV") gives. Ids, codes and weights are in the view's placement,
/// the histograms in device memory; every table covers tokens `[0, n_total)`.
#[derive(Clone, Copy)]
pub struct PariskvView<'a> {
    /// Addresses of the u8 centroid ids `[capacity][NS]`.
    pub ids: &'a DeviceBuffer<u64>,
    /// Addresses of the packed direction codes `[capacity][D/2]`.
    pub codes: &'a DeviceBuffer<u64>,
    /// Addresses of the bf16 weights `[capacity][NS]`.
    pub weights: &'a DeviceBuffer<u64>,
    /// Addresses of the u32 histograms `[NS][256]`, counting every indexed token.
    pub hist: &'a DeviceBuffer<u64>,
}

impl PariskvView<'_> {
    /// The tables' addresses, as the kernels take them.
    pub fn tables(&self) -> IndexTables {
        IndexTables {
            ids: self.ids.addr(),
            codes: self.codes.addr(),
            weights: self.weights.addr(),
            hist: self.hist.addr(),
        }
    }

    /// The shortest table's length: entries the view may index.
    pub fn len(&self) -> usize {
        [self.ids, self.codes, self.weights, self.hist]
            .iter()
            .map(|t| t.len())
            .min()
            .unwrap_or(0)
    }

    /// Whether the tables are empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One layer of a batch of `batch` sequences, `kv_heads` KV heads each.
pub struct LayerView<'a> {
    pub layer: usize,
    pub batch: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Where the segments and the K/V rows live.
    pub placement: Placement,
    /// Segments per (sequence, head) the tables hold, `MAX_SEG`.
    pub max_seg: usize,
    /// `[(b*H + h)*max_seg + s]`: addresses of each segment's plane words (0 past the last).
    pub seg_words: &'a DeviceBuffer<u64>,
    /// The same for the fp16 scales.
    pub seg_scales: &'a DeviceBuffer<u64>,
    /// `[b]`: tokens encoded into the store (a multiple of `BLK`).
    pub n_stored: &'a DeviceBuffer<i32>,
    /// `[b]`: stored plus tail tokens.
    pub n_total: &'a DeviceBuffer<i32>,
    /// `[(b*H + h)]`: addresses of the bf16 K rows `[capacity][D]` (raw basis), every token;
    /// consecutive rows `kv_rows.row_stride(D)` values apart.
    pub k_rows: &'a DeviceBuffer<u64>,
    /// `[(b*H + h)]`: addresses of the bf16 V rows (with adjacent rows, `k_rows[bh] + D`).
    pub v_rows: &'a DeviceBuffer<u64>,
    /// How the rows are laid out (the store's `StoreConfig::kv_rows`): the step's kernels that
    /// read them (oracle, landmark, fetch) are specialised on it.
    pub kv_rows: KvRows,
    /// The largest `n_total` of the batch, known on the host without a read-back (the store
    /// tracks lengths on the host too): it sizes grids and score buffers.
    pub max_tokens: usize,
    /// `[(b*H + h)]`: addresses of the fp16 landmark means `[capacity/8][D]`, when kept.
    pub landmarks: Option<&'a DeviceBuffer<u64>>,
    /// The ParisKV index tables, when the store keeps the index (the `pariskv(k)` method).
    pub pariskv: Option<PariskvView<'a>>,
}
