//! The `select` family (SPEC §6): per query head the sink (first 4 tokens), the local window (last
//! 32) and the top-k of the tokens between them by score, ties to the lower index; per KV head the
//! sorted union of its G sets and each selected row's position in it.
//!
//! The top-k is a radix select over order-preserving `u32` keys of the fp32 scores (larger score,
//! larger key; `-0.0` and `+0.0` are the same key, so they tie and the lower index wins; the input
//! must be NaN-free). Three digit passes (11, 11 and 10 bits) find the k-th largest key `T` and how
//! many of the tokens equal to `T` to take (the lowest-index ones); a count pass and a write pass
//! compact the selected indices in ascending order; a union pass merges the G sets of each KV head.
//!
//! Cost per query head of `n` tokens: five reads of its `n` scores (three histogram passes, count,
//! write: `20 n` bytes; every pass is spread over `n / (threads * items_per_thread)` blocks), a
//! histogram of 2,048 bins per pass, and for the union `O(G² (k+36) log k)` binary-search steps in
//! one block per KV head. Ten launches per layer, none with host synchronisation. Known headroom:
//! after the first pass the candidates could be compacted so that passes 2 and 3 read only them.

use super::launch::{blocks_for, grid_dim, Launch, SizeError, MAX_GRID_X, MAX_GRID_YZ};
use super::{checks, Family, SpecError};
use serde::{Deserialize, Serialize};

/// Tokens always selected at the start of a sequence (the sink).
pub const SINK: u64 = 4;
/// Tokens always selected at the end of a sequence (the local window).
pub const LOCAL: u64 = 32;
/// Largest `k_max` the union's scratch and the fetched-row buffers are meant for.
pub const MAX_K: u32 = 4096;
/// Words of radix state per query head: threshold, need, decided flag, spare, 2,048 bins.
pub const STATE_WORDS: u64 = 4 + 2048;

/// One entry point of the select template, in launch order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SelectStage {
    /// `_init`: grid `(B*H*G)`.
    Init,
    /// `_hist` with `pass` 0, 1 or 2: grid `(chunks, B*H*G)`.
    Hist(u8),
    /// `_pick` with `pass` 0, 1 or 2: grid `(B*H*G)`.
    Pick(u8),
    /// `_count`: grid `(chunks, B*H*G)`.
    Count,
    /// `_write`: grid `(chunks, B*H*G)`.
    Write,
    /// `_union`: grid `(B*H)`.
    Union,
}

impl SelectStage {
    /// The ten launches of one selection, in order.
    pub const ORDER: [SelectStage; 10] = [
        SelectStage::Init,
        SelectStage::Hist(0),
        SelectStage::Pick(0),
        SelectStage::Hist(1),
        SelectStage::Pick(1),
        SelectStage::Hist(2),
        SelectStage::Pick(2),
        SelectStage::Count,
        SelectStage::Write,
        SelectStage::Union,
    ];

    /// The suffix of the entry point's name.
    pub fn suffix(self) -> &'static str {
        match self {
            SelectStage::Init => "init",
            SelectStage::Hist(_) => "hist",
            SelectStage::Pick(_) => "pick",
            SelectStage::Count => "count",
            SelectStage::Write => "write",
            SelectStage::Union => "union",
        }
    }
}

/// Everything a caller allocates and launches for one selection of a layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectPlan {
    /// The launches in [`SelectStage::ORDER`] order.
    pub launches: Vec<(SelectStage, Launch)>,
    /// `u32` words of the radix state buffer: `B*H*G*STATE_WORDS`.
    pub state_words: u64,
    /// `u32` words of the per-chunk counts: `B*H*G*chunks*2`.
    pub chunk_count_words: u64,
    /// `i32` words of the union's scratch: `B*H*G*(k+37)`.
    pub scratch_words: u64,
    /// Blocks per query head of the chunked stages.
    pub chunks: u64,
    /// `i32` words of `sel` and of `sel_pos`: `B*H*G*(k+36)`.
    pub sel_words: u64,
    /// `i32` words of `uni`: `B*H*(G*k+36)`.
    pub uni_words: u64,
}

