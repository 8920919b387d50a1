//! SPEC §9 on real activations (§11): fidelity and recall@k of every §4 method, per store basis,
//! through the f64 reference of the whole step ([`step_group`]).
//!
//! For each (layer, KV head) the calibration — `σ²` (§3), the KLT basis (§5) and the
//! `double_sparsity` channels (§4) — is fitted on a [`Split`] that keeps it off what is measured:
//! the keys of the first tokens and the queries of captured positions that are not evaluated.
//! Then, for every evaluated position `p` (context: tokens `0..=p`, so the store holds the full
//! blocks of it and the rest is the bf16 tail, §2), every [`Arm`] runs one step and is compared
//! with dense attention (error) and with the oracle's top-k (recall).
//!
//! Recall@k is taken over the tokens the top-k chooses from (`SINK..n - LOCAL`, §6): the sink and
//! the local window are selected by every method, so counting them would only dilute it.

use crate::parallel::parallel_map;
use std::ops::Range;

use half::bf16;
use serde::Serialize;
use thiserror::Error;

use reference::activations::LayerActivations;
use reference::klt::Klt;
use reference::metrics::{fidelity, recall_at_k};
use reference::model::Basis;
use reference::plans::{channel_variance, CalibrationError, DoubleSparsityCalibration, Method};
use reference::select::{LOCAL, SINK};
use reference::step::{step_group, GroupInput, GroupStep, StepConfig, StepError};
use reference::store::{BlockSize, EncodeError, HeadId, HeadStore, StoreLayout};

/// Words per segment of the stores built here (one 4,096-token segment; any length works).
const SEGMENT_WORDS: usize = 64;

/// A measurement that cannot run, naming what was wrong.
#[derive(Debug, Error)]
pub enum FidelityError {
    #[error("bad split: {0}")]
    Split(String),
    #[error("layer {layer}, KV head {kv_head}: {source}")]
    Calibration {
        layer: usize,
        kv_head: usize,
        source: CalibrationError,
    },
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error("layer {layer}, KV head {kv_head}, position {position}, {arm}: {source}")]
    Step {
        layer: usize,
        kv_head: usize,
        position: usize,
        arm: String,
        source: StepError,
    },
    #[error("{arm} on the {basis:?} store: {reason}")]
    Arm {
        arm: String,
        basis: Basis,
        reason: &'static str,
    },
    #[error("nothing to measure: give at least one layer, KV head and evaluated position")]
    Empty,
}

/// What calibration may see and what is evaluated.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Split {
    /// `σ²`, the KLT basis and `double_sparsity`'s key statistics are fitted on tokens
    /// `0..calibration_keys`.
    pub calibration_keys: usize,
    /// The KLT ordering and `double_sparsity`'s query statistics are fitted on the captured
    /// queries of these indices (every query head of the group).
    pub calibration_queries: Range<usize>,
    /// Captured query indices that are evaluated; none may be a calibration query.
    pub evaluated: Vec<usize>,
}

impl Split {
    /// The default split of a capture of `tokens` tokens and `queries` captured positions: keys of
    /// the first half of the context, queries of the first half of the captured positions, and
    /// every `stride`-th of the second half evaluated (ending at the last position).
    pub fn halves(tokens: usize, queries: usize, stride: usize) -> Result<Split, FidelityError> {
        if stride == 0 {
            return Err(FidelityError::Split(
                "the position stride must be at least 1".into(),
            ));
        }
        let half = queries / 2;
        let mut evaluated: Vec<usize> = (half..queries).rev().step_by(stride).collect();
        evaluated.reverse();
        Ok(Split {
            calibration_keys: tokens / 2,
            calibration_queries: 0..half,
            evaluated,
        })
    }

    fn check(&self, layer: &LayerActivations) -> Result<(), FidelityError> {
        let q = layer.query_count();
        if self.calibration_keys == 0 || self.calibration_keys > layer.tokens {
            return Err(FidelityError::Split(format!(
                "calibration keys must be 1..={} tokens, got {}",
                layer.tokens, self.calibration_keys
            )));
        }
        if self.calibration_queries.is_empty() || self.calibration_queries.end > q {
            return Err(FidelityError::Split(format!(
                "calibration queries {:?} must be a non-empty range inside the {q} captured",
                self.calibration_queries
            )));
        }
        if self.evaluated.is_empty() {
            return Err(FidelityError::Empty);
        }
        if let Some(&i) = self
            .evaluated
            .iter()
            .find(|&&i| i >= q || self.calibration_queries.contains(&i))
        {
            return Err(FidelityError::Split(format!(
                "evaluated query {i} is outside the {q} captured or is a calibration query \
                 ({:?})",
                self.calibration_queries
            )));
        }
        Ok(())
    }
}

