//! The commands that run stages: `pgo` (the pipeline, top to bottom, or one stage),
//! `calibrate`, `tune`, `ab` and `export`. Each stage is a file of `pipeline/stage/`, whose
//! `run` returns the type the next stage takes (`optimize` accepts a `MergedProfile`, which
//! only `merge` or a validated record makes). Each output is also recorded in
//! `pgo-data/stages/<stage>.json`, so a stage can run alone and is reused while its inputs
//! are unchanged.

use anyhow::Result;

mod ab;
mod against;
mod bundle;
mod calibrate;
pub mod compare;
mod ctx;
mod fresh;
mod guard;
mod profile;
mod runner;
mod shipped;
mod stage;
mod tune;

use crate::base::stages::Stage;
use crate::flags::{
    AbArgs, CalibrateArgs, CommonFlags, ExportArgs, MeasureFlags, PgoArgs, RunFlags, TuneArgs,
};
use ctx::Ctx;
use runner::Timer;
use stage::measure::Arms;
use stage::merge::ProfileSource;
use stage::{
    baselines, bolt, doctor, insight, instrument, layout, measure, merge, optimize, oracle, report,
    train,
};

/// `cargo xtask pgo [STAGE]`.
pub fn pgo(args: PgoArgs) -> Result<()> {
    timed(|timer| {
        let mut ctx = open(&args.common, &args.run, &args.measure)?;
        ctx.remeasure = args.remeasure;
        match args.stage {
            Some(only) => one_stage(&ctx, &args, timer, only),
            None => pipeline(&ctx, &args, timer),
        }
    })
}

/// `cargo xtask calibrate`.
pub fn calibrate(args: CalibrateArgs) -> Result<()> {
    timed(|timer| {
        let ctx = open(&args.common, &RunFlags::default(), &args.measure)?;
        let toolchain = doctor::run(&ctx, timer)?;
        timer
            .section_named("calibrate", || {
                calibrate::run(&ctx, &toolchain, args.repeat)
            })
            .map(drop)
    })
}

/// `cargo xtask tune`.
pub fn tune(args: TuneArgs) -> Result<()> {
    timed(|timer| {
        let ctx = open(&args.common, &args.run, &args.measure)?;
        let toolchain = doctor::run(&ctx, timer)?;
        tune::run(
            &ctx,
            &toolchain,
            timer,
            args.skip_bad_profiles,
            args.measured,
        )
        .map(drop)
    })
}

/// `cargo xtask ab OLD NEW`.
pub fn ab(args: AbArgs) -> Result<()> {
    timed(|timer| {
        let ctx = open(&args.common, &RunFlags::default(), &args.measure)?;
        timer.section_named("ab", || ab::run(&ctx, &args.old, &args.new))
    })
}

/// `cargo xtask export DIR`.
pub fn export(args: ExportArgs) -> Result<()> {
    timed(|timer| {
        let ctx = open(&args.common, &RunFlags::default(), &MeasureFlags::default())?;
        let toolchain = doctor::run(&ctx, timer)?;
        timer.section_named("export", || merge::export(&ctx, &toolchain, &args.dir))
    })
}

/// Runs `work`, then prints the timing table, also when it failed.
fn timed(work: impl FnOnce(&mut Timer) -> Result<()>) -> Result<()> {
    let mut timer = Timer::default();
    let result = work(&mut timer);
    timer.print();
    result
}

/// The run's context, with the command line's overrides of the config.
fn open(common: &CommonFlags, run: &RunFlags, measure: &MeasureFlags) -> Result<Ctx> {
    let mut ctx = Ctx::open(common)?;
    ctx.force_from = run.force;
    if let Some(pct) = measure.half_width {
        ctx.config.settings.measure.target_half_width_pct = pct;
    }
    if let Some(seed) = measure.seed {
        ctx.config.settings.measure.seed = Some(seed);
    }
    eprintln!(
        "pgo: config {}, artifacts in {}, builds in {}",
        ctx.config.path.display(),
        ctx.pgo_data.display(),
        ctx.target_root.display()
    );
    Ok(ctx)
}

