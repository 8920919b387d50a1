use super::*;
use crate::attention::{attend, default_scale};
use crate::synthetic::{generate_head, SyntheticHead, SyntheticSettings};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn to_bf16(v: &[f64]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f64(x)).collect()
}

fn gaussian(rng: &mut ChaCha8Rng, n: usize) -> Vec<f64> {
    (0..n)
        .map(|_| rng.sample::<f64, _>(rand_distr::StandardNormal))
        .collect()
}

fn synthetic(n: usize, head_dim: usize, seed: u64) -> SyntheticHead {
    let settings = SyntheticSettings {
        seed,
        n,
        head_dim,
        kv_heads: 1,
        group: 4,
        ..SyntheticSettings::default()
    };
    generate_head(&settings, 0).unwrap()
}

fn exact(keys: &[bf16], d: usize, q: &[f64], t: usize) -> f64 {
    keys[t * d..(t + 1) * d]
        .iter()
        .zip(q)
        .map(|(k, q)| k.to_f64() * q)
        .sum()
}

/// recall@k of the winners against the exact top-k of `q̄ · k` over the retrievable tokens.
fn recall(index: &PariskvIndex, head: &SyntheticHead, n: usize, k: usize) -> f64 {
    let d = index.head_dim();
    let r = retrieve(index, &head.queries, n, k).unwrap();
    let scores: Vec<f64> = (0..n).map(|t| exact(&head.keys, d, &r.q_mean, t)).collect();
    let truth = top_k_of(&scores, r.retrievable.clone(), k);
    let hits = r.winners.iter().filter(|t| truth.contains(t)).count();
    hits as f64 / k as f64
}

#[test]
fn hadamard_is_orthogonal_and_fwht_matches_matrix() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for d in [8usize, 64] {
        for i in 0..d {
            for j in 0..d {
                let dot: f64 = (0..d)
                    .map(|c| hadamard_entry(i, c) * hadamard_entry(j, c))
                    .sum();
                assert_eq!(dot, if i == j { d as f64 } else { 0.0 });
            }
        }
        let x = gaussian(&mut rng, d);
        let mut fast = x.clone();
        fwht(&mut fast);
        for (i, f) in fast.iter().enumerate() {
            let slow: f64 = (0..d).map(|j| hadamard_entry(i, j) * x[j]).sum();
            assert!((f - slow).abs() < 1e-12, "d {d} row {i}: {f} vs {slow}");
        }
    }
    // Natural (Sylvester) order: row 1 alternates, row 2 goes in pairs.
    assert_eq!(
        (0..4).map(|j| hadamard_entry(1, j)).collect::<Vec<_>>(),
        [1.0, -1.0, 1.0, -1.0]
    );
    assert_eq!(
        (0..4).map(|j| hadamard_entry(2, j)).collect::<Vec<_>>(),
        [1.0, 1.0, -1.0, -1.0]
    );
}

#[test]
fn signs_are_seeded_shared_and_mixed() {
    let s256 = signs(256);
    assert_eq!(signs(256), s256);
    assert_eq!(&s256[..64], &signs(64)[..]);
    assert!(s256.iter().all(|&s| s == 1.0 || s == -1.0));
    let negative = s256.iter().filter(|&&s| s < 0.0).count();
    assert!((80..176).contains(&negative), "{negative} negative signs");
}

#[test]
fn rotation_preserves_inner_products() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let s = signs(128);
    let (a, b) = (gaussian(&mut rng, 128), gaussian(&mut rng, 128));
    let (ra, na) = rotate(&a, &s);
    let (rb, nb) = rotate(&b, &s);
    let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
    assert!((dot(&ra, &ra) - 1.0).abs() < 1e-12);
    assert!((na * nb * dot(&ra, &rb) - dot(&a, &b)).abs() < 1e-9);
}

