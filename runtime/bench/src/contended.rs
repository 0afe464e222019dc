//! `mty-bench agent_send_contended`: several senders, one receiver, across threads.
//!
//! `--senders` tasks (4 by default) on a multi-thread tokio runtime of `--workers` threads
//! (2 by default) send `--payload-bytes` messages (at least 8; up to 64 they are inline, past
//! that on the heap) into one mailbox of capacity 8, whose byte budget (`--budget-bytes`,
//! by default four messages' worth) binds before its count does: senders wait for bytes as
//! well as for slots, and admit and release through the pool on every message. One
//! receiver task takes the messages.
//!
//! A message's latency runs from just before it is built and sent (its first 8 bytes carry
//! that instant) to just after the `recv` that returns it, on whichever threads ran them
//! (`Instant` is one monotonic clock for the process). It includes the wait for a slot or
//! bytes and the time queued: what contention costs. Each batch spawns the senders afresh
//! (sender clones made outside the timed regions) and ends when the receiver has every
//! message.

use std::hint::black_box;
use std::time::Instant;

use mty_lockstep::{Summary, Usage, clock_overhead_ns, new_histogram};
use mty_runtime::{MailboxReceiver, MailboxSender, SmallPayload};

use crate::args::Args;
use crate::report::{LatencyReport, report, serve_lockstep};

/// `mty-bench agent_send_contended`.
pub fn run(args: &Args) -> LatencyReport {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(args.workers);
    if args.pin_workers {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        builder.on_thread_start(move || {
            let cpu = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % cpus;
            pin_this_thread(cpu);
        });
    }
    let rt = builder.build().expect("a multi-thread tokio runtime");
    let budget = args.budget_bytes.unwrap_or(4 * args.payload_bytes);
    let (tx, rx) = args.mailbox(args.capacity, budget).open::<SmallPayload>();
    let mut load = Load {
        tx,
        rx: Some(rx),
        senders: args.senders,
        bytes: args.payload_bytes,
        base: Instant::now(),
    };
    if args.untimed {
        // Counting instructions: the same sends and receives, no clock read.
        load.batch(&rt, args.warmup + args.messages, None);
        return report(
            args,
            Summary::new(&new_histogram(), 0, Usage::default()),
            None,
        );
    }
    let mut values = Vec::new();
    load.batch(&rt, args.warmup, Some(&mut values));
    if let Some(batch) = args.lockstep {
        return serve_lockstep(args, batch, |n, values| load.batch(&rt, n, Some(values)));
    }
    values.clear();
    load.batch(&rt, args.messages, Some(&mut values));
    let mut hist = new_histogram();
    for &v in &values {
        hist.saturating_record(v);
    }
    let summary = Summary::new(&hist, clock_overhead_ns(), Usage::of_this_process());
    report(args, summary, args.emit_values.then_some(values))
}

/// Pins the calling thread to `cpu` (sched_setaffinity of thread 0: the caller).
fn pin_this_thread(cpu: usize) {
    // SAFETY: cpu_set_t is a plain bit array, valid all zeros; CPU_SET bounds-checks `cpu`;
    // `set` outlives the call, whose size argument is its own.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(
        rc,
        0,
        "pinning a runtime thread to CPU {cpu}: {}",
        std::io::Error::last_os_error()
    );
}

struct Load {
    tx: MailboxSender<SmallPayload>,
    /// Lent to each batch's receiver task and given back when it ends.
    rx: Option<MailboxReceiver<SmallPayload>>,
    senders: usize,
    bytes: usize,
    /// The instant every stamp counts from.
    base: Instant,
}

impl Load {
    /// `count` messages shared among the senders; with `values`, each one's latency in ns
    /// is pushed (in the order received).
    fn batch(&mut self, rt: &tokio::runtime::Runtime, count: u64, values: Option<&mut Vec<u64>>) {
        let timed = values.is_some();
        let mut rx = self
            .rx
            .take()
            .expect("the receiver is back after each batch");
        let senders: Vec<_> = (0..self.senders)
            .map(|i| {
                let share = count / self.senders as u64
                    + u64::from((i as u64) < count % self.senders as u64);
                (self.tx.clone(), share)
            })
            .collect();
        let (bytes, base) = (self.bytes, self.base);
        let (rx, got) = rt.block_on(async move {
            let receiver = tokio::spawn(async move {
                let mut got = Vec::with_capacity(if timed { count as usize } else { 0 });
                for _ in 0..count {
                    let msg = rx.recv().await.expect("every sender is alive");
                    if timed {
                        let now = base.elapsed().as_nanos() as u64;
                        got.push(now.saturating_sub(stamp_of(&msg)));
                    }
                    black_box(msg);
                }
                (rx, got)
            });
            let sending: Vec<_> = senders
                .into_iter()
                .map(|(tx, share)| {
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; bytes];
                        for _ in 0..share {
                            if timed {
                                let now = base.elapsed().as_nanos() as u64;
                                buf[..8].copy_from_slice(&now.to_le_bytes());
                            }
                            let msg = SmallPayload::copy_from(&buf);
                            tx.send(msg).await.expect("the receiver is alive");
                        }
                    })
                })
                .collect();
            for s in sending {
                s.await.expect("a sender task");
            }
            receiver.await.expect("the receiver task")
        });
        self.rx = Some(rx);
        if let Some(values) = values {
            values.extend(got);
        }
    }
}

/// The send instant a message carries in its first 8 bytes.
fn stamp_of(msg: &SmallPayload) -> u64 {
    let mut stamp = [0u8; 8];
    stamp.copy_from_slice(&msg.as_slice()[..8]);
    u64::from_le_bytes(stamp)
}
