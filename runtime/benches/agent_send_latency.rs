//! Criterion micro-benchmarks of one send→recv round trip through a mailbox, beside the same
//! shape on bare `tokio::sync::mpsc`. Run: `cargo bench -p mty-runtime --bench agent_send_latency`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use mty_runtime::{Admission, Mailbox, Policy, SmallPayload};
use tokio::runtime::Runtime;

const CAPACITY: usize = 8;
const BUDGET: usize = 64 * 1024;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("current-thread runtime")
}

/// Times `iters` send→recv pairs of `make()` messages through a Block-policy mailbox.
fn mailbox_send_recv(rt: &Runtime, iters: u64, make: fn() -> SmallPayload) -> Duration {
    rt.block_on(async {
        let (tx, mut rx) = Mailbox::new(CAPACITY, BUDGET).open::<SmallPayload>();
        let start = Instant::now();
        for _ in 0..iters {
            tx.send(make()).await.expect("send");
            black_box(rx.recv().await.expect("recv"));
        }
        start.elapsed()
    })
}

/// Times `iters` 32-byte inline messages sent by four tasks on a two-worker runtime to one
/// receiver, through a mailbox whose byte budget (128 bytes: four messages) binds before
/// its count: the time per message under contention, with `admission`'s design.
fn contended(rt: &Runtime, iters: u64, admission: Admission) -> Duration {
    const SENDERS: u64 = 4;
    rt.block_on(async {
        let (tx, mut rx) = Mailbox::new(CAPACITY, 128)
            .admission(admission)
            .open::<SmallPayload>();
        let start = Instant::now();
        let senders: Vec<_> = (0..SENDERS)
            .map(|i| {
                let tx = tx.clone();
                let share = iters / SENDERS + u64::from(i < iters % SENDERS);
                tokio::spawn(async move {
                    for _ in 0..share {
                        tx.send(SmallPayload::copy_from(&[7; 32]))
                            .await
                            .expect("send");
                    }
                })
            })
            .collect();
        for _ in 0..iters {
            black_box(rx.recv().await.expect("recv"));
        }
        for s in senders {
            s.await.expect("a sender");
        }
        start.elapsed()
    })
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("agent_send_latency");
    group.bench_function("send_recv_empty", |b| {
        b.iter_custom(|iters| mailbox_send_recv(&rt, iters, || SmallPayload::Empty))
    });
    group.bench_function("send_recv_inline_1", |b| {
        b.iter_custom(|iters| mailbox_send_recv(&rt, iters, || SmallPayload::copy_from(&[1])))
    });
    group.bench_function("try_send_empty", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let (tx, mut rx) = Mailbox::new(CAPACITY, BUDGET)
                    .policy(Policy::Fail)
                    .open::<SmallPayload>();
                let start = Instant::now();
                for _ in 0..iters {
                    tx.try_send(SmallPayload::Empty).expect("try_send");
                    black_box(rx.recv().await.expect("recv"));
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("tokio_mpsc_send_recv_empty", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let (tx, mut rx) = tokio::sync::mpsc::channel::<SmallPayload>(CAPACITY);
                let start = Instant::now();
                for _ in 0..iters {
                    tx.send(SmallPayload::Empty).await.expect("send");
                    black_box(rx.recv().await.expect("recv"));
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("tokio_mpsc_send_recv_inline_1", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let (tx, mut rx) = tokio::sync::mpsc::channel::<SmallPayload>(CAPACITY);
                let start = Instant::now();
                for _ in 0..iters {
                    tx.send(SmallPayload::copy_from(&[1])).await.expect("send");
                    black_box(rx.recv().await.expect("recv"));
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("tokio_mpsc_try_send_empty", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let (tx, mut rx) = tokio::sync::mpsc::channel::<SmallPayload>(CAPACITY);
                let start = Instant::now();
                for _ in 0..iters {
                    tx.try_send(SmallPayload::Empty).expect("try_send");
                    black_box(rx.recv().await.expect("recv"));
                }
                start.elapsed()
            })
        })
    });
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("multi-thread runtime");
    group.bench_function("send_recv_contended_inline", |b| {
        b.iter_custom(|iters| contended(&multi, iters, Admission::Locked))
    });
    group.bench_function("send_recv_contended_inline_atomic", |b| {
        b.iter_custom(|iters| contended(&multi, iters, Admission::Atomic))
    });
    group.finish();
}

criterion_group!(agent_send_latency, benches);
criterion_main!(agent_send_latency);
