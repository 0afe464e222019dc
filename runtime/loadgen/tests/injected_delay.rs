//! The driver against servers with a known, injected delay: a real TCP server in this test
//! process (a thread per connection, HTTP/1.1 keep-alive), the real `mty-loadgen` binary.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How the test server delays an answer.
#[derive(Clone, Copy)]
enum Delay {
    /// Every answer this long after its request.
    Each(Duration),
    /// The whole server stops answering for the first `stall` of every `period`.
    Stall { period: Duration, stall: Duration },
}

/// Starts a server on a free port; it runs until the test process ends.
fn server(delay: Delay) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let born = Instant::now();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let stream = stream.unwrap();
            std::thread::spawn(move || serve(stream, delay, born, None));
        }
    });
    addr
}

/// Answers the requests on `stream`; with `idle`, closes it once no request came for that long.
fn serve(stream: TcpStream, delay: Delay, born: Instant, idle: Option<Duration>) {
    stream.set_nodelay(true).unwrap();
    let mut writer = stream.try_clone().unwrap();
    stream.set_read_timeout(idle).unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        match delay {
            Delay::Each(d) => std::thread::sleep(d),
            Delay::Stall { period, stall } => {
                let phase =
                    Duration::from_nanos((born.elapsed().as_nanos() % period.as_nanos()) as u64);
                if phase < stall {
                    std::thread::sleep(stall - phase);
                }
            }
        }
        if writer
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-work-ns: 7\r\n\r\nok")
            .is_err()
        {
            return;
        }
    }
}

fn loadgen(addr: &str, extra: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_mty-loadgen"))
        .args(["--url", &format!("http://{addr}")])
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mty-loadgen failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().expect("a JSON line")).unwrap()
}

fn ms(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap() / 1e6
}

#[test]
fn every_answer_carries_the_injected_delay() {
    let addr = server(Delay::Each(Duration::from_millis(3)));
    let v = loadgen(
        &addr,
        &[
            "--rate",
            "100",
            "--duration",
            "1",
            "--warmup",
            "0.1",
            "--connections",
            "2",
        ],
    );
    assert_eq!(v["requests"], 100, "{v}");
    assert_eq!(v["errors"], 0, "{v}");
    // No answer can come before the delay, whatever the machine adds.
    assert!(ms(&v, "p50_ns") >= 3.0, "{v}");
    assert!(v["achieved_rps"].as_f64().unwrap() > 80.0, "{v}");
}

/// Coordinated omission: the server stops for 200 ms of every second. Open loop, every
/// request due in the stall waits for its end, about a fifth of them, so the p99 is most of
/// the stall; closed loop, each connection is held up once a stall and the requests queued
/// behind look fast, so the p99 hides it.
#[test]
fn a_stall_shows_in_the_open_loop_p99_and_hides_in_the_closed_loop() {
    let addr = server(Delay::Stall {
        period: Duration::from_secs(1),
        stall: Duration::from_millis(200),
    });
    let common = [
        "--rate",
        "500",
        "--duration",
        "2",
        "--warmup",
        "0.2",
        "--connections",
        "2",
    ];
    let open = loadgen(&addr, &common);
    let mut closed_args = common.to_vec();
    closed_args.push("--closed-loop");
    let closed = loadgen(&addr, &closed_args);
    assert_eq!(open["open_loop"], true);
    assert_eq!(closed["open_loop"], false);
    assert!(ms(&open, "p99_ns") >= 100.0, "open loop: {open}");
    assert!(ms(&closed, "p99_ns") < 100.0, "closed loop: {closed}");
    // Both saw the stall itself at least once.
    assert!(ms(&open, "max_ns") >= 150.0 && ms(&closed, "max_ns") >= 150.0);
}

