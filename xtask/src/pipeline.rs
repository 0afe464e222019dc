//! `cargo xtask pgo`: the pipeline, top to bottom. Each stage is a function whose output is
//! a type the next stage takes (a `MergedProfile` is what `optimize` accepts, and only
//! `merge` or a validated `pgo-data/stages/merge.json` makes one); each output is also
//! written to `pgo-data/stages/<stage>.json`, so any stage can run alone.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::build::{Build, Built};
use crate::cargo::{self, Workspace};
use crate::config::{self, LoadedConfig};
use crate::flags::{CommonFlags, PgoFlags};
use crate::fsx;
use crate::instructions::InstructionCount;
use crate::lockstep::Session;
use crate::report::{ProfileInfo, Report};
use crate::toolchain::{self, Toolchain};
use crate::warnings::ApplyReport;

pub mod bolt;
mod bundle;
pub mod calibrate;
mod fresh;
mod guard;
mod inputs;
pub mod insight;
mod profile;
mod results;
mod shipped;
mod stages;
mod variants;
pub use insight::InsightReport;
pub use profile::check_applied;
use profile::{instrument, load_merged, merge, optimize, stale, train};
use results::{measure, report};
use stages::Timer;
pub use stages::{Outcome, Stage, StageRun};
use variants::{bolt_stage, from_profile, one_stage};

/// Everything the stages share, and the lock on pgo-data/ for as long as it lives.
pub struct Ctx {
    pub config: LoadedConfig,
    pub ws: Workspace,
    pub data: PathBuf,
    pub target_root: PathBuf,
    /// `--force [STAGE]`: this stage and every later one run even when up to date.
    pub force_from: Option<Stage>,
    /// `--remeasure`: measure (and report) again even when the builds are unchanged.
    pub remeasure: bool,
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
            force_from: None,
            remeasure: false,
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
    /// A stage's recorded output when there is one (a stage that was skipped has none).
    fn load_optional<T: serde::de::DeserializeOwned>(&self, stage: Stage) -> Result<Option<T>> {
        self.stage_file(stage)
            .is_file()
            .then(|| self.load(stage))
            .transpose()
    }
    /// Removes a stage's records: what they describe is not this run's.
    fn forget(&self, stage: Stage) -> Result<()> {
        for file in [self.stage_file(stage), self.inputs_file(stage)] {
            if file.exists() {
                std::fs::remove_file(&file)
                    .with_context(|| format!("cannot remove {}", file.display()))?;
            }
        }
        Ok(())
    }
    fn inputs_file(&self, stage: Stage) -> PathBuf {
        self.data
            .join("stages")
            .join(format!("{}.inputs.json", stage.name()))
    }
    /// The inputs the stage's recorded output was made from; `None` when there is no
    /// readable record (it then runs).
    fn load_inputs(&self, stage: Stage) -> Option<fresh::Recorded> {
        fsx::read_json(&self.inputs_file(stage), "stage inputs").ok()
    }
    fn record_inputs(&self, stage: Stage, inputs: &fresh::Recorded) -> Result<()> {
        fsx::write_json(&self.inputs_file(stage), inputs)
    }
    /// Whether `stage` must run although it may be up to date.
    fn forced(&self, stage: Stage) -> bool {
        let index = |s: Stage| Stage::ALL.iter().position(|x| *x == s);
        self.force_from
            .is_some_and(|from| index(stage) >= index(from))
            || (self.remeasure && stage == Stage::Measure)
    }

