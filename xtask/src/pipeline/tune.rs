//! `cargo xtask tune`: the training's weights chosen by the tool, on validation workloads
//! (`[validate]`), never on the measured ones. Each training workload's profile and each
//! validation workload's are read once; a candidate mix is their weighted sum, scored by its
//! agreement with each validation workload ([`insight::agreement`], which tells a failed
//! training); the weights that maximise the smallest score are written to
//! `pgo-data/tune.json`, which `merge` then uses. With `--measure` the agreement's choice is
//! one candidate among others, built and measured on the validation workloads
//! (`tune/measured.rs`), and the measuring decides; every mix's agreement is then checked
//! against the captures measured ([`check`]). The measured workloads' capture, which the
//! tuning never saw, is what the next `cargo xtask pgo` reports.

use anyhow::{Context, Result, bail};

use super::ctx::Ctx;
use super::profile::{AgreementCheck, CheckCase, Measured, Scored, TUNED, Tuned, commands_hash};
use super::runner::Timer;
use super::stage::instrument::InstrumentedBuild;
use super::stage::merge::{MergedProfile, ProfileSource};
use super::stage::{insight as insight_stage, instrument, merge, train};

use crate::analysis::insight::{self as insight, FunctionCount};
use crate::toolchain::tools::Toolchain;

mod measured;

pub fn run(
    ctx: &Ctx,
    toolchain: &Toolchain,
    timer: &mut Timer,
    skip_bad: bool,
    measure: bool,
) -> Result<Tuned> {
    let cfg = &ctx.config.settings;
    if cfg.validate.workloads.is_empty() {
        bail!(
            "`cargo xtask tune` needs validation workloads: a `[validate]` section in {} with `workloads = [...]`, \
             like `[measure]`'s but with other inputs (other sizes, counts, files)",
            ctx.config.path.display()
        );
    }
    if cfg.train.workloads.len() < 2 {
        bail!(
            "`cargo xtask tune` weighs training workloads against each other: {} has one (`train.workloads`); split the training into several commands",
            ctx.config.path.display()
        );
    }
    let instrumented = instrument::run(ctx, toolchain, timer)?;
    let training = train::run(ctx, toolchain, timer, &instrumented)?;
    let source = ProfileSource::Training {
        training: &training,
        skip_bad,
    };
    let merged = merge::run(ctx, toolchain, timer, source)?;
    timer.section_named("tune", || {
        choose(ctx, toolchain, &instrumented, &merged, measure)
    })
}

/// The validation workloads profiled, the training workloads' profiles read, the weights
/// chosen and kept.
fn choose(
    ctx: &Ctx,
    toolchain: &Toolchain,
    instrumented: &InstrumentedBuild,
    merged: &MergedProfile,
    measure: bool,
) -> Result<Tuned> {
    let cfg = &ctx.config.settings;
    let dir = ctx.pgo_data.join("validate");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut parts = Vec::new();
    for part in &merged.0.parts {
        let text = dir.join(format!("train-{}.proftext", part.workload));
        parts.push((
            part.workload.clone(),
            insight_stage::functions(toolchain, &part.profile, &text)?,
        ));
    }
    let mut validation = Vec::new();
    let mut profiles = Vec::new();
    for w in &cfg.validate.workloads {
        let profile = insight_stage::profile_workload(ctx, toolchain, instrumented, w, &dir)?;
        profiles.push(profile.clone());
        let text = dir.join(format!("{}.proftext", w.name));
        validation.push((
            w.name.clone(),
            insight_stage::functions(toolchain, &profile, &text)?,
        ));
    }
    let start: Vec<u64> = parts
        .iter()
        .map(|(name, _)| {
            cfg.train
                .weights()
                .iter()
                .find(|(n, _)| n == name)
                .map_or(1, |(_, w)| *w)
        })
        .collect();
    let mut best = weigh(&parts, &validation, &start);
    let named = |weights: &[u64]| -> Vec<(String, u64)> {
        parts
            .iter()
            .zip(weights)
            .map(|((name, _), w)| (name.clone(), *w))
            .collect()
    };
    let measured = if measure {
        let found = measured::run(
            ctx,
            toolchain,
            &merged.0.parts,
            &profiles,
            &named(&start),
            &named(&best),
        )?;
        best = match found.mixes.iter().find(|m| m.label == found.chosen) {
            Some(kept) => kept.weights.iter().map(|(_, w)| *w).collect(),
            None => start.clone(),
        };
        Some(found)
    } else {
        None
    };
    let before = scores(&parts, &validation, &start);
    let after = scores(&parts, &validation, &best);
    let check = measured.as_ref().map(|m| {
        let config = named(&start);
        check(
            &parts,
            &validation,
            m,
            &config,
            cfg.insight.min_agreement_pct,
        )
    });
    let tuned = Tuned {
        weights: named(&best),
        commands: commands_hash(cfg)?,
        from: cfg.train.weights(),
        validation: validation
            .iter()
            .zip(before.iter().zip(&after))
            .map(|((name, _), (b, a))| Scored {
                workload: name.clone(),
                before_pct: *b,
                after_pct: *a,
            })
            .collect(),
        measured,
        check,
    };
    let path = ctx.pgo_data.join(TUNED);
    crate::base::fsx::write_atomic(&path, serde_json::to_string_pretty(&tuned)?.as_bytes())?;
    print(&tuned, &start, &path);
    Ok(tuned)
}

