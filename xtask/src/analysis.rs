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
    /// max(min_effect_pct, A/A noise floor of this percentile).
    pub threshold_pct: f64,
    pub verdict: Verdict,
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
pub(crate) fn judge_rows(
    builds: &[String],
    min_effect_pct: f64,
    compare: impl Fn(&str) -> Result<[Estimate; 3]>,
    mut row: impl FnMut(&str, Option<Comparison>) -> Row,
) -> Result<(Comparison, Vec<Row>)> {
    let aa = compare(BASELINE_AGAIN)?;
    let judge = judge_against(&aa, min_effect_pct);
    let mut rows = Vec::new();
    for build in builds {
        let vs_release = if build == BASELINE {
            None
        } else {
            Some(judge(compare(build)?))
        };
        rows.push(row(build, vs_release));
    }
    Ok((judge(aa), rows))
}

/// Judges estimates against max(min effect, the A/A noise floor of each percentile).
fn judge_against(
    aa: &[Estimate; 3],
    min_effect_pct: f64,
) -> impl Fn([Estimate; 3]) -> Comparison + use<> {
    let thresholds: Vec<f64> = aa
        .iter()
        .map(|e| stats::noise_floor_pct(e).max(min_effect_pct))
        .collect();
    move |est: [Estimate; 3]| {
        let [m, p95, p99] = est;
        let j = |e: Estimate, t: f64| Judged {
            verdict: stats::verdict(&e, t),
            threshold_pct: t,
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

    use crate::fixtures::measure_config;
    use crate::stats::Verdict;

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
