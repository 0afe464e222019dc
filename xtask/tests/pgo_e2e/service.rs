//! Service mode on real processes: a workspace made here with a small HTTP server
//! (`tinysrv`, std only) and a driver of its own (`tinyload`, another bin of that
//! workspace, which the pipeline builds), trained and measured as `mode = "service"`. The
//! faults are provoked for real: a server that ignores SIGTERM and is killed, one that never
//! says it is ready, an xtask killed while its servers run. No server may outlive a run.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::service_programs::{CONFIG, DRIVER, SERVER};
use super::support::*;

/// The workspace's directory (its target/ kept between `cargo test` runs).
fn ws() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("service-program")
}

/// The workspace, made afresh (but its target/), once per test process.
fn workspace() -> PathBuf {
    static MADE: std::sync::Once = std::sync::Once::new();
    let ws = ws();
    MADE.call_once(|| {
        let _ = std::fs::remove_dir_all(ws.join("src"));
        std::fs::create_dir_all(ws.join("src/bin")).unwrap();
        std::fs::write(
            ws.join("Cargo.toml"),
            // Its own `release-pgo` without fat LTO: the test is about service mode, and a
            // fat-LTO build of std alone is a large part of a run's time.
            "[package]\nname = \"tinysrv\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[workspace]\n\n\
             [profile.release-pgo]\ninherits = \"release\"\nlto = \"off\"\n",
        )
        .unwrap();
        std::fs::write(ws.join("src/main.rs"), SERVER).unwrap();
        std::fs::write(ws.join("src/bin/tinyload.rs"), DRIVER).unwrap();
        std::fs::write(ws.join("pgo.toml"), CONFIG).unwrap();
    });
    ws
}

/// The target directory of the tests whose builds are the same (tests that run at once
/// share it: cargo locks it); the continuous-mode test builds with other flags, in its own.
const SHARED: &str = "shared";

/// `cargo-mty mty ARGS` on the workspace with `config`, into `pgo-data/<name>` and
/// `target/<target>`.
fn service_command(name: &str, target: &str, config: &Path, args: &[&str]) -> Command {
    let ws = workspace();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cargo-mty"));
    cmd.arg("mty")
        .args(args)
        .arg("--manifest-path")
        .arg(ws.join("Cargo.toml"))
        .arg("--config")
        .arg(config)
        .arg("--pgo-data")
        .arg(ws.join("pgo-data").join(name))
        .arg("--target-dir")
        .arg(ws.join("target").join(target))
        .current_dir(ws.parent().unwrap())
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR");
    cmd
}

/// `stages` one after the other (each needs the one before it recorded): the last one's
/// output, or the first that failed, with the stderr of all that ran.
fn stages(name: &str, target: &str, config: &Path, stages: &[&str]) -> std::process::Output {
    let mut stderr = Vec::new();
    for (i, stage) in stages.iter().enumerate() {
        let mut out = bounded_output(&mut service_command(name, target, config, &["pgo", stage]));
        stderr.extend_from_slice(&out.stderr);
        if !out.status.success() || i + 1 == stages.len() {
            out.stderr = stderr;
            return out;
        }
    }
    unreachable!("at least one stage")
}

/// The config with each `from` replaced by its `to`, written beside the workspace.
fn config(name: &str, edits: &[(&str, &str)]) -> PathBuf {
    let ws = workspace();
    edited_config(
        CONFIG,
        "the service config",
        &ws.join(format!("{name}.toml")),
        edits,
    )
}

/// Live `tinysrv` servers built in `target`, anywhere on the machine (a server that outlived
/// its xtask is nobody's descendant): those run with every one of `flags` (a test's own) and
/// none of `not` (another test's).
fn servers(target: &str, flags: &[&str], not: &[&str]) -> Vec<u32> {
    let needle = format!("service-program/target/{target}/");
    // A measured server runs from a fresh copy of its build (`measure.fresh_copies`).
    let copy = "service-program/pgo-data/";
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if (cmdline.contains(&needle) || (cmdline.contains(copy) && cmdline.contains("/copies/")))
            && cmdline.contains("tinysrv --listen")
            && flags.iter().all(|f| cmdline.contains(f))
            && !not.iter().any(|f| cmdline.contains(f))
        {
            found.push(pid);
        }
    }
    found
}

