//! One lockstep session, the pipeline's measurement protocol: every arm (release, release
//! again as the A/A arm, and each other build) is one live `<binary> <args> --lockstep BATCH`
//! (or, for a whole-process workload, `cargo-mty __process-arm`, which runs the command per turn)
//! process for a whole session, set up and warmed once on another core (while the session
//! before takes its turns), then all moved onto the same core; then, round after round, xtask
//! tells each arm in a seeded random order to run one batch and waits for its answer before
//! telling the next.
//! A machine's speed can flip between states (docs/findings.md, "Why lockstep exists"): runs
//! of separate processes land in one state or another at random, while arms that take turns
//! in short batches see the same state within a round. Several sessions of new processes sample
//! the per-process effects (addresses, heap layout) that a single session would freeze.
//!
//! The protocol, over each arm's stdin and stdout pipes (one line each way):
//! - the arm sets up, warms up and prints `{"ready":true,"pid":…,"clock_overhead_ns":…}`;
//! - xtask writes `g`; the arm runs one batch (only the per-message regions are timed) and
//!   answers `{"median_ns":…,"p95_ns":…,"p99_ns":…,"mean_ns":…}`;
//! - xtask writes `q` (or closes stdin); the arm prints its usual report over every batch and
//!   exits 0.
//!
//! Arms that are not running a batch sleep in a blocking read, so they take no CPU from the
//! one that is. An arm that dies or does not answer within `measure.timeout_secs` fails the
//! session, naming the arm, its command line and the tail of its stderr.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use indicatif::ProgressBar;

use crate::config::{Measure, Mode, Workload};
use crate::measure::program::parse_line;
use crate::measure::session::{Arm, Batch, Session, Timing};
use stats::SplitMix64;

mod arm;
mod copies;
use arm::RunningArm;
use copies::Copies;
pub use copies::sweep as sweep_copies;

/// The core every arm is pinned to: taking turns means sharing one, the configured one,
/// else the last; none where the workload does not share one (`share_core = false`, in
/// `measure.lockstep` or on the workload: workloads of several threads).
fn shared_core(cfg: &Measure, share: bool) -> Option<usize> {
    if !share {
        return None;
    }
    cfg.pin_core.or_else(|| cpus().map(|n| n - 1))
}

/// The CPUs this process may run on, read once: a thread later pinned to one core (the one
/// that starts the next session's arms) must place them as the first thread would.
fn cpus() -> Option<usize> {
    static CPUS: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().ok().map(|n| n.get()))
}

/// Where a session's arms start, set up and warm up: another core than the one they will
/// take turns on (the first other one), so that the next session's set-up can run while
/// this session's turns do; `None` on a machine of one core.
fn setup_core(measured: Option<usize>) -> Option<usize> {
    (0..cpus()?).find(|&c| Some(c) != measured)
}

/// The set-up core of `workload`'s sessions, where its arms start and warm up while the
/// session before takes its turns (`None` when they start where they will run).
pub fn setup_core_of(workload: &Workload, cfg: &Measure) -> Option<usize> {
    setup_core(shared_core(cfg, workload.shares_core_in(&cfg.lockstep)))
}

/// A session's arms, started (on the set-up core where there is one) and setting up.
pub struct StartedArms {
    live: Vec<RunningArm>,
    /// The files the arms run from, removed once they have exited (declared after `live`,
    /// so dropped after the arms are).
    copies: Option<Copies>,
    /// The session's own generator: its places, then its turn orders.
    rng: SplitMix64,
    /// The order they move onto the measured core in (indices into `live`).
    moves: Vec<u8>,
    started: Instant,
    /// The core they set up on, when they move to their own for the turns.
    setup: Option<usize>,
    /// The core they take turns on; `None`: wherever the scheduler (or they) put them.
    measured: Option<usize>,
    /// A service workload's arms: each runs a server beside it, and a driver on the other
    /// cores.
    service: bool,
    /// A whole-process workload's comparisons (candidate, base; indices into `live`), each
    /// run as adjacent pairs: empty for the other modes (every arm once a round).
    pairs: Vec<(u8, u8)>,
}

impl StartedArms {
    /// Whether this session's turns leave another core free for the next one's set-up (not
    /// a service workload's: its driver runs there).
    pub fn leaves_a_core_free(&self) -> bool {
        self.measured.is_some() && self.setup.is_some() && !self.service
    }
}

