//! `cargo xtask calibrate`: the tool proving its own sensitivity. Release is measured
//! against release with a known effect injected (`mty-bench --inject-ns N`: N ns added to
//! every measured round trip), at several sizes, in lockstep sessions beside the A/A arm: the
//! 0 % row is the false-positive check, the others show what is detected and how wide the
//! interval is. The arms' places are drawn per session and every size draws its own seed, so
//! the injected arm and the A/A arm swap places from session to session. `--repeat R` does it
//! all R times with fresh seeds: how often each size's verdicts agree, and whether its
//! intervals overlap (replication as a check).
//! The injected size in % is measured, not assumed: N over release's batch median of the same
//! round (the machine's speed flips change it).
//!
//! A service workload judged by CPU per request is calibrated the same way with the server's
//! own `--spin-ns N`: a fixed amount of work, timed at the server's start to take about N ns
//! (by its thread's CPU clock, so that the other arms setting up beside it do not count),
//! added to every request it handles (the example service has it). The injected size is what
//! the spin cost in the turns over release's CPU per request of the same round: the server
//! times each request's spin and says so in `x-spin-ns`, which mty-loadgen sums over the
//! window (`--sum-header`, added here), less release's (its spin of 0: the clock's own cost).
//! A spin of a few hundred iterations between other work costs more than its start-up timing
//! (docs/results/2026-12-05-service-cpu.md). With another driver the size is N.
//!
//! Why added nanoseconds and not extra work: a dependent multiply-add chain inside the timed
//! region was tried first. Unfenced, the out-of-order core ran it beside the round trip's own
//! waits (a chain added a fraction of its own cost, and one seeded by the received message
//! added nothing measurable: the clock read does not wait for it); fenced with `lfence`, the
//! fence alone cost a sizeable share of a round trip, so no size under it could be made. Added nanoseconds are exact at every size; what they check is the protocol and the
//! statistics against this machine's noise, which is what the calibration is for.

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::ctx::Ctx;
use crate::analysis::history::History;
use crate::analysis::sessions::Pooled;
use crate::analysis::{self, Judged};
use crate::base::fsx;
use crate::config::Measure;
use crate::measure::session::Metric;
use crate::measure::{self, BASELINE, BASELINE_AGAIN};
use crate::toolchain::build::{Build, Built};
use crate::toolchain::tools::Toolchain;

mod injection;
pub use injection::INJECTED;
use injection::{Injection, arm, asks_for_the_spin, injected_pct, scaled};
use stats::median;
use stats::{self, Estimate, Verdict};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationRow {
    /// The size asked for, in % of the workload's median.
    pub target_pct: f64,
    /// Nanoseconds added to every round trip (`--inject-ns`), or of CPU to every request
    /// (`--spin-ns`).
    pub inject_ns: u64,
    /// The size as measured: `inject_ns` over release's batch median (CPU per request),
    /// round by round.
    pub injected_pct: f64,
    /// The injected arm against release (its sessions' interval), judged against
    /// `calibrate.min_effect_pct`.
    pub detected: Judged,
    /// The A/A arm against release in the same sessions (its interval should hold 0).
    pub aa: Estimate,
    /// The seed of these sessions (`--seed` replays them).
    pub seed: u64,
    pub wall_secs: f64,
    /// How many sessions the stopping rule ran and why it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<crate::measure::Stopping>,
}

/// One size over the repeats: do the verdicts agree, do the intervals overlap.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replication {
    pub target_pct: f64,
    pub runs: usize,
    /// How many runs said each verdict.
    pub verdicts: Vec<(Verdict, usize)>,
    /// The share of runs that said the most common verdict (%).
    pub agree_pct: f64,
    /// Mean over runs of the detected change and of the injected size (%).
    pub mean_change_pct: f64,
    pub mean_injected_pct: f64,
    /// Whether one point lies in every run's interval.
    pub intervals_overlap: bool,
    /// Runs whose A/A interval did not hold 0.
    pub aa_off_zero: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Calibration {
    pub workload: String,
    /// Release's primary figure in the probe (its median; a service's CPU per request),
    /// which sizes the injections.
    pub probe_median_ns: f64,
    /// Every repeat's rows, in order.
    pub rows: Vec<CalibrationRow>,
    /// Per size, over the repeats (with `--repeat` 2 or more).
    #[serde(default)]
    pub replication: Vec<Replication>,
}

