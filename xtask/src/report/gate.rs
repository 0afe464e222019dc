//! `cargo xtask pgo --check [--baseline FILE]`: the release gate. Fails when PGO is not
//! significantly faster than release by the configured gain, when `--against REV` measured
//! this commit significantly slower than that one, or when this run regressed against a
//! stored report: a build's paired change against release moved beyond the noise threshold,
//! or its instructions per message grew by more than 1 %. Each failure names the figure and
//! by how much.

use anyhow::{Result, bail};

use crate::report::Report;

const PGO: &str = "lto+pgo";

/// Every reason the gate fails; empty when it passes.
pub fn failures(report: &Report, baseline: Option<&Report>) -> Vec<String> {
    let mut out = Vec::new();
    let check = &report.config.settings.check;
    if check.workloads.is_empty() {
        out.push(
            "the config names no `check.workloads`: the gate would judge nothing (add `[check] workloads = [...]`)"
                .to_string(),
        );
    }
    for name in &check.workloads {
        let Some(w) = report.workloads.iter().find(|w| &w.workload == name) else {
            out.push(format!("`{name}` was not measured"));
            continue;
        };
        let Some(c) = w
            .rows
            .iter()
            .find(|r| r.build == PGO)
            .and_then(|r| r.vs_release.as_ref())
        else {
            out.push(format!("`{name}`: no PGO row"));
            continue;
        };
        let e = &c.primary().estimate;
        // Significantly faster by the gain: the whole interval below −max(gain, threshold).
        let needed = check.min_pgo_gain_pct.max(c.primary().threshold_pct);
        if e.ci_high_pct >= -needed {
            out.push(format!(
                "`{name}`: PGO {} is {} against release; the gate needs the whole interval beyond {needed:.1} % faster \
                 (min_pgo_gain_pct {:.1} %, threshold {})",
                crate::report::words::primary(c),
                crate::report::words::estimate(e),
                check.min_pgo_gain_pct,
                crate::report::words::threshold(c.primary())
            ));
        }
    }
    // `--against REV`: a significant slowdown of this commit against that one, on a checked
    // workload, fails (beyond the same threshold as every verdict).
    if let Some(a) = &report.against {
        for r in a
            .results
            .iter()
            .filter(|r| check.workloads.contains(&r.workload))
        {
            if r.primary.verdict == stats::Verdict::Slower {
                out.push(format!(
                    "`{}` {}, {}: {}",
                    r.workload,
                    r.build,
                    crate::report::words::against_title(a),
                    crate::report::words::judged_against(&r.primary)
                ));
            }
        }
    }
    if let Some(base) = baseline {
        // Absolute nanoseconds from two runs are not comparable on a shared machine (the
        // release build itself drifts between runs), so compare what each run measured in
        // pairs: each build's change against its own release run. Instructions per message
        // are deterministic and compared as they are.
        for w in &report.workloads {
            let Some(old) = base.workloads.iter().find(|o| o.workload == w.workload) else {
                continue;
            };
            for row in &w.rows {
                let Some(old_row) = old.rows.iter().find(|r| r.build == row.build) else {
                    continue;
                };
                // The same metric in both (a baseline judged on another has none to compare).
                if let (Some(now), Some(then)) = (
                    &row.vs_release,
                    old_row
                        .vs_release
                        .as_ref()
                        .and_then(|c| c.0.get(&row.vs_release.as_ref()?.primary_metric())),
                ) {
                    let (a, b) = (then.estimate.change_pct, now.primary().estimate.change_pct);
                    let limit = now.primary().threshold_pct;
                    if b - a > limit {
                        out.push(format!(
                            "`{}` {}: {} against release went from {a:+.1} % to {b:+.1} % ({:+.1} points), beyond its threshold ({})",
                            w.workload,
                            row.build,
                            crate::report::words::metric(now.primary_metric()),
                            b - a,
                            crate::report::words::threshold(now.primary())
                        ));
                    }
                }
                if let (Some(now), Some(then)) = (
                    row.instructions_per_message,
                    old_row.instructions_per_message,
                ) {
                    let change = (now / then - 1.0) * 100.0;
                    if change > 1.0 {
                        out.push(format!(
                            "`{}` {}: {now:.1} instructions/message is {change:.1} % above the baseline's {then:.1} (deterministic; limit 1 %)",
                            w.workload, row.build
                        ));
                    }
                }
            }
        }
    }
    out
}

