//! The example service as its users meet it: the real binary on a free port, real HTTP/1.1
//! over TCP, then SIGTERM, after which it must finish and exit 0 (what lets an instrumented
//! build write its profile).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Service {
    child: Child,
    addr: String,
}

impl Service {
    fn start() -> Service {
        Service::start_with(&[])
    }

    /// Started with `extra` flags after `--listen` and `--shards`.
    fn start_with(extra: &[&str]) -> Service {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let mut child = Command::new(env!("CARGO_BIN_EXE_agent-service"))
            .args(["--listen", &addr, "--shards", "2"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), format!("agent-service listening on {addr}"));
        Service { child, addr }
    }

    /// One request on a connection of its own: the status and the body.
    fn request(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let (status, _, body) = self.exchange(method, path, body);
        (status, body)
    }

    /// Status, header lines (lower-cased names) and body.
    fn exchange(&self, method: &str, path: &str, body: &str) -> (u16, Vec<String>, String) {
        let stream = TcpStream::connect(&self.addr).unwrap();
        let mut writer = stream.try_clone().unwrap();
        write!(
            writer,
            "{method} {path} HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut text = String::new();
        BufReader::new(stream).read_to_string(&mut text).unwrap();
        let status = text.split_whitespace().nth(1).unwrap().parse().unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let headers = head
            .lines()
            .skip(1)
            .map(|l| l.to_ascii_lowercase())
            .collect();
        (status, headers, body.to_string())
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn sessions_events_and_stats_go_through_the_agents() {
    let s = Service::start();
    assert_eq!(s.request("GET", "/healthz", ""), (200, "ok".to_string()));
    let (status, body) = s.request("GET", "/session/alice", "");
    assert_eq!(status, 200);
    assert_eq!(json(&body)["visits"], 1);
    let (_, body) = s.request("POST", "/session/alice", "hello");
    let view = json(&body);
    assert_eq!(view["visits"], 2);
    assert_eq!(view["last_note"], "hello");
    assert_eq!(json(&s.request("GET", "/session/bob", "").1)["visits"], 1);
    let event = r#"{"kind":"click","value":2.5}"#;
    assert_eq!(s.request("POST", "/event/c1", event).0, 202);
    assert_eq!(s.request("POST", "/event/c1", event).0, 202);
    let stats = json(&s.request("GET", "/stats", "").1);
    assert_eq!(stats["events"], 2);
    assert_eq!(stats["kinds"]["click"]["sum"], 5.0);
    // A malformed event is refused by the handler, never reaching an agent.
    assert_eq!(s.request("POST", "/event/c1", "{").0, 400);
}

#[test]
fn a_client_over_its_rate_is_refused() {
    let s = Service::start();
    let event = r#"{"kind":"view","value":1}"#;
    let statuses: Vec<u16> = (0..60)
        .map(|_| s.request("POST", "/event/greedy", event).0)
        .collect();
    // A burst of 40 is allowed; then 20 a second: some of 60 quick ones must be refused.
    assert!(
        statuses.iter().filter(|&&c| c == 202).count() >= 40,
        "{statuses:?}"
    );
    assert!(statuses.contains(&429), "{statuses:?}");
    assert_eq!(s.request("POST", "/event/modest", event).0, 202);
}

#[test]
fn sigterm_finishes_and_exits_zero() {
    let mut s = Service::start();
    assert_eq!(s.request("GET", "/session/x", "").0, 200);
    // SAFETY: kill(2) on our own child.
    unsafe { libc_kill(s.child.id() as i32, 15) };
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status}");
    let mut stderr = String::new();
    s.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(stderr.contains("agents drained, exiting"), "{stderr}");
    // No `--spin-ns`: no spin.
    assert!(!stderr.contains("spin:"), "{stderr}");
}

#[test]
fn spin_ns_is_calibrated_at_start_up_and_requests_still_answer() {
    let mut s = Service::start_with(&["--spin-ns", "200000"]);
    assert_eq!(s.request("GET", "/healthz", ""), (200, "ok".to_string()));
    // Each answer says how long its spin took: about 200 µs of CPU, timed by the clock on
    // the wall (more where this test shares its core).
    let (_, headers, _) = s.exchange("GET", "/healthz", "");
    let spun: u64 = headers
        .iter()
        .find_map(|h| h.strip_prefix("x-spin-ns: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no x-spin-ns: {headers:?}"));
    assert!(spun >= 50_000, "x-spin-ns: {spun}");
    assert_eq!(json(&s.request("GET", "/session/k", "").1)["visits"], 1);
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    let mut stderr = String::new();
    s.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let line = stderr
        .lines()
        .find(|l| l.starts_with("spin: "))
        .unwrap_or_else(|| panic!("{stderr}"));
    let iters: u64 = line
        .strip_prefix("spin: ")
        .and_then(|l| l.strip_suffix(" iterations a request (about 200000 ns)"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(iters > 0, "{line}");
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
