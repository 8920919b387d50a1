//! The step's device buffers. They only grow: a step whose sizes fit allocates nothing, so
//! steps after the first (at the same batch and token capacity) run without allocation and
//! can be captured. Buffers are reference-counted so that a captured graph keeps the ones it
//! writes alive after the workspace has grown past them.

use std::any::Any;
use std::sync::Arc;

use super::launches::{WorkspaceSizes, ALWAYS};
use crate::gpu::{DeviceBuffer, Gpu, GpuError};

/// A buffer of the workspace, absent until a step needs it.
pub(crate) type Buf<T> = Option<Arc<DeviceBuffer<T>>>;

/// The address of a workspace buffer, 0 when absent (never passed to a kernel that reads it:
/// the launch plan sizes every buffer its launches use).
pub(crate) fn addr<T>(buffer: &Buf<T>) -> u64 {
    buffer.as_ref().map_or(0, |b| b.addr())
}

/// Grows `slot` to at least `len` elements (the contents are not kept).
fn ensure<T: Copy>(gpu: &Gpu, slot: &mut Buf<T>, len: usize) -> Result<(), GpuError> {
    if len == 0 || slot.as_ref().is_some_and(|b| b.len() >= len) {
        return Ok(());
    }
    // Freeing the old buffer is not allowed during a capture either: ask before dropping it.
    gpu.refuse_while_capturing("growing the step's workspace")?;
    *slot = None;
    *slot = Some(Arc::new(gpu.zeroed_async(len)?));
    Ok(())
}

/// The layout of the `dense` row tables: `(kv heads, union stride, query heads, selection
/// stride)`.
type DenseLayout = (usize, usize, usize, usize);

/// Every buffer a step writes.
#[derive(Default)]
pub(crate) struct Workspace {
    pub q_store: Buf<f32>,
    pub depths: Buf<u8>,
    pub class_count: Buf<u32>,
    pub runs: Buf<u64>,
    pub staged_runs: Buf<u64>,
    pub stage_words: Buf<u64>,
    pub stage_scales: Buf<u16>,
    pub plan_status: Buf<i32>,
    pub scores: Buf<f32>,
    pub peaks: Buf<u32>,
    pub select_state: Buf<u32>,
    pub chunk_counts: Buf<u32>,
    pub select_candidates: Buf<u32>,
    pub select_candidate_runs: Buf<u32>,
    /// Allocated zeroed (as every buffer here) and left zero by every select launch.
    pub select_arrivals: Buf<u32>,
    pub scratch: Buf<i32>,
    pub sel: Buf<i32>,
    pub sel_pos: Buf<i32>,
    pub sel_count: Buf<i32>,
    pub uni: Buf<i32>,
    pub uni_count: Buf<i32>,
    pub k_sel: Buf<u16>,
    pub v_sel: Buf<u16>,
    pub out: Buf<f32>,
    pub attention_partials: Buf<f32>,
    /// Allocated zeroed and left zero by every attention launch.
    pub attention_arrivals: Buf<u32>,
    pub dense_uni: Buf<i32>,
    pub dense_sel: Buf<i32>,
    dense_layout: Option<DenseLayout>,
    /// `pariskv`'s retrieval buffers (`crate::pariskv::RetrievalSizes`).
    pub pk_q_tilde: Buf<f64>,
    pub pk_q_norm: Buf<f64>,
    pub pk_tiers: Buf<u8>,
    pub pk_tier_len: Buf<i32>,
    pub pk_vote_hist: Buf<u32>,
    pub pk_votes: Buf<u16>,
    pub pk_chunk_counts: Buf<u64>,
    pub pk_cand: Buf<i32>,
    pub pk_cand_count: Buf<i32>,
    pub pk_cand_score: Buf<f64>,
    /// The many-block top-k's two slot buffers, then its two slot-count buffers.
    pub pk_select_slots: Buf<u64>,
    pub pk_select_counts: Buf<u32>,
}

