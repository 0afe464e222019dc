//! `cargo xtask pgo --against REV`, end to end: another commit's release and lto+pgo built in
//! a worktree under target/against/ with its own training, measured in this run's sessions.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::support::*;

fn git(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(dir);
    cmd
}

fn git_out(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// report.json's `against` results of `workload`, by build.
fn results<'a>(report: &'a Value, workload: &str) -> Vec<&'a Value> {
    report["against"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["workload"] == workload)
        .collect()
}

/// Against a commit made slower on purpose (HEAD's mailbox with a busy loop in `send`,
/// committed in a worktree of its own; no branch moves): its worktree made under
/// target/against/, its two builds trained and built there, more arms in the sessions; one
/// result per workload and build with its interval, in the terminal, report.json and
/// report.md; this commit comes out significantly faster than it on the mailbox's workload,
/// on both builds, while an unknown revision is refused by name before anything runs. (One
/// run: each `--against` builds and trains the other commit cold.)
#[test]
fn against_a_deliberately_slower_commit_finds_the_slowdown() {
    let run = good_run();
    let slowed = run.tmp.join("slowed-worktree");
    let _ = git(&root())
        .args(["worktree", "remove", "--force"])
        .arg(&slowed)
        .output();
    git_out(
        git(&root())
            .args(["worktree", "add", "--detach", "--quiet"])
            .arg(&slowed)
            .arg("HEAD"),
    );
    let mailbox = slowed.join("runtime/src/mailbox.rs");
    let text = std::fs::read_to_string(&mailbox).unwrap();
    let anchor = "    pub async fn send(&self, msg: M) -> Result<(), SendError<M>> {\n";
    assert!(text.contains(anchor), "the anchor of the slowdown moved");
    let slow = "        let mut spin = 0u64;\n        for i in 0..400 {\n            spin = std::hint::black_box(spin.wrapping_add(i));\n        }\n";
    std::fs::write(&mailbox, text.replace(anchor, &format!("{anchor}{slow}"))).unwrap();
    // A fixed date: the same HEAD gives the same commit, whose worktree a rerun reuses.
    let commit = {
        let mut cmd = git(&slowed);
        cmd.args([
            "-c",
            "user.name=mty-test",
            "-c",
            "user.email=mty-test@localhost",
            "commit",
            "--quiet",
            "--no-verify",
            "-am",
            "a deliberately slower send",
        ])
        .env("GIT_AUTHOR_DATE", "2026-12-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-12-01T00:00:00Z");
        git_out(&mut cmd);
        git_out(git(&slowed).args(["rev-parse", "HEAD"]))
    };
    git_out(
        git(&root())
            .args(["worktree", "remove", "--force"])
            .arg(&slowed),
    );

    let out = xtask(&["pgo", "--against", &commit], &run.data, &run.target);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), stderr_of(&out));
    assert!(out.status.success(), "{stderr}\n{stdout}");
    let worktree = root().join("target/against").join(&commit[..12]);
    assert_eq!(
        git_out(git(&worktree).args(["rev-parse", "HEAD"])),
        commit,
        "the worktree is of that commit"
    );
    assert!(
        stderr.contains(&format!("against: {commit} is {commit}")),
        "{stderr}"
    );
    let report = json(&run.data.join("report.json"));
    assert_eq!(report["against"]["commit"], commit.as_str());
    // Their arms ran in the pilot's sessions (quick.toml's four sessions are all pilot).
    for s in report["sessions"].as_array().unwrap() {
        let arms = s["arms"].as_array().unwrap();
        for build in ["release", "lto+pgo"] {
            let theirs = format!("{}:{build}", &commit[..12]);
            assert!(arms.iter().any(|a| a == theirs.as_str()), "{s}");
        }
    }
    let title = format!("this commit against {} ({commit})", &commit[..12]);
    assert!(stdout.contains(&title), "{stdout}");
    for w in ["agent_send_latency", "tokio_mpsc_send_latency"] {
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
    for r in results(&report, "agent_send_latency") {
        assert_eq!(r["median"]["verdict"], "faster", "the slowdown found: {r}");
    }

    let out = xtask(
        &["pgo", "--against", "no-such-revision"],
        &run.data,
        &run.target,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = stderr_of(&out);
    assert!(
        stderr.contains("`--against no-such-revision`: git knows no commit by that name"),
        "{stderr}"
    );
}
