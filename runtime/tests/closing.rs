//! What a send accepted never outlives the receiver, and the frame count at its edge: the two
//! defects of the 2026-12-02 review, adapted from its reproducers
//! (`../shared/repro/mailbox-2026-12-02/`), with real threads on the real scheduler. The
//! interleavings themselves are loom's (`tests/loom/closing.rs`).
//!
//! `ITERS=N` sets the racing test's runs (default 1,000 per lane); the review's figure is
//! `ITERS=100000 taskset -c 0 cargo test --release -p mty-runtime --test closing`.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use mty_runtime::{ByteSize, Mailbox, MailboxSender, PoolStats, SendError};

/// A message that counts itself alive.
#[derive(Debug)]
struct Msg {
    size: usize,
    live: Arc<AtomicIsize>,
}

impl Msg {
    fn new(size: usize, live: &Arc<AtomicIsize>) -> Msg {
        live.fetch_add(1, SeqCst);
        Msg {
            size,
            live: live.clone(),
        }
    }
}

impl Drop for Msg {
    fn drop(&mut self) {
        self.live.fetch_sub(1, SeqCst);
    }
}

impl ByteSize for Msg {
    fn byte_size(&self) -> usize {
        self.size
    }
}

fn iters(default: usize) -> usize {
    std::env::var("ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// xorshift64: each run's receive time, reproducible from its index.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03 | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// One thread spins `try_send`; the other receives for a random 0..2 ms and drops the
/// receiver. Once the receiver is gone and the sender has seen `Closed`, no message may be
/// alive and no byte held, while the sender handles still live. `shared`: a second handle
/// exists (the shared lane); otherwise the single-sender ring.
fn receiver_dropped_while_sending(shared: bool) {
    let runs = iters(1000);
    let mut stranded = 0usize;
    let mut example = None;
    for run in 0..runs {
        let for_us = Rng::new(run as u64).below(2000);
        // The review's capacities: roomy enough that the sender is mostly sending, not
        // spinning on `Full` (on the shared lane; the ring holds at most 1024).
        let capacity = if shared { 1 << 18 } else { 1024 };
        let (tx, mut rx) = Mailbox::new(capacity, 1 << 30).open::<Msg>();
        let other = shared.then(|| tx.clone());
        let live = Arc::new(AtomicIsize::new(0));
        let (sent, received) = std::thread::scope(|s| {
            let sender = s.spawn(|| {
                let mut sent = 0u32;
                loop {
                    match tx.try_send(Msg::new(8, &live)) {
                        Ok(()) => sent += 1,
                        Err(SendError::Full(_)) => std::hint::spin_loop(),
                        Err(SendError::Closed(_)) => break sent,
                        Err(e) => panic!("{e:?}"),
                    }
                }
            });
            let receiver = s.spawn(move || {
                let deadline = Instant::now() + Duration::from_micros(for_us);
                let mut received = 0u32;
                while Instant::now() < deadline {
                    received += u32::from(rx.try_recv().is_ok());
                }
                drop(rx);
                received
            });
            (sender.join().unwrap(), receiver.join().unwrap())
        });
        let alive = live.load(SeqCst);
        let stats = tx.pool_stats();
        if alive != 0 || stats.bytes_in_use != 0 || stats.slots_in_use != 0 {
            stranded += 1;
            example.get_or_insert(format!(
                "run {run}: {sent} sent, {received} received, receiver dropped: {alive} \
                 message(s) alive, {stats:?}"
            ));
        }
        drop((tx, other));
        assert_eq!(
            live.load(SeqCst),
            0,
            "every message dropped with the last sender"
        );
    }
    println!(
        "shared lane {shared}: {stranded} of {runs} runs left a message alive after the \
         receiver's drop"
    );
    assert_eq!(stranded, 0, "{}", example.unwrap_or_default());
}

#[test]
fn the_receivers_drop_drops_what_the_shared_lane_accepted() {
    receiver_dropped_while_sending(true);
}

#[test]
fn the_receivers_drop_drops_what_the_ring_accepted() {
    receiver_dropped_while_sending(false);
}

#[derive(Debug)]
struct One;

impl ByteSize for One {
    fn byte_size(&self) -> usize {
        1
    }
}

/// The waiting sender's waker. It runs in the receiver's thread, inside tokio's
/// `try_recv` as it gives the slot back and before the mailbox drops the received envelope's
/// frame: it lets the sender be admitted, then samples the accounting there.
struct Hook {
    sender: Thread,
    tx: MailboxSender<One>,
    target: usize,
    seen: Mutex<Option<PoolStats>>,
    fired: AtomicBool,
}

impl Wake for Hook {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.sender.unpark();
        if self.fired.swap(true, SeqCst) {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.tx.pool_stats().bytes_in_use < self.target && Instant::now() < deadline {
            std::hint::spin_loop();
        }
        *self.seen.lock().unwrap() = Some(self.tx.pool_stats());
    }
}

/// A mailbox of capacity C holds C + 1 frames for a moment (the slot comes back before the
/// frame). At C = 2^23 - 1 that was 2^23 frames, and the atomic word's 23-bit count wrapped to
/// 0 with 2^23 bytes in use. 1-byte messages: the frames must equal the bytes, also there.
#[test]
fn the_frame_count_holds_at_the_largest_capacity() {
    let capacity = (1usize << 23) - 1;
    let (tx, mut rx) = Mailbox::new(capacity, 1 << 30).open::<One>();
    for _ in 0..capacity {
        tx.try_send(One).unwrap();
    }
    let polled = AtomicBool::new(false);
    let hook: Mutex<Option<Arc<Hook>>> = Mutex::new(None);
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            let waker = Arc::new(Hook {
                sender: std::thread::current(),
                tx: tx.clone(),
                target: capacity + 1,
                seen: Mutex::new(None),
                fired: AtomicBool::new(false),
            });
            *hook.lock().unwrap() = Some(waker.clone());
            let waker = Waker::from(waker);
            let mut cx = Context::from_waker(&waker);
            let mut send = pin!(tx.send(One));
            assert!(
                send.as_mut().poll(&mut cx).is_pending(),
                "full: waits for a slot"
            );
            polled.store(true, SeqCst);
            loop {
                std::thread::park();
                if let Poll::Ready(sent) = send.as_mut().poll(&mut cx) {
                    sent.unwrap();
                    break;
                }
            }
        });
        while !polled.load(SeqCst) {
            std::thread::yield_now();
        }
        rx.try_recv().unwrap();
        sender.join().unwrap();
    });
    let seen = hook
        .lock()
        .unwrap()
        .take()
        .unwrap()
        .seen
        .lock()
        .unwrap()
        .take();
    let seen = seen.expect("the waiting sender's waker ran inside the receive");
    assert_eq!(
        seen.bytes_in_use,
        capacity + 1,
        "the sender was admitted before the received frame went"
    );
    assert_eq!(
        seen.slots_in_use, seen.bytes_in_use,
        "1-byte messages: as many frames as bytes (capacity {capacity})"
    );
    assert_eq!(tx.pool_stats().slots_in_use, capacity);
}

