//! The stages that produce the figures: measurement (latency blocks, instructions,
//! comparators), the report and its documents.

use std::path::Path;

use anyhow::{Context, Result};

use super::ctx::Ctx;

use crate::analysis::history::History;
use crate::analysis::sessions::Pooled;
use crate::build::{Build, Built};
use crate::fsx;
use crate::instructions;
use crate::measure;
use crate::outputs::BoltBuild;
use crate::outputs::InsightReport;
use crate::outputs::Rendered;
use crate::outputs::{AgainstBuilds, LayoutVariants, Measurements, MergedProfile, OptimizedBuild};
use crate::report::{self, Report};
use crate::stage::StageRun;
use crate::toolchain::Toolchain;

pub(super) fn measure(
    ctx: &Ctx,
    builds: Vec<Built>,
    theirs: Option<&AgainstBuilds>,
    layout: Option<&LayoutVariants>,
) -> Result<Measurements> {
    let cfg = &ctx.config.config;
    let started = std::time::Instant::now();
    // Every workload's sessions, and workload against workload on the same build paired the
    // same way, taking turns among them until each meets the stopping rule.
    let mut arms = measure::arms(&builds);
    // `--against`: the other commit's builds as arms of the same sessions, each also watched
    // by the stopping rule against this tree's build of the same name.
    let mut against_pairs = Vec::new();
    if let Some(theirs) = theirs {
        for (name, built, ours) in theirs.arms() {
            arms.push(measure::MeasuredArm {
                name: name.clone(),
                exe: built.exe.clone(),
                extra: Vec::new(),
            });
            against_pairs.push((ours.to_string(), name));
        }
    }
    let mut measure_cfg = ctx.measure_config()?;
    // The run's seed: the config's (or `--seed`'s), else drawn now; recorded with the sessions.
    let seed = measure_cfg.seed.unwrap_or_else(crate::stats::fresh_seed);
    measure_cfg.seed = Some(seed);
    // The null arm in another file: release's bytes copied (not linked: its own pages).
    if cfg.measure.null_copy
        && let Some(release) = builds.iter().find(|b| b.name() == measure::BASELINE)
    {
        let copy = ctx.data.join("copy").join(measure::BASELINE);
        fsx::copy_atomic(&release.exe, &copy)?;
        arms.push(measure::MeasuredArm {
            name: measure::copy_arm(measure::BASELINE),
            exe: copy,
            extra: Vec::new(),
        });
    }
    let mut groups = measure::groups(&arms, &measure_cfg);
    // Earlier runs' nulls: the arm component a comparison settling early must clear too.
    let history = crate::analysis::history::History::load(&ctx.data.join("history.json"))?;
    for g in &mut groups {
        g.prior_nulls = history.nulls_of(&g.workload.name, seed, measure_cfg.shift_heap);
        g.pairs.extend(against_pairs.iter().cloned());
        // BOLT on top of PGO, watched on its own: its change is small, and its arm would
        // otherwise leave with its settled comparison against release.
        let (bolt, pgo) = (Build::Bolt.name(), Build::LtoPgo.name());
        if [bolt, pgo]
            .iter()
            .all(|b| g.arms.iter().any(|a| a.name == *b))
        {
            g.pairs.push((bolt.to_string(), pgo.to_string()));
        }
        // The layout variants, in the sessions of `layout.workloads`, each watched by the
        // stopping rule against release (the floor is measured to the target).
        if let Some(layout) = layout.filter(|l| l.workloads.contains(&g.workload.name)) {
            for (name, built) in layout.arms() {
                g.add_arm(name, &built.exe, &[], true);
            }
        }
    }
    groups.extend(crate::versus::groups(&builds, &measure_cfg)?);
    let (all, stopped) = measure::run_groups(&groups, &measure_cfg).with_context(|| match theirs {
        Some(t) => format!(
            "measuring with `--against {}`: the other commit's binary must accept every workload's arguments too (give `--config` one that both commits accept)",
            t.rev
        ),
        None => "measuring".to_string(),
    })?;
    let (sessions, versus_sessions) = all
        .into_iter()
        .partition(|s| cfg.measure.workloads.iter().any(|w| w.name == s.workload));
    let latency_secs = started.elapsed().as_secs_f64();
    // The deterministic metric beside the noisy one.
    let started = std::time::Instant::now();
    let instructions = instructions::measure(
        &builds,
        &cfg.measure.workloads,
        &cfg.instructions,
        &ctx.data.join("callgrind"),
    );
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
    let instructions_secs = started.elapsed().as_secs_f64();
    // The same workload on other implementations of the primitive.
    let started = std::time::Instant::now();
    // The oracle is a yardstick for the training, not a build anyone ships: no comparator row.
    let shipped: Vec<Built> = builds
        .iter()
        .filter(|b| b.build != crate::build::Build::Oracle)
        .cloned()
        .collect();
    let comparators = match &ctx.config.config.compare {
        Some(compare) => crate::compare::run_comparators(
            &ctx.ws.root,
            &ctx.target_root.join("comparators"),
            compare,
            &shipped,
        )?,
        None => Vec::new(),
    };
    eprintln!(
        "measure: latency (lockstep) {latency_secs:.1} s, instructions {instructions_secs:.1} s, comparators {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(Measurements {
        builds,
        sessions,
        versus_sessions,
        stopped,
        against: theirs.cloned(),
        layout: layout.cloned(),
        instructions,
        comparators,
        seed,
    })
}

