//! The measured arms (each build under its name, release twice) and the schedule of lockstep
//! sessions, each workload's taking turns with the others' (one session: `lockstep.rs`),
//! until the stopping rule (`xtask/stats/src/sequential.rs`) is satisfied.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::config::{Measure, Workload};
use crate::toolchain::build::Build;

use crate::measure::lockstep;

use crate::measure::session::{Arm, Session, Timing};
use stats::{SplitMix64, sequential};

use super::arms::MeasuredArm;
use super::stops::{ComparisonStop, Role, StopReason, Stopping, Unit};

/// One workload's sessions: its settings, its arms (each with its whole command line), and
/// the comparisons (candidate arm, baseline arm) whose intervals the stopping rule watches.
#[derive(Debug, Clone)]
pub struct Group {
    pub workload: Workload,
    pub arms: Vec<Arm>,
    pub pairs: Vec<(String, String)>,
    /// The run component each build carries where earlier runs of the same executables
    /// showed one (`stats::components::run_test`): a comparison settling early must clear it
    /// too.
    pub run_components: Vec<(String, stats::components::Component)>,
}

impl Group {
    /// One more arm on this group's arguments (plus `extra`); `watched`: its comparison with
    /// the first arm counts in the stopping rule.
    pub fn add_arm(&mut self, name: &str, exe: &std::path::Path, extra: &[String], watched: bool) {
        self.arms.push(Arm {
            name: name.to_string(),
            exe: exe.to_path_buf(),
            args: self.workload.args.iter().chain(extra).cloned().collect(),
        });
        if watched {
            self.pairs
                .push((name.to_string(), self.arms[0].name.clone()));
        }
    }
}

/// The groups of the measured workloads: every arm on each workload's arguments (plus the
/// arm's extra ones), each compared with the first arm (release).
pub fn groups(arms: &[MeasuredArm], cfg: &Measure) -> Vec<Group> {
    cfg.workloads
        .iter()
        .map(|w| Group {
            workload: w.clone(),
            arms: arms
                .iter()
                .map(|a| Arm {
                    name: a.name.clone(),
                    exe: a.exe.clone(),
                    args: w.args.iter().chain(&a.extra).cloned().collect(),
                })
                .collect(),
            pairs: arms
                .iter()
                .skip(1)
                .map(|a| (a.name.clone(), arms[0].name.clone()))
                .collect(),
            run_components: Vec::new(),
        })
        .collect()
}

/// Per workload, lockstep sessions of the arms taking turns (`lockstep.rs`) until the
/// stopping rule is satisfied. See [`run_groups`].
pub fn run_lockstep(arms: &[MeasuredArm], cfg: &Measure) -> Result<(Vec<Session>, Vec<Stopping>)> {
    run_groups(&groups(arms, cfg), cfg)
}

/// One watched comparison in progress.
struct Watched {
    cand: String,
    base: String,
    role: Role,
    target_pct: f64,
    /// The arms it keeps in the sessions: its own two, and for the oracle lto and lto+pgo
    /// (the capture compares their gains in the same sessions).
    needs: Vec<String>,
    /// A whole-process workload's: its arms run as adjacent pairs, which may be the unit
    /// (decided at its pilot).
    whole_process: bool,
    /// Whether its pilot is in (its plan made), and what its values are from then on.
    planned: bool,
    unit: Unit,
    /// Its values per session (1, or the rounds when the unit is the pair), and its pilot's.
    per: u32,
    pilot_values: usize,
    needed: Option<u32>,
    /// The last look it was tested at: each look spends its error once (a disturbed session
    /// leaves the count, and so the look, where it was).
    looked: Option<u32>,
    stop: Option<ComparisonStop>,
    /// Its values so far ([`Watched::refresh`]), from the first `seen` sessions.
    vals: Vec<f64>,
    seen: usize,
}