impl Workspace {
    /// Grows every buffer to `sizes`; for `dense`, (re)writes the row tables when their layout
    /// changed. `k` is the plan's `k`, `kv_heads = B*H`, `group = G`.
    pub fn ensure(
        &mut self,
        gpu: &Gpu,
        sizes: &WorkspaceSizes,
        kv_heads: usize,
        group: usize,
        k: usize,
    ) -> Result<(), GpuError> {
        ensure(gpu, &mut self.q_store, sizes.q_store)?;
        ensure(gpu, &mut self.depths, sizes.depths)?;
        ensure(gpu, &mut self.class_count, sizes.class_count)?;
        ensure(gpu, &mut self.runs, sizes.runs)?;
        ensure(gpu, &mut self.staged_runs, sizes.staged_runs)?;
        ensure(gpu, &mut self.stage_words, sizes.stage_words)?;
        ensure(gpu, &mut self.stage_scales, sizes.stage_scales)?;
        ensure(gpu, &mut self.plan_status, sizes.plan_status)?;
        ensure(gpu, &mut self.scores, sizes.scores)?;
        ensure(gpu, &mut self.peaks, sizes.peaks)?;
        ensure(gpu, &mut self.select_state, sizes.select_state)?;
        ensure(gpu, &mut self.chunk_counts, sizes.chunk_counts)?;
        ensure(gpu, &mut self.select_candidates, sizes.select_candidates)?;
        ensure(
            gpu,
            &mut self.select_candidate_runs,
            sizes.select_candidate_runs,
        )?;
        ensure(gpu, &mut self.select_arrivals, sizes.select_arrivals)?;
        ensure(gpu, &mut self.scratch, sizes.scratch)?;
        ensure(gpu, &mut self.sel, sizes.sel)?;
        ensure(gpu, &mut self.sel_pos, sizes.sel)?;
        ensure(gpu, &mut self.sel_count, sizes.sel_count)?;
        ensure(gpu, &mut self.uni, sizes.uni)?;
        ensure(gpu, &mut self.uni_count, sizes.uni_count)?;
        ensure(gpu, &mut self.k_sel, sizes.rows)?;
        ensure(gpu, &mut self.v_sel, sizes.rows)?;
        ensure(gpu, &mut self.out, sizes.out)?;
        ensure(gpu, &mut self.attention_partials, sizes.attention_partials)?;
        ensure(gpu, &mut self.attention_arrivals, sizes.attention_arrivals)?;
        let pk = &sizes.pariskv;
        ensure(gpu, &mut self.pk_q_tilde, pk.q_tilde)?;
        ensure(gpu, &mut self.pk_q_norm, pk.q_norm)?;
        ensure(gpu, &mut self.pk_tiers, pk.tiers)?;
        ensure(gpu, &mut self.pk_tier_len, pk.tier_len)?;
        ensure(gpu, &mut self.pk_vote_hist, pk.vote_hist)?;
        ensure(gpu, &mut self.pk_votes, pk.votes)?;
        ensure(gpu, &mut self.pk_chunk_counts, pk.chunk_counts)?;
        ensure(gpu, &mut self.pk_cand, pk.cand)?;
        ensure(gpu, &mut self.pk_cand_count, pk.cand_count)?;
        ensure(gpu, &mut self.pk_cand_score, pk.cand_score)?;
        ensure(gpu, &mut self.pk_select_slots, 2 * pk.select_slots)?;
        ensure(gpu, &mut self.pk_select_counts, 2 * pk.select_counts)?;
        if sizes.dense_uni > 0 {
            let layout = (kv_heads, group * k + ALWAYS, kv_heads * group, k + ALWAYS);
            let grown = [&self.dense_uni, &self.dense_sel]
                .iter()
                .zip([sizes.dense_uni, sizes.dense_sel])
                .any(|(b, len)| b.as_ref().is_none_or(|b| b.len() < len));
            if grown || self.dense_layout != Some(layout) {
                let (uni, sel) = dense_tables(layout);
                // Replaced, not rewritten: a graph captured earlier keeps its own tables.
                gpu.refuse_while_capturing("rewriting dense's row tables")?;
                self.dense_uni = None;
                self.dense_sel = None;
                self.dense_uni = Some(Arc::new(gpu.upload_async(&uni)?));
                self.dense_sel = Some(Arc::new(gpu.upload_async(&sel)?));
                self.dense_layout = Some(layout);
            }
        }
        Ok(())
    }

