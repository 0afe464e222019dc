//! The lockstep half of the analysis: per session, the per-round log ratio of each arm's
//! batch to release's batch of the same round; the session's estimate is the median over its
//! rounds (robust to a speed flip), the estimate a trimmed mean over sessions, the interval
//! the stopping rule's (`stats::compare_sessions`).

use anyhow::{Result, bail};

use super::{
    BASELINE, Comparison, LayoutFloor, LayoutGain, Row, WorkloadAnalysis, capture, judge_rows,
    median_distribution,
};
use crate::config::Measure;
use crate::instructions::InstructionCount;
use crate::lockstep::{Batch, Session};
use crate::measure;
use crate::stats::Verdict;
use crate::stats::median;
use crate::stats::{self, Estimate};

type BatchMetric = fn(&Batch) -> f64;
const BOLT: &str = "lto+pgo+bolt";
const PGO: &str = "lto+pgo";
const BATCH_METRICS: [BatchMetric; 3] = [|b| b.median_ns, |b| b.p95_ns, |b| b.p99_ns];

/// Lockstep sessions → the analysis: per-round ratios within each session, the session's
/// median, the trimmed mean over sessions with the stopping rule's interval.
pub fn analyze_lockstep(
    workloads: &[String],
    builds: &[String],
    sessions: &[Session],
    instructions: &[InstructionCount],
    cfg: &Measure,
) -> Result<Vec<WorkloadAnalysis>> {
    // One thread a workload: the nested bootstraps are the report stage's seconds, and each
    // workload's are independent and seeded, so the result does not depend on the threads.
    std::thread::scope(|scope| {
        let handles: Vec<_> = workloads
            .iter()
            .map(|w| {
                scope.spawn(move || {
                    let mine: Vec<&Session> =
                        sessions.iter().filter(|s| &s.workload == w).collect();
                    analyze_sessions(w, builds, &mine, instructions, cfg)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a workload's analysis does not panic"))
            .collect()
    })
}

/// The per-round log ratios of `cand` to the baseline, session by session, on `metric`.
pub fn round_ratios(
    sessions: &[&Session],
    cand: &str,
    metric: BatchMetric,
) -> Result<Vec<Vec<f64>>> {
    sessions
        .iter()
        .map(|s| {
            let (Some(base), Some(c)) = (s.arm(BASELINE), s.arm(cand)) else {
                bail!(
                    "session {} of `{}` has no arm `{cand}` or `{BASELINE}`",
                    s.session,
                    s.workload
                );
            };
            Ok(base
                .iter()
                .zip(c)
                .map(|(b, c)| (metric(c) / metric(b)).ln())
                .collect())
        })
        .collect()
}

fn analyze_sessions(
    workload: &str,
    builds: &[String],
    sessions: &[&Session],
    instructions: &[InstructionCount],
    cfg: &Measure,
) -> Result<WorkloadAnalysis> {
    if sessions.len() < 2 {
        bail!(
            "`{workload}`: {} lockstep session(s) recorded; an interval needs at least 2",
            sessions.len()
        );
    }
    // The stopping rule's pilot: the first sessions, which always run whole.
    let pilot = cfg.lockstep.min_sessions.clamp(2, sessions.len() as u32) as usize;
    let compare = |cand: &str| -> Result<[Estimate; 3]> {
        let mut out = Vec::new();
        for metric in BATCH_METRICS {
            out.push(stats::compare_sessions(
                &round_ratios(sessions, cand, metric)?,
                pilot,
            )?);
        }
        Ok(out.try_into().expect("three metrics"))
    };
    let mut layout = layout_floor(sessions, pilot)?;
    let (aa, rows) = judge_rows(
        builds,
        cfg.min_effect_pct,
        layout.as_ref().map(|l| l.floor_pct),
        compare,
        |build, vs_release| session_row(workload, build, sessions, instructions, vs_release),
    )?;
    if let Some(l) = &mut layout {
        let (t, _) = super::threshold(
            stats::noise_floor_pct(&aa.median.estimate),
            cfg.min_effect_pct,
            None,
        );
        l.gains = layout_gains(sessions, pilot, t)?;
        l.bolt_vs_layouts = bolt_vs_layouts(sessions, pilot)?;
    }
    let capture = capture(builds, cfg, |b| round_ratios(sessions, b, BATCH_METRICS[0]))?;
    // BOLT on top of PGO: ln(bolt / pgo) = ln(bolt / release) − ln(pgo / release), round by round.
    let bolt_vs_pgo = if builds.iter().any(|b| b == BOLT) && builds.iter().any(|b| b == PGO) {
        let (bolt, pgo) = (
            round_ratios(sessions, BOLT, BATCH_METRICS[0])?,
            round_ratios(sessions, PGO, BATCH_METRICS[0])?,
        );
        let diff: Vec<Vec<f64>> = bolt
            .iter()
            .zip(&pgo)
            .map(|(b, p)| b.iter().zip(p).map(|(b, p)| b - p).collect())
            .collect();
        Some(stats::compare_sessions(&diff, pilot)?)
    } else {
        None
    };
    Ok(WorkloadAnalysis {
        workload: workload.to_string(),
        capture,
        rounds_per_session: sessions[0].order.len(),
        sessions: sessions.len(),
        aa,
        rows,
        bolt_vs_pgo,
        layout,
    })
}

/// ln(a / b) round by round: ln(a / release) − ln(b / release).
fn difference(sessions: &[&Session], a: &str, b: &str) -> Result<Vec<Vec<f64>>> {
    let (a, b) = (
        round_ratios(sessions, a, BATCH_METRICS[0])?,
        round_ratios(sessions, b, BATCH_METRICS[0])?,
    );
    Ok(a.iter()
        .zip(&b)
        .map(|(a, b)| a.iter().zip(b).map(|(a, b)| a - b).collect())
        .collect())
}

/// Release's layout variants against release (`stats::layout`), when the sessions carry at
/// least two; the gains and BOLT's comparison are filled in once the A/A floor is known.
fn layout_floor(sessions: &[&Session], pilot: usize) -> Result<Option<LayoutFloor>> {
    let variants = measure::layout_arms_of(&sessions[0].arms, BASELINE);
    if variants.len() < 2 {
        return Ok(None);
    }
    let mut estimates = Vec::new();
    let mut values = Vec::new();
    for v in &variants {
        let ratios = round_ratios(sessions, v, BATCH_METRICS[0])?;
        estimates.push((v.to_string(), stats::compare_sessions(&ratios, pilot)?));
        values.push(stats::session_values(&ratios));
    }
    let Some(spread) = stats::layout_spread::spread(&values) else {
        return Ok(None);
    };
    let pct = |x: f64| (x.exp() - 1.0) * 100.0;
    let (low_pct, high_pct) = (pct(spread.low), pct(spread.high));
    let max_half_width_pct = estimates
        .iter()
        .map(|(_, e)| (e.ci_high_pct - e.ci_low_pct) / 2.0)
        .fold(0.0, f64::max);
    Ok(Some(LayoutFloor {
        build: BASELINE.to_string(),
        variants: estimates,
        mean_pct: pct(spread.mean),
        sd_pct: 100.0 * spread.sd,
        layout_sd_pct: 100.0 * spread.layout_sd,
        low_pct,
        high_pct,
        // The interval's half-width: the spread of layouts, not their mean. The mean is the
        // shuffled orders against the linker's default order, which every build shares.
        floor_pct: pct((spread.high - spread.low) / 2.0),
        max_half_width_pct,
        gains: Vec::new(),
        bolt_vs_layouts: Vec::new(),
        copy: match sessions[0]
            .arms
            .iter()
            .find(|a| **a == measure::copy_arm(BASELINE))
        {
            Some(arm) => Some(stats::compare_sessions(
                &round_ratios(sessions, arm, BATCH_METRICS[0])?,
                pilot,
            )?),
            None => None,
        },
    }))
}

/// Each build relinked beside release (`layout.builds`): its change against release in its
/// own layout and in each of its variants, each judged against `threshold_pct`.
fn layout_gains(
    sessions: &[&Session],
    pilot: usize,
    threshold_pct: f64,
) -> Result<Vec<LayoutGain>> {
    let arms = &sessions[0].arms;
    let mut out = Vec::new();
    for build in arms.iter().filter(|a| *a != BASELINE) {
        let variants = measure::layout_arms_of(arms, build);
        if variants.is_empty() {
            continue;
        }
        let mut layouts = Vec::new();
        for arm in std::iter::once(build.as_str()).chain(variants) {
            let ratios = round_ratios(sessions, arm, BATCH_METRICS[0])?;
            layouts.push((arm.to_string(), stats::compare_sessions(&ratios, pilot)?));
        }
        let verdicts: Vec<Verdict> = layouts
            .iter()
            .map(|(_, e)| stats::verdict(e, threshold_pct))
            .collect();
        let changes = layouts.iter().map(|(_, e)| e.change_pct);
        out.push(LayoutGain {
            build: build.clone(),
            low_pct: changes.clone().fold(f64::INFINITY, f64::min),
            high_pct: changes.fold(f64::NEG_INFINITY, f64::max),
            verdict: verdicts
                .iter()
                .all(|v| *v == verdicts[0])
                .then_some(verdicts[0]),
            layouts,
        });
    }
    Ok(out)
}

/// lto+pgo+bolt against each random layout of lto+pgo, paired round by round: is BOLT's
/// layout better than a random one?
fn bolt_vs_layouts(sessions: &[&Session], pilot: usize) -> Result<Vec<(String, Estimate)>> {
    let arms = &sessions[0].arms;
    if !arms.iter().any(|a| a == BOLT) {
        return Ok(Vec::new());
    }
    measure::layout_arms_of(arms, PGO)
        .into_iter()
        .map(|v| {
            Ok((
                v.to_string(),
                stats::compare_sessions(&difference(sessions, BOLT, v)?, pilot)?,
            ))
        })
        .collect()
}

/// One build's row from sessions: each figure the median over sessions of the median over
/// that session's rounds; the distribution from each session's closing histogram.
fn session_row(
    workload: &str,
    build: &str,
    sessions: &[&Session],
    instructions: &[InstructionCount],
    vs_release: Option<Comparison>,
) -> Row {
    let fig = |metric: BatchMetric| {
        let per_session: Vec<f64> = sessions
            .iter()
            .filter_map(|s| s.arm(build))
            .filter_map(|b| median(&b.iter().map(metric).collect::<Vec<_>>()))
            .collect();
        median(&per_session).unwrap_or(f64::NAN)
    };
    let totals: Vec<&crate::workload::WorkloadLine> = sessions
        .iter()
        .filter_map(|s| {
            let i = s.arms.iter().position(|a| a == build)?;
            s.totals.get(i)
        })
        .collect();
    let distribution = median_distribution(totals.iter().map(|t| t.percentiles.as_slice()));
    let instr = instructions
        .iter()
        .find(|i| i.workload == workload && i.build == build);
    Row {
        build: build.to_string(),
        runs: sessions.len(),
        median_ns: fig(BATCH_METRICS[0]),
        p95_ns: fig(BATCH_METRICS[1]),
        p99_ns: fig(BATCH_METRICS[2]),
        instructions_per_message: instr.and_then(|i| i.per_message),
        instructions_note: instr.and_then(|i| i.note.clone()),
        vs_release,
        distribution,
    }
}

/// `--against`: per workload, each of this tree's builds against the other commit's build of
/// the same name (`pairs`: this tree's arm, the other commit's arm), ln(ours / theirs) round by
/// round in the same sessions, judged against the workload's A/A floor like every verdict.
pub fn against(
    analysed: &[WorkloadAnalysis],
    sessions: &[Session],
    pairs: &[(String, String)],
    cfg: &Measure,
) -> Result<Vec<super::AgainstResult>> {
    let mut out = Vec::new();
    for w in analysed {
        let mine: Vec<&Session> = sessions
            .iter()
            .filter(|s| s.workload == w.workload)
            .collect();
        let pilot = cfg.lockstep.min_sessions.clamp(2, mine.len().max(2) as u32) as usize;
        for (ours, theirs) in pairs {
            let (a, b) = (
                round_ratios(&mine, ours, BATCH_METRICS[0])?,
                round_ratios(&mine, theirs, BATCH_METRICS[0])?,
            );
            // ln(ours / theirs) = ln(ours / release) − ln(theirs / release), round by round.
            let diff: Vec<Vec<f64>> = a
                .iter()
                .zip(&b)
                .map(|(a, b)| a.iter().zip(b).map(|(a, b)| a - b).collect())
                .collect();
            let estimate = stats::compare_sessions(&diff, pilot)?;
            // Two commits' builds are laid out differently: the layout floor applies.
            let (threshold_pct, bound) = super::threshold(
                stats::noise_floor_pct(&w.aa.median.estimate),
                cfg.min_effect_pct,
                w.layout.as_ref().map(|l| l.floor_pct),
            );
            out.push(super::AgainstResult {
                workload: w.workload.clone(),
                build: ours.clone(),
                against: theirs.clone(),
                median: super::Judged {
                    verdict: stats::verdict(&estimate, threshold_pct),
                    threshold_pct,
                    bound,
                    estimate,
                },
            });
        }
    }
    Ok(out)
}
