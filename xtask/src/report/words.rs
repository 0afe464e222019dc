//! Every sentence the report says of a judged value, in one place: the terminal table,
//! report.md, the SVG labels, the gate's messages and the commands' summaries all render from
//! these functions, and the layers below return values, not words. A verdict's wording is
//! one edit here.

use std::fmt::Write as _;

use crate::analysis::{Bound, Comparison, Judged, WorkloadAnalysis};
use crate::measure::session::Metric;
use crate::measure::stops::Unit;
use crate::measure::{ComparisonStop, Role, StopReason, Stopping};
use crate::report::Against;
use crate::toolchain::warnings::ApplyReport;
use stats::{Estimate, Verdict, sequential};

/// A verdict in a word or three.
pub fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Faster => "faster",
        Verdict::Slower => "slower",
        Verdict::NoDetectableChange => "no detectable change",
        Verdict::NotJudged => "not judged (machine busy)",
    }
}

/// The heading of the table's fourth column: a service's CPU time per request where its
/// rows carry it, else instructions per message (`short`: the terminal's).
pub fn fourth_column(w: &WorkloadAnalysis, short: bool) -> &'static str {
    match (w.rows.iter().any(|r| r.cpu_per_request_ns.is_some()), short) {
        (true, true) => "cpu/req",
        (true, false) => "server CPU/request",
        (false, true) => "instr/msg",
        (false, false) => "instructions/message",
    }
}

/// A comparison's primary metric's word: what its verdicts lead with.
pub fn primary(c: &Comparison) -> &'static str {
    metric(c.primary_metric())
}

/// A metric's word: its name ([`Metric::name`]).
pub fn metric(m: Metric) -> &'static str {
    m.name()
}

/// "4.8 % faster, 95 % CI [2.1, 7.4]" (CI bounds as speed-ups, so both positive when faster).
pub fn estimate(e: &Estimate) -> String {
    let (word, x) = (direction(e.change_pct), e.change_pct.abs());
    let (a, b) = if e.change_pct <= 0.0 {
        (-e.ci_high_pct, -e.ci_low_pct)
    } else {
        (e.ci_low_pct, e.ci_high_pct)
    };
    // A comparison that settled at an early look: its interval is the look's, wider than its
    // target (`sequential.rs`).
    let settled = match e.alpha {
        Some(alpha) if alpha < sequential::ALPHA_PLANNED => {
            format!(" (settled after {})", e.pairs)
        }
        _ => String::new(),
    };
    format!("{x:.1} % {word}, 95 % CI [{a:.1}, {b:.1}]{settled}")
}

/// A signed change with its interval, where the record keeps no [`Estimate`]:
/// "−1.23 % [−1.80, −0.66]" (negative: faster).
pub fn signed(change_pct: f64, low_pct: f64, high_pct: f64) -> String {
    format!("{change_pct:+.2} % [{low_pct:+.2}, {high_pct:+.2}]")
}

/// A share of the oracle's gain, or why there is none: "capture 66 %".
pub fn capture_pct(pct: Option<f64>) -> String {
    pct.map_or("no oracle gain".to_string(), |c| {
        format!("capture {c:.0} %")
    })
}

/// The direction of a change: "faster" below 0, "slower" above.
fn direction(change_pct: f64) -> &'static str {
    if change_pct <= 0.0 {
        "faster"
    } else {
        "slower"
    }
}

/// An estimate without its level: "4.8 % faster [2.1, 7.4]" (a table's cell).
pub fn estimate_short(e: &Estimate) -> String {
    estimate(e).replace("95 % CI ", "")
}

/// The layout floor in a few words: "layout floor ±1.6 %", or that it was not measured.
pub fn layout_floor_short(floor_pct: Option<f64>) -> String {
    match floor_pct {
        Some(f) => format!("layout floor ±{f:.1} %"),
        None => "layout floor not measured on this workload".to_string(),
    }
}

/// The A/A floor: the farther bound of the A/A arm's interval from 0
/// (`stats::noise_floor_pct`), the run's precision, not a threshold.
pub fn aa_floor(floor_pct: f64) -> String {
    format!("A/A floor ±{floor_pct:.1} %")
}

