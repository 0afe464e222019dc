//! The faults a release pipeline meets, each its own test, provoked for real on the
//! artifacts of a shared good run (which `support::Turn` puts back after each).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::own_program::{own_config_edits, own_run, own_xtask};
use super::support::*;
use super::testutil;

/// A corrupt raw profile among good ones: named, and nothing merged; then skipped on request.
#[test]
fn a_corrupt_raw_profile_is_named_and_can_be_skipped() {
    let run = good_run();
    let (data, target) = (&*run.data, &*run.target);
    let merge_before = std::fs::read(data.join("stages/merge.json")).unwrap();
    let good = instrumented_profraw(data);
    let truncated = data.join("raw/truncated.profraw");
    std::fs::write(&truncated, &std::fs::read(&good).unwrap()[..5000]).unwrap();
    let train_json = data.join("stages/train.json");
    let train_before = std::fs::read(&train_json).unwrap();
    let mut train = json(&train_json);
    train["profraw"] = serde_json::json!([good, truncated]);
    std::fs::write(&train_json, train.to_string()).unwrap();
    let out = xtask(&["pgo", "merge"], data, target);
    let err = stderr_of(&out);
    assert!(!out.status.success());
    assert!(err.contains("1 of 2 raw profiles cannot be read"), "{err}");
    assert!(
        err.contains(&format!(
            "{}: invalid instrumentation profile data (file header is corrupt)",
            truncated.display()
        )),
        "{err}"
    );
    assert!(err.contains("--skip-bad-profiles"), "{err}");
    assert_eq!(
        std::fs::read(data.join("stages/merge.json")).unwrap(),
        merge_before,
        "the last good merge is kept"
    );
    let out = xtask(&["pgo", "merge", "--skip-bad-profiles"], data, target);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(
        json(&data.join("stages/merge.json"))["skipped_raw"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    std::fs::write(&train_json, &train_before).unwrap();
    std::fs::remove_file(&truncated).unwrap();
}

/// A measured workload that exits non-zero: the command line and its stderr, artifacts kept.
#[test]
fn a_failing_workload_shows_its_command_and_stderr() {
    let run = good_run();
    let (tmp, data, target) = (&*run.tmp, &*run.data, &*run.target);
    let report_before = std::fs::read(data.join("report.json")).unwrap();
    let measure_before = std::fs::read(data.join("stages/measure.json")).unwrap();
    let bad = config_variant(
        &tmp.join("bad-workload.toml"),
        r#""--warmup", "2000"] }"#,
        r#""--warmup", "2000", "--policy", "maybe"] }"#,
    );
    let out = xtask_with(&bad, &["pgo", "measure"], data, target);
    let err = stderr_of(&out);
    assert!(!out.status.success());
    // Lockstep (the default): the arm (the first spawned: drawn per session), how it ended,
    // when, and its command line.
    assert!(
        err.contains("lockstep arm `")
            && err.contains("` exited with status 2 while setting up: `taskset -c 0 ")
            && err.contains(
                "agent_send_latency --messages 20000 --warmup 2000 --policy maybe --lockstep 2000`"
            ),
        "{err}"
    );
    assert!(
        err.contains("`--policy` takes `block` or `fail`, not `maybe`"),
        "{err}"
    );
    assert_kept(
        data,
        &[
            ("stages/measure.json", &measure_before),
            ("report.json", &report_before),
        ],
    );
}

/// A workload that does not exist: mty-bench's own words reach the user.
#[test]
fn an_unknown_workload_is_named() {
    let run = good_run();
    let (tmp, data, target) = (&*run.tmp, &*run.data, &*run.target);
    let nonexistent = config_variant(
        &tmp.join("no-workload.toml"),
        r#"args = ["agent_send_latency""#,
        r#"args = ["agent_send_latenzy""#,
    );
    let err = stderr_of(&xtask_with(&nonexistent, &["pgo", "measure"], data, target));
    assert!(
        err.contains("mty-bench: unknown workload `agent_send_latenzy`"),
        "{err}"
    );
}

/// A stale profile (the training config changed): --allow-stale proceeds, the default
/// retrains. On the small workspace: the retraining rebuilds its instrumented and lto+pgo
/// builds in seconds.
#[test]
fn a_stale_profile_retrains_or_proceeds_on_request() {
    let run = own_run();
    let retrained = own_config_edits(
        &run.tmp.join("retrained.toml"),
        &[(
            r#"{ name = "orders", args = []"#,
            r#"{ name = "orders", args = ["again"]"#,
        )],
    );
    let stale_fingerprint = json(&run.data.join("stages/merge.json"))["fingerprint"].clone();
    let out = own_xtask(&retrained, &["pgo", "optimize", "--allow-stale"]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("is stale: the sources, toolchain or training config changed")
            && err.contains("(--allow-stale)"),
        "{err}"
    );
    let out = own_xtask(&retrained, &["pgo", "optimize"]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("retraining (pass --allow-stale to use it anyway)"),
        "{err}"
    );
    assert_ne!(
        json(&run.data.join("stages/merge.json"))["fingerprint"],
        stale_fingerprint,
        "retrained"
    );
    let out = own_xtask(&retrained, &["pgo", "optimize"]);
    assert!(
        !stderr_of(&out).contains("is stale"),
        "fresh after retraining: {}",
        stderr_of(&out)
    );
}

/// Training that writes no profile (the binary is not instrumented).
#[test]
fn training_an_uninstrumented_binary_writes_no_profile() {
    let run = good_run();
    let (data, target) = (&*run.data, &*run.target);
    let instrument_json = data.join("stages/instrument.json");
    let instrument_before = std::fs::read(&instrument_json).unwrap();
    let mut instrumented = json(&instrument_json);
    instrumented["exe"] = json(&data.join("stages/baselines.json"))["release"]["exe"].clone();
    std::fs::write(&instrument_json, instrumented.to_string()).unwrap();
    let err = stderr_of(&xtask(&["pgo", "train"], data, target));
    assert!(err.contains(&format!("no profiles were written: was the binary built instrumented? (looked for *.profraw in {})", data.join("raw").display())), "{err}");
    std::fs::write(&instrument_json, &instrument_before).unwrap();
}

/// A hanging training workload: killed at its timeout, the merged profile kept.
#[test]
fn a_hanging_training_is_killed_at_its_timeout() {
    let run = good_run();
    let (tmp, data, target) = (&*run.tmp, &*run.data, &*run.target);
    let hang = config_edits(
        &tmp.join("hang.toml"),
        &[
            ("[train]\ntimeout_secs = 120", "[train]\ntimeout_secs = 1"),
            (
                r#"["train", "--messages", "20000"]"#,
                r#"["train", "--messages", "500000000"]"#,
            ),
        ],
    );
    let merged_profile = PathBuf::from(
        json(&data.join("stages/merge.json"))["path"]
            .as_str()
            .unwrap(),
    );
    let out = xtask_with(&hang, &["pgo", "train"], data, target);
    let err = stderr_of(&out);
    assert!(
        err.contains("did not finish within its timeout of 1 s and was killed"),
        "{err}"
    );
    assert!(merged_profile.is_file(), "the last merged profile is kept");
}

/// A held lock: the second run names the holder; with --wait it queues behind it.
#[test]
fn a_held_lock_names_its_holder_and_wait_queues() {
    let run = good_run();
    let (data, target) = (&*run.data, &*run.target);
    {
        use std::io::Write;
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(data.join(".lock"))
            .unwrap();
        lock.try_lock().unwrap();
        lock.set_len(0).unwrap();
        write!(&lock, "{}", std::process::id()).unwrap();
        let err = stderr_of(&xtask(&["pgo", "report"], data, target));
        assert!(
            err.contains(&format!(
                "another `cargo xtask` run (process {}) is using",
                std::process::id()
            )),
            "{err}"
        );
        let (mut waiting, mut lines) = spawn(&["pgo", "report", "--wait"], data, target);
        let first = lines.next().unwrap().unwrap();
        assert!(first.starts_with("waiting for the lock on"), "{first}");
        lock.unlock().unwrap();
        let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
        assert!(waiting.0.wait().unwrap().success(), "{rest:?}");
    }
}

/// An interrupt (a real SIGINT) during measurement: no stage output or report changes.
#[test]
fn an_interrupt_during_measurement_keeps_the_artifacts() {
    // A process started in the background by a shell without job control ignores SIGINT, and
    // its children inherit that: xtask would then finish instead of dying, and the test would
    // say nothing true about an interrupt.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let ignored = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .unwrap_or(0);
    assert!(
        ignored & (1 << (2 - 1)) == 0,
        "these tests run with SIGINT ignored (started with `&` by a shell without job control?): \
         run them in the foreground, or reset SIGINT before starting them"
    );
    let run = good_run();
    let (data, target) = (&*run.data, &*run.target);
    let measure_before = std::fs::read(data.join("stages/measure.json")).unwrap();
    let report_before = std::fs::read(data.join("report.json")).unwrap();
    {
        use std::os::unix::process::ExitStatusExt;
        let (mut child, mut lines) = spawn(&["pgo", "measure", "--remeasure"], data, target);
        let started = lines
            .by_ref()
            .map(|l| l.unwrap())
            .find(|l| l.starts_with("$ ") && l.contains("agent_send_latency"));
        assert!(started.is_some(), "measurement started");
        assert!(
            Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status()
                .unwrap()
                .success()
        );
        let status = child.0.wait().unwrap();
        assert_eq!(status.signal(), Some(2), "xtask died of SIGINT");
    }
    assert_kept(
        data,
        &[
            ("stages/measure.json", &measure_before),
            ("report.json", &report_before),
        ],
    );
}

/// What an interrupted write leaves is removed by the next run, which then succeeds.
#[test]
fn leftovers_are_removed_and_the_step_summary_gets_the_page() {
    let run = good_run();
    let (tmp, data, target) = (&*run.tmp, &*run.data, &*run.target);
    let leftover = data.join(".report.json.tmp-4242");
    std::fs::write(&leftover, b"half a report").unwrap();
    // ... and, with $GITHUB_STEP_SUMMARY set, appends the page to it.
    let summary = tmp.join("step-summary.md");
    let out = bounded_output(
        command(
            &root().join("profiles/quick.toml"),
            &["pgo", "report"],
            data,
            target,
        )
        .env("GITHUB_STEP_SUMMARY", &summary),
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let page = std::fs::read_to_string(&summary).unwrap();
    assert!(
        page.starts_with("# Mighty mailbox: send→recv latency") && page.contains("## Raw nanos"),
        "{page}"
    );
    assert!(stderr_of(&out).contains(&format!(
        "removed {} (left by an interrupted run)",
        leftover.display()
    )));
    assert!(!leftover.exists());
}

/// A full disk: a 1 MiB tmpfs holding pgo-data/, filled to the last 8 KiB.
#[test]
fn a_full_disk_leaves_nothing_partial() {
    if !testutil::have(
        "the full-disk case (mounting a tmpfs needs root)",
        testutil::is_root(),
        "run the tests as root, as CI does",
    ) {
        return;
    }
    let run = good_run();
    let (tmp, data, target) = (&*run.tmp, &*run.data, &*run.target);
    full_disk(tmp, data, target);
}

fn full_disk(tmp: &Path, data: &Path, target: &Path) {
    let mnt = tmp.join("full-disk");
    let _mount = Mount::tmpfs(&mnt, "size=1m");
    let small = mnt.join("pgo-data");
    std::fs::create_dir_all(small.join("stages")).unwrap();
    for stage in ["doctor", "merge", "optimize", "baselines", "measure"] {
        std::fs::copy(
            data.join(format!("stages/{stage}.json")),
            small.join(format!("stages/{stage}.json")),
        )
        .unwrap();
    }
    std::fs::write(small.join(".lock"), b"").unwrap();
    std::fs::write(small.join("slack"), vec![0u8; 8192]).unwrap();
    let filler = {
        use std::io::Write;
        let mut f = std::fs::File::create(mnt.join("filler")).unwrap();
        while f.write_all(&[0u8; 4096]).is_ok() {}
        f
    };
    drop(filler);
    std::fs::remove_file(small.join("slack")).unwrap();
    let out = xtask(&["pgo", "report"], &small, target);
    let err = stderr_of(&out);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!(
            "cannot write {}",
            small.join("report.json").display()
        )),
        "{err}"
    );
    assert!(err.contains("No space left on device"), "{err}");
    let left: Vec<String> = std::fs::read_dir(&small)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !left
            .iter()
            .any(|n| n.contains("report") || n.contains(".tmp-")),
        "nothing partial: {left:?}"
    );
}

