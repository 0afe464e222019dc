//! `latency.svg`: each workload's latency distribution per build on one chart (percentile on
//! a log "nines" axis, nanoseconds on a log axis), hand-written SVG: no plotting dependency.

use std::fmt::Write as _;

use crate::report::Report;

pub mod rounds;
pub mod verdicts;

const MIN_WIDTH: f64 = 760.0;
const PANEL: f64 = 300.0;
const PLOT_W: f64 = 520.0;
const LEFT: f64 = 70.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 45.0;
const MARGIN: f64 = 12.0;
/// Legend: a 20 px line sample, then the label 26 px from its start.
const LEGEND_SAMPLE: f64 = 26.0;

pub(crate) fn color(build: &str) -> &'static str {
    match build {
        "release" => "#7f7f7f",
        "lto" => "#1f77b4",
        "lto+pgo" => "#d62728",
        "release-aa" => "#bcbd22",
        "oracle" => "#9467bd",
        "lto+pgo+bolt" => "#ff7f0e",
        _ => "#2ca02c",
    }
}

/// A generous estimate of a sans-serif label's width: no font metrics here, so it errs wide
/// (the test renders the SVG with rsvg-convert and checks nothing runs past the picture).
pub(crate) fn text_width(text: &str, font_px: f64, bold: bool) -> f64 {
    let em = if bold { 0.66 } else { 0.62 };
    text.chars().count() as f64 * font_px * em
}

/// x position of quantile q: −log10(1 − q), so 50 %, 90 %, 99 %, 99.9 % are evenly spaced.
fn nines(q: f64) -> f64 {
    -(1.0 - q).max(1e-9).log10()
}

fn title(w: &crate::analysis::WorkloadAnalysis) -> String {
    format!(
        "{} latency by percentile (medians over {} sessions)",
        w.workload, w.sessions
    )
}

fn legend_label(row: &crate::analysis::Row) -> String {
    format!("{}: median {:.0} ns", row.build, row.median_ns)
}

/// Where things go: the picture is as wide as its widest title or legend needs.
struct Layout {
    width: f64,
    height: f64,
}

impl Layout {
    fn of(report: &Report) -> Layout {
        let mut width = MIN_WIDTH;
        for w in &report.workloads {
            width = width.max(LEFT + text_width(&title(w), 14.0, true) + MARGIN);
            for row in &w.rows {
                let legend = LEFT + PLOT_W + 14.0 + LEGEND_SAMPLE;
                width = width.max(legend + text_width(&legend_label(row), 12.0, false) + MARGIN);
            }
        }
        let n = report.workloads.len().max(1) as f64;
        Layout {
            width: width.ceil(),
            height: n * (PANEL + TOP + BOTTOM),
        }
    }
}

/// One workload's panel: its axes' ranges and the mapping from data to picture.
struct Panel {
    y0: f64,
    xmax: f64,
    lo: f64,
    hi: f64,
}

impl Panel {
    fn new(y0: f64, points: &[(f64, f64)]) -> Panel {
        let xmax = points.iter().map(|p| nines(p.0)).fold(1.0, f64::max);
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
        Panel { y0, xmax, lo, hi }
    }
    fn px(&self, q: f64) -> f64 {
        LEFT + nines(q) / self.xmax * PLOT_W
    }
    fn py(&self, ns: f64) -> f64 {
        self.y0 + PANEL - (ns.log10() - self.lo) / (self.hi - self.lo) * PANEL
    }
}

pub fn render_svg(report: &Report) -> String {
    let layout = Layout::of(report);
    let (width, height) = (layout.width, layout.height);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>"#
    );
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
        let panel = Panel::new(y0, &points);
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="{:.1}" font-size="14" font-weight="bold">{}</text>"#,
            y0 - 14.0,
            title(w)
        );
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{y0}" width="{PLOT_W}" height="{PANEL}" fill="none" stroke="#333"/>"##
        );
        y_axis(&mut s, &panel);
        x_axis(&mut s, &panel);
        series(&mut s, &panel, w);
    }
    s.push_str("</svg>\n");
    s
}

/// Horizontal grid lines and labels, 1-2-5 per decade, and the axis title.
fn y_axis(s: &mut String, p: &Panel) {
    let mut decade = p.lo;
    while decade <= p.hi {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powf(decade);
            if v.log10() > p.hi + 1e-9 {
                break;
            }
            y_tick(s, p.py(v), "#ddd", &label_ns(v));
        }
        decade += 1.0;
    }
    let mid = p.y0 + PANEL / 2.0;
    let _ = writeln!(
        s,
        r#"<text x="16" y="{mid:.1}" text-anchor="middle" transform="rotate(-90 16 {mid:.1})">send→recv latency (log)</text>"#
    );
}

