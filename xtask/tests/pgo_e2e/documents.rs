//! The documents the report stage writes, by what they hold.

use super::measured_builds;
use super::support::*;
use super::testutil;

/// The documents the report stage writes, checked by what they hold.
#[test]
fn the_report_documents_hold_every_build() {
    let run = good_run();
    let data = &run.data;
    let report = json(&data.join("report.json"));
    let workloads: Vec<&str> = report["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["workload"].as_str().unwrap())
        .collect();

    // report.md: the table has a row per build with its figures.
    let md = std::fs::read_to_string(data.join("report.md")).unwrap();
    for row in report["workloads"][0]["rows"].as_array().unwrap() {
        let line = format!(
            "| {} | {:.1} |",
            row["build"].as_str().unwrap(),
            row["median_ns"].as_f64().unwrap()
        );
        assert!(md.contains(&line), "report.md lacks {line:?}:\n{md}");
    }

    // The mailbox against bare tokio on release and lto+pgo, paired in the same sessions
    // (quick.toml's `measure.versus`), in report.json and report.md.
    let versus = report["versus"].as_array().unwrap();
    let on: Vec<&str> = versus
        .iter()
        .map(|v| v["build"].as_str().unwrap())
        .collect();
    assert_eq!(on, ["release", "lto+pgo"], "{versus:?}");
    for v in versus {
        assert_eq!(v["subject"], "agent_send_latency");
        assert_eq!(v["reference"], "tokio_mpsc_send_latency");
        let e = &v["median"];
        assert_eq!(e["pairs"].as_u64(), Some(4), "{v}");
        let (lo, mid, hi) = (
            e["ci_low_pct"].as_f64().unwrap(),
            e["change_pct"].as_f64().unwrap(),
            e["ci_high_pct"].as_f64().unwrap(),
        );
        assert!(
            lo <= mid && mid <= hi && (-50.0..100.0).contains(&mid),
            "{v}"
        );
        if testutil::on_path("valgrind") {
            let r = v["instructions_ratio"].as_f64().unwrap();
            assert!((0.5..3.0).contains(&r), "{v}");
        }
        let row = format!(
            "| `agent_send_latency` / `tokio_mpsc_send_latency` | {} | {:.3}× [",
            v["build"].as_str().unwrap(),
            e["ratio"].as_f64().unwrap()
        );
        assert!(md.contains(&row), "report.md lacks {row:?}:\n{md}");
    }
    assert_eq!(
        report["versus_sessions"].as_array().unwrap().len(),
        4,
        "one record per session"
    );

    // latency.svg: valid XML, one series and one legend entry per build and workload.
    let svg = std::fs::read_to_string(data.join("latency.svg")).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("latency.svg parses as XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let polylines = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .count();
    assert_eq!(
        polylines,
        measured_builds().len() * workloads.len(),
        "{svg}"
    );
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    for build in measured_builds() {
        assert!(
            texts
                .iter()
                .any(|t| t.starts_with(&format!("{build}: median "))),
            "no legend entry for {build}: {texts:?}"
        );
    }

    // rounds.svg (lockstep): three panels, linked from report.md with latency.svg.
    let rounds = std::fs::read_to_string(data.join("rounds.svg")).unwrap();
    let doc = roxmltree::Document::parse(&rounds).expect("rounds.svg parses as XML");
    assert_eq!(
        doc.descendants().filter(|n| n.has_tag_name("rect")).count(),
        1 + 3,
        "a background and three panels"
    );
    assert!(
        md.contains("(latency.svg)") && md.contains("(rounds.svg)"),
        "{md}"
    );
    assert!(md.contains("Protocol: **lockstep**"), "{md}");
    assert!(
        md.contains("## Profile insight") && md.contains("| agent_send_latency | "),
        "{md}"
    );

    // benchmark.json: a median entry for every build of every workload.
    let entries = json(&data.join("benchmark.json"));
    let names: Vec<&str> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for w in &workloads {
        for build in measured_builds() {
            let name = format!("{w} {build} median");
            assert!(names.contains(&name.as_str()), "{name} not in {names:?}");
        }
    }

    // history.jsonl: the report stage appends exactly one line when it runs, none when it is
    // up to date (nothing new was measured).
    let lines = |p: &std::path::Path| std::fs::read_to_string(p).unwrap().lines().count();
    let before = lines(&data.join("history.jsonl"));
    let out = xtask(&["pgo", "report", "--force"], data, &run.target);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(lines(&data.join("history.jsonl")), before + 1);
    let out = xtask(&["pgo", "report"], data, &run.target);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("report: up to date (fingerprint "),
        "{}",
        stderr_of(&out)
    );
    assert_eq!(lines(&data.join("history.jsonl")), before + 1);
}

/// The instructions broken down by function (callgrind's output files, kept in
/// `pgo-data/callgrind/`): every build's figures add up to its total per message, the
/// mailbox's own code is among them, and report.md sets the builds side by side.
#[test]
fn the_instructions_are_broken_down_by_function_and_add_up() {
    if !testutil::have(
        "instructions by function (valgrind)",
        testutil::on_path("valgrind"),
        "apt-get install valgrind",
    ) {
        return;
    }
    let run = good_run();
    let data = &run.data;
    let report = json(&data.join("report.json"));
    let counts = report["instructions"].as_array().unwrap();
    assert!(!counts.is_empty());
    for c in counts {
        let total = c["per_message"].as_f64().unwrap();
        let functions = c["functions"].as_array().unwrap();
        let sum: f64 = functions
            .iter()
            .map(|f| f["per_message"].as_f64().unwrap())
            .sum();
        // The files' totals leave out the few instructions after the last dump, the same in
        // both runs: they cancel, to float rounding.
        assert!((sum - total).abs() < 0.01, "{sum} against {total}: {c}");
        let (w, b) = (
            c["workload"].as_str().unwrap(),
            c["build"].as_str().unwrap(),
        );
        for n in [2000, 4000] {
            let file = data.join(format!("callgrind/{w}.{b}.{n}.out"));
            assert!(file.is_file(), "{} kept", file.display());
        }
    }
    let release_mailbox = counts
        .iter()
        .find(|c| c["workload"] == "agent_send_latency" && c["build"] == "release")
        .unwrap();
    assert!(
        release_mailbox["functions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["name"]
                .as_str()
                .unwrap()
                .starts_with("mty_runtime::mailbox::")),
        "{release_mailbox}"
    );
    let md = std::fs::read_to_string(data.join("report.md")).unwrap();
    assert!(
        md.contains("## Where the instructions go (callgrind, per message)")
            && md.contains("### agent_send_latency: where its instructions go\n\n| function | release | lto | lto+pgo |"),
        "{md}"
    );
}

/// What each build cost: in report.json, the terminal and report.md, a line a build (the
/// instrumented one first) with its executable's and `.text` sizes. A build cargo compiled in
/// this run (its stderr line says so) has its compile's wall time, crates and peak memory; a
/// fresh one keeps an earlier compile's, or none where it was built before costs were kept.
#[test]
fn each_builds_cost_is_reported() {
    let run = good_run();
    let report = json(&run.data.join("report.json"));
    let costs = &report["costs"];
    let builds: Vec<&str> = costs["builds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["build"].as_str().unwrap())
        .collect();
    let mut expected = vec!["instrumented"];
    expected.extend(measured_builds());
    assert_eq!(builds, expected, "{costs:#}");
    assert!(costs["training_secs"].as_f64().unwrap() > 0.0, "{costs:#}");
    let md = std::fs::read_to_string(run.data.join("report.md")).unwrap();
    assert!(md.contains("## What each build cost"), "{md}");
    for b in costs["builds"].as_array().unwrap() {
        let name = b["build"].as_str().unwrap();
        let (exe, text) = (
            b["exe_bytes"].as_u64().unwrap(),
            b["text_bytes"].as_u64().unwrap(),
        );
        assert!(0 < text && text < exe, "{name}: .text {text} of {exe}");
        let compiled_here = run.stderr.lines().any(|l| {
            l.trim_start().starts_with(&format!("{name} /")) && l.contains("cargo compiled")
        });
        let c = &b["compiled"];
        if compiled_here || !c.is_null() {
            assert!(
                c["wall_secs"].as_f64().unwrap() > 0.0
                    && c["crates"].as_u64().unwrap() > 0
                    && c["peak_rss_bytes"].as_u64().unwrap() > 10 << 20,
                "{name}: {c}"
            );
        }
        assert!(
            run.stdout
                .lines()
                .any(|l| l.starts_with(&format!("{name} ")) && l.contains(" MiB")),
            "no cost line for {name}:\n{}",
            run.stdout
        );
        assert!(md.contains(&format!("| {name} | ")), "{name}: {md}");
    }
}
