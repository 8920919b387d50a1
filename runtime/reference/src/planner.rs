//! SPEC §3: the read plan of one query group, by reverse water-filling, and per-layer budgets.
//!
//! Channel `c` has importance `w_c = σ_c² Σ_h q_h[c]²`; its `t`-th plane lowers the expected
//! squared score error by `3 w_c 4^(-t)`. A water line `θ` reads every plane whose gain is at
//! least `θ`, so channel `c` is read to depth `t_c(θ) = clamp(floor(log4(3 w_c / θ)), 0, 4)`.
//! The plan is the depths at the smallest water line whose cost fits the budget.
//!
//! # The algorithm, step for step (the GPU plan kernel copies it)
//!
//! Everything happens on `x = log2 θ`, with `l_c = log2(3 w_c)` for every channel with `w_c > 0`
//! (channels with `w_c = 0` are never read):
//!
//! 1. **depth at a water line** ([`depth_at`]): `t_c(x)` is the largest `t` in `1..=4` with
//!    `l_c - x >= 2t`, or 0 when there is none. This is `floor(log4(3 w_c / θ))` clamped, written
//!    as four comparisons of one difference so that no `floor` of a rounded quotient can differ
//!    between two implementations.
//! 2. **cost** ([`plan_cost`]): `C(x) = Σ_c t_c + (16 / BLK) · #{c : t_c > 0}`, exact in f64
//!    (integers plus multiples of a power of two).
//! 3. **everything fits**: if `#{c : w_c > 0} · (4 + 16/BLK) <= B`, every channel with `w_c > 0`
//!    is read to depth 4 and the water line is reported as 0. This also covers all-zero queries:
//!    every `w_c = 0`, nothing is read, cost 0.
//! 4. **bracket**: `hi = max_c l_c` (every `l_c - hi <= 0 < 2`: cost 0, feasible) and
//!    `lo = min_c l_c - 9` (every `l_c - lo >= 9 > 8`: every channel at depth 4, infeasible since
//!    step 3 did not return). The margin is 9, not the minimal 8, so that the rounding of
//!    `min l_c - 9` cannot lift the least important channel off depth 4.
//! 5. **bisection**: exactly [`BISECTION_STEPS`] = 30 times, `mid = (lo + hi) * 0.5`; if
//!    `C(mid) <= B` then `hi = mid` else `lo = mid`. `hi` stays feasible and `lo` infeasible.
//! 6. **result**: the depths at `x = hi`, cost `C(hi)`, water line `θ* = 2^hi`.
//!
//! `C` is non-increasing in `x`, so the result is the largest set of planes "every plane with gain
//! above the water line" that fits, up to the bisection's resolution `(hi - lo) / 2^30` in `x`.
//! Channels of equal importance always share a depth, so a budget too small for a whole group of
//! ties leaves the group out and the plan may use fewer than `B` bits.
//!
//! # Per-layer budgets
//!
//! [`per_layer_budgets`] starts every layer at the target mean and moves bits between layers,
//! `step` bits at a time, to where they lower the calibration error most; see its documentation.

use std::collections::{HashMap, HashSet};

use thiserror::Error;

use super::store::{BlockSize, PLANES};

/// The largest query group (`G`) a plan is made for (§1).
pub const MAX_GROUP: usize = 16;
/// Bisection steps on `log2 θ` (§3).
pub const BISECTION_STEPS: u32 = 30;
/// How far below `min_c log2(3 w_c)` the bisection bracket starts (step 4 of the module docs).
pub const BRACKET_LOW_MARGIN: f64 = 9.0;
/// The deepest read depth, as a `u8` depth.
const MAX_DEPTH: u8 = PLANES as u8;

