//! Property test of the mailbox against a model that includes the single-sender lane:
//! random sends (`try_send`, and `send` polled once and dropped when it would wait), receives,
//! clones and drops of senders at any point (so the lane is used, left, and every sender
//! gone), closes and the receiver's drop, also racing sends from another thread on either
//! lane (each send lands before the drop, and is received or dropped with it, or after it,
//! and comes back `Closed`; none is held after). After every step the mailbox agrees with the
//! model: each send's outcome, which lane it is on, what it holds (count within capacity,
//! bytes within the budget, exact byte accounting), and what is received: every message
//! exactly once, in the order sent (one thread: sends complete in program order).

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use mty_runtime::{Admission, ByteSize, Mailbox, MailboxSender, Policy, SendError, TryRecvError};
use proptest::prelude::*;

const BUDGET: usize = 64;

#[derive(Debug, Clone)]
enum Op {
    TrySend {
        handle: usize,
        size: usize,
    },
    /// `send` polled once; dropped (cancelled) if it would wait.
    Send {
        handle: usize,
        size: usize,
    },
    Recv,
    Clone(usize),
    Drop(usize),
    Close,
    DropReceiver,
    /// Another thread sends through a clone of the handle (the shared lane) until it is told
    /// `Closed` (`send` under the policy, waiting if it must, when `wait`; else `try_send`),
    /// while this one receives for `spin` tries and then drops the receiver.
    DropReceiverRacingSend {
        handle: usize,
        size: usize,
        wait: bool,
        spin: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (any::<usize>(), 0..=BUDGET + 6).prop_map(|(handle, size)| Op::TrySend { handle, size }),
        3 => (any::<usize>(), 0..=BUDGET + 6).prop_map(|(handle, size)| Op::Send { handle, size }),
        6 => Just(Op::Recv),
        1 => any::<usize>().prop_map(Op::Clone),
        1 => any::<usize>().prop_map(Op::Drop),
        1 => Just(Op::Close),
        1 => Just(Op::DropReceiver),
        2 => (any::<usize>(), 0..=BUDGET, any::<bool>(), 0u32..2_000)
            .prop_map(|(handle, size, wait, spin)| Op::DropReceiverRacingSend { handle, size, wait, spin }),
    ]
}

/// A message: its number (order and identity) and the bytes it charges (zero takes the
/// fast path).
#[derive(Debug)]
struct Msg {
    id: u32,
    size: usize,
}

impl ByteSize for Msg {
    fn byte_size(&self) -> usize {
        self.size
    }
}

/// What the spec says a send of `size` bytes does now.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Sent,
    Full,
    Closed,
    Oversize,
}

struct Model {
    capacity: usize,
    queue: VecDeque<(u32, usize)>,
    closed: bool,
    receiver: bool,
    single: bool,
}

impl Model {
    fn bytes(&self) -> usize {
        self.queue.iter().map(|(_, n)| n).sum()
    }

    fn expect(&self, size: usize) -> Expect {
        if size > BUDGET {
            Expect::Oversize
        } else if self.closed {
            Expect::Closed
        } else if self.queue.len() == self.capacity || self.bytes() + size > BUDGET {
            Expect::Full
        } else {
            Expect::Sent
        }
    }
}

fn outcome(result: &Result<(), SendError<Msg>>) -> Expect {
    match result {
        Ok(()) => Expect::Sent,
        Err(SendError::Full(_)) => Expect::Full,
        Err(SendError::Closed(_)) => Expect::Closed,
        Err(SendError::Oversize { .. }) => Expect::Oversize,
    }
}

/// Polls `future` on this thread until it is ready, parking between polls.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut Context::from_waker(&waker)) {
            return output;
        }
        std::thread::park();
    }
}