impl Watched {
    /// Its values from the sessions done since the last call, where both arms ran: each
    /// session's median log ratio, or each pair's (`Unit::Pair`); with `limit_pct`, a
    /// session with more of other processes' CPU beside it is left out, as the analysis
    /// leaves it out of a workload of several threads.
    fn refresh(&mut self, done: &[Session], limit_pct: Option<f64>) {
        let kept = done[self.seen.min(done.len())..]
            .iter()
            .filter(|s| limit_pct.is_none_or(|l| s.machine.is_none_or(|m| m.measured_pct <= l)));
        for s in kept {
            match self.unit {
                Unit::Session => self.vals.extend(s.median_log_ratio(&self.cand, &self.base)),
                Unit::Turn | Unit::Pair => self.vals.extend(
                    s.round_log_ratios(
                        &self.cand,
                        &self.base,
                        crate::measure::session::Metric::PRIMARY,
                    )
                    .unwrap_or_default(),
                ),
            }
        }
        self.seen = done.len();
    }

    /// Its plan, once `pilot` sessions have given it values: a whole-process workload's
    /// pairs become the unit where every run is of a new copy of its file
    /// (`measure.fresh_copies`), else where its sessions show no component of their own
    /// (`components::no_session_component`); Stein's count for its target from the pilot's
    /// values.
    fn plan(&mut self, done: &[Session], limit_pct: Option<f64>, pilot: usize, fresh_copies: bool) {
        self.planned = true;
        if self.whole_process && fresh_copies {
            // Every run from a copy of its own: no session holds anything of its own (a
            // file's pages, a heap offset, a process) that its pairs share, so the pairs are
            // the unit without a test that could only mistake a noisy stretch for one.
            self.unit = Unit::Pair;
            self.per = done
                .iter()
                .find_map(|s| {
                    s.round_log_ratios(
                        &self.cand,
                        &self.base,
                        crate::measure::session::Metric::PRIMARY,
                    )
                })
                .map_or(1, |r| r.len().max(1) as u32);
        } else if self.whole_process {
            let rounds: Vec<Vec<f64>> = done
                .iter()
                .filter(|s| limit_pct.is_none_or(|l| s.machine.is_none_or(|m| m.measured_pct <= l)))
                .filter_map(|s| {
                    s.round_log_ratios(
                        &self.cand,
                        &self.base,
                        crate::measure::session::Metric::PRIMARY,
                    )
                })
                .take(pilot)
                .collect();
            if stats::components::no_session_component(&rounds) {
                self.unit = Unit::Pair;
                self.per = rounds.first().map_or(1, |r| r.len().max(1) as u32);
            }
        }
        if self.unit == Unit::Pair {
            (self.vals, self.seen) = (Vec::new(), 0);
            self.refresh(done, limit_pct);
        }
        self.pilot_values = self.vals.len().min(pilot * self.per as usize);
        let pilot_vals = &self.vals[..self.pilot_values];
        if self.role == Role::Measured && self.target_pct > 0.0 && !pilot_vals.is_empty() {
            let estimate = sequential::trimmed(pilot_vals).0;
            let pct = 100.0 * estimate.exp_m1().abs();
            self.target_pct = self.target_pct.max(super::stops::MEASURED_SHARE * pct);
        }
        self.needed = plan(pilot_vals, self.target_pct);
    }

    /// The values it runs to unless it settles: its plan within the caps (`max` sessions).
    fn plan_count(&self, max: u32) -> u32 {
        let max = max.saturating_mul(self.per);
        self.needed
            .map_or(max, |n| n.clamp(self.pilot_values as u32, max))
    }

    fn stop(
        &mut self,
        values: usize,
        through: usize,
        reason: StopReason,
        alpha: f64,
        threshold: Option<f64>,
    ) {
        self.stop = Some(ComparisonStop {
            cand: self.cand.clone(),
            base: self.base.clone(),
            role: self.role,
            target_half_width_pct: self.target_pct,
            needed: self.needed,
            sessions: values as u32,
            through: through as u32,
            unit: self.unit,
            pilot: self.pilot_values as u32,
            reason,
            alpha,
            threshold_pct: threshold,
            settled_at: None,
        });
    }

