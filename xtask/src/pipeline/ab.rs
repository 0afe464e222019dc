//! `cargo xtask ab OLD NEW`: two `mty-bench` executables (two commits' release builds,
//! say) as arms of the same lockstep sessions, OLD twice (its A/A arm) and NEW once, in a
//! random order per round, for every measured workload: NEW's change against OLD with its
//! 95 % interval, judged by the same rule as the pipeline's verdicts (beyond the min effect).
//! Every arm runs from a fresh copy of its file every session (`measure.fresh_copies`), so
//! what stays with a file is in the sessions' spread, as in the pipeline. Side by side in one session is the only comparison this machine's drift allows;
//! two runs' absolute figures never are. Writes `pgo-data/ab.json`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::ctx::Ctx;
use crate::analysis::{self, Judged};
use crate::base::fsx;
use crate::measure::session::{Metric, Session};
use crate::measure::{self, BASELINE, BASELINE_AGAIN, MeasuredArm};
use crate::report::words;

/// NEW's arm (a comparison measured to its target, never settled early).
const NEW: &str = measure::AB_NEW;

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
    /// NEW against OLD on the primary metric (the median per message; a whole-process
    /// workload's time per run; a service's CPU per request).
    new_vs_old: Judged,
    /// That metric.
    metric: Metric,
}

/// Lockstep sessions outside the pipeline's stages (`ab`, `tune --measure`).
pub(super) struct AgainstBase {
    pub sessions: Vec<Session>,
    pub stopped: Vec<measure::Stopping>,
    /// Every arm of `others` against the base, per workload.
    pub analysed: Vec<analysis::WorkloadAnalysis>,
}

/// `base` twice (the baseline and its A/A arm) and `others`, in the same lockstep sessions on
/// `m`'s workloads; each of `others` but layout variants analysed against the base. `m.seed`
/// is drawn here unless given: it identifies the run.
pub(super) fn measure_against(
    base: &Path,
    others: Vec<MeasuredArm>,
    mut m: crate::config::Measure,
) -> Result<AgainstBase> {
    m.seed = Some(m.seed.unwrap_or_else(stats::fresh_seed));
    let arm = |name: &str, exe: &Path| MeasuredArm {
        name: name.to_string(),
        exe: exe.to_path_buf(),
        extra: Vec::new(),
    };
    let builds: Vec<String> = std::iter::once(BASELINE.to_string())
        .chain(
            others
                .iter()
                .filter(|a| {
                    measure::layout_arms_of(std::slice::from_ref(&a.name), BASELINE).is_empty()
                })
                .map(|a| a.name.clone()),
        )
        .collect();
    let mut arms = vec![arm(BASELINE, base), arm(BASELINE_AGAIN, base)];
    arms.extend(others);
    let (sessions, stopped) = measure::run_lockstep(&arms, &m)?;
    let names: Vec<String> = m.workloads.iter().map(|w| w.name.clone()).collect();
    let analysed = analysis::sessions::analyze_recorded(&names, &builds, &sessions, &m, &stopped)?;
    Ok(AgainstBase {
        sessions,
        stopped,
        analysed,
    })
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
    let m = ctx.measure_config()?;
    eprintln!(
        "ab: {} (old, twice) against {} (new), at most {} sessions per workload",
        old.display(),
        new.display(),
        m.lockstep.sessions
    );
    // A whole-process workload's figure is one run's time, an in-process one's a median per
    // message.
    let per_run: Vec<String> = m
        .workloads
        .iter()
        .filter(|w| w.mode == crate::config::Mode::Process)
        .map(|w| w.name.clone())
        .collect();
    let AgainstBase {
        sessions,
        stopped,
        analysed,
    } = measure_against(old, vec![arm(NEW, new)], m)?;
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
                aa: w.aa.primary().clone(),
                new_vs_old: new_vs_old.primary().clone(),
                metric: new_vs_old.primary_metric(),
            })
        })
        .collect::<Result<_>>()?;
    println!("\nnew against old, paired in the same sessions:");
    for w in &workloads {
        let per = if per_run.contains(&w.workload) {
            "per run".to_string()
        } else {
            format!("per message ({})", words::metric(w.metric))
        };
        println!(
            "  {:<26} {}  ({per}; A/A {}; {} sessions)",
            w.workload,
            words::judged_against(&w.new_vs_old),
            words::estimate(&w.aa.estimate),
            w.sessions,
        );
    }
    let out = ctx.pgo_data.join("ab.json");
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
