//! `agent-service`: an example HTTP service on Mighty. Its handlers (axum on tokio) talk to
//! agents through byte-bounded mailboxes: a session agent per shard of keys, a rate limiter
//! and an aggregator (`agents.rs`). It stops gracefully on SIGTERM: the server finishes the
//! requests in flight, the agents drain their mailboxes, and `main` returns, which is also
//! when an instrumented build writes its profile.
//!
//! Routes:
//! - `GET /session/{key}`: visit the session, answer its counts;
//! - `POST /session/{key}` (body: a note): visit it, keeping the note;
//! - `POST /event/{client}` (body: `{"kind": "...", "value": 1.5}`): 202 when the client's
//!   rate allows it (then counted by the aggregator), else 429;
//! - `GET /stats`: the aggregator's counts per kind;
//! - `GET /healthz`.
//!
//! It prints `agent-service listening on ADDR` once it accepts connections.
//!
//! With `--spin-ns N`, every request also does a fixed amount of CPU work, calibrated at
//! start-up to take about N nanoseconds of CPU (`spin.rs`): a known extra cost per request, against
//! which a benchmark tool's CPU per request can be checked. It prints
//! `spin: ITERS iterations a request (about N ns)` on stderr at start-up, and every answer
//! carries `x-spin-ns`: that request's spin as timed around it.

mod agents;
mod spin;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use clap::Parser;
use serde::Deserialize;

use agents::Agents;

#[derive(Debug, Parser)]
#[command(
    name = "agent-service",
    about = "An example HTTP service on Mighty's agents"
)]
struct Args {
    /// Where to listen: HOST:PORT.
    #[arg(long)]
    listen: String,
    /// The runtime's worker threads.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Session agents (keys are spread over them by hash).
    #[arg(long, default_value_t = 4)]
    shards: usize,
    /// Extra CPU work every request does, calibrated at start-up to take about this many
    /// nanoseconds (a fixed count of iterations, no clock read per request). Given at all,
    /// even as 0, every request passes the layer that spins: arms that differ only in N
    /// differ only in the spin.
    #[arg(long)]
    spin_ns: Option<u64>,
}

#[derive(Deserialize)]
struct Event {
    kind: String,
    value: f64,
}

type Shared = Arc<Agents>;

async fn get_session(State(agents): State<Shared>, Path(key): Path<String>) -> impl IntoResponse {
    match agents.visit(key, None).await {
        Some(view) => Json(view).into_response(),
        None => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn post_session(
    State(agents): State<Shared>,
    Path(key): Path<String>,
    note: String,
) -> impl IntoResponse {
    match agents.visit(key, Some(note)).await {
        Some(view) => Json(view).into_response(),
        None => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn post_event(
    State(agents): State<Shared>,
    Path(client): Path<String>,
    Json(event): Json<Event>,
) -> impl IntoResponse {
    if !agents.allow(client).await {
        return StatusCode::TOO_MANY_REQUESTS;
    }
    if agents.record(event.kind, event.value).await {
        StatusCode::ACCEPTED
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

async fn stats(State(agents): State<Shared>) -> impl IntoResponse {
    match agents.stats().await {
        Some(stats) => Json(stats).into_response(),
        None => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn serve(args: Args, spin_iters: Option<u64>) -> Result<(), String> {
    let agents = Arc::new(Agents::spawn(
        &tokio::runtime::Handle::current(),
        args.shards,
    ));
    let app = Router::new()
        .route("/session/{key}", get(get_session).post(post_session))
        .route("/event/{client}", axum::routing::post(post_event))
        .route("/stats", get(stats))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(Arc::clone(&agents));
    // Without `--spin-ns` the layer is not there at all: the requests' path is unchanged.
    // With it, each answer says how long its spin took (`x-spin-ns`, the clock read around
    // it; about the clock's own cost with N = 0): the injected cost as spent, which a spin
    // of a few hundred iterations between other work does not match its start-up timing.
    // The wall clock, not the thread's CPU clock: it costs no system call, and nothing
    // preempts a spin that has its core to itself (a benchmark's idle-priority spinner aside).
    let app = match spin_iters {
        Some(iters) => app.layer(axum::middleware::from_fn(
            move |request, next: Next| async move {
                let t = std::time::Instant::now();
                std::hint::black_box(spin::spin(iters));
                let ns = t.elapsed().as_nanos() as u64;
                let mut response = next.run(request).await;
                response
                    .headers_mut()
                    .insert("x-spin-ns", axum::http::HeaderValue::from(ns));
                response
            },
        )),
        None => app,
    };
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|err| format!("cannot listen on {}: {err}", args.listen))?;
    let addr = listener
        .local_addr()
        .map_err(|err| format!("no local address: {err}"))?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|err| format!("cannot handle SIGTERM: {err}"))?;
    println!("agent-service listening on {addr}");
    let _ = std::io::stdout().flush();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            term.recv().await;
        })
        .await
        .map_err(|err| format!("serving: {err}"))?;
    // Every handler is done: the agents drain what they admitted and stop.
    if let Ok(mut agents) = Arc::try_unwrap(agents) {
        agents.stop();
    }
    eprintln!("agent-service: SIGTERM: requests finished, agents drained, exiting");
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let spin_iters = args.spin_ns.map(spin::calibrate);
    if let (Some(ns), Some(iters)) = (args.spin_ns, spin_iters)
        && ns > 0
    {
        eprintln!("spin: {iters} iterations a request (about {ns} ns)");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers.max(1))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("agent-service: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args, spin_iters)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("agent-service: {err}");
            ExitCode::FAILURE
        }
    }
}
