//! `verdicts.svg`, the first picture of report.md: per workload, each build's change against
//! release with its 95 % interval (a forest plot), the A/A floor and the layout floor as
//! shaded bands around zero; a gain whose whole interval clears both stands.

use std::fmt::Write as _;

use super::{color, nice_ticks, text_width};
use crate::report::{Report, words};

const WIDTH: f64 = 760.0;
const LEFT: f64 = 110.0;
const PLOT_W: f64 = 440.0;
const ROW: f64 = 24.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 58.0;
const AA_FILL: &str = "#fde9a9";
const LAYOUT_FILL: &str = "#cfe3f7";

fn title(workload: &str, aa: &crate::analysis::Comparison) -> String {
    format!(
        "{workload}: {} against release, 95 % interval",
        words::primary(aa)
    )
}

/// A panel's A/A floor, layout floor where measured, and minimum effect (%).
type Floors = (f64, Option<f64>, f64);

/// One row: a build's name, its change, interval and verdict.
struct Row {
    name: String,
    change: f64,
    low: f64,
    high: f64,
    verdict: String,
}

pub fn render_verdicts_svg(report: &Report) -> String {
    // Per workload: its title, its rows, and its floors (the A/A floor, the layout floor, the
    // min effect).
    let panels: Vec<(String, Vec<Row>, Floors)> = report
        .workloads
        .iter()
        .map(|w| {
            let rows = w
                .rows
                .iter()
                .filter_map(|r| {
                    let c = &r.vs_release.as_ref()?.primary();
                    Some(Row {
                        name: r.build.clone(),
                        change: c.estimate.change_pct,
                        low: c.estimate.ci_low_pct,
                        high: c.estimate.ci_high_pct,
                        verdict: crate::report::words::verdict(c.verdict).to_string(),
                    })
                })
                .collect();
            (
                title(&w.workload, &w.aa),
                rows,
                (
                    stats::noise_floor_pct(&w.aa.primary().estimate),
                    w.layout.as_ref().map(|l| l.floor_pct),
                    w.aa.primary_metric()
                        .min_effect_pct(&report.config.settings.measure),
                ),
            )
        })
        .collect();
    let label_w = panels
        .iter()
        .flat_map(|(_, rows, _)| rows.iter().map(|r| text_width(&r.verdict, 12.0, false)))
        .fold(0.0, f64::max);
    let title_w = panels
        .iter()
        .map(|(title, _, _)| LEFT + text_width(title, 13.0, true) + 12.0)
        .fold(0.0, f64::max);
    let width = (LEFT + PLOT_W + 12.0 + label_w + 12.0)
        .max(title_w)
        .max(WIDTH)
        .ceil();
    let heights: Vec<f64> = panels
        .iter()
        .map(|(_, rows, _)| TOP + rows.len().max(1) as f64 * ROW + BOTTOM)
        .collect();
    let height: f64 = heights.iter().sum::<f64>().max(1.0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="{width}" height="{height}" fill="white"/>"#
    );
    let mut y0 = 0.0;
    for ((title, rows, floors), h) in panels.iter().zip(&heights) {
        panel(&mut s, y0, title, rows, *floors);
        y0 += h;
    }
    s.push_str("</svg>\n");
    s
}

/// `floors`: the A/A floor, the layout floor where measured, and the minimum effect (%).
fn panel(s: &mut String, y0: f64, title: &str, rows: &[Row], floors: Floors) {
    let (aa, layout, min_effect) = floors;
    let top = y0 + TOP;
    let h = rows.len().max(1) as f64 * ROW;
    // The x range: every interval and both bands, with a margin.
    let reach = rows
        .iter()
        .flat_map(|r| [r.low.abs(), r.high.abs()])
        .chain([aa, layout.unwrap_or(0.0), 1.0])
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        * 1.08;
    let lo = -reach.max(1.0);
    let hi = rows
        .iter()
        .map(|r| r.high)
        .chain([aa, layout.unwrap_or(0.0)])
        .filter(|v| v.is_finite())
        .fold(1.0, f64::max)
        * 1.08;
    let px = |v: f64| LEFT + (v - lo) / (hi - lo) * PLOT_W;
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="{:.1}" font-size="13" font-weight="bold">{}</text>"#,
        y0 + 20.0,
        title
    );
    // The bands: the wider one first, so the narrower shows on top of it.
    let mut bands = vec![(aa, AA_FILL)];
    if let Some(l) = layout {
        bands.push((l, LAYOUT_FILL));
    }
    bands.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (w, fill) in &bands {
        let (a, b) = (px(-w.min(-lo)), px(w.min(hi)));
        let _ = writeln!(
            s,
            r#"<rect x="{a:.1}" y="{top:.1}" width="{:.1}" height="{h:.1}" fill="{fill}"/>"#,
            b - a
        );
    }
    // The minimum effect: dashed, since a verdict needs the largest of the three.
    for v in [-min_effect, min_effect] {
        if (lo..=hi).contains(&v) {
            let x = px(v);
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{top:.1}" y2="{:.1}" stroke="#666" stroke-dasharray="4 3"/>"##,
                top + h
            );
        }
    }
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{top:.1}" width="{PLOT_W}" height="{h:.1}" fill="none" stroke="#333"/>"##
    );
    for t in nice_ticks(lo, hi, 6) {
        let x = px(t);
        let stroke = if t == 0.0 { "#333" } else { "#ddd" };
        let _ = writeln!(
            s,
            r#"<line x1="{x:.1}" x2="{x:.1}" y1="{top:.1}" y2="{:.1}" stroke="{stroke}"/>"#,
            top + h
        );
        let _ = writeln!(
            s,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            top + h + 15.0,
            super::tick_label(t, &nice_ticks(lo, hi, 6))
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">change against release, % (negative: faster)</text>"#,
        LEFT + PLOT_W / 2.0,
        top + h + 31.0
    );
    for (i, r) in rows.iter().enumerate() {
        let y = top + (i as f64 + 0.5) * ROW;
        let c = color(&r.name);
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 8.0,
            y + 4.0,
            r.name
        );
        let _ = writeln!(
            s,
            r#"<line x1="{:.1}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="{c}" stroke-width="2.5"/>"#,
            px(r.low.max(lo)),
            px(r.high.min(hi))
        );
        let _ = writeln!(
            s,
            r#"<circle cx="{:.1}" cy="{y:.1}" r="4" fill="{c}"/>"#,
            px(r.change.clamp(lo, hi))
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
            LEFT + PLOT_W + 12.0,
            y + 4.0,
            r.verdict
        );
    }
    // The key.
    let ky = top + h + 46.0;
    let mut x = LEFT;
    let mut key = vec![(AA_FILL, words::aa_floor(aa))];
    key.push(match layout {
        Some(_) => (LAYOUT_FILL, words::layout_floor_short(layout)),
        None => ("none", words::layout_floor_short(None)),
    });
    for (fill, label) in key {
        let _ = writeln!(
            s,
            r##"<rect x="{x:.1}" y="{:.1}" width="14" height="10" fill="{fill}" stroke="#999"/>"##,
            ky - 9.0
        );
        let _ = writeln!(s, r#"<text x="{:.1}" y="{ky:.1}">{label}</text>"#, x + 20.0);
        x += 20.0 + text_width(&label, 12.0, false) + 16.0;
    }
    let _ = writeln!(
        s,
        r##"<line x1="{x:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#666" stroke-dasharray="4 3"/>"##,
        x + 14.0,
        ky - 4.0,
        ky - 4.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{ky:.1}">{}</text>"#,
        x + 20.0,
        words::min_effect(min_effect)
    );
}