pub fn run(ctx: &Ctx, toolchain: &Toolchain, repeat: u32) -> Result<Calibration> {
    let cfg = &ctx.config.settings;
    // Resolved: paths against the workspace, a service's driver program found.
    let measure = ctx.measure_config()?;
    let workload = match &cfg.calibrate.workload {
        Some(name) => measure
            .workloads
            .iter()
            .find(|w| &w.name == name)
            .with_context(|| format!("`calibrate.workload` `{name}` is not measured"))?,
        None => &measure.workloads[0],
    };
    let injection = match workload.mode {
        crate::config::Mode::Lockstep => Injection::RoundTrip,
        crate::config::Mode::Service => Injection::ServerCpu,
        crate::config::Mode::Process => bail!(
            "`calibrate` injects a known cost into every timed iteration (`--inject-ns`) or every request a server handles (`--spin-ns`), which a whole-process workload (`{}`) has no place for: name an in-process or service workload in `calibrate.workload`",
            workload.name
        ),
    };
    let workload = &asks_for_the_spin(workload.clone(), injection);
    let release = &release_build(ctx, toolchain)?;
    let name = &workload.name;
    let one = |m: &Measure| Measure {
        workloads: vec![workload.clone()],
        ..m.clone()
    };
    // Probe: what a message costs now, to size the injections.
    let mut probe_cfg = one(&measure);
    probe_cfg.lockstep.sessions = 2;
    probe_cfg.lockstep.rounds = 10;
    probe_cfg.lockstep.min_sessions = 2;
    probe_cfg.target_half_width_pct = 0.0;
    let (probe, _) = measure::run_lockstep(
        &[
            arm(injection, BASELINE, release, 0, 1),
            arm(injection, BASELINE_AGAIN, release, 0, 1),
        ],
        &probe_cfg,
    )
    .context("the calibration probe")?;
    let primary = Metric::primary(&probe.iter().collect::<Vec<_>>());
    let probe_median_ns = median(
        &probe
            .iter()
            .filter_map(|s| s.arm(BASELINE))
            .flatten()
            .filter_map(|b| primary.of(b))
            .collect::<Vec<_>>(),
    )
    .context("the calibration probe recorded no batch")?;
    eprintln!(
        "calibrate: `{name}`: release's {} {probe_median_ns:.1} ns",
        injection.figure()
    );
    // Each size's N: its share of release's figure; a service's spin rescaled by what short
    // probes of it spent, so that the sizes land near their targets (the rows report what
    // was spent in their own sessions).
    let mut sizes = Vec::new();
    for &target in &cfg.calibrate.sizes_pct {
        let nominal = (target / 100.0 * probe_median_ns).round().max(0.0) as u64;
        let n = match injection {
            Injection::ServerCpu if nominal > 0 => {
                // Up to three probes, each rescaling N by what the last one spent, until it
                // spends within a fifth of the target; the probed N that came closest.
                let (mut n, mut best) = (nominal, (f64::INFINITY, nominal));
                for _ in 0..3 {
                    let width = n.to_string().len();
                    let (sessions, _) = measure::run_lockstep(
                        &[
                            arm(injection, BASELINE, release, 0, width),
                            arm(injection, INJECTED, release, n, width),
                        ],
                        &probe_cfg,
                    )
                    .context("the calibration probe of the spin")?;
                    let spent = injected_pct(&sessions, injection, n);
                    let next = scaled(n, target, spent);
                    eprintln!(
                        "calibrate: {target} %: --spin-ns {n} spent {spent:.2} % of release's CPU per request"
                    );
                    if (spent - target).abs() < best.0 {
                        best = ((spent - target).abs(), n);
                    }
                    if (spent - target).abs() <= 0.2 * target || next == n {
                        break;
                    }
                    n = next;
                }
                best.1
            }
            _ => nominal,
        };
        sizes.push((target, n));
    }
    // No run component: no earlier run of these arms. Every arm runs from a fresh copy of
    // release every session; the A/A arm beside them stays a diagnostic.
    let history = History::default();
    let mut rows = Vec::new();
    let mut index = 0u64;
    for r in 0..repeat {
        if repeat > 1 {
            eprintln!("calibrate: run {} of {repeat}", r + 1);
        }
        for &(target, inject_ns) in &sizes {
            let width = inject_ns.to_string().len();
            let arms = [
                arm(injection, BASELINE, release, 0, width),
                arm(injection, BASELINE_AGAIN, release, 0, width),
                arm(injection, INJECTED, release, inject_ns, width),
            ];
            let builds = [BASELINE.to_string(), INJECTED.to_string()];
            let start = Instant::now();
            let mut m = one(&measure);
            // Each size its own seed: fresh, or `--seed`'s replayed.
            let seed = match cfg.measure.seed {
                Some(s) => measure::session_seed(s, "calibrate", index as u32),
                None => stats::fresh_seed(),
            };
            index += 1;
            m.seed = Some(seed);
            let (sessions, stopped) = measure::run_lockstep(&arms, &m)?;
            let pooled = Pooled {
                run_seed: seed,
                stops: &stopped,
                ..Pooled::none(&history)
            };
            let w = analysis::sessions::analyze_lockstep(
                std::slice::from_ref(name),
                &builds,
                &sessions,
                &[],
                &m,
                &pooled,
            )?
            .remove(0);
            let estimate = w
                .rows
                .iter()
                .find_map(|r| r.vs_release.as_ref())
                .expect("the injected arm is compared with release")
                .primary()
                .estimate
                .clone();
            let row = CalibrationRow {
                target_pct: target,
                inject_ns,
                injected_pct: injected_pct(&sessions, injection, inject_ns),
                detected: analysis::judged(estimate, cfg.calibrate.min_effect_pct, None),
                aa: w.aa.primary().estimate.clone(),
                seed,
                wall_secs: start.elapsed().as_secs_f64(),
                stopped: stopped.first().cloned(),
            };
            eprintln!("calibrate: {}", row_line(&row));
            rows.push(row);
        }
    }
    let out = Calibration {
        workload: name.clone(),
        probe_median_ns,
        replication: if repeat > 1 {
            replication(&rows, &cfg.calibrate.sizes_pct)
        } else {
            Vec::new()
        },
        rows,
    };
    fsx::write_json(&ctx.pgo_data.join("calibration.json"), &out)?;
    println!("\n{}", render(&out, &cfg.measure));
    println!("wrote {}", ctx.pgo_data.join("calibration.json").display());
    Ok(out)
}

