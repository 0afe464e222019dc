//! Loom models of the mailbox as users compile it: the real `send`, `try_send`, `clone`,
//! `recv`, `close` and drop, with the ring, the lane switch, the stash and the admission
//! running as shipped over loom's atomics, locks and `Arc` (the `cfg(mty_loom)` seam in
//! `src/sync.rs`; the shared lane is a loom-aware stand-in for tokio's channel with its
//! interface and semantics). Each model checks every interleaving within the preemption
//! bound: capacity, exactly-once delivery in order, nothing leaked, and no lost wake-up (a
//! `block_on` never woken is a deadlock loom reports).
//!
//! Run: `RUSTFLAGS="--cfg mty_loom" cargo test -p mty-runtime --lib --test loom --release
//! --target-dir target/loom` (CI does). Without the cfg this file is empty.
#![cfg(mty_loom)]

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use loom::future::block_on;
use loom::thread;
use mty_runtime::{
    Admission, ByteSize, Mailbox, MailboxReceiver, MailboxSender, Policy, SendError, TryRecvError,
};

/// Every interleaving (no preemption bound).
const ALL: Option<usize> = None;

/// Runs `f` under loom with at most `preemptions` preemptions per execution (`ALL`: every
/// interleaving). Each model's bound is in its call; the interleavings each explored, and the
/// suite's run time, are in `docs/results/2026-12-02-mailbox-closing.md`.
fn model(preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = preemptions;
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    builder.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f()
    });
    // A model whose race loom never interleaved checks nothing. (Seen: with the racing
    // operation on the model's main thread, loom ran one interleaving only; on spawned
    // threads, all of them.)
    let runs = runs.load(Ordering::Relaxed);
    assert!(runs > 1, "loom explored {runs} interleaving: nothing raced");
    eprintln!("{runs} interleavings");
}

/// A message that counts itself alive (std's atomic: bookkeeping of the test, not a subject
/// of the model).
#[derive(Debug)]
struct Msg {
    id: u32,
    size: usize,
    live: Arc<AtomicUsize>,
}

impl Drop for Msg {
    fn drop(&mut self) {
        assert!(
            self.live.fetch_sub(1, Ordering::SeqCst) > 0,
            "dropped twice"
        );
    }
}

impl ByteSize for Msg {
    fn byte_size(&self) -> usize {
        self.size
    }
}

#[derive(Clone)]
struct Live(Arc<AtomicUsize>);

impl Live {
    fn new() -> Live {
        Live(Arc::new(AtomicUsize::new(0)))
    }

    fn msg(&self, id: u32, size: usize) -> Msg {
        self.0.fetch_add(1, Ordering::SeqCst);
        Msg {
            id,
            size,
            live: self.0.clone(),
        }
    }

    fn assert_none(&self) {
        assert_eq!(self.0.load(Ordering::SeqCst), 0, "a message leaked");
    }
}

fn sent(result: Result<(), SendError<Msg>>) -> bool {
    match result {
        Ok(()) => true,
        Err(SendError::Full(_) | SendError::Closed(_)) => false,
        Err(other) => panic!("{other:?}"),
    }
}

/// Everything queued now, in order.
fn drain(rx: &mut MailboxReceiver<Msg>) -> Vec<u32> {
    let mut got = Vec::new();
    while let Ok(msg) = rx.try_recv() {
        got.push(msg.id);
    }
    got
}

fn open(capacity: usize, budget: usize) -> (Arc<MailboxSender<Msg>>, MailboxReceiver<Msg>) {
    let (tx, rx) = Mailbox::new(capacity, budget).open::<Msg>();
    (Arc::new(tx), rx)
}

/// Capacity 2, the ring full, nothing received: a clone on one thread, `try_send` on the
/// original handle on another. The send must find the mailbox full in every interleaving
/// (before the fix, one landing while the switch was between its mark and its reservation
/// took a slot meant for a ring message: 3 held).
#[test]
fn try_send_racing_the_switch_keeps_the_capacity() {
    model(ALL, || {
        let live = Live::new();
        let (tx, mut rx) = open(2, 100);
        assert!(sent(tx.try_send(live.msg(0, 1))) && sent(tx.try_send(live.msg(1, 1))));
        let cloner = {
            let tx = tx.clone();
            thread::spawn(move || drop(tx.as_ref().clone()))
        };
        let sender = {
            let (tx, live) = (tx.clone(), live.clone());
            thread::spawn(move || sent(tx.try_send(live.msg(2, 1))))
        };
        cloner.join().unwrap();
        assert!(!sender.join().unwrap(), "a third message in 2 slots");
        assert_eq!(rx.len(), 2);
        assert_eq!(drain(&mut rx), [0, 1]);
        drop((tx, rx));
        live.assert_none();
    });
}

