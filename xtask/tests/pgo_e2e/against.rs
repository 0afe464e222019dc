//! `cargo xtask pgo --against REV`, end to end: another commit's release and lto+pgo built in
//! a worktree under target/against/ with its own training, measured in this run's sessions.
//! On the small workspace of a registry crate's program, whose builds take seconds.

use serde_json::Value;

use super::own_program::{commit_all, git, own_config_edits, own_run, own_xtask, ws};
use super::support::*;

/// report.json's `against` results of `workload`, by build.
fn results<'a>(report: &'a Value, workload: &str) -> Vec<&'a Value> {
    report["against"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["workload"] == workload)
        .collect()
}

/// Against a commit made slower on purpose (the small workspace, a git repository of its
/// own, its program with a busy loop per record, committed in a worktree of its own; no
/// branch moves): its worktree made under the workspace's target/against/, its two builds
/// trained and built there, more arms in the sessions; one result per workload and build
/// with its interval, in the terminal, report.json and report.md; this commit comes out
/// faster than it on both builds, while an unknown revision is refused by name
/// before anything runs. (One run: each `--against` builds and trains the other commit cold.)
#[test]
fn against_a_deliberately_slower_commit_finds_the_slowdown() {
    let run = own_run();
    let ws = ws();
    let slowed = run.tmp.join("slowed-worktree");
    let slowed_dir = slowed.to_str().unwrap();
    let _ = std::process::Command::new("git")
        .arg("-C")
        .arg(&ws)
        .args(["worktree", "remove", "--force", slowed_dir])
        .output();
    git(
        &ws,
        &["worktree", "add", "--detach", "--quiet", slowed_dir, "HEAD"],
    );
    let main = slowed.join("src/main.rs");
    let text = std::fs::read_to_string(&main).unwrap();
    let anchor = "        records += 1;\n";
    assert!(text.contains(anchor), "the anchor of the slowdown moved");
    let slow = "        let mut spin = 0u64;\n        for i in 0..1000 {\n            spin = std::hint::black_box(spin.wrapping_add(i));\n        }\n";
    std::fs::write(&main, text.replace(anchor, &format!("{anchor}{slow}"))).unwrap();
    git(&slowed, &["add", "--all"]);
    let commit = commit_all(&slowed, "a deliberately slower loop");
    git(&ws, &["worktree", "remove", "--force", slowed_dir]);

    // Without layout variants: they are not what this test is about.
    let config = own_config_edits(
        &run.tmp.join("against.toml"),
        &[("variants = 4", "variants = 0")],
    );
    let out = own_xtask(&config, &["pgo", "--against", &commit]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), stderr_of(&out));
    assert!(out.status.success(), "{stderr}\n{stdout}");
    let worktree = ws.join("target/against").join(&commit[..12]);
    assert_eq!(
        git(&worktree, &["rev-parse", "HEAD"]),
        commit,
        "the worktree is of that commit"
    );
    assert!(
        stderr.contains(&format!("against: {commit} is {commit}")),
        "{stderr}"
    );
    let report = json(&run.data.join("report.json"));
    assert_eq!(report["against"]["commit"], commit.as_str());
    // Their arms ran in the pilot's sessions (the config's four sessions are all pilot).
    for s in report["sessions"].as_array().unwrap() {
        let arms = s["arms"].as_array().unwrap();
        for build in ["release", "lto+pgo"] {
            let theirs = format!("{}:{build}", &commit[..12]);
            assert!(arms.iter().any(|a| a == theirs.as_str()), "{s}");
        }
    }
    let title = format!("this commit against {} ({commit})", &commit[..12]);
    assert!(stdout.contains(&title), "{stdout}");
    for w in ["held_out", "held_out_own_clock"] {
        let mine = results(&report, w);
        let builds: Vec<&str> = mine.iter().map(|r| r["build"].as_str().unwrap()).collect();
        assert_eq!(builds, ["release", "lto+pgo"], "{w}");
        for r in mine {
            let e = &r["median"]["estimate"];
            let (low, change, high) = (
                e["ci_low_pct"].as_f64().unwrap(),
                e["change_pct"].as_f64().unwrap(),
                e["ci_high_pct"].as_f64().unwrap(),
            );
            assert!(low <= change && change <= high, "{r}");
            // The busy loop about doubles a run. The verdict is not asserted: the other test
            // thread may be building beside these sessions, and four sessions of which one
            // was disturbed can leave an interval too wide for one.
            assert!(change < -10.0, "the slowdown found: {r}");
        }
        assert!(
            stdout
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{w}: release "))),
            "{stdout}"
        );
    }
    let md = std::fs::read_to_string(run.data.join("report.md")).unwrap();
    assert!(md.contains(&format!("- **{title}**")), "{md}");

    let out = own_xtask(&config, &["pgo", "--against", "no-such-revision"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = stderr_of(&out);
    assert!(
        stderr.contains("`--against no-such-revision`: git knows no commit by that name"),
        "{stderr}"
    );
}
