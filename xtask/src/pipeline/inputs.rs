//! What each stage's output depends on ([`Inputs`]), and what each output points to
//! ([`Artifacts`]): the two halves of "up to date" (`fresh.rs`, `stages.rs`).

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::ctx::Ctx;
use super::fresh::{Artifacts, Inputs};
use crate::build::{Build, Built};
use crate::outputs::BoltBuild;
use crate::outputs::Rendered;
use crate::outputs::{
    AgainstBuilds, Baselines, InsightReport, InstrumentedBuild, LayoutVariants, Measurements,
    MergedProfile, OptimizedBuild, TrainingRun,
};
use crate::toolchain::Toolchain;

/// What every build depends on: the toolchain, the sources that go into mty-bench, the
/// binary's name, and this build's cargo profile and flags.
fn build(ctx: &Ctx, tc: &Toolchain, build: Build, rustflags: &str) -> Result<Inputs> {
    Ok(Inputs::new()
        .text("toolchain", tc.rustc_vv.clone())
        .text("sources", ctx.sources_hash()?)
        .text("binary", ctx.config.config.binary.clone())
        .text(
            &format!("{}.cargo_profile", build.name()),
            build.cargo_profile(),
        )
        .text(
            &format!("{}.rustflags", build.name()),
            [rustflags]
                .into_iter()
                .chain(build.final_args().iter().copied())
                .collect::<Vec<_>>()
                .join(" "),
        )
        .text("user_rustflags", tc.user_rustflags.flags.join("\x1f")))
}

pub fn instrument(ctx: &Ctx, tc: &Toolchain) -> Result<Inputs> {
    build(ctx, tc, Build::Instrumented, &ctx.instrument_rustflags())
}

pub fn train(ctx: &Ctx, instrumented: &InstrumentedBuild) -> Result<Inputs> {
    Ok(Inputs::new()
        .built(&instrumented.0)?
        .json("config.train", &ctx.config.config.train.commands())
        // Raw profiles in a folder per training workload (a training before them is redone).
        .text("raw_layout", "per-workload folders".to_string()))
}

pub fn merge(ctx: &Ctx, tc: &Toolchain, training: &TrainingRun, skip_bad: bool) -> Result<Inputs> {
    let mut inputs = Inputs::new()
        .text("llvm-profdata", tc.llvm_profdata_version.clone())
        .json("weights", &super::profile::weights(ctx)?)
        .text("skip_bad_profiles", skip_bad.to_string())
        .text("fingerprint", training.fingerprint.clone());
    for raw in &training.profraw {
        let name = raw.strip_prefix(ctx.raw_dir()).unwrap_or(raw).display();
        inputs = inputs.file(&format!("raw/{name}"), raw)?;
    }
    Ok(inputs)
}

pub fn optimize(ctx: &Ctx, tc: &Toolchain, merged: &MergedProfile) -> Result<Inputs> {
    let flags = Build::LtoPgo.rustflags(Some(&merged.0.path));
    Ok(build(ctx, tc, Build::LtoPgo, &flags)?.text("profile", merged.0.hash.clone()))
}

/// The relinked PGO build's inputs, the BOLT tools, the BOLT and training config.
pub fn bolt(
    ctx: &Ctx,
    tc: &Toolchain,
    tools: &crate::bolt::BoltTools,
    merged: &MergedProfile,
) -> Result<Inputs> {
    let flags = Build::Bolt.rustflags(Some(&merged.0.path));
    let inputs = build(ctx, tc, Build::Bolt, &flags)?
        .text("profile", merged.0.hash.clone())
        .text("llvm-bolt", tools.version.clone())
        .json("config.bolt", &ctx.config.config.bolt)
        .json("config.train", &ctx.config.config.train)
        .json("config.apply_check", &ctx.config.config.apply_check);
    match &ctx.config.config.bolt.profile {
        // A given profile's bytes, not only its path: a new one in the same place reruns.
        Some(given) => inputs.file("bolt.profile", given),
        None => Ok(inputs),
    }
}

pub fn insight(
    ctx: &Ctx,
    tc: &Toolchain,
    instrumented: &InstrumentedBuild,
    merged: &MergedProfile,
) -> Result<Inputs> {
    let cfg = &ctx.config.config;
    Inputs::new()
        .built(&instrumented.0)?
        .text("profile", merged.0.hash.clone())
        .text("llvm-profdata", tc.llvm_profdata_version.clone())
        .json("config.measure.workloads", &cfg.measure.workloads)
        .json("config.insight", &cfg.insight)
        .json("config.apply_check", &cfg.apply_check)
        .file(
            "previous.profdata",
            &ctx.data.join(super::profile::PREVIOUS_PROFILE),
        )
}

pub fn oracle(ctx: &Ctx, tc: &Toolchain, insight: &InsightReport) -> Result<Inputs> {
    // The oracle's profile is named by its content: its flags carry the profiles' hash.
    let mut inputs = build(ctx, tc, Build::Oracle, "")?;
    for w in &insight.workloads {
        inputs = inputs.file(&format!("workload/{}", w.workload), &w.profile)?;
    }
    Ok(inputs)
}

