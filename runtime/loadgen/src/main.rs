//! `mty-loadgen`: an open-loop HTTP/1.1 load generator for measuring a service.
//!
//! Requests go out on a fixed schedule: request i is due at `start + i / rate`, whether or not
//! earlier answers have come back. Its latency is measured from that intended time to the end
//! of its answer. A server that stalls therefore delays every request due during the stall,
//! and each of them counts, as it would for the users who sent them. A closed-loop client
//! that times from the actual send hides all but one of them (coordinated omission; wrk2 and
//! HdrHistogram's corrected recording are the anchors). `--closed-loop` times that way, for
//! comparison only.
//!
//! The requests are spread round robin over `--connections` keep-alive connections; a
//! request whose connection is still busy waits for it, and the wait counts. Warm-up
//! requests run on the same schedule first and are not recorded. The recorded window starts
//! at `start + warmup`, when the first recorded request is due, and ends with the last
//! recorded answer. The last line of stdout is one JSON object: counts, the achieved rate
//! and HDR percentiles in nanoseconds (`p50_ns`, `p90_ns`, `p95_ns`, `p99_ns`, `p999_ns`,
//! `max_ns`, `mean_ns`).
//! - `requests`: recorded answers; `achieved_rps`: them over the span from the window's start
//!   to the last recorded answer;
//! - `completed`: every answered request, warm-up included (2xx or not; not transport
//!   failures);
//! - `saturated`: the server fell behind the offered rate: `achieved_rps < 0.97 * rate`, or
//!   any transport error.
//!
//! With `--server-pid PID` (the server's process, on this machine), also the server's CPU
//! time over the window: each of its threads' nanoseconds on a CPU (user and system, the
//! first field of `/proc/PID/task/TID/schedstat`), read when the window starts and again
//! after the last answer, the differences summed over the threads alive at the end (a thread
//! started during the window counts from 0; one that exited during it is lost):
//! - `server_cpu_ns`: that sum;
//! - `window_answers`: answers (2xx or not) that completed at or after the window's start,
//!   warm-up requests included (one still in flight then is served inside the window);
//! - `cpu_per_request_ns`: `server_cpu_ns / window_answers` (0 without answers);
//! - `server_threads`: the server's threads at the end; `server_threads_gone`: those alive at
//!   the start and not at the end, whose CPU in the window is missing from the sum.
//!
//! With `--sum-header NAME`, also the sum of that response header's numeric value over the
//! same answers as `window_answers` (`header_sum`) and how many carried it
//! (`header_answers`): what a server reports of its own work per request, such as the time a
//! test server spent on an injected cost (`agent-service --spin-ns` sets `x-spin-ns`).
//!
//! With `--turns-on-stdin`, it stays up: it connects once, then runs one turn (the warm-up
//! and the recorded window, the same requests each turn) for each line it reads on stdin and
//! prints one JSON line for each, until stdin ends. A connection the server closed between
//! turns is opened again before the next turn's clock starts.
//!
//! A request that fails in transport (refused, reset, timed out) makes the exit status 1
//! after that line (with `--turns-on-stdin`, at the end, the turn's line printed and the next
//! turn run); an answer with a status other than 2xx is counted in `non_2xx` and timed
//! like any other. Bad arguments, an unreadable server process or a failed set-up exit 2.

use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use tokio::net::TcpStream;

mod cpu;
mod plan;
use cpu::{read_threads_cpu, window_cpu};
use plan::{Planned, parse_template, plan};