/// Vertical grid lines at 50 %, 90 %, 99 %, … and the axis title.
fn x_axis(s: &mut String, p: &Panel) {
    for (q, label) in [
        (0.5, "50%"),
        (0.9, "90%"),
        (0.99, "99%"),
        (0.999, "99.9%"),
        (0.9999, "99.99%"),
    ] {
        if nines(q) > p.xmax + 1e-9 {
            continue;
        }
        let x = p.px(q);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{}" y2="{:.1}" stroke="#ddd"/>"##,
            p.y0,
            p.y0 + PANEL
        );
        let _ = writeln!(
            s,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#,
            p.y0 + PANEL + 16.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">percentile</text>"#,
        LEFT + PLOT_W / 2.0,
        p.y0 + PANEL + 34.0
    );
}

/// One line per build, and its legend entry right of the panel.
fn series(s: &mut String, p: &Panel, w: &crate::analysis::WorkloadAnalysis) {
    for (k, row) in w.rows.iter().enumerate() {
        let path: Vec<String> = row
            .distribution
            .iter()
            .filter(|d| d.1 > 0.0)
            .map(|&(q, ns)| format!("{:.1},{:.1}", p.px(q), p.py(ns)))
            .collect();
        let c = color(&row.build);
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        legend_entry(s, p.y0, k, c, &legend_label(row));
    }
}

/// Ticks at round values (1, 2 or 5 times a power of ten apart) covering `lo..=hi`, about
/// `target` of them.
pub(crate) fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        return Vec::new();
    }
    let raw = (hi - lo) / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    // Multiples of the step, so 0 is exactly 0 and labels are exact.
    (first..=last).map(|k| k as f64 * step).collect()
}

/// A tick's label with as many decimals as the step between `ticks` needs.
pub(crate) fn tick_label(v: f64, ticks: &[f64]) -> String {
    let step = match ticks {
        [a, b, ..] => (b - a).abs(),
        _ => 1.0,
    };
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    let v = if v == 0.0 { 0.0 } else { v };
    format!("{v:.decimals$}")
}

/// A horizontal grid line across the plot at `y`, labelled left of it.
fn y_tick(s: &mut String, y: f64, stroke: &str, label: &str) {
    let _ = writeln!(
        s,
        r#"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="{stroke}"/>"#,
        LEFT + PLOT_W
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"#,
        LEFT - 6.0,
        y + 4.0
    );
}