/// Input that no plan can be made from.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum PlanError {
    #[error(
        "budget {budget} bits per token is not allowed: it must be finite and at least {min} \
         (one channel at depth 1 plus its fp16 block scale)"
    )]
    Budget { budget: f64, min: f64 },
    #[error("query group of {got} heads; allowed: 1 to 16 query heads per KV head")]
    GroupSize { got: usize },
    #[error("the channel variances σ² are empty; give one per channel of the head")]
    EmptyHead,
    #[error("query head {head} has {got} channels but σ² has {expected}; they must match")]
    QueryShape {
        head: usize,
        got: usize,
        expected: usize,
    },
    #[error("query head {head}, channel {channel} is {value}; queries must be finite")]
    NonFiniteQuery {
        head: usize,
        channel: usize,
        value: f64,
    },
    #[error("σ² of channel {channel} is {value}; variances must be finite and >= 0")]
    Sigma2 { channel: usize, value: f64 },
    #[error(
        "importance w_c = σ²·Σq² of channel {channel} is {value}; it must be finite and >= 0 \
         (scale the queries or variances down if it overflowed)"
    )]
    Importance { channel: usize, value: f64 },
    #[error("{method} reads {r} channels of a {head_dim}-channel head; allowed: 1 to {head_dim}")]
    ChannelCount {
        method: String,
        r: usize,
        head_dim: usize,
    },
    #[error("uniform({got}) is not a read depth; allowed: 1 to 4 planes")]
    Depth { got: u8 },
    #[error("double_sparsity needs its calibrated channel set; fit one per (layer, KV head)")]
    MissingCalibration,
    #[error(
        "{method} ranks keys with its own index, not a plan over the bit-plane store; run it \
         with reference::pariskv (or the step API)"
    )]
    NotAPlan { method: String },
    #[error(
        "double_sparsity({r}) on a {head_dim}-channel head was given a calibration of {fitted_r} \
         channels of a {fitted_head_dim}-channel head; fit it with the same r and head"
    )]
    CalibrationMismatch {
        r: usize,
        head_dim: usize,
        fitted_r: usize,
        fitted_head_dim: usize,
    },
    #[error("loki reads the first KLT coordinates, so it needs a rotated (klt) store, not raw")]
    NeedsRotatedStore,
}

/// A read plan of one query group: the depth of every channel and what it costs.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// `t_c`, 0..=4 planes, one per channel.
    pub depths: Vec<u8>,
    /// `C = Σ t_c + (16 / BLK)` per active channel: the bits per token the scan reads.
    pub bits_per_token: f64,
    /// The water line `θ*` of a water-filled plan (0 when every plane fits); `None` for the
    /// fixed-depth plans of §4, which have none.
    pub water_line: Option<f64>,
}

impl Plan {
    /// A plan with the given depths and no water line, its cost computed from them.
    pub fn from_depths(depths: Vec<u8>, block: BlockSize) -> Plan {
        let bits_per_token = plan_cost(&depths, block);
        Plan {
            depths,
            bits_per_token,
            water_line: None,
        }
    }

    /// Channels read to depth 1 or more.
    pub fn active_channels(&self) -> usize {
        self.depths.iter().filter(|&&t| t > 0).count()
    }
}

/// `C = Σ t_c + (16 / BLK) · #{c : t_c > 0}`: planes plus the fp16 scale of every active channel.
pub fn plan_cost(depths: &[u8], block: BlockSize) -> f64 {
    let planes: u32 = depths.iter().map(|&t| u32::from(t)).sum();
    let active = depths.iter().filter(|&&t| t > 0).count();
    f64::from(planes) + active as f64 * block.scale_bits_per_token()
}

/// The smallest budget any plan can be made with: one channel at depth 1 plus its scale.
pub fn min_budget(block: BlockSize) -> f64 {
    1.0 + block.scale_bits_per_token()
}

/// Checks a query group (`G` rows of `D`) against its channel variances; returns `D`.
pub fn check_group(queries: &[Vec<f64>], sigma2: &[f64]) -> Result<usize, PlanError> {
    let d = sigma2.len();
    if d == 0 {
        return Err(PlanError::EmptyHead);
    }
    if queries.is_empty() || queries.len() > MAX_GROUP {
        return Err(PlanError::GroupSize { got: queries.len() });
    }
    for (head, q) in queries.iter().enumerate() {
        if q.len() != d {
            return Err(PlanError::QueryShape {
                head,
                got: q.len(),
                expected: d,
            });
        }
        if let Some(channel) = q.iter().position(|x| !x.is_finite()) {
            return Err(PlanError::NonFiniteQuery {
                head,
                channel,
                value: q[channel],
            });
        }
    }
    if let Some(channel) = sigma2.iter().position(|s| !s.is_finite() || *s < 0.0) {
        return Err(PlanError::Sigma2 {
            channel,
            value: sigma2[channel],
        });
    }
    Ok(d)
}

