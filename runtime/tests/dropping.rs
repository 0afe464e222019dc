//! The receiver's drop and the close, without side effects on the senders (issue 59): queued
//! messages die on the receiver's thread, never inside another sender's send (unless one is
//! held inside for the door's second of patience: `tests/wakers.rs`); a destructor or
//! a waker that panics leaves nothing alive, no byte held and no sender waiting; the single
//! lane closes before the pool. Real threads, real wakers; each test failed before its fix.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, mpsc as std_mpsc};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::ThreadId;
use std::time::Duration;

use mty_runtime::{ByteSize, Mailbox, SendError};

/// A message that logs the thread that drops it.
#[derive(Debug)]
struct Tagged {
    name: &'static str,
    drops: Arc<Mutex<Vec<(&'static str, ThreadId)>>>,
}

impl Drop for Tagged {
    fn drop(&mut self) {
        let me = std::thread::current().id();
        self.drops.lock().unwrap().push((self.name, me));
    }
}

impl ByteSize for Tagged {
    fn byte_size(&self) -> usize {
        8
    }
}

/// The receiver's waker: its wake-up, which a send runs inside tokio's channel (inside the
/// shared lane's door), says so and then takes a while, so the receiver can be dropped while
/// that send is still inside.
struct SlowWake {
    inside: Mutex<Option<std_mpsc::Sender<()>>>,
}

impl Wake for SlowWake {
    fn wake(self: Arc<Self>) {
        if let Some(inside) = self.inside.lock().unwrap().take() {
            inside.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Another sender's message queued in the shared lane is dropped by the receiver's drop, on
/// the receiver's thread, also when a send is inside the door at that moment. Before, the
/// last send to leave the door dropped everything queued, on its own thread: its caller ran
/// other senders' destructors (a panic there made an accepted send panic; a lock its caller
/// held, taken by a destructor, deadlocked).
#[test]
fn queued_messages_die_on_the_receivers_thread_not_inside_a_racing_send() {
    let drops = Arc::new(Mutex::new(Vec::new()));
    let tagged = |name| Tagged {
        name,
        drops: drops.clone(),
    };
    let (tx, mut rx) = Mailbox::new(8, 1000)
        .single_sender_lane(false)
        .open::<Tagged>();
    let other = tx.clone();
    let (inside_tx, inside_rx) = std_mpsc::channel();
    let waker = Waker::from(Arc::new(SlowWake {
        inside: Mutex::new(Some(inside_tx)),
    }));
    {
        let mut recv = pin!(rx.recv());
        let pending = recv.as_mut().poll(&mut Context::from_waker(&waker));
        assert!(
            pending.is_pending(),
            "empty: the receiver's waker is registered"
        );
    }
    let receiver_thread = std::thread::current().id();
    let racing = tagged("racing send's own");
    let sender = std::thread::spawn(move || {
        // Pushes, then wakes the receiver inside the door: 100 ms there.
        other.try_send(racing).unwrap();
        other
    });
    inside_rx.recv().unwrap();
    // The racing send is inside the door now; this one queues behind it.
    tx.try_send(tagged("another sender's")).unwrap();
    drop(rx);
    let other = sender.join().unwrap();
    let drops = drops.lock().unwrap().clone();
    let another = drops.iter().find(|(name, _)| *name == "another sender's");
    assert_eq!(
        another.map(|(_, thread)| *thread),
        Some(receiver_thread),
        "dropped by the receiver's drop, on its thread: {drops:?}"
    );
    assert_eq!(tx.pool_stats().bytes_in_use, 0);
    drop((tx, other));
}

/// A message that counts itself alive.
#[derive(Debug)]
struct Msg(Arc<AtomicIsize>, bool);

impl Msg {
    fn new(live: &Arc<AtomicIsize>) -> Msg {
        live.fetch_add(1, SeqCst);
        Msg(live.clone(), false)
    }

    /// One whose destructor panics.
    fn bomb(live: &Arc<AtomicIsize>) -> Msg {
        live.fetch_add(1, SeqCst);
        Msg(live.clone(), true)
    }
}

impl Drop for Msg {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
        if self.1 {
            panic!("a message's destructor panics");
        }
    }
}

impl ByteSize for Msg {
    fn byte_size(&self) -> usize {
        8
    }
}

/// The first of three messages in the single lane's ring panics as the receiver's drop drops
/// it: the two behind it are still dropped, their bytes given back, while the sender lives.
/// Before, the ring's clear stopped at the panic and left them there.
#[test]
fn a_panicking_message_in_the_ring_leaves_the_ones_behind_it_dropped() {
    let live = Arc::new(AtomicIsize::new(0));
    let (tx, rx) = Mailbox::new(4, 100).open::<Msg>();
    tx.try_send(Msg::bomb(&live)).unwrap();
    tx.try_send(Msg::new(&live)).unwrap();
    tx.try_send(Msg::new(&live)).unwrap();
    assert!(tx.on_single_lane());
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(rx)));
    assert!(
        dropped.is_err(),
        "the destructor's panic reaches the caller"
    );
    assert_eq!(live.load(SeqCst), 0, "every message dropped");
    assert_eq!(tx.pool_stats().bytes_in_use, 0, "every byte back");
}

/// A waker that panics when woken; `woken` says it was.
struct Panicky {
    woken: AtomicBool,
}

impl Wake for Panicky {
    fn wake(self: Arc<Self>) {
        self.woken.store(true, SeqCst);
        panic!("a waker panics");
    }
}

/// A waker that only says it was woken.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, SeqCst);
    }
}

