//! The `oracle` family (SPEC §6): exact scores `q_h·k_i` from the bf16 keys, fp32 accumulation,
//! for the tokens of a per-sequence range. It scores the whole context for the `oracle` method and
//! the tail (tokens `n_stored .. n_total`) for every other method.

use super::launch::{
    blocks_for, grid_dim, rows_in_flight, Launch, SizeError, MAX_GRID_X, MAX_GRID_YZ,
};
use super::{row, Family, KvRows, Placement};
use serde::{Deserialize, Serialize};

/// Spec of an oracle kernel.
///
/// Launch ABI of `extern "C" __global__ void <kernel_name>(...)`, parameters in order:
///
/// 1. `const unsigned short* const* k_rows`: `[B*H]` pointers, entry `b*H + h` to the bf16 keys of
///    that KV head, row-major `[capacity][D]` (16-byte aligned), in `placement`.
/// 2. `const float* q`: raw queries `[B][H][G][D]` fp32 (16-byte aligned).
/// 3. `const int* range_start`: `[B]`, first token to score; may be NULL, meaning 0.
/// 4. `const int* range_end`: `[B]`, one past the last token to score (`<= capacity`,
///    `<= ld_scores`). A sequence with `range_end <= range_start` is skipped.
/// 5. `float* scores`: `[B][H][G][ld_scores]`; `scores[((b*H + h)*G + g)*ld_scores + i] =
///    Σ_c q[b][h][g][c] * k[i][c]` for `i` in the range; nothing else is written.
/// 6. `int ld_scores`: row stride of `scores`, in floats.
/// 7. `int num_kv_heads`: `H`.
///
/// Grid `(x, H, B)` ([`OracleSpec::launch`]); any `x >= 1` is correct (blocks stride over the
/// range). Block `threads`. No dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OracleSpec {
    /// `D`: 64, 80, 96, 128, 192 or 256.
    pub head_dim: u32,
    /// `G`, query heads per KV head: 1..=16.
    pub group: u32,
    /// Threads per block: a multiple of 32, at most 1024.
    pub threads: u32,
    /// Where the key rows live.
    pub placement: Placement,
    /// How the K and V rows are laid out ([`KvRows`]; absent from a serialised spec: separate).
    #[serde(default)]
    pub kv_rows: KvRows,
}

impl OracleSpec {
    /// Rows one block scores per step of its loop.
    fn rows_per_step(&self) -> u64 {
        let rows_per_warp = 32 / row::row_lanes(self.head_dim);
        u64::from(self.threads / 32 * rows_per_warp * rows_in_flight(self.placement))
    }

    /// Grid and block for `batch` sequences of `kv_heads` KV heads whose longest range is
    /// `max_rows` tokens: about four loop steps per block.
    pub fn launch(&self, batch: u64, kv_heads: u64, max_rows: u64) -> Result<Launch, SizeError> {
        let z = grid_dim(Self::FAMILY, "batch", batch, MAX_GRID_YZ)?;
        let y = grid_dim(Self::FAMILY, "kv_heads", kv_heads, MAX_GRID_YZ)?;
        let x = blocks_for(max_rows, 4 * self.rows_per_step()).min(MAX_GRID_X) as u32;
        Ok(Launch::new([x, y, z], self.threads))
    }
}

row::row_family!(OracleSpec, "oracle");
