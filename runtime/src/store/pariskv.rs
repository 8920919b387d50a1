//! The ParisKV index of the key store (SPEC §12, `templates/ABI.md` "ParisKV"), kept when
//! [`super::StoreConfig::pariskv_index`] is set.
//!
//! Per (sequence, layer, KV head): centroid ids `[cap][NS]`, packed direction codes
//! `[cap][D/2]` and bf16 weights `[cap][NS]` live in the sequence's row region, after the K/V
//! rows (and the landmark means), so they are in the store's placement and grow with the rows;
//! the histograms `[NS][256]` u32 of the layer's heads are one slot of a device-memory pool
//! (the index kernel adds to them with atomics, which mapped host memory does not offer).
//!
//! Every token is indexed as it enters: a prefill indexes `[old_total, new_total)` and waits for
//! the status; an append indexes its one token per sequence, and the next
//! [`super::KeyStore::check`] reports a bad key. A bad key writes nothing (its rows stay unset,
//! its ids are not counted), and a failed prefill restores the histograms it had added to, so
//! the index is left as it was.

use codegen::spec::pariskv::{padded_dim, subspaces, supports_head_dim, CENTROIDS};
use codegen::spec::{Family, KvRows, PariskvIndexSpec, Placement};
use cudarc::driver::CudaFunction;

use super::device::Memory;
use super::error::StoreError;
use super::ledger::SequenceId;
use super::pool::SlotPool;
use crate::gpu::{DeviceBuffer, Gpu};
use crate::jit::KernelSource;
use crate::pariskv::{device_signs, THREADS};

/// Words of the index kernel's status: `{kind, b, h, token}`.
pub const STATUS_WORDS: usize = 4;
/// Histogram slots per slab of the pool.
const HIST_SLOTS_PER_SLAB: usize = 64;

/// Bytes of one (layer, KV head)'s index at head dimension `d`: per token and in all for the
/// histograms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexGeometry {
    /// `D`.
    pub head_dim: usize,
    /// `NS = D_pad/8`.
    pub subspaces: usize,
}

impl IndexGeometry {
    /// The geometry of `head_dim`, or why the index cannot be kept for it.
    pub fn new(head_dim: usize) -> Result<Self, StoreError> {
        if !supports_head_dim(head_dim) {
            return Err(StoreError::Config {
                reason: format!(
                    "pariskv_index needs a head dimension of 64, 80, 96, 128, 192 or 256 (zero-padded \
                     to a power of two for the Hadamard transform, then split into subspaces of \
                     8 coordinates); this model's is {head_dim}"
                ),
            });
        }
        Ok(IndexGeometry {
            head_dim,
            subspaces: subspaces(head_dim as u32) as usize,
        })
    }

    /// Bytes of one token's ids.
    pub fn id_bytes(&self) -> usize {
        self.subspaces
    }

    /// Bytes of one token's codes: a nibble per coordinate of the padded transform.
    pub fn code_bytes(&self) -> usize {
        padded_dim(self.head_dim as u32) as usize / 2
    }

    /// Bytes of one token's weights.
    pub fn weight_bytes(&self) -> usize {
        2 * self.subspaces
    }

    /// Index bytes per token per KV head in the placement (112 at D = 128, and at 80 and 96).
    pub fn bytes_per_token(&self) -> usize {
        self.id_bytes() + self.code_bytes() + self.weight_bytes()
    }

    /// Bytes of one KV head's histograms.
    pub fn hist_bytes(&self) -> usize {
        self.subspaces * CENTROIDS as usize * 4
    }

    /// Offsets from the start of the index part of a row region of `tokens` tokens per head and
    /// `heads` heads: head `h`'s ids, codes and weights.
    pub fn offsets(&self, tokens: usize, heads: usize, h: usize) -> (usize, usize, usize) {
        let ids = h * tokens * self.id_bytes();
        let codes = heads * tokens * self.id_bytes() + h * tokens * self.code_bytes();
        let weights = heads * tokens * (self.id_bytes() + self.code_bytes())
            + h * tokens * self.weight_bytes();
        (ids, codes, weights)
    }
}