/// Starts one session's arms: each a live `--lockstep BATCH` process, pinned to the set-up
/// core while it sets up and warms up (on one core, or for arms that do not share one, where
/// they will take turns). Where an arm sits is drawn from `seed`: the order they are spawned
/// in (which is also each arm's index), and the order they will move onto the measured core
/// in. An effect of a fixed place (the first spawned warms up on a quieter core; the last
/// moved runs first on warm caches) then spreads over every arm as session-to-session noise
/// instead of biasing one.
///
/// A whole-process workload's session runs `pairs` (candidate, base: the comparisons still
/// open), each as adjacent pairs; the other modes ignore them.
pub fn spawn(
    workload: &Workload,
    index: u32,
    arms: &[Arm],
    pairs: &[(String, String)],
    cfg: &Measure,
    seed: u64,
    bar: &ProgressBar,
) -> Result<StartedArms> {
    let mut rng = SplitMix64::new(seed);
    let mut arms: Vec<&Arm> = arms.iter().collect();
    rng.shuffle(&mut arms);
    let at = |name: &str| arms.iter().position(|a| a.name == name).map(|i| i as u8);
    let pairs: Vec<(u8, u8)> = if workload.mode == Mode::Process {
        pairs
            .iter()
            .filter_map(|(c, b)| Some((at(c)?, at(b)?)))
            .collect()
    } else {
        Vec::new()
    };
    let mut moves: Vec<u8> = (0..arms.len() as u8).collect();
    rng.shuffle(&mut moves);
    // Each arm's heap offset (`measure.shift_heap`), drawn like its place. (The copies' paths
    // are of one length, so the offset alone sets how much longer `argv[0]` is.)
    let mut shift = || {
        if cfg.shift_heap {
            rng.below(crate::measure::program::MAX_SHIFT)
        } else {
            0
        }
    };
    let shifts: Vec<usize> = arms.iter().map(|_| shift()).collect();
    let shift_seeds: Vec<Option<u64>> = arms
        .iter()
        .map(|_| cfg.shift_heap.then(|| rng.next_u64()))
        .collect();
    let batch = workload.batch_in(&cfg.lockstep).to_string();
    let measured = shared_core(cfg, workload.shares_core_in(&cfg.lockstep));
    // Arms of several threads (not sharing a core) start where they will run: they place
    // their own threads (`--pin-workers`), which a move would undo.
    let setup = measured.and_then(|m| setup_core(Some(m)));
    let started = Instant::now();
    let copies = if cfg.fresh_copies {
        let files: Vec<(&str, &std::path::Path)> = arms
            .iter()
            .map(|a| (a.name.as_str(), a.exe.as_path()))
            .collect();
        Some(Copies::write(cfg, seed, &files)?)
    } else {
        None
    };
    let mut live = Vec::new();
    for (i, arm) in arms.into_iter().enumerate() {
        let core = setup.or(measured);
        let exe = copies.as_ref().map_or(&arm.exe, |c| &c.exes[i]);
        let cmd = match workload.mode {
            // Paths already resolved against the workspace (`Ctx::measure_config`).
            Mode::Lockstep => crate::measure::program::with_setting(
                crate::measure::program::pinned_shifted(exe, core, shifts[i])
                    .args(arm.args.iter().cloned()),
                workload,
            ),
            // Every run is a process of its own: each draws its shift, and runs from a
            // copy of its own.
            Mode::Process => crate::measure::process_arm::command(
                &crate::measure::process_arm::Spec {
                    shift_seed: shift_seeds[i],
                    // Only a copy this session made: never beside the user's own file.
                    copy_each_run: copies.as_ref().is_some_and(|c| c.exes[i] != arm.exe),
                    ..crate::measure::process_arm::Spec::new(exe, &arm.args, workload)
                },
                core,
            )?,
            // The server lives for the session; each turn runs the driver against it.
            // The server's idle CPU is read in some sessions only.
            Mode::Service => crate::measure::service_arm::command(
                &crate::measure::service::Spec {
                    read_idle: index.is_multiple_of(crate::measure::service_arm::IDLE_EVERY),
                    ..crate::measure::service::Spec::new(exe, &arm.args, workload)?
                },
                core,
            )?,
        }
        .args(["--lockstep".to_string(), batch.clone()]);
        live.push(bar.suspend(|| RunningArm::start(&arm.name, cmd))?);
    }
    Ok(StartedArms {
        rng,
        live,
        copies,
        moves,
        started,
        setup,
        measured,
        service: workload.mode == Mode::Service,
        pairs,
    })
}

/// Runs one session: starts every arm, `rounds` rounds of turns, then closes them; `bar`
/// counts the rounds.
#[cfg(test)]
pub fn session(
    workload: &Workload,
    index: u32,
    arms: &[Arm],
    cfg: &Measure,
    seed: u64,
    bar: &ProgressBar,
) -> Result<Session> {
    spawn(workload, index, arms, &[], cfg, seed, bar)?.run(workload, index, cfg, bar)
}

