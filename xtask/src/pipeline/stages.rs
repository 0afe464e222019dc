//! The stages: their names and help, running one (or reusing it when it is up to date, see
//! `fresh.rs`), and the timing table printed at the end of every run, also a failed one.

use std::time::Instant;

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::Ctx;
use super::fresh::{Artifacts, Inputs, Recorded, missing_artifact};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Doctor,
    Instrument,
    Train,
    Merge,
    Optimize,
    Bolt,
    Insight,
    Oracle,
    Baselines,
    Measure,
    Report,
}

impl Stage {
    /// Every stage, in the order the pipeline runs them.
    pub const ALL: [Stage; 11] = [
        Stage::Doctor,
        Stage::Instrument,
        Stage::Train,
        Stage::Merge,
        Stage::Optimize,
        Stage::Bolt,
        Stage::Insight,
        Stage::Oracle,
        Stage::Baselines,
        Stage::Measure,
        Stage::Report,
    ];

    /// Its name on the command line, in the timing table and in `pgo-data/stages/<name>.json`.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Doctor => "doctor",
            Stage::Instrument => "instrument",
            Stage::Train => "train",
            Stage::Merge => "merge",
            Stage::Optimize => "optimize",
            Stage::Bolt => "bolt",
            Stage::Insight => "insight",
            Stage::Oracle => "oracle",
            Stage::Baselines => "baselines",
            Stage::Measure => "measure",
            Stage::Report => "report",
        }
    }

    pub fn help(self) -> &'static str {
        match self {
            Stage::Doctor => "rustc and a version-matched llvm-profdata",
            Stage::Instrument => "the -Cprofile-generate build (cargo profile release-pgo)",
            Stage::Train => "the training workloads; raw profiles into pgo-data/raw/",
            Stage::Merge => "raw profiles -> pgo-data/merged-<hash>.profdata",
            Stage::Optimize => "the lto+pgo build, and the check that the profile applied",
            Stage::Bolt => {
                "BOLT after PGO: relinked with relocations, instrumented, trained, optimised (bolt.enabled)"
            }
            Stage::Insight => {
                "what the profile holds; each measured workload profiled alone and compared with the training"
            }
            Stage::Oracle => {
                "the oracle build: PGO from the measured workloads' own profiles (never shipped)"
            }
            Stage::Baselines => "the release (no LTO, no PGO) and lto (fat LTO only) builds",
            Stage::Measure => "the measured workloads on every build, interleaved",
            Stage::Report => {
                "statistics, the table, report.json, report.md, latency.svg, benchmark.json, history.jsonl"
            }
        }
    }

    pub fn parse(name: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Stages that build with cargo: they always ask cargo, which decides what to compile.
    /// (`bolt` builds with cargo too, but its output is BOLT's, from a training: it is reused
    /// by its inputs, which include everything the relinked build depends on.)
    fn builds(self) -> bool {
        matches!(
            self,
            Stage::Instrument | Stage::Optimize | Stage::Oracle | Stage::Baselines
        )
    }
}

/// How a stage of this run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ran,
    /// Up to date: its recorded output was reused (a build stage: cargo found it fresh).
    Reused,
    /// Not needed in this run (e.g. no training with `--profile`).
    Skipped,
    Failed,
}

/// One line of the timing table, also kept in report.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRun {
    pub stage: String,
    pub seconds: f64,
    pub outcome: Outcome,
    /// The stage's input fingerprint, when it has one (`doctor` has none: it always runs).
    #[serde(default)]
    pub fingerprint: Option<String>,
}

/// Times each stage; prints a table of them at the end, even when the pipeline failed.
#[derive(Default)]
pub struct Timer {
    pub runs: Vec<StageRun>,
}

impl Timer {
    pub fn section<T>(&mut self, stage: Stage, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.section_named(stage.name(), f)
    }

    pub fn section_named<T>(&mut self, name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let start = Instant::now();
        let result = f().with_context(|| format!("stage `{name}` failed"));
        self.runs.push(StageRun {
            stage: name.to_string(),
            seconds: start.elapsed().as_secs_f64(),
            outcome: if result.is_ok() {
                Outcome::Ran
            } else {
                Outcome::Failed
            },
            fingerprint: None,
        });
        result
    }