/// Per size, its rows over the repeats.
fn replication(rows: &[CalibrationRow], sizes: &[f64]) -> Vec<Replication> {
    sizes
        .iter()
        .map(|&target| {
            let mine: Vec<&CalibrationRow> =
                rows.iter().filter(|r| r.target_pct == target).collect();
            let mut verdicts: Vec<(Verdict, usize)> = Vec::new();
            for r in &mine {
                match verdicts.iter_mut().find(|(v, _)| *v == r.detected.verdict) {
                    Some((_, n)) => *n += 1,
                    None => verdicts.push((r.detected.verdict, 1)),
                }
            }
            let n = mine.len().max(1) as f64;
            let most = verdicts.iter().map(|(_, c)| *c).max().unwrap_or(0);
            let e = |r: &&CalibrationRow| r.detected.estimate.clone();
            let lo = mine
                .iter()
                .map(|r| e(r).ci_low_pct)
                .fold(f64::NEG_INFINITY, f64::max);
            let hi = mine
                .iter()
                .map(|r| e(r).ci_high_pct)
                .fold(f64::INFINITY, f64::min);
            Replication {
                target_pct: target,
                runs: mine.len(),
                agree_pct: 100.0 * most as f64 / n,
                verdicts,
                mean_change_pct: mine.iter().map(|r| e(r).change_pct).sum::<f64>() / n,
                mean_injected_pct: mine.iter().map(|r| r.injected_pct).sum::<f64>() / n,
                intervals_overlap: lo <= hi,
                aa_off_zero: mine.iter().filter(|r| !r.aa.holds_zero()).count(),
            }
        })
        .collect()
}

fn row_line(r: &CalibrationRow) -> String {
    format!(
        "{:>5.1}% {:>5} {:>8.2}%  {:<40} {:<30} {:<9} {:>6.1}s",
        r.target_pct,
        r.inject_ns,
        r.injected_pct,
        crate::report::words::estimate(&r.detected.estimate),
        format!(
            "{} ({})",
            crate::report::words::verdict(r.detected.verdict),
            crate::report::words::threshold(&r.detected)
        ),
        crate::report::words::zero(&r.aa),
        r.wall_secs
    )
}

