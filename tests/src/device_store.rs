//! The reference store copied onto the device (or into mapped host memory) in the layout of
//! `templates/ABI.md`: per-segment buffers and the segment tables that point at them.

use codegen::spec::Placement;
use rand::Rng;
use reference::store::{HeadStore, StoreLayout};
use runtime::gpu::{DeviceBuffer, Gpu, GpuError, MappedBuffer};

use crate::inputs;
use crate::store_kernels::TableShape;

/// Segments per `(b, h)` for a batch of `lengths`: every one the longest reaches into, and one
/// more that stays empty, so that a kernel reading past the last segment shows.
pub fn max_seg(layout: StoreLayout, lengths: &[usize]) -> usize {
    let longest = lengths.iter().copied().max().unwrap_or(0);
    longest.div_ceil(layout.segment_tokens()) + 1
}

/// Reference stores of random keys ([`inputs::head_stores`]) for `heads` KV heads of every
/// sequence of `lengths`, laid out in `placement` with [`max_seg`] segments per head, and the
/// shape of their tables.
pub fn random_device_stores(
    gpu: &Gpu,
    rng: &mut impl Rng,
    layout: StoreLayout,
    placement: Placement,
    lengths: &[usize],
    heads: usize,
) -> (Vec<Vec<HeadStore>>, DeviceStore, TableShape) {
    let stores = inputs::head_stores(rng, layout, lengths, heads);
    let max_seg = max_seg(layout, lengths);
    let store = DeviceStore::new(gpu, placement, &stores, max_seg)
        .unwrap_or_else(|e| panic!("stores in {placement:?}: {e}"));
    let shape = TableShape {
        batch: lengths.len(),
        heads,
        max_seg,
        layout,
    };
    (stores, store, shape)
}

/// A segment's memory, on the device or mapped from the host.
enum Memory<T> {
    Device(DeviceBuffer<T>),
    Mapped(MappedBuffer<T>),
}

impl<T: Copy> Memory<T> {
    fn new(gpu: &Gpu, placement: Placement, data: &[T]) -> Result<Self, GpuError> {
        Ok(match placement {
            Placement::Hbm => Memory::Device(gpu.upload(data)?),
            Placement::Host => {
                let mut mapped = gpu.mapped::<T>(data.len(), 0)?;
                mapped.as_mut_slice().copy_from_slice(data);
                Memory::Mapped(mapped)
            }
        })
    }

    fn addr(&self) -> u64 {
        match self {
            Memory::Device(b) => b.addr(),
            Memory::Mapped(b) => b.addr(),
        }
    }
}

/// Stores of `B` sequences × `H` KV heads of one layer on the device.
pub struct DeviceStore {
    _words: Vec<Memory<u64>>,
    _scales: Vec<Memory<u16>>,
    /// `[(b*H + h)*max_seg + s]` addresses of each segment's words.
    pub seg_words: DeviceBuffer<u64>,
    /// The same for scales.
    pub seg_scales: DeviceBuffer<u64>,
    /// Stored tokens per sequence.
    pub n_stored: DeviceBuffer<i32>,
    pub max_seg: usize,
}

impl DeviceStore {
    /// `stores[b][h]`; every head of a sequence holds the same number of tokens.
    pub fn new(
        gpu: &Gpu,
        placement: Placement,
        stores: &[Vec<HeadStore>],
        max_seg: usize,
    ) -> Result<Self, GpuError> {
        let heads = stores.first().map_or(0, |s| s.len());
        let mut words = Vec::new();
        let mut scales = Vec::new();
        let mut word_table = vec![0u64; stores.len() * heads * max_seg];
        let mut scale_table = vec![0u64; stores.len() * heads * max_seg];
        for (b, sequence) in stores.iter().enumerate() {
            for (h, store) in sequence.iter().enumerate() {
                assert!(store.segments().len() <= max_seg, "max_seg too small");
                for (s, segment) in store.segments().iter().enumerate() {
                    let w = Memory::new(gpu, placement, &segment.words)?;
                    let sc = Memory::new(gpu, placement, &segment.scales)?;
                    word_table[(b * heads + h) * max_seg + s] = w.addr();
                    scale_table[(b * heads + h) * max_seg + s] = sc.addr();
                    words.push(w);
                    scales.push(sc);
                }
            }
        }
        let n_stored: Vec<i32> = stores
            .iter()
            .map(|s| s.first().map_or(0, |h| h.stored_tokens() as i32))
            .collect();
        Ok(DeviceStore {
            _words: words,
            _scales: scales,
            seg_words: gpu.upload(&word_table)?,
            seg_scales: gpu.upload(&scale_table)?,
            n_stored: gpu.upload(&n_stored)?,
            max_seg,
        })
    }
}