fn pick<T>(items: &[T], i: usize) -> Option<usize> {
    (!items.is_empty()).then(|| i % items.len())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_mailbox_keeps_its_model_through_the_lane(
        ops in prop::collection::vec(op(), 0..120),
        capacity in 1usize..=4,
        policy in prop_oneof![Just(Policy::Block), Just(Policy::Fail)],
        admission in prop_oneof![Just(Admission::Locked), Just(Admission::Atomic)],
    ) {
        let (tx, rx) = Mailbox::new(capacity, BUDGET)
            .policy(policy)
            .admission(admission)
            .open::<Msg>();
        let mut senders: Vec<MailboxSender<Msg>> = vec![tx];
        let mut rx = Some(rx);
        let mut model = Model { capacity, queue: VecDeque::new(), closed: false, receiver: true, single: true };
        let mut next_id = 0u32;
        for op in ops {
            match op {
                Op::TrySend { handle, size } | Op::Send { handle, size } => {
                    let Some(at) = pick(&senders, handle) else { continue };
                    let expect = model.expect(size);
                    let id = next_id;
                    next_id += 1;
                    let is_send = matches!(op, Op::Send { .. });
                    let got = if is_send {
                        let mut send = pin!(senders[at].send(Msg { id, size }));
                        match send.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                            Poll::Ready(result) => Some(result),
                            Poll::Pending => None, // dropped here: cancelled
                        }
                    } else {
                        Some(senders[at].try_send(Msg { id, size }))
                    };
                    let sent = matches!(got, Some(Ok(())));
                    match got {
                        Some(result) => {
                            let waits = is_send && policy == Policy::Block && expect == Expect::Full;
                            prop_assert!(!waits, "a Block send that must wait returned {:?}", outcome(&result));
                            prop_assert_eq!(outcome(&result), expect, "send of {} bytes", size);
                            if let Err(err) = result {
                                prop_assert_eq!(err.into_inner().id, id, "the message came back");
                            }
                        }
                        None => {
                            prop_assert!(
                                is_send && policy == Policy::Block && expect == Expect::Full,
                                "a send waited although the spec says {:?}", expect
                            );
                            // It waited, so it switched to the shared lane.
                            model.single = false;
                        }
                    }
                    if sent {
                        model.queue.push_back((id, size));
                    }
                }
                Op::Recv => if let Some(rx) = rx.as_mut() {
                    match rx.try_recv() {
                        Ok(msg) => {
                            let (id, size) = model.queue.pop_front().expect("the model holds one");
                            prop_assert_eq!((msg.id, msg.size), (id, size), "in order, once");
                        }
                        Err(err) => {
                            prop_assert!(model.queue.is_empty(), "{:?} with {:?} queued", err, model.queue);
                            let over = model.closed || senders.is_empty();
                            prop_assert_eq!(err, if over { TryRecvError::Disconnected } else { TryRecvError::Empty });
                        }
                    }
                },
                Op::Clone(i) => if let Some(at) = pick(&senders, i) {
                    let clone = senders[at].clone();
                    senders.push(clone);
                    model.single = false;
                },
                Op::Drop(i) => if let Some(at) = pick(&senders, i) {
                    senders.remove(at);
                },
                Op::Close => if let Some(rx) = rx.as_mut() {
                    rx.close();
                    model.closed = true;
                },
                Op::DropReceiverRacingSend { handle, size, wait, spin } => {
                    let (Some(at), Some(mut receiver)) = (pick(&senders, handle), rx.take()) else { continue };
                    let first = next_id;
                    // Through a clone: the shared lane, where the door decides.
                    let clone = senders[at].clone();
                    let tx = &clone;
                    // The other thread sends until it is told `Closed` (or `Oversize`, at
                    // once); this one receives for `spin` tries, then drops the receiver.
                    let started = std::sync::atomic::AtomicBool::new(false);
                    let (outcomes, received) = std::thread::scope(|s| {
                        let started = &started;
                        let sender = s.spawn(move || {
                            started.store(true, std::sync::atomic::Ordering::Release);
                            let mut outcomes = Vec::new();
                            for id in first.. {
                                let msg = Msg { id, size };
                                let result = if wait { block_on(tx.send(msg)) } else { tx.try_send(msg) };
                                let got = outcome(&result);
                                if let Err(err) = result {
                                    assert_eq!(err.into_inner().id, id, "the message came back");
                                }
                                let last = matches!(got, Expect::Closed | Expect::Oversize);
                                outcomes.push(got);
                                if last {
                                    break;
                                }
                                std::thread::yield_now();
                            }
                            outcomes
                        });
                        let mut received = Vec::new();
                        while !started.load(std::sync::atomic::Ordering::Acquire) {
                            std::hint::spin_loop();
                        }
                        for _ in 0..spin {
                            if let Ok(msg) = receiver.try_recv() {
                                received.push(msg.id);
                            }
                        }
                        drop(receiver);
                        (sender.join().unwrap(), received)
                    });
                    next_id += outcomes.len() as u32;
                    // Before the drop: what was queued, then the racing sends that were
                    // `Sent`, each received once, in order.
                    let sent: Vec<u32> = (first..).zip(&outcomes).filter(|(_, o)| **o == Expect::Sent).map(|(id, _)| id).collect();
                    let queued: Vec<u32> = model.queue.iter().map(|(id, _)| *id).chain(sent.iter().copied()).collect();
                    prop_assert_eq!(&received[..], &queued[..received.len()], "received in order, once");
                    let last = *outcomes.last().expect("at least one send");
                    prop_assert!(
                        last == Expect::Closed || (last == Expect::Oversize && outcomes.len() == 1),
                        "the sends ended with {:?}", outcomes
                    );
                    for o in &outcomes[..outcomes.len() - 1] {
                        prop_assert!(matches!(o, Expect::Sent | Expect::Full), "{:?} before the end", outcomes);
                    }
                    drop(clone);
                    model.single = false;
                    model.queue.clear(); // dropped with the receiver, bytes given back
                    model.closed = true;
                    model.receiver = false;
                }
                Op::DropReceiver => if let Some(rx) = rx.take() {
                    drop(rx);
                    model.queue.clear(); // dropped with the receiver, bytes given back
                    model.closed = true;
                    model.receiver = false;
                },
            }
            // What the mailbox holds, seen from whichever handle is left.
            let stats = rx.as_ref().map(|rx| rx.pool_stats()).or_else(|| senders.first().map(|tx| tx.pool_stats()));
            if let Some(stats) = stats {
                prop_assert_eq!(stats.bytes_in_use, model.bytes(), "bytes held");
                let frames = model.queue.iter().filter(|(_, n)| *n > 0).count();
                prop_assert_eq!(stats.slots_in_use, frames, "frames held");
                prop_assert!(stats.bytes_in_use <= BUDGET);
            }
            if let Some(rx) = rx.as_ref() {
                prop_assert_eq!(rx.len(), model.queue.len(), "messages held");
                prop_assert!(rx.len() <= capacity);
            }
            for tx in &senders {
                prop_assert_eq!(tx.on_single_lane(), model.single, "which lane");
                prop_assert_eq!(tx.is_closed(), model.closed);
            }
        }
        if let Some(mut rx) = rx {
            drop(senders);
            while let Ok(msg) = rx.try_recv() {
                let (id, _) = model.queue.pop_front().expect("the model holds one");
                prop_assert_eq!(msg.id, id);
            }
            prop_assert!(model.queue.is_empty(), "everything sent arrived");
            prop_assert_eq!(rx.pool_stats().bytes_in_use, 0);
        }
    }
}
