//! `cargo xtask pgo`: the pipeline, top to bottom. Each stage is a function whose output is
//! a type the next stage takes (a `MergedProfile` is what `optimize` accepts, and only
//! `merge` or a validated `pgo-data/stages/merge.json` makes one); each output is also
//! written to `pgo-data/stages/<stage>.json`, so any stage can run alone.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::build::{Build, Built};
use crate::cargo::{self, Workspace};
use crate::config::{self, LoadedConfig, Mode};
use crate::flags::{CommonFlags, PgoFlags};
use crate::fsx;
use crate::instructions::InstructionCount;
use crate::lockstep::Session;
use crate::measure::Run;
use crate::report::{ProfileInfo, Report};
use crate::toolchain::{self, Toolchain};
use crate::warnings::ApplyReport;

mod guard;
pub mod insight;
mod profile;
mod results;
pub use insight::InsightReport;
pub use profile::check_applied;
use profile::{instrument, load_merged, merge, optimize, stale, train};
pub use results::run_comparators;
use results::{measure, report};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Doctor,
    Instrument,
    Train,
    Merge,
    Optimize,
    Insight,
    Oracle,
    Baselines,
    Measure,
    Report,
}

impl Stage {
    /// Every stage, in the order the pipeline runs them.
    pub const ALL: [Stage; 10] = [
        Stage::Doctor,
        Stage::Instrument,
        Stage::Train,
        Stage::Merge,
        Stage::Optimize,
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
}

/// Everything the stages share, and the lock on pgo-data/ for as long as it lives.
pub struct Ctx {
    pub config: LoadedConfig,
    pub ws: Workspace,
    pub data: PathBuf,
    pub target_root: PathBuf,
    _lock: guard::Lock,
}

impl Ctx {
    /// Reads the config and the workspace, then takes pgo-data/ for this run (one run at a
    /// time) and removes what an interrupted run left.
    pub fn open(flags: &CommonFlags) -> Result<Ctx> {
        // Profile paths reach rustc inside RUSTFLAGS, which cargo splits on whitespace; and
        // they must be absolute, since rustc runs in each crate's directory.
        let mut dirs = [flags.pgo_data.clone(), flags.target_dir.clone()];
        for path in &mut dirs {
            *path = std::path::absolute(&*path)
                .with_context(|| format!("cannot make {} absolute", path.display()))?;
            if path.to_string_lossy().contains(char::is_whitespace) {
                anyhow::bail!(
                    "{} contains whitespace, which RUSTFLAGS cannot carry; choose another directory",
                    path.display()
                );
            }
        }
        let [data, target_root] = dirs;
        let config = config::load(&flags.config)?;
        let ws = cargo::workspace(&config.config.binary)
            .with_context(|| format!("checking the config {}", flags.config.display()))?;
        let lock = guard::lock(&data, flags.wait)?;
        for leftover in guard::remove_leftover_temps(&data)? {
            eprintln!(
                "removed {} (left by an interrupted run)",
                leftover.display()
            );
        }
        Ok(Ctx {
            config,
            ws,
            data,
            target_root,
            _lock: lock,
        })
    }

    fn stage_file(&self, stage: Stage) -> PathBuf {
        self.data
            .join("stages")
            .join(format!("{}.json", stage.name()))
    }
    fn raw_dir(&self) -> PathBuf {
        self.data.join("raw")
    }
    fn logs(&self) -> PathBuf {
        self.data.join("logs")
    }
    /// A stage's recorded output, for running a later stage alone.
    fn load<T: serde::de::DeserializeOwned>(&self, stage: Stage) -> Result<T> {
        fsx::read_json(
            &self.stage_file(stage),
            &format!("output of the `{}` stage", stage.name()),
        )
    }
    /// Records a stage's output in `pgo-data/stages/<stage>.json`.
    fn record<T: Serialize>(&self, stage: Stage, out: &T) -> Result<()> {
        fsx::write_json(&self.stage_file(stage), out)
    }

