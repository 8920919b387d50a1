//! SPEC §9: fidelity, recall@k and bytes per step.

use super::select::top_k_of;
use super::store::{BlockSize, WORD_TOKENS};

/// Relative attention-output error `||o_S - o_dense|| / ||o_dense||` of one query head.
///
/// When `o_dense` is the zero vector the ratio is undefined: it is 0 if `o_s` is zero too and
/// infinite otherwise.
pub fn fidelity(o_s: &[f64], o_dense: &[f64]) -> f64 {
    assert_eq!(o_s.len(), o_dense.len(), "outputs of different head dims");
    let err = o_s
        .iter()
        .zip(o_dense)
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
        .sqrt();
    let norm = o_dense.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm == 0.0 {
        if err == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        err / norm
    }
}

/// The arithmetic mean, for averaging fidelities over (position, layer, query head); `None`
/// for no values.
pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Top-`k` token indices of a score vector over all its tokens (ties by lower index), in rank
/// order. Unlike selection there is no sink or local window here.
pub fn top_k(scores: &[f64], k: usize) -> Vec<usize> {
    top_k_of(scores, 0..scores.len(), k)
}

/// recall@k: `|top-k(method) ∩ top-k(oracle)| / k` over all tokens of the score vectors.
///
/// With fewer than `k` tokens, `k` is taken as the token count (both top sets are then every
/// token and the recall is 1); with no tokens or `k = 0` there is nothing to miss and the recall
/// is 1.
pub fn recall_at_k(method: &[f64], oracle: &[f64], k: usize) -> f64 {
    assert_eq!(
        method.len(),
        oracle.len(),
        "score vectors of different lengths"
    );
    let k = k.min(oracle.len());
    if k == 0 {
        return 1.0;
    }
    let mut truth = top_k(oracle, k);
    truth.sort_unstable();
    let hits = top_k(method, k)
        .iter()
        .filter(|i| truth.binary_search(i).is_ok())
        .count();
    hits as f64 / k as f64
}

/// Bytes one query group (one KV head of one layer) moves in one decode step, split by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StepBytes {
    /// Plane words read by the scan.
    pub planes: usize,
    /// fp16 block scales read by the scan.
    pub scales: usize,
    /// bf16 K and V rows of the union fetched for attention.
    pub rows: usize,
}

impl StepBytes {
    /// Everything counted.
    pub fn total(&self) -> usize {
        self.planes + self.scales + self.rows
    }
}

/// Sums query groups' bytes (over KV heads, layers and sequences).
impl std::ops::Add for StepBytes {
    type Output = StepBytes;

    fn add(self, other: StepBytes) -> StepBytes {
        StepBytes {
            planes: self.planes + other.planes,
            scales: self.scales + other.scales,
            rows: self.rows + other.rows,
        }
    }
}

impl std::iter::Sum for StepBytes {
    fn sum<I: Iterator<Item = StepBytes>>(iter: I) -> StepBytes {
        iter.fold(StepBytes::default(), |a, b| a + b)
    }
}

/// Bytes per step of a depth plan (§9), for one query group:
///
/// - planes: `Σ_c t_c * 8 * ceil(n_stored / 64)`: each read plane of channel `c` is one `u64`
///   word per 64 stored tokens, read whole (so `Σ_c t_c * n_stored / 8` when `n_stored` is a
///   multiple of 64; with 32-token blocks a half-filled last word still costs 8 bytes);
/// - scales: `(active channels) * (n_stored / BLK) * 2`, one fp16 `Δ` per block of every channel
///   with `t_c > 0`;
/// - rows: `union_rows * D * 2 * 2`, the bf16 K and V row of every token of the union `U`.
///
/// Not counted: the query, the plan, the scores and selections (on-chip or tiny), the tail's
/// bf16 keys (fewer than `BLK` rows, scored exactly; their winners are in `union_rows`), and
/// words of a segment beyond the last stored token.
pub fn bytes_per_step(
    depths: &[u8],
    n_stored: usize,
    block: BlockSize,
    union_rows: usize,
) -> StepBytes {
    let d = depths.len();
    let words = n_stored.div_ceil(WORD_TOKENS);
    let plane_reads: usize = depths.iter().map(|&t| t as usize).sum();
    let active = depths.iter().filter(|&&t| t > 0).count();
    StepBytes {
        planes: plane_reads * words * 8,
        scales: active * (n_stored / block.tokens()) * 2,
        rows: winner_row_bytes(union_rows, d),
    }
}

