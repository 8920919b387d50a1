//! Issue #8, item 5: recall@k over a long generation whose keys drift away from the prefill's,
//! for Fathom and ParisKV, through the f64 reference (the `fathom-drift` program).
//!
//! Per KV head, a [`DriftHead`] gives the §11 prefill and then one token per decode step (its
//! drift is documented in [`reference::drift`]). Both methods see the sequence grow the
//! way a serving stack would grow it:
//!
//! - **Fathom**: a [`HeadStore`] built from the prefill and appended one token per step (§2: a
//!   token joins the bf16 tail, and a block enters the store when its last token arrives; the
//!   tail is scored exactly, §6). Each evaluated step runs [`step_group`] with `fathom(B)`.
//!   `σ²` (§3) is calibrated **once, on the prefill's keys**, and never again: that is what goes
//!   stale under drift. [`Sigma2::Live`] (an extra arm, off by default) re-measures it over every
//!   token so far at each evaluated step, to tell a stale calibration from a hard distribution.
//! - **ParisKV**: a [`PariskvIndex`] built from the prefill and appended one row per step; its
//!   histograms grow, nothing is rebuilt. Each evaluated step runs [`pariskv_step`]. The index
//!   takes every token as it arrives, not only at block boundaries: the reference's retrieval
//!   needs every token up to `n - LOCAL` indexed, and the local window is shorter than a block.
//!
//! At every evaluated step `t` (every `every` steps from 0, and the last step) the context is
//! the `n = N + t + 1` tokens so far, the queries are step `t`'s (scaled to the prefill's logit
//! spread, [`scale_queries`]), and each arm is compared with the **oracle**: the exact top-k of
//! the f64 scores `q_h · k_i` over the bf16 keys, per query head. Recall@k is taken over the
//! tokens a top-k chooses from (`SINK .. n - LOCAL`, §6), as in [`crate::fidelity`]:
//!
//! - `fathom(B)`: per query head, `|top-k(scores_h) ∩ top-k(oracle_h)| / k`, with `k` of the
//!   config (100 by default, the same `k` as `pariskv(100)`);
//! - `pariskv(k)`: one selection per query group (§12: from the group's mean query), so per
//!   query head `|S ∩ top-k(oracle_h)| / k` with `S` the group's selected set (its top-k winners,
//!   or every token while `n <= SINK + LOCAL + k`, as §12 selects them).
//!
//! Both are averaged over the `G` query heads and then the KV heads. The relative attention
//! error against dense attention (§9) is recorded beside them.

use crate::parallel::parallel_map;
use half::bf16;
use serde::Serialize;
use thiserror::Error;

use reference::attention::{default_scale, dense};
use reference::drift::{
    channel_variances, scale_queries, variance_profile_distance, DriftError, DriftHead,
    DriftSettings,
};
use reference::metrics::{fidelity, recall_at_k, top_k};
use reference::pariskv::{pariskv_step, PariskvError, PariskvIndex, PariskvInput};
use reference::plans::Method;
use reference::score::score_exact;
use reference::select::{LOCAL, SINK};
use reference::step::{step_group, GroupInput, StepConfig, StepError};
use reference::store::{BlockSize, EncodeError, HeadId, HeadStore, LayoutError, StoreLayout};

/// Words per segment of the stores built here (4,096-token segments; any length works).
const SEGMENT_WORDS: usize = 64;
/// Tokens of the recent window whose channel-variance profile is compared with the prefill's.
pub const PROFILE_WINDOW: usize = 512;

/// Where a Fathom arm's `σ²` comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Sigma2 {
    /// Calibrated once on the prefill's keys (the scenario's point: it goes stale).
    Prefill,
    /// Re-measured over every token so far at each evaluated step (a reference line).
    Live,
}

/// One method measured along the run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum DriftArm {
    /// `fathom(bits)` with its `σ²` source.
    Fathom { bits: f64, sigma2: Sigma2 },
    /// `pariskv(k)`.
    Pariskv { k: usize },
}

