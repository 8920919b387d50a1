//! The ParisKV kernels' launch ABI on the host (SPEC §12, `templates/ABI.md` "ParisKV"): the
//! sign vector on the device, the argument lists of the index build and of the retrieval
//! launches (six; more with the rerank's many-block top-k), and the sizes of the retrieval's
//! buffers. The key store ([`crate::store`]) builds
//! its index with [`build_args`]; the decoder ([`crate::step`]) and the kernel tests launch the
//! retrieval with [`retrieval_args`], so every caller passes the same arguments in the same
//! order.

use codegen::spec::pariskv::{
    candidate_capacity, padded_dim, signs, subspaces, vote_bins, RerankSelectPlan,
    RerankSelectStep, CENTROIDS, TIERS,
};

use crate::abi;
use crate::gpu::{Arg, DeviceBuffer, Gpu, GpuError};
use crate::launch::{DevicePtr, DevicePtrMut, KernelArgs};

/// Threads per block of the ParisKV kernels the store and the decoder launch (the default
/// kernel set's, `codegen::kernels::kernels_for`).
pub const THREADS: u32 = 256;

/// The sign vector `s` of head dimension `d`'s transform as the kernels take it: its `D_pad`
/// entries ([`padded_dim`]) as fp32 ±1 in device memory, from
/// [`codegen::spec::pariskv::signs`].
pub fn device_signs(gpu: &Gpu, d: usize) -> Result<DeviceBuffer<f32>, GpuError> {
    let s: Vec<f32> = signs(padded_dim(d as u32) as usize)
        .iter()
        .map(|&v| v as f32)
        .collect();
    // Stream-ordered: the decoder uploads it on its first pariskv step.
    gpu.upload_async(&s)
}

/// Addresses of the `[B*H]` pointer tables of an index (`templates/ABI.md`): ids, codes and
/// weights rows in the placement, histograms in device memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexTables {
    /// `[B*H]` pointers to `[capacity][NS]` u8 centroid ids.
    pub ids: u64,
    /// `[B*H]` pointers to `[capacity][D/2]` packed nibbles.
    pub codes: u64,
    /// `[B*H]` pointers to `[capacity][NS]` bf16 weights.
    pub weights: u64,
    /// `[B*H]` pointers to `[NS][256]` u32 histograms (device memory).
    pub hist: u64,
}

/// A 32-bit kernel argument. Callers pass sizes checked against `i32` (tokens) or small ones
/// (heads, `k`, strides of checked sizes).
fn int(value: usize) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// The buffer at `addr` as a parameter the kernel reads; its element type is the parameter's.
fn input<T>(addr: u64) -> DevicePtr<T> {
    DevicePtr::from_addr(addr)
}

/// The buffer at `addr` as a parameter the kernel writes.
fn output<T>(addr: u64) -> DevicePtrMut<T> {
    DevicePtrMut::from_addr(addr)
}

/// The arguments of `pariskv_index`: build tokens `[range_start[b], range_end[b])` of every
/// sequence from the bf16 keys `k_rows` (`[B*H]` pointers); `range_start` may be 0 (from token
/// 0). `status` is `[4]` `{kind, b, h, token}` (1 non-finite key, 2 weight overflow).
pub fn build_args(
    k_rows: u64,
    signs: u64,
    index: IndexTables,
    range_start: u64,
    range_end: u64,
    kv_heads: usize,
    status: u64,
) -> Vec<Arg> {
    abi::pariskv_index::Args {
        k_rows: input(k_rows),
        signs: input(signs),
        ids: input(index.ids),
        codes: input(index.codes),
        weights: input(index.weights),
        hist: input(index.hist),
        range_start: input(range_start),
        range_end: input(range_end),
        num_kv_heads: int(kv_heads),
        status: output(status),
    }
    .args()
}

