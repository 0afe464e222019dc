//! Criterion micro-benchmarks of one send→recv round trip through a mailbox, beside the same
//! shape on bare `tokio::sync::mpsc`. Run: `cargo bench -p mty-runtime --bench agent_send_latency`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use mty_runtime::{Mailbox, Policy, SmallPayload};
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
    group.finish();
}

criterion_group!(agent_send_latency, benches);
criterion_main!(agent_send_latency);
