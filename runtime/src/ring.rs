//! The single-sender lane: while a mailbox has one sender handle, its messages go through a
//! bounded single-producer ring instead of tokio's multi-producer channel.
//!
//! The ring is lock-free for its one producer and its one consumer: a push writes a slot and
//! publishes it by storing `tail`; a pop frees its index by storing `head`, then reads the
//! slot, which no push reaches again before the next pop (the ring has a slot more than the
//! mailbox's capacity, rounded up to a power of two). What
//! makes "one producer" true is the **token**, a bit a push holds for the few instructions
//! between checking the lane and publishing (never across an `.await`). A `&MailboxSender`
//! can be shared between threads, so one handle can still be used by two threads at once: the
//! second finds the token taken, and that ends the fast path as a clone does.
//!
//! **Who waits.** The token shares one word ([`Ring::state`]) with two more bits: `PARKED`,
//! the consumer waiting on an empty ring, and `WAITERS`, threads waiting for the token. A
//! push takes the token with one read-modify-write of the word and gives it back with
//! another, which also reads who waits. The consumer sets `PARKED` (and a waiter `WAITERS`)
//! with a read-modify-write of the same word, so the two are ordered: the push's release
//! comes first, and the consumer's acquire then sees the push (it re-checks the ring after
//! parking), or the consumer's comes first, and the push's release reads it and wakes the
//! consumer. No fence on the push: a send takes two locked instructions, where the fence and
//! the separate flags it ordered took three and a full barrier.
//!
//! **The switch** ([`Ring::switch`]) is one way, from `SINGLE` to `SHARED` (the tokio lane):
//! on a clone, on contention for the token, and when a send under `Policy::Block` would have
//! to wait for a slot or for bytes (all waiting is the tokio lane's and the pool's, whose
//! queues are fair). The switcher marks the lane `SWITCHING`, takes the token (so no push is
//! in progress and none can start: a push checks the lane under the token), reserves one
//! permit of the tokio channel for every message still in the ring, and marks it `SHARED`.
//! The consumer gives a permit back for every message it pops after the switch; so messages
//! in the ring and in the tokio channel together never exceed the capacity. [`Ledger`] pairs
//! the pops that race with the switch to the permits: a pop of an index the switcher counted
//! gives one back, an earlier one does not. Indices wrap (after 2^32 messages on a 32-bit
//! target): "counted" is a distance from the switch's first index, never a `>=`.
//!
//! Nothing but the switcher takes a permit of the tokio channel before the lane is `SHARED`:
//! every send to the tokio channel (`send`, `try_send`, a clone) first completes the switch,
//! waiting for a switch in progress, so the switcher always finds a permit for each message.
//!
//! **Order.** Every ring push happens before the switch completes, every tokio send after
//! it, so every message in the ring is older than every message in the tokio channel. The
//! consumer ([`Merge`]) drains the ring first; when the tokio lane returns a message while
//! the ring still held one it could not see yet, that message waits in a one-message stash
//! behind the ring's, and keeps the permit of the ring message popped beside it: the tokio
//! channel gave the stashed message's slot back when it returned it, so without that permit
//! the mailbox could hold one message more than its capacity. Once the consumer has seen
//! `SHARED` and then an empty ring, the ring is done for good and it reads the tokio lane
//! alone.
//!
//! **One consumer** is a type: [`channel`] makes the ring together with its one [`Merge`],
//! and only a `Merge`, through `&mut self`, pops.

use std::mem::MaybeUninit;
use std::task::{Context, Poll, Waker};

use crate::door::Door;
use crate::sync::{
    Arc, AtomicBool, AtomicU8, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering, UnsafeCell, fence,
};

/// The largest capacity that gets a ring (allocated whole, a power of two of slots): a
/// mailbox with more starts on the shared lane.
pub(crate) const RING_MAX: usize = 1024;

const SINGLE: u8 = 0;
const SWITCHING: u8 = 1;
const SHARED: u8 = 2;

