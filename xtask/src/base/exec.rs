//! Runs every external command: logs it (`ENV=… program args`), closes its stdin, and on
//! failure names the command, how it ended, and the tail of its stderr.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// An external command, built up and then run one of the ways below.
#[derive(Debug, Clone)]
pub struct Cmd {
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    env_remove: Vec<String>,
    /// Where it runs (the caller's directory when `None`).
    cwd: Option<std::path::PathBuf>,
    /// The file read as its stdin (closed when `None`).
    stdin: Option<std::path::PathBuf>,
    /// `(position, slashes)`: argv[position] (0: the program) runs as that path with
    /// `slashes` more leading slashes ([`shifted`]); shown without them.
    shift: Option<(usize, usize)>,
}

/// Extra slashes [`shifted`] puts before a path are drawn below this: half a page of heap
/// offsets (the whole path must stay under PATH_MAX, 4096 bytes).
pub const MAX_SHIFT: usize = 2048;

/// How many of `shift` slashes [`shifted`] puts before `path`: none before a bare name
/// (looked up on PATH), and no more than keep the path under PATH_MAX.
fn slashes_for(path: &[u8], shift: usize) -> usize {
    if !path.contains(&b'/') {
        return 0;
    }
    // PATH_MAX counts the terminating NUL; a relative path takes a `.` more.
    let dot = usize::from(path[0] != b'/');
    shift.min(4095usize.saturating_sub(path.len() + dot))
}

/// `exe` named with `shift` more slashes (`measure.shift_heap`): the same file, a path (and
/// so an `argv[0]`) `shift` bytes longer (a relative one gets `./` first: one byte more). A
/// bare name (looked up on PATH) is left alone; the shift is cut to keep the path under
/// PATH_MAX.
pub fn shifted(exe: &Path, shift: usize) -> std::path::PathBuf {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let bytes = exe.as_os_str().as_bytes();
    let shift = slashes_for(bytes, shift);
    if shift == 0 {
        return exe.to_path_buf();
    }
    // `./` keeps a relative path relative; the slashes after its dot are the shift.
    let mut out = if bytes[0] == b'/' {
        Vec::new()
    } else {
        vec![b'.']
    };
    out.resize(out.len() + shift, b'/');
    out.extend_from_slice(bytes);
    std::ffi::OsString::from_vec(out).into()
}

/// How many lines of stderr an error shows.
const TAIL_LINES: usize = 20;

impl Cmd {
    pub fn new(program: impl Into<String>) -> Self {
        Cmd {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            env_remove: Vec::new(),
            cwd: None,
            stdin: None,
            shift: None,
        }
    }

    /// Runs argv[`position`] (0: the program), a path, with `slashes` more leading slashes:
    /// the same file under a longer name (`measure.shift_heap`).
    pub fn shift_path(mut self, position: usize, slashes: usize) -> Self {
        self.shift = Some((position, slashes));
        self
    }

    /// The program and arguments as run: the shift applied.
    fn argv(&self) -> (String, Vec<String>) {
        let (mut program, mut args) = (self.program.clone(), self.args.clone());
        if let Some((position, slashes)) = self.shift {
            let path = if position == 0 {
                &mut program
            } else {
                &mut args[position - 1]
            };
            *path = shifted(Path::new(path.as_str()), slashes)
                .display()
                .to_string();
        }
        (program, args)
    }

