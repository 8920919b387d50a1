//! How a store is built ([`StoreConfig`]) and the checks that refuse a configuration the
//! kernels or the layout cannot serve.

use super::*;

/// How a [`KeyStore`] is built.
///
/// ```no_run
/// use codegen::{model::preset, spec::Placement};
/// use runtime::store::StoreConfig;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = StoreConfig {
///     max_batch: 32,
///     keep_landmarks: true, // for the landmark method
///     ..StoreConfig::new(preset("qwen3-8b")?, Placement::Host, 4 << 20)
/// };
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// The model's attention shape (`L`, `H_kv`, `D`, `G`, basis).
    pub model: ModelShape,
    /// Where segments and K/V rows live.
    pub placement: Placement,
    /// `BLK`: 32, 64 or 128.
    pub block: usize,
    /// `S`, words per plane per segment: even, holding whole blocks.
    pub segment_words: usize,
    /// Tokens over all resident sequences (a sequence counts with its longest layer); past it,
    /// prefill and append are refused.
    pub capacity_tokens: usize,
    /// The most sequences one view or append may batch.
    pub max_batch: usize,
    /// For a KLT model (and only then): the rotation of every (layer, KV head), `[L][H][D][D]`
    /// f32 with `R[i*D + j]` = component `i` of basis vector `j`.
    pub rotations: Option<Vec<f32>>,
    /// Keep the fp16 mean key of every 8 stored tokens (the landmark baseline, §4).
    pub keep_landmarks: bool,
    /// Keep the ParisKV index of every token (§12, the `pariskv(k)` method): ids, codes and
    /// weights in the placement (112 bytes per token per KV head at D = 128), histograms in
    /// device memory. Needs a head dimension of SPEC §1 (64, 80, 96, 128, 192 or 256).
    pub pariskv_index: bool,
    /// How the host placement's segments and row regions are allocated ([`HostMemory`]:
    /// `cuMemHostAlloc` by default; 2 MiB pages registered, or VMM host memory, for the
    /// fetch's scattered rows). Only `Pinned` with the HBM placement.
    pub host_memory: HostMemory,
    /// When `host_memory` cannot be had on this machine (checked once, when the store is
    /// built): `false` (the default) builds the store with `Pinned` after one warning on
    /// standard error; `true` refuses with [`StoreError::HostMemory`].
    pub require_host_memory: bool,
    /// How each (sequence, layer, KV head)'s bf16 K and V rows are laid out ([`KvRows`]):
    /// `Adjacent` (the default), `[H][cap][2][D]` (a token's K row, then its V row), which
    /// halves the host pages a step's scattered fetch touches (bench/NOTES.md, 2026-12-02: the
    /// fetch from host memory at 1M is bound by the pages it touches), or `Separate`,
    /// `[K: H][cap][D] | [V: H][cap][D]`. Either placement; the same bytes; views carry it
    /// ([`LayerView::kv_rows`]) and the step picks its kernels by it.
    pub kv_rows: KvRows,
}

impl StoreConfig {
    /// The defaults: `BLK = 64`, `S = 512`, batches of up to 64, no rotations, no landmarks, no
    /// ParisKV index, K/V rows side by side ([`StoreConfig::DEFAULT_KV_ROWS`]).
    pub fn new(model: ModelShape, placement: Placement, capacity_tokens: usize) -> Self {
        StoreConfig {
            model,
            placement,
            block: 64,
            segment_words: 512,
            capacity_tokens,
            max_batch: 64,
            rotations: None,
            keep_landmarks: false,
            pariskv_index: false,
            host_memory: HostMemory::Pinned,
            require_host_memory: false,
            kv_rows: Self::DEFAULT_KV_ROWS,
        }
    }

    /// The K/V row layout of [`StoreConfig::new`], and of the Python `KeyStore` and step-bench
    /// when they are not told: adjacent, for the host placement's fetch (in HBM the layouts
    /// time the same, bench/NOTES.md).
    pub const DEFAULT_KV_ROWS: KvRows = KvRows::Adjacent;

    pub(super) fn validate(&self) -> Result<StoreLayout, StoreError> {
        let bad = |reason: String| StoreError::Config { reason };
        self.model.validate().map_err(|e| bad(e.to_string()))?;
        let block = BlockSize::from_tokens(self.block).map_err(|e| bad(e.to_string()))?;
        let layout = StoreLayout::new(self.model.head_dim, block, self.segment_words)
            .map_err(|e| bad(e.to_string()))?;
        if !self.segment_words.is_multiple_of(2) {
            return Err(bad(format!(
                "segment_words {} is odd; the scan and gather kernels load two words at a time, \
                 so it must be even",
                self.segment_words
            )));
        }
        if self.capacity_tokens == 0 || self.capacity_tokens > i32::MAX as usize {
            return Err(bad(format!(
                "capacity_tokens {} is outside 1..={} (kernels index tokens with 32-bit ints)",
                self.capacity_tokens,
                i32::MAX
            )));
        }
        if !(1..=65_535).contains(&self.max_batch) {
            return Err(bad(format!(
                "max_batch {} is outside 1..=65535 (a batch is a grid dimension)",
                self.max_batch
            )));
        }
        let m = &self.model;
        match (&self.rotations, m.basis) {
            (None, Basis::Klt) => {
                return Err(bad(format!(
                    "model {} uses the KLT basis, so the store needs its rotations ([L][H][D][D] \
                     f32)",
                    m.name
                )))
            }
            (Some(_), Basis::Raw) => {
                return Err(bad(format!(
                    "model {} uses raw channels; give no rotations (or a model shape with the \
                     KLT basis)",
                    m.name
                )))
            }
            (Some(r), Basis::Klt) => {
                let expected = m.layers * m.kv_heads * m.head_dim * m.head_dim;
                if r.len() != expected {
                    return Err(bad(format!(
                        "rotations hold {} values; expected {expected} = {} layers x {} KV heads x \
                         {d} x {d}",
                        r.len(),
                        m.layers,
                        m.kv_heads,
                        d = m.head_dim
                    )));
                }
                if let Some(i) = r.iter().position(|x| !x.is_finite()) {
                    return Err(bad(format!("rotation value {i} is not finite")));
                }
            }
            (None, Basis::Raw) => {}
        }
        if self.pariskv_index {
            IndexGeometry::new(m.head_dim)?;
        }
        if self.placement == Placement::Hbm && self.host_memory != HostMemory::Pinned {
            return Err(bad(format!(
                "host_memory {} applies to the host placement; the HBM placement takes \
                 HostMemory::Pinned (the default)",
                self.host_memory
            )));
        }
        Ok(layout)
    }
}