/// The calibration table.
pub fn render(c: &Calibration, m: &Measure) -> String {
    let mut out = String::new();
    // As `run` measured it: with the workload's own lockstep keys.
    let l = &m.lockstep;
    let (sessions, batch) = match m.workloads.iter().find(|w| w.name == c.workload) {
        Some(w) => (w.sessions_in(l), w.batch_in(l)),
        None => (l.sessions, l.batch_messages),
    };
    let added = match Injection::of(m, &c.workload) {
        Injection::RoundTrip => "N ns added to every round trip (release median",
        Injection::ServerCpu => {
            "about N ns of CPU added to every request by the server's `--spin-ns N` (release's server CPU per request"
        }
    };
    let _ = writeln!(
        out,
        "calibration of `{}`: release against release with {added} {:.1} ns)\n\
         lockstep: at most {sessions} sessions (target ±{} %) x {} rounds x {batch} messages",
        c.workload,
        c.probe_median_ns,
        m.workloads
            .iter()
            .find(|w| w.name == c.workload)
            .map_or(m.target_half_width_pct, |w| w.target_in(m)),
        l.rounds,
    );
    let _ = writeln!(
        out,
        "  {:>6} {:>5} {:>9}  {:<40} {:<30} {:<9} {:>7}",
        "target", "N", "injected", "detected", "verdict", "A/A", "wall"
    );
    for r in &c.rows {
        let _ = writeln!(out, "  {}", row_line(r));
        if let Some(stopped) = &r.stopped {
            let _ = writeln!(
                out,
                "  {:<6} stopped after {}",
                "",
                crate::report::words::stopping(stopped)
            );
        }
    }
    if !c.replication.is_empty() {
        let _ = writeln!(
            out,
            "replication: each size measured {} times with fresh seeds",
            c.replication[0].runs
        );
        for r in &c.replication {
            let said: Vec<String> = r
                .verdicts
                .iter()
                .map(|(v, n)| format!("{} {n}×", crate::report::words::verdict(*v)))
                .collect();
            let _ = writeln!(
                out,
                "  {:>5.1}%: {} (agree {:.0} %); mean {:+.2} % for {:.2} % injected; intervals {}; A/A does NOT hold 0 in {}",
                r.target_pct,
                said.join(", "),
                r.agree_pct,
                r.mean_change_pct,
                r.mean_injected_pct,
                if r.intervals_overlap {
                    "overlap"
                } else {
                    "do NOT all overlap"
                },
                r.aa_off_zero
            );
        }
    }
    out
}

/// The release build `calibrate` measures, built now (in the same target folder as the
/// pipeline's `release` build; cargo does nothing when it is fresh).
fn release_build(ctx: &Ctx, toolchain: &Toolchain) -> Result<Built> {
    let (built, _) = ctx.build(toolchain, Build::Release, Build::Release.rustflags(None))?;
    Ok(built)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table's header states the lockstep shape the workload was measured in: its own
    /// sessions, target and batch where it has them.
    #[test]
    fn the_header_states_the_workloads_own_lockstep_keys() {
        let mut m = crate::testing::fixtures::measure_config();
        let c = Calibration {
            workload: m.workloads[0].name.clone(),
            probe_median_ns: 200.0,
            rows: Vec::new(),
            replication: Vec::new(),
        };
        let (n, rounds, batch) = (
            m.lockstep.sessions,
            m.lockstep.rounds,
            m.lockstep.batch_messages,
        );
        let t = m.target_half_width_pct;
        let plain = format!(
            "lockstep: at most {n} sessions (target ±{t} %) x {rounds} rounds x {batch} messages"
        );
        assert!(render(&c, &m).contains(&plain), "{}", render(&c, &m));
        (m.workloads[0].sessions, m.workloads[0].batch_messages) = (Some(2), Some(4321));
        m.workloads[0].target_half_width_pct = Some(2.5);
        let own = format!(
            "lockstep: at most 2 sessions (target ±2.5 %) x {rounds} rounds x 4321 messages"
        );
        assert!(render(&c, &m).contains(&own), "{}", render(&c, &m));
    }
}
