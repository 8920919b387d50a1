//! The `scan` family (§6): approximate scores of every stored token for every query head, read
//! from the planes of the plan only.

use super::shape::{self, LaunchDims};
use super::{Family, Placement, SpecError};
use serde::{Deserialize, Serialize};

/// Static shared memory a thread block may use at most (CUDA's limit without opting in).
pub const SHARED_LIMIT_BYTES: usize = 48 * 1024;
/// Shared memory of one multiprocessor (Hopper), shared by its resident thread blocks, less the
/// 1 KB the runtime reserves per block.
pub const SM_SHARED_BYTES: usize = 228 * 1024;
/// Registers of one multiprocessor.
pub const SM_REGISTERS: usize = 64 * 1024;
/// Threads one multiprocessor holds at most.
pub const SM_THREADS: usize = 2048;
/// Thread blocks one multiprocessor holds at most on every target (sm_86 and sm_89 hold 16 or
/// 24, sm_80 and sm_90 32; ptxas ignores a larger `__launch_bounds__` minimum with a warning).
pub const SM_BLOCKS: usize = 16;
/// Shared memory for the coefficients of one chunk of runs.
pub const COEF_SHARED_BYTES: usize = 8 * 1024;
/// Grids aim at this many thread blocks at least (several waves of a large GPU) before a block
/// takes more than one tile of a segment.
pub const TARGET_BLOCKS: usize = 2048;
/// Tiles one thread block scores at most (its stripe of a segment).
pub const MAX_STRIPE: usize = 8;
/// The tokens one thread may score: its accumulators are `tokens × G` registers.
pub const THREAD_TOKENS: [usize; 4] = [1, 2, 4, 8];
/// Tensor cores: plane pieces per mma k-chunk (the K of m16n8k16).
pub const TC_K: usize = 16;

/// A scan kernel: one thread block per stripe of consecutive tiles of `tile_words` words (64
/// tokens each) of one segment of one (sequence, KV head); `launch_dims` sets the stripes.
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
/// unsigned int* peaks,              // only with `peaks`: [B][H][G][ld_peaks], see below
/// int ld_peaks                      // only with `peaks`
/// ```
///
/// With `peaks`, entry `[b][h][g][i]` of `peaks` gets the largest order key (`order_key` of
/// `templates/select_common.cuh.tera`) of the scores of 32-token half `i` (tokens `32i ..
/// 32i + 31`) below `n_stored[b]`; halves with no such token are not written.
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
    /// Score on the tensor cores (`templates/scan_tc.cu.tera`): each plane bit is a ±Δ
    /// fp16 operand and each (plane, head) weight `q·2^(2−k)` an fp16 pair (high and low
    /// part), multiplied by `mma.sync` m16n8k16 into fp32. Autotune tries every scan tile
    /// both ways; `false` when absent, so older specs read unchanged.
    #[serde(default)]
    pub tensor_cores: bool,
    /// Also write the peak of every 32-token half (`peaks`, `ld_peaks` after `ld_scores`): for
    /// each (sequence, KV head, query head) row and half `i` holding a token below `n_stored`,
    /// the largest order key (that of `templates/select_common.cuh.tera`: a larger score has
    /// a larger key, -0 and +0 one key) of the half's scores, so a select can skip the halves
    /// that cannot hold its k-th score without reading their scores. Kernel name suffix `_pk`;
    /// `false` when absent, so older specs read unchanged.
    #[serde(default)]
    pub peaks: bool,
}

impl ScanSpec {
    /// The default scan kernel of a shape for a placement: short tiles in HBM (the scan is
    /// arithmetic-bound there, so many small thread blocks), long runs from host memory. Both
    /// score 4 tokens per thread; from host memory a group of more than 8 query heads takes half
    /// the tile and half the threads, as its `4 × G` accumulators do not fit the 64 registers a
    /// thread of a 1,024-thread block has (ptxas spills 600 bytes at G = 16) but do fit 128.
    pub fn new(head_dim: usize, group: usize, placement: Placement) -> Self {
        let (tile_words, threads) = match placement {
            Placement::Hbm => (16, 256),
            Placement::Host if group > 8 => (32, 512),
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
            tensor_cores: false,
            peaks: false,
        }
    }