/// The importance `w_c = σ_c² Σ_h q_h[c]²` of every channel of a query group (queries: `G` rows
/// of `D`, in the store basis).
pub fn importance(queries: &[Vec<f64>], sigma2: &[f64]) -> Result<Vec<f64>, PlanError> {
    let d = check_group(queries, sigma2)?;
    (0..d)
        .map(|c| {
            let w = sigma2[c] * queries.iter().map(|q| q[c] * q[c]).sum::<f64>();
            if w.is_finite() {
                Ok(w)
            } else {
                Err(PlanError::Importance {
                    channel: c,
                    value: w,
                })
            }
        })
        .collect()
}

/// `t_c` at water line `x = log2 θ` for a channel with `log2_gain = log2(3 w_c)`: the largest `t`
/// in `1..=4` with `log2_gain - x >= 2t`, else 0 (step 1 of the module docs).
pub fn depth_at(log2_gain: f64, x: f64) -> u8 {
    let d = log2_gain - x;
    (1..=MAX_DEPTH)
        .take_while(|&t| d >= 2.0 * f64::from(t))
        .last()
        .unwrap_or(0)
}

/// `log2(3 w_c)` for every channel, `None` where `w_c = 0` (never read).
fn log2_gains(w: &[f64]) -> Vec<Option<f64>> {
    w.iter()
        .map(|&w| {
            (w > 0.0).then(|| {
                // Above f64::MAX / 3 the product overflows to +inf, whose channel would never be
                // read; the sum of logs is the same gain without the overflow.
                let gain = 3.0 * w;
                if gain.is_finite() {
                    gain.log2()
                } else {
                    w.log2() + 3f64.log2()
                }
            })
        })
        .collect()
}

fn depths_at(gains: &[Option<f64>], x: f64) -> Vec<u8> {
    gains
        .iter()
        .map(|g| g.map_or(0, |g| depth_at(g, x)))
        .collect()
}

/// Water-fills the query group `queries` (`G` rows of `D`, store basis) with channel variances
/// `sigma2` into `budget_bits` bits per token (§3; the algorithm is in the module docs).
pub fn water_fill(
    queries: &[Vec<f64>],
    sigma2: &[f64],
    budget_bits: f64,
    block: BlockSize,
) -> Result<Plan, PlanError> {
    check_budget(budget_bits, block)?;
    let w = importance(queries, sigma2)?;
    water_fill_importance(&w, budget_bits, block)
}

/// [`water_fill`] from importances `w_c` already computed (finite, `>= 0`).
pub fn water_fill_importance(
    w: &[f64],
    budget_bits: f64,
    block: BlockSize,
) -> Result<Plan, PlanError> {
    check_budget(budget_bits, block)?;
    if w.is_empty() {
        return Err(PlanError::EmptyHead);
    }
    if let Some(channel) = w.iter().position(|w| !w.is_finite() || *w < 0.0) {
        return Err(PlanError::Importance {
            channel,
            value: w[channel],
        });
    }
    let gains = log2_gains(w);
    let known: Vec<f64> = gains.iter().flatten().copied().collect();
    let all_deep = known.len() as f64 * (f64::from(MAX_DEPTH) + block.scale_bits_per_token());
    if all_deep <= budget_bits {
        let depths = gains
            .iter()
            .map(|g| if g.is_some() { MAX_DEPTH } else { 0 })
            .collect::<Vec<_>>();
        return Ok(Plan {
            bits_per_token: plan_cost(&depths, block),
            depths,
            water_line: Some(0.0),
        });
    }
    // `known` is not empty here: an empty one costs 0 and fits every valid budget.
    let mut hi = known.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut lo = known.iter().copied().fold(f64::INFINITY, f64::min) - BRACKET_LOW_MARGIN;
    for _ in 0..BISECTION_STEPS {
        let mid = (lo + hi) * 0.5;
        if plan_cost(&depths_at(&gains, mid), block) <= budget_bits {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let depths = depths_at(&gains, hi);
    Ok(Plan {
        bits_per_token: plan_cost(&depths, block),
        depths,
        water_line: Some(hi.exp2()),
    })
}

fn check_budget(budget_bits: f64, block: BlockSize) -> Result<(), PlanError> {
    let min = min_budget(block);
    if budget_bits.is_finite() && budget_bits >= min {
        Ok(())
    } else {
        Err(PlanError::Budget {
            budget: budget_bits,
            min,
        })
    }
}

/// The search space of [`per_layer_budgets`]: integer budgets in bits per token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerBudgetSearch {
    /// Layers `L`.
    pub layers: usize,
    /// The mean budget every assignment keeps, exactly: `Σ_l B_l = L · target_mean`.
    pub target_mean: u32,
    /// Bits moved from one layer to another in one move (the unit step).
    pub step: u32,
    /// The smallest budget a layer may get (at least 2: one channel at depth 1 and its scale
    /// fit in 2 bits at every block size).
    pub min: u32,
    /// The largest budget a layer may get.
    pub max: u32,
}

/// A per-layer budget search that cannot run.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum LayerBudgetError {
    #[error("no layers to assign budgets to; give at least one")]
    NoLayers,
    #[error("a move of 0 bits changes nothing; give a step of at least 1 bit")]
    ZeroStep,
    #[error(
        "budget range {min}..={max} with target mean {target_mean} is not allowed: \
         need 2 <= min <= target_mean <= max"
    )]
    Range {
        min: u32,
        max: u32,
        target_mean: u32,
    },
    #[error("calibration error of layer {layer} at budget {budget} is {value}; it must be finite")]
    NonFiniteError {
        layer: usize,
        budget: u32,
        value: f64,
    },
}

