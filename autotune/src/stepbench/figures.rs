//! The per-cell figures computed on the host: medians, floors, the ratio to sparq(32), bytes
//! per step, and fidelity/recall of a sampled step against the f64 reference.

use reference::metrics::{bytes_per_step, landmark_bytes_per_step, winner_row_bytes, StepBytes};
use reference::pariskv::{candidate_count, padded_dim, subspaces, CENTROIDS, HISTOGRAM_BIN_BYTES};
use reference::plans::Method;
use reference::select::{paper_k, LOCAL, SINK};
use reference::store::BlockSize;

use super::record::Row;

/// The median of `values` (the upper one of an even count); `None` when empty or not finite.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() || v.len() != values.len() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// Milliseconds to move `bytes` at `gbps` (10^9 bytes per second).
pub fn floor_ms(bytes: u64, gbps: f64) -> Option<f64> {
    (gbps > 0.0 && gbps.is_finite()).then(|| bytes as f64 / (gbps * 1e9) * 1e3)
}

/// The label sparq(32) rows carry.
pub const SPARQ32: &str = "sparq(32)";

/// Fills `ratio_to_sparq32` of every row that ran: sparq(32)'s `gpu_ms` of the same context,
/// batch and placement over the row's.
pub fn fill_ratios(rows: &mut [Row]) {
    let base: Vec<((usize, usize, String), f64)> = rows
        .iter()
        .filter(|r| r.method == SPARQ32)
        .filter_map(|r| Some(((r.context, r.batch, r.placement.clone()), r.gpu_ms?)))
        .collect();
    for row in rows.iter_mut() {
        let key = (row.context, row.batch, row.placement.clone());
        row.ratio_to_sparq32 = base
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, s)| Some(s / row.gpu_ms.filter(|&g| g > 0.0)?));
    }
}

/// How many timed steps a cell takes: `requested`, unless one step (as long as `step_s`)
/// would make them exceed `budget_s`; then as many as fit, but at least `min`.
/// Whether `--cell-seconds` may cut a cell of `method` short: only the reference baselines
/// (`oracle` and `dense`, which read every key or row, seconds per step at 1M from host
/// memory). Every compared method is always timed over all `--steps` steps, as §9 asks.
pub fn time_capped(method: Method) -> bool {
    matches!(method, Method::Oracle | Method::Dense)
}

pub fn steps_within(requested: usize, step_s: f64, budget_s: f64, min: usize) -> usize {
    if step_s.is_nan() || step_s <= 0.0 || step_s * requested as f64 <= budget_s {
        return requested;
    }
    ((budget_s / step_s).floor() as usize).clamp(min.min(requested), requested)
}

/// Bytes one query group (KV head) of one layer reads in a step of `method` over `n` stored
/// tokens of `d` channels, with `union_rows` winner rows fetched. `depths` is the depth plan
/// (plane methods only).
pub fn group_bytes(
    method: Method,
    depths: Option<&[u8]>,
    n: usize,
    d: usize,
    block: BlockSize,
    union_rows: usize,
) -> StepBytes {
    match (method, depths) {
        (Method::Landmark, _) => landmark_bytes_per_step(n, d, union_rows),
        // Exact scores read every bf16 K row.
        (Method::Oracle, _) => StepBytes {
            planes: n * d * 2,
            scales: 0,
            rows: winner_row_bytes(union_rows, d),
        },
        // Attention reads every K and V row.
        (Method::Dense, _) => StepBytes {
            planes: 0,
            scales: 0,
            rows: winner_row_bytes(n, d),
        },
        (Method::Pariskv { .. }, _) => StepBytes {
            planes: pariskv_index_bytes(n, d),
            scales: 0,
            rows: winner_row_bytes(union_rows, d),
        },
        (_, Some(depths)) => bytes_per_step(depths, n, block, union_rows),
        (_, None) => StepBytes {
            planes: 0,
            scales: 0,
            rows: winner_row_bytes(union_rows, d),
        },
    }
}

/// Index bytes one query group of `pariskv(k)` reads over `n` tokens of `d` channels (§12, as
/// `reference::pariskv::PariskvBytes` counts them; reported in the `planes` share of
/// [`StepBytes`]): the centroid ids of every retrievable token (`N_r * B`, to vote), the codes
/// and weights of the `C` candidates (`C * (D_pad/2 + 2B)`, to rerank) and the histograms
/// (`B * 256 * 4`, to build the tiers).
pub fn pariskv_index_bytes(n: usize, d: usize) -> usize {
    let b = subspaces(d);
    let n_r = n.saturating_sub(LOCAL).saturating_sub(SINK);
    n_r * b
        + candidate_count(n_r) * (padded_dim(d) / 2 + 2 * b)
        + b * CENTROIDS * HISTOGRAM_BIN_BYTES
}

/// The `k` a row's recall@k is measured at: the `k` the method selects. `pariskv(k)` carries
/// its own `k`; every other method (and the oracle truth) selects `paper_k(n)` per query head.
/// `None` for dense, which selects every token.
pub fn recall_k(method: Method, n: usize) -> Option<usize> {
    match method {
        Method::Dense => None,
        Method::Pariskv { k } => Some(k),
        _ => Some(paper_k(n)),
    }
}

/// recall@k of a selection: the share of `truth` (the exact top-k of the candidates) that
/// `selected` holds; `None` when there is no truth to find.
pub fn recall(selected: &[i32], truth: &[usize]) -> Option<f64> {
    if truth.is_empty() {
        return None;
    }
    let mut sel: Vec<i64> = selected.iter().map(|&i| i64::from(i)).collect();
    sel.sort_unstable();
    let hits = truth
        .iter()
        .filter(|&&t| sel.binary_search(&(t as i64)).is_ok())
        .count();
    Some(hits as f64 / truth.len() as f64)
}

/// The parts of a cell's HBM footprint: the store's share of one sequence times `batch`, then
/// the workspace's (one step of the batch, reused by every layer).
pub fn footprint_parts(
    store: [(&'static str, usize); 4],
    batch: usize,
    workspace: [(&'static str, usize); 8],
) -> Vec<(String, u64)> {
    store
        .iter()
        .map(|&(name, b)| (name.to_string(), (b * batch) as u64))
        .chain(
            workspace
                .iter()
                .map(|&(name, b)| (format!("workspace {name}"), b as u64)),
        )
        .collect()
}
