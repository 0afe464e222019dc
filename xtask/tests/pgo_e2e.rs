//! End to end: the whole `cargo xtask pgo` with profiles/quick.toml into a temporary
//! pgo-data and target directory, real toolchain, real llvm-profdata, real workloads. Then,
//! on those artifacts, the faults a release pipeline meets, each provoked for real: an
//! unrelated or raw profile, a corrupt raw profile, no raw profiles, a failing and a hanging
//! workload, a stale profile, a held lock, an interrupt, a full disk. Each must fail loudly
//! (or proceed where asked to) and leave the last good artifacts as they were.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn xtask(args: &[&str], data: &Path, target: &Path) -> std::process::Output {
    xtask_with(&root().join("profiles/quick.toml"), args, data, target)
}

fn command(config: &Path, args: &[&str], data: &Path, target: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    cmd.args(args)
        .arg("--config")
        .arg(config)
        .arg("--pgo-data")
        .arg(data)
        .arg("--target-dir")
        .arg(target);
    cmd
}

fn xtask_with(config: &Path, args: &[&str], data: &Path, target: &Path) -> std::process::Output {
    command(config, args, data, target)
        .output()
        .expect("xtask runs")
}

/// quick.toml with `from` replaced by `to`, written to `path`.
fn config_variant(path: &Path, from: &str, to: &str) -> PathBuf {
    config_edits(path, &[(from, to)])
}

/// quick.toml with each `from` replaced by its `to`, written to `path`.
fn config_edits(path: &Path, edits: &[(&str, &str)]) -> PathBuf {
    let mut text = std::fs::read_to_string(root().join("profiles/quick.toml")).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "quick.toml has no {from:?}");
        text = text.replacen(from, to, 1);
    }
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

/// Starts xtask on quick.toml with its stderr piped: the child and its stderr, line by line.
fn spawn(
    args: &[&str],
    data: &Path,
    target: &Path,
) -> (
    std::process::Child,
    std::io::Lines<std::io::BufReader<std::process::ChildStderr>>,
) {
    use std::io::BufRead;
    let mut child = command(&root().join("profiles/quick.toml"), args, data, target)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    (child, lines)
}

