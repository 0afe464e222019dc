//! From raw measurements to defensible figures: per session, the per-round log ratio of each
//! arm's batch to release's batch of the same round; the session's estimate is the median over
//! its rounds (robust to a speed flip), the estimate a trimmed mean over sessions with the
//! stopping rule's interval, widened by the arm component that null arms estimate
//! (`stats::components`; `sessions.rs`). Here the shared part: rows of medians, paired
//! comparisons with release, the thresholds (min effect, layout floor), a verdict per
//! percentile.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::config::Measure;
use crate::measure::{BASELINE, BASELINE_AGAIN};
use crate::stats::median;

pub mod history;
pub mod sessions;
use crate::stats::{self, Estimate, Verdict};

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

impl Bound {
    pub fn text(self) -> &'static str {
        match self {
            Bound::MinEffect => "min effect",
            Bound::LayoutFloor => "layout floor",
            Bound::LayoutRange => "farthest layout measured",
        }
    }
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

    /// "layout floor ±1.6 % (12 layouts of release: −1.0 to +0.1 %, sd 0.4 %)".
    pub fn line(&self) -> String {
        let veto = if self.layouts >= Self::VETO_LAYOUTS {
            String::new()
        } else {
            format!(
                "; from fewer than {} layouts it does not veto a verdict beyond every layout measured",
                Self::VETO_LAYOUTS
            )
        };
        format!(
            "layout floor ±{:.1} % ({} layouts of {} measured against it, {} in this run, each within ±{:.1} %: {:+.1} to {:+.1} %; another layout would land in [{:+.1}, {:+.1}] %{veto})",
            self.floor_pct,
            self.layouts,
            self.build,
            self.variants.len(),
            self.max_half_width_pct,
            self.lowest_pct,
            self.highest_pct,
            self.low_pct,
            self.high_pct
        )
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

impl LayoutGain {
    pub fn line(&self) -> String {
        let range = format!(
            "range over {} layouts: [{:+.1}, {:+.1}] %",
            self.layouts.len(),
            self.low_pct,
            self.high_pct
        );
        match self.verdict {
            Some(Verdict::Faster) => format!(
                "{} is faster than release whatever the layout ({range})",
                self.build
            ),
            Some(Verdict::Slower) => format!(
                "{} is slower than release whatever the layout ({range})",
                self.build
            ),
            Some(Verdict::NoDetectableChange | Verdict::NotJudged) => {
                format!(
                    "{} shows no detectable change in any layout ({range})",
                    self.build
                )
            }
            None => format!(
                "{}'s change depends on its layout: within layout luck ({range})",
                self.build
            ),
        }
    }
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
    pub median: Judged,
}

/// The same comparison on each reported percentile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub median: Judged,
    pub p95: Judged,
    pub p99: Judged,
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
    /// This run's null arms against release (median): the A/A arm and release's copy in
    /// another file. Their intervals are the sessions' alone and should hold 0.
    #[serde(default)]
    pub nulls: Vec<(String, Estimate)>,
    /// The arm component every other comparison's interval carries, from this run's nulls
    /// and earlier runs' of this workload (`stats::components`).
    #[serde(default)]
    pub arm: Option<stats::components::ArmSpread>,
    /// The run component: how far earlier runs' estimates of the same executables scattered
    /// beyond their intervals, pooled over this workload's builds (`stats::components`).
    #[serde(default)]
    pub run: Option<stats::components::ArmSpread>,
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
}

/// Other processes' CPU time beside one workload's sessions (`crate::machine`).
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

impl MachineState {
    pub fn line(&self, sessions: usize) -> String {
        let setup = self
            .setup_median_pct
            .map(|s| format!(", the set-up core {s:.0} %"))
            .unwrap_or_default();
        let mut line = format!(
            "other processes beside the sessions: median {:.1} % of the arms' core(s) (the hypervisor's steal {:.1} %), at most {:.0} %{setup}",
            self.median_pct, self.steal_median_pct, self.max_pct
        );
        if !self.disturbed.is_empty() {
            let list: Vec<String> = self.disturbed.iter().map(|s| (s + 1).to_string()).collect();
            line += &format!(
                "; {} of {sessions} sessions disturbed (over {:.0} %): {}",
                self.disturbed.len(),
                self.limit_pct,
                list.join(", ")
            );
            if self.left_out {
                line += ". This workload's threads use every core, so its figures depend on the machine's load: the disturbed sessions are left out; rerun on a quiet machine to use them";
            }
            if self.unjudged {
                line += ". This workload's threads use every core, so its figures depend on the machine's load, and too few sessions ran undisturbed: its verdicts are not judged; rerun on a quiet machine";
            }
        }
        line
    }
}

