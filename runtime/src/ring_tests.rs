//! The ring's own edge: indices that wrap. On a 32-bit target they wrap after 2^32 messages;
//! here the ring starts just below `usize::MAX`, so a switch straddles the wrap at once.

use std::sync::atomic::{AtomicUsize as StdCount, Ordering as StdOrdering};

use super::*;

/// A permit that counts how many are out.
struct Permit(std::sync::Arc<StdCount>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, StdOrdering::SeqCst);
    }
}

fn reserve(out: &std::sync::Arc<StdCount>) -> Option<Permit> {
    out.fetch_add(1, StdOrdering::SeqCst);
    Some(Permit(out.clone()))
}

/// A ring of `capacity` whose next index is `start`.
fn ring_at(capacity: usize, start: usize) -> (Arc<Ring<u32, Permit>>, Merge<u32, Permit>) {
    let (ring, merge) = channel(capacity, true);
    ring.head.store(start, Ordering::SeqCst);
    ring.tail.store(start, Ordering::SeqCst);
    (ring, merge)
}

/// A switch whose messages straddle the wrap reserves one permit for each, and the pops give
/// every one back (before: `from..tail` was empty across the wrap, and `index >= from`
/// kept the permit of a message past it).
#[test]
fn a_switch_straddling_the_index_wrap_reserves_and_gives_back_every_permit() {
    for start in [usize::MAX - 1, usize::MAX, usize::MAX - 3] {
        let out = std::sync::Arc::new(StdCount::new(0));
        let (ring, mut merge) = ring_at(4, start);
        for value in 0..3 {
            assert_eq!(ring.try_push_with(|| value), Push::Done);
        }
        assert_eq!(ring.len(), 3);
        ring.switch(|| reserve(&out));
        assert_eq!(
            out.load(StdOrdering::SeqCst),
            3,
            "start {start}: one permit per message in the ring"
        );
        for value in 0..3 {
            assert_eq!(merge.ready(), Some(value));
            assert_eq!(out.load(StdOrdering::SeqCst), 2 - value as usize);
        }
        assert_eq!(merge.ready(), None);
    }
}

/// A pop that races the switch (popped after the lane left `SINGLE`, before the switch
/// counted) is judged by distance across the wrap too.
#[test]
fn pops_recorded_before_the_count_are_judged_across_the_wrap() {
    let out = std::sync::Arc::new(StdCount::new(0));
    let (ring, mut merge) = ring_at(4, usize::MAX);
    for value in 0..2 {
        assert_eq!(ring.try_push_with(|| value), Push::Done);
    }
    // As if the consumer popped index usize::MAX between the CAS and the count: recorded,
    // not counted (the switch counts from the head it reads, 0).
    ring.lane.store(SWITCHING, Ordering::SeqCst);
    assert_eq!(merge.ready(), Some(0));
    assert_eq!(lock(&ring.ledger).popped, vec![usize::MAX]);
    ring.lane.store(SINGLE, Ordering::SeqCst);
    ring.switch(|| reserve(&out));
    assert_eq!(
        out.load(StdOrdering::SeqCst),
        1,
        "one message left, one permit"
    );
    assert_eq!(merge.ready(), Some(1));
    assert_eq!(out.load(StdOrdering::SeqCst), 0, "given back");
}