/// §12: a head dimension that is not a power of two is zero-padded to one before the transform.
/// The rotation of a `D`-channel vector is the rotation of its zero-padded copy, still
/// orthonormal, and the index has the padded dimension's subspaces and codes.
#[test]
fn head_dims_off_a_power_of_two_are_zero_padded() {
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    for (d, padded) in [(80, 128), (96, 128), (192, 256)] {
        assert_eq!(padded_dim(d), padded);
        let s = signs(padded);
        let (a, b) = (gaussian(&mut rng, d), gaussian(&mut rng, d));
        let mut a_padded = a.clone();
        a_padded.resize(padded, 0.0);
        let (ra, na) = rotate(&a, &s);
        assert_eq!((ra.clone(), na), rotate(&a_padded, &s), "D = {d}");
        assert_eq!(ra.len(), padded);
        let (rb, nb) = rotate(&b, &s);
        let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
        assert!((dot(&ra, &ra) - 1.0).abs() < 1e-12, "D = {d}");
        assert!(
            (na * nb * dot(&ra, &rb) - dot(&a, &b)).abs() < 1e-9,
            "D = {d}"
        );

        let keys = to_bf16(&gaussian(&mut rng, 3 * d));
        let index = PariskvIndex::build(&keys, d).unwrap();
        assert_eq!((index.head_dim(), index.padded_dim()), (d, padded));
        assert_eq!(index.subspaces(), padded / 8);
        assert_eq!(index.signs(), &s[..]);
        assert_eq!(index.codes(2).len(), padded / 2);
        assert_eq!(index.ids(2).len(), padded / 8);
        assert_eq!(index.weights(2).len(), padded / 8);
        assert_eq!(index_bytes_per_token(d), index_bytes_per_token(padded));
        // The padded index is the index of the zero-padded keys, row for row.
        let padded_keys: Vec<bf16> = keys
            .chunks(d)
            .flat_map(|k| {
                k.iter()
                    .copied()
                    .chain(std::iter::repeat(bf16::ZERO))
                    .take(padded)
            })
            .collect();
        let wide = PariskvIndex::build(&padded_keys, padded).unwrap();
        for t in 0..3 {
            assert_eq!(index.ids(t), wide.ids(t));
            assert_eq!(index.codes(t), wide.codes(t));
            assert_eq!(index.weights(t), wide.weights(t));
        }
    }
}

#[test]
fn subspace_codes_by_hand() {
    // ±0.5 alternating: r = sqrt 2, |u| = 0.35355 → level 4; positive at even j.
    let c = encode_subspace(&[0.5, -0.5, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5]);
    assert_eq!(c.id, 1 + 4 + 16 + 64);
    assert_eq!(c.nibbles, [4, 12, 4, 12, 4, 12, 4, 12]);
    assert!((c.r - 2f64.sqrt()).abs() < 1e-15);
    assert!((c.alpha - 8.0 * 0.3973 * 0.5 / 2f64.sqrt()).abs() < 1e-12);
    // (3, 0 ×6, -4): r = 5, u = (0.6, 0, ..., -0.8) → levels 6, 0, 7; zeros count as positive.
    let c = encode_subspace(&[3.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.0, -4.0]);
    assert_eq!(c.id, 0b0111_1111);
    assert_eq!(c.nibbles, [6, 0, 0, 0, 0, 0, 0, 8 | 7]);
    assert!((c.alpha - (0.6169 * 0.6 + 0.7633 * 0.8)).abs() < 1e-12);
    assert!((c.weight(2.0) - 2.0 * 5.0 / c.alpha).abs() < 1e-12);
    // The empty subspace: id 255, all nibbles 0, no weight.
    let c = encode_subspace(&[0.0; 8]);
    assert_eq!((c.id, c.nibbles, c.r, c.alpha), (255, [0; 8], 0.0, 0.0));
    assert_eq!(c.weight(3.0), 0.0);
    // Levels count thresholds strictly below.
    assert_eq!(level(0.0843), 0);
    assert_eq!(level(0.08431), 1);
    assert_eq!(level(0.6901), 6);
    assert_eq!(level(1.0), 7);
    assert_eq!(decode_nibble(8 | 3), -0.3025);
    assert_eq!(decode_nibble(7), 0.7633);
}

