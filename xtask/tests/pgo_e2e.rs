//! End to end: the whole `cargo xtask pgo` with profiles/quick.toml into a temporary
//! pgo-data and target directory, real toolchain, real llvm-profdata, real workloads, made
//! once and shared (`support::good_run`). Then, each its own test on those artifacts, what
//! the pipeline must refuse (an unrelated or raw profile) and the faults a release pipeline
//! meets (`pgo_e2e/faults.rs`), each provoked for real. Each must fail loudly (or proceed
//! where asked to) and leave the last good artifacts as they were. Tests of a stage that
//! need no Mighty code work on a second shared run, of a small registry-crate program
//! (`own_program::own_run`), whose builds take seconds.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

#[path = "pgo_e2e/against.rs"]
mod against;
#[path = "pgo_e2e/bolt.rs"]
mod bolt;
#[path = "pgo_e2e/bundles.rs"]
mod bundles;
#[path = "pgo_e2e/documents.rs"]
mod documents;
#[path = "pgo_e2e/faults.rs"]
mod faults;
#[path = "pgo_e2e/layout.rs"]
mod layout;
#[path = "pgo_e2e/own_program.rs"]
mod own_program;
#[path = "pgo_e2e/rerun.rs"]
mod rerun;
#[path = "pgo_e2e/service.rs"]
mod service;
#[path = "pgo_e2e/service_programs.rs"]
mod service_programs;
#[path = "pgo_e2e/support.rs"]
mod support;
#[path = "../src/testing/optional.rs"]
mod testutil;
#[path = "pgo_e2e/tuning.rs"]
mod tuning;
#[path = "pgo_e2e/userflags.rs"]
mod userflags;

use support::*;

/// The measured builds: with llvm-bolt here (CI installs bolt-22), the BOLT build too.
fn measured_builds() -> Vec<&'static str> {
    let mut b = vec!["release", "lto", "lto+pgo"];
    if expect_bolt() {
        b.push("lto+pgo+bolt");
    }
    b.push("oracle");
    b
}

