//! The `plan` family (§3, §4): per query group, the read depth of every channel, and the run
//! tables that tell gather and scan which words to read.

use super::row::RowFields;
use super::shape::{self, LaunchDims};
use super::{Family, KvRows, Placement, SpecError};
use serde::{Deserialize, Serialize};

/// How a plan picks depths (§4): every method is a depth plan over the same store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PlanMethod {
    /// §3 reverse water-filling under the run-time budget (bits per token).
    Fathom,
    /// Top-`r` channels by `Σ_h |q_h[c]|` (ties to the lower channel), depth 4.
    Sparq { r: usize },
    /// The calibrated fixed channels of each KV head (a `[H][D]` mask input), depth 4.
    DoubleSparsity,
    /// The first `r` channels, depth 4: KLT coordinates ordered by score variance when the
    /// store is rotated (the method's meaning); on a raw store simply the first `r` channels.
    Loki { r: usize },
    /// Every channel at depth 2.
    Thumbnail,
    /// Every channel at depth `t`.
    Uniform { t: usize },
}

impl PlanMethod {
    /// The method as it appears in kernel names: `fathom`, `sparq32`, `dsparsity`, `loki32`,
    /// `thumbnail`, `uniform4`.
    pub fn tag(self) -> String {
        match self {
            PlanMethod::Fathom => "fathom".into(),
            PlanMethod::Sparq { r } => format!("sparq{r}"),
            PlanMethod::DoubleSparsity => "dsparsity".into(),
            PlanMethod::Loki { r } => format!("loki{r}"),
            PlanMethod::Thumbnail => "thumbnail".into(),
            PlanMethod::Uniform { t } => format!("uniform{t}"),
        }
    }

    fn template_name(self) -> &'static str {
        match self {
            PlanMethod::Fathom => "fathom",
            PlanMethod::Sparq { .. } => "sparq",
            PlanMethod::DoubleSparsity => "double_sparsity",
            PlanMethod::Loki { .. } => "loki",
            PlanMethod::Thumbnail => "thumbnail",
            PlanMethod::Uniform { .. } => "uniform",
        }
    }

    /// `r` or `t`, 0 for methods without a parameter.
    fn parameter(self) -> usize {
        match self {
            PlanMethod::Sparq { r } | PlanMethod::Loki { r } => r,
            PlanMethod::Uniform { t } => t,
            PlanMethod::Fathom | PlanMethod::DoubleSparsity | PlanMethod::Thumbnail => 0,
        }
    }
}

