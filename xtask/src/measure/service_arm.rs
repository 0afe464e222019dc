//! The service arm (`cargo-mty __service-arm SPEC --lockstep N`): a live process of the
//! session, like a whole-process arm, for a service workload (`service.rs`). It starts its
//! server while it sets up, warms it with one driver run, and says ready. At each `g` it moves
//! the server's threads onto its own core (the session has moved the arm onto the measured
//! core), keeps that core from halting while the turn runs ([`Awake`]), runs the driver N
//! times on the other cores, and answers with the driver's figures: `metric` as the turn's
//! median (the figure the stopping rule and the verdicts read first), and the driver's
//! `p95_ns` and `p99_ns`, where it prints them, as the turn's tail, so p99 gets an interval
//! and a verdict of its own. At `q` it stops the server.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::measure::process_arm::ArmStop;
use crate::measure::service::{Server, Spec, drive, free_port};

/// The hidden subcommand that runs a service arm.
pub const SUBCOMMAND: &str = "__service-arm";

/// The arm's command line, pinned to `core` (`--lockstep N` is appended by the session).
pub fn command(spec: &Spec, core: Option<usize>) -> Result<crate::base::exec::Cmd> {
    let me = std::env::current_exe().context("cannot find xtask's own executable")?;
    let json = serde_json::to_string(spec).expect("paths and strings serialize");
    Ok(crate::measure::program::pinned(&me, core).args([SUBCOMMAND.to_string(), json]))
}

/// The CPUs this thread may run on.
fn own_cpus() -> Vec<usize> {
    // SAFETY: as in `set_affinity`; sched_getaffinity fills the set it is given.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if rc != 0 {
        return (0..n).collect();
    }
    // SAFETY: CPU_ISSET bounds-checks its index.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Every online CPU but `taken`; all of them where that leaves none.
fn other_cpus(taken: &[usize]) -> Vec<usize> {
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    let others: Vec<usize> = (0..online).filter(|c| !taken.contains(c)).collect();
    if others.is_empty() {
        (0..online).collect()
    } else {
        others
    }
}

/// `cargo-mty __service-arm SPEC --lockstep N`: exits 0 after `q` or when the coordinator is
/// gone, 1 when the server or driver fails (the reason on stderr), 2 on a malformed command
/// line or an unknown protocol command, as `mty-lockstep` does.
pub fn main(argv: impl Iterator<Item = String>) -> ExitCode {
    crate::measure::process_arm::arm_main(argv, SUBCOMMAND, |spec: &Spec, batch, input, output| {
        serve(spec, batch, input, output)
    })
}

/// A thread that keeps its core from idling while a turn runs: it spins at `SCHED_IDLE`
/// (below every normal thread, so the server preempts it as soon as it wakes) and parks
/// between turns. Made before the arm's ready line, so the session moves it onto the
/// measured core with the arm's other threads.
/// The spinning thread's name (its `comm` in /proc).
const AWAKE_THREAD: &str = "mty-awake";

struct Awake {
    flags: Arc<AwakeFlags>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What the spinning thread is told.
#[derive(Default)]
struct AwakeFlags {
    /// A turn runs: spin (else park).
    spin: AtomicBool,
    /// Stop for good.
    stop: AtomicBool,
}

impl Awake {
    fn start(enabled: bool) -> Awake {
        let flags = Arc::new(AwakeFlags::default());
        let thread = enabled.then(|| {
            let flags = Arc::clone(&flags);
            std::thread::Builder::new()
                .name(AWAKE_THREAD.into())
                .spawn(move || {
                    // SAFETY: a plain system call on this thread (pid 0: the caller), with a
                    // parameter struct that lives on the stack for the call.
                    let idle = unsafe {
                        let param = libc::sched_param { sched_priority: 0 };
                        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) == 0
                    };
                    // Never spin at a normal priority: it would take the server's core.
                    if !idle {
                        return;
                    }
                    while !flags.stop.load(Ordering::Relaxed) {
                        if flags.spin.load(Ordering::Relaxed) {
                            std::hint::spin_loop();
                        } else {
                            std::thread::park();
                        }
                    }
                })
                .expect("a thread can be started")
        });
        Awake { flags, thread }
    }

    fn set(&self, flag: impl Fn(&AwakeFlags) -> &AtomicBool, value: bool) {
        flag(&self.flags).store(value, Ordering::Relaxed);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }

    /// Spin while a turn runs; park between.
    fn during_turn(&self, on: bool) {
        self.set(|f| &f.spin, on);
    }
}

