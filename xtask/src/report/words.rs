//! Every sentence the report says of a judged value, in one place: the terminal table,
//! report.md, the SVG labels, the gate's messages and the commands' summaries all render from
//! these functions, and the layers below return values, not words. A verdict's wording is
//! one edit here.

use std::fmt::Write as _;

use crate::analysis::{
    self, Bound, Comparison, Judged, LayoutFloor, LayoutGain, MachineState, WorkloadAnalysis,
};
use crate::measure::session::Metric;
use crate::measure::stops::Unit;
use crate::measure::{ComparisonStop, Role, StopReason, Stopping};
use crate::report::{Against, Report};
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

/// A metric's word: its name ([`Metric::name`]).
pub fn metric(m: Metric) -> &'static str {
    m.name()
}

/// "4.8 % faster, 95 % CI [2.1, 7.4]" (CI bounds as speed-ups, so both positive when faster).
pub fn estimate(e: &Estimate) -> String {
    let (word, x) = if e.change_pct <= 0.0 {
        ("faster", -e.change_pct)
    } else {
        ("slower", e.change_pct)
    };
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
        .filter(|(m, _)| *m != Metric::PRIMARY)
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

pub fn floor_line(report: &Report, w: &WorkloadAnalysis) -> String {
    let mut line = nulls_line(w);
    let paired = report
        .sessions
        .iter()
        .any(|s| s.workload == w.workload && s.paired);
    if let Some(c) = &w.components {
        let _ = write!(
            line,
            "; A/A sd of {} {:.2} %, of sessions {:.2} %",
            if paired { "pairs" } else { "rounds" },
            100.0 * c.rounds_sd,
            100.0 * c.sessions_sd
        );
    }
    if paired {
        line += " (whole-process: one run a turn, each comparison's two runs side by side)";
    } else if report.whole_process(&w.workload) {
        line += " (whole-process: one run a turn)";
    }
    if let Some(m) = &w.machine {
        let _ = write!(line, "\n  {}", machine(m, w.sessions));
    }
    line
}

/// The null arm (it should hold 0) and what each build's interval carries beyond its
/// sessions: its run component, where runs of the same executables showed one.
pub fn nulls_line(w: &WorkloadAnalysis) -> String {
    let mut parts: Vec<String> = w
        .nulls
        .iter()
        .map(|(arm, e)| {
            format!(
                "{arm} {:+.2} % [{:+.2}, {:+.2}]{}",
                e.change_pct,
                e.ci_low_pct,
                e.ci_high_pct,
                if e.holds_zero() {
                    String::new()
                } else {
                    format!(" ({})", zero(e))
                }
            )
        })
        .collect();
    if parts.is_empty() {
        parts.push(format!("A/A {}", estimate(&w.aa.primary().estimate)));
    }
    let files = if w.fresh_copies {
        "every arm from a fresh copy of its file each session"
    } else {
        "each arm from its own file (`measure.fresh_copies = false`): what stays with a file is in no interval"
    };
    format!("null arm: {} ({files}); {}", parts.join(", "), runs_text(w))
}

/// What runs of the same executables say, per build, in a few words; for a build that carries
/// a component, what it added to the median's interval.
pub fn runs_text(w: &WorkloadAnalysis) -> String {
    let runs = &w.runs;
    // A build's median interval as judged, and its sessions' alone (from their standard
    // error, at the interval's own error and degrees of freedom), half-widths in %.
    let halves = |build: &str| -> Option<(f64, f64)> {
        let e = &w
            .rows
            .iter()
            .find(|r| r.build == build)?
            .vs_release
            .as_ref()?
            .primary()
            .estimate;
        let se = w.raw.iter().find(|(b, _, _)| b == build)?.2;
        let alone = 100.0 * stats::sequential::t_two_sided(e.df?.max(1), e.alpha()) * se;
        Some(((e.ci_high_pct - e.ci_low_pct) / 2.0, alone))
    };
    if runs.is_empty() || runs.iter().all(|(_, t)| t.runs <= 1) {
        return "run component: none estimated (no earlier run of these executables: intervals are this run's sessions alone)".to_string();
    }
    let level = stats::components::RUN_TEST_LEVEL;
    let each: Vec<String> = runs
        .iter()
        .map(|(build, t)| match t.carried {
            _ if t.runs <= 1 => format!("{build} first run"),
            Some(c) => format!(
                "{build} CARRIES sd {:.2} % ({} runs scatter beyond their intervals: p {:.2}; {} degree{} of freedom){}",
                100.0 * c.sd,
                t.runs,
                t.p,
                c.df,
                if c.df == 1 { "" } else { "s" },
                halves(build)
                    .map(|(judged, alone)| format!(
                        ": its interval ±{judged:.2} % where its sessions alone give ±{alone:.2} %"
                    ))
                    .unwrap_or_default()
            ),
            None if t.seen() => format!(
                "{build} scatters beyond its intervals ({} runs, p {:.2}): not carried until {} runs (few runs give Student's t of 4 to 13)",
                t.runs,
                t.p,
                stats::components::MIN_RUN_DF + 1
            ),
            None => format!("{build} none ({} runs, p {:.2})", t.runs, t.p),
        })
        .collect();
    format!(
        "run component (carried where runs of the same executables scatter beyond their intervals, Cochran's Q at p < {level}): {}",
        each.join("; ")
    )
}

pub fn judged(j: &Judged) -> String {
    format!("{} → {}", estimate(&j.estimate), verdict(j.verdict))
}

/// The layout floor and what the relinked builds' layouts say, one line each; none where the
/// workload's sessions carried no layout variants.
pub fn layout_lines(w: &WorkloadAnalysis) -> Vec<String> {
    let Some(l) = &w.layout else {
        return Vec::new();
    };
    let mut lines = vec![layout_floor(l)];
    lines.extend(l.gains.iter().map(layout_gain));
    for (arm, e) in &l.bolt_vs_layouts {
        lines.push(format!(
            "lto+pgo+bolt against {arm} (a random layout of lto+pgo): {}",
            estimate(e)
        ));
    }
    lines
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

/// The profile, the apply check's verdict and what it rests on, with the profile's origin
/// and any raw profile merged without: the table's closing lines.
pub fn apply_line(report: &Report) -> String {
    let mut line = format!(
        "profile {} ({} functions, total count {}): {}\n  {}\n",
        report.profile.hash,
        report.profile.functions,
        report.profile.total_count,
        apply_verdict(&report.apply_check),
        apply_detail(
            &report.apply_check,
            &report.config.settings.apply_check.required
        )
    );
    if !report.profile.origin.is_empty() {
        let _ = writeln!(line, "  origin: {}", report.profile.origin);
    }
    if !report.profile.skipped_raw.is_empty() {
        let _ = writeln!(
            line,
            "  merged without {} unreadable raw profile(s) (--skip-bad-profiles): {}",
            report.profile.skipped_raw.len(),
            report.profile.skipped_raw.join("; ")
        );
    }
    line
}

/// "this commit against abc123 (HEAD~3)"
pub fn against_title(a: &Against) -> String {
    format!(
        "this commit against {} ({})",
        &a.commit[..a.commit.len().min(12)],
        a.rev
    )
}

/// One line a workload: each build's change with its interval and verdict.
pub fn against_lines(a: &Against) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut last = "";
    for r in &a.results {
        let part = format!("{} {}", r.build, judged_against(&r.primary));
        if r.workload == last {
            let line = lines.last_mut().expect("a line per workload");
            line.push_str("; ");
            line.push_str(&part);
        } else {
            lines.push(format!("{}: {part}", r.workload));
            last = &r.workload;
        }
    }
    lines
}

pub fn bound(b: Bound) -> &'static str {
    match b {
        Bound::MinEffect => "min effect",
        Bound::LayoutFloor => "layout floor",
        Bound::LayoutRange => "farthest layout measured",
    }
}

