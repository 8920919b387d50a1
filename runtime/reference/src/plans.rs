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

use thiserror::Error;

use super::model::Basis;
use super::planner::{check_group, water_fill, Plan, PlanError};
use super::store::{BlockSize, PLANES};

pub use codegen::spec::method::{Method, MethodParseError, LANDMARK_TOKENS};

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
