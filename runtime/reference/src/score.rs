//! SPEC §6 (and the `landmark` and `oracle` rows of §4): approximate and exact token scores.
//!
//! Stored tokens are scored from the bit-plane store in the *store basis* (raw channels or KLT
//! coordinates, §5) with a depth plan; tail tokens, which are not in the store yet, are scored
//! exactly from their bf16 keys with the *raw-basis* query. The GPU accumulates in fp32; the
//! reference accumulates in f64, so a kernel is compared within fp32 rounding of these values.
//!
//! Every result is indexed `[query head][token]`.

use std::ops::Range;

use half::{bf16, f16};

use super::attention::dot_bf16;
use super::store::{HeadStore, PLANES};

/// Tokens averaged into one landmark (§4 `landmark`: "the fp16 mean key of each 8-token block").
pub use codegen::spec::method::LANDMARK_TOKENS;

/// Panics unless every query has `d` values: queries come from the reference's own callers.
fn check_queries(queries: &[Vec<f64>], d: usize) {
    for (h, q) in queries.iter().enumerate() {
        assert_eq!(
            q.len(),
            d,
            "query head {h} has {} values, head dim is {d}",
            q.len()
        );
    }
}

/// `s[h][i] = Σ_{c: t_c > 0} q_h[c] * x̂_{t_c}[i][c]` for every stored token `i` (§6), with
/// `depths[c] = t_c` the depth plan and `queries` in the store basis.
pub fn score_stored(store: &HeadStore, depths: &[u8], queries: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let d = store.layout().head_dim();
    assert_eq!(
        depths.len(),
        d,
        "plan has {} depths, head dim is {d}",
        depths.len()
    );
    assert!(
        depths.iter().all(|&t| t as usize <= PLANES),
        "plan depths must be 0..=4, got {depths:?}"
    );
    check_queries(queries, d);
    let active: Vec<(usize, u8)> = depths
        .iter()
        .enumerate()
        .filter(|&(_, &t)| t > 0)
        .map(|(c, &t)| (c, t))
        .collect();
    let n = store.stored_tokens();
    let mut scores = vec![vec![0.0; n]; queries.len()];
    for i in 0..n {
        let decoded: Vec<(usize, f64)> = active
            .iter()
            .map(|&(c, t)| (c, store.decode(i, c, t)))
            .collect();
        for (q, s) in queries.iter().zip(scores.iter_mut()) {
            s[i] = decoded.iter().map(|&(c, x)| q[c] * x).sum();
        }
    }
    scores
}

/// How far a GPU scan's score of stored token `token` may lie from [`score_stored`]'s, for the
/// plain scan (`tensor_cores = false`) or the tensor-core one; `q` is the head's query in the
/// store basis (f64 of the f32 the kernel reads).
///
/// Plain: `(m + 2)·2⁻²⁴·Σ_c |q_c·x̂_c|`, `m` the active channels. The kernel forms `coef =
/// fl(q_c · Δ·2^(4−t))` (`Δ·2^(4−t)` is exact in f32, so one rounding, relative error <= u =
/// 2⁻²⁴) and `f = p + ½ − 2^(t−1)` exactly, then adds `coef·f` to an f32 accumulator with one
/// fma (one rounding) per active channel. Recursive summation of `m` terms errs by at most
/// `γ_m·Σ|terms|`, `γ_m = m·u/(1 − m·u)`, and the terms are within `(1 + u)` of `q_c·x̂_c`, so
/// the error is below `(m + 1)·u·Σ|q_c·x̂_c|` plus second-order terms; `m + 2` covers those.
///
/// Tensor cores: `2⁻²¹·(P + 4)·Σ_{c, k<t_c} Δ_c·2^(2−k)·(|q_c| + max_c |q_c|)`, `P` the active
/// plane pieces. The kernel adds `(±Δ_c)·w` over the pieces `(c, k)`, `w = q_c·2^(2−k)·2^e`
/// (`2^e` puts `max_c |q_c|` in `[1/16, 1/8)`) held as an fp16 pair `hi + lo`: `|w − hi − lo|
/// <= 2⁻²²·|w|` where `lo` is normal and `<= 2⁻²⁵` (half a subnormal step; `2⁻²¹·max|q|`
/// unscaled) where not. `Δ·hi` and `Δ·lo` are exact in fp32; the tensor cores add them
/// (truncating: ~2 units of 2⁻²⁴ a product over the pieces and the k-chunks' partial sums) and
/// the high and low columns are added and scaled back once each, so the bound is loose by ~4.
/// A wrong bit, Δ or plane weight, or a dropped `lo`, errs by `2⁻¹²` of a term or more.
pub fn scan_tolerance(
    store: &HeadStore,
    depths: &[u8],
    q: &[f64],
    token: usize,
    tensor_cores: bool,
) -> f64 {
    let active = || depths.iter().enumerate().filter(|&(_, &t)| t > 0);
    if tensor_cores {
        let largest = q.iter().fold(0f64, |a, &x| a.max(x.abs()));
        let pieces: usize = depths.iter().map(|&t| t as usize).sum();
        let mass: f64 = active()
            .flat_map(|(c, &t)| (0..i32::from(t)).map(move |k| (c, k)))
            .map(|(c, k)| {
                f64::from(store.scale(token, c).to_f32())
                    * 2f64.powi(2 - k)
                    * (q[c].abs() + largest)
            })
            .sum();
        (pieces + 4) as f64 * 2f64.powi(-21) * mass + 1e-30
    } else {
        let mass: f64 = active()
            .map(|(c, &t)| (q[c] * store.decode(token, c, t)).abs())
            .sum();
        (active().count() + 2) as f64 * 2f64.powi(-24) * mass + 1e-30
    }
}

