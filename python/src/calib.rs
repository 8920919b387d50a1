//! `Calibration.fit`, `.save` and `.load`: σ² per channel (§3), the KLT basis (§5),
//! double_sparsity's fixed channels (§4) and optional per-layer budgets (§3), fitted with the
//! reference's own functions on a prefill's keys and queries; files are safetensors.

use std::collections::HashMap;
use std::path::Path;

use codegen::model::{Basis, ModelShape};
use reference::klt::Klt;
use reference::planner::{per_layer_budgets, water_fill, LayerBudgetSearch};
use reference::plans::{channel_variance, DoubleSparsityCalibration};
use reference::store::BlockSize;
use runtime::step::Calibration;
use safetensors::tensor::{Dtype as StDtype, TensorView};
use safetensors::SafeTensors;

use crate::error::{Failure, Kind, Outcome};

/// A calibration and what the step API's [`Calibration`] does not hold.
#[derive(Clone, Debug)]
pub struct Fitted {
    pub calibration: Calibration,
    /// Per-layer budgets `B_l` and their mean, when fitted.
    pub budgets: Option<(f64, Vec<u32>)>,
}

/// One head's store-basis query groups (per position, `G` rows) and σ².
type HeadGroups = (Vec<Vec<Vec<f64>>>, Vec<f64>);

fn bad(message: impl Into<String>) -> Failure {
    Failure::new(Kind::Calibration, message)
}

/// Rows of `D` values: `data` is `[H][n][D]`, head `h`'s rows.
fn head_rows(data: &[f64], n: usize, d: usize, h: usize) -> Vec<Vec<f64>> {
    (0..n)
        .map(|t| data[(h * n + t) * d..(h * n + t + 1) * d].to_vec())
        .collect()
}

/// The relative expected squared score error of fathom at `budget` bits over query groups
/// `groups` (store basis) with `sigma2`: `Σ_c w_c 4^(-t_c) / Σ_c w_c`, the error model the
/// water-filling of §3 minimises (each plane divides the quantisation error by four; an unread
/// channel errs by all of `w_c`).
fn plan_error(groups: &[Vec<Vec<f64>>], sigma2: &[f64], budget: u32) -> f64 {
    let mut total = 0.0;
    for group in groups {
        let w: Vec<f64> = (0..sigma2.len())
            .map(|c| sigma2[c] * group.iter().map(|q| q[c] * q[c]).sum::<f64>())
            .collect();
        let all: f64 = w.iter().sum();
        if all <= 0.0 {
            continue;
        }
        let Ok(plan) = water_fill(group, sigma2, f64::from(budget), BlockSize::B64) else {
            return f64::INFINITY;
        };
        let err: f64 = w
            .iter()
            .zip(&plan.depths)
            .map(|(w, &t)| w * 4f64.powi(-i32::from(t)))
            .sum();
        total += err / all;
    }
    total / groups.len().max(1) as f64
}