/// The builds the capture compares: the training's PGO build and the oracle, both against lto.
const PGO: &str = "lto+pgo";
const ORACLE: &str = "oracle";
const LTO: &str = "lto";

impl WorkloadAnalysis {
    /// What every build's interval carries beyond its sessions': the arm and run components.
    pub fn extra(&self) -> Option<stats::components::ArmSpread> {
        stats::components::ArmSpread::plus(self.arm, self.run)
    }

    /// The capture in words, or `None` without an oracle.
    pub fn capture_line(&self) -> Option<String> {
        let Some(c) = self.capture.as_ref() else {
            return self.rows.iter().any(|r| r.build == ORACLE).then(|| {
                "no share of the oracle's gain: the oracle's gain over lto is not distinguishable from 0 (or too few sessions)".to_string()
            });
        };
        Some(format!(
            "the training captures {:.0} % [{:.0}, {:.0}] of the gain an oracle profile (trained on the measured workload itself) gets over lto: lto+pgo {:.1} % faster than lto, oracle {:.1} %",
            c.pct, c.ci_low_pct, c.ci_high_pct, c.candidate_gain_pct, c.oracle_gain_pct
        ))
    }

    /// What BOLT adds on top of PGO, in words, or `None` without a BOLT build.
    pub fn bolt_line(&self) -> Option<String> {
        let e = self.bolt_vs_pgo.as_ref()?;
        Some(format!(
            "lto+pgo+bolt against lto+pgo: {}",
            stats::describe(e)
        ))
    }

    /// What the figures rest on, in words: "12 sessions × 200 rounds (lockstep)".
    pub fn basis(&self) -> String {
        format!(
            "{} sessions × {} rounds (lockstep)",
            self.sessions, self.rounds_per_session
        )
    }
}

/// How much of the oracle's gain over lto the training's lto+pgo gets. `ratios(build)` gives
/// ln(build / release) per round of each session (a block is a session of one round); the
/// differences to lto's are the gains over lto. `None` without the three builds, or when the
/// oracle's gain is not distinguishable from 0.
pub(crate) fn capture(
    builds: &[String],
    cfg: &Measure,
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
    Ok(stats::capture_nested(
        &pgo,
        &oracle,
        cfg.bootstrap_resamples,
        // The run's seed (the report stage sets the recorded one).
        cfg.seed.unwrap_or_default(),
    )
    .ok())
}

