//! The `report` stage's documents, all rendered from one [`Report`] (what `report.json`
//! holds): the terminal table, `report.md` in the form of the benchmark page, the
//! benchmark-history entries. The plot is in `plot.rs`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::analysis::{Comparison, Judged, WorkloadAnalysis};
use crate::config::LoadedConfig;
use crate::exec::Cmd;
use crate::instructions::InstructionCount;
use crate::measure::{BASELINE, BASELINE_AGAIN, Run};
use crate::stats;
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
    /// Per workload: rows, paired comparisons, noise floor.
    pub workloads: Vec<WorkloadAnalysis>,
    pub instructions: Vec<InstructionCount>,
    /// The same workload on other implementations (`cargo xtask compare`).
    pub comparators: Vec<crate::compare::Row>,
    /// Every run, raw, disturbed ones included (flagged).
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
    /// What the profile was trained from, hashed (see `pgo/guard.rs`).
    #[serde(default)]
    pub fingerprint: String,
    /// Raw profiles left out by `--skip-bad-profiles`, with the reason.
    #[serde(default)]
    pub skipped_raw: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuildInfo {
    pub name: String,
    pub cargo_profile: String,
    pub rustflags: String,
    pub exe: PathBuf,
    pub description: String,
}

impl Report {
    fn description(&self, build: &str) -> &str {
        self.builds
            .iter()
            .find(|b| b.name == build)
            .map(|b| b.description.as_str())
            .unwrap_or("")
    }

    fn rustc_release(&self) -> &str {
        self.environment
            .rustc_vv
            .lines()
            .find_map(|l| l.strip_prefix("release: "))
            .unwrap_or("?")
    }
}

fn fmt_instr(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "n/a".into())
}

fn floor_line(w: &WorkloadAnalysis) -> String {
    let f = |j: &Judged| stats::noise_floor_pct(&j.estimate);
    format!(
        "A/A noise floor: median ±{:.1} %, p95 ±{:.1} %, p99 ±{:.1} %",
        f(&w.aa.median),
        f(&w.aa.p95),
        f(&w.aa.p99)
    )
}

fn judged(j: &Judged) -> String {
    format!("{} → {}", stats::describe(&j.estimate), j.verdict.text())
}

/// The terminal table.
pub fn render_table(report: &Report) -> String {
    let mut out = String::new();
    for w in &report.workloads {
        let _ = writeln!(
            out,
            "{}: {} pairs, {} dropped as disturbed; {}",
            w.workload,
            w.pairs_total,
            w.pairs_dropped,
            floor_line(w)
        );
        let _ = writeln!(
            out,
            "  {:<12} {:>8} {:>8} {:>8} {:>10}  median vs release (verdict beyond ±threshold)",
            "build", "median", "p95", "p99", "instr/msg"
        );
        for row in &w.rows {
            let delta = match &row.vs_release {
                None => report.description(&row.build).to_string(),
                Some(c) => format!("{} (±{:.1} %)", judged(&c.median), c.median.threshold_pct),
            };
            let _ = writeln!(
                out,
                "  {:<12} {:>8.1} {:>8.1} {:>8.1} {:>10}  {delta}",
                row.build,
                row.median_ns,
                row.p95_ns,
                row.p99_ns,
                fmt_instr(row.instructions_per_message)
            );
        }
        for row in &w.rows {
            if let Some(c) = &row.vs_release {
                let _ = writeln!(
                    out,
                    "  {:<12} p95: {}; p99: {}",
                    row.build,
                    judged(&c.p95),
                    judged(&c.p99)
                );
            }
        }
        if let Some(note) = w.rows.iter().find_map(|r| r.instructions_note.as_deref()) {
            let _ = writeln!(out, "  instr/msg: {note}");
        }
        out.push('\n');
    }
    out.push_str(&apply_line(report));
    if !report.comparators.is_empty() {
        out.push('\n');
        out.push_str(&crate::compare::render(
            &report.comparators,
            &report.config.config.compare,
        ));
    }
    out
}

