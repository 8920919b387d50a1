//! The `attention` family (SPEC §6): exact attention per query head over its own selected set,
//! `o_h = softmax(scale * q_h·K_S) · V_S` in fp32, reading the fetched rows through `sel_pos`,
//! or (`rows: store`) the store's own rows through `sel`.

use super::launch::{grid_dim, Launch, SizeError, MAX_GRID_X};
use super::{checks, Family, KvRows, SpecError};
use serde::{Deserialize, Serialize};

/// Where an attention kernel reads the selected K and V rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionRows {
    /// The union's rows that `fetch` gathered into `k_sel` / `v_sel`, through `sel_pos`.
    #[default]
    Fetched,
    /// The store's own rows (`k_rows` / `v_rows`, in HBM), through the token indices `sel`: no
    /// fetch is needed, and no union for the rows.
    Store,
}

impl AttentionRows {
    /// Both sources, the default first.
    pub const ALL: [AttentionRows; 2] = [AttentionRows::Fetched, AttentionRows::Store];

    /// `fetched` or `store`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttentionRows::Fetched => "fetched",
            AttentionRows::Store => "store",
        }
    }
}

impl std::fmt::Display for AttentionRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A row source that is not one of the names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not where attention reads its rows; allowed: fetched (the default), store")]
pub struct AttentionRowsParseError(pub String);

impl std::str::FromStr for AttentionRows {
    type Err = AttentionRowsParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AttentionRows::ALL
            .into_iter()
            .find(|r| r.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| AttentionRowsParseError(s.to_string()))
    }
}

/// Most blocks per query head ([`AttentionSpec::splits`]).
pub const MAX_SPLITS: u32 = 16;

/// Most blocks per query head whose partials merge in a cluster
/// ([`AttentionSpec::cluster_merge`]): the portable cluster size.
pub const MAX_CLUSTER_SPLITS: u32 = 8;

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
/// With `rows: store` parameters 1-3 are instead
///
/// 1. `const unsigned short* const* k_rows`: `[B*H]` pointers to each KV head's key rows in the
///    store (`kv_rows` gives the row stride, as for `fetch`);
/// 2. `const unsigned short* const* v_rows`: the same for the values;
/// 3. `const int* sel`: `[B*H*G][SC]` token indices, from `select`: row `j` of head `qh` is
///    token `sel[qh*SC + j]` of `k_rows[kh]`.
///
/// With `splits` S > 1 two more follow:
///
/// 9. `float* partials`: `[B*H*G][S][D + 2]` scratch: each split's running max, sum and
///    unnormalised output over its share of the rows (split `s` takes row slots
///    `[s*ceil(SC/S), (s+1)*ceil(SC/S))` below `sel_count[qh]`);
/// 10. `unsigned int* arrivals`: `[B*H*G]` counters, zero before the first launch (the step's
///     workspace is allocated zeroed); every launch leaves them zero. The split that finishes
///     last of its query head merges the S partials in split order and writes `out`.
///
/// Grid `(B*H*G, S)` ([`AttentionSpec::launch`]), block `threads`; static shared memory
/// `threads/32 * (D + 2) * 4` bytes (at most 33 KiB, plus a word with S > 1), no dynamic shared
/// memory. With `cluster_merge` the grid is `(B*H*G*S, 1)` in clusters of `(S, 1, 1)`, the
/// partials stay in shared memory (`(D + 2) * 4` bytes more) and parameters 9-10 are unused.
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
    /// Where the rows are read ([`AttentionRows`]; absent from a serialised spec: fetched).
    #[serde(default)]
    pub rows: AttentionRows,
    /// The store's K/V row layout, for `rows: store` ([`KvRows`]; absent: separate).
    #[serde(default)]
    pub kv_rows: KvRows,
    /// Blocks per query head, S: 1..=16 (absent: 1). With one block a head a batch-1 step
    /// runs `B*H*G` blocks (32 for qwen3-8b) on a GPU of 132 SMs, each over ~550 rows in a
    /// chain of dependent loads; S blocks take a share of the rows each and the last to finish
    /// merges their partial softmaxes (flash-decoding's split, in one launch).
    #[serde(default = "one_split", skip_serializing_if = "is_one_split")]
    pub splits: u32,
    /// Merge the splits' partial softmaxes in a thread-block cluster of the S blocks of a
    /// query head (sm_90; 2 <= S <= 8, the portable cluster size): each block keeps its
    /// partial in shared memory and block 0 of the cluster reads the others' through
    /// distributed shared memory after a cluster barrier, in split order, instead of every
    /// block writing its partial to `partials`, fencing and counting its arrival, and the last
    /// reading them back from L2 (the fence was 9% of the 32k attention's stalls on the H100).
    /// The grid is then `(B*H*G*S, 1)`, block `qh*S + s`; `partials` and `arrivals` stay in
    /// the argument list, unused. Opt-in (`Tiles::attention_cluster_merge`): exact on an H100
    /// but no faster there (2026-12-06: 10.62 us against 10.59 at 32k).
    #[serde(default, skip_serializing_if = "is_false")]
    pub cluster_merge: bool,
    /// Ask L2 for every row of the block's share before the first batch loads (one
    /// `prefetch.global.L2` a 128-byte line of each K and V row, from the positions, right
    /// after `sel_count`): without it a warp's batches of `rows_per_warp` rows are one
    /// dependent HBM round trip each (about five at 32k with 8 splits), with it only the
    /// first waits on HBM and the rest find their lines in L2 or already on their way. The
    /// output is the same bit for bit (a prefetch moves no data into registers). Opt-in
    /// (`Tiles::attention_prefetch_rows`, `step-bench --attention-prefetch`): exact and
    /// sanitizer-clean on an H100 but **slower** (2026-12-07, e76dcd6: the 32k attention 8.70
    /// -> 9.02 us under ncu in the step, HBM 32k fathom(48) 1.318 -> 1.340 ms a step), so the
    /// batches' loads were not waiting on HBM one round trip at a time.
    #[serde(default, skip_serializing_if = "is_false")]
    pub prefetch_rows: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn one_split() -> u32 {
    1
}