impl DriftArm {
    /// The arm's name: `fathom(48)`, `fathom(48)/live-sigma2`, `pariskv(100)`.
    pub fn label(&self) -> String {
        match self {
            DriftArm::Fathom {
                bits,
                sigma2: Sigma2::Prefill,
            } => format!("fathom({bits})"),
            DriftArm::Fathom {
                bits,
                sigma2: Sigma2::Live,
            } => format!("fathom({bits})/live-sigma2"),
            DriftArm::Pariskv { k } => format!("pariskv({k})"),
        }
    }
}

/// The arms of issue #8 item 5: `fathom(48)`, `fathom(92)` (prefill `σ²`) and `pariskv(100)`.
pub fn default_arms() -> Vec<DriftArm> {
    vec![
        DriftArm::Fathom {
            bits: 48.0,
            sigma2: Sigma2::Prefill,
        },
        DriftArm::Fathom {
            bits: 92.0,
            sigma2: Sigma2::Prefill,
        },
        DriftArm::Pariskv { k: 100 },
    ]
}

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct DriftConfig {
    /// The prefill and its drift.
    pub drift: DriftSettings,
    /// Evaluate every `every` decode steps (from step 0), and at the last step.
    pub every: usize,
    /// Top-k of the Fathom arms' recall (ParisKV arms use their own `k`).
    pub k: usize,
    /// The arms measured.
    pub arms: Vec<DriftArm>,
    /// The store's block size `BLK`.
    pub block: BlockSize,
    /// Worker threads (one KV head at a time each).
    pub threads: usize,
}

impl DriftConfig {
    /// The defaults of issue #8 item 5: `N = 8192`, `T = 4000`, two KV heads of the qwen3-8b
    /// shape (`D = 128`, `G = 4`), every 100 steps, `k = 100`, the [`default_arms`].
    pub fn new(threads: usize) -> DriftConfig {
        DriftConfig {
            drift: DriftSettings::default(),
            every: 100,
            k: 100,
            arms: default_arms(),
            block: BlockSize::B64,
            threads,
        }
    }

    /// The decode steps evaluated: `0, every, 2 every, ...` and the last step, ascending.
    pub fn evaluated_steps(&self) -> Vec<usize> {
        let steps = self.drift.steps;
        let mut out: Vec<usize> = (0..steps).step_by(self.every.max(1)).collect();
        if out.last() != Some(&(steps - 1)) {
            out.push(steps - 1);
        }
        out
    }
}

/// A scenario that cannot run, naming what was wrong.
#[derive(Debug, Error)]
pub enum DriftRunError {
    #[error(transparent)]
    Drift(#[from] DriftError),
    #[error("{what} = 0; at least 1 is needed")]
    Zero { what: &'static str },
    #[error("no arms to measure; give at least one of fathom(B) and pariskv(k)")]
    NoArms,
    #[error("{arm}: {reason}")]
    Arm { arm: String, reason: String },
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("KV head {kv_head}: {source}")]
    Encode { kv_head: usize, source: EncodeError },
    #[error("KV head {kv_head}, step {step}, {arm}: {source}")]
    Step {
        kv_head: usize,
        step: usize,
        arm: String,
        source: StepError,
    },
    #[error("KV head {kv_head}, {arm}: {source}")]
    Pariskv {
        kv_head: usize,
        arm: String,
        source: PariskvError,
    },
}

/// One evaluated decode step, averaged over KV heads.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DriftRow {
    /// Decode step `t`.
    pub step: usize,
    /// Tokens in the context, `N + t + 1`.
    pub tokens: usize,
    /// Drift progress `λ` of the step.
    pub progress: f64,
    /// Mean recall@k per arm (order of [`DriftReport::arms`]).
    pub recall: Vec<f64>,
    /// Mean relative attention error against dense, per arm.
    pub error: Vec<f64>,
    /// ParisKV arms only: recall against the exact top-k of the group's *mean* query, the
    /// target its retrieval aims at (§12); it separates retrieval misses from the cost of one
    /// selection per group. `None` for Fathom arms.
    pub mean_query_recall: Vec<Option<f64>>,
    /// Share of the oracle's top-k (Fathom's `k`, per query head) that are decode-time tokens
    /// (positions `>= N`): how much of what matters was appended after the prefill.
    pub oracle_decode_share: f64,
    /// Recall per arm per KV head, `[arm][kv_head]`.
    pub recall_per_head: Vec<Vec<f64>>,
    /// Mean over KV heads of the variance-profile distance between the last
    /// [`PROFILE_WINDOW`] keys and the prefill's keys (0: same profile, 1: disjoint).
    pub profile_distance: f64,
}

