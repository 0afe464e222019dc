//! The comparators (`cargo xtask compare`, and the report's): the same workload on other
//! implementations of the primitive, as the terminal's table and report.md's section.

use std::fmt::Write as _;

use crate::config::Compare;
use crate::measure::comparators::{Kind, Row, messages_of};
use crate::report::Report;

/// A row's threading in a word.
fn kind_word(kind: Kind) -> &'static str {
    match kind {
        Kind::SameThread => "same-thread",
        Kind::CrossThread => "cross-thread",
    }
}

/// The comparison table. Same-thread rows carry their ratio to the tokio mpsc row; the
/// cross-thread row stands alone.
pub fn lines(rows: &[Row], cfg: &Compare) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "comparators ({} interleaved rounds, {} messages a run ({} cross-thread), capacity 8; medians over runs of each run's percentile, ns,\n\
         computed here from every comparator's raw values; clock overhead included, not subtracted)",
        cfg.rounds,
        cfg.messages,
        messages_of(cfg, Kind::CrossThread)
    );
    let reference = rows
        .iter()
        .find(|r| r.name.starts_with("tokio mpsc"))
        .and_then(|r| r.figures.as_ref())
        .map(|f| f.median_ns);
    for (kind, title) in [
        (Kind::SameThread, kind_word(Kind::SameThread).to_string()),
        (
            Kind::CrossThread,
            format!(
                "{} (not comparable with the rows above)",
                kind_word(Kind::CrossThread)
            ),
        ),
    ] {
        let _ = writeln!(
            s,
            "  {title:<52} {:>8} {:>8} {:>8} {:>6}  {}",
            "median",
            "p95",
            "p99",
            "clock",
            if kind == Kind::SameThread {
                "vs tokio mpsc"
            } else {
                ""
            }
        );
        for row in rows.iter().filter(|r| r.kind == kind) {
            match (&row.figures, &row.skipped) {
                (Some(f), _) => {
                    let ratio = match (kind, reference) {
                        (Kind::SameThread, Some(t)) if t > 0.0 => {
                            format!("{:.2}x", f.median_ns / t)
                        }
                        _ => String::new(),
                    };
                    let _ = writeln!(
                        s,
                        "  {:<52} {:>8.1} {:>8.1} {:>8.1} {:>6.0}  {ratio}",
                        row.name, f.median_ns, f.p95_ns, f.p99_ns, f.clock_overhead_ns
                    );
                }
                (None, Some(why)) => {
                    let _ = writeln!(s, "  {:<52} {why}", row.name);
                }
                (None, None) => {}
            }
        }
    }
    s
}

/// The same workload on other implementations (when measured).
pub fn markdown(md: &mut String, report: &Report) {
    if let (false, Some(cfg)) = (
        report.comparators.is_empty(),
        &report.config.settings.compare,
    ) {
        let _ = writeln!(
            md,
            "## Comparators\n\nThe same workload, capacity 8, {} messages a run ({} for the cross-thread row), {} interleaved rounds; percentiles computed by xtask from every \
             row's raw values (nearest rank), medians over runs. Same-thread and cross-thread rows are never compared.\n",
            cfg.messages,
            cfg.messages.min(cfg.cross_thread_messages),
            cfg.rounds
        );
        let _ = writeln!(
            md,
            "| implementation | threads | median (ns) | p95 (ns) | p99 (ns) | clock overhead (ns) |"
        );
        let _ = writeln!(md, "|---|---|---:|---:|---:|---:|");
        for row in &report.comparators {
            let kind = kind_word(row.kind);
            match (&row.figures, &row.skipped) {
                (Some(f), _) => {
                    let _ = writeln!(
                        md,
                        "| {} | {kind} | {:.1} | {:.1} | {:.1} | {:.0} |",
                        row.name, f.median_ns, f.p95_ns, f.p99_ns, f.clock_overhead_ns
                    );
                }
                (None, why) => {
                    let _ = writeln!(
                        md,
                        "| {} | {kind} | {} | | | |",
                        row.name,
                        why.as_deref().unwrap_or("")
                    );
                }
            }
        }
        md.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::comparators::{CV_NAME, Figures, GO_NAME};

    #[test]
    fn skipped_rows_show_the_install_hint_and_no_ratio_crosses_kinds() {
        let f = |m: f64| {
            Some(Figures {
                runs: 1,
                median_ns: m,
                p95_ns: m,
                p99_ns: m,
                clock_overhead_ns: 25.0,
                shape: String::new(),
                per_run: vec![],
            })
        };
        let rows = vec![
            Row { name: "tokio mpsc (release)".into(), kind: Kind::SameThread, figures: f(150.0), skipped: None },
            Row { name: "Mighty mailbox, Block: send (release)".into(), kind: Kind::SameThread, figures: f(180.0), skipped: None },
            Row { name: CV_NAME.into(), kind: Kind::CrossThread, figures: f(3600.0), skipped: None },
            Row { name: GO_NAME.into(), kind: Kind::SameThread, figures: None, skipped: Some("skipped: Go toolchain `go` not found; install with `apt-get install golang-go`".into()) },
        ];
        let cfg = Compare {
            messages: 10,
            cross_thread_messages: 5,
            warmup: 0,
            rounds: 1,
            seed: 1,
            timeout_secs: 1,
        };
        let table = lines(&rows, &cfg);
        assert!(table.contains("1.20x"), "{table}");
        assert!(
            table.contains("10 messages a run (5 cross-thread)"),
            "{table}"
        );
        assert_eq!(messages_of(&cfg, Kind::CrossThread), 5);
        let few = Compare {
            cross_thread_messages: 50,
            ..cfg.clone()
        };
        assert_eq!(
            messages_of(&few, Kind::CrossThread),
            10,
            "never more than `messages`"
        );
        assert_eq!(messages_of(&few, Kind::SameThread), 10);
        assert!(table.contains("apt-get install golang-go"), "{table}");
        let cv_line = table.lines().find(|l| l.contains(CV_NAME)).unwrap();
        assert!(
            cv_line.trim_end().ends_with("25"),
            "no ratio on the cross-thread row: {cv_line}"
        );
    }
}
