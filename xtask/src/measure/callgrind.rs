//! Where the instructions go: callgrind's output files (`--callgrind-out-file`) read for each
//! function's own cost (its self cost: the instructions of its own code, not of the functions
//! it calls; the report's section that sets the builds side by side is
//! `report/markdown/functions.rs`). With
//! the runs of N and 2N messages differenced as for the totals, a function's figure is what
//! it executes per message, and the figures of one build add up to its total exactly.
//!
//! The format (valgrind's docs, "Callgrind Format Specification"): header lines (`events:`,
//! `positions:`, `summary:`), `fn=` naming the function the following cost lines belong to,
//! names compressed as `(id) name` on first use and `(id)` after (`fn=` and `cfn=` share one
//! table), and a `calls=` line whose next cost line is the inclusive cost of that call: it
//! belongs to the callee and is not counted as the caller's own.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
/// whole run's cost, can exceed `totals:` by a few instructions run after the last dump.
/// They are the same in the N- and 2N-message runs, so they
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

/// Per-message figures from callgrind's simulators, differenced between N and 2N messages.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Simulated {
    /// Conditional branches executed, and mispredicted.
    pub cond_branches: f64,
    pub cond_mispredicts: f64,
    /// Indirect branches executed, and mispredicted.
    pub indirect_branches: f64,
    pub indirect_mispredicts: f64,
    /// First-level instruction and data cache misses, and last-level misses (both kinds).
    pub i1_misses: f64,
    pub d1_misses: f64,
    pub ll_misses: f64,
}

/// callgrind's `Events :` and `Collected :` lines, as a map from event to count.
pub fn parse_events(stderr: &str) -> Option<BTreeMap<String, u64>> {
    let after = |key: &str| {
        stderr
            .lines()
            .find_map(|l| Some(l.split_once(key)?.1.split_whitespace().collect::<Vec<_>>()))
    };
    let (names, values) = (after("Events    :")?, after("Collected :")?);
    if names.len() != values.len() {
        return None;
    }
    names
        .into_iter()
        .zip(values)
        .map(|(n, v)| Some((n.to_string(), v.parse().ok()?)))
        .collect()
}

/// Per message: the difference of the 2N and N runs' events, over N.
pub fn simulated(
    n: &BTreeMap<String, u64>,
    two_n: &BTreeMap<String, u64>,
    messages: u64,
) -> Simulated {
    let per = |events: &[&str]| {
        events
            .iter()
            .map(|e| {
                two_n.get(*e).copied().unwrap_or(0) as f64 - n.get(*e).copied().unwrap_or(0) as f64
            })
            .sum::<f64>()
            / messages as f64
    };
    Simulated {
        cond_branches: per(&["Bc"]),
        cond_mispredicts: per(&["Bcm"]),
        indirect_branches: per(&["Bi"]),
        indirect_mispredicts: per(&["Bim"]),
        i1_misses: per(&["I1mr"]),
        d1_misses: per(&["D1mr", "D1mw"]),
        ll_misses: per(&["ILmr", "DLmr", "DLmw"]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real output: callgrind 3.19 with `--branch-sim=yes --cache-sim=yes` (13 events) on
    /// `mty-bench agent_send_latency --messages 50 --untimed`, collecting only under
    /// `mty_bench::latency::mailbox` (`--toggle-collect`) to keep the file small.
    const REAL: &str = include_str!("../../testdata/callgrind.mailbox.out");

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
}