/// "layout floor ±1.6 % (12 layouts of release: −1.0 to +0.1 %, sd 0.4 %)".
pub fn layout_floor(l: &LayoutFloor) -> String {
    let veto = if l.layouts >= LayoutFloor::VETO_LAYOUTS {
        String::new()
    } else {
        format!(
            "; from fewer than {} layouts it does not veto a verdict beyond every layout measured",
            LayoutFloor::VETO_LAYOUTS
        )
    };
    format!(
        "layout floor ±{:.1} % ({} layouts of {} measured against it, {} in this run, each within ±{:.1} %: {:+.1} to {:+.1} %; another layout would land in [{:+.1}, {:+.1}] %{veto})",
        l.floor_pct,
        l.layouts,
        l.build,
        l.variants.len(),
        l.max_half_width_pct,
        l.lowest_pct,
        l.highest_pct,
        l.low_pct,
        l.high_pct
    )
}

pub fn layout_gain(g: &LayoutGain) -> String {
    let range = format!(
        "range over {} layouts: [{:+.1}, {:+.1}] %",
        g.layouts.len(),
        g.low_pct,
        g.high_pct
    );
    match g.verdict {
        Some(Verdict::Faster) => format!(
            "{} is faster than release whatever the layout ({range})",
            g.build
        ),
        Some(Verdict::Slower) => format!(
            "{} is slower than release whatever the layout ({range})",
            g.build
        ),
        Some(Verdict::NoDetectableChange | Verdict::NotJudged) => {
            format!(
                "{} shows no detectable change in any layout ({range})",
                g.build
            )
        }
        None => format!(
            "{}'s change depends on its layout: within layout luck ({range})",
            g.build
        ),
    }
}

