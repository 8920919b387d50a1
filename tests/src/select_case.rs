//! The inputs of one select case and what the reference selects from them, shared by the GPU
//! (`gpu_select.rs`) and the CPU (`cpu_select.rs`) runs of the select kernels, so that both
//! check the same cases.

use rand::Rng;
use reference::select::Selection;

use crate::select_kernels::ALWAYS;
use crate::select_scores::{scores, Scores};

/// The scores of one launch, `[B][H][G]` query heads, and the reference selection of each KV
/// head.
pub struct SelectCase {
    /// `[query head][ld]` fp32 scores; elements past a head's length hold NaN bits, which the
    /// kernels must never read.
    pub scores: Vec<f32>,
    /// The row stride of `scores`: the longest length plus 7, so that rows are not 16-byte
    /// aligned.
    pub ld: usize,
    /// The longest length.
    pub max_n: usize,
    /// Each sequence's length.
    pub n_total: Vec<i32>,
    /// Each query head's score family.
    pub families: Vec<Scores>,
    /// `[B][H]` what the reference selects for the `G` query heads of each KV head.
    pub reference: Vec<Selection>,
}

impl SelectCase {
    /// Scores for `lengths` (one per sequence) of `kv_heads` KV heads of `group` query heads
    /// with run-time `k`; consecutive query heads get consecutive families of `families`, from
    /// a random first one, so that every family appears once there are as many heads as
    /// families.
    pub fn draw(
        rng: &mut impl Rng,
        lengths: &[usize],
        kv_heads: usize,
        group: usize,
        k: usize,
        families: &[Scores],
    ) -> SelectCase {
        let max_n = lengths.iter().copied().max().unwrap_or(0);
        let ld = max_n + 7;
        let query_heads = lengths.len() * kv_heads * group;
        let mut all = vec![f32::from_bits(0xffff_ffff); query_heads * ld];
        let mut per_head: Vec<Vec<f64>> = Vec::with_capacity(query_heads);
        let mut used = Vec::with_capacity(query_heads);
        let first_family = rng.gen_range(0..families.len());
        for qh in 0..query_heads {
            let n = lengths[qh / (kv_heads * group)];
            let family = families[(qh + first_family) % families.len()];
            used.push(family);
            let s = scores(rng, family, n, k);
            all[qh * ld..qh * ld + n].copy_from_slice(&s);
            per_head.push(s.iter().map(|&x| f64::from(x)).collect());
        }
        SelectCase {
            scores: all,
            ld,
            max_n,
            n_total: lengths.iter().map(|&n| n as i32).collect(),
            families: used,
            reference: per_head
                .chunks(group)
                .map(|heads| Selection::from_scores(heads, k))
                .collect(),
        }
    }
}

/// Lengths at every edge of a select with run-time `k`: none, fewer than the sink, around the
/// sink and window, around `ALWAYS + k` (below it every token is selected), and twice it.
pub fn boundary_lengths(k: usize) -> Vec<usize> {
    vec![
        0,
        1,
        4,
        5,
        35,
        36,
        37,
        ALWAYS + k - k.min(1),
        ALWAYS + k,
        ALWAYS + k + 1,
        ALWAYS + k + 2,
        2 * (ALWAYS + k),
    ]
}
