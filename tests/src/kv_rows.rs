//! The K/V-adjacent row layout (`KvRows::Adjacent`, `[capacity][2][D]`) on the host: building
//! it from separate rows and reading rows back out of it, for the tests that feed kernels and
//! stores adjacent rows.

/// K and V rows `[n][D]` each, as one `[n][2][D]` array (a token's K row, then its V row).
pub fn interleave(keys: &[u16], values: &[u16], d: usize) -> Vec<u16> {
    assert_eq!(keys.len(), values.len(), "as many K as V rows");
    assert!(d > 0 && keys.len().is_multiple_of(d), "whole rows of {d}");
    keys.chunks_exact(d)
        .zip(values.chunks_exact(d))
        .flat_map(|(k, v)| k.iter().chain(v).copied())
        .collect()
}

/// `n` rows of `d` values that start `stride` values apart in `all` (the last may end early),
/// packed `[n][d]`.
pub fn unstride(all: &[u16], n: usize, d: usize, stride: usize) -> Vec<u16> {
    (0..n)
        .flat_map(|t| all[t * stride..t * stride + d].iter().copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_rows_read_back_by_stride() {
        let d = 3;
        let k: Vec<u16> = (0..12).collect();
        let v: Vec<u16> = (100..112).collect();
        let both = interleave(&k, &v, d);
        assert_eq!(&both[..9], &[0, 1, 2, 100, 101, 102, 3, 4, 5]);
        assert_eq!(unstride(&both, 4, d, 2 * d), k);
        assert_eq!(unstride(&both[d..], 4, d, 2 * d), v);
        // The last row of a strided read may end at the row itself.
        assert_eq!(unstride(&both[..3 * 2 * d + d], 4, d, 2 * d), k);
        assert_eq!(unstride(&k, 4, d, d), k);
    }
}
