//! The ParisKV families (SPEC §12): the index build, the query transform with the centroid tiers,
//! the collision vote, the candidate top-C and the fused rerank with the group's top-k.
//!
//! A ParisKV step of one layer is seven launches, in this order on one stream:
//! `pariskv_query` (also zeroes the vote histograms), `pariskv_vote`, `pariskv_topc` `_count`
//! and `_write`, `pariskv_rerank` `_score` and `_select`; then the shared `fetch` and `attention`
//! of §6 read the `sel`/`uni` arrays that `_select` writes in the `select` family's layout.
//! `pariskv_index` runs when keys enter the store (prefill and appended blocks alike).
//!
//! Every computation that decides which token is selected (rotation, centroid ids, codes,
//! weights, centroid ranking, tiers, votes, `ŝ`) is done in f64 with the operations in the
//! order of `reference::pariskv` and no fused multiply-adds, so the kernels reproduce
//! the reference bit for bit; the bf16 rounding of the weights mirrors the `half` crate's
//! `bf16::from_f64` (it drops the low 32 mantissa bits before rounding).
//!
//! A head dimension that is not a power of two (80, 96, 192) is zero-padded to the next one,
//! `D_pad` ([`padded_dim`]), before the Hadamard transform (§12): the index, the rotated query
//! and every subspace count are those of `D_pad`, while keys and queries stay `D` channels wide.
//!
//! Device layout of one (layer, KV head) index, token-major (see `templates/ABI.md`):
//! ids `[n][NS]` u8, codes `[n][D_pad/2]` u8 (coordinate `c` in the low nibble of byte `c/2` when
//! `c` is even, else the high nibble), weights `[n][NS]` bf16, histograms `[NS][256]` u32, with
//! `NS = D_pad/8` subspaces. Ids, codes and weights live in the spec's placement; the histograms
//! always in device memory (the index kernel adds to them with atomics, which mapped host memory
//! does not support over PCIe).

use super::launch::{blocks_for, grid_dim, Launch, SizeError, MAX_GRID_X, MAX_GRID_YZ};
pub use super::pariskv_select::{
    select_chunk, select_fan_in, select_items, RerankSelect, RerankSelectPlan, RerankSelectStep,
    MAX_SELECT_ITEMS, MIN_SELECT_ITEMS,
};
use super::select::{LOCAL, SINK};
use super::shape::HEAD_DIMS;
use super::{checks, Family, KvRows, Placement, SpecError};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Coordinates per subspace `m`.
pub const SUBSPACE: u32 = 8;
/// Centroids per subspace (sign patterns of 8 coordinates).
pub const CENTROIDS: u32 = 256;
/// Tiers per subspace (`τ` has six mass fractions).
pub const TIERS: u32 = 6;
/// Threads of the query kernel's block: one per centroid.
pub const QUERY_THREADS: u32 = CENTROIDS;
/// Votes per thread per chunk of the `pariskv_topc` kernels.
pub const TOPC_ITEMS: u32 = 16;

/// The Hadamard transform's length `D_pad`: `D` rounded up to a power of two (§12 zero-pads
/// 80 and 96 to 128, 192 to 256).
pub fn padded_dim(head_dim: u32) -> u32 {
    head_dim.next_power_of_two()
}

/// Subspaces `NS = D_pad/8`.
pub fn subspaces(head_dim: u32) -> u32 {
    padded_dim(head_dim) / SUBSPACE
}

/// Bins of a vote histogram: votes lie in `0 ..= 6 NS`.
pub fn vote_bins(head_dim: u32) -> u32 {
    TIERS * subspaces(head_dim) + 1
}

/// Retrievable tokens `N_r` of a sequence of `n_total` tokens (§12: `SINK .. n_total - LOCAL`).
pub fn retrievable(n_total: u64) -> u64 {
    let needed = n_total.saturating_sub(LOCAL);
    needed - needed.min(SINK)
}

/// `ρ` and `β` in hundredths for `N_r` retrievable tokens (§12).
pub fn rho_beta_percent(n_r: u64) -> (u64, u64) {
    match n_r {
        0..=4_999 => (50, 50),
        5_000..=9_999 => (30, 25),
        10_000..=29_999 => (25, 20),
        _ => (20, 10),
    }
}

/// Candidates `C = min(ceil(β N_r), N_r)` of `N_r` retrievable tokens.
pub fn candidate_count(n_r: u64) -> u64 {
    let (_, beta) = rho_beta_percent(n_r);
    (n_r * beta).div_ceil(100).min(n_r)
}

