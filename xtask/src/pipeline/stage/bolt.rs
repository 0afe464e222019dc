//! The `bolt` stage: BOLT on top of PGO + fat LTO, as rustc's own opt-dist does, in
//! instrumentation mode (no `perf`, no hardware counters needed):
//! 1. the PGO build relinked with its relocations (`-Clink-arg=-Wl,-q`) in its own target
//!    folder (`Build::Bolt`);
//! 2. `llvm-bolt -instrument` of it;
//! 3. the `[train]` mix run by that instrumented executable, one `.fdata` per process;
//! 4. `merge-fdata` (steps 2–4 are skipped when `bolt.profile` gives a merged profile; a
//!    given or trained profile is read and checked before llvm-bolt sees it);
//! 5. `llvm-bolt -data=<merged> <bolt.options>` into the `lto+pgo+bolt` executable;
//! 6. the proof that the profile applied: BOLT's own count of functions with a non-empty
//!    profile, and every `apply_check.required` path among the profiled functions; the
//!    stage fails otherwise, as the PGO apply check does.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::merge::MergedProfile;
use super::optimize::OptimizedBuild;
use crate::toolchain::bolt::{self as bolt, BoltTools};
use crate::toolchain::build::{Build, Built};
use crate::base::exec::Cmd;
use crate::flags::PgoArgs;
use crate::base::fsx;
use crate::analysis::outputs::BoltBuild;
use crate::pipeline::ctx::Ctx;
use crate::pipeline::fresh::{Artifacts, Inputs};
use crate::pipeline::runner::{self, Timer};
use crate::base::stages::Stage;
use crate::toolchain::tools::Toolchain;

impl Artifacts for BoltBuild {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        vec![(self.build.exe.clone(), Some(self.build.hash.clone()))]
    }
    fn compiled(&self) -> u64 {
        self.build.compiled
    }
}

/// The relinked PGO build's inputs, the BOLT tools, the BOLT and training config.
fn inputs(
    ctx: &Ctx,
    toolchain: &Toolchain,
    tools: &crate::toolchain::bolt::BoltTools,
    merged: &MergedProfile,
) -> Result<Inputs> {
    let flags = Build::Bolt.rustflags(Some(&merged.0.path));
    let inputs = super::build_inputs(ctx, toolchain, Build::Bolt, &flags)?
        .text("profile", merged.0.hash.clone())
        .text("llvm-bolt", tools.version.clone())
        .json("config.bolt", &ctx.config.settings.bolt)
        .json("config.train", &ctx.config.settings.train)
        .json("config.apply_check", &ctx.config.settings.apply_check);
    match &ctx.config.settings.bolt.profile {
        // A given profile's bytes, not only its path: a new one in the same place reruns.
        Some(given) => inputs.file("bolt.profile", given),
        None => Ok(inputs),
    }
}

/// BOLT after PGO, as `bolt.enabled` asks: skipped (saying why and what to install) when off
/// or when llvm-bolt is missing under "auto"; an error when it is required and missing. A
/// skipped stage's record of an earlier run is removed: it is not this run's build.
pub fn run(
    ctx: &Ctx,
    toolchain: &Toolchain,
    timer: &mut Timer,
    merged: &MergedProfile,
    optimized: &OptimizedBuild,
) -> Result<Option<BoltBuild>> {
    let decided = crate::toolchain::bolt::decide(
        ctx.config.settings.bolt.enabled,
        toolchain.bolt.as_ref(),
        toolchain.rustc.llvm_major,
    )?;
    match decided {
        Err(why) => {
            ctx.forget(Stage::Bolt)?;
            timer.skip(Stage::Bolt, &why);
            Ok(None)
        }
        Ok(tools) => {
            let built = runner::run(
                ctx,
                timer,
                Stage::Bolt,
                inputs(ctx, toolchain, tools, merged)?,
                || build(ctx, toolchain, tools, merged, &optimized.build),
            )?;
            if super::reused(timer) {
                eprintln!(
                    "bolt: {} ({})",
                    built.build.exe.display(),
                    crate::report::words::bolt_profiled(
                        built.report.functions_profiled,
                        built.report.functions_total
                    )
                );
            }
            Ok(Some(built))
        }
    }
}

