//! A workload of the config, trained or measured: its command (arguments, environment,
//! directory, stdin file, timeout) and how it is measured (`Mode`, its own lockstep
//! settings). Kept apart from the rest of the schema: it is the part a program of another
//! workspace fills in. Its settings resolved against `measure` are in `config.rs`, beside
//! `Lockstep`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How a measured workload is timed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// In-process lockstep: each arm is one live process of `binary` serving the lockstep
    /// protocol (`--lockstep N` appended to `args`; the `mty-lockstep` crate serves it), each
    /// turn one batch of N iterations, each iteration timed by the program.
    #[default]
    Lockstep,
    /// Whole-process lockstep: each turn runs the command once per arm, its wall time (or the
    /// figure it prints, `metric`) the sample. For a program that cannot link `mty-lockstep`.
    Process,
    /// A server: each arm is the server running for the whole session on its own port; each
    /// turn runs the `service.driver` against it once, and the driver's figure (`metric`) is
    /// the sample. Trained by starting the server, running the driver, then stopping it.
    Service,
}

/// The value of a service workload's `metric` that judges it by its server's CPU time per
/// request (the default): the driver prints `cpu_per_request_ns` (mty-loadgen does with
/// `--server-pid {pid}`), and its `p50_ns` is the turn's median latency.
pub const CPU_PER_REQUEST: &str = "cpu_per_request";

/// Where a whole-process run's stdout goes (`stdout`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stdout {
    /// `/dev/null`, as hyperfine does by default: the run writes its output without waking
    /// the arm that waits for it on the same core (docs/results/2026-12-04-whole-process-and-run-on.md).
    #[default]
    Null,
    /// A pipe the arm reads (and discards): for a program that does less when its output is
    /// `/dev/null` (GNU tar skips the reading). Implied by `metric`, which is read from it.
    Pipe,
}

/// How a service workload (`mode = "service"`) is run: `{addr}` (`127.0.0.1:PORT`) and
/// `{port}` in the server's `args` and `env` and in `driver` are its own free port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// The load: a command line whose first word is a bin of the workspace (built in release,
    /// without profile flags), a path relative to the workspace, or a program on PATH. Its
    /// last line of stdout is a JSON object; a measured workload's `metric` names the number
    /// taken from it, in nanoseconds (`mty-loadgen`'s `p50_ns`, `p99_ns`).
    pub driver: Vec<String>,
    /// The server is ready when a line of its stdout contains this text; without it, when
    /// its port accepts a TCP connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_line: Option<String>,
    /// Seconds the server may take to become ready before it is killed (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_timeout_secs: Option<u64>,
    /// Seconds between SIGTERM and SIGKILL when the server is stopped (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_timeout_secs: Option<u64>,
    /// Measuring only: keep the measured core from idling during a turn (a spinning thread
    /// at the lowest priority, `SCHED_IDLE`, which the server preempts at once). On a VM, a
    /// core that halts between requests is woken by the hypervisor, late: the latency
    /// measured is then the host's (docs/findings.md). Default `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_core_awake: Option<bool>,
    /// Measuring only: the driver is started once for each arm's session and runs one turn
    /// for each line written to its stdin, answering with one line (`mty-loadgen
    /// --turns-on-stdin`): no process start and no connection set-up between turns. Default
    /// `false`: a driver run for each turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_driver: Option<bool>,
}

impl Service {
    pub fn ready_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.ready_timeout_secs.unwrap_or(30))
    }

    pub fn stop_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.stop_timeout_secs.unwrap_or(10))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// The name in the report.
    pub name: String,
    /// Arguments to `binary`.
    pub args: Vec<String>,
    /// Measured workloads only: in-process lockstep (the default) or whole-process.
    #[serde(default, skip_serializing_if = "is_default")]
    pub mode: Mode,
    /// Environment variables set for the command (beside the pipeline's own, such as
    /// `LLVM_PROFILE_FILE`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// The directory it runs in, relative to the workspace root (default: the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// A file fed to it on stdin, relative to the workspace root (training and whole-process
    /// workloads: a lockstep arm's stdin is its protocol).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<PathBuf>,
    /// Training workloads only: seconds it may run before it is killed (default
    /// `train.timeout_secs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// Training workloads only: its weight in the merged profile (llvm-profdata's weighted
    /// merge: its counts times this; default 1). Changing it merges again, without retraining.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u64>,
    /// Service workloads only: the driver, how readiness shows, how long a stop may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<Service>,
    /// Whole-process and service workloads only: the key of a number in the JSON object the command
    /// prints as its last line of stdout, in nanoseconds, taken as the sample instead of the
    /// wall time (a program that times its own work, without its start-up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// Whole-process workloads only: where each run's stdout goes, `"null"` (the default;
    /// `"pipe"` with `metric`) or `"pipe"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<Stdout>,
    /// Lockstep only: whether this workload's arms share one core, overriding
    /// `measure.lockstep.share_core` (`false` for a workload of several threads among
    /// single-threaded ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_core: Option<bool>,
    /// Lockstep only: this workload's sessions, at most `measure.lockstep.sessions` (a slow
    /// workload measured in fewer sessions than the others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<u32>,
    /// Lockstep only: this workload's messages per batch, overriding
    /// `measure.lockstep.batch_messages` (a workload of several threads, whose batch-to-batch
    /// scatter shrinks only with longer batches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_messages: Option<u64>,
    /// Lockstep only: this workload's own `measure.target_half_width_pct` (a noisy workload
    /// that would otherwise run into the session or time cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_half_width_pct: Option<f64>,
    /// `false`: no instructions per message for it (a workload of several threads, whose
    /// count depends on how they are scheduled, so it is no deterministic metric).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<bool>,
}

impl Workload {
    /// The same workload with its directory (the root when it names none) and stdin file
    /// made absolute against the workspace `root`: how every command of it is started.
    pub fn resolved(&self, root: &Path) -> Workload {
        Workload {
            cwd: Some(
                self.cwd
                    .as_ref()
                    .map_or_else(|| root.to_path_buf(), |d| root.join(d)),
            ),
            stdin: self.stdin.as_ref().map(|f| root.join(f)),
            ..self.clone()
        }
    }

    /// A workload with the defaults of every optional key.
    #[cfg(test)]
    pub fn new(name: impl Into<String>, args: Vec<String>) -> Self {
        Workload {
            name: name.into(),
            args,
            mode: Mode::Lockstep,
            env: Default::default(),
            cwd: None,
            stdin: None,
            timeout_secs: None,
            weight: None,
            metric: None,
            stdout: None,
            service: None,
            share_core: None,
            sessions: None,
            batch_messages: None,
            target_half_width_pct: None,
            instructions: None,
        }
    }
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}
