//! Prefill: a sequence's first tokens of a layer, encoded in bulk and waited for, so a failure
//! leaves the sequence as it was.

use super::checks::status_error;
use super::*;

impl KeyStore {
    pub(super) fn check_rows(
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
        // Rows `old_total ..` of every head, from `[H][n][D]`: one run per head and matrix, or
        // with adjacent rows a strided copy into every other row.
        let (row, bytes) = (d * 2, n * d * 2);
        let stride = self.config.kv_rows.row_stride(d) * 2;
        let at = (old_total * stride) as u64;
        for h in 0..heads {
            let (k, v, _) = self.row_addrs(region, h);
            let from = (h * bytes) as u64;
            for (to, src) in [(k + at, keys.addr() + from), (v + at, values.addr() + from)] {
                match self.config.kv_rows {
                    KvRows::Separate => device::copy(&self.gpu, to, src, bytes)?,
                    KvRows::Adjacent => device::copy_rows(&self.gpu, to, stride, src, row, n)?,
                }
            }
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
    pub(super) fn save_hist(
        &self,
        id: SequenceId,
        layer: usize,
    ) -> Result<Option<u64>, StoreError> {
        let (Some(index), Some(slot)) = (&self.index, self.sequence(id).layers[layer].hist) else {
            return Ok(None);
        };
        let addr = index.hist.addr(slot);
        device::copy(&self.gpu, index.backup.addr(), addr, index.backup.bytes())?;
        Ok(Some(addr))
    }

    /// The ParisKV index build of a prefill (tokens `old_total .. new_total`) and its status,
    /// waited for.
    pub(super) fn index_prefill(
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

    /// The bulk encode of a prefill (tokens `old_stored .. new_stored`), its landmarks, and its
    /// status, waited for.
    pub(super) fn encode_prefill(
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
            &self.encode_args(t, layer, max_seg, heads, self.prefill_status.addr()),
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
}
