//! The `report` stage's documents, all rendered from one [`Report`] (what `report.json`
//! holds): the terminal table (`table.rs`), `report.md` in the form of the benchmark page
//! (`markdown.rs`), the plots (`plot.rs` and `plot/`), the benchmark-history entries (here);
//! their words are `words.rs`'s and `lines.rs`'s.

pub mod comparators;
pub mod gate;
pub mod lines;
pub mod markdown;
pub mod plot;
pub mod publish;
pub mod table;
pub mod words;
pub mod workload_ratios;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::analysis::WorkloadAnalysis;
use crate::analysis::outputs::ProfileInfo;
use crate::base::exec::Cmd;
use crate::config::LoadedConfig;
use crate::measure::instructions::InstructionCount;
use crate::toolchain::build::Built;
use crate::toolchain::warnings::ApplyReport;

/// The version of report.json's shape; `--baseline` refuses another.
pub const SCHEMA: u32 = 6;

/// `--against REV`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Against {
    pub rev: String,
    pub commit: String,
    pub results: Vec<crate::analysis::AgainstResult>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub schema: u32,
    pub generated_unix_secs: u64,
    /// The run's seed: the arms' places and turn orders (`cargo xtask pgo --seed N` replays
    /// them).
    #[serde(default)]
    pub seed: u64,
    pub config: LoadedConfig,
    pub environment: Environment,
    pub profile: ProfileInfo,
    /// The optimised build's PGO warnings and whether the profile applied.
    pub apply_check: ApplyReport,
    /// What the profile holds and how the training compares with each measured workload.
    #[serde(default)]
    pub insight: Option<crate::analysis::outputs::InsightReport>,
    pub builds: Vec<Built>,
    /// Per workload: rows, paired comparisons, noise floor.
    pub workloads: Vec<WorkloadAnalysis>,
    pub instructions: Vec<InstructionCount>,
    /// The same workload on other implementations (`cargo xtask compare`).
    pub comparators: Vec<crate::measure::comparators::Row>,
    /// Every lockstep session, every batch.
    pub sessions: Vec<crate::measure::session::Session>,
    /// `measure.versus`'s workload-against-workload ratios per build.
    #[serde(default)]
    pub versus: Vec<crate::analysis::workloads::VersusResult>,
    /// ...and their sessions, every batch.
    #[serde(default)]
    pub versus_sessions: Vec<crate::measure::session::Session>,
    /// Per workload and `versus` pair: the stopping rule's sessions, why they stopped, and
    /// where their time went.
    #[serde(default)]
    pub stopped: Vec<crate::measure::Stopping>,
    /// `--against REV`: this commit against that one, per workload and build.
    #[serde(default)]
    pub against: Option<Against>,
    /// The stages of the run that wrote this report, before the report itself: which ran
    /// and which were reused (up to date), with their fingerprints and seconds.
    #[serde(default)]
    pub stages: Vec<crate::base::stages::StageRun>,
    /// The BOLT stage's record, when it ran: its profile, BOLT's report, the proof.
    #[serde(default)]
    pub bolt: Option<crate::analysis::outputs::BoltBuild>,
    /// The layout stage's record: each variant, its seed, what moved, its instructions.
    #[serde(default)]
    pub layout: Option<crate::analysis::outputs::LayoutVariants>,
    /// What each build cost (its last compile's wall time and peak memory, its sizes) and
    /// the training's wall time.
    #[serde(default)]
    pub costs: Option<crate::toolchain::cost::Costs>,
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

impl Report {
    /// Whether `workload` was measured whole-process: one run per turn, so its sample is the
    /// run's time (shown in ms) and a batch has no tail of its own (no p95, p99).
    pub(crate) fn whole_process(&self, workload: &str) -> bool {
        self.config
            .settings
            .measure
            .workloads
            .iter()
            .any(|w| w.name == workload && w.mode == crate::config::Mode::Process)
    }

    /// A build's figures as the table and report.md both show them: its median, p95, p99
    /// and instructions per message (a service judged by CPU: its CPU time per request,
    /// [`crate::report::words::fourth_column`]).
    pub(crate) fn figures(&self, workload: &str, row: &crate::analysis::Row) -> [String; 4] {
        let [median, p95, p99] = self.time_columns(workload, row);
        let fourth = match row.cpu_per_request_ns {
            Some(ns) => format!("{:.2} µs", ns / 1e3),
            None => fmt_instr(row.instructions_per_message),
        };
        [median, p95, p99, fourth]
    }

    /// The median, p95 and p99 columns of `row`: ns, or the run's ms for a whole-process
    /// workload (no tail).
    fn time_columns(&self, workload: &str, row: &crate::analysis::Row) -> [String; 3] {
        let service = self
            .config
            .settings
            .measure
            .workloads
            .iter()
            .any(|w| w.name == workload && w.mode == crate::config::Mode::Service);
        if service {
            // The driver's own percentiles over its run, per turn: request latencies in µs.
            return [row.median_ns, row.p95_ns, row.p99_ns].map(|v| format!("{:.1} µs", v / 1e3));
        }
        match self.whole_process(workload) {
            true => [
                format!("{:.2} ms", row.median_ns / 1e6),
                "–".into(),
                "–".into(),
            ],
            false => [row.median_ns, row.p95_ns, row.p99_ns].map(|v| format!("{v:.1}")),
        }
    }