/// The `k`-th legend entry right of a panel whose top is `y0`: a line sample and its label.
fn legend_entry(s: &mut String, y0: f64, k: usize, color: &str, label: &str) {
    let ly = y0 + 14.0 + k as f64 * 20.0;
    let lx = LEFT + PLOT_W + 14.0;
    let _ = writeln!(
        s,
        r#"<line x1="{lx:.1}" x2="{:.1}" y1="{ly:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="3"/>"#,
        lx + 20.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}">{label}</text>"#,
        lx + LEGEND_SAMPLE,
        ly + 4.0
    );
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
    use super::rounds::render_rounds_svg;
    use super::*;

    #[test]
    fn the_svg_has_a_line_per_build_and_is_well_formed() {
        let svg = render_svg(&crate::testing::fixtures::report());
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(
            svg.matches("<polyline").count(),
            4,
            "release, lto, lto+pgo, oracle"
        );
        assert!(svg.contains("lto+pgo: median 182 ns"), "{svg}");
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        assert_eq!(svg.matches('<').count(), svg.matches('>').count());
        roxmltree::Document::parse(&svg).expect("well-formed XML");
    }

    #[test]
    fn rounds_svg_is_drawn_when_there_are_sessions() {
        let mut none = crate::testing::fixtures::report();
        none.sessions.clear();
        assert!(render_rounds_svg(&none).is_none());
        let svg = render_rounds_svg(&crate::testing::fixtures::report()).unwrap();
        let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
        // Panels 1 and 2 are lines (5 arms, then 4 ratios), panel 3 dots (4 arms).
        assert_eq!(
            doc.descendants()
                .filter(|n| n.has_tag_name("polyline"))
                .count(),
            9
        );
        assert_eq!(
            doc.descendants()
                .filter(|n| n.has_tag_name("circle"))
                .count(),
            4 * 10
        );
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        if crate::testing::optional::have(
            "rsvg-convert (to render rounds.svg)",
            crate::testing::optional::on_path("rsvg-convert"),
            "apt-get install librsvg2-bin",
        ) {
            assert_fits(&svg);
        }
    }

    #[test]
    fn ticks_fall_on_round_values() {
        assert_eq!(nice_ticks(134.4, 215.9, 5), [140.0, 160.0, 180.0, 200.0]);
        assert_eq!(nice_ticks(-23.1, 2.4, 6), [-20.0, -15.0, -10.0, -5.0, 0.0]);
        assert_eq!(nice_ticks(-0.37, 0.41, 4), [-0.2, 0.0, 0.2, 0.4]);
        let t = nice_ticks(-0.37, 0.41, 4);
        assert_eq!(tick_label(t[0], &t), "-0.2");
        assert_eq!(tick_label(0.0, &t), "0.0");
        assert!(nice_ticks(1.0, 1.0, 4).is_empty());
    }

    /// The forest plot: a row per build against release with its interval, and the floors as
    /// bands; the layout floor's band where the workload has one, said where it has not.
    #[test]
    fn verdicts_svg_shows_each_interval_against_both_floors() {
        let mut report = crate::testing::fixtures::report();
        let sessions = crate::testing::fixtures::layout_sessions(20, 20, &[-1.0, -0.3, 0.4, 1.1]);
        let mut with_floor = crate::analysis::sessions::analyze_lockstep(
            &["agent_send_latency".into()],
            &crate::testing::fixtures::builds(),
            &sessions,
            &[],
            &crate::testing::fixtures::measure_config(),
            &crate::analysis::sessions::Pooled::none(&Default::default()),
        )
        .unwrap();
        with_floor[0].workload = "with_a_layout_floor".into();
        report.workloads.extend(with_floor);
        let svg = super::verdicts::render_verdicts_svg(&report);
        let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
        let rows: usize = report
            .workloads
            .iter()
            .map(|w| w.rows.iter().filter(|r| r.vs_release.is_some()).count())
            .sum();
        assert_eq!(
            doc.descendants()
                .filter(|n| n.has_tag_name("circle"))
                .count(),
            rows
        );
        assert!(
            svg.contains("layout floor not measured on this workload"),
            "{svg}"
        );
        let floor = report
            .workloads
            .last()
            .unwrap()
            .layout
            .as_ref()
            .unwrap()
            .floor_pct;
        assert!(
            svg.contains(&format!("layout floor ±{floor:.1} %")),
            "{svg}"
        );
        assert!(svg.contains("A/A floor ±"), "{svg}");
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        if crate::testing::optional::have(
            "rsvg-convert (to render verdicts.svg)",
            crate::testing::optional::on_path("rsvg-convert"),
            "apt-get install librsvg2-bin",
        ) {
            assert_fits(&svg);
        }
    }

    /// As a person sees it: rsvg-convert draws the SVG on a canvas 200 px larger on every
    /// side, transparent outside the picture; any drawn pixel out there is a label (or line)
    /// running past the view box. The fixture gets the longest names and figures we show.
    #[test]
    fn every_label_fits_inside_the_picture_as_rsvg_draws_it() {
        use crate::testing::optional::{have, on_path};
        if !have(
            "rsvg-convert (to render latency.svg)",
            on_path("rsvg-convert"),
            "apt-get install librsvg2-bin",
        ) {
            return;
        }
        let mut report = crate::testing::fixtures::report();
        let mut second = report.workloads[0].clone();
        second.workload = "tokio_mpsc_send_latency_with_a_long_name".into();
        for row in &mut second.rows {
            row.median_ns = 1_234_567.0;
        }
        report.workloads.push(second);
        assert_fits(&render_svg(&report));
    }

    /// rsvg-convert draws nothing of `svg` outside its view box.
    fn assert_fits(svg: &str) {
        let doc = roxmltree::Document::parse(svg).unwrap();
        let root = doc.root_element();
        let size = |k: &str| root.attribute(k).unwrap().parse::<f64>().unwrap();
        let (w, h) = (size("width"), size("height"));
        let m = 200.0;
        let padded = svg.replacen(
            &format!(r#"width="{w}" height="{h}" viewBox="0 0 {w} {h}""#),
            &format!(
                r#"width="{}" height="{}" viewBox="{} {} {} {}""#,
                w + 2.0 * m,
                h + 2.0 * m,
                -m,
                -m,
                w + 2.0 * m,
                h + 2.0 * m
            ),
            1,
        );
        assert_ne!(padded, svg, "the root element's size attributes were found");
        // A folder per call: the tests calling this run in parallel threads of one process.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("xtask-plot-{}-{call}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (input, output) = (dir.join("padded.svg"), dir.join("padded.png"));
        std::fs::write(&input, &padded).unwrap();
        let status = std::process::Command::new("rsvg-convert")
            .arg("-o")
            .arg(&output)
            .arg(&input)
            .status()
            .unwrap();
        assert!(status.success());
        let decoder = png::Decoder::new(std::io::BufReader::new(
            std::fs::File::open(&output).unwrap(),
        ));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgba);
        let (pw, ph) = (info.width as usize, info.height as usize);
        assert_eq!((pw as f64, ph as f64), (w + 2.0 * m, h + 2.0 * m));
        let inside = |x: usize, y: usize| {
            let (x, y) = (x as f64, y as f64);
            x >= m - 1.0 && x <= m + w + 1.0 && y >= m - 1.0 && y <= m + h + 1.0
        };
        let mut outside = Vec::new();
        for y in 0..ph {
            for x in 0..pw {
                if buf[(y * pw + x) * 4 + 3] != 0 && !inside(x, y) {
                    outside.push((x as f64 - m, y as f64 - m));
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            outside.is_empty(),
            "{} pixels drawn outside the {w}x{h} picture, e.g. at {:?} (picture coordinates)",
            outside.len(),
            &outside[..outside.len().min(5)]
        );
    }
}