/// The largest `C` of any sequence of at most `max_tokens` tokens: the `ld_cand` the candidate
/// buffers need. `C` is not monotonic in `N_r` (β drops at 5k, 10k and 30k), so this is the
/// maximum over the four β ranges.
pub fn candidate_capacity(max_tokens: u64) -> u64 {
    let top = retrievable(max_tokens);
    [4_999, 9_999, 29_999, u64::MAX]
        .iter()
        .map(|&last| candidate_count(top.min(last)))
        .max()
        .unwrap_or(0)
}

/// Whether ParisKV serves head dimension `head_dim`: one the kernels are specialised for
/// ([`HEAD_DIMS`]), a multiple of 8 for the subspaces of 8 coordinates; one that is not a power
/// of two is zero-padded to [`padded_dim`] for the Hadamard transform.
pub fn supports_head_dim(head_dim: usize) -> bool {
    HEAD_DIMS.contains(&head_dim) && head_dim.is_multiple_of(SUBSPACE as usize)
}

/// The head dimensions ParisKV serves, smallest first: those of [`HEAD_DIMS`] that
/// [`supports_head_dim`] accepts.
pub fn head_dims() -> impl Iterator<Item = usize> {
    HEAD_DIMS.into_iter().filter(|&d| supports_head_dim(d))
}

/// Seed of the ChaCha8 stream that draws the sign vector `s` (the bytes of "PARISKV\0").
pub const SIGN_SEED: u64 = 0x5041_5249_534B_5600;

/// The sign vector `s` of `d` channels (`±1.0`) that the query transform and the index build
/// multiply by before the Hadamard transform: channel `c` is `-1` when the `c`-th `next_u32()`
/// of `ChaCha8Rng::seed_from_u64(`[`SIGN_SEED`]`)` is odd, `+1` otherwise. The same stream
/// serves every layer and head, so `signs(64)` is a prefix of `signs(256)`.
pub fn signs(d: usize) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(SIGN_SEED);
    (0..d)
        .map(|_| if rng.next_u32() & 1 == 1 { -1.0 } else { 1.0 })
        .collect()
}

fn check_head_dim(family: &'static str, head_dim: u32) -> Result<(), SpecError> {
    if supports_head_dim(head_dim as usize) {
        Ok(())
    } else {
        Err(SpecError::new(
            family,
            "head_dim",
            head_dim,
            "64, 80, 96, 128, 192 or 256 (a multiple of 8 for the subspaces of 8 coordinates; 80, \
             96 and 192 are zero-padded to a power of two for the Hadamard transform)",
        ))
    }
}

fn rows_grid(
    family: &'static str,
    batch: u64,
    kv_heads: u64,
    units: u64,
    per_block: u64,
    threads: u32,
) -> Result<Launch, SizeError> {
    let z = grid_dim(family, "batch", batch, MAX_GRID_YZ)?;
    let y = grid_dim(family, "kv_heads", kv_heads, MAX_GRID_YZ)?;
    let x = blocks_for(units, per_block).min(MAX_GRID_X) as u32;
    Ok(Launch::new([x, y, z], threads))
}

/// The variables every ParisKV template reads: `head_dim`, `padded_dim`, `sink`, `local` and
/// `threads`.
fn common_context(head_dim: u32, threads: u32) -> tera::Context {
    let mut context = tera::Context::new();
    context.insert("head_dim", &head_dim);
    context.insert("padded_dim", &padded_dim(head_dim));
    context.insert("sink", &SINK);
    context.insert("local", &LOCAL);
    context.insert("threads", &threads);
    context
}

/// Validation of the families whose only parameters beside the placement are `D` and threads.
fn check_head_dim_and_threads(
    family: &'static str,
    head_dim: u32,
    threads: u32,
) -> Result<(), SpecError> {
    check_head_dim(family, head_dim)?;
    checks::threads(family, threads)
}

