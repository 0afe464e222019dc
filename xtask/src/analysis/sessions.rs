//! The lockstep half of the analysis: per session, the per-round log ratio of each arm's
//! batch to release's batch of the same round; the session's estimate is the median over its
//! rounds (robust to a speed flip), the estimate a trimmed mean over sessions, the interval
//! the stopping rule's (`stats::compare_sessions`).

use anyhow::{Result, bail};

use super::history::{History, LayoutRecord, RunRecord};
use super::ratios::{difference, round_ratios, watched};
use super::{
    BASELINE, Comparison, LayoutFloor, LayoutGain, MachineState, Row, ServiceState,
    WorkloadAnalysis, capture, judge_rows, median_distribution,
};
use crate::config::Measure;
use crate::measure;
use crate::measure::BASELINE_AGAIN;
use crate::measure::instructions::InstructionCount;
use crate::measure::session::{Metric, Session};
use stats::Verdict;
use stats::components::{self, Component, RunTest};
use stats::median;
use stats::{self, Estimate};

const BOLT: &str = "lto+pgo+bolt";
const PGO: &str = "lto+pgo";

/// What the analysis pools from earlier runs, and what identifies this run's records.
pub struct Pooled<'a> {
    pub history: &'a History,
    pub run_seed: u64,
    /// Release's content hash, where layouts were measured against it.
    pub release_hash: Option<&'a str>,
    /// Each layout variant's arm and its `--shuffle-sections` seed.
    pub layout_seeds: &'a [(String, u32)],
    /// Each build's name and content hash, where known: its estimates join the history.
    pub build_hashes: &'a [(String, String)],
    /// How this run's comparisons stopped (`measure::Stopping`): each watched one's sessions
    /// and the error its interval spends.
    pub stops: &'a [measure::Stopping],
}

impl Pooled<'_> {
    fn hash_of(&self, build: &str) -> Option<&str> {
        self.build_hashes
            .iter()
            .find(|(b, _)| b == build)
            .map(|(_, h)| h.as_str())
    }

    /// The run test of `build` on `workload`: earlier runs' estimates of the same two
    /// executables (ran as this one: `fresh` copies or not) with this run's `(log, se)`.
    /// `None` where the build's or release's executable is not known (no history to match).
    fn run_test(
        &self,
        workload: &str,
        build: &str,
        this: (f64, f64),
        fresh: bool,
        metric: Metric,
    ) -> Option<RunTest> {
        let (release, hash) = (self.release_hash?, self.hash_of(build)?);
        let how = super::history::Measured { fresh, metric };
        let mut same = self
            .history
            .same_runs(workload, build, (hash, release), self.run_seed, how);
        same.push(this);
        Some(components::run_test(&[same]).unwrap_or(RunTest {
            runs: 1,
            q: 0.0,
            df: 0,
            p: 1.0,
            carried: None,
        }))
    }

    /// A run of executables other than the pipeline's builds (`ab`, `tune --measure`): its
    /// seed and stops, no layouts, no earlier runs.
    pub fn of_run<'a>(
        history: &'a History,
        run_seed: u64,
        stops: &'a [measure::Stopping],
    ) -> Pooled<'a> {
        Pooled {
            run_seed,
            stops,
            ..Pooled::none(history)
        }
    }

    /// Nothing earlier: this run's own nulls and layouts alone.
    pub fn none(history: &History) -> Pooled<'_> {
        Pooled {
            history,
            run_seed: 0,
            release_hash: None,
            layout_seeds: &[],
            build_hashes: &[],
            stops: &[],
        }
    }
}

/// Sessions measured outside the pipeline (`ab`, `tune --measure`): analysed on their own
/// (every arm ran from a fresh copy every session, so no component rests on earlier runs).
pub fn analyze_recorded(
    workloads: &[String],
    builds: &[String],
    sessions: &[Session],
    m: &Measure,
    stops: &[measure::Stopping],
) -> Result<Vec<WorkloadAnalysis>> {
    let history = History::default();
    let pooled = Pooled::of_run(&history, m.seed.unwrap_or_default(), stops);
    analyze_lockstep(workloads, builds, sessions, &[], m, &pooled)
}