fn is_one_split(s: &u32) -> bool {
    *s == 1
}

impl AttentionSpec {
    /// Grid and block for `batch` sequences of `kv_heads` KV heads: `splits` blocks per query
    /// head.
    pub fn launch(&self, batch: u64, kv_heads: u64) -> Result<Launch, SizeError> {
        let heads = batch
            .saturating_mul(kv_heads)
            .saturating_mul(u64::from(self.group));
        if self.cluster_merge {
            let blocks = heads.saturating_mul(u64::from(self.splits));
            let x = grid_dim(
                Self::FAMILY,
                "batch * kv_heads * group * splits",
                blocks,
                MAX_GRID_X,
            )?;
            return Ok(Launch::new([x, 1, 1], self.threads));
        }
        let x = grid_dim(Self::FAMILY, "batch * kv_heads * group", heads, MAX_GRID_X)?;
        Ok(Launch::new([x, self.splits, 1], self.threads))
    }

    /// Static shared memory of one block, in bytes.
    pub fn static_shared_bytes(&self) -> u32 {
        let merge = if self.cluster_merge {
            (self.head_dim + 2) * 4
        } else {
            u32::from(self.splits > 1) * 4
        };
        self.threads / 32 * (self.head_dim + 2) * 4 + merge
    }

    /// `f32` words of the `partials` scratch for `heads` query heads (0 with one split).
    pub fn partial_words(&self, heads: u64) -> u64 {
        if self.splits > 1 {
            heads * u64::from(self.splits) * u64::from(self.head_dim + 2)
        } else {
            0
        }
    }

    /// `u32` arrival counters for `heads` query heads (0 with one split).
    pub fn arrival_words(&self, heads: u64) -> u64 {
        if self.splits > 1 {
            heads
        } else {
            0
        }
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
        if !(1..=MAX_SPLITS).contains(&self.splits) {
            return Err(SpecError::new(
                Self::FAMILY,
                "splits",
                self.splits,
                "1..=16 blocks per query head",
            ));
        }
        if self.cluster_merge && !(2..=MAX_CLUSTER_SPLITS).contains(&self.splits) {
            return Err(SpecError::new(
                Self::FAMILY,
                "cluster_merge",
                format!("true with splits {}", self.splits),
                format!(
                    "splits 2..={MAX_CLUSTER_SPLITS} (a cluster of the query head's blocks, at \
                     most the portable cluster size), or cluster_merge false"
                ),
            ));
        }
        if self.rows == AttentionRows::Fetched && self.kv_rows != KvRows::Separate {
            return Err(SpecError::new(
                Self::FAMILY,
                "kv_rows",
                self.kv_rows,
                "separate with rows: fetched (the fetched rows have one layout; the store's \
                 layout matters only with rows: store)",
            ));
        }
        Ok(())
    }

    /// `_s{S}` with more than one split (`_s{S}_cm` merged in a cluster); `_store` and the K/V layout's suffix when the rows
    /// come from the store; `_pf` with the rows prefetched into L2.
    fn kernel_name(&self) -> String {
        let splits = match (self.splits, self.cluster_merge) {
            (1, false) => String::new(),
            (s, false) => format!("_s{s}"),
            (s, true) => format!("_s{s}_cm"),
        };
        let rows = match self.rows {
            AttentionRows::Fetched => String::new(),
            AttentionRows::Store => format!("_store{}", self.kv_rows.name_suffix()),
        };
        let prefetch = if self.prefetch_rows { "_pf" } else { "" };
        format!(
            "fathom_attention_d{}_g{}_t{}_r{}{splits}{rows}{prefetch}",
            self.head_dim, self.group, self.threads, self.rows_per_warp
        )
    }

    fn context(&self) -> tera::Context {
        let mut context = tera::Context::new();
        context.insert("head_dim", &self.head_dim);
        context.insert("group", &self.group);
        context.insert("threads", &self.threads);
        context.insert("rows_per_warp", &self.rows_per_warp);
        context.insert("splits", &self.splits);
        context.insert("cluster_merge", &self.cluster_merge);
        context.insert("prefetch_rows", &self.prefetch_rows);
        // A lane's channels are one vector load where D / 32 is 2, 4 or 8; else strided pairs.
        context.insert("strided", &!self.head_dim.is_power_of_two());
        context.insert("rows_store", &(self.rows == AttentionRows::Store));
        self.kv_rows.insert_context(&mut context);
        context
    }
}