/// bf16 K and V bytes of `union_rows` fetched rows of `d` channels.
pub fn winner_row_bytes(union_rows: usize, d: usize) -> usize {
    union_rows * d * 2 * 2
}

/// Bytes per step of §4 `landmark`, for one query group: the fp16 means of `n_stored / 8`
/// groups of `d` channels (a final partial group counts as a group), plus the winner rows.
pub fn landmark_bytes_per_step(n_stored: usize, d: usize, union_rows: usize) -> StepBytes {
    StepBytes {
        planes: n_stored.div_ceil(super::score::LANDMARK_TOKENS) * d * 2,
        scales: 0,
        rows: winner_row_bytes(union_rows, d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fidelity_is_relative_l2() {
        assert_eq!(fidelity(&[3.0, 4.0], &[3.0, 4.0]), 0.0);
        assert!((fidelity(&[3.0, 5.0], &[3.0, 4.0]) - 0.2).abs() < 1e-15);
        assert!((fidelity(&[0.0, 0.0], &[0.0, 2.0]) - 1.0).abs() < 1e-15);
        assert_eq!(fidelity(&[0.0], &[0.0]), 0.0);
        assert_eq!(fidelity(&[1.0], &[0.0]), f64::INFINITY);
        assert_eq!(mean(&[0.1, 0.3]), Some(0.2));
        assert_eq!(mean(&[]), None);
    }

    #[test]
    fn recall_counts_overlap() {
        let oracle = [5.0, 4.0, 3.0, 2.0, 1.0];
        assert_eq!(recall_at_k(&oracle, &oracle, 2), 1.0);
        let method = [5.0, 0.0, 3.0, 2.0, 1.0];
        assert_eq!(recall_at_k(&method, &oracle, 2), 0.5);
        assert_eq!(recall_at_k(&method, &oracle, 3), 2.0 / 3.0);
        assert_eq!(recall_at_k(&method, &oracle, 10), 1.0);
        assert_eq!(recall_at_k(&method, &oracle, 0), 1.0);
        // Ties go to the lower index on both sides.
        assert_eq!(recall_at_k(&[1.0; 4], &[1.0; 4], 2), 1.0);
        assert_eq!(top_k(&[1.0, 2.0, 2.0], 2), vec![1, 2]);
    }

    #[test]
    fn bytes_count_planes_scales_rows() {
        // 128 channels: 32 at depth 4, 16 at depth 2, the rest unread; 32k tokens, BLK 64.
        let mut depths = vec![0u8; 128];
        depths[..32].fill(4);
        depths[32..48].fill(2);
        let n = 32 * 1024;
        let b = bytes_per_step(&depths, n, BlockSize::B64, 600);
        assert_eq!(b.planes, (32 * 4 + 16 * 2) * n / 8);
        assert_eq!(b.scales, 48 * (n / 64) * 2);
        assert_eq!(b.rows, 600 * 128 * 4);
        assert_eq!(b.total(), b.planes + b.scales + b.rows);
        // The §4 cost in bits per token matches: planes + 16/BLK per active channel.
        let bits = (b.planes + b.scales) as f64 * 8.0 / n as f64;
        assert_eq!(bits, 160.0 + 48.0 * 0.25);
        // A half-filled word with 32-token blocks still costs a whole word.
        let small = bytes_per_step(&[1, 0], 96, BlockSize::B32, 0);
        assert_eq!(
            small,
            StepBytes {
                planes: 16,
                scales: 3 * 2,
                rows: 0
            }
        );
        assert_eq!((small + small).total(), 44);
        assert_eq!(
            [small, small, small].into_iter().sum::<StepBytes>().planes,
            48
        );
    }

    #[test]
    fn landmark_bytes_are_256_bits_per_token_at_d128() {
        let b = landmark_bytes_per_step(4096, 128, 0);
        assert_eq!(b.planes as f64 * 8.0 / 4096.0, 256.0);
    }
}