/// The [`Family`] impl of a spec whose only fields are `head_dim`, `threads` and `placement`
/// (the vote; the index adds its K/V row layout and has its own impl, which follows this one):
/// it validates, names (`fathom_<family>_d<D>_t<threads>_<placement>`) and parametrises its
/// template.
macro_rules! placed_family {
    ($spec:ident, $family:literal) => {
        impl Family for $spec {
            const FAMILY: &'static str = $family;

            fn validate(&self) -> Result<(), SpecError> {
                check_head_dim_and_threads(Self::FAMILY, self.head_dim, self.threads)
            }

            fn kernel_name(&self) -> String {
                format!(
                    "fathom_{}_d{}_t{}_{}",
                    Self::FAMILY,
                    self.head_dim,
                    self.threads,
                    self.placement.as_str()
                )
            }

            fn context(&self) -> tera::Context {
                let mut context = common_context(self.head_dim, self.threads);
                context.insert("placement", self.placement.as_str());
                context
            }
        }
    };
}

/// Spec of the index build.
///
/// `extern "C" __global__ void <kernel_name>(...)`, parameters in order:
///
/// 1. `const unsigned short* const* k_rows`: `[B*H]` pointers to bf16 keys `[capacity][D]`
///    (raw basis; key rows `2*D` apart with `kv_rows: adjacent`), in `placement`.
/// 2. `const float* signs`: `[D_pad]`, the sign vector `s` (±1), `reference::pariskv::signs(D_pad)`.
/// 3. `unsigned char* const* ids`: `[B*H]` pointers to `[capacity][NS]`, in `placement`.
/// 4. `unsigned char* const* codes`: `[B*H]` pointers to `[capacity][D_pad/2]` (4-byte aligned).
/// 5. `unsigned short* const* weights`: `[B*H]` pointers to bf16 `[capacity][NS]`.
/// 6. `unsigned int* const* hist`: `[B*H]` pointers to `[NS][256]` counts, device memory.
/// 7. `const int* range_start`: `[B]`, may be NULL (0).
/// 8. `const int* range_end`: `[B]`.
/// 9. `int num_kv_heads`: `H`.
/// 10. `int* status`: `[4]` `{kind, b, h, token}`, 0 = ok, 1 = a non-finite key, 2 = a weight
///     that overflows bf16; the first fault wins.
///
/// Tokens `[range_start, range_end)` get their ids, codes and weights written and their ids
/// added to the histograms; a faulty token writes nothing (and the caller must treat the index
/// as unusable). Grid `(x, H, B)` ([`PariskvIndexSpec::launch`]), any `x >= 1`; one warp per
/// token; block `threads`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PariskvIndexSpec {
    /// `D`: 64, 80, 96, 128, 192 or 256.
    pub head_dim: u32,
    /// Threads per block: a multiple of 32, at most 1024.
    pub threads: u32,
    /// Where the keys and the index rows live.
    pub placement: Placement,
    /// How the key rows are laid out ([`KvRows`]; absent from a serialised spec: separate).
    #[serde(default)]
    pub kv_rows: KvRows,
}

impl PariskvIndexSpec {
    /// Launch for `batch` sequences of `kv_heads` KV heads whose longest range is `max_tokens`
    /// tokens: about four tokens per warp.
    pub fn launch(&self, batch: u64, kv_heads: u64, max_tokens: u64) -> Result<Launch, SizeError> {
        let warps = u64::from(self.threads / 32);
        rows_grid(
            Self::FAMILY,
            batch,
            kv_heads,
            max_tokens,
            4 * warps,
            self.threads,
        )
    }
}

impl Family for PariskvIndexSpec {
    const FAMILY: &'static str = "pariskv_index";

    fn validate(&self) -> Result<(), SpecError> {
        check_head_dim_and_threads(Self::FAMILY, self.head_dim, self.threads)
    }

    /// `fathom_pariskv_index_d<D>_t<threads>_<placement>[_kvadj]`.
    fn kernel_name(&self) -> String {
        format!(
            "fathom_{}_d{}_t{}_{}{}",
            Self::FAMILY,
            self.head_dim,
            self.threads,
            self.placement.as_str(),
            self.kv_rows.name_suffix()
        )
    }

    fn context(&self) -> tera::Context {
        let mut context = common_context(self.head_dim, self.threads);
        context.insert("placement", self.placement.as_str());
        self.kv_rows.insert_context(&mut context);
        context
    }
}