/// Exact scores `q_h · k_i` from bf16 keys (token-major `[n][d]`) for the tokens in `range`
/// (§4 `oracle`, and the tail of §6). The result has `range.len()` scores per head.
pub fn score_exact(
    keys: &[bf16],
    d: usize,
    range: Range<usize>,
    queries: &[Vec<f64>],
) -> Vec<Vec<f64>> {
    check_queries(queries, d);
    assert!(
        range.end * d <= keys.len(),
        "tokens {range:?} are outside the {} keys given",
        keys.len() / d
    );
    queries
        .iter()
        .map(|q| {
            range
                .clone()
                .map(|i| dot_bf16(q, &keys[i * d..(i + 1) * d]))
                .collect()
        })
        .collect()
}

/// The landmarks of the first `n` tokens: for each group of [`LANDMARK_TOKENS`] tokens, the mean
/// key computed in f64 and rounded to fp16 as it would be stored; `[n / 8][d]` token-major.
/// A final partial group (when `n` is not a multiple of 8) is the mean of the tokens it has.
pub fn landmark_means(keys: &[bf16], d: usize, n: usize) -> Vec<f16> {
    assert!(
        n * d <= keys.len(),
        "{n} tokens asked, {} given",
        keys.len() / d
    );
    let mut out = Vec::with_capacity(n.div_ceil(LANDMARK_TOKENS) * d);
    for group in keys[..n * d].chunks(LANDMARK_TOKENS * d) {
        let tokens = group.len() / d;
        for c in 0..d {
            let sum: f64 = (0..tokens).map(|i| group[i * d + c].to_f64()).sum();
            out.push(f16::from_f64(sum / tokens as f64));
        }
    }
    out
}

/// §4 `landmark`: each of the first `n_stored` tokens scores its group's `q_h · mean`.
pub fn score_landmark(
    keys: &[bf16],
    d: usize,
    n_stored: usize,
    queries: &[Vec<f64>],
) -> Vec<Vec<f64>> {
    check_queries(queries, d);
    let means = landmark_means(keys, d, n_stored);
    queries
        .iter()
        .map(|q| {
            let group_scores: Vec<f64> = means
                .chunks_exact(d)
                .map(|m| q.iter().zip(m).map(|(a, b)| a * b.to_f64()).sum())
                .collect();
            (0..n_stored)
                .map(|i| group_scores[i / LANDMARK_TOKENS])
                .collect()
        })
        .collect()
}

/// Extends scores of the first `stored[h].len()` tokens with exact scores of the tail tokens
/// `stored[h].len()..n_total`, using raw-basis `raw_queries` and raw bf16 `raw_keys` (`[n][d]`,
/// at least `n_total` tokens).
pub fn with_exact_tail(
    mut stored: Vec<Vec<f64>>,
    raw_keys: &[bf16],
    d: usize,
    n_total: usize,
    raw_queries: &[Vec<f64>],
) -> Vec<Vec<f64>> {
    assert_eq!(
        stored.len(),
        raw_queries.len(),
        "one score row per query head"
    );
    let n_stored = stored.first().map_or(0, Vec::len);
    assert!(
        stored.iter().all(|s| s.len() == n_stored),
        "ragged score rows"
    );
    assert!(
        n_stored <= n_total,
        "{n_stored} stored tokens but {n_total} in all"
    );
    let tail = score_exact(raw_keys, d, n_stored..n_total, raw_queries);
    for (s, t) in stored.iter_mut().zip(tail) {
        s.extend(t);
    }
    stored
}

