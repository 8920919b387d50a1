//! SPEC §11: seeded synthetic keys, values and queries with the structure of real keys.
//!
//! Real post-RoPE keys are not isotropic, and the methods of §4 rank differently because of
//! that; so the generator plants each feature the methods react to:
//!
//! - *channel scales*: each channel's spread `σ_c = exp(scale_sigma * N(0, 1))` is log-normal, and
//!   `outlier_channels` channels get `outlier_factor` (10) times that. The outliers are drawn
//!   among the low-frequency half of the RoPE pairs, where real models keep their massive key
//!   channels;
//! - *a per-channel mean* `μ_c = mean_factor * σ_c * N(0, 1)` shared by every token (real keys
//!   have a large constant part). Keys before RoPE are `μ_c + σ_c * z`;
//! - *rotary position embedding* with base `rope_base` (1e6) and the half-split pairing of
//!   Llama and Qwen (`rotate_half`): channel `c < D/2` pairs with `c + D/2`, pair `i` turns by
//!   `p * rope_base^(-2i/D)` at position `p`. Low-frequency pairs barely turn over a context, so
//!   the mean (largest in the outlier channels) becomes a large, slowly varying component,
//!   while in fast pairs it averages out;
//! - *an attention sink*: the first `sink_tokens` keys point along the mean `μ` restricted to
//!   the slowest quarter of the pairs (rotated to their position), with `sink_norm` times the
//!   typical key norm. Those pairs turn by at most `n * rope_base^(-3/4)` rad between the sink and
//!   the query (0.13 rad at 4k tokens), so the sink scores high for the queries whose
//!   slow part follows the mean (most of them, as queries share `μ`); at contexts where even
//!   those pairs turn, it stays a large-norm key of no particular alignment;
//! - *needles*: `needles` keys per KV head, at seeded positions outside the sink and the local
//!   window of §6, replaced by `needle_norm` times the typical key norm along one query head's
//!   query (post-RoPE, needle `j` for head `j mod G`), so an exact scan must find them;
//! - *queries* from the same channel statistics (`μ_c + σ_c * z`, one independent `z` per query
//!   head), rotated to position `n` (the token being decoded) and rounded to f32, the precision a
//!   kernel receives them in.
//!
//! Values are `N(0, 1)` per channel, without structure: the methods differ in what they select,
//! and attention over any value rows tells the fidelity apart. Keys and values are rounded to
//! bf16 (round to nearest even), as a serving stack holds them.
//!
//! Every KV head draws from its own ChaCha8 stream (`seed`, stream = KV head), so a head can be
//! generated alone ([`generate_head`]) at contexts whose whole cache would not fit in memory,
//! and it is the same head that [`generate`] returns. The "typical key norm" is the
//! root-mean-square norm of a pre-RoPE key, `sqrt(Σ_c μ_c² + σ_c²)`.

use half::bf16;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use thiserror::Error;

use super::select::{LOCAL, SINK};

/// The generator's settings; every figure made from synthetic keys names them ([`describe`]).
///
/// [`describe`]: SyntheticSettings::describe
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticSettings {
    /// Seed of the ChaCha8 generator.
    pub seed: u64,
    /// Tokens per sequence.
    pub n: usize,
    /// Head dimension `D` (even: RoPE rotates channel pairs).
    pub head_dim: usize,
    /// KV heads `H_kv`.
    pub kv_heads: usize,
    /// Query heads per KV head `G` (1..=16).
    pub group: usize,
    /// Standard deviation of `ln σ_c` across channels.
    pub scale_sigma: f64,
    /// Channels whose scale is multiplied by `outlier_factor`, at most `D / 2`.
    pub outlier_channels: usize,
    /// How much larger an outlier channel's scale is.
    pub outlier_factor: f64,
    /// Size of the per-channel mean relative to the channel's scale.
    pub mean_factor: f64,
    /// RoPE base.
    pub rope_base: f64,
    /// Tokens at the start that form the attention sink (at most `n`).
    pub sink_tokens: usize,
    /// Sink key norm over the typical key norm.
    pub sink_norm: f64,
    /// Needle keys per KV head.
    pub needles: usize,
    /// Needle key norm over the typical key norm.
    pub needle_norm: f64,
    /// Standard deviation of the attention logits `q·k/sqrt(D)` of each query over the
    /// ordinary keys: queries drawn from the key statistics would give logits in the hundreds
    /// (one-hot attention, where every method's error is zero); real models' logits spread over
    /// a few units, so each query is scaled to this spread.
    pub logit_std: f64,
}

