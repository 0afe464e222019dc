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
use std::time::{Duration, Instant};

use mty_lockstep::{Summary, Usage, clock_overhead_ns, new_histogram};
use mty_runtime::{MailboxReceiver, MailboxSender, Policy, SmallPayload};
use tokio::sync::mpsc;

use crate::args::Args;
use crate::report::{LatencyReport, report, serve_lockstep};
use crate::shared::PolicyArg;

/// The mailbox's byte budget in the measured workload: ample, so only count matters.
const BYTE_BUDGET: usize = 64 * 1024;

/// `mty-bench agent_send_latency`.
pub fn mailbox(args: &Args) -> LatencyReport {
    let policy = match args.policy {
        PolicyArg::Block => Policy::Block,
        PolicyArg::Fail => Policy::Fail,
    };
    let (tx, mut rx) = args
        .mailbox(args.capacity, BYTE_BUDGET.max(args.payload_bytes))
        .policy(policy)
        .open::<SmallPayload>();
    // Under Policy::Fail, `send` is `try_send`: the policy decides, as a user would see it.
    run(args, |rt, bytes, inject, n, values| {
        mailbox_trips(rt, &tx, &mut rx, bytes, inject, n, values)
    })
}

/// `mty-bench tokio_mpsc_send_latency`: the same protocol on a bare tokio channel.
pub fn tokio_mpsc(args: &Args) -> LatencyReport {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<SmallPayload>(args.capacity);
    match args.policy {
        PolicyArg::Block => run(args, |rt, bytes, inject, n, values| {
            tokio_send_trips(rt, &tx, &mut rx, bytes, inject, n, values)
        }),
        PolicyArg::Fail => run(args, |rt, bytes, inject, n, values| {
            tokio_try_send_trips(rt, &tx, &mut rx, bytes, inject, n, values)
        }),
    }
}

fn run(
    args: &Args,
    mut trips: impl FnMut(&tokio::runtime::Runtime, &[u8], Duration, u64, Option<&mut Vec<u64>>),
) -> LatencyReport {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread tokio runtime");
    let bytes: Vec<u8> = (0..args.payload_bytes).map(|i| i as u8).collect();
    let inject = Duration::from_nanos(args.inject_ns);
    let mut trips = |n: u64, values: Option<&mut Vec<u64>>| trips(&rt, &bytes, inject, n, values);
    if args.untimed {
        trips(args.warmup + args.messages, None);
        // Nothing that varies from run to run: no clock, no /proc read (its parse time
        // depends on the numbers in it).
        return report(
            args,
            Summary::new(&new_histogram(), 0, Usage::default()),
            None,
        );
    }
    let mut values = Vec::with_capacity(args.warmup.max(args.messages) as usize);
    trips(args.warmup, Some(&mut values));
    if let Some(batch) = args.lockstep {
        return serve_lockstep(args, batch, |n, values| trips(n, Some(values)));
    }
    values.clear();
    trips(args.messages, Some(&mut values));
    let mut hist = new_histogram();
    for &v in &values {
        hist.saturating_record(v);
    }
    let summary = Summary::new(&hist, clock_overhead_ns(), Usage::of_this_process());
    report(args, summary, args.emit_values.then_some(values))
}

/// A workload's loop: `n` round trips; with `values`, each one's timed region in ns (plus
/// `inject`, when calibrating) is pushed. The message is built before the clock starts,
/// checked and dropped after it stops.
///
/// The round trip is written into the loop, as the Go comparator's is. Through an
/// `AsyncFnMut` closure, as it was, each message moved into the closure's future and the
/// received one out of it, inside the timed region: about a quarter of the mailbox's figure
/// on this VM kind, on every Rust row alike
/// (`docs/results/2026-12-06-mailbox-closing-and-send-path.md`, "Fewer moves, and the harness").
///
/// One loop, never inlined, for every mode (`--untimed`, the warm-up, a whole run, each
/// lockstep batch), as `agent_send_contended` has: PGO lays code out by the counts of the
/// functions the training ran, and the training runs whole runs. When lockstep batches had
/// a loop of their own, nothing had trained it and PGO optimised it as cold, so lockstep
/// measured another build than whole runs did (`docs/findings.md`, "the cold-loop trap").
macro_rules! round_trips {
    ($name:ident($tx:ident: $txt:ty, $rx:ident: $rxt:ty), |$msg:ident| $trip:block) => {
        #[inline(never)]
        fn $name(
            rt: &tokio::runtime::Runtime,
            $tx: $txt,
            $rx: $rxt,
            bytes: &[u8],
            inject: Duration,
            n: u64,
            mut values: Option<&mut Vec<u64>>,
        ) {
            rt.block_on(async {
                for _ in 0..n {
                    let $msg = SmallPayload::copy_from(bytes);
                    let start = values.is_some().then(Instant::now);
                    let got: SmallPayload = $trip;
                    if let (Some(start), Some(values)) = (start, values.as_deref_mut()) {
                        values.push((start.elapsed() + inject).as_nanos() as u64);
                    }
                    assert_eq!(
                        got.len(),
                        bytes.len(),
                        "the channel returned another message"
                    );
                    black_box(got);
                }
            })
        }
    };
}

round_trips!(
    mailbox_trips(tx: &MailboxSender<SmallPayload>, rx: &mut MailboxReceiver<SmallPayload>),
    |msg| {
        tx.send(msg).await.expect("the receiver is alive");
        rx.recv().await.expect("the message just sent")
    }
);

round_trips!(
    tokio_send_trips(tx: &mpsc::Sender<SmallPayload>, rx: &mut mpsc::Receiver<SmallPayload>),
    |msg| {
        tx.send(msg).await.expect("the receiver is alive");
        rx.recv().await.expect("the message just sent")
    }
);

round_trips!(
    tokio_try_send_trips(tx: &mpsc::Sender<SmallPayload>, rx: &mut mpsc::Receiver<SmallPayload>),
    |msg| {
        tx.try_send(msg)
            .expect("one message at a time never fills 8 slots");
        rx.recv().await.expect("the message just sent")
    }
);
