//! SPEC §8: one decode step of one query group (one KV head of one layer of one sequence), end
//! to end: plan → scan → select/union → attention, for any method of §4.
//!
//! The GPU step runs every stage for all KV heads and sequences of a layer in one launch; the
//! reference runs them one query group at a time, which is the same computation.

use half::bf16;
use thiserror::Error;

use super::attention::{attend_group, dense};
use super::klt::Klt;
use super::metrics::{bytes_per_step, winner_row_bytes, StepBytes};
use super::planner::PlanError;
use super::plans::PlanContext;
use super::plans::{depth_plan, CalibrationError, DepthPlan, DoubleSparsityCalibration, Method};
use super::queries::{check_queries, QueryFault};
use super::score::{score_all, score_exact, score_landmark, with_exact_tail};
use super::select::Selection;
use super::store::HeadStore;
use crate::model::Basis;

/// A step that cannot run, naming what was wrong.
#[derive(Debug, Error)]
pub enum StepError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Calibration(#[from] CalibrationError),
    #[error(
        "the K/V rows hold {rows} tokens but the store holds {tokens}; pass the bf16 rows of \
         every token"
    )]
    Rows { rows: usize, tokens: usize },
    #[error("query {head} has {got} channels; the store has {want}")]
    QueryShape {
        head: usize,
        got: usize,
        want: usize,
    },
    #[error("query {head} channel {channel} is {value}; queries must be finite")]
    NonFiniteQuery {
        head: usize,
        channel: usize,
        value: f64,
    },
    #[error("the store is rotated (KLT basis): pass its basis")]
    MissingBasis,
}

impl From<QueryFault> for StepError {
    fn from(fault: QueryFault) -> Self {
        match fault {
            QueryFault::Shape { head, got, want } => StepError::QueryShape { head, got, want },
            QueryFault::NonFinite {
                head,
                channel,
                value,
            } => StepError::NonFiniteQuery {
                head,
                channel,
                value,
            },
        }
    }
}

/// One query group's inputs.
#[derive(Clone, Copy, Debug)]
pub struct GroupInput<'a> {
    /// The store of this KV head, in the store basis.
    pub store: &'a HeadStore,
    /// bf16 K rows of every token, raw basis, `[n][D]`.
    pub keys: &'a [bf16],
    /// bf16 V rows of every token, `[n][D]`.
    pub values: &'a [bf16],
    /// The `G` queries, raw basis.
    pub queries: &'a [Vec<f64>],
    /// The KLT basis when the store is rotated (§5).
    pub klt: Option<&'a Klt>,
    /// Calibrated `σ²` in the store basis; without it the mean square scale stands in (§3).
    pub sigma2: Option<&'a [f64]>,
    /// `double_sparsity`'s fixed channels for this head.
    pub double_sparsity: Option<&'a DoubleSparsityCalibration>,
}

/// The step's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepConfig {
    pub method: Method,
    /// Top-k per query head, beside sink and local.
    pub k: usize,
    /// The softmax scale, `1/sqrt(D)` unless the model says otherwise.
    pub scale: f64,
}

/// What one query group's step computes.
#[derive(Clone, Debug)]
pub struct GroupStep {
    pub plan: DepthPlan,
    /// The queries in the store basis (the raw ones when the store is not rotated).
    pub store_queries: Vec<Vec<f64>>,
    /// Scores of every token per query head (empty for `dense`).
    pub scores: Vec<Vec<f64>>,
    pub selection: Selection,
    /// Attention output per query head.
    pub outputs: Vec<Vec<f64>>,
    /// Bytes the step reads (§9).
    pub bytes: StepBytes,
}

/// Runs one query group's step.
pub fn step_group(input: &GroupInput<'_>, config: &StepConfig) -> Result<GroupStep, StepError> {
    let store = input.store;
    let d = store.layout().head_dim();
    let n = store.total_tokens();
    check_inputs(input, d, n)?;
    let store_queries = match input.klt {
        Some(klt) => input
            .queries
            .iter()
            .map(|q| klt.rotate(q))
            .collect::<Result<Vec<_>, _>>()?,
        None => input.queries.to_vec(),
    };
    let sigma2 = match input.sigma2 {
        Some(s) => s.to_vec(),
        None => store.mean_square_scale(),
    };
    let ctx = PlanContext {
        queries: &store_queries,
        sigma2: &sigma2,
        block: store.layout().block(),
        basis: if input.klt.is_some() {
            Basis::Klt
        } else {
            Basis::Raw
        },
        double_sparsity: input.double_sparsity,
    };
    let plan = depth_plan(config.method, &ctx)?;
    let (keys, values, queries) = (input.keys, input.values, input.queries);
    let n_stored = store.stored_tokens();
    let scores = match &plan {
        DepthPlan::Depths(p) => score_all(store, &p.depths, &store_queries, keys, queries),
        DepthPlan::Landmark => {
            let stored = score_landmark(keys, d, n_stored, queries);
            with_exact_tail(stored, keys, d, n, queries)
        }
        DepthPlan::Oracle => score_exact(keys, d, 0..n, queries),
        DepthPlan::Dense => Vec::new(),
    };
    let (selection, outputs) = match plan {
        DepthPlan::Dense => {
            let all: Vec<usize> = (0..n).collect();
            let selection = Selection::from_sets(vec![all; queries.len()]);
            let outputs = queries
                .iter()
                .map(|q| dense(q, keys, values, d, n, config.scale))
                .collect();
            (selection, outputs)
        }
        _ => {
            let selection = Selection::from_scores(&scores, config.k);
            let outputs = attend_group(queries, keys, values, d, &selection, config.scale);
            (selection, outputs)
        }
    };
    let bytes = match &plan {
        DepthPlan::Depths(p) => bytes_per_step(
            &p.depths,
            n_stored,
            store.layout().block(),
            selection.union.len(),
        ),
        _ => StepBytes {
            planes: plan
                .bits_per_token(d)
                .map_or(0, |bits| (bits * n as f64 / 8.0) as usize),
            scales: 0,
            rows: winner_row_bytes(selection.union.len(), d),
        },
    };
    Ok(GroupStep {
        plan,
        store_queries,
        scores,
        selection,
        outputs,
        bytes,
    })
}

fn check_inputs(input: &GroupInput<'_>, d: usize, n: usize) -> Result<(), StepError> {
    for rows in [input.keys.len() / d, input.values.len() / d] {
        if rows < n {
            return Err(StepError::Rows { rows, tokens: n });
        }
    }
    check_queries(input.queries, d)?;
    Ok(())
}

#[cfg(test)]
mod tests;
