//! One function per stage. Each names the stage's inputs, runs its work or reuses its record
//! when those inputs are unchanged (`stages::run`), applies the stage's own check, and says
//! what the stage found, also when it was up to date. The full pipeline, a stage run alone
//! (`cargo xtask pgo <stage>`), a run on a shipped profile (`--profile`) and a training for a
//! bundle all go through these: no stage is wired twice.

use std::path::Path;

use anyhow::{Context, Result};

use super::bundle::Manifest;
use super::ctx::Ctx;
use super::stages::{self, Timer};
use super::{bolt, inputs, insight, layout, profile, results, shipped};
use crate::build::Build;
use crate::fsx;
use crate::outputs::{
    AgainstBuilds, Baselines, BoltBuild, InsightReport, InstrumentedBuild, LayoutVariants,
    Measurements, MergedProfile, OptimizedBuild, TrainingRun,
};
use crate::report::Report;
use crate::stage::{Outcome, Stage};
use crate::toolchain::{self, Toolchain};

/// Stage 1: rustc and a version-matched llvm-profdata, or nothing works. Cheap, so every
/// invocation runs it.
pub fn doctor(ctx: &Ctx, timer: &mut Timer) -> Result<Toolchain> {
    let tc = timer.section(Stage::Doctor, || {
        let tc = toolchain::doctor(&ctx.ws.root)?;
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
                b.bolt.display(),
                b.version,
                b.merge_fdata.display()
            ),
            None => eprintln!(
                "doctor: llvm-bolt not found (the bolt stage needs it: apt-get install {})",
                crate::bolt::package(tc.rustc.llvm_major)
            ),
        }
        Ok(tc)
    })?;
    ctx.record(Stage::Doctor, &tc)?;
    Ok(tc)
}

/// The instrumented build, under the SAME cargo profile as the optimised one.
pub fn instrument(ctx: &Ctx, tc: &Toolchain, timer: &mut Timer) -> Result<InstrumentedBuild> {
    stages::run(
        ctx,
        timer,
        Stage::Instrument,
        inputs::instrument(ctx, tc)?,
        || profile::instrument(ctx, tc),
    )
}