#[derive(Debug, Parser)]
#[command(
    name = "mty-loadgen",
    version,
    about = "Open-loop HTTP load: a fixed request rate, latency from each request's intended send time"
)]
struct Args {
    /// The server: `http://HOST:PORT` (or `HOST:PORT`); request paths are appended.
    #[arg(long)]
    url: String,
    /// Requests per second, on a fixed schedule.
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Seconds of recorded requests.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Seconds of requests on the same schedule before, not recorded.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// Keep-alive connections the requests are spread over, round robin.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// `WEIGHT:METHOD:PATH[:BODY]`, repeatable: the request mix. `{key}` in the path or body
    /// is a key drawn uniformly from `0..--keys`.
    #[arg(long = "request", default_value = "1:GET:/")]
    requests: Vec<String>,
    /// How many distinct keys `{key}` draws from.
    #[arg(long, default_value_t = 1000)]
    keys: u64,
    /// Seeds the request mix and the keys: the same seed sends the same requests.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Time each request from its actual send, not its intended time (coordinated omission:
    /// for comparison only).
    #[arg(long)]
    closed_loop: bool,
    /// Milliseconds one request may take before it counts as failed.
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
    /// The server's process id, on this machine: adds its CPU time over the recorded window
    /// (`server_cpu_ns`, `window_answers`, `cpu_per_request_ns`, `server_threads`,
    /// `server_threads_gone`), read from `/proc/PID/task/*/schedstat`; checked before
    /// connecting. A figure per request means most when the server kept up: `saturated`
    /// (printed with or without this flag) is `achieved_rps < 0.97 * rate` or any transport
    /// error.
    #[arg(long, value_name = "PID")]
    server_pid: Option<u32>,
    /// A response header with a number in it (`x-spin-ns`): its values summed over the
    /// answers that completed in the recorded window (`header_sum`), and how many answers
    /// carried it (`header_answers`).
    #[arg(long, value_name = "NAME")]
    sum_header: Option<hyper::header::HeaderName>,
    /// Stay up for many turns: connect once, then run one turn (the warm-up and the recorded
    /// window, the same requests each time) per line read on stdin, printing one JSON line
    /// for each, until stdin ends. No process start and no connection set-up between turns.
    #[arg(long)]
    turns_on_stdin: bool,
}

/// Waits until `t`: the timer for all but the last 2 ms (its ticks are a millisecond apart),
/// then yielding, so a request leaves within microseconds of its time.
async fn wait_until(t: Instant) {
    const COARSE: Duration = Duration::from_millis(2);
    loop {
        let now = Instant::now();
        if now >= t {
            return;
        }
        if t - now > COARSE {
            tokio::time::sleep(t - now - COARSE).await;
        } else {
            tokio::task::yield_now().await;
        }
    }
}

/// What one connection saw.
#[derive(Default)]
struct Tally {
    latencies: Vec<u64>,
    errors: u64,
    non_2xx: u64,
    /// Answered requests (2xx or not), warm-up included.
    answered: u64,
    /// Of those, the ones whose answer completed at or after the window's start.
    window_answers: u64,
    /// `--sum-header`: its values over those answers, and how many carried it.
    header_sum: f64,
    header_answers: u64,
    first_error: Option<String>,
    last_done: Option<Instant>,
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(authority: &str) -> Result<Sender> {
    let stream = TcpStream::connect(authority)
        .await
        .with_context(|| format!("cannot connect to {authority}"))?;
    stream.set_nodelay(true)?;
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::task::spawn_local(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Sends `p` and reads the whole answer: its status, and the number in header `sum` if asked
/// for and present.
async fn send(
    sender: &mut Sender,
    authority: &str,
    p: &Planned,
    sum: Option<&hyper::header::HeaderName>,
) -> Result<(hyper::StatusCode, Option<f64>)> {
    let request = hyper::Request::builder()
        .method(p.method.clone())
        .uri(&p.path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(p.body.clone())))?;
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let value = sum
        .and_then(|name| response.headers().get(name))
        .and_then(|v| v.to_str().ok()?.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite());
    response.into_body().collect().await?;
    Ok((status, value))
}

/// How every connection sends and times.
struct Sending {
    closed_loop: bool,
    timeout: Duration,
    /// `--sum-header`.
    sum: Option<hyper::header::HeaderName>,
}

/// One connection's share of the schedule, in order. `window` is when the recorded window
/// starts.
async fn run_connection(
    authority: Rc<str>,
    start: Instant,
    window: Instant,
    requests: Vec<Planned>,
    mut sender: Option<Sender>,
    how: Rc<Sending>,
) -> (Tally, Option<Sender>) {
    let (closed_loop, timeout) = (how.closed_loop, how.timeout);
    let mut tally = Tally::default();
    for p in &requests {
        let due = start + p.due;
        wait_until(due).await;
        let sent = Instant::now();
        let outcome = tokio::time::timeout(timeout, async {
            if sender.is_none() {
                sender = Some(connect(&authority).await?);
            }
            send(
                sender.as_mut().expect("connected above"),
                &authority,
                p,
                how.sum.as_ref(),
            )
            .await
        })
        .await
        .unwrap_or_else(|_| {
            Err(anyhow::anyhow!(
                "no answer within {} ms",
                timeout.as_millis()
            ))
        });
        let done = Instant::now();
        match outcome {
            Ok((status, value)) => {
                if !status.is_success() {
                    tally.non_2xx += 1;
                }
                tally.answered += 1;
                if done >= window {
                    tally.window_answers += 1;
                    if let Some(v) = value {
                        tally.header_sum += v;
                        tally.header_answers += 1;
                    }
                }
                if p.recorded {
                    let from = if closed_loop { sent } else { due };
                    tally
                        .latencies
                        .push(done.duration_since(from).as_nanos() as u64);
                    tally.last_done = Some(done);
                }
            }
            Err(err) => {
                tally.errors += 1;
                tally
                    .first_error
                    .get_or_insert_with(|| format!("{} {}: {err:#}", p.method, p.path));
                // A fresh connection for the next request.
                sender = None;
            }
        }
    }
    (tally, sender)
}

fn authority(url: &str) -> Result<String> {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    if url.starts_with("https://") {
        bail!("`--url {url}`: only plain http is supported");
    }
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') {
        bail!("`--url {url}`: expected http://HOST:PORT (request paths come from `--request`)");
    }
    Ok(authority.to_string())
}

/// What every turn reuses: the arguments, the server's address, each connection's share of
/// the schedule and how it sends.
struct Load<'a> {
    args: &'a Args,
    authority: Rc<str>,
    shares: Vec<Vec<Planned>>,
    how: Rc<Sending>,
}

