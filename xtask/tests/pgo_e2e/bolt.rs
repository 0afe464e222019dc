//! The BOLT stage on the good run: where llvm-bolt is installed, the `lto+pgo+bolt` build is
//! made, its profile proven applied, and measured beside the others; where it is not, the
//! stage is skipped with the package to install.

use super::support::*;

#[test]
fn the_bolt_build_is_made_proven_and_measured_or_skipped_saying_why() {
    let run = good_run();
    let (data, target) = (&*run.data, &*run.target);
    let report = json(&data.join("report.json"));
    if !expect_bolt() {
        assert_eq!(report["bolt"], serde_json::Value::Null);
        let out = xtask(&["pgo", "bolt"], data, target);
        let err = stderr_of(&out);
        assert!(out.status.success(), "{err}");
        assert!(
            err.contains(
                "bolt: skipped (llvm-bolt not found; install it with `apt-get install bolt-"
            ),
            "{err}"
        );
        return;
    }
    let bolt = &report["bolt"];
    // BOLT's own count, and every required path among the profiled functions.
    assert!(
        bolt["report"]["functions_profiled"].as_u64().unwrap() > 50,
        "{bolt}"
    );
    for (prefix, n) in bolt["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_str().unwrap(), r[1].as_u64().unwrap()))
    {
        assert!(n > 0, "no profiled function of {prefix}: {bolt}");
    }
    assert!(
        bolt["report"]["dyno"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d[0] == "taken branches"),
        "{bolt}"
    );
    // The relocations BOLT needs do not change the code.
    if let Some(pair) = bolt["relink_instructions"].as_array() {
        let (relinked, plain) = (pair[0].as_f64().unwrap(), pair[1].as_f64().unwrap());
        assert!((relinked - plain).abs() <= plain * 0.01, "{bolt}");
    }
    // Measured beside the others, with its change against PGO.
    let w = &report["workloads"][0];
    let row = w["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["build"] == "lto+pgo+bolt")
        .expect("a lto+pgo+bolt row");
    assert!(row["median_ns"].as_f64().unwrap() > 0.0, "{row}");
    let e = &w["bolt_vs_pgo"];
    assert_eq!(e["pairs"].as_u64(), Some(4), "{w}");
    assert!(
        e["ci_low_pct"].as_f64().unwrap() <= e["ci_high_pct"].as_f64().unwrap(),
        "{e}"
    );
    let md = std::fs::read_to_string(data.join("report.md")).unwrap();
    for part in [
        "## BOLT after PGO",
        "BOLT on top of PGO, paired round by round: lto+pgo+bolt against lto+pgo: ",
        "| lto+pgo+bolt | ",
    ] {
        assert!(md.contains(part), "report.md lacks {part:?}");
    }
    let bench = json(&data.join("benchmark.json"));
    assert!(
        bench
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["name"] == "agent_send_latency lto+pgo+bolt median"),
        "{bench}"
    );
}

/// BOLT's faults, provoked for real on the good run's relinked build: a given profile that
/// is empty or cut short is refused naming the file and the fix before llvm-bolt reads it; a
/// good given profile (a copy of the trained one) builds without training and passes the
/// proof; a training whose profile folder is read-only (a real read-only mount) fails naming
/// the workload, the profile file the instrumented binary could not open, and the fix.
#[test]
fn bolt_profiles_given_or_trained_are_checked_and_named() {
    if !expect_bolt() {
        return;
    }
    let run = good_run();
    let (tmp, data, target) = (&*run.tmp, &*run.data, &*run.target);
    let trained = data.join("bolt/merged.fdata");
    let text = std::fs::read(&trained).unwrap();
    let given = |name: &str, bytes: &[u8]| {
        let profile = tmp.join(name);
        std::fs::write(&profile, bytes).unwrap();
        let config = config_with(
            &tmp.join(format!("{name}.toml")),
            &format!("[bolt]\nprofile = {:?}\n", profile.display().to_string()),
        );
        (profile, xtask_with(&config, &["pgo", "bolt"], data, target))
    };
    // Empty, and cut in the middle of a record.
    // Three bytes into a record in the middle: `1 _`, two fields of a record's eight
    // (a cut in the last field could leave eight, a count shortened but well-formed).
    let cut = text[text.len() / 2..]
        .iter()
        .position(|b| *b == b'\n')
        .map(|i| text.len() / 2 + i + 1 + 3)
        .expect("a record after the middle");
    for (name, bytes, says) in [
        ("empty.fdata", &b""[..], "is empty: ".to_string()),
        ("cut.fdata", &text[..cut], "is corrupt (line ".to_string()),
    ] {
        let (profile, out) = given(name, bytes);
        let err = stderr_of(&out);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(&format!("the BOLT profile {} {says}", profile.display()))
                && err.contains("remove `bolt.profile` to train one"),
            "{name}: {err}"
        );
    }
    // A good one: no training, the proof passes, the record says it was given.
    let (profile, out) = given("shipped.fdata", &text);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "bolt: optimising with the given profile {} (bolt.profile), no training",
            profile.display()
        )),
        "{err}"
    );
    assert!(
        !err.contains("-instrument"),
        "no BOLT instrumentation: {err}"
    );
    let record = json(&data.join("stages/bolt.json"));
    assert_eq!(record["given"], true, "{record}");
    assert!(record["report"]["functions_profiled"].as_u64().unwrap() > 50);
    // A training that cannot write its profile: the folder is a read-only tmpfs.
    if !super::testutil::have(
        "the read-only profile folder (mounting a tmpfs needs root)",
        super::testutil::is_root(),
        "run the tests as root, as CI does",
    ) {
        return;
    }
    let raw = data.join("bolt/raw");
    let _mount = Mount::tmpfs(&raw, "ro,size=64k");
    let out = xtask(&["pgo", "bolt", "--force", "bolt"], data, target);
    let err = stderr_of(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("BOLT training workload `")
            && err.contains(&format!(
                "Error while trying to open profile file for writing: {}",
                raw.join("prof.fdata").display()
            ))
            && err.contains(&format!("into {} as it exits", raw.display()))
            && err.contains("is that folder writable"),
        "{err}"
    );
}