/// Capacity 2: the receiver waits for a message (parked on the empty ring) while the sender
/// pushes one on the ring, clones, and sends one through the clone; so the receiver can find
/// the clone's message in the shared lane while the ring's is still there (the stash). Then
/// two more `try_send`s: with one received, at most one may succeed (before the fix the stash
/// held its message outside the capacity, and both did).
#[test]
fn the_stash_holds_a_slot_when_a_clone_arrives_between_two_pops() {
    model(ALL, || {
        let live = Live::new();
        let (tx, mut rx) = open(2, 100);
        let sender = {
            let (tx, live) = (tx.clone(), live.clone());
            thread::spawn(move || {
                assert!(sent(tx.try_send(live.msg(0, 1))));
                let clone = tx.as_ref().clone();
                assert!(sent(clone.try_send(live.msg(1, 1))));
                clone
            })
        };
        let first = block_on(rx.recv()).expect("a message");
        assert_eq!(first.id, 0, "the ring's message first");
        drop(first);
        let clone = sender.join().unwrap();
        let more = [2, 3]
            .into_iter()
            .filter(|&id| sent(clone.try_send(live.msg(id, 1))))
            .count();
        assert!(more <= 1, "3 messages held with capacity 2");
        assert!(rx.len() <= 2);
        let rest = drain(&mut rx);
        assert_eq!(rest[0], 1);
        assert_eq!(rest.len(), 1 + more);
        drop((tx, clone, rx));
        live.assert_none();
    });
}

/// Capacity 2, the ring full: a `send` that must wait (it switches and queues for a slot)
/// while the other thread clones, receives both ring messages and sends through the clone.
/// The waiting send completes; order, capacity and exactly-once hold.
#[test]
fn a_clone_during_a_pending_send_with_a_full_ring() {
    model(Some(4), || {
        let live = Live::new();
        let (tx, mut rx) = open(2, 100);
        assert!(sent(tx.try_send(live.msg(0, 1))) && sent(tx.try_send(live.msg(1, 1))));
        let waiting = {
            let (tx, live) = (tx.clone(), live.clone());
            thread::spawn(move || block_on(tx.send(live.msg(2, 1))).unwrap())
        };
        let clone = tx.as_ref().clone();
        assert_eq!(block_on(rx.recv()).unwrap().id, 0);
        assert_eq!(block_on(rx.recv()).unwrap().id, 1);
        let third = sent(clone.try_send(live.msg(3, 1)));
        waiting.join().unwrap();
        assert!(rx.len() <= 2);
        let mut rest = drain(&mut rx);
        rest.sort_unstable();
        assert_eq!(rest, if third { vec![2, 3] } else { vec![2] });
        drop((tx, clone, rx));
        live.assert_none();
    });
}

/// The receiver closes while the one sender pushes on the ring: each send was sent or came
/// back; what was sent is received after the close, once, in order; nothing is sent after a
/// send found the mailbox closed.
#[test]
fn closing_racing_a_push_loses_nothing() {
    model(ALL, || {
        let live = Live::new();
        let (tx, mut rx) = open(4, 100);
        let sender = {
            let (tx, live) = (tx.clone(), live.clone());
            thread::spawn(move || {
                let first = sent(tx.try_send(live.msg(0, 1)));
                let second = sent(tx.try_send(live.msg(1, 1)));
                assert!(first || !second, "sent after a send found it closed");
                [first, second]
            })
        };
        rx.close();
        let outcome = sender.join().unwrap();
        let expected: Vec<u32> = (0..2).filter(|&i| outcome[i as usize]).collect();
        assert_eq!(drain(&mut rx), expected);
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Disconnected);
        assert!(tx.is_closed());
        drop((tx, rx));
        live.assert_none();
    });
}

