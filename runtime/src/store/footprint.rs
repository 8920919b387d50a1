//! The device memory one resident sequence costs a store (SPEC §9's HBM footprint, the store's
//! share; the decoder's is `step::launches::WorkspaceSizes::parts`).

use codegen::spec::Placement;

use super::KeyStore;

/// Device bytes of one sequence of `tokens` tokens in every one of `layers` layers, by part:
/// what it uses of the pools (segments, row regions with their landmark means and ParisKV
/// index rows, histograms), and the per-layer device tables a store keeps for its views
/// (sized by `max_batch` and the capacity, so shared by the sequences of a store: counted
/// here as if the sequence were alone in it). With the host placement segments and regions
/// are host memory and count 0; histograms and tables are device memory in either placement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreFootprint {
    pub segments: usize,
    pub rows: usize,
    pub histograms: usize,
    pub tables: usize,
}

impl StoreFootprint {
    /// The parts with their names, in the order of the fields; they sum to
    /// [`StoreFootprint::bytes`].
    pub fn parts(&self) -> [(&'static str, usize); 4] {
        [
            ("store segments", self.segments),
            ("store rows", self.rows),
            ("pariskv histograms", self.histograms),
            ("store tables", self.tables),
        ]
    }

    /// Every part.
    pub fn bytes(&self) -> usize {
        self.segments + self.rows + self.histograms + self.tables
    }
}

impl KeyStore {
    /// The device memory one sequence of `tokens` tokens in each of `layers` layers costs this
    /// store's configuration (pass the model's `L` to count a whole model when the store itself
    /// holds fewer layers); see [`StoreFootprint`].
    pub fn resident_footprint(&self, tokens: usize, layers: usize) -> StoreFootprint {
        let heads = self.config.model.kv_heads;
        let in_device = |bytes: usize| match self.config.placement {
            Placement::Hbm => bytes,
            Placement::Host => 0,
        };
        let segments = self.geometry.segments_for(tokens) * heads * self.segments.slot_bytes();
        let rows = self.region_bytes(self.geometry.row_class(tokens));
        let histograms = self.index.as_ref().map_or(0, |i| i.hist.slot_bytes());
        StoreFootprint {
            segments: layers * in_device(segments),
            rows: layers * in_device(rows),
            histograms: layers * histograms,
            tables: layers * self.tables.first().map_or(0, |t| t.bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_sum_to_the_footprint() {
        let f = StoreFootprint {
            segments: 3,
            rows: 50,
            histograms: 700,
            tables: 9000,
        };
        assert_eq!(f.parts().iter().map(|&(_, b)| b).sum::<usize>(), f.bytes());
        assert_eq!(f.bytes(), 9753);
    }
}