/// A sender waits for a slot of the full shared lane with a waker that panics: the receiver's
/// drop wakes it (closing tokio's channel), and the panic must not keep the drop from
/// dropping what the lane holds. Before, the close ran before the receiver was taken: the
/// panic left tokio's receiver, and the messages in it, alive with their bytes.
#[test]
fn a_panicking_waker_in_the_receivers_drop_leaves_nothing_queued() {
    let live = Arc::new(AtomicIsize::new(0));
    let (tx, rx) = Mailbox::new(2, 100).single_sender_lane(false).open::<Msg>();
    tx.try_send(Msg::new(&live)).unwrap();
    tx.try_send(Msg::new(&live)).unwrap();
    let panicky = Arc::new(Panicky {
        woken: AtomicBool::new(false),
    });
    let waker = Waker::from(panicky.clone());
    let mut send = pin!(tx.send(Msg::new(&live)));
    assert!(
        send.as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending(),
        "full: waits for a slot"
    );
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(rx)));
    assert!(panicky.woken.load(SeqCst), "the waiting sender was woken");
    assert!(dropped.is_err(), "the waker's panic reaches the caller");
    assert_eq!(
        live.load(SeqCst),
        1,
        "only the waiting send's own message lives"
    );
    assert_eq!(tx.pool_stats().bytes_in_use, 0, "every byte back");
    let noop = Waker::noop();
    match send.as_mut().poll(&mut Context::from_waker(noop)) {
        Poll::Ready(Err(SendError::Closed(_))) => {}
        other => panic!("the waiting send ends Closed: {other:?}"),
    }
    assert_eq!(live.load(SeqCst), 0);
}

/// Two senders wait for bytes; the first one's waker panics when the receiver's drop closes
/// the pool. The second is still woken, and ends `Closed`. Before, the pool's close stopped at
/// the panic: the second waited for ever.
#[test]
fn a_panicking_waker_does_not_strand_the_senders_behind_it() {
    let live = Arc::new(AtomicIsize::new(0));
    let (tx, rx) = Mailbox::new(8, 8).single_sender_lane(false).open::<Msg>();
    tx.try_send(Msg::new(&live)).unwrap(); // the whole budget
    let panicky = Waker::from(Arc::new(Panicky {
        woken: AtomicBool::new(false),
    }));
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let flagged = Waker::from(flag.clone());
    let mut first = pin!(tx.send(Msg::new(&live)));
    let mut second = pin!(tx.send(Msg::new(&live)));
    assert!(
        first
            .as_mut()
            .poll(&mut Context::from_waker(&panicky))
            .is_pending()
    );
    assert!(
        second
            .as_mut()
            .poll(&mut Context::from_waker(&flagged))
            .is_pending()
    );
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(rx)));
    assert!(dropped.is_err(), "the waker's panic reaches the caller");
    assert!(flag.0.load(SeqCst), "the second waiter was woken");
    match second.as_mut().poll(&mut Context::from_waker(&flagged)) {
        Poll::Ready(Err(SendError::Closed(_))) => {}
        other => panic!("the second waiter ends Closed: {other:?}"),
    }
    assert_eq!(tx.pool_stats().bytes_in_use, 0, "every byte back");
}

/// `close()` refuses sends lane by lane: once a sized `try_send` on the single lane was told
/// `Closed` (the pool closed), a zero-byte one after it on the same thread (no bytes to take)
/// must not be told `Ok`. Before, the pool closed before the ring, and in between a zero-byte
/// message got into the ring. A race: `ITERS` runs (default 2,000).
#[test]
fn after_a_send_was_told_closed_a_zero_byte_one_is_too() {
    #[derive(Debug)]
    struct Sized(usize);
    impl ByteSize for Sized {
        fn byte_size(&self) -> usize {
            self.0
        }
    }
    let runs: usize = std::env::var("ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let mut seen = 0;
    for _ in 0..runs {
        let (tx, mut rx) = Mailbox::new(16, 8).open::<Sized>();
        tx.try_send(Sized(8)).unwrap(); // the whole budget: a sized send is Full until closed
        let ready = AtomicBool::new(false);
        std::thread::scope(|s| {
            let sender = s.spawn(|| {
                ready.store(true, SeqCst);
                loop {
                    match tx.try_send(Sized(4)) {
                        Err(SendError::Full(_)) => continue,
                        Err(SendError::Closed(_)) => return tx.try_send(Sized(0)),
                        other => panic!("{other:?}"),
                    }
                }
            });
            while !ready.load(SeqCst) {
                std::hint::spin_loop();
            }
            rx.close();
            let after = sender.join().unwrap();
            seen += 1;
            assert!(
                matches!(after, Err(SendError::Closed(_))),
                "a zero-byte send after one told Closed: {after:?}"
            );
        });
    }
    assert_eq!(seen, runs);
}
