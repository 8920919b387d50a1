//! SPEC §4: every method as a plan over the same store, with its bits per token.
//!
//! The fixed-depth scans (SparQ, Double Sparsity, Loki, thumbnail, uniform) are depth plans of
//! §3's shape: a depth per channel, read from the same bit-plane store and charged the same way
//! (planes plus `16 / BLK` bits of scale per active channel), so they run through the same
//! kernels as `fathom(B)`. Landmark, oracle and dense are not plane plans; [`DepthPlan`] names
//! them so that one dispatch covers every method.
//!
//! Calibration (once per layer and KV head): [`channel_variance`] gives the `σ²` of §3, and
//! [`DoubleSparsityCalibration`] the fixed channel set of `double_sparsity(r)`.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use super::model::Basis;
use super::planner::{check_group, water_fill, Plan, PlanError};
use super::store::{BlockSize, PLANES};

/// Tokens averaged into one landmark key (§4).
pub const LANDMARK_TOKENS: usize = 8;

/// A method of §4, by its benchmark name (`fathom(48)`, `sparq(32)`, ...).
///
/// Re-exported as `runtime::step::Method`, the method of a [`crate::step::StepRequest`].
///
/// ```
/// use runtime::step::Method;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let method: Method = "fathom(48)".parse()?;
/// assert_eq!(method, Method::Fathom { bits: 48.0 });
/// assert_eq!(Method::DoubleSparsity { r: 32 }.to_string(), "double_sparsity(32)");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Method {
    /// Per-query water-filling (§3) into `bits` bits per token.
    Fathom {
        /// The budget `B`, bits per token per KV head.
        bits: f64,
    },
    /// Top-`r` channels of `Σ_h |q_h[c]|` per query group, depth 4.
    Sparq {
        /// Channels read.
        r: usize,
    },
    /// Top-`r` channels of `mean_h |q_h[c]| · mean |k[c]|` on calibration, fixed per (layer, KV
    /// head), depth 4.
    DoubleSparsity {
        /// Channels read.
        r: usize,
    },
    /// The first `r` coordinates of the rotated (KLT) store, depth 4.
    Loki {
        /// Leading coordinates read.
        r: usize,
    },
    /// Every channel at depth 2.
    Thumbnail,
    /// Every channel at depth `t` (1..=4).
    Uniform {
        /// Planes read of every channel.
        t: u8,
    },
    /// Scores from the fp16 mean key of each 8-token group.
    Landmark,
    /// Exact scores from the bf16 keys.
    Oracle,
    /// Full attention over every token.
    Dense,
    /// ParisKV retrieval (§12) over its own index: the group's top-`k` by the reranked
    /// estimate, beside the sink and the local window. Not a plan over the bit-plane store:
    /// [`depth_plan`] refuses it; its f64 reference is [`super::pariskv`].
    Pariskv {
        /// Winners per query group (the step's top-k).
        k: usize,
    },
}

impl Method {
    /// The nominal bits per token per KV head of the method's scan (§4): the budget of
    /// `fathom(B)`, `r (4 + 16/BLK)` for the top-r scans, `D (t + 16/BLK)` for the all-channel
    /// ones, `16 D / 8` for landmark, `16 D` for oracle, and `None` for dense (no scan).
    /// `pariskv(k)` reads `8 B` bits of centroid ids for every retrievable token plus the codes
    /// and weights (`8 (D/2 + 2B)` bits) of its `C = β N_r` candidates; the figure here is at
    /// `N_r >= 30k` (`β = 0.1`), where it no longer depends on the context (§12).
    pub fn bits_per_token(&self, head_dim: usize, block: BlockSize) -> Option<f64> {
        let per_plane_channel = |t: u8| f64::from(t) + block.scale_bits_per_token();
        let d = head_dim as f64;
        match *self {
            Method::Fathom { bits } => Some(bits),
            Method::Sparq { r } | Method::DoubleSparsity { r } | Method::Loki { r } => {
                Some(r as f64 * per_plane_channel(PLANES as u8))
            }
            Method::Thumbnail => Some(d * per_plane_channel(2)),
            Method::Uniform { t } => Some(d * per_plane_channel(t)),
            Method::Landmark => Some(16.0 * d / LANDMARK_TOKENS as f64),
            Method::Oracle => Some(16.0 * d),
            Method::Dense => None,
            Method::Pariskv { .. } => {
                let b = (head_dim / super::pariskv::SUBSPACE) as f64;
                Some(8.0 * b + 0.1 * 8.0 * (d / 2.0 + 2.0 * b))
            }
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Method::Fathom { bits } => write!(f, "fathom({bits})"),
            Method::Sparq { r } => write!(f, "sparq({r})"),
            Method::DoubleSparsity { r } => write!(f, "double_sparsity({r})"),
            Method::Loki { r } => write!(f, "loki({r})"),
            Method::Thumbnail => f.write_str("thumbnail"),
            Method::Uniform { t } => write!(f, "uniform({t})"),
            Method::Landmark => f.write_str("landmark"),
            Method::Oracle => f.write_str("oracle"),
            Method::Dense => f.write_str("dense"),
            Method::Pariskv { k } => write!(f, "pariskv({k})"),
        }
    }
}

