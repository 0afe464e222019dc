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

use crate::config::CPU_PER_REQUEST;
use crate::measure::process_arm::ArmStop;
use crate::measure::service::{Server, Spec, drive};
use crate::measure::service_driver::Persistent;
use crate::measure::threads::{cpu_ns, other_cpus, own_cpus};

/// The hidden subcommand that runs a service arm.
pub const SUBCOMMAND: &str = "__service-arm";

/// The arm's command line, pinned to `core` (`--lockstep N` is appended by the session).
pub fn command(spec: &Spec, core: Option<usize>) -> Result<crate::base::exec::Cmd> {
    let me = std::env::current_exe().context("cannot find xtask's own executable")?;
    let json = serde_json::to_string(spec).expect("paths and strings serialize");
    Ok(crate::measure::program::pinned(&me, core).args([SUBCOMMAND.to_string(), json]))
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

/// What a turn reads from the driver's last line: its latency (the turn's median and
/// tail) and, judged by CPU, the server's CPU time per request.
struct Figures {
    /// The key of the turn's median: the driver's `p50_ns` where judged by CPU.
    median: String,
    /// Judged by the server's CPU time per request ([`CPU_PER_REQUEST`]).
    cpu: bool,
}

/// One driver run's figures.
#[derive(Debug)]
struct Sample {
    /// Median, p95, p99 (ns).
    latency: [f64; 3],
    cpu_per_request_ns: Option<f64>,
    /// The driver said the server fell behind the offered rate.
    saturated: bool,
    /// What the server said each answer in the window cost it of an injected spin, on
    /// average (mty-loadgen `--sum-header x-spin-ns`: `header_sum / header_answers`).
    injected_ns: Option<f64>,
}

impl Figures {
    fn of(spec: &Spec) -> Figures {
        let key = spec.metric.as_deref().unwrap_or(CPU_PER_REQUEST);
        let cpu = key == CPU_PER_REQUEST;
        Figures {
            median: if cpu { "p50_ns" } else { key }.to_string(),
            cpu,
        }
    }

    /// The figures in the driver's `stdout` (`shown`: its command line, for an error).
    fn read(&self, stdout: &str, shown: impl Fn() -> String) -> Result<Sample> {
        let read = |key: &str| {
            crate::measure::process_arm::metric(stdout, key).with_context(|| {
                let hint = if key == "cpu_per_request_ns" {
                    " (judged by the server's CPU time per request, the default: give mty-loadgen `--server-pid {pid}`, or set the workload's `metric` to a key of the driver's latency)"
                } else {
                    ""
                };
                format!("reading `{key}` from what the driver `{}` printed{hint}", shown())
            })
        };
        let median = read(&self.median)?;
        // The driver's own tail, where its last line has one; else the median.
        let last: Option<serde_json::Value> =
            crate::measure::program::parse_last_line(stdout, "a JSON object").ok();
        let tail = |key: &str| {
            if key == self.median || last.as_ref().is_none_or(|l| l.get(key).is_none()) {
                Ok(median)
            } else {
                read(key)
            }
        };
        Ok(Sample {
            latency: [median, tail("p95_ns")?, tail("p99_ns")?],
            cpu_per_request_ns: self.cpu.then(|| read("cpu_per_request_ns")).transpose()?,
            saturated: last
                .as_ref()
                .and_then(|l| l.get("saturated"))
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
            injected_ns: last.as_ref().and_then(|l| {
                let answers = l.get("header_answers")?.as_f64()?;
                (answers > 0.0).then_some(l.get("header_sum")?.as_f64()? / answers)
            }),
        })
    }
}

/// How long the server's idle CPU time is read for.
const IDLE_WINDOW: Duration = Duration::from_millis(250);

/// The sessions that read it: one in this many (the first, and each this many after). It is
/// a figure of the build, not of one server; read every session it took most of the set-up
/// the session waits for, and so a tenth of a workload's time.
pub const IDLE_EVERY: u32 = 8;

/// The server's CPU time a second with no load (ns/s): what its runtime spends polling
/// and waking while nothing comes, a part of every turn's CPU per request.
fn idle_cpu(pid: u32) -> Result<f64> {
    let before = cpu_ns(pid)?;
    let t = Instant::now();
    std::thread::sleep(IDLE_WINDOW);
    let after = cpu_ns(pid)?;
    Ok(after.saturating_sub(before) as f64 / t.elapsed().as_secs_f64())
}

/// How long one driver run may take.
const DRIVER_TIMEOUT: Duration = Duration::from_secs(600);

/// How an arm's turns run the driver: a run of it for each turn, or one persistent driver
/// for the session (`service.persistent_driver`), moved to the turn's cores when they change.
enum Turns<'a> {
    EachRun {
        spec: &'a Spec,
        port: u16,
        pid: Option<u32>,
    },
    Persistent {
        driver: Persistent,
        on: Vec<usize>,
    },
}

