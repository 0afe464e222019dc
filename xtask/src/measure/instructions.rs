//! Instructions per message from `valgrind --tool=callgrind`: a deterministic metric that
//! repeats to the instruction, beside wall-clock latency. Setup cost is removed by running N
//! and 2N messages and dividing the difference by N. The same runs carry callgrind's branch
//! and cache simulators (hardware counters, which a VM seldom gives, are not needed): conditional and
//! indirect branches and their mispredictions, I1 / D1 / LL misses, per message. The cache
//! geometry is given (32 KiB 8-way L1s, 8 MiB 16-way LL, 64-byte lines) so the figures do not
//! depend on what valgrind guesses of the host.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use crate::base::exec::Cmd;
use crate::base::fsx;
use crate::config::{Instructions, Workload};
use crate::measure::callgrind::{self, FunctionCost};
use crate::measure::callgrind::{Simulated, parse_events, simulated};
use crate::toolchain::build::Built;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InstructionCount {
    pub workload: String,
    pub build: String,
    /// `None` with a `note` when it could not be measured.
    pub per_message: Option<f64>,
    /// Total instructions of the N- and 2N-message runs.
    pub totals: Option<(u64, u64)>,
    /// Branches and cache misses per message, simulated.
    #[serde(default)]
    pub simulated: Option<Simulated>,
    /// Each function's own instructions per message, costliest first; they add up to
    /// `per_message` (`callgrind.rs`). Empty where not measured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<FunctionCost>,
    /// Why `functions` is empty although the total was counted (an output file that could
    /// not be read or did not add up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub functions_note: Option<String>,
    pub note: Option<String>,
}

/// Whether valgrind runs here; the reason (with the install hint) if not.
pub fn valgrind_missing() -> Option<String> {
    match Cmd::new("valgrind").arg("--version").read() {
        Ok(_) => None,
        Err(_) => Some("valgrind not found; install with `apt-get install valgrind`".to_string()),
    }
}

/// Counts every workload on every build; callgrind's output files are kept in `out_dir`
/// (`<workload>.<build>.<messages>.out`, for `callgrind_annotate` or KCachegrind).
pub fn measure(
    builds: &[Built],
    workloads: &[Workload],
    cfg: &Instructions,
    out_dir: &Path,
) -> Vec<InstructionCount> {
    let skipped = if cfg.messages == 0 {
        Some("off (`instructions.messages = 0`, or no `[instructions]`)".to_string())
    } else {
        valgrind_missing()
    };
    let mut out = Vec::new();
    for workload in workloads {
        for v in builds {
            let off = if workload.mode == crate::config::Mode::Process {
                Some("not counted (a whole-process workload: callgrind counts runs of `--messages N --untimed`)".to_string())
            } else if workload.mode == crate::config::Mode::Service {
                Some("not counted (a service workload: its server runs under the driver's load, not under callgrind)".to_string())
            } else {
                (workload.instructions == Some(false)).then(|| {
                    "not counted (`instructions = false` on the workload: its threads' scheduling moves the count)".to_string()
                })
            };
            let mut count_of = InstructionCount {
                workload: workload.name.clone(),
                build: v.name().to_string(),
                ..InstructionCount::default()
            };
            let cached = cache_path(v, workload, cfg, out_dir);
            if off.is_none()
                && skipped.is_none()
                && let Some(hit) = cached.as_deref().and_then(read_cached)
            {
                out.push(InstructionCount {
                    workload: workload.name.clone(),
                    build: v.name().to_string(),
                    ..hit
                });
                continue;
            }
            match off.as_ref().or(skipped.as_ref()) {
                Some(why) => count_of.note = Some(why.clone()),
                None => match count(v, workload, cfg, out_dir) {
                    Ok([(a, pa), (b, pb)]) => {
                        let ir = |e: &BTreeMap<String, u64>| e.get("Ir").copied().unwrap_or(0);
                        let (ia, ib) = (ir(&a), ir(&b));
                        count_of.per_message = Some((ib as f64 - ia as f64) / cfg.messages as f64);
                        count_of.totals = Some((ia, ib));
                        count_of.simulated = Some(simulated(&a, &b, cfg.messages));
                        match (pa, pb) {
                            (Ok(pa), Ok(pb)) => {
                                count_of.functions = callgrind::per_message(&pa, &pb, cfg.messages)
                            }
                            (Err(e), _) | (_, Err(e)) => {
                                eprintln!(
                                    "instructions: {} on {}: no breakdown by function: {e}",
                                    workload.name,
                                    v.name()
                                );
                                count_of.functions_note = Some(e);
                            }
                        }
                    }
                    Err(err) => count_of.note = Some(format!("{err:#}")),
                },
            }
            // A count is a property of the executable's bytes: kept for the next run (and for
            // the measure stage, when the count ran beside the builds).
            if count_of.per_message.is_some()
                && let Some(path) = &cached
                && let Err(err) = fsx::write_json(path, &count_of)
            {
                eprintln!("instructions: not cached: {err:#}");
            }
            out.push(count_of);
        }
    }
    out
}

