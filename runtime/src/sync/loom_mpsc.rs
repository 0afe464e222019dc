//! A loom-aware stand-in for the subset of tokio's bounded `mpsc` channel the mailbox uses.
//!
//! tokio's channel is not loom-aware: its atomics, its semaphore's lock and its wakers are
//! std's, so under `--cfg mty_loom` loom could neither interleave them nor see a wake-up they
//! lose. `crate::sync` therefore swaps this module in for `tokio::sync::mpsc` in that cfg, so
//! the mailbox's own code (the ring, the switch to the shared lane, the stash, the byte
//! admission) runs against a shared lane whose every step loom controls.
//!
//! The names, signatures and semantics mirror tokio's bounded channel (tokio 1.54), so the
//! same mailbox code compiles and behaves the same either way:
//! * a slot (tokio's semaphore permit) is taken by a reservation and given back when the
//!   value it carried is received, or when the permit is dropped unused;
//! * reservers that find no free slot wait in a FIFO queue; a slot given back goes to the
//!   first of them, and is never free while they queue (so `try_reserve` cannot overtake
//!   them); a cancelled reservation hands on a slot it had already been given;
//! * `close` (or dropping the receiver) fails new and waiting reservations, while values
//!   queued or still to be sent through permits already held can be received; the receiver
//!   sees the end once the queue is empty and every sender is gone, or, closed, every slot
//!   is back.
//!
//! * a value is sent in two steps, as tokio's `Tx::push` is: its place at the tail of the
//!   queue is claimed (tokio's `fetch_add` of the tail), then the value is written there
//!   (tokio's store and ready bit) and the receiver woken. In between, a receiver finds the
//!   place claimed but not ready: `poll_recv` waits, `try_recv` waits for the write (tokio
//!   parks the thread), `len` counts it unless it is the last, and the receiver's drop drains the values before it
//!   and stops there, leaving it and everything behind it until the channel itself is freed
//!   (with its last handle). A value written after the receiver's drop stays there as well.
//!
//! It is built for obviousness, not speed: one [`Mutex`] (loom's) guards the whole state,
//! taken once per operation, and twice by a send (its claim, then its write, so loom can
//! run anything between the two); wakers are stored under it but woken (or dropped) only
//! after it is released.

// The module mirrors tokio's API; the mailbox does not use every item of it.
#![allow(dead_code, reason = "mirrors tokio's API; not every item is used")]

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::PoisonError;
use std::task::{Context, Poll, Waker};

use crate::sync::{Arc, Mutex, MutexGuard};

use self::error::{SendError, TryRecvError, TrySendError};

/// The channel's error types, as tokio's `mpsc::error`.
#[path = "loom_mpsc_error.rs"]
pub mod error;