/// The training mix, run through that very executable.
pub fn train(
    ctx: &Ctx,
    tc: &Toolchain,
    timer: &mut Timer,
    instrumented: &InstrumentedBuild,
) -> Result<TrainingRun> {
    stages::run(
        ctx,
        timer,
        Stage::Train,
        inputs::train(ctx, instrumented)?,
        || profile::train(ctx, tc, instrumented),
    )
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

/// Raw profiles (or stored ones) -> one indexed, content-addressed profile.
pub fn merge(
    ctx: &Ctx,
    tc: &Toolchain,
    timer: &mut Timer,
    source: ProfileSource,
) -> Result<MergedProfile> {
    let merged = match source {
        ProfileSource::Training { training, skip_bad } => stages::run(
            ctx,
            timer,
            Stage::Merge,
            inputs::merge(ctx, tc, training, skip_bad)?,
            || profile::merge(ctx, tc, training, skip_bad),
        )?,
        ProfileSource::Stored { path, allow_stale } => stages::run(
            ctx,
            timer,
            Stage::Merge,
            shipped::inputs(path, allow_stale)?,
            || shipped::use_profile(ctx, tc, path, allow_stale),
        )?,
        ProfileSource::Bundles(bundles) => stages::run(
            ctx,
            timer,
            Stage::Merge,
            shipped::merge_inputs_fingerprint(bundles, tc)?,
            || shipped::merge_bundles(ctx, tc, bundles),
        )?,
    };
    if reused(timer) {
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

/// The PGO build, and the proof from rustc's own warnings that the profile applied (checked
/// after the record is written, so the counts are on file either way).
pub fn optimize(
    ctx: &Ctx,
    tc: &Toolchain,
    timer: &mut Timer,
    merged: &MergedProfile,
    allow_stale: bool,
) -> Result<OptimizedBuild> {
    let optimized = stages::run(
        ctx,
        timer,
        Stage::Optimize,
        inputs::optimize(ctx, tc, merged)?,
        || profile::optimize(ctx, tc, merged),
    )?;
    profile::check_applied(&optimized, allow_stale)?;
    Ok(optimized)
}

/// BOLT after PGO, as `bolt.enabled` asks: skipped (saying why and what to install) when off
/// or when llvm-bolt is missing under "auto"; an error when it is required and missing. A
/// skipped stage's record of an earlier run is removed: it is not this run's build.
pub fn bolt(
    ctx: &Ctx,
    tc: &Toolchain,
    timer: &mut Timer,
    merged: &MergedProfile,
    optimized: &OptimizedBuild,
) -> Result<Option<BoltBuild>> {
    let decided = crate::bolt::decide(
        ctx.config.config.bolt.enabled,
        tc.bolt.as_ref(),
        tc.rustc.llvm_major,
    )?;
    match decided {
        Err(why) => {
            ctx.forget(Stage::Bolt)?;
            timer.skip(Stage::Bolt, &why);
            Ok(None)
        }
        Ok(tools) => {
            let built = stages::run(
                ctx,
                timer,
                Stage::Bolt,
                inputs::bolt(ctx, tc, tools, merged)?,
                || bolt::bolt(ctx, tc, tools, merged, &optimized.build),
            )?;
            if reused(timer) {
                eprintln!(
                    "bolt: {} ({} of {} functions profiled)",
                    built.build.exe.display(),
                    built.report.functions_profiled,
                    built.report.functions_total
                );
            }
            Ok(Some(built))
        }
    }
}

/// Why: what the profile holds, and whether the training looks like each measured workload
/// (profiled alone on the instrumented binary). Its findings are printed whether it ran or
/// was up to date.
pub fn insight(
    ctx: &Ctx,
    tc: &Toolchain,
    timer: &mut Timer,
    instrumented: &InstrumentedBuild,
    merged: &MergedProfile,
) -> Result<InsightReport> {
    let found = stages::run(
        ctx,
        timer,
        Stage::Insight,
        inputs::insight(ctx, tc, instrumented, merged)?,
        || insight::insight(ctx, tc, instrumented, merged),
    )?;
    insight::summarize(&found);
    Ok(found)
}

/// The oracle, a PGO build trained on the measured workloads themselves: how much of the
/// attainable gain the held-out training gets. Never shipped.
pub fn oracle(
    ctx: &Ctx,
    tc: &Toolchain,
    timer: &mut Timer,
    insight: &InsightReport,
) -> Result<OptimizedBuild> {
    let oracle = stages::run(
        ctx,
        timer,
        Stage::Oracle,
        inputs::oracle(ctx, tc, insight)?,
        || insight::oracle(ctx, tc, insight),
    )?;
    profile::check_applied(&oracle, false).context("the oracle build")?;
    Ok(oracle)
}

/// What we compare against: no LTO and no PGO (`release`); fat LTO without PGO (`lto`).
pub fn baselines(ctx: &Ctx, tc: &Toolchain, timer: &mut Timer) -> Result<Baselines> {
    stages::run(
        ctx,
        timer,
        Stage::Baselines,
        inputs::baselines(ctx, tc)?,
        || {
            let (release, _) = ctx.build(tc, Build::Release, Build::Release.rustflags(None))?;
            let (lto, _) = ctx.build(tc, Build::Lto, Build::Lto.rustflags(None))?;
            Ok(Baselines { release, lto })
        },
    )
}

/// `layout.builds` relinked in `layout.variants` other function orders, each checked to
/// differ from its build in layout only (`layout.rs`); `None` when `layout.variants = 0`.
pub fn layout(
    ctx: &Ctx,
    tc: &Toolchain,
    timer: &mut Timer,
    optimized: &OptimizedBuild,
    base: &Baselines,
) -> Result<Option<LayoutVariants>> {
    let cfg = &ctx.config.config;
    let why = if cfg.layout.variants == 0 {
        Some("`layout.variants = 0`")
    } else if cfg.layout.workloads_of(&cfg.check).is_empty() {
        Some(
            "no workload to measure the variants on (`layout.workloads`, else `check.workloads`, is empty)",
        )
    } else {
        None
    };
    if let Some(why) = why {
        ctx.forget(Stage::Layout)?;
        timer.skip(Stage::Layout, why);
        return Ok(None);
    }
    let builds = Measurements::builds_of(optimized, base, None, None);
    stages::run(
        ctx,
        timer,
        Stage::Layout,
        inputs::layout(ctx, tc, &builds)?,
        || layout::variants(ctx, tc, &builds),
    )
    .map(Some)
}

/// The measured workloads on every build in lockstep (and `--against`'s builds of another
/// commit beside them, and the layout variants in their workloads' sessions), instructions per message with simulated branches and caches, and
/// the comparators.
// The recorded outputs it measures, each its own argument, as the stages made them.
#[allow(clippy::too_many_arguments)]
pub fn measure(
    ctx: &Ctx,
    timer: &mut Timer,
    optimized: &OptimizedBuild,
    base: &Baselines,
    oracle: Option<&OptimizedBuild>,
    bolted: Option<&BoltBuild>,
    theirs: Option<&AgainstBuilds>,
    layout: Option<&LayoutVariants>,
) -> Result<Measurements> {
    let builds = Measurements::builds_of(optimized, base, oracle, bolted);
    stages::run(
        ctx,
        timer,
        Stage::Measure,
        inputs::measure(ctx, &builds, theirs, layout)?,
        || results::measure(ctx, builds.clone(), theirs, layout),
    )
}

/// The statistics, the table, report.json, report.md, the plots, history. Renders from the
/// recorded outputs of the stages before it; when up to date, report.json is read back and
/// its table shown again.
pub fn report(ctx: &Ctx, tc: &Toolchain, timer: &mut Timer) -> Result<Report> {
    let so_far = timer.runs.clone();
    let rendered = stages::run(ctx, timer, Stage::Report, inputs::report(ctx)?, || {
        // The insight is optional here: a run from a stored profile has none.
        let insight: Option<InsightReport> = ctx.load_optional(Stage::Insight)?;
        // The BOLT build, when this pgo-data has one (a skipped stage removes its record).
        let bolt: Option<BoltBuild> = ctx.load_optional(Stage::Bolt)?;
        results::report(
            ctx,
            tc,
            &profile::load_merged(ctx)?,
            &ctx.load(Stage::Optimize)?,
            insight.as_ref(),
            &ctx.load(Stage::Measure)?,
            so_far,
            bolt,
        )
    })?;
    let report: Report = fsx::read_json(&rendered.report_json, "the report")?;
    if reused(timer) {
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
            fsx::append_line(Path::new(&summary), &markdown)?;
        }
    }
    Ok(report)
}

/// Whether the stage just run was up to date (its record reused).
fn reused(timer: &Timer) -> bool {
    timer
        .runs
        .last()
        .is_some_and(|r| r.outcome == Outcome::Reused)
}