    /// A stage this run does not need, said on the terminal and in the table.
    pub fn skip(&mut self, stage: Stage, why: &str) {
        eprintln!("{}: skipped ({why})", stage.name());
        self.runs.push(StageRun {
            stage: stage.name().to_string(),
            seconds: 0.0,
            outcome: Outcome::Skipped,
            fingerprint: None,
        });
    }

    fn last_is(&mut self, outcome: Outcome, fingerprint: &str) {
        if let Some(last) = self.runs.last_mut() {
            last.outcome = outcome;
            last.fingerprint = Some(fingerprint.to_string());
        }
    }

    pub fn print(&self) {
        if self.runs.is_empty() {
            return;
        }
        let total: f64 = self.runs.iter().map(|s| s.seconds).sum();
        eprintln!("\n{:<12} {:>9} {:>7}", "stage", "seconds", "share");
        for run in &self.runs {
            let share = if total > 0.0 {
                100.0 * run.seconds / total
            } else {
                0.0
            };
            let mark = match run.outcome {
                Outcome::Ran => "",
                Outcome::Reused => "  reused",
                Outcome::Skipped => "  skipped",
                Outcome::Failed => "  FAILED",
            };
            eprintln!("{:<12} {:>9.1} {share:>6.1}%{mark}", run.stage, run.seconds);
        }
        eprintln!("{:<12} {total:>9.1}", "total");
    }
}

/// Runs `stage` as `f`, or reuses its recorded output when it is up to date: the fingerprint
/// of `inputs` equals the recorded one, the stage is not forced (`--force`), and every
/// artifact the output points to is still there with its recorded content hash. A build stage
/// always runs (cargo decides what to compile) and counts as up to date when, in addition,
/// cargo compiled nothing. Records the output and its inputs after a run.
pub fn run<T>(
    ctx: &Ctx,
    timer: &mut Timer,
    stage: Stage,
    inputs: Inputs,
    f: impl FnOnce() -> Result<T>,
) -> Result<T>
where
    T: Serialize + DeserializeOwned + Artifacts,
{
    let fp = inputs.fingerprint();
    let recorded: Option<Recorded> = ctx.load_inputs(stage);
    let same = recorded.as_ref().is_some_and(|r| r.fingerprint == fp);
    let forced = ctx.forced(stage);
    let mut why = match &recorded {
        _ if forced => "forced".to_string(),
        None => "no earlier run recorded".to_string(),
        Some(r) if !same => format!("changed: {}", r.changed(&inputs).join(", ")),
        Some(_) => String::new(),
    };
    if same && !forced && !stage.builds() {
        let start = Instant::now();
        match ctx.load::<T>(stage) {
            Ok(out) => match missing_artifact(&out)? {
                None => {
                    eprintln!("{}: up to date (fingerprint {fp})", stage.name());
                    timer.runs.push(StageRun {
                        stage: stage.name().to_string(),
                        seconds: start.elapsed().as_secs_f64(),
                        outcome: Outcome::Reused,
                        fingerprint: Some(fp),
                    });
                    return Ok(out);
                }
                Some(gone) => why = format!("inputs unchanged, but {gone}"),
            },
            Err(err) => why = format!("inputs unchanged, but {err:#}"),
        }
    }
    let out = timer.section(stage, f)?;
    ctx.record(stage, &out)?;
    ctx.record_inputs(stage, &inputs.record())?;
    if stage.builds() && same && !forced && out.compiled() == 0 {
        eprintln!(
            "{}: up to date (fingerprint {fp}; cargo: fresh)",
            stage.name()
        );
        timer.last_is(Outcome::Reused, &fp);
    } else {
        if why.is_empty() {
            why = format!(
                "inputs unchanged, but cargo compiled {} crate(s)",
                out.compiled()
            );
        }
        eprintln!("{}: ran ({why})", stage.name());
        timer.last_is(Outcome::Ran, &fp);
    }
    Ok(out)
}

/// Doctor's output: not fingerprinted (it always runs), never reused.
impl Artifacts for crate::toolchain::Toolchain {
    fn artifacts(&self) -> Vec<(std::path::PathBuf, Option<String>)> {
        Vec::new()
    }
}
