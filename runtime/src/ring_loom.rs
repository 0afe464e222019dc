//! A loom model of the single-sender lane's switch: the one sender pushing into the ring
//! while a clone switches the mailbox to the shared lane and sends there, the receiver
//! draining both. Every interleaving (within the preemption bound) delivers every message
//! exactly once, the sender's in the order sent, and never holds more than the capacity.
//! Run with the other loom models: `RUSTFLAGS="--cfg mty_loom" cargo test -p mty-runtime
//! --lib --test loom --release --target-dir target/loom`.

use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};

use loom::sync::Arc;
use loom::thread;

use super::*;

/// The shared lane's stand-in: a queue with as many slots as the ring's capacity, whose
/// permits are taken as tokio's channel's are.
struct Shared {
    /// The queued messages and the free slots.
    state: Mutex<(VecDeque<u32>, usize)>,
    capacity: usize,
}

/// A slot of the shared lane held for a message still in the ring.
struct Permit(Arc<Shared>);

impl Drop for Permit {
    fn drop(&mut self) {
        let mut state = lock(&self.0.state);
        state.1 += 1;
        assert!(state.1 <= self.0.capacity, "a permit was given back twice");
    }
}

type Model = Ring<u32, Permit>;

fn reserve(shared: &Arc<Shared>) -> Option<Permit> {
    let mut state = lock(&shared.state);
    assert!(
        state.1 > 0,
        "no free slot in the shared lane for a message still in the ring"
    );
    state.1 -= 1;
    Some(Permit(shared.clone()))
}

/// Sends on the shared lane. The models send no more messages than the capacity, so a free
/// slot is always there (waiting for one is tokio's, and tested with it).
fn send_shared(ring: &Model, shared: &Arc<Shared>, value: u32) {
    ring.switch(|| reserve(shared));
    let mut state = lock(&shared.state);
    assert!(state.1 > 0, "no free slot, although the capacity suffices");
    state.1 -= 1;
    state.0.push_back(value);
    let held = ring.len() + state.0.len();
    assert!(held <= shared.capacity, "{held} messages held at once");
}

/// What the mailbox's `send` does: the ring while single and not full, else the switch.
fn send(ring: &Model, shared: &Arc<Shared>, value: u32) {
    let value = if ring.is_single() {
        match ring.try_push(value) {
            Push::Done => return,
            Push::Full(value) | Push::Shared(value) => value,
            Push::Closed(_) => unreachable!("never closed here"),
        }
    } else {
        value
    };
    send_shared(ring, shared, value);
}

/// One receive attempt, as the mailbox's `recv` makes it: the ring or the stash, else the
/// rest (the shared lane, keeping the ring's messages first).
fn receive(ring: &Model, shared: &Arc<Shared>, merge: &mut Merge<u32>) -> Option<u32> {
    let mut cx = Context::from_waker(Waker::noop());
    // SAFETY: the model's main thread is the ring's one consumer.
    if let Some(value) = unsafe { merge.ready(ring) } {
        return Some(value);
    }
    let polled = unsafe {
        merge.poll_rest(ring, &mut cx, |_| {
            let mut state = lock(&shared.state);
            match state.0.pop_front() {
                Some(value) => {
                    state.1 += 1;
                    Poll::Ready(Some(value))
                }
                None => Poll::Pending,
            }
        })
    };
    match polled {
        Poll::Ready(value) => value,
        Poll::Pending => None,
    }
}

/// The owner sends `from_owner` (ring first), a clone made on another thread switches and
/// sends `from_clone`, and the receiver makes `racing` attempts meanwhile, then drains.
fn model(capacity: usize, from_owner: &'static [u32], from_clone: u32, racing: usize) {
    assert!(from_owner.len() < capacity, "no send may wait here");
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.max_branches = 10_000;
    builder.check(move || {
        let ring: Arc<Model> = Arc::new(Ring::new(capacity, true));
        let shared = Arc::new(Shared {
            state: Mutex::new((VecDeque::new(), capacity)),
            capacity,
        });
        let owner = {
            let (ring, shared) = (ring.clone(), shared.clone());
            thread::spawn(move || {
                for &value in from_owner {
                    send(&ring, &shared, value);
                }
            })
        };
        let clone = {
            let (ring, shared) = (ring.clone(), shared.clone());
            thread::spawn(move || {
                // The clone: the switch, then a send on the shared lane.
                ring.switch(|| reserve(&shared));
                send(&ring, &shared, from_clone);
            })
        };
        let mut merge = Merge::new(&*ring);
        let mut got: Vec<u32> = (0..racing)
            .filter_map(|_| receive(&ring, &shared, &mut merge))
            .collect();
        owner.join().unwrap();
        clone.join().unwrap();
        while let Some(value) = receive(&ring, &shared, &mut merge) {
            got.push(value);
        }
        let owners: Vec<u32> = got
            .iter()
            .copied()
            .filter(|v| from_owner.contains(v))
            .collect();
        assert_eq!(
            owners, from_owner,
            "the owner's messages, in order: {got:?}"
        );
        assert_eq!(
            got.iter().filter(|&&v| v == from_clone).count(),
            1,
            "the clone's message once: {got:?}"
        );
        assert_eq!(ring.len(), 0);
        assert_eq!(
            lock(&shared.state).1,
            capacity,
            "every slot given back: {got:?}"
        );
    });
}

/// The receiver pops while the clone switches: the ledger gives back exactly the permits of
/// the messages the switch counted.
#[test]
fn a_clone_switching_while_the_receiver_pops_keeps_every_slot() {
    model(2, &[1], 10, 2);
}

/// Two ring sends racing the switch: order and capacity hold, nothing lost or doubled.
#[test]
fn a_clone_racing_two_ring_sends_keeps_order_and_capacity() {
    model(3, &[1, 2], 10, 2);
}
