//! The `gather` family (§7.2, the copy-kernel transfer): active runs from the source run table
//! into staging, with 16-byte loads, so that the HBM scan can read them.

use super::shape::{self, LaunchDims};
use super::{Family, SpecError};
use serde::{Deserialize, Serialize};

/// A gather kernel: one thread block per run slot (slot, segment, sequence × head); inactive
/// slots and segments past the store return at once.
///
/// Parameters, in order:
///
/// ```text
/// const unsigned long long* src_runs,   // [B][H][max_seg][D][4] source run table (plan)
/// const unsigned long long* dst_runs,   // same shape, staged run table (plan)
/// const unsigned int* class_count,      // [B][H][4]
/// const int* n_stored,                  // [b]
/// int max_seg,
/// int n_heads                           // H
/// ```
///
/// Each slot copies `depth * S` words and `SPC` scales; run addresses must be 16-byte aligned
/// (segment and staging bases are; `S` is even).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GatherSpec {
    /// `D`: slots per segment.
    pub head_dim: usize,
    /// `BLK`, which sets the scales per run.
    pub block: usize,
    /// `S`, words per plane per segment.
    pub segment_words: usize,
    /// 16-byte loads each thread keeps in flight before it stores them.
    pub loads_in_flight: usize,
    /// Threads per thread block.
    pub threads: usize,
}

impl GatherSpec {
    /// The default gather kernel of a head dimension.
    pub fn new(head_dim: usize) -> Self {
        GatherSpec {
            head_dim,
            block: 64,
            segment_words: 512,
            loads_in_flight: 4,
            threads: 256,
        }
    }

    /// One thread block per slot of every segment of every (sequence, head).
    pub fn launch_dims(&self, batch: usize, heads: usize, max_seg: usize) -> LaunchDims {
        (
            (
                shape::dim(self.head_dim),
                shape::dim(max_seg),
                shape::dim(batch * heads),
            ),
            (shape::dim(self.threads), 1, 1),
            0,
        )
    }

    /// The widest load (bytes) that a run of `SPC` scales can be copied with, staying aligned.
    fn scale_vector_bytes(&self) -> usize {
        let run_bytes = 2 * shape::scales_per_channel(self.segment_words, self.block);
        [16, 8, 4, 2]
            .into_iter()
            .find(|w| run_bytes.is_multiple_of(*w))
            .unwrap_or(2)
    }
}

impl Family for GatherSpec {
    const FAMILY: &'static str = "gather";

    fn validate(&self) -> Result<(), SpecError> {
        let GatherSpec {
            head_dim,
            block,
            segment_words,
            loads_in_flight,
            threads,
        } = *self;
        shape::check_head_dim(Self::FAMILY, head_dim)?;
        shape::check_block(Self::FAMILY, block)?;
        shape::check_segment_words(Self::FAMILY, segment_words, block, true)?;
        if !(1..=16).contains(&loads_in_flight) {
            return Err(SpecError::new(
                Self::FAMILY,
                "loads_in_flight",
                loads_in_flight,
                "1 to 16",
            ));
        }
        shape::check_threads(Self::FAMILY, threads)
    }

    /// Every field, so distinct specs never share a name (the tests check each one).
    fn kernel_name(&self) -> String {
        format!(
            "fathom_gather_d{}_b{}_s{}_l{}_t{}",
            self.head_dim, self.block, self.segment_words, self.loads_in_flight, self.threads
        )
    }

    fn context(&self) -> tera::Context {
        let mut c = tera::Context::new();
        c.insert("head_dim", &self.head_dim);
        c.insert("block", &self.block);
        c.insert("segment_words", &self.segment_words);
        c.insert("loads_in_flight", &self.loads_in_flight);
        c.insert("threads", &self.threads);
        c.insert("scale_vector_bytes", &self.scale_vector_bytes());
        c
    }
}
