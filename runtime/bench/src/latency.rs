//! The measured workloads: per-message send→recv latency, one message at a time.
//!
//! The timed region of one message is exactly: `Instant::now()`, the send call (`send(..).await`
//! under `--policy block`, `try_send` under `--policy fail`), the `recv().await` that returns
//! the same message (for the mailbox this includes giving its bytes back), `Instant::now()`.
//! Building the payload before, and dropping the received payload after, are outside it.
//! Sender and receiver run in one task on a current-thread tokio runtime, so the receive
//! never parks: this times the channel's own path, not the scheduler's. The reported
//! `clock_overhead_ns` (median of back-to-back `Instant::now()` pairs) is included in every
//! sample and is NOT subtracted.

use std::hint::black_box;
use std::time::Instant;

use hdrhistogram::Histogram;
use mty_runtime::{Mailbox, Policy, SmallPayload};
use serde::Serialize;

use crate::args::{Args, PolicyArg};

/// Slots in the measured channel, for the mailbox and the bare tokio comparator alike.
pub const CAPACITY: usize = 8;
/// The mailbox's byte budget in the measured workload: ample, so only count matters.
pub const BYTE_BUDGET: usize = 64 * 1024;

#[derive(Debug, Serialize)]
pub struct LatencyReport {
    pub workload: &'static str,
    pub messages: u64,
    pub warmup: u64,
    pub policy: &'static str,
    pub payload_bytes: usize,
    pub capacity: usize,
    pub median_ns: u64,
    pub p95_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    pub clock_overhead_ns: u64,
    /// `[quantile, ns]` pairs of the distribution, for plots.
    pub percentiles: Vec<(f64, u64)>,
    /// This process's CPU time and context switches, to tell disturbed runs.
    #[serde(flatten)]
    pub usage: crate::usage::Usage,
    /// Every measured latency, in order (only with `--emit-values`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values_ns: Option<Vec<u64>>,
}

/// The quantiles reported in `percentiles`.
const QUANTILES: [f64; 16] = [
    0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999,
];

/// `mty-bench agent_send_latency`.
pub fn mailbox(args: &Args) -> LatencyReport {
    let policy = match args.policy {
        PolicyArg::Block => Policy::Block,
        PolicyArg::Fail => Policy::Fail,
    };
    let (tx, mut rx) = Mailbox::new(CAPACITY, BYTE_BUDGET.max(args.payload_bytes))
        .policy(policy)
        .open::<SmallPayload>();
    // Under Policy::Fail, `send` is `try_send`: the policy decides, as a user would see it.
    run(args, async |msg| {
        tx.send(msg).await.expect("the receiver is alive");
        rx.recv().await.expect("the message just sent")
    })
}

/// `mty-bench tokio_mpsc_send_latency`: the same protocol on a bare tokio channel.
pub fn tokio_mpsc(args: &Args) -> LatencyReport {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<SmallPayload>(CAPACITY);
    match args.policy {
        PolicyArg::Block => run(args, async |msg| {
            tx.send(msg).await.expect("the receiver is alive");
            rx.recv().await.expect("the message just sent")
        }),
        PolicyArg::Fail => run(args, async |msg| {
            tx.try_send(msg)
                .expect("one message at a time never fills 8 slots");
            rx.recv().await.expect("the message just sent")
        }),
    }
}

fn run(
    args: &Args,
    mut round_trip: impl AsyncFnMut(SmallPayload) -> SmallPayload,
) -> LatencyReport {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread tokio runtime");
    let bytes: Vec<u8> = (0..args.payload_bytes).map(|i| i as u8).collect();
    let mut hist = new_histogram();
    let mut values = Vec::with_capacity(if args.emit_values {
        args.messages as usize
    } else {
        0
    });
    if args.untimed {
        rt.block_on(async {
            for _ in 0..args.warmup + args.messages {
                let got = round_trip(SmallPayload::copy_from(&bytes)).await;
                assert_eq!(
                    got.len(),
                    bytes.len(),
                    "the mailbox returned another message"
                );
                black_box(got);
            }
        });
        // Nothing that varies from run to run: no clock, no /proc read (its parse time
        // depends on the numbers in it).
        return report(args, &hist, 0, crate::usage::Usage::default(), None);
    }
    rt.block_on(async {
        for i in 0..args.warmup + args.messages {
            let msg = SmallPayload::copy_from(&bytes);
            let start = Instant::now();
            let got = round_trip(msg).await;
            let elapsed = start.elapsed();
            assert_eq!(
                got.len(),
                bytes.len(),
                "the mailbox returned another message"
            );
            black_box(got);
            if i >= args.warmup {
                hist.saturating_record(elapsed.as_nanos() as u64);
                if args.emit_values {
                    values.push(elapsed.as_nanos() as u64);
                }
            }
        }
    });
    let values = args.emit_values.then_some(values);
    report(
        args,
        &hist,
        clock_overhead_ns(),
        crate::usage::Usage::of_this_process(),
        values,
    )
}

fn report(
    args: &Args,
    hist: &Histogram<u64>,
    clock_overhead_ns: u64,
    usage: crate::usage::Usage,
    values_ns: Option<Vec<u64>>,
) -> LatencyReport {
    LatencyReport {
        workload: args.workload.name(),
        messages: args.messages,
        warmup: args.warmup,
        policy: args.policy.name(),
        payload_bytes: args.payload_bytes,
        capacity: CAPACITY,
        median_ns: hist.value_at_quantile(0.5),
        p95_ns: hist.value_at_quantile(0.95),
        p99_ns: hist.value_at_quantile(0.99),
        max_ns: hist.max(),
        mean_ns: hist.mean(),
        clock_overhead_ns,
        percentiles: QUANTILES
            .iter()
            .map(|&q| (q, hist.value_at_quantile(q)))
            .collect(),
        usage,
        values_ns,
    }
}

/// Nanoseconds from 1 ns to 60 s at 3 significant figures: values below 2048 ns are exact.
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// Median cost of one timed region that contains nothing: two back-to-back `Instant::now()`.
pub fn clock_overhead_ns() -> u64 {
    let mut hist = new_histogram();
    for _ in 0..20_000 {
        let start = Instant::now();
        let elapsed = black_box(start).elapsed();
        hist.saturating_record(elapsed.as_nanos() as u64);
    }
    hist.value_at_quantile(0.5)
}
