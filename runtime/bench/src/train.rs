//! `mty-bench train`: the PGO training mix.
//!
//! Deliberately not the measured workload: it drives the same executable's mailbox and
//! tokio channel code through both policies, every payload kind, several senders on one and
//! on two worker threads, agents, and full-mailbox back-pressure on count and on bytes.
//! `--messages N` scales every phase; `--policy` and `--payload-bytes` are ignored (the mix
//! covers them all).

use std::hint::black_box;
use std::time::Instant;

use mty_runtime::{Mailbox, MailboxSender, Policy, SendError, SmallPayload, spawn_agent};
use serde::Serialize;

use crate::args::Args;
use crate::latency::{self, CAPACITY};

#[derive(Debug, Serialize)]
pub struct TrainReport {
    pub workload: &'static str,
    pub messages: u64,
    /// Messages received, over all phases.
    pub delivered: u64,
    /// `try_send` calls refused with `Full`.
    pub refused_full: u64,
    pub elapsed_ms: u64,
}

/// Payload sizes cycled through: empty (fast path), inline, and heap.
const SIZES: [usize; 6] = [0, 1, 16, 64, 65, 512];

pub fn run(args: &Args) -> TrainReport {
    let start = Instant::now();
    let n = args.messages;
    let mut delivered = 0;
    let mut refused_full = 0;

    // The per-message round trip the measured workloads make, within a mix of payload sizes
    // and both policies. Empty payloads under Block belong in it: they are the runtime's fast
    // path, and a mix without them made PGO lay that branch out as cold (measured: the PGO
    // build ran 15 % fewer instructions per message yet was 16 % slower in wall time).
    for (policy, bytes) in [
        ("block", 0),
        ("block", 1),
        ("block", 200),
        ("fail", 0),
        ("fail", 64),
    ] {
        let mut a = args.clone();
        // Empty payloads, one at a time, are the runtime's fast path and most of what a
        // latency-bound user runs: eight times the weight of the other sizes. Measured: with
        // equal weights the training got 57-70 % of an oracle profile's gain on the empty round
        // trips (`Semaphore::try_acquire` at 0.8 % of the training's count against 7.7 % of the
        // `try_send` loop's); at twice the weight, 97-118 %, until the single-sender lane made
        // these round trips so cheap that the several-sender parts below outweighed them
        // (`send_single` 1.0 % of the training's count against 10.7 % of the `send` loop's;
        // 64-65 % of the oracle's gain).
        a.messages = if bytes == 0 { n } else { n / 8 }.max(1);
        a.warmup = 0;
        a.payload_bytes = bytes;
        a.policy = if policy == "block" {
            crate::args::PolicyArg::Block
        } else {
            crate::args::PolicyArg::Fail
        };
        black_box(latency::mailbox(&a));
        black_box(latency::tokio_mpsc(&a));
        delivered += 2 * a.messages;
    }

    let current = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread tokio runtime");
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("a two-worker tokio runtime");

    // Several Block senders against a byte budget that fills: back-pressure on bytes.
    delivered += current.block_on(senders_under_pressure(4, n / 4, 1024, payload));
    delivered += multi.block_on(senders_under_pressure(4, n / 4, 1024, payload));
    // The same with 32-byte messages and a budget of four of them, on two workers: the shape
    // of `agent_send_contended` (measured: without it, one training of two got 70 % [60, 83]
    // of an oracle profile's gain on that workload).
    delivered += multi.block_on(senders_under_pressure(4, n / 4, 128, inline32));

    // Fail policy: fill the mailbox until it refuses, then drain it.
    let (r_delivered, r_refused) = current.block_on(fill_and_drain(n / 4));
    delivered += r_delivered;
    refused_full += r_refused;

    // Agents: a handler per message, stopped explicitly and by dropping every sender.
    delivered += multi.block_on(agents(n / 4));

    TrainReport {
        workload: "train",
        messages: n,
        delivered,
        refused_full,
        elapsed_ms: start.elapsed().as_millis() as u64,
    }
}

fn inline32(_: u64) -> SmallPayload {
    SmallPayload::copy_from(&[0x5A; 32])
}

fn payload(i: u64) -> SmallPayload {
    const BYTES: [u8; 512] = [0xA5; 512];
    SmallPayload::copy_from(&BYTES[..SIZES[i as usize % SIZES.len()]])
}

async fn senders_under_pressure(
    senders: u64,
    each: u64,
    byte_budget: usize,
    payload: fn(u64) -> SmallPayload,
) -> u64 {
    let (tx, mut rx) = Mailbox::new(CAPACITY, byte_budget).open::<SmallPayload>();
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
