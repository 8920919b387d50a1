//! SPEC §6: exact attention over a selected set, and dense attention over all tokens.
//!
//! `o = softmax(scale * q·K_S) · V_S` with `scale = 1/sqrt(D)` unless the model passes its own.
//! The GPU computes this in fp32; the reference does it in f64 so that it is the yardstick.

use half::bf16;

use super::select::Selection;

/// The default softmax scale `1 / sqrt(D)`.
pub fn default_scale(head_dim: usize) -> f64 {
    1.0 / (head_dim as f64).sqrt()
}

/// `q · k_row` in f64, `k_row` a bf16 row of `D` values.
pub fn dot_bf16(q: &[f64], row: &[bf16]) -> f64 {
    q.iter().zip(row).map(|(a, b)| a * b.to_f64()).sum()
}

/// Exact softmax attention of one query over the K/V rows listed in `rows` (token indices into
/// the token-major `keys` and `values`, each `[n][D]`).
///
/// The maximum logit is subtracted before `exp`, so large logits (a large-norm sink) cannot
/// overflow. Panics if `rows` is empty (softmax over nothing is undefined; a selection is never
/// empty for `n > 0`) or names a token outside the keys.
pub fn attend(
    q: &[f64],
    keys: &[bf16],
    values: &[bf16],
    d: usize,
    rows: &[usize],
    scale: f64,
) -> Vec<f64> {
    assert!(!rows.is_empty(), "attention over an empty set of rows");
    assert_eq!(q.len(), d, "query has {} values, head dim is {d}", q.len());
    assert_eq!(keys.len(), values.len(), "keys and values differ in length");
    let row = |m: &[bf16], i: usize| -> Vec<f64> {
        assert!(
            (i + 1) * d <= m.len(),
            "row {i} is outside {} tokens",
            m.len() / d
        );
        m[i * d..(i + 1) * d].iter().map(|x| x.to_f64()).collect()
    };
    let logits: Vec<f64> = rows
        .iter()
        .map(|&i| scale * q.iter().zip(row(keys, i)).map(|(a, b)| a * b).sum::<f64>())
        .collect();
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut out = vec![0.0; d];
    for (&i, w) in rows.iter().zip(&weights) {
        for (o, v) in out.iter_mut().zip(row(values, i)) {
            *o += w * v;
        }
    }
    out.iter_mut().for_each(|o| *o /= total);
    out
}

/// `||got − want|| / ||want||` (Euclidean norms; `||got − want||` when `want` is zero): how far
/// a GPU output is from this module's f64 one, the measure every attention check bounds.
pub fn relative_error(got: &[f32], want: &[f64]) -> f64 {
    let diff: f64 = got
        .iter()
        .zip(want)
        .map(|(&g, &w)| (f64::from(g) - w).powi(2))
        .sum::<f64>()
        .sqrt();
    let norm: f64 = want.iter().map(|w| w * w).sum::<f64>().sqrt();
    if norm > 0.0 {
        diff / norm
    } else {
        diff
    }
}

/// Dense attention of one query over the first `n` tokens (the `dense` method of §4).
///
/// Written independently of [`attend`] (log-sum-exp normalisation, token order) so that the two
/// check each other: attention over the full set must equal it.
pub fn dense(
    q: &[f64],
    keys: &[bf16],
    values: &[bf16],
    d: usize,
    n: usize,
    scale: f64,
) -> Vec<f64> {
    assert!(n > 0, "dense attention over zero tokens");
    assert_eq!(q.len(), d, "query has {} values, head dim is {d}", q.len());
    assert!(
        keys.len() >= n * d && values.len() >= n * d,
        "fewer than {n} tokens of keys or values"
    );
    let logits: Vec<f64> = keys[..n * d]
        .chunks_exact(d)
        .map(|k| scale * dot_bf16(q, k))
        .collect();
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let log_total = max + logits.iter().map(|l| (l - max).exp()).sum::<f64>().ln();
    let mut out = vec![0.0; d];
    for (l, v) in logits.iter().zip(values[..n * d].chunks_exact(d)) {
        let p = (l - log_total).exp();
        for (o, x) in out.iter_mut().zip(v) {
            *o += p * x.to_f64();
        }
    }
    out
}