/// The agreement of every measured mix with every validation workload, against the capture
/// measured there: the warning's predictor checked on this run's own data.
fn check(
    parts: &[(String, Vec<FunctionCount>)],
    validation: &[(String, Vec<FunctionCount>)],
    measured: &Measured,
    config: &[(String, u64)],
    threshold_pct: f64,
) -> AgreementCheck {
    let config_mix = (
        "config".to_string(),
        config.to_vec(),
        measured.config_capture.clone(),
    );
    let mixes = measured.mixes.iter().map(|m| {
        let captures = m
            .against_config
            .iter()
            .map(|c| (c.workload.clone(), c.capture_pct))
            .collect();
        (m.label.clone(), m.weights.clone(), captures)
    });
    let mut cases = Vec::new();
    for (label, weights, captures) in std::iter::once(config_mix).chain(mixes) {
        let w: Vec<u64> = parts
            .iter()
            .map(|(name, _)| weights.iter().find(|(n, _)| n == name).map_or(0, |p| p.1))
            .collect();
        let agreement = scores(parts, validation, &w);
        for ((name, _), a) in validation.iter().zip(agreement) {
            if let Some((_, Some(capture))) = captures.iter().find(|(n, _)| n == name) {
                cases.push(CheckCase {
                    mix: label.clone(),
                    workload: name.clone(),
                    agreement_pct: a,
                    capture_pct: *capture,
                });
            }
        }
    }
    let (a, c): (Vec<f64>, Vec<f64>) = cases
        .iter()
        .map(|x| (x.agreement_pct, x.capture_pct))
        .unzip();
    let count = |keep: &dyn Fn(f64) -> bool, hit: &dyn Fn(f64) -> bool| {
        let of: Vec<&CheckCase> = cases.iter().filter(|x| keep(x.capture_pct)).collect();
        (of.iter().filter(|x| hit(x.agreement_pct)).count(), of.len())
    };
    AgreementCheck {
        spearman: stats::spearman(&a, &c),
        threshold_pct,
        warned_under_80: count(&|c| c < 80.0, &|a| a < threshold_pct),
        quiet_over_95: count(&|c| c >= 95.0, &|a| a >= threshold_pct),
        cases,
    }
}

fn print(tuned: &Tuned, start: &[u64], path: &std::path::Path) {
    eprintln!("tune: weights (config → tuned):");
    for ((name, w), s) in tuned.weights.iter().zip(start) {
        eprintln!("  {name:<24} {s:>3} → {w}");
    }
    eprintln!("tune: agreement with each validation workload (config's weights → tuned):");
    for v in &tuned.validation {
        eprintln!(
            "  {:<24} {:5.1} % → {:5.1} %",
            v.workload, v.before_pct, v.after_pct
        );
    }
    if let Some(c) = &tuned.check {
        eprintln!(
            "tune: the agreement against the {} captures measured: rank correlation {}; at the warning's {:.0} %, {} of {} captures under 80 % warned, {} of {} of 95 % or more left alone",
            c.cases.len(),
            c.spearman.map_or("–".to_string(), |r| format!("{r:.2}")),
            c.threshold_pct,
            c.warned_under_80.0,
            c.warned_under_80.1,
            c.quiet_over_95.0,
            c.quiet_over_95.1
        );
    }
    eprintln!(
        "tune: kept in {}; `cargo xtask pgo` merges with them from now on (to keep them in the \
         config instead, set each training workload's `weight` and delete that file)",
        path.display()
    );
}