/// Scores of every token of a head (`store.total_tokens()` per query head): stored tokens from
/// the store with the depth plan and the store-basis `store_queries`, the tail exactly from the
/// raw bf16 keys (`raw_keys`, `[n_total][d]`) with the raw-basis `raw_queries`. In the raw
/// basis both query sets are the same.
pub fn score_all(
    store: &HeadStore,
    depths: &[u8],
    store_queries: &[Vec<f64>],
    raw_keys: &[bf16],
    raw_queries: &[Vec<f64>],
) -> Vec<Vec<f64>> {
    let d = store.layout().head_dim();
    let n_total = store.total_tokens();
    assert_eq!(
        raw_keys.len(),
        n_total * d,
        "raw keys hold {} tokens, the store {n_total}",
        raw_keys.len() / d
    );
    let stored = score_stored(store, depths, store_queries);
    with_exact_tail(stored, raw_keys, d, n_total, raw_queries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{BlockSize, HeadId, StoreLayout};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn random_keys(rng: &mut ChaCha8Rng, n: usize, d: usize) -> Vec<bf16> {
        (0..n * d)
            .map(|_| bf16::from_f64(rng.gen_range(-3.0..3.0)))
            .collect()
    }

    fn random_queries(rng: &mut ChaCha8Rng, g: usize, d: usize) -> Vec<Vec<f64>> {
        (0..g)
            .map(|_| (0..d).map(|_| rng.gen_range(-1.0..1.0)).collect())
            .collect()
    }

    fn store(keys: &[bf16], d: usize) -> HeadStore {
        let layout = StoreLayout::new(d, BlockSize::B64, 2).unwrap();
        HeadStore::from_keys(layout, HeadId::default(), keys).unwrap()
    }

    #[test]
    fn depth_four_is_within_half_a_step_per_channel() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let d = 64;
        let keys = random_keys(&mut rng, 128, d);
        let queries = random_queries(&mut rng, 3, d);
        let st = store(&keys, d);
        let approx = score_stored(&st, &[4; 64], &queries);
        let exact = score_exact(&keys, d, 0..128, &queries);
        for (h, q) in queries.iter().enumerate() {
            for i in 0..128 {
                // |x - x̂_4| <= Δ / 2 per channel.
                let bound: f64 = (0..d)
                    .map(|c| q[c].abs() * st.scale(i, c).to_f64() / 2.0)
                    .sum();
                assert!((approx[h][i] - exact[h][i]).abs() <= bound + 1e-12);
            }
        }
    }

    #[test]
    fn depth_zero_channels_contribute_nothing() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let d = 64;
        let keys = random_keys(&mut rng, 64, d);
        let mut queries = random_queries(&mut rng, 2, d);
        let st = store(&keys, d);
        let mut depths = [0u8; 64];
        depths[3] = 2;
        depths[40] = 1;
        let a = score_stored(&st, &depths, &queries);
        // Changing the query on unread channels changes nothing.
        queries[0][7] += 5.0;
        queries[1][63] -= 5.0;
        let b = score_stored(&st, &depths, &queries);
        assert_eq!(a, b);
        for (i, got) in a[0].iter().enumerate() {
            let expect = queries[0][3] * st.decode(i, 3, 2) + queries[0][40] * st.decode(i, 40, 1);
            assert!((got - expect).abs() < 1e-12);
        }
        assert!(score_stored(&st, &[0; 64], &queries)[1]
            .iter()
            .all(|&s| s == 0.0));
    }

    #[test]
    fn landmark_is_group_mean_rounded_to_fp16() {
        let d = 64;
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let keys = random_keys(&mut rng, 20, d);
        let means = landmark_means(&keys, d, 20);
        assert_eq!(means.len(), 3 * d);
        let manual: f64 = (8..16).map(|i| keys[i * d + 5].to_f64()).sum::<f64>() / 8.0;
        assert_eq!(means[d + 5], f16::from_f64(manual));
        let partial: f64 = (16..20).map(|i| keys[i * d + 9].to_f64()).sum::<f64>() / 4.0;
        assert_eq!(means[2 * d + 9], f16::from_f64(partial));
        let q = random_queries(&mut rng, 1, d);
        let s = score_landmark(&keys, d, 16, &q);
        assert_eq!(s[0].len(), 16);
        let group1: f64 = (0..d).map(|c| q[0][c] * means[d + c].to_f64()).sum();
        assert!(s[0][8..16].iter().all(|&x| x == group1));
        assert_ne!(s[0][0], s[0][8]);
    }

    #[test]
    fn score_all_joins_store_and_exact_tail() {
        let d = 64;
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let keys = random_keys(&mut rng, 64 * 2 + 17, d);
        let st = store(&keys, d);
        assert_eq!(st.stored_tokens(), 128);
        let queries = random_queries(&mut rng, 4, d);
        let depths: Vec<u8> = (0..d).map(|c| (c % 5) as u8).collect();
        let all = score_all(&st, &depths, &queries, &keys, &queries);
        let stored = score_stored(&st, &depths, &queries);
        let exact = score_exact(&keys, d, 0..145, &queries);
        for h in 0..4 {
            assert_eq!(all[h].len(), 145);
            assert_eq!(&all[h][..128], &stored[h][..]);
            assert_eq!(&all[h][128..], &exact[h][128..]);
        }
    }

    #[test]
    fn score_exact_range_offsets() {
        let d = 64;
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let keys = random_keys(&mut rng, 10, d);
        let q = random_queries(&mut rng, 2, d);
        let full = score_exact(&keys, d, 0..10, &q);
        let part = score_exact(&keys, d, 3..7, &q);
        assert_eq!(&full[1][3..7], &part[1][..]);
    }
}