/// Attention of every head of a query group over its own selected set `S_h`
/// (`queries[h]` pairs with `selection.heads[h]`).
pub fn attend_group(
    queries: &[Vec<f64>],
    keys: &[bf16],
    values: &[bf16],
    d: usize,
    selection: &Selection,
    scale: f64,
) -> Vec<Vec<f64>> {
    assert_eq!(
        queries.len(),
        selection.heads.len(),
        "one selected set per query head"
    );
    queries
        .iter()
        .zip(&selection.heads)
        .map(|(q, set)| attend(q, keys, values, d, set, scale))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn to_bf16(v: &[f64]) -> Vec<bf16> {
        v.iter().map(|&x| bf16::from_f64(x)).collect()
    }

    #[test]
    fn relative_error_is_the_norm_of_the_difference_over_the_reference() {
        assert_eq!(relative_error(&[3.0, 4.0], &[3.0, 4.0]), 0.0);
        // ||(0, 5)|| / ||(3, 4)|| = 1.
        assert_eq!(relative_error(&[3.0, 9.0], &[3.0, 4.0]), 1.0);
        // A zero reference: the absolute norm.
        assert_eq!(relative_error(&[3.0, 4.0], &[0.0, 0.0]), 5.0);
        assert!(relative_error(&[f32::NAN, 0.0], &[1.0, 0.0]).is_nan());
    }

    #[test]
    fn one_row_returns_its_value() {
        let keys = to_bf16(&[1.0, 2.0, 3.0, 4.0]);
        let values = to_bf16(&[5.0, 6.0, 7.0, 8.0]);
        let o = attend(&[1.0, 1.0], &keys, &values, 2, &[1], 0.5);
        assert_eq!(o, vec![7.0, 8.0]);
    }

    #[test]
    fn matches_hand_softmax() {
        // Logits 0 and ln 3 (scale 1): weights 1/4 and 3/4.
        let keys = to_bf16(&[0.0, 1.0]);
        let values = to_bf16(&[4.0, 8.0]);
        let o = dense(&[3f64.ln()], &keys, &values, 1, 2, 1.0);
        assert!((o[0] - (0.25 * 4.0 + 0.75 * 8.0)).abs() < 1e-12);
    }

    #[test]
    fn huge_logits_stay_finite() {
        let keys = to_bf16(&[1.0e4, 1.0e4 - 64.0]);
        let values = to_bf16(&[1.0, 2.0]);
        let o = dense(&[1.0e3], &keys, &values, 1, 2, 1.0);
        assert!(o[0].is_finite());
        assert!((o[0] - 1.0).abs() < 1e-12);
    }

    #[test]
    fn default_scale_is_inverse_sqrt_d() {
        assert_eq!(default_scale(64), 0.125);
    }

    proptest! {
        #[test]
        fn full_set_equals_dense(
            n in 1usize..40,
            seed in prop::collection::vec(-3.0f64..3.0, 40 * 8 * 2 + 8),
            scale in 0.01f64..2.0,
        ) {
            let d = 8;
            let keys = to_bf16(&seed[..n * d]);
            let values = to_bf16(&seed[40 * d..40 * d + n * d]);
            let q = &seed[80 * d..80 * d + d];
            let all: Vec<usize> = (0..n).collect();
            let a = attend(q, &keys, &values, d, &all, scale);
            let b = dense(q, &keys, &values, d, n, scale);
            for (x, y) in a.iter().zip(&b) {
                prop_assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{} vs {}", x, y);
            }
            // The output is a convex combination of the value rows.
            for c in 0..d {
                let col = (0..n).map(|i| values[i * d + c].to_f64());
                let (lo, hi) = col.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| (l.min(v), h.max(v)));
                prop_assert!(a[c] >= lo - 1e-9 && a[c] <= hi + 1e-9);
            }
            // Row order does not matter.
            let rev: Vec<usize> = (0..n).rev().collect();
            let r = attend(q, &keys, &values, d, &rev, scale);
            for (x, y) in r.iter().zip(&a) {
                prop_assert!((x - y).abs() < 1e-9);
            }
        }
    }
}