/// The min effect as a threshold: "min effect ±1.0 %".
pub fn min_effect(pct: f64) -> String {
    format!("{} ±{pct:.1} %", bound(Bound::MinEffect))
}

/// A ratio with its interval: "1.040× [1.030, 1.050]".
pub fn ratio(e: &Estimate) -> String {
    let r = |pct: f64| 1.0 + pct / 100.0;
    format!(
        "{:.3}× [{:.3}, {:.3}]",
        e.ratio,
        r(e.ci_low_pct),
        r(e.ci_high_pct)
    )
}

/// The capture in a sentence: "The training gets 66 % [62, 69] of the oracle's gain over lto."
pub fn capture_short(c: &stats::Capture) -> String {
    format!(
        "The training gets {:.0} % [{:.0}, {:.0}] of the oracle's gain over lto.",
        c.pct, c.ci_low_pct, c.ci_high_pct
    )
}

/// How far BOLT's profile reaches: "1021 of 4003 functions have a non-empty profile".
pub fn bolt_profiled(profiled: u64, total: u64) -> String {
    format!("{profiled} of {total} functions have a non-empty profile")
}

/// Whether an interval holds 0, as the null arm's should.
pub fn zero(e: &Estimate) -> &'static str {
    if e.holds_zero() {
        "holds 0"
    } else {
        "does NOT hold 0"
    }
}

/// What a comparison was judged against: "±1.0 %, min effect".
pub fn threshold(j: &Judged) -> String {
    format!("±{:.1} %, {}", j.threshold_pct, bound(j.bound))
}

/// A judged comparison with what it was judged against: "… → faster (±1.0 %, min effect)".
pub fn judged_against(j: &Judged) -> String {
    format!("{} ({})", judged(j), threshold(j))
}