/// A message whose destructor panics.
#[derive(Debug)]
struct Bomb(Arc<AtomicIsize>);

impl Drop for Bomb {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
        panic!("a message's destructor panics");
    }
}

impl ByteSize for Bomb {
    fn byte_size(&self) -> usize {
        8
    }
}

/// The receiver's drop runs messages' destructors; one that panics (in the ring) must not
/// leave the shared lane's messages behind: the rest are still dropped and every byte comes
/// back, and the panic reaches the caller.
#[test]
fn a_panicking_message_in_the_receivers_drop_leaves_nothing_behind() {
    #[derive(Debug)]
    enum Either {
        Bomb(#[allow(dead_code, reason = "held for its drop")] Bomb),
        Msg(#[allow(dead_code, reason = "held for its drop")] Msg),
    }
    impl ByteSize for Either {
        fn byte_size(&self) -> usize {
            8
        }
    }
    let live = Arc::new(AtomicIsize::new(0));
    let (tx, rx) = Mailbox::new(4, 100).open::<Either>();
    live.fetch_add(1, SeqCst);
    tx.try_send(Either::Bomb(Bomb(live.clone()))).unwrap(); // in the ring
    let clone = tx.clone(); // the shared lane from here
    clone.try_send(Either::Msg(Msg::new(8, &live))).unwrap();
    assert_eq!(tx.pool_stats().bytes_in_use, 16);
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(rx)));
    assert!(
        dropped.is_err(),
        "the destructor's panic reaches the caller"
    );
    assert_eq!(live.load(SeqCst), 0, "both messages dropped");
    assert_eq!(tx.pool_stats().bytes_in_use, 0, "every byte back");
    drop((tx, clone));
}