fn prepare(args: &Args) -> Result<Load<'_>> {
    if !(args.rate > 0.0 && args.rate.is_finite()) {
        bail!(
            "`--rate {}`: must be a positive number of requests per second",
            args.rate
        );
    }
    if args.duration.is_nan() || args.duration <= 0.0 || args.warmup.is_nan() || args.warmup < 0.0 {
        bail!("`--duration` must be positive and `--warmup` at least 0");
    }
    if args.connections == 0 {
        bail!("`--connections 0`: at least one connection is needed");
    }
    if let Some(pid) = args.server_pid {
        read_threads_cpu(pid)?;
    }
    let authority: Rc<str> = authority(&args.url)?.into();
    let templates = args
        .requests
        .iter()
        .map(|r| parse_template(r))
        .collect::<Result<Vec<_>>>()?;
    let mut shares: Vec<Vec<Planned>> = (0..args.connections).map(|_| Vec::new()).collect();
    for (i, p) in plan(args, &templates).into_iter().enumerate() {
        shares[i % args.connections].push(p);
    }
    Ok(Load {
        args,
        authority,
        shares,
        how: Rc::new(Sending {
            closed_loop: args.closed_loop,
            timeout: Duration::from_millis(args.timeout_ms),
            sum: args.sum_header.clone(),
        }),
    })
}

