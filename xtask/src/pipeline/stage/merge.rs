//! `merge`: the raw profiles (or a stored profile, or bundles trained elsewhere) into one
//! indexed, content-addressed profile, each training workload merged alone first so its
//! weight can change without training again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::train::TrainingRun;
use crate::base::exec::Cmd;
use crate::flags::PgoArgs;
use crate::base::fsx;
use crate::analysis::outputs::{ProfileInfo, TrainingPart};
use crate::pipeline::bundle::Manifest;
use crate::pipeline::ctx::Ctx;
use crate::pipeline::fresh::{Artifacts, Inputs};
use crate::pipeline::profile::{
    self, PREVIOUS_PROFILE, TUNED, check_indexed_profile, parse_show, tuned_weights, weights,
};
use crate::pipeline::runner::{self, Timer};
use crate::pipeline::shipped;
use crate::base::stages::Stage;
use crate::toolchain::tools::Toolchain;

/// An indexed profile produced by `merge` from this run's training.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MergedProfile(pub ProfileInfo);

impl Artifacts for MergedProfile {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        let mut out = vec![(self.0.path.clone(), Some(self.0.hash.clone()))];
        out.extend(self.0.parts.iter().map(|p| (p.profile.clone(), None)));
        out
    }
}

/// Where the `merge` stage's one indexed profile comes from.
pub enum ProfileSource<'a> {
    /// This run's raw profiles; `skip_bad` merges the readable ones when some are corrupt.
    Training {
        training: &'a TrainingRun,
        skip_bad: bool,
    },
    /// A stored profile (`--profile`: a bundle or an indexed `.profdata`).
    Stored { path: &'a Path, allow_stale: bool },
    /// Bundles trained elsewhere (`merge --input`), each with its weight.
    Bundles(&'a [(std::path::PathBuf, u64, Manifest, std::path::PathBuf)]),
}

fn inputs(ctx: &Ctx, toolchain: &Toolchain, training: &TrainingRun, skip_bad: bool) -> Result<Inputs> {
    let mut inputs = Inputs::new()
        .text("llvm-profdata", toolchain.llvm_profdata_version.clone())
        .json("weights", &profile::weights(ctx)?)
        .text("skip_bad_profiles", skip_bad.to_string())
        .text("fingerprint", training.fingerprint.clone());
    for raw in &training.profraw {
        let name = raw.strip_prefix(ctx.raw_dir()).unwrap_or(raw).display();
        inputs = inputs.file(&format!("raw/{name}"), raw)?;
    }
    Ok(inputs)
}

/// Raw profiles (or stored ones) -> one indexed, content-addressed profile.
pub fn run(
    ctx: &Ctx,
    toolchain: &Toolchain,
    timer: &mut Timer,
    source: ProfileSource,
) -> Result<MergedProfile> {
    let merged = match source {
        ProfileSource::Training { training, skip_bad } => runner::run(
            ctx,
            timer,
            Stage::Merge,
            inputs(ctx, toolchain, training, skip_bad)?,
            || merge(ctx, toolchain, training, skip_bad),
        )?,
        ProfileSource::Stored { path, allow_stale } => runner::run(
            ctx,
            timer,
            Stage::Merge,
            shipped::inputs(path, allow_stale)?,
            || shipped::use_profile(ctx, toolchain, path, allow_stale).map(MergedProfile),
        )?,
        ProfileSource::Bundles(bundles) => runner::run(
            ctx,
            timer,
            Stage::Merge,
            shipped::merge_inputs_fingerprint(bundles, toolchain)?,
            || shipped::merge_bundles(ctx, toolchain, bundles).map(MergedProfile),
        )?,
    };
    if super::reused(timer) {
        let p = &merged.0;
        eprintln!(
            "merge: {} ({} functions, total count {})",
            p.path.display(),
            p.functions,
            p.total_count
        );
    }
    Ok(merged)
}

/// `skip_bad`: merge the readable raw profiles when some are not (`--skip-bad-profiles`).
fn merge(
    ctx: &Ctx,
    toolchain: &Toolchain,
    training: &TrainingRun,
    skip_bad: bool,
) -> Result<MergedProfile> {
    // Read each raw profile alone first: llvm-profdata's own error for a bad input among good
    // ones is "no profile can be merged", which names no file.
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for file in &training.profraw {
        match raw_profile_problem(toolchain, file) {
            None => good.push(file.clone()),
            Some(why) => bad.push(format!("{}: {why}", file.display())),
        }
    }
    if !bad.is_empty() {
        if !skip_bad || good.is_empty() {
            bail!(
                "{} of {} raw profiles cannot be read:\n  {}\n{}",
                bad.len(),
                training.profraw.len(),
                bad.join("\n  "),
                if good.is_empty() {
                    "None is usable: rerun the training (`cargo xtask pgo`)."
                } else {
                    "Rerun the training (`cargo xtask pgo`), or pass --skip-bad-profiles to merge the good ones."
                }
            );
        }
        eprintln!(
            "merge: skipping {} unreadable raw profile(s) (--skip-bad-profiles):\n  {}",
            bad.len(),
            bad.join("\n  ")
        );
    }
    let parts = merge_parts(ctx, toolchain, &good)?;
    let tmp = fsx::temp_path(&ctx.pgo_data.join("merged.profdata"));
    let cmd = Cmd::new(toolchain.llvm_profdata.display().to_string())
        .args(["merge", "-o"])
        .arg(tmp.display().to_string())
        .args(
            parts
                .iter()
                .map(|p| format!("-weighted-input={},{}", p.weight, p.profile.display())),
        );
    if let Err(err) = cmd.run_with_timeout(Duration::from_secs(300)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(err.context("cannot merge the training workloads' profiles"));
    }
    let bytes = std::fs::read(&tmp).with_context(|| format!("cannot read {}", tmp.display()))?;
    // Content-addressed: cargo fingerprints the -Cprofile-use PATH, not the file's content,
    // so a new profile must get a new name or cargo would not rebuild.
    let hash = format!("{:016x}", fsx::fnv1a64(&bytes));
    let path = ctx.pgo_data.join(format!("merged-{hash}.profdata"));
    fsx::rename_content_addressed(&tmp, &path)?;
    // The newest older profile becomes the previous one (the insight stage compares the two
    // trainings); the rest go.
    let mut older: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&ctx.pgo_data)?
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("merged-") && name.ends_with(".profdata") && e.path() != path
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    older.sort();
    if let Some((_, newest)) = older.pop() {
        fsx::rename(&newest, &ctx.pgo_data.join(PREVIOUS_PROFILE))?;
    }
    for (_, old) in older {
        let _ = std::fs::remove_file(old);
    }
    let show = Cmd::new(toolchain.llvm_profdata.display().to_string())
        .arg("show")
        .arg(path.display().to_string())
        .read()?;
    let mut info = parse_show(&show, path, hash)?;
    info.fingerprint = training.fingerprint.clone();
    info.skipped_raw = bad;
    info.origin = "trained in this pgo-data (`cargo xtask pgo train`)".to_string();
    eprintln!(
        "merge: {} ({} functions, max function count {}, total count {})",
        info.path.display(),
        info.functions,
        info.max_function_count,
        info.total_count
    );
    if parts.len() > 1 {
        eprintln!(
            "merge: weights {}",
            parts
                .iter()
                .map(|p| format!("{} ×{}", p.workload, p.weight))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    info.parts = parts;
    Ok(MergedProfile(info))
}

/// Each training workload's raw profiles merged alone into `pgo-data/train/<name>.profdata`
/// (what `insight` and `tune` read), with its weight from the config.
fn merge_parts(ctx: &Ctx, toolchain: &Toolchain, raw: &[PathBuf]) -> Result<Vec<TrainingPart>> {
    let tuned = tuned_weights(ctx)?;
    if tuned.is_some() {
        eprintln!(
            "merge: the weights `cargo xtask tune` chose ({}), not the config's",
            ctx.pgo_data.join(TUNED).display()
        );
    }
    let weights = tuned.unwrap_or_else(|| ctx.config.settings.train.weights());
    let mut groups: Vec<(String, Vec<&PathBuf>)> = Vec::new();
    for file in raw {
        let name = workload_of(&ctx.raw_dir(), file).unwrap_or_else(|| "train".to_string());
        match groups.iter_mut().find(|(n, _)| *n == name) {
            Some((_, files)) => files.push(file),
            None => groups.push((name, vec![file])),
        }
    }
    let dir = ctx.pgo_data.join("train");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut parts = Vec::new();
    for (workload, files) in groups {
        let profile = dir.join(format!("{workload}.profdata"));
        let tmp = fsx::temp_path(&profile);
        let merged = Cmd::new(toolchain.llvm_profdata.display().to_string())
            .args(["merge", "-o"])
            .arg(tmp.display().to_string())
            .args(files.iter().map(|p| p.display().to_string()))
            .run_with_timeout(Duration::from_secs(300));
        if let Err(err) = merged {
            let _ = std::fs::remove_file(&tmp);
            return Err(err.context(format!(
                "cannot merge the raw profiles of training workload `{workload}`"
            )));
        }
        fsx::rename(&tmp, &profile)?;
        let weight = weights
            .iter()
            .chain(&ctx.config.settings.train.weights())
            .find(|(n, _)| *n == workload)
            .map_or(1, |(_, w)| *w);
        parts.push(TrainingPart {
            workload,
            weight,
            profile,
        });
    }
    // In the config's order (the raw files come sorted by name).
    parts.sort_by_key(|p| weights.iter().position(|(n, _)| *n == p.workload));
    // Profiles of workloads no longer trained would mislead a reader of train/.
    for entry in std::fs::read_dir(&dir)?.filter_map(|e| e.ok()) {
        if !parts.iter().any(|p| p.profile == entry.path()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(parts)
}

/// The training workload a raw profile belongs to: the folder it was written in, under
/// `raw`; `None` for one written by a training before workloads had folders.
fn workload_of(raw: &Path, file: &Path) -> Option<String> {
    let parent = file.parent()?;
    (parent != raw).then(|| parent.file_name()?.to_str().map(str::to_string))?
}

/// Why llvm-profdata cannot read this raw profile, or `None` when it can.
fn raw_profile_problem(toolchain: &Toolchain, file: &Path) -> Option<String> {
    let out = Cmd::new(toolchain.llvm_profdata.display().to_string())
        .arg("show")
        .arg(file.display().to_string())
        .output();
    match out {
        Ok(out) if out.status.success() => None,
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let line = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("unreadable");
            // "error: <file>: <reason>" -> "<reason>"
            Some(line.rsplit(": ").next().unwrap_or(line).trim().to_string())
        }
        Err(err) => Some(format!("{err:#}")),
    }
}

/// Why the merged profile no longer fits the sources, toolchain or training config, or `None`.
pub fn stale(ctx: &Ctx, toolchain: &Toolchain, merged: &MergedProfile) -> Result<Option<String>> {
    let now = crate::pipeline::guard::fingerprint(
        &ctx.sources_hash()?,
        &toolchain.rustc_vv,
        &ctx.config.settings,
    )?;
    Ok((merged.0.fingerprint != now).then(|| {
        format!(
            "the profile {} is stale: the sources, toolchain or training config changed since it was trained \
             (fingerprint {} then, {now} now)",
            merged.0.path.display(),
            if merged.0.fingerprint.is_empty() { "unknown" } else { &merged.0.fingerprint }
        )
    }))
}

pub fn load_merged(ctx: &Ctx) -> Result<MergedProfile> {
    let merged: MergedProfile = ctx.load(Stage::Merge)?;
    check_indexed_profile(&merged.0.path)?;
    Ok(merged)
}

/// Why the merged profile's weights are not the ones a merge would use now, or `None`.
pub fn reweighed(ctx: &Ctx, merged: &MergedProfile) -> Result<Option<String>> {
    if merged.0.parts.is_empty() {
        return Ok(None);
    }
    let now = weights(ctx)?;
    let then: Vec<(String, u64)> = merged
        .0
        .parts
        .iter()
        .map(|p| (p.workload.clone(), p.weight))
        .collect();
    let differ = then
        .iter()
        .any(|(n, w)| now.iter().any(|(m, v)| m == n && v != w));
    Ok(differ.then(|| {
        format!(
            "the profile {} was merged with other weights than the config's (or tune.json's)",
            merged.0.path.display()
        )
    }))
}

/// Instrument, train and merge, each reused when up to date: a profile of this tree.
pub fn of_this_tree(
    ctx: &Ctx,
    toolchain: &Toolchain,
    timer: &mut Timer,
    skip_bad: bool,
) -> Result<MergedProfile> {
    let instrumented = super::instrument::run(ctx, toolchain, timer)?;
    let training = super::train::run(ctx, toolchain, timer, &instrumented)?;
    run(
        ctx,
        toolchain,
        timer,
        ProfileSource::Training {
            training: &training,
            skip_bad,
        },
    )
}

/// `cargo xtask pgo merge`: this pgo-data's raw profiles, or with `--input` bundles trained
/// elsewhere; with `--bundle DIR`, the result also written as a bundle.
pub fn alone(ctx: &Ctx, toolchain: &Toolchain, timer: &mut Timer, args: &PgoArgs) -> Result<()> {
    if !args.inputs.is_empty() {
        let bundles = shipped::read_inputs(&args.inputs)?;
        let merged = run(ctx, toolchain, timer, ProfileSource::Bundles(&bundles))?;
        if let Some(dir) = &args.bundle {
            timer.section_named("bundle", || {
                shipped::write_merged_bundle(dir, &merged.0, &bundles)
            })?;
        }
        return Ok(());
    }
    let training: TrainingRun = ctx.load(Stage::Train)?;
    let source = ProfileSource::Training {
        training: &training,
        skip_bad: args.skip_bad_profiles,
    };
    run(ctx, toolchain, timer, source)?;
    if let Some(dir) = &args.bundle {
        timer.section_named("bundle", || export(ctx, toolchain, dir))?;
    }
    Ok(())
}

/// `export DIR` (and `train --bundle DIR`): this pgo-data's trained profile as a bundle.
pub fn export(ctx: &Ctx, toolchain: &Toolchain, dir: &Path) -> Result<()> {
    let merged = load_merged(ctx)?;
    if !merged.0.origin.is_empty() && !merged.0.origin.starts_with("trained") {
        bail!(
            "this pgo-data's profile was not trained here ({}): export the bundle it came from instead",
            merged.0.origin
        );
    }
    let instrumented: super::instrument::InstrumentedBuild = ctx.load(Stage::Instrument).map_err(|e| {
        e.context(
            "export needs the instrumented build that trained the profile; run `cargo xtask pgo` (or `train`) first",
        )
    })?;
    let hash = crate::base::fsx::file_hash(&instrumented.0.exe)?;
    let manifest = crate::pipeline::bundle::Manifest::new(ctx, toolchain, &merged.0, &hash, Vec::new())?;
    crate::pipeline::bundle::write(dir, &merged.0.path, &manifest)
}

/// `cargo xtask pgo train --bundle DIR`: one machine's share of a training across machines:
/// build, train, merge and write the bundle, from a fresh checkout in one command.
pub fn bundle_of_this_tree(
    ctx: &Ctx,
    toolchain: &Toolchain,
    timer: &mut Timer,
    args: &PgoArgs,
) -> Result<()> {
    of_this_tree(ctx, toolchain, timer, args.skip_bad_profiles)?;
    let dir = args.bundle.as_deref().expect("called with --bundle");
    timer.section_named("bundle", || export(ctx, toolchain, dir))
}
