//! The two SVG plots of a run: GPU time per step against context (one line per method, log
//! axes, one panel per placement, batch 1) and fidelity against bits read with the Pareto front.

use std::fmt::Write as _;

use crate::report::escape;

use super::record::Row;

/// One named series of `(x, y)` points, both positive.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Join the points with a line (else dots only).
    pub line: bool,
}

const COLOURS: [&str; 12] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#000000", "#aec7e8",
];

/// Decades spanning the positive values (at least one decade).
fn decades(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| *v > 0.0 && v.is_finite())
        .fold((f64::INFINITY, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let lo = lo.log10().floor();
    (lo, hi.log10().ceil().max(lo + 1.0))
}

/// A log-log chart of `series` with a legend, titled `title`.
pub fn log_log_svg(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let ((x0, x1), (y0, y1)) = (decades(xs), decades(ys));
    let (left, top, plot_w, plot_h, legend) = (70.0, 40.0, 480.0, 320.0, 190.0);
    let (width, height) = (left + plot_w + legend, top + plot_h + 60.0);
    let x = |v: f64| left + plot_w * (v.log10() - x0) / (x1 - x0);
    let y = |v: f64| top + plot_h * (1.0 - (v.log10() - y0) / (y1 - y0));
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="20" font-size="13">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        s,
        r#"<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="black"/>"#
    );
    for e in (x0 as i32)..=(x1 as i32) {
        let v = 10f64.powi(e);
        let px = x(v);
        let _ = writeln!(
            s,
            r##"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">1e{e}</text>"##,
            top + plot_h,
            top + plot_h + 14.0
        );
    }
    for e in (y0 as i32)..=(y1 as i32) {
        let v = 10f64.powi(e);
        let py = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">1e{e}</text>"##,
            left + plot_w,
            left - 4.0,
            py + 4.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        left + plot_w / 2.0,
        top + plot_h + 32.0,
        escape(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="14" y="{:.1}" text-anchor="middle" transform="rotate(-90 14 {:.1})">{}</text>"#,
        top + plot_h / 2.0,
        top + plot_h / 2.0,
        escape(y_label)
    );
    for (i, series) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let pts: Vec<(f64, f64)> = series
            .points
            .iter()
            .filter(|p| p.0 > 0.0 && p.1 > 0.0 && p.0.is_finite() && p.1.is_finite())
            .map(|&(a, b)| (x(a), y(b)))
            .collect();
        if series.line && pts.len() > 1 {
            let path: Vec<String> = pts.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="1.5"/>"#,
                path.join(" ")
            );
        }
        for (a, b) in &pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{a:.1}" cy="{b:.1}" r="3" fill="{colour}"/>"#
            );
        }
        let ly = top + 14.0 * i as f64 + 6.0;
        let lx = left + plot_w + 12.0;
        let _ = writeln!(
            s,
            r#"<circle cx="{lx:.1}" cy="{ly:.1}" r="4" fill="{colour}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 8.0,
            ly + 4.0,
            escape(&series.name)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Methods in the order they first appear.
fn methods(rows: &[&Row]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in rows {
        if !out.contains(&r.method) {
            out.push(r.method.clone());
        }
    }
    out
}

/// GPU ms per step against context of every method, batch `batch`, `placement`.
pub fn time_vs_context(rows: &[Row], placement: &str, batch: usize, title: &str) -> String {
    let picked: Vec<&Row> = rows
        .iter()
        .filter(|r| r.ok() && r.placement == placement && r.batch == batch)
        .collect();
    let series: Vec<Series> = methods(&picked)
        .into_iter()
        .map(|m| {
            let mut points: Vec<(f64, f64)> = picked
                .iter()
                .filter(|r| r.method == m)
                .filter_map(|r| Some((r.context as f64, r.gpu_ms?)))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series {
                name: m,
                points,
                line: true,
            }
        })
        .collect();
    log_log_svg(
        title,
        "context (tokens)",
        "GPU ms per step (all layers)",
        &series,
    )
}

/// The points no other point beats: none has fewer-or-equal bits and lower-or-equal error
/// with one of them strictly lower. Sorted by bits.
pub fn pareto_front(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut sorted: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut front: Vec<(f64, f64)> = Vec::new();
    for p in sorted {
        if front.last().is_none_or(|last| p.1 < last.1) {
            front.push(p);
        }
    }
    front
}

/// Fidelity (relative error) against bits read per token of every method at `context`
/// (batch 1, the first placement that has it), with the Pareto front.
pub fn fidelity_vs_bits(rows: &[Row], context: usize, title: &str) -> String {
    let mut picked: Vec<&Row> = Vec::new();
    for r in rows
        .iter()
        .filter(|r| r.ok() && r.context == context && r.batch == 1)
    {
        if r.bits.is_some() && r.fidelity.is_some() && !picked.iter().any(|p| p.method == r.method)
        {
            picked.push(r);
        }
    }
    let mut series: Vec<Series> = picked
        .iter()
        .filter_map(|r| {
            // An exact method's error can be 0: shown at the floor of the plot's range.
            let e = r.fidelity?.max(1e-7);
            Some(Series {
                name: r.method.clone(),
                points: vec![(r.bits?, e)],
                line: false,
            })
        })
        .collect();
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.clone()).collect();
    series.push(Series {
        name: "Pareto front".into(),
        points: pareto_front(&all),
        line: true,
    });
    log_log_svg(
        title,
        "bits read per token per KV head",
        "relative output error vs dense",
        &series,
    )
}
