//! The comparators (`cargo xtask compare`, and the report's): the same mailbox workload on
//! other implementations of the primitive, run and read: Mighty's mailbox (Block and Fail policies), bare tokio mpsc, a C++ asio
//! coroutine channel, a C++ mutex + condition-variable channel (cross-thread) and a Go buffered
//! channel. Every row emits its raw per-message values; the percentiles are computed here, in
//! one place, the same way for all. Same-thread and cross-thread rows never share a ratio.
//! Their table is `report/comparators.rs`'s.

mod cxx;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::base::exec::Cmd;
use crate::config::Compare;
use crate::toolchain::build::Built;
use stats::SplitMix64;
use stats::median;

/// Whether sender and receiver share a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    SameThread,
    CrossThread,
}

/// A row to run: a command that prints one JSON line with `values_ns`.
#[derive(Debug, Clone)]
pub struct Runnable {
    pub name: String,
    pub kind: Kind,
    pub cmd: Cmd,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub name: String,
    pub kind: Kind,
    /// `None` when the row was skipped.
    pub figures: Option<Figures>,
    /// "skipped: <what is missing>; install with `apt-get install <package>`".
    pub skipped: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub runs: usize,
    /// Medians over runs of each run's percentile (nearest rank on the raw values), ns.
    pub median_ns: f64,
    pub p95_ns: f64,
    pub p99_ns: f64,
    pub clock_overhead_ns: f64,
    /// What the timed region runs on, as the comparator states it.
    pub shape: String,
    /// Per run: [median, p95, p99].
    pub per_run: Vec<[u64; 3]>,
}

/// What a comparator prints.
#[derive(Debug, Deserialize)]
pub struct ValuesLine {
    #[serde(default)]
    pub shape: Option<String>,
    pub clock_overhead_ns: u64,
    pub values_ns: Vec<u64>,
}

