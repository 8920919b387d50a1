use super::*;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Keys whose channels have very different scales and some correlation, and queries that
/// favour other channels, so that score order and eigenvalue order differ.
fn calibration(d: usize, n: usize, seed: u64) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let scale: Vec<f64> = (0..d).map(|c| 0.2 + (c % 7) as f64).collect();
    let keys = (0..n)
        .map(|_| {
            let shared: f64 = rng.gen_range(-1.0..1.0);
            (0..d)
                .map(|c| scale[c] * rng.gen_range(-1.0..1.0) + shared * (c % 3) as f64)
                .collect()
        })
        .collect();
    let queries = (0..3 * 4)
        .map(|_| {
            (0..d)
                .map(|c| rng.gen_range(-1.0..1.0) * (d - c) as f64)
                .collect()
        })
        .collect();
    (keys, queries)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn assert_orthonormal(klt: &Klt) {
    let d = klt.head_dim();
    for i in 0..d {
        for j in 0..d {
            let expected = if i == j { 1.0 } else { 0.0 };
            let got = dot(&klt.basis_vector(i), &klt.basis_vector(j));
            assert!((got - expected).abs() < 1e-10, "u{i}·u{j} = {got}");
        }
    }
}

/// Checks the order from scratch: `λ_i` as the Rayleigh quotient `uᵀ C u` of the covariance
/// computed here, the score `λ_i · mean (q·u_i)²`, non-increasing along the basis.
fn assert_ordered(klt: &Klt, keys: &[Vec<f64>], queries: &[Vec<f64>]) {
    let d = klt.head_dim();
    let n = keys.len() as f64;
    let mean: Vec<f64> = (0..d)
        .map(|c| keys.iter().map(|k| k[c]).sum::<f64>() / n)
        .collect();
    let scores: Vec<f64> = (0..d)
        .map(|j| {
            let u = klt.basis_vector(j);
            let lambda = keys
                .iter()
                .map(|k| {
                    let centred: Vec<f64> = k.iter().zip(&mean).map(|(x, m)| x - m).collect();
                    dot(&centred, &u).powi(2)
                })
                .sum::<f64>()
                / n;
            let q2 = queries.iter().map(|q| dot(q, &u).powi(2)).sum::<f64>() / queries.len() as f64;
            lambda * q2
        })
        .collect();
    let tol = 1e-9 * scores.iter().copied().fold(1.0, f64::max);
    for (j, (got, want)) in scores.iter().zip(klt.score_variances()).enumerate() {
        assert!((got - want).abs() <= tol, "score {j}: {got} vs {want}");
    }
    for j in 1..d {
        assert!(
            scores[j] <= scores[j - 1] + tol,
            "score {j} above {}",
            j - 1
        );
    }
}

/// Diagonal covariance with variances 4, 2.25, 1, 0.25 and queries weighting the last channel:
/// scores 0.04, 0.0225, 0.01, 25, so the basis is e3, e0, e1, e2, not the eigenvalue order.
#[test]
fn known_basis_follows_score_variance_not_eigenvalue() {
    let s = [4.0, 3.0, 2.0, 1.0];
    let keys: Vec<Vec<f64>> = (0..8)
        .map(|row| {
            let mut k = vec![0.0; 4];
            k[row / 2] = if row % 2 == 0 {
                s[row / 2]
            } else {
                -s[row / 2]
            };
            k
        })
        .collect();
    let queries = vec![vec![0.1, 0.1, 0.1, 10.0]];
    let klt = Klt::fit(&keys, &queries).unwrap();
    let expected = [3, 0, 1, 2];
    for (j, &c) in expected.iter().enumerate() {
        let u = klt.basis_vector(j);
        for (i, x) in u.iter().enumerate() {
            let e = if i == c { 1.0 } else { 0.0 };
            assert!((x - e).abs() < 1e-12, "u{j} = {u:?}, expected e{c}");
        }
    }
    let lambda = klt.eigenvalues();
    for (got, want) in lambda.iter().zip([0.25, 4.0, 2.25, 1.0]) {
        assert!((got - want).abs() < 1e-12, "{lambda:?}");
    }
    let rotated = klt.rotate(&[1.0, 2.0, 3.0, 4.0]).unwrap();
    for (got, want) in rotated.iter().zip([4.0, 1.0, 2.0, 3.0]) {
        assert!((got - want).abs() < 1e-12, "{rotated:?}");
    }
}