/// Fits every part from per-layer keys `[H_kv][n][D]` and queries `[H_q][m][D]`.
pub fn fit(
    model: &ModelShape,
    keys: &[(Vec<f64>, usize)],
    queries: &[(Vec<f64>, usize)],
    r: usize,
    budget: Option<f64>,
) -> Outcome<Fitted> {
    let (layers, h, g, d) = (
        model.layers,
        model.kv_heads,
        model.group_size(),
        model.head_dim,
    );
    if keys.len() != layers || queries.len() != layers {
        return Err(bad(format!(
            "calibration needs keys and queries of every one of the {layers} layers; got {} and {}",
            keys.len(),
            queries.len()
        )));
    }
    let mut sigma2 = Vec::with_capacity(layers * h * d);
    let mut masks = Vec::with_capacity(layers * h * d);
    let mut rotation = Vec::new();
    // Per layer, the store-basis query groups and σ² of every head (for the budgets).
    let mut per_layer: Vec<Vec<HeadGroups>> = Vec::new();
    for layer in 0..layers {
        let (k, n) = (&keys[layer].0, keys[layer].1);
        let (q, m) = (&queries[layer].0, queries[layer].1);
        if n < 2 || m < 1 {
            return Err(bad(format!(
                "layer {layer}: calibration needs at least 2 keys and 1 query position; got {n} and {m}"
            )));
        }
        let mut heads = Vec::with_capacity(h);
        for head in 0..h {
            let mut cal_keys = head_rows(k, n, d, head);
            let mut cal_queries: Vec<Vec<f64>> = (0..g)
                .flat_map(|j| head_rows(q, m, d, head * g + j))
                .collect();
            if model.basis == Basis::Klt {
                let klt = Klt::fit(&cal_keys, &cal_queries).map_err(|e| bad(e.to_string()))?;
                let rot = |rows: &[Vec<f64>]| -> Outcome<Vec<Vec<f64>>> {
                    rows.iter()
                        .map(|x| klt.rotate(x).map_err(|e| bad(e.to_string())))
                        .collect()
                };
                cal_keys = rot(&cal_keys)?;
                cal_queries = rot(&cal_queries)?;
                rotation.extend(klt.basis_row_major().iter().map(|&x| x as f32));
            }
            let s2 = channel_variance(&cal_keys).map_err(|e| bad(e.to_string()))?;
            let ds = DoubleSparsityCalibration::fit(&cal_queries, &cal_keys, r.clamp(1, d))
                .map_err(|e| bad(e.to_string()))?;
            sigma2.extend(s2.iter().map(|&x| x as f32));
            masks.extend(ds.mask());
            // Query groups at each position: the G heads' queries at position t.
            let groups: Vec<Vec<Vec<f64>>> = (0..m)
                .map(|t| (0..g).map(|j| cal_queries[j * m + t].clone()).collect())
                .collect();
            heads.push((groups, s2));
        }
        per_layer.push(heads);
    }
    let invalid = |e: runtime::step::CalibrationError| bad(e.to_string());
    let mut calibration = Calibration::new(layers, h, d)
        .with_sigma2(sigma2)
        .map_err(invalid)?
        .with_double_sparsity(r.clamp(1, d), masks)
        .map_err(invalid)?;
    if model.basis == Basis::Klt {
        calibration = calibration.with_rotation(rotation).map_err(invalid)?;
    }
    let budgets = match budget {
        None => None,
        Some(mean) => {
            let target = mean.round();
            if !(target >= 4.0 && target <= 4.25 * d as f64) {
                return Err(bad(format!(
                    "budgets={mean}: a mean budget is 4 to {} bits per token",
                    4.25 * d as f64
                )));
            }
            let target = target as u32;
            let search = LayerBudgetSearch {
                layers,
                target_mean: target,
                step: (target / 12).max(1),
                min: (target / 2).max(2),
                max: (target * 2).min((4.25 * d as f64) as u32),
            };
            let mut memo: HashMap<(usize, u32), f64> = HashMap::new();
            let found = per_layer_budgets(&search, |l, b| {
                *memo.entry((l, b)).or_insert_with(|| {
                    per_layer[l]
                        .iter()
                        .map(|(groups, s2)| plan_error(groups, s2, b))
                        .sum::<f64>()
                })
            })
            .map_err(|e| bad(e.to_string()))?;
            Some((f64::from(target), found))
        }
    };
    Ok(Fitted {
        calibration,
        budgets,
    })
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Writes `fitted` for `model` to `path` (safetensors; written to a temporary file, then
/// renamed, so a failed save leaves no half file).
pub fn save(model: &str, fitted: &Fitted, path: &Path) -> Outcome<()> {
    let c = &fitted.calibration;
    let (layers, h, d) = c.dims();
    let io =
        |e: std::io::Error| Failure::new(Kind::InvalidInput, format!("{}: {e}", path.display()));
    let mut metadata = HashMap::from([
        ("format".to_string(), "fathom-calibration".to_string()),
        ("version".to_string(), "1".to_string()),
        ("model".to_string(), model.to_string()),
        ("layers".to_string(), layers.to_string()),
        ("kv_heads".to_string(), h.to_string()),
        ("head_dim".to_string(), d.to_string()),
    ]);
    let all = |get: &dyn Fn(usize) -> Option<Vec<u8>>| -> Option<Vec<u8>> {
        (0..layers)
            .map(get)
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat())
    };
    let sigma2 = all(&|l| c.sigma2(l).map(f32_bytes));
    let rotation = all(&|l| c.rotation(l).map(f32_bytes));
    let masks = all(&|l| c.double_sparsity(l).map(|(_, m)| m.to_vec()));
    if let Some((r, _)) = c.double_sparsity(0) {
        metadata.insert("double_sparsity_r".into(), r.to_string());
    }
    let budgets = fitted.budgets.as_ref().map(|(mean, b)| {
        metadata.insert("budget_mean".into(), mean.to_string());
        b.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()
    });
    let mut views = Vec::new();
    let err = |e: safetensors::SafeTensorError| Failure::new(Kind::Kernel, e.to_string());
    if let Some(b) = &sigma2 {
        views.push((
            "sigma2",
            TensorView::new(StDtype::F32, vec![layers, h, d], b).map_err(err)?,
        ));
    }
    if let Some(b) = &masks {
        views.push((
            "double_sparsity_masks",
            TensorView::new(StDtype::U8, vec![layers, h, d], b).map_err(err)?,
        ));
    }
    if let Some(b) = &rotation {
        views.push((
            "rotation",
            TensorView::new(StDtype::F32, vec![layers, h, d, d], b).map_err(err)?,
        ));
    }
    if let Some(b) = &budgets {
        views.push((
            "budgets",
            TensorView::new(StDtype::U32, vec![layers], b).map_err(err)?,
        ));
    }
    let bytes = safetensors::serialize(views, &Some(metadata)).map_err(err)?;
    let tmp = path.with_extension("tmp-fathom");
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// Reads a file [`save`] wrote.
pub fn load(path: &Path) -> Outcome<(String, Fitted)> {
    let bytes = std::fs::read(path)
        .map_err(|e| Failure::new(Kind::InvalidInput, format!("{}: {e}", path.display())))?;
    let not_ours = |why: String| {
        bad(format!(
            "{} is not a fathom calibration file: {why}",
            path.display()
        ))
    };
    let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| not_ours(e.to_string()))?;
    let meta: HashMap<String, String> = meta.metadata().clone().unwrap_or_default();
    if meta.get("format").map(String::as_str) != Some("fathom-calibration") {
        return Err(not_ours(
            "no format=fathom-calibration in its metadata".into(),
        ));
    }
    let num = |key: &str| -> Outcome<usize> {
        meta.get(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| not_ours(format!("metadata {key} missing")))
    };
    let (layers, h, d) = (num("layers")?, num("kv_heads")?, num("head_dim")?);
    let tensors = SafeTensors::deserialize(&bytes).map_err(|e| not_ours(e.to_string()))?;
    let f32s = |name: &str| -> Option<Vec<f32>> {
        tensors.tensor(name).ok().map(|t| {
            t.data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    };
    let invalid = |e: runtime::step::CalibrationError| bad(e.to_string());
    let mut calibration = Calibration::new(layers, h, d);
    if let Some(s) = f32s("sigma2") {
        calibration = calibration.with_sigma2(s).map_err(invalid)?;
    }
    if let Ok(t) = tensors.tensor("double_sparsity_masks") {
        calibration = calibration
            .with_double_sparsity(num("double_sparsity_r")?, t.data().to_vec())
            .map_err(invalid)?;
    }
    if let Some(r) = f32s("rotation") {
        calibration = calibration.with_rotation(r).map_err(invalid)?;
    }
    let budgets = match tensors.tensor("budgets") {
        Ok(t) => {
            let mean: f64 = meta
                .get("budget_mean")
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| not_ours("metadata budget_mean missing".into()))?;
            let b = t
                .data()
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            Some((mean, b))
        }
        Err(_) => None,
    };
    let name = meta.get("model").cloned().unwrap_or_default();
    Ok((
        name,
        Fitted {
            calibration,
            budgets,
        },
    ))
}