/// A method name that does not parse.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error(
    "`{input}` is not a method ({reason}); valid forms: fathom(B) with B > 0 bits per token, \
     sparq(r), double_sparsity(r), loki(r) with r >= 1 channels, thumbnail, uniform(t) with t \
     in 1..=4, landmark, oracle, dense, pariskv(k) with k >= 1 winners"
)]
pub struct MethodParseError {
    /// The text that was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl FromStr for Method {
    type Err = MethodParseError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let fail = |reason: &str| MethodParseError {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        let s = input.trim();
        let (name, arg) = match s.split_once('(') {
            None => (s, None),
            Some((name, rest)) => {
                let arg = rest
                    .strip_suffix(')')
                    .ok_or_else(|| fail("missing closing parenthesis"))?;
                (name, Some(arg.trim()))
            }
        };
        let channels = |arg: Option<&str>| -> Result<usize, MethodParseError> {
            let arg = arg.ok_or_else(|| fail("needs a channel count in parentheses"))?;
            match arg.parse::<usize>() {
                Ok(r) if r >= 1 => Ok(r),
                _ => Err(fail("the channel count must be a whole number >= 1")),
            }
        };
        let no_arg = |method: Method| match arg {
            None => Ok(method),
            Some(_) => Err(fail("takes no argument")),
        };
        match name {
            "fathom" => {
                let arg = arg.ok_or_else(|| fail("needs a budget in parentheses"))?;
                match arg.parse::<f64>() {
                    Ok(bits) if bits.is_finite() && bits > 0.0 => Ok(Method::Fathom { bits }),
                    _ => Err(fail("the budget must be a finite number of bits > 0")),
                }
            }
            "sparq" => Ok(Method::Sparq { r: channels(arg)? }),
            "double_sparsity" => Ok(Method::DoubleSparsity { r: channels(arg)? }),
            "loki" => Ok(Method::Loki { r: channels(arg)? }),
            "uniform" => {
                let arg = arg.ok_or_else(|| fail("needs a depth in parentheses"))?;
                match arg.parse::<u8>() {
                    Ok(t) if (1..=PLANES as u8).contains(&t) => Ok(Method::Uniform { t }),
                    _ => Err(fail("the depth must be 1, 2, 3 or 4 planes")),
                }
            }
            "thumbnail" => no_arg(Method::Thumbnail),
            "landmark" => no_arg(Method::Landmark),
            "oracle" => no_arg(Method::Oracle),
            "dense" => no_arg(Method::Dense),
            "pariskv" => {
                let arg = arg.ok_or_else(|| fail("needs a top-k in parentheses"))?;
                match arg.parse::<usize>() {
                    Ok(k) if k >= 1 => Ok(Method::Pariskv { k }),
                    _ => Err(fail("the top-k must be a whole number >= 1")),
                }
            }
            _ => Err(fail("unknown method name")),
        }
    }
}

/// What one query group's plan needs.
#[derive(Clone, Copy, Debug)]
pub struct PlanContext<'a> {
    /// `G` query rows of `D`, in the store basis.
    pub queries: &'a [Vec<f64>],
    /// `σ_c²` of the store's channels (or the mean square scale standing in for it).
    pub sigma2: &'a [f64],
    /// The store's block size: it sets the scale bits each active channel costs.
    pub block: BlockSize,
    /// The store's basis: `loki` needs a rotated one.
    pub basis: Basis,
    /// The fixed channel set of `double_sparsity`, fitted for this (layer, KV head).
    pub double_sparsity: Option<&'a DoubleSparsityCalibration>,
}

