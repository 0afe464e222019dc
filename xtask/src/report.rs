//! The `report` stage: the terminal table in the shape of the benchmark page (build, median,
//! p95, p99, notes) and `pgo-data/report.json` with the raw per-run nanos and the toolchain,
//! host, commit and config behind them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::LoadedConfig;
use crate::exec::Cmd;
use crate::measure::{Run, median};
use crate::warnings::ApplyReport;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub schema: u32,
    pub generated_unix_secs: u64,
    pub config: LoadedConfig,
    pub environment: Environment,
    pub profile: ProfileInfo,
    /// The optimised build's PGO warnings and whether the profile applied.
    pub apply_check: ApplyReport,
    pub builds: Vec<BuildInfo>,
    /// Per workload, one row per build.
    pub workloads: Vec<WorkloadRows>,
    /// Every run, raw.
    pub runs: Vec<Run>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Environment {
    pub rustc_vv: String,
    pub llvm_profdata: PathBuf,
    pub llvm_profdata_version: String,
    pub cpu_model: String,
    pub cores: usize,
    pub kernel: String,
    pub git_commit: String,
    pub git_dirty: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileInfo {
    pub path: PathBuf,
    pub hash: String,
    pub functions: u64,
    pub max_function_count: u64,
    pub total_count: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuildInfo {
    pub name: String,
    pub cargo_profile: String,
    pub rustflags: String,
    pub exe: PathBuf,
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadRows {
    pub workload: String,
    pub rows: Vec<Row>,
}

/// One build's figures for one workload: medians over the runs of each run's percentile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub build: String,
    pub runs: usize,
    pub median_ns: f64,
    pub p95_ns: f64,
    pub p99_ns: f64,
    /// This build's median over the `release` build's median (< 1 is faster).
    pub median_ratio_vs_release: Option<f64>,
}

/// Rows per workload (in config order) and build (in `builds` order).
pub fn summarize(workloads: &[String], builds: &[String], runs: &[Run]) -> Vec<WorkloadRows> {
    workloads
        .iter()
        .map(|workload| {
            let mut rows: Vec<Row> = builds
                .iter()
                .filter_map(|build| {
                    let mine: Vec<&Run> = runs
                        .iter()
                        .filter(|r| &r.workload == workload && &r.build == build)
                        .collect();
                    let pick = |f: fn(&Run) -> u64| {
                        median(&mine.iter().map(|r| f(r) as f64).collect::<Vec<_>>())
                    };
                    Some(Row {
                        build: build.clone(),
                        runs: mine.len(),
                        median_ns: pick(|r| r.result.median_ns)?,
                        p95_ns: pick(|r| r.result.p95_ns)?,
                        p99_ns: pick(|r| r.result.p99_ns)?,
                        median_ratio_vs_release: None,
                    })
                })
                .collect();
            let base = rows
                .iter()
                .find(|r| r.build == "release")
                .map(|r| r.median_ns);
            for row in &mut rows {
                row.median_ratio_vs_release = base.filter(|b| *b > 0.0).map(|b| row.median_ns / b);
            }
            WorkloadRows {
                workload: workload.clone(),
                rows,
            }
        })
        .collect()
}

/// The terminal table.
pub fn render_table(report: &Report) -> String {
    let mut out = String::new();
    let rounds = report.config.config.measure.rounds;
    for w in &report.workloads {
        let _ = writeln!(
            out,
            "{} ({} rounds, interleaved; medians over runs, ns)",
            w.workload, rounds
        );
        let _ = writeln!(
            out,
            "  {:<12} {:>9} {:>9} {:>9}  notes",
            "build", "median", "p95", "p99"
        );
        for row in &w.rows {
            let description = report
                .builds
                .iter()
                .find(|b| b.name == row.build)
                .map(|b| b.description.as_str())
                .unwrap_or("");
            let ratio = match row.median_ratio_vs_release {
                Some(r) if row.build != "release" => format!(": {r:.3}x release median"),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "  {:<12} {:>9.1} {:>9.1} {:>9.1}  {description}{ratio}",
                row.build, row.median_ns, row.p95_ns, row.p99_ns
            );
        }
        out.push('\n');
    }
    let a = &report.apply_check;
    let crates = a
        .per_crate
        .iter()
        .map(|(k, c)| format!("{k} {}/{}", c.missing, c.mismatch))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        out,
        "profile {} ({} functions, total count {}): {}",
        report.profile.hash,
        report.profile.functions,
        report.profile.total_count,
        if a.applied() {
            "APPLIED"
        } else {
            "NOT APPLIED"
        }
    );
    let _ = writeln!(
        out,
        "  {} of the required functions ({}) lack profile data; all crates: {} without profile data, {} hash mismatches{}",
        a.required_violations.len(),
        report.config.config.apply_check.required.join(", "),
        a.missing_total,
        a.mismatch_total,
        if crates.is_empty() {
            String::new()
        } else {
            format!(" (crate missing/mismatch: {crates})")
        }
    );
    out
}

/// The host and checkout the numbers were measured on.
pub fn environment(root: &Path, toolchain: &crate::toolchain::Toolchain) -> Environment {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let git = |args: &[&str]| {
        Cmd::new("git")
            .arg("-C")
            .arg(root.display().to_string())
            .args(args.iter().copied())
            .read()
            .ok()
    };
    Environment {
        rustc_vv: toolchain.rustc_vv.clone(),
        llvm_profdata: toolchain.llvm_profdata.clone(),
        llvm_profdata_version: toolchain.llvm_profdata_version.clone(),
        cpu_model: cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into()),
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        git_commit: git(&["rev-parse", "HEAD"])
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| "unknown".into()),
        git_dirty: git(&["status", "--porcelain"]).is_some_and(|s| !s.trim().is_empty()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::WorkloadLine;

    fn run(build: &str, round: u32, median_ns: u64) -> Run {
        Run {
            workload: "lat".into(),
            build: build.into(),
            round,
            slot: 0,
            result: WorkloadLine {
                median_ns,
                p95_ns: median_ns + 50,
                p99_ns: median_ns + 100,
                max_ns: 9999,
                mean_ns: median_ns as f64,
                clock_overhead_ns: 23,
            },
        }
    }

    #[test]
    fn rows_are_medians_over_runs_with_ratios_to_release() {
        let runs = vec![
            run("release", 0, 200),
            run("release", 1, 220),
            run("release", 2, 210),
            run("release-pgo", 0, 180),
            run("release-pgo", 1, 170),
            run("release-pgo", 2, 190),
        ];
        let builds = vec![
            "release".to_string(),
            "release-lto".to_string(),
            "release-pgo".to_string(),
        ];
        let rows = summarize(&["lat".to_string()], &builds, &runs);
        let rows = &rows[0].rows;
        assert_eq!(rows.len(), 2, "a build without runs has no row");
        assert_eq!(
            (rows[0].median_ns, rows[0].p95_ns, rows[0].runs),
            (210.0, 260.0, 3)
        );
        assert_eq!(rows[0].median_ratio_vs_release, Some(1.0));
        assert_eq!(rows[1].median_ns, 180.0);
        assert_eq!(rows[1].median_ratio_vs_release, Some(180.0 / 210.0));
    }
}
