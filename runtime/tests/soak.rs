//! Racing soak: each scenario of the loom models (`tests/loom/`) repeated with real threads
//! on the real scheduler, checking capacity, budget and delivery after every iteration: a
//! clone during a pending send with a full ring, `try_send` racing the switch, the stash,
//! close and receiver drop racing a push, the receiver's drop racing shared-lane sends, a
//! cancelled send, and a release racing a waiter.
//! The short runs are part of the normal suite; the soak, 10^6 iterations of each, is
//! `cargo test --release -p mty-runtime --test soak -- --ignored`.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use mty_runtime::{ByteSize, Mailbox, MailboxReceiver, MailboxSender, SendError, TryRecvError};

const SHORT: usize = 2_000;
const SOAK: usize = 1_000_000;

/// A message that counts itself alive, so a loss or a double drop shows.
#[derive(Debug)]
struct Msg {
    id: u32,
    size: usize,
    live: Arc<AtomicUsize>,
}

impl Drop for Msg {
    fn drop(&mut self) {
        let before = self.live.fetch_sub(1, Ordering::SeqCst);
        assert!(before > 0, "message {} dropped twice", self.id);
    }
}

impl ByteSize for Msg {
    fn byte_size(&self) -> usize {
        self.size
    }
}

/// One iteration's mailbox, shared by the two racing threads.
struct Case {
    capacity: usize,
    tx: MailboxSender<Msg>,
    clone: Mutex<Option<MailboxSender<Msg>>>,
    rx: Mutex<Option<MailboxReceiver<Msg>>>,
    live: Arc<AtomicUsize>,
    /// What each send returned, by message id (`true`: sent).
    sent: Mutex<Vec<(u32, bool)>>,
    /// What the racing receiver got, in order.
    received: Mutex<Vec<u32>>,
    flag: AtomicBool,
}

impl Case {
    fn new(capacity: usize, budget: usize) -> Case {
        let (tx, rx) = Mailbox::new(capacity, budget).open::<Msg>();
        Case {
            capacity,
            tx,
            clone: Mutex::new(None),
            rx: Mutex::new(Some(rx)),
            live: Arc::new(AtomicUsize::new(0)),
            sent: Mutex::new(Vec::new()),
            received: Mutex::new(Vec::new()),
            flag: AtomicBool::new(false),
        }
    }

    fn msg(&self, id: u32, size: usize) -> Msg {
        self.live.fetch_add(1, Ordering::SeqCst);
        Msg {
            id,
            size,
            live: self.live.clone(),
        }
    }

    /// `try_send` through `tx`, recording the outcome (a failed send's message comes back).
    fn try_send(&self, tx: &MailboxSender<Msg>, id: u32, size: usize) -> bool {
        let ok = match tx.try_send(self.msg(id, size)) {
            Ok(()) => true,
            Err(err @ (SendError::Full(_) | SendError::Closed(_))) => {
                assert_eq!(err.into_inner().id, id, "the message came back");
                false
            }
            Err(other) => panic!("{other:?}"),
        };
        self.sent.lock().unwrap().push((id, ok));
        ok
    }

    /// Receives one message, spinning until it comes (the senders are racing).
    fn receive_one(&self) {
        let start = Instant::now();
        loop {
            let mut guard = self.rx.lock().unwrap();
            let rx = guard.as_mut().expect("receiver");
            match rx.try_recv() {
                Ok(msg) => {
                    assert!(rx.len() <= self.capacity, "{} held", rx.len() + 1);
                    self.received.lock().unwrap().push(msg.id);
                    return;
                }
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => panic!("disconnected"),
            }
            drop(guard);
            std::hint::spin_loop();
            assert!(start.elapsed() < Duration::from_secs(10), "no message came");
        }
    }

    fn sent_ok(&self) -> Vec<u32> {
        let sent = self.sent.lock().unwrap();
        sent.iter()
            .filter(|(_, ok)| *ok)
            .map(|(id, _)| *id)
            .collect()
    }