/// One measured configuration: a method on a store basis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Arm {
    pub method: Method,
    /// The store basis; `landmark`, `oracle` and `dense` read no store and run on `Raw`.
    pub basis: Basis,
}

impl Arm {
    /// `method` on the raw store, `method/klt` on the rotated one.
    pub fn label(&self) -> String {
        match self.basis {
            Basis::Raw => self.method.to_string(),
            Basis::Klt => format!("{}/klt", self.method),
        }
    }
}

/// The fathom budgets measured by [`default_arms`].
pub const FATHOM_BUDGETS: [f64; 5] = [24.0, 32.0, 48.0, 64.0, 92.0];

/// Every method of the benchmark issue: fathom at [`FATHOM_BUDGETS`], `sparq(16)`, `sparq(32)`,
/// `double_sparsity(32)`, `thumbnail`, `uniform(2)` on both stores, `loki(32)` on the rotated
/// one, and `landmark`, `oracle`, `dense` once.
pub fn default_arms() -> Vec<Arm> {
    let mut arms = Vec::new();
    for basis in [Basis::Raw, Basis::Klt] {
        let mut methods: Vec<Method> = FATHOM_BUDGETS
            .iter()
            .map(|&bits| Method::Fathom { bits })
            .collect();
        methods.extend([
            Method::Sparq { r: 16 },
            Method::Sparq { r: 32 },
            Method::DoubleSparsity { r: 32 },
        ]);
        if basis == Basis::Klt {
            methods.push(Method::Loki { r: 32 });
        }
        methods.extend([Method::Thumbnail, Method::Uniform { t: 2 }]);
        arms.extend(methods.into_iter().map(|method| Arm { method, basis }));
    }
    arms.extend(
        [Method::Landmark, Method::Oracle, Method::Dense].map(|method| Arm {
            method,
            basis: Basis::Raw,
        }),
    );
    arms
}

/// What is measured.
#[derive(Clone, Debug)]
pub struct FidelityConfig {
    pub split: Split,
    /// Top-k per query head (§6).
    pub k: usize,
    /// `r` of the `double_sparsity` calibration (the one `r` every `double_sparsity` arm uses).
    pub double_sparsity_r: usize,
    pub arms: Vec<Arm>,
    /// Worker threads (at least 1).
    pub threads: usize,
}

/// One arm's figures, averaged over (layer, KV head, position) steps and, for error and recall,
/// over the query heads of each step.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ArmSummary {
    pub label: String,
    pub method: String,
    pub basis: String,
    /// Mean bits per token of the scan (a plan's own cost; `None` for dense).
    pub bits_per_token: Option<f64>,
    /// Mean plane + scale bytes per step per query group (landmark: its means).
    pub scan_bytes: f64,
    /// Mean bf16 K/V winner-row bytes per step per query group.
    pub row_bytes: f64,
    /// Mean relative attention-output error against dense (§9).
    pub error: f64,
    /// Mean recall@k against the oracle's top-k (`None` for dense, which has no scores).
    pub recall: Option<f64>,
    /// Mean error per evaluated layer, in [`FidelityReport::layers`] order.
    pub error_per_layer: Vec<f64>,
    /// Steps averaged.
    pub steps: usize,
}

/// Everything measured.
#[derive(Clone, Debug, Serialize)]
pub struct FidelityReport {
    pub layers: Vec<usize>,
    pub kv_heads: Vec<usize>,
    /// Evaluated token positions.
    pub positions: Vec<usize>,
    pub split: Split,
    pub k: usize,
    pub arms: Vec<ArmSummary>,
}

impl FidelityReport {
    /// The summary of the arm labelled `label`.
    pub fn arm(&self, label: &str) -> Option<&ArmSummary> {
        self.arms.iter().find(|a| a.label == label)
    }
}

/// Calibration and base stores of one (layer, KV head).
struct HeadContext<'a> {
    layer: &'a LayerActivations,
    layer_index: usize,
    kv_head: usize,
    klt: Klt,
    rotated_keys: Vec<bf16>,
    sigma2: [Vec<f64>; 2],
    double_sparsity: [DoubleSparsityCalibration; 2],
    /// Stores of the first `base_tokens` tokens, raw and rotated; a position appends the rest.
    base: [HeadStore; 2],
    base_tokens: usize,
}

