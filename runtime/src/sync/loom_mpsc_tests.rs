//! The stand-in must wait, wake and hand on slots as tokio's bounded channel does, or the
//! mailbox models built on it would check nothing. Loom models of the stand-in itself:
//! `RUSTFLAGS="--cfg mty_loom" cargo test -p mty-runtime --lib --release --target-dir
//! target/loom sync::mpsc`.

use std::future::poll_fn;
use std::pin::pin;
use std::task::{Context, Poll, Wake, Waker};

use loom::thread;

use super::error::{SendError, TryRecvError, TrySendError};
use super::{Receiver, channel};

/// `loom::future::block_on`, which needs loom's `futures` feature (not turned on here):
/// polls, and parks the loom thread until the waker unparks it. A wake-up the channel
/// loses leaves the thread parked for good, which loom reports as a deadlock.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(thread::Thread);
    impl Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(std::sync::Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        thread::park();
    }
}

/// The handles cross threads as tokio's do (a compile-time check).
#[test]
fn handles_are_send_and_sync() {
    fn send_sync<X: Send + Sync>() {}
    fn send<X: Send>(_: &X) {}
    send_sync::<super::Sender<u32>>();
    send_sync::<super::Receiver<u32>>();
    send_sync::<super::Permit<'static, u32>>();
    send_sync::<super::OwnedPermit<u32>>();
    model(None, || {
        let (tx, _rx) = channel::<u32>(1);
        send(&tx.reserve());
    });
}

/// Every interleaving of `f` within `preemptions` preemptions (`None`: all of them).
fn model(preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = preemptions;
    builder.check(f);
}

fn recv<T>(rx: &mut Receiver<T>) -> Option<T> {
    block_on(poll_fn(|cx| rx.poll_recv(cx)))
}

/// A reserver waiting on a full channel gets the slot a receive on another thread frees;
/// the receiver wakes for both values.
#[test]
fn reserve_waits_for_a_slot_freed_by_recv() {
    model(None, || {
        let (tx, mut rx) = channel::<u32>(1);
        tx.try_reserve().unwrap().send(1);
        let sender = thread::spawn(move || {
            let permit = block_on(tx.reserve()).expect("not closed");
            permit.send(2);
        });
        assert_eq!(recv(&mut rx), Some(1));
        assert_eq!(recv(&mut rx), Some(2));
        // The sender is gone once it has sent: the end.
        assert_eq!(recv(&mut rx), None);
        sender.join().unwrap();
    });
}

/// Two reservers wait on a full channel; each gets a slot as the receiver frees them.
/// Bounded at 4 preemptions: every interleaving would take far longer than the suite allows.
#[test]
fn two_waiting_reservers_both_get_a_slot() {
    model(Some(4), || {
        let (tx, mut rx) = channel::<u32>(1);
        tx.try_reserve().unwrap().send(0);
        let senders: Vec<_> = (1..=2)
            .map(|value| {
                let tx = tx.clone();
                thread::spawn(move || block_on(tx.reserve()).unwrap().send(value))
            })
            .collect();
        drop(tx);
        let mut got = [recv(&mut rx), recv(&mut rx), recv(&mut rx)];
        got.sort();
        assert_eq!(got, [Some(0), Some(1), Some(2)]);
        assert_eq!(recv(&mut rx), None);
        for sender in senders {
            sender.join().unwrap();
        }
    });
}

/// `close` wakes a reserver waiting on a full channel with an error; the queued value
/// can still be received, then the end.
#[test]
fn close_wakes_a_waiting_reserver() {
    model(None, || {
        let (tx, mut rx) = channel::<u32>(1);
        tx.try_reserve().unwrap().send(1);
        let sender = thread::spawn(move || {
            assert_eq!(block_on(tx.reserve()).err(), Some(SendError(())));
            assert!(tx.is_closed());
            tx
        });
        rx.close();
        assert_eq!(recv(&mut rx), Some(1));
        assert_eq!(recv(&mut rx), None);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        let tx = sender.join().unwrap();
        assert!(matches!(tx.try_reserve(), Err(TrySendError::Closed(()))));
    });
}

/// Dropping the receiver wakes a waiting reserver with an error, and drops the queued
/// value.
#[test]
fn dropping_the_receiver_wakes_a_waiting_reserver() {
    model(None, || {
        let (tx, rx) = channel::<loom::sync::Arc<()>>(1);
        let value = loom::sync::Arc::new(());
        tx.try_reserve().unwrap().send(value.clone());
        let sender = thread::spawn(move || {
            assert!(block_on(tx.reserve()).is_err());
            assert_eq!(tx.capacity(), 1);
        });
        drop(rx);
        sender.join().unwrap();
        assert_eq!(loom::sync::Arc::strong_count(&value), 1);
    });
}

/// `poll_recv` returns `None` only after every sender and every owned permit is gone,
/// and not before the value sent through the permit.
#[test]
fn recv_ends_after_all_senders_and_owned_permits_drop() {
    model(None, || {
        let (tx, mut rx) = channel::<u32>(2);
        let owned = tx.clone().try_reserve_owned().unwrap();
        let unused = tx.clone().try_reserve_owned().unwrap();
        let a = thread::spawn(move || drop(tx));
        let b = thread::spawn(move || {
            drop(unused);
            drop(owned.send(7));
        });
        assert_eq!(recv(&mut rx), Some(7));
        assert_eq!(recv(&mut rx), None);
        a.join().unwrap();
        b.join().unwrap();
    });
}