// The recorded outputs it renders from, each its own argument, as the stages made them.
#[allow(clippy::too_many_arguments)]
pub(super) fn report(
    ctx: &Ctx,
    tc: &Toolchain,
    merged: &MergedProfile,
    optimized: &OptimizedBuild,
    insight: Option<&InsightReport>,
    measured: &Measurements,
    stages: Vec<StageRun>,
    bolt: Option<BoltBuild>,
) -> Result<Rendered> {
    let builds = measured.builds.clone();
    let cfg = &ctx.config.config;
    let workload_names: Vec<String> = cfg
        .measure
        .workloads
        .iter()
        .map(|w| w.name.clone())
        .collect();
    let build_names: Vec<String> = builds.iter().map(|b| b.name().to_string()).collect();
    // The run's seed seeds the capture's bootstrap too.
    let mut measure_cfg = cfg.measure.clone();
    measure_cfg.seed = Some(measured.seed);
    // Earlier runs' null arms and layouts pool with this run's; this run's are kept for the
    // next.
    let history_path = ctx.data.join("history.json");
    let mut history = History::load(&history_path)?;
    let layout_seeds = measured
        .layout
        .as_ref()
        .map(|l| l.seeds())
        .unwrap_or_default();
    let release_hash = builds
        .iter()
        .find(|b| b.name() == crate::measure::BASELINE)
        .map(|b| b.hash.clone());
    let build_hashes: Vec<(String, String)> = builds
        .iter()
        .map(|b| (b.name().to_string(), b.hash.clone()))
        .collect();
    let pooled = Pooled {
        history: &history,
        run_seed: measured.seed,
        release_hash: release_hash.as_deref(),
        layout_seeds: &layout_seeds,
        build_hashes: &build_hashes,
        other_files: true,
        stops: &measured.stopped,
    };
    let workloads = crate::analysis::sessions::analyze_lockstep(
        &workload_names,
        &build_names,
        &measured.sessions,
        &measured.instructions,
        &measure_cfg,
        &pooled,
    )?;
    let (nulls, layouts, runs) =
        crate::analysis::sessions::records(&workloads, &pooled, measure_cfg.shift_heap);
    history.add(nulls, layouts);
    history.add_runs(runs);
    history.save(&history_path)?;
    // `--against REV`: this commit against that one, in the same sessions.
    let against = match &measured.against {
        Some(theirs) => {
            let pairs: Vec<(String, String)> = theirs
                .arms()
                .into_iter()
                .map(|(name, _, ours)| (ours.to_string(), name))
                .collect();
            Some(report::Against {
                rev: theirs.rev.clone(),
                commit: theirs.commit.clone(),
                results: crate::analysis::sessions::against(
                    &workloads,
                    &measured.sessions,
                    &pairs,
                    &cfg.measure,
                    &measured.stopped,
                )?,
            })
        }
        None => None,
    };
    let report = Report {
        schema: report::SCHEMA,
        seed: measured.seed,
        generated_unix_secs: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        config: ctx.config.clone(),
        environment: report::environment(&ctx.ws.root, tc),
        profile: merged.0.clone(),
        apply_check: optimized.apply.clone(),
        insight: insight.cloned(),
        builds,
        workloads,
        instructions: measured.instructions.clone(),
        comparators: measured.comparators.clone(),
        sessions: measured.sessions.clone(),
        versus: crate::versus::analyze(
            &measured.versus_sessions,
            &measured.instructions,
            &cfg.measure,
            &measured.stopped,
        )?,
        versus_sessions: measured.versus_sessions.clone(),
        stopped: measured.stopped.clone(),
        against,
        stages,
        bolt,
        layout: measured.layout.clone(),
    };
    // Everything below is rendered from `report`, the same value report.json holds.
    let path = ctx.data.join("report.json");
    fsx::write_json(&path, &report)?;
    let markdown = crate::report::markdown::render_markdown(&report);
    fsx::write_atomic(&ctx.data.join("report.md"), markdown.as_bytes())?;
    fsx::write_atomic(
        &ctx.data.join("latency.svg"),
        crate::report::plot::render_svg(&report).as_bytes(),
    )?;
    // The verdicts as a picture: report.md's first.
    fsx::write_atomic(
        &ctx.data.join("verdicts.svg"),
        crate::report::plot::verdicts::render_verdicts_svg(&report).as_bytes(),
    )?;
    // One session round by round, and every session's ratio.
    let rounds = ctx.data.join("rounds.svg");
    match crate::report::plot::rounds::render_rounds_svg(&report) {
        Some(svg) => fsx::write_atomic(&rounds, svg.as_bytes())?,
        // No session recorded: an old picture would belong to another run.
        None if rounds.exists() => std::fs::remove_file(&rounds)
            .with_context(|| format!("cannot remove the stale {}", rounds.display()))?,
        None => {}
    }
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
        "wrote {}/{{report.json, report.md, verdicts.svg, latency.svg{}, benchmark.json}}, appended history.jsonl",
        ctx.data.display(),
        if report.sessions.is_empty() {
            ""
        } else {
            ", rounds.svg"
        }
    );
    Ok(Rendered {
        hash: fsx::file_hash(&path)?,
        report_json: path,
    })
}
