//! The terminal table: per workload, each build's figures and its judged change against
//! release, then the lines that qualify them, `--against`'s answer, the apply check and the
//! comparators. Its sentences are `words.rs`'s.

use std::fmt::Write as _;

use super::Report;
use super::words;

/// The terminal table.
pub fn render_table(report: &Report) -> String {
    let mut out = String::new();
    for w in &report.workloads {
        let _ = writeln!(
            out,
            "{}: {}; {}",
            w.workload,
            crate::report::lines::basis(w),
            crate::report::lines::floor_line(report, w)
        );
        let _ = writeln!(
            out,
            "  {:<12} {:>8} {:>8} {:>8} {:>10}  {} vs release (verdict beyond ±threshold)",
            "build",
            "median",
            "p95",
            "p99",
            words::fourth_column(w, true),
            words::primary(&w.aa)
        );
        for row in &w.rows {
            let delta = match &row.vs_release {
                None => report.description(&row.build).to_string(),
                Some(c) => words::judged_against(c.primary()),
            };
            let [median, p95, p99, instr] = report.figures(&w.workload, row);
            let _ = writeln!(
                out,
                "  {:<12} {median:>8} {p95:>8} {p99:>8} {instr:>10}  {delta}",
                row.build,
            );
        }
        for row in w.rows.iter().filter(|_| !report.whole_process(&w.workload)) {
            if let Some(c) = &row.vs_release {
                let _ = writeln!(out, "  {:<12} {}", row.build, words::other_metrics(c));
            }
        }
        if let Some(line) = crate::report::lines::service(w) {
            let _ = writeln!(out, "  {line}");
        }
        for line in crate::report::lines::speeds(w) {
            let _ = writeln!(out, "  {line}");
        }
        if let Some(line) = crate::report::lines::capture(w) {
            let _ = writeln!(out, "  {line}");
        }
        if let Some(line) = crate::report::lines::bolt(w) {
            let _ = writeln!(out, "  {line}");
        }
        for line in crate::report::lines::layout_lines(w) {
            let _ = writeln!(out, "  {line}");
        }
        if let Some(note) = w.rows.iter().find_map(|r| r.instructions_note.as_deref()) {
            let _ = writeln!(out, "  instr/msg: {note}");
        }
        out.push('\n');
    }
    out.push_str(&super::workload_ratios::versus_lines(&report.versus));
    if let Some(a) = &report.against {
        let _ = writeln!(out, "{}, in the same sessions:", words::against_title(a),);
        for line in crate::report::lines::against_lines(a) {
            let _ = writeln!(out, "  {line}");
        }
        out.push('\n');
    }
    out.push_str(&crate::report::lines::apply_line(report));
    if let (false, Some(compare)) = (
        report.comparators.is_empty(),
        &report.config.settings.compare,
    ) {
        out.push('\n');
        out.push_str(&crate::report::comparators::lines(
            &report.comparators,
            compare,
        ));
    }
    out
}