/// A bounded channel of `buffer` slots.
///
/// # Panics
/// When `buffer` is zero, as tokio's.
pub fn channel<T>(buffer: usize) -> (Sender<T>, Receiver<T>) {
    assert!(buffer > 0, "mpsc bounded channel requires buffer > 0");
    let shared = Arc::new(Shared(Mutex::new(State {
        queue: VecDeque::new(),
        popped: 0,
        bound: buffer,
        free: buffer,
        closed: false,
        senders: 1,
        rx_waker: None,
        waiters: VecDeque::new(),
        next_id: 0,
    })));
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

struct Shared<T>(Mutex<State<T>>);

/// The whole channel. Every slot is, at any time, exactly one of: free (`free`), held by a
/// permit (or by a reservation that was just given it), assigned to a queued reserver that
/// has not yet taken it, or carrying a value in `queue`.
struct State<T> {
    /// Sent values, oldest first: `None` where a send has claimed its place but not yet
    /// written its value.
    queue: VecDeque<Option<T>>,
    /// How many places have left the front of `queue`: a claimed place's position minus
    /// this is its index (a claimed place never leaves before its value is written).
    popped: u64,
    /// The channel's capacity.
    bound: usize,
    /// Slots free now (tokio's available permits). Never above zero while an unassigned
    /// reserver queues.
    free: usize,
    /// The receiver closed the channel or is gone (tokio's closed semaphore).
    closed: bool,
    /// Live `Sender`s, counting those held by `OwnedPermit`s.
    senders: usize,
    /// The receiver's waker, taken when woken (tokio's `AtomicWaker`).
    rx_waker: Option<Waker>,
    /// Reservers waiting for a slot, first come first.
    waiters: VecDeque<Waiter>,
    /// The id of the next reserver to queue.
    next_id: u64,
}

struct Waiter {
    id: u64,
    /// `None` once woken.
    waker: Option<Waker>,
    /// A slot was given to this reserver; it takes it on its next poll (or hands it on when
    /// dropped first).
    assigned: bool,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A failed assertion while the lock is held must not turn every other thread's lock
        // into a second panic.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a free slot now (tokio's `try_acquire(1)`).
    fn try_acquire(&self) -> Result<(), TrySendError<()>> {
        let mut state = self.lock();
        if state.closed {
            return Err(TrySendError::Closed(()));
        }
        if state.free == 0 {
            return Err(TrySendError::Full(()));
        }
        debug_assert!(state.waiters.iter().all(|waiter| waiter.assigned));
        state.free -= 1;
        Ok(())
    }

    /// Queues a value for a slot already held (tokio's `Chan::send`): claims its place, then
    /// writes it, taking the lock for each, so loom can interleave anything in between.
    fn push(&self, value: T) {
        let at = {
            let mut state = self.lock();
            state.queue.push_back(None);
            state.popped + state.queue.len() as u64 - 1
        };
        let mut state = self.lock();
        let index = usize::try_from(at - state.popped).expect("a claimed place stays queued");
        let place = &mut state.queue[index];
        debug_assert!(place.is_none(), "claimed once");
        *place = Some(value);
        let waker = state.rx_waker.take();
        drop(state);
        wake(waker);
    }

    /// Gives back a slot a sender-side holder did not use (a permit or a cancelled
    /// reservation): to the first waiting reserver, else to the free slots, and wakes the
    /// receiver if that made a closed channel idle (tokio's `Permit::drop`).
    fn release(&self) {
        let mut state = self.lock();
        let wakers = state.release();
        drop(state);
        wake_all(wakers);
    }
}

/// What the front of the queue holds.
enum Front<T> {
    /// A written value, taken off the queue.
    Value(T),
    /// A place claimed but not yet written (tokio's `TryPopResult::Busy`).
    Claimed,
    Empty,
}

impl<T> State<T> {
    /// Takes the front value if it is written.
    fn pop(&mut self) -> Front<T> {
        match self.queue.front() {
            None => Front::Empty,
            Some(None) => Front::Claimed,
            Some(Some(_)) => {
                self.popped += 1;
                let value = self.queue.pop_front().flatten();
                Front::Value(value.expect("checked just now"))
            }
        }
    }

    /// One slot comes back: it goes to the first reserver still waiting for one (whose
    /// waker is returned, to wake once the lock is released), else to the free slots.
    #[must_use]
    fn give_back(&mut self) -> Option<Waker> {
        if let Some(waiter) = self.waiters.iter_mut().find(|waiter| !waiter.assigned) {
            waiter.assigned = true;
            return waiter.waker.take();
        }
        self.free += 1;
        debug_assert!(self.free <= self.bound);
        None
    }

    /// [`State::give_back`] for a slot a sender-side holder did not use, also returning the
    /// receiver's waker if that made a closed channel idle: its `poll_recv` returns `None`
    /// now (tokio wakes it on this from `Permit::drop` and from a failed or cancelled
    /// `reserve`).
    #[must_use]
    fn release(&mut self) -> [Option<Waker>; 2] {
        let waiter = self.give_back();
        let receiver = if self.closed && self.free == self.bound {
            self.rx_waker.take()
        } else {
            None
        };
        [waiter, receiver]
    }

    /// Closes the channel (tokio's `Rx::close`): no new reservation, and the reservers still
    /// waiting for a slot leave the queue; their wakers are returned to wake once the lock
    /// is released. Reservers already given a slot stay until they poll (and fail, giving
    /// it back) or are dropped.
    #[must_use]
    fn close(&mut self) -> Vec<Waker> {
        self.closed = true;
        let mut wakers = Vec::new();
        self.waiters.retain_mut(|waiter| {
            if waiter.assigned {
                return true;
            }
            wakers.extend(waiter.waker.take());
            false
        });
        wakers
    }
}

fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        waker.wake();
    }
}

fn wake_all(wakers: impl IntoIterator<Item = Option<Waker>>) {
    wakers.into_iter().for_each(wake);
}

/// The sending half, as tokio's `mpsc::Sender`.
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        Sender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.senders -= 1;
        // The last sender gone: the receiver sees the end once it has drained the queue.
        let receiver = if state.senders == 0 {
            state.rx_waker.take()
        } else {
            None
        };
        drop(state);
        wake(receiver);
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

