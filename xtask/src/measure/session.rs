//! What a lockstep session records: each arm's batches round by round (`Batch`), the session
//! itself (`Session`) and where its time went (`Timing`), and how it is read: the log ratio of
//! one arm's figure to another's, round by round or pair by pair, for any judged [`Metric`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::measure::program::WorkloadLine;

/// A figure of a batch that a comparison judges, with its extraction. A new metric is a
/// variant here, its place in [`Metric::ALL`], its name and its extraction in
/// [`Metric::of`] (and, where the protocol must carry a new figure, its field in [`Batch`]);
/// every comparison, the report's words and report.json follow from it.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// A service's CPU time per request: its server's threads' CPU time over a turn's
    /// recorded window, over the requests it answered there (`mty-loadgen --server-pid`).
    /// What PGO changes in a server; where a workload's batches carry it, it is the primary
    /// metric and the driver's latency (the other three) is judged beside it.
    CpuPerRequest,
    /// The batch's median time per iteration (a whole-process turn: the run's time; a
    /// service turn: the driver's p50 latency).
    #[default]
    Median,
    /// Its 95th percentile.
    P95,
    /// Its 99th percentile.
    P99,
}

impl Metric {
    /// Every metric, in the order the report shows them.
    pub const ALL: [Metric; 4] = [
        Metric::CpuPerRequest,
        Metric::Median,
        Metric::P95,
        Metric::P99,
    ];

    /// The primary metric of these sessions: the first of [`Metric::ALL`] that every batch
    /// carries (the median where none is given). It is what the stopping rule watches and
    /// what the layout floor, the capture, the gate and `--against` judge.
    pub fn primary(sessions: &[&Session]) -> Metric {
        let mut batches = sessions.iter().flat_map(|s| s.batches.iter().flatten());
        match batches.next() {
            Some(first) => Metric::ALL
                .into_iter()
                .find(|m| m.of(first).is_some() && batches.clone().all(|b| m.of(b).is_some()))
                .unwrap_or(Metric::Median),
            None => Metric::Median,
        }
    }

    /// The primary metric workload `w`'s batches will carry: CPU per request for a service
    /// judged by CPU (`metric` unset or `"cpu_per_request"`), else the median.
    pub fn judged_first(w: &crate::config::Workload) -> Metric {
        let by_cpu = w
            .metric
            .as_deref()
            .is_none_or(|m| m == crate::config::CPU_PER_REQUEST);
        match w.mode {
            crate::config::Mode::Service if by_cpu => Metric::CpuPerRequest,
            _ => Metric::Median,
        }
    }

    /// The smallest change called a change on this metric, in %: CPU time per request has
    /// its own (`measure.cpu_min_effect_pct`), as its noise is its own.
    pub fn min_effect_pct(self, m: &crate::config::Measure) -> f64 {
        match self {
            Metric::CpuPerRequest => m.cpu_min_effect_pct,
            _ => m.min_effect_pct,
        }
    }

    /// Its name: its key in report.json and its word in the report.
    pub fn name(self) -> &'static str {
        match self {
            Metric::CpuPerRequest => "cpu_per_request",
            Metric::Median => "median",
            Metric::P95 => "p95",
            Metric::P99 => "p99",
        }
    }

    /// Its value in one batch; `None` where the batch does not carry it.
    pub fn of(self, b: &Batch) -> Option<f64> {
        match self {
            Metric::CpuPerRequest => b.cpu_per_request_ns,
            Metric::Median => Some(b.median_ns),
            Metric::P95 => Some(b.p95_ns),
            Metric::P99 => Some(b.p99_ns),
        }
    }

    /// ln(a / b) of this metric; `None` where either batch lacks it.
    pub fn log_ratio(self, a: &Batch, b: &Batch) -> Option<f64> {
        Some((self.of(a)? / self.of(b)?).ln())
    }

    /// The metrics every batch of these sessions carries.
    pub fn carried_by(sessions: &[&Session]) -> Vec<Metric> {
        Metric::ALL
            .into_iter()
            .filter(|m| {
                sessions
                    .iter()
                    .flat_map(|s| s.batches.iter().flatten())
                    .all(|b| m.of(b).is_some())
            })
            .collect()
    }
}