/// Everything measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DriftReport {
    /// Arm labels, in the rows' order.
    pub arms: Vec<String>,
    /// The `k` of each arm's recall.
    pub arm_k: Vec<usize>,
    /// One row per evaluated step.
    pub rows: Vec<DriftRow>,
}

/// One KV head's figures at one evaluated step.
struct HeadSample {
    recall: Vec<f64>,
    error: Vec<f64>,
    mean_query_recall: Vec<Option<f64>>,
    oracle_decode_share: f64,
    profile_distance: f64,
}

fn check(config: &DriftConfig) -> Result<(), DriftRunError> {
    config.drift.validate()?;
    if config.every == 0 {
        return Err(DriftRunError::Zero { what: "every" });
    }
    if config.k == 0 {
        return Err(DriftRunError::Zero { what: "k" });
    }
    if config.arms.is_empty() {
        return Err(DriftRunError::NoArms);
    }
    for arm in &config.arms {
        let reason = match *arm {
            DriftArm::Fathom { bits, .. } if !(bits.is_finite() && bits > 0.0) => {
                Some("the budget must be finite and > 0 bits per token".to_string())
            }
            DriftArm::Pariskv { k: 0 } => Some("k must be at least 1".to_string()),
            _ => None,
        };
        if let Some(reason) = reason {
            return Err(DriftRunError::Arm {
                arm: arm.label(),
                reason,
            });
        }
    }
    StoreLayout::new(config.drift.prefill.head_dim, config.block, SEGMENT_WORDS)?;
    Ok(())
}

/// `k` of an arm's recall.
fn arm_k(arm: &DriftArm, config: &DriftConfig) -> usize {
    match *arm {
        DriftArm::Fathom { .. } => config.k,
        DriftArm::Pariskv { k } => k,
    }
}

/// Runs the scenario on every KV head (in parallel, `threads` at a time) and averages.
pub fn run(config: &DriftConfig) -> Result<DriftReport, DriftRunError> {
    check(config)?;
    let heads: Vec<usize> = (0..config.drift.prefill.kv_heads).collect();
    let per_head = parallel_map(&heads, config.threads, |&h| run_head(config, h))
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    let steps = config.evaluated_steps();
    let arms = config.arms.len();
    let h = per_head.len() as f64;
    let rows = steps
        .iter()
        .enumerate()
        .map(|(i, &step)| {
            let samples: Vec<&HeadSample> = per_head.iter().map(|s| &s[i]).collect();
            let mean =
                |f: &dyn Fn(&HeadSample) -> f64| samples.iter().map(|s| f(s)).sum::<f64>() / h;
            Ok(DriftRow {
                step,
                tokens: config.drift.prefill.n + step + 1,
                progress: config.drift.progress(step)?,
                recall: (0..arms).map(|a| mean(&|s| s.recall[a])).collect(),
                error: (0..arms).map(|a| mean(&|s| s.error[a])).collect(),
                mean_query_recall: (0..arms)
                    .map(|a| {
                        samples
                            .iter()
                            .map(|s| s.mean_query_recall[a])
                            .sum::<Option<f64>>()
                            .map(|total| total / h)
                    })
                    .collect(),
                oracle_decode_share: mean(&|s| s.oracle_decode_share),
                recall_per_head: (0..arms)
                    .map(|a| samples.iter().map(|s| s.recall[a]).collect())
                    .collect(),
                profile_distance: mean(&|s| s.profile_distance),
            })
        })
        .collect::<Result<Vec<_>, DriftRunError>>()?;
    Ok(DriftReport {
        arms: config.arms.iter().map(DriftArm::label).collect(),
        arm_k: config.arms.iter().map(|a| arm_k(a, config)).collect(),
        rows,
    })
}

