//! Where the instructions go: callgrind's output files (`--callgrind-out-file`) read for each
//! function's own cost (its self cost: the instructions of its own code, not of the functions
//! it calls), and the report's section that sets the builds side by side per function. With
//! the runs of N and 2N messages differenced as for the totals, a function's figure is what
//! it executes per message, and the figures of one build add up to its total exactly.
//!
//! The format (valgrind's docs, "Callgrind Format Specification"): header lines (`events:`,
//! `positions:`, `summary:`), `fn=` naming the function the following cost lines belong to,
//! names compressed as `(id) name` on first use and `(id)` after (`fn=` and `cfn=` share one
//! table), and a `calls=` line whose next cost line is the inclusive cost of that call: it
//! belongs to the callee and is not counted as the caller's own.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::instructions::InstructionCount;

/// One function's own instructions per message on one build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCost {
    pub name: String,
    pub per_message: f64,
}

/// A callgrind output file: its events, its `totals:` line (the sum of every cost it lists;
/// its `summary:` line where it has none), and each function's self cost per event
/// (functions of the same name, e.g. monomorphisations, summed).
#[derive(Debug, Default)]
pub struct Profile {
    pub events: Vec<String>,
    pub totals: Vec<u64>,
    pub functions: BTreeMap<String, Vec<u64>>,
}

impl Profile {
    /// The self cost of every function for `event`.
    pub fn event(&self, event: &str) -> BTreeMap<&str, u64> {
        let Some(i) = self.events.iter().position(|e| e == event) else {
            return BTreeMap::new();
        };
        self.functions
            .iter()
            .map(|(name, costs)| (name.as_str(), costs.get(i).copied().unwrap_or(0)))
            .collect()
    }
}

/// Parses a callgrind output file. Checks that the self costs add up to the file's own
/// totals, event by event; an error says which event and both sums. (`summary:`, the
/// whole run's cost, can exceed `totals:` by a few instructions run after the last dump:
/// seen here, 2 of 13.9 million. They are the same in the N- and 2N-message runs, so they
/// cancel in the difference.)
pub fn parse(text: &str) -> Result<Profile, String> {
    let mut profile = Profile::default();
    let mut summary = Vec::new();
    let mut positions = 1;
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut current = String::from("???");
    let mut call_cost_next = false;
    for line in text.lines() {
        let first = line.bytes().next().unwrap_or(b' ');
        if first.is_ascii_digit() || matches!(first, b'+' | b'-' | b'*') {
            if std::mem::take(&mut call_cost_next) {
                continue;
            }
            let costs = profile.functions.entry(current.clone()).or_default();
            for (i, v) in line.split_whitespace().skip(positions).enumerate() {
                let v: u64 = v
                    .parse()
                    .map_err(|_| format!("a cost line with `{v}` where a count belongs: {line}"))?;
                if costs.len() <= i {
                    costs.resize(i + 1, 0);
                }
                costs[i] += v;
            }
        } else if let Some(rest) = line.strip_prefix("fn=") {
            current = name(&mut names, rest);
        } else if let Some(rest) = line.strip_prefix("cfn=") {
            name(&mut names, rest);
        } else if line.starts_with("calls=") {
            call_cost_next = true;
        } else if let Some(rest) = line.strip_prefix("events:") {
            profile.events = rest.split_whitespace().map(String::from).collect();
        } else if let Some(rest) = line.strip_prefix("positions:") {
            positions = rest.split_whitespace().count().max(1);
        } else if let Some(rest) = line.strip_prefix("summary:") {
            summary = counts(rest, line)?;
        } else if let Some(rest) = line.strip_prefix("totals:") {
            profile.totals = counts(rest, line)?;
        }
    }
    if profile.totals.is_empty() {
        profile.totals = summary;
    }
    if profile.events.is_empty() || profile.totals.is_empty() {
        return Err(
            "no `events:`, or neither `totals:` nor `summary:`: not a callgrind output file".into(),
        );
    }
    for (i, event) in profile.events.iter().enumerate() {
        let sum: u64 = profile
            .functions
            .values()
            .map(|c| c.get(i).copied().unwrap_or(0))
            .sum();
        let total = profile.totals.get(i).copied().unwrap_or(0);
        if sum != total {
            return Err(format!(
                "the functions' {event} add up to {sum}, the file's totals say {total}"
            ));
        }
    }
    Ok(profile)
}

fn counts(values: &str, line: &str) -> Result<Vec<u64>, String> {
    values
        .split_whitespace()
        .map(|v| v.parse().map_err(|_| format!("a count of `{v}`: {line}")))
        .collect()
}

/// `(id) name` defines id, `(id)` refers to it, `name` alone is uncompressed.
fn name(names: &mut BTreeMap<String, String>, spec: &str) -> String {
    let spec = spec.trim();
    match spec.strip_prefix('(').and_then(|s| s.split_once(')')) {
        Some((id, rest)) => {
            let rest = rest.trim();
            if rest.is_empty() {
                names.get(id).cloned().unwrap_or_else(|| format!("({id})"))
            } else {
                names.insert(id.to_string(), rest.to_string());
                rest.to_string()
            }
        }
        None => spec.to_string(),
    }
}