pub fn machine(m: &MachineState, sessions: usize) -> String {
    let setup = m
        .setup_median_pct
        .map(|s| format!(", the set-up core {s:.0} %"))
        .unwrap_or_default();
    let mut line = format!(
        "other processes beside the sessions: median {:.1} % of the arms' core(s) (the hypervisor's steal {:.1} %), at most {:.0} %{setup}",
        m.median_pct, m.steal_median_pct, m.max_pct
    );
    if !m.disturbed.is_empty() {
        let list: Vec<String> = m.disturbed.iter().map(|s| (s + 1).to_string()).collect();
        line += &format!(
            "; {} of {sessions} sessions disturbed (over {:.0} %): {}",
            m.disturbed.len(),
            m.limit_pct,
            list.join(", ")
        );
        if m.left_out {
            line += ". This workload's threads use every core, so its figures depend on the machine's load: the disturbed sessions are left out; rerun on a quiet machine to use them";
        }
        if m.unjudged {
            line += ". This workload's threads use every core, so its figures depend on the machine's load, and too few sessions ran undisturbed: its verdicts are not judged; rerun on a quiet machine";
        }
    }
    line
}

/// One line per comparison whose sessions fell into two speeds.
pub fn speeds(w: &WorkloadAnalysis) -> Vec<String> {
    let pct = |x: f64| 100.0 * x.exp_m1();
    w.speeds
        .iter()
        .map(|(arm, s)| {
            format!(
                "{arm}'s sessions fall into two speeds: {:.0} % of them at {:+.1} % against release, {:.0} % at {:+.1} % (its interval pools both; how the shares fall can move from run to run)",
                100.0 * s.low_share,
                pct(s.low),
                100.0 * (1.0 - s.low_share),
                pct(s.high)
            )
        })
        .collect()
}

/// The capture in words, or `None` without an oracle.
pub fn capture(w: &WorkloadAnalysis) -> Option<String> {
    let Some(c) = w.capture.as_ref() else {
        return w.rows.iter().any(|r| r.build == analysis::ORACLE).then(|| {
            "no share of the oracle's gain: the oracle's gain over lto is not distinguishable from 0 (or too few sessions)".to_string()
        });
    };
    let mut line = format!(
        "the training captures {:.0} % [{:.0}, {:.0}] of the gain an oracle profile (trained on the measured workload itself) gets over lto: lto+pgo {:.1} % faster than lto, oracle {:.1} %",
        c.pct, c.ci_low_pct, c.ci_high_pct, c.candidate_gain_pct, c.oracle_gain_pct
    );
    if let Some(i) = w.instruction_capture() {
        line += &format!(
            "; of the instructions per message the oracle saves, {:.0} % (lto {:.0}, lto+pgo {:.0}, oracle {:.0}: no noise, but not time)",
            i.pct, i.lto, i.pgo, i.oracle
        );
    }
    Some(line)
}

/// What BOLT adds on top of PGO, in words, or `None` without a BOLT build.
pub fn bolt(w: &WorkloadAnalysis) -> Option<String> {
    let e = w.bolt_vs_pgo.as_ref()?;
    Some(format!("lto+pgo+bolt against lto+pgo: {}", estimate(e)))
}

/// What the figures rest on, in words: "12 sessions × 200 rounds (lockstep)".
pub fn basis(w: &WorkloadAnalysis) -> String {
    format!(
        "{} sessions × {} rounds (lockstep)",
        w.sessions, w.rounds_per_session
    )
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
