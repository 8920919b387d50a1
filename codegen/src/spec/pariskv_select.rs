//! The rerank's top-k over many blocks ([`RerankSelect::Multiblock`], name suffix `_mb`,
//! template `pariskv_rerank_select_mb.cuh.tera`): the outputs of the one-block `_select`, bit
//! for bit, from launches whose grids grow with the candidates.
//!
//! Candidates rank by `ŝ` (through the order-preserving u64 key of the f64, `-0.0` as `+0.0`),
//! ties by the lower position in the candidate list (which is in token order). A candidate of a
//! head's top `m` is in the top `m` of every subset that holds it (fewer than `m` candidates beat
//! it there too), so the top `k` can be reduced chunk by chunk:
//!
//! - `_chunk`: block `x` of a head holds candidates `[x*CHUNK, (x+1)*CHUNK)` in registers
//!   ([`select_items`] a thread), finds their top `min(k, count)` with a radix select over the
//!   keys (8 bits a pass, stopping once the threshold's digit is taken whole), and writes them
//!   in list order to its slot.
//! - `_merge` (only when a head has more slots than one block holds): block `x` takes the top `k`
//!   of [`select_fan_in`] consecutive slots into slot `x` of the next level.
//! - `_write`: one block per head takes the top `min(k, C)` of the last level's slots (at most
//!   `CHUNK` entries) and writes the `select` family's outputs exactly as `_select` does.
//!
//! A slot holds at most `k` entries `{key, position}` (two u64 words each); the slots of a level
//! live in one of two buffers, `_chunk` writing buffer 0 and each `_merge` the other one of the
//! one it reads. Every launch writes every slot count it owns, so nothing needs zeroing.

use serde::{Deserialize, Serialize};

use super::launch::{blocks_for, grid_dim, Launch, SizeError, MAX_GRID_X, MAX_GRID_YZ};
use super::pariskv::PariskvRerankSpec;
use super::Family;

/// How `pariskv_rerank` finds the top-k of its candidates. Both give the same outputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RerankSelect {
    /// `_select`: one block per (sequence, KV head), eight radix passes over all `C` scores.
    #[default]
    Single,
    /// `_chunk`, `_merge` (as many as needed) and `_write`: many blocks per (sequence, KV head)
    /// (name suffix `_mb`).
    Multiblock,
}

impl RerankSelect {
    /// The name as specs and tuning records spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            RerankSelect::Single => "single",
            RerankSelect::Multiblock => "multiblock",
        }
    }

    /// The suffix of the kernel name: none for the one-block select, whose names predate it.
    pub(crate) fn name_suffix(self) -> &'static str {
        match self {
            RerankSelect::Single => "",
            RerankSelect::Multiblock => "_mb",
        }
    }
}

/// The most candidates a thread of the many-block select holds (in registers: a u64 key and a
/// u32 position each).
pub const MAX_SELECT_ITEMS: u32 = 32;
/// The fewest candidates a thread of the many-block select holds.
pub const MIN_SELECT_ITEMS: u32 = 4;

/// Candidates per thread of the many-block select: the smallest power of two with
/// `threads * items >= 2 * k_max`, at least [`MIN_SELECT_ITEMS`]. Two `k_max` per block keep
/// every merge at two slots or more per block, so a level always has fewer slots than the one
/// before; a spec whose items would exceed [`MAX_SELECT_ITEMS`] does not validate.
pub fn select_items(threads: u32, k_max: u32) -> u32 {
    (2 * k_max)
        .div_ceil(threads.max(1))
        .next_power_of_two()
        .max(MIN_SELECT_ITEMS)
}

/// Candidates one block of the many-block select holds: `threads * `[`select_items`].
pub fn select_chunk(threads: u32, k_max: u32) -> u32 {
    threads * select_items(threads, k_max)
}

/// Slots one `_merge` or `_write` block reads for the run-time `k` (clamped to `1..=k_max`):
/// `CHUNK / k`, at least 2.
pub fn select_fan_in(threads: u32, k_max: u32, k: u64) -> u64 {
    let k = k.clamp(1, u64::from(k_max));
    u64::from(select_chunk(threads, k_max)) / k
}

/// One launch of a rerank's top-k.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RerankSelectStep {
    /// `_select`, the one-block select: grid `(H, B)`.
    Select,
    /// `_chunk`: grid `(chunks, H, B)`; writes slot buffer 0.
    Chunk,
    /// `_merge` number `level` (1, 2, ...): reads the `chunks_in` slots per head of buffer
    /// `(level - 1) % 2`, writes buffer `level % 2`; grid `(ceil(chunks_in / fan_in), H, B)`.
    Merge { level: u32, chunks_in: u32 },
    /// `_write` after `level` merges: reads the `chunks` slots per head of buffer `level % 2`;
    /// grid `(H, B)`.
    Write { level: u32, chunks: u32 },
}

