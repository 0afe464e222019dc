//! The admission step: a byte budget shared by one mailbox's senders.
//!
//! Every non-empty message is admitted by [`SlabPool::try_admit`] or [`SlabPool::admit`],
//! which takes its bytes from the budget and hands back a [`PooledFrame`]. Dropping the frame
//! gives the bytes back and serves the senders waiting for bytes, first come first served.
//!
//! Zero-byte messages skip all of it: [`PooledFrame::tombstone`] takes no lock, allocates
//! nothing and touches no counter.
//!
//! Two admission designs keep the same bound ([`Admission`]): lock-free byte credits (a
//! mailbox's default), where one atomic word counts the frames and their bytes and each frame
//! carries its own size; or the pool's lock around a slab that records each frame's size, so
//! the accounting cannot drift even if a message's own idea of its size changes. Either way
//! the budget is a hard bound: bytes are taken only when the total stays within it, and no
//! sum can wrap.
//!
//! **Waiting for bytes is first come, first served.** [`SlabPool::admit`] that finds the
//! bytes short joins a FIFO queue. Bytes given back go to the queue's head as soon as its
//! whole request fits, then to the next, and so on; a later, smaller request never takes
//! bytes ahead of an earlier one. While anyone queues, [`SlabPool::try_admit`] fails with
//! `Full` even when bytes are free, so new senders queue behind (the only ones that can
//! still overtake a waiter are admissions already past that check when it queued: at most
//! one per other thread). The queue and the waiters' wakers live under one lock, taken only
//! by senders that wait and by releases that find someone waiting.
//!
//! **No lost wake-up.** A sender joins the queue and then tries for its bytes; a release gives
//! bytes back and then looks for waiters. One of the two must see the other. Under
//! [`Admission::Atomic`] both steps are read-modify-writes of the one credits word (the
//! "someone waits" bit is in it), so their order is total and the release's own subtraction
//! returns the bit: no separate load, no fence. Under [`Admission::Locked`] the slab's lock
//! orders them (the sender marks itself queued before it takes that lock to try).

use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};

use crate::sync::{Arc, AtomicBool, AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering};

use slab::Slab;

/// How a pool admits and releases non-empty frames. A [`crate::Mailbox`] takes `Atomic`
/// where its word can count the mailbox's capacity and budget, `Locked` otherwise; a bare
/// [`SlabPool::new`] takes `Locked`, as its frames are not bounded by a channel's capacity.
///
/// A switch for measuring the two designs against each other, not part of the documented API.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Every admission and release takes the pool's lock and records the frame's size in a
    /// slab slot.
    Locked,
    /// Lock-free: one atomic word holds the count of frames (its high 23 bits), whether a
    /// sender waits for bytes (bit 40) and the bytes (the low 40), taken by compare-and-swap
    /// only when the bytes stay within the budget and given back by one subtraction; each
    /// frame carries its size. Budgets up to 2^40 - 1 bytes. The frame count in
    /// [`PoolStats::slots_in_use`] is exact while fewer than 2^23 frames are held at once and
    /// wraps (never overflows) past that; the byte bound does not depend on it. A mailbox
    /// takes it only where its count stays exact (capacity + 1 frames below 2^23).
    Atomic,
}

impl Admission {
    /// `Atomic` when its word can count `frames` frames and `budget` bytes, else `Locked`.
    pub fn fitting(frames: usize, budget: usize) -> Admission {
        if (budget as u64) <= BYTES_MASK && (frames as u64) < (1 << (64 - FRAMES_SHIFT)) {
            Admission::Atomic
        } else {
            Admission::Locked
        }
    }
}

/// The bytes part of [`Admission::Atomic`]'s word.
const BYTES_BITS: u32 = 40;
const BYTES_MASK: u64 = (1 << BYTES_BITS) - 1;
/// Set while the queue of senders waiting for bytes is not empty.
const WAITING: u64 = 1 << BYTES_BITS;
/// The frame count: the word's high 23 bits (it wraps out of the top, never into `WAITING`).
const FRAMES_SHIFT: u32 = BYTES_BITS + 1;
const ONE_FRAME: u64 = 1 << FRAMES_SHIFT;

