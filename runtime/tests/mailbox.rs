//! The mailbox's contract, tested through its public API: ordering, back-pressure on bytes
//! and count, the empty fast path, closing, oversize messages, agents, and a 1M-message run.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use mty_runtime::{
    Admission, ByteSize, Mailbox, Policy, PoolStats, SendError, SmallPayload, spawn_agent,
};

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// Polls a future once with a waker that does nothing: tells "would wait" from "done"
/// without sleeping.
fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

fn bytes(n: usize) -> SmallPayload {
    SmallPayload::copy_from(&vec![7u8; n])
}

fn stats(slots: usize, bytes: usize, budget: usize) -> PoolStats {
    PoolStats {
        slots_in_use: slots,
        bytes_in_use: bytes,
        byte_budget: budget,
    }
}

#[test]
fn fifo_for_one_sender() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(8, 1 << 20).open::<SmallPayload>();
        for i in 0..8u8 {
            tx.send(SmallPayload::copy_from(&[i; 3])).await.unwrap();
        }
        for i in 0..8u8 {
            assert_eq!(rx.recv().await.unwrap().as_slice(), &[i; 3]);
        }
        assert_eq!(rx.pool_stats(), stats(0, 0, 1 << 20));
    });
}

#[test]
fn fail_policy_returns_full_when_bytes_run_out_although_slots_are_free() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(8, 100)
            .policy(Policy::Fail)
            .open::<SmallPayload>();
        tx.send(bytes(60)).await.unwrap();
        let second = bytes(60);
        let err = tx.send(second.clone()).await.unwrap_err();
        assert!(err.is_full(), "{err:?}");
        assert_eq!(
            err.into_inner(),
            second,
            "the refused message comes back intact"
        );
        assert_eq!(rx.len(), 1, "7 of 8 count slots were free");
        assert_eq!(tx.pool_stats(), stats(1, 60, 100));
        // try_send refuses the same way under either policy.
        assert!(tx.try_send(bytes(41)).unwrap_err().is_full());
        tx.try_send(bytes(40)).unwrap();
        assert_eq!(tx.pool_stats(), stats(2, 100, 100));
        rx.recv().await.unwrap();
        rx.recv().await.unwrap();
        assert_eq!(tx.pool_stats(), stats(0, 0, 100));
    });
}

#[test]
fn fail_policy_returns_full_when_count_runs_out() {
    let (tx, _rx) = Mailbox::new(2, 1000).open::<SmallPayload>();
    tx.try_send(bytes(1)).unwrap();
    tx.try_send(SmallPayload::Empty).unwrap();
    let err = tx.try_send(bytes(5)).unwrap_err();
    assert!(err.is_full());
    assert_eq!(err.into_inner().len(), 5);
}

#[test]
fn block_policy_waits_for_bytes_and_proceeds_when_they_come_back() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(8, 100).open::<SmallPayload>();
        tx.send(bytes(60)).await.unwrap();
        let mut waiting = pin!(tx.send(bytes(60)));
        for _ in 0..3 {
            assert!(
                poll_once(waiting.as_mut()).is_pending(),
                "must wait for bytes"
            );
        }
        assert_eq!(rx.len(), 1, "the waiting message is not in the mailbox yet");
        assert_eq!(rx.recv().await.unwrap().len(), 60);
        assert!(matches!(poll_once(waiting.as_mut()), Poll::Ready(Ok(()))));
        assert_eq!(rx.pool_stats(), stats(1, 60, 100));
    });
}

#[test]
fn block_policy_waits_for_a_count_slot() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(1, 1000).open::<SmallPayload>();
        tx.send(SmallPayload::Empty).await.unwrap();
        let mut waiting = pin!(tx.send(bytes(3)));
        assert!(poll_once(waiting.as_mut()).is_pending());
        assert_eq!(
            rx.pool_stats(),
            stats(0, 0, 1000),
            "no bytes taken while waiting for a slot"
        );
        rx.recv().await.unwrap();
        assert!(matches!(poll_once(waiting.as_mut()), Poll::Ready(Ok(()))));
        assert_eq!(rx.recv().await.unwrap().len(), 3);
    });
}