/// The plan of one query group under some method.
#[derive(Clone, Debug, PartialEq)]
pub enum DepthPlan {
    /// A plane plan over the store (every method but the three below).
    Depths(Plan),
    /// Scores from the landmark keys.
    Landmark,
    /// Exact scores from the bf16 keys.
    Oracle,
    /// Full attention, no selection.
    Dense,
}

impl DepthPlan {
    /// Bits per token the plan reads: a plane plan's own cost, landmark `16 D / 8`, oracle
    /// `16 D`, dense `None`.
    pub fn bits_per_token(&self, head_dim: usize) -> Option<f64> {
        match self {
            DepthPlan::Depths(plan) => Some(plan.bits_per_token),
            DepthPlan::Landmark => Some(16.0 * head_dim as f64 / LANDMARK_TOKENS as f64),
            DepthPlan::Oracle => Some(16.0 * head_dim as f64),
            DepthPlan::Dense => None,
        }
    }
}

/// The plan of `method` for one query group (§4). The context's queries and variances are
/// checked for every method, so a bad group is refused whichever method reads it.
pub fn depth_plan(method: Method, ctx: &PlanContext<'_>) -> Result<DepthPlan, PlanError> {
    let d = check_group(ctx.queries, ctx.sigma2)?;
    let channel_count = |r: usize| {
        if (1..=d).contains(&r) {
            Ok(r)
        } else {
            Err(PlanError::ChannelCount {
                method: method.to_string(),
                r,
                head_dim: d,
            })
        }
    };
    let at_depth_4 = |channels: &[usize]| {
        let mut depths = vec![0u8; d];
        channels.iter().for_each(|&c| depths[c] = PLANES as u8);
        DepthPlan::Depths(Plan::from_depths(depths, ctx.block))
    };
    Ok(match method {
        Method::Fathom { bits } => {
            DepthPlan::Depths(water_fill(ctx.queries, ctx.sigma2, bits, ctx.block)?)
        }
        Method::Sparq { r } => {
            let r = channel_count(r)?;
            let score: Vec<f64> = (0..d)
                .map(|c| ctx.queries.iter().map(|q| q[c].abs()).sum())
                .collect();
            at_depth_4(&top_channels(&score, r))
        }
        Method::DoubleSparsity { r } => {
            let r = channel_count(r)?;
            let cal = ctx.double_sparsity.ok_or(PlanError::MissingCalibration)?;
            if cal.r() != r || cal.head_dim() != d {
                return Err(PlanError::CalibrationMismatch {
                    r,
                    head_dim: d,
                    fitted_r: cal.r(),
                    fitted_head_dim: cal.head_dim(),
                });
            }
            at_depth_4(cal.channels())
        }
        Method::Loki { r } => {
            let r = channel_count(r)?;
            if ctx.basis != Basis::Klt {
                return Err(PlanError::NeedsRotatedStore);
            }
            at_depth_4(&(0..r).collect::<Vec<_>>())
        }
        Method::Thumbnail => DepthPlan::Depths(Plan::from_depths(vec![2; d], ctx.block)),
        Method::Uniform { t } => {
            if !(1..=PLANES as u8).contains(&t) {
                return Err(PlanError::Depth { got: t });
            }
            DepthPlan::Depths(Plan::from_depths(vec![t; d], ctx.block))
        }
        Method::Landmark => DepthPlan::Landmark,
        Method::Oracle => DepthPlan::Oracle,
        Method::Dense => DepthPlan::Dense,
        Method::Pariskv { .. } => {
            return Err(PlanError::NotAPlan {
                method: method.to_string(),
            })
        }
    })
}

/// The `r` channels of largest `score`, ties to the lower channel, in ascending channel order.
fn top_channels(score: &[f64], r: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..score.len()).collect();
    // Scores are finite (checked inputs); `+ 0.0` makes -0.0 and 0.0 tie under `total_cmp`.
    order.sort_by(|&a, &b| {
        (score[b] + 0.0)
            .total_cmp(&(score[a] + 0.0))
            .then(a.cmp(&b))
    });
    let mut top = order[..r].to_vec();
    top.sort_unstable();
    top
}

/// Calibration data that cannot be used.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CalibrationError {
    #[error("no calibration {what} were given; give at least one row")]
    Empty { what: &'static str },
    #[error("calibration {what} have 0 channels; give rows of the head dimension")]
    ZeroWidth { what: &'static str },
    #[error("calibration {what} row {row} has {got} channels, expected {expected}")]
    Shape {
        what: &'static str,
        row: usize,
        got: usize,
        expected: usize,
    },
    #[error("calibration {what} row {row}, channel {channel} is {value}; values must be finite")]
    NonFinite {
        what: &'static str,
        row: usize,
        channel: usize,
        value: f64,
    },
    #[error(
        "double_sparsity({r}) on a {head_dim}-channel head; allowed: 1 to {head_dim} channels"
    )]
    ChannelCount { r: usize, head_dim: usize },
    #[error("a vector of {got} values cannot be rotated by a {expected}-channel basis")]
    VectorShape { got: usize, expected: usize },
}