    /// After the race: what the mailbox holds is within the capacity and is exactly what was
    /// sent and not yet received, in order (`one_sender`: every send came from one thread, one
    /// after the other; otherwise the order across threads is the order their sends completed,
    /// which the test cannot see, so only the set is checked); then everything is dropped
    /// exactly once.
    fn finish(self, budget_left: Option<usize>, one_sender: bool) {
        let received = self.received.lock().unwrap().clone();
        let mut expected: Vec<u32> = self.sent_ok();
        expected.retain(|id| !received.contains(id));
        if let Some(mut rx) = self.rx.lock().unwrap().take() {
            assert!(
                rx.len() <= self.capacity,
                "{} messages held with capacity {} (sent {:?}, received {received:?})",
                rx.len(),
                self.capacity,
                self.sent.lock().unwrap()
            );
            assert_eq!(rx.len(), expected.len(), "held {expected:?}");
            if let Some(budget) = budget_left {
                assert_eq!(rx.pool_stats().bytes_in_use, budget);
            }
            let mut got = Vec::new();
            while let Ok(msg) = rx.try_recv() {
                got.push(msg.id);
            }
            if !one_sender {
                got.sort_unstable();
                expected.sort_unstable();
            }
            assert_eq!(got, expected, "exactly once, in order");
        }
        let live = self.live.clone();
        drop(self);
        assert_eq!(live.load(Ordering::SeqCst), 0, "every message dropped once");
    }
}

/// Two threads meeting at a spinning rendezvous (a parking barrier would make every
/// iteration a scheduler round trip).
struct Rendezvous {
    generation: AtomicUsize,
    arrived: AtomicUsize,
}

impl Rendezvous {
    fn meet(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) == 1 {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.store(generation + 1, Ordering::Release);
            return;
        }
        let start = Instant::now();
        while self.generation.load(Ordering::Acquire) == generation {
            std::hint::spin_loop();
            if start.elapsed() > Duration::from_micros(200) {
                std::thread::yield_now();
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the other side hung"
            );
        }
    }
}

/// Runs `iterations` rounds: `set_up` makes the case, `caller` (this thread) and `worker`
/// (another) race on it, `check` judges it.
fn race(
    iterations: usize,
    set_up: impl Fn() -> Case,
    caller: impl Fn(&Case),
    worker: impl Fn(&Case) + Send + 'static,
    check: impl Fn(Case),
) {
    // One scenario at a time: the test harness runs tests in parallel, and seven pairs of
    // spinning threads on two cores would mostly wait for each other.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let meet = Arc::new(Rendezvous {
        generation: AtomicUsize::new(0),
        arrived: AtomicUsize::new(0),
    });
    let slot: Arc<Mutex<Option<Arc<Case>>>> = Arc::new(Mutex::new(None));
    let thread = {
        let (meet, slot) = (meet.clone(), slot.clone());
        std::thread::spawn(move || {
            loop {
                meet.meet();
                let Some(case) = slot.lock().unwrap().clone() else {
                    return;
                };
                meet.meet();
                worker(&case);
                drop(case);
                meet.meet();
            }
        })
    };
    for _ in 0..iterations {
        let case = Arc::new(set_up());
        *slot.lock().unwrap() = Some(case.clone());
        meet.meet();
        meet.meet();
        caller(&case);
        meet.meet();
        *slot.lock().unwrap() = None;
        check(Arc::into_inner(case).expect("the worker let go"));
    }
    meet.meet();
    thread.join().unwrap();
}

/// A waker that unparks its thread; `block_on` panics if a future stays pending for seconds
/// without being woken (a lost wake-up), instead of hanging.
struct Unpark {
    thread: std::thread::Thread,
    woken: AtomicBool,
}

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        self.thread.unpark();
    }
}

fn block_on<F: Future>(fut: F) -> F::Output {
    let unpark = Arc::new(Unpark {
        thread: std::thread::current(),
        woken: AtomicBool::new(false),
    });
    let waker = Waker::from(unpark.clone());
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        let start = Instant::now();
        while !unpark.woken.swap(false, Ordering::SeqCst) {
            std::thread::park_timeout(Duration::from_millis(100));
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "pending and never woken: a lost wake-up"
            );
        }
    }
}

fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

/// Capacity 2, the ring full: one thread clones the sender while the other `try_send`s on
/// the original handle. Nothing is received, so that send must find the mailbox full
/// whatever the interleaving (before the fix it could slip into the shared lane while the
/// switch was between its mark and its reservation: 3 held).
fn try_send_racing_the_switch(iterations: usize) {
    race(
        iterations,
        || {
            let case = Case::new(2, 1000);
            assert!(case.try_send(&case.tx, 0, 1) && case.try_send(&case.tx, 1, 1));
            case
        },
        |case| *case.clone.lock().unwrap() = Some(case.tx.clone()),
        |case| assert!(!case.try_send(&case.tx, 2, 1), "a third message in 2 slots"),
        |case| case.finish(Some(2), true),
    );
}