#[test]
fn cancelling_a_waiting_send_leaks_no_budget() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(8, 100).open::<SmallPayload>();
        tx.send(bytes(90)).await.unwrap();
        {
            let mut waiting = pin!(tx.send(bytes(50)));
            assert!(poll_once(waiting.as_mut()).is_pending());
        } // dropped mid-await
        assert_eq!(rx.pool_stats(), stats(1, 90, 100));
        assert_eq!(
            rx.recv().await.unwrap().len(),
            90,
            "the admitted message is not lost"
        );
        assert_eq!(rx.pool_stats(), stats(0, 0, 100));
        assert!(
            rx.try_recv().is_err(),
            "the cancelled message was never sent"
        );
    });
}

#[test]
fn empty_messages_take_the_fast_path_and_no_slab_slot() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(8, 100).open::<SmallPayload>();
        for _ in 0..5 {
            tx.send(SmallPayload::Empty).await.unwrap();
        }
        tx.try_send(SmallPayload::Empty).unwrap();
        assert_eq!(rx.len(), 6);
        assert_eq!(
            rx.pool_stats(),
            stats(0, 0, 100),
            "empty messages hold no slot"
        );
        tx.send(bytes(1)).await.unwrap();
        assert_eq!(rx.pool_stats(), stats(1, 1, 100), "an inline message does");
        while rx.try_recv().is_ok() {}
        assert_eq!(rx.pool_stats(), stats(0, 0, 100));
    });
}

#[test]
fn a_closed_mailbox_returns_the_message() {
    current_thread().block_on(async {
        let (tx, rx) = Mailbox::new(8, 100).open::<SmallPayload>();
        drop(rx);
        assert!(tx.is_closed());
        let err = tx.send(bytes(5)).await.unwrap_err();
        assert!(err.is_closed(), "{err:?}");
        assert_eq!(err.into_inner(), bytes(5));
        let err = tx.try_send(SmallPayload::Empty).unwrap_err();
        assert!(matches!(err, SendError::Closed(SmallPayload::Empty)));
    });
}

#[test]
fn dropping_the_receiver_wakes_senders_waiting_for_bytes_with_closed() {
    current_thread().block_on(async {
        let (tx, rx) = Mailbox::new(8, 100).open::<SmallPayload>();
        tx.send(bytes(100)).await.unwrap();
        let mut waiting = pin!(tx.send(bytes(30)));
        assert!(poll_once(waiting.as_mut()).is_pending());
        drop(rx);
        match poll_once(waiting.as_mut()) {
            Poll::Ready(Err(SendError::Closed(msg))) => assert_eq!(msg.len(), 30),
            other => panic!("expected Closed(msg), got {other:?}"),
        }
        assert_eq!(
            tx.pool_stats(),
            stats(0, 0, 100),
            "queued bytes came back on drop"
        );
    });
}

#[test]
fn close_keeps_what_was_admitted_for_the_receiver() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(8, 100).open::<SmallPayload>();
        tx.send(bytes(10)).await.unwrap();
        tx.send(SmallPayload::Empty).await.unwrap();
        rx.close();
        assert!(tx.send(bytes(1)).await.unwrap_err().is_closed());
        assert_eq!(rx.recv().await.unwrap().len(), 10);
        assert_eq!(rx.recv().await, Some(SmallPayload::Empty));
        assert_eq!(rx.recv().await, None);
    });
}

