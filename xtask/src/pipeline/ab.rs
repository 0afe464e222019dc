//! `cargo xtask ab OLD NEW`: two `mty-bench` executables (two commits' release builds,
//! say) as arms of the same lockstep sessions, OLD twice (its A/A arm) and NEW once, in a
//! random order per round, for every measured workload: NEW's change against OLD with its
//! 95 % interval, judged by the same rule as the pipeline's verdicts (beyond the min effect,
//! the interval carrying the arm component from a copy of OLD in another file, unless
//! `measure.null_copy = false`). Side by side in one session is the only comparison this machine's drift allows;
//! two runs' absolute figures never are. Writes `pgo-data/ab.json`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::ctx::Ctx;
use crate::analysis::{self, Judged};
use crate::fsx;
use crate::lockstep::Session;
use crate::measure::{self, BASELINE, BASELINE_AGAIN, MeasuredArm};

/// NEW's arm.
const NEW: &str = "new";

#[derive(Debug, Serialize)]
struct Ab {
    old: PathBuf,
    new: PathBuf,
    workloads: Vec<AbWorkload>,
    sessions: Vec<Session>,
    /// Per workload, how many sessions the stopping rule ran and why it stopped.
    stopped: Vec<measure::Stopping>,
}

#[derive(Debug, Serialize)]
struct AbWorkload {
    workload: String,
    sessions: usize,
    /// OLD against itself: the floor.
    aa: Judged,
    /// NEW against OLD (median per message).
    new_vs_old: Judged,
}

pub(super) fn run(ctx: &Ctx, old: &Path, new: &Path) -> Result<()> {
    for exe in [old, new] {
        let meta = std::fs::metadata(exe).with_context(|| {
            format!(
                "`cargo xtask ab`: cannot read {} (give two built mty-bench executables)",
                exe.display()
            )
        })?;
        if !meta.is_file() {
            bail!("`cargo xtask ab`: {} is not a file", exe.display());
        }
    }
    let arm = |name: &str, exe: &Path| MeasuredArm {
        name: name.to_string(),
        exe: exe.to_path_buf(),
        extra: Vec::new(),
    };
    let mut arms = vec![arm(BASELINE, old), arm(BASELINE_AGAIN, old), arm(NEW, new)];
    let mut m = ctx.measure_config()?;
    // The run's seed, drawn now unless given: it identifies this run's records in the history.
    m.seed = Some(m.seed.unwrap_or_else(crate::stats::fresh_seed));
    let m = &m;
    // NEW is another file: OLD's bytes in another file are the null its arm component
    // rests on, as release's copy is in the pipeline's sessions.
    if m.null_copy {
        let copy = ctx.data.join("copy").join("ab-old");
        fsx::copy_atomic(old, &copy)?;
        arms.push(arm(&measure::copy_arm(BASELINE), &copy));
    }
    eprintln!(
        "ab: {} (old, twice) against {} (new), at most {} sessions per workload",
        old.display(),
        new.display(),
        m.lockstep.sessions
    );
    let (sessions, stopped) = measure::run_lockstep(&arms, m)?;
    let names: Vec<String> = m.workloads.iter().map(|w| w.name.clone()).collect();
    let builds = [BASELINE.to_string(), NEW.to_string()];
    // This workload's copies of earlier runs pool with this run's copy of OLD.
    let analysed = analysis::sessions::analyze_recorded(
        &ctx.data.join("history.json"),
        &names,
        &builds,
        &sessions,
        m,
        &stopped,
    )?;
    let workloads: Vec<AbWorkload> = analysed
        .into_iter()
        .map(|w| {
            let new_vs_old = w
                .rows
                .iter()
                .find(|r| r.build == NEW)
                .and_then(|r| r.vs_release.clone())
                .with_context(|| format!("`{}`: no comparison of new with old", w.workload))?;
            Ok(AbWorkload {
                workload: w.workload,
                sessions: w.sessions,
                aa: w.aa.median,
                new_vs_old: new_vs_old.median,
            })
        })
        .collect::<Result<_>>()?;
    println!("\nnew against old, median per message, paired in the same sessions:");
    for w in &workloads {
        let e = &w.new_vs_old.estimate;
        println!(
            "  {:<26} {:+.2} % [{:+.2}, {:+.2}]  ({}; A/A {:+.2} % [{:+.2}, {:+.2}], threshold {:.1} %, {} sessions)",
            w.workload,
            e.change_pct,
            e.ci_low_pct,
            e.ci_high_pct,
            w.new_vs_old.verdict.text(),
            w.aa.estimate.change_pct,
            w.aa.estimate.ci_low_pct,
            w.aa.estimate.ci_high_pct,
            w.new_vs_old.threshold_pct,
            w.sessions,
        );
    }
    let out = ctx.data.join("ab.json");
    fsx::write_json(
        &out,
        &Ab {
            old: old.to_path_buf(),
            new: new.to_path_buf(),
            workloads,
            sessions,
            stopped,
        },
    )?;
    println!("wrote {}", out.display());
    Ok(())
}