/// Spec of the query transform and the centroid tiers, one block of [`QUERY_THREADS`] per
/// (sequence, KV head).
///
/// Parameters in order:
///
/// 1. `const float* q`: raw queries `[B][H][G][D]` fp32.
/// 2. `const float* signs`: `[D_pad]`, as for the index.
/// 3. `const unsigned int* const* hist`: `[B*H]` pointers to the index's `[NS][256]` counts.
/// 4. `const int* n_total`: `[B]`.
/// 5. `double* q_tilde`: `[B][H][D_pad]`, `q̃ = H (s ⊙ q̄/max(||q̄||, 1e-8)) / sqrt(D_pad)`, `q̄`
///    zero-padded to `D_pad`.
/// 6. `double* q_norm`: `[B][H]`, `||q̄||`.
/// 7. `unsigned char* tiers`: `[B][H][NS][256]`, per subspace and centroid id the number of tiers
///    (0..=6) holding it.
/// 8. `int* tier_len`: `[B][H][NS][6]`, the tier lengths (best-ranked prefix lengths).
/// 9. `unsigned int* vote_hist`: `[B][H][6 NS + 1]`, zeroed here for `pariskv_vote`.
/// 10. `int num_kv_heads`: `H`.
///
/// Grid `(H, B, subspace_blocks)` ([`PariskvQuerySpec::launch`]), block [`QUERY_THREADS`].
/// Block `z` of a head ranks subspaces `[z NS / blocks, (z + 1) NS / blocks)`; block 0 writes
/// `q_tilde`, `q_norm` and the zeroed `vote_hist`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PariskvQuerySpec {
    /// `D`: 64, 80, 96, 128, 192 or 256.
    pub head_dim: u32,
    /// `G`, query heads per KV head: 1..=16.
    pub group: u32,
    /// Blocks per (sequence, KV head), each ranking a share of the `NS = D_pad / 8` subspaces:
    /// 1..=NS; 1 when absent from a serialised spec (and then not written), name suffix
    /// `_s{n}` above 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub subspace_blocks: u32,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

impl PariskvQuerySpec {
    /// One block per (sequence, KV head), every subspace in turn.
    pub fn new(head_dim: u32, group: u32) -> Self {
        PariskvQuerySpec {
            head_dim,
            group,
            subspace_blocks: 1,
        }
    }

    /// Subspaces of a query, `NS = D_pad / 8`.
    pub fn subspaces(&self) -> u32 {
        subspaces(self.head_dim)
    }

    /// Launch for `batch` sequences of `kv_heads` KV heads.
    pub fn launch(&self, batch: u64, kv_heads: u64) -> Result<Launch, SizeError> {
        let y = grid_dim(Self::FAMILY, "batch", batch, MAX_GRID_YZ)?;
        let x = grid_dim(Self::FAMILY, "kv_heads", kv_heads, MAX_GRID_X)?;
        Ok(Launch::new([x, y, self.subspace_blocks], QUERY_THREADS))
    }
}

impl Family for PariskvQuerySpec {
    const FAMILY: &'static str = "pariskv_query";

    fn validate(&self) -> Result<(), SpecError> {
        check_head_dim(Self::FAMILY, self.head_dim)?;
        checks::group(Self::FAMILY, self.group)?;
        let subspaces = self.subspaces();
        if !(1..=subspaces).contains(&self.subspace_blocks) {
            return Err(SpecError::new(
                Self::FAMILY,
                "subspace_blocks",
                self.subspace_blocks,
                format!(
                    "1..={subspaces} (the subspaces of a {}-dimensional query)",
                    self.head_dim
                ),
            ));
        }
        Ok(())
    }

    fn kernel_name(&self) -> String {
        let split = if self.subspace_blocks > 1 {
            format!("_s{}", self.subspace_blocks)
        } else {
            String::new()
        };
        format!(
            "fathom_pariskv_query_d{}_g{}{split}",
            self.head_dim, self.group
        )
    }

    fn context(&self) -> tera::Context {
        let mut context = common_context(self.head_dim, QUERY_THREADS);
        context.insert("group", &self.group);
        context.insert("subspace_blocks", &self.subspace_blocks);
        context
    }
}

