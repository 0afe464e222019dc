//! The `report` stage's documents, all rendered from one [`Report`] (what `report.json`
//! holds): the terminal table, `report.md` in the form of the benchmark page, the
//! benchmark-history entries. The plot is in `plot.rs`.

pub mod gate;
pub mod markdown;
pub mod plot;
pub mod publish;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::analysis::outputs::ProfileInfo;
use crate::analysis::{Judged, WorkloadAnalysis};
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

impl Against {
    /// "this commit against abc123 (HEAD~3)"
    pub fn title(&self) -> String {
        format!(
            "this commit against {} ({})",
            &self.commit[..self.commit.len().min(12)],
            self.rev
        )
    }

    /// One line a workload: each build's change with its interval and verdict.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = Vec::new();
        let mut last = "";
        for r in &self.results {
            let part = format!(
                "{} {} (±{:.1} %)",
                r.build,
                judged(&r.median),
                r.median.threshold_pct
            );
            if r.workload == last {
                let line = lines.last_mut().expect("a line per workload");
                line.push_str("; ");
                line.push_str(&part);
            } else {
                lines.push(format!("{}: {part}", r.workload));
                last = &r.workload;
            }
        }
        lines
    }
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
    pub sessions: Vec<crate::measure::lockstep::Session>,
    /// `measure.versus`'s workload-against-workload ratios per build.
    #[serde(default)]
    pub versus: Vec<crate::analysis::workloads::VersusResult>,
    /// ...and their sessions, every batch.
    #[serde(default)]
    pub versus_sessions: Vec<crate::measure::lockstep::Session>,
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
    pub stages: Vec<crate::base::stage::StageRun>,
    /// The BOLT stage's record, when it ran: its profile, BOLT's report, the proof.
    #[serde(default)]
    pub bolt: Option<crate::analysis::outputs::BoltBuild>,
    /// The layout stage's record: each variant, its seed, what moved, its instructions.
    #[serde(default)]
    pub layout: Option<crate::analysis::outputs::LayoutVariants>,
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
            .config
            .measure
            .workloads
            .iter()
            .any(|w| w.name == workload && w.mode == crate::config::Mode::Process)
    }

    /// The median, p95 and p99 columns of `row`: ns, or the run's ms for a whole-process
    /// workload (no tail).
    pub(crate) fn time_columns(&self, workload: &str, row: &crate::analysis::Row) -> [String; 3] {
        let service = self
            .config
            .config
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

pub(crate) fn floor_line(report: &Report, w: &WorkloadAnalysis) -> String {
    let mut line = nulls_line(w);
    let paired = report
        .sessions
        .iter()
        .any(|s| s.workload == w.workload && s.paired);
    if let Some(c) = &w.components {
        let _ = write!(
            line,
            "; A/A sd of {} {:.2} %, of sessions {:.2} %",
            if paired { "pairs" } else { "rounds" },
            100.0 * c.rounds_sd,
            100.0 * c.sessions_sd
        );
    }
    if paired {
        line += " (whole-process: one run a turn, each comparison's two runs side by side)";
    } else if report.whole_process(&w.workload) {
        line += " (whole-process: one run a turn)";
    }
    if let Some(m) = &w.machine {
        let _ = write!(line, "\n  {}", m.line(w.sessions));
    }
    line
}

/// The null arm (it should hold 0) and what each build's interval carries beyond its
/// sessions: its run component, where runs of the same executables showed one.
pub(crate) fn nulls_line(w: &WorkloadAnalysis) -> String {
    let mut parts: Vec<String> = w
        .nulls
        .iter()
        .map(|(arm, e)| {
            format!(
                "{arm} {:+.2} % [{:+.2}, {:+.2}]{}",
                e.change_pct,
                e.ci_low_pct,
                e.ci_high_pct,
                if e.holds_zero() {
                    ""
                } else {
                    " (does NOT hold 0)"
                }
            )
        })
        .collect();
    if parts.is_empty() {
        parts.push(format!("A/A {}", stats::describe(&w.aa.median.estimate)));
    }
    let files = if w.fresh_copies {
        "every arm from a fresh copy of its file each session"
    } else {
        "each arm from its own file (`measure.fresh_copies = false`): what stays with a file is in no interval"
    };
    format!("null arm: {} ({files}); {}", parts.join(", "), runs_text(w))
}

/// What runs of the same executables say, per build, in a few words; for a build that carries
/// a component, what it added to the median's interval.
pub(crate) fn runs_text(w: &WorkloadAnalysis) -> String {
    let runs = &w.runs;
    // A build's median interval as judged, and its sessions' alone (from their standard
    // error, at the interval's own error and degrees of freedom), half-widths in %.
    let halves = |build: &str| -> Option<(f64, f64)> {
        let e = &w
            .rows
            .iter()
            .find(|r| r.build == build)?
            .vs_release
            .as_ref()?
            .median
            .estimate;
        let se = w.raw.iter().find(|(b, _, _)| b == build)?.2;
        let alone = 100.0 * stats::sequential::t_two_sided(e.df?.max(1), e.alpha()) * se;
        Some(((e.ci_high_pct - e.ci_low_pct) / 2.0, alone))
    };
    if runs.is_empty() || runs.iter().all(|(_, t)| t.runs <= 1) {
        return "run component: none estimated (no earlier run of these executables: intervals are this run's sessions alone)".to_string();
    }
    let level = stats::components::RUN_TEST_LEVEL;
    let each: Vec<String> = runs
        .iter()
        .map(|(build, t)| match t.carried {
            _ if t.runs <= 1 => format!("{build} first run"),
            Some(c) => format!(
                "{build} CARRIES sd {:.2} % ({} runs scatter beyond their intervals: p {:.2}; {} degree{} of freedom){}",
                100.0 * c.sd,
                t.runs,
                t.p,
                c.df,
                if c.df == 1 { "" } else { "s" },
                halves(build)
                    .map(|(judged, alone)| format!(
                        ": its interval ±{judged:.2} % where its sessions alone give ±{alone:.2} %"
                    ))
                    .unwrap_or_default()
            ),
            None if t.seen() => format!(
                "{build} scatters beyond its intervals ({} runs, p {:.2}): not carried until {} runs (few runs give Student's t of 4 to 13)",
                t.runs,
                t.p,
                stats::components::MIN_RUN_DF + 1
            ),
            None => format!("{build} none ({} runs, p {:.2})", t.runs, t.p),
        })
        .collect();
    format!(
        "run component (carried where runs of the same executables scatter beyond their intervals, Cochran's Q at p < {level}): {}",
        each.join("; ")
    )
}

fn judged(j: &Judged) -> String {
    format!("{} → {}", stats::describe(&j.estimate), j.verdict.text())
}

/// The layout floor and what the relinked builds' layouts say, one line each; none where the
/// workload's sessions carried no layout variants.
pub(crate) fn layout_lines(w: &WorkloadAnalysis) -> Vec<String> {
    let Some(l) = &w.layout else {
        return Vec::new();
    };
    let mut lines = vec![l.line()];
    lines.extend(l.gains.iter().map(|g| g.line()));
    for (arm, e) in &l.bolt_vs_layouts {
        lines.push(format!(
            "lto+pgo+bolt against {arm} (a random layout of lto+pgo): {}",
            stats::describe(e)
        ));
    }
    lines
}

/// The terminal table.
pub fn render_table(report: &Report) -> String {
    let mut out = String::new();
    for w in &report.workloads {
        let _ = writeln!(
            out,
            "{}: {}; {}",
            w.workload,
            w.basis(),
            floor_line(report, w)
        );
        let _ = writeln!(
            out,
            "  {:<12} {:>8} {:>8} {:>8} {:>10}  median vs release (verdict beyond ±threshold)",
            "build", "median", "p95", "p99", "instr/msg"
        );
        for row in &w.rows {
            let delta = match &row.vs_release {
                None => report.description(&row.build).to_string(),
                Some(c) => format!(
                    "{} (±{:.1} %, {})",
                    judged(&c.median),
                    c.median.threshold_pct,
                    c.median.bound.text()
                ),
            };
            let [median, p95, p99] = report.time_columns(&w.workload, row);
            let _ = writeln!(
                out,
                "  {:<12} {median:>8} {p95:>8} {p99:>8} {:>10}  {delta}",
                row.build,
                fmt_instr(row.instructions_per_message)
            );
        }
        for row in w.rows.iter().filter(|_| !report.whole_process(&w.workload)) {
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
        for line in w.speeds_lines() {
            let _ = writeln!(out, "  {line}");
        }
        if let Some(line) = w.capture_line() {
            let _ = writeln!(out, "  {line}");
        }
        if let Some(line) = w.bolt_line() {
            let _ = writeln!(out, "  {line}");
        }
        for line in layout_lines(w) {
            let _ = writeln!(out, "  {line}");
        }
        if let Some(note) = w.rows.iter().find_map(|r| r.instructions_note.as_deref()) {
            let _ = writeln!(out, "  instr/msg: {note}");
        }
        out.push('\n');
    }
    out.push_str(&crate::analysis::workloads::render_table(&report.versus));
    if let Some(a) = &report.against {
        let _ = writeln!(out, "{}, median, in the same sessions:", a.title());
        for line in a.lines() {
            let _ = writeln!(out, "  {line}");
        }
        out.push('\n');
    }
    out.push_str(&apply_line(report));
    if let (false, Some(compare)) = (report.comparators.is_empty(), &report.config.config.compare) {
        out.push('\n');
        out.push_str(&crate::measure::comparators::render(
            &report.comparators,
            compare,
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
    if !report.profile.origin.is_empty() {
        line.push_str(&format!("  origin: {}\n", report.profile.origin));
    }
    if !report.profile.skipped_raw.is_empty() {
        line.push_str(&format!(
            "  merged without {} unreadable raw profile(s) (--skip-bad-profiles): {}\n",
            report.profile.skipped_raw.len(),
            report.profile.skipped_raw.join("; ")
        ));
    }
    line
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
        r.config.config.measure.workloads[0].batch_messages = Some(9001);
        let md = crate::report::markdown::render_markdown(&r);
        assert!(md.contains("9001 messages, its arms pinned"), "{md}");
        let w = &mut r.config.config.measure.workloads[0];
        (w.share_core, w.sessions, w.name) = (Some(false), Some(4), "w".into());
        let md = crate::report::markdown::render_markdown(&r);
        let line = "- `w`: 4 sessions, batches of 9001 messages, its arms not pinned (`share_core = false`: it runs several threads).";
        assert!(md.contains(line), "{md}");
    }

    #[test]
    fn the_table_matches_the_expected_file() {
        expect_file(
            "table.txt",
            &render_table(&crate::testing::fixtures::report()),
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
