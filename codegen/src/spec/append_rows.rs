//! The `append_rows` family: a decode step's new K and V row of every (sequence, KV head),
//! copied into the store's bf16 row buffers (SPEC §7; `runtime::store`). It specialises nothing
//! but its block size, and is a template family so that it is compiled and cached by the JIT
//! like every other kernel.

use super::launch::{grid_dim, Launch, SizeError, MAX_GRID_X};
use super::{checks, Family, KvRows, SpecError};
use serde::{Deserialize, Serialize};

/// Spec of the row-append kernel.
///
/// Launch ABI of `extern "C" __global__ void <kernel_name>(...)`, parameters in order
/// (`bh = b*H + h`):
///
/// 1. `unsigned short* const* k_rows`: `[B*H]` pointers to bf16 keys `[capacity][D]` (rows
///    `2*D` apart with `kv_rows: adjacent`); row `n_total[b] - 1` of each gets `keys[bh]`.
/// 2. `unsigned short* const* v_rows`: the same for the values.
/// 3. `const int* n_total`: `[B]`, already counting the new token (at least 1).
/// 4. `const unsigned short* keys`: `[B][H][D]` bf16, the new keys (raw basis).
/// 5. `const unsigned short* values`: `[B][H][D]` bf16.
/// 6. `int n_heads`: `H`.
/// 7. `int head_dim`: `D`.
///
/// Grid `(B*H)` ([`AppendRowsSpec::launch`]), block `threads`, no dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppendRowsSpec {
    /// Threads per block: a multiple of 32, at most 1024; they stride over the `D` channels.
    pub threads: u32,
    /// How the K and V rows are laid out ([`KvRows`]; absent from a serialised spec: separate).
    #[serde(default)]
    pub kv_rows: KvRows,
}

impl Default for AppendRowsSpec {
    /// The 128 threads the store has always launched it with, separate rows.
    fn default() -> Self {
        AppendRowsSpec {
            threads: 128,
            kv_rows: KvRows::Separate,
        }
    }
}

impl AppendRowsSpec {
    /// One block per (sequence, KV head) of `batch` sequences of `kv_heads` heads.
    pub fn launch(&self, batch: u64, kv_heads: u64) -> Result<Launch, SizeError> {
        let rows = grid_dim(
            Self::FAMILY,
            "batch * kv_heads",
            batch.saturating_mul(kv_heads),
            MAX_GRID_X,
        )?;
        Ok(Launch::new([rows, 1, 1], self.threads))
    }
}

impl Family for AppendRowsSpec {
    const FAMILY: &'static str = "append_rows";

    fn validate(&self) -> Result<(), SpecError> {
        checks::threads(Self::FAMILY, self.threads)
    }

    fn kernel_name(&self) -> String {
        format!(
            "fathom_append_rows_t{}{}",
            self.threads,
            self.kv_rows.name_suffix()
        )
    }

    fn context(&self) -> tera::Context {
        let mut c = tera::Context::new();
        c.insert("threads", &self.threads);
        c.insert("kv_adjacent", &(self.kv_rows == KvRows::Adjacent));
        c
    }
}
