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
//! one block per KV head. Ten launches per layer, none with host synchronisation.
//!
//! The compacting variant ([`SelectSpec::compact`], template `select_compact.cu.tera`) reads the
//! scores twice instead of five times: after the first histogram pass a `_filter` pass copies
//! every token whose key is at or above the threshold digit (index and key) into a candidate
//! buffer of [`SelectSpec::candidates`] entries per query head, and the later passes read only
//! those. Where they do not fit after pass 0 it tries again after pass 1 (three reads), and
//! where they do not fit then either (masses of equal keys) that query head reads the scores in
//! every pass as the plain select does. The choice is made per query head on the device from the
//! pass's histogram, which counts exactly the tokens the filter would copy. Twelve launches.

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
/// Words of radix state per query head of the compacting variant: threshold, need, decided flag,
/// [`COMPACT_SOURCE_WORD`], tokens at or above the threshold prefix, the candidate counter, two
/// spare, 2,048 bins.
pub const COMPACT_STATE_WORDS: u64 = 8 + 2048;
/// The state word (of [`COMPACT_STATE_WORDS`]) that says where a query head's passes read their
/// tokens: 0 the scores, `1 + p` the candidates that `_filter(p)` compacted.
pub const COMPACT_SOURCE_WORD: u64 = 3;
/// Candidates per query head of the compacting variant, per unit of `k_max`: room for the
/// threshold digit's bin to hold seven times as many tokens as the top-k itself.
pub const CANDIDATES_PER_K: u64 = 8;

/// One entry point of the select template, in launch order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SelectStage {
    /// `_init`: grid `(B*H*G)`.
    Init,
    /// `_hist` with `pass` 0, 1 or 2: grid `(chunks, B*H*G)`.
    Hist(u8),
    /// `_pick` with `pass` 0, 1 or 2: grid `(B*H*G)`.
    Pick(u8),
    /// `_filter` with `pass` 0 or 1 (compacting variant only): grid `(chunks, B*H*G)`.
    Filter(u8),
    /// `_count`: grid `(chunks, B*H*G)`.
    Count,
    /// `_write`: grid `(chunks, B*H*G)`.
    Write,
    /// `_union`: grid `(B*H)`.
    Union,
}

impl SelectStage {
    /// The ten launches of one selection of the plain variant, in order.
    pub const ORDER: [SelectStage; 10] = SelectStage::order(false);

    /// The twelve launches of one selection of the compacting variant, in order: a `_filter`
    /// after the first two picks.
    pub const COMPACT_ORDER: [SelectStage; 12] = SelectStage::order(true);

    /// `_init`, a `_hist` and a `_pick` per digit pass (in the compacting variant a `_filter`
    /// after the picks of passes 0 and 1), then `_count`, `_write` and `_union`: both orders
    /// are this one sequence, so they cannot drift apart. `N` must be its length (checked when
    /// the constants are evaluated).
    const fn order<const N: usize>(compact: bool) -> [SelectStage; N] {
        let mut order = [SelectStage::Init; N];
        let mut i = 1;
        let mut pass = 0;
        while pass < 3 {
            order[i] = SelectStage::Hist(pass);
            order[i + 1] = SelectStage::Pick(pass);
            i += 2;
            if compact && pass < 2 {
                order[i] = SelectStage::Filter(pass);
                i += 1;
            }
            pass += 1;
        }
        order[i] = SelectStage::Count;
        order[i + 1] = SelectStage::Write;
        order[i + 2] = SelectStage::Union;
        assert!(i + 3 == N, "the length of a select order");
        order
    }

    /// The `pass` argument of the stages that take one.
    pub fn pass(self) -> Option<u8> {
        match self {
            SelectStage::Hist(p) | SelectStage::Pick(p) | SelectStage::Filter(p) => Some(p),
            _ => None,
        }
    }

    /// The suffix of the entry point's name.
    pub fn suffix(self) -> &'static str {
        match self {
            SelectStage::Init => "init",
            SelectStage::Hist(_) => "hist",
            SelectStage::Pick(_) => "pick",
            SelectStage::Filter(_) => "filter",
            SelectStage::Count => "count",
            SelectStage::Write => "write",
            SelectStage::Union => "union",
        }
    }
}

