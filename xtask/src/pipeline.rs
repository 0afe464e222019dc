//! `cargo xtask pgo`: the pipeline, top to bottom, as one straight function of stages, each
//! a function of `steps.rs` whose output is the type the next stage takes (a `MergedProfile`
//! is what `optimize` accepts, and only `merge` or a validated `pgo-data/stages/merge.json`
//! makes one). Each output is also recorded in `pgo-data/stages/<stage>.json`, so any stage
//! can run alone, and is reused while its inputs are unchanged.

use std::path::Path;

use anyhow::{Context, Result};

mod ab;
mod against;
mod bolt;
mod bundle;
mod calibrate;
pub mod compare;
mod ctx;
mod fresh;
mod guard;
mod inputs;
mod insight;
mod layout;
mod profile;
mod results;
mod shipped;
mod stages;
mod steps;
mod tune;

use crate::flags::{
    AbArgs, CalibrateArgs, CommonFlags, ExportArgs, MeasureFlags, PgoArgs, RunFlags, TuneArgs,
};
use crate::fsx;
use crate::outputs::{InstrumentedBuild, MergedProfile, OptimizedBuild, TrainingRun};
use crate::report::Report;
use crate::stage::Stage;
use crate::toolchain::Toolchain;
use ctx::Ctx;
use stages::Timer;
use steps::ProfileSource;

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
        let ctx = open(&args.common, &args.run, &args.measure)?;
        let tc = steps::doctor(&ctx, timer)?;
        timer
            .section_named("calibrate", || calibrate::run(&ctx, &tc, args.repeat))
            .map(drop)
    })
}

