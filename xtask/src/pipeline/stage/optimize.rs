//! `optimize`: the lto+pgo build, and the proof from rustc's own warnings that the profile
//! applied (checked after the record is written, so the counts are on file either way).

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use super::merge::MergedProfile;
use super::merge::{load_merged, of_this_tree, reweighed, stale};
use crate::toolchain::build::{Build, Built};
use crate::flags::PgoArgs;
use crate::pipeline::ctx::Ctx;
use crate::pipeline::fresh::{Artifacts, Inputs};
use crate::pipeline::profile::{PROFILE_RUNTIME_MARKER, check_indexed_profile, contains_bytes};
use crate::pipeline::runner::{self, Timer};
use crate::report::words;
use crate::base::stages::Stage;
use crate::toolchain::tools::Toolchain;
use crate::toolchain::warnings::ApplyReport;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OptimizedBuild {
    pub build: Built,
    pub apply: ApplyReport,
}

impl Artifacts for OptimizedBuild {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        self.build.artifacts()
    }
    fn compiled(&self) -> u64 {
        self.build.compiled
    }
}

fn inputs(ctx: &Ctx, toolchain: &Toolchain, merged: &MergedProfile) -> Result<Inputs> {
    let flags = Build::LtoPgo.rustflags(Some(&merged.0.path));
    Ok(super::build_inputs(ctx, toolchain, Build::LtoPgo, &flags)?.text("profile", merged.0.hash.clone()))
}

/// The PGO build, and the proof from rustc's own warnings that the profile applied (checked
/// after the record is written, so the counts are on file either way).
pub fn run(
    ctx: &Ctx,
    toolchain: &Toolchain,
    timer: &mut Timer,
    merged: &MergedProfile,
    allow_stale: bool,
) -> Result<OptimizedBuild> {
    let optimized = runner::run(
        ctx,
        timer,
        Stage::Optimize,
        inputs(ctx, toolchain, merged)?,
        || pgo_build(ctx, toolchain, Build::LtoPgo, &merged.0.path),
    )?;
    check_applied(&optimized, &ctx.config.settings.apply_check.required, allow_stale)?;
    Ok(optimized)
}

/// A build with an indexed profile (`lto+pgo`, `oracle`), and rustc's PGO warnings about it.
pub fn pgo_build(
    ctx: &Ctx,
    toolchain: &Toolchain,
    build: Build,
    profile: &Path,
) -> Result<OptimizedBuild> {
    check_indexed_profile(profile)?;
    let (record, diagnostics) = ctx.build(toolchain, build, build.rustflags(Some(profile)))?;
    if contains_bytes(&record.exe, PROFILE_RUNTIME_MARKER)? {
        bail!(
            "{} contains `__llvm_profile` symbols: the optimised build is instrumented",
            record.exe.display()
        );
    }
    let required = &ctx.config.settings.apply_check.required;
    let apply = ApplyReport::from_messages(diagnostics.iter().map(String::as_str), required);
    eprintln!(
        "{}: the profile: {}; {}",
        build.name(),
        words::apply_verdict(&apply),
        words::apply_detail(&apply, required)
    );
    Ok(OptimizedBuild {
        build: record,
        apply,
    })
}

/// Fails unless the profile applied to every `apply_check.required` function; with
/// `allow_stale`, hash mismatches alone (a stale profile) only warn.
pub fn check_applied(optimized: &OptimizedBuild, required: &[String], allow_stale: bool) -> Result<()> {
    let a = &optimized.apply;
    if a.applied() {
        return Ok(());
    }
    if allow_stale && a.applied_but_stale() {
        eprintln!("warning: the profile: {}", words::apply_verdict(a));
        return Ok(());
    }
    bail!(
        "the profile did NOT apply to the measured code: {}{}. Was the profile trained on this same executable, \
         source and cargo profile? Rerun the whole `cargo xtask pgo`.",
        words::apply_detail(a, required),
        if a.unusable.is_empty() {
            String::new()
        } else {
            format!("; rustc said: {}", a.unusable.join("; "))
        }
    );
}

/// `cargo xtask pgo optimize`: on the recorded profile, merged again when its weights are no
/// longer the ones in force, retrained when stale (unless `--allow-stale`).
pub fn alone(ctx: &Ctx, toolchain: &Toolchain, timer: &mut Timer, args: &PgoArgs) -> Result<()> {
    let merged = load_merged(ctx)?;
    let merged = match reweighed(ctx, &merged)? {
        // The training is kept; the merge runs again with the weights now in force.
        Some(why) => {
            eprintln!("{why}: merging again");
            of_this_tree(ctx, toolchain, timer, args.skip_bad_profiles)?
        }
        None => merged,
    };
    let merged = match stale(ctx, toolchain, &merged)? {
        None => merged,
        Some(why) if args.allow_stale => {
            eprintln!("warning: {why}; optimizing with it anyway (--allow-stale)");
            merged
        }
        Some(why) => {
            // The default retrains: a stale profile only half applies.
            eprintln!("{why}: retraining (pass --allow-stale to use it anyway)");
            of_this_tree(ctx, toolchain, timer, args.skip_bad_profiles)?
        }
    };
    run(ctx, toolchain, timer, &merged, args.allow_stale).map(drop)
}
