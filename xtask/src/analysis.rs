//! From raw measurements to defensible figures: per session, the per-round log ratio of each
//! arm's batch to release's batch of the same round; the session's estimate is the median over
//! its rounds (robust to a speed flip), the estimate a trimmed mean over sessions with the
//! stopping rule's interval, widened by a build's run component where earlier runs of its
//! executables showed one (`stats::components`; `sessions.rs`). Here the shared part: rows of medians, paired
//! comparisons with release, the thresholds (min effect, layout floor), a verdict per
//! percentile.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::config::Measure;
use crate::measure::session::{Metric, Session};
use crate::measure::{BASELINE, BASELINE_AGAIN};
use stats::median;

pub mod commits;
pub mod history;
pub mod insight;
pub mod outputs;
pub mod ratios;
pub mod sessions;
pub mod workloads;
use stats::{self, Estimate, Verdict};

/// A comparison judged against its threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judged {
    pub estimate: Estimate,
    /// max(min_effect_pct, and for a build laid out differently from release the layout
    /// floor, where measured).
    pub threshold_pct: f64,
    /// Which of them set the threshold.
    #[serde(default)]
    pub bound: Bound,
    pub verdict: Verdict,
}

/// What set a verdict's threshold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// `measure.min_effect_pct`.
    #[default]
    MinEffect,
    /// The layout floor (from enough layouts to veto: [`LayoutFloor::VETO_LAYOUTS`]).
    LayoutFloor,
    /// The farthest layout measured: the floor of fewer layouts is shown, and a verdict
    /// stands beyond every layout measured.
    LayoutRange,
}

/// The layout floor of one workload: `release`'s layout variants against release, this
/// run's and, for the same release executable, every earlier run's (`history.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayoutFloor {
    /// The build whose variants set the floor (`release`).
    pub build: String,
    /// This run's variants against it (median per message).
    pub variants: Vec<(String, Estimate)>,
    /// The layouts the floor rests on: this run's and earlier runs' (K).
    pub layouts: usize,
    /// The shifts of all of them: mean and sd (%), and the layouts' own sd, measurement
    /// noise removed (%).
    pub mean_pct: f64,
    pub sd_pct: f64,
    pub layout_sd_pct: f64,
    /// The farthest shifts measured, either way (%).
    pub lowest_pct: f64,
    pub highest_pct: f64,
    /// The 95 % prediction interval of another layout's shift (%).
    pub low_pct: f64,
    pub high_pct: f64,
    /// The floor a build laid out differently must clear: the prediction interval's farther
    /// bound from 0. Its centre stays in: it is the shuffled orders against the linker's
    /// default order, the one release and every build ship in, and where that default
    /// falls among random orders is part of what a build's layout carries.
    pub floor_pct: f64,
    /// The widest half-width among this run's variants' intervals.
    pub max_half_width_pct: f64,
    /// Builds relinked too (`layout.builds`): each one's change against release in every
    /// layout measured.
    #[serde(default)]
    pub gains: Vec<LayoutGain>,
    /// lto+pgo+bolt against each of lto+pgo's random layouts, when both were measured.
    #[serde(default)]
    pub bolt_vs_layouts: Vec<(String, Estimate)>,
}

impl LayoutFloor {
    /// Layouts from which the floor vetoes a verdict: with fewer, t(K−1)·√(1 + 1/K) inflates
    /// a noisy sd by 3.6 (K = 4) to 2.5 (K = 7), and the floor came out wider than every
    /// layout measured (docs/findings.md).
    pub const VETO_LAYOUTS: usize = 8;

    /// The threshold it sets and what set it: the floor from [`Self::VETO_LAYOUTS`] layouts
    /// on; below, no more than the farthest layout measured.
    pub fn threshold(&self) -> (f64, Bound) {
        if self.layouts >= Self::VETO_LAYOUTS {
            (self.floor_pct, Bound::LayoutFloor)
        } else {
            let farthest = self.lowest_pct.abs().max(self.highest_pct.abs());
            if farthest < self.floor_pct {
                (farthest, Bound::LayoutRange)
            } else {
                (self.floor_pct, Bound::LayoutFloor)
            }
        }
    }
}

/// One relinked build's change against release over its layouts (its own and its variants').
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayoutGain {
    pub build: String,
    /// The build itself first, then its variants.
    pub layouts: Vec<(String, Estimate)>,
    /// The range of the changes' estimates (%).
    pub low_pct: f64,
    pub high_pct: f64,
    /// The verdict every layout got (against the min effect), or `None` when
    /// they differ: the gain depends on the layout.
    pub verdict: Option<Verdict>,
}

