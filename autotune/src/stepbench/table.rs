//! The short table a run prints.

use std::fmt::Write as _;

use super::args::context_label;
use super::record::Row;

fn opt(v: Option<f64>, precision: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.precision$}"))
}

/// One line per row: method, placement, context, batch, times, floor, ratio, bits, error,
/// recall and the `k` it is at, HBM footprint (MiB), status.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<20} {:<4} {:>5} {:>2} {:>10} {:>10} {:>9} {:>6} {:>7} {:>9} {:>6} {:>4} {:>8}  status",
        "method",
        "at",
        "ctx",
        "b",
        "gpu_ms",
        "wall_ms",
        "floor_ms",
        "x sq32",
        "bits",
        "error",
        "recall",
        "@k",
        "hbm_MiB"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:<20} {:<4} {:>5} {:>2} {:>10} {:>10} {:>9} {:>6} {:>7} {:>9} {:>6} {:>4} {:>8}  {}",
            r.method,
            r.placement,
            context_label(r.context),
            r.batch,
            opt(r.gpu_ms, 3),
            opt(r.wall_ms, 3),
            opt(r.floor_ms, 3),
            opt(r.ratio_to_sparq32, 2),
            opt(r.bits, 1),
            r.fidelity.map_or("-".into(), |e| format!("{e:.2e}")),
            opt(r.recall, 3),
            r.recall_k.map_or("-".into(), |k| k.to_string()),
            opt(
                r.hbm_footprint_bytes
                    .map(|b| b as f64 / f64::from(1u32 << 20)),
                1
            ),
            r.status
        );
    }
    s
}