/// One parameter of a select entry point, for callers that build argument lists from
/// [`SelectSpec::params`] instead of spelling each stage's list out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SelectParam {
    /// `const float* scores`.
    Scores,
    /// `int ld_scores`.
    LdScores,
    /// `const int* n_total`.
    NTotal,
    /// `int k`, the run-time k.
    K,
    /// `int pass`: the stage's [`SelectStage::pass`].
    Pass,
    /// `int num_kv_heads`.
    NumKvHeads,
    /// `unsigned* state`, the radix state workspace.
    State,
    /// `unsigned* chunk_counts`, the per-chunk counts workspace.
    ChunkCounts,
    /// `uint2* candidates` (compacting variant), the candidate workspace.
    Candidates,
    /// `unsigned* candidate_runs` (compacting variant), each chunk's run of candidates.
    CandidateRuns,
    /// `int* scratch`, the union's workspace.
    Scratch,
    /// `int* sel`.
    Sel,
    /// `int* sel_pos`.
    SelPos,
    /// `int* sel_count`.
    SelCount,
    /// `int* uni`.
    Uni,
    /// `int* uni_count`.
    UniCount,
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
    /// `u32` words of the candidates (compacting variant; 0 for the plain one): per query head
    /// [`SelectSpec::candidates`] `(index, key)` pairs, `B*H*G*candidates*2`.
    pub candidate_words: u64,
    /// `u32` words of the per-chunk candidate runs (compacting variant; 0 for the plain one):
    /// `B*H*G*chunks*2`.
    pub candidate_run_words: u64,
    /// Blocks per query head of the chunked stages.
    pub chunks: u64,
    /// `i32` words of `sel` and of `sel_pos`: `B*H*G*(k+36)`.
    pub sel_words: u64,
    /// `i32` words of `uni`: `B*H*(G*k+36)`.
    pub uni_words: u64,
}

/// The compacting variant's parameters of a chunked entry point: the plain variant's, with
/// the candidates and their runs after the state. `M` must be `N + 2` (checked when the
/// constants are evaluated).
const fn with_candidates<const N: usize, const M: usize>(
    plain: [SelectParam; N],
) -> [SelectParam; M] {
    let mut out = [SelectParam::Candidates; M];
    let (mut i, mut o) = (0, 0);
    while i < N {
        out[o] = plain[i];
        o += 1;
        if matches!(plain[i], SelectParam::State) {
            out[o] = SelectParam::Candidates;
            out[o + 1] = SelectParam::CandidateRuns;
            o += 2;
        }
        i += 1;
    }
    assert!(
        o == M,
        "a compact parameter list is the plain one and two more"
    );
    out
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
///
/// The compacting variant (`compact`, name suffix `_compact`) has the same outputs and two more
/// workspaces, `candidates` (`uint2` `(index, key)` pairs, [`SelectSpec::candidates`] per query
/// head) and `candidate_runs` (`{offset, count}` per query head and chunk); its state has
/// [`COMPACT_STATE_WORDS`] words per query head. Entry points:
///
/// - `<name>_init`, `<name>_pick`, `<name>_union`: as above;
/// - `<name>_hist(const float* scores, int ld_scores, const int* n_total, unsigned* state,
///   const uint2* candidates, const unsigned* candidate_runs, int pass, int num_kv_heads)`
/// - `<name>_filter(const float* scores, int ld_scores, const int* n_total, unsigned* state,
///   uint2* candidates, unsigned* candidate_runs, int pass, int num_kv_heads)`
/// - `<name>_count(const float* scores, int ld_scores, const int* n_total, const unsigned* state,
///   const uint2* candidates, const unsigned* candidate_runs, unsigned* chunk_counts,
///   int num_kv_heads)`
/// - `<name>_write(const float* scores, int ld_scores, const int* n_total, const unsigned* state,
///   const uint2* candidates, const unsigned* candidate_runs, const unsigned* chunk_counts,
///   int* sel, int k, int num_kv_heads)`
///
/// Launch order: `_init`, `_hist(0)`, `_pick(0)`, `_filter(0)`, `_hist(1)`, `_pick(1)`,
/// `_filter(1)`, `_hist(2)`, `_pick(2)`, `_count`, `_write`, `_union`
/// ([`SelectStage::COMPACT_ORDER`]); `_filter` shares the chunked grid. [`SelectSpec::params`]
/// gives every entry point's list as data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectSpec {
    /// `G`, query heads per KV head: 1..=16.
    pub group: u32,
    /// Largest run-time `k`: 1..=4096.
    pub k_max: u32,
    /// Threads per block: a multiple of 32, at most 1024.
    pub threads: u32,
    /// Scores per thread per chunk: 1..=32 (chunk = `threads * items_per_thread` tokens).
    pub items_per_thread: u32,
    /// The compacting variant (two reads of the scores instead of five); `false` when absent
    /// from a serialised spec.
    #[serde(default)]
    pub compact: bool,
}

