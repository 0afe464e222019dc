//! `cargo xtask pgo --check [--baseline FILE]`: the release gate. Fails when PGO is not
//! significantly faster than release by the configured gain, or when this run regressed
//! beyond its noise floor against a stored report. Each failure names the figure and by how
//! much.

use anyhow::{Result, bail};

use crate::report::Report;
use crate::stats;

const PGO: &str = "release-pgo";

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
        for w in &report.workloads {
            let Some(old) = base.workloads.iter().find(|o| o.workload == w.workload) else {
                continue;
            };
            for row in &w.rows {
                let Some(old_row) = old.rows.iter().find(|r| r.build == row.build) else {
                    continue;
                };
                let change = (row.median_ns / old_row.median_ns - 1.0) * 100.0;
                let floor = stats::noise_floor_pct(&w.aa.median.estimate)
                    .max(report.config.config.measure.min_effect_pct);
                if change > floor {
                    out.push(format!(
                        "`{}` {}: median {:.1} ns is {change:.1} % above the baseline's {:.1} ns, beyond the noise floor of {floor:.1} %",
                        w.workload, row.build, row.median_ns, old_row.median_ns
                    ));
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
    use crate::report::tests::fixture;

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
                "`agent_send_latency`: PGO median is 10.0 % faster, 95 % CI [9.9, 10.0]"
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
        old.workloads[0].rows[2].median_ns = 150.0;
        old.workloads[0].rows[2].instructions_per_message = Some(900.0);
        let f = failures(&now, Some(&old));
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].starts_with("`agent_send_latency` release-pgo: median 181.0 ns is 20.7 % above the baseline's 150.0 ns, beyond the noise floor of 1.0 %"), "{}", f[0]);
        assert!(
            f[1].contains("917.0 instructions/message is 1.9 % above the baseline's 900.0"),
            "{}",
            f[1]
        );
    }
}
