//! Whole-process lockstep (`mode = "process"`): an arm that serves the lockstep protocol for a
//! command that cannot link `mty-lockstep`, by running it once per iteration.
//!
//! The arm is this executable (`cargo-mty __process-arm SPEC --lockstep N`), a live process of
//! the session like any other arm: set up on the set-up core, moved onto the measured core with
//! its threads, then told `g` in its turn. Each iteration runs the command to its end; the
//! sample is its wall time, from spawn to exit, or the number it printed under the configured
//! `metric` key. Its stdout is `/dev/null` (a pipe with `metric` or `stdout = "pipe"`), as
//! hyperfine's is: a pipe wakes the arm on the same core for every 64 KiB. The command is
//! started after the move, so it inherits the measured core (a child takes its parent's
//! affinity). It is started by `posix_spawn` (a vfork: no hook between fork and exec), so what
//! a run's time holds of its start does not grow with how long ago this arm last ran: a fork
//! copies the arm's page tables, and an arm that ran less often (a candidate beside release,
//! which runs in every pair) forked slower, enough to move an A/A arm on a short command
//! (docs/findings.md, "Whole processes are compared in adjacent pairs"). The arm
//! leads a process group of its own, which its runs join and the session kills whole, so a
//! session that kills a hung arm kills its command too (and the command's own children,
//! should it be a wrapper that starts the real program). One run before the `ready` line warms the
//! page cache and checks the command works; the closing line's CPU time and switches leave it
//! out. With `measure.fresh_copies` every run is of a new copy of the executable, written
//! before it and removed after it, outside the time taken. The session runs the arms in
//! adjacent pairs (`lockstep.rs`).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::base::exec::Cmd;
use crate::config::Workload;

/// The hidden subcommand that runs an arm.
pub const SUBCOMMAND: &str = "__process-arm";

/// The command an arm runs, as JSON in its first argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    pub exe: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    pub stdin: Option<PathBuf>,
    pub metric: Option<String>,
    /// Whether each run's stdout is a pipe the arm reads (`stdout = "pipe"`; `metric` implies
    /// it); otherwise `/dev/null`.
    #[serde(default)]
    pub pipe_stdout: bool,
    /// Seeds the extra slashes each run's path gets (`measure.shift_heap`); `None`: none.
    #[serde(default)]
    pub shift_seed: Option<u64>,
    /// Whether each run is of a new copy of `exe` (`measure.fresh_copies`), written as
    /// `<exe's folder>.r/<its name>` before the run and removed after it: what stays with a file (where
    /// its pages sit, in which folios) is then drawn anew for every run, not shared by a
    /// session's runs.
    #[serde(default)]
    pub copy_each_run: bool,
}

impl Spec {
    /// Workload `w` (its paths resolved, [`Workload::resolved`]) on `exe` with `args` (the
    /// workload's own and the arm's).
    pub fn new(exe: &Path, args: &[String], w: &Workload) -> Spec {
        Spec {
            exe: exe.to_path_buf(),
            args: args.to_vec(),
            env: w.env.clone(),
            cwd: w.cwd.clone(),
            stdin: w.stdin.clone(),
            metric: w.metric.clone(),
            pipe_stdout: w.stdout == Some(crate::config::Stdout::Pipe),
            shift_seed: None,
            copy_each_run: false,
        }
    }
}

/// The arm's command line, pinned to `core` (`--lockstep N` is appended by the session).
pub fn command(spec: &Spec, core: Option<usize>) -> Result<Cmd> {
    let me = std::env::current_exe().context("cannot find xtask's own executable")?;
    let json = serde_json::to_string(spec).expect("paths and strings serialize");
    Ok(crate::measure::program::pinned(&me, core).args([SUBCOMMAND.to_string(), json]))
}

/// `cargo-mty __process-arm SPEC --lockstep N`: exits 0 after `q` or when the coordinator is gone,
/// 1 when the command fails (the reason on stderr, which the session shows), 2 on a malformed
/// command line or an unknown protocol command, as `mty-lockstep` does.
pub fn main(argv: impl Iterator<Item = String>) -> ExitCode {
    // A process group of its own, which its runs join: the session kills it whole. (Best
    // effort: a session that cannot, kills the arm, and a hung run outlives it.)
    // SAFETY: setpgid(0, 0) on this process itself.
    unsafe { libc::setpgid(0, 0) };
    arm_main(argv, SUBCOMMAND, |spec: &Spec, batch, input, output| {
        serve(spec, batch, input, output)
    })
}

