//! The report's lines about one workload's analysis, worded from `words.rs`'s atoms: the
//! null arm and run components, the machine's load, the layout floor and gains, the capture,
//! BOLT, `--against`'s answer and the apply check's closing lines.

use std::fmt::Write as _;

use super::words::{apply_detail, apply_verdict, estimate, judged_against, verdict, zero};
use crate::analysis::{self, LayoutFloor, LayoutGain, MachineState, WorkloadAnalysis};
use crate::report::{Against, Report};

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

/// One line a workload: each build's change with its interval and verdict.
pub fn against_lines(a: &Against) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut last = "";
    for r in &a.results {
        let part = format!(
            "{} {} {}",
            r.build,
            crate::report::words::metric(r.metric),
            judged_against(&r.primary)
        );
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
        // The same verdict in every layout.
        Some(v) => format!(
            "{} against release: {} whatever the layout ({range})",
            g.build,
            verdict(v)
        ),
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

/// A service judged by CPU per request: its saturated turns and its server's idle CPU.
pub fn service(w: &WorkloadAnalysis) -> Option<String> {
    let s = w.service.as_ref()?;
    let mut line = match s.saturated_turns {
        0 => format!(
            "server CPU per request: its threads' CPU time over each turn's recorded window, over the requests answered in it; no turn of {} saturated",
            s.turns
        ),
        n => format!(
            "server CPU per request: its threads' CPU time over each turn's recorded window, over the requests answered in it; {n} of {} turns saturated (the server fell behind the offered rate, {:.1} %): kept in the estimate, their CPU per request is not comparable with the others' (a few: the machine stalled at a turn's end; many: the rate is beyond the server, lower it)",
            s.turns,
            100.0 * n as f64 / s.turns.max(1) as f64
        ),
    };
    if let Some(idle) = s.idle_cpu_ns_per_s {
        line += &format!(
            "; with no load release's server used {:.1} µs of CPU a second (its runtime's idle polling, in every turn's figure)",
            idle / 1e3
        );
    }
    Some(line)
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
