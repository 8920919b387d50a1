//! The key store on the GPU (SPEC §2, §7, §8): many resident sequences, each a list of segments
//! per (layer, KV head) and its bf16 K/V rows, in device memory or in page-locked mapped host
//! memory; prefill and per-token append; and [`LayerView`], the device tables one layer's step
//! reads.
//!
//! # Memory
//!
//! Segments are fixed-size slots of slabs from a per-placement [`pool::SlotPool`]; a segment is
//! allocated as soon as the tail reaches into it, so the block that fills it can be encoded
//! without an allocation. The K/V rows must be contiguous per head (`[capacity][D]`, ABI), so
//! each (sequence, layer) has one row region `[K: H][cap][D] | [V: H][cap][D] | [means:
//! H][cap/8][D]` of a power-of-two number of 256-token chunks, from a size-class
//! [`pool::RegionPool`]; when a layer outgrows it the rows move to the next class (a
//! device-side copy, amortised: lengths double). Freed sequences return everything to the pools,
//! which keep it for later sequences; [`KeyStore::trim`] gives unused memory back to the driver.
//!
//! # No host synchronisation on the decode path
//!
//! The host keeps every length itself ([`ledger`]), so an append knows when a block fills and
//! which segment it goes to without reading the device. Table updates are small asynchronous
//! copies from pinned memory. The encode kernel reports bad keys through a status word; an
//! append does not wait for it: **appends are validated at the next [`KeyStore::check`]**, which
//! synchronises and names the sequence, layer, head and token of the first failure since the
//! previous check. A failed block is not written (its segment bits stay zero), though the
//! sequence's lengths have moved past it: free such a sequence. [`KeyStore::prefill`] does wait,
//! and on a failure leaves the sequence as it was before the call.
//!
//! Everything is queued on the [`Gpu`]'s one stream, so memory a freed sequence held is reused
//! only after the work queued before the free.
//!
//! # The ParisKV index
//!
//! With [`StoreConfig::pariskv_index`] the store also keeps the index of §12 for every
//! (sequence, layer, KV head), built as tokens enter (prefill and every append), and a view
//! carries its tables ([`LayerView::pariskv`]) for the `pariskv(k)` method; see [`pariskv`].

pub mod device;
mod error;
mod foreign;
pub mod ledger;
pub mod pariskv;
pub mod pool;
pub mod tables;

use std::sync::{Arc, Mutex, MutexGuard};

use codegen::model::{Basis, ModelShape};
use codegen::spec::{EncodeMode, EncodeSpec, Family, KernelSpec, LandmarkSpec, Placement};
use cudarc::driver::CudaFunction;

pub use error::StoreError;
pub use ledger::SequenceId;
pub use pariskv::IndexGeometry;

use crate::gpu::{Arg, DeviceBuffer, Gpu};
use crate::jit::{Jit, KernelSource};
use crate::pariskv::{build_args, IndexTables};
use crate::reference::store::{BlockSize, StoreLayout};
use crate::view::{LayerView, PariskvView};
use device::{Memory, Uploader};
use ledger::{Capacity, Geometry, Registry};
use pariskv::{index_status_error, IndexState};
use pool::{Region, RegionPool, Slot, SlotPool};
use tables::{HostTables, Tables};

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
    /// device memory. Needs a head dimension of 64, 128 or 256.
    pub pariskv_index: bool,
}

impl StoreConfig {
    /// The defaults: `BLK = 64`, `S = 512`, batches of up to 64, no rotations, no landmarks, no
    /// ParisKV index.
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
        }
    }

    fn validate(&self) -> Result<StoreLayout, StoreError> {
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
        Ok(layout)
    }
}

/// Memory the store holds, by kind. Pool memory stays held when sequences are freed (it is
/// reused); [`KeyStore::trim`] releases what no sequence uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUse {
    /// Device memory held: pools of the HBM placement, tables, rotations, status words.
    pub device_bytes: usize,
    /// Page-locked host memory held: pools of the host placement, the upload ring.
    pub pinned_bytes: usize,
    /// Of the pools' bytes, those that resident sequences use.
    pub pool_bytes_in_use: usize,
}

/// One layer of one sequence.
#[derive(Default)]
struct LayerState {
    n_stored: usize,
    n_total: usize,
    /// `[s][h]`.
    segments: Vec<Vec<Slot>>,
    region: Option<Region>,
    /// The ParisKV histograms of the layer's heads, with the index.
    hist: Option<Slot>,
}

struct Sequence {
    layers: Vec<LayerState>,
}

impl Sequence {
    /// Tokens the sequence counts for: its longest layer.
    fn tokens(&self) -> usize {
        self.layers.iter().map(|l| l.n_total).max().unwrap_or(0)
    }
}

/// A launch whose status word [`KeyStore::check`] has not read yet.
struct LaunchRecord {
    layer: usize,
    ids: Vec<SequenceId>,
    /// An index build (status `{kind, b, h, token}`) rather than an encode.
    index: bool,
}

/// What `&self` methods update: the table mirrors, the upload ring and the status log.
struct Shared {
    uploader: Uploader,
    /// What each [`Tables`] holds on the device, `[layer]` then the prefill tables.
    mirrors: Vec<HostTables>,
    log: Vec<LaunchRecord>,
}

/// Encode launches between two checks; when the log is full an append checks first.
const LOG_SLOTS: usize = 4096;
/// The same with the ParisKV index, which every append builds.
const INDEX_LOG_SLOTS: usize = 65_536;
/// Status words per launch: `{kind, b, h, token, channel}`.
const STATUS_WORDS: usize = 5;
/// Tokens of the smallest row region.
const ROW_CHUNK: usize = 256;
/// Bytes a segment slab aims at.
const SLAB_BYTES: usize = 32 << 20;
/// Threads of the store's kernels.
const THREADS: u32 = 256;

/// New memory a call needs, allocated before anything is changed.
struct Growth {
    /// Index into the call's batch.
    at: usize,
    region: Option<Region>,
    /// Segments to add, `[s][h]`.
    segments: Vec<Vec<(Slot, bool)>>,
    /// The layer's ParisKV histograms, when it has none yet.
    hist: Option<(Slot, bool)>,
}

