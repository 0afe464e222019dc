//! The schedule of lockstep sessions: each workload's taking turns with the others' (one
//! session: `lockstep.rs`), the next one's arms set up on the other core while one runs,
//! until the stopping rule (`progress.rs`, `xtask/stats/src/sequential.rs`) is satisfied.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::config::Measure;

use crate::measure::lockstep;

use crate::measure::session::{Arm, Session};
use stats::SplitMix64;

use super::arms::MeasuredArm;
use super::progress::{Group, Progress, add, groups, judge, stopping};
use super::stops::Stopping;

/// Per workload, lockstep sessions of the arms taking turns (`lockstep.rs`) until the
/// stopping rule is satisfied. See [`run_groups`].
pub fn run_lockstep(arms: &[MeasuredArm], cfg: &Measure) -> Result<(Vec<Session>, Vec<Stopping>)> {
    run_groups(&groups(arms, cfg), cfg)
}

/// The sessions of every group, round-robin among the groups still measuring (so a slow
/// stretch of the machine is shared among them), each comparison stopping by the rule in
/// `stats::sequential`: a pilot of `lockstep.min_sessions`, then the count its spread asks
/// for its target half-width, within `lockstep.sessions` and `lockstep.max_secs`, or earlier
/// at a look where it is settled; an arm leaves the sessions once every comparison that
/// needs it has stopped. While one session takes its turns on the measured core, the next
/// one's arms are started (by a thread pinned to the other core) and warm up there.
pub fn run_groups(groups: &[Group], cfg: &Measure) -> Result<(Vec<Session>, Vec<Stopping>)> {
    let l = &cfg.lockstep;
    lockstep::sweep_copies(cfg);
    let mut progress: Vec<Progress> = groups.iter().map(|g| Progress::of(g, cfg)).collect();
    let rounds = l.rounds as u64;
    let bar = ProgressBar::new(progress.iter().map(|p| p.pilot as u64).sum::<u64>() * rounds)
        .with_prefix("measure")
        .with_style(
            ProgressStyle::with_template(
                "{prefix:>12} [{bar:30}] {pos}/{len} rounds {elapsed} {wide_msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
    let seed = cfg.seed.unwrap_or_else(stats::fresh_seed);
    let mut turn = 0usize;
    // The next session to start: round-robin among the groups below their limit; else, so
    // that a group finishing its pilot alone does not leave the other core idle, one more
    // session of a group still in its pilot (not run if the plan stops at the pilot).
    let mut next = |progress: &mut [Progress]| -> Option<(usize, u32)> {
        let n = progress.len();
        let below = |p: &Progress| !p.ended() && p.started < p.limit();
        let speculative = |p: &Progress| !p.planned() && p.started < p.max;
        let g = (0..n)
            .map(|k| (turn + k) % n)
            .find(|&g| below(&progress[g]))
            .or_else(|| {
                (0..n)
                    .map(|k| (turn + k) % n)
                    .find(|&g| speculative(&progress[g]))
            })?;
        turn = g + 1;
        progress[g].started += 1;
        Some((g, progress[g].started - 1))
    };
    let paired = |g: usize| groups[g].workload.mode == crate::config::Mode::Process;
    let start = |g: usize, index: u32, (arms, pairs): &(Vec<Arm>, Vec<(String, String)>)| {
        let w = &groups[g].workload;
        let session_seed = session_seed(seed, &w.name, index);
        lockstep::spawn(w, index, arms, pairs, cfg, session_seed, &bar)
            .with_context(|| format!("measuring `{}` (lockstep)", groups[g].workload.name))
    };
    let mut stopped = Vec::new();
    // The next session, chosen, and started unless its arms set up where they will run.
    let mut pending: Option<(usize, u32, Option<lockstep::StartedArms>)> = None;
    loop {
        let (g, index, spawned) = match pending.take() {
            Some((g, index, Some(spawned))) => (g, index, spawned),
            Some((g, index, None)) => {
                let arms = progress[g].session_of(&groups[g].arms, paired(g));
                (g, index, start(g, index, &arms)?)
            }
            None => match next(&mut progress) {
                Some((g, index)) => {
                    let arms = progress[g].session_of(&groups[g].arms, paired(g));
                    (g, index, start(g, index, &arms)?)
                }
                None => break,
            },
        };
        // The next session is started, and sets up on the other core, while this one takes
        // its turns: by a thread pinned to that core, so that no process it starts runs a
        // moment on the measured core before it is pinned.
        // A service session's driver runs on that other core, and nothing else may run there
        // beside it: the next session starts when this one has ended.
        let mut early = None;
        if spawned.leaves_a_core_free()
            && groups[g].workload.mode != crate::config::Mode::Service
            && let Some((g2, index2)) = next(&mut progress)
        {
            let w2 = &groups[g2].workload;
            if w2.shares_core_in(l) && w2.mode != crate::config::Mode::Service {
                early = Some((
                    g2,
                    index2,
                    progress[g2].session_of(&groups[g2].arms, paired(g2)),
                ));
            } else {
                pending = Some((g2, index2, None));
            }
        }
        let group = &groups[g];
        bar.set_message(format!("session {} of {}", index + 1, group.workload.name));
        let (session, started) = std::thread::scope(|scope| {
            let starting = early.map(|(g2, index2, arms)| {
                let start = &start;
                scope.spawn(move || {
                    if let Some(core) = lockstep::setup_core_of(&groups[g2].workload, cfg) {
                        // Best effort: unpinned, the arms still pin themselves (`taskset`).
                        let _ = crate::measure::threads::set_affinity(0, &[core]);
                    }
                    (g2, index2, start(g2, index2, &arms))
                })
            });
            let session = spawned.run(&group.workload, index, cfg, &bar);
            let started =
                starting.map(|h| h.join().expect("the thread starting a session panicked"));
            (session, started)
        });
        if let Some((g2, index2, spawned)) = started {
            pending = Some((g2, index2, Some(spawned?)));
        }
        let session =
            session.with_context(|| format!("measuring `{}` (lockstep)", group.workload.name))?;
        let p = &mut progress[g];
        if let Some(t) = session.timing {
            p.secs += t.critical_secs();
            add(&mut p.timing, &t);
        }
        p.done.push(session);
        judge(p, group, cfg);
        let total: u64 = progress.iter().map(Progress::expected).sum();
        bar.set_length(total * rounds);
        let p = &mut progress[g];
        if p.ended()
            && !stopped
                .iter()
                .any(|s: &Stopping| s.workload == group.workload.name)
        {
            let s = stopping(p, group, cfg);
            // Progress only: why it stopped is the report's to say (`report/words.rs`).
            bar.suspend(|| {
                eprintln!(
                    "measure: {}: {} sessions in {:.1} s",
                    s.workload, s.sessions, s.secs
                )
            });
            stopped.push(s);
        }
        // A session started for a group whose plan has since ended it is not run.
        if let Some((g2, index2, _)) = &pending
            && progress[*g2].planned()
            && (progress[*g2].ended() || *index2 >= progress[*g2].limit())
        {
            progress[*g2].started -= 1;
            pending = None;
        }
    }
    bar.finish_and_clear();
    let sessions = progress.into_iter().flat_map(|p| p.done).collect();
    Ok((sessions, stopped))
}

/// Session `index` of `workload`'s own seed, from the run's: its arms' places and turn
/// orders depend on nothing else, so a run replays from its seed (`--seed`) whatever order
/// the sessions of the workloads happened to interleave in.
pub fn session_seed(run: u64, workload: &str, index: u32) -> u64 {
    // FNV-1a of the name, then SplitMix64's mixing of the three.
    let name = workload.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    let mut mix = SplitMix64::new(run ^ name ^ ((index as u64) << 40));
    mix.next_u64()
}
#[cfg(test)]
mod tests;
