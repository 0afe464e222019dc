//! How each comparison stopped and what its interval spends: its role (and so its target),
//! the reason it stopped, its unit, the workload's record (`Stopping`), and the `Spend` the
//! analysis reads it back as.

use serde::{Deserialize, Serialize};

use super::arms::{AB_NEW, BASELINE, BASELINE_AGAIN};
use crate::config::{Measure, Workload};
use crate::measure::session::Timing;
use crate::toolchain::build::Build;
use stats::sequential;

/// A measured comparison's half-width as a share of its estimate, where wider than the
/// target: 23 % ± 1.2 says as much as ± 1.0, and a comparison of 60 % need not run to ± 1.
pub const MEASURED_SHARE: f64 = 0.05;

/// What a watched comparison is for: its target, and whether it may stop settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A build (another commit's, an injected cost, a workload against another) that gets a
    /// verdict: `measure.target_half_width_pct`, and it may stop settled.
    Verdict,
    /// The numbers users quote: lto and lto+pgo against release, `--against`'s builds
    /// against their parents, `ab`'s NEW against OLD. A measurement, not only a sign: never
    /// settled, it runs to Stein's count for max(the target, [`MEASURED_SHARE`] of its
    /// pilot's estimate).
    Measured,
    /// A null arm (release again, its copy): the target; its value is the point, so never
    /// settled.
    Null,
    /// A layout variant (or a build relinked in a random layout): the floor's precision,
    /// `measure.layout_half_width_pct`.
    Layout,
    /// The oracle: the capture's precision, `measure.oracle_half_width_pct`.
    Oracle,
}

impl Role {
    /// The role of the comparison of arm `cand` against `base`, from their names
    /// (`--against`'s arms are `<commit>:<build>`, compared with this tree's `<build>`; a
    /// `versus` pair's are both `<build>:<workload>`).
    pub fn of(cand: &str, base: &str) -> Role {
        let layout = cand
            .rsplit_once("/L")
            .is_some_and(|(_, k)| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()));
        let judged = [Build::Lto.name(), Build::LtoPgo.name(), AB_NEW];
        if cand == BASELINE_AGAIN {
            Role::Null
        } else if (judged.contains(&cand) && base == BASELINE)
            || (base.contains(':') && !cand.contains(':'))
        {
            Role::Measured
        } else if layout {
            Role::Layout
        } else if cand == Build::Oracle.name() {
            Role::Oracle
        } else {
            Role::Verdict
        }
    }

    /// Its target half-width (%) in `workload`'s sessions: the verdict's target, and for the
    /// oracle and the layouts their own where it is wider (a capture share and a floor need
    /// less precision than a verdict).
    pub fn target_in(self, workload: &Workload, cfg: &Measure) -> f64 {
        let target = workload.target_in(cfg);
        if target <= 0.0 {
            return 0.0;
        }
        match self {
            Role::Verdict | Role::Null | Role::Measured => target,
            Role::Layout => target.max(cfg.layout_half_width_pct),
            Role::Oracle => target.max(cfg.oracle_half_width_pct),
        }
    }
}

/// Why a comparison (or a workload's sessions) stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The count the pilot planned for its target half-width was run.
    Target,
    /// At a look, its interval lay beyond every threshold by more than its half-width.
    Settled,
    /// The target needed more than `lockstep.sessions` (or the workload's own `sessions`).
    SessionCap,
    /// `lockstep.max_secs` ran out first.
    TimeCap,
    /// No target (`target_half_width_pct = 0`): the fixed `sessions`.
    Fixed,
}

/// What a comparison's values are: one per session (the median over its rounds), or one per
/// adjacent pair (a whole-process workload whose sessions show no component of their own:
/// every run is a new process already, so its pairs are as independent as sessions).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    #[default]
    Session,
    /// One per turn: a whole-process workload's unit before its arms ran in pairs (a report
    /// recorded then).
    Turn,
    Pair,
}

impl Unit {
    /// Whether each of a session's values is a unit of its own.
    pub fn within_sessions(self) -> bool {
        self != Unit::Session
    }
}