/// One arm's answer to one `g`: its batch's summary (window means around each quantile; see
/// `mty-lockstep`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    pub median_ns: f64,
    pub p95_ns: f64,
    pub p99_ns: f64,
    /// The batch's p99.9 (a mty-bench from before it was reported: `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p999_ns: Option<f64>,
    pub mean_ns: f64,
    /// The batch's own wall time, as the arm timed it (a mty-bench from before it was
    /// reported: `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ns: Option<f64>,
    /// With `--inject-iters`: the injected chain's own cost, timed after the batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inject_ns: Option<f64>,
    /// A service turn's server CPU time per request answered ([`Metric::CpuPerRequest`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_per_request_ns: Option<f64>,
    /// A service turn whose server fell behind the offered rate (its driver said so): its
    /// CPU per request is not comparable with an unsaturated turn's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub saturated: bool,
}

/// A process to run in a session: its name in the report and its command line.
#[derive(Debug, Clone)]
pub struct Arm {
    pub name: String,
    pub exe: PathBuf,
    pub args: Vec<String>,
}

/// One session of one workload: every arm's batches, round by round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub workload: String,
    pub session: u32,
    pub arms: Vec<String>,
    /// The arms in the order they were spawned (drawn at random per session): an arm's index
    /// is its place here.
    /// `order[r]`: the arms' indices in the order they ran in round r.
    pub order: Vec<Vec<u8>>,
    /// A whole-process workload's session of adjacent pairs: each round is its comparisons'
    /// pairs, back to back, in a drawn order, each pair's two runs in a drawn order; `order[r]`
    /// holds them two by two, and an arm's batches are its turns in the order it ran them
    /// (release once a pair). Otherwise every arm runs once a round.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paired: bool,
    /// The arms' indices in the order they were moved onto the measured core (drawn per
    /// session; empty where they set up where they run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<u8>,
    /// Other processes' CPU time beside the session's turns (`/proc`; a report from before it
    /// was kept: `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<crate::measure::machine::OtherLoad>,
    /// `batches[a][r]`: arm a's batch in round r (paired: arm a's r-th turn).
    pub batches: Vec<Vec<Batch>>,
    /// Each arm's closing report over all its batches (histogram, CPU time, switches).
    pub totals: Vec<WorkloadLine>,
    /// Where its time went (a report from before it was kept: `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
}

impl Session {
    /// The session's value for `cand` against `base` on `metric`: the median over its rounds
    /// of ln(cand's figure / base's); `None` without both arms. The report's estimate takes
    /// the same value per session (`stats::compare_sessions`).
    pub fn median_log_ratio(&self, cand: &str, base: &str, metric: Metric) -> Option<f64> {
        stats::median(&self.round_log_ratios(cand, base, metric)?)
    }

    /// Round by round, ln(metric of cand's batch / metric of base's); `None` without both
    /// arms. A paired session's: pair by pair where the two ran as a pair; else the difference
    /// of both arms' pairs with an arm both ran beside (ln(c / x) − ln(b / x), pair by pair in
    /// time order); else `None`.
    pub fn round_log_ratios(&self, cand: &str, base: &str, metric: Metric) -> Option<Vec<f64>> {
        if self.paired {
            return self.pair_log_ratios(cand, base, metric).or_else(|| {
                self.arms.iter().find_map(|x| {
                    let (c, b) = (
                        self.pair_log_ratios(cand, x, metric)?,
                        self.pair_log_ratios(base, x, metric)?,
                    );
                    (c.len() == b.len()).then(|| c.iter().zip(&b).map(|(c, b)| c - b).collect())
                })
            });
        }
        let (c, b) = (self.arm(cand)?, self.arm(base)?);
        c.iter()
            .zip(b)
            .map(|(c, b)| metric.log_ratio(c, b))
            .collect::<Option<Vec<f64>>>()
    }