#[test]
fn bad_input_is_refused_with_what_to_write() {
    let out = Command::new(env!("CARGO_BIN_EXE_mty-loadgen"))
        .args(["--url", "http://127.0.0.1:1", "--request", "GET:/x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("expected WEIGHT:METHOD:PATH[:BODY]"),
        "{stderr}"
    );
}

#[test]
fn a_refused_connection_fails_the_run() {
    // A port nobody listens on: bound, then closed.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(env!("CARGO_BIN_EXE_mty-loadgen"))
        .args(["--url", &format!("127.0.0.1:{port}"), "--duration", "0.1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot connect to 127.0.0.1"), "{stderr}");
}

/// The server runs in this test process: its CPU time over the window is this process's.
#[test]
fn the_server_cpu_over_the_window_is_reported() {
    let addr = server(Delay::Each(Duration::ZERO));
    let pid = std::process::id().to_string();
    let v = loadgen(
        &addr,
        &[
            "--rate",
            "200",
            "--duration",
            "0.5",
            "--warmup",
            "0.1",
            "--connections",
            "2",
            "--server-pid",
            &pid,
        ],
    );
    assert_eq!(v["requests"], 100, "{v}");
    assert_eq!(v["completed"], 120, "{v}");
    assert!(v["server_cpu_ns"].as_u64().unwrap() > 0, "{v}");
    assert!(v["window_answers"].as_u64().unwrap() >= 100, "{v}");
    assert!(v["window_answers"].as_u64().unwrap() <= 120, "{v}");
    assert!(v["cpu_per_request_ns"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["server_threads"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["server_threads_gone"].is_u64(), "{v}");
    assert!(v["saturated"].is_boolean(), "{v}");
}

#[test]
fn without_a_server_pid_there_are_no_cpu_keys() {
    let addr = server(Delay::Each(Duration::ZERO));
    let v = loadgen(
        &addr,
        &["--rate", "200", "--duration", "0.2", "--warmup", "0"],
    );
    assert_eq!(v["completed"], 40, "{v}");
    assert!(v["saturated"].is_boolean(), "{v}");
    assert!(v.get("server_cpu_ns").is_none(), "{v}");
    assert!(v.get("window_answers").is_none(), "{v}");
}

#[test]
fn a_server_pid_that_does_not_exist_is_refused_before_connecting() {
    let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let pid = (1..pid_max)
        .rev()
        .find(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        .unwrap();
    // Nobody listens there either: the pid must be refused first.
    let out = Command::new(env!("CARGO_BIN_EXE_mty-loadgen"))
        .args(["--url", "http://127.0.0.1:1", "--duration", "0.1"])
        .args(["--server-pid", &pid.to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot read the CPU time of process {pid} (/proc/{pid}/task)"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("cannot connect"), "{stderr}");
}

/// `--sum-header`: every answer in the window carries `x-work-ns: 7`, so the sum is 7 per
/// answer, over at least the recorded ones and at most all; a header no answer carries sums to
/// nothing; without the flag there are no such keys.
#[test]
fn a_numeric_response_header_is_summed_over_the_window() {
    let addr = server(Delay::Each(Duration::from_millis(1)));
    let common = [
        "--rate",
        "200",
        "--duration",
        "0.5",
        "--warmup",
        "0.1",
        "--connections",
        "2",
    ];
    let summed = |name: &str| {
        let mut args = common.to_vec();
        args.extend(["--sum-header", name]);
        loadgen(&addr, &args)
    };
    let v = summed("x-work-ns");
    let answers = v["header_answers"].as_u64().unwrap();
    assert!(
        answers >= v["requests"].as_u64().unwrap() && answers <= v["completed"].as_u64().unwrap(),
        "{v}"
    );
    assert_eq!(
        v["header_sum"].as_f64().unwrap(),
        7.0 * answers as f64,
        "{v}"
    );
    let v = summed("x-absent");
    assert_eq!(
        (v["header_answers"].as_u64(), v["header_sum"].as_f64()),
        (Some(0), Some(0.0)),
        "{v}"
    );
    let v = loadgen(&addr, &common);
    assert!(
        v.get("header_sum").is_none() && v.get("header_answers").is_none(),
        "{v}"
    );
}

/// `--turns-on-stdin`: one turn a line, each with its own JSON line, on the connections opened
/// for the first (the server accepts `--connections` of them in all); a server that closes
/// idle connections between turns gets new ones before the next turn's clock, and no request
/// fails.
#[test]
fn turns_on_stdin_run_a_turn_a_line_on_the_same_connections() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    for (idle, accepted_in_all) in [(None, 3), (Some(Duration::from_millis(40)), 9)] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        let born = Instant::now();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                counted.fetch_add(1, Ordering::SeqCst);
                let stream = stream.unwrap();
                std::thread::spawn(move || serve(stream, Delay::Each(Duration::ZERO), born, idle));
            }
        });
        let mut child = Command::new(env!("CARGO_BIN_EXE_mty-loadgen"))
            .args(["--url", &format!("http://{addr}"), "--turns-on-stdin"])
            .args(["--rate", "400", "--duration", "0.05", "--warmup", "0.01"])
            .args(["--connections", "3"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        for turn in 1..=3 {
            // Long enough for an idle close to land between turns.
            std::thread::sleep(Duration::from_millis(150));
            // A turn starts only when its line comes: nothing is printed before.
            writeln!(stdin).unwrap();
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["requests"], 20, "idle {idle:?}, turn {turn}: {v}");
            assert_eq!(v["completed"], 24, "idle {idle:?}, turn {turn}: {v}");
            assert_eq!(v["errors"], 0, "idle {idle:?}, turn {turn}: {v}");
        }
        drop(stdin);
        let status = child.wait().unwrap();
        assert!(status.success(), "idle {idle:?}: {status}");
        let mut rest = String::new();
        stdout.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "", "no turn after the end of input");
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            accepted_in_all,
            "idle {idle:?}"
        );
    }
}