fn assert_no_server_left(target: &str, flags: &[&str], not: &[&str]) {
    assert!(
        eventually(10, || servers(target, flags, not).is_empty()),
        "servers left running: {:?}",
        servers(target, flags, not)
    );
}

/// The flags of the two fault tests' servers, which the full run's never have.
const FAULTY: [&str; 2] = ["--ignore-sigterm", "--never-ready"];

#[test]
fn a_service_is_trained_measured_and_judged_and_no_server_outlives_the_run() {
    let name = "full";
    let cfg = config(name, &[]);
    let turns_log = ws().join("target/turns.log");
    let _ = std::fs::remove_file(&turns_log);
    // Measured again although up to date: the persistent driver's log is this run's.
    let out = bounded_output(&mut service_command(
        name,
        SHARED,
        &cfg,
        &["pgo", "--remeasure"],
    ));
    let stderr = stderr_of(&out);
    assert!(out.status.success(), "{stderr}");
    assert_no_server_left(SHARED, &[], &FAULTY);
    let data = ws().join("pgo-data").join(name);
    let report = json(&data.join("report.json"));
    let text = report.to_string();
    assert!(text.contains("items_p50"), "{text}");
    // The profile applied to the server's own crate.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("APPLIED") && !stdout.contains("NOT APPLIED"),
        "{stdout}"
    );
    assert_eq!(
        report["apply_check"]["required_violations"],
        serde_json::json!([])
    );
    // Every build against release on the server's CPU per request (the default) and on the
    // driver's p50, each with an interval and a verdict; the A/A floor; the training's share
    // of the oracle's gain, where there is one.
    let w = &report["workloads"][0];
    let rows = w["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows.iter().map(|r| r["build"].as_str().unwrap()).collect();
    assert_eq!(names, ["release", "lto", "lto+pgo", "oracle"], "{w}");
    for r in &rows[1..] {
        for metric in ["cpu_per_request", "median"] {
            let m = &r["vs_release"][metric];
            assert!(
                m["estimate"]["ci_low_pct"].as_f64() <= m["estimate"]["ci_high_pct"].as_f64(),
                "{metric}: {r}"
            );
            assert!(
                ["faster", "slower", "no_detectable_change"]
                    .contains(&m["verdict"].as_str().unwrap_or("")),
                "{metric}: {m}"
            );
        }
        // CPU per request is judged against its own min effect.
        assert_eq!(
            r["vs_release"]["cpu_per_request"]["threshold_pct"].as_f64(),
            Some(0.5),
            "{r}"
        );
    }
    assert!(
        rows.iter()
            .all(|r| r["cpu_per_request_ns"].as_f64() > Some(0.0)),
        "{w}"
    );
    assert!(w["aa"]["cpu_per_request"].is_object(), "{w}");
    // The server's idle CPU was read, no turn saturated, and the table says so.
    assert_eq!(w["service"]["saturated_turns"].as_u64(), Some(0), "{w}");
    assert!(
        w["service"]["idle_cpu_ns_per_s"].as_f64() >= Some(0.0),
        "{w}"
    );
    assert!(
        stdout.contains("cpu_per_request vs release") && stdout.contains("no turn of"),
        "{stdout}"
    );
    // Read in the first session only (of its first eight): it is a figure of the build,
    // and reading it took most of the set-up a session waits for.
    let measured = json(&data.join("stages/measure.json"));
    let read: Vec<(u64, bool)> = measured["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter(|s| s["workload"] == w["workload"])
        .map(|s| {
            let totals = s["totals"].as_array().expect("totals");
            let idle = |t: &serde_json::Value| t.get("server_idle_cpu_ns_per_s").is_some();
            assert!(
                totals.iter().all(idle) || !totals.iter().any(idle),
                "every arm of a session reads it, or none: {s}"
            );
            (s["session"].as_u64().unwrap(), totals.iter().all(idle))
        })
        .collect();
    assert!(
        read.len() >= 2 && read.iter().all(|&(i, r)| r == (i == 0)),
        "{read:?}"
    );
    // The training's share of the oracle's gain: a number, or null where that gain is not
    // clear of zero (this server's runs are short and noisy).
    assert!(
        w["capture"]["pct"].is_number() || w["capture"].is_null(),
        "{w}"
    );
    // A persistent driver: one process for each arm and session, which ran the arm's warm-up
    // and each of its rounds, a line on its stdin each.
    let w = &report["workloads"][1];
    assert_eq!(w["workload"], "items_turns", "{w}");
    assert!(w["aa"]["cpu_per_request"].is_object(), "{w}");
    let log = std::fs::read_to_string(&turns_log).expect("the persistent driver's log");
    let mut turns: std::collections::BTreeMap<&str, u64> = Default::default();
    for line in log.lines() {
        *turns
            .entry(line.strip_prefix("turn ").expect("turn PID"))
            .or_default() += 1;
    }
    let rounds = w["rounds_per_session"].as_u64().expect("rounds a session");
    // Each measuring driver ran its arm's warm-up and rounds; a driver of one turn is the
    // insight stage's (the workload profiled once on the instrumented server), on a first run.
    let measuring = turns.values().filter(|&&t| t == 1 + rounds).count();
    assert!(
        measuring >= 5 && turns.values().all(|&t| t == 1 + rounds || t == 1),
        "each measuring driver should run 1 + {rounds} turns: {turns:?}"
    );
    // The driver was a bin of the workspace, built where drivers go.
    assert!(
        ws().join("target")
            .join(SHARED)
            .join("driver/release/tinyload")
            .is_file()
    );

    // Interrupted: xtask killed by SIGKILL while its servers run. Each arm sees its
    // coordinator gone and exits; each server dies with its arm.
    let mut run = Group::spawn(
        service_command(name, SHARED, &cfg, &["pgo", "--remeasure"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    );
    assert!(
        eventually(120, || !servers(SHARED, &[], &FAULTY).is_empty()),
        "no server started in the remeasure"
    );
    // SAFETY: kill(2) on the xtask we started, alone (not its group).
    unsafe { libc::kill(run.id() as libc::pid_t, libc::SIGKILL) };
    assert_no_server_left(SHARED, &[], &FAULTY);
    run.kill_all();
}

#[test]
fn a_server_killed_by_sigkill_leaves_no_profile_and_the_error_says_why() {
    let name = "sigkill";
    let cfg = config(
        name,
        &[(
            r#"args = ["--listen", "{addr}"], service = { driver = ["tinyload", "--url", "{addr}", "--requests", "3000"], ready_line = "listening on", stop_timeout_secs = 5 }"#,
            r#"args = ["--listen", "{addr}", "--ignore-sigterm"], service = { driver = ["tinyload", "--url", "{addr}", "--requests", "3000"], ready_line = "listening on", stop_timeout_secs = 1 }"#,
        )],
    );
    let out = stages(name, SHARED, &cfg, &["instrument", "train"]);
    let stderr = stderr_of(&out);
    assert!(!out.status.success(), "{stderr}");
    for needle in [
        "training workload `items` failed",
        "no raw profile was written",
        "killed by signal 9 (SIGKILL) after it ignored SIGTERM for 1 s",
        "Handle SIGTERM and return from `main`",
        "`continuous = true`",
    ] {
        assert!(stderr.contains(needle), "no `{needle}` in:\n{stderr}");
    }
    assert_no_server_left(SHARED, &["--ignore-sigterm"], &[]);

    // Continuous mode: the same server, killed the same way, keeps its counts.
    let name = "continuous";
    let cfg = config(
        name,
        &[
            (
                r#"args = ["--listen", "{addr}"], service = { driver = ["tinyload", "--url", "{addr}", "--requests", "3000"], ready_line = "listening on", stop_timeout_secs = 5 }"#,
                r#"args = ["--listen", "{addr}", "--ignore-sigterm"], service = { driver = ["tinyload", "--url", "{addr}", "--requests", "3000"], ready_line = "listening on", stop_timeout_secs = 1 }"#,
            ),
            (
                "timeout_secs = 60\nworkloads",
                "timeout_secs = 60\ncontinuous = true\nworkloads",
            ),
        ],
    );
    let out = stages(name, name, &cfg, &["instrument", "train", "merge"]);
    let stderr = stderr_of(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("-runtime-counter-relocation"), "{stderr}");
    assert_no_server_left(name, &[], &[]);
    // The merged profile counts the server's request path.
    let data = ws().join("pgo-data").join(name);
    let merged = json(&data.join("stages/merge.json"));
    let path = merged["path"]
        .as_str()
        .or_else(|| merged[0]["path"].as_str())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no merged profile path in {merged}"));
    let profdata = llvm_profdata();
    let shown = Command::new(profdata)
        .args(["show", "--all-functions", "--counts"])
        .arg(&path)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    // `work` runs once a request: the driver's 3000, all of them counted.
    let work = shown
        .lines()
        .position(|l| l.contains("7tinysrv4work"))
        .unwrap_or_else(|| panic!("no `work` function in the profile:\n{shown}"));
    let counts = shown
        .lines()
        .skip(work)
        .find_map(|l| l.trim().strip_prefix("Block counts: ["))
        .unwrap_or_else(|| panic!("no block counts for `work`:\n{shown}"));
    // Its entry (not first in IR-level profiles) once a request; its loop 3000 times that.
    let counts: Vec<u64> = counts
        .trim_end_matches(']')
        .split(", ")
        .map(|c| c.parse().unwrap())
        .collect();
    assert!(counts.contains(&3000), "`work`'s block counts: {counts:?}");
    assert!(counts.iter().any(|&c| c > 1_000_000), "{counts:?}");
}

#[test]
fn a_server_that_never_becomes_ready_is_killed_at_its_timeout_and_named() {
    let name = "never-ready";
    let cfg = config(
        name,
        &[(
            r#"args = ["--listen", "{addr}"], service = { driver = ["tinyload", "--url", "{addr}", "--requests", "3000"], ready_line = "listening on", stop_timeout_secs = 5 }"#,
            r#"args = ["--listen", "{addr}", "--never-ready"], service = { driver = ["tinyload", "--url", "{addr}"], ready_line = "listening on", ready_timeout_secs = 2 }"#,
        )],
    );
    let out = stages(name, SHARED, &cfg, &["instrument", "train"]);
    let stderr = stderr_of(&out);
    assert!(!out.status.success(), "{stderr}");
    for needle in [
        "was not ready within 2 s (no line of its stdout contained `listening on`) and was killed",
        "--never-ready",
        "service.ready_line",
    ] {
        assert!(stderr.contains(needle), "no `{needle}` in:\n{stderr}");
    }
    assert_no_server_left(SHARED, &["--never-ready"], &[]);
}

/// The llvm-profdata of the toolchain (installed by the pipeline's doctor).
fn llvm_profdata() -> PathBuf {
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .unwrap();
    let sysroot = String::from_utf8_lossy(&sysroot.stdout).trim().to_string();
    let host = Command::new("rustc").arg("-vV").output().unwrap();
    let host = String::from_utf8_lossy(&host.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .unwrap();
    Path::new(&sysroot).join(format!("lib/rustlib/{host}/bin/llvm-profdata"))
}