#[test]
fn index_rows_by_hand() {
    // Key 2·e_0 (D = 64): ũ = s_0 H[:,0] / 8 = s_0/8 everywhere; each subspace has r = 1/sqrt 8,
    // |u| = 1/sqrt 8 (level 4), α = 8 · 0.3973 / sqrt 8, w = 2 r / α.
    // Key e_1: ũ_i = s_1 (-1)^i / 8, alternating signs, so codes alternate within each byte.
    let d = 64;
    let mut keys = vec![0.0; 2 * d];
    keys[0] = 2.0;
    keys[d + 1] = 1.0;
    let index = PariskvIndex::build(&to_bf16(&keys), d).unwrap();
    let s = signs(d);
    let (id0, nib0) = if s[0] > 0.0 { (255, 4) } else { (0, 12) };
    assert_eq!(index.len(), 2);
    assert!(index.ids(0).iter().all(|&id| id == id0));
    assert!((0..d).all(|c| index.nibble(0, c) == nib0));
    let w = 2.0 * (1.0 / 8f64.sqrt()) / (8.0 * 0.3973 / 8f64.sqrt());
    assert!(index.weights(0).iter().all(|&x| x == bf16::from_f64(w)));
    let (even, odd) = if s[1] > 0.0 { (4u8, 12u8) } else { (12, 4) };
    assert!(index.codes(1).iter().all(|&b| b == even | (odd << 4)));
    let id1 = if s[1] > 0.0 { 0b0101_0101 } else { 0b1010_1010 };
    assert!(index.ids(1).iter().all(|&id| id == id1));
    for b in 0..index.subspaces() {
        let h = index.histogram(b);
        assert_eq!(h.iter().sum::<u32>(), 2);
        assert_eq!(h[id0 as usize], 1);
        assert_eq!(h[id1 as usize], 1);
    }
    assert_eq!(index_bytes_per_token(128), 112);
    assert_eq!(index_bytes_per_token(64), 56);
    assert_eq!(index_bytes_per_token(256), 224);
    // 80 and 96 pad to 128, 192 to 256.
    assert_eq!(index_bytes_per_token(80), 112);
    assert_eq!(index_bytes_per_token(96), 112);
    assert_eq!(index_bytes_per_token(192), 224);
}

#[test]
fn zero_key_has_no_weight() {
    let index = PariskvIndex::build(&to_bf16(&[0.0; 64]), 64).unwrap();
    assert!(index.ids(0).iter().all(|&id| id == 255));
    assert!(index.codes(0).iter().all(|&b| b == 0));
    assert!(index.weights(0).iter().all(|w| w.to_f64() == 0.0));
    assert_eq!(index.estimate(0, 3.0, &vec![0.1; 64]), 0.0);
}

#[test]
fn direction_code_beats_centroid_and_estimator_tracks_inner_product() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    // Per-subspace reconstruction: the 4-bit direction is much closer to u than the centroid.
    let (mut cos_code, mut cos_centroid) = (0.0, 0.0);
    let trials = 2000;
    for _ in 0..trials {
        let sub = gaussian(&mut rng, 8);
        let c = encode_subspace(&sub);
        let u: Vec<f64> = sub.iter().map(|v| v / c.r).collect();
        let rec: Vec<f64> = c.nibbles.iter().map(|&n| decode_nibble(n)).collect();
        let rec_norm = rec.iter().map(|x| x * x).sum::<f64>().sqrt();
        cos_code += c.alpha / rec_norm;
        let centroid: f64 = u
            .iter()
            .enumerate()
            .map(|(j, x)| if c.id >> j & 1 == 1 { *x } else { -x })
            .sum::<f64>()
            / 8f64.sqrt();
        cos_centroid += centroid;
    }
    let (cos_code, cos_centroid) = (cos_code / trials as f64, cos_centroid / trials as f64);
    assert!(cos_code > 0.97, "code cosine {cos_code}");
    assert!(cos_centroid < 0.85, "centroid cosine {cos_centroid}");

    // ŝ against q̄ · k on random keys: high correlation, small relative error, also where the
    // transform pads the keys (D = 96).
    for d in [128, 96] {
        estimator_tracks_inner_product(&mut rng, d);
    }
}

