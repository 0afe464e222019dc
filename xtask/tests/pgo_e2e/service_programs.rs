//! The service workspace's files: `tinysrv` (a small HTTP server, std only), its driver
//! `tinyload` (another bin of that workspace, which the pipeline builds), and its pgo.toml.

pub(super) const SERVER: &str = r#"use std::io::{BufRead, BufReader, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

// libc's own, which std links: no dependency to build for each of the pipeline's builds.
unsafe extern "C" {
    fn signal(signum: i32, handler: usize) -> usize;
}
const SIGTERM: i32 = 15;
const SIG_IGN: usize = 1;

extern "C" fn on_term(_: i32) {
    STOP.store(true, Ordering::SeqCst);
}

/// Some branchy work per request, for PGO to lay out.
#[inline(never)]
fn work(seed: u64, rounds: u32) -> u64 {
    let mut x = seed | 1;
    let mut acc = 0u64;
    for i in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        acc = match x % 7 {
            0 => acc.wrapping_add(x),
            1 | 2 => acc ^ x.rotate_left(i % 63),
            3 => acc.wrapping_mul(31).wrapping_add(i as u64),
            _ => acc.wrapping_sub(x >> 3),
        };
    }
    acc
}

fn serve(stream: std::net::TcpStream) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let (mut line, mut path, mut length) = (String::new(), String::new(), 0usize);
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if path.is_empty() {
                path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
            } else if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let seed = path.bytes().fold(7u64, |h, b| h.wrapping_mul(131).wrapping_add(b as u64));
        let answer = work(seed, 3000).to_string();
        let reply = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{answer}", answer.len());
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let addr = args
        .iter()
        .position(|a| a == "--listen")
        .map(|i| args[i + 1].clone())
        .expect("--listen ADDR");
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        if flag("--ignore-sigterm") {
            signal(SIGTERM, SIG_IGN);
        } else {
            signal(SIGTERM, on_term as *const () as usize);
        }
    }
    let listener = std::net::TcpListener::bind(&addr).expect("a free port");
    listener.set_nonblocking(true).unwrap();
    if !flag("--never-ready") {
        println!("tinysrv listening on {addr}");
        std::io::stdout().flush().unwrap();
    }
    while !STOP.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                stream.set_nodelay(true).unwrap();
                std::thread::spawn(move || serve(stream));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(std::time::Duration::from_millis(2))
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
    eprintln!("tinysrv: SIGTERM, returning from main");
}
"#;

pub(super) const DRIVER: &str = r#"use std::io::{BufRead, BufReader, Read, Write};

/// The CPU time of process `pid`'s threads (ns), as mty-loadgen reads it.
fn cpu_ns(pid: &str) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the server's threads")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .map(|s| s.split_whitespace().next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// Closed loop over one connection: `--requests N` GETs of `/item/<i % 50>`; prints the
/// median and p99 in ns as JSON, and with `--server-pid PID` the server's CPU time per
/// request over the loop. With `--turns-on-stdin`, one loop for each line on stdin, on the
/// same connection; with `--log FILE`, a line `turn PID` appended for each loop.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |f: &str| args.iter().position(|a| a == f).map(|i| args[i + 1].clone());
    let addr = value("--url").expect("--url ADDR");
    let n: usize = value("--requests").map_or(200, |v| v.parse().unwrap());
    let pid = value("--server-pid");
    let log = value("--log");
    let stream = std::net::TcpStream::connect(&addr).expect("the server accepts");
    stream.set_nodelay(true).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut turn = || {
        if let Some(log) = &log {
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
            writeln!(f, "turn {}", std::process::id()).unwrap();
        }
        let cpu_before = pid.as_deref().map(cpu_ns);
        let mut times = Vec::with_capacity(n);
        for i in 0..n {
            let started = std::time::Instant::now();
            write!(writer, "GET /item/{} HTTP/1.1\r\nhost: x\r\n\r\n", i % 50).unwrap();
            let mut length = 0usize;
            let mut line = String::new();
            loop {
                line.clear();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" {
                    break;
                }
                if let Some(v) = line.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            times.push(started.elapsed().as_nanos() as u64);
        }
        let cpu = match (pid.as_deref(), cpu_before) {
            (Some(pid), Some(before)) => format!(
                ",\"cpu_per_request_ns\":{},\"saturated\":false",
                (cpu_ns(pid) - before) as f64 / n as f64
            ),
            _ => String::new(),
        };
        times.sort();
        println!(
            "{{\"requests\":{n},\"p50_ns\":{},\"p99_ns\":{}{cpu}}}",
            times[n / 2],
            times[(n * 99 / 100).min(n - 1)]
        );
    };
    if args.iter().any(|a| a == "--turns-on-stdin") {
        for line in std::io::stdin().lines() {
            line.unwrap();
            turn();
        }
    } else {
        turn();
    }
}
"#;

pub(super) const CONFIG: &str = r#"binary = "tinysrv"

[train]
timeout_secs = 60
workloads = [
    { name = "items", mode = "service", args = ["--listen", "{addr}"], service = { driver = ["tinyload", "--url", "{addr}", "--requests", "3000"], ready_line = "listening on", stop_timeout_secs = 5 } },
]

[measure]
seed = 11
timeout_secs = 60
bootstrap_resamples = 2000
min_effect_pct = 1.0
workloads = [
    { name = "items_p50", mode = "service", args = ["--listen", "{addr}"], service = { driver = ["tinyload", "--url", "{addr}", "--server-pid", "{pid}", "--requests", "400"], ready_line = "listening on" } },
    { name = "items_turns", mode = "service", args = ["--listen", "{addr}"], service = { persistent_driver = true, driver = ["tinyload", "--turns-on-stdin", "--log", "target/turns.log", "--url", "{addr}", "--server-pid", "{pid}", "--requests", "400"], ready_line = "listening on" } },
]

[measure.lockstep]
sessions = 3
min_sessions = 2
rounds = 3
max_secs = 30

[layout]
variants = 0

[bolt]
enabled = false

[apply_check]
required = ["tinysrv::"]
"#;