    /// This spec with its tile fitted to its segment ([`fit_scan_tile`]): the default tiles
    /// (16 or 64 words) do not divide every segment size.
    pub fn with_fitted_tile(self) -> Self {
        let (tile_words, threads) =
            fit_scan_tile((self.tile_words, self.threads), self.segment_words);
        ScanSpec {
            tile_words,
            threads,
            ..self
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

    /// Registers a thread is expected to need: its accumulators (`tokens × G`, or the mma
    /// fragments with tensor cores), the plane halves of one run (`4 × tokens`) and the addresses and counters of the loops.
    fn register_estimate(&self) -> usize {
        let tokens = self.thread_tokens();
        if self.tensor_cores {
            // Each 32-token half a warp owns is two m16 tiles of `n_tiles` fragments of four
            // fp32 accumulators a lane, and the four plane words of a column pair a lane.
            (48 + tokens * (8 * self.n_tiles() + 4)).div_ceil(8) * 8
        } else {
            (32 + tokens * (self.group + 4)).div_ceil(8) * 8
        }
    }

    /// Thread blocks one multiprocessor is meant to hold at once, bounded by its registers and
    /// threads: the kernel's `__launch_bounds__` minimum, so the compiler keeps within
    /// `SM_REGISTERS / (threads × blocks)` registers, and the shared memory is sized to match.
    pub fn min_blocks(&self) -> usize {
        let by_registers = SM_REGISTERS / (self.threads * self.register_estimate());
        by_registers
            .min(SM_THREADS / self.threads)
            .clamp(1, SM_BLOCKS)
    }

    /// Static shared memory one block may use so that `min_blocks` blocks fit a multiprocessor.
    fn shared_budget(&self) -> usize {
        (SM_SHARED_BYTES / self.min_blocks() - 1024).min(SHARED_LIMIT_BYTES)
    }

    /// Runs staged in shared memory at a time (their coefficients fit `COEF_SHARED_BYTES`).
    pub fn run_cap(&self) -> usize {
        let per_run = self.tile_blocks() * self.padded_group() * 4;
        (COEF_SHARED_BYTES / per_run).min(self.head_dim)
    }

    /// Bytes of one copy of a run's scales: the largest of 16, 8, 4 and 2 that divides the
    /// tile's scales of one run.
    fn scale_copy(&self) -> usize {
        let bytes = self.tile_blocks() * 2;
        [16, 8, 4, 2]
            .into_iter()
            .find(|&b| bytes.is_multiple_of(b))
            .unwrap_or(2)
    }

    /// Chunks a plan can need at most with these caps: every chunk but the last is full in runs
    /// (`run_cap`) or in planes (more than `plane_cap − 4`), and every chunk holds a run.
    fn chunk_cap_for(&self, plane_cap: usize) -> usize {
        let d = self.head_dim;
        match self.run_cap() {
            0 => 0,
            run_cap if plane_cap >= 4 => (d / run_cap + 4 * d / (plane_cap - 3) + 1).min(d),
            _ => 0,
        }
    }

    /// Static shared memory of the kernel with `plane_cap` plane pieces per buffer (its
    /// `Shared` struct, each member rounded up to 16 bytes).
    fn shared_bytes_for(&self, plane_cap: usize) -> usize {
        let (d, g, tw, tb) = (
            self.head_dim,
            self.group,
            self.tile_words,
            self.tile_blocks(),
        );
        let run_cap = self.run_cap();
        let up = |b: usize| b.div_ceil(16) * 16;
        let common =
            up(g * d * 4) + up(d * 8) * 2 + up(d * 4) + up(self.chunk_cap_for(plane_cap) * 28 + 8);
        if self.tensor_cores {
            let k_chunks = plane_cap.div_ceil(TC_K);
            up(2 * k_chunks * TC_K * self.piece_words() * 4)
                + up(k_chunks * self.n_tiles() * 32 * 8)
                + up(k_chunks * TC_K * 2)
                + up(k_chunks * TC_K * 8)
                // The scales' buffers hold one run more, the zero run of the k padding.
                + up(2 * (run_cap + 1) * tb * 2)
                + up(g * 4) * 2
                + common
        } else {
            up(2 * plane_cap * tw * 8)
                + up(run_cap * tb * self.padded_group() * 4)
                + up(2 * run_cap * tb * 2)
                + common
        }
    }

    /// Tensor cores: mma n-tiles of 8 columns, two a head (its weights' high and low part).
    pub fn n_tiles(&self) -> usize {
        (2 * self.group).div_ceil(8)
    }

    /// Tensor cores: the shared-memory stride of a plane piece, in 32-bit words: the tile's
    /// `2 × tile_words` halves and 4 more, so that the four pieces a warp's lanes read at once
    /// (`2t`, `2t + 1`, `2t + 8`, `2t + 9` of a k-chunk) fall in different banks.
    fn piece_words(&self) -> usize {
        2 * self.tile_words + 4
    }

    /// Plane pieces (one plane of one run over the tile) staged per buffer: as many as the
    /// shared budget of `min_blocks` resident blocks holds beside everything else, up to every
    /// plane of every channel. Where the rest alone (queries, run table) exceeds that budget,
    /// the fewest pieces within the static limit (fewer blocks are then resident); 0 when not
    /// even one run's four planes fit that.
    pub fn plane_cap(&self) -> usize {
        let largest = |budget: usize| {
            (4..=4 * self.head_dim)
                .rev()
                .find(|&p| self.shared_bytes_for(p) <= budget)
        };
        largest(self.shared_budget())
            .or_else(|| (self.shared_bytes_for(4) <= SHARED_LIMIT_BYTES).then_some(4))
            .unwrap_or(0)
    }

    /// Static shared memory of one thread block.
    pub fn shared_bytes(&self) -> usize {
        self.shared_bytes_for(self.plane_cap())
    }

    /// Tiles of a segment one thread block scores: 1 unless the grid has at least
    /// `TARGET_BLOCKS` blocks with more, then the largest divisor of the segment's tiles up to
    /// `MAX_STRIPE` that keeps it so (longer stripes pay the per-block prologue more rarely).
    pub fn stripe_tiles(&self, batch: usize, heads: usize, max_seg: usize) -> usize {
        let seg_tiles = self.segment_tiles();
        let total = batch * heads * max_seg * seg_tiles;
        (1..=MAX_STRIPE.min(seg_tiles))
            .filter(|&k| seg_tiles.is_multiple_of(k) && total / k >= TARGET_BLOCKS)
            .max()
            .unwrap_or(1)
    }

    /// Tiles of a segment: the most thread blocks a segment can have.
    pub fn segment_tiles(&self) -> usize {
        self.segment_words / self.tile_words
    }

    /// One thread block per stripe of tiles of every segment of every (sequence, head); the
    /// kernel reads the stripe length from the grid.
    pub fn launch_dims(&self, batch: usize, heads: usize, max_seg: usize) -> LaunchDims {
        let stripes = self.segment_tiles() / self.stripe_tiles(batch, heads, max_seg);
        self.launch_dims_striped(batch, heads, max_seg, stripes)
    }

    /// The stripes a segment that fit a grid of `columns` (segments x sequences x heads) of
    /// `stripes` each into one wave of `resident` blocks (the kernel's occupancy times the
    /// multiprocessors): the most whose blocks are all resident at once, at most the segment's
    /// tiles; `None` where the grid fits already or where not even one stripe a segment would.
    /// The rule of the HBM step (`Tiles::scan_one_wave`) and of the autotuner's HBM scan cases.
    pub fn one_wave_stripes(
        &self,
        stripes: usize,
        columns: usize,
        resident: usize,
    ) -> Option<usize> {
        let fit = (resident / columns.max(1)).min(self.segment_tiles());
        (stripes * columns > resident && fit > 0).then_some(fit)
    }

    /// The grid with `stripes` thread blocks a segment (1 to [`Self::segment_tiles`], clamped
    /// there), whether or not they divide its tiles: block `x` scores tiles
    /// `x · tiles / stripes` up to `(x + 1) · tiles / stripes`, so uneven stripes differ by one
    /// tile. For a grid fitted to the GPU's resident blocks (`Tiles::scan_stripes`).
    pub fn launch_dims_striped(
        &self,
        batch: usize,
        heads: usize,
        max_seg: usize,
        stripes: usize,
    ) -> LaunchDims {
        (
            (
                shape::dim(stripes.clamp(1, self.segment_tiles())),
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
            tensor_cores: _,
            peaks: _,
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
                    listed(&allowed)
                ),
            ));
        }
        // The mma accumulators grow with tokens per thread and n-tiles: a thread must keep them
        // in registers (at most 255, and its share of the multiprocessor's).
        let register_limit = |threads: usize| (SM_REGISTERS / threads).min(255);
        if self.tensor_cores {
            let registers = self.register_estimate();
            let most = register_limit(threads);
            if registers > most {
                let allowed: Vec<String> = [32, 64, 128, 256, 512, 1024]
                    .into_iter()
                    .filter(|&t| {
                        ScanSpec {
                            threads: t,
                            tensor_cores: false,
                            ..*self
                        }
                        .validate()
                        .is_ok()
                    })
                    .filter(|&t| {
                        let s = ScanSpec {
                            threads: t,
                            ..*self
                        };
                        s.register_estimate() <= register_limit(t)
                    })
                    .map(|t| t.to_string())
                    .collect();
                return Err(SpecError::new(
                    Self::FAMILY,
                    "threads",
                    threads,
                    format!(
                        "{} for the tensor-core scan of a {tile_words}-word tile at G = {group} \
                         (a thread keeps ~{registers} registers of mma accumulators and plane \
                         words; at most {most} fit)",
                        listed(&allowed)
                    ),
                ));
            }
        }
        if self.run_cap() == 0 || self.plane_cap() < 4 {
            return Err(SpecError::new(
                Self::FAMILY,
                "tile_words",
                tile_words,
                format!(
                    "a tile whose coefficients of one run fit {COEF_SHARED_BYTES} bytes and whose \
                     two buffers of four plane words of one run fit, beside the rest, \
                     {SHARED_LIMIT_BYTES} bytes of shared memory"
                ),
            ));
        }
        Ok(())
    }