/// Spec of the select kernels.
///
/// Layouts (`k` the run-time k, `SC = k + 36`, `UC = G*k + 36`, query head
/// `qh = (b*H + h)*G + g`, KV head `kh = b*H + h`):
/// `sel[qh*SC + j]`, `sel_pos[qh*SC + j]` for `j < sel_count[qh]`; `uni[kh*UC + u]` for
/// `u < uni_count[kh]`. `sel` is ascending; `sel_count[qh] = n` when `n <= 36 + k`, else `36 + k`;
/// `uni` is ascending and deduplicated and `uni[kh*UC + sel_pos[qh*SC + j]] == sel[qh*SC + j]`.
///
/// Entry points, parameters in order (`state`, `chunk_counts`, `scratch` are workspaces sized by
/// [`SelectSpec::plan`]; nothing needs zeroing beforehand):
///
/// - `<name>_init(const int* n_total, int k, unsigned* state, int* sel_count, int num_kv_heads)`
/// - `<name>_hist(const float* scores, int ld_scores, const int* n_total, unsigned* state,
///   int pass, int num_kv_heads)`
/// - `<name>_pick(unsigned* state, int pass)`
/// - `<name>_count(const float* scores, int ld_scores, const int* n_total, const unsigned* state,
///   unsigned* chunk_counts, int num_kv_heads)`
/// - `<name>_write(const float* scores, int ld_scores, const int* n_total, const unsigned* state,
///   const unsigned* chunk_counts, int* sel, int k, int num_kv_heads)`
/// - `<name>_union(const int* sel, const int* sel_count, int* sel_pos, int* uni, int* uni_count,
///   int* scratch, int k)`
///
/// `scores` is `[B][H][G][ld_scores]` fp32 with tokens `0 .. n_total[b]` valid; `n_total` `[B]`;
/// `k` in `0..=k_max` (the kernels clamp it there). `_hist`, `_count` and `_write` must share one
/// grid x (`chunks`). Launch order: `_init`, `_hist(0)`, `_pick(0)`, `_hist(1)`, `_pick(1)`,
/// `_hist(2)`, `_pick(2)`, `_count`, `_write`, `_union`. Block `threads` for all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectSpec {
    /// `G`, query heads per KV head: 1..=8.
    pub group: u32,
    /// Largest run-time `k`: 1..=4096.
    pub k_max: u32,
    /// Threads per block: a multiple of 32, at most 1024.
    pub threads: u32,
    /// Scores per thread per chunk: 1..=32 (chunk = `threads * items_per_thread` tokens).
    pub items_per_thread: u32,
}

impl SelectSpec {
    /// Name of the entry point of `stage`.
    pub fn entry(&self, stage: SelectStage) -> String {
        format!("{}_{}", self.kernel_name(), stage.suffix())
    }

    /// Tokens of one query head per block in the chunked stages.
    pub fn chunk(&self) -> u64 {
        u64::from(self.threads) * u64::from(self.items_per_thread)
    }

    /// Launches and buffer sizes for `batch` sequences of `kv_heads` KV heads, at most
    /// `max_tokens` tokens each (the capacity the scores are laid out for), selecting `k` tokens.
    pub fn plan(
        &self,
        batch: u64,
        kv_heads: u64,
        max_tokens: u64,
        k: u64,
    ) -> Result<SelectPlan, SizeError> {
        if k > u64::from(self.k_max) {
            return Err(SizeError {
                family: Self::FAMILY,
                field: "k",
                got: k.to_string(),
                allowed: format!("0..={} (the spec's k_max)", self.k_max),
            });
        }
        let group = u64::from(self.group);
        let kv = batch.saturating_mul(kv_heads);
        let heads = grid_dim(
            Self::FAMILY,
            "batch * kv_heads * group",
            kv.saturating_mul(group),
            MAX_GRID_YZ,
        )?;
        let kv = grid_dim(Self::FAMILY, "batch * kv_heads", kv, MAX_GRID_X)?;
        let chunks = blocks_for(max_tokens, self.chunk());
        let x = grid_dim(Self::FAMILY, "max_tokens / chunk", chunks, MAX_GRID_X)?;
        let per_head = Launch::new([heads, 1, 1], self.threads);
        let chunked = Launch::new([x, heads, 1], self.threads);
        let launches = SelectStage::ORDER
            .iter()
            .map(|&stage| {
                let launch = match stage {
                    SelectStage::Init | SelectStage::Pick(_) => per_head,
                    SelectStage::Hist(_) | SelectStage::Count | SelectStage::Write => chunked,
                    SelectStage::Union => Launch::new([kv, 1, 1], self.threads),
                };
                (stage, launch)
            })
            .collect();
        let heads = u64::from(heads);
        Ok(SelectPlan {
            launches,
            state_words: heads * STATE_WORDS,
            chunk_count_words: heads * chunks * 2,
            scratch_words: heads * (k + SINK + LOCAL + 1),
            chunks,
            sel_words: heads * (k + SINK + LOCAL),
            uni_words: u64::from(kv) * (group * k + SINK + LOCAL),
        })
    }
}

impl Family for SelectSpec {
    const FAMILY: &'static str = "select";

    fn validate(&self) -> Result<(), SpecError> {
        checks::group(Self::FAMILY, self.group)?;
        if !(1..=MAX_K).contains(&self.k_max) {
            return Err(SpecError::new(
                Self::FAMILY,
                "k_max",
                self.k_max,
                format!("1..={MAX_K}"),
            ));
        }
        checks::threads(Self::FAMILY, self.threads)?;
        if !(1..=32).contains(&self.items_per_thread) {
            return Err(SpecError::new(
                Self::FAMILY,
                "items_per_thread",
                self.items_per_thread,
                "1..=32",
            ));
        }
        Ok(())
    }

    fn kernel_name(&self) -> String {
        format!(
            "fathom_select_g{}_k{}_t{}_i{}",
            self.group, self.k_max, self.threads, self.items_per_thread
        )
    }

    fn context(&self) -> tera::Context {
        let mut context = tera::Context::new();
        context.insert("group", &self.group);
        context.insert("k_max", &self.k_max);
        context.insert("threads", &self.threads);
        context.insert("items_per_thread", &self.items_per_thread);
        context
    }
}
