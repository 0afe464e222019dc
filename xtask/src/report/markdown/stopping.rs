//! report.md's "Sessions" section: how many sessions each workload ran, why it stopped, and
//! where the measured core's time went.

use std::fmt::Write as _;

use crate::report::words;
use stats::sequential;

/// How many sessions each workload ran, why it stopped, and where the measured core's time
/// went.
pub fn render(md: &mut String, stopped: &[crate::measure::Stopping]) {
    if stopped.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## Sessions\n\nHow many sessions each workload ran and why it stopped; the measured core's seconds (set-up it waited for, \
         moving the arms onto it, the turns, closing) against the seconds inside the arms' batches; set-up ran on the other core, \
         overlapped with the turns before.\n\n\
         | workload | sessions | stopped | measured core | in batches | overhead | set-up (other core) | waited | move | turns | close |\n\
         |---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for s in stopped {
        let t = &s.timing;
        let why = words::stop_reason(s);
        let _ = writeln!(
            md,
            "| `{}` | {} | {why} | {:.1} s | {:.1} s | {} | {:.1} s | {:.1} s | {:.1} s | {:.1} s | {:.1} s |",
            s.workload,
            s.sessions,
            s.secs,
            t.batch_secs,
            s.overhead_pct()
                .map_or("–".to_string(), |p| format!("{p:.0} %")),
            t.setup_secs,
            t.waited_secs,
            t.move_secs,
            t.turns_secs,
            t.close_secs,
        );
    }
    let _ = writeln!(md);
    let stops: Vec<(&str, &crate::measure::ComparisonStop)> = stopped
        .iter()
        .flat_map(|s| s.comparisons.iter().map(|c| (s.workload.as_str(), c)))
        .collect();
    if stops.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "Each comparison stopped on its own: at the count its pilot planned for its target, or earlier, at a look (the pilot, then \
         each doubling), once its interval lay beyond every threshold its verdict could face by more than its half-width; an \
         arm left the sessions when every comparison needing it had stopped. An interval spends {:.0} % of error at its planned \
         count and less at a look, {:.0} % in all (`xtask/stats/src/sequential.rs`).\n\n\
         | workload | comparison | for | sessions | stopped on |\n\
         |---|---|---|---:|---|",
        100.0 * sequential::ALPHA_PLANNED,
        100.0 * sequential::ALPHA
    );
    for (workload, c) in stops {
        let role = words::role(c.role);
        let _ = writeln!(
            md,
            "| `{workload}` | {} vs {} | {role} | {}{} | {} |",
            c.cand,
            c.base,
            c.sessions,
            if c.unit.within_sessions() {
                format!(" {} ({} sessions)", words::units(c.unit), c.through)
            } else {
                String::new()
            },
            words::stop(c)
        );
    }
    let _ = writeln!(md);
}
