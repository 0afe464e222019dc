//! `cargo xtask compare` for real: every comparator builds and emits well-formed output for a
//! small message count, and a missing toolchain (a real nonexistent compiler path) skips its
//! row with the install hint while the run still succeeds.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

#[path = "../src/testing/optional.rs"]
mod testutil;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The end-to-end tests' target directory (`tests/pgo_e2e/support.rs`, `good_run`): the
/// release build of `mty-bench` and the comparators this test builds are the ones the good
/// run needs, so it finds them fresh instead of building them a second time (this file runs
/// first in `cargo test`'s order).
fn shared_target() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("pgo-e2e/target")
}

fn compare(tmp: &Path, env: &[(&str, &str)]) -> (std::process::Output, Vec<Value>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cargo-mty"));
    cmd.arg("compare")
        .arg("--config")
        .arg(root().join("profiles/quick.toml"))
        .arg("--pgo-data")
        .arg(tmp.join("pgo-data"))
        .arg("--target-dir")
        .arg(shared_target());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("xtask runs");
    let rows = std::fs::read_to_string(tmp.join("pgo-data/compare.json"))
        .map(|t| serde_json::from_str::<Vec<Value>>(&t).unwrap())
        .unwrap_or_default();
    (out, rows)
}

#[test]
fn every_comparator_builds_and_reports_and_missing_toolchains_are_skipped() {
    // Where g++, asio or Go is missing, its rows must say so (and what to install) instead.
    // The condition-variable row needs g++ alone; the asio row needs asio's header too.
    let gxx = testutil::have(
        "the C++ condition-variable comparator row (g++)",
        testutil::on_path("g++"),
        "apt-get install g++",
    );
    let asio = gxx
        && testutil::have(
            "the C++ asio comparator row (asio's channel header)",
            Path::new("/usr/include/asio/experimental/channel.hpp").is_file(),
            "apt-get install libasio-dev",
        );
    let go = testutil::have(
        "the Go comparator row",
        testutil::on_path("go"),
        "apt-get install golang-go",
    );
    let tmp = std::env::temp_dir().join(format!("mty-compare-{}", std::process::id()));
    let (out, rows) = compare(&tmp, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "Mighty mailbox, Block: send (release)",
            "Mighty mailbox, Fail: try_send (release)",
            "tokio mpsc (release)",
            "C++ asio experimental::channel (coroutine)",
            "C++ mutex + condition variables",
            "Go buffered channel (GOMAXPROCS=1)",
        ],
        "every row, measured or skipped, in the table's fixed order: {stderr}"
    );
    // No profile in this pgo-data: no lto+pgo rows, and the run says why.
    assert!(
        stderr.contains("compare: no lto+pgo rows: no usable merged profile in"),
        "{stderr}"
    );
    for row in &rows {
        let name = row["name"].as_str().unwrap();
        let available = if name.starts_with("C++ asio") {
            asio
        } else if name.starts_with("C++") {
            gxx
        } else if name.starts_with("Go") {
            go
        } else {
            true
        };
        if !available {
            assert!(
                row["skipped"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("skipped: ") && s.contains("apt-get install")),
                "{row}"
            );
            continue;
        }
        let f = &row["figures"];
        assert!(row["skipped"].is_null(), "{row}");
        let (m, p95, p99) = (
            f["median_ns"].as_f64().unwrap(),
            f["p95_ns"].as_f64().unwrap(),
            f["p99_ns"].as_f64().unwrap(),
        );
        assert!(0.0 < m && m <= p95 && p95 <= p99, "{row}");
        assert!(f["clock_overhead_ns"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(f["runs"].as_u64(), Some(1), "quick.toml: one round");
    }
    let kinds: Vec<&str> = rows.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "cross-thread").count(), 1);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("vs tokio mpsc"), "{stdout}");
    if gxx {
        assert!(stdout.contains("cross-thread (not comparable"), "{stdout}");
    }

    // Real missing toolchains: nonexistent compiler paths. The run succeeds; the rows say why.
    let (out, rows) = compare(
        &tmp,
        &[("CXX", "/nonexistent/g++"), ("GO", "/nonexistent/go")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let skipped: Vec<&str> = rows.iter().filter_map(|r| r["skipped"].as_str()).collect();
    assert_eq!(
        skipped,
        [
            "skipped: C++ compiler `/nonexistent/g++` not found; install with `apt-get install g++`",
            "skipped: C++ compiler `/nonexistent/g++` not found; install with `apt-get install g++`",
            "skipped: Go toolchain `/nonexistent/go` not found; install with `apt-get install golang-go`",
        ]
    );
    assert_eq!(
        rows.iter().filter(|r| r["figures"].is_object()).count(),
        3,
        "the Rust rows still run"
    );
    std::fs::remove_dir_all(&tmp).unwrap();
}