fn estimator_tracks_inner_product(rng: &mut ChaCha8Rng, d: usize) {
    let n = 2000;
    let keys = to_bf16(&gaussian(rng, n * d));
    let index = PariskvIndex::build(&keys, d).unwrap();
    let q = gaussian(rng, d);
    let (q_tilde, q_norm) = rotate(&q, index.signs());
    let truth: Vec<f64> = (0..n).map(|t| exact(&keys, d, &q, t)).collect();
    let est: Vec<f64> = (0..n)
        .map(|t| index.estimate(t, q_norm, &q_tilde))
        .collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (mt, me) = (mean(&truth), mean(&est));
    let cov: f64 = truth
        .iter()
        .zip(&est)
        .map(|(a, b)| (a - mt) * (b - me))
        .sum();
    let var = |v: &[f64], m: f64| v.iter().map(|a| (a - m).powi(2)).sum::<f64>();
    let corr = cov / (var(&truth, mt) * var(&est, me)).sqrt();
    assert!(corr > 0.97, "D = {d}: correlation {corr}");
    let err: f64 = truth.iter().zip(&est).map(|(a, b)| (a - b).powi(2)).sum();
    assert!(
        err / var(&truth, mt) < 0.06,
        "D = {d}: relative error {}",
        err / var(&truth, mt)
    );
}

#[test]
fn parameters_by_retrievable_count() {
    assert_eq!(tier_bounds(1000), [25, 75, 150, 250, 375, 500]);
    assert_eq!(candidate_count(1000), 500);
    assert_eq!(tier_bounds(4999)[5], 2500);
    assert_eq!(tier_bounds(5000), [75, 225, 450, 750, 1125, 1500]);
    assert_eq!(candidate_count(5000), 1250);
    assert_eq!(candidate_count(8156), 2039);
    assert_eq!(rho_beta_percent(9_999), (30, 25));
    assert_eq!(rho_beta_percent(10_000), (25, 20));
    assert_eq!(rho_beta_percent(29_999), (25, 20));
    assert_eq!(rho_beta_percent(30_000), (20, 10));
    assert_eq!(candidate_count(30_001), 3001);
    assert_eq!(tier_bounds(0), [0; 6]);
    assert_eq!(candidate_count(1), 1);
}

#[test]
fn tiers_by_hand() {
    let mut histogram = vec![0u32; 256];
    histogram[7] = 3;
    histogram[2] = 4;
    histogram[9] = 0;
    histogram[1] = 10;
    let mut ranking: Vec<u8> = vec![7, 9, 2, 1];
    ranking.extend((0..=255u8).filter(|id| ![7, 9, 2, 1].contains(id)));
    // Prefix sums: 3, 3, 7, 17, ...
    let lengths = tier_lengths(&histogram, &ranking, &[0, 1, 4, 7, 8, 100]);
    assert_eq!(lengths, [0, 0, 2, 2, 3, 256]);
}

#[test]
fn ranking_ties_go_to_lower_id() {
    let r = rank_centroids(&[1.0, -2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    // Best sign pattern: bit 0 set, bit 1 clear; the six zero coordinates tie → ids ascending.
    assert_eq!(r[0], 0b0000_0001);
    assert_eq!(r[1], 0b0000_0101);
    assert_eq!(r[255], 0b1111_1110);
    let mut sorted = r.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..=255u8).collect::<Vec<_>>());
}

