//! `measure.versus`'s answer in words: workload against workload on the same build, as the
//! terminal's lines and report.md's section, each ratio with its interval.

use std::fmt::Write as _;

use crate::analysis::workloads::VersusResult;
use stats::Estimate;

use crate::report::words;

/// One result's figures, as both renderings show them: the median ratio, p99, p99.9 and
/// instructions per message.
fn figures(r: &VersusResult) -> [String; 4] {
    let tail = |e: &Option<Estimate>| {
        e.as_ref()
            .map_or_else(|| "not reported".to_string(), words::ratio)
    };
    [
        words::ratio(&r.median),
        tail(&r.p99),
        tail(&r.p999),
        r.instructions_ratio
            .map_or_else(|| "not counted".to_string(), |x| format!("{x:.3}×")),
    ]
}

/// The terminal lines (none when nothing was compared).
pub fn versus_lines(results: &[VersusResult]) -> String {
    let mut out = String::new();
    for r in results {
        let [median, p99, p999, instructions] = figures(r);
        let _ = writeln!(
            out,
            "{} / {} on {}, paired in lockstep: median {median}, p99 {p99}, p99.9 {p999}, instructions per message {instructions}",
            r.subject, r.reference, r.build,
        );
    }
    out
}

/// report.md's section (none when nothing was compared).
pub fn versus_markdown(md: &mut String, results: &[VersusResult]) {
    let Some(first) = results.first() else {
        return;
    };
    let _ = writeln!(
        md,
        "## Workload against workload\n\nThe same build running two workloads, taking turns batch by batch in the same sessions \
         ({} sessions; the lockstep protocol and statistics of the builds' comparison): the subject's median per message over the \
         reference's, and the same for the batches' p99 and p99.9, each with its 95 % interval; instructions per message from callgrind.\n",
        first.median.pairs
    );
    let _ = writeln!(
        md,
        "| subject / reference | build | median ratio, 95 % CI | p99 ratio | p99.9 ratio | instructions ratio |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    for r in results {
        let cells = figures(r).join(" | ");
        let _ = writeln!(
            md,
            "| `{}` / `{}` | {} | {cells} |",
            r.subject, r.reference, r.build,
        );
    }
    md.push('\n');
}