/// The whole run of one KV head: prefill, then every decode step, evaluating where asked.
fn run_head(config: &DriftConfig, kv_head: usize) -> Result<Vec<HeadSample>, DriftRunError> {
    let mut source = DriftHead::new(&config.drift, kv_head)?;
    let s = &config.drift.prefill;
    let d = s.head_dim;
    let prefill = source.prefill();
    let mut keys = prefill.keys.clone();
    let mut values = prefill.values.clone();
    let layout = StoreLayout::new(d, config.block, SEGMENT_WORDS)?;
    let encode = |source| DriftRunError::Encode { kv_head, source };
    let mut store =
        HeadStore::from_keys(layout, HeadId { layer: 0, kv_head }, &keys).map_err(encode)?;
    let index_error = |source| DriftRunError::Pariskv {
        kv_head,
        arm: "index".into(),
        source,
    };
    let mut index = PariskvIndex::build(&keys, d).map_err(index_error)?;
    let prefill_sigma2 = channel_variances(&keys, d, 0..s.n);
    let scale = default_scale(d);
    let evaluated = config.evaluated_steps();
    let mut samples = Vec::with_capacity(evaluated.len());
    while let Some(token) = source.next_token() {
        keys.extend_from_slice(&token.key);
        values.extend_from_slice(&token.value);
        store.append(&token.key).map_err(encode)?;
        index.append(&token.key).map_err(index_error)?;
        if evaluated.binary_search(&token.step).is_err() {
            continue;
        }
        let queries = scale_queries(&token.queries, &keys, d, s.sink_tokens, s.logit_std);
        let context = Context {
            keys: &keys,
            values: &values,
            queries: &queries,
            store: &store,
            index: &index,
            prefill_sigma2: &prefill_sigma2,
            scale,
            kv_head,
            step: token.step,
        };
        let mut sample = context.evaluate(config)?;
        let n = keys.len() / d;
        let window = channel_variances(&keys, d, n.saturating_sub(PROFILE_WINDOW)..n);
        sample.profile_distance = variance_profile_distance(&prefill_sigma2, &window);
        samples.push(sample);
    }
    Ok(samples)
}

/// One evaluated step of one KV head.
struct Context<'a> {
    keys: &'a [bf16],
    values: &'a [bf16],
    queries: &'a [Vec<f64>],
    store: &'a HeadStore,
    index: &'a PariskvIndex,
    prefill_sigma2: &'a [f64],
    scale: f64,
    kv_head: usize,
    step: usize,
}

