//! The peaks the scan writes for the select (`ScanSpec::peaks`, `SelectAlgorithm::ScanPeaks`):
//! the largest order key of the scores of every 32-token half of a row, as the kernels form it
//! (`order_key` in `templates/select_common.cuh.tera`). Host code that stands in for the scan
//! (the select's tests, the tuner's select cases) fills a peaks buffer with [`half_peaks`].

/// Tokens a peak stands for: one 32-token half of the plane words.
pub const HALF_TOKENS: usize = 32;

/// The select's order-preserving key of a score: a larger score has a larger key, and -0.0 and
/// +0.0 have the same one. Key 0 is a NaN's, which no score is; it means "no token".
pub fn order_key(score: f32) -> u32 {
    let mut bits = score.to_bits();
    if bits == 0x8000_0000 {
        bits = 0;
    }
    if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

/// Peak words per row for a score row stride of `ld_scores` tokens.
pub fn ld_peaks(ld_scores: usize) -> usize {
    ld_scores.div_ceil(HALF_TOKENS)
}

/// What the scan writes into `peaks` (`[rows][ld_peaks]`) for score rows `scores`
/// (`[rows][ld_scores]`) of which the first `n_stored(row)` tokens were scored: for every half
/// holding a stored token, the largest key of its stored tokens. Other entries are left as they
/// are (the scan never writes them).
pub fn half_peaks(
    scores: &[f32],
    ld_scores: usize,
    n_stored: impl Fn(usize) -> usize,
    peaks: &mut [u32],
    ld_peaks: usize,
) {
    if ld_scores == 0 {
        return;
    }
    for (row, scores) in scores.chunks(ld_scores).enumerate() {
        let stored = n_stored(row).min(scores.len());
        let out = &mut peaks[row * ld_peaks..(row + 1) * ld_peaks];
        for (half, tokens) in scores[..stored].chunks(HALF_TOKENS).enumerate() {
            out[half] = tokens.iter().map(|&s| order_key(s)).max().unwrap_or(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_scores_and_merge_the_zeros() {
        let scores = [
            f32::NEG_INFINITY,
            -3.5,
            -1e-30,
            -0.0,
            0.0,
            1e-30,
            2.0,
            f32::INFINITY,
        ];
        for pair in scores.windows(2) {
            let (a, b) = (order_key(pair[0]), order_key(pair[1]));
            if pair[0] == pair[1] {
                assert_eq!(a, b, "{pair:?}");
            } else {
                assert!(a < b, "{pair:?}: {a:#x} !< {b:#x}");
            }
        }
        assert_eq!(order_key(0.0), 0x8000_0000);
        assert_ne!(order_key(f32::NEG_INFINITY), 0);
    }

    #[test]
    fn halves_past_the_stored_tokens_are_left_alone() {
        // Two rows of 70 tokens; row 0 stored 65 (halves 0, 1 and one token of half 2), row 1
        // none.
        let scores: Vec<f32> = (0..140).map(|i| ((i * 37) % 11) as f32 - 5.0).collect();
        let ld = ld_peaks(70);
        assert_eq!(ld, 3);
        let mut peaks = vec![7u32; 2 * ld];
        half_peaks(&scores, 70, |r| if r == 0 { 65 } else { 0 }, &mut peaks, ld);
        let max_key = |t: std::ops::Range<usize>| t.map(|i| order_key(scores[i])).max().unwrap();
        assert_eq!(peaks[0], max_key(0..32));
        assert_eq!(peaks[1], max_key(32..64));
        assert_eq!(peaks[2], order_key(scores[64]));
        assert_eq!(&peaks[3..], &[7, 7, 7]);
    }
}