/// The receiver is dropped while the one sender pushes: every message is dropped exactly
/// once (by the receiver's drop, or given back), and the sender sees the mailbox closed.
#[test]
fn dropping_the_receiver_racing_a_push_loses_nothing() {
    model(Some(4), || {
        let live = Live::new();
        let (tx, rx) = open(4, 100);
        let sender = {
            let (tx, live) = (tx.clone(), live.clone());
            thread::spawn(move || {
                sent(tx.try_send(live.msg(0, 1)));
                sent(tx.try_send(live.msg(1, 1)));
            })
        };
        drop(rx);
        sender.join().unwrap();
        assert!(tx.is_closed());
        assert_eq!(
            tx.pool_stats().bytes_in_use,
            0,
            "the receiver's drop gave it back"
        );
        drop(tx);
        live.assert_none();
    });
}

/// A `send` cancelled at its first await point (the ring full: it switches and queues for
/// a slot) while the receiver takes the message holding it: nothing leaks, the slot is
/// free for the next send.
#[test]
fn a_send_cancelled_waiting_for_a_slot_leaks_nothing() {
    cancelled_send(1, 100);
}

/// A `send` cancelled at its second await point (a slot taken, waiting for bytes) while the
/// receiver takes the message holding them: nothing leaks, slot or bytes.
#[test]
fn a_send_cancelled_waiting_for_bytes_leaks_nothing() {
    cancelled_send(2, 10);
}

/// A mailbox of `capacity` and `budget` holding one message of `budget` bytes (in the ring):
/// another send of it is polled once and dropped on one thread while the receiver takes the
/// first. Afterwards every slot and every byte is free again.
fn cancelled_send(capacity: usize, budget: usize) {
    model(ALL, move || {
        let live = Live::new();
        let (tx, mut rx) = open(capacity, budget);
        assert!(sent(tx.try_send(live.msg(0, budget))));
        let canceller = {
            let (tx, live) = (tx.clone(), live.clone());
            thread::spawn(move || {
                let mut send = pin!(tx.send(live.msg(1, budget)));
                // Ready when the receiver came first; either way, dropped after one poll.
                match send.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                    Poll::Ready(result) => sent(result),
                    Poll::Pending => false,
                }
            })
        };
        assert_eq!(block_on(rx.recv()).unwrap().id, 0);
        let second = canceller.join().unwrap();
        assert_eq!(
            rx.pool_stats().bytes_in_use,
            if second { budget } else { 0 }
        );
        assert_eq!(drain(&mut rx), if second { vec![1] } else { vec![] });
        for id in 0..capacity as u32 {
            assert!(
                sent(tx.try_send(live.msg(10 + id, budget / capacity))),
                "every slot and every byte is free"
            );
        }
        drop((tx, rx));
        live.assert_none();
    });
}

/// Budget 10 with 8 held: a `send` of 5 waits for bytes while the receiver takes the 8. The
/// release may come before, during or after the waiter registers: it is always woken.
#[test]
fn a_release_racing_a_waiters_registration_wakes_it() {
    model(ALL, || {
        let live = Live::new();
        let (tx, mut rx) = open(4, 10);
        assert!(sent(tx.try_send(live.msg(0, 8))));
        let waiting = {
            let (tx, live) = (tx.clone(), live.clone());
            thread::spawn(move || block_on(tx.send(live.msg(1, 5))).unwrap())
        };
        assert_eq!(block_on(rx.recv()).unwrap().id, 0);
        waiting.join().unwrap();
        assert_eq!(rx.pool_stats().bytes_in_use, 5);
        assert_eq!(drain(&mut rx), [1]);
        drop((tx, rx));
        live.assert_none();
    });
}

/// The receiver is dropped while a second handle (the shared lane) `try_send`s. Whatever the
/// interleaving, once the receiver is gone and the send has returned, no message is alive and
/// no byte held while the handles live (the receiver's docs: its drop drops what is queued,
/// giving the bytes back). Before the fix, a send past its check of `closed` put its message
/// in the channel after the drop had drained it, and was told `Ok`.
#[test]
fn dropping_the_receiver_racing_a_shared_lane_send_drops_what_was_admitted() {
    model(ALL, || {
        let live = Live::new();
        let (tx, rx) = open(4, 100);
        let clone = tx.as_ref().clone();
        let sender = {
            let live = live.clone();
            thread::spawn(move || {
                sent(clone.try_send(live.msg(0, 1)));
                clone
            })
        };
        drop(rx);
        let clone = sender.join().unwrap();
        let (alive, bytes) = (live.0.load(Ordering::SeqCst), tx.pool_stats().bytes_in_use);
        assert!(
            alive == 0 && bytes == 0,
            "the receiver dropped and the send returned: {alive} message(s) alive, {bytes} bytes held"
        );
        drop((tx, clone));
    });
}

