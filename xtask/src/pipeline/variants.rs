//! The other ways through the pipeline: one stage alone (`cargo xtask pgo <stage>`), the
//! pipeline on a stored profile (`--profile`), and the `bolt` stage as `bolt.enabled` asks.

use anyhow::{Context, Result};

use super::stages::{self, Timer};
use super::{
    Ctx, InsightReport, InstrumentedBuild, Measurements, MergedProfile, OptimizedBuild, Stage,
    TrainingRun, baselines, bolt, check_applied, gate, inputs, insight, instrument, load_merged,
    measure, merge, optimize, report_stage, shipped, stale, train,
};
use crate::flags::PgoFlags;
use crate::toolchain::Toolchain;

/// `cargo xtask pgo --profile PATH`: the pipeline on a stored profile, without training.
/// The insight and the oracle need the instrumented build and its training, so they are
/// skipped too, and their records of an earlier training removed: they describe another
/// profile than this run's.
pub(super) fn from_profile(
    ctx: &Ctx,
    tc: &Toolchain,
    flags: &PgoFlags,
    timer: &mut Timer,
    path: &std::path::Path,
) -> Result<()> {
    let why = format!("--profile {}", path.display());
    for stage in [Stage::Instrument, Stage::Train] {
        timer.skip(stage, &why);
    }
    let merged = stages::run(
        ctx,
        timer,
        Stage::Merge,
        shipped::inputs(path, flags.allow_stale)?,
        || shipped::use_profile(ctx, tc, path, flags.allow_stale),
    )?;
    let optimized = stages::run(
        ctx,
        timer,
        Stage::Optimize,
        inputs::optimize(ctx, tc, &merged)?,
        || optimize(ctx, tc, &merged),
    )?;
    check_applied(&optimized, flags.allow_stale)?;
    let bolted = bolt_stage(ctx, tc, timer, &merged, &optimized)?;
    for stage in [Stage::Insight, Stage::Oracle] {
        ctx.forget(stage)?;
        timer.skip(stage, "it needs this run's instrumented build and training");
    }
    let base = stages::run(
        ctx,
        timer,
        Stage::Baselines,
        inputs::baselines(ctx, tc)?,
        || baselines(ctx, tc),
    )?;
    let builds = Measurements::builds_of(&optimized, &base, None, bolted.as_ref());
    stages::run(
        ctx,
        timer,
        Stage::Measure,
        inputs::measure(ctx, &builds)?,
        || measure(ctx, builds.clone()),
    )?;
    let report = report_stage(ctx, tc, timer)?;
    gate(flags, &report)
}

/// The `bolt` stage as `bolt.enabled` asks: skipped (saying why and what to install) when
/// off or when llvm-bolt is missing under "auto"; an error when it is required and missing.
/// A skipped stage's record of an earlier run is removed: it is not this run's build.
pub(super) fn bolt_stage(
    ctx: &Ctx,
    tc: &Toolchain,
    timer: &mut Timer,
    merged: &MergedProfile,
    optimized: &OptimizedBuild,
) -> Result<Option<bolt::BoltBuild>> {
    let decided = crate::llvm_bolt::decide(
        ctx.config.config.bolt.enabled,
        tc.bolt.as_ref(),
        tc.rustc.llvm_major,
    )?;
    match decided {
        Err(why) => {
            // A skipped stage's record of an earlier run is not this run's build.
            ctx.forget(Stage::Bolt)?;
            timer.skip(Stage::Bolt, &why);
            Ok(None)
        }
        Ok(tools) => stages::run(
            ctx,
            timer,
            Stage::Bolt,
            inputs::bolt(ctx, tc, tools, merged)?,
            || bolt::bolt(ctx, tc, tools, merged, &optimized.build),
        )
        .map(Some),
    }
}