impl RerankSelectStep {
    /// The entry point's suffix.
    pub fn suffix(self) -> &'static str {
        match self {
            RerankSelectStep::Select => "select",
            RerankSelectStep::Chunk => "chunk",
            RerankSelectStep::Merge { .. } => "merge",
            RerankSelectStep::Write { .. } => "write",
        }
    }

    /// The slot buffer (0 or 1) the launch reads, if any.
    pub fn reads(self) -> Option<usize> {
        match self {
            RerankSelectStep::Merge { level, .. } => Some((level as usize + 1) % 2),
            RerankSelectStep::Write { level, .. } => Some(level as usize % 2),
            _ => None,
        }
    }

    /// The slot buffer (0 or 1) the launch writes, if any.
    pub fn writes(self) -> Option<usize> {
        match self {
            RerankSelectStep::Chunk => Some(0),
            RerankSelectStep::Merge { level, .. } => Some(level as usize % 2),
            _ => None,
        }
    }

    /// Slots per head of the buffer the launch reads (its `chunks` argument), 0 if none.
    pub fn chunks_read(self) -> u32 {
        match self {
            RerankSelectStep::Merge { chunks_in, .. } => chunks_in,
            RerankSelectStep::Write { chunks, .. } => chunks,
            _ => 0,
        }
    }
}

/// The launches of a rerank's top-k and the workspace they need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RerankSelectPlan {
    /// In launch order.
    pub launches: Vec<(RerankSelectStep, Launch)>,
    /// u64 words of each of the two slot buffers (0 for the one-block select).
    pub slot_words: u64,
    /// u32 words of each of the two slot-count buffers (0 for the one-block select).
    pub count_words: u64,
}

impl PariskvRerankSpec {
    /// Name of the entry point of `step`.
    pub fn select_step_entry(&self, step: RerankSelectStep) -> String {
        format!("{}_{}", self.kernel_name(), step.suffix())
    }

    /// One step of each entry point of the top-k, in launch order (the sizes in them are
    /// placeholders: [`PariskvRerankSpec::select_plan`] gives a run's steps).
    pub fn select_step_kinds(&self) -> Vec<RerankSelectStep> {
        match self.select {
            RerankSelect::Single => vec![RerankSelectStep::Select],
            RerankSelect::Multiblock => vec![
                RerankSelectStep::Chunk,
                RerankSelectStep::Merge {
                    level: 1,
                    chunks_in: 0,
                },
                RerankSelectStep::Write {
                    level: 0,
                    chunks: 0,
                },
            ],
        }
    }

    /// The entry points of the top-k, in launch order (each once).
    pub fn select_entries(&self) -> Vec<String> {
        self.select_step_kinds()
            .into_iter()
            .map(|s| self.select_step_entry(s))
            .collect()
    }