/// Checks calibration rows: at least one, all of width `expected` (the first row's when
/// `None`), all finite. Returns the width.
pub(crate) fn check_rows(
    rows: &[Vec<f64>],
    expected: Option<usize>,
    what: &'static str,
) -> Result<usize, CalibrationError> {
    let first = rows.first().ok_or(CalibrationError::Empty { what })?;
    let d = expected.unwrap_or(first.len());
    if d == 0 {
        return Err(CalibrationError::ZeroWidth { what });
    }
    for (row, x) in rows.iter().enumerate() {
        if x.len() != d {
            return Err(CalibrationError::Shape {
                what,
                row,
                got: x.len(),
                expected: d,
            });
        }
        if let Some(channel) = x.iter().position(|v| !v.is_finite()) {
            return Err(CalibrationError::NonFinite {
                what,
                row,
                channel,
                value: x[channel],
            });
        }
    }
    Ok(d)
}

/// The calibrated `σ_c²` of §3: the population variance (divided by `n`) of every channel over
/// the calibration keys (rows of `D`, in the store basis).
pub fn channel_variance(cal_keys: &[Vec<f64>]) -> Result<Vec<f64>, CalibrationError> {
    let d = check_rows(cal_keys, None, "keys")?;
    let n = cal_keys.len() as f64;
    Ok((0..d)
        .map(|c| {
            let mean = cal_keys.iter().map(|k| k[c]).sum::<f64>() / n;
            cal_keys.iter().map(|k| (k[c] - mean).powi(2)).sum::<f64>() / n
        })
        .collect())
}

/// The fixed channel set of `double_sparsity(r)` for one (layer, KV head).
#[derive(Clone, Debug, PartialEq)]
pub struct DoubleSparsityCalibration {
    head_dim: usize,
    r: usize,
    channels: Vec<usize>,
}

impl DoubleSparsityCalibration {
    /// The top-`r` channels of `mean |q[c]| · mean |k[c]|`, means over every calibration query
    /// row (all query heads of the group, all positions) and every calibration key row; ties to
    /// the lower channel.
    pub fn fit(
        cal_queries: &[Vec<f64>],
        cal_keys: &[Vec<f64>],
        r: usize,
    ) -> Result<Self, CalibrationError> {
        let d = check_rows(cal_keys, None, "keys")?;
        check_rows(cal_queries, Some(d), "queries")?;
        if !(1..=d).contains(&r) {
            return Err(CalibrationError::ChannelCount { r, head_dim: d });
        }
        let mean_abs = |rows: &[Vec<f64>], c: usize| {
            rows.iter().map(|x| x[c].abs()).sum::<f64>() / rows.len() as f64
        };
        let score: Vec<f64> = (0..d)
            .map(|c| mean_abs(cal_queries, c) * mean_abs(cal_keys, c))
            .collect();
        Ok(DoubleSparsityCalibration {
            head_dim: d,
            r,
            channels: top_channels(&score, r),
        })
    }

    /// The channel set of a fitted calibration that was stored as its mask (one byte per
    /// channel, nonzero = read); `None` when no channel is read.
    pub fn from_mask(mask: &[u8]) -> Option<Self> {
        let channels: Vec<usize> = (0..mask.len()).filter(|&c| mask[c] != 0).collect();
        (!channels.is_empty()).then_some(DoubleSparsityCalibration {
            head_dim: mask.len(),
            r: channels.len(),
            channels,
        })
    }

    /// `D` of the head it was fitted on.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Channels read, `r`.
    pub fn r(&self) -> usize {
        self.r
    }

    /// The channels read, ascending.
    pub fn channels(&self) -> &[usize] {
        &self.channels
    }

    /// One byte per channel, 1 where it is read: the plan kernel's "fixed channels" input.
    pub fn mask(&self) -> Vec<u8> {
        let mut mask = vec![0u8; self.head_dim];
        self.channels.iter().for_each(|&c| mask[c] = 1);
        mask
    }
}

#[cfg(test)]
mod tests;