/// Spec of the collision vote.
///
/// Parameters in order:
///
/// 1. `const unsigned char* const* ids`: the index's `[B*H]` pointers to `[capacity][NS]`.
/// 2. `const unsigned char* tiers`: `[B][H][NS][256]` from `pariskv_query`.
/// 3. `const int* n_total`: `[B]`.
/// 4. `unsigned short* votes`: `[B][H][ld_votes]`; `votes[t] = Σ_b tiers[b][ids[t][b]]` for every
///    retrievable token `t` (`4 .. n_total - 32`); nothing else is written.
/// 5. `int ld_votes`: row stride of `votes` (at least the largest `n_total - 32`).
/// 6. `unsigned int* vote_hist`: `[B][H][6 NS + 1]`, zeroed by `pariskv_query`; every vote is
///    counted into it.
/// 7. `int num_kv_heads`: `H`.
///
/// Grid `(x, H, B)` ([`PariskvVoteSpec::launch`]), any `x >= 1`; block `threads`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PariskvVoteSpec {
    /// `D`: 64, 80, 96, 128, 192 or 256.
    pub head_dim: u32,
    /// Threads per block: a multiple of 32, at most 1024.
    pub threads: u32,
    /// Where the index rows live.
    pub placement: Placement,
}

impl PariskvVoteSpec {
    /// Launch when the longest sequence has `max_tokens` tokens: about eight tokens per thread.
    pub fn launch(&self, batch: u64, kv_heads: u64, max_tokens: u64) -> Result<Launch, SizeError> {
        rows_grid(
            Self::FAMILY,
            batch,
            kv_heads,
            retrievable(max_tokens),
            8 * u64::from(self.threads),
            self.threads,
        )
    }
}

placed_family!(PariskvVoteSpec, "pariskv_vote");

/// Spec of the candidate top-C: the `C` retrievable tokens with the most votes, ties by the
/// lower index, written in ascending token order. Two entry points, launched in this order
/// with the same grid:
///
/// - `<name>_count(const unsigned short* votes, int ld_votes, const unsigned int* vote_hist,
///   const int* n_total, unsigned long long* chunk_counts, int num_kv_heads)`
/// - `<name>_write(const unsigned short* votes, int ld_votes, const unsigned int* vote_hist,
///   const int* n_total, const unsigned long long* chunk_counts, int* cand, int* cand_count,
///   int ld_cand, int num_kv_heads)`
///
/// `chunk_counts` is a workspace of `B*H*chunks` words (no zeroing needed); `cand`
/// `[B][H][ld_cand]` with `ld_cand >= `[`candidate_capacity`]; `cand_count` `[B*H]` gets `C`.
/// Grid `(chunks, H, B)` ([`PariskvTopcSpec::launch`]), chunk `threads * 16` tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PariskvTopcSpec {
    /// `D`: 64, 80, 96, 128, 192 or 256 (it sets the vote range).
    pub head_dim: u32,
    /// Threads per block: a multiple of 32, at most 1024.
    pub threads: u32,
}

impl PariskvTopcSpec {
    /// Name of the entry point that counts each chunk's candidates.
    pub fn count_entry(&self) -> String {
        format!("{}_count", self.kernel_name())
    }

    /// Name of the entry point that writes the candidates.
    pub fn write_entry(&self) -> String {
        format!("{}_write", self.kernel_name())
    }

    /// Tokens per chunk (one block).
    pub fn chunk(&self) -> u64 {
        u64::from(self.threads) * u64::from(TOPC_ITEMS)
    }

    /// The launch of both entry points and the `chunk_counts` words it needs.
    pub fn launch(
        &self,
        batch: u64,
        kv_heads: u64,
        max_tokens: u64,
    ) -> Result<(Launch, u64), SizeError> {
        let launch = rows_grid(
            Self::FAMILY,
            batch,
            kv_heads,
            retrievable(max_tokens) + SINK,
            self.chunk(),
            self.threads,
        )?;
        let words = u64::from(launch.grid[0]) * kv_heads * batch;
        Ok((launch, words))
    }
}

impl Family for PariskvTopcSpec {
    const FAMILY: &'static str = "pariskv_topc";

    fn validate(&self) -> Result<(), SpecError> {
        check_head_dim_and_threads(Self::FAMILY, self.head_dim, self.threads)
    }

    fn kernel_name(&self) -> String {
        format!("fathom_pariskv_topc_d{}_t{}", self.head_dim, self.threads)
    }

    fn context(&self) -> tera::Context {
        let mut context = common_context(self.head_dim, self.threads);
        context.insert("items", &TOPC_ITEMS);
        context
    }
}

