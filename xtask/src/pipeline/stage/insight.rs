//! The `insight` stage: why PGO did what it did, from the profiles themselves (hardware
//! counters need not exist where it runs). What the merged training profile holds; each measured workload
//! profiled on its own on the instrumented binary (into `pgo-data/insight/`, never merged into
//! the training profile) and compared with the training; and the overlap of this training with
//! the previous run's, so a user sees whether two trainings agree.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use super::instrument::InstrumentedBuild;
use super::merge::MergedProfile;
use crate::pipeline::ctx::Ctx;
use crate::pipeline::fresh::{Artifacts, Inputs};
use crate::pipeline::profile;
use crate::pipeline::runner::{self, Timer};
use crate::base::stages::Stage;

use crate::config::Workload;
use crate::base::exec::Cmd;
use crate::flags::PgoArgs;
use crate::analysis::insight::{self as insight, FunctionCount};
use crate::analysis::outputs::InsightReport;
use crate::analysis::outputs::RequiredCoverage;
use crate::analysis::outputs::WorkloadInsight;
use crate::toolchain::tools::Toolchain;

impl Artifacts for InsightReport {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        self.workloads
            .iter()
            .map(|w| (w.profile.clone(), None))
            .collect()
    }
}

fn inputs(
    ctx: &Ctx,
    toolchain: &Toolchain,
    instrumented: &InstrumentedBuild,
    merged: &MergedProfile,
) -> Result<Inputs> {
    let cfg = &ctx.config.settings;
    Inputs::new()
        .built(&instrumented.0)?
        .text("profile", merged.0.hash.clone())
        .text("llvm-profdata", toolchain.llvm_profdata_version.clone())
        .json("config.measure.workloads", &cfg.measure.workloads)
        .json("config.insight", &cfg.insight)
        .text("agreement", insight::AGREEMENT_VERSION.to_string())
        .json("config.apply_check", &cfg.apply_check)
        .file(
            "previous.profdata",
            &ctx.pgo_data.join(profile::PREVIOUS_PROFILE),
        )
}

/// Why: what the profile holds, and whether the training looks like each measured workload
/// (profiled alone on the instrumented binary). Its findings are printed whether it ran or
/// was up to date.
pub fn run(
    ctx: &Ctx,
    toolchain: &Toolchain,
    timer: &mut Timer,
    instrumented: &InstrumentedBuild,
    merged: &MergedProfile,
) -> Result<InsightReport> {
    let found = runner::run(
        ctx,
        timer,
        Stage::Insight,
        inputs(ctx, toolchain, instrumented, merged)?,
        || insight(ctx, toolchain, instrumented, merged),
    )?;
    summarize(&found);
    Ok(found)
}

fn insight(
    ctx: &Ctx,
    toolchain: &Toolchain,
    instrumented: &InstrumentedBuild,
    merged: &MergedProfile,
) -> Result<InsightReport> {
    let cfg = &ctx.config.settings;
    let dir = ctx.pgo_data.join("insight");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let training = functions(toolchain, &merged.0.path, &dir.join("training.proftext"))?;
    let required = cfg
        .apply_check
        .required
        .iter()
        .map(|prefix| {
            let mine: Vec<&FunctionCount> = training
                .iter()
                .filter(|f| f.name.contains(prefix.as_str()))
                .collect();
            RequiredCoverage {
                prefix: prefix.clone(),
                functions: mine.len(),
                nonzero: mine.iter().filter(|f| f.count > 0).count(),
            }
        })
        .collect();
    // Each training workload's own profile, to say which one runs what a workload lacks.
    let mut parts = Vec::new();
    for part in &merged.0.parts {
        let text = dir.join(format!("train-{}.proftext", part.workload));
        parts.push((part, functions(toolchain, &part.profile, &text)?));
    }
    let mut warnings = Vec::new();
    let mut workloads = Vec::new();
    for w in &cfg.measure.workloads {
        let profile = profile_workload(ctx, toolchain, instrumented, w, &dir)?;
        let overlap_pct = overlap(toolchain, &merged.0.path, &profile)?;
        let mine = functions(toolchain, &profile, &dir.join(format!("{}.proftext", w.name)))?;
        let (hot, never_trained) =
            insight::compare_hot(&mine, &training, &cfg.apply_check.required, cfg.insight.top);
        let untrained_share_pct = insight::untrained_share(&mine, &training);
        let agreement = insight::agreement(&mine, &training);
        if agreement.score_pct < cfg.insight.min_agreement_pct {
            let lacking: Vec<String> = agreement
                .lacking
                .iter()
                .take(3)
                .map(|l| {
                    format!(
                        "{} ({:.1} % of its count, {:.1} points lost{})",
                        l.name,
                        l.workload_share_pct,
                        l.loss_pct,
                        runs_most(&parts, &mine, &l.symbol)
                    )
                })
                .collect();
            warnings.push(format!(
                "the training stands for `{}` at {:.1} % (insight.min_agreement_pct {:.1} %): PGO will lay its hot blocks out as rarer than it runs them; lacking most: {}",
                w.name,
                agreement.score_pct,
                cfg.insight.min_agreement_pct,
                lacking.join("; ")
            ));
        }
        if !never_trained.is_empty() {
            warnings.push(format!(
                "`{}` runs {} function(s) of the required paths that the training never ran (first: {})",
                w.name,
                never_trained.len(),
                never_trained[0]
            ));
        }
        workloads.push(WorkloadInsight {
            workload: w.name.clone(),
            profile: profile.clone(),
            overlap_pct,
            untrained_share_pct,
            hot,
            never_trained,
            agreement: Some(agreement),
        });
    }
    let previous = ctx.pgo_data.join(profile::PREVIOUS_PROFILE);
    let previous_overlap_pct = if previous.is_file() {
        Some(overlap(toolchain, &previous, &merged.0.path)?)
    } else {
        None
    };
    let out = InsightReport {
        training: insight::contents(&training, cfg.insight.top),
        required,
        workloads,
        previous_overlap_pct,
        min_agreement_pct: cfg.insight.min_agreement_pct,
        warnings,
    };
    Ok(out)
}

