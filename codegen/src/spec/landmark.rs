//! The `landmark` family (SPEC §4): the fp16 mean key of every 8-token group, and a scan that gives
//! each stored token its group's `q·mean`. One template, two entry points: `<kernel_name>_build`
//! (run when blocks enter the store) and `<kernel_name>_scan` (run every step, in place of the
//! plane scan).

use super::launch::{
    blocks_for, grid_dim, rows_in_flight, Launch, SizeError, MAX_GRID_X, MAX_GRID_YZ,
};
use super::{row, Family, KvRows, Placement};
use serde::{Deserialize, Serialize};

/// Tokens that share one mean key.
pub const TOKENS_PER_GROUP: u64 = 8;

/// Spec of the landmark kernels.
///
/// `<kernel_name>_build`, parameters in order:
///
/// 1. `const unsigned short* const* k_rows`: `[B*H]` pointers, entry `b*H + h` to the bf16 keys,
///    row-major `[capacity][D]` (16-byte aligned), in `placement`.
/// 2. `unsigned short* const* means`: `[B*H]` pointers, entry `b*H + h` to the fp16 means,
///    row-major `[capacity/8][D]` (16-byte aligned), in `placement`.
/// 3. `const int* range_start`: `[B]`, may be NULL (0).
/// 4. `const int* range_end`: `[B]`.
/// 5. `int num_kv_heads`: `H`.
///
/// It writes `means[j][c] = fp16_rn((Σ_{r=0..8} k[8j + r][c]) * 0.125)`, the sum in fp32 in token
/// order, for every group `j` whose 8 tokens lie in `[range_start, range_end)`. Grid `(x, H, B)`
/// ([`LandmarkSpec::launch_build`]), any `x >= 1`.
///
/// `<kernel_name>_scan`, parameters in order:
///
/// 1. `const unsigned short* const* means`: as above.
/// 2. `const float* q`: raw queries `[B][H][G][D]` fp32 (16-byte aligned).
/// 3. `const int* n_stored`: `[B]`; tokens `0 .. 8*floor(n_stored/8)` are scored.
/// 4. `float* scores`: `[B][H][G][ld_scores]`; `scores[((b*H + h)*G + g)*ld_scores + i] =
///    Σ_c q[b][h][g][c] * means[i/8][c]` (fp32 accumulation).
/// 5. `int ld_scores`.
/// 6. `int num_kv_heads`: `H`.
///
/// Grid `(x, H, B)` ([`LandmarkSpec::launch_scan`]), any `x >= 1`. Both: block `threads`, no
/// dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LandmarkSpec {
    /// `D`: 64, 80, 96, 128, 192 or 256.
    pub head_dim: u32,
    /// `G`, query heads per KV head: 1..=16.
    pub group: u32,
    /// Threads per block: a multiple of 32, at most 1024.
    pub threads: u32,
    /// Where the keys and the means live.
    pub placement: Placement,
    /// How the K and V rows are laid out ([`KvRows`]; absent from a serialised spec: separate).
    #[serde(default)]
    pub kv_rows: KvRows,
}

impl LandmarkSpec {
    /// Name of the entry point that builds the means.
    pub fn build_entry(&self) -> String {
        format!("{}_build", self.kernel_name())
    }

    /// Name of the entry point that scores the stored tokens.
    pub fn scan_entry(&self) -> String {
        format!("{}_scan", self.kernel_name())
    }

    /// Launch of `_build` when the longest range of a sequence is `max_tokens` tokens: one thread
    /// per (group, 8 channels).
    pub fn launch_build(
        &self,
        batch: u64,
        kv_heads: u64,
        max_tokens: u64,
    ) -> Result<Launch, SizeError> {
        let z = grid_dim(Self::FAMILY, "batch", batch, MAX_GRID_YZ)?;
        let y = grid_dim(Self::FAMILY, "kv_heads", kv_heads, MAX_GRID_YZ)?;
        let units = max_tokens / TOKENS_PER_GROUP * u64::from(self.head_dim / 8);
        let x = blocks_for(units, u64::from(self.threads)).min(MAX_GRID_X) as u32;
        Ok(Launch::new([x, y, z], self.threads))
    }

    /// Launch of `_scan` when the largest `n_stored` is `max_stored`: about four loop steps per
    /// block.
    pub fn launch_scan(
        &self,
        batch: u64,
        kv_heads: u64,
        max_stored: u64,
    ) -> Result<Launch, SizeError> {
        let z = grid_dim(Self::FAMILY, "batch", batch, MAX_GRID_YZ)?;
        let y = grid_dim(Self::FAMILY, "kv_heads", kv_heads, MAX_GRID_YZ)?;
        let rows_per_warp = 32 / row::row_lanes(self.head_dim);
        let per_step =
            u64::from(self.threads / 32 * rows_per_warp * rows_in_flight(self.placement));
        let x = blocks_for(max_stored / TOKENS_PER_GROUP, 4 * per_step).min(MAX_GRID_X) as u32;
        Ok(Launch::new([x, y, z], self.threads))
    }
}

row::row_family!(LandmarkSpec, "landmark");
