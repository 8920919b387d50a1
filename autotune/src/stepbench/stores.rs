//! The key stores of a run on the GPU: one [`KeyStore`] per (basis, placement) holding one
//! sequence whose layers are the slots, and the per-layer views a step reads, composed from the
//! slots' tables (a batch element per slot, the first `n` tokens of each).
//!
//! With the ParisKV index (`pariskv(k)`), a view of the first `n` tokens also needs histograms
//! that count only those tokens (the store's count all of the slot's): [`prefix_histograms`]
//! recounts them from the slot's centroid ids, and [`LayerTables`] owns them.

use std::sync::Arc;

use codegen::model::ModelShape;
use codegen::spec::{KvRows, Placement};
use reference::pariskv::{subspaces, CENTROIDS};
use runtime::gpu::{DeviceBuffer, Gpu, GpuError};
use runtime::jit::KernelSource;
use runtime::store::device::read_back;
use runtime::store::{HostMemory, KeyStore, SequenceId, StoreConfig, StoreError};
use runtime::view::{LayerView, PariskvView};

/// `[h]` addresses of one slot's ParisKV index rows (ids, codes, weights).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct SlotIndex {
    pub ids: Vec<u64>,
    pub codes: Vec<u64>,
    pub weights: Vec<u64>,
}

/// The device tables of one slot, downloaded once: `[h][segment]` addresses and `[h]` rows.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct SlotTables {
    pub seg_words: Vec<Vec<u64>>,
    pub seg_scales: Vec<Vec<u64>>,
    pub k_rows: Vec<u64>,
    pub v_rows: Vec<u64>,
    pub landmarks: Option<Vec<u64>>,
    /// The ParisKV index rows, when the store keeps the index.
    pub pariskv: Option<SlotIndex>,
    /// How the store lays out the K/V rows.
    pub kv_rows: KvRows,
}

/// Host copies of a view's tables, in the layout of [`LayerView`].
#[derive(Clone, Debug, PartialEq, Default)]
pub struct HostTables {
    pub seg_words: Vec<u64>,
    pub seg_scales: Vec<u64>,
    pub k_rows: Vec<u64>,
    pub v_rows: Vec<u64>,
    pub landmarks: Option<Vec<u64>>,
    /// `[b*H + h]` ParisKV index rows, when every slot has them.
    pub pariskv: Option<SlotIndex>,
    /// How the slots' K/V rows are laid out (all alike).
    pub kv_rows: KvRows,
}

/// The tables of a batch whose element `b` is `slots[b]`, `max_seg` segments each. `None`
/// when a slot holds fewer segments, or the slots' K/V rows are laid out differently.
pub fn compose(slots: &[&SlotTables], max_seg: usize) -> Option<HostTables> {
    let kv_rows = slots.first().map_or(KvRows::Separate, |s| s.kv_rows);
    if slots.iter().any(|s| s.kv_rows != kv_rows) {
        return None;
    }
    let mut t = HostTables {
        kv_rows,
        landmarks: slots.iter().all(|s| s.landmarks.is_some()).then(Vec::new),
        pariskv: slots
            .iter()
            .all(|s| s.pariskv.is_some())
            .then(SlotIndex::default),
        ..HostTables::default()
    };
    for s in slots {
        for h in 0..s.k_rows.len() {
            t.seg_words.extend(s.seg_words.get(h)?.get(..max_seg)?);
            t.seg_scales.extend(s.seg_scales.get(h)?.get(..max_seg)?);
            t.k_rows.push(s.k_rows[h]);
            t.v_rows.push(*s.v_rows.get(h)?);
            if let (Some(all), Some(mine)) = (t.landmarks.as_mut(), s.landmarks.as_ref()) {
                all.push(*mine.get(h)?);
            }
            if let (Some(all), Some(mine)) = (t.pariskv.as_mut(), s.pariskv.as_ref()) {
                all.ids.push(*mine.ids.get(h)?);
                all.codes.push(*mine.codes.get(h)?);
                all.weights.push(*mine.weights.get(h)?);
            }
        }
    }
    Some(t)
}