    /// A comparison settled at a look whose two arms still ran in later sessions (another
    /// comparison needed them): its values from every session both ran in, its interval at
    /// the planned count's error. The data cost nothing more, and the count it ends at is
    /// set by the other comparison's spread and the caps, not by this one's estimate.
    fn run_on(&mut self, done: &[Session], limit_pct: Option<f64>) {
        let Some(stop) = self.stop.as_mut() else {
            return;
        };
        // In pairs a stopped comparison takes no more pairs: the session already started when
        // it settled holds its last ones, whose count the schedule set, not another
        // comparison's spread; its interval stays the look's.
        if stop.reason != StopReason::Settled || done.iter().any(|s| s.paired) {
            return;
        }
        let both = |s: &Session| s.arms.contains(&self.cand) && s.arms.contains(&self.base);
        let through = done.iter().take_while(|s| both(s)).count();
        if through <= stop.through as usize {
            return;
        }
        let at = stop.sessions;
        self.refresh(&done[..through], limit_pct);
        let stop = self.stop.as_mut().expect("stopped above");
        stop.settled_at = Some(at);
        stop.sessions = self.vals.len() as u32;
        stop.through = through as u32;
        stop.alpha = sequential::ALPHA_PLANNED;
    }
}

/// A group's progress through its sessions.
struct Progress {
    started: u32,
    done: Vec<Session>,
    pilot: u32,
    max: u32,
    watches: Vec<Watched>,
    /// A workload of several threads: disturbed sessions do not count (`max_other_cpu_pct`).
    skip_over_pct: Option<f64>,
    secs: f64,
    timing: Timing,
}

impl Progress {
    /// A group before its first session: every pair a comparison to watch.
    fn of(g: &Group, cfg: &Measure) -> Progress {
        let l = &cfg.lockstep;
        let paired = g.workload.mode == crate::config::Mode::Process;
        Progress {
            started: 0,
            done: Vec::new(),
            // Pairs of runs each from a copy of its own need no pooling test, whose power
            // the pilot's sessions set: then a pilot of pairs.
            pilot: if paired && cfg.fresh_copies {
                g.workload.pair_pilot_in(l)
            } else {
                g.workload.pilot_in(l)
            },
            max: g.workload.sessions_in(l),
            watches: g
                .pairs
                .iter()
                .map(|(cand, base)| {
                    let role = Role::of(cand, base);
                    let mut needs = vec![cand.clone(), base.clone()];
                    // Pairs: the capture takes the sessions in which all three took pairs.
                    if role == Role::Oracle && !paired {
                        // The capture: lto+pgo's gain over lto against the oracle's.
                        for b in [Build::LtoPgo, Build::Lto].map(Build::name) {
                            if g.arms.iter().any(|a| a.name == b) {
                                needs.push(b.to_string());
                            }
                        }
                    }
                    Watched {
                        cand: cand.clone(),
                        base: base.clone(),
                        role,
                        target_pct: role.target_in(&g.workload, cfg),
                        needs,
                        whole_process: paired,
                        planned: false,
                        unit: Unit::Session,
                        per: 1,
                        pilot_values: 0,
                        needed: None,
                        looked: None,
                        stop: None,
                        vals: Vec::new(),
                        seen: 0,
                    }
                })
                .collect(),
            skip_over_pct: (!g.workload.shares_core_in(l)).then_some(cfg.max_other_cpu_pct),
            secs: 0.0,
            timing: Timing::default(),
        }
    }

    /// Whether every comparison's pilot is in.
    fn planned(&self) -> bool {
        self.watches.iter().all(|w| w.planned || w.stop.is_some())
    }

    /// The sessions it may start: its pilot (and one more at a time while a pilot lacks
    /// undisturbed sessions), then as many more as the open comparison furthest from its
    /// plan needs.
    fn limit(&self) -> u32 {
        if self.watches.is_empty() {
            return self.max;
        }
        let done = self.done.len() as u32;
        let more = self
            .watches
            .iter()
            .filter(|w| w.stop.is_none())
            .map(|w| {
                let n = w.vals.len() as u32;
                if w.planned {
                    w.plan_count(self.max).saturating_sub(n).div_ceil(w.per)
                } else {
                    self.pilot.saturating_sub(n).max(1)
                }
            })
            .max()
            .unwrap_or(0);
        let limit = if self.done.is_empty() || !self.planned() {
            (done + more).max(self.pilot)
        } else {
            done + more
        };
        limit.min(self.max)
    }