struct Functions {
    encode_bulk: CudaFunction,
    encode_append: CudaFunction,
    landmark_build: Option<CudaFunction>,
    append_rows: CudaFunction,
}

/// The key store. See the [module docs](self).
///
/// ```no_run
/// use std::sync::Arc;
/// use codegen::{model::preset, spec::Placement};
/// use half::bf16;
/// use runtime::gpu::Gpu;
/// use runtime::store::{KeyStore, StoreConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let gpu = Arc::new(Gpu::open(0)?);
/// let model = preset("qwen3-8b")?;
/// let (heads, d) = (model.kv_heads, model.head_dim);
/// let config = StoreConfig::new(model, Placement::Hbm, 1 << 20);
/// let mut store = KeyStore::new(gpu.clone(), config)?;
/// let seq = store.create_sequence();
/// // Prefill layer 0 with 1000 tokens: bf16 bits [H][n][D] on the device.
/// let one = bf16::from_f32(0.5).to_bits();
/// let rows = gpu.upload(&vec![one; heads * 1000 * d])?;
/// store.prefill(seq, 0, &rows, &rows)?;
/// // Then one token per decode step, [B][H][D]; a filled block is encoded on the device.
/// let token = gpu.upload(&vec![one; heads * d])?;
/// store.append(&[seq], 0, &token, &token)?;
/// store.check()?; // reports a bad key of an encoded block
/// assert_eq!(store.lengths(seq, 0)?, (960, 1001)); // 15 blocks of 64 stored, 41 in the tail
/// let _view = store.layer_view(&[seq], 0)?; // what a decode step of layer 0 reads
/// store.free_sequence(seq)?;
/// store.trim()?; // gives unused pool memory back
/// # Ok(())
/// # }
/// ```
pub struct KeyStore {
    gpu: Arc<Gpu>,
    config: StoreConfig,
    layout: StoreLayout,
    geometry: Geometry,
    max_seg_cap: usize,
    sequences: Registry<Sequence>,
    capacity: Capacity,
    segments: SlotPool<Memory>,
    regions: RegionPool<Memory>,
    rotations: Vec<DeviceBuffer<f32>>,
    /// One per layer (views and appends), then one for prefill.
    tables: Vec<Tables>,
    shared: Mutex<Shared>,
    status_log: DeviceBuffer<i32>,
    log_slots: usize,
    prefill_status: DeviceBuffer<i32>,
    index: Option<IndexState>,
    encode_bulk: EncodeSpec,
    encode_append: EncodeSpec,
    landmark: LandmarkSpec,
    functions: Functions,
    fixed_device_bytes: usize,
}

impl KeyStore {
    /// A store loading its kernels through a [`Jit`] on the default disk cache
    /// ([`Jit::with_default_cache`]). Fails with [`StoreError::Jit`] when NVRTC cannot be found
    /// (the error lists where it looked and how to fix it).
    pub fn new(gpu: Arc<Gpu>, config: StoreConfig) -> Result<KeyStore, StoreError> {
        // A bad configuration is reported before NVRTC is looked for.
        config.validate()?;
        let kernels = Jit::with_default_cache(gpu.clone())?;
        Self::with_kernels(gpu, config, &kernels)
    }