/// The weights to keep: the search's, unless they raise the smallest agreement by less than
/// [`MIN_GAIN_POINTS`] over `start` (then `start`, said on the terminal). Two trainings of one
/// kind trade hundredths of a point, and the search would push one to the largest weight.
fn weigh(
    parts: &[(String, Vec<FunctionCount>)],
    validation: &[(String, Vec<FunctionCount>)],
    start: &[u64],
) -> Vec<u64> {
    let (found, min) = search(parts, validation, start);
    let at_start = scores(parts, validation, start)
        .into_iter()
        .fold(f64::INFINITY, f64::min);
    if min >= at_start + MIN_GAIN_POINTS {
        found
    } else {
        eprintln!(
            "tune: no mix agrees with the worst validation workload {MIN_GAIN_POINTS} points better than the config's weights ({min:.1} % at best against {at_start:.1} %): they are kept"
        );
        start.to_vec()
    }
}

/// Each validation workload's agreement (%) with the mix of `parts` at `weights`.
pub fn scores(
    parts: &[(String, Vec<FunctionCount>)],
    validation: &[(String, Vec<FunctionCount>)],
    weights: &[u64],
) -> Vec<f64> {
    let mix: Vec<(&[FunctionCount], u64)> = parts
        .iter()
        .zip(weights)
        .map(|((_, f), w)| (f.as_slice(), *w))
        .collect();
    let training = insight::weighted_sum(&mix);
    validation
        .iter()
        .map(|(_, w)| insight::agreement(w, &training).score_pct)
        .collect()
}

/// How much a mix must raise the smallest validation agreement (points) to replace the
/// config's weights.
const MIN_GAIN_POINTS: f64 = 0.5;

/// The largest weight tried: weights are relative, and llvm-profdata's are integers.
const MAX_WEIGHT: u64 = 64;

