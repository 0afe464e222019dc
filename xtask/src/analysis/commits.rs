//! `--against REV`: this tree's builds against the other commit's, in the same sessions.

use anyhow::Result;

use super::ratios::difference;
use super::{AgainstResult, WorkloadAnalysis, judged};
use crate::config::Measure;
use crate::measure;
use crate::measure::session::{Metric, Session};
use stats::components::Component;

/// `--against`: per workload, each of this tree's builds against the other commit's build of
/// the same name (`pairs`: this tree's arm, the other commit's arm), ln(ours / theirs) round by
/// round in the same sessions, judged against the workload's threshold like every verdict.
pub fn against(
    analysed: &[WorkloadAnalysis],
    sessions: &[Session],
    pairs: &[(String, String)],
    cfg: &Measure,
    stops: &[measure::Stopping],
) -> Result<Vec<AgainstResult>> {
    let mut out = Vec::new();
    for w in analysed {
        // The sessions the workload's own analysis kept (a multi-thread workload's disturbed
        // ones left out, as its stopping rule left them out).
        let left_out: &[u32] = match &w.machine {
            Some(m) if m.left_out => &m.disturbed,
            _ => &[],
        };
        let mine: Vec<&Session> = sessions
            .iter()
            .filter(|s| s.workload == w.workload && !left_out.contains(&s.session))
            .collect();
        let pilot = cfg.lockstep.min_sessions.clamp(2, mine.len().max(2) as u32) as usize;
        for (ours, theirs) in pairs {
            let spend = measure::spend(stops, &w.workload, ours, theirs);
            let upto: Vec<&Session> = mine
                .iter()
                .filter(|s| s.session < spend.through)
                .copied()
                .collect();
            // ln(ours / theirs) = ln(ours / release) − ln(theirs / release), round by round
            // (in pairs, of ours with theirs).
            let diff = difference(&upto, ours, theirs)?;
            // Two commits' builds are laid out differently: the layout floor applies, and
            // the run components either build carries.
            let estimate =
                stats::compare_sessions_at(&spend.units(diff), spend.pilot_or(pilot), spend.alpha)?
                    .with_arm(Component::plus(w.extra(ours), w.extra(theirs)).as_ref());
            out.push(AgainstResult {
                metric: Metric::primary(&upto),
                workload: w.workload.clone(),
                build: ours.clone(),
                against: theirs.clone(),
                primary: judged(
                    estimate,
                    Metric::primary(&upto).min_effect_pct(cfg),
                    w.layout.as_ref(),
                ),
            });
        }
    }
    Ok(out)
}
