//! What a run shows: a summary table of the winners and an SVG plot of every candidate's
//! achieved bandwidth against the ceilings.

use std::fmt::Write as _;

use runtime::ceilings::Ceilings;
use runtime::tuning::{EntryRecord, Outcome, TuningRecord};

/// The summary table: one line per entry — key, winner, median time, achieved GB/s, share of
/// its ceiling, noise band, candidates timed and disqualified.
pub fn summary_table(record: &TuningRecord) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<34} {:<22} {:>9} {:>9} {:>8} {:>6} {:>9}",
        "entry", "winner", "ms", "GB/s", "ceiling", "noise", "timed/dq"
    );
    for e in &record.entries {
        let timed = e
            .candidates
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Timed { .. }))
            .count();
        let dq = e.candidates.len() - timed;
        let Some(w) = &e.winner else {
            let _ = writeln!(
                out,
                "{:<34} {:<22} {:>9} {:>9} {:>8} {:>6} {:>4}/{:<4}",
                e.key.to_string(),
                "(none valid)",
                "-",
                "-",
                "-",
                "-",
                timed,
                dq
            );
            continue;
        };
        let gbps = e.bytes.map(|b| b as f64 / (w.median_ms * 1e-3) / 1e9);
        let share = gbps
            .zip(e.ceiling.as_ref())
            .map(|(g, (_, c))| 100.0 * g / c);
        let name = if w.name == w.fastest {
            w.name.clone()
        } else {
            format!("{}*", w.name)
        };
        let _ = writeln!(
            out,
            "{:<34} {:<22} {:>9.4} {:>9} {:>8} {:>5.1}% {:>4}/{:<4}",
            e.key.to_string(),
            name,
            w.median_ms,
            gbps.map_or("-".into(), |g| format!("{g:.1}")),
            share.map_or("-".into(), |s| format!("{s:.0}%")),
            100.0 * w.noise_band,
            timed,
            dq
        );
    }
    let _ = writeln!(
        out,
        "* a simpler candidate within the noise band of the fastest won"
    );
    out
}