/// The whole pipeline.
fn pipeline(ctx: &Ctx, flags: &PgoArgs, timer: &mut Timer) -> Result<()> {
    let toolchain = doctor::run(ctx, timer)?;
    // The C++ and Go comparators compile (seconds, one core each) while the builds below leave a
    // core idle in their single-threaded LTO steps; the report finds them up to date.
    let comparators = ctx.config.settings.compare.is_some().then(|| {
        crate::measure::comparators::compile_in_background(
            &ctx.ws.root,
            &ctx.target_root.join("comparators"),
        )
    });
    // Beside the chain of stages below: the baselines build from the start (a fat-LTO build
    // leaves a core idle in its single-threaded steps, and nothing here is timed until
    // `measure`), and each build's instructions per message counted as soon as it is built.
    let cfg = &ctx.config.settings;
    let mut beside = crate::measure::instructions::InstructionCounter::start(
        cfg.measure.workloads.clone(),
        cfg.instructions.clone(),
        ctx.pgo_data.join("callgrind"),
    );
    let (optimized, base, oracle, bolted, theirs) = std::thread::scope(|scope| -> Result<_> {
        let beside = &beside;
        let baselines = scope.spawn(|| {
            let mut own = Timer::default();
            let base = baselines::run(ctx, &toolchain, &mut own);
            if let Ok(base) = &base {
                beside.count(&base.release);
                beside.count(&base.lto);
            }
            // `--against REV`: that commit's builds, in its worktree, beside the chain too.
            let theirs = match (&base, &flags.against) {
                (Ok(_), Some(rev)) => {
                    Some(own.section_named("against", || against::build(ctx, &toolchain, rev)))
                }
                _ => None,
            };
            (base, theirs, own)
        });
        let chain = (|| -> Result<_> {
            // Stages 2-4: a profile, trained here or stored.
            let (merged, instrumented) = match &flags.profile {
                Some(path) => {
                    let why = format!("--profile {}", path.display());
                    for stage in [Stage::Instrument, Stage::Train] {
                        timer.skip(stage, &why);
                    }
                    let source = ProfileSource::Stored {
                        path,
                        allow_stale: flags.allow_stale,
                    };
                    (merge::run(ctx, &toolchain, timer, source)?, None)
                }
                None => {
                    let instrumented = instrument::run(ctx, &toolchain, timer)?;
                    let training = train::run(ctx, &toolchain, timer, &instrumented)?;
                    let source = ProfileSource::Training {
                        training: &training,
                        skip_bad: flags.skip_bad_profiles,
                    };
                    (
                        merge::run(ctx, &toolchain, timer, source)?,
                        Some(instrumented),
                    )
                }
            };
            // Stages 6-7: why, and the oracle, beside stage 5 (they need the instrumented
            // build and the training, not the PGO build; the fat-LTO builds leave a core
            // idle in their single-threaded steps). On a stored profile their records of an
            // earlier training are removed: they describe another profile than this run's.
            let oracle = match instrumented {
                Some(instrumented) => {
                    let (ctx, toolchain, merged) = (ctx, &toolchain, merged.clone());
                    Some(scope.spawn(move || {
                        let mut own = Timer::default();
                        let oracle = (|| -> Result<_> {
                            let insight =
                                insight::run(ctx, toolchain, &mut own, &instrumented, &merged)?;
                            let oracle = oracle::run(ctx, toolchain, &mut own, &insight)?;
                            beside.count(&oracle.build);
                            Ok(oracle)
                        })();
                        (oracle, own)
                    }))
                }
                None => {
                    for stage in [Stage::Insight, Stage::Oracle] {
                        ctx.forget(stage)?;
                        timer.skip(stage, "it needs this run's instrumented build and training");
                    }
                    None
                }
            };
            // Stage 5: the PGO build, and the proof that the profile applied.
            let optimized = (|| -> Result<_> {
                let optimized = optimize::run(ctx, &toolchain, timer, &merged, flags.allow_stale)?;
                beside.count(&optimized.build);
                // Stage 5b: BOLT after PGO, when llvm-bolt is there (or required).
                let bolted = bolt::run(ctx, &toolchain, timer, &merged, &optimized)?;
                if let Some(b) = &bolted {
                    beside.count(&b.build);
                }
                Ok((optimized, bolted))
            })();
            let oracle = oracle.map(|thread| {
                let (oracle, own) = thread.join().expect("the oracle's stages do not panic");
                timer.alongside(own);
                oracle
            });
            // The PGO build's error first: its apply check is the run's verdict.
            let (optimized, bolted) = optimized?;
            Ok((optimized, bolted, oracle.transpose()?))
        })();
        // Stage 8: what we compare against, built beside the chain.
        let (base, theirs, own) = baselines
            .join()
            .expect("the baselines build does not panic");
        timer.alongside(own);
        let (optimized, bolted, oracle) = chain?;
        Ok((optimized, base?, oracle, bolted, theirs.transpose()?))
    })?;
    // Nothing else may run while the lockstep measures (but the next session's set-up on the
    // other core: `measure/lockstep.rs`).
    beside.finish();
    if let Some(compiling) = comparators {
        let _ = compiling.join();
    }
    // Stage 9: release (and `layout.builds`) in other layouts.
    let layout = layout::run(ctx, &toolchain, timer, &optimized, &base)?;
    // Stage 10: the held-out workloads on every arm, in lockstep; instructions per message.
    let arms = Arms {
        builds: Arms::builds(&optimized, &base, oracle.as_ref(), bolted.as_ref()),
        against: theirs,
        layout,
    };
    let measured = measure::run(ctx, timer, &arms)?;
    // Stage 11: the statistics, the table, report.json, report.md, the plots, history, from
    // what the stages above handed on.
    let handed = report::Handed {
        measured: Some(measured),
        optimized: Some(&optimized),
    };
    let report = report::run(ctx, &toolchain, timer, handed)?;
    report::publish_and_gate(ctx, flags, &report)
}

/// `cargo xtask pgo <STAGE>`: that stage alone, on the recorded outputs of the earlier ones.
fn one_stage(ctx: &Ctx, args: &PgoArgs, timer: &mut Timer, only: Stage) -> Result<()> {
    let toolchain = doctor::run(ctx, timer)?;
    if only == Stage::Train && args.bundle.is_some() {
        return merge::bundle_of_this_tree(ctx, &toolchain, timer, args);
    }
    stage::alone(only)(ctx, &toolchain, timer, args)
}

#[cfg(test)]
mod tests {
    use crate::flags::CommonFlags;
    use std::path::PathBuf;

    use super::*;

    /// Kept from the flag parser's test when the check moved into `Ctx::open`.
    #[test]
    fn a_directory_with_whitespace_is_refused() {
        let flags = CommonFlags {
            pgo_data: Some(PathBuf::from("/tmp/a b")),
            ..CommonFlags::default()
        };
        let err = Ctx::open(&flags).err().expect("refused").to_string();
        assert!(
            err.contains("contains whitespace, which RUSTFLAGS cannot carry"),
            "{err}"
        );
    }
}
