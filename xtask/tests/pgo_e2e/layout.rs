//! The layout stage on the shared run: release relinked in two other function orders
//! (quick.toml), each checked, measured in the tokio workload's sessions against release,
//! the layout floor in report.json, the table and report.md, and verdicts.svg.

use super::support::*;

#[test]
fn layout_variants_are_checked_and_give_a_floor() {
    let run = good_run();
    let data = &run.data;
    let layout = json(&data.join("stages/layout.json"));
    let sets = layout["sets"].as_array().unwrap();
    assert_eq!(sets.len(), 1, "{layout}");
    let set = &sets[0];
    assert_eq!(set["build"], "release");
    let release_hash = json(&data.join("stages/baselines.json"))["release"]["hash"].clone();
    assert_eq!(
        set["base_hash"], release_hash,
        "the variants' base is the measured release"
    );
    let variants = set["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 2);
    let base = set["base_instructions"].as_f64();
    for v in variants {
        let moved = &v["moved"];
        let (m, c) = (
            moved["moved"].as_u64().unwrap(),
            moved["common"].as_u64().unwrap(),
        );
        assert!(c > 500 && m * 2 > c, "{v}");
        assert_eq!(moved["only_one"], 0, "{v}");
        assert_ne!(v["built"]["hash"], release_hash, "{v}");
        assert!(std::path::Path::new(v["built"]["exe"].as_str().unwrap()).exists());
        if let (Some(a), Some(b)) = (base, v["instructions"].as_f64()) {
            assert!((b - a).abs() / a < 0.01, "{v}");
        }
    }
    // Measured in the tokio workload's sessions only (quick.toml's `layout.workloads`).
    let report = json(&data.join("report.json"));
    for s in report["sessions"].as_array().unwrap() {
        let arms = strs(&s["arms"]);
        let has = arms.contains(&"release/L1") && arms.contains(&"release/L2");
        assert_eq!(
            has,
            s["workload"] == "tokio_mpsc_send_latency",
            "{arms:?} in {}",
            s["workload"]
        );
    }
    let workloads = report["workloads"].as_array().unwrap();
    let tokio = workloads
        .iter()
        .find(|w| w["workload"] == "tokio_mpsc_send_latency")
        .unwrap();
    let floor = &tokio["layout"];
    assert_eq!(floor["variants"].as_array().unwrap().len(), 2, "{floor}");
    let f = floor["floor_pct"].as_f64().unwrap();
    assert!(f > 0.0 && f.is_finite(), "{floor}");
    // Two layouts (fewer than eight): every build's threshold there is the larger of the min
    // effect and the farthest layout measured, capped at the floor (a floor below the min
    // effect leaves the min effect).
    let farthest = floor["lowest_pct"]
        .as_f64()
        .unwrap()
        .abs()
        .max(floor["highest_pct"].as_f64().unwrap().abs());
    assert!(farthest <= f + 1e-9, "{floor}");
    let min_effect = report["config"]["config"]["measure"]["min_effect_pct"]
        .as_f64()
        .unwrap();
    for row in tokio["rows"].as_array().unwrap() {
        if let Some(t) = row["vs_release"]["median"]["threshold_pct"].as_f64() {
            let expected = min_effect.max(farthest.min(f));
            assert!((t - expected).abs() < 1e-9, "{expected} {floor} {row}");
        }
    }
    // The A/A arm, release's bytes in a fresh file every session, is every workload's null.
    for w in workloads {
        let nulls: Vec<&str> = w["nulls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n[0].as_str().unwrap())
            .collect();
        assert_eq!(nulls, ["release-aa"], "{w}");
    }
    let agent = workloads
        .iter()
        .find(|w| w["workload"] == "agent_send_latency")
        .unwrap();
    assert!(agent["layout"].is_null(), "no variants in its sessions");
    // Where a person reads it.
    assert!(run.stdout.contains("layout floor ±"), "{}", run.stdout);
    let md = std::fs::read_to_string(data.join("report.md")).unwrap();
    assert!(
        md.contains("](verdicts.svg)"),
        "the forest plot is on the page"
    );
    assert!(
        md.contains("layout floor not measured on this workload"),
        "{md}"
    );
    let svg = std::fs::read_to_string(data.join("verdicts.svg")).unwrap();
    assert!(
        svg.contains("tokio_mpsc_send_latency: median against release"),
        "{svg}"
    );
}
