//! Long-generation drift (issue #8, item 5): a prefill from the §11 generator, then decode steps
//! whose keys and queries come from a distribution that moves smoothly away from the prefill's.
//!
//! A method calibrated on the prefill (Fathom's `σ²`, §3) or whose index statistics were shaped
//! by it (ParisKV's histograms, §12) meets keys it was not fitted to; this generator makes that
//! happen in a measured, seeded way.
//!
//! # How the distribution moves
//!
//! Decode step `t` of `T` (`0..T`) appends the token at position `N + t` and has progress
//! `λ = t / (T - 1)` (0 when `T = 1`), so step 0 is the prefill's distribution and the last step
//! the end distribution. With `θ = λ π / 2`, per KV head:
//!
//! - **End set**: a second, independent draw of what §11 draws for a head: base log-scales
//!   `l¹_c = scale_sigma · N(0, 1)`, `outlier_channels` outlier channels `O¹` among the
//!   low-frequency half of the RoPE pairs, and standardised means `m¹_c ~ N(0, 1)`. The prefill's
//!   own set (`l⁰`, `O⁰`, `m⁰`) is read back from its [`SyntheticHead`]: `σ⁰_c = exp(l⁰_c) · f`
//!   on `O⁰` (`f = outlier_factor`) and `μ⁰_c = mean_factor · σ⁰_c · m⁰_c`.
//! - **Channel scales**: `ln σ_c(λ) = cos θ · l⁰_c + sin θ · l¹_c + ln f · ((1 - λ) [c ∈ O⁰] +
//!   λ [c ∈ O¹])`. The base part turns on a circle between two independent draws, so at every `λ`
//!   it is again `scale_sigma · N(0, 1)`; the prefill's outliers shrink geometrically from `f`
//!   to 1 while the new ones grow from 1 to `f` (a channel in both stays at `f`).
//! - **Means**: `μ_c(λ) = mean_factor · σ_c(λ) · (cos θ · m⁰_c + sin θ · m¹_c)`, again `N(0, 1)`
//!   standardised means at every `λ`.
//! - **Key basis**: a slow rotation `R(λ)`. A seeded random orthonormal basis `a_1, b_1, ...,
//!   a_{D/2}, b_{D/2}` (Gram–Schmidt of Gaussian vectors) splits `R^D` into `D/2` planes, and
//!   `R(λ)` turns every plane `(a_p, b_p)` by the angle `λ · rotation` (`rotation` radians at the
//!   last step, `π/4` by default). It mixes every channel with every other, so even the channel
//!   *directions* a calibration saw drift.
//! - **A decode key** is `RoPE(R(λ) (μ(λ) + σ(λ) ⊙ z), N + t)` with `z ~ N(0, I)`, rounded to
//!   bf16; its value is `N(0, 1)` per channel, bf16 (as §11).
//! - **Queries** follow the decode-time distribution: each of the `G` query heads draws its own
//!   `z` and gets `RoPE(R(λ) (μ(λ) + σ(λ) ⊙ z), N + t)`, unscaled (see [`scale_queries`]).
//!
//! At `λ = 0` every formula reduces to the prefill's exactly (`cos 0 = 1` and `sin 0 = 0` are
//! exact, and each formula is written as the prefill value times or plus a term that vanishes).
//!
//! # Streams
//!
//! The prefill is [`generate_head`] (ChaCha8 `seed`, stream = KV head). The drift of KV head `h`
//! draws from ChaCha8 `seed` on stream [`DRIFT_STREAM`]` + h`: first `l¹`, `O¹`, `m¹` and the
//! rotation basis, then per step the key's `z`, the value, and the `G` queries' `z`, in that
//! order. The same settings always give the same tokens.
//!
//! # Measuring drift
//!
//! [`variance_profile_distance`] is the total-variation distance between two channel-variance
//! profiles (each normalised to sum 1): 0 for the same profile, 1 for disjoint support. With §11's
//! defaults, `T = 4000` and `rotation = π/4`, the last 500 decode keys are at distance > 0.5 from
//! the prefill's last 1,536 (0.79 at the test's seed), while two windows of the prefill, or the
//! prefill and the first 256 decode keys, are within 0.15 (0.10: the windows of a slowly turning
//! RoPE, and the needles); see the tests.