/// Splits a flat `[h*max_seg + s]` table into `[h][s]`. The store's buffer may be longer than
/// `heads * max_seg` (it is sized for its capacity), so the view's `max_seg` is the stride.
pub fn per_head(flat: &[u64], heads: usize, max_seg: usize) -> Vec<Vec<u64>> {
    flat.chunks(max_seg.max(1))
        .take(heads)
        .map(<[u64]>::to_vec)
        .collect()
}

/// The first `heads` entries of a `[b*H + h]` table of one sequence (the buffer may be longer).
fn first(mut table: Vec<u64>, heads: usize) -> Vec<u64> {
    table.truncate(heads);
    table
}

/// Counts `[NS][256]` centroid ids of `ids` (`[n][NS]` u8, token-major) into histograms.
pub fn histograms(ids: &[u8], ns: usize) -> Vec<u32> {
    let bins = CENTROIDS;
    let mut hist = vec![0u32; ns * bins];
    for row in ids.chunks_exact(ns) {
        for (b, &id) in row.iter().enumerate() {
            hist[b * bins + usize::from(id)] += 1;
        }
    }
    hist
}

/// The histograms of the first `n` tokens of every head of a slot (`[h][NS][256]` u32,
/// flattened), from the ids the store holds (device or mapped host memory): one read-back per
/// head.
pub fn prefix_histograms(
    gpu: &Gpu,
    index: &SlotIndex,
    n: usize,
    head_dim: usize,
) -> Result<Vec<u32>, GpuError> {
    let ns = subspaces(head_dim);
    let mut out = Vec::with_capacity(index.ids.len() * ns * CENTROIDS);
    for &ids in &index.ids {
        let rows: Vec<u8> = read_back(gpu, ids, n * ns)?;
        out.extend(histograms(&rows, ns));
    }
    Ok(out)
}

/// One store and its slots' tables.
pub struct StoreSet {
    pub store: KeyStore,
    pub id: SequenceId,
    pub placement: Placement,
    pub slots: Vec<SlotTables>,
}

impl StoreSet {
    /// An empty store of `slots` layers of `model`'s heads for one sequence of `tokens`; the
    /// host placement's memory allocated as `host_memory` says (required); K/V rows laid out
    /// as `kv_rows` says.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        gpu: &Arc<Gpu>,
        kernels: &dyn KernelSource,
        model: &ModelShape,
        placement: Placement,
        host_memory: HostMemory,
        kv_rows: KvRows,
        tokens: usize,
        rotations: Option<Vec<f32>>,
        landmarks: bool,
        pariskv: bool,
    ) -> Result<StoreSet, StoreError> {
        let config = StoreConfig {
            max_batch: 1,
            rotations,
            keep_landmarks: landmarks,
            pariskv_index: pariskv,
            host_memory: match placement {
                Placement::Host => host_memory,
                Placement::Hbm => HostMemory::Pinned,
            },
            require_host_memory: true,
            kv_rows,
            ..StoreConfig::new(model.clone(), placement, tokens)
        };
        let mut store = KeyStore::with_kernels(gpu.clone(), config, kernels)?;
        let id = store.create_sequence();
        Ok(StoreSet {
            store,
            id,
            placement,
            slots: Vec::new(),
        })
    }

    /// Prefills slot (layer) `slot` with bf16 keys and values `[H][n][D]` and downloads its
    /// tables.
    pub fn fill(
        &mut self,
        slot: usize,
        keys: &DeviceBuffer<u16>,
        values: &DeviceBuffer<u16>,
    ) -> Result<(), StoreError> {
        self.store.prefill(self.id, slot, keys, values)?;
        let heads = self.store.config().model.kv_heads;
        let view = self.store.layer_view(&[self.id], slot)?;
        let tables = SlotTables {
            seg_words: per_head(&view.seg_words.download()?, heads, view.max_seg),
            seg_scales: per_head(&view.seg_scales.download()?, heads, view.max_seg),
            k_rows: first(view.k_rows.download()?, heads),
            v_rows: first(view.v_rows.download()?, heads),
            landmarks: view
                .landmarks
                .map(DeviceBuffer::download)
                .transpose()?
                .map(|l| first(l, heads)),
            pariskv: match view.pariskv {
                Some(p) => Some(SlotIndex {
                    ids: first(p.ids.download()?, heads),
                    codes: first(p.codes.download()?, heads),
                    weights: first(p.weights.download()?, heads),
                }),
                None => None,
            },
            kv_rows: view.kv_rows,
        };
        if self.slots.len() <= slot {
            self.slots.resize(slot + 1, SlotTables::default());
        }
        self.slots[slot] = tables;
        Ok(())
    }
}

