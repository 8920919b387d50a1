//! The kernels the store queues: the encode's arguments, the ParisKV index build and the
//! landmark means.

use super::*;

impl KeyStore {
    /// The encode kernel's arguments (bulk and append share them; `templates/ABI.md`): the
    /// ranges are `n_stored .. n_total` of the tables; `status` is the store's own status word.
    pub(super) fn encode_args(
        &self,
        t: &Tables,
        layer: usize,
        max_seg: usize,
        heads: usize,
        status: u64,
    ) -> Vec<Arg> {
        abi::encode::Args {
            k_rows: t.k_rows.ptr().cast(),
            rot: self
                .rotations
                .get(layer)
                .map_or(DevicePtr::null(), DeviceBuffer::ptr),
            // The segment tables point at the store's own segments, written only by its encodes.
            seg_words: t.seg_words.ptr().cast(),
            seg_scales: t.seg_scales.ptr().cast(),
            max_seg: max_seg as i32,
            range_a: t.n_stored.ptr(),
            range_b: t.n_total.ptr(),
            n_heads: heads as i32,
            status: DevicePtrMut::from_addr(status),
        }
        .args()
    }

    /// Queues the index build of the ranges in `t`'s `index_start`/`index_end`.
    pub(super) fn launch_index(
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

    pub(super) fn launch_landmarks(
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
            &abi::landmark::BuildArgs {
                k_rows: t.k_rows.ptr().cast(),
                // The means' rows are the store's own, written only by these builds.
                means: t.landmarks.ptr().cast(),
                range_start: t.n_stored.ptr(),
                range_end: t.n_total.ptr(),
                num_kv_heads: heads as i32,
            }
            .args(),
        )?;
        Ok(())
    }
}