/// One turn: the warm-up and the recorded window on `senders` (each connected first where
/// it is missing or closed, before the clock starts: no request's latency), kept for the
/// next turn. Its JSON line, and the first transport error.
async fn turn(
    load: &Load<'_>,
    senders: &mut [Option<Sender>],
) -> Result<(serde_json::Value, Option<String>)> {
    let args = load.args;
    // Connections kept from the last turn: a close from the server since then is seen only
    // once the runtime has polled their sockets (it does while it sleeps) and their tasks
    // have run.
    if senders.iter().any(Option::is_some) {
        tokio::time::sleep(Duration::from_millis(1)).await;
        tokio::task::yield_now().await;
    }
    for slot in senders.iter_mut() {
        if slot.as_ref().is_none_or(Sender::is_closed) {
            let opened = tokio::time::timeout(load.how.timeout, connect(&load.authority))
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "cannot connect to {} within {} ms",
                        load.authority,
                        load.how.timeout.as_millis()
                    )
                })??;
            *slot = Some(opened);
        }
    }
    // The schedule's copy is made before the clock starts.
    let shares = load.shares.clone();
    let warm = Duration::from_secs_f64(args.warmup);
    // A millisecond for the connections' tasks to start before the first request is due.
    let start = Instant::now() + Duration::from_millis(1);
    let window = start + warm;
    let tasks: Vec<_> = shares
        .into_iter()
        .zip(senders.iter_mut())
        .map(|(share, sender)| {
            tokio::task::spawn_local(run_connection(
                load.authority.clone(),
                start,
                window,
                share,
                sender.take(),
                load.how.clone(),
            ))
        })
        .collect();
    // The server's CPU time when the window starts: a few small reads from /proc on this
    // thread, at the instant the first recorded request is due.
    let cpu_start = args.server_pid.map(|pid| {
        tokio::task::spawn_local(async move {
            wait_until(window).await;
            read_threads_cpu(pid)
        })
    });
    let mut tallies = Vec::new();
    for (task, slot) in tasks.into_iter().zip(senders.iter_mut()) {
        let (tally, sender) = task.await?;
        tallies.push(tally);
        *slot = sender;
    }
    let cpu_start = match cpu_start {
        Some(read) => Some(read.await??),
        None => None,
    };
    // Every connection is done: the window's last answer is in.
    let server = match (cpu_start, args.server_pid) {
        (Some(cpu_start), Some(pid)) => Some(window_cpu(&cpu_start, &read_threads_cpu(pid)?)),
        _ => None,
    };
    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)?;
    let (mut errors, mut non_2xx, mut first_error, mut last) = (0, 0, None, None::<Instant>);
    let (mut completed, mut window_answers) = (0, 0);
    let (mut header_sum, mut header_answers) = (0.0, 0);
    for t in tallies {
        for &ns in &t.latencies {
            hist.saturating_record(ns.max(1));
        }
        errors += t.errors;
        non_2xx += t.non_2xx;
        completed += t.answered;
        window_answers += t.window_answers;
        header_sum += t.header_sum;
        header_answers += t.header_answers;
        first_error = first_error.or(t.first_error);
        last = last.max(t.last_done);
    }
    let span = last.map_or(0.0, |l| l.duration_since(window).as_secs_f64());
    let q = |q: f64| {
        if hist.is_empty() {
            0
        } else {
            hist.value_at_quantile(q)
        }
    };
    let achieved_rps = if span > 0.0 {
        hist.len() as f64 / span
    } else {
        0.0
    };
    let mut out = serde_json::json!({
        "open_loop": !args.closed_loop,
        "rate": args.rate,
        "connections": args.connections,
        "duration_s": args.duration,
        "requests": hist.len(),
        "completed": completed,
        "errors": errors,
        "non_2xx": non_2xx,
        "achieved_rps": achieved_rps,
        "saturated": achieved_rps < 0.97 * args.rate || errors > 0,
        "p50_ns": q(0.5),
        "p90_ns": q(0.9),
        "p95_ns": q(0.95),
        "p99_ns": q(0.99),
        "p999_ns": q(0.999),
        "max_ns": hist.max(),
        "mean_ns": hist.mean(),
    });
    if let Some(server) = server {
        out["server_cpu_ns"] = server.cpu_ns.into();
        out["window_answers"] = window_answers.into();
        out["cpu_per_request_ns"] = if window_answers > 0 {
            server.cpu_ns as f64 / window_answers as f64
        } else {
            0.0
        }
        .into();
        out["server_threads"] = server.threads.into();
        out["server_threads_gone"] = server.gone.into();
    }
    if args.sum_header.is_some() {
        out["header_sum"] = header_sum.into();
        out["header_answers"] = header_answers.into();
    }
    Ok((
        out,
        first_error.map(|e| format!("{errors} request(s) failed in transport; the first: {e}")),
    ))
}

/// One turn, or with `--turns-on-stdin` one per line of stdin: each turn's JSON line on
/// stdout. False when a request failed in transport.
fn run(args: &Args) -> Result<bool> {
    let load = prepare(args)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let mut senders: Vec<Option<Sender>> = (0..args.connections).map(|_| None).collect();
    let mut all_ok = true;
    let mut lines = std::io::stdin().lines();
    loop {
        if args.turns_on_stdin {
            match lines.next() {
                None => break,
                Some(line) => {
                    line.context("reading the next turn's line on stdin")?;
                }
            }
        }
        let (out, failed) = local.block_on(&runtime, turn(&load, &mut senders))?;
        // Stdout is line-buffered: each turn's line leaves at once.
        println!("{out}");
        if let Some(failed) = failed {
            eprintln!("mty-loadgen: {failed}");
            all_ok = false;
        }
        if !args.turns_on_stdin {
            break;
        }
    }
    Ok(all_ok)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("mty-loadgen: {err:#}");
            ExitCode::from(2)
        }
    }
}