/// Starts `pgo measure` on a config whose lockstep sessions last (a million rounds), waits
/// until the lto+pgo arm is running, and hands its pid to `provoke`; returns what xtask said.
/// Arms are looked for among this xtask's own descendants, by the lto+pgo executable's path;
/// whatever happens, the process group dies with the test.
fn disturb_a_lockstep_arm(edits: &[(&str, &str)], provoke: impl FnOnce(u32)) -> String {
    let run = good_run();
    let (tmp, data, target) = (&*run.tmp, &*run.data, &*run.target);
    let mut all = vec![("rounds = 20 ", "rounds = 1000000 ")];
    all.extend_from_slice(edits);
    let config = config_edits(&tmp.join("long-sessions.toml"), &all);
    let lto_pgo = json(&data.join("stages/optimize.json"))["build"]["exe"]
        .as_str()
        .unwrap()
        .to_string();
    let mut child = Group::spawn(
        command(&config, &["pgo", "measure"], data, target)
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null()),
    );
    let stderr = child.0.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut text = String::new();
        std::io::BufReader::new(stderr)
            .read_to_string(&mut text)
            .unwrap();
        text
    });
    let xtask_pid = child.id();
    let needles = ["mty-bench", "--lockstep"];
    let lto_pgo_bytes = std::fs::read(&lto_pgo).unwrap();
    // The pid is taken from the scan that found it, once the arm is the executable itself: a
    // pinned arm starts as `taskset … <exe>`, and while taskset execs the executable its
    // /proc cmdline reads empty for a moment (CI once caught that window between two scans).
    // The next session's arms set up on another core meanwhile: the arm taking its turns is
    // the one moved onto the measured core (the last).
    let last = std::thread::available_parallelism().unwrap().get() - 1;
    let mut arm = None;
    assert!(
        eventually(60, || {
            arm = descendants_with(xtask_pid, &needles)
                .into_iter()
                .find(|pid| {
                    // It runs from a fresh copy of lto+pgo's executable (`measure.fresh_copies`):
                    // the file it runs has lto+pgo's bytes.
                    std::fs::read(format!("/proc/{pid}/exe")).is_ok_and(|b| b == lto_pgo_bytes)
                        && std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
                            s.lines()
                                .any(|l| l == format!("Cpus_allowed_list:\t{last}"))
                        })
                });
            arm.is_some()
        }),
        "the lto+pgo arm started: {:?}",
        descendants_with(xtask_pid, &["--lockstep"])
    );
    let pid = arm.unwrap();
    provoke(pid);
    let status = child.0.wait().unwrap();
    let err = reader.join().unwrap();
    assert!(!status.success(), "{err}");
    assert!(
        eventually(10, || group_members_with(xtask_pid, &["--lockstep"])
            .is_empty()),
        "no arm outlives the failed session: {:?}",
        group_members_with(xtask_pid, &["--lockstep"])
    );
    err
}

