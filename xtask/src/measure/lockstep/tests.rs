//! The lockstep session's failures, provoked with real processes (sh arms on real pipes),
//! and the core the arms share.

use super::*;

/// A well-behaved arm in sh: ready, a batch summary for every `g`; it writes its pid to
/// `pid_file` first, and outlives its stdin (so only a kill ends it).
fn good_arm(pid_file: &std::path::Path) -> String {
    format!(
        r#"echo $$ > {}
echo '{{"ready":true,"pid":1,"clock_overhead_ns":20}}'
while read w; do echo '{{"median_ns":100,"p95_ns":120,"p99_ns":130,"mean_ns":105}}'; done
exec sleep 60"#,
        pid_file.display()
    )
}

/// One session (two rounds) of arms that are sh scripts, real processes on real pipes,
/// beside a well-behaved arm: the error, and whether the well-behaved arm outlived it or
/// was waited for instead of killed.
fn failed_session(script: &str, timeout_secs: u64) -> (String, bool) {
    let mut cfg = crate::testing::fixtures::measure_config();
    cfg.timeout_secs = timeout_secs;
    cfg.lockstep.rounds = 2;
    cfg.lockstep.share_core = false;
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let pid_file = std::env::temp_dir().join(format!(
        "mty-lockstep-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let arm = |name: &str, script: String| Arm {
        name: name.to_string(),
        exe: "sh".into(),
        args: vec!["-c".into(), script, "arm".into()],
    };
    let arms = [arm("good", good_arm(&pid_file)), arm("bad", script.into())];
    let started = std::time::Instant::now();
    let err = session(
        &Workload::new("w", vec![]),
        7,
        &arms,
        &cfg,
        1,
        &ProgressBar::hidden(),
    )
    .map(|_| ())
    .expect_err("the bad arm fails the session");
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let _ = std::fs::remove_file(&pid_file);
    // Killed, not waited for: the well-behaved arm would sleep a minute after its stdin
    // closed.
    let alive = std::path::Path::new(&format!("/proc/{}", pid.trim())).exists()
        || started.elapsed() > Duration::from_secs(30);
    // Set up on the other core first: the command line starts with its `taskset`.
    let err = format!("{err:#}").replace("`taskset -c 0 ", "`");
    (err, alive)
}

const READY: &str = r#"echo '{"ready":true,"pid":1,"clock_overhead_ns":20}'"#;

#[test]
fn an_arm_that_closes_its_output_but_keeps_running_is_named() {
    let (err, alive) = failed_session(&format!("{READY}; exec sleep 30 >&-"), 60);
    assert!(
        err.starts_with(
            "lockstep arm `bad` closed its output while running batch 1 of session 7: `sh -c"
        ),
        "{err}"
    );
    assert!(!alive, "the other arm was killed");
}

#[test]
fn an_arm_that_dies_mid_session_is_named_with_its_status_and_stderr() {
    let script = format!("{READY}; read w; echo 'out of slots' >&2; exit 3");
    let (err, alive) = failed_session(&script, 60);
    assert!(
        err.starts_with(
            "lockstep arm `bad` exited with status 3 while running batch 1 of session 7:"
        ),
        "{err}"
    );
    assert!(
        err.ends_with("--- last lines of its stderr ---\nout of slots"),
        "{err}"
    );
    assert!(!alive, "the other arm was killed");
}

#[test]
fn an_arm_that_is_not_a_lockstep_arm_or_answers_nonsense_is_named() {
    let (err, alive) = failed_session("echo hello; exec sleep 30", 60);
    assert!(
        err.starts_with("arm `bad` (`sh -c") && err.contains(
            "answered \"hello\" instead of its ready line; is it a program that serves the lockstep protocol (`--lockstep N`, `mty-lockstep`)?"
        ),
        "{err}"
    );
    assert!(!alive);
    let (err, alive) = failed_session(
        &format!("{READY}; read w; echo 'no json'; exec sleep 30"),
        60,
    );
    assert!(
        err.contains("answered \"no json\", not a batch summary"),
        "{err}"
    );
    assert!(!alive);
}

#[test]
fn an_arm_silent_past_the_timeout_is_killed_and_named() {
    let (err, alive) = failed_session(&format!("{READY}; exec sleep 30"), 2);
    assert!(
        err.starts_with(
            "lockstep arm `bad` did not answer within 2 s and was killed (raise `measure.timeout_secs` if it is merely slow) while running batch 1 of session 7:"
        ),
        "{err}"
    );
    assert!(!alive);
}

#[test]
fn arms_share_the_configured_core_the_last_one_or_none() {
    let mut cfg = crate::testing::fixtures::measure_config();
    cfg.pin_core = Some(0);
    let share = |cfg: &Measure, w: &Workload| shared_core(cfg, w.shares_core_in(&cfg.lockstep));
    let mut w = Workload::new("w", vec!["w".into()]);
    assert_eq!(share(&cfg, &w), Some(0));
    cfg.pin_core = None;
    let last = std::thread::available_parallelism().unwrap().get() - 1;
    assert_eq!(share(&cfg, &w), Some(last));
    cfg.pin_core = Some(0);
    w.share_core = Some(false);
    assert_eq!(share(&cfg, &w), None, "the workload's own key wins");
    cfg.lockstep.share_core = false;
    w.share_core = None;
    assert_eq!(share(&cfg, &w), None, "unpinned, whatever pin_core says");
    w.share_core = Some(true);
    assert_eq!(share(&cfg, &w), Some(0), "the workload's own key wins");
}

/// `measure.shift_heap`: each arm runs as its own path with a number of extra slashes drawn
/// per session (real sh arms answer with the length of their `argv[0]`).
#[test]
fn each_arm_runs_as_a_path_shifted_anew_every_session() {
    let arms = sh_arms(
        r#"arg0=$(tr '\0' '\n' < /proc/$$/cmdline | head -n 1)"#,
        "${#arg0}",
    );
    let mut cfg = crate::testing::fixtures::measure_config();
    cfg.lockstep.rounds = 2;
    let lengths = |cfg: &Measure, seed: u64| first_answers(&arms, cfg, seed);
    // Each arm runs from its copy (`measure.fresh_copies`), every copy's path of one length.
    let copy = std::env::temp_dir()
        .join("mty-copies")
        .join(format!("{}-{:016x}", std::process::id(), 1))
        .join("000")
        .join("sh");
    let plain = copy.as_os_str().len() as f64;
    cfg.shift_heap = false;
    assert_eq!(lengths(&cfg, 1), [plain, plain]);
    cfg.fresh_copies = false;
    assert_eq!(lengths(&cfg, 1), ["/bin/sh".len() as f64; 2]);
    cfg.fresh_copies = true;
    cfg.shift_heap = true;
    let shifted: Vec<f64> = (1..=4).flat_map(|seed| lengths(&cfg, seed)).collect();
    assert!(
        shifted.iter().all(|&l| l >= plain && l < plain + 2048.0),
        "{shifted:?}"
    );
    let distinct: std::collections::BTreeSet<u64> = shifted.iter().map(|&l| l as u64).collect();
    assert!(
        distinct.len() >= 6,
        "drawn per arm and session: {shifted:?}"
    );
    assert_eq!(lengths(&cfg, 3), lengths(&cfg, 3), "a seed replays them");
}

/// `measure.fresh_copies`: every arm of every session runs from a file of its own holding
/// its executable's bytes, in the copies folder (real sh arms answer with the inode of the
/// file they run from, 0 if it is not there), and the session's copies are gone once it has
/// closed, so the next session's are new files.
#[test]
fn each_arm_runs_from_a_fresh_copy_removed_after_its_session() {
    let dir = std::env::temp_dir().join(format!("mty-fresh-copies-{}", std::process::id()));
    let arms = sh_arms(
        &format!(
            r#"case $(readlink /proc/$$/exe) in
  {}/*) ino=$(stat -L -c %i /proc/$$/exe) ;;
  *) ino=0 ;;
esac"#,
            dir.display()
        ),
        "$ino",
    );
    let mut cfg = crate::testing::fixtures::measure_config();
    cfg.lockstep.rounds = 1;
    cfg.copies_dir = Some(dir.clone());
    let inodes = |cfg: &Measure, seed: u64| -> Vec<u64> {
        first_answers(&arms, cfg, seed)
            .into_iter()
            .map(|x| x as u64)
            .collect()
    };
    use std::os::unix::fs::MetadataExt;
    let original = std::fs::metadata("/bin/sh").unwrap().ino();
    for seed in 1..=3 {
        let seen = inodes(&cfg, seed);
        assert!(
            seen[0] != seen[1] && !seen.contains(&0) && !seen.contains(&original),
            "a file of its own per arm, in the copies folder: {seen:?}"
        );
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert!(left.is_empty(), "the session's copies removed: {left:?}");
    }
    // A killed run's copies (a process that no longer exists) are swept; a live one's stay.
    let dead = dir.join("999999999-0000000000000001");
    let live = dir.join(format!("{}-0000000000000002", std::process::id()));
    for d in [&dead, &live] {
        std::fs::create_dir_all(d).unwrap();
    }
    sweep_copies(&cfg);
    assert!(!dead.exists() && live.exists());
    // Copies that cannot be written: the session fails naming the arm, the file and the key.
    let mut blocked = cfg.clone();
    blocked.copies_dir = Some(std::path::PathBuf::from("/proc/version/copies"));
    let err = format!(
        "{:#}",
        spawn(
            &Workload::new("w", vec![]),
            0,
            &arms,
            &[],
            &blocked,
            1,
            &ProgressBar::hidden()
        )
        .err()
        .expect("no folder can be made under a file")
    );
    assert!(
        err.contains("copying arm `")
            && err.contains("executable /bin/sh to /proc/version/copies/")
            && err.contains("`measure.fresh_copies`; free some space there, or set it to false"),
        "{err}"
    );
    cfg.fresh_copies = false;
    assert_eq!(inodes(&cfg, 1), [0; 2], "outside the copies folder");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two real sh arms, `a` and `b`, that run `setup`, say ready and answer every `g` with the
/// shell expression `value` as their batch median.
fn sh_arms(setup: &str, value: &str) -> [Arm; 2] {
    let script = format!(
        r#"{setup}
{READY}
while read w; do
  if [ "$w" = q ]; then echo '{}'; exit 0; fi
  echo "{{\"median_ns\":{value},\"p95_ns\":1,\"p99_ns\":1,\"mean_ns\":1}}"
done"#,
        crate::testing::fixtures::LINE
    );
    ["a", "b"].map(|name| Arm {
        name: name.to_string(),
        exe: "/bin/sh".into(),
        args: vec!["-c".into(), script.clone()],
    })
}

/// One session of `arms` under `seed`: each arm's first answer, in the session's arm order.
fn first_answers(arms: &[Arm], cfg: &Measure, seed: u64) -> Vec<f64> {
    let s = session(
        &Workload::new("w", vec![]),
        0,
        arms,
        cfg,
        seed,
        &ProgressBar::hidden(),
    )
    .unwrap();
    s.batches.iter().map(|b| b[0].median_ns).collect()
}

/// A paired session's values: each pair's ratio where two arms ran as a pair (either order),
/// release's turns matched to their pairs by count; arms that never ran as a pair compared
/// through their pairs with an arm both ran beside; none for an arm that never ran.
#[test]
fn pairs_are_read_pair_by_pair_whatever_their_order() {
    // Round 1: (a, release), (release, b); round 2: (b, release), (release, a).
    let s = crate::testing::fixtures::paired(
        &["release", "a", "b", "c"],
        vec![vec![1, 0, 0, 2], vec![2, 0, 0, 1]],
        &[
            &[100.0, 200.0, 300.0, 400.0],
            &[90.0, 360.0],
            &[220.0, 330.0],
            &[],
        ],
    );
    let m = crate::measure::session::Metric::Median;
    let close = |got: Option<Vec<f64>>, want: &[f64]| {
        let got = got.expect("values");
        assert!(
            got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-12),
            "{got:?} against {want:?}"
        );
    };
    let ln = |x: f64| x.ln();
    close(
        s.pair_log_ratios("a", "release", m),
        &[ln(90.0 / 100.0), ln(360.0 / 400.0)],
    );
    close(
        s.round_log_ratios("b", "release", m),
        &[ln(220.0 / 200.0), ln(330.0 / 300.0)],
    );
    close(
        s.round_log_ratios("release", "b", m),
        &[ln(200.0 / 220.0), ln(300.0 / 330.0)],
    );
    // Never a pair: through release, round by round.
    assert_eq!(s.pair_log_ratios("a", "b", m), None);
    close(
        s.round_log_ratios("a", "b", m),
        &[
            ln(90.0 / 100.0) - ln(220.0 / 200.0),
            ln(360.0 / 400.0) - ln(330.0 / 300.0),
        ],
    );
    assert_eq!(s.round_log_ratios("c", "release", m), None);
}
