//! `measure.versus`'s answer in words: workload against workload on the same build, as the
//! terminal's lines and report.md's section, each ratio with its interval.

use std::fmt::Write as _;

use crate::analysis::workloads::VersusResult;
use stats::Estimate;

/// "1.04× [1.03, 1.05]".
pub fn ratio(e: &Estimate) -> String {
    let r = |pct: f64| 1.0 + pct / 100.0;
    format!(
        "{:.3}× [{:.3}, {:.3}]",
        e.ratio,
        r(e.ci_low_pct),
        r(e.ci_high_pct)
    )
}

fn ratio_or_none(e: &Option<Estimate>) -> String {
    e.as_ref().map_or_else(|| "not reported".to_string(), ratio)
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
            ratio(&r.median),
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
            ratio(&r.median),
            ratio_or_none(&r.p99),
            ratio_or_none(&r.p999),
            instructions_ratio(r)
        );
    }
    md.push('\n');
}
