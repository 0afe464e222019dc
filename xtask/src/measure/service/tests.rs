//! Unit tests of `service.rs`.

use super::*;
use crate::measure::service_driver::Persistent;

/// A spec whose server and driver are `sh -c` scripts.
fn sh(server: &str, driver: &str) -> Spec {
    Spec {
        exe: PathBuf::from("sh"),
        args: vec!["-c".into(), server.into()],
        env: BTreeMap::new(),
        cwd: None,
        driver: vec!["sh".into(), "-c".into(), driver.into()],
        ready_line: Some("ready".into()),
        ready_timeout_secs: 5,
        stop_timeout_secs: 1,
        metric: None,
        keep_core_awake: false,
        persistent_driver: false,
        read_idle: false,
    }
}

#[test]
fn a_server_that_exits_before_it_is_ready_is_named_with_its_stderr() {
    let spec = sh("echo cannot bind >&2; exit 3", "true");
    let err = Server::start(&spec, free_port().unwrap(), &[])
        .err()
        .unwrap();
    let err = format!("{err:#}");
    assert!(
        err.contains("exited with status 3 before it was ready"),
        "{err}"
    );
    assert!(err.contains("cannot bind"), "{err}");
}

/// A server that fails because its port was taken meanwhile (here: held by the test) is
/// started again on another port; one that fails on a free port is not retried, and its
/// error stands.
#[test]
fn a_server_whose_port_was_taken_starts_on_another() {
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap().port();
    let spec = sh(
        &format!(
            "[ {{port}} = {taken} ] && {{ echo 'Address already in use' >&2; exit 1; }}; \
             trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done"
        ),
        "true",
    );
    let mut ports = [taken, free_port().unwrap()].into_iter();
    let server = Server::start_on(&spec, &[], || Ok(ports.next().unwrap())).unwrap();
    assert_ne!(server.port(), taken);
    server.stop(Duration::from_secs(5)).unwrap();
    let mut asked = 0;
    let spec = sh("echo broken >&2; exit 3", "true");
    let err = Server::start_on(&spec, &[], || {
        asked += 1;
        free_port()
    })
    .err()
    .unwrap();
    assert_eq!(asked, 1, "a free port's failure is the server's own");
    assert!(format!("{err:#}").contains("broken"), "{err:#}");
}