// Closing. The promise (`src/lib.rs`, "Closing"): after the close is observed, every message
// either was received or has been dropped with its bytes given back, and a send that returns
// `Ok` handed its message to the receiver or to the receiver's drop. One model per way of
// closing (the receiver dropped, `close()`, the last sender dropped), on both lanes, for
// `send` and `try_send`, with senders waiting for a slot and for bytes; and the cases a model
// of two threads does not reach: two byte waiters, `Admission::Locked`, zero-byte messages,
// `Policy::Fail`, three senders.

/// How the receiver closes the mailbox.
#[derive(Clone, Copy, Debug)]
enum Closing {
    /// Dropped: everything not received is dropped, its bytes given back.
    Drop,
    /// `close()`: everything admitted is still received, then the end.
    Close,
}

/// How the racing thread sends.
#[derive(Clone, Copy, Debug)]
enum Sending {
    TrySend,
    /// `send` (under the mailbox's policy).
    Send,
}

/// What a send returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Sent,
    Full,
    Closed,
}

fn outcome(result: Result<(), SendError<Msg>>) -> Outcome {
    match result {
        Ok(()) => Outcome::Sent,
        Err(SendError::Full(_)) => Outcome::Full,
        Err(SendError::Closed(_)) => Outcome::Closed,
        Err(other) => panic!("{other:?}"),
    }
}

fn send_one(tx: &MailboxSender<Msg>, sending: Sending, msg: Msg) -> Outcome {
    outcome(match sending {
        Sending::TrySend => tx.try_send(msg),
        Sending::Send => block_on(tx.send(msg)),
    })
}

/// Nothing alive, no byte and no frame held: checked while sender handles still live (they
/// would drop whatever the channel still held).
fn nothing_held(live: &Live, tx: &MailboxSender<Msg>, what: &str) {
    let alive = live.0.load(Ordering::SeqCst);
    let stats = tx.pool_stats();
    assert!(
        alive == 0 && stats.bytes_in_use == 0 && stats.slots_in_use == 0,
        "{what}: {alive} message(s) alive, {stats:?}"
    );
}

/// One racing thread sends messages of `sizes` (ids 0, 1, ...) through the original handle,
/// while this thread closes the mailbox. `shared`: a clone exists (the shared lane).
/// Afterwards: the sends that returned `Sent` are exactly what the receiver gets (`Close`)
/// or what its drop dropped (`Drop`); nothing is sent after a send saw `Closed`; no message
/// is alive and no byte held while the handles live.
fn closing_races_sends(
    mailbox: Mailbox,
    shared: bool,
    sending: Sending,
    sizes: &'static [usize],
    closing: Closing,
    preemptions: Option<usize>,
) {
    model(preemptions, move || {
        let live = Live::new();
        let (tx, mut rx) = mailbox.open::<Msg>();
        let tx = Arc::new(tx);
        let clone = shared.then(|| tx.as_ref().clone());
        let sender = {
            let (tx, live) = (tx.clone(), live.clone());
            thread::spawn(move || {
                let outcomes: Vec<Outcome> = (0..)
                    .zip(sizes)
                    .map(|(id, &size)| send_one(&tx, sending, live.msg(id, size)))
                    .collect();
                if let Some(closed) = outcomes.iter().position(|&o| o == Outcome::Closed) {
                    assert!(
                        !outcomes[closed..].contains(&Outcome::Sent),
                        "sent after a send found it closed: {outcomes:?}"
                    );
                }
                outcomes
            })
        };
        let rx = match closing {
            Closing::Drop => {
                drop(rx);
                None
            }
            Closing::Close => {
                rx.close();
                Some(rx)
            }
        };
        let outcomes = sender.join().unwrap();
        let sent: Vec<u32> = (0..)
            .zip(&outcomes)
            .filter(|&(_, &o)| o == Outcome::Sent)
            .map(|(id, _)| id)
            .collect();
        if let Some(mut rx) = rx {
            assert_eq!(
                drain(&mut rx),
                sent,
                "every message sent is received, in order"
            );
            assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Disconnected);
            assert!(tx.is_closed());
        }
        nothing_held(&live, &tx, &format!("{closing:?}, outcomes {outcomes:?}"));
        drop((tx, clone));
    });
}

