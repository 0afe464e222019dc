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