/// How one comparison stopped: after how many sessions, on what, and the error its interval
/// spends (`xtask/stats/src/sequential.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparisonStop {
    pub cand: String,
    pub base: String,
    pub role: Role,
    pub target_half_width_pct: f64,
    /// The sessions its pilot's spread asked for (Stein's count, before the caps).
    pub needed: Option<u32>,
    /// Its sessions: the values it stopped on (sessions in which both arms ran, a disturbed
    /// one of a workload of several threads left out).
    pub sessions: u32,
    /// The workload's sessions run when it stopped: its values come from those.
    pub through: u32,
    /// What its values are, and how many its pilot gave (turns: the pilot sessions' rounds).
    #[serde(default)]
    pub unit: Unit,
    #[serde(default)]
    pub pilot: u32,
    pub reason: StopReason,
    /// The error its interval spends: [`sequential::ALPHA_PLANNED`], or an early look's.
    pub alpha: f64,
    /// Settled: the threshold (%) its interval lay beyond.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_pct: Option<f64>,
    /// Settled at a look after this many values, but its arms ran on because another
    /// comparison needed them (the oracle's capture keeps lto and lto+pgo): its interval is
    /// then of every session both ran in, at [`sequential::ALPHA_PLANNED`], as a comparison
    /// that ran to its plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled_at: Option<u32>,
}

/// How one workload's sessions went: the stopping rule's plan, why it stopped, and where
/// the time went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stopping {
    pub workload: String,
    pub target_half_width_pct: f64,
    /// The pilot's sessions.
    pub pilot: u32,
    /// The most sessions a comparison's pilot asked for (Stein's count, before the caps).
    pub needed: Option<u32>,
    pub sessions: u32,
    /// Why the last comparison to stop stopped.
    pub reason: StopReason,
    /// The sessions' time on the measured core(s), in seconds.
    pub secs: f64,
    /// Summed over the sessions.
    pub timing: Timing,
    /// Each watched comparison's own stop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comparisons: Vec<ComparisonStop>,
}

impl Stopping {
    /// Time outside the arms' batches, as a share of the time in them (%); `None` when the
    /// arms did not time their batches.
    pub fn overhead_pct(&self) -> Option<f64> {
        let t = &self.timing;
        (t.batch_secs > 0.0).then(|| 100.0 * (self.secs - t.batch_secs) / t.batch_secs)
    }

    /// How the comparison of `cand` against `base` stopped, where watched.
    pub fn of(&self, cand: &str, base: &str) -> Option<&ComparisonStop> {
        self.comparisons
            .iter()
            .find(|c| c.cand == cand && c.base == base)
    }
}

/// How a comparison's interval is to be made: from the sessions numbered below `through`
/// (where it stopped), its values per session or per turn, its pilot's count of them, and
/// the error it spends (`xtask/stats/src/sequential.rs`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spend {
    pub through: u32,
    pub unit: Unit,
    /// `None`: the analysis's own pilot of sessions.
    pub pilot: Option<usize>,
    /// A cap (of sessions or of time) or a fixed count ended it: no pilot set its count.
    pub capped: bool,
    pub alpha: f64,
}

impl Spend {
    /// Per-session rounds of a comparison's log ratios, as its units: unchanged (the analysis
    /// takes each session's median), or each turn a unit of its own.
    pub fn units(&self, rounds: Vec<Vec<f64>>) -> Vec<Vec<f64>> {
        match self.unit {
            Unit::Session => rounds,
            Unit::Turn | Unit::Pair => rounds.into_iter().flatten().map(|x| vec![x]).collect(),
        }
    }

    /// The pilot for its interval: its own count of values, else the analysis's sessions; for
    /// a count no pilot set (`capped`), all of its values (`sequential::interval_df`).
    pub fn pilot_or(&self, sessions: usize) -> usize {
        if self.capped {
            usize::MAX
        } else {
            self.pilot.unwrap_or(sessions)
        }
    }
}

/// How `cand` against `base` on `workload` stopped ([`Spend`]). An unwatched comparison (or one
/// from a report that did not record its stop): every session, one value each, 5 %.
pub fn spend(stops: &[Stopping], workload: &str, cand: &str, base: &str) -> Spend {
    stops
        .iter()
        .filter(|s| s.workload == workload)
        .find_map(|s| s.of(cand, base))
        .map_or(
            Spend {
                through: u32::MAX,
                unit: Unit::Session,
                pilot: None,
                capped: false,
                alpha: sequential::ALPHA,
            },
            |c| Spend {
                through: c.through,
                unit: c.unit,
                pilot: (c.pilot > 0).then_some(c.pilot as usize),
                capped: c.settled_at.is_none()
                    && matches!(
                        c.reason,
                        StopReason::SessionCap | StopReason::TimeCap | StopReason::Fixed
                    ),
                alpha: c.alpha,
            },
        )
}