/// Coordinate ascent on the weights: each in turn doubled, halved, one more or one less,
/// kept when the smallest score rises (the mean breaks ties), until none helps; from the
/// config's weights and from equal ones, the better end kept.
pub fn search(
    parts: &[(String, Vec<FunctionCount>)],
    validation: &[(String, Vec<FunctionCount>)],
    start: &[u64],
) -> (Vec<u64>, f64) {
    let objective = |w: &[u64]| {
        let s = scores(parts, validation, w);
        let min = s.iter().copied().fold(f64::INFINITY, f64::min);
        let mean = s.iter().sum::<f64>() / s.len().max(1) as f64;
        (min, mean)
    };
    let better =
        |a: (f64, f64), b: (f64, f64)| a.0 > b.0 + 1e-9 || (a.0 > b.0 - 1e-9 && a.1 > b.1 + 1e-9);
    let mut best: Option<(Vec<u64>, (f64, f64))> = None;
    for origin in [start.to_vec(), vec![1; start.len()]] {
        let mut w = origin;
        let mut at = objective(&w);
        for _pass in 0..20 {
            let mut moved = false;
            for k in 0..w.len() {
                let now = w[k];
                for next in [now * 2, now / 2, now + 1, now.saturating_sub(1)] {
                    if next == 0 || next > MAX_WEIGHT || next == w[k] {
                        continue;
                    }
                    let mut candidate = w.clone();
                    candidate[k] = next;
                    let score = objective(&candidate);
                    if better(score, at) {
                        (w, at, moved) = (candidate, score, true);
                    }
                }
            }
            if !moved {
                break;
            }
        }
        if best.as_ref().is_none_or(|(_, b)| better(at, *b)) {
            best = Some((w, at));
        }
    }
    let (w, (min, _)) = best.expect("two starts were tried");
    (w, min)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::insight::counted;

    /// Two training parts running one function down different branches (its counters: entry,
    /// branch A, branch B), the second also another function; one validation workload takes
    /// branch A, the other branch B. Started with the first part starved (1 against 64),
    /// branch A is laid out as rare; the search gives the part its weight back.
    #[test]
    fn a_starved_part_gets_its_weight_back() {
        let parts = vec![
            ("fast-path".to_string(), vec![counted("f", &[100, 100, 0])]),
            (
                "pressure".to_string(),
                vec![counted("f", &[100, 0, 100]), counted("g", &[1000, 10])],
            ),
        ];
        let validation = vec![
            ("takes-a".to_string(), vec![counted("f", &[100, 99, 1])]),
            (
                "takes-b".to_string(),
                vec![counted("f", &[50, 1, 49]), counted("g", &[50, 1])],
            ),
        ];
        let start = [1, 64];
        let before = scores(&parts, &validation, &start);
        assert!(
            before[0] < 60.0,
            "branch A is rare in the starved mix: {before:?}"
        );
        let (best, min) = search(&parts, &validation, &start);
        let after = scores(&parts, &validation, &best);
        assert!(
            min > 90.0 && after.iter().all(|s| *s > 90.0),
            "{best:?} {after:?}"
        );
        assert!(
            best[0] * 4 >= best[1],
            "the starved part's weight came back: {best:?}"
        );
        assert_eq!(weigh(&parts, &validation, &start), best);
    }

    /// The agreement of each measured mix against its capture: a starved mix is warned about,
    /// the config's is not, and the ranks of three cases agree.
    #[test]
    fn the_check_scores_every_mix_against_its_measured_capture() {
        use crate::pipeline::profile::{Change, Mix};
        let parts = vec![
            ("fast-path".to_string(), vec![counted("f", &[100, 100, 0])]),
            ("pressure".to_string(), vec![counted("f", &[100, 0, 100])]),
        ];
        let validation = vec![("v".to_string(), vec![counted("f", &[100, 99, 1])])];
        let mix = |label: &str, fast: u64, pressure: u64, capture: Option<f64>| Mix {
            label: label.into(),
            round: 1,
            weights: vec![("fast-path".into(), fast), ("pressure".into(), pressure)],
            against_config: vec![Change {
                workload: "v".into(),
                change_pct: 0.0,
                ci_low_pct: -1.0,
                ci_high_pct: 1.0,
                sessions: 20,
                threshold_pct: 1.0,
                capture_pct: capture,
            }],
        };
        let measured = Measured {
            mixes: vec![
                mix("starved", 1, 64, Some(30.0)),
                mix("less-fast", 1, 4, Some(60.0)),
                mix("no-oracle-gain", 4, 1, None),
            ],
            config_capture: vec![("v".into(), Some(98.0))],
            chosen: "config".into(),
        };
        let config = [("fast-path".to_string(), 1), ("pressure".to_string(), 1)];
        let c = check(&parts, &validation, &measured, &config, 89.0);
        let labels: Vec<&str> = c.cases.iter().map(|x| x.mix.as_str()).collect();
        assert_eq!(labels, ["config", "starved", "less-fast"], "{c:?}");
        assert!(c.cases[0].agreement_pct > 99.0, "{c:?}");
        assert!(c.cases[1].agreement_pct < c.cases[2].agreement_pct, "{c:?}");
        assert_eq!(c.warned_under_80, (2, 2));
        assert_eq!(c.quiet_over_95, (1, 1));
        assert_eq!(c.spearman, Some(1.0));
        assert_eq!(c.threshold_pct, 89.0);
    }

    /// Two trainings of one kind: a mix found by the search is barely better, so the
    /// config's weights stay.
    #[test]
    fn a_mix_barely_better_keeps_the_config_weights() {
        let parts = vec![
            ("a".to_string(), vec![counted("f", &[1000, 200])]),
            ("b".to_string(), vec![counted("f", &[1000, 203])]),
        ];
        let validation = vec![("v".to_string(), vec![counted("f", &[100, 100])])];
        let (found, min) = search(&parts, &validation, &[1, 1]);
        let at_start = scores(&parts, &validation, &[1, 1])[0];
        assert!(
            found != [1, 1] && min > at_start,
            "the search moves: {found:?}"
        );
        assert!(min < at_start + MIN_GAIN_POINTS, "{min} {at_start}");
        assert_eq!(weigh(&parts, &validation, &[1, 1]), [1, 1]);
    }
}