fn basis_index(basis: Basis) -> usize {
    match basis {
        Basis::Raw => 0,
        Basis::Klt => 1,
    }
}

fn rows_f64(keys: &[bf16], d: usize, tokens: usize) -> Vec<Vec<f64>> {
    keys[..tokens * d]
        .chunks_exact(d)
        .map(|row| row.iter().map(|x| x.to_f64()).collect())
        .collect()
}

impl<'a> HeadContext<'a> {
    fn new(
        layer: &'a LayerActivations,
        layer_index: usize,
        kv_head: usize,
        config: &FidelityConfig,
    ) -> Result<Self, FidelityError> {
        let d = layer.head_dim;
        let split = &config.split;
        let calibration = |source| FidelityError::Calibration {
            layer: layer.layer,
            kv_head,
            source,
        };
        let keys = &layer.keys[kv_head];
        let cal_keys = rows_f64(keys, d, split.calibration_keys);
        let cal_queries: Vec<Vec<f64>> = split
            .calibration_queries
            .clone()
            .flat_map(|i| layer.group_queries(kv_head, i))
            .collect();
        let klt = Klt::fit(&cal_keys, &cal_queries).map_err(calibration)?;
        let rotate = |x: &Vec<f64>| klt.rotate(x).map_err(calibration);
        let cal_keys_klt = cal_keys.iter().map(rotate).collect::<Result<Vec<_>, _>>()?;
        let cal_queries_klt = cal_queries
            .iter()
            .map(rotate)
            .collect::<Result<Vec<_>, _>>()?;
        // The rotated store encodes bf16 rows, as the kernels' encoder would receive them.
        let mut rotated_keys = Vec::with_capacity(keys.len());
        for row in rows_f64(keys, d, layer.tokens) {
            rotated_keys.extend(rotate(&row)?.into_iter().map(bf16::from_f64));
        }
        let fit_ds = |q: &[Vec<f64>], k: &[Vec<f64>]| {
            DoubleSparsityCalibration::fit(q, k, config.double_sparsity_r).map_err(calibration)
        };
        let double_sparsity = [
            fit_ds(&cal_queries, &cal_keys)?,
            fit_ds(&cal_queries_klt, &cal_keys_klt)?,
        ];
        let sigma2 = [
            channel_variance(&cal_keys).map_err(calibration)?,
            channel_variance(&cal_keys_klt).map_err(calibration)?,
        ];
        let first = split.evaluated.iter().min().ok_or(FidelityError::Empty)?;
        let block = BlockSize::B64.tokens();
        let base_tokens = (layer.query_position(*first) + 1) / block * block;
        let layout = StoreLayout::new(d, BlockSize::B64, SEGMENT_WORDS)
            .expect("a captured head dim is a valid layout");
        let id = HeadId {
            layer: layer.layer,
            kv_head,
        };
        let base = [
            HeadStore::from_keys(layout, id, &keys[..base_tokens * d])?,
            HeadStore::from_keys(layout, id, &rotated_keys[..base_tokens * d])?,
        ];
        Ok(HeadContext {
            layer,
            layer_index,
            kv_head,
            klt,
            rotated_keys,
            sigma2,
            double_sparsity,
            base,
            base_tokens,
        })
    }
}

/// One arm's figures at one step.
#[derive(Clone, Copy, Debug)]
struct Sample {
    bits: Option<f64>,
    scan_bytes: usize,
    row_bytes: usize,
    error: f64,
    recall: Option<f64>,
}

