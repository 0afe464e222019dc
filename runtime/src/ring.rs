//! The single-sender lane: while a mailbox has one sender handle, its messages go through a
//! bounded single-producer ring instead of tokio's multi-producer channel.
//!
//! The ring is lock-free for its one producer and its one consumer: a push writes a slot and
//! publishes it by storing `tail`; a pop reads the slot and frees it by storing `head`. What
//! makes "one producer" true is the **token**, an atomic flag a push holds for the few
//! instructions between checking the lane and publishing (never across an `.await`). A
//! `&MailboxSender` can be shared between threads, so one handle can still be used by two
//! threads at once: the second finds the token taken, and that ends the fast path as a clone
//! does.
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
//! gives one back, an earlier one does not.
//!
//! **Order.** Every ring push happens before the switch completes, every tokio send after
//! it, so every message in the ring is older than every message in the tokio channel. The
//! consumer ([`Merge`]) drains the ring first; when the tokio lane returns a message while
//! the ring still held one it could not see yet, that message waits in a one-message stash
//! behind the ring's. Once the consumer has seen `SHARED` and then an empty ring, the ring is
//! done for good and it reads the tokio lane alone.

use std::mem::MaybeUninit;
use std::task::{Context, Poll, Waker};

use crate::sync::{
    AtomicBool, AtomicU8, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering, UnsafeCell, fence,
};

/// The largest capacity that gets a ring (allocated whole, a power of two of slots): a
/// mailbox with more starts on the shared lane.
pub(crate) const RING_MAX: usize = 1024;

const SINGLE: u8 = 0;
const SWITCHING: u8 = 1;
const SHARED: u8 = 2;

/// What [`Ring::try_push`] did with the value.
pub(crate) enum Push<T> {
    Done,
    /// The ring holds `capacity` messages.
    Full(T),
    /// The consumer closed the mailbox.
    Closed(T),
    /// The mailbox is (or is being) switched to the shared lane, or another thread holds the
    /// token: switch and send there.
    Shared(T),
}

/// The permits the switcher reserved for messages still in the ring, and the pops that
/// raced with it.
struct Ledger<P> {
    /// The ring's head when the switcher counted it: pops of indices from here on hold a
    /// permit. `None` until the switch has reserved them.
    from: Option<usize>,
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
    token: AtomicBool,
    /// Threads waiting in [`Ring::take_token`]; they sleep on `gate`, as does a switch
    /// waiting for another to finish. Nothing on the push path ever waits.
    token_waiters: AtomicUsize,
    gate: Mutex<()>,
    gate_cv: Condvar,
    closed: AtomicBool,
    /// The consumer waits on an empty ring with its waker in `waker`.
    parked: AtomicBool,
    waker: Mutex<Option<Waker>>,
    ledger: Mutex<Ledger<P>>,
}

// SAFETY: a slot is written only by the token holder, into a slot the consumer has freed
// (head, read with Acquire), and read only by the one consumer, after the push published it
// (tail, read with SeqCst). Values move between threads, hence `T: Send`.
unsafe impl<T: Send, P: Send> Send for Ring<T, P> {}
unsafe impl<T: Send, P: Send> Sync for Ring<T, P> {}