/// Closed with a permit still held: the receiver waits for it, gets its value, then the
/// end; and a held permit dropped unused ends it too.
#[test]
fn closed_receiver_waits_for_held_permits() {
    model(None, || {
        let (tx, mut rx) = channel::<u32>(2);
        let used = tx.clone().try_reserve_owned().unwrap();
        let unused = tx.clone().try_reserve_owned().unwrap();
        rx.close();
        let a = thread::spawn(move || drop(used.send(3)));
        let b = thread::spawn(move || drop(unused));
        assert_eq!(recv(&mut rx), Some(3));
        assert_eq!(recv(&mut rx), None);
        a.join().unwrap();
        b.join().unwrap();
        drop(tx);
    });
}

/// A reserver given a slot that the channel closes on before it takes it fails (as
/// tokio's) and gives the slot back, waking the closed receiver that waits for it.
#[test]
fn assigned_then_closed_reserver_wakes_the_receiver() {
    model(None, || {
        let (tx, mut rx) = channel::<u32>(1);
        let held = tx.clone().try_reserve_owned().unwrap();
        let sender = thread::spawn(move || {
            let result = block_on(tx.reserve()).map(|permit| permit.send(9));
            (tx, result.is_ok())
        });
        let releaser = thread::spawn(move || drop(held));
        let closer = thread::spawn(move || {
            rx.close();
            let mut got = Vec::new();
            while let Some(value) = recv(&mut rx) {
                got.push(value);
            }
            got
        });
        let (_tx, sent) = sender.join().unwrap();
        releaser.join().unwrap();
        let got = closer.join().unwrap();
        assert_eq!(got, if sent { vec![9] } else { vec![] });
    });
}

/// FIFO and cancellation, step by step: a freed slot goes to the first reserver and is
/// not free for `try_reserve`; dropping that reserver hands it to the next.
#[test]
fn slots_go_to_waiters_in_order_and_cancel_hands_them_on() {
    model(None, || {
        let (tx, mut rx) = channel::<u32>(1);
        let mut cx = Context::from_waker(Waker::noop());
        let held = tx.try_reserve().unwrap();
        let mut first = Box::pin(tx.reserve());
        let mut second = Box::pin(tx.reserve());
        assert!(first.as_mut().poll(&mut cx).is_pending());
        assert!(second.as_mut().poll(&mut cx).is_pending());
        assert!(matches!(tx.try_reserve(), Err(TrySendError::Full(()))));
        drop(held);
        // Given to `first`: not free, and `second` still waits.
        assert_eq!(tx.capacity(), 0);
        assert!(matches!(tx.try_reserve(), Err(TrySendError::Full(()))));
        assert!(second.as_mut().poll(&mut cx).is_pending());
        drop(first);
        let Poll::Ready(Ok(permit)) = second.as_mut().poll(&mut cx) else {
            panic!("the cancelled reserver's slot goes to the next");
        };
        permit.send(5);
        drop(second);
        assert_eq!(rx.len(), 1);
        assert_eq!(rx.try_recv(), Ok(5));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        assert_eq!(tx.capacity(), 1);
        drop(tx);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    });
}

/// A value that counts itself alive (std's atomics: bookkeeping, not a subject of the model).
struct Counted(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A send claims its place and then writes it, as tokio's: two sends racing the receiver's
/// drop. In some interleaving the drain stops at a place claimed but not yet written while a
/// value stays behind it or comes after it, alive until the last sender goes (tokio's
/// semantics, which the mailbox's door is there to close); in every one, everything is
/// dropped with the last handle.
#[test]
fn the_receivers_drop_stops_at_a_place_claimed_but_not_written() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    static LEFT_BEHIND: AtomicBool = AtomicBool::new(false);
    model(Some(3), || {
        let live = std::sync::Arc::new(AtomicUsize::new(2));
        let (tx, rx) = channel::<Counted>(2);
        let senders: Vec<_> = (0..2)
            .map(|_| {
                let live = live.clone();
                let permit = tx.clone().try_reserve_owned().unwrap();
                thread::spawn(move || drop(permit.send(Counted(live))))
            })
            .collect();
        drop(rx);
        senders.into_iter().for_each(|s| s.join().unwrap());
        if live.load(Ordering::SeqCst) > 0 {
            LEFT_BEHIND.store(true, Ordering::SeqCst);
        }
        drop(tx);
        assert_eq!(live.load(Ordering::SeqCst), 0, "dropped with the channel");
    });
    assert!(
        LEFT_BEHIND.load(Ordering::SeqCst),
        "no interleaving left a value behind the receiver's drop"
    );
}

/// Two sends racing the receiver: `len` counts a place claimed but not yet written unless it
/// is the last (as tokio's), and `try_recv` waits for such a place's write instead of calling
/// the channel empty: every value `len` counted is received.
#[test]
fn try_recv_waits_for_a_place_claimed_but_not_written() {
    model(Some(3), || {
        let (tx, mut rx) = channel::<u32>(2);
        let senders: Vec<_> = [1, 2]
            .map(|value| {
                let permit = tx.clone().try_reserve_owned().unwrap();
                thread::spawn(move || drop(permit.send(value)))
            })
            .into();
        let counted = rx.len();
        let mut got: Vec<u32> = (0..counted)
            .map(|_| rx.try_recv().expect("counted"))
            .collect();
        senders.into_iter().for_each(|s| s.join().unwrap());
        while let Ok(value) = rx.try_recv() {
            got.push(value);
        }
        got.sort_unstable();
        assert_eq!(got, [1, 2]);
        drop(tx);
    });
}