/// `cargo xtask tune`.
pub fn tune(args: TuneArgs) -> Result<()> {
    timed(|timer| {
        let ctx = open(&args.common, &args.run, &MeasureFlags::default())?;
        let tc = steps::doctor(&ctx, timer)?;
        tune::run(&ctx, &tc, timer, args.skip_bad_profiles).map(drop)
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
        let tc = steps::doctor(&ctx, timer)?;
        timer.section_named("export", || shipped::export(&ctx, &tc, &args.dir))
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
        ctx.config.config.measure.target_half_width_pct = pct;
    }
    if let Some(seed) = measure.seed {
        ctx.config.config.measure.seed = Some(seed);
    }
    eprintln!(
        "pgo: config {}, artifacts in {}, builds in {}",
        ctx.config.path.display(),
        ctx.data.display(),
        ctx.target_root.display()
    );
    Ok(ctx)
}

/// The whole pipeline.
fn pipeline(ctx: &Ctx, flags: &PgoArgs, timer: &mut Timer) -> Result<()> {
    let tc = steps::doctor(ctx, timer)?;
    // The C++ and Go comparators compile (seconds, one core each) while the builds below leave a
    // core idle in their single-threaded LTO steps; the report finds them up to date.
    let comparators = ctx.config.config.compare.is_some().then(|| {
        crate::compare::compile_in_background(&ctx.ws.root, &ctx.target_root.join("comparators"))
    });
    // Beside the chain of stages below: the baselines build from the start (a fat-LTO build
    // leaves a core idle in its single-threaded steps, and nothing here is timed until
    // `measure`), and each build's instructions per message counted as soon as it is built.
    let cfg = &ctx.config.config;
    let mut beside = crate::instructions::Beside::start(
        cfg.measure.workloads.clone(),
        cfg.instructions.clone(),
        ctx.data.join("callgrind"),
    );
    let (optimized, base, oracle, bolted, theirs) = std::thread::scope(|scope| -> Result<_> {
        let beside = &beside;
        // Measured cold on a 2-core VM: the chain's builds up to `measure` took 79.6 and 84.8 s
        // with the baselines beside them, 93.7 and 94.7 s after them.
        let baselines = scope.spawn(|| {
            let mut own = Timer::default();
            let base = steps::baselines(ctx, &tc, &mut own);
            if let Ok(base) = &base {
                beside.count(&base.release);
                beside.count(&base.lto);
            }
            // `--against REV`: that commit's builds, in its worktree, beside the chain too.
            let theirs = match (&base, &flags.against) {
                (Ok(_), Some(rev)) => {
                    Some(own.section_named("against", || against::build(ctx, &tc, rev)))
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
                    (steps::merge(ctx, &tc, timer, source)?, None)
                }
                None => {
                    let instrumented = steps::instrument(ctx, &tc, timer)?;
                    let training = steps::train(ctx, &tc, timer, &instrumented)?;
                    let source = ProfileSource::Training {
                        training: &training,
                        skip_bad: flags.skip_bad_profiles,
                    };
                    (steps::merge(ctx, &tc, timer, source)?, Some(instrumented))
                }
            };
            // Stages 6-7: why, and the oracle, beside stage 5 (they need the instrumented
            // build and the training, not the PGO build; the fat-LTO builds leave a core
            // idle in their single-threaded steps). On a stored profile their records of an
            // earlier training are removed: they describe another profile than this run's.
            let oracle = match instrumented {
                Some(instrumented) => {
                    let (ctx, tc, merged) = (ctx, &tc, merged.clone());
                    Some(scope.spawn(move || {
                        let mut own = Timer::default();
                        let oracle = (|| -> Result<_> {
                            let insight =
                                steps::insight(ctx, tc, &mut own, &instrumented, &merged)?;
                            let oracle = steps::oracle(ctx, tc, &mut own, &insight)?;
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
                let optimized = steps::optimize(ctx, &tc, timer, &merged, flags.allow_stale)?;
                beside.count(&optimized.build);
                // Stage 5b: BOLT after PGO, when llvm-bolt is there (or required).
                let bolted = steps::bolt(ctx, &tc, timer, &merged, &optimized)?;
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
    // other core: `lockstep.rs`).
    beside.finish();
    if let Some(compiling) = comparators {
        let _ = compiling.join();
    }
    // Stage 9: release (and `layout.builds`) in other layouts.
    let layout = steps::layout(ctx, &tc, timer, &optimized, &base)?;
    // Stage 10: the held-out workloads on every build, in lockstep; instructions per message.
    steps::measure(
        ctx,
        timer,
        &optimized,
        &base,
        oracle.as_ref(),
        bolted.as_ref(),
        theirs.as_ref(),
        layout.as_ref(),
    )?;
    // Stage 11: the statistics, the table, report.json, report.md, the plots, history.
    let report = steps::report(ctx, &tc, timer)?;
    publish_and_gate(ctx, flags, &report)
}

/// `cargo xtask pgo <stage>`: that stage alone, on the recorded outputs of the earlier ones.
fn one_stage(ctx: &Ctx, flags: &PgoArgs, timer: &mut Timer, only: Stage) -> Result<()> {
    let tc = &steps::doctor(ctx, timer)?;
    match only {
        Stage::Doctor => {}
        Stage::Instrument => {
            steps::instrument(ctx, tc, timer)?;
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
            steps::train(ctx, tc, timer, &instrumented)?;
        }
        Stage::Merge if !flags.inputs.is_empty() => {
            let bundles = shipped::read_inputs(&flags.inputs)?;
            let merged = steps::merge(ctx, tc, timer, ProfileSource::Bundles(&bundles))?;
            if let Some(dir) = &flags.bundle {
                timer.section_named("bundle", || {
                    shipped::write_merged_bundle(dir, &merged, &bundles)
                })?;
            }
        }
        Stage::Merge => {
            let training: TrainingRun = ctx.load(Stage::Train)?;
            let source = ProfileSource::Training {
                training: &training,
                skip_bad: flags.skip_bad_profiles,
            };
            steps::merge(ctx, tc, timer, source)?;
            if let Some(dir) = &flags.bundle {
                timer.section_named("bundle", || shipped::export(ctx, tc, dir))?;
            }
        }
        Stage::Optimize => {
            let merged = profile::load_merged(ctx)?;
            let merged = match profile::reweighed(ctx, &merged)? {
                // The training is kept; the merge runs again with the weights now in force.
                Some(why) => {
                    eprintln!("{why}: merging again");
                    train_from_scratch(ctx, tc, flags, timer)?
                }
                None => merged,
            };
            let merged = match profile::stale(ctx, tc, &merged)? {
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
            steps::optimize(ctx, tc, timer, &merged, flags.allow_stale)?;
        }
        Stage::Bolt => {
            let merged = profile::load_merged(ctx)?;
            let optimized: OptimizedBuild = ctx.load(Stage::Optimize)?;
            steps::bolt(ctx, tc, timer, &merged, &optimized)?;
        }
        Stage::Insight => {
            let instrumented: InstrumentedBuild = ctx.load(Stage::Instrument)?;
            let merged = profile::load_merged(ctx)?;
            steps::insight(ctx, tc, timer, &instrumented, &merged)?;
        }
        Stage::Oracle => {
            let insight = ctx.load(Stage::Insight)?;
            steps::oracle(ctx, tc, timer, &insight)?;
        }
        Stage::Baselines => {
            steps::baselines(ctx, tc, timer)?;
        }
        Stage::Layout => {
            steps::layout(
                ctx,
                tc,
                timer,
                &ctx.load(Stage::Optimize)?,
                &ctx.load(Stage::Baselines)?,
            )?;
        }
        Stage::Measure => {
            // No oracle record: a run from a stored profile (`--profile`) has none.
            let oracle: Option<OptimizedBuild> = ctx.load_optional(Stage::Oracle)?;
            let bolted = ctx.load_optional(Stage::Bolt)?;
            let layout = ctx.load_optional(Stage::Layout)?;
            steps::measure(
                ctx,
                timer,
                &ctx.load(Stage::Optimize)?,
                &ctx.load(Stage::Baselines)?,
                oracle.as_ref(),
                bolted.as_ref(),
                None,
                layout.as_ref(),
            )?;
        }
        Stage::Report => {
            let report = steps::report(ctx, tc, timer)?;
            publish_and_gate(ctx, flags, &report)?;
        }
    }
    Ok(())
}

/// Instrument, train and merge, each reused when up to date: a profile of this tree.
fn train_from_scratch(
    ctx: &Ctx,
    tc: &Toolchain,
    flags: &PgoArgs,
    timer: &mut Timer,
) -> Result<MergedProfile> {
    let instrumented = steps::instrument(ctx, tc, timer)?;
    let training = steps::train(ctx, tc, timer, &instrumented)?;
    let source = ProfileSource::Training {
        training: &training,
        skip_bad: flags.skip_bad_profiles,
    };
    steps::merge(ctx, tc, timer, source)
}

/// After the report is safely written: `--publish` (a copy in docs/results/), then the gate
/// (`--check` / `--baseline`).
fn publish_and_gate(ctx: &Ctx, flags: &PgoArgs, report: &Report) -> Result<()> {
    if flags.publish {
        let written = crate::report::publish::publish(&ctx.ws.root, &ctx.data, report)?;
        println!("published {}", written.display());
    }
    if !flags.gates() {
        return Ok(());
    }
    let baseline = match &flags.baseline {
        Some(path) => Some(load_baseline(path, report.schema)?),
        None => None,
    };
    crate::report::gate::enforce(report, baseline.as_ref())
}

/// An earlier report.json to gate against, refused with the reason when it was written by
/// another version of the report (build names and fields differ: rows would silently not
/// match).
fn load_baseline(path: &Path, schema: u32) -> Result<Report> {
    let what = "baseline report (a pgo-data/report.json of an earlier run)";
    let value: serde_json::Value = fsx::read_json(path, what)?;
    let theirs = value.get("schema").and_then(serde_json::Value::as_u64);
    if theirs != Some(u64::from(schema)) {
        anyhow::bail!(
            "the baseline {} is a report of schema {}, this version writes schema {schema}: its builds cannot be matched; \
             make a new baseline with this version (run `cargo xtask pgo` and keep its report.json)",
            path.display(),
            theirs.map_or("unknown".to_string(), |s| s.to_string())
        );
    }
    serde_json::from_value(value)
        .with_context(|| format!("cannot read the {what} {}", path.display()))
}

#[cfg(test)]
mod tests {
    use crate::flags::CommonFlags;
    use std::path::PathBuf;

    use super::profile::parse_show;
    use super::*;

    // Real `llvm-profdata show` output (LLVM 22.1.2-rust-1.95.0-stable, mty-bench train).
    const SHOW: &str = "Instrumentation level: IR  entry_first = 0  instrument_loop_entries = 0
Total functions: 1138
Maximum function count: 180000
Maximum internal block count: 442352
Total number of blocks: 11863
Total count: 9704034
";

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

    #[test]
    fn a_baseline_of_another_schema_is_refused_with_the_reason() {
        let dir = std::env::temp_dir().join(format!("xtask-baseline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let old = dir.join("old.json");
        std::fs::write(&old, r#"{"schema": 2, "builds": []}"#).unwrap();
        let schema = crate::report::SCHEMA;
        let err = load_baseline(&old, schema).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "is a report of schema 2, this version writes schema {schema}"
            )),
            "{err}"
        );
        let report = crate::fixtures::report();
        let current = dir.join("current.json");
        std::fs::write(&current, serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(load_baseline(&current, schema).unwrap().schema, schema);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn parses_llvm_profdata_show() {
        let info = parse_show(SHOW, PathBuf::from("p"), "h".into()).unwrap();
        assert_eq!(
            (info.functions, info.max_function_count, info.total_count),
            (1138, 180000, 9704034)
        );
        assert!(
            parse_show("nothing", PathBuf::new(), String::new())
                .unwrap_err()
                .to_string()
                .contains("Total functions:")
        );
    }
}
