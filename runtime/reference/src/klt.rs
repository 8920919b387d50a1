//! SPEC §5: the rotated (KLT) store basis of one (layer, KV head).
//!
//! `R` holds the eigenvectors `u_i` of the calibration key covariance as its columns, ordered by
//! the calibration score variance they carry, `λ_i · mean_h (q_h · u_i)²`, largest first. The
//! store keeps all `D` coordinates of `Rᵀ k` and queries are rotated the same way, so scores are
//! unchanged (`R` is orthonormal) while the leading coordinates carry most of the score: what
//! `loki(r)` reads and what water-filling finds cheap to read.
//!
//! Reproducibility: the eigen-decomposition is nalgebra's [`SymmetricEigen`]; ties in the
//! ordering go to the larger eigenvalue, then to the eigenvector nalgebra listed first; every
//! vector's sign is fixed so that its largest-magnitude component (the first such, on ties) is
//! positive. The same calibration data therefore always gives the same `R`, bit for bit, and
//! negating every key gives the same `R` too.

use nalgebra::{DMatrix, SymmetricEigen};

use super::plans::{check_rows, CalibrationError};

/// An orthonormal store basis fitted on calibration keys and queries.
#[derive(Clone, Debug, PartialEq)]
pub struct Klt {
    /// `D x D`, column `i` = `u_i`.
    basis: DMatrix<f64>,
    eigenvalues: Vec<f64>,
    score_variances: Vec<f64>,
}

impl Klt {
    /// Fits the basis: `cal_keys` are rows of `D` (raw basis), `cal_queries` rows of `D` (every
    /// query head of the group at every calibration position; `mean_h` averages over all rows).
    /// The covariance is the population covariance `(1/n) Σ (k - μ)(k - μ)ᵀ`.
    pub fn fit(cal_keys: &[Vec<f64>], cal_queries: &[Vec<f64>]) -> Result<Klt, CalibrationError> {
        let d = check_rows(cal_keys, None, "keys")?;
        check_rows(cal_queries, Some(d), "queries")?;
        let n = cal_keys.len() as f64;
        let mean: Vec<f64> = (0..d)
            .map(|c| cal_keys.iter().map(|k| k[c]).sum::<f64>() / n)
            .collect();
        let mut covariance = DMatrix::<f64>::zeros(d, d);
        for k in cal_keys {
            for i in 0..d {
                for j in 0..=i {
                    covariance[(i, j)] += (k[i] - mean[i]) * (k[j] - mean[j]);
                }
            }
        }
        for i in 0..d {
            for j in 0..=i {
                covariance[(i, j)] /= n;
                covariance[(j, i)] = covariance[(i, j)];
            }
        }
        let eigen = SymmetricEigen::new(covariance);
        let mut vectors: Vec<Vec<f64>> = (0..d)
            .map(|i| eigen.eigenvectors.column(i).iter().copied().collect())
            .collect();
        vectors.iter_mut().for_each(|u| fix_sign(u));
        // Tiny negative eigenvalues are rounding: a variance is never below 0.
        let lambda: Vec<f64> = eigen.eigenvalues.iter().map(|&l| l.max(0.0)).collect();
        let score: Vec<f64> = (0..d)
            .map(|i| {
                let projections = cal_queries.iter().map(|q| dot(q, &vectors[i]).powi(2));
                lambda[i] * projections.sum::<f64>() / cal_queries.len() as f64
            })
            .collect();
        let mut order: Vec<usize> = (0..d).collect();
        order.sort_by(|&a, &b| {
            score[b]
                .total_cmp(&score[a])
                .then(lambda[b].total_cmp(&lambda[a]))
                .then(a.cmp(&b))
        });
        let basis = DMatrix::from_fn(d, d, |row, col| vectors[order[col]][row]);
        Ok(Klt {
            basis,
            eigenvalues: order.iter().map(|&i| lambda[i]).collect(),
            score_variances: order.iter().map(|&i| score[i]).collect(),
        })
    }

    /// `D`.
    pub fn head_dim(&self) -> usize {
        self.basis.nrows()
    }

    /// `R` row-major, `R[i*D + j]` = component `i` of basis vector `j` (the layout of
    /// `templates/ABI.md`).
    pub fn basis_row_major(&self) -> Vec<f64> {
        let d = self.head_dim();
        (0..d * d)
            .map(|index| self.basis[(index / d, index % d)])
            .collect()
    }

    /// Basis vector `u_j`, the `j`-th column of `R`. Panics when `j >= D`.
    pub fn basis_vector(&self, j: usize) -> Vec<f64> {
        self.basis.column(j).iter().copied().collect()
    }

    /// `λ_i` of every basis vector, in basis order (clamped to `>= 0`).
    pub fn eigenvalues(&self) -> &[f64] {
        &self.eigenvalues
    }

    /// `λ_i · mean_h (q_h · u_i)²` of every basis vector, in basis order (non-increasing).
    pub fn score_variances(&self) -> &[f64] {
        &self.score_variances
    }

    /// `Rᵀ x`: coordinate `j` is `u_j · x`.
    pub fn rotate(&self, x: &[f64]) -> Result<Vec<f64>, CalibrationError> {
        let d = self.head_dim();
        if x.len() != d {
            return Err(CalibrationError::VectorShape {
                got: x.len(),
                expected: d,
            });
        }
        Ok((0..d)
            .map(|j| dot(self.basis.column(j).as_slice(), x))
            .collect())
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Flips `u` so that its first largest-magnitude component is positive.
fn fix_sign(u: &mut [f64]) {
    let lead = u.iter().enumerate().fold(
        0,
        |best, (i, x)| if x.abs() > u[best].abs() { i } else { best },
    );
    if u[lead] < 0.0 {
        u.iter_mut().for_each(|x| *x = -*x);
    }
}

#[cfg(test)]
mod tests;