/// The launches of one retrieval, in stream order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// `pariskv_query`: `q̃`, `||q̄||`, the tiers; zeroes the vote histograms.
    Query,
    /// `pariskv_vote`: votes of the retrievable tokens and their histogram.
    Vote,
    /// `pariskv_topc` `_count`: candidates per chunk.
    TopcCount,
    /// `pariskv_topc` `_write`: the `C` candidates, ascending.
    TopcWrite,
    /// `pariskv_rerank` `_score`: `ŝ` of every candidate.
    RerankScore,
    /// `pariskv_rerank`'s top-k with the sink and window, in the `select` family's layout:
    /// `_select` ([`RerankSelectStep::Select`]), or one launch of the many-block variant
    /// (`PariskvRerankSpec::select_plan`).
    RerankSelect(RerankSelectStep),
}

impl Stage {
    /// Every stage of the default kernels (the one-block top-k), in launch order.
    pub const ALL: [Stage; 6] = [
        Stage::Query,
        Stage::Vote,
        Stage::TopcCount,
        Stage::TopcWrite,
        Stage::RerankScore,
        Stage::RerankSelect(RerankSelectStep::Select),
    ];
}

/// Elements of the retrieval's buffers for `rows = B*H` (sequence, KV head) pairs of head
/// dimension `d`, sequences of at most `max_tokens` tokens and top-C chunk words `chunk_words`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetrievalSizes {
    /// f64 `[B*H][D_pad]`.
    pub q_tilde: usize,
    /// f64 `[B*H]`.
    pub q_norm: usize,
    /// u8 `[B*H][NS][256]`.
    pub tiers: usize,
    /// i32 `[B*H][NS][6]`.
    pub tier_len: usize,
    /// u32 `[B*H][6NS+1]`.
    pub vote_hist: usize,
    /// u16 `[B*H][ld_votes]`.
    pub votes: usize,
    /// Row stride of `votes`.
    pub ld_votes: usize,
    /// u64 top-C chunk counts.
    pub chunk_counts: usize,
    /// i32 `[B*H][ld_cand]`.
    pub cand: usize,
    /// i32 `[B*H]`.
    pub cand_count: usize,
    /// f64 `[B*H][ld_cand]`.
    pub cand_score: usize,
    /// Row stride of `cand` and `cand_score`: at least [`candidate_capacity`].
    pub ld_cand: usize,
    /// u64 words of each of the two slot buffers of the many-block top-k (0 without it).
    pub select_slots: usize,
    /// u32 words of each of the two slot-count buffers of the many-block top-k.
    pub select_counts: usize,
}

impl RetrievalSizes {
    /// The sizes for `rows` (sequence, KV head) pairs; `max_tokens` bounds every sequence.
    pub fn new(rows: usize, head_dim: usize, max_tokens: usize, chunk_words: usize) -> Self {
        let ns = subspaces(head_dim as u32) as usize;
        let ld_votes = max_tokens.max(1);
        let ld_cand = (candidate_capacity(max_tokens as u64) as usize).max(1);
        RetrievalSizes {
            q_tilde: rows * padded_dim(head_dim as u32) as usize,
            q_norm: rows,
            tiers: rows * ns * CENTROIDS as usize,
            tier_len: rows * ns * TIERS as usize,
            vote_hist: rows * vote_bins(head_dim as u32) as usize,
            votes: rows * ld_votes,
            ld_votes,
            chunk_counts: chunk_words,
            cand: rows * ld_cand,
            cand_count: rows,
            cand_score: rows * ld_cand,
            ld_cand,
            select_slots: 0,
            select_counts: 0,
        }
    }

    /// The sizes with the slot buffers that `plan`, the rerank's top-k, needs.
    pub fn with_select(self, plan: &RerankSelectPlan) -> Self {
        let words = |w: u64| usize::try_from(w).expect("workspace sizes fit usize");
        RetrievalSizes {
            select_slots: words(plan.slot_words),
            select_counts: words(plan.count_words),
            ..self
        }
    }

