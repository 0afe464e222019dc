//! From raw measurements to defensible figures: per session, the per-round log ratio of each
//! arm's batch to release's batch of the same round; the session's estimate is the median over
//! its rounds (robust to a speed flip), the estimate the mean over sessions, the interval a
//! nested bootstrap (`sessions.rs`). Here the shared part: rows of medians, paired comparisons with release, the A/A noise floor, a
//! verdict per percentile.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::config::Measure;
use crate::measure::{BASELINE, BASELINE_AGAIN};
use crate::stats::median;

pub mod sessions;
use crate::stats::{self, Estimate, Verdict};

/// A comparison judged against its threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judged {
    pub estimate: Estimate,
    /// max(min_effect_pct, A/A noise floor of this percentile, and for a build laid out
    /// differently from release the layout floor, where measured).
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
    /// The A/A noise floor.
    AaFloor,
    /// The layout floor.
    LayoutFloor,
}

impl Bound {
    pub fn text(self) -> &'static str {
        match self {
            Bound::MinEffect => "min effect",
            Bound::AaFloor => "A/A floor",
            Bound::LayoutFloor => "layout floor",
        }
    }
}

/// The layout floor of one workload: `release`'s layout variants against release in the same
/// sessions (`stats::layout`), and what the other relinked builds' variants say.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayoutFloor {
    /// The build whose variants set the floor (`release`).
    pub build: String,
    /// Each variant against it (median per message).
    pub variants: Vec<(String, Estimate)>,
    /// The variants' shifts: mean and sd (%), and the layouts' own sd, measurement noise
    /// removed (%).
    pub mean_pct: f64,
    pub sd_pct: f64,
    pub layout_sd_pct: f64,
    /// The 95 % prediction interval of another layout's shift (%).
    pub low_pct: f64,
    pub high_pct: f64,
    /// The interval's half-width: the floor a build laid out differently must clear. Its
    /// centre is left out: it is the shuffled orders against the linker's default order (in
    /// these runs 0.2 to 1.0 % apart), and every build is linked in its default order.
    pub floor_pct: f64,
    /// The widest half-width among the variants' intervals: how precisely each was measured.
    pub max_half_width_pct: f64,
    /// Builds relinked too (`layout.builds`): each one's change against release in every
    /// layout measured.
    #[serde(default)]
    pub gains: Vec<LayoutGain>,
    /// lto+pgo+bolt against each of lto+pgo's random layouts, when both were measured.
    #[serde(default)]
    pub bolt_vs_layouts: Vec<(String, Estimate)>,
    /// A byte-identical copy of the build in another file, against it: the part of a
    /// layout's shift that is the file, not the function order.
    #[serde(default)]
    pub copy: Option<Estimate>,
}