    /// The sessions it will have run, as far as is known now (for the progress bar).
    fn expected(&self) -> u64 {
        let done = self.done.len() as u32;
        if self.ended() {
            done as u64
        } else {
            self.limit().max(done) as u64
        }
    }

    fn ended(&self) -> bool {
        !self.watches.is_empty() && self.watches.iter().all(|w| w.stop.is_some())
            || self.watches.is_empty() && self.done.len() as u32 >= self.max
    }

    /// The arms of its next session: all of them until every pilot is in; then release, the
    /// arms an open comparison needs, and any arm no comparison watches (in pairs: only
    /// the arms of its pairs, [`Progress::pairs_of`]).
    fn arms_of(&self, arms: &[Arm], paired: bool) -> Vec<Arm> {
        let open = |a: &Arm| {
            self.watches
                .iter()
                .filter(|w| w.stop.is_none())
                .any(|w| w.needs.contains(&a.name))
        };
        if paired {
            return arms.iter().filter(|a| open(a)).cloned().collect();
        }
        if !self.planned() {
            return arms.to_vec();
        }
        arms.iter()
            .enumerate()
            .filter(|(i, a)| {
                *i == 0 || open(a) || !self.watches.iter().any(|w| w.needs.contains(&a.name))
            })
            .map(|(_, a)| a.clone())
            .collect()
    }

    /// Its next session's arms and pairs.
    fn session_of(&self, arms: &[Arm], paired: bool) -> (Vec<Arm>, Vec<(String, String)>) {
        let pairs = if paired { self.pairs_of() } else { Vec::new() };
        (self.arms_of(arms, paired), pairs)
    }