/// Each function's instructions per message: the 2N-message run's self cost less the
/// N-message run's, over N; every function whose cost differs, most first. They add up to
/// the total per message.
pub fn per_message(n_run: &Profile, two_n_run: &Profile, n: u64) -> Vec<FunctionCost> {
    let (a, b) = (n_run.event("Ir"), two_n_run.event("Ir"));
    let mut out: Vec<FunctionCost> = a
        .keys()
        .chain(b.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter_map(|name| {
            let d =
                b.get(name).copied().unwrap_or(0) as f64 - a.get(name).copied().unwrap_or(0) as f64;
            (d != 0.0).then(|| FunctionCost {
                name: name.to_string(),
                per_message: d / n as f64,
            })
        })
        .collect();
    out.sort_by(|x, y| {
        y.per_message
            .total_cmp(&x.per_message)
            .then(x.name.cmp(&y.name))
    });
    out
}

/// Rows per workload: the union of each build's `TOP` costliest functions.
const TOP: usize = 8;

/// The report's section: per workload, the costliest functions of each build side by side.
pub fn render_markdown(md: &mut String, instructions: &[InstructionCount]) {
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

    /// Real output: callgrind 3.19 with `--branch-sim=yes --cache-sim=yes` (13 events) on
    /// `mty-bench agent_send_latency --messages 50 --untimed`, collecting only under
    /// `mty_bench::latency::mailbox` (`--toggle-collect`) to keep the file small.
    const REAL: &str = include_str!("../testdata/callgrind.mailbox.out");

    #[test]
    fn a_real_file_is_read_by_function_and_adds_up_to_its_summary() {
        let p = parse(REAL).unwrap();
        assert_eq!(p.events.len(), 13);
        assert_eq!(&p.events[..2], ["Ir", "Dr"]);
        assert_eq!(p.totals[0], 1_854_184);
        let ir = p.event("Ir");
        assert_eq!(ir.values().sum::<u64>(), 1_854_184);
        // The mailbox's own send runs once per message: at least one instruction each.
        let send = ir["mty_runtime::mailbox::MailboxSender<M>::send_single"];
        assert!(send >= 50, "{send}");
        // Totals that disagree with the functions are refused, naming the event; the
        // summary (the whole run's cost) is only the fallback.
        let off = REAL.replace("totals: 1854184 567628", "totals: 1854184 567629");
        assert_eq!(
            parse(&off).unwrap_err(),
            "the functions' Dr add up to 567628, the file's totals say 567629"
        );
        assert!(parse(&REAL.replace("summary: 1854184 ", "summary: 1854186 ")).is_ok());
        let no_totals = REAL.replace("totals: ", "# ");
        assert!(parse(&no_totals).is_ok());
        assert_eq!(
            parse(&no_totals.replace("summary: 1854184 ", "summary: 1854186 ")).unwrap_err(),
            "the functions' Ir add up to 1854184, the file's totals say 1854186"
        );
        assert_eq!(
            parse("events: Ir\n").unwrap_err(),
            "no `events:`, or neither `totals:` nor `summary:`: not a callgrind output file"
        );
    }

    #[test]
    fn a_calls_cost_is_the_callees_and_names_are_shared_by_fn_and_cfn() {
        let text = "positions: line\nevents: Ir Bc\nfn=(1) main\n1 10 2\ncfn=(2) work\ncalls=3 5\n1 100 7\n+2 4\nfn=(2)\n5 100 7\nfn=plain name\n* 1\nsummary: 115 9\n";
        let p = parse(text).unwrap();
        assert_eq!(
            p.functions["main"],
            [14, 2],
            "the call's 100 is not main's own"
        );
        assert_eq!(p.functions["work"], [100, 7], "`fn=(2)` is cfn's `work`");
        assert_eq!(p.functions["plain name"], [1]);
    }

    fn profile(costs: &[(&str, u64)]) -> Profile {
        Profile {
            events: vec!["Ir".into()],
            totals: vec![costs.iter().map(|c| c.1).sum()],
            functions: costs
                .iter()
                .map(|(n, c)| (n.to_string(), vec![*c]))
                .collect(),
        }
    }

    #[test]
    fn per_message_costs_are_differences_over_n_and_add_up() {
        let a = profile(&[("setup", 5000), ("send", 1000), ("recv", 800)]);
        let b = profile(&[
            ("setup", 5000),
            ("send", 2000),
            ("recv", 1600),
            ("grow", 50),
        ]);
        let f = per_message(&a, &b, 100);
        let got: Vec<(&str, f64)> = f.iter().map(|c| (c.name.as_str(), c.per_message)).collect();
        assert_eq!(
            got,
            [("send", 10.0), ("recv", 8.0), ("grow", 0.5)],
            "setup differs by nothing"
        );
        let total = (b.totals[0] - a.totals[0]) as f64 / 100.0;
        assert_eq!(f.iter().map(|c| c.per_message).sum::<f64>(), total);
    }

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
        render_markdown(&mut md, &instructions);
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