    /// Builds `build` with `rustflags` in its own target folder.
    pub fn build(
        &self,
        tc: &Toolchain,
        build: Build,
        rustflags: String,
    ) -> Result<(Built, Vec<String>)> {
        let out = cargo::build(
            &self.ws,
            &tc.rustc.host,
            build,
            &rustflags,
            &self.target_root,
            &self.logs(),
        )?;
        Ok((Built::new(build, out.exe, rustflags), out.diagnostics))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstrumentedBuild(pub Built);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainingRun {
    pub profraw: Vec<PathBuf>,
    /// What the profile depends on (toolchain, training config, sources), hashed.
    pub fingerprint: String,
}

/// An indexed profile produced by `merge` from this run's training.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MergedProfile(pub ProfileInfo);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OptimizedBuild {
    pub build: Built,
    pub apply: ApplyReport,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Baselines {
    pub release: Built,
    pub lto: Built,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measurements {
    pub mode: Mode,
    /// The measured builds, in [`Build::MEASURED`] order.
    pub builds: Vec<Built>,
    /// Processes mode: every run.
    pub runs: Vec<Run>,
    /// Lockstep mode: every session.
    pub sessions: Vec<Session>,
    /// Lockstep mode: the sessions of `measure.versus`, workload against workload.
    pub versus_sessions: Vec<Session>,
    pub instructions: Vec<InstructionCount>,
    pub comparators: Vec<crate::compare::Row>,
}

impl Measurements {
    pub fn builds_of(
        optimized: &OptimizedBuild,
        base: &Baselines,
        oracle: &OptimizedBuild,
    ) -> Vec<Built> {
        Build::MEASURED
            .iter()
            .map(|b| match b {
                Build::Release => base.release.clone(),
                Build::Lto => base.lto.clone(),
                Build::LtoPgo => optimized.build.clone(),
                Build::Oracle => oracle.build.clone(),
                Build::Instrumented => unreachable!("the instrumented build is not measured"),
            })
            .collect()
    }
}

pub fn run(flags: PgoFlags) -> Result<()> {
    let mut timer = Timer::default();
    let result = pipeline(&flags, &mut timer);
    timer.print();
    result
}

/// Runs `f` as `stage` in a timed section, then records its output.
fn stage<T: Serialize>(
    ctx: &Ctx,
    timer: &mut Timer,
    stage: Stage,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let out = timer.section(stage, f)?;
    ctx.record(stage, &out)?;
    Ok(out)
}

fn pipeline(flags: &PgoFlags, timer: &mut Timer) -> Result<()> {
    let ctx = Ctx::open(&flags.common)?;
    eprintln!(
        "pgo: config {}, artifacts in {}, builds in {}",
        ctx.config.path.display(),
        ctx.data.display(),
        ctx.target_root.display()
    );
    // Stage 1: a version-matched llvm-profdata, or nothing works. Cheap, so every
    // invocation runs it.
    let tc = stage(&ctx, timer, Stage::Doctor, doctor)?;
    if flags.calibrate {
        let release = crate::calibrate::release_build(&ctx, &tc)?;
        return timer
            .section_named("calibrate", || crate::calibrate::run(&ctx, &release))
            .map(drop);
    }
    if let Some(only) = flags.stage {
        return one_stage(&ctx, &tc, flags, timer, only);
    }
    // Stage 2: the instrumented build, under the SAME cargo profile as the optimised one.
    let instrumented = stage(&ctx, timer, Stage::Instrument, || instrument(&ctx, &tc))?;
    // Stage 3: run the training mix through that very executable.
    let training = stage(&ctx, timer, Stage::Train, || {
        train(&ctx, &tc, &instrumented)
    })?;
    // Stage 4: raw profiles -> one indexed, content-addressed profile.
    let merged = stage(&ctx, timer, Stage::Merge, || {
        merge(&ctx, &tc, &training, flags.skip_bad_profiles)
    })?;
    // Stage 5: the PGO build, and the proof from rustc's own warnings that it applied
    // (recorded before the verdict, so the counts are on file either way).
    let optimized = stage(&ctx, timer, Stage::Optimize, || {
        optimize(&ctx, &tc, &merged)
    })?;
    check_applied(&optimized, flags.allow_stale)?;
    // Stage 6: why: what the profile holds, and whether the training looks like each
    // measured workload (profiled alone on the instrumented binary).
    let insight = stage(&ctx, timer, Stage::Insight, || {
        insight::insight(&ctx, &tc, &instrumented, &merged)
    })?;
    // Stage 7: the oracle, a PGO build trained on the measured workloads themselves: how much
    // of the attainable gain the held-out training gets. Never shipped.
    let oracle = stage(&ctx, timer, Stage::Oracle, || {
        insight::oracle(&ctx, &tc, &insight)
    })?;
    check_applied(&oracle, false).context("the oracle build")?;
    // Stage 8: what we compare against: no LTO and no PGO; fat LTO without PGO.
    let base = stage(&ctx, timer, Stage::Baselines, || baselines(&ctx, &tc))?;
    // Stage 9: the held-out workloads on every build (lockstep by default), and
    // instructions per message with simulated branches and caches.
    let builds = Measurements::builds_of(&optimized, &base, &oracle);
    let measured = stage(&ctx, timer, Stage::Measure, || measure(&ctx, builds))?;
    // Stage 10: the statistics, the table, report.json, report.md, the plots, history.
    let report = timer.section(Stage::Report, || {
        report(&ctx, &tc, &merged, &optimized, Some(&insight), &measured)
    })?;
    gate(flags, &report)
}

/// `cargo xtask pgo <stage>`: that stage alone, on the recorded outputs of the earlier ones.
fn one_stage(
    ctx: &Ctx,
    tc: &Toolchain,
    flags: &PgoFlags,
    timer: &mut Timer,
    only: Stage,
) -> Result<()> {
    match only {
        Stage::Doctor => {}
        Stage::Instrument => {
            stage(ctx, timer, only, || instrument(ctx, tc))?;
        }
        Stage::Train => {
            stage(ctx, timer, only, || {
                train(ctx, tc, &ctx.load(Stage::Instrument)?)
            })?;
        }
        Stage::Merge => {
            stage(ctx, timer, only, || {
                merge(ctx, tc, &ctx.load(Stage::Train)?, flags.skip_bad_profiles)
            })?;
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
                    let instrumented =
                        stage(ctx, timer, Stage::Instrument, || instrument(ctx, tc))?;
                    let training =
                        stage(ctx, timer, Stage::Train, || train(ctx, tc, &instrumented))?;
                    stage(ctx, timer, Stage::Merge, || {
                        merge(ctx, tc, &training, flags.skip_bad_profiles)
                    })?
                }
            };
            let optimized = stage(ctx, timer, only, || optimize(ctx, tc, &merged))?;
            check_applied(&optimized, flags.allow_stale)?;
        }
        Stage::Insight => {
            stage(ctx, timer, only, || {
                insight::insight(ctx, tc, &ctx.load(Stage::Instrument)?, &load_merged(ctx)?)
            })?;
        }
        Stage::Oracle => {
            let oracle = stage(ctx, timer, only, || {
                insight::oracle(ctx, tc, &ctx.load(Stage::Insight)?)
            })?;
            check_applied(&oracle, false).context("the oracle build")?;
        }
        Stage::Baselines => {
            stage(ctx, timer, only, || baselines(ctx, tc))?;
        }
        Stage::Measure => {
            stage(ctx, timer, only, || {
                let builds = Measurements::builds_of(
                    &ctx.load(Stage::Optimize)?,
                    &ctx.load(Stage::Baselines)?,
                    &ctx.load(Stage::Oracle)?,
                );
                measure(ctx, builds)
            })?;
        }
        Stage::Report => {
            let report = timer.section(only, || {
                // The insight is optional here: a pgo-data/ from before the stage existed.
                let insight: Option<InsightReport> = ctx
                    .stage_file(Stage::Insight)
                    .is_file()
                    .then(|| ctx.load(Stage::Insight))
                    .transpose()?;
                report(
                    ctx,
                    tc,
                    &load_merged(ctx)?,
                    &ctx.load(Stage::Optimize)?,
                    insight.as_ref(),
                    &ctx.load(Stage::Measure)?,
                )
            })?;
            gate(flags, &report)?;
        }
    }
    Ok(())
}

/// `--check` / `--baseline`: the gate, after the report is safely written.
fn gate(flags: &PgoFlags, report: &Report) -> Result<()> {
    if !flags.check {
        return Ok(());
    }
    let baseline = match &flags.baseline {
        Some(path) => Some(load_baseline(path, report.schema)?),
        None => None,
    };
    crate::gate::enforce(report, baseline.as_ref())
}

/// An earlier report.json to gate against, refused with the reason when it was written by
/// another version of the report (build names and fields differ: rows would silently not
/// match).
fn load_baseline(path: &std::path::Path, schema: u32) -> Result<Report> {
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

fn doctor() -> Result<Toolchain> {
    let tc = toolchain::doctor()?;
    eprintln!(
        "doctor: rustc {} (LLVM {}, host {}); llvm-profdata {} ({})",
        tc.rustc.release,
        tc.rustc.llvm_version,
        tc.rustc.host,
        tc.llvm_profdata.display(),
        tc.llvm_profdata_version
    );
    Ok(tc)
}

fn baselines(ctx: &Ctx, tc: &Toolchain) -> Result<Baselines> {
    let (release, _) = ctx.build(tc, Build::Release, Build::Release.rustflags(None))?;
    let (lto, _) = ctx.build(tc, Build::Lto, Build::Lto.rustflags(None))?;
    Ok(Baselines { release, lto })
}

/// Times each stage; prints a table of them at the end, even when the pipeline failed.
#[derive(Default)]
struct Timer {
    sections: Vec<(&'static str, Duration, bool)>,
}

impl Timer {
    fn section<T>(&mut self, stage: Stage, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.section_named(stage.name(), f)
    }

    fn section_named<T>(&mut self, name: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let start = Instant::now();
        let result = f().with_context(|| format!("stage `{name}` failed"));
        self.sections.push((name, start.elapsed(), result.is_ok()));
        result
    }

    fn print(&self) {
        if self.sections.is_empty() {
            return;
        }
        let total: f64 = self.sections.iter().map(|s| s.1.as_secs_f64()).sum();
        eprintln!("\n{:<12} {:>9} {:>7}", "stage", "seconds", "share");
        for (name, took, ok) in &self.sections {
            let s = took.as_secs_f64();
            let share = if total > 0.0 { 100.0 * s / total } else { 0.0 };
            eprintln!(
                "{name:<12} {s:>9.1} {share:>6.1}%{}",
                if *ok { "" } else { "  FAILED" }
            );
        }
        eprintln!("{:<12} {total:>9.1}", "total");
    }
}

#[cfg(test)]
mod tests {
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
            pgo_data: PathBuf::from("/tmp/a b"),
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
        let err = load_baseline(&old, 3).unwrap_err().to_string();
        assert!(
            err.contains("is a report of schema 2, this version writes schema 3"),
            "{err}"
        );
        let report = crate::report::tests::fixture();
        let current = dir.join("current.json");
        std::fs::write(&current, serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(load_baseline(&current, 3).unwrap().schema, 3);
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
