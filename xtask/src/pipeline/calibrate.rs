//! `cargo xtask pgo calibrate`: the tool proving its own sensitivity. Release is measured
//! against release with a known effect injected (`mty-bench --inject-ns N`: N ns added to
//! every measured round trip), at several sizes, in both measurement modes: the 0 % row is the
//! false-positive check, the others show what each mode detects and how wide its interval is.
//! The injected size in % is measured, not assumed: N over release's batch median of the same
//! round (the machine's speed flips change it).
//!
//! Why added nanoseconds and not extra work: a dependent multiply-add chain inside the timed
//! region was tried first. Unfenced, the out-of-order core ran it beside the round trip's own
//! waits (a chain costing 17 % of a round trip alone added 4 %, one seeded by the received
//! message added nothing measurable: the clock read does not wait for it); fenced with
//! `lfence`, the fence alone cost 11 ns, 8.6 % of a round trip, so no size under that could be
//! made. Added nanoseconds are exact at every size; what they check is the protocol and the
//! statistics against this machine's noise, which is what the calibration is for.

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

mod processes;

use super::ctx::Ctx;
use crate::analysis::{self, Judged};
use crate::build::{Build, Built};
use crate::config::Measure;
use crate::fsx;
use crate::lockstep::Session;
use crate::measure::{self, BASELINE, BASELINE_AGAIN, MeasuredArm};
use crate::stats;
use crate::stats::median;
use crate::toolchain::Toolchain;

/// The protocol a calibration row was measured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The pipeline's: live processes on one core taking turns batch by batch.
    Lockstep,
    /// The contrast: blocks of separate whole-process runs (`processes.rs`).
    Processes,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Lockstep => "lockstep",
            Mode::Processes => "processes",
        }
    }
}

/// The name of the injected arm.
pub const INJECTED: &str = "release+inject";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationRow {
    pub mode: Mode,
    /// The size asked for, in % of the workload's median.
    pub target_pct: f64,
    /// Nanoseconds added to every round trip (`--inject-ns`).
    pub inject_ns: u64,
    /// The size as measured: `inject_ns` over release's batch median, round by round.
    pub injected_pct: f64,
    /// The injected arm against release, judged against the A/A floor as `measure` does.
    pub detected: Judged,
    pub wall_secs: f64,
    /// Lockstep: how many sessions the stopping rule ran and why it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Calibration {
    pub workload: String,
    /// Release's median in the probe, which sizes the injections.
    pub probe_median_ns: f64,
    pub rows: Vec<CalibrationRow>,
    /// The floors beside the detection table: release against itself (A/A) and against
    /// its layout variants, in the same sessions (`None` with `layout.variants = 0`).
    #[serde(default)]
    pub aa_floor_pct: Option<f64>,
    #[serde(default)]
    pub layout: Option<analysis::LayoutFloor>,
}