/// Which training workload runs the workload's function of `symbol` most as the workload
/// does (the least of it lost, [`insight::function_loss`]; the larger share of its count
/// breaks ties), in words for a warning ("; …"); nothing for a profile without training
/// workloads of its own (a stored profile, merged bundles).
fn runs_most(
    parts: &[(&crate::analysis::outputs::TrainingPart, Vec<FunctionCount>)],
    workload: &[FunctionCount],
    symbol: &str,
) -> String {
    let Some(mine) = workload.iter().find(|f| f.symbol == symbol) else {
        return String::new();
    };
    if parts.is_empty() {
        return String::new();
    }
    let judged = parts.iter().filter_map(|(part, functions)| {
        let theirs = functions
            .iter()
            .find(|f| f.symbol == symbol && f.count > 0)?;
        let total: u64 = functions.iter().map(|f| f.count).sum();
        let alike = 1.0 - insight::function_loss(mine, Some(theirs)) / mine.count.max(1) as f64;
        Some((part, alike, theirs.count as f64 / total.max(1) as f64))
    });
    let best = judged.max_by(|a, b| a.1.total_cmp(&b.1).then(a.2.total_cmp(&b.2)));
    match best {
        Some((part, alike, share)) => format!(
            "; run most as it runs here by training workload `{}` ({:.0} % of its count weighed alike, {:.2} % of that workload's count, weight {}): weigh it more, or `cargo xtask tune`",
            part.workload,
            100.0 * alike,
            100.0 * share,
            part.weight
        ),
        None => "; no training workload runs it: add one that does".to_string(),
    }
}

