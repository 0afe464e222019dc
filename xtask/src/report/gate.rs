//! `cargo xtask pgo --check [--baseline FILE]`: the release gate. Fails when PGO is not
//! significantly faster than release by the configured gain, or when this run regressed
//! against a stored report: a build's paired change against release moved beyond the noise
//! threshold, or its instructions per message grew by more than 1 %. Each failure names the
//! figure and by how much.

use anyhow::{Result, bail};

use crate::report::Report;
use crate::stats;

const PGO: &str = "lto+pgo";

/// Every reason the gate fails; empty when it passes.
pub fn failures(report: &Report, baseline: Option<&Report>) -> Vec<String> {
    let mut out = Vec::new();
    let check = &report.config.config.check;
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
        let e = &c.median.estimate;
        // Significantly faster by the gain: the whole interval below −max(gain, threshold).
        let needed = check.min_pgo_gain_pct.max(c.median.threshold_pct);
        if e.ci_high_pct >= -needed {
            out.push(format!(
                "`{name}`: PGO median is {} against release; the gate needs the whole interval beyond {needed:.1} % faster \
                 (min_pgo_gain_pct {:.1} %, noise threshold {:.1} %)",
                stats::describe(e),
                check.min_pgo_gain_pct,
                c.median.threshold_pct
            ));
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
                if let (Some(now), Some(then)) = (&row.vs_release, &old_row.vs_release) {
                    let (a, b) = (
                        then.median.estimate.change_pct,
                        now.median.estimate.change_pct,
                    );
                    let limit = now.median.threshold_pct;
                    if b - a > limit {
                        out.push(format!(
                            "`{}` {}: median against release went from {a:+.1} % to {b:+.1} % ({:+.1} points), beyond the noise threshold of {limit:.1} %",
                            w.workload,
                            row.build,
                            b - a
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
    use crate::fixtures::report as fixture;

    #[test]
    fn passes_when_pgo_is_significantly_faster_by_the_gain() {
        let mut r = fixture();
        r.config.config.check.min_pgo_gain_pct = 5.0;
        assert_eq!(failures(&r, None), Vec::<String>::new());
    }

    #[test]
    fn fails_naming_the_figure_when_the_gain_is_not_reached() {
        let mut r = fixture();
        r.config.config.check.min_pgo_gain_pct = 15.0;
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
            .median
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
            "`agent_send_latency` lto+pgo: median against release went from -20.0 % to -10.2 % (+9.8 points), beyond the noise threshold of 1.0 %"
        );
        assert!(
            f[1].contains("917.0 instructions/message is 1.9 % above the baseline's 900.0"),
            "{}",
            f[1]
        );
    }
}