/// Capacity 2: the receiver waits for a message while the sender pushes one on the ring,
/// clones and sends one through the clone, then (once the receiver has one) tries two more.
/// At most two may be held at the end, stash included (before the fix the stash held a
/// message outside the capacity: 3).
fn the_stash_with_a_clone_arriving_between_two_pops(iterations: usize) {
    race(
        iterations,
        || Case::new(2, 1000),
        |case| {
            case.try_send(&case.tx, 0, 1);
            let clone = case.tx.clone();
            case.try_send(&clone, 1, 1);
            while !case.flag.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            case.try_send(&clone, 2, 1);
            case.try_send(&clone, 3, 1);
            *case.clone.lock().unwrap() = Some(clone);
        },
        |case| {
            case.receive_one();
            case.flag.store(true, Ordering::SeqCst);
        },
        |case| {
            assert_eq!(
                case.received.lock().unwrap()[0],
                0,
                "the ring's message first"
            );
            case.finish(None, true);
        },
    );
}

/// The receiver is dropped (`drop`) or closed (`close`) while the one sender pushes on the
/// ring: a send either failed with its message or was sent; what was sent is received (close)
/// or dropped with the receiver (drop), once; the budget comes back.
fn close_or_drop_racing_a_push(iterations: usize, drop_it: bool) {
    race(
        iterations,
        || Case::new(4, 1000),
        |case| {
            let mut closed = false;
            for id in 0..3 {
                let ok = case.try_send(&case.tx, id, 5);
                assert!(!(closed && ok), "sent after a send found it closed");
                closed |= !ok;
            }
        },
        move |case| {
            let mut rx = case.rx.lock().unwrap();
            if drop_it {
                rx.take();
            } else {
                rx.as_mut().unwrap().close();
            }
        },
        |case| {
            if !drop_it {
                assert!(case.tx.is_closed());
            }
            case.finish(None, true);
        },
    );
}

/// A `send` on a full mailbox (one slot, held by the ring's message) is polled once, so it
/// switches and waits for the slot, and is dropped while the receiver takes the message:
/// no slot or byte is lost, whichever came first.
fn a_send_cancelled_while_the_slot_frees(iterations: usize) {
    race(
        iterations,
        || {
            let case = Case::new(1, 100);
            assert!(case.try_send(&case.tx, 0, 10));
            case
        },
        |case| {
            let msg = case.msg(1, 10);
            let mut send = pin!(case.tx.send(msg));
            if let Poll::Ready(done) = poll_once(send.as_mut()) {
                // The receiver was first: the slot was free.
                done.unwrap();
                case.sent.lock().unwrap().push((1, true));
            }
        },
        |case| case.receive_one(),
        |case| {
            let held = usize::from(case.sent_ok().contains(&1));
            case.finish(Some(10 * held), true);
        },
    );
}

/// Budget 10, 8 bytes held: a send of 5 waits for bytes (registering its waker) while the
/// receiver takes the 8: the send is woken and completes, never left asleep.
fn a_release_racing_a_waiters_registration(iterations: usize) {
    race(
        iterations,
        || {
            let case = Case::new(4, 10);
            assert!(case.try_send(&case.tx, 0, 8));
            case
        },
        |case| {
            let msg = case.msg(1, 5);
            block_on(case.tx.send(msg)).unwrap();
            case.sent.lock().unwrap().push((1, true));
        },
        |case| case.receive_one(),
        |case| case.finish(Some(5), true),
    );
}