#[test]
fn votes_tiers_and_recall_on_synthetic_keys() {
    let n = 8192;
    let k = 64;
    let head = synthetic(n, 128, 11);
    let index = PariskvIndex::build(&head.keys, 128).unwrap();
    let r = retrieve(&index, &head.queries, n, k).unwrap();
    let b = index.subspaces();
    let n_r = n - SINK - LOCAL;
    assert_eq!(r.retrievable, SINK..n - LOCAL);
    assert_eq!(r.votes.len(), n_r);
    assert!(r.votes.iter().all(|&v| v as usize <= 6 * b));
    assert!(r.votes.iter().any(|&v| v > 0));
    let bounds = tier_bounds(n_r);
    for (sub, lengths) in r.tiers.iter().enumerate() {
        assert!(lengths.windows(2).all(|w| w[0] <= w[1]), "{lengths:?}");
        let h = index.histogram(sub);
        for (&len, &bound) in lengths.iter().zip(&bounds) {
            let mass = |l: usize| -> usize {
                r.rankings[sub][..l]
                    .iter()
                    .map(|&id| h[id as usize] as usize)
                    .sum()
            };
            assert!(mass(len) < bound);
            assert!(len == 256 || mass(len + 1) >= bound, "tier not maximal");
        }
    }
    // Candidates are the most-voted tokens.
    assert_eq!(r.candidates.len(), candidate_count(n_r));
    let worst_in = r
        .candidates
        .iter()
        .map(|&t| r.votes[t - SINK])
        .min()
        .unwrap();
    let best_out = r
        .retrievable
        .clone()
        .filter(|t| !r.candidates.contains(t))
        .map(|t| r.votes[t - SINK])
        .max()
        .unwrap();
    assert!(worst_in >= best_out);
    assert_eq!(r.winners.len(), k);

    let good = recall(&index, &head, n, k);
    assert!(good > 0.5, "recall {good}");
    // The same keys indexed in a shuffled order: the index no longer describes the tokens.
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(5));
    let shuffled: Vec<bf16> = order
        .iter()
        .flat_map(|&t| head.keys[t * 128..(t + 1) * 128].iter().copied())
        .collect();
    let bad = recall(&PariskvIndex::build(&shuffled, 128).unwrap(), &head, n, k);
    assert!(
        bad < 0.2 && bad < good / 3.0,
        "shuffled recall {bad} vs {good}"
    );
}

#[test]
fn other_head_dims_retrieve_too() {
    for d in [64, 80, 96, 192, 256] {
        let n = 3000;
        let head = synthetic(n, d, 12);
        let index = PariskvIndex::build(&head.keys, d).unwrap();
        let r = recall(&index, &head, n, 32);
        assert!(r > 0.5, "d {d}: recall {r}");
    }
}

#[test]
fn deterministic_and_incremental() {
    let n = 1000;
    let head = synthetic(n, 64, 13);
    let index = PariskvIndex::build(&head.keys, 64).unwrap();
    assert_eq!(PariskvIndex::build(&head.keys, 64).unwrap(), index);
    let mut grown = PariskvIndex::new(64).unwrap();
    for block in head.keys.chunks(64 * 64) {
        grown.append(block).unwrap();
    }
    assert_eq!(grown, index);
    let a = retrieve(&index, &head.queries, n, 40).unwrap();
    let b = retrieve(&grown, &head.queries, n, 40).unwrap();
    assert_eq!(a, b);
}

#[test]
fn step_selects_attends_and_counts_bytes() {
    let n = 2000;
    let k = 48;
    let d = 64;
    let head = synthetic(n, d, 14);
    let index = PariskvIndex::build(&head.keys, d).unwrap();
    let input = PariskvInput {
        index: &index,
        keys: &head.keys,
        values: &head.values,
        queries: &head.queries,
        n_total: n,
    };
    let step = pariskv_step(&input, k, default_scale(d)).unwrap();
    let sel = &step.selection;
    assert_eq!(sel.heads.len(), head.queries.len());
    assert!(sel.heads.iter().all(|s| s == &sel.heads[0]));
    assert_eq!(sel.union, sel.heads[0]);
    assert_eq!(sel.union.len(), SINK + LOCAL + k);
    assert!((0..SINK)
        .chain(n - LOCAL..n)
        .all(|t| sel.union.contains(&t)));
    assert_eq!(
        pariskv_select(&index, &head.queries, n, k).unwrap(),
        step.selection
    );
    for (q, o) in head.queries.iter().zip(&step.outputs) {
        let want = attend(q, &head.keys, &head.values, d, &sel.union, default_scale(d));
        assert_eq!(o, &want);
    }
    let n_r = n - SINK - LOCAL;
    let c = candidate_count(n_r);
    assert_eq!(step.bytes.histograms, 8 * 256 * 4);
    assert_eq!(step.bytes.ids, n_r * 8);
    assert_eq!(step.bytes.rerank, c * (32 + 16));
    assert_eq!(step.bytes.rows, (SINK + LOCAL + k) * d * 4);
    assert_eq!(
        step.bytes.total(),
        step.bytes.histograms + step.bytes.ids + step.bytes.rerank + step.bytes.rows
    );

    // Short sequences keep every token.
    let short = PariskvIndex::build(&head.keys[..50 * d], d).unwrap();
    let sel = pariskv_select(&short, &head.queries, 50, 20).unwrap();
    assert_eq!(sel.union, (0..50).collect::<Vec<_>>());
}

