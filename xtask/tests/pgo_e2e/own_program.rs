//! The pipeline on a program that is not Mighty's: a workspace made here, whose binary does
//! its work through serde_json from the registry (only `main`'s few lines are ours), built,
//! trained and measured whole-process as the installed subcommand (`cargo-mty mty pgo`) from
//! outside it (`--manifest-path`). Its own `.cargo/config.toml` sets
//! `-Ctarget-cpu=x86-64-v3`: every build must carry it (each executable says what it was
//! compiled to assume), as `cargo build` there would, and the profile still applies. Release
//! is relinked in four other function orders: the layout floor of a whole-process workload
//! (40,000 held-out records a run).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

use super::support::*;

const MAIN: &str = r#"use std::io::Read;

fn main() {
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).expect("records on stdin");
    let started = std::time::Instant::now();
    let (mut records, mut sum) = (0u64, 0.0f64);
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON record");
        sum += v["amount"].as_f64().unwrap_or(0.0);
        records += 1;
    }
    let ns = started.elapsed().as_nanos();
    // What the build's rustflags let it assume of the CPU (the test checks every build's).
    let cpu = if cfg!(target_feature = "avx2") { "x86-64-v3" } else { "x86-64" };
    println!("{{\"records\":{records},\"sum\":{sum:.2},\"elapsed_ns\":{ns},\"cpu\":\"{cpu}\"}}");
}
"#;

const CONFIG: &str = r#"binary = "jsonsum"

[train]
timeout_secs = 120
workloads = [{ name = "orders", args = [], stdin = "corpus/train.jsonl" }]

[measure]
seed = 7
timeout_secs = 60
bootstrap_resamples = 2000
min_effect_pct = 1.0
workloads = [
    { name = "held_out", args = [], mode = "process", stdin = "corpus/held-out.jsonl" },
    { name = "held_out_own_clock", args = [], mode = "process", stdin = "corpus/held-out.jsonl", metric = "elapsed_ns" },
]

[measure.lockstep]
sessions = 4
rounds = 6

[layout]
variants = 4
workloads = ["held_out"]

[bolt]
enabled = false

[apply_check]
required = ["serde_json::"]
"#;

/// JSON lines of orders, deterministic for a seed: ids, users, amounts, tags, notes.
pub fn corpus(seed: u64, records: usize) -> String {
    let mut state = seed;
    let mut next = move |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let mut out = String::new();
    for id in 0..records {
        let tags: Vec<String> = (0..next(4)).map(|_| format!("\"t{}\"", next(9))).collect();
        out.push_str(&format!(
            "{{\"id\":{id},\"user\":\"u{}\",\"amount\":{}.{:02},\"tags\":[{}],\"note\":\"{}\"}}\n",
            next(1000),
            next(500),
            next(100),
            tags.join(","),
            "x".repeat(next(40) as usize)
        ));
    }
    out
}

/// The workspace's directory (its target/ kept between `cargo test` runs).
pub fn ws() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("own-program")
}

/// The workspace, made afresh (but its target/ and .git/).
fn workspace() -> PathBuf {
    let ws = ws();
    for gone in ["pgo-data", "src", "corpus"] {
        let _ = std::fs::remove_dir_all(ws.join(gone));
    }
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join("corpus")).unwrap();
    // Its own workspace: not a member of the repository's.
    std::fs::write(
        ws.join("Cargo.toml"),
        "[package]\nname = \"jsonsum\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
         [dependencies]\nserde_json = \"1\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(ws.join("src/main.rs"), MAIN).unwrap();
    std::fs::create_dir_all(ws.join(".cargo")).unwrap();
    std::fs::write(
        ws.join(".cargo/config.toml"),
        "[build]\nrustflags = [\"-Ctarget-cpu=x86-64-v3\"]\n",
    )
    .unwrap();
    std::fs::write(ws.join(".gitignore"), "/target/\n/pgo-data/\n/Cargo.lock\n").unwrap();
    std::fs::write(ws.join("pgo.toml"), CONFIG).unwrap();
    std::fs::write(ws.join("corpus/train.jsonl"), corpus(1, 20_000)).unwrap();
    std::fs::write(ws.join("corpus/held-out.jsonl"), corpus(2, 40_000)).unwrap();
    ws
}

/// `cargo-mty mty ARGS` on the workspace (`--manifest-path`) with `config`, started from
/// outside it, as its user would: its own pgo-data/ and target/, its own cargo config.
pub fn own_command(config: &Path, args: &[&str]) -> Command {
    let ws = ws();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cargo-mty"));
    cmd.arg("mty")
        .args(args)
        .arg("--manifest-path")
        .arg(ws.join("Cargo.toml"))
        .arg("--config")
        .arg(config)
        .current_dir(ws.parent().unwrap())
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        // Its own target/, as for a user of it: not the one `cargo test` may have been given.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR");
    cmd
}