/// `try_send` racing the receiver's drop, on the ring and on the shared lane.
#[test]
fn dropping_the_receiver_racing_try_send_on_either_lane() {
    for shared in [false, true] {
        closing_races_sends(
            Mailbox::new(4, 100),
            shared,
            Sending::TrySend,
            &[1, 1],
            Closing::Drop,
            Some(3),
        );
    }
}

/// `send` racing the receiver's drop, on the ring and on the shared lane.
#[test]
fn dropping_the_receiver_racing_send_on_either_lane() {
    for shared in [false, true] {
        closing_races_sends(
            Mailbox::new(4, 100),
            shared,
            Sending::Send,
            &[1, 1],
            Closing::Drop,
            Some(3),
        );
    }
}

/// `close()` racing `send` and `try_send` on the shared lane (the ring's is
/// `closing_racing_a_push_loses_nothing`): what was sent is still received.
#[test]
fn closing_racing_sends_on_the_shared_lane() {
    for sending in [Sending::TrySend, Sending::Send] {
        closing_races_sends(
            Mailbox::new(4, 100),
            true,
            sending,
            &[1, 1],
            Closing::Close,
            Some(3),
        );
    }
}

/// A `send` waiting for a slot (capacity 1, the first message holds it) when the mailbox
/// closes: it wakes with `Closed`, on either lane (on the ring, the wait switches lanes).
#[test]
fn closing_wakes_a_send_waiting_for_a_slot() {
    for closing in [Closing::Drop, Closing::Close] {
        for shared in [false, true] {
            closing_races_sends(
                Mailbox::new(1, 100),
                shared,
                Sending::Send,
                &[1, 1],
                closing,
                Some(2),
            );
        }
    }
}

/// A `send` waiting for bytes (budget 10, the first message holds 6 of them) when the
/// mailbox closes: it wakes with `Closed`, on either lane.
#[test]
fn closing_wakes_a_send_waiting_for_bytes() {
    for closing in [Closing::Drop, Closing::Close] {
        for shared in [false, true] {
            closing_races_sends(
                Mailbox::new(4, 10),
                shared,
                Sending::Send,
                &[6, 6],
                closing,
                Some(2),
            );
        }
    }
}

/// Zero-byte messages take no bytes and skip the pool (and its closed flag): the channel and
/// the door alone keep the promise.
#[test]
fn dropping_the_receiver_racing_zero_byte_sends() {
    for shared in [false, true] {
        closing_races_sends(
            Mailbox::new(4, 100),
            shared,
            Sending::TrySend,
            &[0, 0],
            Closing::Drop,
            Some(3),
        );
    }
}

/// The same races under `Admission::Locked` (the slab's lock instead of the atomic word).
#[test]
fn dropping_the_receiver_racing_sends_with_locked_admission() {
    let locked = Mailbox::new(1, 10).admission(Admission::Locked);
    closing_races_sends(locked, true, Sending::TrySend, &[6, 6], Closing::Drop, ALL);
    closing_races_sends(locked, true, Sending::Send, &[6, 6], Closing::Drop, Some(2));
    let roomy = Mailbox::new(4, 10).admission(Admission::Locked);
    closing_races_sends(roomy, true, Sending::Send, &[6, 6], Closing::Drop, Some(2));
}

/// `send` under `Policy::Fail` is `try_send`: it never waits, and keeps the promise too.
#[test]
fn dropping_the_receiver_racing_sends_under_policy_fail() {
    for shared in [false, true] {
        closing_races_sends(
            Mailbox::new(1, 100).policy(Policy::Fail),
            shared,
            Sending::Send,
            &[1, 1],
            Closing::Drop,
            ALL,
        );
    }
}

