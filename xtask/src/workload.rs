//! A measured workload as a process: how it is started (pinned to a core) and what it prints
//! (its latency report, or any JSON line, as the last line of stdout).

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::config::Workload;
use crate::exec::Cmd;

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