pub fn enforce(report: &Report, baseline: Option<&Report>) -> Result<()> {
    let failed = failures(report, baseline);
    if failed.is_empty() {
        println!("gate: passed");
        return Ok(());
    }
    bail!("gate failed:\n  {}", failed.join("\n  "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fixtures::report as fixture;

    #[test]
    fn passes_when_pgo_is_significantly_faster_by_the_gain() {
        let mut r = fixture();
        r.config.settings.check.min_pgo_gain_pct = 5.0;
        assert_eq!(failures(&r, None), Vec::<String>::new());
    }

    #[test]
    fn fails_naming_the_figure_when_the_gain_is_not_reached() {
        let mut r = fixture();
        r.config.settings.check.min_pgo_gain_pct = 15.0;
        let f = failures(&r, None);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].starts_with(
                "`agent_send_latency`: PGO median is 10.2 % faster, 95 % CI [9.8, 10.6]"
            ),
            "{}",
            f[0]
        );
        assert!(f[0].contains("beyond 15.0 % faster"), "{}", f[0]);
    }

    #[test]
    fn a_config_with_nothing_to_check_fails_the_gate() {
        let mut r = fixture();
        r.config.settings.check.workloads.clear();
        let f = failures(&r, None);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].contains("names no `check.workloads`"), "{}", f[0]);
    }

    /// `--against`: a significant slowdown on a checked workload fails, naming it; a change
    /// within the floor or a gain passes.
    #[test]
    fn fails_when_this_commit_is_significantly_slower_than_the_other() {
        let mut r = fixture();
        r.config.settings.check.min_pgo_gain_pct = 5.0;
        let judged = |change: f64, low: f64, high: f64| crate::analysis::Judged {
            estimate: stats::Estimate {
                change_pct: change,
                ci_low_pct: low,
                ci_high_pct: high,
                ..r.workloads[0].aa.primary().estimate.clone()
            },
            threshold_pct: 1.0,
            bound: crate::analysis::Bound::MinEffect,
            verdict: stats::verdict(
                &stats::Estimate {
                    change_pct: change,
                    ci_low_pct: low,
                    ci_high_pct: high,
                    ..r.workloads[0].aa.primary().estimate.clone()
                },
                1.0,
            ),
        };
        let result = |build: &str, j| crate::analysis::AgainstResult {
            workload: "agent_send_latency".into(),
            build: build.into(),
            against: format!("0123456789ab:{build}"),
            primary: j,
            metric: crate::measure::session::Metric::Median,
        };
        r.against = Some(crate::report::Against {
            rev: "HEAD~1".into(),
            commit: "0123456789abcdef".into(),
            results: vec![
                result("release", judged(0.3, -0.4, 1.0)),
                result("lto+pgo", judged(-3.0, -3.5, -2.5)),
            ],
        });
        assert_eq!(failures(&r, None), Vec::<String>::new());
        r.against.as_mut().unwrap().results[1] = result("lto+pgo", judged(4.0, 3.1, 4.9));
        assert_eq!(
            failures(&r, None),
            [
                "`agent_send_latency` lto+pgo, this commit against 0123456789ab (HEAD~1): 4.0 % slower, 95 % CI [3.1, 4.9] → slower (±1.0 %, min effect)"
            ]
        );
    }

    #[test]
    fn fails_on_a_regression_against_a_baseline_report() {
        let now = fixture();
        assert_eq!(
            failures(&now, Some(&now)),
            Vec::<String>::new(),
            "a report against itself passes"
        );
        let mut old = fixture();
        // The baseline's PGO was 20 % faster than its release; now it is 10 % faster.
        old.workloads[0].rows[2]
            .vs_release
            .as_mut()
            .unwrap()
            .primary_mut()
            .estimate
            .change_pct = -20.0;
        old.workloads[0].rows[2].instructions_per_message = Some(900.0);
        // Absolute drift of every build alone is not a regression.
        for row in &mut old.workloads[0].rows {
            row.median_ns -= 30.0;
        }
        let f = failures(&now, Some(&old));
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!(
            f[0],
            "`agent_send_latency` lto+pgo: median against release went from -20.0 % to -10.2 % (+9.8 points), beyond its threshold (±1.0 %, min effect)"
        );
        assert!(
            f[1].contains("917.0 instructions/message is 1.9 % above the baseline's 900.0"),
            "{}",
            f[1]
        );
    }
}
