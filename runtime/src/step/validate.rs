//! Checks of a step's inputs that need no GPU: the view against the model, the queries'
//! shape (and values, when they come from the host), and what the method needs from
//! calibration.

use codegen::model::{Basis, ModelShape};
use codegen::spec::{KvRows, Placement, PlanMethod};

use super::calibration::Calibration;
use super::request::Scoring;
use super::StepError;
use crate::view::LayerView;

/// The sizes of a [`LayerView`], as the checks read them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViewShape {
    pub layer: usize,
    pub batch: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub placement: Placement,
    pub max_seg: usize,
    pub max_tokens: usize,
    pub seg_words_len: usize,
    pub seg_scales_len: usize,
    pub n_stored_len: usize,
    pub n_total_len: usize,
    pub k_rows_len: usize,
    pub v_rows_len: usize,
    /// How the K/V rows are laid out.
    pub kv_rows: KvRows,
    /// Entries of the landmark table, when the view has one.
    pub landmarks_len: Option<usize>,
    /// Entries of the shortest ParisKV index table, when the view has the index.
    pub pariskv_len: Option<usize>,
}

impl ViewShape {
    /// The sizes of `view`.
    pub fn of(view: &LayerView<'_>) -> Self {
        ViewShape {
            layer: view.layer,
            batch: view.batch,
            kv_heads: view.kv_heads,
            head_dim: view.head_dim,
            placement: view.placement,
            max_seg: view.max_seg,
            max_tokens: view.max_tokens,
            seg_words_len: view.seg_words.len(),
            seg_scales_len: view.seg_scales.len(),
            n_stored_len: view.n_stored.len(),
            n_total_len: view.n_total.len(),
            k_rows_len: view.k_rows.len(),
            v_rows_len: view.v_rows.len(),
            kv_rows: view.kv_rows,
            landmarks_len: view.landmarks.map(|l| l.len()),
            pariskv_len: view.pariskv.map(|p| p.len()),
        }
    }
}

/// The view must be of a layer of `model`, with its head shape, a nonempty batch and tables
/// of the sizes `templates/ABI.md` gives.
pub fn check_view(model: &ModelShape, v: &ViewShape) -> Result<(), StepError> {
    if v.layer >= model.layers {
        return Err(StepError::Layer {
            layer: v.layer,
            layers: model.layers,
        });
    }
    if v.batch == 0 {
        return Err(StepError::EmptyBatch);
    }
    let field = |field: &'static str, got: usize, want: usize| {
        if got == want {
            Ok(())
        } else {
            Err(StepError::ViewShape {
                field,
                got,
                want: want.to_string(),
            })
        }
    };
    field("head_dim", v.head_dim, model.head_dim)?;
    field("kv_heads", v.kv_heads, model.kv_heads)?;
    // Tables may have room for more than this batch (a store sizes them once, for its largest
    // batch): the kernels only index the first entries.
    let room = |field: &'static str, got: usize, want: usize| {
        if got >= want {
            Ok(())
        } else {
            Err(StepError::ViewShape {
                field,
                got,
                want: format!("at least {want}"),
            })
        }
    };
    if v.max_seg == 0 {
        return Err(StepError::ViewShape {
            field: "max_seg",
            got: 0,
            want: "at least 1 segment per (sequence, head)".into(),
        });
    }
    let heads = v.batch * v.kv_heads;
    room(
        "seg_words length (B*H*max_seg)",
        v.seg_words_len,
        heads * v.max_seg,
    )?;
    room(
        "seg_scales length (B*H*max_seg)",
        v.seg_scales_len,
        heads * v.max_seg,
    )?;
    room("n_stored length (B)", v.n_stored_len, v.batch)?;
    room("n_total length (B)", v.n_total_len, v.batch)?;
    room("k_rows length (B*H)", v.k_rows_len, heads)?;
    room("v_rows length (B*H)", v.v_rows_len, heads)?;
    if let Some(len) = v.landmarks_len {
        room("landmarks length (B*H)", len, heads)?;
    }
    if let Some(len) = v.pariskv_len {
        room("ParisKV index tables length (B*H)", len, heads)?;
    }
    // Scores, selections and kernel arguments index tokens with 32-bit ints.
    if v.max_tokens > i32::MAX as usize / 2 {
        return Err(StepError::ViewShape {
            field: "max_tokens",
            got: v.max_tokens,
            want: format!("at most {}", i32::MAX / 2),
        });
    }
    Ok(())
}