/// `--against`: one of this tree's builds against the other commit's of the same name, on
/// one workload, in the same sessions (`change_pct` < 0: this commit is faster).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgainstResult {
    pub workload: String,
    /// This tree's build.
    pub build: String,
    /// The other commit's arm (`<commit>:<build>`).
    pub against: String,
    /// Judged on the primary metric ([`Metric::primary`]).
    #[serde(rename = "median")]
    pub primary: Judged,
    /// Which metric that is (a report from before it was kept: the median).
    #[serde(default)]
    pub metric: Metric,
}

/// The same comparison judged on each metric its sessions carry ([`Metric`]), the primary
/// one always; report.json keeps it as `{"median": …, "p95": …, "p99": …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Comparison(pub BTreeMap<Metric, Judged>);

impl Comparison {
    /// The primary metric's judgement ([`Metric::primary`]: the first it judges, in the
    /// order of [`Metric::ALL`]): what the verdicts lead with.
    pub fn primary(&self) -> &Judged {
        self.0
            .values()
            .next()
            .expect("every comparison judges the primary metric")
    }

    /// The primary metric itself.
    pub fn primary_metric(&self) -> Metric {
        *self
            .0
            .keys()
            .next()
            .expect("every comparison judges the primary metric")
    }

    #[cfg(test)]
    pub fn primary_mut(&mut self) -> &mut Judged {
        self.0
            .values_mut()
            .next()
            .expect("every comparison judges the primary metric")
    }

    /// Each metric's judgement, in [`Metric::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (Metric, &Judged)> {
        self.0.iter().map(|(m, j)| (*m, j))
    }

    pub fn judged_mut(&mut self) -> impl Iterator<Item = &mut Judged> {
        self.0.values_mut()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub build: String,
    /// Undisturbed runs behind the figures.
    pub runs: usize,
    /// Medians over the runs of each run's percentile.
    pub median_ns: f64,
    pub p95_ns: f64,
    pub p99_ns: f64,
    /// A service judged by CPU: the server's CPU time per request (the median over runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_per_request_ns: Option<f64>,
    pub instructions_per_message: Option<f64>,
    /// Why instructions are missing, when they are.
    pub instructions_note: Option<String>,
    /// Against release, paired by block; `None` for release itself.
    pub vs_release: Option<Comparison>,
    /// `[quantile, ns]`: medians over runs, for the plot.
    pub distribution: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadAnalysis {
    pub workload: String,
    /// Rounds per session.
    pub rounds_per_session: usize,
    /// Sessions of new processes.
    pub sessions: usize,
    /// Release against itself (a second arm of the same executable): a diagnostic, whose
    /// interval should hold 0 (judged against the min effect like any comparison).
    pub aa: Comparison,
    /// This run's null arm against release (median): the A/A arm, release's bytes in another
    /// new file every session. Its interval is the sessions' alone and should hold 0.
    #[serde(default)]
    pub nulls: Vec<(String, Estimate)>,
    /// Per build, what earlier runs of the same executables say of a run component
    /// (`stats::components::run_test`): carried by that build's intervals alone, where they
    /// scattered beyond their intervals. A build measured for the first time has one run.
    #[serde(default)]
    pub runs: Vec<(String, stats::components::RunTest)>,
    /// Whether every arm ran from a fresh copy of its file each session
    /// (`measure.fresh_copies`).
    #[serde(default)]
    pub fresh_copies: bool,
    /// The comparisons whose sessions fell into two speeds (`stats::components::two_speeds`):
    /// reported with their modes and shares, since the interval pools them.
    #[serde(default)]
    pub speeds: Vec<(String, stats::components::Speeds)>,
    /// Each build's estimate against release from the sessions alone: ln ratio and its
    /// standard error (what the next run's run component is estimated from).
    #[serde(default)]
    pub raw: Vec<(String, f64, f64)>,
    /// The A/A comparison's rounds and sessions components (`stats::components`).
    #[serde(default)]
    pub components: Option<stats::components::Components>,
    /// Other processes' CPU time beside the sessions, and the sessions it disturbed.
    #[serde(default)]
    pub machine: Option<MachineState>,
    pub rows: Vec<Row>,
    /// How much of the oracle's gain over lto the training's lto+pgo gets (median), when an
    /// oracle was measured.
    #[serde(default)]
    pub capture: Option<stats::Capture>,
    /// Lockstep, with a BOLT build: lto+pgo+bolt against lto+pgo, paired round by round (the
    /// median per message): what BOLT adds on top of PGO.
    #[serde(default)]
    pub bolt_vs_pgo: Option<Estimate>,
    /// The layout floor, where this workload's sessions carried layout variants.
    #[serde(default)]
    pub layout: Option<LayoutFloor>,
    /// A service judged by CPU: its saturated turns and its server's idle CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceState>,
}

/// What a service workload judged by CPU per request says beside its figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceState {
    /// Turns whose server fell behind the offered rate (the driver said so), of all turns
    /// of every arm: their CPU per request is not comparable with the others'.
    pub saturated_turns: usize,
    pub turns: usize,
    /// Release's server's CPU time a second with no load (ns/s; the median over sessions):
    /// the runtime's idle polling and wake-ups, a part of every turn's CPU per request.
    pub idle_cpu_ns_per_s: Option<f64>,
}