impl Drop for Awake {
    fn drop(&mut self) {
        self.set(|f| &f.stop, true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How long one driver run may take.
const DRIVER_TIMEOUT: Duration = Duration::from_secs(600);

/// The protocol: the server started and warmed by one driver run, the ready line, one batch
/// of `batch` driver runs per `g`, the closing report at `q` or end of input.
fn serve(
    spec: &Spec,
    batch: u64,
    mut input: impl BufRead,
    mut output: impl Write,
) -> Result<(), ArmStop> {
    let metric = spec
        .metric
        .as_deref()
        .context("a measured service workload needs `metric`")?;
    let port = free_port()?;
    let mut server = Server::start(spec, port, &[])?;
    // The warm-up runs where the arm sets up, never on the measured core.
    let setup = own_cpus();
    drive(spec, port, DRIVER_TIMEOUT, Some(&setup)).context("its warm-up run failed")?;
    let warm_up = crate::measure::process_arm::children_usage();
    let awake = Awake::start(spec.keep_core_awake);
    let mut answer = |line: String| -> Result<bool> {
        Ok(writeln!(output, "{line}")
            .and_then(|()| output.flush())
            .is_ok())
    };
    if !answer(format!(
        r#"{{"ready":true,"pid":{},"clock_overhead_ns":0}}"#,
        std::process::id()
    ))? {
        return Ok(());
    }
    let mut all = Vec::new();
    let mut pinned: Option<Vec<usize>> = None;
    let mut command = String::new();
    loop {
        command.clear();
        if input
            .read_line(&mut command)
            .context("cannot read the coordinator's commands")?
            == 0
        {
            break;
        }
        match command.trim() {
            "g" => {}
            "q" => break,
            other => return Err(ArmStop::Protocol(other.to_string())),
        }
        // The session moved this arm onto the measured core: the server follows it there, and
        // the driver runs on the others.
        let here = own_cpus();
        if pinned.as_ref() != Some(&here) {
            server.pin(&here)?;
            pinned = Some(here.clone());
        }
        let driver_cpus = other_cpus(&here);
        let started = Instant::now();
        let mut samples = Vec::with_capacity(batch as usize);
        for _ in 0..batch {
            awake.during_turn(true);
            let stdout = drive(spec, port, DRIVER_TIMEOUT, Some(&driver_cpus));
            awake.during_turn(false);
            server.check_alive()?;
            let stdout = stdout?;
            let read = |key: &str| {
                crate::measure::process_arm::metric(&stdout, key).with_context(|| {
                    format!(
                        "reading `{key}` from what the driver `{}` printed",
                        spec.driver_shown(port)
                    )
                })
            };
            let primary = read(metric)?;
            // The driver's own tail, where its last line has one; else the primary figure.
            let last: Option<serde_json::Value> =
                crate::measure::program::parse_last_line(&stdout, "a JSON object").ok();
            let tail = |key: &str| {
                if key == metric || last.as_ref().is_none_or(|l| l.get(key).is_none()) {
                    Ok(primary)
                } else {
                    read(key)
                }
            };
            samples.push([primary, tail("p95_ns")?, tail("p99_ns")?]);
        }
        let elapsed_ns = started.elapsed().as_nanos() as f64;
        all.extend(samples.iter().map(|s| s[0]));
        // One driver run a turn (the default): its own figures; several: each one's median.
        let mid = |i: usize| {
            let mut v: Vec<f64> = samples.iter().map(|s| s[i]).collect();
            v.sort_by(f64::total_cmp);
            crate::measure::process_arm::quantile(&v, 0.5)
        };
        let line = serde_json::json!({
            "median_ns": mid(0),
            "p95_ns": mid(1),
            "p99_ns": mid(2),
            "mean_ns": samples.iter().map(|s| s[0]).sum::<f64>() / samples.len() as f64,
            "elapsed_ns": elapsed_ns,
        });
        if !answer(line.to_string())? {
            return Ok(());
        }
    }
    all.sort_by(f64::total_cmp);
    // Stopped (and reaped) first: the closing line's CPU time is the server's, whole, and
    // the measured driver runs'.
    drop(awake);
    let stopped = server.stop(Duration::from_secs(spec.stop_timeout_secs))?;
    let line = crate::measure::process_arm::closing(&all, &warm_up);
    if stopped.early {
        return Err(anyhow::anyhow!(
            "the server `{}` {}",
            spec.server_shown(port),
            stopped.describe()
        )
        .into());
    }
    answer(serde_json::to_string(&line).expect("numbers serialize"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The awake thread's scheduling policy (`/proc` stat field 41) and CPU ticks.
    fn awake_thread() -> Option<(u32, u64)> {
        for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
            if comm.trim() != AWAKE_THREAD {
                continue;
            }
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
            // After the command: state is field 3, utime 14, stime 15, policy 41.
            let ticks = fields[11].parse::<u64>().ok()? + fields[12].parse::<u64>().ok()?;
            return Some((fields[38].parse().ok()?, ticks));
        }
        None
    }

    #[test]
    fn the_core_is_kept_awake_at_the_lowest_priority_during_a_turn_only() {
        let awake = Awake::start(true);
        assert!({
            let deadline = Instant::now() + Duration::from_secs(5);
            while awake_thread().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            awake_thread().is_some()
        });
        let (policy, parked) = awake_thread().unwrap();
        assert_eq!(policy, libc::SCHED_IDLE as u32, "not at SCHED_IDLE");
        awake.during_turn(true);
        // At SCHED_IDLE it runs only where the core is otherwise idle: other tests may hold
        // both cores for a while, so it has seconds to show a tick.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut spun = parked;
        while spun <= parked && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            spun = awake_thread().unwrap().1;
        }
        assert!(
            spun > parked,
            "it did not run during the turn: {parked} -> {spun} ticks"
        );
        awake.during_turn(false);
        std::thread::sleep(Duration::from_millis(50));
        let (_, after) = awake_thread().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let (_, later) = awake_thread().unwrap();
        assert!(
            later <= after + 1,
            "it spun between turns: {after} -> {later} ticks"
        );
        drop(awake);
        // Joined; the kernel drops the thread's /proc entry a moment after the join returns.
        let deadline = Instant::now() + Duration::from_secs(2);
        while awake_thread().is_some() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(awake_thread().is_none(), "it outlived its owner");
    }

    #[test]
    fn every_other_cpu_or_all_when_none_is_left() {
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) } as usize;
        let all: Vec<usize> = (0..online).collect();
        assert_eq!(other_cpus(&all), all);
        if online > 1 {
            assert!(!other_cpus(&[0]).contains(&0));
        }
    }
}