#[test]
fn bad_input_is_refused() {
    for d in [0, 8, 12, 72, 100, 512] {
        assert_eq!(
            PariskvIndex::new(d).unwrap_err(),
            PariskvError::HeadDim { head_dim: d }
        );
    }
    let msg = PariskvIndex::new(100).unwrap_err().to_string();
    assert!(msg.contains("64, 80, 96, 128, 192 or 256"), "{msg}");
    assert!(matches!(
        PariskvIndex::build(&to_bf16(&[1.0; 65]), 64),
        Err(PariskvError::KeyShape { values: 65, .. })
    ));

    // A bad row in an appended block leaves the index as it was.
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let mut index = PariskvIndex::build(&to_bf16(&gaussian(&mut rng, 64 * 40)), 64).unwrap();
    let before = index.clone();
    let mut block = to_bf16(&gaussian(&mut rng, 64 * 3));
    block[64 + 5] = bf16::NAN;
    assert!(matches!(
        index.append(&block),
        Err(PariskvError::NonFiniteKey {
            token: 41,
            channel: 5,
            ..
        })
    ));
    block[64 + 5] = bf16::INFINITY;
    assert!(index.append(&block).is_err());
    assert!(matches!(
        index.append(&[bf16::MAX; 64]),
        Err(PariskvError::WeightOverflow { token: 40, .. })
    ));
    assert_eq!(index, before);

    let q = vec![vec![0.5; 64]; 2];
    assert_eq!(
        retrieve(&index, &[], 40, 4).unwrap_err(),
        PariskvError::NoQueries
    );
    assert!(matches!(
        retrieve(&index, &[vec![0.5; 63]], 40, 4),
        Err(PariskvError::QueryShape {
            head: 0,
            got: 63,
            want: 64
        })
    ));
    let mut nan = q.clone();
    nan[1][3] = f64::NAN;
    assert!(matches!(
        retrieve(&index, &nan, 40, 4),
        Err(PariskvError::NonFiniteQuery {
            head: 1,
            channel: 3,
            ..
        })
    ));
    // 40 indexed tokens cover sequences of 40..=72 tokens only.
    assert!(retrieve(&index, &q, 72, 4).is_ok());
    assert!(retrieve(&index, &q, 40, 4).is_ok());
    for n_total in [39, 73] {
        assert!(matches!(
            retrieve(&index, &q, n_total, 4),
            Err(PariskvError::IndexCoverage { indexed: 40, .. })
        ));
    }
    let keys = to_bf16(&gaussian(&mut rng, 64 * 40));
    let input = PariskvInput {
        index: &index,
        keys: &keys[..64 * 39],
        values: &keys,
        queries: &q,
        n_total: 40,
    };
    assert_eq!(
        pariskv_step(&input, 4, 0.125).unwrap_err(),
        PariskvError::Rows {
            rows: 39,
            tokens: 40
        }
    );
}

#[test]
fn zero_query_mean_is_defined() {
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let index = PariskvIndex::build(&to_bf16(&gaussian(&mut rng, 64 * 300)), 64).unwrap();
    let q = vec![vec![1.0; 64], vec![-1.0; 64]];
    let r = retrieve(&index, &q, 300, 10).unwrap();
    assert_eq!(r.q_norm, 0.0);
    assert!(r.estimates.iter().all(|&s| s == 0.0));
    assert_eq!(r.rankings[0], (0..=255u8).collect::<Vec<_>>());
    // All estimates tie: the winners are the lowest-index candidates.
    let mut lowest = r.candidates.clone();
    lowest.sort_unstable();
    assert_eq!(r.winners, lowest[..10]);
}