    /// A paired session's pairs of `cand` and `base`, in the order they ran: ln(cand / base)
    /// of each; `None` where the two never ran as a pair.
    pub fn pair_log_ratios(&self, cand: &str, base: &str, metric: Metric) -> Option<Vec<f64>> {
        let at = |name: &str| self.arms.iter().position(|a| a == name);
        let (c, b) = (at(cand)?, at(base)?);
        let mut next = vec![0usize; self.arms.len()];
        let mut out = Vec::new();
        for pair in self.order.iter().flat_map(|r| r.chunks_exact(2)) {
            let (x, y) = (pair[0] as usize, pair[1] as usize);
            let (bx, by) = (self.batches[x].get(next[x])?, self.batches[y].get(next[y])?);
            next[x] += 1;
            next[y] += 1;
            if (x, y) == (c, b) {
                out.push(metric.log_ratio(bx, by)?);
            } else if (x, y) == (b, c) {
                out.push(metric.log_ratio(by, bx)?);
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// This session's primary metric ([`Metric::primary`]).
    pub fn primary(&self) -> Metric {
        Metric::primary(&[self])
    }

    /// Arm `name`'s batches in round order.
    pub fn arm(&self, name: &str) -> Option<&[Batch]> {
        let i = self.arms.iter().position(|a| a == name)?;
        Some(&self.batches[i])
    }
}

/// Where a session's time went, in seconds: what report.json keeps of each session, and what
/// the overhead is reckoned from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// From spawning the arms to the last one's ready line (set-up and warm-up, on the set-up
    /// core).
    pub setup_secs: f64,
    /// Of that, what the measured core waited for: none when the arms set up while the
    /// session before took its turns.
    pub waited_secs: f64,
    /// Of the set-up, copying the arms' executables to fresh files (`measure.fresh_copies`).
    #[serde(default)]
    pub copy_secs: f64,
    /// Moving the arms onto the measured core. Their first batch there runs on cold caches;
    /// the median over rounds sets it aside, which is cheaper than an unrecorded round.
    pub move_secs: f64,
    /// The recorded rounds, wall time.
    pub turns_secs: f64,
    /// Inside the arms' batches, as they timed them (0 when they do not say).
    pub batch_secs: f64,
    /// From `q` to the last arm's exit.
    pub close_secs: f64,
}

impl Timing {
    /// The measured core's time: what a session adds to the stage's.
    pub fn critical_secs(&self) -> f64 {
        self.waited_secs + self.move_secs + self.turns_secs + self.close_secs
    }
}

#[cfg(test)]
mod tests {
    use super::Metric;

    /// A metric's name is its key in report.json (serde's) and its word in the report, and
    /// [`Metric::ALL`] lists every variant in the order a comparison keeps them.
    #[test]
    fn a_metrics_name_is_its_key_and_all_is_in_order() {
        for m in Metric::ALL {
            assert_eq!(serde_json::to_value(m).unwrap(), m.name(), "{m:?}");
        }
        assert!(Metric::ALL.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(Metric::primary(&[]), Metric::Median);
    }

    /// The primary metric is the first of `ALL` every batch carries: CPU per request where a
    /// service's batches carry it, else the median.
    #[test]
    fn the_primary_metric_is_cpu_per_request_where_every_batch_carries_it() {
        let mut s = crate::testing::fixtures::paired(
            &["release", "lto"],
            vec![vec![0, 1]],
            &[&[2.0], &[1.0]],
        );
        assert_eq!(s.primary(), Metric::Median);
        for b in s.batches.iter_mut().flatten() {
            b.cpu_per_request_ns = Some(b.median_ns / 2.0);
        }
        assert_eq!(s.primary(), Metric::CpuPerRequest);
        assert_eq!(
            Metric::carried_by(&[&s]),
            [
                Metric::CpuPerRequest,
                Metric::Median,
                Metric::P95,
                Metric::P99
            ]
        );
        s.batches[1][0].cpu_per_request_ns = None;
        assert_eq!(s.primary(), Metric::Median);
    }
}