/// Nearest-rank percentile of sorted values (q in 0..=1): the smallest value with at least
/// q of the values at or below it.
pub fn nearest_rank(sorted: &[u64], q: f64) -> u64 {
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

pub fn parse_values(stdout: &str) -> Result<ValuesLine> {
    let parsed: ValuesLine =
        crate::measure::program::parse_last_line(stdout, "a JSON line with `values_ns`")?;
    if parsed.values_ns.is_empty() {
        bail!("it reported no values");
    }
    Ok(parsed)
}

/// `program` as found on PATH (or as given, when it has a slash), or `None`.
pub fn find_program(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Path::new(program).is_file().then(|| PathBuf::from(program));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// The Mighty and tokio rows, from mty-bench builds (`release` first).
pub fn rust_rows(builds: &[Built], cfg: &Compare) -> Vec<Runnable> {
    let common = |exe: &Path, args: &[&str]| {
        Cmd::new(exe.display().to_string())
            .args(args.iter().copied())
            .args([
                "--messages".to_string(),
                cfg.messages.to_string(),
                "--warmup".to_string(),
                cfg.warmup.to_string(),
            ])
            .arg("--emit-values")
    };
    let mut rows = Vec::new();
    for v in builds {
        rows.push(Runnable {
            name: format!("Mighty mailbox, Block: send ({})", v.name()),
            kind: Kind::SameThread,
            cmd: common(&v.exe, &["agent_send_latency", "--policy", "block"]),
        });
        rows.push(Runnable {
            name: format!("Mighty mailbox, Fail: try_send ({})", v.name()),
            kind: Kind::SameThread,
            cmd: common(&v.exe, &["agent_send_latency", "--policy", "fail"]),
        });
    }
    if let Some(release) = builds.first() {
        rows.push(Runnable {
            name: format!("tokio mpsc ({})", release.name()),
            kind: Kind::SameThread,
            cmd: common(&release.exe, &["tokio_mpsc_send_latency"]),
        });
    }
    rows
}

const ASIO_NAME: &str = "C++ asio experimental::channel (coroutine)";
pub(crate) const CV_NAME: &str = "C++ mutex + condition variables";
pub(crate) const GO_NAME: &str = "Go buffered channel (GOMAXPROCS=1)";

/// The C++ rows: name, kind, source (`comparators/cpp/<source>.cpp`, built as `<source>`).
const CXX_ROWS: [(&str, Kind, &str); 2] = [
    (ASIO_NAME, Kind::SameThread, "asio_channel"),
    (CV_NAME, Kind::CrossThread, "cv_channel"),
];

/// Compiles the C++ and Go comparators into `out` on a thread of its own, unlogged (the progress
/// bars of the builds meanwhile stay whole); any failure is left for [`foreign_rows`] to
/// meet again and report. Join it before `foreign_rows` runs on the same `out`.
pub fn compile_in_background(root: &Path, out: &Path) -> std::thread::JoinHandle<()> {
    let (root, out) = (root.to_path_buf(), out.to_path_buf());
    std::thread::spawn(move || {
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
        let Some(compiler) = find_program(&cxx) else {
            return;
        };
        if std::fs::create_dir_all(&out).is_err() {
            return;
        }
        for (_, _, source) in CXX_ROWS {
            let src = root.join(format!("comparators/cpp/{source}.cpp"));
            let _ = cxx::compile_quietly(&compiler, &src, &out.join(source));
        }
        // Go keeps its own cache (`out/gocache`): a cold one compiles the standard library
        // first, seconds of work that the report's `go build` then finds done.
        let go = std::env::var("GO").unwrap_or_else(|_| "go".into());
        if let Some(go) = find_program(&go) {
            let _ = go_build(&go, &root, &out).output_unlogged();
        }
    })
}

/// `go build` of the Go comparator into `out`, with its cache there.
fn go_build(go: &Path, root: &Path, out: &Path) -> Cmd {
    Cmd::new(go.display().to_string())
        .args(["build", "-o"])
        .arg(out.join("go_channel").display().to_string())
        .arg(root.join("comparators/go/main.go").display().to_string())
        .env("GOCACHE", out.join("gocache").display().to_string())
        .env("GO111MODULE", "off")
}

/// A row of the table before it runs: a command, or the row that says why it cannot.
pub enum Planned {
    Run(Runnable),
    Skip(Row),
}

/// Builds the C++ and Go comparators into `out`, in the table's fixed order (asio, condition
/// variable, Go) whatever is installed. A missing compiler or header gives a skipped row saying
/// what to install; any other build failure is an error.
pub fn foreign_rows(root: &Path, out: &Path, cfg: &Compare) -> Result<Vec<Planned>> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut planned: Vec<Planned> = Vec::new();
    let skip = |name: &str, kind, why: String| {
        Planned::Skip(Row {
            name: name.into(),
            kind,
            figures: None,
            skipped: Some(format!("skipped: {why}")),
        })
    };
    let args = |cmd: Cmd, kind: Kind| {
        cmd.args([
            "--messages".to_string(),
            messages_of(cfg, kind).to_string(),
            "--warmup".to_string(),
            cfg.warmup.to_string(),
        ])
    };

    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    let sources = CXX_ROWS;
    match find_program(&cxx) {
        None => {
            for (name, kind, _) in sources {
                planned.push(skip(
                    name,
                    kind,
                    format!("C++ compiler `{cxx}` not found; install with `apt-get install g++`"),
                ));
            }
        }
        Some(compiler) => {
            // Both at once: asio's takes seconds on one core, the other would sit idle.
            let built: Vec<Result<(Cmd, Option<std::process::Output>)>> =
                std::thread::scope(|scope| {
                    let handles: Vec<_> = sources
                        .iter()
                        .map(|(_, _, source)| {
                            let (compiler, exe) = (&compiler, out.join(source));
                            let src = root.join(format!("comparators/cpp/{source}.cpp"));
                            scope.spawn(move || cxx::compile(compiler, &src, &exe))
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().expect("a compile thread"))
                        .collect()
                });
            for ((name, kind, source), result) in sources.into_iter().zip(built) {
                let (cmd, output) = result?;
                if let Some(output) = output.filter(|o| !o.status.success()) {
                    let stderr = String::from_utf8_lossy(&output.stderr);
                    if stderr.contains("asio") && stderr.contains("No such file") {
                        planned.push(skip(
                            name,
                            kind,
                            "asio headers not found; install with `apt-get install libasio-dev`"
                                .into(),
                        ));
                        continue;
                    }
                    crate::base::exec::check(&cmd, &output)?;
                }
                planned.push(Planned::Run(Runnable {
                    name: name.into(),
                    kind,
                    cmd: args(Cmd::new(out.join(source).display().to_string()), kind),
                }));
            }
        }
    }

    let go = std::env::var("GO").unwrap_or_else(|_| "go".into());
    match find_program(&go) {
        None => planned.push(skip(
            GO_NAME,
            Kind::SameThread,
            format!("Go toolchain `{go}` not found; install with `apt-get install golang-go`"),
        )),
        Some(go) => {
            let exe = out.join("go_channel");
            go_build(&go, root, out)
                .read()
                .context("cannot build the Go comparator")?;
            planned.push(Planned::Run(Runnable {
                name: GO_NAME.into(),
                kind: Kind::SameThread,
                cmd: args(
                    Cmd::new(exe.display().to_string()).env("GOMAXPROCS", "1"),
                    Kind::SameThread,
                ),
            }));
        }
    }
    Ok(planned)
}

/// Every row of the comparison on `builds` (`release` first): the Rust rows from those builds,
/// the C++ and Go rows compiled into `out`, run interleaved.
pub fn run_comparators(
    root: &Path,
    out: &Path,
    cfg: &Compare,
    builds: &[Built],
) -> Result<Vec<Row>> {
    let foreign = foreign_rows(root, out, cfg)?;
    let planned = rust_rows(builds, cfg)
        .into_iter()
        .map(Planned::Run)
        .chain(foreign)
        .collect();
    run_rows(planned, cfg)
}

/// Runs every runnable row `cfg.rounds` times, interleaved (a seeded random order each round);
/// the rows come back in the planned order, skipped ones in their place.
pub fn run_rows(planned: Vec<Planned>, cfg: &Compare) -> Result<Vec<Row>> {
    let rows: Vec<Runnable> = planned
        .iter()
        .filter_map(|p| match p {
            Planned::Run(r) => Some(r.clone()),
            Planned::Skip(_) => None,
        })
        .collect();
    let bar = ProgressBar::new(cfg.rounds as u64 * rows.len() as u64)
        .with_prefix("compare")
        .with_style(
            ProgressStyle::with_template(
                "{prefix:>12} [{bar:30}] {pos}/{len} runs {elapsed} {wide_msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
    let mut rng = SplitMix64::new(cfg.seed);
    let mut per_row: Vec<Vec<([u64; 3], u64, String)>> = vec![Vec::new(); rows.len()];
    for _ in 0..cfg.rounds {
        let mut order: Vec<usize> = (0..rows.len()).collect();
        rng.shuffle(&mut order);
        for i in order {
            bar.set_message(rows[i].name.clone());
            let out = bar.suspend(|| {
                rows[i]
                    .cmd
                    .run_with_timeout(Duration::from_secs(cfg.timeout_secs))
            })?;
            let mut line =
                parse_values(&String::from_utf8_lossy(&out.stdout)).with_context(|| {
                    format!("comparator `{}`: `{}`", rows[i].name, rows[i].cmd.display())
                })?;
            line.values_ns.sort_unstable();
            let v = &line.values_ns;
            per_row[i].push((
                [
                    nearest_rank(v, 0.5),
                    nearest_rank(v, 0.95),
                    nearest_rank(v, 0.99),
                ],
                line.clock_overhead_ns,
                line.shape.unwrap_or_else(|| {
                    "one task sends then receives, current-thread tokio runtime".into()
                }),
            ));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let mut measured = rows.iter().zip(per_row).map(|(r, runs)| {
        let col = |k: usize| {
            median(&runs.iter().map(|x| x.0[k] as f64).collect::<Vec<_>>()).unwrap_or(f64::NAN)
        };
        Row {
            name: r.name.clone(),
            kind: r.kind,
            figures: Some(Figures {
                runs: runs.len(),
                median_ns: col(0),
                p95_ns: col(1),
                p99_ns: col(2),
                clock_overhead_ns: median(&runs.iter().map(|x| x.1 as f64).collect::<Vec<_>>())
                    .unwrap_or(f64::NAN),
                shape: runs.first().map(|x| x.2.clone()).unwrap_or_default(),
                per_run: runs.iter().map(|x| x.0).collect(),
            }),
            skipped: None,
        }
    });
    Ok(planned
        .into_iter()
        .map(|p| match p {
            Planned::Run(_) => measured.next().expect("one measured row per runnable one"),
            Planned::Skip(skipped) => skipped,
        })
        .collect())
}

/// Messages per run of a row of `kind`.
pub fn messages_of(cfg: &Compare, kind: Kind) -> u64 {
    match kind {
        Kind::SameThread => cfg.messages,
        Kind::CrossThread => cfg.messages.min(cfg.cross_thread_messages),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(
            (
                nearest_rank(&v, 0.5),
                nearest_rank(&v, 0.95),
                nearest_rank(&v, 0.99)
            ),
            (50, 95, 99)
        );
        assert_eq!(nearest_rank(&[7], 0.5), 7);
        assert_eq!(nearest_rank(&[1, 2], 0.0), 1);
        assert_eq!(nearest_rank(&[1, 2], 1.0), 2);
    }

    #[test]
    fn parses_comparator_lines_and_refuses_empty_ones() {
        let line = parse_values("{\"workload\":\"go_channel\",\"shape\":\"x\",\"clock_overhead_ns\":27,\"values_ns\":[76,184]}\n").unwrap();
        assert_eq!((line.clock_overhead_ns, line.values_ns.len()), (27, 2));
        assert!(
            parse_values("{\"clock_overhead_ns\":1,\"values_ns\":[]}")
                .unwrap_err()
                .to_string()
                .contains("no values")
        );
        assert!(parse_values("").is_err());
    }
}