    pub(crate) fn description(&self, build: &str) -> &str {
        self.builds
            .iter()
            .find(|b| b.name() == build)
            .map(|b| b.description.as_str())
            .unwrap_or("")
    }

    pub(crate) fn rustc_release(&self) -> &str {
        self.environment
            .rustc_vv
            .lines()
            .find_map(|l| l.strip_prefix("release: "))
            .unwrap_or("?")
    }
}

pub(crate) fn fmt_instr(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "n/a".into())
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
            // Each figure with its own interval against release.
            let range = |m: crate::measure::session::Metric| {
                let j = row.vs_release.as_ref()?.0.get(&m)?;
                Some(format!(
                    "{:+.1} % .. {:+.1} % vs release",
                    j.estimate.ci_low_pct, j.estimate.ci_high_pct
                ))
            };
            if let Some(cpu) = row.cpu_per_request_ns {
                out.push(BenchmarkEntry {
                    name: format!("{} {} cpu_per_request", w.workload, row.build),
                    unit: "ns".into(),
                    value: cpu,
                    range: range(crate::measure::session::Metric::CpuPerRequest),
                });
            }
            out.push(BenchmarkEntry {
                name: format!("{} {} median", w.workload, row.build),
                unit: "ns".into(),
                value: row.median_ns,
                range: range(crate::measure::session::Metric::Median),
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

/// The checkout's commit ("unknown" outside git) and whether it has local changes.
pub fn git_state(root: &Path) -> (String, bool) {
    let git = |args: &[&str]| {
        Cmd::new("git")
            .arg("-C")
            .arg(root.display().to_string())
            .args(args.iter().copied())
            .read()
            .ok()
    };
    (
        git(&["rev-parse", "HEAD"])
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| "unknown".into()),
        git(&["status", "--porcelain"]).is_some_and(|s| !s.trim().is_empty()),
    )
}

/// The host and checkout the numbers were measured on.
pub fn environment(root: &Path, toolchain: &crate::toolchain::tools::Toolchain) -> Environment {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let (git_commit, git_dirty) = git_state(root);
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
        git_commit,
        git_dirty,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fixtures::expect_file;

    /// report.json read back gives the figures it was written from, to the last bit: a
    /// re-rendered report.md (`pgo report`) says what the first did, even of a median on a
    /// rounding edge (serde_json's `float_roundtrip`; without it, 111.64999999999999 came
    /// back 1 ulp up and printed 111.7 where the run had printed 111.6).
    #[test]
    fn figures_read_back_from_json_are_the_ones_written() {
        for x in [
            111.64999999999999f64,
            0.1 + 0.2,
            1.0 / 3.0,
            5e-324,
            123456.78901234567,
        ] {
            let back: f64 = serde_json::from_str(&serde_json::to_string(&x).unwrap()).unwrap();
            assert_eq!(back.to_bits(), x.to_bits(), "{x}");
        }
    }

    #[test]
    fn report_md_with_every_section_matches_the_expected_file() {
        let md = crate::report::markdown::render_markdown(&crate::testing::fixtures::full_report());
        assert!(md.contains("Protocol: **lockstep**"), "{md}");
        assert!(md.contains("(rounds.svg)"), "{md}");
        expect_file("report-full.md", &md);
    }

    /// A workload with its own lockstep keys gets a line saying how it was measured.
    #[test]
    fn a_workloads_own_lockstep_keys_are_stated_in_report_md() {
        let mut r = crate::testing::fixtures::report();
        assert!(!crate::report::markdown::render_markdown(&r).contains("batches of"));
        r.config.settings.measure.workloads[0].batch_messages = Some(9001);
        let md = crate::report::markdown::render_markdown(&r);
        assert!(md.contains("9001 messages, its arms pinned"), "{md}");
        let w = &mut r.config.settings.measure.workloads[0];
        (w.share_core, w.sessions, w.name) = (Some(false), Some(4), "w".into());
        let md = crate::report::markdown::render_markdown(&r);
        let line = "- `w`: 4 sessions, batches of 9001 messages, its arms not pinned (`share_core = false`: it runs several threads).";
        assert!(md.contains(line), "{md}");
    }

    #[test]
    fn the_table_matches_the_expected_file() {
        expect_file(
            "table.txt",
            &crate::report::table::render_table(&crate::testing::fixtures::report()),
        );
    }

    #[test]
    fn report_md_matches_the_expected_file() {
        expect_file(
            "report.md",
            &crate::report::markdown::render_markdown(&crate::testing::fixtures::report()),
        );
    }

    #[test]
    fn benchmark_entries_are_in_the_custom_smaller_is_better_shape() {
        let entries = benchmark_entries(&crate::testing::fixtures::report());
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
        let line: serde_json::Value =
            serde_json::from_str(&history_line(&crate::testing::fixtures::report())).unwrap();
        assert_eq!(
            line["benchmarks"].as_array().unwrap().len(),
            8,
            "a median and instructions per build"
        );
    }
}
