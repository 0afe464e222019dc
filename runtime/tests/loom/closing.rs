//! Closing. The promise (`src/lib.rs`, "Closing"): after the close is observed, every message
//! either was received or has been dropped with its bytes given back, and a send that returns
//! `Ok` handed its message to the receiver or to the receiver's drop. One model per way of
//! closing (the receiver dropped, `close()`, the last sender dropped), on both lanes, for
//! `send` and `try_send`, with senders waiting for a slot and for bytes; and the cases a model
//! of two threads does not reach: two byte waiters, `Admission::Locked`, zero-byte messages,
//! `Policy::Fail`, three senders.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use loom::future::block_on;
use loom::thread;
use mty_runtime::{Admission, Mailbox, MailboxSender, Policy, SendError, TryRecvError};

use super::{ALL, Live, Msg, drain, model, open, send_as, sent};

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

/// Two senders wait for bytes when the receiver is dropped: both wake and return, and nothing
/// is held. Each returns `Closed`, or `Ok` when it had its slot before the close and took its
/// bytes as the drop gave the first message's back (then its message was dropped with the
/// receiver's: the door was shut).
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
            let outcome = sender.join().unwrap();
            assert!(
                matches!(outcome, Outcome::Closed | Outcome::Sent),
                "{outcome:?}"
            );
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
        senders_racing_the_drop(&tx, rx, &live, &[0, 1, 2]);
    });
}

/// A clone of `tx` per id, each `try_send`ing its message from its own thread while this
/// thread drops `rx`; once all are done, nothing is alive or held.
fn senders_racing_the_drop(
    tx: &Arc<MailboxSender<Msg>>,
    rx: mty_runtime::MailboxReceiver<Msg>,
    live: &Live,
    ids: &[u32],
) {
    let senders: Vec<_> = ids
        .iter()
        .map(|&id| {
            let (tx, live) = (tx.as_ref().clone(), live.clone());
            thread::spawn(move || send_as(&tx, live.msg(id, 1)))
        })
        .collect();
    drop(rx);
    for sender in senders {
        sender.join().unwrap();
    }
    nothing_held(live, tx, "receiver dropped");
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

/// Two senders inside the shared lane's door when the receiver's drop shuts it (the wait
/// for both to leave: a third preemption, which the three-sender model above does not
/// reach), another sender's message queued before: every interleaving within four
/// preemptions (132,074; every interleaving did not finish in 400 s). What was queued dies in
/// the receiver's drop, never inside a send
/// ([`send_as`]); nothing is left.
#[test]
fn dropping_the_receiver_with_two_senders_inside_the_door() {
    model(Some(4), two_senders_in_the_door_and_one_queued);
}

/// Another sender's message queued in the shared lane, then two senders racing the
/// receiver's drop into the door.
fn two_senders_in_the_door_and_one_queued() {
    let live = Live::new();
    let (tx, rx) = open(4, 100);
    let queued = tx.as_ref().clone(); // the shared lane from here
    assert!(send_as(&queued, live.msg(9, 1)));
    senders_racing_the_drop(&tx, rx, &live, &[0, 1]);
    drop(queued);
}

/// The drop's wait runs out of patience (at once, here: loom has no clock) while sends are
/// inside the door: it hands tokio's receiver to the last send out, and that send drops it.
/// Every interleaving within four preemptions (119,082) of two senders in the door and a queued
/// message: the hand-over racing the last leave drops the receiver once, nothing is left,
/// and some interleavings take the hand-over (a message dropped inside a send).
#[test]
fn the_drop_hands_the_drain_to_the_last_send_out_when_patience_runs_out() {
    super::HANDED_OVER.with(|n| n.set(Some(0)));
    model(Some(4), || {
        mty_runtime::set_loom_patience(0);
        two_senders_in_the_door_and_one_queued();
    });
    mty_runtime::set_loom_patience(u32::MAX);
    let handed = super::HANDED_OVER.with(|n| n.replace(None));
    assert!(
        handed > Some(0),
        "no interleaving handed the drain over: {handed:?}"
    );
    eprintln!("{handed:?} messages dropped inside a send, by the hand-over");
}

/// A clone (the switch to the shared lane) races a push in flight on the single lane and
/// the receiver's drop: the original handle `try_send`s on one thread, a clone made on
/// another sends through it, and the receiver is dropped. Whatever the interleaving, nothing
/// is left once all three are done, and no send drops another's message.
#[test]
fn a_clone_racing_a_single_lane_push_and_the_receivers_drop() {
    model(Some(2), || {
        let live = Live::new();
        let (tx, rx) = open(4, 100);
        let pusher = {
            let (tx, live) = (tx.clone(), live.clone());
            thread::spawn(move || send_as(&tx, live.msg(0, 1)))
        };
        let cloner = {
            let (tx, live) = (tx.clone(), live.clone());
            thread::spawn(move || {
                let clone = tx.as_ref().clone();
                send_as(&clone, live.msg(1, 1))
            })
        };
        drop(rx);
        pusher.join().unwrap();
        cloner.join().unwrap();
        nothing_held(&live, &tx, "receiver dropped");
    });
}

/// `close()`, then the receiver's drop, with a send racing both, on either lane: a send told
/// `Ok` (before the close) is dropped by the drop, one after it is refused; nothing is left
/// once both are done.
#[test]
fn close_then_drop_with_a_send_between() {
    for shared in [false, true] {
        model(ALL, move || {
            let live = Live::new();
            let (tx, mut rx) = open(4, 100);
            let clone = shared.then(|| tx.as_ref().clone());
            let sender = {
                let (tx, live) = (tx.clone(), live.clone());
                thread::spawn(move || send_as(&tx, live.msg(0, 1)))
            };
            rx.close();
            drop(rx);
            sender.join().unwrap();
            nothing_held(
                &live,
                &tx,
                &format!("closed, then dropped (shared: {shared})"),
            );
            drop(clone);
        });
    }
}
