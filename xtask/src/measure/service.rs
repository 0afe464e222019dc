//! Service workloads (`mode = "service"`): a server started on a free port, waited for until
//! it is ready, loaded by a driver command, and stopped (SIGTERM, then SIGKILL after
//! `service.stop_timeout_secs`).
//!
//! Training runs the instrumented server once per training workload: started, loaded by the
//! driver once, stopped. An instrumented program writes its raw profile when it exits
//! normally; a server killed by a signal writes none, which [`Stopped::why_no_profile`]
//! explains. With `train.continuous` the counters live in the raw profile file as they
//! change, so even SIGKILL keeps them.
//!
//! Measuring runs each arm as `service_arm.rs`, which uses the same server and driver. A
//! server leads a process group of its own and dies with the thread that started it
//! (`PR_SET_PDEATHSIG`), so a failed or interrupted run leaves no server behind.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::config::Workload;
use crate::measure::service_port::{fill, fill_driver, free_port};
use crate::measure::threads::{move_threads, set_affinity};

/// How many lines of a server's output an error shows.
pub(crate) const TAIL_LINES: usize = 20;

/// The server and its driver, with every path resolved: what an arm or a training run
/// needs, as JSON in an arm's first argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    pub exe: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// The driver's command line, its program resolved (`Ctx::resolve_drivers`).
    pub driver: Vec<String>,
    pub ready_line: Option<String>,
    pub ready_timeout_secs: u64,
    pub stop_timeout_secs: u64,
    /// The key of the driver's figure (measuring only); [`crate::config::CPU_PER_REQUEST`] or none: the
    /// server's CPU time per request.
    pub metric: Option<String>,
    /// Keep the measured core from idling during a turn ([`Awake`]).
    #[serde(default)]
    pub keep_core_awake: bool,
    /// The driver stays up for the session and takes a turn per line on its stdin
    /// (`service_driver.rs`; `service.persistent_driver`).
    #[serde(default)]
    pub persistent_driver: bool,
    /// Read the server's CPU time with no load before the turns (a quarter of a second of
    /// the session's set-up): in some sessions only (`service_arm::IDLE_EVERY`).
    #[serde(default)]
    pub read_idle: bool,
}

impl Spec {
    /// Workload `w` (its paths resolved, [`Workload::resolved`], and its driver's program,
    /// `Ctx::resolve_drivers`) on server `exe` with `args` (the workload's own and the arm's).
    pub fn new(exe: &Path, args: &[String], w: &Workload) -> Result<Spec> {
        let service = w
            .service
            .as_ref()
            .with_context(|| format!("workload `{}` is not a service workload", w.name))?;
        Ok(Spec {
            exe: exe.to_path_buf(),
            args: args.to_vec(),
            env: w.env.clone(),
            cwd: w.cwd.clone(),
            driver: service.driver.clone(),
            ready_line: service.ready_line.clone(),
            ready_timeout_secs: service.ready_timeout().as_secs(),
            stop_timeout_secs: service.stop_timeout().as_secs(),
            metric: w.metric.clone(),
            keep_core_awake: service.keep_core_awake.unwrap_or(true),
            persistent_driver: service.persistent_driver.unwrap_or(false),
            read_idle: true,
        })
    }

