//! report.md's record of the run: what was built and how, the stages, the measurement
//! protocol, and the raw figures of every session.

use std::fmt::Write as _;

use crate::measure::{BASELINE, BASELINE_AGAIN};
use crate::report::Report;
use stats::median;

/// How the figures were made: protocol, disturbance rule, instructions, profile, toolchain.
pub(super) fn render(md: &mut String, report: &Report) {
    let env = &report.environment;
    let cfg = &report.config.settings;
    let _ = writeln!(md, "## Recorded values\n");
    let m = &cfg.measure;
    protocol(md, m, report.seed);
    let whole: Vec<&str> = m
        .workloads
        .iter()
        .filter(|w| w.mode == crate::config::Mode::Process)
        .map(|w| w.name.as_str())
        .collect();
    if !whole.is_empty() {
        let _ = writeln!(
            md,
            "- Whole-process workloads ({}): each arm is `cargo-mty __process-arm`, which runs the command once to warm up, \
             then per turn once (or `batch_messages` times) on the measured core; the sample is the run's wall time from spawn \
             to exit (or the figure it printed under `metric`); no clock steps, no tail per turn (one run).",
            whole
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let services: Vec<&str> = m
        .workloads
        .iter()
        .filter(|w| w.mode == crate::config::Mode::Service)
        .map(|w| w.name.as_str())
        .collect();
    if !services.is_empty() {
        let _ = writeln!(
            md,
            "- Service workloads ({}): each arm is `cargo-mty __service-arm`, which starts its build's server on a port of its own \
             and warms it with one driver run; per turn the server's threads sit on the measured core and the driver runs once on \
             the other cores; judged by CPU (`metric` unset), the turn's primary figure is the server's CPU time per request \
             the driver printed (`cpu_per_request_ns`: the server's threads' CPU time over the recorded window over the answers in it), \
             judged against `measure.cpu_min_effect_pct` ({} %), and its p50, p95 and p99 are the latency beside it; otherwise \
             the sample is the figure the driver printed under `metric` (e.g. its p50 or p99 over the run, timed from each \
             request's intended send time).",
            services.join(", "),
            m.cpu_min_effect_pct
        );
    }
    let _ = writeln!(
        md,
        "- Instructions per message: `valgrind --tool=callgrind`, runs of N and 2N messages (N = {}), differenced.",
        cfg.instructions.messages
    );
    let _ = writeln!(
        md,
        "- Profile: `{}` ({} functions, max function count {}, total count {}): {}; {}.",
        report.profile.path.display(),
        report.profile.functions,
        report.profile.max_function_count,
        report.profile.total_count,
        crate::report::words::apply_verdict(&report.apply_check),
        crate::report::words::apply_detail(
            &report.apply_check,
            &report.config.settings.apply_check.required
        )
    );
    if !report.profile.origin.is_empty() {
        let _ = writeln!(md, "- Profile origin: {}.", report.profile.origin);
    }
    for b in &report.builds {
        let flags = if b.rustflags.is_empty() {
            "no rustflags".to_string()
        } else {
            format!("rustflags `{}`", b.rustflags)
        };
        let user = if b.user_rustflags_source.is_empty() {
            "none of the user's".to_string()
        } else {
            format!("the user's from {}", b.user_rustflags_source)
        };
        let _ = writeln!(
            md,
            "- Build `{}`: cargo profile `{}`, {flags} ({user}).",
            b.name(),
            b.cargo_profile
        );
    }
    if !report.stages.is_empty() {
        let stages: Vec<String> = report
            .stages
            .iter()
            .map(|s| {
                let outcome = match s.outcome {
                    crate::base::stages::Outcome::Ran => "ran",
                    crate::base::stages::Outcome::Reused => "reused (up to date)",
                    crate::base::stages::Outcome::Skipped => "skipped",
                    crate::base::stages::Outcome::Failed => "failed",
                };
                format!("{} {outcome}", s.stage)
            })
            .collect();
        let _ = writeln!(
            md,
            "- Stages of the run that wrote this report: {}.",
            stages.join(", ")
        );
    }
    let _ = writeln!(
        md,
        "- llvm-profdata: `{}` ({})",
        env.llvm_profdata.display(),
        env.llvm_profdata_version
    );
    let _ = writeln!(
        md,
        "- `rustc -vV`:\n\n```text\n{}\n```\n",
        env.rustc_vv.trim_end()
    );
}

/// The measurement protocol, in a sentence or two.
fn protocol(md: &mut String, m: &crate::config::Measure, seed: u64) {
    let l = &m.lockstep;
    let _ = writeln!(
        md,
        "- Protocol: **lockstep**. Per workload sessions of new processes: release, the null arm (release again: the A/A arm) \
         and each other build, each from a fresh copy of its file where `measure.fresh_copies` is on, live for the whole \
         session, {}, started and warmed \
         up on another core while the session before takes its turns, moved onto their core, then {} rounds in which each arm \
         in a random order runs one batch of {} messages while the others wait; the spawn order, the order of the moves and \
         every turn order are drawn per session from the run's seed ({seed}; `--seed {seed}` replays them), and so is each \
         arm's heap offset where `measure.shift_heap` is on (its path run with 0–2047 more leading slashes). Per session, the \
         median over rounds of ln(arm batch / release batch of the same round) (robust to the machine's speed flips); the \
         estimate is the {trim:.0} % trimmed mean over sessions. Sessions stop by Stein's two-stage rule: a pilot of {} sessions, then \
         as many as its spread asks for a 95 % interval of ±{} % (a workload's own target where it has one) on every median \
         comparison (at most {} sessions, {} s a workload); lto and lto+pgo run to theirs (or {share:.0} % of their estimate), never \
         stopping early. A build's interval also carries a run component where earlier runs of the same executables \
         scattered beyond their intervals (ARCHITECTURE.md, \"The statistical model\"); the null arm is a diagnostic whose \
         interval should hold 0. \
         Verdicts only beyond max({} %, and for a build laid out differently from release the layout floor where measured: \
         release relinked in random function orders, this run's and earlier runs' of the same executable, the farther bound \
         of the 95 % prediction interval of another layout's shift; from fewer than {} layouts, no more than the farthest \
         layout measured). The clock ticks in steps (a message reads one step or the next, never between), so a batch's \
         median, p95 and p99 are interpolated within the step that holds them, as for grouped data; `--messages` is not used \
         in this mode.",
        match (l.share_core, m.pin_core) {
            (false, _) =>
                "not pinned (`lockstep.share_core = false`: the workloads run several threads)"
                    .into(),
            (true, Some(c)) => format!("all pinned to CPU {c}"),
            (true, None) => "all pinned to the last CPU".into(),
        },
        l.rounds,
        l.batch_messages,
        l.min_sessions,
        m.target_half_width_pct,
        l.sessions,
        l.max_secs,
        m.min_effect_pct,
        crate::analysis::LayoutFloor::VETO_LAYOUTS,
        trim = 100.0 * stats::sequential::TRIM,
        share = 100.0 * crate::measure::stops::MEASURED_SHARE,
    );
    for line in m.workloads.iter().filter_map(|w| w.own_lockstep_line(l)) {
        let _ = writeln!(md, "{line}");
    }
}

/// Lockstep: per session, each arm's median over its rounds of the batch medians.
pub(super) fn raw_nanos(md: &mut String, report: &Report) {
    let _ = writeln!(
        md,
        "## Raw nanos\n\nPer session, each arm's median over its rounds of the batch medians (ns); `rounds.svg` shows one session round by round; every batch is in report.json.\n"
    );
    let arms = arm_names(report);
    for w in &report.workloads {
        let mine: Vec<_> = report
            .sessions
            .iter()
            .filter(|s| s.workload == w.workload)
            .collect();
        let _ = writeln!(
            md,
            "<details><summary><code>{}</code>: {} sessions</summary>\n\n| session | {} |\n|---:|{}",
            w.workload,
            mine.len(),
            arms.join(" | "),
            "---:|".repeat(arms.len())
        );
        for s in mine {
            let cells: Vec<String> = arms
                .iter()
                .map(|a| {
                    s.arm(a)
                        .and_then(|b| median(&b.iter().map(|b| b.median_ns).collect::<Vec<_>>()))
                        .map_or_else(|| "-".into(), |m| format!("{m:.1}"))
                })
                .collect();
            let _ = writeln!(md, "| {} | {} |", s.session, cells.join(" | "));
        }
        let _ = writeln!(md, "\n</details>\n");
    }
}

/// Every arm measured: release, its A/A twin, then the other builds.
fn arm_names(report: &Report) -> Vec<&str> {
    let mut arms = vec![BASELINE, BASELINE_AGAIN];
    arms.extend(
        report
            .builds
            .iter()
            .map(|b| b.name())
            .filter(|n| *n != BASELINE),
    );
    arms
}