impl<'a> Turns<'a> {
    fn start(spec: &'a Spec, port: u16, pid: Option<u32>, cpus: &[usize]) -> Result<Turns<'a>> {
        Ok(if spec.persistent_driver {
            Turns::Persistent {
                driver: Persistent::start(spec, port, pid, cpus)?,
                on: cpus.to_vec(),
            }
        } else {
            Turns::EachRun { spec, port, pid }
        })
    }

    /// One turn on `cpus`: what the driver printed.
    fn run(&mut self, cpus: &[usize]) -> Result<String> {
        match self {
            Turns::EachRun { spec, port, pid } => {
                drive(spec, *port, *pid, DRIVER_TIMEOUT, Some(cpus))
            }
            Turns::Persistent { driver, on } => {
                if on.as_slice() != cpus {
                    driver.pin(cpus)?;
                    *on = cpus.to_vec();
                }
                driver.turn(DRIVER_TIMEOUT)
            }
        }
    }
}

/// The protocol: the server started and warmed by one driver run, the ready line, one batch
/// of `batch` driver runs per `g`, the closing report at `q` or end of input.
fn serve(
    spec: &Spec,
    batch: u64,
    mut input: impl BufRead,
    mut output: impl Write,
) -> Result<(), ArmStop> {
    let figures = Figures::of(spec);
    let mut server = Server::start_free(spec, &[])?;
    let port = server.port();
    let pid = Some(server.pid());
    // The warm-up runs where the arm sets up, never on the measured core.
    let setup = own_cpus();
    let mut driver = Turns::start(spec, port, pid, &setup)?;
    driver.run(&setup).context("its warm-up run failed")?;
    let idle = (figures.cpu && spec.read_idle)
        .then(|| idle_cpu(server.pid()))
        .transpose()
        .context("reading the server's CPU time with no load")?;
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
            let stdout = driver.run(&driver_cpus);
            awake.during_turn(false);
            server.check_alive()?;
            let stdout = stdout?;
            samples.push(figures.read(&stdout, || spec.driver_shown(port))?);
        }
        let elapsed_ns = started.elapsed().as_nanos() as f64;
        all.extend(samples.iter().map(|s| s.latency[0]));
        // One driver run a turn (the default): its own figures; several: each one's median.
        let mid = |of: &dyn Fn(&Sample) -> f64| {
            let mut v: Vec<f64> = samples.iter().map(of).collect();
            v.sort_by(f64::total_cmp);
            crate::measure::process_arm::quantile(&v, 0.5)
        };
        let mut line = serde_json::json!({
            "median_ns": mid(&|s| s.latency[0]),
            "p95_ns": mid(&|s| s.latency[1]),
            "p99_ns": mid(&|s| s.latency[2]),
            "mean_ns": samples.iter().map(|s| s.latency[0]).sum::<f64>() / samples.len() as f64,
            "elapsed_ns": elapsed_ns,
        });
        if figures.cpu {
            line["cpu_per_request_ns"] = mid(&|s| s.cpu_per_request_ns.unwrap_or(f64::NAN)).into();
        }
        if samples.iter().any(|s| s.saturated) {
            line["saturated"] = true.into();
        }
        // The injected cost as the server spent it (`calibrate`'s size): as `inject_ns` is
        // for mty-bench's `--inject-ns`.
        if samples.iter().all(|s| s.injected_ns.is_some()) {
            line["inject_ns"] = mid(&|s| s.injected_ns.unwrap_or(f64::NAN)).into();
        }
        if !answer(line.to_string())? {
            return Ok(());
        }
    }
    all.sort_by(f64::total_cmp);
    drop(driver);
    // Stopped (and reaped) first: the closing line's CPU time is the server's, whole, and
    // the measured driver runs'.
    drop(awake);
    let stopped = server.stop(Duration::from_secs(spec.stop_timeout_secs))?;
    let mut line = crate::measure::process_arm::closing(&all, &warm_up);
    if let Some(idle) = idle {
        line["server_idle_cpu_ns_per_s"] = idle.into();
    }
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

    fn spec(metric: Option<&str>) -> Spec {
        Spec {
            exe: "srv".into(),
            args: Vec::new(),
            env: Default::default(),
            cwd: None,
            driver: vec!["mty-loadgen".into()],
            ready_line: None,
            ready_timeout_secs: 1,
            stop_timeout_secs: 1,
            metric: metric.map(str::to_string),
            keep_core_awake: false,
            persistent_driver: false,
            read_idle: false,
        }
    }

    /// Judged by CPU (the default): the driver's CPU per request, its p50 as the median, its
    /// tail, its saturation; a driver without the CPU figure is told what to add.
    #[test]
    fn a_turn_reads_cpu_per_request_and_latency_or_names_what_is_missing() {
        let line = r#"{"p50_ns":30000,"p95_ns":41000,"p99_ns":70000,"cpu_per_request_ns":24000.5,"saturated":true}"#;
        let cpu = Figures::of(&spec(None));
        let s = cpu.read(line, || "mty-loadgen".into()).unwrap();
        assert_eq!(s.latency, [30000.0, 41000.0, 70000.0]);
        assert_eq!(s.cpu_per_request_ns, Some(24000.5));
        assert!(s.saturated);
        let s = Figures::of(&spec(Some("cpu_per_request")))
            .read(&line.replace(r#","saturated":true"#, ""), || "x".into())
            .unwrap();
        assert!(!s.saturated);
        let err = cpu
            .read(r#"{"p50_ns":30000}"#, || "mty-loadgen --rate 10".into())
            .unwrap_err();
        let text = format!("{err:#}");
        for part in [
            "cpu_per_request_ns",
            "mty-loadgen --rate 10",
            "--server-pid {pid}",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        // Judged by a latency key: that key is the median, no CPU figure is read.
        let s = Figures::of(&spec(Some("p99_ns")))
            .read(r#"{"p50_ns":1,"p95_ns":2,"p99_ns":3}"#, || "x".into())
            .unwrap();
        assert_eq!((s.latency, s.cpu_per_request_ns), ([3.0, 2.0, 3.0], None));
    }

    /// `--sum-header x-spin-ns`: the injected cost per answer is the sum over the answers that
    /// carried it; none carried it, or no such keys: no figure.
    #[test]
    fn a_turn_reads_the_injected_cost_the_server_reported() {
        let f = Figures::of(&spec(None));
        let line = |tail: &str| format!(r#"{{"p50_ns":1,"cpu_per_request_ns":9{tail}}}"#);
        let read = |tail: &str| f.read(&line(tail), || "x".into()).unwrap().injected_ns;
        assert_eq!(
            read(r#","header_sum":3000,"header_answers":12"#),
            Some(250.0)
        );
        assert_eq!(read(r#","header_sum":0,"header_answers":0"#), None);
        assert_eq!(read(""), None);
    }

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
}
