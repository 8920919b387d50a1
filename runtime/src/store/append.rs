//! Append: one token per sequence of a batch, encoded on the device when it fills a block,
//! never waited for (the next [`KeyStore::check`] reports a failure).

use super::*;

impl KeyStore {
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
        let launch = self
            .append_rows
            .launch(batch as u64, heads as u64)
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        abi::append_rows::Args {
            // The row regions are the store's own; this step's row is written by this launch.
            k_rows: t.k_rows.ptr().cast(),
            v_rows: t.v_rows.ptr().cast(),
            n_total: t.n_total.ptr(),
            keys: keys.ptr(),
            values: values.ptr(),
            n_heads: heads as i32,
            head_dim: d as i32,
        }
        .launch(&self.gpu, &self.functions.append_rows, launch)?;
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
            &self.encode_args(t, layer, max_seg, heads, status),
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
}