    pub(crate) fn server_shown(&self, port: u16) -> String {
        std::iter::once(self.exe.display().to_string())
            .chain(self.args.iter().map(|a| fill(a, port)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    pub(crate) fn driver_shown(&self, port: u16) -> String {
        self.driver
            .iter()
            .map(|a| fill(a, port))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The last lines of a stream, kept by a thread that reads it to its end (a pipe nobody
/// reads would block the server once full).
#[derive(Clone, Default)]
pub(crate) struct Tail(Arc<Mutex<VecDeque<String>>>);

impl Tail {
    pub(crate) fn push(&self, line: String) {
        let mut lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    pub(crate) fn show(&self) -> String {
        let lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if lines.is_empty() {
            "\n(nothing)".to_string()
        } else {
            lines.iter().map(|l| format!("\n{l}")).collect()
        }
    }
}

/// A running server; killed (SIGKILL) and reaped when dropped without [`Server::stop`].
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    shown: String,
    stdout: Tail,
    stderr: Tail,
}

/// How a server ended.
#[derive(Debug, Clone)]
pub struct Stopped {
    pub status: ExitStatus,
    /// It ignored SIGTERM for the stop timeout and was killed.
    pub killed_after: Option<Duration>,
    /// It had exited before it was asked to.
    pub early: bool,
}

impl Stopped {
    /// "exited with status 0 after SIGTERM", "was killed by SIGKILL after ignoring SIGTERM
    /// for 10 s", …
    pub fn describe(&self) -> String {
        let how = crate::base::exec::describe_status(&self.status);
        match (self.early, self.killed_after) {
            (true, _) => format!("{how} before it was stopped"),
            (false, Some(after)) => {
                format!("{how} after it ignored SIGTERM for {} s", after.as_secs())
            }
            (false, None) => format!("{how} on SIGTERM"),
        }
    }

    /// Why an instrumented server that ended this way left no raw profile, and what to do;
    /// `None` when it exited normally (then the binary was not instrumented).
    pub fn why_no_profile(&self) -> Option<String> {
        use std::os::unix::process::ExitStatusExt;
        let signal = self.status.signal()?;
        let name = match signal {
            libc::SIGKILL => "SIGKILL",
            libc::SIGTERM => "SIGTERM",
            _ => "a signal",
        };
        Some(format!(
            "the server {}: a process killed by {name} runs no exit handlers, and an instrumented program writes its raw profile in one. \
             Handle SIGTERM and return from `main` (with tokio: `tokio::signal::unix::signal(SignalKind::terminate())`, axum: `with_graceful_shutdown`), \
             raise `service.stop_timeout_secs` if it shuts down slowly, or set `continuous = true` under `[train]` (counters kept in the file as they change)",
            self.describe()
        ))
    }
}

impl Server {
    /// Starts `spec`'s server on a [`free_port`]; when it fails and its port is taken now
    /// (another process bound it in between), again on another, at most three times in all.
    pub fn start_free(spec: &Spec, env: &[(String, String)]) -> Result<Server> {
        Self::start_on(spec, env, free_port)
    }

    /// [`Server::start_free`] with the ports from `ports`.
    pub(crate) fn start_on(
        spec: &Spec,
        env: &[(String, String)],
        mut ports: impl FnMut() -> Result<u16>,
    ) -> Result<Server> {
        let mut tries = 0;
        loop {
            let port = ports()?;
            tries += 1;
            match Server::start(spec, port, env) {
                Err(err) if tries < 3 && TcpListener::bind(("127.0.0.1", port)).is_err() => {
                    eprintln!(
                        "xtask: port {port} was taken while the server started ({err:#}); \
                         starting it on another"
                    );
                }
                started => return started,
            }
        }
    }

    /// Starts `spec`'s server on `port` with `env` added (the pipeline's, such as
    /// `LLVM_PROFILE_FILE`) and waits until it is ready; kills it and fails, naming it, when
    /// it exits first or is not ready within the ready timeout.
    pub fn start(spec: &Spec, port: u16, env: &[(String, String)]) -> Result<Server> {
        let shown = spec.server_shown(port);
        let mut cmd = Command::new(&spec.exe);
        cmd.args(spec.args.iter().map(|a| fill(a, port)))
            .envs(spec.env.iter().map(|(k, v)| (k, fill(v, port))))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = &spec.cwd {
            cmd.current_dir(dir);
        }
        die_with_parent_in(&mut cmd, true);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start the server `{shown}`"))?;
        let (stdout, stderr) = (Tail::default(), Tail::default());
        let ready_line = spawn_reader(
            child.stdout.take().expect("piped"),
            stdout.clone(),
            spec.ready_line.clone(),
        );
        spawn_reader(child.stderr.take().expect("piped"), stderr.clone(), None);
        let mut server = Server {
            child: Some(child),
            port,
            shown,
            stdout,
            stderr,
        };
        server.wait_ready(spec, ready_line)?;
        Ok(server)
    }

    fn wait_ready(&mut self, spec: &Spec, ready_line: Receiver<()>) -> Result<()> {
        let timeout = Duration::from_secs(spec.ready_timeout_secs);
        let deadline = Instant::now() + timeout;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        loop {
            if let Some(status) = self.child_mut().try_wait()? {
                bail!(
                    "the server `{}` {} before it was ready; its stderr ends:{}",
                    self.shown,
                    crate::base::exec::describe_status(&status),
                    self.stderr.show()
                );
            }
            let ready = match &spec.ready_line {
                Some(_) => match ready_line.recv_timeout(Duration::from_millis(20)) {
                    Ok(()) => true,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => false,
                    // Its stdout closed without the line: wait for its port, or its end.
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        std::thread::sleep(Duration::from_millis(20));
                        false
                    }
                },
                None => {
                    TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() || {
                        std::thread::sleep(Duration::from_millis(20));
                        false
                    }
                }
            };
            if ready {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.kill();
                let waited_for = match &spec.ready_line {
                    Some(text) => format!("no line of its stdout contained `{text}`"),
                    None => format!("nothing accepted connections on {addr}"),
                };
                bail!(
                    "the server `{}` was not ready within {} s ({waited_for}) and was killed; \
                     check `service.ready_line` against what it prints (or raise `service.ready_timeout_secs`). \
                     Its stdout ends:{}\nIts stderr ends:{}",
                    self.shown,
                    timeout.as_secs(),
                    self.stdout.show(),
                    self.stderr.show()
                );
            }
        }
    }

    fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("a server not yet stopped")
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("a server not yet stopped").id()
    }

    /// Fails, naming the server and its stderr, when it has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child_mut().try_wait()? {
            bail!(
                "the server `{}` {} while it was being measured; its stderr ends:{}",
                self.shown,
                crate::base::exec::describe_status(&status),
                self.stderr.show()
            );
        }
        Ok(())
    }

    /// SIGTERM, then SIGKILL when it has not exited within `grace`; reaped either way. Both
    /// go to its process group: a server started through a wrapper, or one that forks
    /// workers, stops whole.
    pub fn stop(mut self, grace: Duration) -> Result<Stopped> {
        let mut child = self.child.take().expect("a server not yet stopped");
        let result = stop_child(&mut child, grace);
        if result.is_err() {
            signal_group(&child, libc::SIGKILL);
            let _ = child.wait();
        }
        result
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal_group(&child, libc::SIGKILL);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Moves every thread of the server onto `cpus` (one that ended meanwhile is skipped).
    pub(crate) fn pin(&self, cpus: &[usize]) -> Result<()> {
        move_threads(self.pid(), cpus)
            .with_context(|| format!("listing the threads of the server `{}`", self.shown))?;
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn stop_child(child: &mut Child, grace: Duration) -> Result<Stopped> {
    if let Some(status) = child.try_wait()? {
        return Ok(Stopped {
            status,
            killed_after: None,
            early: true,
        });
    }
    signal_group(child, libc::SIGTERM);
    let deadline = Instant::now() + grace;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Stopped {
                status,
                killed_after: None,
                early: false,
            });
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    signal_group(child, libc::SIGKILL);
    let _ = child.kill();
    Ok(Stopped {
        status: child.wait()?,
        killed_after: Some(grace),
        early: false,
    })
}

/// `signal` to the process group a server leads ([`die_with_parent`] made it one).
fn signal_group(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) on the group of our own child, not yet reaped (its pid is its group's
    // id, so the group cannot be another's).
    unsafe { libc::kill(-(child.id() as libc::pid_t), signal) };
}

/// The command dies with the thread that started it (`PR_SET_PDEATHSIG`): a killed arm or
/// an interrupted xtask leaves no server, driver or whole-process run behind.
pub(crate) fn die_with_parent(cmd: &mut Command) {
    die_with_parent_in(cmd, false);
}

/// [`die_with_parent`], the command leading a process group of its own when `group` (a
/// server: its workers, or the program a wrapper starts, are stopped with it).
fn die_with_parent_in(cmd: &mut Command, group: bool) {
    let parent = std::process::id();
    // SAFETY: between fork and exec only async-signal-safe calls may run; `prctl` and
    // `getppid` are plain system calls, and nothing here allocates or takes a lock.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died between the fork and the prctl: no signal will come. (No
            // allocation here: an error code only.)
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            if group && libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Reads `stream` line by line into `tail` until it closes; the receiver hears once when a
/// line contains `ready`.
pub(crate) fn spawn_reader(
    stream: impl Read + Send + 'static,
    tail: Tail,
    ready: Option<String>,
) -> Receiver<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut told = false;
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if !told && ready.as_deref().is_some_and(|r| line.contains(r)) {
                told = true;
                let _ = tx.send(());
            }
            tail.push(line);
        }
    });
    rx
}

/// The driver's command against `port` (`{pid}`: the server's process id, where known), its
/// stdout and stderr piped, dying with this thread, on `cpus` when given.
pub(crate) fn driver_command(
    spec: &Spec,
    port: u16,
    pid: Option<u32>,
    cpus: Option<&[usize]>,
) -> Result<Command> {
    let mut argv = spec.driver.iter().map(|a| fill_driver(a, port, pid));
    let mut cmd = Command::new(argv.next().context("an empty driver")?);
    cmd.args(argv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = &spec.cwd {
        cmd.current_dir(dir);
    }
    die_with_parent(&mut cmd);
    if let Some(cpus) = cpus {
        let cpus = cpus.to_vec();
        // SAFETY: sched_setaffinity is a plain system call on a stack value.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || set_affinity(0, &cpus));
        }
    }
    Ok(cmd)
}

/// Runs the driver against `port` (a server whose process is `pid`, where known) to its end
/// (killed after `timeout`), on `cpus` when given; its stdout. Fails, naming it, unless it
/// exits 0. A persistent driver gets one line on its stdin: one turn.
pub fn drive(
    spec: &Spec,
    port: u16,
    pid: Option<u32>,
    timeout: Duration,
    cpus: Option<&[usize]>,
) -> Result<String> {
    let shown = spec.driver_shown(port);
    let mut cmd = driver_command(spec, port, pid, cpus)?;
    if spec.persistent_driver {
        // One line, then the end of input: one turn.
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run the driver `{shown}`"))?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        // A driver that exits without reading fails below with its own status.
        let _ = stdin.write_all(b"\n");
    }
    let (out_tail, err_tail) = (Tail::default(), Tail::default());
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    spawn_reader(child.stderr.take().expect("piped"), err_tail.clone(), None);
    // A blocking wait (no polling on the arm's core while a turn runs), a watchdog thread
    // for the timeout.
    let pid = child.id() as libc::pid_t;
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        let late = finished.recv_timeout(timeout).is_err();
        if late {
            // SAFETY: kill(2) on our child; it is reaped only after this thread is joined.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        late
    });
    let status = child.wait();
    let _ = done.send(());
    let late = watchdog.join().unwrap_or(false);
    let status = status?;
    if late {
        bail!(
            "the driver `{shown}` did not finish within {} s and was killed; its stderr ends:{}",
            timeout.as_secs(),
            err_tail.show()
        );
    }
    let stdout = reader.join().unwrap_or_default();
    for line in stdout
        .lines()
        .rev()
        .take(TAIL_LINES)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        out_tail.push(line.to_string());
    }
    if !status.success() {
        bail!(
            "the driver `{shown}` {}; its stderr ends:{}",
            crate::base::exec::describe_status(&status),
            err_tail.show()
        );
    }
    Ok(stdout)
}