impl<T> Sender<T> {
    /// A slot now, or `Full(())` (none free, or all spoken for by waiting reservers), or
    /// `Closed(())`.
    pub fn try_reserve(&self) -> Result<Permit<'_, T>, TrySendError<()>> {
        self.shared.try_acquire()?;
        Ok(Permit { sender: self })
    }

    /// [`Sender::try_reserve`], the permit holding this sender.
    pub fn try_reserve_owned(self) -> Result<OwnedPermit<T>, TrySendError<Self>> {
        match self.shared.try_acquire() {
            Ok(()) => Ok(OwnedPermit { sender: Some(self) }),
            Err(TrySendError::Full(())) => Err(TrySendError::Full(self)),
            Err(TrySendError::Closed(())) => Err(TrySendError::Closed(self)),
        }
    }

    /// A slot, waiting for one in FIFO order; `Err` once the channel is closed (also while
    /// waiting, and also when a slot had been given to this reservation but the channel
    /// closed before it took it, as tokio's).
    ///
    /// # Cancel safety
    /// Dropping the future leaves the queue, and hands on a slot already given to it.
    pub async fn reserve(&self) -> Result<Permit<'_, T>, SendError<()>> {
        Reserve {
            shared: &self.shared,
            id: None,
        }
        .await?;
        Ok(Permit { sender: self })
    }

    /// Whether the receiver closed the channel or is gone.
    pub fn is_closed(&self) -> bool {
        self.shared.lock().closed
    }

    /// The slots free now (tokio's available permits).
    pub fn capacity(&self) -> usize {
        self.shared.lock().free
    }
}

/// [`Sender::reserve`]'s wait for a slot (tokio's semaphore `Acquire`).
struct Reserve<'a, T> {
    shared: &'a Shared<T>,
    /// This reservation's id while it is in the queue.
    id: Option<u64>,
}

impl<T> Future for Reserve<'_, T> {
    type Output = Result<(), SendError<()>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let mut state = this.shared.lock();
        let Some(id) = this.id else {
            // First poll: a free slot is taken at once (none is free while reservers queue).
            if state.closed {
                return Poll::Ready(Err(SendError(())));
            }
            if state.free > 0 {
                debug_assert!(state.waiters.iter().all(|waiter| waiter.assigned));
                state.free -= 1;
                return Poll::Ready(Ok(()));
            }
            let id = state.next_id;
            state.next_id += 1;
            state.waiters.push_back(Waiter {
                id,
                waker: Some(cx.waker().clone()),
                assigned: false,
            });
            this.id = Some(id);
            return Poll::Pending;
        };
        let at = state.waiters.iter().position(|waiter| waiter.id == id);
        if state.closed {
            // As tokio's: closed wins over a slot given but not yet taken. The slot goes back
            // now (tokio's when the finished future is dropped, right after).
            this.id = None;
            let waiter = at.and_then(|at| state.waiters.remove(at));
            let wakers = match &waiter {
                Some(waiter) if waiter.assigned => state.release(),
                _ => [None, None],
            };
            drop(state);
            drop(waiter);
            wake_all(wakers);
            return Poll::Ready(Err(SendError(())));
        }
        let at = at.expect("a reservation stays queued until it completes or the channel closes");
        if state.waiters[at].assigned {
            state.waiters.remove(at);
            this.id = None;
            return Poll::Ready(Ok(()));
        }
        let slot = &mut state.waiters[at].waker;
        let stale = match slot {
            Some(waker) if waker.will_wake(cx.waker()) => None,
            _ => slot.replace(cx.waker().clone()),
        };
        drop(state);
        drop(stale);
        Poll::Pending
    }
}

impl<T> Drop for Reserve<'_, T> {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let mut state = self.shared.lock();
        let Some(at) = state.waiters.iter().position(|waiter| waiter.id == id) else {
            // Closed: the queue already let it go.
            return;
        };
        let waiter = state.waiters.remove(at).expect("found just now");
        // A slot given to it goes on (to the next reserver, else back to the free slots), in
        // the same step as it leaves the queue, as tokio's.
        let wakers = if waiter.assigned {
            state.release()
        } else {
            [None, None]
        };
        drop(state);
        drop(waiter);
        wake_all(wakers);
    }
}

/// A slot reserved by [`Sender::try_reserve`] or [`Sender::reserve`]: [`Permit::send`] uses
/// it, dropping the permit gives it back.
pub struct Permit<'a, T> {
    sender: &'a Sender<T>,
}

impl<T> Permit<'_, T> {
    /// Sends `value` in the reserved slot. It cannot fail: a value sent after the receiver
    /// is gone is dropped with the channel, as tokio's.
    pub fn send(self, value: T) {
        let shared = &self.sender.shared;
        // The slot goes with the value: `Drop` must not give it back too.
        std::mem::forget(self);
        shared.push(value);
    }
}