/// Capacity 2, the ring full: a `send` must wait (it switches and queues for a slot) while
/// the other thread clones, receives both ring messages and sends through the clone. Order,
/// capacity and exactly-once hold; the waiting send completes.
fn a_clone_during_a_pending_send_with_a_full_ring(iterations: usize) {
    race(
        iterations,
        || {
            let case = Case::new(2, 1000);
            assert!(case.try_send(&case.tx, 0, 1) && case.try_send(&case.tx, 1, 1));
            case
        },
        |case| {
            let msg = case.msg(2, 1);
            block_on(case.tx.send(msg)).unwrap();
            case.sent.lock().unwrap().push((2, true));
        },
        |case| {
            let clone = case.tx.clone();
            case.receive_one();
            case.receive_one();
            case.try_send(&clone, 3, 1);
            *case.clone.lock().unwrap() = Some(clone);
        },
        |case| {
            assert_eq!(case.received.lock().unwrap()[..2], [0, 1]);
            // The waiting send and the clone's are two senders: their order is theirs.
            case.finish(None, false);
        },
    );
}

/// The receiver is dropped while a second handle (the shared lane) sends three messages
/// (`try_send`, or `send` when `blocking`): once both are done, no message is alive and no
/// byte or frame held while the handles still live, and nothing was sent after a send found
/// the mailbox closed (before the door, a send past its check of `closed` put its message in
/// after the drop had drained the channel, and was told `Ok`).
fn dropping_the_receiver_racing_shared_lane_sends(iterations: usize, blocking: bool) {
    race(
        iterations,
        || {
            let case = Case::new(4, 1000);
            *case.clone.lock().unwrap() = Some(case.tx.clone());
            case
        },
        move |case| {
            let clone = case.clone.lock().unwrap();
            let tx = clone.as_ref().expect("the clone");
            let mut closed = false;
            for id in 0..3 {
                let ok = if blocking {
                    let sent = match block_on(tx.send(case.msg(id, 5))) {
                        Ok(()) => true,
                        Err(SendError::Closed(msg)) => {
                            assert_eq!(msg.id, id, "the message came back");
                            false
                        }
                        Err(other) => panic!("{other:?}"),
                    };
                    case.sent.lock().unwrap().push((id, sent));
                    sent
                } else {
                    case.try_send(tx, id, 5)
                };
                assert!(!(closed && ok), "sent after a send found it closed");
                closed |= !ok;
            }
        },
        |case| drop(case.rx.lock().unwrap().take()),
        |case| {
            let alive = case.live.load(Ordering::SeqCst);
            let stats = case.tx.pool_stats();
            assert!(
                alive == 0 && stats.bytes_in_use == 0 && stats.slots_in_use == 0,
                "the receiver dropped, the sends done (sent {:?}): {alive} message(s) alive, \
                 {stats:?}",
                case.sent.lock().unwrap()
            );
            case.finish(None, false);
        },
    );
}

macro_rules! short_and_soak {
    ($($short:ident, $soak:ident => $run:expr;)*) => {$(
        #[test]
        fn $short() {
            let run: fn(usize) = $run;
            run(SHORT);
        }

        #[test]
        #[ignore = "the soak: cargo test --release -p mty-runtime --test soak -- --ignored"]
        fn $soak() {
            let run: fn(usize) = $run;
            run(SOAK);
        }
    )*};
}

short_and_soak! {
    try_send_racing_the_switch_never_exceeds_the_capacity,
    soak_try_send_racing_the_switch => try_send_racing_the_switch;
    the_stash_holds_a_slot,
    soak_the_stash => the_stash_with_a_clone_arriving_between_two_pops;
    dropping_the_receiver_racing_a_push_loses_nothing,
    soak_dropping_the_receiver => |n| close_or_drop_racing_a_push(n, true);
    closing_racing_a_push_loses_nothing,
    soak_closing => |n| close_or_drop_racing_a_push(n, false);
    a_cancelled_send_leaks_nothing,
    soak_a_cancelled_send => a_send_cancelled_while_the_slot_frees;
    a_release_never_misses_a_waiter,
    soak_a_release_and_a_waiter => a_release_racing_a_waiters_registration;
    a_clone_during_a_pending_send_keeps_order_and_capacity,
    soak_a_clone_during_a_pending_send => a_clone_during_a_pending_send_with_a_full_ring;
    dropping_the_receiver_racing_shared_lane_try_sends_holds_nothing,
    soak_dropping_the_receiver_racing_shared_lane_try_sends =>
        |n| dropping_the_receiver_racing_shared_lane_sends(n, false);
    dropping_the_receiver_racing_shared_lane_sends_holds_nothing,
    soak_dropping_the_receiver_racing_shared_lane_sends =>
        |n| dropping_the_receiver_racing_shared_lane_sends(n, true);
}
