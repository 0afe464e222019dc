//! The single-sender lane and its switch, through the mailbox's own API: a clone mid-stream
//! keeps order and the capacity, dropping the clones leaves a working mailbox, a send
//! cancelled across the switch leaks nothing, and one handle used from two threads at once
//! loses, duplicates and reorders nothing.

use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Waker};

use mty_runtime::{Mailbox, PoolStats, SendError, SmallPayload};

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn tagged(tag: u8) -> SmallPayload {
    SmallPayload::copy_from(&[tag])
}

fn tag(msg: &SmallPayload) -> u8 {
    msg.as_slice()[0]
}

#[test]
fn the_lane_is_left_exactly_when_the_spec_says() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(2, 1000).open::<SmallPayload>();
        assert!(
            tx.on_single_lane(),
            "a new mailbox starts on the single lane"
        );
        tx.try_send(tagged(1)).unwrap();
        tx.send(tagged(2)).await.unwrap();
        assert!(matches!(tx.try_send(tagged(3)), Err(SendError::Full(_))));
        assert!(
            tx.on_single_lane(),
            "try_send on a full ring returns Full, no switch"
        );
        {
            let mut waiting = pin!(tx.send(tagged(3)));
            let mut cx = Context::from_waker(Waker::noop());
            assert!(waiting.as_mut().poll(&mut cx).is_pending());
            assert!(!tx.on_single_lane(), "a Block send that must wait switched");
        }
        assert_eq!(tag(&rx.recv().await.unwrap()), 1);

        let (tx, _rx) = Mailbox::new(2, 1000).open::<SmallPayload>();
        let other = tx.clone();
        assert!(
            !tx.on_single_lane() && !other.on_single_lane(),
            "a clone switched"
        );
        drop(other);
        assert!(!tx.on_single_lane(), "for good");

        let (tx, _rx) = Mailbox::new(1024, 1000).open::<SmallPayload>();
        assert!(tx.on_single_lane(), "1024 slots: a ring");
        let (tx, _rx) = Mailbox::new(1025, 1000).open::<SmallPayload>();
        assert!(!tx.on_single_lane(), "past 1024: shared from the start");
    });
}

#[test]
fn with_the_lane_off_the_mailbox_starts_shared_and_keeps_the_contract() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(2, 1000)
            .single_sender_lane(false)
            .open::<SmallPayload>();
        assert!(!tx.on_single_lane());
        tx.send(tagged(1)).await.unwrap();
        tx.try_send(tagged(2)).unwrap();
        assert!(matches!(tx.try_send(tagged(3)), Err(SendError::Full(_))));
        assert_eq!(rx.pool_stats().slots_in_use, 2);
        assert_eq!(tag(&rx.recv().await.unwrap()), 1);
        assert_eq!(rx.try_recv().map(|m| tag(&m)), Ok(2));
        drop(tx);
        assert!(rx.recv().await.is_none());
        assert_eq!(rx.pool_stats().bytes_in_use, 0);
    });
}

#[test]
fn a_clone_mid_stream_keeps_order_and_the_capacity() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(4, 1000).open::<SmallPayload>();
        for t in 1..=3 {
            tx.send(tagged(t)).await.unwrap();
        }
        // Three messages in the ring; the clone moves the mailbox to the shared lane.
        let other = tx.clone();
        tx.send(tagged(4)).await.unwrap();
        assert_eq!(rx.len(), 4);
        assert!(
            matches!(other.try_send(tagged(100)), Err(SendError::Full(_))),
            "the ring's three and the shared lane's one fill the capacity of 4"
        );
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(tag(&rx.recv().await.unwrap()));
        }
        assert_eq!(
            got,
            [1, 2, 3, 4],
            "the ring's messages first, then the shared lane's"
        );
        // Every slot the switch reserved for the ring's messages came back.
        for t in 10..14 {
            other.try_send(tagged(t)).unwrap();
        }
        assert!(matches!(tx.try_send(tagged(99)), Err(SendError::Full(_))));
        for t in 10..14 {
            assert_eq!(tag(&rx.recv().await.unwrap()), t);
        }
        assert_eq!(rx.pool_stats().bytes_in_use, 0);
    });
}

#[test]
fn back_to_one_sender_the_mailbox_keeps_working_and_closes() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(2, 1000).open::<SmallPayload>();
        tx.send(tagged(1)).await.unwrap();
        let other = tx.clone();
        other.send(tagged(2)).await.unwrap();
        drop(other);
        assert_eq!(tag(&rx.recv().await.unwrap()), 1);
        tx.send(tagged(3)).await.unwrap();
        assert_eq!(tag(&rx.recv().await.unwrap()), 2);
        assert_eq!(tag(&rx.recv().await.unwrap()), 3);
        tx.send(tagged(4)).await.unwrap();
        drop(tx);
        assert_eq!(tag(&rx.recv().await.unwrap()), 4);
        assert!(rx.recv().await.is_none(), "every sender is gone");
    });
}