/// Lockstep sessions → the analysis: per-round ratios within each session, the session's
/// median, the trimmed mean over sessions with the stopping rule's interval, widened by a
/// build's run component where earlier runs showed one.
pub fn analyze_lockstep(
    workloads: &[String],
    builds: &[String],
    sessions: &[Session],
    instructions: &[InstructionCount],
    cfg: &Measure,
    pooled: &Pooled,
) -> Result<Vec<WorkloadAnalysis>> {
    // One thread a workload: each workload's analysis is independent and seeded, so the
    // result does not depend on the threads.
    std::thread::scope(|scope| {
        let handles: Vec<_> = workloads
            .iter()
            .map(|w| {
                scope.spawn(move || {
                    let mine: Vec<&Session> =
                        sessions.iter().filter(|s| &s.workload == w).collect();
                    analyze_sessions(w, builds, &mine, instructions, cfg, pooled)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a workload's analysis does not panic"))
            .collect()
    })
}

/// This run's records for the history: each workload's layout variants and builds'
/// estimates; `fresh`: `measure.fresh_copies`.
pub fn records(
    analysed: &[WorkloadAnalysis],
    pooled: &Pooled,
    fresh: bool,
) -> (Vec<LayoutRecord>, Vec<RunRecord>) {
    let (mut layouts, mut runs) = (Vec::new(), Vec::new());
    for w in analysed {
        for (build, log, se) in &w.raw {
            if let (Some(release), Some(hash)) = (pooled.release_hash, pooled.hash_of(build)) {
                runs.push(RunRecord {
                    workload: w.workload.clone(),
                    build: build.clone(),
                    exe_hash: hash.to_string(),
                    release_hash: release.to_string(),
                    run_seed: pooled.run_seed,
                    log: *log,
                    se: *se,
                    fresh,
                    metric: w.aa.primary_metric(),
                });
            }
        }
        let (Some(l), Some(hash)) = (&w.layout, pooled.release_hash) else {
            continue;
        };
        for (arm, e) in &l.variants {
            let seed = pooled.layout_seeds.iter().find(|(a, _)| a == arm);
            if let (Some((_, seed)), Some(se)) = (seed, e.se_log()) {
                layouts.push(LayoutRecord {
                    workload: w.workload.clone(),
                    exe_hash: hash.to_string(),
                    layout_seed: *seed,
                    log: e.mean_log_ratio,
                    se,
                    metric: w.aa.primary_metric(),
                });
            }
        }
    }
    (layouts, runs)
}

/// The machine's state beside `sessions`, and the sessions to analyse: all of them, but for
/// a workload of several threads (`spread`: not sharing one core) the undisturbed ones when
/// at least a pilot's worth are (else all, its verdicts withheld).
fn machine_state<'a>(
    sessions: &[&'a Session],
    limit_pct: f64,
    spread: bool,
    pilot: usize,
) -> (Option<MachineState>, Vec<&'a Session>) {
    let seen: Vec<(u32, crate::measure::machine::OtherLoad)> = sessions
        .iter()
        .filter_map(|s| Some((s.session, s.machine?)))
        .collect();
    if seen.is_empty() {
        return (None, sessions.to_vec());
    }
    let measured: Vec<f64> = seen.iter().map(|(_, b)| b.measured_pct).collect();
    let setup: Vec<f64> = seen.iter().filter_map(|(_, b)| b.setup_pct).collect();
    let disturbed: Vec<u32> = seen
        .iter()
        .filter(|(_, b)| b.measured_pct > limit_pct)
        .map(|(s, _)| *s)
        .collect();
    let kept: Vec<&Session> = sessions
        .iter()
        .copied()
        .filter(|s| !disturbed.contains(&s.session))
        .collect();
    let left_out = spread && !disturbed.is_empty() && kept.len() >= pilot.max(2);
    let unjudged = spread && !disturbed.is_empty() && !left_out;
    let steal: Vec<f64> = seen.iter().map(|(_, b)| b.steal_pct).collect();
    let state = MachineState {
        unjudged,
        steal_median_pct: median(&steal).unwrap_or(0.0),
        limit_pct,
        median_pct: median(&measured).unwrap_or(0.0),
        max_pct: measured.iter().copied().fold(0.0, f64::max),
        setup_median_pct: median(&setup),
        disturbed,
        left_out,
    };
    (Some(state), if left_out { kept } else { sessions.to_vec() })
}

fn analyze_sessions(
    workload: &str,
    builds: &[String],
    sessions: &[&Session],
    instructions: &[InstructionCount],
    cfg: &Measure,
    pooled: &Pooled,
) -> Result<WorkloadAnalysis> {
    let spread = cfg
        .workloads
        .iter()
        .find(|w| w.name == workload)
        .is_some_and(|w| !w.shares_core_in(&cfg.lockstep));
    let (machine, kept) = machine_state(
        sessions,
        cfg.max_other_cpu_pct,
        spread,
        cfg.lockstep.min_sessions as usize,
    );
    let sessions = &kept[..];
    if sessions.len() < 2 {
        bail!(
            "`{workload}`: {} lockstep session(s) recorded; an interval needs at least 2",
            sessions.len()
        );
    }
    // The stopping rule's pilot: the first sessions, which always run whole.
    let pilot = cfg.lockstep.min_sessions.clamp(2, sessions.len() as u32) as usize;
    let one = |cand: &str| {
        watched(
            sessions,
            pooled.stops,
            cand,
            Metric::primary(sessions),
            pilot,
        )
    };
    let metrics = Metric::carried_by(sessions);
    let compare = |cand: &str| -> Result<Vec<(Metric, Estimate)>> {
        let mut out = Vec::new();
        for &metric in &metrics {
            out.push((
                metric,
                watched(sessions, pooled.stops, cand, metric, pilot)?,
            ));
        }
        Ok(out)
    };
    // The null arm: release again, its bytes in another new file every session where the
    // arms run from fresh copies.
    let arms = &sessions[0].arms;
    let mut nulls = Vec::new();
    if arms.iter().any(|a| a == BASELINE_AGAIN) {
        nulls.push((BASELINE_AGAIN.to_string(), one(BASELINE_AGAIN)?));
    }
    let components = if arms.iter().any(|a| a == BASELINE_AGAIN) {
        components::components(&round_ratios(
            sessions,
            BASELINE_AGAIN,
            Metric::primary(sessions),
        )?)
    } else {
        None
    };
    // Each build's estimates from the sessions alone, once: judged below with its run
    // component.
    let mut estimates: Vec<(String, Vec<(Metric, Estimate)>)> = Vec::new();
    for b in builds.iter().chain([&BASELINE_AGAIN.to_string()]) {
        if b != BASELINE {
            estimates.push((b.clone(), compare(b)?));
        }
    }
    let raw: Vec<(String, f64, f64)> = estimates
        .iter()
        .filter(|(b, _)| b != BASELINE_AGAIN)
        .filter_map(|(b, e)| {
            let (_, e) = e.iter().find(|(m, _)| *m == Metric::primary(sessions))?;
            Some((b.clone(), e.mean_log_ratio, e.se_log()?))
        })
        .collect();
    // Per build, what runs of the same executables say: a component is carried only by the
    // build whose runs scattered beyond their intervals.
    let runs: Vec<(String, RunTest)> = raw
        .iter()
        .filter_map(|(b, log, se)| {
            Some((
                b.clone(),
                pooled.run_test(
                    workload,
                    b,
                    (*log, *se),
                    cfg.fresh_copies,
                    Metric::primary(sessions),
                )?,
            ))
        })
        .collect();
    // Two speeds, where a comparison's sessions fall into them: said, not pooled silently.
    let mut speeds = Vec::new();
    for b in builds.iter().chain([&BASELINE_AGAIN.to_string()]) {
        if b == BASELINE || !arms.contains(b) {
            continue;
        }
        let values: Vec<f64> = round_ratios(sessions, b, Metric::primary(sessions))?
            .iter()
            .filter_map(|r| median(r))
            .collect();
        if let Some(s) = components::two_speeds(&values) {
            speeds.push((b.clone(), s));
        }
    }
    let extra = |build: &str| -> Option<Component> {
        runs.iter()
            .find(|(b, _)| b == build)
            .and_then(|(_, t)| t.carried)
    };
    let mut layout = layout_floor(sessions, pilot, workload, pooled)?;
    let (mut aa, mut rows) = judge_rows(
        builds,
        |m: Metric| m.min_effect_pct(cfg),
        layout.as_ref(),
        extra,
        |b: &str| {
            Ok(estimates
                .iter()
                .find(|(x, _)| x == b)
                .map(|(_, e)| e.clone())
                .expect("estimated above"))
        },
        |build, vs_release| session_row(workload, build, sessions, instructions, vs_release),
    )?;
    // Figures that depend on the machine's load, from a busy machine: shown, not judged.
    if machine.as_ref().is_some_and(|m| m.unjudged) {
        let withhold = |c: &mut Comparison| {
            for j in c.judged_mut() {
                j.verdict = Verdict::NotJudged;
            }
        };
        withhold(&mut aa);
        rows.iter_mut()
            .filter_map(|r| r.vs_release.as_mut())
            .for_each(withhold);
    }
    if let Some(l) = &mut layout {
        l.gains = layout_gains(
            sessions,
            pooled.stops,
            pilot,
            Metric::primary(sessions).min_effect_pct(cfg),
            extra,
        )?;
        l.bolt_vs_layouts = bolt_vs_layouts(sessions, pilot)?;
    }
    let capture = capture(builds, cfg, extra, |b| {
        round_ratios(sessions, b, Metric::primary(sessions))
    })?;
    // BOLT on top of PGO: ln(bolt / pgo) = ln(bolt / release) − ln(pgo / release), round by round.
    let bolt_vs_pgo = if builds.iter().any(|b| b == BOLT) && builds.iter().any(|b| b == PGO) {
        // Watched on its own (`pipeline/stage/measure.rs`): its sessions and error from its stop.
        let spend = measure::spend(pooled.stops, workload, BOLT, PGO);
        let mine: Vec<&Session> = sessions
            .iter()
            .filter(|s| s.session < spend.through)
            .copied()
            .collect();
        Some(
            stats::compare_sessions_at(
                &spend.units(difference(&mine, BOLT, PGO)?),
                spend.pilot_or(pilot),
                spend.alpha,
            )?
            .with_arm(Component::plus(extra(BOLT), extra(PGO)).as_ref()),
        )
    } else {
        None
    };
    Ok(WorkloadAnalysis {
        workload: workload.to_string(),
        capture,
        rounds_per_session: sessions[0].order.len(),
        sessions: sessions.len(),
        aa,
        nulls,
        runs,
        fresh_copies: cfg.fresh_copies,
        speeds,
        raw,
        components,
        machine,
        rows,
        bolt_vs_pgo,
        layout,
        service: ServiceState::of(sessions),
    })
}

/// Release's layout variants against release (`stats::layout`), pooled with earlier
/// runs' layouts of the same release executable, when there are at least two in all; the
/// gains and BOLT's comparison are filled in later.
fn layout_floor(
    sessions: &[&Session],
    pilot: usize,
    workload: &str,
    pooled: &Pooled,
) -> Result<Option<LayoutFloor>> {
    let variants = measure::layout_arms_of(&sessions[0].arms, BASELINE);
    if variants.is_empty() {
        return Ok(None);
    }
    let mut estimates = Vec::new();
    for v in &variants {
        let estimate = watched(sessions, pooled.stops, v, Metric::primary(sessions), pilot)?;
        estimates.push((v.to_string(), estimate));
    }
    let mut shifts: Vec<(f64, f64)> = match pooled.release_hash {
        Some(hash) => {
            let mine: Vec<u32> = pooled.layout_seeds.iter().map(|(_, s)| *s).collect();
            pooled
                .history
                .layouts_of(workload, hash, &mine, Metric::primary(sessions))
        }
        None => Vec::new(),
    };
    shifts.extend(
        estimates
            .iter()
            .filter_map(|(_, e)| Some((e.mean_log_ratio, e.se_log()?))),
    );
    let Some(spread) = stats::layout::pooled(&shifts) else {
        return Ok(None);
    };
    let pct = |x: f64| (x.exp() - 1.0) * 100.0;
    let (low_pct, high_pct) = (pct(spread.low), pct(spread.high));
    let values = shifts.iter().map(|s| pct(s.0));
    let max_half_width_pct = estimates
        .iter()
        .map(|(_, e)| (e.ci_high_pct - e.ci_low_pct) / 2.0)
        .fold(0.0, f64::max);
    Ok(Some(LayoutFloor {
        build: BASELINE.to_string(),
        variants: estimates,
        layouts: shifts.len(),
        mean_pct: pct(spread.mean),
        sd_pct: 100.0 * spread.sd,
        layout_sd_pct: 100.0 * spread.layout_sd,
        lowest_pct: values.clone().fold(f64::INFINITY, f64::min),
        highest_pct: values.fold(f64::NEG_INFINITY, f64::max),
        low_pct,
        high_pct,
        floor_pct: low_pct.abs().max(high_pct.abs()),
        max_half_width_pct,
        gains: Vec::new(),
        bolt_vs_layouts: Vec::new(),
    }))
}

/// Each build relinked beside release (`layout.builds`): its change against release in its
/// own layout and in each of its variants, each judged against the min effect.
fn layout_gains(
    sessions: &[&Session],
    stops: &[measure::Stopping],
    pilot: usize,
    min_effect_pct: f64,
    extra: impl Fn(&str) -> Option<Component>,
) -> Result<Vec<LayoutGain>> {
    let arms = &sessions[0].arms;
    let mut out = Vec::new();
    let mut builds: Vec<&String> = arms.iter().filter(|a| *a != BASELINE).collect();
    builds.sort();
    for build in builds {
        let variants = measure::layout_arms_of(arms, build);
        if variants.is_empty() {
            continue;
        }
        let mut layouts = Vec::new();
        for a in std::iter::once(build.as_str()).chain(variants) {
            let estimate = watched(sessions, stops, a, Metric::primary(sessions), pilot)?;
            layouts.push((a.to_string(), estimate.with_arm(extra(build).as_ref())));
        }
        let verdicts: Vec<Verdict> = layouts
            .iter()
            .map(|(_, e)| stats::verdict(e, min_effect_pct))
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
    let fig = |metric: Metric| {
        let per_session: Vec<f64> = sessions
            .iter()
            .filter_map(|s| s.arm(build))
            .filter_map(|b| median(&b.iter().filter_map(|b| metric.of(b)).collect::<Vec<_>>()))
            .collect();
        median(&per_session).unwrap_or(f64::NAN)
    };
    let totals: Vec<&crate::measure::program::WorkloadLine> = sessions
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
        runs: sessions.iter().filter(|s| s.arm(build).is_some()).count(),
        median_ns: fig(Metric::Median),
        cpu_per_request_ns: Some(fig(Metric::CpuPerRequest)).filter(|v| v.is_finite()),
        p95_ns: fig(Metric::P95),
        p99_ns: fig(Metric::P99),
        instructions_per_message: instr.and_then(|i| i.per_message),
        instructions_note: instr.and_then(|i| i.note.clone()),
        vs_release,
        distribution,
    }
}