    /// Device bytes of every buffer.
    pub fn bytes(&self) -> usize {
        8 * (self.q_tilde + self.q_norm + self.chunk_counts + self.cand_score)
            + self.tiers
            + 4 * (self.tier_len + self.vote_hist + self.cand + self.cand_count)
            + 2 * self.votes
            + 2 * (8 * self.select_slots + 4 * self.select_counts)
    }

    /// The two slot buffers and the two count buffers of the many-block top-k, when one
    /// allocation of `2 * select_slots` u64 words starts at `slots` and one of
    /// `2 * select_counts` u32 words at `counts`.
    pub fn select_halves(&self, slots: u64, counts: u64) -> ([u64; 2], [u64; 2]) {
        let (s, c) = (8 * self.select_slots as u64, 4 * self.select_counts as u64);
        ([slots, slots + s], [counts, counts + c])
    }
}

/// Addresses of the retrieval's buffers (laid out by [`RetrievalSizes`]) and of its outputs in
/// the `select` family's layout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetrievalBuffers {
    pub q_tilde: u64,
    pub q_norm: u64,
    pub tiers: u64,
    pub tier_len: u64,
    pub vote_hist: u64,
    pub votes: u64,
    pub ld_votes: usize,
    pub chunk_counts: u64,
    pub cand: u64,
    pub cand_count: u64,
    pub cand_score: u64,
    pub ld_cand: usize,
    /// `[B*H*G][k+36]`.
    pub sel: u64,
    pub sel_pos: u64,
    /// `[B*H*G]`.
    pub sel_count: u64,
    /// `[B*H][G*k+36]`.
    pub uni: u64,
    /// `[B*H]`.
    pub uni_count: u64,
    /// The many-block top-k's two slot buffers (u64 words) and two slot-count buffers (u32),
    /// as [`RetrievalSizes::select_halves`] lays them out; unread by the one-block top-k.
    pub select_slots: [u64; 2],
    pub select_counts: [u64; 2],
}

/// What one retrieval reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetrievalInputs {
    /// The index's pointer tables.
    pub index: IndexTables,
    /// Raw queries `[B][H][G][D]` fp32.
    pub queries: u64,
    /// The sign vector `[D]` fp32.
    pub signs: u64,
    /// `[B]` tokens per sequence.
    pub n_total: u64,
    /// `H`.
    pub kv_heads: usize,
    /// The run-time top-k.
    pub k: usize,
}

/// The arguments of one retrieval stage, in the order of `codegen::spec::pariskv`'s ABI
/// ([`crate::abi`]).
pub fn retrieval_args(stage: Stage, a: &RetrievalInputs, w: &RetrievalBuffers) -> Vec<Arg> {
    let num_kv_heads = int(a.kv_heads);
    let (ld_votes, ld_cand) = (int(w.ld_votes), int(w.ld_cand));
    match stage {
        Stage::Query => abi::pariskv_query::Args {
            q: input(a.queries),
            signs: input(a.signs),
            hist: input(a.index.hist),
            n_total: input(a.n_total),
            q_tilde: output(w.q_tilde),
            q_norm: output(w.q_norm),
            tiers: output(w.tiers),
            tier_len: output(w.tier_len),
            vote_hist: output(w.vote_hist),
            num_kv_heads,
        }
        .args(),
        Stage::Vote => abi::pariskv_vote::Args {
            ids: input(a.index.ids),
            tiers: input(w.tiers),
            n_total: input(a.n_total),
            votes: output(w.votes),
            ld_votes,
            vote_hist: output(w.vote_hist),
            num_kv_heads,
        }
        .args(),
        Stage::TopcCount => abi::pariskv_topc::CountArgs {
            votes: input(w.votes),
            ld_votes,
            vote_hist: input(w.vote_hist),
            n_total: input(a.n_total),
            chunk_counts: output(w.chunk_counts),
            num_kv_heads,
        }
        .args(),
        Stage::TopcWrite => abi::pariskv_topc::WriteArgs {
            votes: input(w.votes),
            ld_votes,
            vote_hist: input(w.vote_hist),
            n_total: input(a.n_total),
            chunk_counts: input(w.chunk_counts),
            cand: output(w.cand),
            cand_count: output(w.cand_count),
            ld_cand,
            num_kv_heads,
        }
        .args(),
        Stage::RerankScore => abi::pariskv_rerank::ScoreArgs {
            codes: input(a.index.codes),
            weights: input(a.index.weights),
            q_tilde: input(w.q_tilde),
            q_norm: input(w.q_norm),
            cand: input(w.cand),
            cand_count: input(w.cand_count),
            cand_score: output(w.cand_score),
            ld_cand,
            num_kv_heads,
        }
        .args(),
        Stage::RerankSelect(step) => select_args(step, a, w),
    }
}