impl Default for SyntheticSettings {
    fn default() -> Self {
        SyntheticSettings {
            seed: 0,
            n: 4096,
            head_dim: 128,
            kv_heads: 8,
            group: 4,
            scale_sigma: 0.5,
            outlier_channels: 4,
            outlier_factor: 10.0,
            mean_factor: 1.0,
            rope_base: 1.0e6,
            sink_tokens: 1,
            sink_norm: 8.0,
            needles: 4,
            needle_norm: 3.0,
            logit_std: 2.0,
        }
    }
}

/// Settings the generator cannot honour.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SyntheticError {
    #[error("head dimension {got} must be even and at least 2 (RoPE rotates channel pairs)")]
    HeadDim { got: usize },
    #[error("group size G = {got} is not allowed; allowed: 1..=16")]
    Group { got: usize },
    #[error("{what} = 0; at least 1 is needed")]
    Zero { what: &'static str },
    #[error("{got} outlier channels asked; at most D/2 = {max} (the low-frequency half)")]
    Outliers { got: usize, max: usize },
    #[error("{got} sink tokens asked for {n} tokens; at most n")]
    SinkTokens { got: usize, n: usize },
    #[error(
        "{got} needles asked; only {room} positions lie outside the sink and the local window \
         (tokens {first}..{end})"
    )]
    Needles {
        got: usize,
        room: usize,
        first: usize,
        end: usize,
    },
    #[error("{what} = {got}; it must be finite and {rule}")]
    Factor {
        what: &'static str,
        got: f64,
        rule: &'static str,
    },
}

impl SyntheticSettings {
    /// One line naming the seed and every setting, for figure captions and logs.
    pub fn describe(&self) -> String {
        format!(
            "synthetic(seed={}, n={}, d={}, kv_heads={}, G={}, scale_sigma={}, outliers={}x{}, \
             mean_factor={}, rope_base={:e}, sink={}x{}, needles={}x{}, logit_std={})",
            self.seed,
            self.n,
            self.head_dim,
            self.kv_heads,
            self.group,
            self.scale_sigma,
            self.outlier_channels,
            self.outlier_factor,
            self.mean_factor,
            self.rope_base,
            self.sink_tokens,
            self.sink_norm,
            self.needles,
            self.needle_norm,
            self.logit_std,
        )
    }

    /// Positions where needles may go: outside the sink (of the generator and of §6) and the
    /// local window, so that only a scan can select them.
    fn needle_room(&self) -> (usize, usize) {
        let first = self.sink_tokens.max(SINK);
        let end = self.n.saturating_sub(LOCAL);
        (first, end.max(first))
    }

