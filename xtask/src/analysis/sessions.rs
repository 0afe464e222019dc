//! The lockstep half of the analysis: per session, the per-round log ratio of each arm's
//! batch to release's batch of the same round; the session's estimate is the median over its
//! rounds (robust to a speed flip), the estimate a trimmed mean over sessions, the interval
//! the stopping rule's (`stats::compare_sessions`).

use anyhow::{Result, bail};

use super::{
    BASELINE, Comparison, Row, WorkloadAnalysis, capture, judge_rows, median_distribution,
};
use crate::config::Measure;
use crate::instructions::InstructionCount;
use crate::lockstep::{Batch, Session};
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
    let (aa, rows) = judge_rows(builds, cfg.min_effect_pct, compare, |build, vs_release| {
        session_row(workload, build, sessions, instructions, vs_release)
    })?;
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
    })
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
            let threshold_pct = w.aa.median.threshold_pct;
            out.push(super::AgainstResult {
                workload: w.workload.clone(),
                build: ours.clone(),
                against: theirs.clone(),
                median: super::Judged {
                    verdict: stats::verdict(&estimate, threshold_pct),
                    threshold_pct,
                    estimate,
                },
            });
        }
    }
    Ok(out)
}