fn lock<G>(mutex: &Mutex<G>) -> MutexGuard<'_, G> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<T, P> Ring<T, P> {
    /// A ring for `capacity` messages, on the single lane; past [`RING_MAX`], or when
    /// `single` is false, no slots and the shared lane from the start.
    pub(crate) fn new(capacity: usize, single: bool) -> Self {
        let (slots, lane) = if single && capacity <= RING_MAX {
            (capacity.next_power_of_two(), SINGLE)
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
            token: AtomicBool::new(false),
            token_waiters: AtomicUsize::new(0),
            gate: Mutex::new(()),
            gate_cv: Condvar::new(),
            closed: AtomicBool::new(false),
            parked: AtomicBool::new(false),
            waker: Mutex::new(None),
            ledger: Mutex::new(Ledger {
                from: None,
                permits: Vec::new(),
                popped: Vec::new(),
            }),
        }
    }

    /// Whether the mailbox is still on the single lane (a hint: [`Ring::try_push`] decides
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
        let head = self.head.load(Ordering::SeqCst);
        self.tail.load(Ordering::SeqCst).wrapping_sub(head)
    }

    /// Pushes `value` on the single lane, or hands it back saying why not.
    #[inline]
    pub(crate) fn try_push(&self, value: T) -> Push<T> {
        if self.token.swap(true, Ordering::Acquire) {
            return Push::Shared(value);
        }
        let pushed = if self.lane.load(Ordering::SeqCst) != SINGLE {
            Push::Shared(value)
        } else if self.closed.load(Ordering::SeqCst) {
            Push::Closed(value)
        } else {
            let tail = self.tail.load(Ordering::Relaxed);
            if tail.wrapping_sub(self.head.load(Ordering::Acquire)) >= self.capacity {
                Push::Full(value)
            } else {
                // SAFETY: the slot is free (the consumer has moved `head` past it, or never
                // reached it) and only the token holder writes.
                self.slots[tail & self.mask].with_mut(|slot| unsafe { (*slot).write(value) });
                self.tail.store(tail.wrapping_add(1), Ordering::Release);
                Push::Done
            }
        };
        // An exchange where the C11 model would accept a plain store (with the fence below
        // it already orders the release before reading the waiters): loom 0.7 models this
        // store-buffering pattern only with a read-modify-write, and the model should check
        // the code that ships. One locked instruction per send.
        self.token.swap(false, Ordering::Release);
        // Pairs with the fences in `park` and `take_token`: the consumer sees this push or
        // this push sees it parked; a thread waiting for the token sees it free or is told.
        fence(Ordering::SeqCst);
        if self.token_waiters.load(Ordering::Relaxed) > 0 {
            self.notify_gate();
        }
        if matches!(pushed, Push::Done) && self.parked.load(Ordering::Relaxed) {
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
        self.parked.store(false, Ordering::Relaxed);
        if let Some(waker) = lock(&self.waker).take() {
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
        fence(Ordering::SeqCst);
        while self.token.swap(true, Ordering::Acquire) {
            gate = self
                .gate_cv
                .wait(gate)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        let waiters = self.token_waiters.load(Ordering::Relaxed);
        self.token_waiters.store(waiters - 1, Ordering::Relaxed);
        drop(gate);
    }

    /// Gives the token back from [`Ring::take_token`], waking whoever waits on the gate.
    fn give_token(&self) {
        self.token.store(false, Ordering::Release);
        self.notify_gate();
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
        if self.lane.load(Ordering::SeqCst) != SHARED {
            self.switch_slow(reserve);
        }
    }

    #[cold]
    #[inline(never)]
    fn switch_slow(&self, mut reserve: impl FnMut() -> Option<P>) {
        if self
            .lane
            .compare_exchange(SINGLE, SWITCHING, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            // Another thread is switching: wait until it is done.
            let mut gate = lock(&self.gate);
            while self.lane.load(Ordering::SeqCst) != SHARED {
                gate = self
                    .gate_cv
                    .wait(gate)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            return;
        }
        self.take_token();
        // Pairs with the fence in `try_pop`: a pop this misses (its head not seen here) sees
        // the lane out of `SINGLE` and is settled in the ledger.
        fence(Ordering::SeqCst);
        let from = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        let mut permits: Vec<P> = (from..tail).filter_map(|_| reserve()).collect();
        let mut given_back = Vec::new();
        {
            let mut ledger = lock(&self.ledger);
            for index in std::mem::take(&mut ledger.popped) {
                if index >= from {
                    given_back.extend(permits.pop());
                }
            }
            ledger.from = Some(from);
            ledger.permits = permits;
        }
        drop(given_back);
        self.lane.store(SHARED, Ordering::SeqCst);
        self.give_token();
    }

    /// Refuses every later push (one in progress completes first).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.take_token();
        self.give_token();
    }

    /// The oldest message, if the ring holds one.
    ///
    /// # Safety
    /// One consumer: never called from two threads at once.
    #[inline]
    pub(crate) unsafe fn try_pop(&self) -> Option<T> {
        let head = self.head.load(Ordering::Relaxed);
        if head == self.tail.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: the push of `head` was published (tail), and no one writes the slot until
        // `head` moves past it.
        let value =
            self.slots[head & self.mask].with_mut(|slot| unsafe { (*slot).assume_init_read() });
        self.head.store(head.wrapping_add(1), Ordering::Release);
        // Pairs with the fence in `switch` (the module docs, "the switch").
        fence(Ordering::SeqCst);
        if self.lane.load(Ordering::Relaxed) != SINGLE {
            self.settle(head);
        }
        Some(value)
    }

    /// After a switch: gives back the permit the switcher reserved for the message at `index`.
    #[cold]
    fn settle(&self, index: usize) {
        let permit = {
            let mut ledger = lock(&self.ledger);
            match ledger.from {
                Some(from) if index >= from => ledger.permits.pop(),
                Some(_) => None,
                None => {
                    ledger.popped.push(index);
                    None
                }
            }
        };
        drop(permit);
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
        self.parked.store(true, Ordering::Relaxed);
        // Pairs with the fence in `try_push`.
        fence(Ordering::SeqCst);
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

/// The consumer's side: the ring first, then the shared lane, in the order the module docs
/// explain.
pub(crate) struct Merge<T> {
    /// The consumer saw `SHARED` and then an empty ring: the ring will never hold a message
    /// again.
    ring_done: bool,
    /// A message the shared lane returned while the ring still held older ones.
    stash: Option<T>,
}

impl<T> Merge<T> {
    pub(crate) fn new<P>(ring: &Ring<T, P>) -> Self {
        Merge {
            ring_done: ring.lane.load(Ordering::SeqCst) == SHARED && ring.len() == 0,
            stash: None,
        }
    }

    /// Whether only the shared lane is left to read.
    #[inline]
    pub(crate) fn ring_done(&self) -> bool {
        self.ring_done
    }

    /// The oldest message the ring or the stash holds now.
    ///
    /// # Safety
    /// The ring's one consumer (see [`Ring::try_pop`]).
    #[inline]
    pub(crate) unsafe fn ready<P>(&mut self, ring: &Ring<T, P>) -> Option<T> {
        match unsafe { ring.try_pop() } {
            Some(value) => Some(value),
            None => self.stash.take(),
        }
    }

    /// Once [`Merge::ready`] found nothing: waits on the ring and polls the shared lane
    /// (`other`, which registers `waker` itself), keeping the ring's messages first.
    ///
    /// # Safety
    /// The ring's one consumer (see [`Ring::try_pop`]).
    pub(crate) unsafe fn poll_rest<P>(
        &mut self,
        ring: &Ring<T, P>,
        cx: &mut Context<'_>,
        other: impl FnOnce(&mut Context<'_>) -> Poll<Option<T>>,
    ) -> Poll<Option<T>> {
        if ring.lane.load(Ordering::SeqCst) == SHARED {
            if let Some(value) = unsafe { ring.try_pop() } {
                return Poll::Ready(Some(value));
            }
            self.ring_done = true;
            return other(cx);
        }
        ring.park(cx.waker());
        if let Some(value) = unsafe { ring.try_pop() } {
            return Poll::Ready(Some(value));
        }
        match other(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(got) => match unsafe { ring.try_pop() } {
                // The shared lane's message is newer than anything in the ring.
                Some(older) => {
                    self.stash = got;
                    Poll::Ready(Some(older))
                }
                None => Poll::Ready(got),
            },
        }
    }

    /// Whether a stashed message waits.
    pub(crate) fn has_stash(&self) -> bool {
        self.stash.is_some()
    }
}

#[cfg(all(test, mty_loom))]
#[path = "ring_loom.rs"]
mod loom_model;