/// Runs `w` once on `exe` with `env` added (`LLVM_PROFILE_FILE` for an instrumented run):
/// a command to its end, or a service workload's server started, loaded by its driver
/// (`Ctx::resolve_drivers` done) and stopped, whose end is returned.
pub fn run_once(
    exe: &Path,
    w: &Workload,
    root: &Path,
    env: &[(String, String)],
    timeout: Duration,
) -> Result<Option<Stopped>> {
    if w.mode != crate::config::Mode::Service {
        let mut cmd = crate::measure::program::command(exe, w, root);
        for (k, v) in env {
            cmd = cmd.env(k, v);
        }
        cmd.run_with_timeout(timeout)?;
        return Ok(None);
    }
    let spec = Spec::new(exe, &w.args, &w.resolved(root))?;
    train(&spec, env, timeout).map(Some)
}

/// One training run of a service workload: the server started with `env` (the profile's
/// file pattern), loaded by its driver once, stopped. How it ended, for the caller to
/// explain a missing profile.
pub fn train(spec: &Spec, env: &[(String, String)], timeout: Duration) -> Result<Stopped> {
    let mut server = Server::start_free(spec, env)?;
    let port = server.port();
    eprintln!(
        "$ {}   (server on 127.0.0.1:{port}; driver: {})",
        spec.server_shown(port),
        spec.driver_shown(port)
    );
    drive(spec, port, Some(server.pid()), timeout, None)?;
    server.check_alive()?;
    server.stop(Duration::from_secs(spec.stop_timeout_secs))
}

#[cfg(test)]
mod tests;