/// The arguments of one launch of the rerank's top-k.
fn select_args(step: RerankSelectStep, a: &RetrievalInputs, w: &RetrievalBuffers) -> Vec<Arg> {
    let (num_kv_heads, ld_cand, k) = (int(a.kv_heads), int(w.ld_cand), int(a.k));
    let chunks = step.chunks_read() as i32;
    let slots = |buffer: Option<usize>| buffer.map_or(0, |i| w.select_slots[i]);
    let counts = |buffer: Option<usize>| buffer.map_or(0, |i| w.select_counts[i]);
    match step {
        RerankSelectStep::Select => abi::pariskv_rerank::SelectArgs {
            cand_score: input(w.cand_score),
            cand: input(w.cand),
            cand_count: input(w.cand_count),
            ld_cand,
            n_total: input(a.n_total),
            k,
            sel: output(w.sel),
            sel_pos: output(w.sel_pos),
            sel_count: output(w.sel_count),
            uni: output(w.uni),
            uni_count: output(w.uni_count),
            num_kv_heads,
        }
        .args(),
        RerankSelectStep::Chunk => abi::pariskv_rerank_mb::ChunkArgs {
            cand_score: input(w.cand_score),
            cand_count: input(w.cand_count),
            ld_cand,
            n_total: input(a.n_total),
            k,
            slots: output(slots(step.writes())),
            slot_counts: output(counts(step.writes())),
            num_kv_heads,
        }
        .args(),
        RerankSelectStep::Merge { .. } => abi::pariskv_rerank_mb::MergeArgs {
            slots_in: input(slots(step.reads())),
            counts_in: input(counts(step.reads())),
            chunks_in: chunks,
            n_total: input(a.n_total),
            k,
            slots_out: output(slots(step.writes())),
            counts_out: output(counts(step.writes())),
            num_kv_heads,
        }
        .args(),
        RerankSelectStep::Write { .. } => abi::pariskv_rerank_mb::WriteArgs {
            slots: input(slots(step.reads())),
            slot_counts: input(counts(step.reads())),
            chunks,
            cand: input(w.cand),
            cand_count: input(w.cand_count),
            ld_cand,
            n_total: input(a.n_total),
            k,
            sel: output(w.sel),
            sel_pos: output(w.sel_pos),
            sel_count: output(w.sel_count),
            uni: output(w.uni),
            uni_count: output(w.uni_count),
            num_kv_heads,
        }
        .args(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_abi() {
        // D = 128: NS = 16, 97 vote bins; 2 sequences x 4 heads of at most 5,036 tokens.
        let s = RetrievalSizes::new(8, 128, 5_036, 24);
        assert_eq!(s.q_tilde, 8 * 128);
        assert_eq!(s.tiers, 8 * 16 * 256);
        assert_eq!(s.tier_len, 8 * 16 * 6);
        assert_eq!(s.vote_hist, 8 * 97);
        assert_eq!((s.ld_votes, s.votes), (5_036, 8 * 5_036));
        // N_r = 5000 gives C = ceil(.25 * 5000) = 1250, N_r = 4999 gives 2500: the larger.
        assert_eq!(s.ld_cand, 2_500);
        assert_eq!(s.chunk_counts, 24);
        assert_eq!(
            s.bytes(),
            8 * (1024 + 8 + 24 + 8 * 2_500)
                + 8 * 16 * 256
                + 4 * (768 + 776 + 20_000 + 8)
                + 2 * 40_288
        );
        // The many-block top-k's two slot and two count buffers.
        let plan = RerankSelectPlan {
            launches: Vec::new(),
            slot_words: 100,
            count_words: 10,
        };
        let wide = s.with_select(&plan);
        assert_eq!((wide.select_slots, wide.select_counts), (100, 10));
        assert_eq!(wide.bytes(), s.bytes() + 2 * (800 + 40));
        assert_eq!(wide.select_halves(1000, 5000), ([1000, 1800], [5000, 5040]));
        // An empty context still has one-element rows, so no buffer is empty.
        let empty = RetrievalSizes::new(1, 64, 0, 1);
        assert_eq!((empty.ld_votes, empty.ld_cand), (1, 1));
    }

    #[test]
    fn arguments_are_in_abi_order() {
        let a = RetrievalInputs {
            index: IndexTables {
                ids: 1,
                codes: 2,
                weights: 3,
                hist: 4,
            },
            queries: 5,
            signs: 6,
            n_total: 7,
            kv_heads: 8,
            k: 100,
        };
        let w = RetrievalBuffers {
            q_tilde: 10,
            q_norm: 11,
            tiers: 12,
            tier_len: 13,
            vote_hist: 14,
            votes: 15,
            ld_votes: 16,
            chunk_counts: 17,
            cand: 18,
            cand_count: 19,
            cand_score: 20,
            ld_cand: 21,
            sel: 22,
            sel_pos: 23,
            sel_count: 24,
            uni: 25,
            uni_count: 26,
            select_slots: [27, 28],
            select_counts: [29, 30],
        };
        let flat = |args: Vec<Arg>| -> Vec<u64> {
            args.into_iter()
                .map(|x| match x {
                    Arg::Ptr(v) | Arg::U64(v) => v,
                    Arg::I32(v) => v as u64,
                    other => panic!("unexpected {other:?}"),
                })
                .collect()
        };
        let args = |s| flat(retrieval_args(s, &a, &w));
        assert_eq!(args(Stage::Query), [5, 6, 4, 7, 10, 11, 12, 13, 14, 8]);
        assert_eq!(args(Stage::Vote), [1, 12, 7, 15, 16, 14, 8]);
        assert_eq!(args(Stage::TopcCount), [15, 16, 14, 7, 17, 8]);
        assert_eq!(args(Stage::TopcWrite), [15, 16, 14, 7, 17, 18, 19, 21, 8]);
        assert_eq!(args(Stage::RerankScore), [2, 3, 10, 11, 18, 19, 20, 21, 8]);
        assert_eq!(
            args(Stage::RerankSelect(RerankSelectStep::Select)),
            [20, 18, 19, 21, 7, 100, 22, 23, 24, 25, 26, 8]
        );
        // The many-block top-k: `_chunk` writes buffer 0, merges alternate, `_write` reads the
        // last one written.
        assert_eq!(
            args(Stage::RerankSelect(RerankSelectStep::Chunk)),
            [20, 19, 21, 7, 100, 27, 29, 8]
        );
        let merge = |level| RerankSelectStep::Merge {
            level,
            chunks_in: 40,
        };
        assert_eq!(
            args(Stage::RerankSelect(merge(1))),
            [27, 29, 40, 7, 100, 28, 30, 8]
        );
        assert_eq!(
            args(Stage::RerankSelect(merge(2))),
            [28, 30, 40, 7, 100, 27, 29, 8]
        );
        let write = RerankSelectStep::Write {
            level: 1,
            chunks: 3,
        };
        assert_eq!(
            args(Stage::RerankSelect(write)),
            [28, 30, 3, 18, 19, 21, 7, 100, 22, 23, 24, 25, 26, 8]
        );
        let build = flat(build_args(30, 6, a.index, 0, 31, 8, 32));
        assert_eq!(build, [30, 6, 1, 2, 3, 4, 0, 31, 8, 32]);
    }
}