/// [`Ring::state`]: a push (or a switch, or a close) holds the token.
const TOKEN: u8 = 1;
/// [`Ring::state`]: threads wait on the gate for the token.
const WAITERS: u8 = 2;
/// [`Ring::state`]: the consumer waits on an empty ring, its waker in [`Ring::waker`].
const PARKED: u8 = 4;

/// What [`Ring::try_push_with`] did. Only `Done` took the value (it made it then); every
/// other outcome left it with the caller, untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Push {
    Done,
    /// The ring holds `capacity` messages.
    Full,
    /// The consumer closed the mailbox.
    Closed,
    /// The mailbox is (or is being) switched to the shared lane, or another thread holds the
    /// token: switch and send there.
    Shared,
}

/// The permits the switcher reserved for messages still in the ring, and the pops that
/// raced with it.
struct Ledger<P> {
    /// The ring's head when the switcher counted it, and how many it counted: pops of
    /// indices `from, from + 1, ...` (wrapping) hold a permit. `None` until the switch has
    /// reserved them.
    from: Option<(usize, usize)>,
    permits: Vec<P>,
    /// Indices popped after the lane left `SINGLE` but before `from` was set.
    popped: Vec<usize>,
}

pub(crate) struct Ring<T, P> {
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: usize,
    capacity: usize,
    /// The next index to pop; stored by the consumer only.
    head: AtomicUsize,
    /// The next index to push; stored by the token holder only.
    tail: AtomicUsize,
    lane: AtomicU8,
    /// [`TOKEN`] | [`WAITERS`] | [`PARKED`] (the module docs, "who waits").
    state: AtomicU8,
    /// Threads waiting in [`Ring::take_token`] (changed under `gate`; [`WAITERS`] is set
    /// while there are any); they sleep on `gate`, as does a switch waiting for another to
    /// finish. Nothing on the push path ever waits.
    token_waiters: AtomicUsize,
    gate: Mutex<()>,
    gate_cv: Condvar,
    closed: AtomicBool,
    /// The consumer's waker while it waits on an empty ring ([`PARKED`]).
    waker: Mutex<Option<Waker>>,
    ledger: Mutex<Ledger<P>>,
    /// The shared lane's door ([`crate::door`]): here, beside the lane's other shared state,
    /// so a sender handle stays four words.
    door: Door<T>,
}

// SAFETY: a slot is written only by the token holder, into a slot the consumer has freed
// (head, read with Acquire), and read only by the one consumer (the one `Merge`), after the
// push published it (tail, read with Acquire). Values and permits move between threads,
// hence `T: Send, P: Send`.
unsafe impl<T: Send, P: Send> Send for Ring<T, P> {}
// SAFETY: as for `Send`: every shared access goes through the atomics and locks above.
unsafe impl<T: Send, P: Send> Sync for Ring<T, P> {}

/// Whether the switch counted `index`: it lies within `count` indices from `from`, wrapping.
fn counted(index: usize, (from, count): (usize, usize)) -> bool {
    index.wrapping_sub(from) < count
}

/// A ring for `capacity` messages and its one consumer (see [`Ring::new`]).
pub(crate) fn channel<T, P>(capacity: usize, single: bool) -> (Arc<Ring<T, P>>, Merge<T, P>) {
    let ring = Arc::new(Ring::new(capacity, single));
    let merge = Merge::new(ring.clone());
    (ring, merge)
}

