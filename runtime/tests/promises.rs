//! The spec's promises at their edges, one test per defect found by reading the code against
//! `src/lib.rs`: the byte budget cannot wrap, the atomic word's frame count cannot overflow,
//! and a sender waiting for bytes is served before later senders (no starvation). The races
//! (the switch, the stash) are loom's (`src/loom_tests.rs`) and the soak's (`tests/soak.rs`).

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use mty_runtime::{Admission, ByteSize, Mailbox, SendError, SmallPayload};

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

/// A message that claims any size, as a user's own `ByteSize` may.
#[derive(Debug)]
struct Claim(usize);

impl ByteSize for Claim {
    fn byte_size(&self) -> usize {
        self.0
    }
}

/// `usize::MAX` used as "no limit" takes the locked design; its check `in_use + bytes`
/// wrapped and admitted past the budget (or panicked, in a debug build).
#[test]
fn a_budget_of_usize_max_never_wraps_and_admits_past_it() {
    let (tx, mut rx) = Mailbox::new(4, usize::MAX).open::<Claim>();
    tx.try_send(Claim(usize::MAX - 10)).unwrap();
    match tx.try_send(Claim(20)) {
        Err(SendError::Full(Claim(20))) => {}
        other => panic!("20 more bytes on top of usize::MAX - 10 must be Full, got {other:?}"),
    }
    tx.try_send(Claim(10)).unwrap();
    assert_eq!(rx.pool_stats().bytes_in_use, usize::MAX);
    assert!(matches!(tx.try_send(Claim(1)), Err(SendError::Full(_))));
    assert_eq!(rx.try_recv().unwrap().0, usize::MAX - 10);
    assert_eq!(rx.try_recv().unwrap().0, 10);
    assert_eq!(rx.pool_stats().bytes_in_use, 0);
}

/// The atomic word counts frames in 23 bits, and a mailbox of capacity C holds C + 1 frames
/// for a moment (`tests/closing.rs`): a mailbox of 2^23 - 1 slots or more cannot use it, and
/// asking for it says so instead of wrapping later; one slot fewer can.
#[test]
#[should_panic(expected = "capacity below 2^23 - 1 messages (capacity 8388607")]
fn the_atomic_design_refuses_a_capacity_it_cannot_count() {
    let _ = Mailbox::new((1 << 23) - 2, 1 << 20).admission(Admission::Atomic);
    let _ = Mailbox::new((1 << 23) - 1, 1 << 20).admission(Admission::Atomic);
}

fn bytes(n: usize) -> SmallPayload {
    SmallPayload::copy_from(&vec![7; n])
}

/// Deterministic: a large send waiting for bytes is not overtaken by small sends that find
/// a few bytes free, neither by `try_send` nor by a `send` that would not have to wait.
#[test]
fn a_sender_waiting_for_bytes_is_not_overtaken() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(16, 100).open::<SmallPayload>();
        for _ in 0..5 {
            tx.send(bytes(10)).await.unwrap();
        }
        let mut large = pin!(tx.send(bytes(90)));
        assert!(
            poll_once(large.as_mut()).is_pending(),
            "50 of 100 bytes in use"
        );
        // A stream of small messages: one received, one sent, with the large one waiting.
        // Before the fix, every small send found 10 bytes free and took them, so the large
        // one never saw 90 free.
        let mut small_sent_while_waiting = 0;
        let mut large_done = false;
        for _ in 0..20 {
            rx.recv().await.unwrap();
            if let Poll::Ready(done) = poll_once(large.as_mut()) {
                done.unwrap();
                large_done = true;
                break;
            }
            if tx.try_send(bytes(10)).is_ok() {
                small_sent_while_waiting += 1;
            }
        }
        assert_eq!(
            small_sent_while_waiting, 0,
            "small sends took bytes ahead of the large sender waiting for them"
        );
        assert!(
            large_done,
            "the large send completed once the earlier messages were received"
        );
        // It is the next message after the five that were there before it.
        let mut received = Vec::new();
        while let Ok(msg) = rx.try_recv() {
            received.push(msg.len());
        }
        assert_eq!(received.last(), Some(&90), "{received:?}");
    });
}

/// A message charging `size` bytes, numbered when its send began.
#[derive(Debug)]
struct Numbered {
    size: usize,
    started: u64,
}

