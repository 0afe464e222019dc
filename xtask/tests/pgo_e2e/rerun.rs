//! Reruns: a stage whose inputs are unchanged is reused, not run, and says so; a changed
//! input reruns exactly the stages that depend on it.

use super::support::*;

/// Every stage after the doctor, in order (`bolt` where llvm-bolt is installed).
fn stages() -> Vec<&'static str> {
    let mut s = vec!["instrument", "train", "merge", "optimize"];
    if expect_bolt() {
        s.push("bolt");
    }
    s.extend(["insight", "oracle", "baselines", "measure", "report"]);
    s
}

/// The timing table's line for `stage` ends in "reused".
fn reused(err: &str, stage: &str) -> bool {
    err.lines()
        .any(|l| l.starts_with(&format!("{stage:<12} ")) && l.ends_with("reused"))
}

#[test]
fn a_rerun_reuses_what_is_up_to_date_and_reruns_what_depends_on_a_change() {
    let run = good_run();
    let (tmp, data, target) = (&*run.tmp, &*run.data, &*run.target);
    // Settle first: the tests share one target directory, and one that ran before this may
    // have left another build in it (then cargo rebuilds, and what depends on it reruns).
    let out = xtask(&["pgo"], data, target);
    assert!(out.status.success(), "{}", stderr_of(&out));

    // Nothing changed: every stage is up to date and cargo compiles nothing.
    let report_before = std::fs::read(data.join("report.json")).unwrap();
    let out = xtask(&["pgo"], data, target);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    for stage in stages() {
        assert!(
            err.contains(&format!("{stage}: up to date (fingerprint ")),
            "{stage} was not up to date:\n{err}"
        );
        assert!(
            reused(&err, stage),
            "{stage} not reused in the table:\n{err}"
        );
    }
    // cargo's own JSON said every artifact of every build was fresh.
    for build in ["instrumented", "lto+pgo", "oracle", "release", "lto"] {
        assert!(
            err.lines()
                .any(|l| l.trim_start().starts_with(&format!("{build} /"))
                    && l.ends_with("; cargo: fresh)")),
            "{build} was not fresh:\n{err}"
        );
    }
    assert!(!err.contains("cargo compiled"), "{err}");
    // The report is the earlier one, shown again.
    assert_eq!(
        std::fs::read(data.join("report.json")).unwrap(),
        report_before
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing changed since"));
    // A stage run alone says what it found although it is up to date, not only that it is.
    let out = xtask(&["pgo", "insight"], data, target);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(reused(&err, "insight"), "{err}");
    for workload in ["agent_send_latency", "tokio_mpsc_send_latency"] {
        assert!(
            err.contains(&format!(
                "insight: `{workload}` overlaps the training profile"
            )),
            "{workload}'s insight not shown when up to date:\n{err}"
        );
    }
    let out = xtask(&["pgo", "merge"], data, target);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("merge: ") && l.contains("functions, total count")),
        "the merged profile not shown when up to date:\n{err}"
    );

    // One config key changed: the gate's threshold is read by the report alone.
    let config = config_variant(
        &tmp.join("gate.toml"),
        "min_pgo_gain_pct = 0.0",
        "min_pgo_gain_pct = 0.5",
    );
    let out = xtask_with(&config, &["pgo"], data, target);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    let all = stages();
    for stage in &all[..all.len() - 1] {
        assert!(reused(&err, stage), "{stage} ran:\n{err}");
    }
    assert!(err.contains("report: ran (changed: config)"), "{err}");
    let report = json(&data.join("report.json"));
    let outcomes: Vec<(&str, &str)> = report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["stage"].as_str().unwrap(), s["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(outcomes[0], ("doctor", "ran"));
    for (stage, outcome) in &outcomes[1..] {
        // Without llvm-bolt the bolt stage is skipped, every run.
        let expected = if *stage == "bolt" && !expect_bolt() {
            "skipped"
        } else {
            "reused"
        };
        assert_eq!(*outcome, expected, "{stage}: {outcomes:?}");
    }
    // --force train: train and everything after it run again; a new training is a new
    // profile, so the builds after it compile.
    let out = xtask_with(&config, &["pgo", "train", "--force"], data, target);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("train: ran (forced)"), "{err}");
    // Then merge sees new raw profiles (their content changed) and runs without --force.
    let out = xtask_with(&config, &["pgo", "merge"], data, target);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("merge: ran (changed: "), "{err}");
}

/// `compare` on a pgo-data whose profile was trained on these sources adds the lto+pgo rows
/// (the good run's lto+pgo build, found fresh) beside release's.
#[test]
fn compare_adds_the_lto_pgo_rows_where_the_profile_is_current() {
    let run = good_run();
    let out = xtask(&["compare"], &run.data, &run.target);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("no lto+pgo rows"), "{err}");
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(run.data.join("compare.json")).unwrap())
            .unwrap();
    let names: Vec<&str> = rows.iter().filter_map(|r| r["name"].as_str()).collect();
    for want in [
        "Mighty mailbox, Block: send (release)",
        "Mighty mailbox, Block: send (lto+pgo)",
        "Mighty mailbox, Fail: try_send (lto+pgo)",
    ] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
}