/// An arm's `main`: its command line after the subcommand (2 when malformed), then `serve`
/// over stdin and stdout, its exit code by how it stopped ([`ArmStop::exit`]).
pub(crate) fn arm_main<T: serde::de::DeserializeOwned>(
    argv: impl Iterator<Item = String>,
    subcommand: &str,
    serve: impl FnOnce(
        &T,
        u64,
        std::io::StdinLock<'static>,
        std::io::StdoutLock<'static>,
    ) -> Result<(), ArmStop>,
) -> ExitCode {
    let (spec, batch) = match arm_args::<T>(argv) {
        Ok(p) => p,
        Err(err) => {
            eprintln!("xtask {subcommand}: {err:#}");
            return ExitCode::from(2);
        }
    };
    match serve(
        &spec,
        batch,
        std::io::stdin().lock(),
        std::io::stdout().lock(),
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(stop) => stop.exit(subcommand),
    }
}

/// An arm's command line after its subcommand, `SPEC --lockstep N`: the spec (JSON) and N.
fn arm_args<T: serde::de::DeserializeOwned>(
    mut argv: impl Iterator<Item = String>,
) -> Result<(T, u64)> {
    let spec = argv.next().context("no spec")?;
    let spec: T = serde_json::from_str(&spec).context("the spec is not JSON")?;
    match (argv.next().as_deref(), argv.next()) {
        (Some("--lockstep"), Some(n)) => match n.parse::<u64>() {
            Ok(n) if n > 0 => Ok((spec, n)),
            _ => bail!("`--lockstep` takes a count of runs a turn, at least 1, not `{n}`"),
        },
        _ => bail!("expected `--lockstep N` after the spec"),
    }
}

/// Why an arm stopped before `q`: its exit code is chosen by the kind ([`ArmStop::exit`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ArmStop {
    /// Its stdout is closed: the coordinator is gone.
    #[error("the coordinator is gone")]
    Gone,
    /// A line that is not `g` or `q`.
    #[error("unknown lockstep command `{0}` (expected `g` or `q`)")]
    Protocol(String),
    /// The command (the server, the driver) failed, or its stdin could not be read.
    #[error("{0:#}")]
    Failed(#[from] anyhow::Error),
}

impl ArmStop {
    /// 0 when the coordinator is gone, 2 on a protocol error (as `mty-lockstep`), 1 when the
    /// command failed; the reason on stderr, which the session shows.
    pub(crate) fn exit(self, subcommand: &str) -> ExitCode {
        match self {
            ArmStop::Gone => ExitCode::SUCCESS,
            ArmStop::Protocol(_) => {
                eprintln!("xtask {subcommand}: {self}");
                ExitCode::from(2)
            }
            ArmStop::Failed(_) => {
                eprintln!("xtask {subcommand}: {self}");
                ExitCode::FAILURE
            }
        }
    }
}

/// The protocol over `input` and `output`: a warm-up run, the ready line, one batch of
/// `batch` runs per `g`, the closing report at `q` or end of input.
fn serve(
    spec: &Spec,
    batch: u64,
    mut input: impl BufRead,
    mut output: impl Write,
) -> Result<(), ArmStop> {
    let mut shifts = spec.shift_seed.map(stats::SplitMix64::new);
    let mut shift = move || {
        shifts
            .as_mut()
            .map_or(0, |rng| rng.below(crate::measure::program::MAX_SHIFT))
    };
    run_once(spec, shift()).context("its warm-up run failed")?;
    let warm_up = children_usage();
    let mut answer = |line: String| -> Result<(), ArmStop> {
        writeln!(output, "{line}")
            .and_then(|()| output.flush())
            .map_err(|_| ArmStop::Gone)
    };
    answer(format!(
        r#"{{"ready":true,"pid":{},"clock_overhead_ns":0}}"#,
        std::process::id()
    ))?;
    let mut all = Vec::new();
    let mut command = String::new();
    loop {
        command.clear();
        let read = input
            .read_line(&mut command)
            .context("cannot read the coordinator's commands")?;
        if read == 0 {
            break;
        }
        match command.trim() {
            "g" => {}
            "q" => break,
            other => return Err(ArmStop::Protocol(other.to_string())),
        }
        let started = Instant::now();
        let mut samples = Vec::with_capacity(batch as usize);
        for _ in 0..batch {
            samples.push(run_once(spec, shift())?);
        }
        let elapsed_ns = started.elapsed().as_nanos() as f64;
        all.extend_from_slice(&samples);
        samples.sort_by(f64::total_cmp);
        answer(
            serde_json::json!({
                "median_ns": quantile(&samples, 0.5),
                "p95_ns": quantile(&samples, 0.95),
                "p99_ns": quantile(&samples, 0.99),
                "p999_ns": quantile(&samples, 0.999),
                "mean_ns": samples.iter().sum::<f64>() / samples.len() as f64,
                "elapsed_ns": elapsed_ns,
            })
            .to_string(),
        )?;
    }
    all.sort_by(f64::total_cmp);
    let line = closing(&all, &warm_up);
    answer(serde_json::to_string(&line).expect("numbers serialize"))
}