fn dir(ctx: &Ctx) -> PathBuf {
    ctx.pgo_data.join("bolt")
}

fn tool(cmd: Cmd, timeout: u64, what: &str) -> Result<String> {
    let out = cmd
        .run_with_timeout(Duration::from_secs(timeout))
        .with_context(|| what.to_string())?;
    Ok(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

fn build(
    ctx: &Ctx,
    toolchain: &Toolchain,
    tools: &BoltTools,
    merged: &MergedProfile,
    pgo: &Built,
) -> Result<BoltBuild> {
    let cfg = &ctx.config.settings;
    let timeout = cfg.bolt.timeout_secs;
    let dir = dir(ctx);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // 1. Relinked with relocations.
    let (mut built, _) = ctx.build(toolchain, Build::Bolt, Build::Bolt.rustflags(Some(&merged.0.path)))?;
    let relinked = built.exe.clone();
    bolt::require_relocations(&relinked)?;
    let relink_instructions = relink_instructions(ctx, &built, pgo);
    // 2–4. The profile: given (`bolt.profile`), else trained.
    let merged_fdata = match &cfg.bolt.profile {
        Some(given) => {
            eprintln!(
                "bolt: optimising with the given profile {} (bolt.profile), no training",
                given.display()
            );
            given.clone()
        }
        None => train(ctx, tools, &relinked, &dir)?,
    };
    // Checked before llvm-bolt reads it: its own errors on a bad profile name no fix.
    let profiled = bolt::read_fdata(&merged_fdata)?;
    // 5. Optimised, with BOLT's report.
    let exe = dir.join(format!("{}.bolt", ctx.ws.binary));
    let tmp = fsx::temp_path(&exe);
    let report_text = tool(
        Cmd::new(tools.llvm_bolt.display().to_string())
            .arg(relinked.display().to_string())
            .arg("-o")
            .arg(tmp.display().to_string())
            .arg(format!("-data={}", merged_fdata.display()))
            .args(cfg.bolt.options.iter().cloned()),
        timeout,
        &format!(
            "BOLT could not optimise with the profile {}",
            merged_fdata.display()
        ),
    )
    .inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    fsx::rename(&tmp, &exe)?;
    let report = bolt::parse_report(&report_text)
        .with_context(|| format!("reading llvm-bolt's report on {}", merged_fdata.display()))?;
    // 6. The proof.
    let required: Vec<(String, usize)> = cfg
        .apply_check
        .required
        .iter()
        .map(|p| {
            (
                p.clone(),
                profiled.iter().filter(|f| f.contains(p.as_str())).count(),
            )
        })
        .collect();
    eprintln!(
        "bolt: {}; required: {}; {}",
        crate::report::words::bolt_profiled(report.functions_profiled, report.functions_total),
        required
            .iter()
            .map(|(p, n)| format!("{p} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        report
            .dyno
            .iter()
            .filter(|(w, _, _)| w == "taken branches" || w == "taken forward branches")
            .map(|(w, _, c)| format!("{w} {c}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if report.functions_profiled == 0 {
        bail!(
            "BOLT's profile did NOT apply: no function of {} has a non-empty profile",
            relinked.display()
        );
    }
    if let Some((p, _)) = required.iter().find(|(_, n)| *n == 0) {
        bail!(
            "BOLT's profile did NOT apply to the measured code: no function of `{p}` is in the profile {}; \
             the training does not reach it in this executable",
            merged_fdata.display()
        );
    }
    built.exe = exe;
    built.hash = fsx::file_hash(&built.exe)?;
    Ok(BoltBuild {
        build: built,
        relinked,
        tools: tools.clone(),
        given: cfg.bolt.profile.is_some(),
        profile: merged_fdata,
        options: cfg.bolt.options.clone(),
        report,
        required,
        relink_instructions,
    })
}

/// Steps 2–4: `relinked` instrumented by BOLT, the `[train]` mix run by it, its profiles
/// merged into `dir/merged.fdata`.
fn train(ctx: &Ctx, tools: &BoltTools, relinked: &Path, dir: &Path) -> Result<PathBuf> {
    let cfg = &ctx.config.settings;
    let timeout = cfg.bolt.timeout_secs;
    let raw = dir.join("raw");
    std::fs::create_dir_all(&raw).with_context(|| format!("cannot create {}", raw.display()))?;
    for old in fdata_files(&raw)? {
        std::fs::remove_file(&old).with_context(|| format!("cannot remove {}", old.display()))?;
    }
    let inst = dir.join(format!("{}.bolt-inst", ctx.ws.binary));
    tool(
        Cmd::new(tools.llvm_bolt.display().to_string())
            .arg(relinked.display().to_string())
            .args(["-instrument", "-o"])
            .arg(inst.display().to_string())
            .arg(format!(
                "--instrumentation-file={}",
                raw.join("prof.fdata").display()
            ))
            .arg("--instrumentation-file-append-pid"),
        timeout,
        "BOLT could not instrument the relinked PGO build",
    )?;
    let mut workloads = cfg.train.workloads.clone();
    ctx.resolve_drivers(&mut workloads)?;
    for w in &workloads {
        crate::measure::service::run_once(&inst, w, &ctx.ws.root, &[], Duration::from_secs(timeout))
            .with_context(|| {
                format!(
                    "BOLT training workload `{}` failed. The BOLT-instrumented executable writes its profile \
                     into {} as it exits, and ends with status 1 when it cannot: is that folder writable, \
                     with space left?",
                    w.name,
                    raw.display()
                )
            })?;
    }
    let fdata = fdata_files(&raw)?;
    if fdata.is_empty() {
        bail!(
            "the BOLT-instrumented training wrote no profile (looked for *.fdata in {}): is {} instrumented by llvm-bolt -instrument?",
            raw.display(),
            inst.display()
        );
    }
    let merged = dir.join("merged.fdata");
    let out = Cmd::new(tools.merge_fdata.display().to_string())
        .args(fdata.iter().map(|p| p.display().to_string()))
        .output()?;
    if !out.status.success() || out.stdout.is_empty() {
        bail!(
            "merge-fdata made no profile of {} ({}): {}; rerun `cargo xtask pgo bolt`",
            raw.display(),
            crate::base::exec::describe_status(&out.status),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    fsx::write_atomic(&merged, &out.stdout)?;
    Ok(merged)
}

/// Instructions per message of the first measured workload on the relinked build and on
/// the plain PGO build, when valgrind is there.
fn relink_instructions(ctx: &Ctx, relinked: &Built, pgo: &Built) -> Option<(f64, f64)> {
    let cfg = &ctx.config.settings;
    let w = cfg.measure.workloads.first()?;
    let counts = crate::measure::instructions::measure(
        &[relinked.clone(), pgo.clone()],
        std::slice::from_ref(w),
        &cfg.instructions,
        &ctx.pgo_data.join("callgrind"),
    );
    let (a, b) = (counts.first()?.per_message?, counts.get(1)?.per_message?);
    eprintln!(
        "bolt: relinked with relocations, `{}` runs {a:.1} instructions per message (lto+pgo: {b:.1})",
        w.name
    );
    Some((a, b))
}

fn fdata_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "fdata"))
        .collect();
    files.sort();
    Ok(files)
}

/// `cargo xtask pgo bolt`: on the recorded profile and PGO build.
pub fn alone(ctx: &Ctx, toolchain: &Toolchain, timer: &mut Timer, _args: &PgoArgs) -> Result<()> {
    let merged = super::merge::load_merged(ctx)?;
    let optimized: OptimizedBuild = ctx.load(Stage::Optimize)?;
    run(ctx, toolchain, timer, &merged, &optimized).map(drop)
}
