//! `train`: the training workloads run through the instrumented executable, each one's raw
//! profiles in a folder of its own under `pgo-data/raw/`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use super::instrument::InstrumentedBuild;
use crate::flags::PgoArgs;
use crate::pipeline::ctx::Ctx;
use crate::pipeline::fresh::{Artifacts, Inputs};
use crate::pipeline::runner::{self, Timer};
use crate::base::stages::Stage;
use crate::toolchain::tools::Toolchain;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainingRun {
    pub profraw: Vec<PathBuf>,
    /// What the profile depends on (toolchain, training config, sources), hashed.
    pub fingerprint: String,
    /// The training's wall time, s (0 in a record from before it was timed).
    #[serde(default)]
    pub wall_secs: f64,
}

impl Artifacts for TrainingRun {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        self.profraw.iter().map(|p| (p.clone(), None)).collect()
    }
}

fn inputs(ctx: &Ctx, instrumented: &InstrumentedBuild) -> Result<Inputs> {
    Ok(Inputs::new()
        .built(&instrumented.0)?
        .json("config.train", &ctx.config.settings.train.commands())
        // Raw profiles in a folder per training workload (a training before them is redone).
        .text("raw_layout", "per-workload folders".to_string()))
}

/// The training mix, run through that very executable.
pub fn run(
    ctx: &Ctx,
    toolchain: &Toolchain,
    timer: &mut Timer,
    instrumented: &InstrumentedBuild,
) -> Result<TrainingRun> {
    runner::run(ctx, timer, Stage::Train, inputs(ctx, instrumented)?, || {
        train(ctx, toolchain, instrumented)
    })
}

fn train(ctx: &Ctx, toolchain: &Toolchain, instrumented: &InstrumentedBuild) -> Result<TrainingRun> {
    let started = std::time::Instant::now();
    let raw = ctx.raw_dir();
    std::fs::create_dir_all(&raw).with_context(|| format!("cannot create {}", raw.display()))?;
    // Start from nothing: a profile from an earlier build must not be merged into this one.
    for old in profraw_files(&raw)? {
        std::fs::remove_file(&old)
            .with_context(|| format!("cannot remove stale {}", old.display()))?;
    }
    for entry in std::fs::read_dir(&raw)?.filter_map(|e| e.ok()) {
        if entry.path().is_dir() {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
    let train = &ctx.config.settings.train;
    let bar = ProgressBar::new(train.workloads.len() as u64)
        .with_prefix("train")
        .with_style(
            ProgressStyle::with_template(
                "{prefix:>12} [{bar:30}] {pos}/{len} workloads {elapsed} {wide_msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
    let mut workloads = train.workloads.clone();
    ctx.resolve_drivers(&mut workloads)?;
    for workload in &workloads {
        bar.set_message(workload.name.clone());
        let timeout = Duration::from_secs(workload.timeout_secs.unwrap_or(train.timeout_secs));
        // Each workload's raw profiles in a folder of its own: `merge` weighs them apart.
        bar.suspend(|| {
            profile_run(
                ctx,
                &instrumented.0.exe,
                workload,
                &raw.join(&workload.name),
                timeout,
            )
        })
        .with_context(|| format!("training workload `{}` failed", workload.name))?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    let profraw = profraw_files(&raw)?;
    if profraw.is_empty() {
        bail!(
            "no profiles were written: was the binary built instrumented? (looked for *.profraw in {})",
            raw.display()
        );
    }
    eprintln!(
        "train: {} raw profile(s) in {}",
        profraw.len(),
        raw.display()
    );
    let fingerprint = crate::pipeline::guard::fingerprint(
        &ctx.sources_hash()?,
        &toolchain.rustc_vv,
        &ctx.config.settings,
    )?;
    Ok(TrainingRun {
        profraw,
        fingerprint,
        wall_secs: started.elapsed().as_secs_f64(),
    })
}

/// Runs workload `w` once on the instrumented `exe`, its raw profiles written into `dir`; a
/// service workload's server started, loaded and stopped. Fails when a server killed by a
/// signal wrote nothing, saying why.
pub fn profile_run(
    ctx: &Ctx,
    exe: &Path,
    w: &crate::config::Workload,
    dir: &Path,
    timeout: Duration,
) -> Result<()> {
    let env = [("LLVM_PROFILE_FILE".to_string(), ctx.profile_pattern(dir))];
    let stopped = crate::measure::service::run_once(exe, w, &ctx.ws.root, &env, timeout)?;
    // A server's missing profile has a cause of its own to name; a command's is checked
    // with the others' by the caller.
    if let Some(why) = stopped.and_then(|s| s.why_no_profile())
        && profraw_files(dir)?.is_empty()
    {
        bail!("no raw profile was written in {}: {why}", dir.display());
    }
    Ok(())
}

/// The raw profiles in `dir` and in its folders (one a training workload).
pub fn profraw_files(dir: &Path) -> Result<Vec<PathBuf>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut files = Vec::new();
    for path in std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
    {
        if path.is_dir() {
            files.extend(profraw_files(&path)?);
        } else if path.extension().is_some_and(|x| x == "profraw") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// `cargo xtask pgo train`: on the recorded instrumented build (with `--bundle`:
/// `merge::bundle_of_this_tree`).
pub fn alone(ctx: &Ctx, toolchain: &Toolchain, timer: &mut Timer, _args: &PgoArgs) -> Result<()> {
    let instrumented: InstrumentedBuild = ctx.load(Stage::Instrument)?;
    run(ctx, toolchain, timer, &instrumented).map(drop)
}
