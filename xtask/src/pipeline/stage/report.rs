//! `report`: the statistics, the table, report.json, report.md, the plots and history, from
//! what the stages before it handed on (in memory in a whole run; from their records when
//! the stage runs alone).

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::measure::Measurements;
use super::optimize::OptimizedBuild;
use crate::analysis::history::History;
use crate::analysis::sessions::Pooled;
use crate::flags::PgoArgs;
use crate::base::fsx;
use crate::analysis::outputs::{BoltBuild, InsightReport};
use crate::pipeline::ctx::Ctx;
use crate::pipeline::fresh::{Artifacts, Inputs};
use crate::pipeline::runner::{self, Timer};
use crate::report::{self, Report};
use crate::base::stages::{Stage, StageRun};
use crate::toolchain::tools::Toolchain;

/// What the report stage records: where report.json is, and its content hash (the other
/// documents are rendered from it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rendered {
    pub report_json: std::path::PathBuf,
    pub hash: String,
}

impl Artifacts for Rendered {
    fn artifacts(&self) -> Vec<(std::path::PathBuf, Option<String>)> {
        vec![(self.report_json.clone(), Some(self.hash.clone()))]
    }
}

/// The report is rendered from the outputs of every stage before it in the stage list (each
/// one's record, which holds what it handed on) and the whole config, by this xtask.
fn inputs(ctx: &Ctx) -> Result<Inputs> {
    let mut inputs = Inputs::new().json("config", &ctx.config.settings);
    for stage in Stage::ALL.iter().take_while(|s| **s != Stage::Report) {
        inputs = inputs.file(
            &format!("stages/{}.json", stage.name()),
            &ctx.pgo_data.join("stages").join(format!("{}.json", stage.name())),
        )?;
    }
    let me = std::env::current_exe()?;
    inputs.file("xtask", &me)
}

/// What the stages before the report handed it in memory, in a run of the whole pipeline;
/// what is missing (`cargo xtask pgo report` alone) is read from its record.
#[derive(Default)]
pub struct Handed<'a> {
    pub measured: Option<Measurements>,
    pub optimized: Option<&'a OptimizedBuild>,
}

/// The statistics, the table, report.json, report.md, the plots, history, from what the
/// stages before it handed on (`handed`, else their records); when up to date, report.json
/// is read back and its table shown again.
pub fn run(ctx: &Ctx, toolchain: &Toolchain, timer: &mut Timer, handed: Handed) -> Result<Report> {
    let so_far = timer.runs.clone();
    let mut made = None;
    let rendered = runner::run(ctx, timer, Stage::Report, inputs(ctx)?, || {
        let (report, rendered) = render(ctx, toolchain, so_far, handed)?;
        made = Some(report);
        Ok(rendered)
    })?;
    let report: Report = match made {
        Some(report) => report,
        None => fsx::read_json(&rendered.report_json, "the report")?,
    };
    if super::reused(timer) {
        println!("\n{}", crate::report::table::render_table(&report));
        println!(
            "nothing changed since {} was written: it is this run's result",
            rendered.report_json.display()
        );
        // A CI job that reuses the report still shows the page.
        if let Some(summary) = std::env::var_os("GITHUB_STEP_SUMMARY") {
            let page = ctx.pgo_data.join("report.md");
            let markdown = std::fs::read_to_string(&page)
                .with_context(|| format!("cannot read {}", page.display()))?;
            fsx::append_line(Path::new(&summary), &markdown)?;
        }
    }
    Ok(report)
}