/// Spec of the fused rerank and the group's top-k. Two entry points, in this order:
///
/// - `<name>_score(const unsigned char* const* codes, const unsigned short* const* weights,
///   const double* q_tilde, const double* q_norm, const int* cand, const int* cand_count,
///   double* cand_score, int ld_cand, int num_kv_heads)`: `cand_score[i] = ŝ` of candidate
///   `cand[i]`, grid `(x, H, B)` ([`PariskvRerankSpec::launch_score`]), any `x >= 1`.
/// - `<name>_select(const double* cand_score, const int* cand, const int* cand_count,
///   int ld_cand, const int* n_total, int k, int* sel, int* sel_pos, int* sel_count, int* uni,
///   int* uni_count, int num_kv_heads)`: grid `(H, B)` ([`PariskvRerankSpec::launch_select`]).
///
/// `_select` writes the `select` family's outputs (`k` clamped to `0..=k_max`, `SC = k + 36`,
/// `UC = G*k + 36`): when `n_total <= 36 + k` every token; else, for every query head of the
/// group, the sink, the top `min(k, C)` candidates by `ŝ` (ties by the lower index) and the local
/// window, ascending; `sel_pos[j] = j` and `uni` is the same set. Block `threads` for both.
///
/// With [`PariskvRerankSpec::vector_loads`] the parameters and outputs are the same; `_score`
/// then needs every `codes[h]` and `weights[h]` table [`VECTOR_ALIGN`]-byte aligned.
///
/// With [`PariskvRerankSpec::select`] = [`RerankSelect::Multiblock`] `_select` is replaced by
/// the launches of [`PariskvRerankSpec::select_plan`] (`pariskv_select`), with the same outputs:
///
/// - `<name>_chunk(const double* cand_score, const int* cand_count, int ld_cand,
///   const int* n_total, int k, unsigned long long* slots, unsigned int* slot_counts,
///   int num_kv_heads)`: grid `(chunks, H, B)`.
/// - `<name>_merge(const unsigned long long* slots_in, const unsigned int* counts_in,
///   int chunks_in, const int* n_total, int k, unsigned long long* slots_out,
///   unsigned int* counts_out, int num_kv_heads)`: grid `(x, H, B)`.
/// - `<name>_write(const unsigned long long* slots, const unsigned int* slot_counts, int chunks,
///   const int* cand, const int* cand_count, int ld_cand, const int* n_total, int k, int* sel,
///   int* sel_pos, int* sel_count, int* uni, int* uni_count, int num_kv_heads)`: grid `(H, B)`.
///
/// Slot `x` of head `bh` in a buffer of `chunks` slots per head holds `{key, position}` pairs
/// at `slots[((bh*chunks + x)*k + j)*2 ..]`, its count at `slot_counts[bh*chunks + x]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PariskvRerankSpec {
    /// `D`: 64, 80, 96, 128, 192 or 256.
    pub head_dim: u32,
    /// `G`, query heads per KV head: 1..=16.
    pub group: u32,
    /// Largest run-time `k`: 1..=4096.
    pub k_max: u32,
    /// Threads per block: a multiple of 32, at most 1024.
    pub threads: u32,
    /// Where the index rows live.
    pub placement: Placement,
    /// `_score` reads each candidate's code row and weight row whole, in 16-byte loads, with
    /// [`rerank_lanes`] lanes of a warp per candidate (name suffix `_v16`); the code and weight
    /// tables must then be 16-byte aligned (see `templates/ABI.md`). `false` when absent from a
    /// serialised spec.
    #[serde(default)]
    pub vector_loads: bool,
    /// How the top-k is found: one block per (sequence, KV head), or many
    /// ([`RerankSelect::Multiblock`], name suffix `_mb`; needs `threads * 32 >= 2 * k_max`).
    /// [`RerankSelect::Single`] when absent from a serialised spec.
    #[serde(default)]
    pub select: RerankSelect,
    /// `_score` reads its operands from shared memory laid out for it (name suffix `_dt`): the
    /// 16 decoded nibbles in a table (the 8 levels indexed by a run-time nibble are otherwise a
    /// stack array that ptxas stores to local memory again before every read) and `q̃` skewed
    /// by one double every 32 channels (the whole-row lanes of a candidate read channels 32
    /// apart). The same `ŝ`, bit for bit; 13.7x faster at 1M in HBM
    /// on the H100 (2026-12-05). `false` when absent from a serialised spec.
    #[serde(default)]
    pub decode_table: bool,
}

/// Lanes of a warp that score one candidate in the `vector_loads` variant of `_score`: one
/// 16-byte load of the code row each (`D/2` bytes), so `D/32` (2, 4 or 8).
pub fn rerank_lanes(head_dim: u32) -> u32 {
    // The code rows hold the padded dimension's nibbles.
    padded_dim(head_dim) / 32
}