/// A lockstep arm killed by a real signal mid-session: the session fails naming the arm, how
/// it died and its command line; the other arms are not left running.
#[test]
fn a_killed_lockstep_arm_is_named() {
    let err = disturb_a_lockstep_arm(&[], |pid| {
        assert!(
            Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .unwrap()
                .success()
        );
    });
    assert!(
        err.contains("lockstep arm `lto+pgo` was killed by signal 9 (SIGKILL) while"),
        "{err}"
    );
    assert!(err.contains("--lockstep 2000`"), "the command line: {err}");
}

/// A lockstep arm that stops answering (a real SIGSTOP): killed at `measure.timeout_secs`,
/// and named. The timeout is 5 s, not 1: it also bounds each arm's setup, and every arm sets
/// up at once on one core, which on a slow machine can take over a second.
#[test]
fn a_hung_lockstep_arm_is_killed_at_its_timeout() {
    let err = disturb_a_lockstep_arm(&[("timeout_secs = 60 ", "timeout_secs = 5 ")], |pid| {
        assert!(
            Command::new("kill")
                .args(["-STOP", &pid.to_string()])
                .status()
                .unwrap()
                .success()
        );
    });
    assert!(
        err.contains("lockstep arm `lto+pgo` did not answer within 5 s and was killed"),
        "{err}"
    );
}