/// What the insight found, on the terminal: each workload's overlap with the training and its
/// hottest functions, the overlap with the previous training, the warnings.
fn summarize(found: &InsightReport) {
    for w in &found.workloads {
        if let Some(a) = &w.agreement {
            eprintln!(
                "insight: `{}` agreement with the training {:.1} % (on blocks the training calls hot: {:.1} %){}",
                w.workload,
                a.score_pct,
                a.hot_pct,
                match a.lacking.first() {
                    Some(l) => format!("; loses most in {} ({:.1} points)", l.name, l.loss_pct),
                    None => String::new(),
                }
            );
        }
        eprintln!(
            "insight: `{}` overlaps the training profile {:.1} %, {:.1} % of its count in functions never trained; its hottest: {}",
            w.workload,
            w.overlap_pct,
            w.untrained_share_pct,
            w.hot
                .iter()
                .take(3)
                .map(|h| format!(
                    "{} ({:.1} % there, {:.2} % in training)",
                    h.name, h.workload_share_pct, h.training_share_pct
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    if let Some(p) = found.previous_overlap_pct {
        eprintln!("insight: this training overlaps the previous run's {p:.1} %");
    }
    for warning in &found.warnings {
        eprintln!("warning: {warning}");
    }
}

/// Runs one measured workload on the instrumented binary into a directory of its own and
/// merges what it wrote: that workload's own profile.
pub fn profile_workload(
    ctx: &Ctx,
    toolchain: &Toolchain,
    instrumented: &InstrumentedBuild,
    w: &Workload,
    dir: &Path,
) -> Result<PathBuf> {
    let name = w.name.as_str();
    let raw = dir.join(name);
    if raw.exists() {
        std::fs::remove_dir_all(&raw).with_context(|| format!("cannot clear {}", raw.display()))?;
    }
    std::fs::create_dir_all(&raw).with_context(|| format!("cannot create {}", raw.display()))?;
    let mut w = w.clone();
    ctx.resolve_drivers(std::slice::from_mut(&mut w))?;
    let timeout = Duration::from_secs(ctx.config.settings.measure.timeout_secs);
    super::train::profile_run(ctx, &instrumented.0.exe, &w, &raw, timeout)
        .with_context(|| format!("profiling the workload `{name}`"))?;
    let profraw: Vec<String> = std::fs::read_dir(&raw)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "profraw"))
        .map(|p| p.display().to_string())
        .collect();
    if profraw.is_empty() {
        anyhow::bail!(
            "profiling `{name}` wrote no raw profile in {}: is the instrumented build current?",
            raw.display()
        );
    }
    let out = dir.join(format!("{name}.profdata"));
    Cmd::new(toolchain.llvm_profdata.display().to_string())
        .args(["merge", "-o"])
        .arg(out.display().to_string())
        .args(profraw)
        .read()
        .with_context(|| format!("merging the profile of `{name}`"))?;
    Ok(out)
}

/// A profile's functions, via its text dump written to `text`.
pub fn functions(toolchain: &Toolchain, profile: &Path, text: &Path) -> Result<Vec<FunctionCount>> {
    Cmd::new(toolchain.llvm_profdata.display().to_string())
        .args(["merge", "--text", "-o"])
        .arg(text.display().to_string())
        .arg(profile.display().to_string())
        .read()?;
    let dump =
        std::fs::read_to_string(text).with_context(|| format!("cannot read {}", text.display()))?;
    insight::parse_text_profile(&dump).map_err(|e| anyhow::anyhow!("{}: {e}", text.display()))
}

/// `llvm-profdata overlap base test`: the program-level edge overlap, in %.
fn overlap(toolchain: &Toolchain, base: &Path, test: &Path) -> Result<f64> {
    let cmd = Cmd::new(toolchain.llvm_profdata.display().to_string())
        .arg("overlap")
        .arg(base.display().to_string())
        .arg(test.display().to_string());
    let out = cmd.read()?;
    insight::parse_overlap(&out).with_context(|| {
        format!(
            "`{}` printed no `Edge profile overlap:` line:\n{out}",
            cmd.display()
        )
    })
}

/// `cargo xtask pgo insight`: on the recorded instrumented build and profile.
pub fn alone(ctx: &Ctx, toolchain: &Toolchain, timer: &mut Timer, _args: &PgoArgs) -> Result<()> {
    let instrumented: InstrumentedBuild = ctx.load(Stage::Instrument)?;
    let merged = super::merge::load_merged(ctx)?;
    run(ctx, toolchain, timer, &instrumented, &merged).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::insight::counted;
    use crate::analysis::outputs::TrainingPart;

    /// The advice names the training workload that runs the function's hot branch as the
    /// workload does, not the one that runs the function most.
    #[test]
    fn the_advice_names_the_part_that_runs_the_function_alike() {
        let part = |name: &str| TrainingPart {
            workload: name.into(),
            weight: 1,
            profile: PathBuf::new(),
        };
        let (lots, alike, none) = (part("lots"), part("alike"), part("none"));
        let parts = vec![
            (
                &lots,
                vec![counted("f", &[1000, 0, 1000]), counted("g", &[1])],
            ),
            (
                &alike,
                vec![counted("f", &[10, 10, 0]), counted("g", &[1000])],
            ),
            (&none, vec![counted("g", &[5])]),
        ];
        let workload = vec![counted("f", &[100, 99, 1])];
        let said = runs_most(&parts, &workload, "f");
        assert!(
            said.contains("training workload `alike` (100 % of its count weighed alike"),
            "{said}"
        );
        assert_eq!(
            runs_most(&parts[2..], &workload, "f"),
            "; no training workload runs it: add one that does"
        );
    }
}