impl ServiceState {
    /// Its state in these sessions; `None` unless they are judged by CPU per request.
    pub fn of(sessions: &[&Session]) -> Option<ServiceState> {
        if Metric::primary(sessions) != Metric::CpuPerRequest {
            return None;
        }
        let batches = || sessions.iter().flat_map(|s| s.batches.iter().flatten());
        let idle: Vec<f64> = sessions
            .iter()
            .filter_map(|s| {
                let i = s.arms.iter().position(|a| a == BASELINE)?;
                s.totals.get(i)?.server_idle_cpu_ns_per_s
            })
            .collect();
        Some(ServiceState {
            saturated_turns: batches().filter(|b| b.saturated).count(),
            turns: batches().count(),
            idle_cpu_ns_per_s: median(&idle),
        })
    }
}

/// Other processes' CPU time beside one workload's sessions (`crate::measure::machine`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineState {
    /// A session with more of other processes on the arms' cores than this (%) is disturbed.
    pub limit_pct: f64,
    /// Median and most over the sessions (% of a core), on the arms' cores and the set-up core.
    pub median_pct: f64,
    pub max_pct: f64,
    #[serde(default)]
    pub setup_median_pct: Option<f64>,
    /// The disturbed sessions, by number.
    pub disturbed: Vec<u32>,
    /// The workload runs on every core (several threads), so other processes move its
    /// figures: its disturbed sessions were left out of the analysis.
    pub left_out: bool,
    /// Such a workload with fewer undisturbed sessions than the stopping rule's pilot: its
    /// verdicts are withheld (`Verdict::NotJudged`) rather than printed on a busy machine's
    /// figures.
    #[serde(default)]
    pub unjudged: bool,
    /// Median over the sessions of the hypervisor's steal on the arms' core(s) (%).
    #[serde(default)]
    pub steal_median_pct: f64,
}

/// The capture counted in instructions per message (callgrind's), with the three counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InstructionCapture {
    pub pct: f64,
    pub lto: f64,
    pub pgo: f64,
    pub oracle: f64,
}

/// The builds the capture compares: the training's PGO build and the oracle, both against lto.
const PGO: &str = "lto+pgo";
pub(crate) const ORACLE: &str = "oracle";
const LTO: &str = "lto";

impl WorkloadAnalysis {
    /// What `build`'s interval carries beyond its sessions': its run component, where earlier
    /// runs of the same executables showed one.
    pub fn extra(&self, build: &str) -> Option<stats::components::Component> {
        self.runs
            .iter()
            .find(|(b, _)| b == build)
            .and_then(|(_, t)| t.carried)
    }

    /// The capture in instructions per message: lto+pgo's saving over lto as a share of the
    /// oracle's. `None` without the three counts, or where the oracle saves under 1 % of lto's.
    pub fn instruction_capture(&self) -> Option<InstructionCapture> {
        let count = |build: &str| {
            self.rows
                .iter()
                .find(|r| r.build == build)
                .and_then(|r| r.instructions_per_message)
        };
        let (lto, pgo, oracle) = (count(LTO)?, count(PGO)?, count(ORACLE)?);
        (lto - oracle >= 0.01 * lto).then(|| InstructionCapture {
            pct: 100.0 * (lto - pgo) / (lto - oracle),
            lto,
            pgo,
            oracle,
        })
    }
}