impl SelectSpec {
    /// The launches of one selection, in order: [`SelectStage::ORDER`], or
    /// [`SelectStage::COMPACT_ORDER`] for the compacting variant.
    pub fn stages(&self) -> &'static [SelectStage] {
        if self.compact {
            &SelectStage::COMPACT_ORDER
        } else {
            &SelectStage::ORDER
        }
    }

    /// Candidates per query head of the compacting variant (`CANDIDATES_PER_K * k_max`); 0 for
    /// the plain one.
    pub fn candidates(&self) -> u64 {
        if self.compact {
            CANDIDATES_PER_K * u64::from(self.k_max)
        } else {
            0
        }
    }

    /// Words of radix state per query head.
    pub fn state_words_per_head(&self) -> u64 {
        if self.compact {
            COMPACT_STATE_WORDS
        } else {
            STATE_WORDS
        }
    }

    /// The parameters of the entry point of `stage`, in order (see the type's docs).
    pub fn params(&self, stage: SelectStage) -> &'static [SelectParam] {
        use SelectParam::*;
        const HIST: [SelectParam; 6] = [Scores, LdScores, NTotal, State, Pass, NumKvHeads];
        const COUNT: [SelectParam; 6] = [Scores, LdScores, NTotal, State, ChunkCounts, NumKvHeads];
        const WRITE: [SelectParam; 8] = [
            Scores,
            LdScores,
            NTotal,
            State,
            ChunkCounts,
            Sel,
            K,
            NumKvHeads,
        ];
        const COMPACT_HIST: [SelectParam; 8] = with_candidates(HIST);
        const COMPACT_COUNT: [SelectParam; 8] = with_candidates(COUNT);
        const COMPACT_WRITE: [SelectParam; 10] = with_candidates(WRITE);
        match (stage, self.compact) {
            (SelectStage::Init, _) => &[NTotal, K, State, SelCount, NumKvHeads],
            (SelectStage::Pick(_), _) => &[State, Pass],
            (SelectStage::Union, _) => &[Sel, SelCount, SelPos, Uni, UniCount, Scratch, K],
            (SelectStage::Hist(_), false) => &HIST,
            (SelectStage::Count, false) => &COUNT,
            (SelectStage::Write, false) => &WRITE,
            (SelectStage::Hist(_) | SelectStage::Filter(_), _) => &COMPACT_HIST,
            (SelectStage::Count, true) => &COMPACT_COUNT,
            (SelectStage::Write, true) => &COMPACT_WRITE,
        }
    }

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
        let launches = self
            .stages()
            .iter()
            .map(|&stage| {
                let launch = match stage {
                    SelectStage::Init | SelectStage::Pick(_) => per_head,
                    SelectStage::Hist(_)
                    | SelectStage::Filter(_)
                    | SelectStage::Count
                    | SelectStage::Write => chunked,
                    SelectStage::Union => Launch::new([kv, 1, 1], self.threads),
                };
                (stage, launch)
            })
            .collect();
        let heads = u64::from(heads);
        Ok(SelectPlan {
            launches,
            state_words: heads * self.state_words_per_head(),
            chunk_count_words: heads * chunks * 2,
            candidate_words: heads * self.candidates() * 2,
            candidate_run_words: if self.compact { heads * chunks * 2 } else { 0 },
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
        checks::k_max(Self::FAMILY, self.k_max)?;
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
            "fathom_select_g{}_k{}_t{}_i{}{}",
            self.group,
            self.k_max,
            self.threads,
            self.items_per_thread,
            if self.compact { "_compact" } else { "" }
        )
    }

    /// The compacting variant is its own template (sharing the helpers and the union through
    /// includes), so that neither variant's passes are a maze of conditionals.
    fn template(&self) -> String {
        if self.compact {
            "select_compact.cu.tera".into()
        } else {
            "select.cu.tera".into()
        }
    }

    fn context(&self) -> tera::Context {
        let mut context = tera::Context::new();
        context.insert("group", &self.group);
        context.insert("k_max", &self.k_max);
        context.insert("threads", &self.threads);
        context.insert("items_per_thread", &self.items_per_thread);
        if self.compact {
            context.insert("candidates", &self.candidates());
        }
        context
    }
}
