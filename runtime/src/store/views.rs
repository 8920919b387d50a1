//! The device tables of a layer for a batch: what the host knows they should hold, the queued
//! copies that make them so, and the [`LayerView`] a step reads.

use super::*;

impl KeyStore {
    /// The tables of a batch as the host knows them, with `MAX_SEG` and the longest `n_total`.
    pub(super) fn wanted_tables(
        &self,
        ids: &[SequenceId],
        layer: usize,
    ) -> (HostTables, usize, usize) {
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
    pub(super) fn refresh(&self, index: usize, wanted: HostTables) -> Result<(), StoreError> {
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
            kv_rows: self.config.kv_rows,
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
}
