//! The `fetch` family (SPEC §6, §7): the bf16 K and V rows of each KV head's union, gathered from
//! HBM or mapped host memory into compact `k_sel` / `v_sel` buffers in HBM.

use super::launch::{
    blocks_for, grid_dim, rows_in_flight, Launch, SizeError, MAX_GRID_X, MAX_GRID_YZ,
};
use super::select::{LOCAL, SINK};
use super::{row, Family, KvRows, Placement};
use serde::{Deserialize, Serialize};

/// Spec of a fetch kernel.
///
/// Launch ABI of `extern "C" __global__ void <kernel_name>(...)`, parameters in order
/// (`UC = G*k + 36`, `kh = b*H + h`):
///
/// 1. `const unsigned short* const* k_rows`: `[B*H]` pointers to bf16 keys `[capacity][D]`
///    (16-byte aligned), in `placement`.
/// 2. `const unsigned short* const* v_rows`: the same for the values.
/// 3. `const int* uni`: `[B*H][UC]`, the union of `select` (token indices `< capacity`).
/// 4. `const int* uni_count`: `[B*H]`.
/// 5. `unsigned short* k_sel`: `[B*H][UC][D]` bf16 (16-byte aligned);
///    `k_sel[(kh*UC + u)*D + c] = k_rows[kh][uni[kh*UC + u]*D + c]` for `u < uni_count[kh]`.
/// 6. `unsigned short* v_sel`: the same for the values.
/// 7. `int k`: the run-time k given to `select` (fixes `UC`).
/// 8. `int num_kv_heads`: `H`.
///
/// Grid `(x, H, B)` ([`FetchSpec::launch`]), any `x >= 1`; block `threads`; no dynamic shared
/// memory. One warp moves a K and V row pair (two pairs at D = 64) with 16-byte loads; where
/// `D` is not a power of two, `32 / gcd(D/4, 32)` pairs as one flat list of their units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchSpec {
    /// `D`: 64, 80, 96, 128, 192 or 256.
    pub head_dim: u32,
    /// `G`, query heads per KV head: 1..=16 (fixes the union's capacity `G*k + 36`).
    pub group: u32,
    /// Threads per block: a multiple of 32, at most 1024.
    pub threads: u32,
    /// Where the K and V rows live.
    pub placement: Placement,
    /// How the K and V rows are laid out ([`KvRows`]; absent from a serialised spec: separate).
    #[serde(default)]
    pub kv_rows: KvRows,
}

impl FetchSpec {
    /// Grid and block for `batch` sequences of `kv_heads` KV heads and run-time `k`: enough blocks
    /// that each moves one step of rows of a full union.
    pub fn launch(&self, batch: u64, kv_heads: u64, k: u64) -> Result<Launch, SizeError> {
        let z = grid_dim(Self::FAMILY, "batch", batch, MAX_GRID_YZ)?;
        let y = grid_dim(Self::FAMILY, "kv_heads", kv_heads, MAX_GRID_YZ)?;
        // As the template: 32 / gcd(units, 32) row pairs of `units` 16-byte units per warp.
        let units_per_row = 2 * self.head_dim / 8;
        let rows_per_warp = 32 / (units_per_row & units_per_row.wrapping_neg()).min(32);
        let per_step =
            u64::from(self.threads / 32 * rows_per_warp * rows_in_flight(self.placement));
        let union_cap = u64::from(self.group)
            .saturating_mul(k)
            .saturating_add(SINK + LOCAL);
        let x = blocks_for(union_cap, per_step).min(MAX_GRID_X) as u32;
        Ok(Launch::new([x, y, z], self.threads))
    }
}

row::row_family!(FetchSpec, "fetch");