/// Per-layer budgets `B_l` with mean exactly `target_mean` (§3), from `error_at(l, b)`, the
/// calibration error of layer `l` at integer budget `b` (called at most once per `(l, b)`).
///
/// Every layer starts at the target. One *move* takes `step` bits from a donor layer `d` and
/// gives them to a receiver `r != d`, within `min..=max`; its net error drop per bit is
/// `[(e(r, B_r) - e(r, B_r + step)) - (e(d, B_d - step) - e(d, B_d))] / step`. Each round makes
/// the move with the largest net drop per bit (ties: the lower receiver, then the lower donor),
/// as long as that drop is positive and the resulting assignment has not been seen before (so
/// the search ends even when rounding makes drops ambiguous). The mean is unchanged by every move.
pub fn per_layer_budgets(
    search: &LayerBudgetSearch,
    mut error_at: impl FnMut(usize, u32) -> f64,
) -> Result<Vec<u32>, LayerBudgetError> {
    let LayerBudgetSearch {
        layers,
        target_mean,
        step,
        min,
        max,
    } = *search;
    if layers == 0 {
        return Err(LayerBudgetError::NoLayers);
    }
    if step == 0 {
        return Err(LayerBudgetError::ZeroStep);
    }
    if !(2 <= min && min <= target_mean && target_mean <= max) {
        return Err(LayerBudgetError::Range {
            min,
            max,
            target_mean,
        });
    }
    let mut memo: HashMap<(usize, u32), f64> = HashMap::new();
    let mut error = |layer: usize, budget: u32| -> Result<f64, LayerBudgetError> {
        if let Some(&e) = memo.get(&(layer, budget)) {
            return Ok(e);
        }
        let value = error_at(layer, budget);
        if !value.is_finite() {
            return Err(LayerBudgetError::NonFiniteError {
                layer,
                budget,
                value,
            });
        }
        memo.insert((layer, budget), value);
        Ok(value)
    };
    let mut budgets = vec![target_mean; layers];
    let mut seen = HashSet::from([budgets.clone()]);
    loop {
        // (net drop per bit, receiver, donor) of the best move so far.
        let mut best: Option<(f64, usize, usize)> = None;
        for r in 0..layers {
            let Some(up) = budgets[r].checked_add(step).filter(|&b| b <= max) else {
                continue;
            };
            let drop = error(r, budgets[r])? - error(r, up)?;
            for d in (0..layers).filter(|&d| d != r) {
                let Some(down) = budgets[d].checked_sub(step).filter(|&b| b >= min) else {
                    continue;
                };
                let rise = error(d, down)? - error(d, budgets[d])?;
                let per_bit = (drop - rise) / f64::from(step);
                if best.is_none_or(|(b, _, _)| per_bit > b) {
                    best = Some((per_bit, r, d));
                }
            }
        }
        let Some((per_bit, r, d)) = best else { break };
        if per_bit <= 0.0 {
            break;
        }
        let mut next = budgets.clone();
        next[r] += step;
        next[d] -= step;
        if !seen.insert(next.clone()) {
            break;
        }
        budgets = next;
    }
    Ok(budgets)
}

#[cfg(test)]
mod tests;