    /// Every field, so distinct specs never share a name (the tests check each one).
    fn kernel_name(&self) -> String {
        format!(
            "fathom_scan_d{}_g{}_b{}_s{}_w{}_{}_t{}{}{}",
            self.head_dim,
            self.group,
            self.block,
            self.segment_words,
            self.tile_words,
            self.placement.as_str(),
            self.threads,
            if self.tensor_cores { "_tc" } else { "" },
            if self.peaks { "_pk" } else { "" }
        )
    }

    fn template(&self) -> String {
        if self.tensor_cores {
            "scan_tc.cu.tera".to_string()
        } else {
            "scan.cu.tera".to_string()
        }
    }

    fn context(&self) -> tera::Context {
        let mut c = tera::Context::new();
        if self.tensor_cores {
            c.insert("n_tiles", &self.n_tiles());
            c.insert("piece_words", &self.piece_words());
            c.insert("k_chunk_cap", &self.plane_cap().div_ceil(TC_K));
        }
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
        c.insert("chunk_cap", &self.chunk_cap_for(self.plane_cap()));
        c.insert("scale_copy", &self.scale_copy());
        c.insert("min_blocks", &self.min_blocks());
        c.insert("host", &(self.placement == Placement::Host));
        c.insert("tensor_cores", &self.tensor_cores);
        c.insert("peaks", &self.peaks);
        c
    }
}

/// The allowed values of an error message: `none`, or a comma-separated list.
fn listed(allowed: &[String]) -> String {
    if allowed.is_empty() {
        "none".to_string()
    } else {
        allowed.join(", ")
    }
}

/// The scan tile `(tile_words, threads)` closest to `(tile_words, threads)` that a segment of
/// `segment_words` words can hold: the largest even divisor of the segment not above the
/// tile, at the same tokens per thread (at least one warp).
pub fn fit_scan_tile(tile: (usize, usize), segment_words: usize) -> (usize, usize) {
    let (tile_words, threads) = tile;
    if tile_words > 0 && segment_words.is_multiple_of(tile_words) {
        return tile;
    }
    let per_thread = (tile_words * 64 / threads.max(1)).max(1);
    let fitted = (2..=tile_words.min(segment_words))
        .rev()
        .find(|w| w % 2 == 0 && segment_words.is_multiple_of(*w))
        .unwrap_or(2);
    (fitted, (fitted * 64 / per_thread).clamp(32, 1024))
}