/// [`own_command`] run to its end (bounded).
pub fn own_xtask(config: &Path, args: &[&str]) -> std::process::Output {
    bounded_output(&mut own_command(config, args))
}

/// The workspace's pgo.toml with each `from` replaced by its `to`, written to `path`.
pub fn own_config_edits(path: &Path, edits: &[(&str, &str)]) -> PathBuf {
    edited_config(CONFIG, "the own program's config", path, edits)
}

/// `git -C dir ARGS`, which must succeed: its output, trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Commits what is staged in `dir` with a fixed identity and date, so the same tree gives
/// the same commit (whose `--against` worktree a rerun reuses); its hash.
pub fn commit_all(dir: &Path, message: &str) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=mty-test",
            "-c",
            "user.email=mty-test@localhost",
            "commit",
            "--quiet",
            "--no-verify",
            "-m",
            message,
        ])
        .env("GIT_AUTHOR_DATE", "2026-12-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-12-01T00:00:00Z")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    git(dir, &["rev-parse", "HEAD"])
}

static OWN_RUN: Slot = Mutex::new(None);

/// The small workspace's good run (`cargo mty pgo` on its pgo.toml), shared by the tests
/// that need a pipeline's artifacts but not Mighty's: its builds are quick next to each
/// fat-LTO build of `mty-bench`. Its tests take turns as on [`good_run`].
pub fn own_run() -> Turn {
    turn(&OWN_RUN, make_own_run)
}