fn lock<G>(mutex: &Mutex<G>) -> MutexGuard<'_, G> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<T, P> Ring<T, P> {
    /// A ring for `capacity` messages, on the single lane; past [`RING_MAX`], or when
    /// `single` is false, no slots and the shared lane from the start.
    fn new(capacity: usize, single: bool) -> Self {
        let (slots, lane) = if single && capacity <= RING_MAX {
            // One slot more than the capacity: a pop frees its index before it reads its
            // slot (`Ring::pop`). For a power-of-two capacity that doubles the ring.
            ((capacity + 1).next_power_of_two(), SINGLE)
        } else {
            (0, SHARED)
        };
        Ring {
            slots: (0..slots)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
            mask: slots.saturating_sub(1),
            capacity,
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            lane: AtomicU8::new(lane),
            state: AtomicU8::new(0),
            token_waiters: AtomicUsize::new(0),
            gate: Mutex::new(()),
            gate_cv: Condvar::new(),
            closed: AtomicBool::new(false),
            waker: Mutex::new(None),
            ledger: Mutex::new(Ledger {
                from: None,
                permits: Vec::new(),
                popped: Vec::new(),
            }),
            door: Door::new(),
        }
    }

    /// The shared lane's door.
    #[inline]
    pub(crate) fn door(&self) -> &Door<T> {
        &self.door
    }

    /// Whether the mailbox is still on the single lane (a hint: [`Ring::try_push_with`] decides
    /// under the token).
    #[inline]
    pub(crate) fn is_single(&self) -> bool {
        self.lane.load(Ordering::Relaxed) == SINGLE
    }

    /// Whether a push would find a free slot now (a hint, for the producer).
    #[inline]
    pub(crate) fn has_room(&self) -> bool {
        self.tail
            .load(Ordering::Relaxed)
            .wrapping_sub(self.head.load(Ordering::Acquire))
            < self.capacity
    }

    /// How many messages the ring holds.
    pub(crate) fn len(&self) -> usize {
        let head = self.head.load(Ordering::Acquire);
        self.tail.load(Ordering::Acquire).wrapping_sub(head)
    }

    /// Pushes the value `value` makes on the single lane, or says why not. `value` is called
    /// only when the push succeeds, under the token, right before its slot is written: the
    /// caller's message moves once, from where it is into the slot, and nothing hands it back
    /// on a refusal (a refused value is never made). `value` must not panic: it runs holding
    /// the token, which nothing would give back (the mailbox's only moves a message and a
    /// frame into an envelope).
    #[inline]
    pub(crate) fn try_push_with(&self, value: impl FnOnce() -> T) -> Push {
        if self.state.fetch_or(TOKEN, Ordering::Acquire) & TOKEN != 0 {
            return Push::Shared;
        }
        // Acquire suffices under the token: a switch or a close that came first is seen, one
        // that comes later waits for the token and sees this push.
        let pushed = if self.lane.load(Ordering::Acquire) != SINGLE {
            Push::Shared
        } else if self.closed.load(Ordering::Acquire) {
            Push::Closed
        } else {
            let tail = self.tail.load(Ordering::Relaxed);
            if tail.wrapping_sub(self.head.load(Ordering::Acquire)) >= self.capacity {
                Push::Full
            } else {
                // SAFETY: the slot is free (the consumer has moved `head` past it, or never
                // reached it) and only the token holder writes.
                self.slots[tail & self.mask].with_mut(|slot| unsafe { (*slot).write(value()) });
                self.tail.store(tail.wrapping_add(1), Ordering::Release);
                Push::Done
            }
        };
        // The token given back, and who waits read, in one step (the module docs, "who
        // waits"): the consumer parked before it is woken, one parking after it sees this push;
        // a thread waiting for the token sees it free, or is told.
        let waiting = self.state.fetch_and(!TOKEN, Ordering::Release);
        if waiting & WAITERS != 0 {
            self.notify_gate();
        }
        if pushed == Push::Done && waiting & PARKED != 0 {
            self.wake();
        }
        pushed
    }

    #[cold]
    fn notify_gate(&self) {
        let _gate = lock(&self.gate);
        self.gate_cv.notify_all();
    }

    #[cold]
    fn wake(&self) {
        self.state.fetch_and(!PARKED, Ordering::Relaxed);
        // Woken after the lock is dropped (the guard would live through an `if let` body).
        let waker = lock(&self.waker).take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Takes the token, waiting out a push in progress (a few instructions: the push never
    /// awaits while holding it), asleep on the gate rather than spinning.
    fn take_token(&self) {
        // The count changes only under the gate, so plain stores do.
        let mut gate = lock(&self.gate);
        let waiters = self.token_waiters.load(Ordering::Relaxed);
        self.token_waiters.store(waiters + 1, Ordering::Relaxed);
        // Before trying for the token, in the word the holder gives it back in: the holder's
        // release comes after this and tells the gate, or before, and the token is free below.
        self.state.fetch_or(WAITERS, Ordering::Relaxed);
        while self.state.fetch_or(TOKEN, Ordering::Acquire) & TOKEN != 0 {
            gate = self
                .gate_cv
                .wait(gate)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        let waiters = self.token_waiters.load(Ordering::Relaxed) - 1;
        self.token_waiters.store(waiters, Ordering::Relaxed);
        if waiters == 0 {
            self.state.fetch_and(!WAITERS, Ordering::Relaxed);
        }
        drop(gate);
    }

    /// Gives the token back from [`Ring::take_token`], waking whoever waits on the gate.
    fn give_token(&self) {
        self.state.fetch_and(!TOKEN, Ordering::Release);
        self.notify_gate();
    }

    /// Whether the consumer closed the mailbox.
    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether the lane is still `SINGLE` (not switching, not shared).
    pub(crate) fn on_single_lane(&self) -> bool {
        self.lane.load(Ordering::Relaxed) == SINGLE
    }

    /// Moves the mailbox to the shared lane for good (see the module docs); `reserve` takes
    /// one slot of the shared lane for each message still in the ring. Returns when the
    /// switch is complete, also when another thread made it.
    #[inline]
    pub(crate) fn switch(&self, reserve: impl FnMut() -> Option<P>) {
        // Every send on the shared lane comes here: once shared, one load and no call.
        if self.lane.load(Ordering::Acquire) != SHARED {
            self.switch_slow(reserve);
        }
    }

    #[cold]
    #[inline(never)]
    fn switch_slow(&self, mut reserve: impl FnMut() -> Option<P>) {
        if self
            .lane
            .compare_exchange(SINGLE, SWITCHING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another thread is switching: wait until it is done.
            let mut gate = lock(&self.gate);
            while self.lane.load(Ordering::Acquire) != SHARED {
                gate = self
                    .gate_cv
                    .wait(gate)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            return;
        }
        self.take_token();
        // Pairs with the fence in `pop`: a pop this misses (its head not seen here) sees
        // the lane out of `SINGLE` and is settled in the ledger.
        fence(Ordering::SeqCst);
        let from = self.head.load(Ordering::Relaxed);
        let count = self.tail.load(Ordering::Relaxed).wrapping_sub(from);
        // `None` only once the receiver has closed the tokio channel: then nothing more is
        // sent, and a message with no permit only frees none when popped.
        let mut permits: Vec<P> = (0..count).map_while(|_| reserve()).collect();
        let mut given_back = Vec::new();
        {
            let mut ledger = lock(&self.ledger);
            for index in std::mem::take(&mut ledger.popped) {
                if counted(index, (from, count)) {
                    given_back.extend(permits.pop());
                }
            }
            ledger.from = Some((from, count));
            ledger.permits = permits;
        }
        self.lane.store(SHARED, Ordering::Release);
        self.give_token();
        // After the token is given back: a permit's drop wakes senders waiting for a slot
        // (their wakers are user code), and one that panics must not leave the token held
        // and the lane switching for good.
        drop(given_back);
    }

    /// Refuses every later push (one in progress completes first).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.take_token();
        self.give_token();
    }

    /// The oldest message, if the ring holds one. After a switch, the permit the switcher
    /// reserved for it (if it counted it) goes into `keep`, or is given back at once when
    /// `keep` is `None` (then the hot path carries no permit at all: no drop to run).
    ///
    /// # Safety
    /// One consumer: never called from two threads at once (only [`Merge`] calls it, through
    /// `&mut self`, and [`channel`] makes one `Merge` per ring).
    #[inline]
    unsafe fn pop(&self, keep: Option<&mut Option<P>>) -> Option<T> {
        let head = self.head.load(Ordering::Relaxed);
        if head == self.tail.load(Ordering::Acquire) {
            return None;
        }
        // The index freed first, the slot read after (straight into the result, not through
        // a copy made before the store): with a spare slot (`Ring::new`), no push writes this
        // one again before the next pop's store of `head`, which comes after this read.
        self.head.store(head.wrapping_add(1), Ordering::Release);
        // Pairs with the fence in `switch_slow` (the module docs, "the switch"). A locked
        // read-modify-write of the ring's state word in its place measured no faster, and one
        // that leaves the word as it was (`fetch_or(0)`, its result unused) compiles on x86-64
        // to no instruction at all, losing the order although loom passes
        // (docs/results/2026-12-06-mailbox-closing-and-send-path.md).
        fence(Ordering::SeqCst);
        if self.lane.load(Ordering::Relaxed) != SINGLE {
            // The permit to give back is dropped after the read: its drop wakes a sender (a
            // waker: user code), and if that panics the value is dropped as the panic passes.
            let give_back = self.settle(head, keep);
            // SAFETY: as below.
            let value =
                self.slots[head & self.mask].with_mut(|slot| unsafe { (*slot).assume_init_read() });
            drop(give_back);
            return Some(value);
        }
        // SAFETY: the push of `head` was published (tail), and no push writes the slot until a
        // later pop moves `head` on (above).
        let value =
            self.slots[head & self.mask].with_mut(|slot| unsafe { (*slot).assume_init_read() });
        Some(value)
    }

    /// After a switch: the permit the switcher reserved for the message at `index`, if it
    /// counted it, into `keep`, or returned to be given back (dropped) by the caller.
    #[cold]
    #[must_use]
    fn settle(&self, index: usize, keep: Option<&mut Option<P>>) -> Option<P> {
        let permit = {
            let mut ledger = lock(&self.ledger);
            match ledger.from {
                Some(counted_range) if counted(index, counted_range) => ledger.permits.pop(),
                Some(_) => None,
                None => {
                    ledger.popped.push(index);
                    None
                }
            }
        };
        match keep {
            Some(keep) => {
                *keep = permit;
                None
            }
            None => permit,
        }
    }

    /// The consumer waits: pushes from now on wake `waker`. Re-check the ring after this.
    fn park(&self, waker: &Waker) {
        {
            let mut slot = lock(&self.waker);
            match &*slot {
                Some(old) if old.will_wake(waker) => {}
                _ => *slot = Some(waker.clone()),
            }
        }
        // Acquire: a push whose release came first in the word is seen by the re-check (the
        // module docs, "who waits").
        self.state.fetch_or(PARKED, Ordering::AcqRel);
    }
}

impl<T, P> Drop for Ring<T, P> {
    fn drop(&mut self) {
        let (mut head, tail) = (
            self.head.load(Ordering::Relaxed),
            self.tail.load(Ordering::Relaxed),
        );
        while head != tail {
            // SAFETY: `&mut self`: the slots from head to tail hold published values.
            self.slots[head & self.mask].with_mut(|slot| unsafe { (*slot).assume_init_drop() });
            head = head.wrapping_add(1);
        }
    }
}

/// The ring's one consumer, which reads the ring first, then the shared lane, in the order
/// the module docs explain.
pub(crate) struct Merge<T, P> {
    ring: Arc<Ring<T, P>>,
    /// The consumer saw `SHARED` and then an empty ring: the ring will never hold a message
    /// again.
    ring_done: bool,
    /// A message the shared lane returned while the ring still held older ones, and the
    /// permit of the ring message popped beside it, which holds its slot (module docs).
    stash: Option<(T, Option<P>)>,
}

impl<T, P> Merge<T, P> {
    /// The ring (and with it the shared lane's door), shared.
    pub(crate) fn lane(&self) -> Arc<Ring<T, P>> {
        self.ring.clone()
    }

    fn new(ring: Arc<Ring<T, P>>) -> Self {
        Merge {
            ring_done: ring.lane.load(Ordering::Acquire) == SHARED && ring.len() == 0,
            ring,
            stash: None,
        }
    }

    /// The ring's oldest message (its permit, if any, given back).
    #[inline]
    fn pop(&mut self) -> Option<T> {
        // SAFETY: `&mut self`, and this is the ring's one `Merge` (`channel`).
        unsafe { self.ring.pop(None) }
    }

    /// The ring's oldest message and its permit, kept.
    fn pop_keeping_permit(&mut self) -> Option<(T, Option<P>)> {
        let mut permit = None;
        // SAFETY: as in `pop`.
        unsafe { self.ring.pop(Some(&mut permit)) }.map(|value| (value, permit))
    }

    /// Whether only the shared lane is left to read.
    #[inline]
    pub(crate) fn ring_done(&self) -> bool {
        self.ring_done
    }

    /// The oldest message the ring or the stash holds now. Its permit, if any, is given
    /// back as it leaves.
    #[inline]
    pub(crate) fn ready(&mut self) -> Option<T> {
        match self.pop() {
            Some(value) => Some(value),
            None => self.take_stash(),
        }
    }

    /// Once [`Merge::ready`] found nothing: waits on the ring and polls the shared lane
    /// (`other`, which registers `waker` itself), keeping the ring's messages first.
    pub(crate) fn poll_rest(
        &mut self,
        cx: &mut Context<'_>,
        other: impl FnOnce(&mut Context<'_>) -> Poll<Option<T>>,
    ) -> Poll<Option<T>> {
        if self.ring.lane.load(Ordering::Acquire) == SHARED {
            if let Some(value) = self.pop() {
                return Poll::Ready(Some(value));
            }
            self.ring_done = true;
            return other(cx);
        }
        self.ring.park(cx.waker());
        if let Some(value) = self.pop() {
            return Poll::Ready(Some(value));
        }
        match other(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(got) => match self.pop_keeping_permit() {
                // The shared lane's message is newer than anything in the ring: it waits,
                // holding the older one's slot.
                Some((older, permit)) => {
                    self.stash = got.map(|newer| (newer, permit));
                    Poll::Ready(Some(older))
                }
                None => Poll::Ready(got),
            },
        }
    }

    /// The stashed message; its permit is given back as it leaves.
    #[cold]
    fn take_stash(&mut self) -> Option<T> {
        self.stash.take().map(|(value, _permit)| value)
    }

    /// How many messages the ring and the stash hold.
    pub(crate) fn len(&self) -> usize {
        self.ring.len() + usize::from(self.stash.is_some())
    }

    /// Refuses every later push to the ring (see [`Ring::close`]).
    pub(crate) fn close(&self) {
        self.ring.close();
    }

    /// Drops every message the ring and the stash hold (the receiver is going). A destructor
    /// that panics does not stop it: the rest are dropped as the panic passes (a second panic
    /// then aborts, as in std's collections), so none stays behind holding its bytes.
    pub(crate) fn clear(&mut self) {
        /// Clears what is left if a destructor below panics.
        struct Rest<'a, T, P>(&'a mut Merge<T, P>);
        impl<T, P> Drop for Rest<'_, T, P> {
            fn drop(&mut self) {
                self.0.clear();
            }
        }
        let rest = Rest(self);
        drop(rest.0.stash.take());
        while let Some(value) = rest.0.pop() {
            drop(value);
        }
        std::mem::forget(rest);
    }
}

#[cfg(all(test, not(mty_loom)))]
#[path = "ring_tests.rs"]
mod tests;