/// A byte budget plus what holds it. Cloning gives another handle to the same pool.
#[derive(Clone)]
pub(crate) struct SlabPool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    /// The most bytes admitted at once. Never changes.
    budget: usize,
    admission: Admission,
    /// [`Admission::Locked`]'s accounting.
    state: Mutex<PoolState>,
    /// [`Admission::Atomic`]'s accounting: frames << 41 | `WAITING` | bytes.
    credits: AtomicU64,
    /// Senders waiting for bytes, first come first served (module docs).
    queue: Mutex<Queue>,
    /// [`Admission::Locked`]: how many wait in `queue` (the atomic design keeps `WAITING` in
    /// its word instead). The fast path fails while someone waits, and a release takes the
    /// queue's lock only when someone does.
    queued: AtomicUsize,
    /// Set once by [`SlabPool::close`]; from then on admission fails with `Closed`.
    closed: AtomicBool,
}

struct PoolState {
    /// One entry per admitted, not yet released frame: its byte size.
    slots: Slab<usize>,
    /// Invariant: the sum of `slots`' values, and `<= budget`.
    bytes_in_use: usize,
}

/// The senders waiting for bytes.
struct Queue {
    next_id: u64,
    /// In arrival order; the head is served first.
    waiting: VecDeque<Waiting>,
    /// Requests served but not yet collected by their sender: its id and the frame's slot
    /// (a slab key or a size, as in [`PooledFrame`]). Kept as a bare number, not a frame,
    /// so the queue holds no reference to its own pool.
    served: Vec<(u64, usize)>,
}

struct Waiting {
    id: u64,
    bytes: usize,
    waker: Waker,
}

/// Why a frame was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdmitError {
    /// Not enough bytes are free right now, or senders wait for bytes (only from
    /// [`SlabPool::try_admit`]).
    Full,
    /// The request is larger than the whole budget: it could never be admitted.
    Oversize,
    /// The pool was closed (its mailbox's receiver is gone or closed).
    Closed,
}

/// A snapshot of a mailbox's byte accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Frames held by admitted messages. Zero-byte messages never take one.
    pub slots_in_use: usize,
    /// Bytes held by admitted messages.
    pub bytes_in_use: usize,
    /// The mailbox's byte budget.
    pub byte_budget: usize,
}

impl SlabPool {
    /// A pool that admits at most `byte_budget` bytes at once, with [`Admission::Locked`].
    #[cfg(test)]
    pub(crate) fn new(byte_budget: usize) -> Self {
        SlabPool::with_admission(byte_budget, Admission::Locked)
    }