fn apply_line(report: &Report) -> String {
    let a = &report.apply_check;
    let crates = a
        .per_crate
        .iter()
        .map(|(k, c)| format!("{k} {}/{}", c.missing, c.mismatch))
        .collect::<Vec<_>>()
        .join(", ");
    let verdict = if a.applied() {
        "APPLIED".to_string()
    } else if a.applied_but_stale() {
        format!(
            "APPLIED EXCEPT {} STALE FUNCTION(S) (hash mismatch, --allow-stale)",
            a.required_mismatched
        )
    } else {
        "NOT APPLIED".to_string()
    };
    let mut line = format!(
        "profile {} ({} functions, total count {}): {verdict}\n  {} of the required functions ({}) lack profile data or mismatch; all crates: {} without profile data, {} hash mismatches{}\n",
        report.profile.hash,
        report.profile.functions,
        report.profile.total_count,
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
    if !report.profile.skipped_raw.is_empty() {
        line.push_str(&format!(
            "  merged without {} unreadable raw profile(s) (--skip-bad-profiles): {}\n",
            report.profile.skipped_raw.len(),
            report.profile.skipped_raw.join("; ")
        ));
    }
    line
}

/// The timed region, stated once for the page.
const TIMED_REGION: &str = "Per message: `Instant::now()`; the send (`send(msg).await` under the Block policy, `try_send(msg)` under Fail); \
the `recv().await` that returns that message (for the mailbox this includes giving its bytes back to the pool); `Instant::now()`. \
Building the payload before and dropping it after are outside. Sender and receiver run one message at a time in one task on a \
current-thread tokio runtime (capacity 8), so the receive never parks. The clock overhead is measured in each process and included, \
not subtracted.";

/// `report.md`: the benchmark page.
pub fn render_markdown(report: &Report) -> String {
    let env = &report.environment;
    let cfg = &report.config.config;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Mighty mailbox: send→recv latency, release vs fat LTO vs fat LTO + PGO\n"
    );
    let _ = writeln!(
        md,
        "Generated by `cargo xtask pgo --config {}` on {} ({} cores, Linux {}), rustc {}, commit `{}`{}.\n",
        report.config.path.display(),
        env.cpu_model,
        env.cores,
        env.kernel,
        report.rustc_release(),
        env.git_commit,
        if env.git_dirty { " (dirty tree)" } else { "" }
    );
    let _ = writeln!(md, "## Workload\n\n{TIMED_REGION}\n");
    for w in &report.workloads {
        let args = cfg
            .measure
            .workloads
            .iter()
            .find(|c| c.name == w.workload)
            .map(|c| c.args.join(" "))
            .unwrap_or_default();
        let _ = writeln!(md, "- `{}`: `{} {args}`", w.workload, cfg.binary);
    }
    let _ = writeln!(md, "\n## Numbers\n");
    for w in &report.workloads {
        let _ = writeln!(
            md,
            "### {}\n\n{} pairs ({} dropped as disturbed). {}.\n",
            w.workload,
            w.pairs_total,
            w.pairs_dropped,
            floor_line(w)
        );
        let _ = writeln!(
            md,
            "| build | median (ns) | p95 (ns) | p99 (ns) | instructions/message | median vs release | verdict |"
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---|---|");
        for row in &w.rows {
            let (delta, verdict) = match &row.vs_release {
                None => (
                    report.description(&row.build).to_string(),
                    "baseline".to_string(),
                ),
                Some(c) => (
                    stats::describe(&c.median.estimate),
                    c.median.verdict.text().to_string(),
                ),
            };
            let _ = writeln!(
                md,
                "| {} | {:.1} | {:.1} | {:.1} | {} | {delta} | {verdict} |",
                row.build,
                row.median_ns,
                row.p95_ns,
                row.p99_ns,
                fmt_instr(row.instructions_per_message)
            );
        }
        md.push('\n');
    }
    if !report.comparators.is_empty() {
        let _ = writeln!(
            md,
            "## Comparators\n\nThe same workload, capacity 8, {} messages a run, {} interleaved rounds; percentiles computed by xtask from every \
             row's raw values (nearest rank), medians over runs. Same-thread and cross-thread rows are never compared.\n",
            cfg.compare.messages, cfg.compare.rounds
        );
        let _ = writeln!(
            md,
            "| implementation | threads | median (ns) | p95 (ns) | p99 (ns) | clock overhead (ns) |"
        );
        let _ = writeln!(md, "|---|---|---:|---:|---:|---:|");
        for row in &report.comparators {
            let kind = match row.kind {
                crate::compare::Kind::SameThread => "same-thread",
                crate::compare::Kind::CrossThread => "cross-thread",
            };
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
    let _ = writeln!(md, "## Recorded values\n");
    let m = &cfg.measure;
    let _ = writeln!(
        md,
        "- Protocol: {} blocks per workload (`measure.pairs`), each a random order (seed {}) of separate process runs of release (twice: the A/A pair), \
         fat LTO and PGO; ratios paired within a block; 95 % percentile-bootstrap intervals of the mean log-ratio ({} resamples); \
         Wilcoxon signed-rank as a cross-check; verdicts only beyond max({} %, A/A noise floor); {}.",
        m.pairs,
        m.seed,
        m.bootstrap_resamples,
        m.min_effect_pct,
        match m.pin_core {
            Some(c) => format!("runs pinned to CPU {c}"),
            None => "runs not pinned".into(),
        }
    );
    let _ = writeln!(
        md,
        "- Disturbed runs: more than {} involuntary context switches, or system time above {:.0} % of CPU time.",
        m.max_involuntary_switches,
        100.0 * m.max_sys_fraction
    );
    let _ = writeln!(
        md,
        "- Instructions per message: `valgrind --tool=callgrind`, runs of N and 2N messages (N = {}), differenced.",
        cfg.instructions.messages
    );
    let a = &report.apply_check;
    let _ = writeln!(
        md,
        "- Profile: `{}` ({} functions, max function count {}, total count {}), {}: {} of the required functions ({}) \
         lack profile data; in all crates {} functions without profile data, {} hash mismatches.",
        report.profile.path.display(),
        report.profile.functions,
        report.profile.max_function_count,
        report.profile.total_count,
        if a.applied() {
            "applied"
        } else {
            "NOT applied"
        },
        a.required_violations.len(),
        cfg.apply_check.required.join(", "),
        a.missing_total,
        a.mismatch_total
    );
    let _ = writeln!(
        md,
        "- llvm-profdata: `{}` ({})",
        env.llvm_profdata.display(),
        env.llvm_profdata_version
    );
    let _ = writeln!(
        md,
        "- `rustc -vV`:\n\n```text\n{}\n```\n",
        env.rustc_vv.trim_end()
    );
    let _ = writeln!(
        md,
        "## Raw nanos\n\nPer-run medians (ns), block by block; `*` marks a run flagged as disturbed.\n"
    );
    let arms = [BASELINE, BASELINE_AGAIN, "release-lto", "release-pgo"];
    for w in &report.workloads {
        let _ = writeln!(
            md,
            "### {}\n\n| block | {} |\n|---:|{}",
            w.workload,
            arms.join(" | "),
            "---:|".repeat(arms.len())
        );
        for p in 0..w.pairs_total as u32 {
            let cells: Vec<String> = arms
                .iter()
                .map(|b| {
                    report
                        .runs
                        .iter()
                        .find(|r| r.workload == w.workload && r.pair == p && r.build == *b)
                        .map(|r| {
                            format!(
                                "{}{}",
                                r.result.median_ns,
                                if r.disturbed.is_some() { "*" } else { "" }
                            )
                        })
                        .unwrap_or_else(|| "-".into())
                })
                .collect();
            let _ = writeln!(md, "| {p} | {} |", cells.join(" | "));
        }
        md.push('\n');
    }
    let _ = writeln!(md, "## Interpretation\n");
    for w in &report.workloads {
        for row in &w.rows {
            if let Some(c) = &row.vs_release {
                let _ = writeln!(
                    md,
                    "- `{}`, {} ({}) against release: median {}.",
                    w.workload,
                    row.build,
                    report.description(&row.build),
                    interpret(c)
                );
            }
        }
        let instr: Vec<String> = w
            .rows
            .iter()
            .filter_map(|r| {
                r.instructions_per_message
                    .map(|i| format!("{} {i:.1}", r.build))
            })
            .collect();
        if !instr.is_empty() {
            let _ = writeln!(
                md,
                "- `{}`, instructions per message (deterministic): {}.",
                w.workload,
                instr.join(", ")
            );
        }
    }
    let _ = writeln!(
        md,
        "- Latency alone cannot show that a profile applied; the apply check above (rustc's own missing-profile warnings) does."
    );
    md
}

fn interpret(c: &Comparison) -> String {
    format!(
        "{} → {}; p95 {} → {}; p99 {} → {}",
        stats::describe(&c.median.estimate),
        c.median.verdict.text(),
        stats::describe(&c.p95.estimate),
        c.p95.verdict.text(),
        stats::describe(&c.p99.estimate),
        c.p99.verdict.text()
    )
}

/// Entries in the widely used `customSmallerIsBetter` shape (name, unit, value).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkEntry {
    pub name: String,
    pub unit: String,
    pub value: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<String>,
}

pub fn benchmark_entries(report: &Report) -> Vec<BenchmarkEntry> {
    let mut out = Vec::new();
    for w in &report.workloads {
        for row in &w.rows {
            out.push(BenchmarkEntry {
                name: format!("{} {} median", w.workload, row.build),
                unit: "ns".into(),
                value: row.median_ns,
                range: row.vs_release.as_ref().map(|c| {
                    format!(
                        "{:+.1} % .. {:+.1} % vs release",
                        c.median.estimate.ci_low_pct, c.median.estimate.ci_high_pct
                    )
                }),
            });
            if let Some(i) = row.instructions_per_message {
                out.push(BenchmarkEntry {
                    name: format!("{} {} instructions/message", w.workload, row.build),
                    unit: "instructions".into(),
                    value: i,
                    range: None,
                });
            }
        }
    }
    out
}

/// One line of `history.jsonl`.
pub fn history_line(report: &Report) -> String {
    let line = serde_json::json!({
        "unix_secs": report.generated_unix_secs,
        "commit": report.environment.git_commit,
        "dirty": report.environment.git_dirty,
        "profile": report.profile.hash,
        "applied": report.apply_check.applied(),
        "benchmarks": benchmark_entries(report),
    });
    line.to_string()
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
pub mod tests {
    use super::*;
    use crate::analysis::{
        analyze,
        tests::{builds, synthetic_runs},
    };
    use crate::warnings::CrateCounts;

    /// A report built from synthetic runs with a fixed environment: what the expected files
    /// under `xtask/expected/` were rendered from.
    pub fn fixture() -> Report {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles/quick.toml");
        let config = crate::config::load(&root).unwrap();
        let mut config = config;
        config.path = PathBuf::from("profiles/quick.toml");
        config.config.measure.pairs = 12;
        let runs = synthetic_runs(12);
        let instructions: Vec<InstructionCount> = [
            ("release", 1106.0),
            ("release-lto", 1043.0),
            ("release-pgo", 917.0),
        ]
        .into_iter()
        .map(|(b, i)| InstructionCount {
            workload: "agent_send_latency".into(),
            build: b.into(),
            per_message: Some(i),
            totals: Some((1_000_000, 1_000_000 + (i * 2000.0) as u64)),
            note: None,
        })
        .collect();
        let workloads = analyze(
            &["agent_send_latency".into()],
            &builds(),
            &runs,
            &instructions,
            &config.config.measure,
        )
        .unwrap();
        let build = |name: &str, profile: &str, description: &str| BuildInfo {
            name: name.into(),
            cargo_profile: profile.into(),
            rustflags: String::new(),
            exe: PathBuf::from(format!("target/pgo/{name}/mty-bench")),
            description: description.into(),
        };
        let mut apply_check = ApplyReport::default();
        apply_check.per_crate.insert(
            "std".into(),
            CrateCounts {
                missing: 2,
                mismatch: 0,
            },
        );
        apply_check.missing_total = 2;
        Report {
            schema: 2,
            generated_unix_secs: 1_796_000_000,
            config,
            environment: Environment {
                rustc_vv:
                    "rustc 1.95.0 (59807616e 2026-04-14)\nrelease: 1.95.0\nLLVM version: 22.1.2"
                        .into(),
                llvm_profdata: PathBuf::from("/sysroot/bin/llvm-profdata"),
                llvm_profdata_version: "LLVM version 22.1.2-rust-1.95.0-stable".into(),
                cpu_model: "Test CPU @ 2.00GHz".into(),
                cores: 2,
                kernel: "6.1.0-test".into(),
                git_commit: "0123456789abcdef0123456789abcdef01234567".into(),
                git_dirty: false,
            },
            profile: ProfileInfo {
                path: PathBuf::from("pgo-data/merged-00000000deadbeef.profdata"),
                hash: "00000000deadbeef".into(),
                functions: 1138,
                max_function_count: 180000,
                total_count: 9704034,
                fingerprint: "0123456789abcdef".into(),
                skipped_raw: Vec::new(),
            },
            apply_check,
            builds: vec![
                build("release", "release", "baseline: no LTO, no PGO"),
                build("release-lto", "release-pgo", "fat LTO, no PGO"),
                build("release-pgo", "release-pgo", "fat LTO + PGO"),
            ],
            workloads,
            instructions,
            comparators: Vec::new(),
            runs,
        }
    }

    /// Compares with a committed expected file; `UPDATE_EXPECT=1` rewrites it.
    pub fn expect_file(name: &str, actual: &str) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("expected")
            .join(name);
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            std::fs::write(&path, actual).unwrap();
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            expected == actual,
            "{} differs from what was rendered (rerun with UPDATE_EXPECT=1 to accept):\n{actual}",
            path.display()
        );
    }

    #[test]
    fn the_table_matches_the_expected_file() {
        expect_file("table.txt", &render_table(&fixture()));
    }

    #[test]
    fn report_md_matches_the_expected_file() {
        expect_file("report.md", &render_markdown(&fixture()));
    }

    #[test]
    fn benchmark_entries_are_in_the_custom_smaller_is_better_shape() {
        let entries = benchmark_entries(&fixture());
        let json = serde_json::to_value(&entries).unwrap();
        assert_eq!(json[0]["name"], "agent_send_latency release median");
        assert_eq!(json[0]["unit"], "ns");
        assert!(json[0]["value"].is_f64());
        assert!(json[0].get("range").is_none());
        assert_eq!(
            json[1]["name"],
            "agent_send_latency release instructions/message"
        );
        assert_eq!(json[1]["value"], 1106.0);
        let line: serde_json::Value = serde_json::from_str(&history_line(&fixture())).unwrap();
        assert_eq!(line["benchmarks"].as_array().unwrap().len(), 6);
    }
}
