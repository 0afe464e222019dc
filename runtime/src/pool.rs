//! The slab admission step: a byte budget shared by one mailbox's senders.
//!
//! Every non-empty message is admitted by [`SlabPool::try_admit`] or [`SlabPool::admit`],
//! which records its byte size in a slab slot and hands back a [`PooledFrame`]. Dropping the
//! frame frees the slot and gives the bytes back, waking senders that wait for bytes. Because
//! the size is recorded in the slot at admission and read back from it at release, the
//! accounting cannot drift even if a message's own idea of its size changes in between.
//!
//! Zero-byte messages skip all of it: [`PooledFrame::tombstone`] takes no lock, allocates
//! nothing and writes no slot.
//!
//! Two admission designs keep the same bound ([`Admission`]): the pool's lock around the
//! slab (the default), or lock-free byte credits, where one atomic word counts the frames
//! and their bytes and each frame carries its own size. Either way the budget is a hard
//! bound: bytes are taken only when the total stays within it.

use crate::sync::{Arc, AtomicBool, AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering};
use std::pin::pin;

use slab::Slab;
use tokio::sync::Notify;

/// How a pool admits and releases non-empty frames. A [`crate::Mailbox`] takes `Atomic`
/// unless told otherwise (and where it fits); a bare [`SlabPool::new`] takes `Locked`, as
/// its frames are not bounded by a channel's capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Every admission and release takes the pool's lock and records the frame's size in a
    /// slab slot (the design the seed shipped).
    Locked,
    /// Lock-free: one atomic word holds the count of frames (its high 24 bits) and their
    /// bytes (the low 40), taken by compare-and-swap only when the bytes stay within the
    /// budget and given back by one subtraction; each frame carries its size. Budgets up
    /// to 2^40 - 1 bytes; the frame count in [`PoolStats::slots_in_use`] is exact up to
    /// 2^24 - 1 frames at once (past that it wraps; the byte bound does not depend on it).
    Atomic,
}

impl Admission {
    /// `Atomic` when its word can count `frames` frames and `budget` bytes, else `Locked`.
    pub fn fitting(frames: usize, budget: usize) -> Admission {
        if (budget as u64) <= BYTES_MASK && (frames as u64) < (1 << (64 - BYTES_BITS)) {
            Admission::Atomic
        } else {
            Admission::Locked
        }
    }
}

/// The bytes part of [`Admission::Atomic`]'s word.
const BYTES_BITS: u32 = 40;
const BYTES_MASK: u64 = (1 << BYTES_BITS) - 1;
const ONE_FRAME: u64 = 1 << BYTES_BITS;

/// A byte budget plus the slab that records what holds it. Cloning gives another handle to
/// the same pool.
#[derive(Clone)]
pub struct SlabPool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    /// The most bytes admitted at once. Never changes.
    budget: usize,
    admission: Admission,
    /// [`Admission::Locked`]'s accounting.
    state: Mutex<PoolState>,
    /// [`Admission::Atomic`]'s accounting: frames << 40 | bytes.
    credits: AtomicU64,
    /// Notified (all waiters) whenever bytes are given back or the pool closes.
    released: Notify,
    /// How many `admit` calls are waiting; release skips the notification when zero.
    waiters: AtomicUsize,
    /// Set once by [`SlabPool::close`]; from then on admission fails with `Closed`.
    closed: AtomicBool,
}

struct PoolState {
    /// One entry per admitted, not yet released frame: its byte size.
    slots: Slab<usize>,
    /// Invariant: the sum of `slots`' values, and `<= budget`.
    bytes_in_use: usize,
}

/// Why a frame was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmitError {
    /// Not enough bytes are free right now (only from [`SlabPool::try_admit`]).
    Full,
    /// The request is larger than the whole budget: it could never be admitted.
    Oversize { size: usize, budget: usize },
    /// The pool was closed (its mailbox's receiver is gone or closed).
    Closed,
}

/// A snapshot of a pool's accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Slab slots held by admitted frames. Zero-byte messages never take one.
    pub slots_in_use: usize,
    /// Bytes held by admitted frames.
    pub bytes_in_use: usize,
    /// The pool's byte budget.
    pub byte_budget: usize,
}

impl SlabPool {
    /// A pool that admits at most `byte_budget` bytes at once, with [`Admission::Locked`].
    pub fn new(byte_budget: usize) -> Self {
        SlabPool::with_admission(byte_budget, Admission::Locked)
    }