    /// Runs it in `dir`.
    pub fn cwd(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Feeds it `file` on stdin (a lockstep arm's stdin is its protocol pipe: not for those).
    pub fn stdin_file(mut self, file: impl Into<std::path::PathBuf>) -> Self {
        self.stdin = Some(file.into());
        self
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<S: Into<String>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.push((key.to_string(), value.into()));
        self
    }

    pub fn env_remove(mut self, key: &str) -> Self {
        self.env_remove.push(key.to_string());
        self
    }

    /// The command as one would type it, with the environment it sets.
    pub fn display(&self) -> String {
        let mut parts: Vec<String> = self
            .env
            .iter()
            .map(|(k, v)| format!("{k}={}", quote(v)))
            .collect();
        parts.push(quote(&self.program));
        parts.extend(self.args.iter().map(|a| quote(a)));
        if let Some(file) = &self.stdin {
            parts.push(format!("< {}", quote(&file.display().to_string())));
        }
        if let Some((position, shift)) = self.shift {
            let path = if position == 0 {
                &self.program
            } else {
                &self.args[position - 1]
            };
            let slashes = slashes_for(path.as_bytes(), shift);
            if slashes > 0 {
                parts[self.env.len() + position].push_str(&format!(
                    " (its path run with {slashes} more leading slashes)"
                ));
            }
        }
        parts.join(" ")
    }

    fn expression(&self) -> duct::Expression {
        let (program, args) = self.argv();
        let mut expr = duct::cmd(program, args).unchecked();
        expr = match &self.stdin {
            Some(file) => expr.stdin_path(file),
            None => expr.stdin_null(),
        };
        if let Some(dir) = &self.cwd {
            expr = expr.dir(dir);
        }
        for key in &self.env_remove {
            expr = expr.env_remove(key);
        }
        for (k, v) in &self.env {
            expr = expr.env(k, v);
        }
        expr
    }

    /// The `$ …` line: the command, and the directory it runs in when it has one of its own
    /// (errors quote the command alone).
    fn log(&self) {
        match &self.cwd {
            Some(dir) => eprintln!(
                "$ (cd {} && {})",
                quote(&dir.display().to_string()),
                self.display()
            ),
            None => eprintln!("$ {}", self.display()),
        }
    }

    /// Runs to completion and returns stdout; fails unless it exits 0.
    pub fn read(&self) -> Result<String> {
        let output = self.output()?;
        check(self, &output)?;
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Runs to completion, logged, and returns stdout and stderr whatever the exit status.
    pub fn output(&self) -> Result<Output> {
        self.log();
        self.output_unlogged()
    }

    /// [`Cmd::output`] without the `$ …` line.
    pub fn output_unlogged(&self) -> Result<Output> {
        self.expression()
            .stdout_capture()
            .stderr_capture()
            .run()
            .map_err(|err| spawn_error(self, err))
    }

    /// Runs, logged, with stdout and stderr captured; kills it after `timeout`. Fails when it
    /// times out, exits non-zero, or dies of a signal.
    pub fn run_with_timeout(&self, timeout: Duration) -> Result<Output> {
        self.log();
        let handle = self
            .expression()
            .stdout_capture()
            .stderr_capture()
            .start()
            .map_err(|err| spawn_error(self, err))?;
        match handle.wait_timeout(timeout) {
            Ok(Some(output)) => {
                check(self, output)?;
                Ok(output.clone())
            }
            Ok(None) => {
                let _ = handle.kill();
                bail!(
                    "`{}` did not finish within its timeout of {} s and was killed; \
                     raise `timeout_secs` in the config if it is merely slow",
                    self.display(),
                    timeout.as_secs()
                )
            }
            Err(err) => Err(spawn_error(self, err)),
        }
    }
}

impl Cmd {
    /// Starts it, logged, with stdin, stdout and stderr all piped to the caller: for a
    /// process that is talked to while it runs (the lockstep arms).
    pub fn spawn_piped(&self) -> Result<std::process::Child> {
        use std::process::Stdio;
        self.log();
        self.command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|err| spawn_error(self, err))
    }

    /// Starts it, logged, stdin closed, stdout piped to the caller and stderr written to
    /// `stderr_log`; [`reap`] waits for it and says what it cost.
    pub fn spawn_streaming(&self, stderr_log: &Path) -> Result<std::process::Child> {
        use std::process::Stdio;
        self.log();
        let log = std::fs::File::create(stderr_log)
            .with_context(|| format!("cannot create {}", stderr_log.display()))?;
        self.command()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|err| spawn_error(self, err))
    }

    /// As run: program, arguments, directory, environment.
    fn command(&self) -> std::process::Command {
        let (program, args) = self.argv();
        let mut command = std::process::Command::new(program);
        command.args(args);
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        for key in &self.env_remove {
            command.env_remove(key);
        }
        for (k, v) in &self.env {
            command.env(k, v);
        }
        command
    }
}

/// How a child ended, as `wait4` reports it.
#[derive(Debug, Clone, Copy)]
pub struct Reaped {
    pub status: std::process::ExitStatus,
    /// The largest resident set of the child and of every descendant it waited for, bytes.
    pub peak_rss_bytes: u64,
}

/// Waits for `child` with `wait4`, which std's `wait` does not expose: its exit status and
/// the peak memory of its process tree (a build's largest rustc or link). The `Child` is not
/// waited for again afterwards.
pub fn reap(child: &std::process::Child) -> Result<Reaped> {
    use std::os::unix::process::ExitStatusExt;
    let pid = libc::pid_t::try_from(child.id()).context("a pid out of range")?;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value; wait4 fills it and `status`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is our own child, not yet waited for; the pointers are to locals.
        if unsafe { libc::wait4(pid, &mut status, 0, &mut usage) } == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err).with_context(|| format!("cannot wait for process {pid}"));
        }
    }
    Ok(Reaped {
        status: std::process::ExitStatus::from_raw(status),
        // ru_maxrss is in KiB on Linux.
        peak_rss_bytes: u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024,
    })
}

