//! The stages that produce the figures: measurement (latency blocks, instructions,
//! comparators), the report and its documents; and `cargo xtask compare` on its own.

use std::path::Path;

use anyhow::{Result, bail};

use super::{
    Baselines, BuildRecord, Ctx, Flags, Measurements, MergedProfile, OptimizedBuild, build,
    variants,
};
use crate::fsx;
use crate::instructions;
use crate::measure::{self, Variant};
use crate::report::{self, BuildInfo, Report};
use crate::toolchain::{self, Toolchain};

pub(super) fn measure(
    ctx: &Ctx,
    optimized: &OptimizedBuild,
    base: &Baselines,
) -> Result<Measurements> {
    let variants = variants(optimized, base);
    let cfg = &ctx.config.config;
    let runs = measure::run(&variants, &cfg.measure)?;
    // The deterministic metric beside the noisy one.
    let instructions = instructions::measure(&variants, &cfg.measure.workloads, &cfg.instructions);
    for i in &instructions {
        match (i.per_message, &i.note) {
            (Some(n), _) => eprintln!(
                "instructions: {} on {}: {n:.1} per message",
                i.workload, i.build
            ),
            (None, Some(note)) => eprintln!(
                "instructions: {} on {}: not measured: {note}",
                i.workload, i.build
            ),
            (None, None) => {}
        }
    }
    // The same workload on other implementations of the primitive.
    let comparators = run_comparators(ctx, &variants)?;
    let out = Measurements {
        variants,
        runs,
        instructions,
        comparators,
    };
    fsx::write_json(&ctx.stage_file("measure"), &out)?;
    Ok(out)
}

pub(super) fn report(
    ctx: &Ctx,
    tc: &Toolchain,
    merged: &MergedProfile,
    optimized: &OptimizedBuild,
    base: &Baselines,
    measured: &Measurements,
) -> Result<Report> {
    let info = |name: &str, b: &BuildRecord, description: &str| BuildInfo {
        name: name.into(),
        cargo_profile: b.cargo_profile.clone(),
        rustflags: b.rustflags.clone(),
        exe: b.exe.clone(),
        description: description.into(),
    };
    let builds = vec![
        info("release", &base.release, "baseline: no LTO, no PGO"),
        info("release-lto", &base.lto, "fat LTO, no PGO"),
        info("release-pgo", &optimized.build, "fat LTO + PGO"),
    ];
    let cfg = &ctx.config.config;
    let workload_names: Vec<String> = cfg
        .measure
        .workloads
        .iter()
        .map(|w| w.name.clone())
        .collect();
    let build_names: Vec<String> = builds.iter().map(|b| b.name.clone()).collect();
    let workloads = crate::analysis::analyze(
        &workload_names,
        &build_names,
        &measured.runs,
        &measured.instructions,
        &cfg.measure,
    )?;
    let report = Report {
        schema: 2,
        generated_unix_secs: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        config: ctx.config.clone(),
        environment: report::environment(&ctx.ws.root, tc),
        profile: merged.0.clone(),
        apply_check: optimized.apply.clone(),
        builds,
        workloads,
        instructions: measured.instructions.clone(),
        comparators: measured.comparators.clone(),
        runs: measured.runs.clone(),
    };
    // Everything below is rendered from `report`, the same value report.json holds.
    let path = ctx.data.join("report.json");
    fsx::write_json(&path, &report)?;
    let markdown = crate::markdown::render_markdown(&report);
    fsx::write_atomic(&ctx.data.join("report.md"), markdown.as_bytes())?;
    fsx::write_atomic(
        &ctx.data.join("latency.svg"),
        crate::plot::render_svg(&report).as_bytes(),
    )?;
    fsx::write_json(
        &ctx.data.join("benchmark.json"),
        &report::benchmark_entries(&report),
    )?;
    fsx::append_line(
        &ctx.data.join("history.jsonl"),
        &report::history_line(&report),
    )?;
    if let Some(summary) = std::env::var_os("GITHUB_STEP_SUMMARY") {
        fsx::append_line(Path::new(&summary), &markdown)?;
    }
    println!("\n{}", report::render_table(&report));
    println!(
        "wrote {}/{{report.json, report.md, latency.svg, benchmark.json}}, appended history.jsonl",
        ctx.data.display()
    );
    Ok(report)
}

fn run_comparators(ctx: &Ctx, variants: &[Variant]) -> Result<Vec<crate::compare::Row>> {
    let cfg = &ctx.config.config.compare;
    let (foreign, skipped) =
        crate::compare::foreign_rows(&ctx.ws.root, &ctx.target_root.join("comparators"), cfg)?;
    let mut rows = crate::compare::rust_rows(variants, cfg);
    rows.extend(foreign);
    crate::compare::run(&rows, skipped, cfg)
}

/// `cargo xtask compare`: the comparison table alone, on a release build of the binary
/// (cargo rebuilds it only when stale). The LTO and PGO rows come with `cargo xtask pgo`,
/// whose report holds the same table for all three builds.
pub fn compare_command(flags: Flags) -> Result<()> {
    if flags.stage.is_some() || flags.check {
        bail!("`cargo xtask compare` takes only --config, --pgo-data and --target-dir");
    }
    let ctx = Ctx::open(&flags)?;
    let tc = toolchain::doctor()?;
    let (release, _) = build(&ctx, &tc, "release", "release", String::new())?;
    let variants = vec![Variant {
        name: "release".into(),
        exe: release.exe,
    }];
    let rows = run_comparators(&ctx, &variants)?;
    fsx::write_json(&ctx.data.join("compare.json"), &rows)?;
    println!(
        "\n{}",
        crate::compare::render(&rows, &ctx.config.config.compare)
    );
    println!("wrote {}", ctx.data.join("compare.json").display());
    Ok(())
}