impl ByteSize for Numbered {
    fn byte_size(&self) -> usize {
        self.size
    }
}

/// Threads: four senders stream 10-byte messages into a budget of 100 bytes while the
/// receiver keeps up; then the receiver pauses until the budget is full, one sender asks for
/// 90 bytes (it must wait: nothing is free) and the receiver goes on. The large message gets
/// through, and at most one small message per other sending thread whose send began after
/// the large one was queued is received before it (the crate docs' bound, "Fairness"). Before
/// the FIFO queue, small sends kept taking the bytes as they came back.
#[test]
fn one_large_sender_among_many_small_ones_gets_through_within_the_bound() {
    const SMALL_SENDERS: usize = 4;
    const EACH: u64 = 20_000;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    // Slots to spare: the large send never waits for a slot, only for bytes.
    let (tx, mut rx) = Mailbox::new(64, 100).open::<Numbered>();
    let clock = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let paused = Arc::new(AtomicBool::new(false));
    let queued_at = Arc::new(AtomicU64::new(u64::MAX));
    let small: Vec<_> = (0..SMALL_SENDERS)
        .map(|_| {
            let (tx, clock, stop) = (tx.clone(), clock.clone(), stop.clone());
            runtime.spawn(async move {
                for _ in 0..EACH {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let started = clock.fetch_add(1, Ordering::SeqCst);
                    if tx.send(Numbered { size: 10, started }).await.is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    let large = {
        let (tx, clock, paused, queued_at) =
            (tx.clone(), clock.clone(), paused.clone(), queued_at.clone());
        runtime.spawn(async move {
            while !paused.load(Ordering::SeqCst) || tx.pool_stats().bytes_in_use < 100 {
                tokio::task::yield_now().await;
            }
            // Unconstrained: its first poll is the send itself, never a yield for the task's
            // cooperative budget, so after it the send is queued for the bytes.
            let mut send = std::pin::pin!(tokio::task::unconstrained(tx.send(Numbered {
                size: 90,
                started: 0
            })));
            let mut first = true;
            std::future::poll_fn(|cx| {
                let polled = send.as_mut().poll(cx);
                if first {
                    first = false;
                    assert!(polled.is_pending(), "the budget was full: it must wait");
                    queued_at.store(clock.fetch_add(1, Ordering::SeqCst), Ordering::SeqCst);
                }
                polled
            })
            .await
            .unwrap();
        })
    };
    drop(tx);
    let overtakers = runtime.block_on(async {
        for _ in 0..1000 {
            rx.recv().await.unwrap();
        }
        paused.store(true, Ordering::SeqCst);
        while queued_at.load(Ordering::SeqCst) == u64::MAX {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let at = queued_at.load(Ordering::SeqCst);
        let mut overtakers = 0;
        while let Some(msg) = rx.recv().await {
            if msg.size == 90 {
                return Some(overtakers);
            }
            if msg.started > at {
                overtakers += 1;
            }
        }
        None
    });
    stop.store(true, Ordering::Relaxed);
    drop(rx);
    runtime.block_on(async {
        large.await.unwrap();
        for task in small {
            task.await.unwrap();
        }
    });
    let overtakers = overtakers.expect("the large message arrived");
    assert!(
        overtakers <= SMALL_SENDERS,
        "{overtakers} small messages whose sends began after the large one was queued were \
         received before it (bound {SMALL_SENDERS})"
    );
}

/// A sender served its bytes but not yet polled when the receiver goes is told `Closed`
/// with its message, not `Ok` for a message no one will read (found in review of the FIFO
/// queue).
#[test]
fn a_sender_served_bytes_as_the_receiver_goes_gets_closed() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(2, 100).open::<SmallPayload>();
        tx.send(bytes(100)).await.unwrap();
        let mut waiting = pin!(tx.send(bytes(60)));
        assert!(poll_once(waiting.as_mut()).is_pending(), "waits for bytes");
        assert_eq!(rx.recv().await.unwrap().len(), 100); // serves the waiter its 60 bytes
        drop(rx);
        match poll_once(waiting.as_mut()) {
            Poll::Ready(Err(SendError::Closed(msg))) => assert_eq!(msg.len(), 60),
            other => panic!("expected Closed(msg), got {other:?}"),
        }
        assert_eq!(tx.pool_stats().bytes_in_use, 0, "its bytes were given back");
    });
}