/// A cold relink: the `lto-pgo-relocs` target folder is seeded from lto+pgo's, so cargo
/// compiles only the final crate (the one that links); the relocations are there and the
/// code is the PGO build's.
#[test]
fn a_missing_relink_folder_is_seeded_and_only_the_final_crate_compiles() {
    if !expect_bolt() {
        return;
    }
    let run = good_run();
    let (data, target) = (&*run.data, &*run.target);
    // lto+pgo's folder as the good run's profile builds it: another test may have left it
    // built from another profile (a bundle's), and then nothing in it could be fresh.
    let out = xtask(&["pgo", "optimize"], data, target);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let relocs = target.join("lto-pgo-relocs");
    std::fs::remove_dir_all(&relocs).unwrap();
    let out = xtask(&["pgo", "bolt", "--force", "bolt"], data, target);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("$ cp -a {} ", target.join("lto-pgo").display())),
        "seeded: {err}"
    );
    let log = std::fs::read_to_string(data.join("logs/build-lto-pgo-relocs.log")).unwrap();
    let compiled: Vec<&str> = log.lines().filter(|l| l.contains("Compiling ")).collect();
    assert_eq!(compiled.len(), 1, "only the final crate: {compiled:?}");
    assert!(compiled[0].contains("Compiling mty-bench "), "{compiled:?}");
    let record = json(&data.join("stages/bolt.json"));
    assert!(
        record["build"]["rustflags_exact"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "-Clink-arg=-Wl,-q"),
        "{record}"
    );
    if let Some(pair) = record["relink_instructions"].as_array() {
        assert_eq!(pair[0], pair[1], "the relink changed the code: {record}");
    }
}