impl LayoutFloor {
    /// "layout floor ±1.6 % (4 layouts of release: −1.0 to +0.1 %, sd 0.4 %)".
    pub fn line(&self) -> String {
        let shifts: Vec<f64> = self.variants.iter().map(|(_, e)| e.change_pct).collect();
        let (lo, hi) = shifts
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
                (a.min(*x), b.max(*x))
            });
        let copy = self
            .copy
            .as_ref()
            .map(|e| {
                format!(
                    "; a byte-identical copy in another file: {:+.1} % [{:+.1}, {:+.1}]",
                    e.change_pct, e.ci_low_pct, e.ci_high_pct
                )
            })
            .unwrap_or_default();
        format!(
            "layout floor ±{:.1} % ({} layouts of {} measured against it: {lo:+.1} to {hi:+.1} %, each within ±{:.1} %; another layout would land in [{:+.1}, {:+.1}] %{copy})",
            self.floor_pct,
            self.variants.len(),
            self.build,
            self.max_half_width_pct,
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
    /// The verdict every layout got (against max(min effect, A/A floor)), or `None` when
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
            Some(Verdict::NoDetectableChange) => {
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
    /// Rounds per session (1 for calibration's blocks of separate processes).
    pub rounds_per_session: usize,
    /// Sessions of new processes (calibration's separate-process contrast: undisturbed blocks).
    pub sessions: usize,
    /// Release against itself (second run of each block): the noise floor.
    pub aa: Comparison,
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

/// The builds the capture compares: the training's PGO build and the oracle, both against lto.
const PGO: &str = "lto+pgo";
const ORACLE: &str = "oracle";
const LTO: &str = "lto";

impl WorkloadAnalysis {
    /// The capture in words, or `None` without an oracle.
    pub fn capture_line(&self) -> Option<String> {
        let c = self.capture.as_ref()?;
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
/// oracle gained nothing in any resample.
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
    Ok(stats::capture_nested(
        &against_lto(PGO)?,
        &against_lto(ORACLE)?,
        cfg.bootstrap_resamples,
        cfg.seed,
    )
    .ok())
}

/// The A/A comparison (release against its second arm: the noise floor) and a row per build,
/// each judged against it; `compare` estimates one arm against release on the three
/// percentiles, `row` makes a build's row from its judged comparison.
/// `layout_floor_pct`: the layout floor of the median, where measured; every build but
/// release itself is laid out differently from release, so it applies to all of them (not to
/// the A/A arm, the same executable).
pub(crate) fn judge_rows(
    builds: &[String],
    min_effect_pct: f64,
    layout_floor_pct: Option<f64>,
    compare: impl Fn(&str) -> Result<[Estimate; 3]>,
    mut row: impl FnMut(&str, Option<Comparison>) -> Row,
) -> Result<(Comparison, Vec<Row>)> {
    let aa = compare(BASELINE_AGAIN)?;
    let judge = judge_against(&aa, min_effect_pct, layout_floor_pct);
    let same = judge_against(&aa, min_effect_pct, None);
    let mut rows = Vec::new();
    for build in builds {
        let vs_release = if build == BASELINE {
            None
        } else {
            Some(judge(compare(build)?))
        };
        rows.push(row(build, vs_release));
    }
    Ok((same(aa), rows))
}

/// The threshold of one comparison and what set it: max(min effect, A/A floor, layout floor).
pub(crate) fn threshold(
    aa_floor_pct: f64,
    min_effect_pct: f64,
    layout_floor_pct: Option<f64>,
) -> (f64, Bound) {
    let mut t = (min_effect_pct, Bound::MinEffect);
    if aa_floor_pct > t.0 {
        t = (aa_floor_pct, Bound::AaFloor);
    }
    if let Some(l) = layout_floor_pct
        && l > t.0
    {
        t = (l, Bound::LayoutFloor);
    }
    t
}

/// Judges estimates against max(min effect, the A/A noise floor of each percentile, and the
/// layout floor on the median where given: the layout variants are measured on the median).
fn judge_against(
    aa: &[Estimate; 3],
    min_effect_pct: f64,
    layout_floor_pct: Option<f64>,
) -> impl Fn([Estimate; 3]) -> Comparison + use<> {
    let thresholds: Vec<(f64, Bound)> = aa
        .iter()
        .enumerate()
        .map(|(i, e)| {
            threshold(
                stats::noise_floor_pct(e),
                min_effect_pct,
                layout_floor_pct.filter(|_| i == 0),
            )
        })
        .collect();
    move |est: [Estimate; 3]| {
        let [m, p95, p99] = est;
        let j = |e: Estimate, (t, bound): (f64, Bound)| Judged {
            verdict: stats::verdict(&e, t),
            threshold_pct: t,
            bound,
            estimate: e,
        };
        Comparison {
            median: j(m, thresholds[0]),
            p95: j(p95, thresholds[1]),
            p99: j(p99, thresholds[2]),
        }
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

    use super::Bound;
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
        // The prediction interval reaches past every layout measured.
        assert!(l.low_pct < -1.0 && l.high_pct > 1.1, "{l:?}");
        // The floor is its half-width (in %, of the log interval).
        assert!(
            (l.floor_pct - (l.high_pct - l.low_pct) / 2.0).abs() < 0.1,
            "{l:?}"
        );
        // lto's 1 % is within layout luck; lto+pgo's 10 % stands beyond the layout floor.
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
            (Bound::LayoutFloor, Bound::LayoutFloor)
        );
        assert_eq!(lto.threshold_pct, l.floor_pct);
        assert_eq!(lto.verdict, Verdict::NoDetectableChange, "{lto:?}");
        assert_eq!(pgo.verdict, Verdict::Faster, "{pgo:?}");
        // The A/A arm is the same executable: no layout floor on it.
        assert_ne!(w.aa.median.bound, Bound::LayoutFloor);
        // No variants, no floor.
        let plain = &analyze_lockstep(
            &["agent_send_latency".into()],
            &builds(),
            &crate::fixtures::sessions(30, 20),
            &[],
            &measure_config(),
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

    #[test]
    fn lockstep_sessions_give_the_known_ratios_through_state_flips() {
        let sessions = crate::fixtures::sessions(10, 20);
        let w = &analyze_lockstep(
            &["agent_send_latency".into()],
            &builds(),
            &sessions,
            &[],
            &measure_config(),
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
        )
        .unwrap_err();
        assert!(
            one.to_string()
                .contains("1 lockstep session(s) recorded; an interval needs at least 2"),
            "{one}"
        );
    }
}