    /// A pool with the given admission design.
    ///
    /// # Panics
    /// With [`Admission::Atomic`] and a budget of 2^40 bytes or more.
    pub(crate) fn with_admission(byte_budget: usize, admission: Admission) -> Self {
        assert!(
            admission == Admission::Locked || (byte_budget as u64) <= BYTES_MASK,
            "Admission::Atomic takes budgets below 2^40 bytes"
        );
        SlabPool {
            inner: Arc::new(PoolInner {
                budget: byte_budget,
                admission,
                state: Mutex::new(PoolState {
                    slots: Slab::new(),
                    bytes_in_use: 0,
                }),
                credits: AtomicU64::new(0),
                queue: Mutex::new(Queue {
                    next_id: 0,
                    waiting: VecDeque::new(),
                    served: Vec::new(),
                }),
                queued: AtomicUsize::new(0),
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// The byte budget.
    pub(crate) fn byte_budget(&self) -> usize {
        self.inner.budget
    }

    /// Admits `bytes` now or fails at once. Zero bytes always succeeds on the fast path
    /// (even on a closed pool: closing is the channel's business, not the budget's). Fails
    /// with `Full` while senders wait for bytes, even when bytes are free: they come first.
    #[inline]
    pub(crate) fn try_admit(&self, bytes: usize) -> Result<PooledFrame, AdmitError> {
        if bytes == 0 {
            return Ok(PooledFrame::tombstone());
        }
        self.try_admit_bytes(bytes)
    }

    /// [`SlabPool::try_admit`] of a non-zero size: out of line, so the zero-byte fast path
    /// inlines into the send without it.
    #[inline(never)]
    fn try_admit_bytes(&self, bytes: usize) -> Result<PooledFrame, AdmitError> {
        if bytes > self.inner.budget {
            return Err(AdmitError::Oversize);
        }
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(AdmitError::Closed);
        }
        match self.inner.take(bytes, false) {
            Some(slot) => Ok(self.frame(slot)),
            None => Err(AdmitError::Full),
        }
    }

    fn frame(&self, slot: usize) -> PooledFrame {
        PooledFrame {
            slot: Some((self.inner.clone(), slot)),
        }
    }

    /// Admits `bytes`, waiting in the FIFO queue (module docs) until they are free.
    ///
    /// Fails at once with `Oversize` when `bytes` exceeds the whole budget (it must never
    /// wait forever), and with `Closed` when the pool is or becomes closed while waiting.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped before it completes, nothing was admitted (bytes
    /// already served to it go on to the next waiter).
    pub(crate) async fn admit(&self, bytes: usize) -> Result<PooledFrame, AdmitError> {
        match self.try_admit(bytes) {
            Err(AdmitError::Full) => {}
            done => return done,
        }
        let mut waiter = Waiter {
            pool: self,
            bytes,
            id: None,
        };
        std::future::poll_fn(|cx| waiter.poll(cx)).await
    }

    /// Closes the pool: every waiting and future admission of a non-zero size fails with
    /// `Closed`. Frames already admitted stay valid and release normally.
    pub(crate) fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        let wakers: Vec<Waker> = {
            let queue = self.inner.lock_queue();
            queue.waiting.iter().map(|w| w.waker.clone()).collect()
        };
        wake_all(wakers);
    }

    /// The current accounting.
    pub(crate) fn stats(&self) -> PoolStats {
        if self.inner.admission == Admission::Atomic {
            let credits = self.inner.credits.load(Ordering::Acquire);
            return PoolStats {
                slots_in_use: (credits >> FRAMES_SHIFT) as usize,
                bytes_in_use: (credits & BYTES_MASK) as usize,
                byte_budget: self.inner.budget,
            };
        }
        let state = lock(&self.inner.state);
        PoolStats {
            slots_in_use: state.slots.len(),
            bytes_in_use: state.bytes_in_use,
            byte_budget: self.inner.budget,
        }
    }
}

/// The pool's locks guard plain numbers and lists updated together; a panic cannot leave
/// them half-updated, so a poisoned lock is still consistent.
fn lock<G>(mutex: &Mutex<G>) -> MutexGuard<'_, G> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl PoolInner {
    fn lock_queue(&self) -> MutexGuard<'_, Queue> {
        lock(&self.queue)
    }