/// `calibrate` injects a cost into every timed iteration, which a whole-process workload has
/// none of: refused before anything is built, naming the workload.
#[test]
fn calibrating_a_whole_process_workload_is_refused_before_building() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("calibrate-whole-process");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let config = config_edits(
        &tmp.join("whole.toml"),
        &[
            (
                r#""--warmup", "2000"] },"#,
                r#""--warmup", "2000"], mode = "process" },"#,
            ),
            (
                r#"versus = [{ subject = "agent_send_latency", reference = "tokio_mpsc_send_latency" }]"#,
                "versus = []",
            ),
        ],
    );
    let (data, target) = (tmp.join("pgo-data"), tmp.join("target"));
    let out = xtask_with(&config, &["calibrate"], &data, &target);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("a whole-process workload (`agent_send_latency`) has no place for"),
        "{err}"
    );
    // (The comparators may start compiling beside it under target/comparators: not a build.)
    assert!(
        !target.join("release").exists() && !err.contains("cargo build"),
        "release was built first: {err}"
    );
}

/// A whole-process arm whose run hangs: its runs start with no hook tying them to it
/// (`posix_spawn`), but the arm leads a process group they join, and a session kills that
/// group (`measure/lockstep/arm.rs`): the hung run is gone with its arm.
#[test]
fn a_hung_whole_process_run_dies_with_its_arm_group() {
    use std::io::{BufRead, Write};
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hung-run");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (marker, pid_file) = (dir.join("hang"), dir.join("pid"));
    // Runs at once (the warm-up run), then hangs once the marker exists.
    let script = format!(
        "test -e {} && {{ echo $$ > {}; exec sleep 60; }}; true",
        marker.display(),
        pid_file.display()
    );
    let spec = serde_json::json!({
        "exe": "sh", "args": ["-c", script], "env": {}, "cwd": null, "stdin": null,
        "metric": null,
    });
    let mut arm = Command::new(env!("CARGO_BIN_EXE_cargo-mty"))
        .args(["__process-arm", &spec.to_string(), "--lockstep", "1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(arm.stdout.take().unwrap()).lines();
    let ready = lines.next().unwrap().unwrap();
    assert!(ready.contains("\"ready\""), "{ready}");
    let pid = arm.id() as i32;
    // SAFETY: getpgid on our own child, not yet reaped.
    assert_eq!(
        unsafe { libc::getpgid(pid) },
        pid,
        "the arm leads its group"
    );
    std::fs::write(&marker, "").unwrap();
    let mut stdin = arm.stdin.take().unwrap();
    writeln!(stdin, "g").unwrap();
    let started =
        || -> Option<i32> { std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok() };
    assert!(eventually(5, || started().is_some()), "the run started");
    let run = started().unwrap();
    // What a session does to an arm that did not answer in time.
    // SAFETY: kill on the group our own child leads.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    let _ = arm.wait();
    // SAFETY: signal 0 only asks whether the process exists.
    let gone = eventually(3, || unsafe { libc::kill(run, 0) } != 0);
    assert!(gone, "the hung run {run} outlived its arm");
    std::fs::remove_dir_all(&dir).unwrap();
}
