//! `oracle`: a PGO build whose profile is the measured workloads' own, what a training could
//! get at best. Measured beside the others (the training's share of its gain) and never
//! shipped.

use anyhow::{Context, Result};

use super::optimize::OptimizedBuild;
use crate::toolchain::build::Build;
use crate::base::exec::Cmd;
use crate::flags::PgoArgs;
use crate::analysis::outputs::InsightReport;
use crate::pipeline::ctx::Ctx;
use crate::pipeline::fresh::Inputs;
use crate::pipeline::runner::{self, Timer};
use crate::base::stages::Stage;
use crate::toolchain::tools::Toolchain;

fn inputs(ctx: &Ctx, toolchain: &Toolchain, insight: &InsightReport) -> Result<Inputs> {
    // The oracle's profile is named by its content: its flags carry the profiles' hash.
    let mut inputs = super::build_inputs(ctx, toolchain, Build::Oracle, "")?;
    for w in &insight.workloads {
        inputs = inputs.file(&format!("workload/{}", w.workload), &w.profile)?;
    }
    Ok(inputs)
}

/// The oracle, a PGO build trained on the measured workloads themselves: how much of the
/// attainable gain the held-out training gets. Never shipped.
pub fn run(
    ctx: &Ctx,
    toolchain: &Toolchain,
    timer: &mut Timer,
    insight: &InsightReport,
) -> Result<OptimizedBuild> {
    let oracle = runner::run(ctx, timer, Stage::Oracle, inputs(ctx, toolchain, insight)?, || {
        build(ctx, toolchain, insight)
    })?;
    super::optimize::check_applied(&oracle, &ctx.config.settings.apply_check.required, false).context("the oracle build")?;
    Ok(oracle)
}

/// The oracle: a build whose profile is the measured workloads' own (merged from the insight
/// stage's per-workload profiles). It says what a training could get at best; it is measured
/// beside the others and never shipped. The profile is content-addressed like the training's
/// (cargo fingerprints the path, not the content).
fn build(ctx: &Ctx, toolchain: &Toolchain, insight: &InsightReport) -> Result<OptimizedBuild> {
    let dir = ctx.pgo_data.join("insight");
    let tmp = crate::base::fsx::temp_path(&dir.join("oracle.profdata"));
    Cmd::new(toolchain.llvm_profdata.display().to_string())
        .args(["merge", "-o"])
        .arg(tmp.display().to_string())
        .args(
            insight
                .workloads
                .iter()
                .map(|w| w.profile.display().to_string()),
        )
        .read()
        .context("merging the measured workloads' profiles into the oracle profile")?;
    let bytes = std::fs::read(&tmp).with_context(|| format!("cannot read {}", tmp.display()))?;
    let path = dir.join(format!(
        "oracle-{:016x}.profdata",
        crate::base::fsx::fnv1a64(&bytes)
    ));
    crate::base::fsx::rename_content_addressed(&tmp, &path)?;
    for entry in std::fs::read_dir(&dir)?.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("oracle-") && entry.path() != path {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    super::optimize::pgo_build(ctx, toolchain, crate::toolchain::build::Build::Oracle, &path)
}

/// `cargo xtask pgo oracle`: on the recorded insight profiles.
pub fn alone(ctx: &Ctx, toolchain: &Toolchain, timer: &mut Timer, _args: &PgoArgs) -> Result<()> {
    let insight: InsightReport = ctx.load(Stage::Insight)?;
    run(ctx, toolchain, timer, &insight).map(drop)
}
