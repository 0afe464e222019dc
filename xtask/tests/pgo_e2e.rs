//! End to end: the whole `cargo xtask pgo` with profiles/quick.toml into a temporary
//! pgo-data and target directory, real toolchain, real llvm-profdata, real workloads. Then,
//! on those artifacts, the faults a release pipeline meets, each provoked for real: an
//! unrelated or raw profile, a corrupt raw profile, no raw profiles, a failing and a hanging
//! workload, a stale profile, a held lock, an interrupt, a full disk. Each must fail loudly
//! (or proceed where asked to) and leave the last good artifacts as they were.

use std::process::Command;

use serde_json::Value;

#[path = "pgo_e2e/faults.rs"]
mod faults;
#[path = "pgo_e2e/support.rs"]
mod support;

use support::*;

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

    faults::faults(&tmp, &data, &target);
    std::fs::remove_dir_all(&tmp).unwrap();
}