/// `cargo xtask pgo <stage>`: that stage alone, on the recorded outputs of the earlier ones.
pub(super) fn one_stage(
    ctx: &Ctx,
    tc: &Toolchain,
    flags: &PgoFlags,
    timer: &mut Timer,
    only: Stage,
) -> Result<()> {
    match only {
        Stage::Doctor => {}
        Stage::Instrument => {
            stages::run(ctx, timer, only, inputs::instrument(ctx, tc)?, || {
                instrument(ctx, tc)
            })?;
        }
        Stage::Train if flags.bundle.is_some() => {
            // One machine's share of a training across machines: build, train, merge, and
            // write the bundle, from a fresh checkout in one command.
            train_from_scratch(ctx, tc, flags, timer)?;
            let dir = flags.bundle.as_deref().expect("matched");
            timer.section_named("bundle", || shipped::export(ctx, tc, dir))?;
        }
        Stage::Train => {
            let instrumented: InstrumentedBuild = ctx.load(Stage::Instrument)?;
            stages::run(ctx, timer, only, inputs::train(ctx, &instrumented)?, || {
                train(ctx, tc, &instrumented)
            })?;
        }
        Stage::Merge if !flags.inputs.is_empty() => {
            let bundles = shipped::read_inputs(&flags.inputs)?;
            let merged = stages::run(
                ctx,
                timer,
                only,
                shipped::merge_inputs_fingerprint(&bundles, tc)?,
                || shipped::merge_bundles(ctx, tc, &bundles),
            )?;
            if let Some(dir) = &flags.bundle {
                timer.section_named("bundle", || {
                    shipped::write_merged_bundle(dir, &merged, &bundles)
                })?;
            }
        }
        Stage::Merge => {
            let training: TrainingRun = ctx.load(Stage::Train)?;
            let skip = flags.skip_bad_profiles;
            stages::run(
                ctx,
                timer,
                only,
                inputs::merge(tc, &training, skip)?,
                || merge(ctx, tc, &training, skip),
            )?;
            if let Some(dir) = &flags.bundle {
                timer.section_named("bundle", || shipped::export(ctx, tc, dir))?;
            }
        }
        Stage::Optimize => {
            let merged = load_merged(ctx)?;
            let merged = match stale(ctx, tc, &merged)? {
                None => merged,
                Some(why) if flags.allow_stale => {
                    eprintln!("warning: {why}; optimizing with it anyway (--allow-stale)");
                    merged
                }
                Some(why) => {
                    // The default retrains: a stale profile only half applies.
                    eprintln!("{why}: retraining (pass --allow-stale to use it anyway)");
                    train_from_scratch(ctx, tc, flags, timer)?
                }
            };
            let optimized = stages::run(
                ctx,
                timer,
                only,
                inputs::optimize(ctx, tc, &merged)?,
                || optimize(ctx, tc, &merged),
            )?;
            check_applied(&optimized, flags.allow_stale)?;
        }
        Stage::Bolt => {
            let merged = load_merged(ctx)?;
            let optimized: OptimizedBuild = ctx.load(Stage::Optimize)?;
            bolt_stage(ctx, tc, timer, &merged, &optimized)?;
        }
        Stage::Insight => {
            let instrumented: InstrumentedBuild = ctx.load(Stage::Instrument)?;
            let merged = load_merged(ctx)?;
            stages::run(
                ctx,
                timer,
                only,
                inputs::insight(ctx, tc, &instrumented, &merged)?,
                || insight::insight(ctx, tc, &instrumented, &merged),
            )?;
        }
        Stage::Oracle => {
            let insight: InsightReport = ctx.load(Stage::Insight)?;
            let oracle = stages::run(ctx, timer, only, inputs::oracle(ctx, tc, &insight)?, || {
                insight::oracle(ctx, tc, &insight)
            })?;
            check_applied(&oracle, false).context("the oracle build")?;
        }
        Stage::Baselines => {
            stages::run(ctx, timer, only, inputs::baselines(ctx, tc)?, || {
                baselines(ctx, tc)
            })?;
        }
        Stage::Measure => {
            // No oracle record: a run from a stored profile (`--profile`) has none.
            let oracle: Option<OptimizedBuild> = ctx.load_optional(Stage::Oracle)?;
            let bolted: Option<bolt::BoltBuild> = ctx.load_optional(Stage::Bolt)?;
            let builds = Measurements::builds_of(
                &ctx.load(Stage::Optimize)?,
                &ctx.load(Stage::Baselines)?,
                oracle.as_ref(),
                bolted.as_ref(),
            );
            stages::run(ctx, timer, only, inputs::measure(ctx, &builds)?, || {
                measure(ctx, builds.clone())
            })?;
        }
        Stage::Report => {
            let report = report_stage(ctx, tc, timer)?;
            gate(flags, &report)?;
        }
    }
    Ok(())
}

/// Instrument, train and merge, each reused when up to date: a profile of this tree.
fn train_from_scratch(
    ctx: &Ctx,
    tc: &Toolchain,
    flags: &PgoFlags,
    timer: &mut Timer,
) -> Result<MergedProfile> {
    let instrumented = stages::run(
        ctx,
        timer,
        Stage::Instrument,
        inputs::instrument(ctx, tc)?,
        || instrument(ctx, tc),
    )?;
    let training = stages::run(
        ctx,
        timer,
        Stage::Train,
        inputs::train(ctx, &instrumented)?,
        || train(ctx, tc, &instrumented),
    )?;
    let skip = flags.skip_bad_profiles;
    stages::run(
        ctx,
        timer,
        Stage::Merge,
        inputs::merge(tc, &training, skip)?,
        || merge(ctx, tc, &training, skip),
    )
}
