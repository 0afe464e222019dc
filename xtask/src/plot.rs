//! `latency.svg`: each workload's latency distribution per build on one chart (percentile on
//! a log "nines" axis, nanoseconds on a log axis), hand-written SVG: no plotting dependency.

use std::fmt::Write as _;

use crate::report::Report;

const WIDTH: f64 = 760.0;
const PANEL: f64 = 300.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 45.0;

fn color(build: &str) -> &'static str {
    match build {
        "release" => "#7f7f7f",
        "release-lto" => "#1f77b4",
        "release-pgo" => "#d62728",
        _ => "#2ca02c",
    }
}

/// x position of quantile q: −log10(1 − q), so 50 %, 90 %, 99 %, 99.9 % are evenly spaced.
fn nines(q: f64) -> f64 {
    -(1.0 - q).max(1e-9).log10()
}

pub fn render_svg(report: &Report) -> String {
    let n = report.workloads.len().max(1) as f64;
    let height = n * (PANEL + TOP + BOTTOM);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (i, w) in report.workloads.iter().enumerate() {
        let y0 = i as f64 * (PANEL + TOP + BOTTOM) + TOP;
        let points: Vec<(f64, f64)> = w
            .rows
            .iter()
            .flat_map(|r| r.distribution.iter().copied())
            .filter(|p| p.1 > 0.0)
            .collect();
        if points.is_empty() {
            continue;
        }
        let (xmin, xmax) = (0.0, points.iter().map(|p| nines(p.0)).fold(1.0, f64::max));
        let lo = points
            .iter()
            .map(|p| p.1)
            .fold(f64::INFINITY, f64::min)
            .log10()
            .floor();
        let hi = points
            .iter()
            .map(|p| p.1)
            .fold(0.0, f64::max)
            .log10()
            .ceil()
            .max(lo + 1.0);
        let plot_w = WIDTH - LEFT - RIGHT;
        let px = |q: f64| LEFT + (nines(q) - xmin) / (xmax - xmin) * plot_w;
        let py = |ns: f64| y0 + PANEL - (ns.log10() - lo) / (hi - lo) * PANEL;
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="{:.1}" font-size="14" font-weight="bold">{} latency by percentile (medians over {} undisturbed pairs)</text>"#,
            y0 - 14.0,
            w.workload,
            w.pairs_total - w.pairs_dropped
        );
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{y0}" width="{plot_w}" height="{PANEL}" fill="none" stroke="#333"/>"##
        );
        // y grid: 1-2-5 per decade.
        let mut decade = lo;
        while decade <= hi {
            for m in [1.0, 2.0, 5.0] {
                let v = m * 10f64.powf(decade);
                if v.log10() > hi + 1e-9 {
                    break;
                }
                let y = py(v);
                let _ = writeln!(
                    s,
                    r##"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
                    LEFT + plot_w
                );
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                    LEFT - 6.0,
                    y + 4.0,
                    label_ns(v)
                );
            }
            decade += 1.0;
        }
        for (q, label) in [
            (0.5, "50%"),
            (0.9, "90%"),
            (0.99, "99%"),
            (0.999, "99.9%"),
            (0.9999, "99.99%"),
        ] {
            if nines(q) > xmax + 1e-9 {
                continue;
            }
            let x = px(q);
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{y0}" y2="{:.1}" stroke="#ddd"/>"##,
                y0 + PANEL
            );
            let _ = writeln!(
                s,
                r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#,
                y0 + PANEL + 16.0
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">percentile</text>"#,
            LEFT + plot_w / 2.0,
            y0 + PANEL + 34.0
        );
        let _ = writeln!(
            s,
            r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">send→recv latency (log)</text>"#,
            y0 + PANEL / 2.0,
            y0 + PANEL / 2.0
        );
        for (k, row) in w.rows.iter().enumerate() {
            let path: Vec<String> = row
                .distribution
                .iter()
                .filter(|p| p.1 > 0.0)
                .map(|&(q, ns)| format!("{:.1},{:.1}", px(q), py(ns)))
                .collect();
            let c = color(&row.build);
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
                path.join(" ")
            );
            let ly = y0 + 14.0 + k as f64 * 20.0;
            let lx = LEFT + plot_w + 14.0;
            let _ = writeln!(
                s,
                r#"<line x1="{lx:.1}" x2="{:.1}" y1="{ly:.1}" y2="{ly:.1}" stroke="{c}" stroke-width="3"/>"#,
                lx + 20.0
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}">{}: median {:.0} ns</text>"#,
                lx + 26.0,
                ly + 4.0,
                row.build,
                row.median_ns
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

fn label_ns(v: f64) -> String {
    if v >= 1_000_000.0 {
        format!("{:.0} ms", v / 1_000_000.0)
    } else if v >= 1000.0 {
        format!("{:.0} µs", v / 1000.0)
    } else {
        format!("{v:.0} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_svg_has_a_line_per_build_and_is_well_formed() {
        let svg = render_svg(&crate::report::tests::fixture());
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert!(svg.contains("release-pgo: median 181 ns"), "{svg}");
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        assert_eq!(svg.matches('<').count(), svg.matches('>').count());
    }
}