impl StartedArms {
    /// The session of these arms: waits for them to be ready, moves them onto the measured
    /// core(s), `rounds` rounds of turns, then closes them; `bar` counts the rounds.
    /// The session's rounds: in each, every arm in a random order runs one batch.
    fn turns(
        &mut self,
        index: u32,
        cfg: &Measure,
        timeout: Duration,
        bar: &ProgressBar,
    ) -> Result<Turns> {
        let n = self.live.len();
        let turns = Instant::now();
        let mut order = Vec::with_capacity(cfg.lockstep.rounds as usize);
        let mut batches: Vec<Vec<Batch>> = vec![Vec::new(); n];
        for round in 0..cfg.lockstep.rounds {
            let turn: Vec<u8> = if self.pairs.is_empty() {
                let mut turn: Vec<u8> = (0..n as u8).collect();
                self.rng.shuffle(&mut turn);
                turn
            } else {
                // Each comparison's pair, the pairs in a drawn order, each pair's two runs
                // in a drawn order: the machine's state, which drifts over seconds, is what
                // a pair's two runs share.
                let mut pairs = self.pairs.clone();
                self.rng.shuffle(&mut pairs);
                pairs
                    .into_iter()
                    .flat_map(|(c, b)| {
                        if self.rng.below(2) == 0 {
                            [c, b]
                        } else {
                            [b, c]
                        }
                    })
                    .collect()
            };
            for &a in &turn {
                let what = format!("running batch {} of session {index}", round + 1);
                batches[a as usize].push(self.live[a as usize].batch(timeout, &what)?);
            }
            order.push(turn);
            bar.inc(1);
        }
        Ok(Turns {
            order,
            batches,
            secs: turns.elapsed().as_secs_f64(),
        })
    }

    pub fn run(
        mut self,
        workload: &Workload,
        index: u32,
        cfg: &Measure,
        bar: &ProgressBar,
    ) -> Result<Session> {
        let timeout = Duration::from_secs(cfg.timeout_secs);
        let name = workload.name.as_str();
        let waiting = Instant::now();
        // Set up and warmed: each says so before any batch.
        for arm in &mut self.live {
            let line = arm.answer(timeout, "setting up")?;
            if !line.contains("\"ready\"") {
                bail!(
                    "arm `{}` (`{}`) answered {line:?} instead of its ready line; is it a program that serves the lockstep protocol (`--lockstep N`, `mty-lockstep`)?",
                    arm.name,
                    arm.cmd.display()
                );
            }
        }
        // Set-up ended with the last ready line's arrival (long before it was read, when the
        // arms started while the session before took its turns).
        let ready = self
            .live
            .iter()
            .filter_map(|a| a.arrived)
            .max()
            .unwrap_or_else(Instant::now);
        let mut timing = Timing {
            setup_secs: ready.duration_since(self.started).as_secs_f64(),
            copy_secs: self.copies.as_ref().map_or(0.0, |c| c.secs),
            waited_secs: waiting.elapsed().as_secs_f64(),
            ..Timing::default()
        };
        let mut moves = Vec::new();
        if let (Some(_), Some(core)) = (self.setup, self.measured) {
            let moving = Instant::now();
            for &a in &self.moves {
                self.live[a as usize].repin(core)?;
            }
            moves = self.moves.clone();
            timing.move_secs = moving.elapsed().as_secs_f64();
        }
        // The machine's counters at the start are read beside the first turns, by a thread on
        // the set-up core (a few ms of `/proc` the measured core need not wait for); those at
        // the end before the arms are told to close, while their own CPU time is still theirs.
        let (measured, setup, service) = (self.measured, self.setup, self.service);
        let pids: Vec<u32> = self.live.iter().map(|a| a.child.id()).collect();
        let (turned, machine) = std::thread::scope(|scope| {
            let watching = scope.spawn(move || {
                if let Some(core) = setup {
                    // Best effort: unpinned, it reads the same counters a little later.
                    let _ = crate::measure::threads::set_affinity(0, &[core]);
                }
                crate::measure::machine::LoadWatch::start(
                    measured,
                    setup,
                    pids.into_iter(),
                    service,
                )
            });
            let turned = self.turns(index, cfg, timeout, bar);
            let watch = watching.join().expect("the thread reading /proc panicked");
            (turned, watch.and_then(|w| w.stop()))
        });
        let Turns {
            order,
            batches,
            secs,
        } = turned?;
        timing.turns_secs = secs;
        timing.batch_secs = batches
            .iter()
            .flatten()
            .filter_map(|b| b.elapsed_ns)
            .sum::<f64>()
            / 1e9;
        let closing = Instant::now();
        // Every arm writes its closing report at once; then each is read and reaped.
        for arm in &mut self.live {
            arm.say("q", "closing")?;
        }
        let mut totals = Vec::new();
        for arm in &mut self.live {
            let line = arm.answer(timeout, "writing its closing report")?;
            totals.push(parse_line(&line).with_context(|| {
                format!(
                    "arm `{}` (`{}`): its closing report",
                    arm.name,
                    arm.cmd.display()
                )
            })?);
            arm.finish(timeout)?;
        }
        timing.close_secs = closing.elapsed().as_secs_f64();
        Ok(Session {
            workload: name.to_string(),
            session: index,
            arms: self.live.iter().map(|a| a.name.clone()).collect(),
            order,
            paired: !self.pairs.is_empty(),
            moves,
            machine,
            batches,
            totals,
            timing: Some(timing),
        })
    }
}

/// A session's rounds as run: the arms' indices in each round's order, each arm's batches,
/// and the seconds the rounds took.
struct Turns {
    order: Vec<Vec<u8>>,
    batches: Vec<Vec<Batch>>,
    secs: f64,
}

#[cfg(test)]
mod tests;