    /// Takes `bytes` (at most the budget) if they fit now: the frame's slot (a slab key, or
    /// the size itself), or `None`. Only `serving` the queue (its lock held) takes bytes
    /// while someone waits; the fast path does not (under `Locked`, one already past its
    /// check of `queued` when a waiter joins still can: the module docs' bound).
    fn take(&self, bytes: usize, serving: bool) -> Option<usize> {
        match self.admission {
            Admission::Atomic => {
                let budget = self.budget as u64;
                let mut seen = self.credits.load(Ordering::Acquire);
                loop {
                    if seen & WAITING != 0 && !serving {
                        return None;
                    }
                    // Both terms are within the budget (< 2^40): no overflow.
                    if (seen & BYTES_MASK) + bytes as u64 > budget {
                        return None;
                    }
                    // The frame count wraps in its 23 bits (`Admission::Atomic`); the bytes
                    // stay within the budget, so they never carry into it.
                    let next = seen.wrapping_add(ONE_FRAME).wrapping_add(bytes as u64);
                    match self.credits.compare_exchange_weak(
                        seen,
                        next,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => return Some(bytes),
                        Err(now) => seen = now,
                    }
                }
            }
            Admission::Locked => {
                if !serving && self.queued.load(Ordering::Acquire) > 0 {
                    return None;
                }
                let mut state = lock(&self.state);
                // `bytes_in_use <= budget`: the subtraction cannot wrap, the sum could.
                if bytes > self.budget - state.bytes_in_use {
                    return None;
                }
                state.bytes_in_use += bytes;
                Some(state.slots.insert(bytes))
            }
        }
    }

    /// Gives a frame back: `slot` is its slab key ([`Admission::Locked`]) or its size
    /// ([`Admission::Atomic`]); then serves the waiters, if any.
    fn release(&self, slot: usize) {
        let waiting = match self.admission {
            Admission::Locked => {
                let mut state = lock(&self.state);
                let bytes = state.slots.remove(slot);
                state.bytes_in_use -= bytes;
                drop(state);
                self.queued.load(Ordering::Acquire) > 0
            }
            Admission::Atomic => {
                // The frame's bits wrap as they did when it was taken.
                let before = self
                    .credits
                    .fetch_sub(ONE_FRAME.wrapping_add(slot as u64), Ordering::AcqRel);
                before & WAITING != 0
            }
        };
        if waiting {
            self.serve_and_wake();
        }
    }

    /// Marks whether anyone waits (`queued`, or `WAITING` in the word), under the queue's
    /// lock: before a new waiter's first try, and after every change to the queue.
    fn mark_waiting(&self, queue: &Queue) {
        let waiting = !queue.waiting.is_empty();
        match self.admission {
            Admission::Locked => self.queued.store(queue.waiting.len(), Ordering::Release),
            Admission::Atomic if waiting => {
                self.credits.fetch_or(WAITING, Ordering::AcqRel);
            }
            Admission::Atomic => {
                self.credits.fetch_and(!WAITING, Ordering::AcqRel);
            }
        }
    }

    #[cold]
    fn serve_and_wake(&self) {
        let wakers = self.serve(&mut self.lock_queue());
        wake_all(wakers);
    }

    /// Serves the queue's head while its whole request fits, in order; returns the wakers to
    /// wake once the lock is dropped.
    fn serve(&self, queue: &mut Queue) -> Vec<Waker> {
        let mut wakers = Vec::new();
        if !self.closed.load(Ordering::Acquire) {
            while let Some(head) = queue.waiting.front() {
                let Some(slot) = self.take(head.bytes, true) else {
                    break;
                };
                let head = queue.waiting.pop_front().expect("the head was there");
                queue.served.push((head.id, slot));
                wakers.push(head.waker);
            }
        }
        self.mark_waiting(queue);
        wakers
    }
}

/// A sender in [`SlabPool::admit`]'s queue: `id` once it has joined.
struct Waiter<'a> {
    pool: &'a SlabPool,
    bytes: usize,
    id: Option<u64>,
}