    /// A pool with the given admission design.
    ///
    /// # Panics
    /// With [`Admission::Atomic`] and a budget of 2^40 bytes or more.
    pub fn with_admission(byte_budget: usize, admission: Admission) -> Self {
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
                released: Notify::new(),
                waiters: AtomicUsize::new(0),
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// The byte budget.
    pub fn byte_budget(&self) -> usize {
        self.inner.budget
    }

    /// Admits `bytes` now or fails at once. Zero bytes always succeeds on the fast path
    /// (even on a closed pool: closing is the channel's business, not the budget's).
    #[inline]
    pub fn try_admit(&self, bytes: usize) -> Result<PooledFrame, AdmitError> {
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
            return Err(AdmitError::Oversize {
                size: bytes,
                budget: self.inner.budget,
            });
        }
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(AdmitError::Closed);
        }
        if self.inner.admission == Admission::Atomic {
            return self.try_admit_credits(bytes);
        }
        let mut state = self.inner.lock();
        if state.bytes_in_use + bytes > self.inner.budget {
            return Err(AdmitError::Full);
        }
        state.bytes_in_use += bytes;
        let key = state.slots.insert(bytes);
        drop(state);
        Ok(PooledFrame {
            slot: Some((self.inner.clone(), key)),
        })
    }

    /// [`Admission::Atomic`]: takes a frame and `bytes` in one compare-and-swap, only when
    /// the bytes stay within the budget. SeqCst, as the release's subtraction and the
    /// waiter count: a sender that finds the bytes short and registers as a waiter, and a
    /// release that gives them back and then looks for waiters, cannot both miss the other.
    fn try_admit_credits(&self, bytes: usize) -> Result<PooledFrame, AdmitError> {
        let budget = self.inner.budget as u64;
        let mut seen = self.inner.credits.load(Ordering::SeqCst);
        loop {
            if (seen & BYTES_MASK) + bytes as u64 > budget {
                return Err(AdmitError::Full);
            }
            match self.inner.credits.compare_exchange_weak(
                seen,
                seen + ONE_FRAME + bytes as u64,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    return Ok(PooledFrame {
                        slot: Some((self.inner.clone(), bytes)),
                    });
                }
                Err(now) => seen = now,
            }
        }
    }

    /// Admits `bytes`, waiting until enough are free.
    ///
    /// Fails at once with `Oversize` when `bytes` exceeds the whole budget (it must never
    /// wait forever), and with `Closed` when the pool is or becomes closed while waiting.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped before it completes, nothing was admitted.
    /// Waiters are woken together when bytes come back and race for them; there is no
    /// FIFO order among senders waiting for bytes.
    pub async fn admit(&self, bytes: usize) -> Result<PooledFrame, AdmitError> {
        match self.try_admit(bytes) {
            Err(AdmitError::Full) => {}
            done => return done,
        }
        let _waiting = WaiterGuard::new(&self.inner.waiters);
        loop {
            let mut notified = pin!(self.inner.released.notified());
            // Register before checking, so a release between the check and the await is
            // not missed.
            notified.as_mut().enable();
            match self.try_admit(bytes) {
                Err(AdmitError::Full) => notified.await,
                done => return done,
            }
        }
    }

    /// Closes the pool: every waiting and future admission of a non-zero size fails with
    /// `Closed`. Frames already admitted stay valid and release normally.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.released.notify_waiters();
    }

    /// Whether [`SlabPool::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// The current accounting.
    pub fn stats(&self) -> PoolStats {
        if self.inner.admission == Admission::Atomic {
            let credits = self.inner.credits.load(Ordering::SeqCst);
            return PoolStats {
                slots_in_use: (credits >> BYTES_BITS) as usize,
                bytes_in_use: (credits & BYTES_MASK) as usize,
                byte_budget: self.inner.budget,
            };
        }
        let state = self.inner.lock();
        PoolStats {
            slots_in_use: state.slots.len(),
            bytes_in_use: state.bytes_in_use,
            byte_budget: self.inner.budget,
        }
    }
}

impl PoolInner {
    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // The state is two plain numbers updated together under the lock; a panic cannot
        // leave them half-updated, so a poisoned lock is still consistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Gives a frame back: `slot` is its slab key ([`Admission::Locked`]) or its size
    /// ([`Admission::Atomic`]).
    fn release(&self, slot: usize) {
        match self.admission {
            Admission::Locked => {
                let mut state = self.lock();
                let bytes = state.slots.remove(slot);
                state.bytes_in_use -= bytes;
            }
            Admission::Atomic => {
                self.credits
                    .fetch_sub(ONE_FRAME + slot as u64, Ordering::SeqCst);
            }
        }
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.released.notify_waiters();
        }
    }
}

/// Counts a waiting `admit` for as long as it lives, including when it is cancelled.
struct WaiterGuard<'a>(&'a AtomicUsize);

impl<'a> WaiterGuard<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        WaiterGuard(count)
    }
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Proof of admission: holds its bytes against the pool's budget until dropped.
#[must_use = "dropping a frame gives its bytes back at once"]
pub struct PooledFrame {
    /// `None` for a tombstone (zero bytes, no slot); otherwise the pool and the slab key
    /// whose entry records this frame's size ([`Admission::Locked`]), or the size itself
    /// ([`Admission::Atomic`]).
    slot: Option<(Arc<PoolInner>, usize)>,
}

impl PooledFrame {
    /// The frame of a zero-byte message: no slot, no lock, no allocation.
    #[inline]
    pub const fn tombstone() -> Self {
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
    pub fn is_tombstone(&self) -> bool {
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
