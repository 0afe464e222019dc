//! Running a stage (or reusing it when it is up to date, see
//! `fresh.rs`), and the timing table printed at the end of every run, also a failed one.

use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::ctx::Ctx;
use super::fresh::{Artifacts, Inputs, Recorded, missing_artifact};
use crate::base::stages::{Outcome, Stage, StageRun};

/// Times each stage; prints a table of them at the end, even when the pipeline failed.
#[derive(Default)]
pub struct Timer {
    pub runs: Vec<StageRun>,
    /// The stages that ran beside the others (their seconds overlap the chain's).
    pub beside: Vec<String>,
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

    /// Another timer's stages, run beside this one's (a thread of their own).
    pub fn alongside(&mut self, other: Timer) {
        for run in other.runs {
            self.beside.push(run.stage.clone());
            self.runs.push(run);
        }
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
        // The total is the chain's: stages run beside it overlap it.
        let total: f64 = self
            .runs
            .iter()
            .filter(|s| !self.beside.contains(&s.stage))
            .map(|s| s.seconds)
            .sum();
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
            // A stage beside the chain has no share of its total: it overlapped it.
            if self.beside.contains(&run.stage) {
                eprintln!(
                    "{:<12} {:>9.1} {:>7}{mark}",
                    run.stage, run.seconds, "beside"
                );
            } else {
                eprintln!("{:<12} {:>9.1} {share:>6.1}%{mark}", run.stage, run.seconds);
            }
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