/// The A/A comparison (release against its second arm: a diagnostic) and a row per build;
/// `compare` estimates one arm against release on the three percentiles (the sessions'
/// intervals), `row` makes a build's row from its judged comparison. Every build's intervals
/// carry the arm component `arm`; every build but release is laid out differently from
/// release, so the layout floor (on the median, where measured) applies to all of them.
pub(crate) fn judge_rows(
    builds: &[String],
    min_effect_pct: f64,
    layout: Option<&LayoutFloor>,
    arm: Option<&stats::components::ArmSpread>,
    compare: impl Fn(&str) -> Result<[Estimate; 3]>,
    mut row: impl FnMut(&str, Option<Comparison>) -> Row,
) -> Result<(Comparison, Vec<Row>)> {
    let judge = |est: [Estimate; 3], layout: Option<&LayoutFloor>| {
        let [m, p95, p99] = est;
        Comparison {
            median: judged(m, min_effect_pct, layout),
            p95: judged(p95, min_effect_pct, None),
            p99: judged(p99, min_effect_pct, None),
        }
    };
    let aa = judge(compare(BASELINE_AGAIN)?, None);
    let mut rows = Vec::new();
    for build in builds {
        let vs_release = if build == BASELINE {
            None
        } else {
            Some(judge(compare(build)?.map(|e| e.with_arm(arm)), layout))
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
mod tests {
    use super::sessions::analyze_lockstep;
    use crate::fixtures::builds;

    use super::{Bound, LayoutFloor};
    use crate::fixtures::measure_config;
    use crate::stats::Verdict;

    #[test]
    fn the_layout_floor_recovers_known_layout_shifts_through_state_flips() {
        // Four layouts of release shifted by known amounts (sd 0.93 %), in sessions whose
        // machine state flips between 170 and 235 ns.
        let shifts = [-1.0, -0.3, 0.4, 1.1];
        let sessions = crate::fixtures::layout_sessions(30, 20, &shifts);
        let w = &analyze_lockstep(
            &["agent_send_latency".into()],
            &builds(),
            &sessions,
            &[],
            &measure_config(),
            &crate::analysis::sessions::Pooled::none(&Default::default()),
        )
        .unwrap()[0];
        let l = w.layout.as_ref().expect("a layout floor");
        assert_eq!(l.variants.len(), 4);
        for ((arm, e), truth) in l.variants.iter().zip(shifts) {
            assert!(
                (e.change_pct - truth).abs() < 0.3,
                "{arm}: {} against {truth}",
                e.change_pct
            );
        }
        let truth_sd = crate::stats::sequential::sd(&shifts);
        assert!(
            (l.sd_pct - truth_sd).abs() < 0.2,
            "{} against {truth_sd}",
            l.sd_pct
        );
        assert!(
            (l.layout_sd_pct - truth_sd).abs() < 0.3,
            "{} against {truth_sd}",
            l.layout_sd_pct
        );
        // The prediction interval reaches past every layout measured; the floor is its farther
        // bound from 0 (the centre kept).
        assert!(l.low_pct < -1.0 && l.high_pct > 1.1, "{l:?}");
        assert!(
            (l.floor_pct - l.low_pct.abs().max(l.high_pct.abs())).abs() < 1e-9,
            "{l:?}"
        );
        assert_eq!(l.layouts, 4);
        assert!((l.lowest_pct + 1.0).abs() < 0.3 && (l.highest_pct - 1.1).abs() < 0.3);
        // Four layouts do not veto: the threshold is the farthest layout measured, not the
        // floor (wider than every layout measured). lto's 1 % lies within the layouts;
        // lto+pgo's 10 % beyond them.
        let judged = |b: &str| {
            w.rows
                .iter()
                .find(|r| r.build == b)
                .and_then(|r| r.vs_release.clone())
                .unwrap()
                .median
        };
        let (lto, pgo) = (judged("lto"), judged("lto+pgo"));
        assert_eq!(
            (lto.bound, pgo.bound),
            (Bound::LayoutRange, Bound::LayoutRange)
        );
        assert!(lto.threshold_pct < l.floor_pct, "{lto:?} {l:?}");
        assert!((lto.threshold_pct - l.highest_pct.abs().max(l.lowest_pct.abs())).abs() < 1e-9);
        assert_eq!(lto.verdict, Verdict::NoDetectableChange, "{lto:?}");
        assert_eq!(pgo.verdict, Verdict::Faster, "{pgo:?}");
        // The A/A arm is the same executable: no layout floor on it.
        assert_ne!(w.aa.median.bound, Bound::LayoutFloor);
        // Eight layouts or more (earlier runs' of the same executable pooled): the floor vetoes.
        let mut pooled = l.clone();
        pooled.layouts = LayoutFloor::VETO_LAYOUTS;
        assert_eq!(pooled.threshold(), (pooled.floor_pct, Bound::LayoutFloor));
        // No variants, no floor.
        let plain = &analyze_lockstep(
            &["agent_send_latency".into()],
            &builds(),
            &crate::fixtures::sessions(30, 20),
            &[],
            &measure_config(),
            &crate::analysis::sessions::Pooled::none(&Default::default()),
        )
        .unwrap()[0];
        assert!(plain.layout.is_none());
        assert!(
            plain
                .rows
                .iter()
                .filter_map(|r| r.vs_release.as_ref())
                .all(|c| c.median.bound != Bound::LayoutFloor)
        );
    }

    /// pulldown-cmark, whole-process (issue 32's figures): four layouts within −2.1…+1.4 %
    /// gave a floor of ±5.8 % that called lto's 5.5 % [3.7, 7.3] no change. Below eight
    /// layouts the threshold is the farthest layout measured, so lto's gain stands; from
    /// eight on the floor decides.
    #[test]
    fn a_floor_of_few_layouts_does_not_veto_a_gain_beyond_every_layout() {
        let estimate = |change: f64, lo: f64, hi: f64| crate::stats::Estimate {
            pairs: 12,
            rounds: None,
            mean_log_ratio: (1.0 + change / 100.0f64).ln(),
            ratio: 1.0 + change / 100.0,
            change_pct: change,
            ci_low_pct: lo,
            ci_high_pct: hi,
            df: Some(7),
            arm: None,
            alpha: None,
        };
        let mut floor = LayoutFloor {
            build: "release".into(),
            variants: Vec::new(),
            layouts: 4,
            mean_pct: -0.3,
            sd_pct: 1.5,
            layout_sd_pct: 1.4,
            lowest_pct: -2.1,
            highest_pct: 1.4,
            low_pct: -5.8,
            high_pct: 5.2,
            floor_pct: 5.8,
            max_half_width_pct: 1.0,
            gains: Vec::new(),
            bolt_vs_layouts: Vec::new(),
        };
        let lto = || estimate(-5.5, -7.3, -3.7);
        let j = super::judged(lto(), 1.0, Some(&floor));
        assert_eq!((j.verdict, j.bound), (Verdict::Faster, Bound::LayoutRange));
        assert!((j.threshold_pct - 2.1).abs() < 1e-12);
        // A gain within the layouts measured is not called one.
        let within = super::judged(estimate(-1.8, -2.6, -1.0), 1.0, Some(&floor));
        assert_eq!(within.verdict, Verdict::NoDetectableChange);
        // Eight layouts: the floor vetoes.
        floor.layouts = LayoutFloor::VETO_LAYOUTS;
        let j = super::judged(lto(), 1.0, Some(&floor));
        assert_eq!(
            (j.verdict, j.bound),
            (Verdict::NoDetectableChange, Bound::LayoutFloor)
        );
        // The min effect still binds above a narrow floor.
        floor.floor_pct = 0.4;
        assert_eq!(super::threshold(1.0, Some(&floor)), (1.0, Bound::MinEffect));
        assert!(
            floor.line().starts_with("layout floor ±0.4 % (8 layouts"),
            "{}",
            floor.line()
        );
    }

    /// Earlier runs' layouts of the same release executable pool with this run's (another
    /// executable's do not): K grows past the point where the floor vetoes, the floor keeps
    /// its centre, and this run's records go to the history under their seeds.
    #[test]
    fn the_floor_pools_earlier_runs_layouts_and_keeps_its_centre() {
        use super::history::{History, LayoutRecord};
        use super::sessions::{Pooled, records};
        let sessions = crate::fixtures::layout_sessions(30, 20, &[-1.0, -0.3, 0.4, 1.1]);
        let record = |hash: &str, seed: u32, pct: f64| LayoutRecord {
            workload: "agent_send_latency".into(),
            exe_hash: hash.into(),
            layout_seed: seed,
            log: (1.0 + pct / 100.0f64).ln(),
            se: 0.001,
        };
        let mut history = History::default();
        // An earlier run: six layouts of this executable, all a little slower than its
        // default order; and one of another executable, far off.
        let earlier: Vec<LayoutRecord> = (0..6)
            .map(|k| record("abc", 100 + k, 0.3 + 0.1 * k as f64))
            .chain([record("another", 7, 9.0)])
            .collect();
        history.add(Vec::new(), earlier);
        let seeds: Vec<(String, u32)> = (1..=4).map(|k| (format!("release/L{k}"), k)).collect();
        let pooled = Pooled {
            history: &history,
            run_seed: 9,
            release_hash: Some("abc"),
            layout_seeds: &seeds,
            build_hashes: &[],
            other_files: true,
            stops: &[],
        };
        let w = &analyze_lockstep(
            &["agent_send_latency".into()],
            &builds(),
            &sessions,
            &[],
            &measure_config(),
            &pooled,
        )
        .unwrap()[0];
        let l = w.layout.as_ref().unwrap();
        assert_eq!((l.layouts, l.variants.len()), (10, 4), "{l:?}");
        assert!(
            l.highest_pct < 1.5,
            "another executable's layout left out: {l:?}"
        );
        // Ten layouts: the floor itself is the threshold; its centre (the shuffled orders
        // lean slower than the default) stays in, so it reaches past the half-width.
        assert_eq!(l.threshold(), (l.floor_pct, Bound::LayoutFloor));
        assert!(l.mean_pct > 0.1, "{l:?}");
        assert!(
            (l.floor_pct - l.high_pct).abs() < 1e-9
                && l.floor_pct > (l.high_pct - l.low_pct) / 2.0 + 0.1,
            "{l:?}"
        );
        // This run's layouts and nulls, for the next run.
        let (nulls, layouts, runs) = records(std::slice::from_ref(w), &pooled, true);
        assert!(runs.is_empty(), "no build hashes given, no run records");
        let mut recorded: Vec<u32> = layouts.iter().map(|r| r.layout_seed).collect();
        recorded.sort();
        assert_eq!(recorded, [1, 2, 3, 4]);
        assert!(layouts.iter().all(|r| r.exe_hash == "abc"));
        assert!(
            nulls.is_empty(),
            "no copy here, and the A/A arm (release's own file) is no null of the arm component: {nulls:?}"
        );
        // The same run rendered again does not count its layouts twice.
        let mut history = history.clone();
        history.add(Vec::new(), layouts);
        let again = Pooled {
            history: &history,
            run_seed: 9,
            release_hash: Some("abc"),
            layout_seeds: &seeds,
            build_hashes: &[],
            other_files: true,
            stops: &[],
        };
        let w2 = &analyze_lockstep(
            &["agent_send_latency".into()],
            &builds(),
            &sessions,
            &[],
            &measure_config(),
            &again,
        )
        .unwrap()[0];
        assert_eq!(w2.layout.as_ref().unwrap().layouts, 10);
    }

    /// Earlier runs of the same two executables whose estimates scattered beyond their
    /// intervals give a run component that widens this run's intervals; runs of other
    /// executables do not count; this run's estimates go to the history.
    #[test]
    fn runs_of_the_same_executables_widen_the_next_runs_intervals() {
        use super::history::{History, RunRecord};
        use super::sessions::{Pooled, records};
        let sessions = crate::fixtures::sessions(20, 20);
        let hashes: Vec<(String, String)> = [
            ("release", "r"),
            ("lto", "l"),
            ("lto+pgo", "p"),
            ("oracle", "o"),
        ]
        .map(|(b, h)| (b.to_string(), h.to_string()))
        .to_vec();
        let record = |hash: &str, seed: u64, log: f64| RunRecord {
            workload: "agent_send_latency".into(),
            build: "lto+pgo".into(),
            exe_hash: hash.into(),
            release_hash: "r".into(),
            run_seed: seed,
            log,
            se: 0.001,
        };
        let analyse = |history: &History| {
            let pooled = Pooled {
                history,
                run_seed: 99,
                release_hash: Some("r"),
                layout_seeds: &[],
                build_hashes: &hashes,
                other_files: true,
                stops: &[],
            };
            let w = analyze_lockstep(
                &["agent_send_latency".into()],
                &builds(),
                &sessions,
                &[],
                &measure_config(),
                &pooled,
            )
            .unwrap()
            .remove(0);
            let (_, _, runs) = records(std::slice::from_ref(&w), &pooled, true);
            (w, runs)
        };
        let width = |w: &super::WorkloadAnalysis| {
            let e = &w
                .rows
                .iter()
                .find(|r| r.build == "lto+pgo")
                .unwrap()
                .vs_release
                .as_ref()
                .unwrap()
                .median
                .estimate;
            e.ci_high_pct - e.ci_low_pct
        };
        let (alone, runs) = analyse(&History::default());
        assert!(alone.run.is_none(), "one run is no spread");
        assert_eq!(runs.len(), 3);
        assert!(
            runs.iter()
                .all(|r| r.release_hash == "r" && r.run_seed == 99)
        );
        // Three earlier runs of these executables, ±1 % apart; and one of another lto+pgo.
        let mut history = History::default();
        history.add_runs(vec![
            record("p", 1, 0.9f64.ln() - 0.01),
            record("p", 2, 0.9f64.ln()),
            record("p", 3, 0.9f64.ln() + 0.01),
            record("another", 4, 0.5),
        ]);
        let (pooled, _) = analyse(&history);
        let run = pooled.run.expect("a run component");
        assert_eq!(
            run.nulls, 3,
            "four runs of lto+pgo's executables: 3 degrees of freedom"
        );
        assert!(run.sd > 0.007 && run.sd < 0.012, "{run:?}");
        assert!(
            width(&pooled) > width(&alone) + 1.0,
            "{} against {}",
            width(&pooled),
            width(&alone)
        );
    }

    /// Sessions beside a busy neighbour are named; a workload of several threads leaves
    /// them out of its figures and says so, or withholds its verdicts when too few are left;
    /// a session-sharing one keeps them.
    #[test]
    fn disturbed_sessions_are_named_and_left_out_of_a_multi_thread_workload() {
        let mut sessions = crate::fixtures::sessions(10, 20);
        for s in &mut sessions {
            s.machine = Some(crate::machine::Beside {
                secs: 0.5,
                measured_pct: if s.session == 3 || s.session == 7 {
                    45.0
                } else {
                    2.0
                },
                setup_pct: Some(4.0),
                steal_pct: 1.0,
            });
        }
        let analyse = |cfg: &crate::config::Measure| {
            analyze_lockstep(
                &["agent_send_latency".into()],
                &builds(),
                &sessions,
                &[],
                cfg,
                &super::sessions::Pooled::none(&Default::default()),
            )
            .unwrap()
            .remove(0)
        };
        let mut cfg = measure_config();
        let shared = analyse(&cfg);
        let m = shared.machine.as_ref().unwrap();
        assert_eq!((m.disturbed.clone(), m.left_out), (vec![3, 7], false));
        assert_eq!(shared.sessions, 10);
        assert_eq!(
            (m.median_pct, m.max_pct, m.setup_median_pct),
            (2.0, 45.0, Some(4.0))
        );
        let line = m.line(shared.sessions);
        assert!(
            line.contains("2 of 10 sessions disturbed (over 10 %): 4, 8"),
            "{line}"
        );
        assert!(line.contains("(the hypervisor's steal 1.0 %)"), "{line}");
        // Several threads, a pilot of 4: eight undisturbed sessions are enough.
        cfg.workloads[0].share_core = Some(false);
        cfg.lockstep.min_sessions = 4;
        let spread = analyse(&cfg);
        let m = spread.machine.as_ref().unwrap();
        assert!(m.left_out && !m.unjudged);
        assert_eq!(spread.sessions, 8);
        assert!(
            m.line(10).contains("the disturbed sessions are left out"),
            "{}",
            m.line(10)
        );
        // A pilot of 12: too few undisturbed sessions, so no verdict is given.
        cfg.lockstep.min_sessions = 12;
        let busy = analyse(&cfg);
        let m = busy.machine.as_ref().unwrap();
        assert!(m.unjudged && !m.left_out);
        assert_eq!(busy.sessions, 10);
        assert!(
            m.line(10).contains("its verdicts are not judged"),
            "{}",
            m.line(10)
        );
        let verdicts: Vec<Verdict> = busy
            .rows
            .iter()
            .filter_map(|r| r.vs_release.as_ref())
            .flat_map(|c| [c.median.verdict, c.p95.verdict, c.p99.verdict])
            .chain([busy.aa.median.verdict])
            .collect();
        assert!(verdicts.len() > 4 && verdicts.iter().all(|v| *v == Verdict::NotJudged));
        assert_eq!(Verdict::NotJudged.text(), "not judged (machine busy)");
    }

    /// The arm component rests on release's copies in other files: this run's and earlier
    /// shifted runs', not the A/A arm (release's own file) nor runs whose heaps were not
    /// shifted; every build's interval carries it, and this run's copy is recorded as shifted.
    #[test]
    fn the_arm_component_comes_from_copies_of_shifted_runs() {
        use super::history::{History, NullRecord};
        let sessions = crate::fixtures::sessions_with(30, 20, &[("release/copy", 1.01)]);
        let cfg = measure_config();
        assert!(cfg.shift_heap, "on by default");
        let record = |arm: &str, seed: u64, log: f64, shifted: bool| NullRecord {
            workload: "agent_send_latency".into(),
            arm: arm.into(),
            run_seed: seed,
            log,
            se: 0.001,
            shifted,
        };
        let history = History {
            nulls: vec![
                record("release/copy", 1, -0.01, true),
                record("release/copy", 2, 0.05, false),
                record("release-aa", 3, 0.0, true),
            ],
            ..History::default()
        };
        let analyse = |history: &History| {
            let pooled = super::sessions::Pooled {
                run_seed: 9,
                ..super::sessions::Pooled::none(history)
            };
            let w = analyze_lockstep(
                &["agent_send_latency".into()],
                &builds(),
                &sessions,
                &[],
                &cfg,
                &pooled,
            )
            .unwrap()
            .remove(0);
            let (nulls, _, _) = super::sessions::records(std::slice::from_ref(&w), &pooled, true);
            (w, nulls)
        };
        let (w, nulls) = analyse(&history);
        let arm = w.arm.expect("an arm component");
        // This run's copy (about +1 %) and the earlier shifted one (−1 %): RMS about 1 %.
        assert_eq!(arm.nulls, 2, "{arm:?}");
        assert!(arm.sd > 0.007 && arm.sd < 0.011, "{arm:?}");
        let (alone, _) = analyse(&History::default());
        assert_eq!(alone.arm.unwrap().nulls, 1);
        let width = |w: &super::WorkloadAnalysis, b: &str| {
            let e = &w.rows.iter().find(|r| r.build == b).unwrap();
            let e = &e.vs_release.as_ref().unwrap().median.estimate;
            e.ci_high_pct - e.ci_low_pct
        };
        let raw = w.raw.iter().find(|(b, _, _)| b == "lto").unwrap().2;
        assert!(
            width(&w, "lto") > 2.0 * 1.96 * 100.0 * raw,
            "lto's interval carries the component: {} against its sessions' se {raw}",
            width(&w, "lto")
        );
        assert_eq!(
            nulls.len(),
            1,
            "the copy recorded, not the A/A arm: {nulls:?}"
        );
        assert_eq!(
            (nulls[0].arm.as_str(), nulls[0].shifted),
            ("release/copy", true)
        );
        let line = crate::report::nulls_line(&w);
        assert!(
            line.contains(&format!(
                "arm component sd {:.2} % from 2 copies of release",
                100.0 * arm.sd
            )),
            "{line}"
        );
    }

    /// lto and lto+pgo relinked too: a gain that holds in every layout is said so, one that
    /// depends on the layout is called layout luck; BOLT is paired with each random layout.
    #[test]
    fn gains_over_layouts_and_bolt_against_random_layouts() {
        let sessions = crate::fixtures::sessions_with(
            30,
            20,
            &[
                ("release/L1", 1.003),
                ("release/L2", 0.997),
                ("lto/L1", 0.995),
                ("lto/L2", 0.980),
                ("lto+pgo/L1", 0.905),
                ("lto+pgo/L2", 0.895),
                ("lto+pgo+bolt", 0.88),
            ],
        );
        let w = &analyze_lockstep(
            &["agent_send_latency".into()],
            &builds(),
            &sessions,
            &[],
            &measure_config(),
            &crate::analysis::sessions::Pooled::none(&Default::default()),
        )
        .unwrap()[0];
        let l = w.layout.as_ref().expect("a layout floor");
        let gain = |b: &str| l.gains.iter().find(|g| g.build == b).unwrap();
        // lto: 1 % faster in its own layout, 0.5 % and 2 % in the others.
        let lto = gain("lto");
        assert_eq!(lto.layouts.len(), 3);
        assert_eq!(lto.verdict, None, "{lto:?}");
        assert!(
            (lto.low_pct + 2.0).abs() < 0.3 && (lto.high_pct + 0.5).abs() < 0.3,
            "{lto:?}"
        );
        assert!(
            lto.line()
                .contains("depends on its layout: within layout luck (range over 3 layouts"),
            "{}",
            lto.line()
        );
        let pgo = gain("lto+pgo");
        assert_eq!(pgo.verdict, Some(Verdict::Faster), "{pgo:?}");
        assert!(
            pgo.line()
                .starts_with("lto+pgo is faster than release whatever the layout"),
            "{}",
            pgo.line()
        );
        // BOLT (12 % faster) against each of lto+pgo's random layouts (9.5 %, 10.5 %).
        assert_eq!(l.bolt_vs_layouts.len(), 2);
        let b: Vec<f64> = l
            .bolt_vs_layouts
            .iter()
            .map(|(_, e)| e.change_pct)
            .collect();
        assert!(
            (b[0] + 2.76).abs() < 0.3 && (b[1] + 1.68).abs() < 0.3,
            "{b:?}"
        );
        // The floor's line and the report's lines say all of it.
        let lines = crate::report::layout_lines(w);
        assert!(lines[0].starts_with("layout floor ±"), "{lines:?}");
        assert!(
            lines.iter().any(|x| x
                .starts_with("lto+pgo+bolt against lto+pgo/L1 (a random layout of lto+pgo): 2.")),
            "{lines:?}"
        );
    }

    /// Each watched comparison is read as the stopping rule left it: lto+pgo settled after 4
    /// of the 10 sessions (its arm then left), lto ran to its planned count: their intervals
    /// rest on their own sessions and spend the error recorded for them.
    #[test]
    fn each_comparison_is_read_at_its_own_stop_and_error() {
        use crate::measure::{ComparisonStop, Role, StopReason, Stopping};
        use crate::stats::sequential;
        let mut sessions = crate::fixtures::sessions(10, 20);
        for s in &mut sessions[5..] {
            let i = s.arms.iter().position(|a| a == "lto+pgo").unwrap();
            s.arms.remove(i);
            s.batches.remove(i);
            s.totals.remove(i);
        }
        let stop = |cand: &str, n: u32, reason, alpha| ComparisonStop {
            cand: cand.into(),
            base: "release".into(),
            role: Role::Verdict,
            target_half_width_pct: 1.0,
            needed: Some(10),
            sessions: n,
            through: n,
            unit: crate::measure::Unit::Session,
            pilot: 4,
            reason,
            alpha,
            threshold_pct: (reason == StopReason::Settled).then_some(1.0),
        };
        let stops = [Stopping {
            workload: "agent_send_latency".into(),
            target_half_width_pct: 1.0,
            pilot: 4,
            needed: Some(10),
            sessions: 10,
            reason: StopReason::Target,
            secs: 1.0,
            timing: Default::default(),
            comparisons: vec![
                stop("lto+pgo", 4, StopReason::Settled, sequential::look_alpha(0)),
                stop("lto", 10, StopReason::Target, sequential::ALPHA_PLANNED),
            ],
        }];
        let history = Default::default();
        let pooled = crate::analysis::sessions::Pooled {
            stops: &stops,
            ..crate::analysis::sessions::Pooled::none(&history)
        };
        let w = &analyze_lockstep(
            &["agent_send_latency".into()],
            &builds(),
            &sessions,
            &[],
            &measure_config(),
            &pooled,
        )
        .unwrap()[0];
        let row = |b: &str| w.rows.iter().find(|r| r.build == b).unwrap();
        let pgo = &row("lto+pgo").vs_release.as_ref().unwrap().median.estimate;
        assert_eq!((pgo.pairs, pgo.alpha), (4, Some(sequential::look_alpha(0))));
        assert!(
            crate::stats::describe(pgo).ends_with(" (settled after 4)"),
            "{}",
            crate::stats::describe(pgo)
        );
        // The sixth session, which lto+pgo also ran in, is not in its interval.
        assert_eq!(row("lto+pgo").runs, 5);
        let lto = &row("lto").vs_release.as_ref().unwrap().median.estimate;
        assert_eq!(
            (lto.pairs, lto.alpha),
            (10, Some(sequential::ALPHA_PLANNED))
        );
        // The A/A arm was not watched here: every session, 5 %.
        assert_eq!(
            (w.aa.median.estimate.pairs, w.aa.median.estimate.alpha),
            (10, None)
        );
        // An interval at 0.5 % is wider than the same sessions' at 5 %.
        let plain = &analyze_lockstep(
            &["agent_send_latency".into()],
            &builds(),
            &sessions[..4],
            &[],
            &measure_config(),
            &crate::analysis::sessions::Pooled::none(&history),
        )
        .unwrap()[0];
        let plain_pgo = &plain.rows.iter().find(|r| r.build == "lto+pgo").unwrap();
        let plain_pgo = &plain_pgo.vs_release.as_ref().unwrap().median.estimate;
        assert_eq!(plain_pgo.mean_log_ratio, pgo.mean_log_ratio);
        assert!(
            pgo.ci_high_pct - pgo.ci_low_pct > plain_pgo.ci_high_pct - plain_pgo.ci_low_pct,
            "{pgo:?} {plain_pgo:?}"
        );
    }

    #[test]
    fn lockstep_sessions_give_the_known_ratios_through_state_flips() {
        let sessions = crate::fixtures::sessions(10, 20);
        let w = &analyze_lockstep(
            &["agent_send_latency".into()],
            &builds(),
            &sessions,
            &[],
            &measure_config(),
            &crate::analysis::sessions::Pooled::none(&Default::default()),
        )
        .unwrap()[0];
        assert_eq!((w.sessions, w.rounds_per_session), (10, 20));
        assert!(w.aa.median.estimate.change_pct.abs() < 0.5, "{:?}", w.aa);
        let pgo = w.rows[2].vs_release.as_ref().unwrap();
        assert!(
            (pgo.median.estimate.change_pct + 10.0).abs() < 0.5,
            "{pgo:?}"
        );
        assert_eq!(pgo.median.verdict, Verdict::Faster);
        assert_eq!(w.rows[0].runs, 10);
        assert_eq!(w.basis(), "10 sessions × 20 rounds (lockstep)");
        // The rows' figures: medians over sessions of medians over rounds; the flips put
        // half the rounds at 170 and half at 235.
        assert!(
            (w.rows[0].median_ns - 202.5).abs() < 2.0,
            "{}",
            w.rows[0].median_ns
        );
        let one = analyze_lockstep(
            &["agent_send_latency".into()],
            &builds(),
            &sessions[..1],
            &[],
            &measure_config(),
            &crate::analysis::sessions::Pooled::none(&Default::default()),
        )
        .unwrap_err();
        assert!(
            one.to_string()
                .contains("1 lockstep session(s) recorded; an interval needs at least 2"),
            "{one}"
        );
    }
}