/// Runs every arm at captured query `index` of one head.
fn evaluate_position(
    head: &HeadContext<'_>,
    index: usize,
    config: &FidelityConfig,
) -> Result<Vec<Sample>, FidelityError> {
    let layer = head.layer;
    let d = layer.head_dim;
    let position = layer.query_position(index);
    let n = position + 1;
    let keys = &layer.keys[head.kv_head][..n * d];
    let values = &layer.values[head.kv_head][..n * d];
    let queries = layer.group_queries(head.kv_head, index);
    let mut stores = head.base.clone();
    stores[0].append(&keys[head.base_tokens * d..])?;
    stores[1].append(&head.rotated_keys[head.base_tokens * d..n * d])?;
    let run = |arm: &Arm| -> Result<GroupStep, FidelityError> {
        let b = basis_index(arm.basis);
        let input = GroupInput {
            store: &stores[b],
            keys,
            values,
            queries: &queries,
            klt: (arm.basis == Basis::Klt).then_some(&head.klt),
            sigma2: Some(&head.sigma2[b]),
            double_sparsity: Some(&head.double_sparsity[b]),
        };
        let step_config = StepConfig {
            method: arm.method,
            k: config.k,
            scale: layer.scale,
        };
        step_group(&input, &step_config).map_err(|source| FidelityError::Step {
            layer: layer.layer,
            kv_head: head.kv_head,
            position,
            arm: arm.label(),
            source,
        })
    };
    let raw = |method| Arm {
        method,
        basis: Basis::Raw,
    };
    let dense = run(&raw(Method::Dense))?;
    let oracle = run(&raw(Method::Oracle))?;
    let g = queries.len() as f64;
    let candidates = SINK..n.saturating_sub(LOCAL).max(SINK);
    config
        .arms
        .iter()
        .map(|arm| {
            let step = match arm.method {
                Method::Dense => dense.clone(),
                Method::Oracle => oracle.clone(),
                _ => run(arm)?,
            };
            let error = step
                .outputs
                .iter()
                .zip(&dense.outputs)
                .map(|(o, o_dense)| fidelity(o, o_dense))
                .sum::<f64>()
                / g;
            let recall = (!step.scores.is_empty()).then(|| {
                step.scores
                    .iter()
                    .zip(&oracle.scores)
                    .map(|(s, truth)| {
                        let (s, truth) = (&s[candidates.clone()], &truth[candidates.clone()]);
                        recall_at_k(s, truth, config.k)
                    })
                    .sum::<f64>()
                    / g
            });
            Ok(Sample {
                bits: step.plan.bits_per_token(d),
                scan_bytes: step.bytes.planes + step.bytes.scales,
                row_bytes: step.bytes.rows,
                error,
                recall,
            })
        })
        .collect()
}

/// Measures every arm of `config` on the given layers and KV heads (every KV head when
/// `kv_heads` is `None`).
pub fn evaluate(
    layers: &[LayerActivations],
    kv_heads: Option<&[usize]>,
    config: &FidelityConfig,
) -> Result<FidelityReport, FidelityError> {
    let first = layers.first().ok_or(FidelityError::Empty)?;
    for arm in &config.arms {
        let plane_free = matches!(
            arm.method,
            Method::Landmark | Method::Oracle | Method::Dense
        );
        if arm.basis == Basis::Klt && plane_free {
            return Err(FidelityError::Arm {
                arm: arm.label(),
                basis: arm.basis,
                reason: "reads no store; run it on the raw basis",
            });
        }
        if arm.basis == Basis::Raw && matches!(arm.method, Method::Loki { .. }) {
            return Err(FidelityError::Arm {
                arm: arm.label(),
                basis: arm.basis,
                reason: "loki reads the leading KLT coordinates; run it on the klt basis",
            });
        }
        if let Method::DoubleSparsity { r } = arm.method {
            if r != config.double_sparsity_r {
                return Err(FidelityError::Arm {
                    arm: arm.label(),
                    basis: arm.basis,
                    reason: "its r differs from the calibrated double_sparsity_r",
                });
            }
        }
    }
    let heads: Vec<usize> = match kv_heads {
        Some(h) => h.to_vec(),
        None => (0..first.keys.len()).collect(),
    };
    if heads.is_empty() {
        return Err(FidelityError::Empty);
    }
    for layer in layers {
        config.split.check(layer)?;
        if let Some(&h) = heads.iter().find(|&&h| h >= layer.keys.len()) {
            return Err(FidelityError::Split(format!(
                "KV head {h} does not exist; layer {} has {}",
                layer.layer,
                layer.keys.len()
            )));
        }
    }
    let pairs: Vec<(usize, usize)> = (0..layers.len())
        .flat_map(|l| heads.iter().map(move |&h| (l, h)))
        .collect();
    let contexts = parallel_map(&pairs, config.threads, |&(l, h)| {
        HeadContext::new(&layers[l], l, h, config)
    })
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    let items: Vec<(usize, usize)> = (0..contexts.len())
        .flat_map(|c| config.split.evaluated.iter().map(move |&i| (c, i)))
        .collect();
    let samples = parallel_map(&items, config.threads, |&(c, i)| {
        evaluate_position(&contexts[c], i, config)
    })
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    let arms = config
        .arms
        .iter()
        .enumerate()
        .map(|(a, arm)| {
            let all: Vec<(usize, Sample)> = items
                .iter()
                .zip(&samples)
                .map(|(&(c, _), s)| (contexts[c].layer_index, s[a]))
                .collect();
            summarise(arm, &all, layers.len())
        })
        .collect();
    Ok(FidelityReport {
        layers: layers.iter().map(|l| l.layer).collect(),
        kv_heads: heads,
        positions: config
            .split
            .evaluated
            .iter()
            .map(|&i| first.query_position(i))
            .collect(),
        split: config.split.clone(),
        k: config.k,
        arms,
    })
}