/// Every metric's judgement but the primary one's: "p95: … → …; p99: … → …".
pub fn other_metrics(c: &Comparison) -> String {
    c.iter()
        .filter(|(m, _)| *m != c.primary_metric())
        .map(|(m, j)| format!("{}: {}", metric(m), judged(j)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Every metric's judgement: "median … → faster; p95 … → …; p99 … → …".
pub fn comparison(c: &Comparison) -> String {
    c.iter()
        .map(|(m, j)| format!("{} {}", metric(m), judged(j)))
        .collect::<Vec<_>>()
        .join("; ")
}
pub fn judged(j: &Judged) -> String {
    format!("{} → {}", estimate(&j.estimate), verdict(j.verdict))
}

/// The apply check's verdict: "APPLIED", "NOT APPLIED", or applied but for stale functions.
pub fn apply_verdict(a: &ApplyReport) -> String {
    if a.applied() {
        "APPLIED".to_string()
    } else if a.applied_but_stale() {
        format!(
            "APPLIED EXCEPT {} STALE FUNCTION(S) (hash mismatch, --allow-stale)",
            a.required_mismatched
        )
    } else {
        "NOT APPLIED".to_string()
    }
}

/// What the apply check rests on: rustc's warnings for the required code and everywhere.
pub fn apply_detail(a: &ApplyReport, required: &[String]) -> String {
    let crates = a
        .per_crate
        .iter()
        .map(|(k, c)| format!("{k} {}/{}", c.missing, c.mismatch))
        .collect::<Vec<_>>()
        .join(", ");
    let mut detail = format!(
        "{} of the required functions ({}) lack profile data or mismatch",
        a.required_violations.len(),
        required.join(", "),
    );
    if !a.required_violations.is_empty() {
        let first: Vec<&str> = a
            .required_violations
            .iter()
            .take(3)
            .map(String::as_str)
            .collect();
        let _ = write!(detail, " (first: {})", first.join(", "));
    }
    let _ = write!(
        detail,
        "; all crates: {} without profile data, {} hash mismatches{}",
        a.missing_total,
        a.mismatch_total,
        if crates.is_empty() {
            String::new()
        } else {
            format!(" (crate missing/mismatch: {crates})")
        }
    );
    detail
}

/// "this commit against abc123 (HEAD~3)"
pub fn against_title(a: &Against) -> String {
    format!(
        "this commit against {} ({})",
        &a.commit[..a.commit.len().min(12)],
        a.rev
    )
}

pub fn bound(b: Bound) -> &'static str {
    match b {
        Bound::MinEffect => "min effect",
        Bound::LayoutFloor => "layout floor",
        Bound::LayoutRange => "farthest layout measured",
    }
}
/// What it stopped on: "settled beyond ±1.0 % (0.50 % spent at this look)", "its target
/// ±2 % (the pilot asked for 38)", "session cap (±1 % asked for 900)".
pub fn stop(c: &ComparisonStop) -> String {
    // A measured comparison's target is a share of its estimate: two decimals at most.
    let target = (c.target_half_width_pct * 100.0).round() / 100.0;
    let asked = c.needed.unwrap_or(c.sessions);
    match c.reason {
        StopReason::Settled => match c.settled_at {
            Some(at) => format!(
                "settled after {at}: beyond ±{:.1} % by more than its half-width; its arms ran on in later sessions, so its interval is of all {} ({:.0} % error)",
                c.threshold_pct.unwrap_or(0.0),
                c.sessions,
                100.0 * c.alpha
            ),
            None => format!(
                "settled: beyond ±{:.1} % by more than its half-width ({:.2} % error spent at this look)",
                c.threshold_pct.unwrap_or(0.0),
                100.0 * c.alpha
            ),
        },
        StopReason::Target if c.unit == Unit::Turn => format!(
            "its target ±{target} %, turns as the unit (its sessions showed no component of their own; the pilot's {} asked for {asked})",
            c.pilot
        ),
        // Pairs: every run from a copy of its own, or sessions tested as above.
        StopReason::Target if c.unit == Unit::Pair => format!(
            "its target ±{target} %, pairs as the unit (the pilot's {} asked for {asked})",
            c.pilot
        ),
        StopReason::Target => format!("its target ±{target} % (the pilot asked for {asked})"),
        StopReason::SessionCap => format!("session cap (±{target} % asked for {asked})"),
        StopReason::TimeCap => format!("time cap (±{target} % asked for {asked})"),
        StopReason::Fixed => "fixed count (no target)".to_string(),
    }
}

/// Why a workload's sessions stopped: "the count planned for ±1 % (the pilot of 12 asked for
/// 48)", "session cap (the pilot of 4 asked for 900)".
pub fn stop_reason(s: &Stopping) -> String {
    let asked = match s.needed {
        Some(n) => format!(" (the pilot of {} asked for {n})", s.pilot),
        None => String::new(),
    };
    let why = match s.reason {
        StopReason::Target => {
            format!("the count planned for ±{} %", s.target_half_width_pct)
        }
        StopReason::Settled => "its last comparison settled at a look".to_string(),
        StopReason::SessionCap => "session cap".to_string(),
        StopReason::TimeCap => "time cap".to_string(),
        StopReason::Fixed => "fixed count (no target)".to_string(),
    };
    format!("{why}{asked}")
}

/// "48 sessions in 3.4 s: the count planned for ±1 % (the pilot of 12 asked for 48)": the
/// count the pilot's spread asks for, not a promise that every interval came out within the
/// target (the interval is also the whole sample's, and a pilot may underestimate).
pub fn stopping(s: &Stopping) -> String {
    let settled = s
        .comparisons
        .iter()
        .filter(|c| c.reason == StopReason::Settled)
        .count();
    let early = if settled > 0 {
        format!(
            "; {settled} of {} comparisons settled early",
            s.comparisons.len()
        )
    } else {
        String::new()
    };
    format!(
        "{} sessions in {:.1} s: {}{early}",
        s.sessions,
        s.secs,
        stop_reason(s)
    )
}

/// A comparison's unit, plural: "sessions", "turns", "pairs".
pub fn units(u: Unit) -> &'static str {
    match u {
        Unit::Session => "sessions",
        Unit::Turn => "turns",
        Unit::Pair => "pairs",
    }
}

/// What a watched comparison was for.
pub fn role(r: Role) -> &'static str {
    match r {
        Role::Verdict => "verdict",
        Role::Measured => "verdict, measured to its target",
        Role::Null => "null",
        Role::Layout => "layout floor",
        Role::Oracle => "capture",
    }
}
