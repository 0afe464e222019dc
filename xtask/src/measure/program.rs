//! A measured workload as a process: how it is started (pinned to a core) and what it prints
//! (its latency report, or any JSON line, as the last line of stdout).

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::base::exec::Cmd;
use crate::config::Workload;

/// What one `mty-bench` latency run printed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadLine {
    pub median_ns: u64,
    pub p95_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    pub clock_overhead_ns: u64,
    /// `[quantile, ns]` pairs.
    pub percentiles: Vec<(f64, u64)>,
    pub user_ms: f64,
    pub sys_ms: f64,
    pub voluntary_ctx_switches: u64,
    pub involuntary_ctx_switches: u64,
    /// A service arm judged by CPU: its server's CPU time a second with no load, read
    /// after its warm-up (the runtime's idle polling and wake-ups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_idle_cpu_ns_per_s: Option<f64>,
}

/// Parses the JSON line a latency workload prints (the last non-empty line of stdout).
pub fn parse_line(stdout: &str) -> Result<WorkloadLine> {
    parse_last_line(stdout, "a latency report")
}

/// The last non-empty line of a workload's stdout, parsed as `what`.
pub fn parse_last_line<T: serde::de::DeserializeOwned>(stdout: &str, what: &str) -> Result<T> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .context("it printed nothing on stdout")?;
    serde_json::from_str(line).with_context(|| {
        let shown: String = line.chars().take(200).collect();
        format!("its last line is not {what}: {shown}")
    })
}

/// Workload `w` run whole on `exe`: its arguments, environment, directory and stdin file
/// (`cwd` and `stdin` relative to the workspace `root`). Training, profiling and BOLT's
/// training all start a workload through this.
pub fn command(exe: &Path, w: &Workload, root: &Path) -> Cmd {
    with_setting(
        Cmd::new(exe.display().to_string()).args(w.args.iter().cloned()),
        &w.resolved(root),
    )
}

/// `cmd` with the environment, directory and stdin file of `w`, whose paths are resolved
/// ([`Workload::resolved`]).
pub fn with_setting(mut cmd: Cmd, w: &Workload) -> Cmd {
    for (key, value) in &w.env {
        cmd = cmd.env(key, value.clone());
    }
    if let Some(dir) = &w.cwd {
        cmd = cmd.cwd(dir);
    }
    if let Some(file) = &w.stdin {
        cmd = cmd.stdin_file(file);
    }
    cmd
}

pub use crate::base::exec::{MAX_SHIFT, shifted};

/// `exe`, pinned to `core` with `taskset -c` when one is given.
pub fn pinned(exe: &Path, core: Option<usize>) -> Cmd {
    match core {
        Some(core) => Cmd::new("taskset").args([
            "-c".to_string(),
            core.to_string(),
            exe.display().to_string(),
        ]),
        None => Cmd::new(exe.display().to_string()),
    }
}

/// [`pinned`], `exe` run as its path with `shift` more leading slashes ([`shifted`]).
pub fn pinned_shifted(exe: &Path, core: Option<usize>, shift: usize) -> Cmd {
    let position = if core.is_some() { 3 } else { 0 };
    pinned(exe, core).shift_path(position, shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shifted_path_names_the_same_file_and_is_longer_by_the_shift() {
        let exe = std::env::current_exe().unwrap();
        let same =
            |p: &Path| std::fs::canonicalize(p).unwrap() == std::fs::canonicalize(&exe).unwrap();
        for shift in [0, 1, 7, MAX_SHIFT - 1] {
            let path = shifted(&exe, shift);
            assert!(same(&path), "{}", path.display());
            assert_eq!(path.as_os_str().len(), exe.as_os_str().len() + shift);
        }
        // A relative path stays relative (a `./` more), a bare name is looked up on PATH.
        let dir = exe.parent().unwrap();
        let name = Path::new(dir.file_name().unwrap()).join(exe.file_name().unwrap());
        let rel = shifted(&name, 5);
        assert!(rel.is_relative());
        assert_eq!(
            std::fs::canonicalize(dir.parent().unwrap().join(&rel)).unwrap(),
            std::fs::canonicalize(&exe).unwrap()
        );
        assert_eq!(shifted(Path::new("sh"), 9), Path::new("sh"));
        // Never past PATH_MAX: a long path takes what room is left.
        let deep = format!("/{}", "d/".repeat(1500));
        let longest = shifted(Path::new(&deep), MAX_SHIFT);
        assert_eq!(longest.as_os_str().len(), 4095);
        assert!(
            std::fs::metadata(&longest).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        );
        // Run pinned, the command shows the path as it is and says by how much it ran longer.
        let cmd = pinned_shifted(&exe, Some(0), 12);
        assert_eq!(
            cmd.display(),
            format!(
                "taskset -c 0 {} (its path run with 12 more leading slashes)",
                exe.display()
            )
        );
        let out = pinned_shifted(Path::new("/bin/sh"), None, 5)
            .args(["-c", "tr '\\0' '\\n' < /proc/$$/cmdline | head -n 1"])
            .read()
            .unwrap();
        assert_eq!(out.trim(), "//////bin/sh", "what ran");
    }
}
