//! `measure`: the held-out workloads on every measured arm, in lockstep sessions until each
//! comparison is settled; instructions per message; the comparators. The arms are one value,
//! [`Arms`], assembled here.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::baselines::Baselines;
use super::optimize::OptimizedBuild;
use crate::analysis::history::History;
use crate::toolchain::build::{Build, Built};
use crate::config::Measure;
use crate::flags::PgoArgs;
use crate::measure::instructions::{self, InstructionCount};
use crate::measure::session::Session;
use crate::measure;
use crate::measure::Group;
use crate::analysis::outputs::{BoltBuild, LayoutVariants};
use crate::pipeline::against::AgainstBuilds;
use crate::pipeline::ctx::Ctx;
use crate::pipeline::fresh::{Artifacts, Inputs};
use crate::pipeline::runner::{self, Timer};
use crate::base::stages::Stage;
use crate::toolchain::tools::Toolchain;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measurements {
    /// The measured builds, in [`Build::MEASURED`] order.
    pub builds: Vec<Built>,
    /// Every lockstep session.
    pub sessions: Vec<Session>,
    /// The sessions of `measure.versus`, workload against workload.
    pub versus_sessions: Vec<Session>,
    /// Per workload and `versus` pair: the stopping rule's sessions, why they stopped, where
    /// their time went.
    #[serde(default)]
    pub stopped: Vec<crate::measure::Stopping>,
    /// `--against REV`: that revision's builds, measured as arms of the same sessions.
    #[serde(default)]
    pub against: Option<AgainstBuilds>,
    /// The layout variants measured as arms of the sessions of their workloads.
    #[serde(default)]
    pub layout: Option<LayoutVariants>,
    pub instructions: Vec<InstructionCount>,
    pub comparators: Vec<crate::measure::comparators::Row>,
    /// The run's seed: the arms' places and turn orders (`--seed` replays them).
    #[serde(default)]
    pub seed: u64,
}

impl Artifacts for Measurements {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        Vec::new()
    }
}

/// Every arm the sessions measure, as one value: the measured builds, `--against`'s builds of
/// another commit, and the layout variants. The null arms (the A/A arm, release's copy), the
/// pairs the stopping rule watches and the versus pairs follow from these and the config
/// ([`Arms::groups`]). A new kind of arm is a field here and one line where the pipeline
/// makes the value.
#[derive(Debug, Clone, Default)]
pub struct Arms {
    /// The measured builds, in [`Build::MEASURED`] order.
    pub builds: Vec<Built>,
    pub against: Option<AgainstBuilds>,
    pub layout: Option<LayoutVariants>,
}