fn spawn_error(cmd: &Cmd, err: std::io::Error) -> anyhow::Error {
    anyhow::Error::new(err).context(format!("cannot run `{}`", cmd.display()))
}

/// Fails unless the command exited 0, saying how it ended and what it printed last.
pub fn check(cmd: &Cmd, output: &Output) -> Result<()> {
    if output.status.success() {
        return Ok(());
    }
    bail!(
        "`{}` {}{}",
        cmd.display(),
        describe_status(&output.status),
        stderr_tail(&String::from_utf8_lossy(&output.stderr))
    )
}

/// "exited with status 3" or "was killed by signal 9 (SIGKILL)".
pub fn describe_status(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    match status.signal() {
        Some(sig) => format!("was killed by signal {sig}{}", signal_name(sig)),
        None => format!("ended abnormally ({status})"),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        2 => " (SIGINT)",
        6 => " (SIGABRT)",
        9 => " (SIGKILL)",
        11 => " (SIGSEGV)",
        15 => " (SIGTERM)",
        _ => "",
    }
}

/// The last lines of a command's stderr, formatted for an error message ("" if none).
pub fn stderr_tail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::new();
    }
    let tail = &lines[lines.len().saturating_sub(TAIL_LINES)..];
    format!("\n--- last lines of its stderr ---\n{}", tail.join("\n"))
}

fn quote(s: &str) -> String {
    // CARGO_ENCODED_RUSTFLAGS separates flags with \x1f: shown, not swallowed.
    if s.contains('\x1f') {
        let escaped = s
            .replace('\\', "\\\\")
            .replace('\'', "\\'")
            .replace('\x1f', "\\x1f");
        return format!("$'{escaped}'");
    }
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,%+@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_shows_environment_and_quotes_what_needs_it() {
        let cmd = Cmd::new("cargo")
            .arg("build")
            .arg("a b")
            .env("RUSTFLAGS", "-Cx -Cy");
        assert_eq!(cmd.display(), "RUSTFLAGS='-Cx -Cy' cargo build 'a b'");
    }

    #[test]
    fn a_failing_command_is_named_with_its_status_and_stderr_tail() {
        let cmd = Cmd::new("sh").args(["-c", "echo one >&2; echo two >&2; exit 3"]);
        let err = cmd.read().unwrap_err().to_string();
        assert!(
            err.starts_with("`sh -c 'echo one >&2; echo two >&2; exit 3'` exited with status 3"),
            "{err}"
        );
        assert!(
            err.ends_with("--- last lines of its stderr ---\none\ntwo"),
            "{err}"
        );
    }

    #[test]
    fn a_command_killed_by_a_signal_says_which() {
        let cmd = Cmd::new("sh").args(["-c", "kill -SEGV $$"]);
        let err = cmd
            .run_with_timeout(Duration::from_secs(10))
            .unwrap_err()
            .to_string();
        assert!(err.contains("was killed by signal 11 (SIGSEGV)"), "{err}");
    }

    #[test]
    fn a_hanging_command_is_killed_after_its_timeout() {
        let start = std::time::Instant::now();
        let err = Cmd::new("sleep")
            .arg("30")
            .run_with_timeout(Duration::from_millis(300))
            .unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "it was killed, not waited for"
        );
        assert!(
            err.to_string()
                .contains("did not finish within its timeout"),
            "{err}"
        );
    }

    #[test]
    fn stdin_is_closed() {
        // `cat` with stdin closed reads EOF at once instead of waiting for a terminal.
        let out = Cmd::new("cat")
            .run_with_timeout(Duration::from_secs(10))
            .unwrap();
        assert!(out.stdout.is_empty());
    }
}
