//! The `scan` family (§6): approximate scores of every stored token for every query head, read
//! from the planes of the plan only.

use super::shape::{self, LaunchDims};
use super::{Family, Placement, SpecError};
use serde::{Deserialize, Serialize};

/// Shared memory for the plane words of one chunk of runs.
pub const PLANE_SHARED_BYTES: usize = 16 * 1024;
/// Shared memory for the coefficients of one chunk of runs.
pub const COEF_SHARED_BYTES: usize = 12 * 1024;
/// The tokens one thread may score: its accumulators are `tokens × G` registers.
pub const THREAD_TOKENS: [usize; 4] = [1, 2, 4, 8];

/// A scan kernel: one thread block per tile of `tile_words` words (64 tokens each) of one
/// segment of one (sequence, KV head).
///
/// Parameters, in order:
///
/// ```text
/// const unsigned long long* runs,   // [B][H][max_seg][D][4] a run table (source or staged)
/// const unsigned int* class_count,  // [B][H][4] channels of depth 4, 3, 2, 1
/// const float* q_store,             // [B][H][G][D] queries in the store basis
/// const int* n_stored,              // [b]
/// int max_seg,
/// int n_heads,                      // H
/// float* scores,                    // [B][H][G][ld_scores]; tokens 0 .. n_stored[b] written
/// int ld_scores
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ScanSpec {
    /// `D`.
    pub head_dim: usize,
    /// `G`, query heads per KV head: all scored from one read of the planes.
    pub group: usize,
    /// `BLK`, tokens per scale.
    pub block: usize,
    /// `S`, words per plane per segment.
    pub segment_words: usize,
    /// Words of every plane one thread block reads (64 tokens each).
    pub tile_words: usize,
    /// Threads per thread block.
    pub threads: usize,
    /// Where the runs live: `hbm` (device memory, incl. staging) or `host` (fused, mapped).
    pub placement: Placement,
}

impl ScanSpec {
    /// The default scan kernel of a shape for a placement: short tiles in HBM (the scan is
    /// arithmetic-bound there, so many small thread blocks), long runs from host memory.
    pub fn new(head_dim: usize, group: usize, placement: Placement) -> Self {
        let (tile_words, threads) = match placement {
            Placement::Hbm => (16, 256),
            Placement::Host => (64, 1024),
        };
        ScanSpec {
            head_dim,
            group,
            block: 64,
            segment_words: 512,
            tile_words,
            threads,
            placement,
        }
    }

    /// Tokens each thread scores (and 32-token halves of plane words each warp covers).
    pub fn thread_tokens(&self) -> usize {
        self.tile_words * shape::WORD_TOKENS / self.threads
    }

    /// `G` rounded up to a multiple of 4: coefficients are read as `float4`.
    fn padded_group(&self) -> usize {
        self.group.div_ceil(4) * 4
    }

    /// Scale blocks in one tile.
    fn tile_blocks(&self) -> usize {
        self.tile_words * shape::WORD_TOKENS / self.block
    }

    /// Plane pieces (one plane of one run over the tile) staged in shared memory at a time.
    pub fn plane_cap(&self) -> usize {
        (PLANE_SHARED_BYTES / (self.tile_words * 8)).min(4 * self.head_dim)
    }

    /// Runs staged in shared memory at a time.
    pub fn run_cap(&self) -> usize {
        let per_run = self.tile_blocks() * self.padded_group() * 4;
        (COEF_SHARED_BYTES / per_run)
            .min(self.head_dim)
            .min(self.plane_cap())
    }

    /// One thread block per tile of every segment of every (sequence, head).
    pub fn launch_dims(&self, batch: usize, heads: usize, max_seg: usize) -> LaunchDims {
        (
            (
                shape::dim(self.segment_words / self.tile_words),
                shape::dim(max_seg),
                shape::dim(batch * heads),
            ),
            (shape::dim(self.threads), 1, 1),
            0,
        )
    }
}

impl Family for ScanSpec {
    const FAMILY: &'static str = "scan";

    fn validate(&self) -> Result<(), SpecError> {
        let ScanSpec {
            head_dim,
            group,
            block,
            segment_words,
            tile_words,
            threads,
            placement: _,
        } = *self;
        shape::check_head_dim(Self::FAMILY, head_dim)?;
        shape::check_group(Self::FAMILY, group)?;
        shape::check_block(Self::FAMILY, block)?;
        shape::check_segment_words(Self::FAMILY, segment_words, block, true)?;
        // An even tile holds whole blocks of every size (128 tokens | 64 * even).
        if tile_words < 2 || tile_words % 2 != 0 || segment_words % tile_words != 0 {
            return Err(SpecError::new(
                Self::FAMILY,
                "tile_words",
                tile_words,
                format!("an even divisor of segment_words ({segment_words})"),
            ));
        }
        shape::check_threads(Self::FAMILY, threads)?;
        let per_thread = tile_words * shape::WORD_TOKENS;
        if !per_thread.is_multiple_of(threads) || !THREAD_TOKENS.contains(&(per_thread / threads)) {
            let allowed: Vec<String> = THREAD_TOKENS
                .iter()
                .rev()
                .filter(|&&k| per_thread.is_multiple_of(k) && per_thread / k <= 1024)
                .filter(|&&k| (per_thread / k).is_multiple_of(32))
                .map(|k| (per_thread / k).to_string())
                .collect();
            return Err(SpecError::new(
                Self::FAMILY,
                "threads",
                threads,
                format!(
                    "{} for a {tile_words}-word tile (1, 2, 4 or 8 tokens per thread)",
                    if allowed.is_empty() {
                        "none".to_string()
                    } else {
                        allowed.join(", ")
                    }
                ),
            ));
        }
        if self.plane_cap() < 4 || self.run_cap() == 0 {
            return Err(SpecError::new(
                Self::FAMILY,
                "tile_words",
                tile_words,
                format!(
                    "a tile whose four plane words of one run fit {PLANE_SHARED_BYTES} bytes and \
                     whose coefficients fit {COEF_SHARED_BYTES} bytes of shared memory"
                ),
            ));
        }
        Ok(())
    }

    fn kernel_name(&self) -> String {
        let ScanSpec {
            head_dim,
            group,
            block,
            segment_words,
            tile_words,
            threads,
            placement,
        } = *self;
        format!(
            "fathom_scan_d{head_dim}_g{group}_b{block}_s{segment_words}_w{tile_words}_{}_t{threads}",
            placement.as_str()
        )
    }

    fn context(&self) -> tera::Context {
        let mut c = tera::Context::new();
        c.insert("head_dim", &self.head_dim);
        c.insert("group", &self.group);
        c.insert("padded_group", &self.padded_group());
        c.insert("block", &self.block);
        c.insert("segment_words", &self.segment_words);
        c.insert("tile_words", &self.tile_words);
        c.insert("threads", &self.threads);
        c.insert("thread_tokens", &self.thread_tokens());
        c.insert("plane_cap", &self.plane_cap());
        c.insert("run_cap", &self.run_cap());
        c.insert("host", &(self.placement == Placement::Host));
        c
    }
}
