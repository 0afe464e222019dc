//! A workload's group of arms and comparisons ([`Group`]), and the stopping rule's
//! bookkeeping while its sessions run: each watched comparison's values,
//! plan, looks and stop ([`Watched`]), a workload's progress through its sessions
//! ([`Progress`]), and how a finished group is recorded ([`stopping`]).

use crate::config::{Measure, Workload};
use crate::measure::session::{Arm, Session, Timing};
use crate::toolchain::build::Build;
use stats::sequential;

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

/// One watched comparison in progress.
pub(super) struct Watched {
    pub(super) cand: String,
    pub(super) base: String,
    pub(super) role: Role,
    pub(super) target_pct: f64,
    /// The arms it keeps in the sessions: its own two, and for the oracle lto and lto+pgo
    /// (the capture compares their gains in the same sessions).
    pub(super) needs: Vec<String>,
    /// A whole-process workload's: its arms run as adjacent pairs, which may be the unit
    /// (decided at its pilot).
    pub(super) whole_process: bool,
    /// Whether its pilot is in (its plan made), and what its values are from then on.
    pub(super) planned: bool,
    pub(super) unit: Unit,
    /// Its values per session (1, or the rounds when the unit is the pair), and its pilot's.
    pub(super) per: u32,
    pub(super) pilot_values: usize,
    pub(super) needed: Option<u32>,
    /// The last look it was tested at: each look spends its error once (a disturbed session
    /// leaves the count, and so the look, where it was).
    pub(super) looked: Option<u32>,
    pub(super) stop: Option<ComparisonStop>,
    /// Its values so far ([`Watched::refresh`]), from the first `seen` sessions.
    pub(super) vals: Vec<f64>,
    pub(super) seen: usize,
}

