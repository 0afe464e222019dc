//! report.md's BOLT section: the tool, how the profile was made, the proof it applied, the
//! relink's instructions, BOLT's dyno-stats.

use std::fmt::Write as _;

use crate::analysis::outputs::BoltBuild;

/// report.md's BOLT section.
pub fn render(md: &mut String, b: &BoltBuild) {
    let r = &b.report;
    let _ = writeln!(
        md,
        "## BOLT after PGO\n\n`{}` ({}), instrumentation mode: the PGO build relinked with `-Wl,-q`, {}, then `llvm-bolt -data=… {}`.\n",
        b.tools.llvm_bolt.display(),
        b.tools.version,
        if b.given {
            format!(
                "optimised with the given profile `{}` (`bolt.profile`: not trained in this run)",
                b.profile.display()
            )
        } else {
            "instrumented by BOLT, trained with the `[train]` mix, `merge-fdata`".to_string()
        },
        b.options.join(" ")
    );
    let _ = writeln!(
        md,
        "- Profile applied: {} (BOLT's count); of the required paths: {}.",
        crate::report::words::bolt_profiled(r.functions_profiled, r.functions_total),
        b.required
            .iter()
            .map(|(p, n)| format!("`{p}` {n} functions"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    match b.relink_instructions {
        Some((relinked, plain)) => {
            let _ = writeln!(
                md,
                "- Relinking with relocations: {relinked:.1} instructions per message against lto+pgo's {plain:.1} (the relink must not change the code)."
            );
        }
        None => {
            let _ = writeln!(
                md,
                "- Relinking with relocations: instructions per message not counted (no valgrind)."
            );
        }
    }
    if !r.dyno.is_empty() {
        let _ = writeln!(
            md,
            "\n| BOLT dyno-stats (training mix) | after | change |\n|---|---:|---|"
        );
        for (what, count, change) in &r.dyno {
            let _ = writeln!(md, "| {what} | {count} | {change} |");
        }
    }
    md.push('\n');
}
