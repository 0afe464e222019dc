//! A persistent driver (`service.persistent_driver`): started once for an arm's session, it
//! takes a turn for each line written to its stdin and answers each with one line on its
//! stdout (`mty-loadgen --turns-on-stdin`). A turn then costs no process start and no
//! connection set-up, so more of the session's time is recorded.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::measure::service::{Spec, TAIL_LINES, Tail, driver_command, spawn_reader};
use crate::measure::threads::move_threads;

/// How long a driver told to stop (its stdin closed) may take before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// A running driver; stopped (stdin closed, then SIGKILL) and reaped when dropped.
pub struct Persistent {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    shown: String,
    stderr: Tail,
    turns: u64,
}

impl Persistent {
    /// Starts the driver against `port` (the server's process `pid`), on `cpus`.
    pub fn start(spec: &Spec, port: u16, pid: Option<u32>, cpus: &[usize]) -> Result<Persistent> {
        let shown = spec.driver_shown(port);
        let mut cmd = driver_command(spec, port, pid, Some(cpus))?;
        cmd.stdin(Stdio::piped());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot run the driver `{shown}`"))?;
        let stderr = Tail::default();
        spawn_reader(child.stderr.take().expect("piped"), stderr.clone(), None);
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Persistent {
            stdin: child.stdin.take(),
            child,
            lines,
            shown,
            stderr,
            turns: 0,
        })
    }

    /// One turn: a line to the driver, its answering line back within `timeout`. Fails when
    /// the driver said more than one line for the turn before, or its line counts requests
    /// that failed in transport (`errors`, as a driver run per turn fails by its exit status).
    pub fn turn(&mut self, timeout: Duration) -> Result<String> {
        if let Ok(extra) = self.lines.try_recv() {
            bail!(
                "the driver `{}` printed more than one line for turn {} (then `{extra}`): a persistent driver answers each line on its stdin with exactly one line",
                self.shown,
                self.turns
            );
        }
        self.turns += 1;
        let asked = self
            .stdin
            .as_mut()
            .map(|stdin| stdin.write_all(b"\n").and_then(|()| stdin.flush()));
        if let Some(Err(err)) = asked {
            return Err(self.ended(&format!("its stdin closed ({err})")));
        }
        let deadline = Instant::now() + timeout;
        match self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(line) => {
                let errors = serde_json::from_str::<serde_json::Value>(&line)
                    .ok()
                    .and_then(|v| v.get("errors")?.as_u64())
                    .unwrap_or(0);
                if errors > 0 {
                    // Its stderr says which request failed: give the reader thread a moment.
                    std::thread::sleep(Duration::from_millis(50));
                    bail!(
                        "the driver `{}` counted {errors} request(s) failed in transport in turn {}; its stderr ends:{}",
                        self.shown,
                        self.turns,
                        self.stderr.show()
                    );
                }
                Ok(line)
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.ended("its stdout closed")),
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                bail!(
                    "the driver `{}` did not answer turn {} within {} s and was killed; its stderr ends:{}",
                    self.shown,
                    self.turns,
                    timeout.as_secs(),
                    self.stderr.show()
                )
            }
        }
    }

    /// Moves every thread of the driver onto `cpus`.
    pub fn pin(&self, cpus: &[usize]) -> Result<()> {
        move_threads(self.child.id(), cpus)
            .with_context(|| format!("listing the threads of the driver `{}`", self.shown))?;
        Ok(())
    }

    /// The driver ended or stopped listening (`how`) instead of answering: why, and what a
    /// persistent driver must do.
    fn ended(&mut self, how: &str) -> anyhow::Error {
        // Its stdout closed: it exits, or has.
        let deadline = Instant::now() + STOP_GRACE;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => break None,
            }
        };
        let status = status.map_or("is still running".to_string(), |s| {
            crate::base::exec::describe_status(&s)
        });
        anyhow::anyhow!(
            "the driver `{}` {how} before it answered turn {} and {status}: a persistent driver \
             (`service.persistent_driver = true`) runs one turn for each line on its stdin and \
             answers each with one line on stdout (mty-loadgen: `--turns-on-stdin`); its \
             stderr ends (last {TAIL_LINES} lines):{}",
            self.shown,
            self.turns,
            self.stderr.show()
        )
    }
}

impl Drop for Persistent {
    fn drop(&mut self) {
        // The end of its input: it finishes.
        drop(self.stdin.take());
        let deadline = Instant::now() + STOP_GRACE;
        while matches!(self.child.try_wait(), Ok(None)) {
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