    /// Device bytes held.
    pub fn bytes(&self) -> usize {
        fn b<T>(x: &Buf<T>) -> usize {
            x.as_ref().map_or(0, |b| b.bytes())
        }
        b(&self.q_store)
            + b(&self.depths)
            + b(&self.class_count)
            + b(&self.runs)
            + b(&self.staged_runs)
            + b(&self.stage_words)
            + b(&self.stage_scales)
            + b(&self.plan_status)
            + b(&self.scores)
            + b(&self.select_state)
            + b(&self.chunk_counts)
            + b(&self.select_candidates)
            + b(&self.select_candidate_runs)
            + b(&self.select_arrivals)
            + b(&self.scratch)
            + b(&self.sel)
            + b(&self.sel_pos)
            + b(&self.sel_count)
            + b(&self.uni)
            + b(&self.uni_count)
            + b(&self.k_sel)
            + b(&self.v_sel)
            + b(&self.out)
            + b(&self.attention_partials)
            + b(&self.attention_arrivals)
            + b(&self.dense_uni)
            + b(&self.dense_sel)
            + b(&self.pk_q_tilde)
            + b(&self.pk_q_norm)
            + b(&self.pk_tiers)
            + b(&self.pk_tier_len)
            + b(&self.pk_vote_hist)
            + b(&self.pk_votes)
            + b(&self.pk_chunk_counts)
            + b(&self.pk_cand)
            + b(&self.pk_cand_count)
            + b(&self.pk_cand_score)
            + b(&self.pk_select_slots)
            + b(&self.pk_select_counts)
    }

    /// Every buffer, type-erased, for a graph to keep alive.
    pub fn keep_alive(&self) -> Vec<Arc<dyn Any + Send + Sync>> {
        fn k<T: Send + Sync + 'static>(x: &Buf<T>, out: &mut Vec<Arc<dyn Any + Send + Sync>>) {
            if let Some(b) = x {
                out.push(b.clone());
            }
        }
        let mut out = Vec::new();
        k(&self.q_store, &mut out);
        k(&self.depths, &mut out);
        k(&self.class_count, &mut out);
        k(&self.runs, &mut out);
        k(&self.staged_runs, &mut out);
        k(&self.stage_words, &mut out);
        k(&self.stage_scales, &mut out);
        k(&self.plan_status, &mut out);
        k(&self.scores, &mut out);
        k(&self.select_state, &mut out);
        k(&self.chunk_counts, &mut out);
        k(&self.select_candidates, &mut out);
        k(&self.select_candidate_runs, &mut out);
        k(&self.select_arrivals, &mut out);
        k(&self.scratch, &mut out);
        k(&self.sel, &mut out);
        k(&self.sel_pos, &mut out);
        k(&self.sel_count, &mut out);
        k(&self.uni, &mut out);
        k(&self.uni_count, &mut out);
        k(&self.k_sel, &mut out);
        k(&self.v_sel, &mut out);
        k(&self.out, &mut out);
        k(&self.attention_partials, &mut out);
        k(&self.attention_arrivals, &mut out);
        k(&self.dense_uni, &mut out);
        k(&self.dense_sel, &mut out);
        k(&self.pk_q_tilde, &mut out);
        k(&self.pk_q_norm, &mut out);
        k(&self.pk_tiers, &mut out);
        k(&self.pk_tier_len, &mut out);
        k(&self.pk_vote_hist, &mut out);
        k(&self.pk_votes, &mut out);
        k(&self.pk_chunk_counts, &mut out);
        k(&self.pk_cand, &mut out);
        k(&self.pk_cand_count, &mut out);
        k(&self.pk_cand_score, &mut out);
        k(&self.pk_select_slots, &mut out);
        k(&self.pk_select_counts, &mut out);
        out
    }
}

/// The `dense` row tables: the union of KV head `kh` is every token (`uni[kh*UC + u] = u`) and
/// row `j` of every query head is token `j` (`sel[qh*SC + j] = sel_pos[qh*SC + j] = j`).
pub(crate) fn dense_tables((kv_heads, uc, query_heads, sc): DenseLayout) -> (Vec<i32>, Vec<i32>) {
    let iota = |rows: usize, stride: usize| -> Vec<i32> {
        (0..rows)
            .flat_map(|_| (0..stride).map(|i| i as i32))
            .collect()
    };
    (iota(kv_heads, uc), iota(query_heads, sc))
}
