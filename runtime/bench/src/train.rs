//! `mty-bench train`: the PGO training mix, in phases.
//!
//! Deliberately other inputs than the measured workloads: it drives the same executable's
//! mailbox and tokio channel code, and the measured workloads' own harnesses (code no
//! training runs is compiled as cold), through both policies, every payload kind, several
//! senders on one and on two worker threads, agents, and full-mailbox back-pressure on count
//! and on bytes.
//! `--phase NAME` runs one phase (each a training command of its own, so that the pipeline
//! weighs them: `train.workloads[].weight`); without it every phase runs once. `--messages N`
//! is each phase's size; `--policy` and `--payload-bytes` are ignored (the phases cover them).

use std::hint::black_box;
use std::time::Instant;

use mty_runtime::{Mailbox, MailboxSender, Policy, SendError, SmallPayload, spawn_agent};
use serde::Serialize;

use crate::args::Args;
use crate::shared::{CAPACITY, PHASES, Phase, PolicyArg};
use crate::{contended, latency};

#[derive(Debug, Serialize)]
pub struct TrainReport {
    pub workload: &'static str,
    /// The phases run, in order.
    pub phases: Vec<&'static str>,
    pub messages: u64,
    /// Messages received, over all phases.
    pub delivered: u64,
    /// `try_send` calls refused with `Full`.
    pub refused_full: u64,
    pub elapsed_ms: u64,
}

pub fn run(args: &Args) -> TrainReport {
    let start = Instant::now();
    let phases: Vec<Phase> = match args.phase {
        Some(p) => vec![p],
        None => PHASES.to_vec(),
    };
    let mut report = TrainReport {
        workload: "train",
        phases: phases.iter().map(|p| p.name()).collect(),
        messages: args.messages,
        delivered: 0,
        refused_full: 0,
        elapsed_ms: 0,
    };
    for phase in phases {
        let (delivered, refused) = run_phase(phase, args);
        report.delivered += delivered;
        report.refused_full += refused;
    }
    report.elapsed_ms = start.elapsed().as_millis() as u64;
    report
}

/// One phase of `n` messages a part: (messages delivered, sends refused as full).
fn run_phase(phase: Phase, args: &Args) -> (u64, u64) {
    let n = args.messages;
    let round_trips = |parts: &[(PolicyArg, usize)], tokio: bool| {
        for &(policy, bytes) in parts {
            let mut a = args.clone();
            a.messages = n;
            a.warmup = 0;
            a.payload_bytes = bytes;
            a.policy = policy;
            if tokio {
                black_box(latency::tokio_mpsc(&a));
            } else {
                black_box(latency::mailbox(&a));
            }
        }
        (parts.len() as u64 * n, 0)
    };
    let current = || {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread tokio runtime")
    };
    let multi = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("a two-worker tokio runtime")
    };
    use PolicyArg::{Block, Fail};
    match phase {
        Phase::MailboxEmpty => round_trips(&[(Block, 0), (Fail, 0)], false),
        Phase::MailboxPayloads => round_trips(&[(Block, 1), (Block, 200), (Fail, 64)], false),
        Phase::Tokio => round_trips(&[(Block, 0), (Fail, 0), (Block, 200)], true),
        Phase::Pressure | Phase::PressureCount => {
            let (capacity, budget) = match phase {
                Phase::Pressure => (LOOSE, 1024),
                _ => (CAPACITY, UNBOUNDED_BYTES),
            };
            let one = current().block_on(senders_under_pressure(
                4,
                n / 4,
                (capacity, budget),
                payload,
            ));
            let two = multi().block_on(senders_under_pressure(
                4,
                n / 4,
                (capacity, budget),
                payload,
            ));
            (one + two, 0)
        }
        Phase::Contended => {
            let mut a = args.clone();
            a.messages = n;
            a.warmup = 0;
            a.senders = 6;
            a.workers = 2;
            a.payload_bytes = 24;
            a.budget_bytes = None;
            a.pin_workers = true;
            a.lockstep = None;
            black_box(contended::run(&a));
            (n, 0)
        }
        Phase::FillAndDrain => current().block_on(fill_and_drain(n)),
        Phase::Agents => (multi().block_on(agents(n)), 0),
    }
}

