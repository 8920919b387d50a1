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
//! H][cap/8][D]` (with [`KvRows::Adjacent`], `[KV: H][cap][2][D] | [means: H][cap/8][D]`, the
//! same bytes) of a power-of-two number of 256-token chunks, from a size-class
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

mod append;
mod checks;
mod config;
pub mod device;
mod error;
pub mod footprint;
mod foreign;
pub mod host_memory;
mod launches;
pub mod ledger;
pub mod pariskv;
pub mod pool;
mod prefill;
mod regions;
pub mod tables;
#[cfg(test)]
mod tests;
mod views;

use std::sync::{Arc, Mutex, MutexGuard};

use codegen::model::{Basis, ModelShape};
use codegen::spec::{
    AppendRowsSpec, EncodeMode, EncodeSpec, Family, KernelSpec, LandmarkSpec, Placement,
};
use cudarc::driver::CudaFunction;

pub use codegen::spec::KvRows;
pub use config::StoreConfig;
pub use error::StoreError;
pub use footprint::StoreFootprint;
pub use host_memory::HostMemory;
pub use ledger::SequenceId;
pub use pariskv::IndexGeometry;

use crate::abi;
use crate::gpu::{Arg, DeviceBuffer, Gpu};
use crate::jit::{Jit, KernelSource};
use crate::launch::{DevicePtr, DevicePtrMut, KernelArgs};
use crate::pariskv::{build_args, IndexTables};
use crate::view::{LayerView, PariskvView};
use codegen::spec::layout::{BlockSize, StoreLayout};
use device::{Memory, Uploader};
use ledger::{Capacity, Geometry, Registry};
use pariskv::{index_status_error, IndexState};
use pool::{Region, RegionPool, Slot, SlotPool};
use tables::{HostTables, Tables};

/// The row-append kernel of a decode step (the 128 threads it has always had), for rows laid
/// out as `kv_rows` says.
fn append_rows_spec(kv_rows: KvRows) -> AppendRowsSpec {
    AppendRowsSpec {
        threads: 128,
        kv_rows,
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
    append_rows: AppendRowsSpec,
    functions: Functions,
    fixed_device_bytes: usize,
    /// The host memory mode in effect (`config.host_memory`, or `Pinned` after a fallback).
    host_memory: HostMemory,
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
            kv_rows: config.kv_rows,
            ..EncodeSpec::new(d, mode, rotate)
        };
        let (encode_bulk, encode_append) = (encode(EncodeMode::Bulk), encode(EncodeMode::Append));
        let landmark = LandmarkSpec {
            head_dim: d as u32,
            group: m.group_size() as u32,
            threads: THREADS,
            placement: config.placement,
            kv_rows: config.kv_rows,
        };
        let append_rows = append_rows_spec(config.kv_rows);
        for spec in [
            KernelSpec::from(encode_bulk),
            encode_append.into(),
            landmark.into(),
            append_rows.into(),
        ] {
            spec.validate().map_err(|e| StoreError::Config {
                reason: e.to_string(),
            })?;
        }
        let load = |spec: KernelSpec, entry: String| kernels.function(&spec, &entry);
        let functions = Functions {
            encode_bulk: load(encode_bulk.into(), encode_bulk.kernel_name())?,
            encode_append: load(encode_append.into(), encode_append.kernel_name())?,
            landmark_build: if config.keep_landmarks {
                Some(load(landmark.into(), landmark.build_entry())?)
            } else {
                None
            },
            append_rows: load(append_rows.into(), append_rows.kernel_name())?,
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
                config.kv_rows,
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

        let host_memory = match host_memory::HostBuffer::probe(&gpu, config.host_memory) {
            Ok(()) => config.host_memory,
            // Out of pinned memory (or past its cap) is not a missing mode.
            Err(e @ crate::gpu::GpuError::OutOfMemory { .. }) => return Err(e.into()),
            Err(e) => {
                let reason = e.to_string();
                host_memory::fall_back(config.host_memory, reason, config.require_host_memory)
                    .map_err(|reason| StoreError::HostMemory {
                        mode: config.host_memory,
                        reason,
                    })?
            }
        };
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
            append_rows,
            functions,
            fixed_device_bytes,
            host_memory,
            config,
            gpu,
        })
    }

    /// The configuration the store was built with.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// How host memory is allocated: `config().host_memory`, or [`HostMemory::Pinned`] when
    /// that was not available and not required.
    pub fn host_memory(&self) -> HostMemory {
        self.host_memory
    }

    /// The GPU the store lives on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The segment layout (`D`, `BLK`, `S`).
    pub fn layout(&self) -> &StoreLayout {
        &self.layout
    }

    /// How the K/V rows are laid out (`config().kv_rows`).
    pub fn kv_rows(&self) -> KvRows {
        self.config.kv_rows
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

    fn sequence(&self, id: SequenceId) -> &Sequence {
        self.sequences.get(id).expect("ids are checked on entry")
    }

    fn sequence_mut(&mut self, id: SequenceId) -> &mut Sequence {
        self.sequences
            .get_mut(id)
            .expect("ids are checked on entry")
    }
}