impl Context<'_> {
    fn evaluate(&self, config: &DriftConfig) -> Result<HeadSample, DriftRunError> {
        let d = self.store.layout().head_dim();
        let n = self.keys.len() / d;
        let oracle = score_exact(self.keys, d, 0..n, self.queries);
        let dense: Vec<Vec<f64>> = self
            .queries
            .iter()
            .map(|q| dense(q, self.keys, self.values, d, n, self.scale))
            .collect();
        let candidates = SINK.min(n)..n.saturating_sub(LOCAL).max(SINK.min(n));
        let g = self.queries.len() as f64;
        let mut live_sigma2 = None;
        let prefill_tokens = n - self.step - 1;
        let decode_share = oracle
            .iter()
            .map(|truth| {
                let top = top_k(&truth[candidates.clone()], config.k);
                let late = top
                    .iter()
                    .filter(|&&i| i + candidates.start >= prefill_tokens)
                    .count();
                late as f64 / top.len().max(1) as f64
            })
            .sum::<f64>()
            / g;
        let mut sample = HeadSample {
            recall: Vec::with_capacity(config.arms.len()),
            error: Vec::with_capacity(config.arms.len()),
            mean_query_recall: Vec::with_capacity(config.arms.len()),
            oracle_decode_share: decode_share,
            profile_distance: 0.0,
        };
        for arm in &config.arms {
            let k = arm_k(arm, config);
            let (recall, mean_query_recall, outputs) = match *arm {
                DriftArm::Fathom { bits, sigma2 } => {
                    let sigma2: &[f64] = match sigma2 {
                        Sigma2::Prefill => self.prefill_sigma2,
                        Sigma2::Live => {
                            live_sigma2.get_or_insert_with(|| channel_variances(self.keys, d, 0..n))
                        }
                    };
                    let input = GroupInput {
                        store: self.store,
                        keys: self.keys,
                        values: self.values,
                        queries: self.queries,
                        klt: None,
                        sigma2: Some(sigma2),
                        double_sparsity: None,
                    };
                    let step_config = StepConfig {
                        method: Method::Fathom { bits },
                        k,
                        scale: self.scale,
                    };
                    let step =
                        step_group(&input, &step_config).map_err(|source| DriftRunError::Step {
                            kv_head: self.kv_head,
                            step: self.step,
                            arm: arm.label(),
                            source,
                        })?;
                    let recall = step
                        .scores
                        .iter()
                        .zip(&oracle)
                        .map(|(s, truth)| {
                            recall_at_k(&s[candidates.clone()], &truth[candidates.clone()], k)
                        })
                        .sum::<f64>()
                        / g;
                    (recall, None, step.outputs)
                }
                DriftArm::Pariskv { k } => {
                    let input = PariskvInput {
                        index: self.index,
                        keys: self.keys,
                        values: self.values,
                        queries: self.queries,
                        n_total: n,
                    };
                    let step = pariskv_step(&input, k, self.scale).map_err(|source| {
                        DriftRunError::Pariskv {
                            kv_head: self.kv_head,
                            arm: arm.label(),
                            source,
                        }
                    })?;
                    // The group's set (the same for every head): sink ∪ winners ∪ local, or every
                    // token of a short sequence; only its candidates can be in a top-k.
                    let chosen = &step.selection.heads[0];
                    let recall = oracle
                        .iter()
                        .map(|truth| {
                            group_recall(chosen, &truth[candidates.clone()], candidates.start, k)
                        })
                        .sum::<f64>()
                        / g;
                    let q_mean = std::slice::from_ref(&step.retrieval.q_mean);
                    let mean_oracle = score_exact(self.keys, d, 0..n, q_mean);
                    let mean_recall = group_recall(
                        chosen,
                        &mean_oracle[0][candidates.clone()],
                        candidates.start,
                        k,
                    );
                    (recall, Some(mean_recall), step.outputs)
                }
            };
            let error = outputs
                .iter()
                .zip(&dense)
                .map(|(o, o_dense)| fidelity(o, o_dense))
                .sum::<f64>()
                / g;
            sample.recall.push(recall);
            sample.error.push(error);
            sample.mean_query_recall.push(mean_query_recall);
        }
        Ok(sample)
    }
}

/// Recall@k of a set of chosen tokens against the top-k of `truth` (the scores of tokens
/// `first..first + truth.len()`): `|chosen ∩ top-k| / k`, with `k` capped at the token count
/// (and 1 when there is nothing to choose), as [`recall_at_k`]. Chosen tokens outside the
/// scored range (sink, local window) count for nothing.
pub fn group_recall(chosen: &[usize], truth: &[f64], first: usize, k: usize) -> f64 {
    let k = k.min(truth.len());
    if k == 0 {
        return 1.0;
    }
    let mut best: Vec<usize> = top_k(truth, k).into_iter().map(|i| i + first).collect();
    best.sort_unstable();
    let hits = chosen
        .iter()
        .filter(|t| best.binary_search(t).is_ok())
        .count();
    hits as f64 / k as f64
}

#[cfg(test)]
mod tests;