/// The alignment in bytes the `vector_loads` rerank needs of every code and weight table (and so
/// of every row: `D_pad/2` and `D_pad/4` bytes are multiples of 16 at every supported `D`).
pub const VECTOR_ALIGN: u64 = 16;

impl PariskvRerankSpec {
    /// Name of the entry point that scores the candidates.
    pub fn score_entry(&self) -> String {
        format!("{}_score", self.kernel_name())
    }

    /// Name of the entry point that selects the top-k and writes the selection.
    pub fn select_entry(&self) -> String {
        format!("{}_select", self.kernel_name())
    }

    /// Launch of `_score` for at most `max_cand` candidates per KV head: about four per thread.
    pub fn launch_score(
        &self,
        batch: u64,
        kv_heads: u64,
        max_cand: u64,
    ) -> Result<Launch, SizeError> {
        // About four candidates per thread, or per lane group when `D/32` lanes share one.
        let per_block = if self.vector_loads {
            4 * u64::from(self.threads / rerank_lanes(self.head_dim))
        } else {
            4 * u64::from(self.threads)
        };
        rows_grid(
            Self::FAMILY,
            batch,
            kv_heads,
            max_cand,
            per_block,
            self.threads,
        )
    }

    /// Launch of `_select` (and of the many-block variant's `_write`): one block per (sequence,
    /// KV head).
    pub fn launch_select(&self, batch: u64, kv_heads: u64) -> Result<Launch, SizeError> {
        let y = grid_dim(Self::FAMILY, "batch", batch, MAX_GRID_YZ)?;
        let x = grid_dim(Self::FAMILY, "kv_heads", kv_heads, MAX_GRID_X)?;
        Ok(Launch::new([x, y, 1], self.threads))
    }
}

impl Family for PariskvRerankSpec {
    const FAMILY: &'static str = "pariskv_rerank";

    fn validate(&self) -> Result<(), SpecError> {
        check_head_dim(Self::FAMILY, self.head_dim)?;
        checks::group(Self::FAMILY, self.group)?;
        checks::k_max(Self::FAMILY, self.k_max)?;
        checks::threads(Self::FAMILY, self.threads)?;
        let items = (2 * self.k_max).div_ceil(self.threads);
        if self.select == RerankSelect::Multiblock && items > MAX_SELECT_ITEMS {
            return Err(SpecError::new(
                Self::FAMILY,
                "select",
                format!(
                    "multiblock with {} threads and k_max {}",
                    self.threads, self.k_max
                ),
                format!(
                    "single, or multiblock with threads * {MAX_SELECT_ITEMS} >= 2 * k_max (a \
                     block holds two k_max candidates, at most {MAX_SELECT_ITEMS} a thread)"
                ),
            ));
        }
        Ok(())
    }

    fn kernel_name(&self) -> String {
        format!(
            "fathom_pariskv_rerank_d{}_g{}_k{}_t{}_{}{}{}{}",
            self.head_dim,
            self.group,
            self.k_max,
            self.threads,
            self.placement.as_str(),
            if self.vector_loads { "_v16" } else { "" },
            self.select.name_suffix(),
            if self.decode_table { "_dt" } else { "" }
        )
    }

    fn context(&self) -> tera::Context {
        let mut context = common_context(self.head_dim, self.threads);
        context.insert("group", &self.group);
        context.insert("k_max", &self.k_max);
        context.insert("placement", self.placement.as_str());
        context.insert("vector_loads", &self.vector_loads);
        context.insert("decode_table", &self.decode_table);
        context.insert("lanes", &rerank_lanes(self.head_dim));
        context.insert("select", self.select.as_str());
        context.insert("select_items", &select_items(self.threads, self.k_max));
        context
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidate_capacity_covers_every_length() {
        for max in [0u64, 1, 36, 40, 5_035, 5_036, 10_100, 40_000, 200_000] {
            let want = (0..=max)
                .map(|n| candidate_count(retrievable(n)))
                .max()
                .unwrap();
            assert_eq!(candidate_capacity(max), want, "max_tokens {max}");
        }
    }

    #[test]
    fn retrievable_follows_sink_and_window() {
        assert_eq!(retrievable(0), 0);
        assert_eq!(retrievable(36), 0);
        assert_eq!(retrievable(37), 1);
        assert_eq!(retrievable(1000), 964);
    }
}