    /// The top-k's launches for `batch` sequences of `kv_heads` KV heads with at most
    /// `max_cand` candidates each (the `ld_cand` of the buffers) and the run-time `k`.
    pub fn select_plan(
        &self,
        batch: u64,
        kv_heads: u64,
        max_cand: u64,
        k: u64,
    ) -> Result<RerankSelectPlan, SizeError> {
        let by_head = self.launch_select(batch, kv_heads)?;
        if self.select == RerankSelect::Single {
            return Ok(RerankSelectPlan {
                launches: vec![(RerankSelectStep::Select, by_head)],
                slot_words: 0,
                count_words: 0,
            });
        }
        let family = Self::FAMILY;
        let z = grid_dim(family, "batch", batch, MAX_GRID_YZ)?;
        let y = grid_dim(family, "kv_heads", kv_heads, MAX_GRID_YZ)?;
        let chunk = u64::from(select_chunk(self.threads, self.k_max));
        let fan_in = select_fan_in(self.threads, self.k_max, k);
        let kk = k.min(u64::from(self.k_max));
        let slots = blocks_for(max_cand, chunk);
        let x = |blocks: u64| grid_dim(family, "max_cand", blocks, MAX_GRID_X);
        let mut launches = vec![(
            RerankSelectStep::Chunk,
            Launch::new([x(slots)?, y, z], self.threads),
        )];
        let mut chunks = slots;
        let mut level = 0;
        while chunks > fan_in {
            level += 1;
            let next = chunks.div_ceil(fan_in);
            launches.push((
                RerankSelectStep::Merge {
                    level,
                    chunks_in: x(chunks)?,
                },
                Launch::new([x(next)?, y, z], self.threads),
            ));
            chunks = next;
        }
        launches.push((
            RerankSelectStep::Write {
                level,
                chunks: x(chunks)?,
            },
            by_head,
        ));
        // Every level has at most `slots` slots of at most `k` entries.
        let heads = batch * kv_heads;
        Ok(RerankSelectPlan {
            launches,
            slot_words: heads * slots * kk * 2,
            count_words: heads * slots,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Placement;

    fn spec(threads: u32, k_max: u32) -> PariskvRerankSpec {
        PariskvRerankSpec {
            head_dim: 128,
            group: 4,
            k_max,
            threads,
            placement: Placement::Hbm,
            vector_loads: false,
            select: RerankSelect::Multiblock,
            decode_table: false,
        }
    }

    #[test]
    fn items_hold_two_k_max_per_block() {
        assert_eq!(select_items(256, 2048), 16);
        assert_eq!(select_items(1024, 2048), 4);
        assert_eq!(select_items(128, 2048), 32);
        assert_eq!(select_items(32, 40), 4);
        assert_eq!(select_items(32, 100), 8);
        assert_eq!(select_chunk(256, 2048), 4096);
        for threads in [32, 64, 256, 1024] {
            for k_max in [1, 7, 100, 2048, 4096] {
                assert!(select_chunk(threads, k_max) >= 2 * k_max);
                assert!(select_fan_in(threads, k_max, u64::from(k_max)) >= 2);
            }
        }
    }

    #[test]
    fn plans_merge_until_one_block_holds_every_slot() {
        // qwen3-8b at 1M: C = 104,854 candidates, 8 heads; k = 100 needs no merge.
        let s = spec(256, 2048);
        let plan = s.select_plan(1, 8, 104_854, 100).unwrap();
        let steps: Vec<RerankSelectStep> = plan.launches.iter().map(|l| l.0).collect();
        assert_eq!(
            steps,
            [
                RerankSelectStep::Chunk,
                RerankSelectStep::Write {
                    level: 0,
                    chunks: 26
                }
            ]
        );
        assert_eq!(plan.launches[0].1.grid, [26, 8, 1]);
        assert_eq!(plan.launches[1].1.grid, [8, 1, 1]);
        assert_eq!(
            (plan.slot_words, plan.count_words),
            (8 * 26 * 100 * 2, 8 * 26)
        );
        // k = k_max: two slots a block, so 26 -> 13 -> 7 -> 4 -> 2.
        let plan = s.select_plan(2, 8, 104_854, 2048).unwrap();
        let steps: Vec<RerankSelectStep> = plan.launches.iter().map(|l| l.0).collect();
        assert_eq!(steps.len(), 6);
        assert_eq!(
            steps[1..],
            [
                RerankSelectStep::Merge {
                    level: 1,
                    chunks_in: 26
                },
                RerankSelectStep::Merge {
                    level: 2,
                    chunks_in: 13
                },
                RerankSelectStep::Merge {
                    level: 3,
                    chunks_in: 7
                },
                RerankSelectStep::Merge {
                    level: 4,
                    chunks_in: 4
                },
                RerankSelectStep::Write {
                    level: 4,
                    chunks: 2
                }
            ]
        );
        assert_eq!(plan.launches[2].1.grid, [7, 8, 2]);
        // Buffers alternate: chunk 0, merges 1, 0, 1, 0, write reads 0.
        let writes: Vec<Option<usize>> = steps.iter().map(|s| s.writes()).collect();
        let reads: Vec<Option<usize>> = steps.iter().map(|s| s.reads()).collect();
        assert_eq!(writes, [Some(0), Some(1), Some(0), Some(1), Some(0), None]);
        assert_eq!(reads, [None, Some(0), Some(1), Some(0), Some(1), Some(0)]);
        // No candidates, or k = 0: one slot, no merge.
        for (max_cand, k) in [(0, 10), (1, 0), (5_000, 0)] {
            let plan = s.select_plan(1, 1, max_cand, k).unwrap();
            assert_eq!(plan.launches.len(), 2, "{max_cand} {k}");
        }
        // The one-block select is one launch and no workspace.
        let single = PariskvRerankSpec {
            select: RerankSelect::Single,
            ..s
        };
        let plan = single.select_plan(1, 8, 104_854, 100).unwrap();
        assert_eq!(
            plan.launches,
            [(
                RerankSelectStep::Select,
                single.launch_select(1, 8).unwrap()
            )]
        );
        assert_eq!((plan.slot_words, plan.count_words), (0, 0));
        assert!(s.select_plan(0, 8, 10, 1).is_err());
    }

    #[test]
    fn entries_follow_the_variant() {
        let s = spec(256, 2048);
        assert_eq!(
            s.select_entries(),
            [
                "fathom_pariskv_rerank_d128_g4_k2048_t256_hbm_mb_chunk",
                "fathom_pariskv_rerank_d128_g4_k2048_t256_hbm_mb_merge",
                "fathom_pariskv_rerank_d128_g4_k2048_t256_hbm_mb_write"
            ]
        );
        let single = PariskvRerankSpec {
            select: RerankSelect::Single,
            ..s
        };
        assert_eq!(single.select_entries(), [single.select_entry()]);
    }
}
