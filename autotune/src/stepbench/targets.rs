//! The targets of issue #6 (batch 1), and of issue #15 the standing host 128k batch-16 cell, the
//! host 1M HBM footprint and its sharper speed targets (the ratios to sparq(32), the host 1M
//! floor, the HBM step per layer), each met or missed by how much, from a run's rows.

use super::figures::SPARQ32;
use super::record::Row;

/// One target's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// What the target asks.
    pub target: String,
    /// `met (...)`, `missed by ...` or `not measured: ...`.
    pub outcome: String,
}

fn find<'a>(rows: &'a [Row], method: &str, context: usize, placement: &str) -> Option<&'a Row> {
    find_batch(rows, method, context, placement, 1)
}

fn find_batch<'a>(
    rows: &'a [Row],
    method: &str,
    context: usize,
    placement: &str,
    batch: usize,
) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.ok()
            && r.batch == batch
            && r.method == method
            && r.context == context
            && r.placement == placement
    })
}

/// fathom(48) of `batch` sequences within `most` times its link floor.
fn link_floor(rows: &[Row], context: usize, batch: usize, most: f64) -> Verdict {
    let target = format!(
        "host {}{}: fathom(48) within {most}x of its link floor",
        label(context),
        if batch == 1 {
            String::new()
        } else {
            format!(", batch {batch}")
        }
    );
    let outcome = match find_batch(rows, "fathom(48)", context, "host", batch) {
        Some(r) => match (r.gpu_ms, r.floor_ms) {
            (Some(g), Some(f)) if f > 0.0 => {
                let x = g / f;
                let note = steps_note(&[r]);
                if x <= most {
                    format!("met ({x:.2}x the floor){note}")
                } else {
                    format!("missed by {:.2}x ({x:.2}x the floor){note}", x / most)
                }
            }
            _ => "not measured: no time or floor".into(),
        },
        None => "not measured: the cell is missing or did not run".into(),
    };
    Verdict { target, outcome }
}

/// Bytes of the §9 footprint target: a 1M-token sequence from host memory in well under this.
pub const FOOTPRINT_TARGET: u64 = 256 << 20;

/// fathom(48)'s HBM footprint at host 1M, batch 1, under [`FOOTPRINT_TARGET`].
fn footprint(rows: &[Row]) -> Verdict {
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    let target = format!(
        "host 1m: HBM footprint of a fathom(48) sequence (every layer) under {:.0} MiB",
        mib(FOOTPRINT_TARGET)
    );
    let outcome = match find(rows, "fathom(48)", 1 << 20, "host")
        .and_then(|r| Some((r.hbm_footprint_bytes?, r.hbm_footprint.as_ref()?)))
    {
        Some((bytes, parts)) => {
            let largest = parts.iter().max_by_key(|p| p.1).map_or(String::new(), |p| {
                format!("; largest part {} {:.1} MiB", p.0, mib(p.1))
            });
            if bytes < FOOTPRINT_TARGET {
                format!("met ({:.1} MiB{largest})", mib(bytes))
            } else {
                format!(
                    "missed by {:.2}x ({:.1} MiB{largest})",
                    bytes as f64 / FOOTPRINT_TARGET as f64,
                    mib(bytes)
                )
            }
        }
        None => "not measured: the cell is missing or has no footprint".into(),
    };
    Verdict { target, outcome }
}

/// Timed steps per cell the §9 protocol asks for.
pub const PROTOCOL_STEPS: usize = 20;

/// ` [medians of a, b steps: fewer than 20]` when a verdict rests on a cell timed over fewer
/// steps than the protocol asks, else nothing.
fn steps_note(cells: &[&Row]) -> String {
    if cells.iter().all(|r| r.steps >= PROTOCOL_STEPS) {
        return String::new();
    }
    let steps: Vec<String> = cells.iter().map(|r| r.steps.to_string()).collect();
    format!(
        " [medians of {} steps: fewer than {PROTOCOL_STEPS}]",
        steps.join(", ")
    )
}

fn label(context: usize) -> String {
    super::args::context_label(context)
}

/// `gpu_ms(sparq(32)) / gpu_ms(fathom(48)) >= need` at `context`, `placement`.
fn speedup(rows: &[Row], context: usize, placement: &str, need: f64) -> Verdict {
    let target = format!(
        "{placement} {}: fathom(48) at least {need}x faster than sparq(32)",
        label(context)
    );
    let outcome = match (
        find(rows, "fathom(48)", context, placement),
        find(rows, SPARQ32, context, placement),
    ) {
        (Some(fr), Some(sr)) => match (fr.gpu_ms, sr.gpu_ms) {
            (Some(f), Some(s)) if f > 0.0 => {
                let got = s / f;
                let note = steps_note(&[fr, sr]);
                if got >= need {
                    format!("met ({got:.2}x){note}")
                } else {
                    format!("missed by {:.2}x ({got:.2}x of {need}x){note}", need / got)
                }
            }
            _ => "not measured: no GPU time".into(),
        },
        _ => "not measured: a cell is missing or did not run".into(),
    };
    Verdict { target, outcome }
}

/// The batch of the standing host 128k cell (issue #15): a batch large enough that the link,
/// not the launches, bounds the step.
pub const STANDING_BATCH: usize = 16;

