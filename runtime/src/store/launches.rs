//! The kernels the store queues: the encode's arguments, the ParisKV index build and the
//! landmark means.

use super::*;

impl KeyStore {
    /// The encode kernel's arguments (bulk and append share them; `templates/ABI.md`).
    pub(super) fn encode_args(
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

    pub(super) fn rotation_arg(&self, layer: usize) -> Arg {
        self.rotations
            .get(layer)
            .map_or(Arg::Ptr(0), DeviceBuffer::arg)
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
}
