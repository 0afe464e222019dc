//! `cargo xtask pgo`: the pipeline, top to bottom. Each stage is a function whose output is
//! a type the next stage takes (a `MergedProfile` is what `optimize` accepts, and only
//! `merge` or a validated `pgo-data/stages/merge.json` makes one); each output is also
//! written to `pgo-data/stages/<stage>.json`, so any stage can run alone.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::cargo::{self, BuildSpec, Workspace};
use crate::config::{self, LoadedConfig};
use crate::fsx;
use crate::instructions::InstructionCount;
use crate::measure::{Run, Variant};
use crate::report::{ProfileInfo, Report};
use crate::toolchain::{self, Toolchain};
use crate::warnings::ApplyReport;

mod guard;
mod profile;
mod results;
use profile::{instrument, load_merged, merge, optimize, stale, train};
pub use results::compare_command;
use results::{measure, report};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Doctor,
    Instrument,
    Train,
    Merge,
    Optimize,
    Baselines,
    Measure,
    Report,
}

impl Stage {
    fn parse(name: &str) -> Option<Stage> {
        Some(match name {
            "doctor" => Stage::Doctor,
            "instrument" => Stage::Instrument,
            "train" => Stage::Train,
            "merge" => Stage::Merge,
            "optimize" => Stage::Optimize,
            "baselines" => Stage::Baselines,
            "measure" => Stage::Measure,
            "report" => Stage::Report,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone)]
pub struct Flags {
    pub stage: Option<Stage>,
    pub config: PathBuf,
    pub pgo_data: PathBuf,
    pub target_dir: PathBuf,
    /// Run the gate after the report.
    pub check: bool,
    /// A stored report.json to check for regressions against (implies `check`).
    pub baseline: Option<PathBuf>,
    /// Queue behind another run holding pgo-data/ instead of stopping.
    pub wait: bool,
    /// Merge the good raw profiles when some are corrupt, and say which were skipped.
    pub skip_bad_profiles: bool,
    /// Optimise with a stale profile instead of retraining; the report shows the mismatches.
    pub allow_stale: bool,
}

impl Flags {
    pub fn parse(mut argv: impl Iterator<Item = String>) -> Result<Flags> {
        let root = cargo::project_root();
        let mut flags = Flags {
            stage: None,
            config: root.join("profiles/default.toml"),
            pgo_data: root.join("pgo-data"),
            target_dir: root.join("target/pgo"),
            check: false,
            baseline: None,
            wait: false,
            skip_bad_profiles: false,
            allow_stale: false,
        };
        while let Some(arg) = argv.next() {
            match arg.as_str() {
                "--config" => flags.config = crate::flag_value(&arg, &mut argv)?,
                "--pgo-data" => flags.pgo_data = crate::flag_value(&arg, &mut argv)?,
                "--target-dir" => flags.target_dir = crate::flag_value(&arg, &mut argv)?,
                "--check" => flags.check = true,
                "--wait" => flags.wait = true,
                "--skip-bad-profiles" => flags.skip_bad_profiles = true,
                "--allow-stale" => flags.allow_stale = true,
                "--baseline" => {
                    flags.baseline = Some(crate::flag_value(&arg, &mut argv)?);
                    flags.check = true;
                }
                flag if flag.starts_with('-') => return crate::unknown_flag(flag),
                stage => match (Stage::parse(stage), flags.stage) {
                    (Some(s), None) => flags.stage = Some(s),
                    (Some(_), Some(_)) => bail!("give at most one stage"),
                    (None, _) => bail!("unknown stage `{stage}`\n\n{}", crate::USAGE),
                },
            }
        }
        // Profile paths reach rustc inside RUSTFLAGS, which cargo splits on whitespace; and
        // they must be absolute, since rustc runs in each crate's directory.
        for path in [&mut flags.pgo_data, &mut flags.target_dir] {
            *path = std::path::absolute(&*path)
                .with_context(|| format!("cannot make {} absolute", path.display()))?;
            if path.to_string_lossy().contains(char::is_whitespace) {
                bail!(
                    "{} contains whitespace, which RUSTFLAGS cannot carry; choose another directory",
                    path.display()
                );
            }
        }
        Ok(flags)
    }
}

/// Everything the stages share, and the lock on pgo-data/ for as long as it lives.
struct Ctx {
    config: LoadedConfig,
    ws: Workspace,
    data: PathBuf,
    target_root: PathBuf,
    flags: Flags,
    _lock: guard::Lock,
}

impl Ctx {
    /// Reads the config and the workspace, then takes pgo-data/ for this run (one run at a
    /// time) and removes what an interrupted run left.
    fn open(flags: &Flags) -> Result<Ctx> {
        let config = config::load(&flags.config)?;
        let ws = cargo::workspace(&config.config.binary)
            .with_context(|| format!("checking the config {}", flags.config.display()))?;
        let lock = guard::lock(&flags.pgo_data, flags.wait)?;
        for leftover in guard::remove_leftover_temps(&flags.pgo_data)? {
            eprintln!(
                "removed {} (left by an interrupted run)",
                leftover.display()
            );
        }
        Ok(Ctx {
            config,
            ws,
            data: flags.pgo_data.clone(),
            target_root: flags.target_dir.clone(),
            flags: flags.clone(),
            _lock: lock,
        })
    }

    fn stage_file(&self, stage: &str) -> PathBuf {
        self.data.join("stages").join(format!("{stage}.json"))
    }
    fn raw_dir(&self) -> PathBuf {
        self.data.join("raw")
    }
    fn logs(&self) -> PathBuf {
        self.data.join("logs")
    }
    fn load<T: serde::de::DeserializeOwned>(&self, stage: &str) -> Result<T> {
        fsx::read_json(
            &self.stage_file(stage),
            &format!("output of the `{stage}` stage"),
        )
    }
}

/// A build of the binary: where it is and how it was made.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuildRecord {
    pub exe: PathBuf,
    pub cargo_profile: String,
    pub rustflags: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstrumentedBuild(pub BuildRecord);

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
    pub build: BuildRecord,
    pub apply: ApplyReport,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Baselines {
    pub release: BuildRecord,
    pub lto: BuildRecord,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measurements {
    pub variants: Vec<Variant>,
    pub runs: Vec<Run>,
    pub instructions: Vec<InstructionCount>,
    pub comparators: Vec<crate::compare::Row>,
}

pub fn run(flags: Flags) -> Result<()> {
    let mut timer = Timer::default();
    let result = pipeline(&flags, &mut timer);
    timer.print();
    result
}

fn pipeline(flags: &Flags, timer: &mut Timer) -> Result<()> {
    let ctx = Ctx::open(flags)?;
    eprintln!(
        "pgo: config {}, artifacts in {}, builds in {}",
        ctx.config.path.display(),
        ctx.data.display(),
        ctx.target_root.display()
    );
    // Stage 1: a version-matched llvm-profdata, or nothing works. Cheap, so every
    // invocation runs it.
    let tc = timer.section("doctor", || doctor(&ctx))?;
    match flags.stage {
        None => {}
        Some(Stage::Doctor) => return Ok(()),
        Some(Stage::Instrument) => {
            return timer
                .section("instrument", || instrument(&ctx, &tc))
                .map(drop);
        }
        Some(Stage::Train) => {
            return timer
                .section("train", || train(&ctx, &tc, &ctx.load("instrument")?))
                .map(drop);
        }
        Some(Stage::Merge) => {
            return timer
                .section("merge", || merge(&ctx, &tc, &ctx.load("train")?))
                .map(drop);
        }
        Some(Stage::Optimize) => {
            let merged = load_merged(&ctx)?;
            let merged = match stale(&ctx, &tc, &merged)? {
                None => merged,
                Some(why) if flags.allow_stale => {
                    eprintln!("warning: {why}; optimizing with it anyway (--allow-stale)");
                    merged
                }
                Some(why) => {
                    // The default retrains: a stale profile only half applies.
                    eprintln!("{why}: retraining (pass --allow-stale to use it anyway)");
                    let instrumented = timer.section("instrument", || instrument(&ctx, &tc))?;
                    let training = timer.section("train", || train(&ctx, &tc, &instrumented))?;
                    timer.section("merge", || merge(&ctx, &tc, &training))?
                }
            };
            return timer
                .section("optimize", || optimize(&ctx, &tc, &merged))
                .map(drop);
        }
        Some(Stage::Baselines) => {
            return timer
                .section("baselines", || baselines(&ctx, &tc))
                .map(drop);
        }
        Some(Stage::Measure) => {
            return timer
                .section("measure", || {
                    measure(&ctx, &ctx.load("optimize")?, &ctx.load("baselines")?)
                })
                .map(drop);
        }
        Some(Stage::Report) => {
            let report = timer.section("report", || {
                report(
                    &ctx,
                    &tc,
                    &load_merged(&ctx)?,
                    &ctx.load("optimize")?,
                    &ctx.load("baselines")?,
                    &ctx.load("measure")?,
                )
            })?;
            return gate(flags, &report);
        }
    }
    // Stage 2: the instrumented build, under the SAME cargo profile as the optimised one.
    let instrumented = timer.section("instrument", || instrument(&ctx, &tc))?;
    // Stage 3: run the training mix through that very executable.
    let training = timer.section("train", || train(&ctx, &tc, &instrumented))?;
    // Stage 4: raw profiles -> one indexed, content-addressed profile.
    let merged = timer.section("merge", || merge(&ctx, &tc, &training))?;
    // Stage 5: the PGO build, and the proof from rustc's own warnings that it applied.
    let optimized = timer.section("optimize", || optimize(&ctx, &tc, &merged))?;
    // Stage 6: what we compare against: no LTO and no PGO; fat LTO without PGO.
    let base = timer.section("baselines", || baselines(&ctx, &tc))?;
    // Stage 7: the held-out workloads on all three builds in randomised paired blocks, and
    // instructions per message.
    let measured = timer.section("measure", || measure(&ctx, &optimized, &base))?;
    // Stage 8: the statistics, the table, report.json, report.md, latency.svg, history.
    let report = timer.section("report", || {
        report(&ctx, &tc, &merged, &optimized, &base, &measured)
    })?;
    gate(flags, &report)
}

/// `--check` / `--baseline`: the gate, after the report is safely written.
fn gate(flags: &Flags, report: &Report) -> Result<()> {
    if !flags.check {
        return Ok(());
    }
    let baseline: Option<Report> = match &flags.baseline {
        Some(path) => Some(fsx::read_json(
            path,
            "baseline report (a pgo-data/report.json of an earlier run)",
        )?),
        None => None,
    };
    crate::gate::enforce(report, baseline.as_ref())
}

fn doctor(ctx: &Ctx) -> Result<Toolchain> {
    let tc = toolchain::doctor()?;
    eprintln!(
        "doctor: rustc {} (LLVM {}, host {}); llvm-profdata {} ({})",
        tc.rustc.release,
        tc.rustc.llvm_version,
        tc.rustc.host,
        tc.llvm_profdata.display(),
        tc.llvm_profdata_version
    );
    fsx::write_json(&ctx.stage_file("doctor"), &tc)?;
    Ok(tc)
}

fn build(
    ctx: &Ctx,
    tc: &Toolchain,
    label: &str,
    profile: &str,
    rustflags: String,
) -> Result<(BuildRecord, Vec<String>)> {
    let spec = BuildSpec {
        label,
        profile,
        rustflags: rustflags.clone(),
        target_dir: ctx.target_root.join(label),
    };
    let built = cargo::build(&ctx.ws, &tc.rustc.host, &spec, &ctx.logs())?;
    Ok((
        BuildRecord {
            exe: built.exe,
            cargo_profile: profile.to_string(),
            rustflags,
        },
        built.diagnostics,
    ))
}

fn baselines(ctx: &Ctx, tc: &Toolchain) -> Result<Baselines> {
    let (release, _) = build(ctx, tc, "release", "release", String::new())?;
    let (lto, _) = build(ctx, tc, "lto", "release-pgo", String::new())?;
    let out = Baselines { release, lto };
    fsx::write_json(&ctx.stage_file("baselines"), &out)?;
    Ok(out)
}

fn variants(optimized: &OptimizedBuild, base: &Baselines) -> Vec<Variant> {
    vec![
        Variant {
            name: "release".into(),
            exe: base.release.exe.clone(),
        },
        Variant {
            name: "release-lto".into(),
            exe: base.lto.exe.clone(),
        },
        Variant {
            name: "release-pgo".into(),
            exe: optimized.build.exe.clone(),
        },
    ]
}

/// Times each stage; prints a table of them at the end, even when the pipeline failed.
#[derive(Default)]
struct Timer {
    sections: Vec<(&'static str, Duration, bool)>,
}

impl Timer {
    fn section<T>(&mut self, name: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
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

    #[test]
    fn stages_parse_and_bad_flags_are_refused() {
        let parse = |s: &str| Flags::parse(s.split_whitespace().map(String::from));
        assert_eq!(
            parse("merge --config x.toml").unwrap().stage,
            Some(Stage::Merge)
        );
        assert_eq!(parse("").unwrap().stage, None);
        assert!(
            parse("bake")
                .unwrap_err()
                .to_string()
                .starts_with("unknown stage `bake`")
        );
        assert!(
            parse("--fast")
                .unwrap_err()
                .to_string()
                .starts_with("unknown flag `--fast`")
        );
        assert!(
            parse("merge train")
                .unwrap_err()
                .to_string()
                .contains("at most one stage")
        );
        assert!(
            parse("--pgo-data")
                .unwrap_err()
                .to_string()
                .contains("`--pgo-data` needs a value")
        );
        let spaced = Flags::parse(["--pgo-data".to_string(), "/tmp/a b".to_string()].into_iter());
        assert!(
            spaced
                .unwrap_err()
                .to_string()
                .contains("contains whitespace, which RUSTFLAGS cannot carry")
        );
    }
}