/// fathom(48)'s GPU time per layer of a batch-1 step at `context` in HBM at most `most_ms`
/// (`layers`: the model's).
fn per_layer(rows: &[Row], context: usize, layers: usize, most_ms: f64) -> Verdict {
    let target = format!(
        "hbm {}: fathom(48) at most {:.0} us a layer (issue #15)",
        label(context),
        most_ms * 1000.0
    );
    let outcome = match find(rows, "fathom(48)", context, "hbm") {
        Some(r) => match r.gpu_ms {
            Some(g) if layers > 0 => {
                let layer = g / layers as f64;
                let note = steps_note(&[r]);
                if layer <= most_ms {
                    format!("met ({:.1} us a layer){note}", layer * 1000.0)
                } else {
                    format!(
                        "missed by {:.2}x ({:.1} us a layer){note}",
                        layer / most_ms,
                        layer * 1000.0
                    )
                }
            }
            _ => "not measured: no GPU time or no layers".into(),
        },
        None => "not measured: the cell is missing or did not run".into(),
    };
    Verdict { target, outcome }
}

/// `verdict` with ` (issue #15)` after its target.
fn of_issue_15(verdict: Verdict) -> Verdict {
    Verdict {
        target: format!("{} (issue #15)", verdict.target),
        ..verdict
    }
}

/// The verdicts at `largest` (the 1M context when run) for batch 1; `layers` is the model's
/// (for the per-layer targets).
pub fn verdicts(rows: &[Row], largest: usize, layers: usize) -> Vec<Verdict> {
    let mut out = vec![
        speedup(rows, 1 << 20, "host", 2.3),
        speedup(rows, 256 << 10, "host", 2.0),
    ];
    out.push(link_floor(rows, 1 << 20, 1, 1.25));
    out.push(link_floor(rows, 128 << 10, STANDING_BATCH, 1.15));
    out.push(footprint(rows));
    out.push(speedup(rows, 1 << 20, "hbm", 1.5));
    for placement in ["host", "hbm"] {
        out.push(fewer_bytes(rows, largest, placement));
    }
    for placement in ["host", "hbm"] {
        out.push(fidelity_136(rows, largest, placement));
    }
    out.extend(
        [
            speedup(rows, 1 << 20, "host", 2.6),
            speedup(rows, 256 << 10, "host", 2.4),
            link_floor(rows, 1 << 20, 1, 1.1),
            speedup(rows, 1 << 20, "hbm", 2.0),
        ]
        .map(of_issue_15),
    );
    out.push(per_layer(rows, 32 << 10, layers, 0.030));
    out.push(per_layer(rows, 1 << 20, layers, 0.100));
    out
}

/// fathom(48) reads at least 18% fewer bytes than sparq(16) in no more GPU time, with lower
/// error.
fn fewer_bytes(rows: &[Row], context: usize, placement: &str) -> Verdict {
    let target = format!(
        "{placement} {}: fathom(48) reads >= 18% fewer bytes than sparq(16), in no more GPU time, with lower error",
        label(context)
    );
    let (Some(f), Some(s)) = (
        find(rows, "fathom(48)", context, placement),
        find(rows, "sparq(16)", context, placement),
    ) else {
        return Verdict {
            target,
            outcome: "not measured: a cell is missing or did not run".into(),
        };
    };
    let (Some(fb), Some(sb), Some(ft), Some(st), Some(fe), Some(se)) = (
        f.bytes_per_step,
        s.bytes_per_step,
        f.gpu_ms,
        s.gpu_ms,
        f.fidelity,
        s.fidelity,
    ) else {
        return Verdict {
            target,
            outcome: "not measured: bytes, time or error missing".into(),
        };
    };
    let saving = 1.0 - fb as f64 / sb as f64;
    let mut misses = Vec::new();
    if saving < 0.18 {
        misses.push(format!("bytes {:.1}% fewer (needs 18%)", 100.0 * saving));
    }
    if ft > st {
        misses.push(format!("time {:.2}x sparq(16)'s", ft / st));
    }
    if fe >= se {
        misses.push(format!("error {fe:.3e} vs {se:.3e}"));
    }
    let outcome = if misses.is_empty() {
        format!(
            "met ({:.1}% fewer bytes, {:.2}x the time, error {fe:.3e} vs {se:.3e})",
            100.0 * saving,
            ft / st
        )
    } else {
        format!("missed by {}", misses.join("; "))
    };
    Verdict { target, outcome }
}

/// The 136-bit scans: r = 32 channels at depth 4 with 64-token scale blocks.
pub const SCANS_136: [&str; 3] = ["sparq(32)", "double_sparsity(32)", "loki(32)"];

/// fathom(92) error at most the best 136-bit scan's.
fn fidelity_136(rows: &[Row], context: usize, placement: &str) -> Verdict {
    let target = format!(
        "{placement} {}: fathom(92) error at most the best 136-bit scan's",
        label(context)
    );
    let best = SCANS_136
        .iter()
        .filter_map(|m| Some((*m, find(rows, m, context, placement)?.fidelity?)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let outcome = match (
        find(rows, "fathom(92)", context, placement).and_then(|r| r.fidelity),
        best,
    ) {
        (Some(f), Some((m, b))) => {
            if f <= b {
                format!("met ({f:.3e} vs {m} {b:.3e})")
            } else {
                format!("missed by {:.2}x ({f:.3e} vs {m} {b:.3e})", f / b)
            }
        }
        _ => "not measured: fathom(92) or every 136-bit scan is missing".into(),
    };
    Verdict { target, outcome }
}