/// Elements of the queries of a step over `v`: `[B][H][G][D]`.
pub fn query_len(v: &ViewShape, group: usize) -> usize {
    v.batch * v.kv_heads * group * v.head_dim
}

/// The queries buffer must hold exactly `[B][H][G][D]` floats.
pub fn check_query_len(v: &ViewShape, group: usize, got: usize) -> Result<(), StepError> {
    let want = query_len(v, group);
    if got == want {
        return Ok(());
    }
    Err(StepError::QueryShape {
        got,
        want,
        batch: v.batch,
        kv_heads: v.kv_heads,
        group,
        head_dim: v.head_dim,
    })
}

/// Host queries: the shape, and every value finite (the selection kernels need NaN-free
/// scores).
pub fn check_host_queries(v: &ViewShape, group: usize, queries: &[f32]) -> Result<(), StepError> {
    check_query_len(v, group, queries.len())?;
    if let Some(i) = queries.iter().position(|x| !x.is_finite()) {
        let per_sequence = v.kv_heads * group * v.head_dim;
        return Err(StepError::NonFiniteQuery {
            sequence: i / per_sequence,
            query_head: i % per_sequence / v.head_dim,
            channel: i % v.head_dim,
            value: queries[i],
        });
    }
    Ok(())
}

/// What the method needs beyond the view: the KLT rotation of a rotated store, the fixed
/// channels of `double_sparsity` (with the same `r`), `σ²` for `fathom` (given with the
/// request, `[B][H][D]`, or calibrated), the landmark means for `landmark`, and the ParisKV
/// index for `pariskv`.
pub fn check_needs(
    scoring: &Scoring,
    method_name: &str,
    basis: Basis,
    v: &ViewShape,
    calibration: Option<&Calibration>,
    sigma2_len: Option<usize>,
) -> Result<(), StepError> {
    let missing = |what| StepError::MissingCalibration {
        method: method_name.to_string(),
        what,
        layer: v.layer,
    };
    match *scoring {
        Scoring::Planes {
            method, fixed_r, ..
        } => {
            if basis == Basis::Klt && calibration.and_then(|c| c.rotation(v.layer)).is_none() {
                return Err(missing("the KLT rotation of the rotated store"));
            }
            if let Some(r) = fixed_r {
                let (fitted, _) = calibration
                    .and_then(|c| c.double_sparsity(v.layer))
                    .ok_or_else(|| missing("double_sparsity's fixed channels"))?;
                if fitted != r {
                    return Err(StepError::CalibrationMismatch { r, fitted });
                }
            }
            if method == PlanMethod::Fathom {
                match sigma2_len {
                    Some(got) => {
                        let want = v.batch * v.kv_heads * v.head_dim;
                        if got != want {
                            return Err(StepError::Sigma2Shape { got, want });
                        }
                    }
                    None if calibration.and_then(|c| c.sigma2(v.layer)).is_some() => {}
                    None => {
                        return Err(missing(
                            "σ² (or pass the uncalibrated stand-in, the mean over stored blocks \
                             of Δ², as StepRequest::sigma2)",
                        ))
                    }
                }
            }
            Ok(())
        }
        Scoring::Landmark if v.landmarks_len.is_none() => Err(StepError::MissingLandmarks),
        Scoring::Pariskv { .. } if v.pariskv_len.is_none() => Err(StepError::MissingPariskvIndex),
        _ => Ok(()),
    }
}