#[test]
fn a_server_that_ignores_sigterm_is_killed_and_the_missing_profile_explained() {
    let spec = sh(
        "trap '' TERM; echo ready; while :; do sleep 0.05; done",
        "true",
    );
    let server = Server::start(&spec, free_port().unwrap(), &[]).unwrap();
    let pid = server.pid();
    let stopped = server.stop(Duration::from_secs(1)).unwrap();
    assert_eq!(stopped.killed_after, Some(Duration::from_secs(1)));
    let why = stopped.why_no_profile().unwrap();
    assert!(
        why.contains("killed by signal 9 (SIGKILL) after it ignored SIGTERM for 1 s"),
        "{why}"
    );
    assert!(why.contains("continuous = true"), "{why}");
    // Reaped: no process, not even a zombie, under its pid.
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn a_server_that_exits_on_sigterm_leaves_no_reason_to_explain() {
    let spec = sh(
        "trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done",
        "true",
    );
    let server = Server::start(&spec, free_port().unwrap(), &[]).unwrap();
    let stopped = server.stop(Duration::from_secs(5)).unwrap();
    assert!(stopped.status.success(), "{}", stopped.describe());
    assert!(stopped.killed_after.is_none() && stopped.why_no_profile().is_none());
}

#[test]
fn a_driver_is_killed_at_its_timeout_and_a_failing_one_named() {
    let spec = sh("true", "sleep 30");
    let err = drive(&spec, 1, None, Duration::from_secs(1), None).unwrap_err();
    assert!(
        format!("{err:#}").contains("did not finish within 1 s and was killed"),
        "{err:#}"
    );
    let spec = sh("true", "echo refused {addr} >&2; exit 1");
    let err = format!(
        "{:#}",
        drive(&spec, 4242, None, Duration::from_secs(5), None).unwrap_err()
    );
    assert!(err.contains("exited with status 1"), "{err}");
    assert!(err.contains("refused 127.0.0.1:4242"), "{err}");
    let spec = sh("true", "echo '{\"p50_ns\": 7}'");
    let out = drive(&spec, 1, None, Duration::from_secs(5), None).unwrap();
    assert_eq!(
        crate::measure::process_arm::metric(&out, "p50_ns").unwrap(),
        7.0
    );
}

#[test]
fn placeholders_are_filled_with_the_port() {
    assert_eq!(fill("--listen={addr}", 4242), "--listen=127.0.0.1:4242");
    assert_eq!(fill("{port}", 80), "80");
    assert_eq!(fill("plain", 80), "plain");
    assert_eq!(fill_driver("{pid}:{port}", 80, Some(7)), "7:80");
    assert_eq!(fill_driver("{pid}", 80, None), "{pid}");
}

/// A persistent driver: one process for every turn, a line each; one that ends after a
/// turn, or goes silent, is named with what a persistent driver must do.
#[test]
fn a_persistent_driver_answers_each_line_and_one_that_stops_is_named() {
    let mut spec = sh(
        "true",
        r#"n=0; while read l; do n=$((n+1)); echo "{\"p50_ns\": $n, \"pid\": $$}"; done"#,
    );
    spec.persistent_driver = true;
    let mut driver = Persistent::start(&spec, 1, None, &[0]).unwrap();
    let answers: Vec<serde_json::Value> = (0..3)
        .map(|_| serde_json::from_str(&driver.turn(Duration::from_secs(5)).unwrap()).unwrap())
        .collect();
    assert_eq!(
        answers
            .iter()
            .map(|a| a["p50_ns"].clone())
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert!(answers.iter().all(|a| a["pid"] == answers[0]["pid"]));
    // `drive` gives it one line: one turn, and then the end of its input.
    let out = drive(&spec, 1, None, Duration::from_secs(5), None).unwrap();
    assert_eq!(out.lines().count(), 1, "{out}");

    let mut once = sh(
        "true",
        r#"read l; echo '{"p50_ns": 1}'; echo gone >&2; exit 4"#,
    );
    once.persistent_driver = true;
    let mut driver = Persistent::start(&once, 1, None, &[0]).unwrap();
    driver.turn(Duration::from_secs(5)).unwrap();
    let err = format!("{:#}", driver.turn(Duration::from_secs(5)).unwrap_err());
    assert!(err.contains("before it answered turn 2"), "{err}");
    assert!(err.contains("exited with status 4"), "{err}");
    assert!(
        err.contains("--turns-on-stdin") && err.contains("gone"),
        "{err}"
    );

    // Two lines for one turn, or a line counting failed requests: named, not read as figures.
    let mut chatty = sh(
        "true",
        r#"while read l; do echo '{"p50_ns": 1}'; echo '{"p50_ns": 2}'; done"#,
    );
    chatty.persistent_driver = true;
    let mut driver = Persistent::start(&chatty, 1, None, &[0]).unwrap();
    driver.turn(Duration::from_secs(5)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let err = format!("{:#}", driver.turn(Duration::from_secs(5)).unwrap_err());
    assert!(err.contains("more than one line for turn 1"), "{err}");
    let mut failing = sh(
        "true",
        r#"while read l; do echo refused >&2; echo '{"p50_ns": 1, "errors": 3}'; done"#,
    );
    failing.persistent_driver = true;
    let mut driver = Persistent::start(&failing, 1, None, &[0]).unwrap();
    let err = format!("{:#}", driver.turn(Duration::from_secs(5)).unwrap_err());
    assert!(
        err.contains("counted 3 request(s) failed in transport in turn 1")
            && err.contains("refused"),
        "{err}"
    );

    let mut silent = sh("true", "read l; sleep 30");
    silent.persistent_driver = true;
    let mut driver = Persistent::start(&silent, 1, None, &[0]).unwrap();
    let err = format!("{:#}", driver.turn(Duration::from_secs(1)).unwrap_err());
    assert!(
        err.contains("did not answer turn 1 within 1 s and was killed"),
        "{err}"
    );
}