impl Arms {
    /// The measured builds; without an oracle (`--profile`: nothing trained here to make
    /// one from) or a BOLT build, the others.
    pub fn builds(
        optimized: &OptimizedBuild,
        base: &Baselines,
        oracle: Option<&OptimizedBuild>,
        bolt: Option<&BoltBuild>,
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

    /// The arms the recorded stages made (`cargo xtask pgo measure`); no oracle record: a run
    /// from a stored profile has none.
    pub fn recorded(ctx: &Ctx) -> Result<Arms> {
        let oracle: Option<OptimizedBuild> = ctx.load_optional(Stage::Oracle)?;
        let bolt: Option<BoltBuild> = ctx.load_optional(Stage::Bolt)?;
        Ok(Arms {
            builds: Arms::builds(
                &ctx.load(Stage::Optimize)?,
                &ctx.load(Stage::Baselines)?,
                oracle.as_ref(),
                bolt.as_ref(),
            ),
            against: None,
            layout: ctx.load_optional(Stage::Layout)?,
        })
    }

    /// The measured executables by content, the measurement's config, and the comparators'
    /// sources: `--remeasure` measures again anyway.
    fn inputs(&self, ctx: &Ctx) -> Result<Inputs> {
        let cfg = &ctx.config.settings;
        let mut inputs = Inputs::new()
            .json("config.measure", &cfg.measure)
            .json("config.instructions", &cfg.instructions)
            .json("config.compare", &cfg.compare)
            .text(
                "comparators",
                super::tree_hash(&ctx.ws.root.join("comparators"))?,
            );
        for b in &self.builds {
            inputs = inputs.built(b)?;
        }
        if let Some(theirs) = &self.against {
            inputs = inputs.text("against", theirs.commit.clone());
            for (name, built, _) in theirs.arms() {
                inputs = inputs.text(&format!("{name}.exe"), built.hash.clone());
            }
        }
        if let Some(layout) = &self.layout {
            inputs = inputs.json("layout.workloads", &layout.workloads);
            for (name, built) in layout.arms() {
                inputs = inputs.text(&format!("{name}.exe"), built.hash.clone());
            }
        }
        Ok(inputs)
    }

    /// The sessions to run: per workload its arms (the builds, `--against`'s, the layout
    /// variants where they are measured) and the pairs the stopping rule watches, then the
    /// versus groups.
    fn groups(&self, ctx: &Ctx, measure_cfg: &Measure, seed: u64) -> Result<Vec<Group>> {
        let mut arms = measure::arms(&self.builds);
        // `--against`: the other commit's builds as arms of the same sessions, each also
        // watched by the stopping rule against this tree's build of the same name.
        let mut against_pairs = Vec::new();
        if let Some(theirs) = &self.against {
            for (name, built, ours) in theirs.arms() {
                arms.push(measure::MeasuredArm {
                    name: name.clone(),
                    exe: built.exe.clone(),
                    extra: Vec::new(),
                });
                against_pairs.push((ours.to_string(), name));
            }
        }
        let mut groups = measure::groups(&arms, measure_cfg);
        // Earlier runs of the same executables: the run component a build settling early
        // must clear too.
        let history = History::load(&ctx.pgo_data.join("history.json"))?;
        let release = self.builds.iter().find(|b| b.name() == measure::BASELINE);
        for g in &mut groups {
            if let Some(release) = release {
                g.run_components = self
                    .builds
                    .iter()
                    .filter_map(|b| {
                        let how = crate::analysis::history::Measured {
                            fresh: measure_cfg.fresh_copies,
                            metric: crate::measure::session::Metric::judged_first(&g.workload),
                        };
                        let same = history.same_runs(
                            &g.workload.name,
                            b.name(),
                            (&b.hash, &release.hash),
                            seed,
                            how,
                        );
                        let test = stats::components::run_test(&[same])?;
                        Some((b.name().to_string(), test.carried?))
                    })
                    .collect();
            }
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
            if let Some(layout) = self
                .layout
                .as_ref()
                .filter(|l| l.workloads.contains(&g.workload.name))
            {
                for (name, built) in layout.arms() {
                    g.add_arm(name, &built.exe, &[], true);
                }
            }
        }
        groups.extend(crate::analysis::workloads::groups(&self.builds, measure_cfg)?);
        Ok(groups)
    }
}

/// Measures `arms`, or reuses the record while they and the config are unchanged.
pub fn run(ctx: &Ctx, timer: &mut Timer, arms: &Arms) -> Result<Measurements> {
    runner::run(ctx, timer, Stage::Measure, arms.inputs(ctx)?, || {
        measure(ctx, arms)
    })
}

/// `cargo xtask pgo measure`: the recorded builds.
pub fn alone(ctx: &Ctx, _toolchain: &Toolchain, timer: &mut Timer, _args: &PgoArgs) -> Result<()> {
    run(ctx, timer, &Arms::recorded(ctx)?).map(drop)
}

fn measure(ctx: &Ctx, arms: &Arms) -> Result<Measurements> {
    let (builds, theirs, layout) = (
        arms.builds.clone(),
        arms.against.as_ref(),
        arms.layout.as_ref(),
    );
    let cfg = &ctx.config.settings;
    let started = std::time::Instant::now();
    let mut measure_cfg = ctx.measure_config()?;
    // The run's seed: the config's (or `--seed`'s), else drawn now; recorded with the sessions.
    let seed = measure_cfg.seed.unwrap_or_else(stats::fresh_seed);
    measure_cfg.seed = Some(seed);
    // Every workload's sessions, and workload against workload on the same build paired the
    // same way, taking turns among them until each meets the stopping rule.
    let groups = arms.groups(ctx, &measure_cfg, seed)?;
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
        &ctx.pgo_data.join("callgrind"),
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
        .filter(|b| b.build != crate::toolchain::build::Build::Oracle)
        .cloned()
        .collect();
    let comparators = match &ctx.config.settings.compare {
        Some(compare) => crate::measure::comparators::run_comparators(
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