impl Watched {
    /// Its values from the sessions done since the last call, where both arms ran: each
    /// session's median log ratio, or each pair's (`Unit::Pair`); with `limit_pct`, a
    /// session with more of other processes' CPU beside it is left out, as the analysis
    /// leaves it out of a workload of several threads.
    pub(super) fn refresh(&mut self, done: &[Session], limit_pct: Option<f64>) {
        let kept = done[self.seen.min(done.len())..]
            .iter()
            .filter(|s| limit_pct.is_none_or(|l| s.machine.is_none_or(|m| m.measured_pct <= l)));
        for s in kept {
            match self.unit {
                Unit::Session => {
                    self.vals
                        .extend(s.median_log_ratio(&self.cand, &self.base, s.primary()))
                }
                Unit::Turn | Unit::Pair => self.vals.extend(
                    s.round_log_ratios(&self.cand, &self.base, s.primary())
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
    pub(super) fn plan(
        &mut self,
        done: &[Session],
        limit_pct: Option<f64>,
        pilot: usize,
        fresh_copies: bool,
    ) {
        self.planned = true;
        if self.whole_process && fresh_copies {
            // Every run from a copy of its own: no session holds anything of its own (a
            // file's pages, a heap offset, a process) that its pairs share, so the pairs are
            // the unit without a test that could only mistake a noisy stretch for one.
            self.unit = Unit::Pair;
            self.per = done
                .iter()
                .find_map(|s| s.round_log_ratios(&self.cand, &self.base, s.primary()))
                .map_or(1, |r| r.len().max(1) as u32);
        } else if self.whole_process {
            let rounds: Vec<Vec<f64>> = done
                .iter()
                .filter(|s| limit_pct.is_none_or(|l| s.machine.is_none_or(|m| m.measured_pct <= l)))
                .filter_map(|s| s.round_log_ratios(&self.cand, &self.base, s.primary()))
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
    pub(super) fn plan_count(&self, max: u32) -> u32 {
        let max = max.saturating_mul(self.per);
        self.needed
            .map_or(max, |n| n.clamp(self.pilot_values as u32, max))
    }

    pub(super) fn stop(
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
    pub(super) fn run_on(&mut self, done: &[Session], limit_pct: Option<f64>) {
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
pub(super) struct Progress {
    pub(super) started: u32,
    pub(super) done: Vec<Session>,
    pub(super) pilot: u32,
    pub(super) max: u32,
    pub(super) watches: Vec<Watched>,
    /// A workload of several threads: disturbed sessions do not count (`max_other_cpu_pct`).
    pub(super) skip_over_pct: Option<f64>,
    pub(super) secs: f64,
    pub(super) timing: Timing,
}

impl Progress {
    /// A group before its first session: every pair a comparison to watch.
    pub(super) fn of(g: &Group, cfg: &Measure) -> Progress {
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
    pub(super) fn planned(&self) -> bool {
        self.watches.iter().all(|w| w.planned || w.stop.is_some())
    }

    /// The sessions it may start: its pilot (and one more at a time while a pilot lacks
    /// undisturbed sessions), then as many more as the open comparison furthest from its
    /// plan needs.
    pub(super) fn limit(&self) -> u32 {
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
    pub(super) fn expected(&self) -> u64 {
        let done = self.done.len() as u32;
        if self.ended() {
            done as u64
        } else {
            self.limit().max(done) as u64
        }
    }

    pub(super) fn ended(&self) -> bool {
        !self.watches.is_empty() && self.watches.iter().all(|w| w.stop.is_some())
            || self.watches.is_empty() && self.done.len() as u32 >= self.max
    }

    /// The arms of its next session: all of them until every pilot is in; then release, the
    /// arms an open comparison needs, and any arm no comparison watches (in pairs: only
    /// the arms of its pairs, [`Progress::pairs_of`]).
    pub(super) fn arms_of(&self, arms: &[Arm], paired: bool) -> Vec<Arm> {
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
    pub(super) fn session_of(
        &self,
        arms: &[Arm],
        paired: bool,
    ) -> (Vec<Arm>, Vec<(String, String)>) {
        let pairs = if paired { self.pairs_of() } else { Vec::new() };
        (self.arms_of(arms, paired), pairs)
    }

    /// The comparisons (candidate, base) its next session runs as adjacent pairs: the open
    /// ones (a whole-process workload's; the other modes run every arm once a round).
    pub(super) fn pairs_of(&self) -> Vec<(String, String)> {
        self.watches
            .iter()
            .filter(|w| w.stop.is_none())
            .map(|w| (w.cand.clone(), w.base.clone()))
            .collect()
    }
}

/// After each of a group's sessions, each open comparison: once its pilot is in, its plan
/// (Stein's count for its target); then it stops at its planned count, at a cap, or (a
/// build's, at a look) settled beyond every threshold its verdict could face.
pub(super) fn judge(p: &mut Progress, group: &Group, cfg: &Measure) {
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

/// The threshold a build's verdict could face, for settling early: the min effect of the
/// primary metric, and in a
/// group with layout variants the farthest end of their 95 % intervals so far (the layout
/// floor the analysis sets is capped there below `VETO_LAYOUTS` layouts; a floor pooled
/// with earlier runs' layouts may come out wider, and then a settled verdict may read
/// "no detectable change", never a wrong one: its interval stays valid).
pub(super) fn settle_threshold(p: &Progress, group: &Group, cfg: &Measure) -> f64 {
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
    crate::measure::session::Metric::judged_first(&group.workload)
        .min_effect_pct(cfg)
        .max(farthest)
}

/// The group's record once every comparison has stopped (a settled one whose arms ran on
/// takes the sessions they ran in: [`Watched::run_on`]).
pub(super) fn stopping(p: &mut Progress, group: &Group, cfg: &Measure) -> Stopping {
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

/// One comparison's plan after the pilot: Stein's count for `target_pct` from its pilot's
/// values (`None` without a target or with fewer than two values).
pub(super) fn plan(pilot: &[f64], target_pct: f64) -> Option<u32> {
    (target_pct > 0.0 && pilot.len() >= 2).then(|| {
        sequential::sessions_needed(pilot, sequential::log_width(target_pct)).min(u32::MAX as usize)
            as u32
    })
}

pub(super) fn add(sum: &mut Timing, t: &Timing) {
    sum.setup_secs += t.setup_secs;
    sum.waited_secs += t.waited_secs;
    sum.move_secs += t.move_secs;
    sum.turns_secs += t.turns_secs;
    sum.batch_secs += t.batch_secs;
    sum.close_secs += t.close_secs;
}
