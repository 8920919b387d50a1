//! The `attention` family (SPEC §6): exact attention per query head over its own selected set,
//! `o_h = softmax(scale * q_h·K_S) · V_S` in fp32, reading the fetched rows through `sel_pos`.

use super::launch::{grid_dim, Launch, SizeError, MAX_GRID_X};
use super::{checks, Family, SpecError};
use serde::{Deserialize, Serialize};

/// Spec of an attention kernel.
///
/// Launch ABI of `extern "C" __global__ void <kernel_name>(...)`, parameters in order
/// (`SC = k + 36`, `UC = G*k + 36`, query head `qh = (b*H + h)*G + g`, KV head `kh = qh / G`):
///
/// 1. `const unsigned short* k_sel`: `[B*H][UC][D]` bf16, from `fetch`.
/// 2. `const unsigned short* v_sel`: the same for the values.
/// 3. `const int* sel_pos`: `[B*H*G][SC]`, from `select`: row `j` of head `qh` is
///    `k_sel[(kh*UC + sel_pos[qh*SC + j])*D ..]`.
/// 4. `const int* sel_count`: `[B*H*G]`.
/// 5. `const float* q`: raw queries `[B][H][G][D]` fp32.
/// 6. `float scale`: the softmax scale (`1/sqrt(D)` unless the model says otherwise).
/// 7. `float* out`: `[B][H][G][D]` fp32; `out[qh*D + c] = Σ_j p_j v_j[c]` with
///    `p = softmax_j(scale * q·k_j)` over the `sel_count[qh]` rows, computed with the running
///    max subtracted; 0 when `sel_count[qh] == 0`.
/// 8. `int k`: the run-time k given to `select`.
///
/// Grid `(B*H*G)` ([`AttentionSpec::launch`]), block `threads`; static shared memory
/// `threads/32 * (D + 2) * 4` bytes (at most 33 KiB), no dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionSpec {
    /// `D`: 64, 80, 96, 128, 192 or 256.
    pub head_dim: u32,
    /// `G`, query heads per KV head: 1..=16.
    pub group: u32,
    /// Threads per block: a multiple of 32, at most 1024.
    pub threads: u32,
    /// Rows a warp loads before it computes: 1..=8.
    pub rows_per_warp: u32,
}

impl AttentionSpec {
    /// Grid and block for `batch` sequences of `kv_heads` KV heads: one block per query head.
    pub fn launch(&self, batch: u64, kv_heads: u64) -> Result<Launch, SizeError> {
        let heads = batch
            .saturating_mul(kv_heads)
            .saturating_mul(u64::from(self.group));
        let x = grid_dim(Self::FAMILY, "batch * kv_heads * group", heads, MAX_GRID_X)?;
        Ok(Launch::new([x, 1, 1], self.threads))
    }

    /// Static shared memory of one block, in bytes.
    pub fn static_shared_bytes(&self) -> u32 {
        self.threads / 32 * (self.head_dim + 2) * 4
    }
}

impl Family for AttentionSpec {
    const FAMILY: &'static str = "attention";

    fn validate(&self) -> Result<(), SpecError> {
        checks::head_dim(Self::FAMILY, self.head_dim)?;
        checks::group(Self::FAMILY, self.group)?;
        checks::threads(Self::FAMILY, self.threads)?;
        if !(1..=8).contains(&self.rows_per_warp) {
            return Err(SpecError::new(
                Self::FAMILY,
                "rows_per_warp",
                self.rows_per_warp,
                "1..=8",
            ));
        }
        Ok(())
    }

    fn kernel_name(&self) -> String {
        format!(
            "fathom_attention_d{}_g{}_t{}_r{}",
            self.head_dim, self.group, self.threads, self.rows_per_warp
        )
    }

    fn context(&self) -> tera::Context {
        let mut context = tera::Context::new();
        context.insert("head_dim", &self.head_dim);
        context.insert("group", &self.group);
        context.insert("threads", &self.threads);
        context.insert("rows_per_warp", &self.rows_per_warp);
        // A lane's channels are one vector load where D / 32 is 2, 4 or 8; else strided pairs.
        context.insert("strided", &!self.head_dim.is_power_of_two());
        context
    }
}