#[test]
fn the_last_sender_on_the_single_lane_closes_the_mailbox_after_its_messages() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(4, 1000).open::<SmallPayload>();
        tx.send(tagged(1)).await.unwrap();
        tx.send(tagged(2)).await.unwrap();
        drop(tx);
        assert_eq!(tag(&rx.recv().await.unwrap()), 1);
        assert_eq!(rx.try_recv().map(|m| tag(&m)), Ok(2));
        assert!(rx.recv().await.is_none());
    });
}

#[test]
fn a_send_cancelled_across_the_switch_leaks_no_slot_or_byte() {
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(2, 1000).open::<SmallPayload>();
        tx.send(tagged(1)).await.unwrap();
        tx.send(tagged(2)).await.unwrap();
        {
            // The ring is full: this send switches the mailbox and waits for a slot.
            let mut waiting = pin!(tx.send(tagged(3)));
            let mut cx = Context::from_waker(Waker::noop());
            assert!(waiting.as_mut().poll(&mut cx).is_pending());
        } // dropped while waiting
        assert_eq!(tag(&rx.recv().await.unwrap()), 1);
        assert_eq!(tag(&rx.recv().await.unwrap()), 2);
        assert_eq!(
            rx.pool_stats(),
            PoolStats {
                slots_in_use: 0,
                bytes_in_use: 0,
                byte_budget: 1000
            }
        );
        // Both slots are free again.
        tx.try_send(tagged(4)).unwrap();
        tx.try_send(tagged(5)).unwrap();
        assert!(matches!(tx.try_send(tagged(6)), Err(SendError::Full(_))));
        assert_eq!(tag(&rx.recv().await.unwrap()), 4);
        assert_eq!(tag(&rx.recv().await.unwrap()), 5);
    });
}

#[test]
fn one_handle_used_from_two_threads_at_once_loses_and_reorders_nothing() {
    // No clone: two tasks on two worker threads share one `&MailboxSender`, so sends race
    // for the ring's token; whichever finds it taken switches the mailbox.
    const EACH: u32 = 20_000;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    runtime.block_on(async {
        let (tx, mut rx) = Mailbox::new(8, 200).open::<SmallPayload>();
        let tx = Arc::new(tx);
        let senders: Vec<_> = (0..2u8)
            .map(|who| {
                let tx = tx.clone();
                tokio::spawn(async move {
                    for n in 0..EACH {
                        let mut bytes = [who; 5];
                        bytes[1..].copy_from_slice(&n.to_le_bytes());
                        tx.send(SmallPayload::copy_from(&bytes)).await.unwrap();
                    }
                })
            })
            .collect();
        let mut next = [0u32; 2];
        for _ in 0..2 * EACH {
            let msg = rx.recv().await.unwrap();
            let bytes = msg.as_slice();
            let who = usize::from(bytes[0]);
            let n = u32::from_le_bytes(bytes[1..5].try_into().unwrap());
            assert_eq!(n, next[who], "sender {who}'s messages in order");
            next[who] += 1;
            assert!(rx.pool_stats().bytes_in_use <= 200);
        }
        for sender in senders {
            sender.await.unwrap();
        }
        assert_eq!(next, [EACH; 2]);
        assert!(rx.try_recv().is_err());
    });
}

#[test]
fn a_capacity_past_the_rings_limit_keeps_the_contract() {
    // 2000 slots: no ring (it would be allocated whole), so the receiver reads tokio's
    // channel from the first message: order, closing and the byte accounting still hold.
    current_thread().block_on(async {
        let (tx, mut rx) = Mailbox::new(2000, 1 << 20).open::<SmallPayload>();
        for t in 0..200u8 {
            tx.try_send(tagged(t)).unwrap();
        }
        assert_eq!(rx.len(), 200);
        let other = tx.clone();
        other.send(tagged(250)).await.unwrap();
        for t in 0..200u8 {
            assert_eq!(tag(&rx.recv().await.unwrap()), t, "in order");
        }
        assert_eq!(rx.try_recv().map(|m| tag(&m)), Ok(250));
        drop((tx, other));
        assert!(rx.recv().await.is_none());
        assert_eq!(rx.pool_stats().bytes_in_use, 0);
    });
}