/// A plan kernel: one thread block per (sequence, KV head), all of a layer in one launch.
///
/// Parameters, in order:
///
/// ```text
/// const float* q,                         // [B][H][G][D] raw queries
/// const float* sigma2,                    // [B][H][D] channel variances (fathom; else may be null)
/// const unsigned char* fixed_channels,    // [H][D] nonzero = read (double_sparsity; else null)
/// const float* rot,                       // [H][D][D] (rotate; else null)
/// float budget,                           // bits per token (fathom; else ignored)
/// const unsigned long long* const* seg_words,  // [(b*H + h)*max_seg + s]
/// const unsigned short* const* seg_scales,     // [(b*H + h)*max_seg + s]
/// int max_seg,
/// const int* n_stored,                    // [b]
/// int n_heads,                            // H
/// float* q_store,                         // [B][H][G][D] out: queries in the store basis
/// unsigned char* depths,                  // [B][H][D] out
/// unsigned int* class_count,              // [B][H][4] out: channels of depth 4, 3, 2, 1
/// unsigned long long* runs,               // [B][H][max_seg][D][4] out: source run table
/// unsigned long long* staged_runs,        // same shape, out; null = not written
/// unsigned long long* stage_words,        // [(b*H + h)*max_seg + s][stage_planes * S]
/// unsigned short* stage_scales,           // [(b*H + h)*max_seg + s][D * SPC]
/// int stage_planes,                       // staging capacity in planes per (b, h, s)
/// int* status                             // [3] {1 = plan exceeds stage_planes, b, h}; 0 = ok
///                                         //   (needed when staged_runs is given)
/// ```
///
/// With [`PlanSpec::tail`] four more parameters follow `status`, and blocks `H .. 2H` of the
/// launch score the tail, the tokens past the last encoded segment, exactly from the bf16 key
/// rows (as the oracle kernel scores it), beside the plan's blocks:
///
/// ```text
/// const unsigned short* const* k_rows,    // [b*H + h] bf16 keys [capacity][D] (tail_kv_rows' stride)
/// const int* n_total,                     // [b] stored plus tail tokens
/// float* scores,                          // [B][H][G][ld_scores] out: columns n_stored .. n_total
/// int ld_scores
/// ```
///
/// Run slots are written for the stored segments `s < ceil(n_stored[b] / 64S)` only: active
/// channels by depth class (4 first) then channel, then the inactive channels with depth 0.
/// When the plan does not fit the staging, the staged table of that head gets depth 0 everywhere
/// and `status` says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PlanSpec {
    /// `D`.
    pub head_dim: usize,
    /// `G`, query heads per KV head.
    pub group: usize,
    /// `BLK`: the scale cost of an active channel is `16/BLK` bits per token.
    pub block: usize,
    /// `S`, words per plane per segment (run addresses, staging packing).
    pub segment_words: usize,
    /// How depths are chosen.
    pub method: PlanMethod,
    /// The store is rotated (§5): queries become `q' = Rᵀq` before planning.
    pub rotate: bool,
    /// Threads per thread block.
    pub threads: usize,
    /// Also score the tail (SPEC §6: tokens `n_stored .. n_total`, exactly, from the bf16 key
    /// rows, which live here) in blocks of this launch beside the plan's, instead of in an
    /// oracle launch after the scan: one launch fewer a layer. `None`: the plan only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<Placement>,
    /// How the key rows the tail reads are laid out (with `tail` only).
    #[serde(default, skip_serializing_if = "KvRows::is_separate")]
    pub tail_kv_rows: KvRows,
    /// Load the segment pointers of several run-table entries a thread before storing any of
    /// them ([`PlanSpec::run_batch`]): `runs` may alias `seg_words` as far as the compiler
    /// knows, so each entry's store made the next entry's loads wait (a global round trip an
    /// entry, 16 a thread at 1M tokens and 256 threads: the plan's 19 us there against 11 at
    /// 32k on the H100). Opt-in (`Tiles::plan_batched_runs`): exact on an H100, but the step
    /// was no faster with it (2026-12-06), so those round trips are not what the plan's 1M
    /// time is.
    #[serde(default, skip_serializing_if = "is_false")]
    pub batched_runs: bool,
    /// Blocks a (KV head, sequence) that share its run tables (`R`, the launch's `z`; 1: one
    /// block writes them all). Each of the `R` works out the same plan (the same instructions
    /// on the same inputs) and writes its share of the entries, whole blocks' worth of them
    /// (block 0 alone the queries, depths, counts and status), so that a long sequence's
    /// tables (128 KiB a KV head at 1M tokens and D = 128) are written by `R` multiprocessors
    /// instead of one: the plan takes 19.3 us at 1M against 10.7 at 32k on the H100, and
    /// loading the entries' pointers in batches did not change it. The runtime takes
    /// [`PlanSpec::run_blocks_for`] the shape (`Tiles::plan_run_blocks`); not with
    /// `batched_runs`.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub run_blocks: usize,
    /// Write each run-table entry (32 bytes, one sector) from a lane pair, the pointers from
    /// the even lane and the channel and depth from the odd one, so that a warp's store
    /// writes 16 whole entries (512 contiguous bytes) instead of one half of each of 32: the
    /// plan's excess at 1M tokens was one multiprocessor's 8,192 half-sector stores a KV head
    /// (`bench/NOTES.md`, fifteenth session). The runtime's default (`Tiles::plan_paired_runs`)
    /// since an H100 timed it (2026-12-06: the plan at 1M 11.58 -> 10.94 us); not with
    /// `batched_runs`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub paired_runs: bool,
    /// Fathom's water line found directly, not by rounds of trial midpoints: a channel's depth
    /// at a line x reaches t exactly when x is at most a boundary of its level (the largest
    /// double with `fl(L - x) >= 2t`, within a few ulps of `b = fl(L - 2t)`), so the
    /// bisection's verdict at x is `x > T` for the largest b, T, whose b's at or above it cost
    /// more than the budget, wherever x is more than `2^-40 max(|L|, 8)` from T. The levels
    /// are sorted by the first warp (a bitonic sort; until 2026-12-07's second session every
    /// thread counted ranks, which cost what the rounds saved), T is found by four binary
    /// searches a b, and every thread replays the 30 halvings against it, a midpoint near T
    /// tried over every channel as the rounds try it: two block barriers instead of one a
    /// round (10 at 256 threads), the same plan bit for bit. Only with `method: fathom`; name
    /// suffix `_dl`. Opt-in (`Tiles::plan_direct_line`): exact on an H100 both ways but no
    /// faster, with counted ranks (9.22 us at 32k, as the rounds) and slower with the sort
    /// (10.27 us against the rounds' 9.12, 2026-12-07; `bench/results/early-stop-h100-*`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub direct_line: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn one() -> usize {
    1
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

