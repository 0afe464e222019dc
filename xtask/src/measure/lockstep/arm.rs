//! One arm of a session as a running process: started, told to run a batch and answered
//! within the timeout, closed, or killed with its process group; its stdout and stderr read
//! by threads of their own, so a hung arm is noticed at a timeout, not waited for forever.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::base::exec::{self, Cmd};
use crate::measure::session::Batch;

/// A running arm: its pipes, and its stdout and stderr read by threads of their own (so a
/// hung arm is noticed at a timeout, not waited for forever).
pub(super) struct RunningArm {
    pub(super) name: String,
    pub(super) cmd: Cmd,
    pub(super) child: Child,
    pub(super) stdin: Option<ChildStdin>,
    /// Each line of its stdout with the instant it arrived.
    pub(super) lines: Receiver<(Instant, String)>,
    /// When the last line taken arrived.
    pub(super) arrived: Option<Instant>,
    pub(super) stderr: Arc<Mutex<String>>,
    /// Ends when the process's stderr closes (it exited or was killed).
    pub(super) stderr_reader: Option<std::thread::JoinHandle<()>>,
}

impl RunningArm {
    pub(super) fn start(name: &str, cmd: Cmd) -> Result<RunningArm> {
        // A file just written may be busy a moment (ETXTBSY) while a process forked elsewhere
        // still holds its writing descriptor, until that process execs.
        let mut tries = 0;
        let mut child = loop {
            match cmd.spawn_piped() {
                Err(e)
                    if tries < 50
                        && e.chain().any(|c| {
                            c.downcast_ref::<std::io::Error>()
                                .is_some_and(|io| io.raw_os_error() == Some(libc::ETXTBSY))
                        }) =>
                {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(2));
                }
                other => break other?,
            }
        };
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped");
        let mut stderr_pipe = child.stderr.take().expect("piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        let stderr_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut text = sink.lock().unwrap_or_else(|e| e.into_inner());
                text.push_str(&String::from_utf8_lossy(&buf[..n]));
                // Keep the tail only.
                if text.len() > 64 * 1024 {
                    let cut = text.len() - 32 * 1024;
                    let cut = (cut..text.len())
                        .find(|i| text.is_char_boundary(*i))
                        .unwrap_or(text.len());
                    text.drain(..cut);
                }
            }
        });
        Ok(RunningArm {
            name: name.to_string(),
            cmd,
            child,
            stdin,
            lines,
            arrived: None,
            stderr,
            stderr_reader: Some(stderr_reader),
        })
    }

    pub(super) fn say(&mut self, word: &str, what: &str) -> Result<()> {
        let stdin = self.stdin.as_mut().expect("open until finish");
        if writeln!(stdin, "{word}")
            .and_then(|()| stdin.flush())
            .is_err()
        {
            return Err(self.failure(what, None));
        }
        Ok(())
    }

    pub(super) fn answer(&mut self, timeout: Duration, what: &str) -> Result<String> {
        match self.lines.recv_timeout(timeout) {
            Ok((at, line)) => {
                self.arrived = Some(at);
                Ok(line)
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.failure(what, None)),
            Err(RecvTimeoutError::Timeout) => Err(self.failure(what, Some(timeout))),
        }
    }

    /// One batch: `g`, and its summary.
    pub(super) fn batch(&mut self, timeout: Duration, what: &str) -> Result<Batch> {
        self.say("g", what)?;
        let line = self.answer(timeout, what)?;
        serde_json::from_str(&line).with_context(|| {
            format!(
                "arm `{}` (`{}`) answered {line:?}, not a batch summary",
                self.name,
                self.cmd.display()
            )
        })
    }

    /// Moves every thread of the arm onto `cpu` (sched_setaffinity on each task of its
    /// process: `taskset` exec'd the arm, so its pid is the arm's).
    pub(super) fn repin(&mut self, cpu: usize) -> Result<()> {
        let what = || format!("lockstep arm `{}`", self.name);
        let failed = crate::measure::threads::move_threads(self.child.id(), &[cpu])
            .with_context(|| format!("{}: listing its threads", what()))?;
        if let Some((tid, err)) = failed.into_iter().next() {
            bail!("{}: moving thread {tid} onto CPU {cpu}: {err}", what());
        }
        Ok(())
    }

    /// Closes stdin and waits for a clean exit.
    pub(super) fn finish(&mut self, timeout: Duration) -> Result<()> {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(_)) => return Err(self.failure("exiting", None)),
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(100));
                }
                _ => return Err(self.failure("exiting", Some(timeout))),
            }
        }
    }

    /// Kills the arm, and the process group it leads where it leads one (a whole-process
    /// arm: its runs are in it).
    pub(super) fn kill(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: getpgid and kill on our own child, not yet reaped, so its pid (and a group
        // it leads) cannot be another's.
        unsafe {
            if libc::getpgid(pid) == pid {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
    }

    /// The arm failed while doing `what`: it died (say how), or it hung past `timed_out`
    /// (kill it). Either way: its name, command line and the tail of its stderr.
    pub(super) fn failure(&mut self, what: &str, timed_out: Option<Duration>) -> anyhow::Error {
        let (how, ended) = match timed_out {
            Some(t) => {
                self.kill();
                let _ = self.child.wait();
                let how = format!(
                    "did not answer within {} s and was killed (raise `measure.timeout_secs` if it is merely slow)",
                    t.as_secs()
                );
                (how, true)
            }
            None => {
                // It closed its stdout: give it a moment to be reaped.
                let mut status = None;
                for _ in 0..500 {
                    if let Ok(Some(s)) = self.child.try_wait() {
                        status = Some(s);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                match status {
                    Some(s) => (exec::describe_status(&s), true),
                    None => ("closed its output".to_string(), false),
                }
            }
        };
        // A process that ended has closed its stderr: all it wrote is read once the reader
        // thread ends.
        if ended && let Some(reader) = self.stderr_reader.take() {
            let _ = reader.join();
        }
        let stderr = self
            .stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        anyhow::anyhow!(
            "lockstep arm `{}` {how} while {what}: `{}`{}",
            self.name,
            self.cmd.display(),
            exec::stderr_tail(&stderr)
        )
    }
}

impl Drop for RunningArm {
    fn drop(&mut self) {
        // Closing stdin ends a healthy arm; a failed session kills the rest.
        drop(self.stdin.take());
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            self.kill();
            let _ = self.child.wait();
        }
    }
}
