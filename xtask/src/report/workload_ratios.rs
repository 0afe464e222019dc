//! `measure.versus`'s answer in words: workload against workload on the same build, as the
//! terminal's lines and report.md's section, each ratio with its interval.

use std::fmt::Write as _;

use crate::analysis::workloads::VersusResult;
use stats::Estimate;

use crate::report::words;

fn ratio_or_none(e: &Option<Estimate>) -> String {
    e.as_ref()
        .map_or_else(|| "not reported".to_string(), words::ratio)
}

fn instructions_ratio(r: &VersusResult) -> String {
    r.instructions_ratio
        .map_or_else(|| "not counted".to_string(), |x| format!("{x:.3}×"))
}

/// The terminal lines (none when nothing was compared).
pub fn versus_lines(results: &[VersusResult]) -> String {
    let mut out = String::new();
    for r in results {
        let _ = writeln!(
            out,
            "{} / {} on {}, paired in lockstep: median {}, p99 {}, p99.9 {}, instructions per message {}",
            r.subject,
            r.reference,
            r.build,
            words::ratio(&r.median),
            ratio_or_none(&r.p99),
            ratio_or_none(&r.p999),
            instructions_ratio(r)
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
        let _ = writeln!(
            md,
            "| `{}` / `{}` | {} | {} | {} | {} | {} |",
            r.subject,
            r.reference,
            r.build,
            words::ratio(&r.median),
            ratio_or_none(&r.p99),
            ratio_or_none(&r.p999),
            instructions_ratio(r)
        );
    }
    md.push('\n');
}