impl PlanSpec {
    /// The most threads a block of a plan that scores the tail may have: at 1,024 (64
    /// registers a thread) the tail's rows spill from host memory, where the oracle kernel's
    /// do not.
    pub const TAIL_MAX_THREADS: usize = 512;

    /// Run-table entries whose segment pointers a thread loads before it stores them, with
    /// [`PlanSpec::batched_runs`]: 8 (at most two round trips a thread up to 2M tokens at 256
    /// threads); 4 in blocks of more than 256 threads, whose threads have fewer registers.
    pub fn run_batch(&self) -> usize {
        if self.threads > 256 {
            4
        } else {
            8
        }
    }

    /// The default plan kernel of a shape.
    pub fn new(head_dim: usize, group: usize, method: PlanMethod, rotate: bool) -> Self {
        PlanSpec {
            head_dim,
            group,
            block: 64,
            segment_words: 512,
            method,
            rotate,
            threads: 256,
            tail: None,
            tail_kv_rows: KvRows::Separate,
            batched_runs: false,
            run_blocks: 1,
            paired_runs: false,
            direct_line: false,
        }
    }

    /// The same plan that also scores the tail of key rows in `placement` laid out as
    /// `kv_rows`.
    pub fn with_tail(self, placement: Placement, kv_rows: KvRows) -> Self {
        PlanSpec {
            tail: Some(placement),
            tail_kv_rows: kv_rows,
            ..self
        }
    }

    /// The tail's rows as the row families see them (with `tail`).
    fn tail_rows(&self) -> Option<RowFields> {
        self.tail.map(|placement| RowFields {
            head_dim: self.head_dim as u32,
            group: self.group as u32,
            threads: self.threads as u32,
            placement,
            kv_rows: self.tail_kv_rows,
        })
    }

    /// The most blocks a (KV head, sequence) may share its run tables among
    /// ([`PlanSpec::run_blocks`]).
    pub const MAX_RUN_BLOCKS: usize = 16;

    /// Run-table entries a thread of one block writes before [`PlanSpec::run_blocks_for`]
    /// shares a head's tables among more blocks.
    pub const RUN_ENTRIES_PER_THREAD: usize = 4;

    /// The most blocks [`PlanSpec::run_blocks_for`] gives a head.
    pub const AUTO_RUN_BLOCKS: usize = 4;

    /// Blocks a (KV head, sequence) for the run tables of `max_seg` segments of `head_dim`
    /// channels at `threads` threads: enough that a thread writes at most
    /// [`PlanSpec::RUN_ENTRIES_PER_THREAD`] entries, at most [`PlanSpec::AUTO_RUN_BLOCKS`].
    /// On the H100 (2026-12-06) 4 blocks at 1M tokens (32 segments, D = 128, 256 threads) took
    /// the HBM step 6.566 / 6.631 -> 6.397 ms and 8 blocks 6.461; at 32k (one block) the
    /// extra blocks, which have no entry, changed fathom(48) nothing and made sparq(32) ~4%
    /// slower, so short sequences keep one.
    pub fn run_blocks_for(max_seg: usize, head_dim: usize, threads: usize) -> usize {
        (max_seg * head_dim)
            .div_ceil(Self::RUN_ENTRIES_PER_THREAD * threads.max(1))
            .clamp(1, Self::AUTO_RUN_BLOCKS)
    }

    /// One thread block per (KV head, sequence), and with `tail` one more per (KV head,
    /// sequence) that scores its tail; `run_blocks` of each along `z`.
    pub fn launch_dims(&self, batch: usize, heads: usize) -> LaunchDims {
        let blocks = if self.tail.is_some() {
            2 * heads
        } else {
            heads
        };
        (
            (
                shape::dim(blocks),
                shape::dim(batch),
                shape::dim(self.run_blocks),
            ),
            (shape::dim(self.threads), 1, 1),
            0,
        )
    }
}

impl Family for PlanSpec {
    const FAMILY: &'static str = "plan";