/// Holds the small workspace's run without using it: nothing on it runs (builds, measures)
/// until the guard drops. For a test on the good run whose measurements must not share the
/// machine with the other test thread's work. Taken after the good run's own lock, never
/// before it, so the two locks cannot deadlock.
pub fn hold_own_run() -> std::sync::MutexGuard<'static, Option<Result<GoodRun, String>>> {
    OWN_RUN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn make_own_run() -> Result<GoodRun, String> {
    let ws = workspace();
    let tmp = ws.parent().unwrap().join("own-program-scratch");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    // A git repository of its own (a bundle records its commit; `--against` checks out
    // another), committed afresh when its files changed.
    if !ws.join(".git").exists() {
        git(&ws, &["init", "--quiet"]);
    }
    git(&ws, &["add", "--all"]);
    if !git(&ws, &["status", "--porcelain"]).is_empty() {
        commit_all(&ws, "the program");
    }
    let out = own_xtask(&ws.join("pgo.toml"), &["pgo"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr_of(&out),
    );
    if !out.status.success() {
        return Err(format!("cargo mty pgo failed:\n{stderr}\n{stdout}"));
    }
    Ok(GoodRun {
        tmp,
        data: ws.join("pgo-data"),
        target: ws.join("target/pgo"),
        stdout,
        stderr,
    })
}

#[test]
fn a_registry_crates_program_is_built_trained_and_measured_whole_process() {
    let run = own_run();
    let ws = ws();
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    assert!(
        stderr.contains("doctor: the user's rustflags: -Ctarget-cpu=x86-64-v3 (from ")
            && stderr.contains("own-program/.cargo/config.toml"),
        "the workspace's own cargo config, not the directory xtask ran in: {stderr}"
    );

    // Built under that workspace's target/, each build in its own folder.
    for folder in ["instrumented", "release", "lto", "lto-pgo", "oracle"] {
        assert!(
            ws.join("target/pgo").join(folder).is_dir(),
            "no {folder} build"
        );
    }
    // The verdict table: each build against release, whole-process (ms, no tail columns).
    for w in ["held_out", "held_out_own_clock"] {
        assert!(stdout.contains(&format!("{w}: ")), "{stdout}");
    }
    for build in ["lto", "lto+pgo", "oracle"] {
        let row = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{build} ")) && l.contains(" ms "))
            .unwrap_or_else(|| panic!("no {build} row in ms:\n{stdout}"));
        let bound = ["layout", "min effect"].iter().any(|b| row.contains(b));
        assert!(row.contains("95 % CI") && bound, "{row}");
    }
    assert!(
        !stdout.contains("p95: "),
        "a whole-process batch has no tail:\n{stdout}"
    );
    assert!(
        stdout.contains("null arm: release-aa ")
            && stdout.contains(
                "(whole-process: one run a turn, each comparison's two runs side by side)"
            ),
        "{stdout}"
    );

    // The apply check ran on serde_json's functions, and the profile covers them.
    assert!(stdout.contains("APPLIED"), "{stdout}");
    let data = ws.join("pgo-data");
    let report = json(&data.join("report.json"));
    assert_eq!(
        report["config"]["config"]["apply_check"]["required"][0],
        "serde_json::"
    );
    assert_eq!(
        report["apply_check"]["required_violations"],
        Value::Array(vec![])
    );
    let coverage = &report["insight"]["required"][0];
    assert_eq!(coverage["prefix"], "serde_json::");
    assert!(coverage["functions"].as_u64().unwrap() > 10, "{coverage}");
    assert!(coverage["nonzero"].as_u64().unwrap() > 0, "{coverage}");
    assert!(
        report["insight"]["training"]["top"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["krate"] == "serde_json"),
        "the training's hottest functions include serde_json's"
    );

    // Each workload: every build against release with an interval and a verdict, the A/A
    // arm's floor, the oracle's capture; the sessions hold the whole-process samples.
    for w in report["workloads"].as_array().unwrap() {
        let rows = w["rows"].as_array().unwrap();
        let names: Vec<&str> = rows.iter().map(|r| r["build"].as_str().unwrap()).collect();
        assert_eq!(names, ["release", "lto", "lto+pgo", "oracle"], "{w}");
        for r in &rows[1..] {
            let m = &r["vs_release"]["median"];
            assert!(m["estimate"]["ci_low_pct"].as_f64() <= m["estimate"]["ci_high_pct"].as_f64());
            assert!(
                ["faster", "slower", "no_detectable_change"]
                    .contains(&m["verdict"].as_str().unwrap()),
                "{m}"
            );
        }
        assert!(w["aa"].is_object(), "{w}");
        // A share of the oracle's gain, or none where that gain may be none (a noisy run).
        assert!(
            w["capture"]["pct"].is_number()
                || (w["capture"].is_null() && stdout.contains("no share of the oracle's gain")),
            "{w}"
        );
    }
    // Every session ran each open comparison as adjacent pairs: each round its pairs two by
    // two, each pair the comparison's two arms (every comparison here is against release).
    for s in report["sessions"].as_array().unwrap() {
        assert_eq!(s["paired"], true, "{}", s["order"]);
        let arms = strs(&s["arms"]);
        for round in s["order"].as_array().unwrap() {
            let round: Vec<&str> = round
                .as_array()
                .unwrap()
                .iter()
                .map(|i| arms[i.as_u64().unwrap() as usize])
                .collect();
            assert!(
                round.len().is_multiple_of(2) && !round.is_empty(),
                "{round:?}"
            );
            for pair in round.chunks(2) {
                assert!(
                    pair.contains(&"release") && pair[0] != pair[1],
                    "{round:?} in {arms:?}"
                );
            }
            // Release once a pair: one turn of release for each other arm.
            let release = round.iter().filter(|a| **a == "release").count();
            assert_eq!(release * 2, round.len(), "{round:?}");
        }
    }
    // Every comparison of a whole-process workload stopped with the pair as its unit (every
    // run from a copy of its own: `measure.fresh_copies`, on by default): its pilot the
    // pilot sessions' pairs, 4 × 6, and its estimate resting on pairs.
    let mut units = Vec::new();
    for s in report["stopped"].as_array().unwrap() {
        for c in s["comparisons"].as_array().unwrap() {
            let (unit, pilot) = (c["unit"].as_str().unwrap(), c["pilot"].as_u64().unwrap());
            assert_eq!((unit, pilot), ("pair", 24), "{c}");
            units.push((
                s["workload"].clone(),
                c["cand"].clone(),
                unit.to_string(),
                c["sessions"].clone(),
            ));
        }
    }
    for (w, cand, unit, n) in &units {
        let Some(row) = report["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| &x["workload"] == w)
            .and_then(|x| {
                x["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|r| &r["build"] == cand)
            })
        else {
            continue;
        };
        let pairs = &row["vs_release"]["median"]["estimate"]["pairs"];
        assert_eq!(pairs, n, "{w} {cand} ({unit}): {row}");
    }
    // The layout floor of a whole-process workload: release relinked in four other function
    // orders, measured in held_out's sessions. From fewer than 8 layouts the floor vetoes no
    // verdict beyond every layout measured: each build is judged by its interval against
    // max(min effect, the floor, capped at the farthest layout).
    let held_out = &report["workloads"][0];
    assert_eq!(held_out["workload"], "held_out");
    let l = &held_out["layout"];
    assert_eq!(l["layouts"], 4, "{l}");
    let pct = |v: &Value| v.as_f64().unwrap();
    let farthest = pct(&l["lowest_pct"])
        .abs()
        .max(pct(&l["highest_pct"]).abs());
    let floor = pct(&l["floor_pct"]);
    assert!(floor > 0.0 && farthest > 0.0, "{l}");
    let limit = 1.0f64.max(floor.min(farthest));
    for r in &held_out["rows"].as_array().unwrap()[1..] {
        let m = &r["vs_release"]["median"];
        let t = pct(&m["threshold_pct"]);
        assert!((t - limit).abs() < 1e-9, "threshold {t} for {l} and {m}");
        let (lo, hi) = (
            pct(&m["estimate"]["ci_low_pct"]),
            pct(&m["estimate"]["ci_high_pct"]),
        );
        let verdict = if hi < -t {
            "faster"
        } else if lo > t {
            "slower"
        } else {
            "no_detectable_change"
        };
        assert_eq!(m["verdict"], verdict, "{m}");
        assert!(m["bound"].is_string(), "{m}");
    }
    assert!(
        report["workloads"][1]["layout"].is_null(),
        "held_out_own_clock is not a layout workload"
    );
    assert!(
        stdout.contains("layout floor ±") && stdout.contains("4 layouts of release"),
        "{stdout}"
    );

    // The command's own figure is its processing time: of the order of the run's wall time.
    // The two are measured in different sessions, and the other test thread may be building
    // beside some of them, so they are compared within a factor of two: what this catches is
    // the wrong number read (another key, another unit), not the process's start, a small
    // part of a run.
    let median = |w: usize| {
        report["workloads"][w]["rows"][0]["median_ns"]
            .as_f64()
            .unwrap()
    };
    assert!(
        median(1) > 0.5 * median(0) && median(1) < 2.0 * median(0),
        "own clock {} vs wall {}",
        median(1),
        median(0)
    );
    for file in [
        "report.json",
        "report.md",
        "verdicts.svg",
        "latency.svg",
        "rounds.svg",
        "benchmark.json",
    ] {
        assert!(data.join(file).is_file(), "no {file}");
    }
    let md = std::fs::read_to_string(data.join("report.md")).unwrap();
    assert!(md.contains("held_out") && md.contains(" ms |"), "{md}");
    // Its sessions table counts the pairs a comparison rested on, and rounds.svg shows pairs.
    assert!(md.contains(" pairs (4 sessions) |"), "{md}");
    let rounds = std::fs::read_to_string(data.join("rounds.svg")).unwrap();
    assert!(
        rounds.contains("the same turns in pairs: % change against release's run of the same pair"),
        "rounds.svg does not show pairs"
    );

    // Every build carries the workspace's rustflag, first, before the pipeline's own.
    let stage = |name: &str| json(&data.join(format!("stages/{name}.json")));
    let (instrument, optimize, baselines, oracle) = (
        stage("instrument"),
        stage("optimize"),
        stage("baselines"),
        stage("oracle"),
    );
    let builds = [
        &instrument,
        &optimize["build"],
        &baselines["release"],
        &baselines["lto"],
        &oracle["build"],
    ];
    for built in builds {
        assert_eq!(
            built["rustflags_exact"][0], "-Ctarget-cpu=x86-64-v3",
            "{built}"
        );
        let exe = built["exe"].as_str().unwrap();
        let out = Command::new(exe)
            .stdin(std::process::Stdio::null())
            .env("LLVM_PROFILE_FILE", ws.join("target/ignored-%p.profraw"))
            .output()
            .unwrap();
        let line = String::from_utf8_lossy(&out.stdout);
        assert!(line.contains(r#""cpu":"x86-64-v3""#), "{exe}: {line}");
    }
}

#[test]
fn another_workspace_that_is_missing_or_has_no_such_binary_is_refused_clearly() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("own-program-refused");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(tmp.join("src")).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_cargo-mty"))
            .args(args)
            .current_dir(&tmp)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
        stderr_of(&out)
    };
    let err = run(&["pgo", "--manifest-path", "nowhere/Cargo.toml"]);
    assert!(err.contains("nowhere/Cargo.toml is not a file"), "{err}");
    // A workspace without a config of its own.
    std::fs::write(
        tmp.join("Cargo.toml"),
        "[package]\nname = \"other\"\nversion = \"0.1.0\"\nedition = \"2024\"\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(tmp.join("src/main.rs"), "fn main() {}\n").unwrap();
    // As `cargo mty` inside it: that workspace, found from the current directory.
    let err = run(&["mty", "pgo"]);
    assert!(
        err.contains("own-program-refused/profiles/default.toml does not exist")
            && err.contains("give one with `--config FILE`"),
        "{err}"
    );
    // A config whose binary the workspace does not build (Mighty's own).
    let quick = root().join("profiles/quick.toml");
    let err = run(&["mty", "pgo", "--config", quick.to_str().unwrap()]);
    assert!(
        err.contains("`binary = \"mty-bench\"` is not a bin target of the workspace")
            && err.contains("other (package other)"),
        "{err}"
    );
}