    /// Builds `build` with `rustflags` in its own target folder.
    pub fn build(
        &self,
        tc: &Toolchain,
        build: Build,
        rustflags: String,
    ) -> Result<(Built, Vec<String>)> {
        let flags = crate::rustflags::compose(&tc.user_rustflags, &rustflags);
        let out = cargo::build(
            &self.ws,
            &tc.rustc.host,
            build,
            &flags,
            &self.target_root,
            &self.logs(),
        )?;
        // The final crate's own flags (`cargo rustc -- …`) are part of how it was built.
        let flags: Vec<String> = flags
            .into_iter()
            .chain(build.final_args().iter().map(|a| a.to_string()))
            .collect();
        let mut built = Built::new(build, out.exe, flags.join(" "));
        built.rustflags_exact = flags;
        built.user_rustflags_source = tc.user_rustflags.source.clone();
        built.hash = fsx::file_hash(&built.exe)?;
        built.compiled = out.compiled;
        Ok((built, out.diagnostics))
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
    /// The measured builds, in [`Build::MEASURED`] order.
    pub builds: Vec<Built>,
    /// Every lockstep session.
    pub sessions: Vec<Session>,
    /// The sessions of `measure.versus`, workload against workload.
    pub versus_sessions: Vec<Session>,
    pub instructions: Vec<InstructionCount>,
    pub comparators: Vec<crate::compare::Row>,
}

impl Measurements {
    /// The measured builds; without an oracle (`--profile`: nothing trained here to make
    /// one from) the others.
    pub fn builds_of(
        optimized: &OptimizedBuild,
        base: &Baselines,
        oracle: Option<&OptimizedBuild>,
        bolt: Option<&bolt::BoltBuild>,
    ) -> Vec<Built> {
        Build::MEASURED
            .iter()
            .filter_map(|b| match b {
                Build::Release => Some(base.release.clone()),
                Build::Lto => Some(base.lto.clone()),
                Build::LtoPgo => Some(optimized.build.clone()),
                Build::Oracle => oracle.map(|o| o.build.clone()),
                Build::Bolt => bolt.map(|b| b.build.clone()),
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

fn pipeline(flags: &PgoFlags, timer: &mut Timer) -> Result<()> {
    let mut ctx = Ctx::open(&flags.common)?;
    ctx.force_from = flags.force;
    ctx.remeasure = flags.remeasure;
    let ctx = ctx;
    eprintln!(
        "pgo: config {}, artifacts in {}, builds in {}",
        ctx.config.path.display(),
        ctx.data.display(),
        ctx.target_root.display()
    );
    // Stage 1: a version-matched llvm-profdata, or nothing works. Cheap, so every
    // invocation runs it.
    let tc = timer.section(Stage::Doctor, doctor)?;
    ctx.record(Stage::Doctor, &tc)?;
    // The C++ and Go comparators compile (seconds, one core each) while the builds below leave a
    // core idle in their single-threaded LTO steps; the report finds them up to date.
    let comparators =
        crate::compare::compile_in_background(&ctx.ws.root, &ctx.target_root.join("comparators"));
    if flags.calibrate {
        let release = crate::pipeline::calibrate::release_build(&ctx, &tc)?;
        return timer
            .section_named("calibrate", || {
                crate::pipeline::calibrate::run(&ctx, &release)
            })
            .map(drop);
    }
    if let Some(dir) = &flags.export {
        return timer.section_named("export", || shipped::export(&ctx, &tc, dir));
    }
    if let Some(only) = flags.stage {
        return one_stage(&ctx, &tc, flags, timer, only);
    }
    if let Some(path) = &flags.profile {
        return from_profile(&ctx, &tc, flags, timer, path);
    }
    // Every stage below is reused when its inputs are unchanged (`stages::run`).
    // Stage 2: the instrumented build, under the SAME cargo profile as the optimised one.
    let instrumented = stages::run(
        &ctx,
        timer,
        Stage::Instrument,
        inputs::instrument(&ctx, &tc)?,
        || instrument(&ctx, &tc),
    )?;
    // Stage 3: run the training mix through that very executable.
    let training = stages::run(
        &ctx,
        timer,
        Stage::Train,
        inputs::train(&ctx, &instrumented)?,
        || train(&ctx, &tc, &instrumented),
    )?;
    // Stage 4: raw profiles -> one indexed, content-addressed profile.
    let merged = stages::run(
        &ctx,
        timer,
        Stage::Merge,
        inputs::merge(&tc, &training, flags.skip_bad_profiles)?,
        || merge(&ctx, &tc, &training, flags.skip_bad_profiles),
    )?;
    // Stage 5: the PGO build, and the proof from rustc's own warnings that it applied
    // (recorded before the verdict, so the counts are on file either way).
    let optimized = stages::run(
        &ctx,
        timer,
        Stage::Optimize,
        inputs::optimize(&ctx, &tc, &merged)?,
        || optimize(&ctx, &tc, &merged),
    )?;
    check_applied(&optimized, flags.allow_stale)?;
    // Stage 5b: BOLT after PGO, when llvm-bolt is there (or required).
    let bolted = bolt_stage(&ctx, &tc, timer, &merged, &optimized)?;
    // Stage 6: why: what the profile holds, and whether the training looks like each
    // measured workload (profiled alone on the instrumented binary).
    let insight = stages::run(
        &ctx,
        timer,
        Stage::Insight,
        inputs::insight(&ctx, &tc, &instrumented, &merged)?,
        || insight::insight(&ctx, &tc, &instrumented, &merged),
    )?;
    // Stage 7: the oracle, a PGO build trained on the measured workloads themselves: how much
    // of the attainable gain the held-out training gets. Never shipped.
    let oracle = stages::run(
        &ctx,
        timer,
        Stage::Oracle,
        inputs::oracle(&ctx, &tc, &insight)?,
        || insight::oracle(&ctx, &tc, &insight),
    )?;
    check_applied(&oracle, false).context("the oracle build")?;
    // Stage 8: what we compare against: no LTO and no PGO; fat LTO without PGO.
    let base = stages::run(
        &ctx,
        timer,
        Stage::Baselines,
        inputs::baselines(&ctx, &tc)?,
        || baselines(&ctx, &tc),
    )?;
    // Stage 9: the held-out workloads on every build (lockstep by default), and
    // instructions per message with simulated branches and caches.
    let builds = Measurements::builds_of(&optimized, &base, Some(&oracle), bolted.as_ref());
    stages::run(
        &ctx,
        timer,
        Stage::Measure,
        inputs::measure(&ctx, &builds)?,
        || measure(&ctx, builds.clone()),
    )?;
    // Stage 10: the statistics, the table, report.json, report.md, the plots, history.
    let _ = comparators.join();
    let report = report_stage(&ctx, &tc, timer)?;
    gate(flags, &report)
}

/// The report stage (reused like the others: then report.json is read back, and its table
/// shown again); it renders from the recorded outputs of the stages before it.
fn report_stage(ctx: &Ctx, tc: &Toolchain, timer: &mut Timer) -> Result<Report> {
    let so_far = timer.runs.clone();
    let rendered = stages::run(ctx, timer, Stage::Report, inputs::report(ctx)?, || {
        // The insight is optional here: a pgo-data/ from before the stage existed.
        let insight: Option<InsightReport> = ctx.load_optional(Stage::Insight)?;
        // The BOLT build, when this pgo-data has one (a skipped stage removes its record).
        let bolt: Option<bolt::BoltBuild> = ctx.load_optional(Stage::Bolt)?;
        report(
            ctx,
            tc,
            &load_merged(ctx)?,
            &ctx.load(Stage::Optimize)?,
            insight.as_ref(),
            &ctx.load(Stage::Measure)?,
            so_far,
            bolt,
        )
    })?;
    let report: Report = fsx::read_json(&rendered.report_json, "the report")?;
    if timer
        .runs
        .last()
        .is_some_and(|r| r.outcome == stages::Outcome::Reused)
    {
        println!("\n{}", crate::report::render_table(&report));
        println!(
            "nothing changed since {} was written: it is this run's result",
            rendered.report_json.display()
        );
        // A CI job that reuses the report still shows the page.
        if let Some(summary) = std::env::var_os("GITHUB_STEP_SUMMARY") {
            let page = ctx.data.join("report.md");
            let markdown = std::fs::read_to_string(&page)
                .with_context(|| format!("cannot read {}", page.display()))?;
            fsx::append_line(std::path::Path::new(&summary), &markdown)?;
        }
    }
    Ok(report)
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
    crate::report::gate::enforce(report, baseline.as_ref())
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
    eprintln!(
        "doctor: the user's rustflags: {}",
        tc.user_rustflags.describe()
    );
    match &tc.bolt {
        Some(b) => eprintln!(
            "doctor: llvm-bolt {} ({}), merge-fdata {}",
            b.llvm_bolt.display(),
            b.version,
            b.merge_fdata.display()
        ),
        None => eprintln!(
            "doctor: llvm-bolt not found (the bolt stage needs it: apt-get install {})",
            crate::llvm_bolt::package(tc.rustc.llvm_major)
        ),
    }
    Ok(tc)
}

fn baselines(ctx: &Ctx, tc: &Toolchain) -> Result<Baselines> {
    let (release, _) = ctx.build(tc, Build::Release, Build::Release.rustflags(None))?;
    let (lto, _) = ctx.build(tc, Build::Lto, Build::Lto.rustflags(None))?;
    Ok(Baselines { release, lto })
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
        let schema = crate::report::SCHEMA;
        let err = load_baseline(&old, schema).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "is a report of schema 2, this version writes schema {schema}"
            )),
            "{err}"
        );
        let report = crate::report::tests::fixture();
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