    /// Checks every setting; the generator runs only on valid settings.
    pub fn validate(&self) -> Result<(), SyntheticError> {
        if self.head_dim < 2 || !self.head_dim.is_multiple_of(2) {
            return Err(SyntheticError::HeadDim { got: self.head_dim });
        }
        if !(1..=super::planner::MAX_GROUP).contains(&self.group) {
            return Err(SyntheticError::Group { got: self.group });
        }
        if self.n == 0 {
            return Err(SyntheticError::Zero { what: "n" });
        }
        if self.kv_heads == 0 {
            return Err(SyntheticError::Zero { what: "kv_heads" });
        }
        if self.outlier_channels > self.head_dim / 2 {
            return Err(SyntheticError::Outliers {
                got: self.outlier_channels,
                max: self.head_dim / 2,
            });
        }
        if self.sink_tokens > self.n {
            return Err(SyntheticError::SinkTokens {
                got: self.sink_tokens,
                n: self.n,
            });
        }
        let (first, end) = self.needle_room();
        if self.needles > end - first {
            return Err(SyntheticError::Needles {
                got: self.needles,
                room: end - first,
                first,
                end,
            });
        }
        let factors = [
            ("scale_sigma", self.scale_sigma, false),
            ("outlier_factor", self.outlier_factor, true),
            ("mean_factor", self.mean_factor, false),
            ("rope_base", self.rope_base, true),
            ("sink_norm", self.sink_norm, true),
            ("needle_norm", self.needle_norm, true),
            ("logit_std", self.logit_std, true),
        ];
        for (what, got, positive) in factors {
            let ok = got.is_finite() && if positive { got > 0.0 } else { got >= 0.0 };
            if !ok {
                let rule = if positive { "> 0" } else { ">= 0" };
                return Err(SyntheticError::Factor { what, got, rule });
            }
        }
        Ok(())
    }
}

/// One KV head: its keys and values and the queries of its `G` query heads.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticHead {
    /// Post-RoPE keys, token-major `[n][D]`, bf16.
    pub keys: Vec<bf16>,
    /// Values, token-major `[n][D]`, bf16.
    pub values: Vec<bf16>,
    /// The `G` queries of this KV head, post-RoPE at position `n`, f32-exact values.
    pub queries: Vec<Vec<f64>>,
    /// Token positions of the planted needles, ascending.
    pub needles: Vec<usize>,
    /// For each needle, the query head of the group (0..G) it is aligned with.
    pub needle_heads: Vec<usize>,
    /// The outlier channels (before RoPE mixes each with its pair partner), ascending.
    pub outlier_channels: Vec<usize>,
    /// `σ_c` per channel, outliers included.
    pub channel_scales: Vec<f64>,
    /// `μ_c` per channel, before RoPE.
    pub channel_means: Vec<f64>,
}

/// Every KV head of one synthetic layer.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticKv {
    /// The settings it was generated from.
    pub settings: SyntheticSettings,
    /// One entry per KV head.
    pub heads: Vec<SyntheticHead>,
}

impl SyntheticKv {
    /// The queries of all `H_kv * G` query heads; query head `h` belongs to KV head `h / G`.
    pub fn queries(&self) -> Vec<Vec<f64>> {
        self.heads
            .iter()
            .flat_map(|h| h.queries.iter().cloned())
            .collect()
    }
}

/// Generates every KV head.
pub fn generate(settings: &SyntheticSettings) -> Result<SyntheticKv, SyntheticError> {
    settings.validate()?;
    let heads = (0..settings.kv_heads)
        .map(|h| generate_head(settings, h))
        .collect::<Result<_, _>>()?;
    Ok(SyntheticKv {
        settings: settings.clone(),
        heads,
    })
}

/// Rotates `x` (pre-RoPE, `D` values) to position `position`, half-split pairing.
pub fn apply_rope(x: &[f64], position: usize, base: f64) -> Vec<f64> {
    rope_turn(x, position as f64, base)
}

/// Turns `x` (`D` values, at any position) through `positions` positions, half-split pairing;
/// negative turns back. Pair `i` turns by `positions * base^(-2i/D)`.
pub fn rope_turn(x: &[f64], positions: f64, base: f64) -> Vec<f64> {
    let d = x.len();
    let half = d / 2;
    let mut out = x.to_vec();
    for i in 0..half {
        let angle = positions * base.powf(-2.0 * i as f64 / d as f64);
        let (sin, cos) = angle.sin_cos();
        out[i] = x[i] * cos - x[i + half] * sin;
        out[i + half] = x[i] * sin + x[i + half] * cos;
    }
    out
}

