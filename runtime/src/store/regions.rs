//! Row regions and segments of a store: their sizes and addresses, what a call must allocate
//! before anything changes, and how the allocation is attached to the sequences.

use super::*;
use codegen::spec::pariskv::VECTOR_ALIGN;

impl KeyStore {
    /// Bytes of one head's K (or V) rows in a region of `class`.
    pub(super) fn head_rows_bytes(&self, class: u32) -> usize {
        self.geometry.class_tokens(class) * self.config.model.head_dim * 2
    }

    /// Bytes of the landmark means of all heads in a region of `class`.
    pub(super) fn means_bytes(&self, class: u32) -> usize {
        if self.config.keep_landmarks {
            self.config.model.kv_heads * self.head_rows_bytes(class) / 8
        } else {
            0
        }
    }

    pub(super) fn region_bytes(&self, class: u32) -> usize {
        let h = self.config.model.kv_heads;
        let index = self.index.as_ref().map_or(0, |i| {
            h * self.geometry.class_tokens(class) * i.geometry.bytes_per_token()
        });
        2 * h * self.head_rows_bytes(class) + self.means_bytes(class) + index
    }

    /// Addresses of head `h`'s ParisKV ids, codes and weights in `region` (after the rows and
    /// the means); zeros without the index.
    pub(super) fn index_addrs(&self, region: Region, h: usize) -> (u64, u64, u64) {
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
        let (codes, weights) = (base + codes as u64, base + weights as u64);
        // The whole-row rerank reads these tables in 16-byte loads (`store::pariskv` tests why
        // every size class keeps them aligned).
        debug_assert!(
            codes % VECTOR_ALIGN == 0 && weights % VECTOR_ALIGN == 0,
            "ParisKV tables at {codes:#x} and {weights:#x} are not 16-byte aligned"
        );
        (base + ids as u64, codes, weights)
    }

    /// Addresses of head `h`'s K rows, V rows and means in `region` (rows laid out as
    /// `config.kv_rows` says: [`row_offsets`]).
    pub(super) fn row_addrs(&self, region: Region, h: usize) -> (u64, u64, u64) {
        let class = self.regions.class(region);
        let per_head = self.head_rows_bytes(class) as u64;
        let (heads, d) = (self.config.model.kv_heads, self.config.model.head_dim);
        let base = self.regions.addr(region);
        let (k, v) = row_offsets(self.config.kv_rows, heads, d, per_head, h);
        let means = if self.config.keep_landmarks {
            base + 2 * heads as u64 * per_head + h as u64 * per_head / 8
        } else {
            0
        };
        (base + k, base + v, means)
    }

    /// The runs that hold the first `n` K and V rows of head `h` in `region`, as `(address,
    /// bytes)`: two with separate rows, one with adjacent rows (copied as they are when rows
    /// move to a larger region).
    pub(super) fn row_runs(&self, region: Region, h: usize, n: usize) -> Vec<(u64, usize)> {
        let (k, v, _) = self.row_addrs(region, h);
        let d = self.config.model.head_dim;
        match self.config.kv_rows {
            KvRows::Separate => vec![(k, n * d * 2), (v, n * d * 2)],
            KvRows::Adjacent => vec![(k, n * 2 * d * 2)],
        }
    }

    /// Allocates what the sequences of `ids` need at `layer` to hold `new_total[i]` tokens: a
    /// larger row region, more segments. On failure everything allocated here goes back to the
    /// pools and no sequence has changed.
    pub(super) fn allocate(
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
        let (gpu, placement, host) = (self.gpu.clone(), self.config.placement, self.host_memory);
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
                    .alloc(class, || Memory::zeroed(&gpu, placement, host, bytes))
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
                        .alloc(|bytes| Memory::zeroed(&gpu, placement, host, bytes))
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
    pub(super) fn commit(
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
                    let means = state.n_stored / 8 * d * 2;
                    for h in 0..heads {
                        let (_, _, m0) = self.row_addrs(old, h);
                        let (_, _, m1) = self.row_addrs(new, h);
                        let runs = self.row_runs(old, h, state.n_total);
                        for ((from, bytes), (to, _)) in
                            runs.into_iter().zip(self.row_runs(new, h, 0))
                        {
                            device::copy(&self.gpu, to, from, bytes)?;
                        }
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
}

/// Byte offsets in a row region of `heads` heads (`per_head` bytes of K, or of V, rows each;
/// `head_dim` channels) of head `h`'s K rows and V rows: `[K: H][cap][D] | [V: H][cap][D]` for
/// separate rows, `[H][cap][2][D]` for adjacent ones (the V row `D` values after the K row).
/// Either way the rows end at `2 * heads * per_head`, where the landmark means begin.
pub(super) fn row_offsets(
    kv_rows: KvRows,
    heads: usize,
    head_dim: usize,
    per_head: u64,
    h: usize,
) -> (u64, u64) {
    let h = h as u64;
    match kv_rows {
        KvRows::Separate => (h * per_head, (heads as u64 + h) * per_head),
        KvRows::Adjacent => {
            let k = 2 * h * per_head;
            (k, k + 2 * head_dim as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of every head lands inside the rows' part of the region, no two rows overlap,
    /// and with adjacent rows a token's V row follows its K row.
    #[test]
    fn rows_of_both_layouts_tile_the_region() {
        for (heads, d, cap) in [(1, 64, 256), (8, 128, 512), (3, 80, 256)] {
            let per_head = (cap * d * 2) as u64;
            for kv_rows in KvRows::ALL {
                let stride = (kv_rows.row_stride(d) * 2) as u64;
                let mut starts = Vec::new();
                for h in 0..heads {
                    let (k, v) = row_offsets(kv_rows, heads, d, per_head, h);
                    for t in 0..cap as u64 {
                        starts.push(k + t * stride);
                        starts.push(v + t * stride);
                    }
                    if kv_rows == KvRows::Adjacent {
                        assert_eq!(v, k + 2 * d as u64);
                    }
                    assert_eq!(k % 16, 0, "16-byte aligned rows");
                    assert_eq!(v % 16, 0, "16-byte aligned rows");
                }
                starts.sort_unstable();
                let row = 2 * d as u64;
                assert!(starts.windows(2).all(|w| w[1] - w[0] >= row), "{kv_rows}");
                assert_eq!(*starts.first().unwrap(), 0);
                assert_eq!(
                    starts.last().unwrap() + row,
                    2 * heads as u64 * per_head,
                    "{kv_rows}: the rows fill the region up to the means"
                );
            }
        }
    }
}
