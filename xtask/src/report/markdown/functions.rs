//! report.md's "Where the instructions go": per workload, each build's costliest functions
//! by callgrind's self cost per message, side by side.

use std::fmt::Write as _;

use crate::measure::instructions::InstructionCount;

/// Rows per workload: the union of each build's `TOP` costliest functions.
const TOP: usize = 8;

/// The report's section: per workload, the costliest functions of each build side by side.
pub fn render(md: &mut String, instructions: &[InstructionCount]) {
    let mut workloads: Vec<&str> = Vec::new();
    let broken_down = |i: &&InstructionCount| !i.functions.is_empty() || i.functions_note.is_some();
    for i in instructions.iter().filter(broken_down) {
        if !workloads.contains(&i.workload.as_str()) {
            workloads.push(&i.workload);
        }
    }
    if workloads.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## Where the instructions go (callgrind, per message)\n\n\
         Each function's own instructions per message (its self cost: code inlined into it counts as its own, \
         the functions it calls as theirs), from the same `--untimed` runs of N and 2N messages as the totals, differenced. \
         A build's figures add up to its total. — : the function executes no instructions of its own per message on that build \
         (inlined into its callers, or not on the path).\n"
    );
    for workload in workloads {
        let _ = writeln!(md, "### {workload}: where its instructions go\n");
        let builds: Vec<&InstructionCount> = instructions
            .iter()
            .filter(|i| i.workload == workload && !i.functions.is_empty())
            .collect();
        if !builds.is_empty() {
            table(md, &builds);
        }
        for i in instructions.iter().filter(|i| i.workload == workload) {
            if let Some(why) = &i.functions_note {
                let _ = writeln!(md, "- {}: no breakdown by function: {why}", i.build);
            }
        }
        md.push('\n');
    }
}

/// One workload's table: the union of each build's costliest functions, the rest, the total.
fn table(md: &mut String, builds: &[&InstructionCount]) {
    let cost = |b: &InstructionCount, name: &str| {
        b.functions
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.per_message)
    };
    let mut rows: Vec<&str> = Vec::new();
    for b in builds {
        for f in b.functions.iter().take(TOP) {
            if !rows.contains(&f.name.as_str()) {
                rows.push(&f.name);
            }
        }
    }
    // Costliest on any build first.
    let key = |n: &str| {
        builds
            .iter()
            .filter_map(|b| cost(b, n))
            .fold(f64::MIN, f64::max)
    };
    rows.sort_by(|x, y| key(y).total_cmp(&key(x)).then(x.cmp(y)));
    let header: Vec<&str> = builds.iter().map(|b| b.build.as_str()).collect();
    let _ = writeln!(md, "| function | {} |", header.join(" | "));
    let _ = writeln!(md, "|---|{}", "---:|".repeat(builds.len()));
    for name in &rows {
        let cells: Vec<String> = builds
            .iter()
            .map(|b| cost(b, name).map_or("—".to_string(), |c| format!("{c:.1}")))
            .collect();
        let _ = writeln!(
            md,
            "| `{}` | {} |",
            name.replace('|', "\\|"),
            cells.join(" | ")
        );
    }
    let others: Vec<String> = builds
        .iter()
        .map(|b| {
            let shown: f64 = rows.iter().filter_map(|name| cost(b, name)).sum();
            format!("{:.1}", b.per_message.unwrap_or(0.0) - shown)
        })
        .collect();
    let _ = writeln!(md, "| the other functions | {} |", others.join(" | "));
    let totals: Vec<String> = builds
        .iter()
        .map(|b| {
            b.per_message
                .map_or("—".to_string(), |t| format!("**{t:.1}**"))
        })
        .collect();
    let _ = writeln!(md, "| all | {} |", totals.join(" | "));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::callgrind::FunctionCost;

    #[test]
    fn the_section_sets_the_builds_side_by_side() {
        let count = |build: &str, total: f64, f: &[(&str, f64)]| InstructionCount {
            workload: "w".into(),
            build: build.into(),
            per_message: Some(total),
            functions: f
                .iter()
                .map(|(n, c)| FunctionCost {
                    name: n.to_string(),
                    per_message: *c,
                })
                .collect(),
            ..InstructionCount::default()
        };
        let many: Vec<(String, f64)> = (0..10)
            .map(|i| (format!("f{i}"), 10.0 - i as f64))
            .collect();
        let many: Vec<(&str, f64)> = many.iter().map(|(n, c)| (n.as_str(), *c)).collect();
        let instructions = [
            count("release", 100.0, &many),
            count("lto+pgo", 40.0, &[("a|b", 30.0), ("f0", 4.0)]),
            InstructionCount {
                functions_note: Some(
                    "x.out: the functions' Ir add up to 1, the file's totals say 2".into(),
                ),
                ..count("oracle", 90.0, &[])
            },
            InstructionCount {
                workload: "quiet".into(),
                ..InstructionCount::default()
            },
        ];
        let mut md = String::new();
        render(&mut md, &instructions);
        assert!(
            md.starts_with("## Where the instructions go (callgrind, per message)\n"),
            "{md}"
        );
        assert!(md.contains("### w: where its instructions go\n\n| function | release | lto+pgo |\n|---|---:|---:|\n| `a\\|b` | — | 30.0 |\n| `f0` | 10.0 | 4.0 |\n| `f1` | 9.0 | — |\n"), "{md}");
        // Release's top eight are shown; f8 and f9 (2 + 1) are among the others.
        assert!(md.contains("| `f7` | 3.0 | — |\n| the other functions | 48.0 | 6.0 |\n| all | **100.0** | **40.0** |\n- oracle: no breakdown by function: x.out: the functions' Ir add up to 1, the file's totals say 2\n\n"), "{md}");
        assert!(!md.contains("f8") && !md.contains("quiet"), "{md}");
    }
}