/// One layer's view of a batch, owning its tables on the device.
pub struct LayerTables {
    pub layer: usize,
    pub batch: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub placement: Placement,
    pub max_seg: usize,
    pub tokens: usize,
    pub kv_rows: KvRows,
    seg_words: DeviceBuffer<u64>,
    seg_scales: DeviceBuffer<u64>,
    n_stored: DeviceBuffer<i32>,
    n_total: DeviceBuffer<i32>,
    k_rows: DeviceBuffer<u64>,
    v_rows: DeviceBuffer<u64>,
    landmarks: Option<DeviceBuffer<u64>>,
    pariskv: Option<IndexTables>,
}

/// A view's ParisKV tables on the device, with the histograms of its prefix.
struct IndexTables {
    ids: DeviceBuffer<u64>,
    codes: DeviceBuffer<u64>,
    weights: DeviceBuffer<u64>,
    hist: DeviceBuffer<u64>,
    /// `[b*H + h][NS][256]` counts the `hist` table points into.
    _counts: DeviceBuffer<u32>,
}

impl LayerTables {
    /// Uploads the view of layer `layer` over `tables` (a batch of `batch` sequences of
    /// `tokens` stored tokens each, no tail). `hist` is the batch's ParisKV histograms
    /// `[b*H + h][NS][256]` of those tokens, when `tables` has the index.
    #[allow(clippy::too_many_arguments)]
    pub fn upload(
        gpu: &Gpu,
        layer: usize,
        batch: usize,
        model: &ModelShape,
        placement: Placement,
        max_seg: usize,
        tokens: usize,
        tables: &HostTables,
        hist: Option<&[u32]>,
    ) -> Result<LayerTables, GpuError> {
        let lengths = vec![tokens as i32; batch];
        let pariskv = match (&tables.pariskv, hist) {
            (Some(index), Some(hist)) => {
                let bins = subspaces(model.head_dim) * CENTROIDS;
                assert_eq!(
                    hist.len(),
                    index.ids.len() * bins,
                    "histograms [b*H + h][NS][256] of every head of the batch"
                );
                let counts = gpu.upload(hist)?;
                let per_head = (bins * 4) as u64;
                let addrs: Vec<u64> = (0..index.ids.len() as u64)
                    .map(|i| counts.addr() + i * per_head)
                    .collect();
                Some(IndexTables {
                    ids: gpu.upload(&index.ids)?,
                    codes: gpu.upload(&index.codes)?,
                    weights: gpu.upload(&index.weights)?,
                    hist: gpu.upload(&addrs)?,
                    _counts: counts,
                })
            }
            _ => None,
        };
        Ok(LayerTables {
            layer,
            batch,
            kv_heads: model.kv_heads,
            head_dim: model.head_dim,
            placement,
            max_seg,
            tokens,
            kv_rows: tables.kv_rows,
            seg_words: gpu.upload(&tables.seg_words)?,
            seg_scales: gpu.upload(&tables.seg_scales)?,
            n_stored: gpu.upload(&lengths)?,
            n_total: gpu.upload(&lengths)?,
            k_rows: gpu.upload(&tables.k_rows)?,
            v_rows: gpu.upload(&tables.v_rows)?,
            landmarks: tables
                .landmarks
                .as_ref()
                .map(|l| gpu.upload(l))
                .transpose()?,
            pariskv,
        })
    }

    /// The view the decoder reads.
    pub fn view(&self) -> LayerView<'_> {
        LayerView {
            layer: self.layer,
            batch: self.batch,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            placement: self.placement,
            max_seg: self.max_seg,
            seg_words: &self.seg_words,
            seg_scales: &self.seg_scales,
            n_stored: &self.n_stored,
            n_total: &self.n_total,
            k_rows: &self.k_rows,
            v_rows: &self.v_rows,
            kv_rows: self.kv_rows,
            max_tokens: self.tokens,
            landmarks: self.landmarks.as_ref(),
            pariskv: self.pariskv.as_ref().map(|p| PariskvView {
                ids: &p.ids,
                codes: &p.codes,
                weights: &p.weights,
                hist: &p.hist,
            }),
        }
    }
}
