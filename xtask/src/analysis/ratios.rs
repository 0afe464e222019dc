//! The log ratios the lockstep analysis rests on, read from sessions: one arm against
//! release or another arm, round by round (pair by pair), on any judged metric, and one
//! comparison's estimate as the stopping rule watched it.

use anyhow::{Result, bail};

use crate::measure::session::{Metric, Session};
use crate::measure::{self, BASELINE};
use stats::Estimate;

/// The per-round log ratios of `cand` to the baseline, session by session, on `metric`: the
/// sessions `cand` ran in (an arm leaves once its comparisons have stopped: a prefix of them).
pub fn round_ratios(sessions: &[&Session], cand: &str, metric: Metric) -> Result<Vec<Vec<f64>>> {
    ratios(sessions, cand, BASELINE, metric)
}

/// ln(`cand` / `base`) on `metric`, round by round (pair by pair), session by session: the
/// sessions in which both ran (in pairs: ran as a pair, or each beside a third arm). An arm
/// leaves once its comparisons have stopped, and a comparison's pairs end when it stops, so
/// these are a prefix of the sessions `cand` ran in; a later session where it ran without
/// `base` (another comparison kept it) ends them.
fn ratios(sessions: &[&Session], cand: &str, base: &str, metric: Metric) -> Result<Vec<Vec<f64>>> {
    let mine: Vec<&&Session> = sessions.iter().filter(|s| s.arm(cand).is_some()).collect();
    let Some(first) = mine.first() else {
        bail!(
            "no session of `{}` has the arm `{cand}`",
            sessions.first().map_or("", |s| s.workload.as_str())
        );
    };
    let out: Vec<Vec<f64>> = mine
        .iter()
        .map_while(|s| s.round_log_ratios(cand, base, metric))
        .collect();
    if out.is_empty() {
        bail!(
            "session {} of `{}` has no arm `{base}` beside `{cand}`",
            first.session,
            first.workload
        );
    }
    Ok(out)
}

/// `cand` against release as the stopping rule watched it: the sessions up to its stop, at
/// the error it spends (`measure::spend`).
pub(super) fn watched(
    sessions: &[&Session],
    stops: &[measure::Stopping],
    cand: &str,
    metric: Metric,
    pilot: usize,
) -> Result<Estimate> {
    let workload = sessions.first().map_or("", |s| s.workload.as_str());
    let spend = measure::spend(stops, workload, cand, BASELINE);
    let mine: Vec<&Session> = sessions
        .iter()
        .filter(|s| s.session < spend.through)
        .copied()
        .collect();
    stats::compare_sessions_at(
        &spend.units(round_ratios(&mine, cand, metric)?),
        spend.pilot_or(pilot),
        spend.alpha,
    )
}

/// ln(a / b) round by round: ln(a / release) − ln(b / release), or in pairs, pair by pair
/// where a and b ran as pairs.
pub(super) fn difference(sessions: &[&Session], a: &str, b: &str) -> Result<Vec<Vec<f64>>> {
    ratios(sessions, a, b, Metric::primary(sessions))
}