/// `q` scaled so that its logits `q·k/sqrt(D)` over (a strided sample of) the keys have the
/// standard deviation `s.logit_std`; rounded to f32 like every query. Scaling keeps the
/// direction, so the needles planted along `q` stay aligned with it.
fn scale_to_logit_std(q: &[f64], keys: &[bf16], s: &SyntheticSettings) -> Vec<f64> {
    let d = s.head_dim;
    let n = keys.len() / d;
    let stride = n.div_ceil(4096).max(1);
    let logits: Vec<f64> = (s.sink_tokens.min(n)..n)
        .step_by(stride)
        .map(|i| {
            let k = &keys[i * d..(i + 1) * d];
            q.iter().zip(k).map(|(a, b)| a * b.to_f64()).sum::<f64>() / (d as f64).sqrt()
        })
        .collect();
    let mean = logits.iter().sum::<f64>() / logits.len().max(1) as f64;
    let var = logits.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / logits.len().max(1) as f64;
    let factor = if var > 0.0 {
        s.logit_std / var.sqrt()
    } else {
        1.0
    };
    q.iter().map(|x| (x * factor) as f32 as f64).collect()
}

fn normal(rng: &mut ChaCha8Rng) -> f64 {
    rng.sample(StandardNormal)
}

fn unit(x: &[f64]) -> Vec<f64> {
    let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
    if norm == 0.0 {
        // A zero direction (mean_factor = 0) still needs a direction: use the first channel.
        let mut e = vec![0.0; x.len()];
        e[0] = 1.0;
        return e;
    }
    x.iter().map(|v| v / norm).collect()
}