fn summarise(arm: &Arm, samples: &[(usize, Sample)], layers: usize) -> ArmSummary {
    let mean = |f: &dyn Fn(&Sample) -> f64| {
        samples.iter().map(|(_, s)| f(s)).sum::<f64>() / samples.len() as f64
    };
    let optional_mean = |f: &dyn Fn(&Sample) -> Option<f64>| {
        samples
            .iter()
            .map(|(_, s)| f(s))
            .collect::<Option<Vec<f64>>>()
            .map(|v| v.iter().sum::<f64>() / v.len() as f64)
    };
    let error_per_layer = (0..layers)
        .map(|l| {
            let errors: Vec<f64> = samples
                .iter()
                .filter(|(layer, _)| *layer == l)
                .map(|(_, s)| s.error)
                .collect();
            errors.iter().sum::<f64>() / errors.len() as f64
        })
        .collect();
    ArmSummary {
        label: arm.label(),
        method: arm.method.to_string(),
        basis: format!("{:?}", arm.basis).to_lowercase(),
        bits_per_token: optional_mean(&|s| s.bits),
        scan_bytes: mean(&|s| s.scan_bytes as f64),
        row_bytes: mean(&|s| s.row_bytes as f64),
        error: mean(&|s| s.error),
        recall: optional_mean(&|s| s.recall),
        error_per_layer,
        steps: samples.len(),
    }
}

/// Where a fathom curve meets a target error.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reach {
    /// The smallest measured budget already reaches it: the budget given is an upper bound.
    AtMost,
    /// Interpolated between two measured budgets.
    Interpolated,
    /// No measured budget reaches it.
    NotReached,
}

/// The smallest fathom budget at a target error, and what it reads.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct EqualError {
    pub reach: Reach,
    /// Bits per token (`None` when not reached).
    pub budget: Option<f64>,
    /// Mean scan bytes (planes + scales) per step at that budget.
    pub scan_bytes: Option<f64>,
    /// Mean scan plus winner-row bytes per step at that budget.
    pub total_bytes: Option<f64>,
}

/// The smallest budget of a fathom `curve` (pairs of nominal budget `B` and its summary, budgets
/// increasing) whose mean error is at most `target`, interpolating error and bytes linearly in
/// the budget between measured budgets.
pub fn equal_error(curve: &[(f64, &ArmSummary)], target: f64) -> EqualError {
    let Some(hit) = curve.iter().position(|(_, s)| s.error <= target) else {
        return EqualError {
            reach: Reach::NotReached,
            budget: None,
            scan_bytes: None,
            total_bytes: None,
        };
    };
    if hit == 0 {
        let (b, s) = curve[0];
        return EqualError {
            reach: Reach::AtMost,
            budget: Some(b),
            scan_bytes: Some(s.scan_bytes),
            total_bytes: Some(s.scan_bytes + s.row_bytes),
        };
    }
    let ((b_lo, lo), (b_hi, hi)) = (curve[hit - 1], curve[hit]);
    // lo.error > target >= hi.error, so the fraction lies in (0, 1].
    let f = (lo.error - target) / (lo.error - hi.error);
    let lerp = |a: f64, b: f64| a + f * (b - a);
    EqualError {
        reach: Reach::Interpolated,
        budget: Some(lerp(b_lo, b_hi)),
        scan_bytes: Some(lerp(lo.scan_bytes, hi.scan_bytes)),
        total_bytes: Some(lerp(
            lo.scan_bytes + lo.row_bytes,
            hi.scan_bytes + hi.row_bytes,
        )),
    }
}

#[cfg(test)]
mod tests;
