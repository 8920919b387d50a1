//! A small SVG line chart for the runtime's benchmark programs (the drift scenario's recall over
//! decode steps). Plain text output, no dependency: the files are committed beside their JSON
//! and read in a browser or on GitHub.

use std::fmt::Write;

/// One line of a chart: a label for the legend and its `(x, y)` points, in x order.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// Points, drawn joined in the given order.
    pub points: Vec<(f64, f64)>,
}

/// What the chart shows besides its lines.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// Title, on top.
    pub title: String,
    /// A second line under the title (settings, seed), may be empty.
    pub subtitle: String,
    /// Label of the x axis.
    pub x_label: String,
    /// Label of the y axis.
    pub y_label: String,
    /// Fixed y range; `None` fits the data.
    pub y_range: Option<(f64, f64)>,
}

/// Line colours, one per series in turn (colour-blind safe).
const COLOURS: [&str; 6] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A step of 1, 2 or 5 times a power of ten that cuts `span` into about five intervals.
fn tick_step(span: f64) -> f64 {
    let raw = span / 5.0;
    let power = 10f64.powf(raw.log10().floor());
    let unit = raw / power;
    let nice = if unit < 1.5 {
        1.0
    } else if unit < 3.5 {
        2.0
    } else if unit < 7.5 {
        5.0
    } else {
        10.0
    };
    nice * power
}

/// Tick values from `lo` to `hi` (both inclusive, up to rounding) at a [`tick_step`].
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let step = tick_step(hi - lo);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// A tick's text with as many decimals as its step needs (0.6, not 0.6000000000000001).
fn tick_label(v: f64, lo: f64, hi: f64) -> String {
    let decimals = (-tick_step(hi - lo).log10().floor()).max(0.0) as usize;
    format!("{v:.decimals$}")
}

/// `(lo, hi)` of finite values, widened when empty or flat so that an axis can be drawn.
fn range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !lo.is_finite() {
        (0.0, 1.0)
    } else if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        (lo - 0.5, hi + 0.5)
    } else {
        (lo, hi)
    }
}

/// The chart as an SVG document: axes with ticks and grid, one polyline per series (points with
/// a non-finite coordinate are skipped), and a legend on the right.
pub fn line_chart_svg(chart: &Chart, series: &[Series]) -> String {
    let points = || series.iter().flat_map(|s| s.points.iter());
    let (x_lo, x_hi) = range(points().map(|p| p.0));
    let (y_lo, y_hi) = chart
        .y_range
        .unwrap_or_else(|| range(points().map(|p| p.1)));
    let (width, height) = (760.0, 420.0);
    let (left, right, top, bottom) = (64.0, 170.0, 56.0, 48.0);
    let (plot_w, plot_h) = (width - left - right, height - top - bottom);
    let x = |v: f64| left + plot_w * (v - x_lo) / (x_hi - x_lo);
    let y = |v: f64| top + plot_h * (1.0 - (v - y_lo) / (y_hi - y_lo));
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r##"<rect width="{width}" height="{height}" fill="white"/><text x="{left}" y="20" font-size="14">{}</text><text x="{left}" y="38" fill="#555">{}</text>"##,
        escape(&chart.title),
        escape(&chart.subtitle)
    );
    for v in ticks(y_lo, y_hi) {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + plot_w,
            left - 6.0,
            yy + 4.0,
            tick_label(v, y_lo, y_hi)
        );
    }
    for v in ticks(x_lo, x_hi) {
        let xx = x(v);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{top}" y2="{:.1}" stroke="#e5e5e5"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            top + plot_h,
            top + plot_h + 16.0,
            tick_label(v, x_lo, x_hi)
        );
    }
    let _ = writeln!(
        s,
        r##"<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text transform="translate(16,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"##,
        left + plot_w / 2.0,
        height - 10.0,
        escape(&chart.x_label),
        top + plot_h / 2.0,
        escape(&chart.y_label)
    );
    for (i, line) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let coords: Vec<String> = line
            .points
            .iter()
            .filter(|(a, b)| a.is_finite() && b.is_finite())
            .map(|&(a, b)| format!("{:.1},{:.1}", x(a), y(b)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            coords.join(" ")
        );
        let ly = top + 14.0 + 20.0 * i as f64;
        let lx = left + plot_w + 14.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx:.1}" x2="{:.1}" y1="{ly:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 22.0,
            lx + 28.0,
            ly + 4.0,
            escape(&line.label)
        );
    }
    let _ = writeln!(s, "</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Chart {
        Chart {
            title: "recall <k>".into(),
            subtitle: "seed 0 & more".into(),
            x_label: "step".into(),
            y_label: "recall".into(),
            y_range: Some((0.0, 1.0)),
        }
    }

    #[test]
    fn draws_one_polyline_per_series_with_escaped_text() {
        let series = vec![
            Series {
                label: "fathom(48)".into(),
                points: vec![(0.0, 0.9), (100.0, 0.8), (200.0, f64::NAN)],
            },
            Series {
                label: "a<b".into(),
                points: vec![(0.0, 0.5), (200.0, 0.4)],
            },
        ];
        let svg = line_chart_svg(&chart(), &series);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("recall &lt;k&gt;") && svg.contains("seed 0 &amp; more"));
        assert!(svg.contains("a&lt;b") && !svg.contains("a<b"));
        // The NaN point is skipped: the first line has two points.
        let first = svg.lines().find(|l| l.contains("<polyline")).unwrap();
        assert_eq!(first.matches(',').count(), 2);
        // x from 0 to 200 maps onto the plot's left and right edges; y = 1 onto its top.
        assert!(first.contains("64.0,"), "{first}");
        assert!(svg.contains(r#"y="60.0" text-anchor="end">1.0<"#), "{svg}");
    }

    #[test]
    fn ticks_are_round_and_inside() {
        let labels: Vec<String> = ticks(0.0, 1.0)
            .into_iter()
            .map(|v| tick_label(v, 0.0, 1.0))
            .collect();
        assert_eq!(labels, ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
        let t = ticks(0.0, 4000.0);
        assert_eq!(t.first(), Some(&0.0));
        assert_eq!(t.last(), Some(&4000.0));
        assert_eq!(tick_label(3000.0, 0.0, 4000.0), "3000");
        assert!(t.windows(2).all(|w| (w[1] - w[0] - 1000.0).abs() < 1e-9));
        assert_eq!(range([3.0, f64::NAN].into_iter()), (2.5, 3.5));
        assert_eq!(range(std::iter::empty()), (0.0, 1.0));
        let empty = line_chart_svg(&chart(), &[]);
        assert!(!empty.contains("<polyline") && empty.contains("</svg>"));
    }
}