    fn validate(&self) -> Result<(), SpecError> {
        let PlanSpec {
            head_dim,
            group,
            block,
            segment_words,
            method,
            rotate: _,
            threads,
            tail,
            tail_kv_rows,
            batched_runs,
            run_blocks,
            paired_runs,
            direct_line,
        } = *self;
        if direct_line && !matches!(method, PlanMethod::Fathom) {
            return Err(SpecError::new(
                Self::FAMILY,
                "direct_line",
                direct_line,
                format!(
                    "false with method {} (the direct water line is fathom's)",
                    method.tag()
                ),
            ));
        }
        if paired_runs && batched_runs {
            return Err(SpecError::new(
                Self::FAMILY,
                "paired_runs",
                paired_runs,
                "false with batched_runs (the two ways of writing the run tables do not combine)",
            ));
        }
        if !(1..=Self::MAX_RUN_BLOCKS).contains(&run_blocks) {
            return Err(SpecError::new(
                Self::FAMILY,
                "run_blocks",
                run_blocks,
                format!("1 to {} blocks a KV head", Self::MAX_RUN_BLOCKS),
            ));
        }
        if run_blocks > 1 && batched_runs {
            return Err(SpecError::new(
                Self::FAMILY,
                "run_blocks",
                run_blocks,
                "1 with batched_runs (the two ways of writing the run tables do not combine)",
            ));
        }
        if tail.is_some() && threads > Self::TAIL_MAX_THREADS {
            return Err(SpecError::new(
                Self::FAMILY,
                "threads",
                threads,
                format!(
                    "at most {} with the tail (its rows need the registers)",
                    Self::TAIL_MAX_THREADS
                ),
            ));
        }
        if tail.is_none() && tail_kv_rows != KvRows::Separate {
            return Err(SpecError::new(
                Self::FAMILY,
                "tail_kv_rows",
                tail_kv_rows.as_str(),
                "separate (the default) unless the plan scores the tail",
            ));
        }
        shape::check_head_dim(Self::FAMILY, head_dim)?;
        shape::check_group(Self::FAMILY, group)?;
        shape::check_block(Self::FAMILY, block)?;
        shape::check_segment_words(Self::FAMILY, segment_words, block, false)?;
        match method {
            PlanMethod::Sparq { r } | PlanMethod::Loki { r } if r == 0 || r > head_dim => {
                return Err(SpecError::new(
                    Self::FAMILY,
                    "method.r",
                    r,
                    format!("1 to {head_dim} channels"),
                ));
            }
            PlanMethod::Uniform { t } if !(1..=4).contains(&t) => {
                return Err(SpecError::new(Self::FAMILY, "method.t", t, "1 to 4 planes"));
            }
            _ => {}
        }
        shape::check_threads(Self::FAMILY, threads)
    }

    /// Every field, so distinct specs never share a name (the tests check each one).
    fn kernel_name(&self) -> String {
        let tail = match self.tail {
            Some(placement) => format!(
                "_tail{}{}",
                placement.as_str(),
                self.tail_kv_rows.name_suffix()
            ),
            None => String::new(),
        };
        let runs = match (self.batched_runs, self.run_blocks) {
            (true, _) => "_rb".to_string(),
            (false, 1) => String::new(),
            (false, r) => format!("_rt{r}"),
        };
        let runs = if self.paired_runs {
            format!("{runs}_rp")
        } else {
            runs
        };
        let line = if self.direct_line { "_dl" } else { "" };
        format!(
            "fathom_plan_d{}_g{}_b{}_s{}_{}_{}_t{}{runs}{line}{tail}",
            self.head_dim,
            self.group,
            self.block,
            self.segment_words,
            self.method.tag(),
            if self.rotate { "rot" } else { "raw" },
            self.threads
        )
    }

    fn context(&self) -> tera::Context {
        let mut c = tera::Context::new();
        c.insert("head_dim", &self.head_dim);
        c.insert("group", &self.group);
        c.insert("block", &self.block);
        c.insert("segment_words", &self.segment_words);
        c.insert("method", self.method.template_name());
        c.insert("method_parameter", &self.method.parameter());
        c.insert("rotate", &self.rotate);
        c.insert("threads", &self.threads);
        c.insert("tail", &self.tail.is_some());
        c.insert("run_blocks", &self.run_blocks);
        c.insert("paired_runs", &self.paired_runs);
        c.insert("direct_line", &self.direct_line);
        c.insert(
            "run_batch",
            &if self.batched_runs {
                self.run_batch()
            } else {
                1
            },
        );
        if let Some(rows) = self.tail_rows() {
            // The oracle's row variables (placement, unroll, row_lanes, row_padded,
            // kv_adjacent, row_stride) at the plan's threads.
            c.extend(rows.context());
        }
        c
    }
}