pub fn baselines(ctx: &Ctx, tc: &Toolchain) -> Result<Inputs> {
    Ok(build(ctx, tc, Build::Release, "")?
        .text("lto.cargo_profile", Build::Lto.cargo_profile())
        .text("lto.rustflags", ""))
}

/// The relinked builds by content, the toolchain (its linker), the layout config and the
/// instruction count's (the variants are checked with it).
pub fn layout(ctx: &Ctx, tc: &Toolchain, builds: &[Built]) -> Result<Inputs> {
    let cfg = &ctx.config.config;
    let mut inputs = Inputs::new()
        .text("toolchain", tc.rustc_vv.clone())
        .json("config.layout", &cfg.layout)
        // The workloads it measures on: `check.workloads` by default, not the rest of `check`.
        .json("layout.workloads", &cfg.layout.workloads_of(&cfg.check))
        .json("config.measure.workloads", &cfg.measure.workloads)
        .json("config.instructions", &cfg.instructions);
    for b in builds
        .iter()
        .filter(|b| cfg.layout.builds.iter().any(|n| n == b.name()))
    {
        inputs = inputs.built(b)?;
    }
    Ok(inputs)
}

/// The measured executables by content, the measurement's config, and the comparators'
/// sources: `--remeasure` measures again anyway.
pub fn measure(
    ctx: &Ctx,
    builds: &[Built],
    theirs: Option<&AgainstBuilds>,
    layout: Option<&LayoutVariants>,
) -> Result<Inputs> {
    let cfg = &ctx.config.config;
    let mut inputs = Inputs::new()
        .json("config.measure", &cfg.measure)
        .json("config.instructions", &cfg.instructions)
        .json("config.compare", &cfg.compare)
        .text("comparators", tree_hash(&ctx.ws.root.join("comparators"))?);
    for b in builds {
        inputs = inputs.built(b)?;
    }
    if let Some(theirs) = theirs {
        inputs = inputs.text("against", theirs.commit.clone());
        for (name, built, _) in theirs.arms() {
            inputs = inputs.text(&format!("{name}.exe"), built.hash.clone());
        }
    }
    if let Some(layout) = layout {
        inputs = inputs.json("layout.workloads", &layout.workloads);
        for (name, built) in layout.arms() {
            inputs = inputs.text(&format!("{name}.exe"), built.hash.clone());
        }
    }
    Ok(inputs)
}

/// The report is rendered from the recorded outputs and the whole config, by this xtask.
pub fn report(ctx: &Ctx) -> Result<Inputs> {
    let mut inputs = Inputs::new().json("config", &ctx.config.config);
    for stage in ["merge", "optimize", "bolt", "insight", "layout", "measure"] {
        inputs = inputs.file(
            &format!("stages/{stage}.json"),
            &ctx.data.join("stages").join(format!("{stage}.json")),
        )?;
    }
    let me = std::env::current_exe()?;
    inputs.file("xtask", &me)
}

/// Every file under `dir`, by path and content.
fn tree_hash(dir: &Path) -> Result<String> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if !d.is_dir() {
            continue;
        }
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut inputs = Inputs::new();
    for f in &files {
        inputs = inputs.file(&f.strip_prefix(dir).unwrap_or(f).to_string_lossy(), f)?;
    }
    Ok(inputs.fingerprint())
}

impl Artifacts for InstrumentedBuild {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        self.0.artifacts()
    }
    fn compiled(&self) -> u64 {
        self.0.compiled
    }
}

impl Artifacts for TrainingRun {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        self.profraw.iter().map(|p| (p.clone(), None)).collect()
    }
}

impl Artifacts for MergedProfile {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        let mut out = vec![(self.0.path.clone(), Some(self.0.hash.clone()))];
        out.extend(self.0.parts.iter().map(|p| (p.profile.clone(), None)));
        out
    }
}

impl Artifacts for OptimizedBuild {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        self.build.artifacts()
    }
    fn compiled(&self) -> u64 {
        self.build.compiled
    }
}

impl Artifacts for InsightReport {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        self.workloads
            .iter()
            .map(|w| (w.profile.clone(), None))
            .collect()
    }
}

impl Artifacts for Baselines {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        [&self.release, &self.lto]
            .iter()
            .flat_map(|b| b.artifacts())
            .collect()
    }
    fn compiled(&self) -> u64 {
        self.release.compiled + self.lto.compiled
    }
}

impl Artifacts for Measurements {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        Vec::new()
    }
}

impl Artifacts for LayoutVariants {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        self.arms()
            .map(|(_, b)| (b.exe.clone(), Some(b.hash.clone())))
            .collect()
    }
}

impl Artifacts for BoltBuild {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        vec![(self.build.exe.clone(), Some(self.build.hash.clone()))]
    }
    fn compiled(&self) -> u64 {
        self.build.compiled
    }
}

impl Artifacts for Rendered {
    fn artifacts(&self) -> Vec<(std::path::PathBuf, Option<String>)> {
        vec![(self.report_json.clone(), Some(self.hash.clone()))]
    }
}