/// Two senders wait for bytes at once (budget 10, 8 held; each sends 5) while the receiver
/// takes the 8 and then what comes: both are admitted (no lost wake-up), the budget holds
/// throughout, each message arrives once.
#[test]
fn two_senders_waiting_for_bytes_are_both_served() {
    model(Some(2), || {
        let live = Live::new();
        let (tx, mut rx) = open(4, 10);
        assert!(sent(tx.try_send(live.msg(0, 8))));
        let senders: Vec<_> = [1, 2]
            .map(|id| {
                let (tx, live) = (tx.as_ref().clone(), live.clone());
                thread::spawn(move || block_on(tx.send(live.msg(id, 5))).unwrap())
            })
            .into();
        let mut got = Vec::new();
        while got.len() < 3 {
            let msg = block_on(rx.recv()).expect("the senders are alive");
            assert!(rx.pool_stats().bytes_in_use <= 10);
            got.push(msg.id);
        }
        senders.into_iter().for_each(|s| s.join().unwrap());
        assert_eq!(got[0], 0);
        got.sort_unstable();
        assert_eq!(got, [0, 1, 2]);
        nothing_held(&live, &tx, "all received");
    });
}

/// Two senders wait for bytes when the receiver is dropped: both wake with `Closed`, and
/// nothing is held.
#[test]
fn dropping_the_receiver_wakes_two_senders_waiting_for_bytes() {
    model(Some(2), || {
        let live = Live::new();
        let (tx, rx) = open(4, 10);
        assert!(sent(tx.try_send(live.msg(0, 8))));
        let senders: Vec<_> = [1, 2]
            .map(|id| {
                let (tx, live) = (tx.as_ref().clone(), live.clone());
                thread::spawn(move || outcome(block_on(tx.send(live.msg(id, 5)))))
            })
            .into();
        drop(rx);
        for sender in senders {
            assert_eq!(sender.join().unwrap(), Outcome::Closed);
        }
        nothing_held(&live, &tx, "receiver dropped");
    });
}

/// Three sender handles, each `try_send`ing from its own thread, racing the receiver's drop.
#[test]
fn dropping_the_receiver_racing_three_senders() {
    model(Some(2), || {
        let live = Live::new();
        let (tx, rx) = open(4, 100);
        let senders: Vec<_> = [0, 1, 2]
            .map(|id| {
                let (tx, live) = (tx.as_ref().clone(), live.clone());
                thread::spawn(move || sent(tx.try_send(live.msg(id, 1))))
            })
            .into();
        drop(rx);
        for sender in senders {
            sender.join().unwrap();
        }
        nothing_held(&live, &tx, "receiver dropped");
    });
}

/// The last sender handle dropped while the receiver waits: it gets every message sent, in
/// order per sender, then `None`; nothing is held. `shared`: two handles, each sending from
/// its own thread and dropped there; otherwise one handle. Capacity 1, so sends wait for the
/// slot the receiver frees.
fn the_last_sender_dropped(shared: bool, sending: Sending, preemptions: Option<usize>) {
    model(preemptions, move || {
        let live = Live::new();
        let (tx, mut rx) = Mailbox::new(1, 100).open::<Msg>();
        let handles = if shared {
            vec![(tx.clone(), vec![0]), (tx, vec![1])]
        } else {
            vec![(tx, vec![0, 1])]
        };
        let senders: Vec<_> = handles
            .into_iter()
            .map(|(tx, ids)| {
                let live = live.clone();
                thread::spawn(move || {
                    let sent: Vec<u32> = ids
                        .into_iter()
                        .filter(|&id| send_one(&tx, sending, live.msg(id, 1)) == Outcome::Sent)
                        .collect();
                    drop(tx);
                    sent
                })
            })
            .collect();
        let mut got = Vec::new();
        while let Some(msg) = block_on(rx.recv()) {
            got.push(msg.id);
        }
        let mut sent: Vec<u32> = senders
            .into_iter()
            .flat_map(|s| s.join().unwrap())
            .collect();
        if !shared {
            assert_eq!(got, sent, "in order");
        }
        got.sort_unstable();
        sent.sort_unstable();
        assert_eq!(got, sent, "every message sent is received");
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Disconnected);
        assert_eq!(live.0.load(Ordering::SeqCst), 0);
        assert_eq!(rx.pool_stats().bytes_in_use, 0);
    });
}

#[test]
fn the_last_sender_dropped_on_either_lane() {
    for shared in [false, true] {
        the_last_sender_dropped(shared, Sending::TrySend, Some(3));
        the_last_sender_dropped(shared, Sending::Send, Some(2));
    }
}