    /// A store loading its kernels from `kernels` (e.g. a [`Jit`] shared with the decoder),
    /// which must load them on `gpu`. The store keeps the functions, not the source.
    pub fn with_kernels(
        gpu: Arc<Gpu>,
        config: StoreConfig,
        kernels: &dyn KernelSource,
    ) -> Result<KeyStore, StoreError> {
        let layout = config.validate()?;
        let m = &config.model;
        let (layers, heads, d) = (m.layers, m.kv_heads, m.head_dim);
        let rotate = config.rotations.is_some();
        let encode = |mode| EncodeSpec {
            block: config.block,
            segment_words: config.segment_words,
            ..EncodeSpec::new(d, mode, rotate)
        };
        let (encode_bulk, encode_append) = (encode(EncodeMode::Bulk), encode(EncodeMode::Append));
        let landmark = LandmarkSpec {
            head_dim: d as u32,
            group: m.group_size() as u32,
            threads: THREADS,
            placement: config.placement,
        };
        for spec in [
            KernelSpec::from(encode_bulk),
            encode_append.into(),
            landmark.into(),
        ] {
            spec.validate().map_err(|e| StoreError::Config {
                reason: e.to_string(),
            })?;
        }
        let load = |spec: KernelSpec, entry: String| kernels.function(&spec, &entry);
        let rows_module = gpu.load(device::APPEND_ROWS_SOURCE, "fathom_store_append_rows.cu")?;
        let functions = Functions {
            encode_bulk: load(encode_bulk.into(), encode_bulk.kernel_name())?,
            encode_append: load(encode_append.into(), encode_append.kernel_name())?,
            landmark_build: if config.keep_landmarks {
                Some(load(landmark.into(), landmark.build_entry())?)
            } else {
                None
            },
            append_rows: rows_module.function(device::APPEND_ROWS)?,
        };

        let geometry = Geometry {
            block: config.block,
            segment_tokens: layout.segment_tokens(),
            row_chunk: ROW_CHUNK,
        };
        let max_seg_cap = geometry.segments_for(config.capacity_tokens).max(1);
        let index = if config.pariskv_index {
            let geometry = IndexGeometry::new(d)?;
            Some(IndexState::new(
                &gpu,
                kernels,
                geometry,
                heads,
                config.placement,
            )?)
        } else {
            None
        };
        let tables = (0..=layers)
            .map(|layer| {
                // The prefill tables serve one sequence.
                let batch = if layer == layers { 1 } else { config.max_batch };
                Tables::new(&gpu, batch, heads, max_seg_cap, index.is_some())
            })
            .collect::<Result<Vec<_>, _>>()?;
        let rotations = match &config.rotations {
            Some(r) => r
                .chunks_exact(heads * d * d)
                .map(|layer| gpu.upload(layer))
                .collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        let log_slots = if index.is_some() {
            INDEX_LOG_SLOTS
        } else {
            LOG_SLOTS
        };
        let status_log = gpu.filled::<i32>(log_slots * STATUS_WORDS, 0)?;
        let prefill_status = gpu.filled::<i32>(STATUS_WORDS, 0)?;
        let fixed_device_bytes = tables.iter().map(Tables::bytes).sum::<usize>()
            + rotations.iter().map(DeviceBuffer::bytes).sum::<usize>()
            + status_log.bytes()
            + prefill_status.bytes()
            + index.as_ref().map_or(0, IndexState::fixed_bytes);

        let words_bytes = layout.words_len() * 8;
        let slot_bytes = (words_bytes + layout.scales_len() * 2).next_multiple_of(256);
        let shared = Shared {
            uploader: Uploader::new(&gpu)?,
            mirrors: vec![HostTables::default(); layers + 1],
            log: Vec::new(),
        };
        Ok(KeyStore {
            layout,
            geometry,
            max_seg_cap,
            sequences: Registry::default(),
            capacity: Capacity::new(config.capacity_tokens),
            segments: SlotPool::new(slot_bytes, (SLAB_BYTES / slot_bytes).max(1)),
            regions: RegionPool::new(),
            rotations,
            tables,
            shared: Mutex::new(shared),
            status_log,
            log_slots,
            prefill_status,
            index,
            encode_bulk,
            encode_append,
            landmark,
            functions,
            fixed_device_bytes,
            config,
            gpu,
        })
    }

    /// The configuration the store was built with.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The GPU the store lives on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The segment layout (`D`, `BLK`, `S`).
    pub fn layout(&self) -> &StoreLayout {
        &self.layout
    }

    /// Tokens in use over all resident sequences, against `capacity_tokens`.
    pub fn tokens_in_use(&self) -> usize {
        self.capacity.used()
    }

    /// A new, empty sequence.
    pub fn create_sequence(&mut self) -> SequenceId {
        let layers = (0..self.config.model.layers)
            .map(|_| LayerState::default())
            .collect();
        self.sequences.insert(Sequence { layers })
    }

    /// Frees a sequence: its segments and rows go back to the pools, its tokens back to the
    /// capacity, and its id becomes invalid.
    pub fn free_sequence(&mut self, id: SequenceId) -> Result<(), StoreError> {
        let sequence = self.sequences.remove(id)?;
        self.capacity.commit(sequence.tokens(), 0);
        for layer in sequence.layers {
            for slot in layer.segments.into_iter().flatten() {
                self.segments.free(slot);
            }
            if let Some(region) = layer.region {
                self.regions.free(region);
            }
            if let (Some(slot), Some(index)) = (layer.hist, self.index.as_mut()) {
                index.hist.free(slot);
            }
        }
        Ok(())
    }

    /// `(n_stored, n_total)` of one layer of a sequence, as the host tracks them.
    pub fn lengths(&self, id: SequenceId, layer: usize) -> Result<(usize, usize), StoreError> {
        self.check_layer(layer)?;
        let state = &self.sequences.get(id)?.layers[layer];
        Ok((state.n_stored, state.n_total))
    }

    /// Memory the store holds; see [`MemoryUse`].
    pub fn memory(&self) -> MemoryUse {
        let pools = self.segments.held_bytes() + self.regions.held_bytes();
        let ring = self.lock().uploader.bytes();
        // The ParisKV histograms are device memory in either placement.
        let (hist_held, hist_used) = self
            .index
            .as_ref()
            .map_or((0, 0), |i| (i.hist.held_bytes(), i.hist.used_bytes()));
        let fixed = self.fixed_device_bytes + hist_held;
        let (device_bytes, pinned_bytes) = match self.config.placement {
            Placement::Hbm => (fixed + pools, ring),
            Placement::Host => (fixed, pools + ring),
        };
        MemoryUse {
            device_bytes,
            pinned_bytes,
            pool_bytes_in_use: self.segments.used_bytes() + self.regions.used_bytes() + hist_used,
        }
    }

    /// Gives the pools' unused memory back to the driver. Waits for the queued work first, which
    /// may still read memory of freed sequences.
    pub fn trim(&mut self) -> Result<(), StoreError> {
        self.gpu.synchronize()?;
        self.segments.trim();
        self.regions.trim();
        if let Some(index) = self.index.as_mut() {
            index.hist.trim();
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check_layer(&self, layer: usize) -> Result<(), StoreError> {
        let layers = self.config.model.layers;
        if layer >= layers {
            return Err(StoreError::LayerOutOfRange { layer, layers });
        }
        Ok(())
    }

    fn check_batch(&self, ids: &[SequenceId]) -> Result<(), StoreError> {
        self.sequences.check_batch(ids)?;
        if ids.len() > self.config.max_batch {
            return Err(StoreError::BatchTooLarge {
                batch: ids.len(),
                max_batch: self.config.max_batch,
            });
        }
        Ok(())
    }

    /// Bytes of one head's K (or V) rows in a region of `class`.
    fn head_rows_bytes(&self, class: u32) -> usize {
        self.geometry.class_tokens(class) * self.config.model.head_dim * 2
    }

    /// Bytes of the landmark means of all heads in a region of `class`.
    fn means_bytes(&self, class: u32) -> usize {
        if self.config.keep_landmarks {
            self.config.model.kv_heads * self.head_rows_bytes(class) / 8
        } else {
            0
        }
    }

    fn region_bytes(&self, class: u32) -> usize {
        let h = self.config.model.kv_heads;
        let index = self.index.as_ref().map_or(0, |i| {
            h * self.geometry.class_tokens(class) * i.geometry.bytes_per_token()
        });
        2 * h * self.head_rows_bytes(class) + self.means_bytes(class) + index
    }

    /// Addresses of head `h`'s ParisKV ids, codes and weights in `region` (after the rows and
    /// the means); zeros without the index.
    fn index_addrs(&self, region: Region, h: usize) -> (u64, u64, u64) {
        let Some(index) = &self.index else {
            return (0, 0, 0);
        };
        let class = self.regions.class(region);
        let heads = self.config.model.kv_heads;
        let base = self.regions.addr(region)
            + (2 * heads * self.head_rows_bytes(class) + self.means_bytes(class)) as u64;
        let (ids, codes, weights) =
            index
                .geometry
                .offsets(self.geometry.class_tokens(class), heads, h);
        (
            base + ids as u64,
            base + codes as u64,
            base + weights as u64,
        )
    }

    /// Addresses of head `h`'s K rows, V rows and means in `region`.
    fn row_addrs(&self, region: Region, h: usize) -> (u64, u64, u64) {
        let class = self.regions.class(region);
        let per_head = self.head_rows_bytes(class) as u64;
        let heads = self.config.model.kv_heads as u64;
        let base = self.regions.addr(region);
        let k = base + h as u64 * per_head;
        let v = base + (heads + h as u64) * per_head;
        let means = if self.config.keep_landmarks {
            base + 2 * heads * per_head + h as u64 * per_head / 8
        } else {
            0
        };
        (k, v, means)
    }

    /// Allocates what the sequences of `ids` need at `layer` to hold `new_total[i]` tokens: a
    /// larger row region, more segments. On failure everything allocated here goes back to the
    /// pools and no sequence has changed.
    fn allocate(
        &mut self,
        ids: &[SequenceId],
        layer: usize,
        new_total: &[usize],
    ) -> Result<Vec<Growth>, StoreError> {
        let needs: Vec<(Option<u32>, usize, bool)> = ids
            .iter()
            .zip(new_total)
            .map(|(&id, &n)| {
                let state = &self.sequence(id).layers[layer];
                let class = self.geometry.row_class(n);
                let region = match state.region {
                    Some(r) if self.regions.class(r) >= class => None,
                    _ => Some(class),
                };
                let segments = self
                    .geometry
                    .segments_for(n)
                    .saturating_sub(state.segments.len());
                let hist = self.index.is_some() && state.hist.is_none();
                (region, segments, hist)
            })
            .collect();
        let (gpu, placement) = (self.gpu.clone(), self.config.placement);
        let heads = self.config.model.kv_heads;
        let mut growth = Vec::new();
        let mut failure = None;
        for (at, (class, segments, hist)) in needs.into_iter().enumerate() {
            let mut g = Growth {
                at,
                region: None,
                segments: Vec::new(),
                hist: None,
            };
            if let (true, Some(index)) = (hist, self.index.as_mut()) {
                match index.hist.alloc(|bytes| IndexState::grow(&gpu, bytes)) {
                    Ok(slot) => g.hist = Some(slot),
                    Err(e) => failure = Some(e),
                }
            }
            if let (Some(class), true) = (class, failure.is_none()) {
                let bytes = self.region_bytes(class);
                match self
                    .regions
                    .alloc(class, || Memory::zeroed(&gpu, placement, bytes))
                {
                    Ok(r) => g.region = Some(r),
                    Err(e) => failure = Some(e),
                }
            }
            for _ in 0..segments {
                if failure.is_some() {
                    break;
                }
                let mut row = Vec::with_capacity(heads);
                for _ in 0..heads {
                    match self
                        .segments
                        .alloc(|bytes| Memory::zeroed(&gpu, placement, bytes))
                    {
                        Ok(slot) => row.push(slot),
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
                g.segments.push(row);
            }
            growth.push(g);
            if failure.is_some() {
                break;
            }
        }
        if let Some(e) = failure {
            for g in growth {
                if let Some(region) = g.region {
                    self.regions.free(region);
                }
                for (slot, _) in g.segments.into_iter().flatten() {
                    self.segments.free(slot);
                }
                if let (Some((slot, _)), Some(index)) = (g.hist, self.index.as_mut()) {
                    index.hist.free(slot);
                }
            }
            return Err(e.into());
        }
        Ok(growth)
    }

    /// Attaches allocated memory to the sequences: rows move into a grown region (stream-ordered
    /// copies), reused segments are zeroed (so that a segment's unfilled blocks read as zero, as
    /// the reference store's do).
    fn commit(
        &mut self,
        ids: &[SequenceId],
        layer: usize,
        growth: Vec<Growth>,
    ) -> Result<(), StoreError> {
        let (heads, d) = (self.config.model.kv_heads, self.config.model.head_dim);
        for g in growth {
            let id = ids[g.at];
            if let Some(new) = g.region {
                let state = &self.sequence(id).layers[layer];
                if let Some(old) = state.region {
                    let rows = state.n_total * d * 2;
                    let means = state.n_stored / 8 * d * 2;
                    for h in 0..heads {
                        let (k0, v0, m0) = self.row_addrs(old, h);
                        let (k1, v1, m1) = self.row_addrs(new, h);
                        device::copy(&self.gpu, k1, k0, rows)?;
                        device::copy(&self.gpu, v1, v0, rows)?;
                        if self.config.keep_landmarks {
                            device::copy(&self.gpu, m1, m0, means)?;
                        }
                        if let Some(index) = &self.index {
                            // The index covers every token, as the rows do.
                            let g = index.geometry;
                            let (i0, c0, w0) = self.index_addrs(old, h);
                            let (i1, c1, w1) = self.index_addrs(new, h);
                            let n = state.n_total;
                            device::copy(&self.gpu, i1, i0, n * g.id_bytes())?;
                            device::copy(&self.gpu, c1, c0, n * g.code_bytes())?;
                            device::copy(&self.gpu, w1, w0, n * g.weight_bytes())?;
                        }
                    }
                    self.regions.free(old);
                }
            }
            for &(slot, reused) in g.segments.iter().flatten() {
                if reused {
                    device::zero(
                        &self.gpu,
                        self.segments.addr(slot),
                        self.segments.slot_bytes(),
                    )?;
                }
            }
            if let (Some((slot, reused)), Some(index)) = (g.hist, &self.index) {
                if reused {
                    device::zero(&self.gpu, index.hist.addr(slot), index.hist.slot_bytes())?;
                }
            }
            let state = &mut self.sequence_mut(id).layers[layer];
            if let Some(new) = g.region {
                state.region = Some(new);
            }
            if let Some((slot, _)) = g.hist {
                state.hist = Some(slot);
            }
            state.segments.extend(
                g.segments
                    .into_iter()
                    .map(|row| row.into_iter().map(|(slot, _)| slot).collect()),
            );
        }
        Ok(())
    }

    fn sequence(&self, id: SequenceId) -> &Sequence {
        self.sequences.get(id).expect("ids are checked on entry")
    }

    fn sequence_mut(&mut self, id: SequenceId) -> &mut Sequence {
        self.sequences
            .get_mut(id)
            .expect("ids are checked on entry")
    }

    /// The tables of a batch as the host knows them, with `MAX_SEG` and the longest `n_total`.
    fn wanted_tables(&self, ids: &[SequenceId], layer: usize) -> (HostTables, usize, usize) {
        let heads = self.config.model.kv_heads;
        let states: Vec<&LayerState> = ids
            .iter()
            .map(|&id| &self.sequence(id).layers[layer])
            .collect();
        let max_seg = states
            .iter()
            .map(|s| s.segments.len())
            .max()
            .unwrap_or(0)
            .max(1);
        assert!(
            max_seg <= self.max_seg_cap,
            "more segments than the capacity allows"
        );
        let words_bytes = (self.layout.words_len() * 8) as u64;
        let mut t = HostTables::default();
        for state in &states {
            t.n_stored.push(state.n_stored as i32);
            t.n_total.push(state.n_total as i32);
            if self.index.is_some() {
                // An append indexes its one new token.
                t.index_start.push(state.n_total.saturating_sub(1) as i32);
                t.index_end.push(state.n_total as i32);
            }
            for h in 0..heads {
                for s in 0..max_seg {
                    let addr = state
                        .segments
                        .get(s)
                        .map_or(0, |row| self.segments.addr(row[h]));
                    t.seg_words.push(addr);
                    t.seg_scales
                        .push(if addr == 0 { 0 } else { addr + words_bytes });
                }
                let (k, v, means) = state
                    .region
                    .map_or((0, 0, 0), |region| self.row_addrs(region, h));
                t.k_rows.push(k);
                t.v_rows.push(v);
                t.landmarks.push(means);
                if let Some(index) = &self.index {
                    let (ids, codes, weights) = state
                        .region
                        .map_or((0, 0, 0), |region| self.index_addrs(region, h));
                    t.pk_ids.push(ids);
                    t.pk_codes.push(codes);
                    t.pk_weights.push(weights);
                    let hist = state.hist.map_or(0, |slot| {
                        index.hist.addr(slot) + (h * index.geometry.hist_bytes()) as u64
                    });
                    t.pk_hist.push(hist);
                }
            }
        }
        let max_tokens = states.iter().map(|s| s.n_total).max().unwrap_or(0);
        (t, max_seg, max_tokens)
    }

    /// Makes tables `index` hold `wanted` (queued copies of what changed).
    fn refresh(&self, index: usize, wanted: HostTables) -> Result<(), StoreError> {
        let mut shared = self.lock();
        let shared = &mut *shared;
        self.tables[index].refresh(
            &self.gpu,
            &mut shared.uploader,
            &mut shared.mirrors[index],
            wanted,
        )?;
        Ok(())
    }

    /// The encode kernel's arguments (bulk and append share them; `templates/ABI.md`).
    fn encode_args(
        &self,
        t: &Tables,
        layer: usize,
        max_seg: usize,
        heads: usize,
        status: Arg,
    ) -> [Arg; 9] {
        [
            t.k_rows.arg(),
            self.rotation_arg(layer),
            t.seg_words.arg(),
            t.seg_scales.arg(),
            Arg::I32(max_seg as i32),
            t.n_stored.arg(),
            t.n_total.arg(),
            Arg::I32(heads as i32),
            status,
        ]
    }

    fn rotation_arg(&self, layer: usize) -> Arg {
        self.rotations
            .get(layer)
            .map_or(Arg::Ptr(0), DeviceBuffer::arg)
    }

    /// The device tables of `layer` for the batch `ids`, in the layout of `templates/ABI.md`.
    ///
    /// The store keeps one set of tables per layer and rewrites only what changed since the last
    /// view or append of that layer (usually the lengths: a few bytes, copied asynchronously).
    /// The rewrite is queued on the stream, so kernels queued before the next `layer_view` or
    /// `append` of the same layer read this batch; launch a view's kernels before asking for
    /// another view of the same layer.
    pub fn layer_view(
        &self,
        ids: &[SequenceId],
        layer: usize,
    ) -> Result<LayerView<'_>, StoreError> {
        self.check_layer(layer)?;
        self.check_batch(ids)?;
        let (wanted, max_seg, max_tokens) = self.wanted_tables(ids, layer);
        self.refresh(layer, wanted)?;
        let t = &self.tables[layer];
        let m = &self.config.model;
        Ok(LayerView {
            layer,
            batch: ids.len(),
            kv_heads: m.kv_heads,
            head_dim: m.head_dim,
            placement: self.config.placement,
            max_seg,
            seg_words: &t.seg_words,
            seg_scales: &t.seg_scales,
            n_stored: &t.n_stored,
            n_total: &t.n_total,
            k_rows: &t.k_rows,
            v_rows: &t.v_rows,
            max_tokens,
            landmarks: self.config.keep_landmarks.then_some(&t.landmarks),
            pariskv: self.index.as_ref().map(|_| PariskvView {
                ids: &t.pk_ids,
                codes: &t.pk_codes,
                weights: &t.pk_weights,
                hist: &t.pk_hist,
            }),
        })
    }

    fn check_rows(
        &self,
        what: &'static str,
        buffer: &DeviceBuffer<u16>,
        expected: usize,
        shape: String,
    ) -> Result<(), StoreError> {
        if buffer.len() != expected {
            return Err(StoreError::Shape {
                what,
                got: buffer.len(),
                expected,
                shape,
            });
        }
        Ok(())
    }

    /// Ingests a prefill of `n` tokens into one layer of a sequence: `keys` and `values` are
    /// bf16 bits `[H][n][D]` on the device (raw basis). The rows are copied into the store's
    /// placement, every full block is encoded (one launch for all heads), the rest stays as
    /// tail. The sequence may already hold tokens: the prefill continues it.
    ///
    /// The store reads `keys` and `values` on the [`Gpu`]'s stream after this returns (unless
    /// it waited): work that overwrites them must be queued on that stream. Likewise for
    /// [`KeyStore::append`].
    ///
    /// This waits for the encode and checks its status: a non-finite key or a scale overflow is
    /// returned with its head and token, and the sequence is left as it was. With the ParisKV
    /// index every new token is indexed first (tail keys too): a non-finite key or a weight
    /// overflow is returned as [`StoreError::IndexNonFiniteKey`] or
    /// [`StoreError::IndexWeightOverflow`], nothing is encoded, and the histograms are restored.
    pub fn prefill(
        &mut self,
        id: SequenceId,
        layer: usize,
        keys: &DeviceBuffer<u16>,
        values: &DeviceBuffer<u16>,
    ) -> Result<(), StoreError> {
        self.check_layer(layer)?;
        let (heads, d) = (self.config.model.kv_heads, self.config.model.head_dim);
        let sequence = self.sequences.get(id)?;
        let row = heads * d;
        if !keys.len().is_multiple_of(row) {
            return Err(StoreError::Shape {
                what: "prefill keys",
                got: keys.len(),
                expected: keys.len() / row * row,
                shape: format!("[H = {heads}][n][D = {d}]"),
            });
        }
        let n = keys.len() / row;
        self.check_rows(
            "prefill values",
            values,
            keys.len(),
            format!("[H = {heads}][n = {n}][D = {d}], as the keys"),
        )?;
        let state = &sequence.layers[layer];
        let (old_stored, old_total, old_segments) =
            (state.n_stored, state.n_total, state.segments.len());
        let new_total = old_total + n;
        let before = sequence.tokens();
        let after = before.max(new_total);
        self.capacity.check(before, after)?;
        if n == 0 {
            return Ok(());
        }
        let growth = self.allocate(&[id], layer, &[new_total])?;
        self.commit(&[id], layer, growth)?;

        let region = self.sequence(id).layers[layer]
            .region
            .expect("allocated above");
        let (at, bytes) = ((old_total * d * 2) as u64, n * d * 2);
        for h in 0..heads {
            let (k, v, _) = self.row_addrs(region, h);
            let from = (h * bytes) as u64;
            device::copy(&self.gpu, k + at, keys.addr() + from, bytes)?;
            device::copy(&self.gpu, v + at, values.addr() + from, bytes)?;
        }
        self.sequence_mut(id).layers[layer].n_total = new_total;
        self.capacity.commit(before, after);

        let new_stored = old_stored + self.geometry.newly_stored(old_stored, new_total);
        let hist = self.save_hist(id, layer)?;
        // The index first: a key it refuses is then never encoded into the segments.
        let mut result = self.index_prefill(id, layer, old_total, new_total);
        if result.is_ok() && new_stored > old_stored {
            result = self.encode_prefill(id, layer, old_stored, new_total, new_stored);
        }
        if let Err(e) = result {
            // Leave the sequence as it was: the rows past `old_total` and the segments added
            // here are not part of it any more, and the histograms lose what this prefill
            // added to them.
            let state = &mut self.sequence_mut(id).layers[layer];
            state.n_total = old_total;
            let added: Vec<Slot> = state.segments.drain(old_segments..).flatten().collect();
            for slot in added {
                self.segments.free(slot);
            }
            self.capacity.commit(after, before);
            if let (Some(hist), Some(index)) = (hist, &self.index) {
                device::copy(&self.gpu, hist, index.backup.addr(), index.backup.bytes())?;
            }
            return Err(e);
        }
        self.sequence_mut(id).layers[layer].n_stored = new_stored;
        Ok(())
    }

    /// Queues a copy of the layer's ParisKV histograms into the backup and returns their
    /// address (`None` without the index).
    fn save_hist(&self, id: SequenceId, layer: usize) -> Result<Option<u64>, StoreError> {
        let (Some(index), Some(slot)) = (&self.index, self.sequence(id).layers[layer].hist) else {
            return Ok(None);
        };
        let addr = index.hist.addr(slot);
        device::copy(&self.gpu, index.backup.addr(), addr, index.backup.bytes())?;
        Ok(Some(addr))
    }

    /// The ParisKV index build of a prefill (tokens `old_total .. new_total`) and its status,
    /// waited for.
    fn index_prefill(
        &self,
        id: SequenceId,
        layer: usize,
        old_total: usize,
        new_total: usize,
    ) -> Result<(), StoreError> {
        let Some(index) = &self.index else {
            return Ok(());
        };
        let prefill = self.config.model.layers;
        let (mut wanted, _, _) = self.wanted_tables(&[id], layer);
        wanted.index_start = vec![old_total as i32];
        wanted.index_end = vec![new_total as i32];
        self.refresh(prefill, wanted)?;
        let t = &self.tables[prefill];
        device::zero(&self.gpu, index.status.addr(), index.status.bytes())?;
        self.launch_index(
            index,
            t,
            1,
            (new_total - old_total) as u64,
            index.status.addr(),
        )?;
        let status: Vec<i32> =
            device::read_back(&self.gpu, index.status.addr(), pariskv::STATUS_WORDS)?;
        match index_status_error(&status, layer, &[id]) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Queues the index build of the ranges in `t`'s `index_start`/`index_end`.
    fn launch_index(
        &self,
        index: &IndexState,
        t: &Tables,
        batch: usize,
        max_tokens: u64,
        status: u64,
    ) -> Result<(), StoreError> {
        let heads = self.config.model.kv_heads;
        let launch = index
            .spec
            .launch(batch as u64, heads as u64, max_tokens)
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        let tables = IndexTables {
            ids: t.pk_ids.addr(),
            codes: t.pk_codes.addr(),
            weights: t.pk_weights.addr(),
            hist: t.pk_hist.addr(),
        };
        let args = build_args(
            t.k_rows.addr(),
            index.signs.addr(),
            tables,
            t.index_start.addr(),
            t.index_end.addr(),
            heads,
            status,
        );
        let dims = |d: [u32; 3]| (d[0], d[1], d[2]);
        self.gpu.launch(
            &index.function,
            dims(launch.grid),
            dims(launch.block),
            launch.shared_bytes,
            &args,
        )?;
        Ok(())
    }

    /// The bulk encode of a prefill (tokens `old_stored .. new_stored`), its landmarks, and its
    /// status, waited for.
    fn encode_prefill(
        &self,
        id: SequenceId,
        layer: usize,
        old_stored: usize,
        new_total: usize,
        new_stored: usize,
    ) -> Result<(), StoreError> {
        let heads = self.config.model.kv_heads;
        let index = self.config.model.layers;
        let (mut wanted, max_seg, _) = self.wanted_tables(&[id], layer);
        // The prefill tables' length arrays carry the bulk range: first token, token count.
        wanted.n_stored = vec![old_stored as i32];
        wanted.n_total = vec![(new_total - old_stored) as i32];
        self.refresh(index, wanted.clone())?;
        let t = &self.tables[index];
        device::zero(
            &self.gpu,
            self.prefill_status.addr(),
            self.prefill_status.bytes(),
        )?;
        let (grid, block, shared) = self
            .encode_bulk
            .launch_dims(1, heads, new_total - old_stored);
        self.gpu.launch(
            &self.functions.encode_bulk,
            grid,
            block,
            shared,
            &self.encode_args(t, layer, max_seg, heads, self.prefill_status.arg()),
        )?;
        if let Some(build) = &self.functions.landmark_build {
            // Means of the groups entering the store: range (old_stored, new_stored).
            wanted.n_total = vec![new_stored as i32];
            self.refresh(index, wanted)?;
            self.launch_landmarks(build, t, 1, (new_stored - old_stored) as u64)?;
        }
        let status: Vec<i32> =
            device::read_back(&self.gpu, self.prefill_status.addr(), STATUS_WORDS)?;
        match status_error(&status, layer, &[id]) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn launch_landmarks(
        &self,
        build: &CudaFunction,
        t: &Tables,
        batch: usize,
        max_tokens: u64,
    ) -> Result<(), StoreError> {
        let heads = self.config.model.kv_heads;
        let launch = self
            .landmark
            .launch_build(batch as u64, heads as u64, max_tokens)
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        let dims = |d: [u32; 3]| (d[0], d[1], d[2]);
        self.gpu.launch(
            build,
            dims(launch.grid),
            dims(launch.block),
            launch.shared_bytes,
            &[
                t.k_rows.arg(),
                t.landmarks.arg(),
                t.n_stored.arg(),
                t.n_total.arg(),
                Arg::I32(heads as i32),
            ],
        )?;
        Ok(())
    }

    /// Appends one token to one layer of every sequence of `ids`: `keys` and `values` are bf16
    /// bits `[B][H][D]` on the device. The rows are written, and every sequence whose tail
    /// reaches a full block has it encoded (one launch for the batch, append mode). Segments and
    /// row regions grow from the pools as needed; capacity, ids and shapes are checked before
    /// anything is written.
    ///
    /// Keys are validated when their block is encoded (tail keys are not yet). Nothing here
    /// waits for the device: a non-finite key or a scale overflow in an encoded
    /// block is reported by the next [`KeyStore::check`]. (After 4096 encode launches without a
    /// check, an append checks first, and returns a failure it finds there before appending.)
    ///
    /// With the ParisKV index, every appended token is indexed (before any encode), and a
    /// non-finite key or a weight overflow is reported by the next check as well; the log then
    /// holds 65,536 launches (an append logs one or two).
    pub fn append(
        &mut self,
        ids: &[SequenceId],
        layer: usize,
        keys: &DeviceBuffer<u16>,
        values: &DeviceBuffer<u16>,
    ) -> Result<(), StoreError> {
        self.check_layer(layer)?;
        self.check_batch(ids)?;
        let (heads, d) = (self.config.model.kv_heads, self.config.model.head_dim);
        let batch = ids.len();
        let shape = format!("[B = {batch}][H = {heads}][D = {d}]");
        self.check_rows("append keys", keys, batch * heads * d, shape.clone())?;
        self.check_rows("append values", values, batch * heads * d, shape)?;
        let (mut before, mut after) = (0, 0);
        let mut new_total = Vec::with_capacity(batch);
        for &id in ids {
            let sequence = self.sequence(id);
            let n = sequence.layers[layer].n_total + 1;
            before += sequence.tokens();
            after += sequence.tokens().max(n);
            new_total.push(n);
        }
        self.capacity.check(before, after)?;
        // An append logs up to two launches: the index build and the encode.
        if self.lock().log.len() + 2 > self.log_slots {
            self.check()?;
        }
        let growth = self.allocate(ids, layer, &new_total)?;
        self.commit(ids, layer, growth)?;
        let blk = self.config.block;
        let mut filled = false;
        for (&id, &n) in ids.iter().zip(&new_total) {
            let state = &mut self.sequence_mut(id).layers[layer];
            state.n_total = n;
            filled |= n - state.n_stored >= blk;
        }
        self.capacity.commit(before, after);

        let (wanted, max_seg, _) = self.wanted_tables(ids, layer);
        self.refresh(layer, wanted)?;
        let t = &self.tables[layer];
        self.gpu.launch(
            &self.functions.append_rows,
            ((batch * heads) as u32, 1, 1),
            (128, 1, 1),
            0,
            &[
                t.k_rows.arg(),
                t.v_rows.arg(),
                t.n_total.arg(),
                keys.arg(),
                values.arg(),
                Arg::I32(heads as i32),
                Arg::I32(d as i32),
            ],
        )?;
        if let Some(index) = &self.index {
            // The new token of every sequence (`index_start = n_total - 1`).
            let status = self.log_status(layer, ids, true);
            self.launch_index(index, t, batch, 1, status)?;
        }
        if !filled {
            return Ok(());
        }
        let status = self.log_status(layer, ids, false);
        let (grid, block, shared) = self.encode_append.launch_dims(batch, heads, 0);
        self.gpu.launch(
            &self.functions.encode_append,
            grid,
            block,
            shared,
            &self.encode_args(t, layer, max_seg, heads, Arg::Ptr(status)),
        )?;
        if let Some(build) = &self.functions.landmark_build {
            // Groups in (n_stored, n_total): the new block's, and for the other sequences some
            // of their tail's (final keys, so their means are already right).
            self.launch_landmarks(build, t, batch, blk as u64)?;
        }
        for &id in ids {
            let state = &mut self.sequence_mut(id).layers[layer];
            if state.n_total - state.n_stored >= blk {
                state.n_stored += blk;
            }
        }
        let (wanted, _, _) = self.wanted_tables(ids, layer);
        self.refresh(layer, wanted)
    }

    /// Records a launch of `ids` at `layer` in the status log and returns its status words'
    /// address.
    fn log_status(&self, layer: usize, ids: &[SequenceId], index: bool) -> u64 {
        let slot = {
            let mut shared = self.lock();
            shared.log.push(LaunchRecord {
                layer,
                ids: ids.to_vec(),
                index,
            });
            shared.log.len() - 1
        };
        self.status_log.addr() + (slot * STATUS_WORDS * 4) as u64
    }

    /// Reads the status of every append encode (and ParisKV index build) since the last check
    /// (a host synchronisation) and returns the first failure: a non-finite key (sequence,
    /// layer, KV head, token, raw channel) or a scale overflow (the block's first token, store
    /// channel); with the index, also a non-finite tail key or a weight overflow (sequence,
    /// layer, KV head, token). The block or token that failed was not written; free its
    /// sequence.
    pub fn check(&self) -> Result<(), StoreError> {
        let mut shared = self.lock();
        if shared.log.is_empty() {
            return Ok(());
        }
        let words = shared.log.len() * STATUS_WORDS;
        let status: Vec<i32> = device::read_back(&self.gpu, self.status_log.addr(), words)?;
        let failure = shared
            .log
            .iter()
            .zip(status.chunks_exact(STATUS_WORDS))
            .find_map(|(record, status)| {
                if record.index {
                    index_status_error(status, record.layer, &record.ids)
                } else {
                    status_error(status, record.layer, &record.ids)
                }
            });
        device::zero(&self.gpu, self.status_log.addr(), words * 4)?;
        shared.log.clear();
        failure.map_or(Ok(()), Err)
    }
}

/// The failure an encode status word `{kind, b, h, token, channel}` reports, if any.
fn status_error(status: &[i32], layer: usize, ids: &[SequenceId]) -> Option<StoreError> {
    let [kind, b, head, token, channel] = [0, 1, 2, 3, 4].map(|i| status[i]);
    if kind == 0 {
        return None;
    }
    let Some(&sequence) = usize::try_from(b).ok().and_then(|b| ids.get(b)) else {
        return Some(StoreError::Internal(format!(
            "encode status {status:?} names batch entry {b} of a batch of {}",
            ids.len()
        )));
    };
    let (head, token, channel) = (head as usize, token as usize, channel as usize);
    Some(match kind {
        1 => StoreError::NonFiniteKey {
            sequence,
            layer,
            head,
            token,
            channel,
        },
        2 => StoreError::ScaleOverflow {
            sequence,
            layer,
            head,
            token,
            channel,
        },
        3 => StoreError::Internal(format!(
            "encode of {sequence}, layer {layer}, head {head}, token {token} found no segment"
        )),
        _ => StoreError::Internal(format!(
            "encode of {sequence}, layer {layer}, head {head} got a range starting at token \
             {token}, not on a block boundary (status kind {kind})"
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_words_name_the_sequence_of_their_batch() {
        let mut reg = Registry::default();
        let a = reg.insert(());
        let b = reg.insert(());
        assert!(status_error(&[0, 0, 0, 0, 0], 3, &[a, b]).is_none());
        match status_error(&[1, 1, 2, 70, 5], 3, &[a, b]) {
            Some(StoreError::NonFiniteKey {
                sequence,
                layer: 3,
                head: 2,
                token: 70,
                channel: 5,
            }) => assert_eq!(sequence, b),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            status_error(&[2, 0, 1, 64, 9], 0, &[a]),
            Some(StoreError::ScaleOverflow {
                token: 64,
                channel: 9,
                ..
            })
        ));
        assert!(matches!(
            status_error(&[1, 5, 0, 0, 0], 0, &[a]),
            Some(StoreError::Internal(_))
        ));
    }

    fn shape(basis: Basis) -> ModelShape {
        ModelShape {
            name: "test".into(),
            layers: 2,
            query_heads: 8,
            kv_heads: 2,
            head_dim: 64,
            qk_norm: basis == Basis::Raw,
            basis,
        }
    }

    #[test]
    fn configs_are_checked_with_reasons() {
        let ok = StoreConfig::new(shape(Basis::Raw), Placement::Hbm, 1000);
        assert!(ok.validate().is_ok());
        let reason = |c: StoreConfig| match c.validate() {
            Err(StoreError::Config { reason }) => reason,
            other => panic!("{other:?}"),
        };
        assert!(reason(StoreConfig {
            block: 48,
            ..ok.clone()
        })
        .contains("32, 64 or 128"));
        assert!(reason(StoreConfig {
            segment_words: 3,
            ..ok.clone()
        })
        .contains("odd"));
        assert!(reason(StoreConfig {
            capacity_tokens: 0,
            ..ok.clone()
        })
        .contains("capacity_tokens"));
        assert!(reason(StoreConfig {
            max_batch: 0,
            ..ok.clone()
        })
        .contains("max_batch"));
        assert!(reason(StoreConfig {
            rotations: Some(vec![0.0; 2 * 2 * 64 * 64]),
            ..ok.clone()
        })
        .contains("raw channels"));
        let klt = StoreConfig::new(shape(Basis::Klt), Placement::Host, 1000);
        assert!(reason(klt.clone()).contains("needs its rotations"));
        assert!(reason(StoreConfig {
            rotations: Some(vec![0.0; 5]),
            ..klt.clone()
        })
        .contains("expected 16384"));
        let mut nan = vec![0.0; 2 * 2 * 64 * 64];
        nan[7] = f32::NAN;
        assert!(reason(StoreConfig {
            rotations: Some(nan),
            ..klt.clone()
        })
        .contains("value 7"));
        assert!(StoreConfig {
            rotations: Some(vec![0.0; 2 * 2 * 64 * 64]),
            ..klt
        }
        .validate()
        .is_ok());
        // Every head dimension a model may have (64, 128, 256) can keep the ParisKV index; the
        // rule itself is `IndexGeometry::new`'s (tested in `pariskv`).
        assert!(StoreConfig {
            pariskv_index: true,
            ..ok.clone()
        }
        .validate()
        .is_ok());
    }
}