/// The report of the recorded outputs, with the timing of the stages run so far.
fn render(
    ctx: &Ctx,
    toolchain: &Toolchain,
    stages: Vec<StageRun>,
    handed: Handed,
) -> Result<(Report, Rendered)> {
    let merged = super::merge::load_merged(ctx)?;
    let loaded: OptimizedBuild;
    let optimized = match handed.optimized {
        Some(optimized) => optimized,
        None => {
            loaded = ctx.load(Stage::Optimize)?;
            &loaded
        }
    };
    // The insight is optional here: a run from a stored profile has none.
    let insight: Option<InsightReport> = ctx.load_optional(Stage::Insight)?;
    let measured: Measurements = match handed.measured {
        Some(measured) => measured,
        None => ctx.load(Stage::Measure)?,
    };
    // The BOLT build, when this pgo-data has one (a skipped stage removes its record).
    let bolt: Option<BoltBuild> = ctx.load_optional(Stage::Bolt)?;
    let builds = measured.builds.clone();
    // What the builds and the training cost: the instrumented build's and the training's
    // records are absent in a run from a stored profile.
    let instrumented: Option<super::instrument::InstrumentedBuild> =
        ctx.load_optional(Stage::Instrument)?;
    let training: Option<super::train::TrainingRun> = ctx.load_optional(Stage::Train)?;
    let costs = crate::toolchain::cost::Costs::of(
        instrumented.iter().map(|i| &i.0).chain(&builds),
        &ctx.target_root,
        training.map(|t| t.wall_secs).filter(|&t| t > 0.0),
    );
    let cfg = &ctx.config.settings;
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
    // Earlier runs' layouts and estimates of the same executables pool with this run's;
    // this run's are kept for the next.
    let history_path = ctx.pgo_data.join("history.json");
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
    let (layouts, runs) =
        crate::analysis::sessions::records(&workloads, &pooled, measure_cfg.fresh_copies);
    history.add_layouts(layouts);
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
                results: crate::analysis::commits::against(
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
        environment: report::environment(&ctx.ws.root, toolchain),
        profile: merged.0.clone(),
        apply_check: optimized.apply.clone(),
        insight,
        builds,
        workloads,
        instructions: measured.instructions.clone(),
        comparators: measured.comparators.clone(),
        sessions: measured.sessions.clone(),
        versus: crate::analysis::workloads::analyze(
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
        costs: Some(costs),
    };
    // Everything below is rendered from `report`, the same value report.json holds.
    let path = ctx.pgo_data.join("report.json");
    fsx::write_json(&path, &report)?;
    let markdown = crate::report::markdown::render_markdown(&report);
    fsx::write_atomic(&ctx.pgo_data.join("report.md"), markdown.as_bytes())?;
    fsx::write_atomic(
        &ctx.pgo_data.join("latency.svg"),
        crate::report::plot::render_svg(&report).as_bytes(),
    )?;
    // The verdicts as a picture: report.md's first.
    fsx::write_atomic(
        &ctx.pgo_data.join("verdicts.svg"),
        crate::report::plot::verdicts::render_verdicts_svg(&report).as_bytes(),
    )?;
    // One session round by round, and every session's ratio.
    let rounds = ctx.pgo_data.join("rounds.svg");
    match crate::report::plot::rounds::render_rounds_svg(&report) {
        Some(svg) => fsx::write_atomic(&rounds, svg.as_bytes())?,
        // No session recorded: an old picture would belong to another run.
        None if rounds.exists() => std::fs::remove_file(&rounds)
            .with_context(|| format!("cannot remove the stale {}", rounds.display()))?,
        None => {}
    }
    fsx::write_json(
        &ctx.pgo_data.join("benchmark.json"),
        &report::benchmark_entries(&report),
    )?;
    fsx::append_line(
        &ctx.pgo_data.join("history.jsonl"),
        &report::history_line(&report),
    )?;
    if let Some(summary) = std::env::var_os("GITHUB_STEP_SUMMARY") {
        fsx::append_line(Path::new(&summary), &markdown)?;
    }
    println!("\n{}", report::table::render_table(&report));
    if let Some(costs) = &report.costs {
        println!("\n{}", costs.render());
    }
    println!(
        "wrote {}/{{report.json, report.md, verdicts.svg, latency.svg{}, benchmark.json}}, appended history.jsonl",
        ctx.pgo_data.display(),
        if report.sessions.is_empty() {
            ""
        } else {
            ", rounds.svg"
        }
    );
    let rendered = Rendered {
        hash: fsx::file_hash(&path)?,
        report_json: path,
    };
    Ok((report, rendered))
}

/// `cargo xtask pgo report`, then `--publish` and the gate.
pub fn alone(ctx: &Ctx, toolchain: &Toolchain, timer: &mut Timer, args: &PgoArgs) -> Result<()> {
    let report = run(ctx, toolchain, timer, Handed::default())?;
    publish_and_gate(ctx, args, &report)
}

/// After the report is safely written: `--publish` (a copy in docs/results/), then the gate
/// (`--check` / `--baseline`).
pub fn publish_and_gate(ctx: &Ctx, flags: &PgoArgs, report: &Report) -> Result<()> {
    if flags.publish {
        let written = crate::report::publish::publish(&ctx.ws.root, &ctx.pgo_data, report)?;
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
    use super::*;

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
        let report = crate::testing::fixtures::report();
        let current = dir.join("current.json");
        std::fs::write(&current, serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(load_baseline(&current, schema).unwrap().schema, schema);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