use std::f64::consts::FRAC_PI_2;

use half::bf16;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use thiserror::Error;

use super::synthetic::{
    apply_rope, generate_head, SyntheticError, SyntheticHead, SyntheticSettings,
};

/// First ChaCha8 stream of the drift draws (KV head `h` uses `DRIFT_STREAM + h`), far above the
/// streams §11 uses for the prefill (one per KV head).
pub const DRIFT_STREAM: u64 = 1 << 32;

/// The scenario's settings: the prefill's §11 settings and how the decode drifts.
#[derive(Clone, Debug, PartialEq)]
pub struct DriftSettings {
    /// The prefill: §11 settings, `n` = prefill tokens `N`. Its seed also seeds the drift.
    pub prefill: SyntheticSettings,
    /// Decode steps `T`, one appended token per KV head each.
    pub steps: usize,
    /// Angle (radians) every plane of the key basis has turned by at the last step, `0..=π`.
    pub rotation: f64,
}

impl Default for DriftSettings {
    fn default() -> Self {
        DriftSettings {
            prefill: SyntheticSettings {
                n: 8192,
                kv_heads: 2,
                ..SyntheticSettings::default()
            },
            steps: 4000,
            rotation: std::f64::consts::FRAC_PI_4,
        }
    }
}

/// Drift settings the generator cannot honour.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum DriftError {
    #[error("prefill: {0}")]
    Prefill(#[from] SyntheticError),
    #[error("0 decode steps; at least 1 is needed")]
    NoSteps,
    #[error("rotation {got} rad is not allowed; it must be finite and in 0..=π")]
    Rotation { got: f64 },
    #[error("decode step {step} is outside the run of {steps} steps (0..{steps})")]
    Step { step: usize, steps: usize },
    #[error("KV head {kv_head} does not exist; the prefill has {kv_heads} KV heads")]
    KvHead { kv_head: usize, kv_heads: usize },
}

impl DriftSettings {
    /// Checks every setting (the prefill's too).
    pub fn validate(&self) -> Result<(), DriftError> {
        self.prefill.validate()?;
        if self.steps == 0 {
            return Err(DriftError::NoSteps);
        }
        if !(self.rotation.is_finite() && (0.0..=std::f64::consts::PI).contains(&self.rotation)) {
            return Err(DriftError::Rotation { got: self.rotation });
        }
        Ok(())
    }

    /// One line naming every setting, for figure captions and logs.
    pub fn describe(&self) -> String {
        format!(
            "drift(steps={}, rotation={:.4} rad) after {}",
            self.steps,
            self.rotation,
            self.prefill.describe()
        )
    }

    /// Progress `λ = t / (T - 1)` of decode step `t` (0 when `T = 1`).
    pub fn progress(&self, step: usize) -> Result<f64, DriftError> {
        if step >= self.steps {
            return Err(DriftError::Step {
                step,
                steps: self.steps,
            });
        }
        Ok(if self.steps == 1 {
            0.0
        } else {
            step as f64 / (self.steps - 1) as f64
        })
    }
}

/// One decode step's new token of one KV head, and the queries of its `G` query heads.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeToken {
    /// Decode step `t`.
    pub step: usize,
    /// Token position `N + t`.
    pub position: usize,
    /// Post-RoPE key, bf16, `D` values.
    pub key: Vec<bf16>,
    /// Value, bf16, `D` values.
    pub value: Vec<bf16>,
    /// The `G` queries, post-RoPE at `position`, unscaled f64.
    pub queries: Vec<Vec<f64>>,
}