#[test]
fn the_whole_pipeline_on_the_quick_config() {
    let run = good_run();
    let (data, stdout) = (&run.data, &run.stdout);

    // The merged profile exists and is not empty.
    let merge = json(&data.join("stages/merge.json"));
    let profile = merge["path"].as_str().unwrap();
    assert!(
        std::fs::metadata(profile).unwrap().len() > 0,
        "{profile} is empty"
    );
    assert!(merge["functions"].as_u64().unwrap() > 100);

    // The profile applied: no missing-function or mismatch warning for mty_runtime or tokio's
    // mpsc in mty-bench.
    let optimize = json(&data.join("stages/optimize.json"));
    assert_eq!(
        optimize["apply"]["required_violations"],
        serde_json::json!([]),
        "{optimize:#}"
    );
    for krate in ["mty_runtime", "tokio"] {
        assert!(
            optimize["apply"]["per_crate"].get(krate).is_none(),
            "{krate} has PGO warnings: {optimize:#}"
        );
    }

    // Instrumented executable has the profiling runtime, the optimised one does not.
    let instrumented = json(&data.join("stages/instrument.json"));
    assert!(contains(
        instrumented["exe"].as_str().unwrap(),
        b"__llvm_profile"
    ));
    assert!(!contains(
        optimize["build"]["exe"].as_str().unwrap(),
        b"__llvm_profile"
    ));

    // report.json: release, LTO and PGO rows with numeric medians, paired comparisons, the A/A
    // noise floor, instructions per message, and the raw runs behind them.
    let report = json(&data.join("report.json"));
    let w = &report["workloads"][0];
    let rows = w["rows"].as_array().unwrap();
    let builds: Vec<&str> = rows.iter().map(|r| r["build"].as_str().unwrap()).collect();
    assert_eq!(builds, measured_builds());
    // Lockstep: quick.toml has 4 sessions of 20 rounds.
    assert_eq!(w["sessions"].as_u64(), Some(4), "quick.toml has 4 sessions");
    assert_eq!(w["rounds_per_session"].as_u64(), Some(20));
    // Why each workload and versus pair stopped (four sessions: fewer than the pilot, so the
    // plan is the session cap or the count itself), and where the measured core's time went:
    // set-up before the turns, the turns around the arms' own batch time, the close.
    let stopped = report["stopped"].as_array().unwrap();
    assert_eq!(
        stopped.len(),
        3,
        "two workloads and one versus pair: {stopped:?}"
    );
    for s in stopped {
        assert_eq!(
            (s["sessions"].as_u64(), s["pilot"].as_u64()),
            (Some(4), Some(4)),
            "{s}"
        );
        assert!(
            ["target", "session_cap"].contains(&s["reason"].as_str().unwrap()),
            "{s}"
        );
        let t = &s["timing"];
        let secs = |k: &str| t[k].as_f64().unwrap();
        assert!(secs("setup_secs") > 0.0 && secs("close_secs") > 0.0, "{s}");
        assert!(
            0.0 < secs("batch_secs") && secs("batch_secs") < secs("turns_secs"),
            "{s}"
        );
        assert!(s["secs"].as_f64().unwrap() >= secs("turns_secs"), "{s}");
    }
    for s in report["sessions"].as_array().unwrap() {
        assert!(s["timing"]["turns_secs"].as_f64().unwrap() > 0.0, "{s}");
        for arm in s["batches"].as_array().unwrap() {
            assert!(
                arm.as_array()
                    .unwrap()
                    .iter()
                    .all(|b| b["elapsed_ns"].as_f64().unwrap() > 0.0)
            );
        }
    }
    let md = std::fs::read_to_string(data.join("report.md")).unwrap();
    assert!(
        md.contains("## Sessions") && md.contains("| `agent_send_latency` | 4 |"),
        "{md}"
    );
    let clean = w["sessions"].as_u64().unwrap();
    let valgrind = testutil::have(
        "instructions per message (valgrind)",
        testutil::on_path("valgrind"),
        "apt-get install valgrind",
    );
    for row in rows {
        assert!(row["median_ns"].as_f64().unwrap() > 0.0, "{row}");
        assert!(
            row["p99_ns"].as_f64().unwrap() >= row["median_ns"].as_f64().unwrap(),
            "{row}"
        );
        assert_eq!(row["runs"].as_u64(), Some(clean), "{row}");
        if valgrind {
            assert!(
                row["instructions_per_message"].as_f64().unwrap() > 10.0,
                "{row}"
            );
        } else {
            assert!(
                row["instructions_note"]
                    .as_str()
                    .unwrap()
                    .contains("apt-get install valgrind"),
                "{row}"
            );
        }
    }
    for row in &rows[1..] {
        let e = &row["vs_release"]["median"]["estimate"];
        assert!(
            e["ci_low_pct"].as_f64().unwrap() <= e["change_pct"].as_f64().unwrap(),
            "{row}"
        );
        assert!(
            e["change_pct"].as_f64().unwrap() <= e["ci_high_pct"].as_f64().unwrap(),
            "{row}"
        );
    }
    assert_eq!(w["aa"]["median"]["estimate"]["pairs"].as_u64(), Some(4));
    assert_eq!(
        w["aa"]["median"]["estimate"]["rounds"].as_u64(),
        Some(4 * 20)
    );
    // Every session: the five arms, each with a batch in every round, every round a
    // permutation of the arms, and each arm's closing report.
    let sessions = report["sessions"].as_array().unwrap();
    assert_eq!(
        sessions.len(),
        4 * 2,
        "4 sessions of each of quick.toml's 2 workloads"
    );
    // Every workload: the builds and the A/A arm (each from a fresh copy of its file);
    // quick.toml's `layout.workloads`: release's two layout variants too. A session's arms
    // come in the order they were spawned, drawn per session.
    let mut arms = measured_builds();
    arms.extend(["release-aa"]);
    arms.sort();
    let mut with_layout = arms.clone();
    with_layout.extend(["release/L1", "release/L2"]);
    with_layout.sort();
    let mut orders = std::collections::BTreeSet::new();
    for s in sessions {
        let expected = if s["workload"] == "tokio_mpsc_send_latency" {
            &with_layout
        } else {
            &arms
        };
        let mut got: Vec<&str> = s["arms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        orders.insert(got.join(","));
        got.sort();
        assert_eq!(&got, expected);
        // Moved onto the measured core in an order of its own: a permutation of the arms.
        let mut moves: Vec<u64> = s["moves"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_u64().unwrap())
            .collect();
        moves.sort();
        assert_eq!(moves, (0..got.len() as u64).collect::<Vec<_>>(), "{s}");
        for arm in s["batches"].as_array().unwrap() {
            assert_eq!(arm.as_array().unwrap().len(), 20, "{s}");
            for b in arm.as_array().unwrap() {
                assert!(b["median_ns"].as_f64().unwrap() > 0.0, "{b}");
            }
        }
        for turn in s["order"].as_array().unwrap() {
            let mut t: Vec<u64> = turn
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect();
            t.sort();
            assert_eq!(
                t,
                (0..expected.len() as u64).collect::<Vec<_>>(),
                "each round runs every arm once"
            );
        }
        assert_eq!(s["totals"].as_array().unwrap().len(), expected.len());
    }
    assert!(
        orders.len() > 1,
        "the spawn order is drawn per session: {orders:?}"
    );
    assert!(
        report["seed"].as_u64().is_some(),
        "the run's seed is recorded"
    );
    assert!(
        report.get("runs").is_none(),
        "lockstep is the only protocol"
    );
    assert!(
        report["environment"]["rustc_vv"]
            .as_str()
            .unwrap()
            .contains("LLVM version")
    );
    let recorded: Vec<&str> = report["builds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["build"].as_str().unwrap())
        .collect();
    assert_eq!(recorded, measured_builds(), "report.json names each build");
    assert!(
        stdout.contains("APPLIED")
            && stdout.contains("null arm: release-aa ")
            && stdout.contains("(every arm from a fresh copy of its file each session)")
            && stdout.contains("4 sessions × 20 rounds (lockstep)"),
        "{stdout}"
    );

    // The oracle: built from the measured workload's own profile, applied, measured beside
    // the others, and the share of its gain the training gets.
    let oracle = json(&data.join("stages/oracle.json"));
    assert_eq!(
        oracle["apply"]["required_violations"],
        serde_json::json!([])
    );
    assert!(
        oracle["build"]["rustflags"]
            .as_str()
            .unwrap()
            .contains("insight/oracle-"),
        "{oracle}"
    );
    // The share of the oracle's gain, or why there is none (a quick training's oracle may gain
    // nothing measurable over lto).
    let capture = &w["capture"];
    if capture.is_null() {
        assert!(stdout.contains("no share of the oracle's gain"), "{stdout}");
    } else {
        assert!(
            capture["ci_low_pct"].as_f64().unwrap() <= capture["pct"].as_f64().unwrap()
                && capture["pct"].as_f64().unwrap() <= capture["ci_high_pct"].as_f64().unwrap(),
            "{capture}"
        );
        assert!(stdout.contains("the training captures"), "{stdout}");
    }

    // The insight: the training profile's hottest functions, the required paths covered, the
    // measured workload profiled alone and compared, in report.json and report.md.
    let insight = &report["insight"];
    assert_eq!(insight, &json(&data.join("stages/insight.json")));
    assert!(
        !insight["training"]["top"].as_array().unwrap().is_empty(),
        "{insight}"
    );
    for r in insight["required"].as_array().unwrap() {
        assert!(
            r["nonzero"].as_u64().unwrap() > 0,
            "the training ran the required paths: {r}"
        );
    }
    let w0 = &insight["workloads"][0];
    assert_eq!(w0["workload"], "agent_send_latency");
    let overlap = w0["overlap_pct"].as_f64().unwrap();
    assert!(0.0 < overlap && overlap <= 100.0, "{w0}");
    assert!(!w0["hot"].as_array().unwrap().is_empty(), "{w0}");
    assert!(data.join("insight/agent_send_latency.profdata").is_file());
    if valgrind {
        for i in report["instructions"].as_array().unwrap() {
            let s = &i["simulated"];
            assert!(s["cond_branches"].as_f64().unwrap() > 1.0, "{i}");
            assert!(s["cond_mispredicts"].as_f64().unwrap() >= 0.0, "{i}");
        }
    }

    // The comparators ride along: Mighty on every shipped build (not the oracle), tokio, C++
    // and Go (a row whose toolchain is missing says so and what to install).
    let comparators = report["comparators"].as_array().unwrap();
    let shipped = measured_builds().len() - 1;
    assert_eq!(comparators.len(), shipped * 2 + 1 + 3, "{comparators:?}");
    for row in comparators {
        assert!(
            row["figures"].is_object()
                || row["skipped"]
                    .as_str()
                    .is_some_and(|s| s.contains("apt-get install")),
            "{row}"
        );
    }
    assert!(stdout.contains("comparators ("), "{stdout}");
}

/// Instructions per message are deterministic: measuring again gives the same counts.
#[test]
fn instructions_per_message_repeat_exactly() {
    let run = good_run();
    let (data, target) = (&run.data, &run.target);
    let measure = || {
        let out = xtask(&["pgo", "measure"], data, target);
        assert!(out.status.success(), "{}", stderr_of(&out));
        json(&data.join("stages/measure.json"))["instructions"].clone()
    };
    let first = measure();
    assert_eq!(measure(), first);
}

/// The same optimize stage, fed a valid indexed profile of unrelated code, must refuse. On
/// the small workspace, whose required prefix is `serde_json::`.
#[test]
fn an_unrelated_profile_fails_the_apply_check() {
    let run = own_program::own_run();
    let data = &run.data;
    let dummy_text = run.tmp.join("unrelated.proftext");
    std::fs::write(
        &dummy_text,
        ":ir\nnot_a_real_function\n# Func Hash:\n1\n# Num Counters:\n1\n# Counter Values:\n5\n",
    )
    .unwrap();
    let dummy = data.join("merged-unrelated.profdata");
    let profdata = json(&data.join("stages/doctor.json"))["llvm_profdata"]
        .as_str()
        .unwrap()
        .to_string();
    let merged = Command::new(profdata)
        .arg("merge")
        .arg("-o")
        .arg(&dummy)
        .arg(&dummy_text)
        .status()
        .unwrap();
    assert!(merged.success());
    let mut merge = json(&data.join("stages/merge.json"));
    merge["path"] = Value::String(dummy.display().to_string());
    std::fs::write(data.join("stages/merge.json"), merge.to_string()).unwrap();
    let out = own_program::own_xtask(&own_program::ws().join("pgo.toml"), &["pgo", "optimize"]);
    let stderr = stderr_of(&out);
    assert!(
        !out.status.success(),
        "an unrelated profile must fail the apply check:\n{stderr}"
    );
    assert!(
        stderr.contains("the profile did NOT apply to the measured code"),
        "{stderr}"
    );
    let optimize = json(&data.join("stages/optimize.json"));
    assert!(
        optimize["apply"]["per_crate"]["serde_json"]["missing"]
            .as_u64()
            .unwrap()
            > 0,
        "{optimize:#}"
    );
}

/// A raw .profraw handed to optimize is refused before any build (rustc would only warn).
#[test]
fn a_raw_profile_is_refused_before_any_build() {
    let run = good_run();
    let (data, target) = (&run.data, &run.target);
    let raw = instrumented_profraw(data);
    let mut merge = json(&data.join("stages/merge.json"));
    merge["path"] = Value::String(raw.display().to_string());
    std::fs::write(data.join("stages/merge.json"), merge.to_string()).unwrap();
    let out = xtask(&["pgo", "optimize"], data, target);
    let stderr = stderr_of(&out);
    assert!(stderr.contains("is not an indexed profile"), "{stderr}");
    assert!(
        !stderr.contains("cargo build"),
        "refused before any build:\n{stderr}"
    );
}

/// `cargo xtask calibrate --repeat 2` on the quick config: nothing injected is not called
/// a change, and +30 % (large, so this cannot be flaky) is called slower, near its size, in
/// both runs, each with a seed of its own; the replication says the verdicts agree.
#[test]
fn calibration_detects_a_large_injection_and_not_a_zero_one() {
    let run = good_run();
    // Its replications must agree: nothing of the small workspace's tests builds or measures
    // beside it (their builds beside it once left the two 30 % intervals apart).
    let _quiet = own_program::hold_own_run();
    // Ten sessions, not quick.toml's four: with four, the interval rests on a t of 3 degrees
    // of freedom, and one disturbed session (a busy CI machine) can widen it past the 30 %
    // injected.
    let config = config_variant(
        &run.tmp.join("calibrate.toml"),
        "sessions = 4 ",
        "sessions = 10 ",
    );
    let out = xtask_with(
        &config,
        &["calibrate", "--repeat", "2"],
        &run.data,
        &run.target,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", stderr_of(&out));
    assert!(
        stdout.contains("calibration of `agent_send_latency`")
            && stdout.contains("replication: each size measured 2 times with fresh seeds"),
        "{stdout}"
    );
    let c = json(&run.data.join("calibration.json"));
    let rows = c["rows"].as_array().unwrap();
    let sizes: Vec<f64> = rows
        .iter()
        .map(|r| r["target_pct"].as_f64().unwrap())
        .collect();
    assert_eq!(sizes, [0.0, 30.0, 0.0, 30.0]);
    let seeds: std::collections::BTreeSet<u64> =
        rows.iter().map(|r| r["seed"].as_u64().unwrap()).collect();
    assert_eq!(seeds.len(), 4, "a seed of its own for every size and run");
    let large = c["replication"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["target_pct"] == 30.0)
        .unwrap();
    assert_eq!(large["agree_pct"], 100.0, "{large}");
    // Not that the two intervals overlap: each run injects its own median's 30 %, and on a
    // busy machine two runs' medians (and so their sizes) differ by more than ten sessions'
    // intervals are wide. Each run's estimate against its own size is checked below.
    assert!(large["intervals_overlap"].is_boolean(), "{large}");
    for r in rows {
        let verdict = r["detected"]["verdict"].as_str().unwrap();
        let change = r["detected"]["estimate"]["change_pct"].as_f64().unwrap();
        if r["target_pct"].as_f64().unwrap() == 0.0 {
            assert_eq!(r["inject_ns"].as_u64(), Some(0), "{r}");
            assert_eq!(r["injected_pct"].as_f64(), Some(0.0), "{r}");
        } else {
            let injected = r["injected_pct"].as_f64().unwrap();
            assert!((20.0..40.0).contains(&injected), "{r}");
            assert_eq!(verdict, "slower", "{r}");
            assert!(injected / 2.0 < change && change < injected * 2.0, "{r}");
        }
    }
}

/// `cargo xtask ab OLD NEW` with the run's release and lto executables: both arms in the
/// same sessions, one comparison per measured workload with its interval, in the terminal and
/// in ab.json; a missing executable is named before anything runs.
#[test]
fn ab_measures_two_executables_in_the_same_sessions() {
    let run = good_run();
    let baselines = json(&run.data.join("stages/baselines.json"));
    let (old, new) = (
        baselines["release"]["exe"].as_str().unwrap(),
        baselines["lto"]["exe"].as_str().unwrap(),
    );
    let out = xtask(&["ab", old, new], &run.data, &run.target);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", stderr_of(&out));
    assert!(stdout.contains("new against old"), "{stdout}");
    let ab = json(&run.data.join("ab.json"));
    let workloads = ab["workloads"].as_array().unwrap();
    assert!(!workloads.is_empty(), "{ab}");
    for w in workloads {
        let name = w["workload"].as_str().unwrap();
        assert!(stdout.contains(name), "{name} in the terminal:\n{stdout}");
        let e = &w["new_vs_old"]["estimate"];
        let (low, high) = (
            e["ci_low_pct"].as_f64().unwrap(),
            e["ci_high_pct"].as_f64().unwrap(),
        );
        assert!(
            low <= e["change_pct"].as_f64().unwrap() && e["change_pct"].as_f64().unwrap() <= high,
            "{w}"
        );
        assert!(w["sessions"].as_u64().unwrap() > 0, "{w}");
        // No earlier run to carry a component from: the sessions' own interval.
        assert!(e["arm"].is_null(), "{w}");
        assert!(stdout.contains("per message (median)"), "{stdout}");
    }
    let mut arms: Vec<&str> = ab["sessions"][0]["arms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    arms.sort();
    assert_eq!(
        arms,
        ["new", "release", "release-aa"],
        "OLD twice, NEW once"
    );
    let missing = run.tmp.join("no-such-mty-bench");
    let out = xtask(
        &["ab", old, missing.to_str().unwrap()],
        &run.data,
        &run.target,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = stderr_of(&out);
    assert!(
        stderr.contains("cannot read") && stderr.contains("no-such-mty-bench"),
        "{stderr}"
    );
}

/// A deliberately unrepresentative training (bare tokio only): the insight stage says the
/// mailbox's functions were never trained, in the terminal and in its record. (The
/// program-level edge overlap stays high here: the tokio semaphore both share carries
/// much of the count; the never-trained share and functions are the sharper signal.)
#[test]
fn an_unrepresentative_training_is_warned_about() {
    let run = good_run();
    let (tmp, data, target) = (&run.tmp, &run.data, &run.target);
    let config = config_variant(
        &tmp.join("tokio-only-training.toml"),
        r#"args = ["train", "--messages", "20000"]"#,
        r#"args = ["tokio_mpsc_send_latency", "--messages", "20000"]"#,
    );
    for stage in ["train", "merge", "insight"] {
        let out = xtask_with(&config, &["pgo", stage], data, target);
        assert!(out.status.success(), "{stage}: {}", stderr_of(&out));
        if stage == "insight" {
            let err = stderr_of(&out);
            // The first is a mailbox function, or a trait method of one of its types
            // (`<mty_runtime::send::SendFuture<..> as Future>::poll`).
            assert!(
                err.contains("warning: `agent_send_latency` runs ")
                    && ["(first: mty_runtime::", "(first: <mty_runtime::"]
                        .iter()
                        .any(|first| err.contains(&format!("training never ran {first}"))),
                "{err}"
            );
            // The agreement's warning, naming what the mailbox workload lacks.
            assert!(
                err.contains("warning: the training stands for `agent_send_latency` at ")
                    && (err.contains("lacking most: mty_") || err.contains("lacking most: <mty_")),
                "{err}"
            );
        }
    }
    let insight = json(&data.join("stages/insight.json"));
    let w = &insight["workloads"][0];
    assert!(w["untrained_share_pct"].as_f64().unwrap() > 20.0, "{w}");
    assert!(
        w["agreement"]["score_pct"].as_f64().unwrap()
            < insight["min_agreement_pct"].as_f64().unwrap(),
        "{w}"
    );
    assert!(
        w["never_trained"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().starts_with("mty_runtime::mailbox::")),
        "{w}"
    );
    assert!(
        !insight["warnings"].as_array().unwrap().is_empty(),
        "{insight}"
    );
    // This training against the good one before it: the determinism figure.
    assert!(
        insight["previous_overlap_pct"].as_f64().unwrap() < 100.0,
        "{insight}"
    );
}

/// The code measured is the code trained. The training runs whole runs of mty-bench's
/// workloads; a lockstep batch and an `--untimed` run (the instruction count) must spend
/// their per-message work in functions a whole run runs too. A mode with a loop of its own
/// is cold to PGO and optimised for size: it once made lto+pgo measure slower than release in
/// lockstep while whole runs had it much faster (docs/findings.md, "The code measured must be
/// the code trained"; this found the lockstep and untimed loops inlined into
/// `tokio::…::Context::enter` copies no whole run executed).
#[test]
fn every_mode_runs_the_code_a_whole_run_trains() {
    let run = good_run();
    let exe = json(&run.data.join("stages/instrument.json"))["exe"].clone();
    let tool = json(&run.data.join("stages/doctor.json"))["llvm_profdata"].clone();
    let (exe, tool) = (exe.as_str().unwrap(), tool.as_str().unwrap());
    const MESSAGES: u64 = 5000;
    // Each function's counter sum in the profile of one mode's run.
    let profile = |mode: &str, extra: &[&str], stdin: &str| -> BTreeMap<String, u64> {
        use std::io::Write as _;
        let dir = run.tmp.join("modes").join(mode);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = Command::new(exe)
            .args(["agent_send_latency", "--messages", &MESSAGES.to_string()])
            .args(["--warmup", "0"])
            .args(extra)
            .env("LLVM_PROFILE_FILE", dir.join("%p.profraw"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success(), "{mode}");
        let text = dir.join("profile.txt");
        let merged = Command::new(tool)
            .args(["merge", "--text", "-o"])
            .arg(&text)
            .arg(dir.join(format!("{}.profraw", child.id())))
            .output()
            .unwrap();
        assert!(merged.status.success(), "{}", stderr_of(&merged));
        let dump = std::fs::read_to_string(&text).unwrap();
        // Records: the name, then the hash, the number of counters and the counters, each
        // under a `#` comment line.
        let mut counts = BTreeMap::new();
        for record in dump.split("\n\n") {
            let lines: Vec<&str> = record
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .collect();
            if let [name, _hash, n, rest @ ..] = &lines[..]
                && let Ok(n) = n.parse::<usize>()
            {
                let sum = rest
                    .iter()
                    .take(n)
                    .filter_map(|v| v.parse::<u64>().ok())
                    .sum();
                counts.insert(name.to_string(), sum);
            }
        }
        assert!(
            counts.len() > 100,
            "{mode}: {} functions in {dump:.400}",
            counts.len()
        );
        counts
    };
    let whole = profile("whole", &[], "");
    let batch = (MESSAGES / 2).to_string();
    let modes = [
        (
            "lockstep",
            profile("lockstep", &["--lockstep", &batch], "g\ng\nq\n"),
        ),
        ("untimed", profile("untimed", &["--untimed"], "")),
    ];
    for (mode, counts) in &modes {
        // Functions run about once a message or more, but the lockstep answer's summary
        // between batches (sorting the batch and its quantiles), which no timed region holds.
        let untrained: Vec<(&String, &u64)> = counts
            .iter()
            .filter(|(_, c)| **c >= MESSAGES / 2)
            .filter(|(name, _)| !name.contains("grouped_quantile") && !name.contains("5slice4sort"))
            .filter(|(name, _)| whole.get(*name).copied().unwrap_or(0) == 0)
            .collect();
        assert!(
            untrained.is_empty(),
            "{mode}: per-message work in functions a whole run never runs, cold to PGO: {untrained:?}"
        );
        // The mailbox's own path is among the per-message work (the filter above is not empty).
        assert!(
            counts
                .iter()
                .any(|(n, c)| n.contains("mty_runtime") && *c >= MESSAGES),
            "{mode}"
        );
    }
}