pub fn run(ctx: &Ctx, tc: &Toolchain) -> Result<Calibration> {
    let cfg = &ctx.config.config;
    let workload = match &cfg.calibrate.workload {
        Some(name) => cfg
            .measure
            .workloads
            .iter()
            .find(|w| &w.name == name)
            .with_context(|| format!("`calibrate.workload` `{name}` is not measured"))?,
        None => &cfg.measure.workloads[0],
    };
    if workload.mode == crate::config::Mode::Process {
        bail!(
            "`calibrate` injects a known cost into every timed iteration (`--inject-ns`), which a whole-process workload (`{}`) has none of: name an in-process workload in `calibrate.workload`",
            workload.name
        );
    }
    let release = &release_build(ctx, tc)?;
    let name = &workload.name;
    let one = |m: &Measure| Measure {
        workloads: vec![workload.clone()],
        ..m.clone()
    };
    // Probe: what a message costs now, to size the injections.
    let mut probe_cfg = one(&cfg.measure);
    probe_cfg.lockstep.sessions = 2;
    probe_cfg.lockstep.rounds = 10;
    probe_cfg.lockstep.min_sessions = 2;
    probe_cfg.target_half_width_pct = 0.0;
    let (probe, _) = measure::run_lockstep(
        &[arm(BASELINE, release, 0), arm(BASELINE_AGAIN, release, 0)],
        &probe_cfg,
    )
    .context("the calibration probe")?;
    let probe_median_ns = median(
        &probe
            .iter()
            .filter_map(|s| s.arm(BASELINE))
            .flatten()
            .map(|b| b.median_ns)
            .collect::<Vec<_>>(),
    )
    .context("the calibration probe recorded no batch")?;
    eprintln!("calibrate: `{name}`: release median {probe_median_ns:.1} ns");
    let mut rows = Vec::new();
    for &target in &cfg.calibrate.sizes_pct {
        let inject_ns = (target / 100.0 * probe_median_ns).round().max(0.0) as u64;
        let arms = [
            arm(BASELINE, release, 0),
            arm(BASELINE_AGAIN, release, 0),
            arm(INJECTED, release, inject_ns),
        ];
        let builds = [BASELINE.to_string(), INJECTED.to_string()];
        let names = [name.clone()];
        // Lockstep first: it measures the injected size too.
        let start = Instant::now();
        let m = one(&cfg.measure);
        let (sessions, stopped) = measure::run_lockstep(&arms, &m)?;
        let analysed = analysis::sessions::analyze_lockstep(&names, &builds, &sessions, &[], &m)?;
        let injected_pct = injected_pct(&sessions);
        let mut lockstep = row(
            Mode::Lockstep,
            target,
            inject_ns,
            injected_pct,
            &analysed[0],
            start,
        );
        lockstep.stopped = stopped.first().map(measure::Stopping::describe);
        rows.push(lockstep);
        let start = Instant::now();
        let runs = processes::run(&arms, &m, &cfg.calibrate)?;
        let analysed = processes::analyze(&names, &builds, &runs, &[], &m)?;
        rows.push(row(
            Mode::Processes,
            target,
            inject_ns,
            injected_pct,
            &analysed[0],
            start,
        ));
    }
    // The floors: release against itself and against its layout variants.
    let (aa_floor_pct, layout) = if cfg.layout.variants >= 2 {
        let set = super::layout::release_variants(ctx, tc, release, name)?;
        let mut arms = vec![arm(BASELINE, release, 0), arm(BASELINE_AGAIN, release, 0)];
        arms.extend(set.variants.iter().map(|v| MeasuredArm {
            name: v.arm.clone(),
            exe: v.built.exe.clone(),
            extra: Vec::new(),
        }));
        let m = one(&cfg.measure);
        let (sessions, _) = measure::run_lockstep(&arms, &m).context("the layout floor")?;
        let builds = [BASELINE.to_string()];
        let w = analysis::sessions::analyze_lockstep(
            std::slice::from_ref(name),
            &builds,
            &sessions,
            &[],
            &m,
        )?
        .remove(0);
        (
            Some(stats::noise_floor_pct(&w.aa.median.estimate)),
            w.layout,
        )
    } else {
        (None, None)
    };
    let out = Calibration {
        workload: name.clone(),
        probe_median_ns,
        rows,
        aa_floor_pct,
        layout,
    };
    fsx::write_json(&ctx.data.join("calibration.json"), &out)?;
    println!("\n{}", render(&out, &cfg.measure, cfg.calibrate.blocks));
    println!("wrote {}", ctx.data.join("calibration.json").display());
    Ok(out)
}

fn arm(name: &str, build: &Built, inject_ns: u64) -> MeasuredArm {
    MeasuredArm {
        name: name.to_string(),
        exe: build.exe.clone(),
        extra: if inject_ns > 0 {
            vec!["--inject-ns".into(), inject_ns.to_string()]
        } else {
            Vec::new()
        },
    }
}

/// The injected nanoseconds over release's batch median of the same round, in %: the median
/// over rounds within a session, then over sessions (0 when nothing was injected).
pub fn injected_pct(sessions: &[Session]) -> f64 {
    let per_session: Vec<f64> = sessions
        .iter()
        .filter_map(|s| {
            let (base, inj) = (s.arm(BASELINE)?, s.arm(INJECTED)?);
            let rounds: Vec<f64> = base
                .iter()
                .zip(inj)
                .map(|(b, i)| 100.0 * i.inject_ns.unwrap_or(0.0) / b.median_ns)
                .collect();
            median(&rounds)
        })
        .collect();
    median(&per_session).unwrap_or(0.0)
}