/// Where a count of `workload` on this executable is kept: named by the executable's content
/// hash and the count's inputs (its arguments, N); `None` for an executable without a hash.
fn cache_path(
    v: &Built,
    workload: &Workload,
    cfg: &Instructions,
    out_dir: &Path,
) -> Option<PathBuf> {
    if v.hash.is_empty() {
        return None;
    }
    let key = format!("{}\0{}\0{}", v.hash, workload.args.join("\0"), cfg.messages);
    Some(
        out_dir
            .join("counted")
            .join(format!("{:016x}.json", fsx::fnv1a64(key.as_bytes()))),
    )
}

fn read_cached(path: &Path) -> Option<InstructionCount> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Counts each build's instructions as it is built, beside the builds that follow (callgrind
/// counts instructions, not time, so a busy machine does not move them), keeping them where
/// [`measure`] finds them; `finish` waits for the last.
pub struct InstructionCounter {
    tx: Option<std::sync::mpsc::Sender<Built>>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl InstructionCounter {
    pub fn start(
        workloads: Vec<Workload>,
        cfg: Instructions,
        out_dir: PathBuf,
    ) -> InstructionCounter {
        let (tx, rx) = std::sync::mpsc::channel::<Built>();
        let worker = std::thread::spawn(move || {
            for built in rx {
                let _ = measure(&[built], &workloads, &cfg, &out_dir);
            }
        });
        InstructionCounter {
            tx: Some(tx),
            worker: Some(worker),
        }
    }

    /// Counts `built`'s instructions once the builds queued before it are counted.
    pub fn count(&self, built: &Built) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(built.clone());
        }
    }

    /// Waits for every queued count.
    pub fn finish(&mut self) {
        drop(self.tx.take());
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

impl Drop for InstructionCounter {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A run's totals per event (callgrind's summary on stderr) and its output file read by
/// function (or why it could not be).
type Counted = (BTreeMap<String, u64>, Result<callgrind::Profile, String>);

/// callgrind's events of the N- and 2N-message runs, and their output files.
fn count(
    v: &Built,
    workload: &Workload,
    cfg: &Instructions,
    out_dir: &Path,
) -> anyhow::Result<[Counted; 2]> {
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let mut counted = Vec::new();
    for n in [cfg.messages, 2 * cfg.messages] {
        let file = out_dir.join(format!("{}.{}.{n}.out", workload.name, v.name()));
        let temp = fsx::temp_path(&file);
        let cmd = Cmd::new("valgrind")
            .args([
                "--tool=callgrind".to_string(),
                format!("--callgrind-out-file={}", temp.display()),
            ])
            .args([
                "--branch-sim=yes",
                "--cache-sim=yes",
                "--I1=32768,8,64",
                "--D1=32768,8,64",
                "--LL=8388608,16,64",
            ])
            .arg(v.exe.display().to_string())
            .args(workload.args.iter().cloned())
            // Later flags win in mty-bench's parser: N messages, no warm-up, and `--untimed`: no
            // clock reads, histogram or /proc parse, whose instruction counts vary run to run.
            .args([
                "--messages".to_string(),
                n.to_string(),
                "--warmup".to_string(),
                "0".to_string(),
                "--untimed".to_string(),
            ]);
        let totals = cmd
            .run_with_timeout(Duration::from_secs(cfg.timeout_secs))
            .and_then(|out| {
                parse_events(&String::from_utf8_lossy(&out.stderr)).ok_or_else(|| {
                    anyhow::anyhow!(
                        "`{}` printed no `Events :` and `Collected :` lines",
                        cmd.display()
                    )
                })
            })
            .inspect_err(|_| {
                // A failed run's file is no use to anyone.
                let _ = std::fs::remove_file(&temp);
            })?;
        let profile = std::fs::read_to_string(&temp)
            .map_err(|e| format!("cannot read {}: {e}", temp.display()))
            .and_then(|text| {
                callgrind::parse(&text).map_err(|e| format!("{}: {e}", file.display()))
            });
        fsx::rename(&temp, &file)?;
        counted.push((totals, profile));
    }
    Ok(counted.try_into().expect("two runs"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_callgrinds_summary() {
        let stderr = "==6478== Callgrind, a call-graph generating cache profiler\n==6478== Events    : Ir\n==6478== Collected : 26911083\n==6478== \n==6478== I   refs:      26,911,083\n";
        assert_eq!(parse_events(stderr).unwrap()["Ir"], 26911083);
        assert_eq!(parse_events("nothing"), None);
    }

    /// A count kept for an executable's hash is reused without running anything (the
    /// executable here does not exist), under the build's and workload's current names; an
    /// executable without a hash is never looked up.
    #[test]
    fn a_count_kept_for_the_same_bytes_is_reused() {
        // Without valgrind nothing is looked up: the note says so instead.
        if !crate::testing::optional::have(
            "a kept instruction count (valgrind)",
            valgrind_missing().is_none(),
            "apt-get install valgrind",
        ) {
            return;
        }
        let dir = std::env::temp_dir().join(format!("mty-counted-{}", std::process::id()));
        let mut built = Built::new(
            crate::toolchain::build::Build::Lto,
            "/nonexistent/mty-bench".into(),
            String::new(),
        );
        built.hash = "00000000feedf00d".into();
        let workload = Workload::new("renamed", vec!["agent_send_latency".into()]);
        let cfg = Instructions {
            messages: 1000,
            timeout_secs: 5,
        };
        let kept = InstructionCount {
            workload: "old name".into(),
            build: "release".into(),
            per_message: Some(441.0),
            totals: Some((1_000_000, 1_441_000)),
            ..InstructionCount::default()
        };
        let path = cache_path(&built, &workload, &cfg, &dir).unwrap();
        fsx::write_json(&path, &kept).unwrap();
        let counts = measure(
            std::slice::from_ref(&built),
            std::slice::from_ref(&workload),
            &cfg,
            &dir,
        );
        assert_eq!(
            (
                counts[0].per_message,
                counts[0].workload.as_str(),
                counts[0].build.as_str()
            ),
            (Some(441.0), "renamed", "lto")
        );
        // Other bytes (another hash) or no hash: counted afresh, which fails here.
        built.hash = "0000000000000001".into();
        assert_eq!(
            measure(
                std::slice::from_ref(&built),
                std::slice::from_ref(&workload),
                &cfg,
                &dir
            )[0]
            .per_message,
            None
        );
        built.hash.clear();
        assert!(cache_path(&built, &workload, &cfg, &dir).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A workload with `instructions = false` is never run under callgrind (the executable
    /// here does not exist: running it would fail with another note) and says why.
    #[test]
    fn a_workload_with_instructions_off_is_not_counted_and_says_why() {
        let built = Built::new(
            crate::toolchain::build::Build::Release,
            "/nonexistent/mty-bench".into(),
            String::new(),
        );
        let mut workload = Workload::new("contended", vec!["agent_send_contended".into()]);
        workload.instructions = Some(false);
        let cfg = Instructions {
            messages: 1000,
            timeout_secs: 5,
        };
        let counts = measure(&[built], &[workload], &cfg, Path::new("/nonexistent"));
        assert_eq!(counts.len(), 1);
        assert_eq!(counts[0].per_message, None);
        let note = counts[0].note.as_deref().unwrap();
        assert!(
            note.contains("`instructions = false` on the workload"),
            "{note}"
        );
    }
}