/// What the store keeps to build the index.
pub(super) struct IndexState {
    pub geometry: IndexGeometry,
    pub spec: PariskvIndexSpec,
    pub function: CudaFunction,
    /// The sign vector `s`.
    pub signs: DeviceBuffer<f32>,
    /// Histogram slots, one per (sequence, layer): `[H][NS][256]` u32, device memory.
    pub hist: SlotPool<Memory>,
    /// A copy of one (sequence, layer)'s histograms, taken before a prefill adds to them.
    pub backup: DeviceBuffer<u8>,
    /// The prefill's status words.
    pub status: DeviceBuffer<i32>,
}

impl IndexState {
    /// Loads the index kernel for `placement` and key rows laid out as `kv_rows` says, and
    /// allocates the fixed buffers.
    pub fn new(
        gpu: &Gpu,
        kernels: &dyn KernelSource,
        geometry: IndexGeometry,
        heads: usize,
        placement: Placement,
        kv_rows: KvRows,
    ) -> Result<IndexState, StoreError> {
        let spec = PariskvIndexSpec {
            head_dim: geometry.head_dim as u32,
            threads: THREADS,
            placement,
            kv_rows,
        };
        spec.validate().map_err(|e| StoreError::Config {
            reason: e.to_string(),
        })?;
        let function = kernels.function(&spec.into(), &spec.kernel_name())?;
        let slot_bytes = heads * geometry.hist_bytes();
        Ok(IndexState {
            geometry,
            spec,
            function,
            signs: device_signs(gpu, geometry.head_dim)?,
            hist: SlotPool::new(slot_bytes, HIST_SLOTS_PER_SLAB),
            backup: gpu.filled(slot_bytes, 0)?,
            status: gpu.filled(STATUS_WORDS, 0)?,
        })
    }

    /// Device bytes of the fixed buffers (the pool counts apart).
    pub fn fixed_bytes(&self) -> usize {
        self.signs.bytes() + self.backup.bytes() + self.status.bytes()
    }

    /// A histogram slot's memory: always device memory.
    pub fn grow(gpu: &Gpu, bytes: usize) -> Result<Memory, crate::gpu::GpuError> {
        Memory::zeroed(gpu, Placement::Hbm, super::HostMemory::Pinned, bytes)
    }
}

