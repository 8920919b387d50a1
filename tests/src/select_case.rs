//! The inputs of one select case and what the reference selects from them, shared by the GPU
//! (`gpu_select.rs`) and the CPU (`cpu_select.rs`) runs of the select kernels, so that both
//! check the same cases.

use codegen::spec::peaks;
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

/// Tokens the scan scored of each sequence, for a scan-peaks select: all, all but a tail (up
/// to two scale blocks, as between encodes), whole blocks of 64, none, or any number.
pub fn draw_n_stored(rng: &mut impl Rng, n_total: &[i32]) -> Vec<i32> {
    n_total
        .iter()
        .map(|&n| match rng.gen_range(0..5) {
            0 => n,
            1 => (n - rng.gen_range(1..128)).max(0),
            2 => n - n % 64,
            3 => 0,
            _ => rng.gen_range(0..=n.max(0)),
        })
        .collect()
}

/// The scores as a scan-peaks select reads them, their stride, the peaks and their stride,
/// from score rows `scores` (`[B*H*G][ld]`) of which the scan scored the first
/// `n_stored[row / heads_per_sequence]` tokens. The select needs 16-byte aligned rows: they are
/// copied to a stride rounded up to a multiple of 32 (as the step's capacity is). The peaks of
/// every half holding a stored token are what the scan writes (`codegen::spec::peaks`); every
/// other word is junk (0, all ones or random, from `seed`), which the kernel must never read.
pub fn scan_peaks_layout(
    scores: &[f32],
    ld: usize,
    n_stored: &[i32],
    heads_per_sequence: usize,
    seed: u64,
) -> (Vec<f32>, usize, Vec<u32>, usize) {
    let aligned = ld.div_ceil(32).max(1) * 32;
    let rows = scores.len() / ld.max(1);
    let mut laid = vec![0.0f32; rows * aligned];
    for (row, src) in scores.chunks(ld.max(1)).enumerate() {
        laid[row * aligned..row * aligned + src.len()].copy_from_slice(src);
    }
    let ld_peaks = peaks::ld_peaks(aligned);
    let mut junk = seed | 1;
    let mut half = vec![0u32; rows * ld_peaks];
    for (i, word) in half.iter_mut().enumerate() {
        junk ^= junk << 13;
        junk ^= junk >> 7;
        junk ^= junk << 17;
        *word = match i % 3 {
            0 => 0,
            1 => u32::MAX,
            _ => junk as u32,
        };
    }
    let stored = |row: usize| n_stored[row / heads_per_sequence.max(1)].max(0) as usize;
    peaks::half_peaks(&laid, aligned, stored, &mut half, ld_peaks);
    (laid, aligned, half, ld_peaks)
}