/// Each file under `data` still holds exactly the bytes it held before.
fn assert_kept(data: &Path, files: &[(&str, &[u8])]) {
    for (file, before) in files {
        assert!(
            std::fs::read(data.join(file)).unwrap() == *before,
            "{file} changed; the last good one must be kept"
        );
    }
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(path: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

fn contains(path: &str, needle: &[u8]) -> bool {
    std::fs::read(path)
        .unwrap()
        .windows(needle.len())
        .any(|w| w == needle)
}

#[test]
fn the_whole_pipeline_on_the_quick_config() {
    let tmp = std::env::temp_dir().join(format!("mty-pgo-e2e-{}", std::process::id()));
    let (data, target) = (tmp.join("pgo-data"), tmp.join("target"));
    let out = xtask(&["pgo"], &data, &target);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo xtask pgo failed:\n{stderr}\n{stdout}"
    );

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

    // report.json: base, LTO and PGO rows with numeric medians, paired comparisons, the A/A
    // noise floor, instructions per message, and the raw runs behind them.
    let report = json(&data.join("report.json"));
    let w = &report["workloads"][0];
    let rows = w["rows"].as_array().unwrap();
    let builds: Vec<&str> = rows.iter().map(|r| r["build"].as_str().unwrap()).collect();
    assert_eq!(builds, ["release", "release-lto", "release-pgo"]);
    let clean = w["pairs_total"].as_u64().unwrap() - w["pairs_dropped"].as_u64().unwrap();
    assert_eq!(w["pairs_total"].as_u64(), Some(6), "quick.toml has 6 pairs");
    for row in rows {
        assert!(row["median_ns"].as_f64().unwrap() > 0.0, "{row}");
        assert!(
            row["p99_ns"].as_f64().unwrap() >= row["median_ns"].as_f64().unwrap(),
            "{row}"
        );
        assert_eq!(row["runs"].as_u64(), Some(clean), "{row}");
        assert!(
            row["instructions_per_message"].as_f64().unwrap() > 10.0,
            "{row}"
        );
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
    assert!(w["aa"]["median"]["estimate"]["pairs"].as_u64().unwrap() >= 2);
    assert_eq!(
        report["runs"].as_array().unwrap().len(),
        6 * 4,
        "4 runs a block"
    );
    assert!(
        report["environment"]["rustc_vv"]
            .as_str()
            .unwrap()
            .contains("LLVM version")
    );
    assert!(
        stdout.contains("APPLIED") && stdout.contains("A/A noise floor"),
        "{stdout}"
    );
    for file in [
        "report.md",
        "latency.svg",
        "benchmark.json",
        "history.jsonl",
    ] {
        assert!(
            std::fs::metadata(data.join(file)).unwrap().len() > 0,
            "{file}"
        );
    }

    // The comparators ride along: Mighty on all three builds, tokio, C++ and Go.
    let comparators = report["comparators"].as_array().unwrap();
    assert_eq!(comparators.len(), 3 * 2 + 1 + 3, "{comparators:?}");
    assert!(stdout.contains("comparators ("), "{stdout}");

    // Instructions per message are deterministic: measuring again gives the same counts.
    let first = json(&data.join("stages/measure.json"))["instructions"].clone();
    let out = xtask(&["pgo", "measure"], &data, &target);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        json(&data.join("stages/measure.json"))["instructions"],
        first
    );

    // The same optimize stage, fed a valid indexed profile of unrelated code, must refuse.
    let dummy_text = tmp.join("unrelated.proftext");
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
    let mut merge = merge;
    merge["path"] = Value::String(dummy.display().to_string());
    std::fs::write(data.join("stages/merge.json"), merge.to_string()).unwrap();
    let out = xtask(&["pgo", "optimize"], &data, &target);
    let stderr = String::from_utf8_lossy(&out.stderr);
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
        optimize["apply"]["per_crate"]["mty_runtime"]["missing"]
            .as_u64()
            .unwrap()
            > 0,
        "{optimize:#}"
    );
    assert!(
        optimize["apply"]["per_crate"]["tokio"]["missing"]
            .as_u64()
            .unwrap()
            > 0,
        "{optimize:#}"
    );

    // A raw .profraw handed to optimize is refused before any build (rustc would only warn).
    let raw = instrumented_profraw(&data);
    merge["path"] = Value::String(raw.display().to_string());
    std::fs::write(data.join("stages/merge.json"), merge.to_string()).unwrap();
    let out = xtask(&["pgo", "optimize"], &data, &target);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not an indexed profile"), "{stderr}");
    assert!(
        !stderr.contains("cargo build"),
        "refused before any build:\n{stderr}"
    );

    faults(&tmp, &data, &target);
    std::fs::remove_dir_all(&tmp).unwrap();
}

fn instrumented_profraw(data: &Path) -> PathBuf {
    let train = json(&data.join("stages/train.json"));
    PathBuf::from(train["profraw"][0].as_str().unwrap())
}

