//! `rounds.svg`: one lockstep session round by round, its per-round ratios, and
//! every session's ratio: the picture of why taking turns works.

use std::fmt::Write as _;

use super::{
    LEFT, LEGEND_SAMPLE, MARGIN, MIN_WIDTH, PLOT_W, TOP, color, legend_entry, text_width, y_tick,
};
use crate::measure::session::Session;
use crate::report::Report;

/// `rounds.svg`: why taking turns works. For the first workload:
/// (1) one session round by round, each arm's batch median: the machine's speed state moves
/// every arm together; (2) the same rounds as ratios to release's batch of the same round:
/// flat where the raw values jump; (3) every session's median ratio: the per-process spread
/// that makes sessions, not rounds, the unit.
pub fn render_rounds_svg(report: &Report) -> Option<String> {
    let w = report.workloads.first()?;
    let sessions: Vec<&Session> = report
        .sessions
        .iter()
        .filter(|s| s.workload == w.workload)
        .collect();
    // The session whose release batches swing most: the one that shows a speed flip.
    let swing = |s: &&Session| {
        let m: Vec<f64> = s
            .arm(crate::measure::BASELINE)
            .unwrap_or(&[])
            .iter()
            .filter_map(|b| s.primary().of(b))
            .collect();
        let (lo, hi) = m
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(*v), b.max(*v)));
        if lo > 0.0 { hi / lo } else { 0.0 }
    };
    let first = sessions
        .iter()
        .copied()
        .max_by(|a, b| swing(a).total_cmp(&swing(b)))?;
    // The builds only: layout variants (`release/L1`, …) would crowd the legends.
    let arms: Vec<&str> = first
        .arms
        .iter()
        .map(String::as_str)
        .filter(|a| !a.contains('/'))
        .collect();
    first.arm(crate::measure::BASELINE)?;
    let panel_h = 200.0;
    let gap = 70.0;
    // As wide as the longest legend label needs (the arms' names).
    let longest = arms
        .iter()
        .map(|a| text_width(a, 12.0, false))
        .fold(0.0, f64::max);
    let width = MIN_WIDTH.max(LEFT + PLOT_W + 14.0 + LEGEND_SAMPLE + longest + MARGIN);
    let height = TOP + 3.0 * (panel_h + gap);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>"#
    );
    // Panel 1: raw batch figures of that session, on its primary metric (the figure the
    // other panels' ratios are of).
    let primary = first.primary();
    let series: Vec<(&str, Vec<f64>)> = arms
        .iter()
        .filter_map(|a| {
            Some((
                *a,
                first.arm(a)?.iter().filter_map(|b| primary.of(b)).collect(),
            ))
        })
        .collect();
    line_panel(
        &mut s,
        TOP,
        panel_h,
        &format!(
            "{}: session {} (the widest swing), each arm's batch {} (ns)",
            w.workload,
            first.session,
            crate::report::words::metric(primary)
        ),
        "round",
        &series,
        false,
    );
    // Panel 2: the same rounds as % change against release's batch of the round.
    let ratios: Vec<(&str, Vec<f64>)> = arms
        .iter()
        .filter(|a| **a != crate::measure::BASELINE)
        .filter_map(|a| Some((*a, pct_changes(first, a)?)))
        .collect();
    line_panel(
        &mut s,
        TOP + panel_h + gap,
        panel_h,
        if first.paired {
            "the same turns in pairs: % change against release's run of the same pair"
        } else {
            "the same rounds: % change against release's batch of the same round"
        },
        if first.paired { "pair" } else { "round" },
        &ratios,
        false,
    );
    // Panel 3: each session's median ratio, in %.
    let per_session: Vec<(&str, Vec<f64>)> = arms
        .iter()
        .filter(|a| **a != crate::measure::BASELINE)
        .map(|a| {
            let values = sessions
                .iter()
                .filter_map(|s| stats::median(&pct_changes(s, a)?))
                .collect();
            (*a, values)
        })
        .collect();
    line_panel(
        &mut s,
        TOP + 2.0 * (panel_h + gap),
        panel_h,
        "every session: its median % change against release (new processes each)",
        "session",
        &per_session,
        true,
    );
    s.push_str("</svg>\n");
    Some(s)
}

/// Round by round (pair by pair), the % change of `arm`'s batch median against release's.
fn pct_changes(session: &Session, arm: &str) -> Option<Vec<f64>> {
    let logs = session.round_log_ratios(arm, crate::measure::BASELINE, session.primary())?;
    Some(logs.iter().map(|x| 100.0 * x.exp_m1()).collect())
}

/// One panel of lines (x = index), or of dots where the points are independent, with its own
/// y range, axes and legend.
fn line_panel(
    s: &mut String,
    y0: f64,
    h: f64,
    title: &str,
    xlabel: &str,
    series: &[(&str, Vec<f64>)],
    dots: bool,
) {
    let values: Vec<f64> = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| v.is_finite())
        .collect();
    let n = series
        .iter()
        .map(|(_, v)| v.len())
        .max()
        .unwrap_or(0)
        .max(2);
    let (mut lo, mut hi) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(*v), b.max(*v))
        });
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    if hi - lo < 1e-9 {
        (lo, hi) = (lo - 1.0, hi + 1.0);
    }
    let pad = (hi - lo) * 0.05;
    let (lo, hi) = (lo - pad, hi + pad);
    let px = |i: usize| LEFT + i as f64 / (n - 1) as f64 * PLOT_W;
    let py = |v: f64| y0 + h - (v - lo) / (hi - lo) * h;
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="{:.1}" font-size="13" font-weight="bold">{title}</text>"#,
        y0 - 10.0
    );
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{y0}" width="{PLOT_W}" height="{h}" fill="none" stroke="#333"/>"##
    );
    let ticks = super::nice_ticks(lo, hi, 5);
    for v in &ticks {
        y_tick(s, py(*v), "#eee", &super::tick_label(*v, &ticks));
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{xlabel} (0 to {})</text>"#,
        LEFT + PLOT_W / 2.0,
        y0 + h + 18.0,
        n - 1
    );
    for (k, (name, v)) in series.iter().enumerate() {
        let c = color(name);
        let finite = v.iter().enumerate().filter(|(_, v)| v.is_finite());
        if dots {
            let _ = writeln!(s, r#"<g fill="{c}">"#);
            for (i, v) in finite {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="2.5"/>"#,
                    px(i),
                    py(*v)
                );
            }
            let _ = writeln!(s, "</g>");
        } else {
            let points: Vec<String> = finite
                .map(|(i, v)| format!("{:.1},{:.1}", px(i), py(*v)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{}"/>"#,
                points.join(" ")
            );
        }
        legend_entry(s, y0, k, c, name);
    }
}