#[test]
fn a_head_of_64_channels() {
    let (keys, queries) = calibration(64, 300, 7);
    let klt = Klt::fit(&keys, &queries).unwrap();
    assert_orthonormal(&klt);
    assert_ordered(&klt, &keys, &queries);
    let row_major = klt.basis_row_major();
    for i in 0..64 {
        for j in 0..64 {
            assert_eq!(row_major[i * 64 + j], klt.basis_vector(j)[i]);
        }
    }
}

#[test]
fn fits_are_reproducible_and_sign_fixed() {
    let (keys, queries) = calibration(16, 50, 3);
    let a = Klt::fit(&keys, &queries).unwrap();
    let b = Klt::fit(&keys, &queries).unwrap();
    assert_eq!(a.basis_row_major(), b.basis_row_major());
    // Negated keys have the same covariance, bit for bit, so the same basis.
    let negated: Vec<Vec<f64>> = keys
        .iter()
        .map(|k| k.iter().map(|x| -x).collect())
        .collect();
    assert_eq!(
        Klt::fit(&negated, &queries).unwrap().basis_row_major(),
        a.basis_row_major()
    );
    for j in 0..16 {
        let u = a.basis_vector(j);
        let lead = u
            .iter()
            .copied()
            .reduce(|m, x| if x.abs() > m.abs() { x } else { m })
            .unwrap();
        assert!(lead > 0.0, "u{j}'s largest component is {lead}");
    }
}

#[test]
fn degenerate_calibration_still_gives_an_orthonormal_basis() {
    // One key: zero covariance, every score 0, every eigenvalue 0.
    let klt = Klt::fit(&[vec![1.0, 2.0, 3.0]], &[vec![1.0, 0.0, 0.0]]).unwrap();
    assert_orthonormal(&klt);
    assert_eq!(klt.score_variances(), &[0.0; 3]);
}

#[test]
fn bad_calibration_is_refused() {
    assert_eq!(
        Klt::fit(&[], &[vec![1.0]]),
        Err(CalibrationError::Empty { what: "keys" })
    );
    assert_eq!(
        Klt::fit(&[vec![1.0]], &[]),
        Err(CalibrationError::Empty { what: "queries" })
    );
    assert!(matches!(
        Klt::fit(&[vec![1.0, 2.0]], &[vec![1.0]]),
        Err(CalibrationError::Shape {
            what: "queries",
            row: 0,
            got: 1,
            expected: 2
        })
    ));
    assert!(matches!(
        Klt::fit(&[vec![1.0, f64::NAN]], &[vec![1.0, 1.0]]),
        Err(CalibrationError::NonFinite {
            what: "keys",
            row: 0,
            channel: 1,
            ..
        })
    ));
    let klt = Klt::fit(&[vec![1.0, 2.0]], &[vec![1.0, 1.0]]).unwrap();
    assert_eq!(
        klt.rotate(&[1.0]),
        Err(CalibrationError::VectorShape {
            got: 1,
            expected: 2
        })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// R is orthonormal, rotation keeps every dot product, and the basis is in score order.
    #[test]
    fn rotation_is_orthonormal_and_ordered(
        d in prop::sample::select(vec![2usize, 4, 8, 16]),
        n in 1usize..40,
        seed in any::<u64>(),
    ) {
        let (keys, queries) = calibration(d, n, seed);
        let klt = Klt::fit(&keys, &queries).unwrap();
        assert_orthonormal(&klt);
        assert_ordered(&klt, &keys, &queries);
        let q = &queries[0];
        for k in &keys {
            let exact = dot(q, k);
            let rotated = dot(&klt.rotate(q).unwrap(), &klt.rotate(k).unwrap());
            let scale = q.iter().map(|x| x.abs()).sum::<f64>() * k.iter().map(|x| x.abs()).sum::<f64>();
            prop_assert!((exact - rotated).abs() <= 1e-12 * scale.max(1.0));
        }
    }
}