/// One run of the command, to its end, its path `shift` slashes longer (of a new copy of its
/// executable where `copy_each_run`): its sample in ns.
fn run_once(spec: &Spec, shift: usize) -> Result<f64> {
    if !spec.copy_each_run {
        return run_file(spec, &spec.exe, shift);
    }
    let (Some(dir), Some(name)) = (spec.exe.parent(), spec.exe.file_name()) else {
        bail!("{} is not a file to copy", spec.exe.display());
    };
    // A folder beside the session's copy's (`NNN.r` by `NNN`): every arm's path has one
    // length, and none can be the executable's own name.
    let mut runs = dir.as_os_str().to_owned();
    runs.push(".r");
    let runs = PathBuf::from(runs);
    let copy = runs.join(name);
    let _ = std::fs::remove_file(&copy);
    std::fs::create_dir_all(&runs)
        .and_then(|()| std::fs::copy(&spec.exe, &copy))
        .with_context(|| {
            format!(
                "copying {} to {} for a run (`measure.fresh_copies`; free some space there, or set it to false)",
                spec.exe.display(),
                copy.display()
            )
        })?;
    let sample = run_file(spec, &copy, shift);
    let _ = std::fs::remove_file(&copy);
    sample
}

/// One run of `spec`'s command from the executable `exe`.
fn run_file(spec: &Spec, exe: &Path, shift: usize) -> Result<f64> {
    let mut cmd = Command::new(crate::measure::program::shifted(exe, shift));
    cmd.args(&spec.args)
        .envs(&spec.env)
        .stdout(if spec.pipe_stdout || spec.metric.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped());
    if let Some(dir) = &spec.cwd {
        cmd.current_dir(dir);
    }
    cmd.stdin(match &spec.stdin {
        Some(file) => Stdio::from(
            std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?,
        ),
        None => Stdio::null(),
    });
    // No `pre_exec` hook: std then starts it with `posix_spawn`. It dies with its arm through
    // the arm's process group, which the session kills whole (`lockstep/arm.rs`).
    let shown = || {
        let exe = match shift {
            0 => exe.display().to_string(),
            n => format!(
                "{} (its path run with {n} more leading slashes)",
                exe.display()
            ),
        };
        std::iter::once(exe)
            .chain(spec.args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    };
    // A file just written may be busy a moment (ETXTBSY) while a process forked meanwhile
    // still holds its writing descriptor, until that process execs.
    let mut tries = 0;
    let (out, wall_ns) = loop {
        let started = Instant::now();
        match cmd.output() {
            Ok(out) => break (out, started.elapsed().as_nanos() as f64),
            Err(e) if tries < 50 && e.raw_os_error() == Some(libc::ETXTBSY) => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(e) => return Err(e).with_context(|| format!("cannot run `{}`", shown())),
        }
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        bail!(
            "`{}` {}; its stderr ends:\n{}",
            shown(),
            crate::base::exec::describe_status(&out.status),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    match &spec.metric {
        None => Ok(wall_ns),
        Some(key) => metric(&String::from_utf8_lossy(&out.stdout), key)
            .with_context(|| format!("reading `{key}` from what `{}` printed", shown())),
    }
}

/// The number under `key` in the JSON object of the last non-empty line of `stdout`.
pub(crate) fn metric(stdout: &str, key: &str) -> Result<f64> {
    let line: serde_json::Value =
        crate::measure::program::parse_last_line(stdout, "a JSON object")?;
    match line.get(key).and_then(serde_json::Value::as_f64) {
        Some(v) if v > 0.0 && v.is_finite() => Ok(v),
        Some(v) => bail!("`{key}` is {v}: a sample must be a positive number of ns"),
        None => bail!("its last line has no number under `{key}`"),
    }
}

/// The nearest-rank q-quantile of sorted values, the middle two's mean for the median of an
/// even count.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    if q == 0.5 && n.is_multiple_of(2) {
        return (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
    }
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

/// The CPU time (ms: user, system) and context switches (voluntary, involuntary) of the
/// commands this arm ran and waited for so far.
pub(crate) fn children_usage() -> [f64; 4] {
    // SAFETY: getrusage fills the struct it is given; a zeroed rusage is a valid value.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    [
        ms(usage.ru_utime),
        ms(usage.ru_stime),
        usage.ru_nvcsw as f64,
        usage.ru_nivcsw as f64,
    ]
}

/// The closing line: the report over every run (`program::WorkloadLine`'s fields), with the
/// CPU time and context switches of the measured runs (the warm-up's, `before`, taken off).
pub(crate) fn closing(sorted: &[f64], before: &[f64; 4]) -> serde_json::Value {
    let now = children_usage();
    let [user_ms, sys_ms, voluntary, involuntary]: [f64; 4] =
        std::array::from_fn(|i| (now[i] - before[i]).max(0.0));
    let at = |q: f64| match sorted {
        [] => 0,
        _ => quantile(sorted, q).round() as u64,
    };
    let quantiles = [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99];
    serde_json::json!({
        "median_ns": at(0.5),
        "p95_ns": at(0.95),
        "p99_ns": at(0.99),
        "max_ns": sorted.last().map_or(0, |v| v.round() as u64),
        "mean_ns": if sorted.is_empty() { 0.0 } else { sorted.iter().sum::<f64>() / sorted.len() as f64 },
        "clock_overhead_ns": 0,
        "percentiles": quantiles.iter().map(|&q| (q, at(q))).collect::<Vec<_>>(),
        "user_ms": user_ms,
        "sys_ms": sys_ms,
        "voluntary_ctx_switches": voluntary as u64,
        "involuntary_ctx_switches": involuntary as u64,
        "runs": sorted.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(script: &str) -> Spec {
        Spec {
            exe: "sh".into(),
            args: vec!["-c".into(), script.into()],
            env: BTreeMap::from([("MTY_WORD".into(), "hello".into())]),
            cwd: None,
            stdin: None,
            metric: None,
            pipe_stdout: false,
            shift_seed: None,
            copy_each_run: false,
        }
    }

    fn serve_text(spec: &Spec, batch: u64, input: &str) -> Result<Vec<serde_json::Value>, ArmStop> {
        let mut out = Vec::new();
        serve(spec, batch, input.as_bytes(), &mut out)?;
        Ok(String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect())
    }

    #[test]
    fn an_arm_answers_each_turn_with_its_runs_and_closes_with_their_report() {
        let lines = serve_text(&spec("test \"$MTY_WORD\" = hello"), 3, "g\ng\nq\n").unwrap();
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert_eq!(lines[0]["ready"], true);
        for turn in &lines[1..3] {
            let (median, elapsed) = (
                turn["median_ns"].as_f64().unwrap(),
                turn["elapsed_ns"].as_f64().unwrap(),
            );
            // Three runs of a shell: each at least a spawn's worth, the batch longer than two.
            assert!(median > 10_000.0 && elapsed > 2.0 * median, "{turn}");
        }
        let closing: crate::measure::program::WorkloadLine =
            serde_json::from_value(lines[3].clone()).expect("a report xtask parses");
        assert!(closing.median_ns > 10_000 && closing.max_ns >= closing.median_ns);
        assert_eq!(lines[3]["runs"], 6);
    }

    #[test]
    fn the_metric_the_command_prints_is_the_sample() {
        let mut s = spec(r#"echo noise; echo '{"elapsed_ns": 1234.5}'"#);
        s.metric = Some("elapsed_ns".into());
        let lines = serve_text(&s, 2, "g\n").unwrap();
        assert_eq!(lines[1]["median_ns"], 1234.5);
        s.metric = Some("missing".into());
        let err = serve_text(&s, 1, "g\n").unwrap_err();
        assert!(
            format!("{err:#}").contains("no number under `missing`"),
            "{err:#}"
        );
    }

    #[test]
    fn stdout_is_dev_null_unless_piped() {
        let null = spec(
            r#"test "$(readlink /proc/$$/fd/1)" = /dev/null || { echo "stdout is $(readlink /proc/$$/fd/1)" >&2; exit 4; }"#,
        );
        assert_eq!(serve_text(&null, 1, "g\nq\n").unwrap().len(), 3);
        let piped = Spec {
            pipe_stdout: true,
            ..null
        };
        let err = format!("{:#}", serve_text(&piped, 1, "g\n").unwrap_err());
        assert!(err.contains("stdout is pipe:"), "{err}");
    }

    #[test]
    fn every_run_is_of_a_new_copy_removed_after_it() {
        let dir = std::env::temp_dir().join(format!("mty-copy-each-run-{}", std::process::id()));
        let runs = PathBuf::from(format!("{}.r", dir.display()));
        for d in [&dir, &runs] {
            let _ = std::fs::remove_dir_all(d);
        }
        std::fs::create_dir_all(&dir).unwrap();
        // Named `r`: its runs' folder cannot be its own name.
        let exe = dir.join("r");
        std::fs::copy("/bin/sh", &exe).unwrap();
        let copy = runs.join("r");
        // `$0` of `sh -c` is the path run: the copy, which exists while it runs.
        let mut s = spec(&format!(
            r#"test "$0" = {0} && test -x {0} && echo '{{"ok": 1}}'"#,
            copy.display()
        ));
        (s.exe, s.metric, s.copy_each_run) = (exe.clone(), Some("ok".into()), true);
        let lines = serve_text(&s, 2, "g\ng\nq\n").unwrap();
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(!copy.exists(), "the last run's copy is removed");
        // A copy that cannot be written fails the arm, saying which key it serves.
        std::fs::remove_dir_all(&runs).unwrap();
        std::fs::write(&runs, "a file where the folder would be").unwrap();
        let err = format!("{:#}", serve_text(&s, 1, "g\n").unwrap_err());
        assert!(
            err.contains(&format!("copying {}", exe.display()))
                && err.contains("`measure.fresh_copies`"),
            "{err}"
        );
        std::fs::remove_file(&runs).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_run_draws_its_own_shift_from_the_seed() {
        // `$0` of `sh -c` is `argv[0]`: the path run, with its extra slashes.
        let mut s = spec(r#"echo "{\"len\": ${#0}}""#);
        s.exe = "/bin/sh".into();
        s.metric = Some("len".into());
        let lens = |s: &Spec| -> Vec<f64> {
            serve_text(s, 1, "g\ng\ng\ng\ng\n").unwrap()[1..6]
                .iter()
                .map(|l| l["median_ns"].as_f64().unwrap())
                .collect()
        };
        assert_eq!(lens(&s), [7.0; 5], "no seed, no shift");
        s.shift_seed = Some(5);
        let shifted = lens(&s);
        assert!(shifted.iter().all(|&l| (7.0..7.0 + 2048.0).contains(&l)));
        let distinct: std::collections::BTreeSet<u64> = shifted.iter().map(|&l| l as u64).collect();
        assert!(distinct.len() >= 4, "{shifted:?}");
        assert_eq!(lens(&s), shifted, "the seed replays them");
    }

    #[test]
    fn stdin_and_directory_come_from_the_spec() {
        let dir = std::env::temp_dir().join(format!("xtask-process-arm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("in.txt"), "42\n").unwrap();
        let mut s = spec(r#"read x; test "$x" = 42 && test -f in.txt"#);
        s.stdin = Some(dir.join("in.txt"));
        s.cwd = Some(dir.clone());
        assert_eq!(serve_text(&s, 1, "g\nq\n").unwrap().len(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failing_command_fails_the_arm_with_its_status_and_stderr() {
        let err = serve_text(&spec("echo broken input >&2; exit 3"), 1, "g\n").unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("warm-up run failed"), "{text}");
        assert!(
            text.contains("exited with status 3") && text.contains("broken input"),
            "{text}"
        );
        let err = serve_text(&spec("true"), 1, "go\n").unwrap_err();
        assert!(matches!(&err, ArmStop::Protocol(c) if c == "go"), "{err}");
    }

    /// Both arms' exit codes come from the kind of stop, as `mty-lockstep`'s do: 0 when the
    /// coordinator is gone, 2 on a protocol error, 1 when the command failed.
    #[test]
    fn an_arms_exit_code_is_chosen_by_the_kind_of_stop() {
        let code = |stop: ArmStop| stop.exit("__test-arm");
        assert_eq!(code(ArmStop::Gone), ExitCode::SUCCESS);
        assert_eq!(code(ArmStop::Protocol("go".into())), ExitCode::from(2));
        assert_eq!(
            code(ArmStop::Failed(anyhow::anyhow!("the server died"))),
            ExitCode::FAILURE
        );
        assert_eq!(
            ArmStop::Protocol("go".into()).to_string(),
            "unknown lockstep command `go` (expected `g` or `q`)"
        );
    }

    #[test]
    fn nearest_rank_quantiles() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), 2.5);
        assert_eq!(quantile(&v[..3], 0.5), 2.0);
        assert_eq!(quantile(&v, 0.99), 4.0);
        assert_eq!(quantile(&[7.0], 0.95), 7.0);
    }
}