#[test]
fn an_oversize_message_is_refused_at_once_under_both_policies() {
    current_thread().block_on(async {
        for policy in [Policy::Block, Policy::Fail] {
            let (tx, _rx) = Mailbox::new(8, 10).policy(policy).open::<SmallPayload>();
            let mut send = pin!(tx.send(bytes(11)));
            match poll_once(send.as_mut()) {
                Poll::Ready(Err(err @ SendError::Oversize { .. })) => {
                    assert_eq!(
                        err.to_string(),
                        "message of 11 bytes exceeds the mailbox's whole byte budget of 10 bytes; \
                         it can never be admitted (raise the budget or split the message)"
                    );
                    assert_eq!(err.into_inner(), bytes(11));
                }
                other => panic!("{policy:?}: expected Oversize at once, got {other:?}"),
            }
            let err = tx.try_send(bytes(11)).unwrap_err();
            assert!(matches!(
                err,
                SendError::Oversize {
                    size: 11,
                    budget: 10,
                    ..
                }
            ));
        }
    });
}

#[test]
fn an_agent_drains_what_was_admitted_when_stopped() {
    let rt = current_thread();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let (tx, mut agent) = spawn_agent(rt.handle(), Mailbox::new(8, 1000), move |msg| {
        let record = record.clone();
        async move { record.lock().unwrap().push(msg) }
    });
    // On a current-thread runtime the agent has not run yet: all 8 are queued.
    for i in 0..8u8 {
        tx.try_send(SmallPayload::copy_from(&[i])).unwrap();
    }
    agent.stop();
    let report = rt.block_on(agent.join());
    assert_eq!(report.processed, 8);
    assert!(report.stopped_explicitly);
    let seen: Vec<u8> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|m| m.as_slice()[0])
        .collect();
    assert_eq!(seen, (0..8).collect::<Vec<u8>>());
    assert!(tx.try_send(SmallPayload::Empty).unwrap_err().is_closed());
    assert_eq!(tx.pool_stats(), stats(0, 0, 1000));
}

#[test]
fn an_agent_stops_when_every_sender_is_gone() {
    let rt = current_thread();
    let (tx, agent) = spawn_agent(
        rt.handle(),
        Mailbox::new(8, 1000),
        |_msg: SmallPayload| async {},
    );
    let tx2 = tx.clone();
    tx.try_send(bytes(3)).unwrap();
    tx2.try_send(bytes(4)).unwrap();
    drop((tx, tx2));
    let report = rt.block_on(agent.join());
    assert_eq!(report.processed, 2);
    assert!(!report.stopped_explicitly);
}

/// A sequence-numbered message charging 16 bytes against the budget.
#[derive(Debug)]
struct Seq {
    sender: usize,
    seq: u64,
}

impl ByteSize for Seq {
    fn byte_size(&self) -> usize {
        16
    }
}

#[test]
fn four_senders_times_250k_arrive_exactly_once_in_per_sender_order() {
    four_senders_arrive_in_order(Admission::Locked);
}

#[test]
fn four_senders_arrive_exactly_once_in_order_with_atomic_admission() {
    four_senders_arrive_in_order(Admission::Atomic);
}