/// Generates KV head `kv_head` alone (the same head [`generate`] returns at that index).
pub fn generate_head(
    settings: &SyntheticSettings,
    kv_head: usize,
) -> Result<SyntheticHead, SyntheticError> {
    settings.validate()?;
    let s = settings;
    let d = s.head_dim;
    let half = d / 2;
    let mut rng = ChaCha8Rng::seed_from_u64(s.seed);
    rng.set_stream(kv_head as u64);

    let mut scales: Vec<f64> = (0..d)
        .map(|_| (s.scale_sigma * normal(&mut rng)).exp())
        .collect();
    // Low-frequency half of the pairs: pair index i in half/2..half, both channels of the pair.
    let low_freq: Vec<usize> = (0..d).filter(|c| c % half >= half / 2).collect();
    let mut outliers: Vec<usize> = sample(&mut rng, low_freq.len(), s.outlier_channels)
        .into_iter()
        .map(|j| low_freq[j])
        .collect();
    outliers.sort_unstable();
    for &c in &outliers {
        scales[c] *= s.outlier_factor;
    }
    let mean: Vec<f64> = scales
        .iter()
        .map(|sc| s.mean_factor * sc * normal(&mut rng))
        .collect();
    let typical_norm = mean
        .iter()
        .zip(&scales)
        .map(|(m, sc)| m * m + sc * sc)
        .sum::<f64>()
        .sqrt();
    let draw = |rng: &mut ChaCha8Rng| -> Vec<f64> {
        mean.iter()
            .zip(&scales)
            .map(|(m, sc)| m + sc * normal(rng))
            .collect()
    };

    let queries: Vec<Vec<f64>> = (0..s.group)
        .map(|_| {
            apply_rope(&draw(&mut rng), s.n, s.rope_base)
                .into_iter()
                .map(|x| x as f32 as f64)
                .collect()
        })
        .collect();
    let (first, end) = s.needle_room();
    let mut needles: Vec<usize> = sample(&mut rng, end - first, s.needles)
        .into_iter()
        .map(|j| first + j)
        .collect();
    needles.sort_unstable();
    // Needle j is planted for query head j mod G: queries of one group differ enough (their
    // noise is as large as their mean) that a key along the group's mean query can miss one.
    let needle_keys: Vec<Vec<f64>> = queries
        .iter()
        .map(|q| {
            unit(q)
                .into_iter()
                .map(|x| x * s.needle_norm * typical_norm)
                .collect()
        })
        .collect();
    let needle_heads: Vec<usize> = (0..s.needles).map(|j| j % s.group).collect();
    let low_freq_mean: Vec<f64> = (0..d)
        .map(|c| {
            if c % half >= half * 3 / 4 {
                mean[c]
            } else {
                0.0
            }
        })
        .collect();
    let sink_key: Vec<f64> = unit(&low_freq_mean)
        .into_iter()
        .map(|x| x * s.sink_norm * typical_norm)
        .collect();

    let mut keys = Vec::with_capacity(s.n * d);
    let mut values = Vec::with_capacity(s.n * d);
    for p in 0..s.n {
        // Every token draws its noise, even the replaced ones, so that changing the needle or
        // sink settings leaves the other tokens unchanged.
        let pre = draw(&mut rng);
        let key = if p < s.sink_tokens {
            apply_rope(&sink_key, p, s.rope_base)
        } else if let Ok(j) = needles.binary_search(&p) {
            needle_keys[needle_heads[j]].clone()
        } else {
            apply_rope(&pre, p, s.rope_base)
        };
        keys.extend(key.into_iter().map(bf16::from_f64));
        values.extend((0..d).map(|_| bf16::from_f64(normal(&mut rng))));
    }
    let queries = queries
        .iter()
        .map(|q| scale_to_logit_std(q, &keys, s))
        .collect();
    Ok(SyntheticHead {
        keys,
        values,
        queries,
        needles,
        needle_heads,
        outlier_channels: outliers,
        channel_scales: scales,
        channel_means: mean,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::score_exact;

    fn small() -> SyntheticSettings {
        SyntheticSettings {
            seed: 7,
            n: 4096,
            head_dim: 64,
            kv_heads: 2,
            group: 3,
            ..SyntheticSettings::default()
        }
    }

    fn variance(keys: &[bf16], d: usize, c: usize, tokens: std::ops::Range<usize>) -> f64 {
        let xs: Vec<f64> = tokens.map(|i| keys[i * d + c].to_f64()).collect();
        let m = xs.iter().sum::<f64>() / xs.len() as f64;
        xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / xs.len() as f64
    }

    #[test]
    fn deterministic_per_seed_and_head() {
        let s = small();
        let a = generate(&s).unwrap();
        let b = generate(&s).unwrap();
        assert_eq!(a, b);
        assert_eq!(generate_head(&s, 1).unwrap(), a.heads[1]);
        assert_ne!(a.heads[0].keys, a.heads[1].keys);
        let other = generate(&SyntheticSettings {
            seed: 8,
            ..s.clone()
        })
        .unwrap();
        assert_ne!(a.heads[0].keys, other.heads[0].keys);
        assert_eq!(a.heads[0].keys.len(), s.n * s.head_dim);
        assert_eq!(a.queries().len(), s.kv_heads * s.group);
    }

    #[test]
    fn outlier_channels_have_larger_variance() {
        let s = small();
        let head = generate_head(&s, 0).unwrap();
        let d = s.head_dim;
        let body = s.sink_tokens..s.n;
        let var: Vec<f64> = (0..d)
            .map(|c| variance(&head.keys, d, c, body.clone()))
            .collect();
        let mut normal: Vec<f64> = (0..d)
            .filter(|c| !head.outlier_channels.contains(c))
            .map(|c| var[c])
            .collect();
        normal.sort_by(f64::total_cmp);
        let median = normal[normal.len() / 2];
        assert_eq!(head.outlier_channels.len(), s.outlier_channels);
        for &c in &head.outlier_channels {
            assert!(
                var[c] > 10.0 * median,
                "channel {c}: {} vs median {median}",
                var[c]
            );
        }
    }

    #[test]
    fn sink_has_large_norm() {
        let s = small();
        let head = generate_head(&s, 1).unwrap();
        let d = s.head_dim;
        let norms: Vec<f64> = head
            .keys
            .chunks_exact(d)
            .map(|k| k.iter().map(|x| x.to_f64().powi(2)).sum::<f64>().sqrt())
            .collect();
        let mut body = norms[s.sink_tokens..].to_vec();
        body.sort_by(f64::total_cmp);
        let median = body[body.len() / 2];
        assert!(
            norms[0] > 5.0 * median,
            "sink {} vs median {median}",
            norms[0]
        );
    }

    #[test]
    fn needles_score_high_for_the_queries() {
        let s = small();
        for h in 0..s.kv_heads {
            let head = generate_head(&s, h).unwrap();
            assert_eq!(head.needles.len(), s.needles);
            assert_eq!(head.needle_heads, vec![0, 1, 2, 0]);
            let scores = score_exact(&head.keys, s.head_dim, 0..s.n, &head.queries);
            for (&p, &g) in head.needles.iter().zip(&head.needle_heads) {
                assert!((SINK..s.n - LOCAL).contains(&p));
                let row = &scores[g];
                let above = row[SINK..s.n - LOCAL]
                    .iter()
                    .filter(|&&x| x > row[p])
                    .count();
                // Among the top 1% of the tokens a scan chooses from.
                assert!(
                    above < s.n / 100,
                    "head {h}/{g}: needle {p} has {above} tokens above it"
                );
            }
        }
    }

    #[test]
    fn low_frequency_pairs_carry_the_mean_slowly() {
        let s = small();
        let head = generate_head(&s, 0).unwrap();
        let d = s.head_dim;
        let avg = |c: usize| {
            (s.sink_tokens..s.n)
                .filter(|p| head.needles.binary_search(p).is_err())
                .map(|i| head.keys[i * d + c].to_f64())
                .sum::<f64>()
                / (s.n - s.sink_tokens - s.needles) as f64
        };
        let (mu, sigma) = (&head.channel_means, &head.channel_scales);
        // The slowest pair turns by ~0.007 rad over 4096 tokens: its mean survives RoPE.
        for c in [d / 2 - 1, d - 1] {
            assert!((avg(c) - mu[c]).abs() < 0.1 * sigma[c], "channel {c}");
        }
        // The fastest pair turns by 1 rad per token: its mean averages out.
        for c in [0, d / 2] {
            assert!(avg(c).abs() < 0.1 * sigma[c], "channel {c}: {}", avg(c));
        }
        let rope = apply_rope(&[1.0, 0.0, 0.0, 1.0], 1, 1.0e6);
        assert!((rope[0] - 1f64.cos()).abs() < 1e-12 && (rope[2] - 1f64.sin()).abs() < 1e-12);
        // Outliers sit in the low-frequency half of the pairs.
        assert!(head.outlier_channels.iter().all(|c| c % (d / 2) >= d / 4));
    }

    #[test]
    fn bad_settings_are_refused() {
        let bad = |f: fn(&mut SyntheticSettings)| {
            let mut s = small();
            f(&mut s);
            generate(&s).unwrap_err()
        };
        assert_eq!(
            bad(|s| s.head_dim = 63),
            SyntheticError::HeadDim { got: 63 }
        );
        assert_eq!(bad(|s| s.group = 17), SyntheticError::Group { got: 17 });
        assert!(matches!(bad(|s| s.n = 0), SyntheticError::Zero { .. }));
        assert!(matches!(
            bad(|s| s.outlier_channels = 33),
            SyntheticError::Outliers { .. }
        ));
        assert!(matches!(
            bad(|s| s.needles = 5000),
            SyntheticError::Needles { .. }
        ));
        assert!(matches!(
            bad(|s| s.rope_base = f64::NAN),
            SyntheticError::Factor { .. }
        ));
        assert!(matches!(
            bad(|s| s.sink_norm = 0.0),
            SyntheticError::Factor { .. }
        ));
        assert!(small().describe().contains("seed=7"));
        assert!(small().describe().contains("G=3"));
    }
}