/// How much of the oracle's gain over lto the training's lto+pgo gets. `ratios(build)` gives
/// ln(build / release) per round of each session (a block is a session of one round); the
/// differences to lto's are the gains over lto. `extra` (a build's run component) gives
/// each of the three executables an effect of its own, as their intervals carry. `None` without the three builds, or when the
/// oracle's gain is not distinguishable from 0.
pub(crate) fn capture(
    builds: &[String],
    cfg: &Measure,
    extra: impl Fn(&str) -> Option<stats::components::Component>,
    ratios: impl Fn(&str) -> Result<Vec<Vec<f64>>>,
) -> Result<Option<stats::Capture>> {
    if ![PGO, ORACLE, LTO]
        .iter()
        .all(|b| builds.iter().any(|x| x == b))
    {
        return Ok(None);
    }
    let lto = ratios(LTO)?;
    let against_lto = |b: &str| -> Result<Vec<Vec<f64>>> {
        Ok(ratios(b)?
            .iter()
            .zip(&lto)
            .map(|(x, l)| x.iter().zip(l).map(|(x, l)| x - l).collect())
            .collect())
    };
    // The sessions all three ran in (the oracle keeps lto and lto+pgo in its sessions; they
    // may run on for their own comparisons).
    let (mut pgo, mut oracle) = (against_lto(PGO)?, against_lto(ORACLE)?);
    let common = pgo.len().min(oracle.len());
    pgo.truncate(common);
    oracle.truncate(common);
    // Each executable's effect is drawn from the widest run component of the three.
    let extra = [PGO, ORACLE, LTO]
        .into_iter()
        .filter_map(&extra)
        .max_by(|a, b| a.sd.total_cmp(&b.sd));
    Ok(stats::capture_nested(
        &pgo,
        &oracle,
        extra.as_ref(),
        cfg.bootstrap_resamples,
        // The run's seed (the report stage sets the recorded one).
        cfg.seed.unwrap_or_default(),
    )
    .ok())
}

/// The A/A comparison (release against its second arm: a diagnostic) and a row per build;
/// `compare` estimates one arm against release on each metric (the sessions' intervals), `row` makes a build's row from its judged comparison. A build's intervals
/// carry its run component `extra(build)`; every build but release is laid out differently from
/// release, so the layout floor (on the median, where measured) applies to all of them.
pub(crate) fn judge_rows(
    builds: &[String],
    min_effect_pct: impl Fn(Metric) -> f64,
    layout: Option<&LayoutFloor>,
    extra: impl Fn(&str) -> Option<stats::components::Component>,
    compare: impl Fn(&str) -> Result<Vec<(Metric, Estimate)>>,
    mut row: impl FnMut(&str, Option<Comparison>) -> Row,
) -> Result<(Comparison, Vec<Row>)> {
    // The layout floor is measured on the primary metric (the first compared) and judges it
    // alone.
    let judge = |est: Vec<(Metric, Estimate)>, layout: Option<&LayoutFloor>| {
        let primary = est.first().map(|(m, _)| *m);
        Comparison(
            est.into_iter()
                .map(|(m, e)| {
                    let layout = layout.filter(|_| Some(m) == primary);
                    (m, judged(e, min_effect_pct(m), layout))
                })
                .collect(),
        )
    };
    let aa = judge(compare(BASELINE_AGAIN)?, None);
    let mut rows = Vec::new();
    for build in builds {
        let vs_release = if build == BASELINE {
            None
        } else {
            let extra = extra(build);
            let est = compare(build)?
                .into_iter()
                .map(|(m, e)| (m, e.with_arm(extra.as_ref())))
                .collect();
            Some(judge(est, layout))
        };
        rows.push(row(build, vs_release));
    }
    Ok((aa, rows))
}

/// An estimate judged against max(min effect, the layout's threshold where given).
pub(crate) fn judged(e: Estimate, min_effect_pct: f64, layout: Option<&LayoutFloor>) -> Judged {
    let (threshold_pct, bound) = threshold(min_effect_pct, layout);
    Judged {
        verdict: stats::verdict(&e, threshold_pct),
        threshold_pct,
        bound,
        estimate: e,
    }
}

/// The threshold of one comparison and what set it: max(min effect, the layout's).
pub(crate) fn threshold(min_effect_pct: f64, layout: Option<&LayoutFloor>) -> (f64, Bound) {
    match layout.map(LayoutFloor::threshold) {
        Some((t, bound)) if t > min_effect_pct => (t, bound),
        _ => (min_effect_pct, Bound::MinEffect),
    }
}

/// Per quantile (those of the first run), the median over runs of that run's value: the
/// distribution the plot draws.
pub(crate) fn median_distribution<'a>(
    runs: impl Iterator<Item = &'a [(f64, u64)]>,
) -> Vec<(f64, f64)> {
    let runs: Vec<&[(f64, u64)]> = runs.collect();
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .iter()
        .enumerate()
        .map(|(i, (q, _))| {
            let values: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.get(i))
                .map(|p| p.1 as f64)
                .collect();
            (*q, median(&values).unwrap_or(f64::NAN))
        })
        .collect()
}

#[cfg(test)]
mod tests;