fn four_senders_arrive_in_order(admission: Admission) {
    const SENDERS: usize = 4;
    const EACH: u64 = 250_000;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        // 64 bytes: four messages at once, so byte back-pressure engages constantly.
        let (tx, mut rx) = Mailbox::new(8, 64).admission(admission).open::<Seq>();
        let tasks: Vec<_> = (0..SENDERS)
            .map(|sender| {
                let tx = tx.clone();
                tokio::spawn(async move {
                    for seq in 0..EACH {
                        tx.send(Seq { sender, seq }).await.unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let mut next = [0u64; SENDERS];
        while let Some(Seq { sender, seq }) = rx.recv().await {
            assert_eq!(
                seq, next[sender],
                "sender {sender}: out of order or duplicated"
            );
            next[sender] += 1;
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(next, [EACH; SENDERS], "every message arrived");
        assert_eq!(rx.pool_stats(), stats(0, 0, 64));
    });
}

/// A sequence-numbered message carrying a payload of any kind; charges its payload's bytes.
#[derive(Debug)]
struct Sized {
    sender: usize,
    seq: u64,
    payload: SmallPayload,
}

impl ByteSize for Sized {
    fn byte_size(&self) -> usize {
        self.payload.byte_size()
    }
}

#[test]
fn stress_senders_on_worker_threads_under_constant_byte_pressure() {
    stress_under_byte_pressure(Admission::Locked);
}

#[test]
fn stress_with_atomic_admission_loses_nothing_and_keeps_the_budget() {
    stress_under_byte_pressure(Admission::Atomic);
}

fn stress_under_byte_pressure(admission: Admission) {
    const SENDERS: usize = 6;
    const EACH: u64 = 30_000;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    rt.block_on(async {
        // 300 bytes against payloads of 0 to 200 bytes: one or two heap payloads fill it.
        let (tx, mut rx) = Mailbox::new(16, 300).admission(admission).open::<Sized>();
        let sizes = [0usize, 1, 64, 65, 200, 7, 130];
        let tasks: Vec<_> = (0..SENDERS)
            .map(|sender| {
                let tx = tx.clone();
                tokio::spawn(async move {
                    for seq in 0..EACH {
                        let n = sizes[(seq as usize + sender) % sizes.len()];
                        let payload = SmallPayload::copy_from(&vec![sender as u8; n]);
                        tx.send(Sized {
                            sender,
                            seq,
                            payload,
                        })
                        .await
                        .unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let mut next = [0u64; SENDERS];
        let mut peak = 0;
        while let Some(Sized {
            sender,
            seq,
            payload,
        }) = rx.recv().await
        {
            assert_eq!(
                seq, next[sender],
                "sender {sender}: out of order or duplicated"
            );
            assert!(
                payload.as_slice().iter().all(|b| *b == sender as u8),
                "payload intact"
            );
            next[sender] += 1;
            peak = peak.max(rx.pool_stats().bytes_in_use);
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(next, [EACH; SENDERS], "every message arrived exactly once");
        assert!(peak <= 300, "the budget held: peak {peak}");
        assert_eq!(rx.pool_stats(), stats(0, 0, 300));
    });
}

/// A waker that remembers whether it was woken.
struct Flag(std::sync::atomic::AtomicBool);

impl std::task::Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

fn flag() -> (Arc<Flag>, Waker) {
    let flag = Arc::new(Flag(std::sync::atomic::AtomicBool::new(false)));
    (flag.clone(), Waker::from(flag))
}

#[test]
fn dropping_the_receiver_wakes_every_blocked_sender_with_its_message() {
    current_thread().block_on(async {
        let (tx, rx) = Mailbox::new(2, 100).open::<SmallPayload>();
        tx.send(bytes(60)).await.unwrap();
        // Takes the second slot, then waits for bytes; the other two wait for a slot.
        let mut waiting = [
            pin!(tx.send(bytes(50))),
            pin!(tx.send(bytes(10))),
            pin!(tx.send(SmallPayload::Empty)),
        ];
        let flags: Vec<(Arc<Flag>, Waker)> = (0..3).map(|_| flag()).collect();
        for (fut, (_, waker)) in waiting.iter_mut().zip(&flags) {
            assert!(
                fut.as_mut()
                    .poll(&mut Context::from_waker(waker))
                    .is_pending()
            );
        }
        drop(rx);
        for (i, (fut, len)) in waiting.iter_mut().zip([50, 10, 0]).enumerate() {
            assert!(
                flags[i].0.0.load(std::sync::atomic::Ordering::SeqCst),
                "sender {i} was woken"
            );
            match poll_once(fut.as_mut()) {
                Poll::Ready(Err(SendError::Closed(msg))) => assert_eq!(msg.len(), len),
                other => panic!("sender {i}: expected Closed(msg of {len} bytes), got {other:?}"),
            }
        }
        assert_eq!(tx.pool_stats(), stats(0, 0, 100));
    });
}

#[test]
fn the_fast_path_never_takes_a_slot_handed_to_a_waiting_sender() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(1, 1000).open::<SmallPayload>();
        tx.send(bytes(1)).await.unwrap();
        let mut first = pin!(tx.send(bytes(2)));
        assert!(
            poll_once(first.as_mut()).is_pending(),
            "the mailbox is full"
        );
        // The slot this frees goes to the sender queued for it...
        assert_eq!(rx.recv().await.unwrap().len(), 1);
        // ...so a later send finds none free, although the first has not run yet.
        let mut second = pin!(tx.send(bytes(3)));
        assert!(
            poll_once(second.as_mut()).is_pending(),
            "a later send overtook the sender waiting for a slot"
        );
        assert!(matches!(poll_once(first.as_mut()), Poll::Ready(Ok(()))));
        assert_eq!(rx.recv().await.unwrap().len(), 2);
        assert!(matches!(poll_once(second.as_mut()), Poll::Ready(Ok(()))));
        assert_eq!(rx.recv().await.unwrap().len(), 3);
    });
}

#[test]
fn a_sender_that_never_finds_the_mailbox_full_still_yields_to_the_scheduler() {
    // Block's fast path takes a free slot without waiting, but spends the task's
    // cooperative budget as tokio's `reserve` does: after at most a budget's worth of sends
    // the task yields, and the other task runs.
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(8, 1000).open::<SmallPayload>();
        let other_ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = other_ran.clone();
        tokio::spawn(async move { flag.store(true, std::sync::atomic::Ordering::SeqCst) });
        let mut sends = 0;
        while !other_ran.load(std::sync::atomic::Ordering::SeqCst) && sends < 10_000 {
            tx.send(SmallPayload::Empty).await.unwrap();
            rx.try_recv().unwrap();
            sends += 1;
        }
        assert!(
            other_ran.load(std::sync::atomic::Ordering::SeqCst),
            "10,000 sends that never waited never let the other task run"
        );
        assert!(sends <= 200, "the other task ran only after {sends} sends");
    });
}

#[test]
fn a_budget_or_capacity_too_large_for_the_atomic_word_takes_the_locked_design() {
    assert_eq!(Admission::fitting(8, (1 << 40) - 1), Admission::Atomic);
    assert_eq!(Admission::fitting(8, 1 << 40), Admission::Locked);
    assert_eq!(Admission::fitting((1 << 23) - 1, 100), Admission::Atomic);
    assert_eq!(Admission::fitting(1 << 23, 100), Admission::Locked);
    current_thread().block_on(async {
        // Would panic with the atomic design: the budget does not fit its 40 bits.
        let (tx, mut rx) = Mailbox::new(8, usize::MAX).open::<SmallPayload>();
        tx.send(bytes(100)).await.unwrap();
        assert_eq!(rx.pool_stats(), stats(1, 100, usize::MAX));
        assert_eq!(rx.recv().await.unwrap().len(), 100);
        assert_eq!(rx.pool_stats(), stats(0, 0, usize::MAX));
    });
}

#[test]
#[should_panic(expected = "Admission::Atomic takes budgets below 2^40 bytes")]
fn the_atomic_design_refuses_a_budget_it_cannot_count() {
    let _ = Mailbox::new(8, 1 << 40)
        .admission(Admission::Atomic)
        .open::<SmallPayload>();
}

/// A capacity above tokio's limit is refused by `Mailbox::new`, with its own message naming
/// the limit (before, `open` panicked inside tokio's semaphore, with tokio's words).
#[test]
#[should_panic(expected = "mailbox capacity must be at most Mailbox::MAX_CAPACITY")]
fn a_capacity_above_the_limit_is_refused_where_the_mailbox_is_made() {
    let _ = Mailbox::new(Mailbox::MAX_CAPACITY + 1, 1 << 20);
}

/// The limit itself opens.
#[test]
fn the_largest_capacity_opens() {
    let (tx, mut rx) = Mailbox::new(Mailbox::MAX_CAPACITY, 1 << 20).open::<SmallPayload>();
    tx.try_send(SmallPayload::Empty).unwrap();
    assert!(rx.try_recv().is_ok());
}