/// The drifting source of one KV head: its prefill and, step by step, its decode tokens.
#[derive(Clone, Debug)]
pub struct DriftHead {
    settings: DriftSettings,
    prefill: SyntheticHead,
    /// `l⁰`, `l¹`: base log-scales of the prefill and of the end set.
    log_scales: [Vec<f64>; 2],
    /// `m⁰`, `m¹`: standardised means.
    std_means: [Vec<f64>; 2],
    /// `[c ∈ O⁰]`, `[c ∈ O¹]`.
    is_outlier: [Vec<bool>; 2],
    end_outliers: Vec<usize>,
    /// The rotation planes `(a_p, b_p)`.
    planes: Vec<(Vec<f64>, Vec<f64>)>,
    rng: ChaCha8Rng,
    next_step: usize,
}

fn normal(rng: &mut ChaCha8Rng) -> f64 {
    rng.sample(StandardNormal)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `d` orthonormal vectors: Gram–Schmidt (applied twice, for f64 orthogonality to ~1e-15) of
/// Gaussian draws. A draw that is numerically dependent is redrawn.
fn orthonormal_basis(d: usize, rng: &mut ChaCha8Rng) -> Vec<Vec<f64>> {
    let mut basis: Vec<Vec<f64>> = Vec::with_capacity(d);
    while basis.len() < d {
        let mut v: Vec<f64> = (0..d).map(|_| normal(rng)).collect();
        for _ in 0..2 {
            for u in &basis {
                let p = dot(&v, u);
                v.iter_mut().zip(u).for_each(|(x, y)| *x -= p * y);
            }
        }
        let norm = dot(&v, &v).sqrt();
        if norm > 1e-6 {
            basis.push(v.into_iter().map(|x| x / norm).collect());
        }
    }
    basis
}

impl DriftHead {
    /// The source of KV head `kv_head`: generates its prefill and draws the end set and basis.
    pub fn new(settings: &DriftSettings, kv_head: usize) -> Result<Self, DriftError> {
        settings.validate()?;
        let s = &settings.prefill;
        if kv_head >= s.kv_heads {
            return Err(DriftError::KvHead {
                kv_head,
                kv_heads: s.kv_heads,
            });
        }
        let prefill = generate_head(s, kv_head)?;
        let d = s.head_dim;
        let half = d / 2;
        let ln_f = s.outlier_factor.ln();
        let mut start_outlier = vec![false; d];
        prefill
            .outlier_channels
            .iter()
            .for_each(|&c| start_outlier[c] = true);
        let l0: Vec<f64> = (0..d)
            .map(|c| prefill.channel_scales[c].ln() - if start_outlier[c] { ln_f } else { 0.0 })
            .collect();
        let m0: Vec<f64> = (0..d)
            .map(|c| {
                let denominator = s.mean_factor * prefill.channel_scales[c];
                if denominator > 0.0 {
                    prefill.channel_means[c] / denominator
                } else {
                    0.0
                }
            })
            .collect();

        let mut rng = ChaCha8Rng::seed_from_u64(s.seed);
        rng.set_stream(DRIFT_STREAM + kv_head as u64);
        let l1: Vec<f64> = (0..d).map(|_| s.scale_sigma * normal(&mut rng)).collect();
        // The same rule as §11: outliers among the low-frequency half of the pairs.
        let low_freq: Vec<usize> = (0..d).filter(|c| c % half >= half / 2).collect();
        let mut end_outliers: Vec<usize> = sample(&mut rng, low_freq.len(), s.outlier_channels)
            .into_iter()
            .map(|j| low_freq[j])
            .collect();
        end_outliers.sort_unstable();
        let mut end_outlier = vec![false; d];
        end_outliers.iter().for_each(|&c| end_outlier[c] = true);
        let m1: Vec<f64> = (0..d).map(|_| normal(&mut rng)).collect();
        let basis = orthonormal_basis(d, &mut rng);
        let planes = basis
            .chunks_exact(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect();
        Ok(DriftHead {
            settings: settings.clone(),
            prefill,
            log_scales: [l0, l1],
            std_means: [m0, m1],
            is_outlier: [start_outlier, end_outlier],
            end_outliers,
            planes,
            rng,
            next_step: 0,
        })
    }

    /// The settings it was made from.
    pub fn settings(&self) -> &DriftSettings {
        &self.settings
    }

    /// The prefill (§11) of this KV head.
    pub fn prefill(&self) -> &SyntheticHead {
        &self.prefill
    }

    /// The end set's outlier channels `O¹`, ascending.
    pub fn end_outlier_channels(&self) -> &[usize] {
        &self.end_outliers
    }

    /// `σ_c(λ)` at decode step `step`, before the basis rotation (module docs).
    pub fn channel_scales(&self, step: usize) -> Result<Vec<f64>, DriftError> {
        let lambda = self.settings.progress(step)?;
        Ok(self.scales_at(lambda))
    }

    /// `μ_c(λ)` at decode step `step`, before the basis rotation (module docs).
    pub fn channel_means(&self, step: usize) -> Result<Vec<f64>, DriftError> {
        let lambda = self.settings.progress(step)?;
        Ok(self.means_at(lambda, &self.scales_at(lambda)))
    }

    /// `R(λ) x` at decode step `step`: every plane turned by `λ · rotation`.
    pub fn rotate(&self, step: usize, x: &[f64]) -> Result<Vec<f64>, DriftError> {
        let lambda = self.settings.progress(step)?;
        Ok(self.rotate_at(lambda, x))
    }

    fn scales_at(&self, lambda: f64) -> Vec<f64> {
        let (sin, cos) = (lambda * FRAC_PI_2).sin_cos();
        let ln_f = self.settings.prefill.outlier_factor.ln();
        let [l0, l1] = &self.log_scales;
        let [o0, o1] = &self.is_outlier;
        // σ⁰ times a factor that is exactly 1 at λ = 0, so step 0 reproduces the prefill.
        (0..l0.len())
            .map(|c| {
                let boost =
                    ln_f * lambda * (f64::from(u8::from(o1[c])) - f64::from(u8::from(o0[c])));
                self.prefill.channel_scales[c] * ((cos - 1.0) * l0[c] + sin * l1[c] + boost).exp()
            })
            .collect()
    }

    fn means_at(&self, lambda: f64, scales: &[f64]) -> Vec<f64> {
        let (sin, cos) = (lambda * FRAC_PI_2).sin_cos();
        let mf = self.settings.prefill.mean_factor;
        let mu0 = &self.prefill.channel_means;
        let [_, m1] = &self.std_means;
        (0..scales.len())
            .map(|c| {
                let sigma0 = self.prefill.channel_scales[c];
                mu0[c] * (scales[c] / sigma0) * cos + mf * scales[c] * sin * m1[c]
            })
            .collect()
    }

    fn rotate_at(&self, lambda: f64, x: &[f64]) -> Vec<f64> {
        let (sin, cos) = (lambda * self.settings.rotation).sin_cos();
        let mut out = x.to_vec();
        for (a, b) in &self.planes {
            let (pa, pb) = (dot(x, a), dot(x, b));
            // In the plane: (pa, pb) -> (pa cos - pb sin, pa sin + pb cos); the change is added.
            let (da, db) = (pa * (cos - 1.0) - pb * sin, pa * sin + pb * (cos - 1.0));
            for ((o, ai), bi) in out.iter_mut().zip(a).zip(b) {
                *o += da * ai + db * bi;
            }
        }
        out
    }

    /// The standardised means `m⁰` (read back from the prefill) and `m¹` (the end set's).
    pub fn standardised_means(&self) -> &[Vec<f64>; 2] {
        &self.std_means
    }

    /// Decode steps already drawn (the next [`next_token`](Self::next_token) is this step).
    pub fn steps_drawn(&self) -> usize {
        self.next_step
    }

    /// Draws the next decode step's token and queries; `None` after the last step.
    pub fn next_token(&mut self) -> Option<DecodeToken> {
        let step = self.next_step;
        let lambda = self.settings.progress(step).ok()?;
        self.next_step += 1;
        let s = &self.settings.prefill;
        let position = s.n + step;
        let scales = self.scales_at(lambda);
        let means = self.means_at(lambda, &scales);
        let draw = |rng: &mut ChaCha8Rng| -> Vec<f64> {
            let pre: Vec<f64> = means
                .iter()
                .zip(&scales)
                .map(|(m, sc)| m + sc * normal(rng))
                .collect();
            apply_rope(&self.rotate_at(lambda, &pre), position, s.rope_base)
        };
        let mut rng = self.rng.clone();
        let key = draw(&mut rng).into_iter().map(bf16::from_f64).collect();
        let value = (0..s.head_dim)
            .map(|_| bf16::from_f64(normal(&mut rng)))
            .collect();
        let queries = (0..s.group).map(|_| draw(&mut rng)).collect();
        self.rng = rng;
        Some(DecodeToken {
            step,
            position,
            key,
            value,
            queries,
        })
    }
}

/// Scales each query so that its logits `q·k / sqrt(D)` over (a strided sample of at most 4,096
/// of) the ordinary keys `keys[first..]` have standard deviation `logit_std`, then rounds it to
/// f32 (what a kernel receives), as §11 does for the prefill's queries. Scaling keeps the
/// direction, so it changes no ranking, only the softmax's sharpness (and with it attention
/// errors). A query with no spread (or no keys) is only rounded.
pub fn scale_queries(
    queries: &[Vec<f64>],
    keys: &[bf16],
    d: usize,
    first: usize,
    logit_std: f64,
) -> Vec<Vec<f64>> {
    let n = keys.len() / d.max(1);
    let stride = n.saturating_sub(first).div_ceil(4096).max(1);
    queries
        .iter()
        .map(|q| {
            let logits: Vec<f64> = (first.min(n)..n)
                .step_by(stride)
                .map(|i| {
                    let k = &keys[i * d..(i + 1) * d];
                    q.iter().zip(k).map(|(a, b)| a * b.to_f64()).sum::<f64>() / (d as f64).sqrt()
                })
                .collect();
            let count = logits.len().max(1) as f64;
            let mean = logits.iter().sum::<f64>() / count;
            let var = logits.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / count;
            let factor = if var > 0.0 {
                logit_std / var.sqrt()
            } else {
                1.0
            };
            q.iter().map(|x| (x * factor) as f32 as f64).collect()
        })
        .collect()
}

/// Population variance of every channel over `keys[tokens]` (token-major bf16 `[n][d]`).
pub fn channel_variances(keys: &[bf16], d: usize, tokens: std::ops::Range<usize>) -> Vec<f64> {
    let count = tokens.len().max(1) as f64;
    (0..d)
        .map(|c| {
            let xs = tokens.clone().map(|i| keys[i * d + c].to_f64());
            let mean = xs.clone().sum::<f64>() / count;
            xs.map(|x| (x - mean).powi(2)).sum::<f64>() / count
        })
        .collect()
}

/// Total-variation distance `½ Σ_c |a_c / Σa - b_c / Σb|` between two channel-variance
/// profiles: 0 for proportional profiles, 1 for disjoint ones. An all-zero profile is at
/// distance 1 from any other and 0 from another all-zero one.
pub fn variance_profile_distance(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "profiles of different head dims");
    let (sa, sb) = (a.iter().sum::<f64>(), b.iter().sum::<f64>());
    match (sa > 0.0, sb > 0.0) {
        (false, false) => 0.0,
        (true, false) | (false, true) => 1.0,
        (true, true) => {
            0.5 * a
                .iter()
                .zip(b)
                .map(|(x, y)| (x / sa - y / sb).abs())
                .sum::<f64>()
        }
    }
}

#[cfg(test)]
mod tests;