impl Waiter<'_> {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<PooledFrame, AdmitError>> {
        let inner = &self.pool.inner;
        let mut queue = inner.lock_queue();
        let Some(id) = self.id else {
            // Join, then try: the head may be served at once (module docs on `take`).
            let id = queue.next_id;
            queue.next_id += 1;
            queue.waiting.push_back(Waiting {
                id,
                bytes: self.bytes,
                waker: cx.waker().clone(),
            });
            self.id = Some(id);
            inner.mark_waiting(&queue);
            let wakers = inner.serve(&mut queue);
            drop(queue);
            wakers.into_iter().for_each(Waker::wake);
            return self.poll(cx);
        };
        let served = queue
            .served
            .iter()
            .position(|&(served, _)| served == id)
            .map(|at| queue.served.swap_remove(at).1);
        // Closed first, even when served: a sender woken with its bytes but polled after the
        // receiver went would otherwise send into a mailbox no one reads, and be told `Ok`.
        if inner.closed.load(Ordering::Acquire) {
            remove(&mut queue, id);
            inner.mark_waiting(&queue);
            self.id = None;
            drop(queue);
            // Given back outside the lock (the release serves the queue).
            drop(served.map(|slot| self.pool.frame(slot)));
            return Poll::Ready(Err(AdmitError::Closed));
        }
        if let Some(slot) = served {
            self.id = None;
            drop(queue);
            return Poll::Ready(Ok(self.pool.frame(slot)));
        }
        let entry = queue
            .waiting
            .iter_mut()
            .find(|w| w.id == id)
            .expect("a waiter not served is in the queue");
        if !entry.waker.will_wake(cx.waker()) {
            entry.waker = cx.waker().clone();
        }
        Poll::Pending
    }
}

fn remove(queue: &mut Queue, id: u64) {
    if let Some(at) = queue.waiting.iter().position(|w| w.id == id) {
        queue.waiting.remove(at);
    }
}

impl Drop for Waiter<'_> {
    /// Cancelled while queued: leaves the queue, handing on what it was served, and lets the
    /// next waiter be served if it was in the way.
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        let inner = &self.pool.inner;
        let mut queue = inner.lock_queue();
        let served = queue
            .served
            .iter()
            .position(|&(served, _)| served == id)
            .map(|at| queue.served.swap_remove(at).1);
        remove(&mut queue, id);
        let wakers = inner.serve(&mut queue);
        drop(queue);
        wakers.into_iter().for_each(Waker::wake);
        // Released outside the lock: the release serves the queue again.
        drop(served.map(|slot| self.pool.frame(slot)));
    }
}

/// Proof of admission: holds its bytes against the pool's budget until dropped.
#[must_use = "dropping a frame gives its bytes back at once"]
pub(crate) struct PooledFrame {
    /// `None` for a tombstone (zero bytes, no slot); otherwise the pool and the slab key
    /// whose entry records this frame's size ([`Admission::Locked`]), or the size itself
    /// ([`Admission::Atomic`]).
    slot: Option<(Arc<PoolInner>, usize)>,
}

impl PooledFrame {
    /// The frame of a zero-byte message: no slot, no lock, no allocation.
    #[inline]
    pub(crate) const fn tombstone() -> Self {
        PooledFrame { slot: None }
    }

    /// Gives the slot's bytes back: out of line, so dropping a tombstone is one test.
    #[inline(never)]
    fn release(&mut self) {
        if let Some((pool, key)) = self.slot.take() {
            pool.release(key);
        }
    }

    /// Whether this is a tombstone (holds no slot).
    #[cfg(all(test, not(mty_loom)))]
    pub(crate) fn is_tombstone(&self) -> bool {
        self.slot.is_none()
    }
}

impl Drop for PooledFrame {
    #[inline]
    fn drop(&mut self) {
        if self.slot.is_some() {
            self.release();
        }
    }
}

impl std::fmt::Debug for PooledFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.slot {
            None => f.write_str("PooledFrame::Tombstone"),
            Some((_, key)) => write!(f, "PooledFrame(slot {key})"),
        }
    }
}

/// Wakes every waker, also when one panics: the rest as the panic passes (a second panic
/// aborts), so no waiter is left asleep with its bytes served or its pool closed.
fn wake_all(wakers: Vec<Waker>) {
    struct Rest(std::vec::IntoIter<Waker>);
    impl Drop for Rest {
        fn drop(&mut self) {
            self.0.by_ref().for_each(Waker::wake);
        }
    }
    let mut rest = Rest(wakers.into_iter());
    rest.0.by_ref().for_each(Waker::wake);
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