/// `s` with the characters XML reserves escaped, for SVG text.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The plot: entries along x, achieved GB/s (log scale) up y, one dot per timed candidate (the
/// winner ringed), and the ceilings as horizontal lines. Entries without bytes are left out.
pub fn bandwidth_svg(record: &TuningRecord, ceilings: Option<&Ceilings>) -> String {
    let entries: Vec<&EntryRecord> = record
        .entries
        .iter()
        .filter(|e| e.bytes.is_some())
        .collect();
    let points: Vec<(usize, f64, bool)> = entries
        .iter()
        .enumerate()
        .flat_map(|(i, e)| {
            e.candidates.iter().filter_map(move |c| match c.outcome {
                Outcome::Timed { gbps: Some(g), .. } if g > 0.0 => {
                    let won = e.winner.as_ref().is_some_and(|w| w.name == c.name);
                    Some((i, g, won))
                }
                _ => None,
            })
        })
        .collect();
    let lines: Vec<(&str, f64)> = ceilings.map_or(Vec::new(), |c| {
        vec![
            ("pinned copy", c.pinned_copy_gbps),
            ("mapped read", c.mapped_read_gbps),
            ("HBM copy", c.hbm_copy_gbps),
        ]
    });
    let values = points.iter().map(|p| p.1).chain(lines.iter().map(|l| l.1));
    let (lo, hi) = values.fold((f64::INFINITY, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = if lo.is_finite() && hi > 0.0 {
        (
            lo.log10().floor(),
            hi.log10().ceil().max(lo.log10().floor() + 1.0),
        )
    } else {
        (0.0, 4.0)
    };
    let (left, right, top, bottom) = (70.0, 160.0, 30.0, 220.0);
    let column = 36.0;
    let width = left + right + column * entries.len().max(1) as f64;
    let height = 520.0;
    let plot_h = height - top - bottom;
    let y = |g: f64| top + plot_h * (1.0 - (g.log10() - lo) / (hi - lo));
    let x = |i: usize| left + column * (i as f64 + 0.5);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="18" font-size="14">{} — achieved bandwidth of every candidate</text>"#,
        escape(&record.meta.gpu)
    );
    let mut decade = lo;
    while decade <= hi {
        let yy = y(10f64.powf(decade));
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{} GB/s</text>"##,
            width - right,
            left - 6.0,
            yy + 4.0,
            10f64.powf(decade)
        );
        decade += 1.0;
    }
    for (i, (name, g)) in lines.iter().enumerate() {
        let yy = y(*g);
        let colour = ["#c0392b", "#8e44ad", "#16a085"][i % 3];
        let _ = writeln!(
            s,
            r#"<line x1="{left}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="{colour}" stroke-dasharray="6 3"/><text x="{:.1}" y="{:.1}" fill="{colour}">{name} {g:.0} GB/s</text>"#,
            width - right,
            width - right + 4.0,
            yy + 4.0
        );
    }
    for (i, e) in entries.iter().enumerate() {
        let (xx, yy) = (x(i), height - bottom + 10.0);
        let _ = writeln!(
            s,
            r#"<text transform="translate({xx:.1},{yy:.1}) rotate(60)">{}</text>"#,
            escape(&e.key.to_string())
        );
    }
    for (i, g, won) in points {
        let (xx, yy) = (x(i), y(g));
        if won {
            let _ = writeln!(
                s,
                r##"<circle cx="{xx:.1}" cy="{yy:.1}" r="6" fill="none" stroke="#e67e22" stroke-width="2"/>"##
            );
        }
        let _ = writeln!(
            s,
            r##"<circle cx="{xx:.1}" cy="{yy:.1}" r="2.5" fill="#2c3e50" fill-opacity="0.7"/>"##
        );
    }
    let _ = writeln!(s, "</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use codegen::spec::Placement;
    use runtime::tuning::{CandidateRecord, EntryKey, RecordMeta, Subject, Variant, Winner};
    use runtime::tuning::{Tile, TunedFamily};

    fn record(with_winner: bool) -> TuningRecord {
        let v = |w| {
            Variant::Tile(Tile::Scan {
                tile_words: w,
                threads: 256,
                tensor_cores: false,
            })
        };
        let timed = |w: usize, ms: f64| CandidateRecord {
            name: v(w).name(),
            variant: v(w),
            outcome: Outcome::Timed {
                median_ms: ms,
                p25_ms: ms,
                p75_ms: ms,
                samples: 3,
                gbps: Some(2.0 / ms),
            },
        };
        let mut r = TuningRecord::new(RecordMeta {
            gpu: "NVIDIA <H200>".into(),
            compute_capability: "9.0".into(),
            multiprocessors: 132,
            driver: "13.0".into(),
            nvrtc: "13.0".into(),
            project_version: "0.1.0".into(),
            candidate_checksum: String::new(),
        });
        r.insert(EntryRecord {
            key: EntryKey {
                subject: Subject::Kernel(TunedFamily::Scan),
                head_dim: 128,
                group: 4,
                placement: Placement::Hbm,
                context_bucket: 17,
            },
            tokens: 1 << 17,
            bytes: Some(2_000_000),
            ceiling: Some(("hbm read".into(), 4.0)),
            candidates: vec![timed(16, 1.0), timed(32, 2.0)],
            winner: with_winner.then(|| Winner {
                name: v(16).name(),
                variant: v(16),
                median_ms: 1.0,
                fastest: v(16).name(),
                noise_band: 0.02,
                within_noise: vec![v(16).name()],
            }),
        });
        r
    }

    #[test]
    fn the_table_shows_rate_and_share_of_the_ceiling() {
        let t = summary_table(&record(true));
        // 2 MB in 1 ms is 2 GB/s, half of a 4 GB/s ceiling.
        assert!(t.contains("scan w16 t256"), "{t}");
        assert!(t.contains("2.0") && t.contains("50%"), "{t}");
        assert!(summary_table(&record(false)).contains("(none valid)"));
    }

    #[test]
    fn the_plot_has_a_dot_per_timed_candidate_and_a_line_per_ceiling() {
        let c = Ceilings {
            pinned_copy_gbps: 50.0,
            mapped_read_gbps: 45.0,
            hbm_copy_gbps: 4000.0,
            bytes: 1,
            repetitions: 1,
        };
        let svg = bandwidth_svg(&record(true), Some(&c));
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("r=\"2.5\"").count(), 2);
        assert_eq!(svg.matches("r=\"6\"").count(), 1);
        assert!(svg.contains("HBM copy 4000 GB/s"));
        assert!(svg.contains("NVIDIA &lt;H200&gt;"));
    }
}