fn row(
    mode: Mode,
    target: f64,
    inject_ns: u64,
    injected_pct: f64,
    w: &analysis::WorkloadAnalysis,
    start: Instant,
) -> CalibrationRow {
    let detected = w
        .rows
        .iter()
        .find_map(|r| r.vs_release.as_ref())
        .expect("the injected arm is compared with release")
        .median
        .clone();
    CalibrationRow {
        mode,
        target_pct: target,
        inject_ns,
        injected_pct,
        detected,
        wall_secs: start.elapsed().as_secs_f64(),
        stopped: None,
    }
}

/// The calibration table.
pub fn render(c: &Calibration, m: &Measure, blocks: u32) -> String {
    let mut out = String::new();
    // As `run` measured it: with the workload's own lockstep keys.
    let l = &m.lockstep;
    let (sessions, batch) = match m.workloads.iter().find(|w| w.name == c.workload) {
        Some(w) => (w.sessions_in(l), w.batch_in(l)),
        None => (l.sessions, l.batch_messages),
    };
    let _ = writeln!(
        out,
        "calibration of `{}`: release against release with N ns added to every round trip \
         (release median {:.1} ns)\n\
         lockstep: at most {sessions} sessions (target ±{} %) x {} rounds x {batch} messages; processes: {} blocks",
        c.workload,
        c.probe_median_ns,
        m.workloads
            .iter()
            .find(|w| w.name == c.workload)
            .map_or(m.target_half_width_pct, |w| w.target_in(m)),
        l.rounds,
        blocks
    );
    let _ = writeln!(
        out,
        "  {:<10} {:>8} {:>5} {:>9}  {:<44} {:<32} {:>7}",
        "mode", "target", "N", "injected", "detected (median)", "verdict", "wall"
    );
    for r in &c.rows {
        let _ = writeln!(
            out,
            "  {:<10} {:>7.1}% {:>5} {:>8.2}%  {:<44} {:<32} {:>6.1}s",
            r.mode.name(),
            r.target_pct,
            r.inject_ns,
            r.injected_pct,
            stats::describe(&r.detected.estimate),
            format!(
                "{} (±{:.1} %)",
                r.detected.verdict.text(),
                r.detected.threshold_pct
            ),
            r.wall_secs
        );
        if let Some(stopped) = &r.stopped {
            let _ = writeln!(out, "  {:<10} stopped after {stopped}", "");
        }
    }
    match (&c.aa_floor_pct, &c.layout) {
        (Some(aa), Some(l)) => {
            let _ = writeln!(
                out,
                "floors, in the same lockstep sessions: A/A ±{aa:.1} % (release against itself); {}",
                l.line()
            );
        }
        _ => {
            let _ = writeln!(out, "layout floor: not measured (`layout.variants` < 2)");
        }
    }
    out
}

/// The release build `calibrate` measures, built now (in the same target folder as the
/// pipeline's `release` build; cargo does nothing when it is fresh).
fn release_build(ctx: &Ctx, tc: &Toolchain) -> Result<Built> {
    let (built, _) = ctx.build(tc, Build::Release, Build::Release.rustflags(None))?;
    Ok(built)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table's header states the lockstep shape the workload was measured in: its own
    /// sessions, target and batch where it has them.
    #[test]
    fn the_header_states_the_workloads_own_lockstep_keys() {
        let mut m = crate::fixtures::measure_config();
        let c = Calibration {
            workload: m.workloads[0].name.clone(),
            probe_median_ns: 200.0,
            aa_floor_pct: None,
            layout: None,
            rows: Vec::new(),
        };
        let (n, rounds, batch) = (
            m.lockstep.sessions,
            m.lockstep.rounds,
            m.lockstep.batch_messages,
        );
        let t = m.target_half_width_pct;
        let plain = format!(
            "lockstep: at most {n} sessions (target ±{t} %) x {rounds} rounds x {batch} messages;"
        );
        assert!(render(&c, &m, 6).contains(&plain), "{}", render(&c, &m, 6));
        (m.workloads[0].sessions, m.workloads[0].batch_messages) = (Some(2), Some(4321));
        m.workloads[0].target_half_width_pct = Some(2.5);
        let own = format!(
            "lockstep: at most 2 sessions (target ±2.5 %) x {rounds} rounds x 4321 messages;"
        );
        assert!(render(&c, &m, 6).contains(&own), "{}", render(&c, &m, 6));
    }
}