/// The fault cases, on the artifacts of a good run (the merge.json of the unrelated-profile
/// check above was pointed elsewhere: merge again first).
fn faults(tmp: &Path, data: &Path, target: &Path) {
    let out = xtask(&["pgo", "merge"], data, target);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let report_before = std::fs::read(data.join("report.json")).unwrap();
    let measure_before = std::fs::read(data.join("stages/measure.json")).unwrap();
    let merge_before = std::fs::read(data.join("stages/merge.json")).unwrap();

    // A corrupt raw profile among good ones: named, and nothing merged; then skipped on request.
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

    // A measured workload that exits non-zero: the command line and its stderr, artifacts kept.
    let bad = config_variant(
        &tmp.join("bad-workload.toml"),
        r#""--warmup", "2000"] }"#,
        r#""--warmup", "2000", "--policy", "maybe"] }"#,
    );
    let out = xtask_with(&bad, &["pgo", "measure"], data, target);
    let err = stderr_of(&out);
    assert!(!out.status.success());
    assert!(
        err.contains(
            "agent_send_latency --messages 20000 --warmup 2000 --policy maybe` exited with status 2"
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

    // A workload that does not exist: mty-bench's own words reach the user.
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

    // A stale profile (the training config changed): --allow-stale proceeds, the default retrains.
    let retrained = config_variant(
        &tmp.join("retrained.toml"),
        r#"["train", "--messages", "20000"]"#,
        r#"["train", "--messages", "30000"]"#,
    );
    let stale_fingerprint = json(&data.join("stages/merge.json"))["fingerprint"].clone();
    let out = xtask_with(
        &retrained,
        &["pgo", "optimize", "--allow-stale"],
        data,
        target,
    );
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("is stale: the sources, toolchain or training config changed")
            && err.contains("(--allow-stale)"),
        "{err}"
    );
    let out = xtask_with(&retrained, &["pgo", "optimize"], data, target);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("retraining (pass --allow-stale to use it anyway)"),
        "{err}"
    );
    assert_ne!(
        json(&data.join("stages/merge.json"))["fingerprint"],
        stale_fingerprint,
        "retrained"
    );
    let out = xtask_with(&retrained, &["pgo", "optimize"], data, target);
    assert!(
        !stderr_of(&out).contains("is stale"),
        "fresh after retraining: {}",
        stderr_of(&out)
    );

    // Training that writes no profile (the binary is not instrumented).
    let instrument_json = data.join("stages/instrument.json");
    let instrument_before = std::fs::read(&instrument_json).unwrap();
    let mut instrumented = json(&instrument_json);
    instrumented["exe"] = json(&data.join("stages/baselines.json"))["release"]["exe"].clone();
    std::fs::write(&instrument_json, instrumented.to_string()).unwrap();
    let err = stderr_of(&xtask(&["pgo", "train"], data, target));
    assert!(err.contains(&format!("no profiles were written: was the binary built instrumented? (looked for *.profraw in {})", data.join("raw").display())), "{err}");
    std::fs::write(&instrument_json, &instrument_before).unwrap();

    // A hanging training workload: killed at its timeout, the merged profile kept.
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

    // A held lock: the second run names the holder; with --wait it queues behind it.
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
        assert!(waiting.wait().unwrap().success(), "{rest:?}");
    }

    // An interrupt (a real SIGINT) during measurement: no stage output or report changes.
    let measure_before = std::fs::read(data.join("stages/measure.json")).unwrap();
    let report_before = std::fs::read(data.join("report.json")).unwrap();
    {
        use std::os::unix::process::ExitStatusExt;
        let (mut child, mut lines) = spawn(&["pgo", "measure"], data, target);
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
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(2), "xtask died of SIGINT");
    }
    assert_kept(
        data,
        &[
            ("stages/measure.json", &measure_before),
            ("report.json", &report_before),
        ],
    );
    // What an interrupted write leaves is removed by the next run, which then succeeds.
    let leftover = data.join(".report.json.tmp-4242");
    std::fs::write(&leftover, b"half a report").unwrap();
    // ... and, with $GITHUB_STEP_SUMMARY set, appends the page to it.
    let summary = tmp.join("step-summary.md");
    let out = command(
        &root().join("profiles/quick.toml"),
        &["pgo", "report"],
        data,
        target,
    )
    .env("GITHUB_STEP_SUMMARY", &summary)
    .output()
    .unwrap();
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

    // A full disk: a 1 MiB tmpfs holding pgo-data/, filled to the last 8 KiB.
    full_disk(tmp, data, target);
}

struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn full_disk(tmp: &Path, data: &Path, target: &Path) {
    let mnt = tmp.join("full-disk");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(
        mounted.success(),
        "this test mounts a small tmpfs (needs root, as CI runs)"
    );
    let _mount = Mount(mnt.clone());
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