impl<T> Drop for Permit<'_, T> {
    fn drop(&mut self) {
        self.sender.shared.release();
    }
}

impl<T> fmt::Debug for Permit<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit").finish_non_exhaustive()
    }
}

/// A slot reserved by [`Sender::try_reserve_owned`], holding its sender: while it lives the
/// channel does not see every sender gone.
pub struct OwnedPermit<T> {
    /// `None` once sent.
    sender: Option<Sender<T>>,
}

impl<T> OwnedPermit<T> {
    /// Sends `value` in the reserved slot and returns the sender.
    pub fn send(mut self, value: T) -> Sender<T> {
        let sender = self
            .sender
            .take()
            .expect("an unsent permit holds its sender");
        sender.shared.push(value);
        sender
    }
}

impl<T> Drop for OwnedPermit<T> {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take() {
            // The slot first, then the sender (which may be the last one), as tokio's.
            sender.shared.release();
            drop(sender);
        }
    }
}

impl<T> fmt::Debug for OwnedPermit<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedPermit").finish_non_exhaustive()
    }
}

/// The receiving half, as tokio's `mpsc::Receiver`.
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

/// A value just taken off the queue: its slot goes back (to the first waiting reserver, woken
/// once the lock is released, else to the free slots).
fn received<T>(mut state: MutexGuard<'_, State<T>>, value: T) -> T {
    let waiter = state.give_back();
    drop(state);
    wake(waiter);
    value
}

impl<T> Receiver<T> {
    /// The next value, `Pending` (waking the task when that may change), or `None` once
    /// nothing more can come: the queue is empty and every sender (and owned permit) is gone,
    /// or the channel is closed and every slot is back.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut state = self.shared.lock();
        match state.pop() {
            Front::Value(value) => return Poll::Ready(Some(received(state, value))),
            // Its send is still writing it, and wakes the receiver when it has.
            Front::Claimed => {}
            Front::Empty => {
                if state.senders == 0 || (state.closed && state.free == state.bound) {
                    return Poll::Ready(None);
                }
            }
        }
        let stale = match &state.rx_waker {
            Some(waker) if waker.will_wake(cx.waker()) => None,
            _ => state.rx_waker.replace(cx.waker().clone()),
        };
        drop(state);
        drop(stale);
        Poll::Pending
    }

    /// The next value if one is queued: else `Disconnected` when [`Receiver::poll_recv`]
    /// would return `None`, `Empty` when it would wait.
    ///
    /// A place claimed at the front but not yet written is waited for, as tokio's `try_recv`
    /// parks the thread until that send has written it (here: yields to loom until it has).
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        loop {
            let mut state = self.shared.lock();
            match state.pop() {
                Front::Value(value) => return Ok(received(state, value)),
                Front::Claimed => {
                    drop(state);
                    loom::thread::yield_now();
                }
                Front::Empty => {
                    return if state.senders == 0 || (state.closed && state.free == state.bound) {
                        Err(TryRecvError::Disconnected)
                    } else {
                        Err(TryRecvError::Empty)
                    };
                }
            }
        }
    }

    /// Closes the channel: new and waiting reservations fail; queued values, and values sent
    /// through permits already held, can still be received.
    pub fn close(&mut self) {
        let mut state = self.shared.lock();
        let waiters = state.close();
        drop(state);
        waiters.into_iter().for_each(Waker::wake);
    }

    /// How many values are queued, as tokio's counts them: every place claimed, written or
    /// not (its tail position minus its head), except the last one while it is not written.
    pub fn len(&self) -> usize {
        let state = self.shared.lock();
        let unwritten_last = matches!(state.queue.back(), Some(None));
        state.queue.len() - usize::from(unwritten_last)
    }

    /// Whether no value is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Drop for Receiver<T> {
    /// Closes the channel and drops the queued values, giving their slots back, up to the
    /// first place claimed but not yet written: as tokio's drain, it stops there, and what is
    /// behind it (or written later) stays until the channel is freed with its last handle.
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        let waiters = state.close();
        let own = state.rx_waker.take();
        let mut values = Vec::new();
        while let Front::Value(value) = state.pop() {
            values.push(value);
            // Closed: no reserver waits unassigned, so this becomes a free slot.
            let none = state.give_back();
            debug_assert!(none.is_none());
        }
        drop(state);
        waiters.into_iter().for_each(Waker::wake);
        drop(own);
        drop(values);
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver").finish_non_exhaustive()
    }
}

#[cfg(test)]
#[path = "loom_mpsc_tests.rs"]
mod tests;