/// A channel count the byte budget binds long before: five of [`SIZES`]' six payloads carry
/// bytes (one at least), so 1024 bytes are taken well before 1024 messages queue.
const LOOSE: usize = 1024;

/// A byte budget that never binds and still fits the atomic admission the measured
/// workloads take (a budget of 2^40 or more would switch it to the locked one).
const UNBOUNDED_BYTES: usize = 1 << 30;

/// Payload sizes cycled through: empty (fast path), inline, and heap.
const SIZES: [usize; 6] = [0, 1, 16, 64, 65, 512];

fn payload(i: u64) -> SmallPayload {
    const BYTES: [u8; 512] = [0xA5; 512];
    SmallPayload::copy_from(&BYTES[..SIZES[i as usize % SIZES.len()]])
}

async fn senders_under_pressure(
    senders: u64,
    each: u64,
    (capacity, byte_budget): (usize, usize),
    payload: fn(u64) -> SmallPayload,
) -> u64 {
    let (tx, mut rx) = Mailbox::new(capacity, byte_budget).open::<SmallPayload>();
    let tasks: Vec<_> = (0..senders)
        .map(|_| {
            let tx = tx.clone();
            tokio::spawn(async move {
                for i in 0..each {
                    tx.send(payload(i)).await.expect("the receiver is alive");
                }
            })
        })
        .collect();
    drop(tx);
    let mut got = 0;
    while let Some(msg) = rx.recv().await {
        black_box(msg);
        got += 1;
    }
    for task in tasks {
        task.await.expect("a sender task");
    }
    assert_eq!(got, senders * each, "every message arrives");
    got
}

async fn fill_and_drain(total: u64) -> (u64, u64) {
    let (tx, mut rx) = Mailbox::new(CAPACITY, 700)
        .policy(Policy::Fail)
        .open::<SmallPayload>();
    let (mut sent, mut refused, mut got, mut i) = (0, 0, 0, 0);
    while sent < total {
        match tx.send(payload(i)).await {
            Ok(()) => sent += 1,
            Err(SendError::Full(msg)) => {
                refused += 1;
                black_box(msg);
                while let Ok(msg) = rx.try_recv() {
                    black_box(msg);
                    got += 1;
                }
            }
            Err(other) => panic!("unexpected send error: {other}"),
        }
        i += 1;
    }
    drop(tx);
    while let Some(msg) = rx.recv().await {
        black_box(msg);
        got += 1;
    }
    assert_eq!(got, sent, "every admitted message arrives");
    (got, refused)
}

async fn agents(total: u64) -> u64 {
    let handle = tokio::runtime::Handle::current();
    let mut processed = 0;
    for explicit_stop in [false, true] {
        let (tx, mut agent) =
            spawn_agent(&handle, Mailbox::new(CAPACITY, 4096), |msg| async move {
                black_box(msg);
            });
        let senders: Vec<MailboxSender<SmallPayload>> = (0..3).map(|_| tx.clone()).collect();
        drop(tx);
        let per = total / 2 / senders.len() as u64;
        let tasks: Vec<_> = senders
            .into_iter()
            .map(|tx| {
                tokio::spawn(async move {
                    for i in 0..per {
                        tx.send(payload(i)).await.expect("the agent is alive");
                    }
                    tx
                })
            })
            .collect();
        let mut keep = Vec::new();
        for task in tasks {
            keep.push(task.await.expect("a sender task"));
        }
        if explicit_stop {
            agent.stop();
        } else {
            drop(keep.drain(..));
        }
        let report = agent.join().await;
        assert_eq!(
            report.processed,
            3 * per,
            "the agent drains what was admitted"
        );
        processed += report.processed;
    }
    processed
}