/// The failure an index status `{kind, b, h, token}` reports, if any.
pub(super) fn index_status_error(
    status: &[i32],
    layer: usize,
    ids: &[SequenceId],
) -> Option<StoreError> {
    let [kind, b, head, token] = [0, 1, 2, 3].map(|i| status[i]);
    if kind == 0 {
        return None;
    }
    let Some(&sequence) = usize::try_from(b).ok().and_then(|b| ids.get(b)) else {
        return Some(StoreError::Internal(format!(
            "ParisKV index status {status:?} names batch entry {b} of a batch of {}",
            ids.len()
        )));
    };
    let (head, token) = (head as usize, token as usize);
    Some(match kind {
        1 => StoreError::IndexNonFiniteKey {
            sequence,
            layer,
            head,
            token,
        },
        2 => StoreError::IndexWeightOverflow {
            sequence,
            layer,
            head,
            token,
        },
        _ => StoreError::Internal(format!(
            "ParisKV index of {sequence}, layer {layer}, head {head}, token {token} reported \
             status kind {kind}"
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ledger::Registry;

    #[test]
    fn geometry_at_every_head_dim() {
        let g = IndexGeometry::new(128).unwrap();
        assert_eq!(g.bytes_per_token(), 112);
        assert_eq!(g.hist_bytes(), 16 * 256 * 4);
        assert_eq!(IndexGeometry::new(64).unwrap().bytes_per_token(), 56);
        assert_eq!(IndexGeometry::new(256).unwrap().bytes_per_token(), 224);
        // Padded to 128 and 256: the ids, codes and weights of the padded transform.
        assert_eq!(IndexGeometry::new(80).unwrap().bytes_per_token(), 112);
        assert_eq!(IndexGeometry::new(96).unwrap().bytes_per_token(), 112);
        assert_eq!(IndexGeometry::new(192).unwrap().bytes_per_token(), 224);
        assert_eq!(IndexGeometry::new(96).unwrap().hist_bytes(), 16 * 256 * 4);
        for d in [8, 100, 120, 512] {
            match IndexGeometry::new(d) {
                Err(StoreError::Config { reason }) => assert!(
                    reason.contains("64, 80, 96, 128, 192 or 256")
                        && reason.contains(&d.to_string())
                ),
                other => panic!("{d}: {other:?}"),
            }
        }
    }

    /// The three tables of every head tile the index part without overlap, ids first.
    #[test]
    fn offsets_tile_the_region() {
        let g = IndexGeometry::new(64).unwrap();
        let (tokens, heads) = (256, 3);
        let mut spans = Vec::new();
        for h in 0..heads {
            let (ids, codes, weights) = g.offsets(tokens, heads, h);
            spans.push((ids, tokens * g.id_bytes()));
            spans.push((codes, tokens * g.code_bytes()));
            spans.push((weights, tokens * g.weight_bytes()));
            // The kernels load codes 4 bytes and ids 8 bytes at a time.
            assert_eq!(codes % 4, 0);
            assert_eq!(ids % 8, 0);
            assert_eq!(weights % 2, 0);
        }
        spans.sort_unstable();
        let mut end = 0;
        for (start, len) in spans {
            assert_eq!(start, end, "a gap or an overlap");
            end = start + len;
        }
        assert_eq!(end, heads * tokens * g.bytes_per_token());
    }

    /// The whole-row rerank (`PariskvRerankSpec::vector_loads`) reads code and weight rows in
    /// 16-byte loads: at every head dimension and every size class (`ROW_CHUNK << class`
    /// tokens) each head's tables start 16-byte aligned within a region whose K/V rows and
    /// means are multiples of 16 bytes, and the regions themselves are whole allocations
    /// (`cuMemAlloc`, or a page-aligned host allocation of any `HostMemory` kind).
    #[test]
    fn code_and_weight_tables_are_16_byte_aligned() {
        use codegen::spec::pariskv::VECTOR_ALIGN;
        let align = VECTOR_ALIGN as usize;
        for d in codegen::spec::pariskv::head_dims() {
            let g = IndexGeometry::new(d).unwrap();
            assert_eq!(g.code_bytes() % align, 0, "D = {d}");
            assert_eq!(g.weight_bytes() % align, 0, "D = {d}");
            for class in 0..12 {
                let tokens = super::super::ROW_CHUNK << class;
                // K and V rows (bf16) and the landmark means (an eighth of them).
                assert_eq!((tokens * d * 2 / 8) % align, 0);
                for heads in [1, 2, 7, 8] {
                    for h in 0..heads {
                        let (_, codes, weights) = g.offsets(tokens, heads, h);
                        assert_eq!(codes % align, 0, "D {d} class {class} head {h}/{heads}");
                        assert_eq!(weights % align, 0, "D {d} class {class} head {h}/{heads}");
                    }
                }
            }
        }
    }

    #[test]
    fn index_status_names_the_sequence() {
        let mut reg = Registry::default();
        let a = reg.insert(());
        let b = reg.insert(());
        assert!(index_status_error(&[0, 0, 0, 0], 1, &[a, b]).is_none());
        match index_status_error(&[1, 1, 3, 77], 2, &[a, b]) {
            Some(StoreError::IndexNonFiniteKey {
                sequence,
                layer: 2,
                head: 3,
                token: 77,
            }) => assert_eq!(sequence, b),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            index_status_error(&[2, 0, 0, 5], 0, &[a]),
            Some(StoreError::IndexWeightOverflow { token: 5, .. })
        ));
        assert!(matches!(
            index_status_error(&[1, 4, 0, 0], 0, &[a]),
            Some(StoreError::Internal(_))
        ));
    }
}