    /// The comparisons (candidate, base) its next session runs as adjacent pairs: the open
    /// ones (a whole-process workload's; the other modes run every arm once a round).
    fn pairs_of(&self) -> Vec<(String, String)> {
        self.watches
            .iter()
            .filter(|w| w.stop.is_none())
            .map(|w| (w.cand.clone(), w.base.clone()))
            .collect()
    }
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
        lockstep::spawn(w, arms, pairs, cfg, session_seed, &bar)
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
        let mut early = None;
        if spawned.leaves_a_core_free()
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
                        let _ = crate::measure::service::set_affinity(0, &[core]);
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

/// After each of a group's sessions, each open comparison: once its pilot is in, its plan
/// (Stein's count for its target); then it stops at its planned count, at a cap, or (a
/// build's, at a look) settled beyond every threshold its verdict could face.
fn judge(p: &mut Progress, group: &Group, cfg: &Measure) {
    let done = p.done.len();
    let pilot = p.pilot as usize;
    let at_cap = done as u32 >= p.max;
    let timed_out = p.secs >= cfg.lockstep.max_secs && done >= pilot;
    let (max, skip) = (p.max, p.skip_over_pct);
    let done_sessions = &p.done;
    for w in p.watches.iter_mut().filter(|w| w.stop.is_none()) {
        w.refresh(done_sessions, skip);
    }
    let threshold = settle_threshold(p, group, cfg);
    let done_sessions = &p.done;
    for w in p.watches.iter_mut().filter(|w| w.stop.is_none()) {
        if !w.planned && w.vals.len() >= pilot {
            w.plan(done_sessions, skip, pilot, cfg.fresh_copies);
        }
        let n = w.vals.len();
        let cap = if w.target_pct <= 0.0 {
            StopReason::Fixed
        } else {
            StopReason::SessionCap
        };
        let look = sequential::look_at(n, w.pilot_values).filter(|k| w.looked != Some(*k));
        if w.planned && n as u32 >= w.plan_count(max) {
            let reason = match w.needed {
                Some(needed) if needed > max * w.per => StopReason::SessionCap,
                Some(_) => StopReason::Target,
                None => StopReason::Fixed,
            };
            w.stop(n, done, reason, sequential::ALPHA_PLANNED, None);
        } else if let (Some(k), Role::Verdict) = (look, w.role)
            && w.planned
            && w.target_pct > 0.0
            && {
                w.looked = Some(k);
                let alpha = sequential::look_alpha(k);
                let (m, half, df) = sequential::interval_df(&w.vals, w.pilot_values, alpha);
                let half = match group.run_components.iter().find(|(b, _)| *b == w.cand) {
                    Some((_, run)) => stats::components::widened(half, df as f64, run, alpha),
                    None => half,
                };
                sequential::beyond(m, half, threshold)
            }
        {
            w.stop(
                n,
                done,
                StopReason::Settled,
                sequential::look_alpha(k),
                Some(threshold),
            );
        } else if at_cap {
            w.stop(n, done, cap, sequential::ALPHA_PLANNED, None);
        } else if timed_out {
            w.stop(
                n,
                done,
                StopReason::TimeCap,
                sequential::ALPHA_PLANNED,
                None,
            );
        }
    }
}

/// The threshold a build's verdict could face, for settling early: the min effect, and in a
/// group with layout variants the farthest end of their 95 % intervals so far (the layout
/// floor the analysis sets is capped there below `VETO_LAYOUTS` layouts; a floor pooled
/// with earlier runs' layouts may come out wider, and then a settled verdict may read
/// "no detectable change", never a wrong one: its interval stays valid).
fn settle_threshold(p: &Progress, group: &Group, cfg: &Measure) -> f64 {
    let pct = |x: f64| (x.exp() - 1.0) * 100.0;
    let pilot = p.pilot as usize;
    let release = &group.arms[0].name;
    let farthest = p
        .watches
        .iter()
        .filter(|w| w.role == Role::Layout && &w.base == release && w.vals.len() >= 2)
        .map(|w| {
            let pilot = if w.planned { w.pilot_values } else { pilot };
            let (m, half, _) = sequential::interval_df(&w.vals, pilot, sequential::ALPHA_PLANNED);
            pct(m - half).abs().max(pct(m + half).abs())
        })
        .fold(0.0, f64::max);
    cfg.min_effect_pct.max(farthest)
}

/// The group's record once every comparison has stopped (a settled one whose arms ran on
/// takes the sessions they ran in: [`Watched::run_on`]).
fn stopping(p: &mut Progress, group: &Group, cfg: &Measure) -> Stopping {
    // What ended the sessions: the last comparison to stop, as it stopped (before a settled
    // one takes the sessions its arms ran on in).
    let last = p
        .watches
        .iter()
        .filter_map(|w| w.stop.as_ref())
        .max_by_key(|c| c.through)
        .map_or(StopReason::Target, |c| c.reason);
    let (done, skip) = (&p.done, p.skip_over_pct);
    for w in &mut p.watches {
        w.run_on(done, skip);
    }
    let comparisons: Vec<ComparisonStop> =
        p.watches.iter().filter_map(|w| w.stop.clone()).collect();
    let target = group.workload.target_in(cfg);
    Stopping {
        workload: group.workload.name.clone(),
        target_half_width_pct: target,
        pilot: p.pilot,
        // In sessions: a comparison of pairs asked for pairs.
        needed: comparisons
            .iter()
            .filter_map(|c| match c.unit {
                Unit::Session => c.needed,
                Unit::Turn | Unit::Pair => {
                    Some((c.needed? as u64 * p.pilot as u64).div_ceil(c.pilot.max(1) as u64) as u32)
                }
            })
            .max(),
        sessions: p.done.len() as u32,
        reason: if target <= 0.0 {
            StopReason::Fixed
        } else {
            last
        },
        secs: p.secs,
        timing: p.timing,
        comparisons,
    }
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

/// One comparison's plan after the pilot: Stein's count for `target_pct` from its pilot's
/// values (`None` without a target or with fewer than two values).
fn plan(pilot: &[f64], target_pct: f64) -> Option<u32> {
    (target_pct > 0.0 && pilot.len() >= 2).then(|| {
        sequential::sessions_needed(pilot, sequential::log_width(target_pct)).min(u32::MAX as usize)
            as u32
    })
}

fn add(sum: &mut Timing, t: &Timing) {
    sum.setup_secs += t.setup_secs;
    sum.waited_secs += t.waited_secs;
    sum.move_secs += t.move_secs;
    sum.turns_secs += t.turns_secs;
    sum.batch_secs += t.batch_secs;
    sum.close_secs += t.close_secs;
}

#[cfg(test)]
mod tests;
