//! The mailbox: a bounded channel behind a byte admission step. While it has one sender
//! handle its messages go through a single-producer ring ([`crate::ring`]); from the first
//! clone (or wait, or contention) on, through tokio's bounded mpsc channel.

use std::task::{Context, Poll, ready};

use crate::envelope::{Envelope, Lane};
use crate::error::SendError;
use crate::payload::ByteSize;
use crate::pool::{Admission, AdmitError, PoolStats, SlabPool};
use crate::receiver::MailboxReceiver;
use crate::ring::Push;
use crate::send::{Held, SendFuture, SendNow, Step};
use crate::sync::{Arc, mpsc};

/// What a send does when the mailbox is full (no slot or not enough bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// [`MailboxSender::send`] waits until both a slot and the bytes are free.
    #[default]
    Block,
    /// [`MailboxSender::send`] returns [`SendError::Full`] at once, like `try_send`.
    Fail,
}

/// A mailbox's shape: count capacity, byte budget, policy. [`Mailbox::open`] makes the
/// sender and receiver handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mailbox {
    capacity: usize,
    byte_budget: usize,
    policy: Policy,
    admission: Admission,
    single_lane: bool,
}

impl Mailbox {
    /// The largest count capacity: tokio's bounded channel holds at most `usize::MAX >> 3`
    /// permits (its semaphore keeps flag bits in the word).
    pub const MAX_CAPACITY: usize = usize::MAX >> 3;

    /// A mailbox holding at most `capacity` messages and `byte_budget` bytes of them, with
    /// the [`Policy::Block`] policy and [`Admission::Atomic`] (lock-free) admission, or
    /// [`Admission::Locked`] where the atomic word cannot count that high: a byte budget of
    /// 2^40 bytes or more, or a capacity of 2^23 - 1 messages or more (it holds one frame
    /// more than its capacity for a moment: [`most_frames`]).
    ///
    /// # Panics
    /// When `capacity` is zero or above [`Mailbox::MAX_CAPACITY`] (as tokio's bounded channel
    /// does, here rather than in [`Mailbox::open`]).
    pub fn new(capacity: usize, byte_budget: usize) -> Self {
        assert!(capacity > 0, "mailbox capacity must be at least 1");
        assert!(
            capacity <= Self::MAX_CAPACITY,
            "mailbox capacity must be at most Mailbox::MAX_CAPACITY ({}), not {capacity}",
            Self::MAX_CAPACITY
        );
        Mailbox {
            capacity,
            byte_budget,
            policy: Policy::Block,
            admission: Admission::fitting(most_frames(capacity), byte_budget),
            single_lane: true,
        }
    }

    /// The same mailbox with another policy.
    pub fn policy(self, policy: Policy) -> Self {
        Mailbox { policy, ..self }
    }

    /// The same mailbox with another admission design for non-empty messages (see
    /// [`Admission`]; the byte budget bounds them the same way). A switch for measuring the
    /// designs, hidden from the documented API.
    ///
    /// # Panics
    /// [`Admission::Atomic`] with a byte budget of 2^40 bytes or more, or a capacity of
    /// 2^23 - 1 messages or more: its word cannot count them.
    #[doc(hidden)]
    pub fn admission(self, admission: Admission) -> Self {
        assert!(
            admission == Admission::Locked
                || Admission::fitting(most_frames(self.capacity), self.byte_budget)
                    == Admission::Atomic,
            "Admission::Atomic takes budgets below 2^40 bytes and a capacity below 2^23 - 1 \
             messages (capacity {}, budget {})",
            self.capacity,
            self.byte_budget
        );
        Mailbox { admission, ..self }
    }

    /// The same mailbox with its single-sender lane on (the default) or off: off, it starts
    /// on the shared lane, as a mailbox of capacity over 1024 does (see the crate docs, "The
    /// single-sender lane"). A switch for measuring what the lane buys or costs, hidden from
    /// the documented API.
    #[doc(hidden)]
    pub fn single_sender_lane(self, on: bool) -> Self {
        Mailbox {
            single_lane: on,
            ..self
        }
    }

    /// The count capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The byte budget.
    pub fn byte_budget(&self) -> usize {
        self.byte_budget
    }

    /// Opens the mailbox: one receiver and a sender to clone for each producer.
    pub fn open<M: ByteSize>(self) -> (MailboxSender<M>, MailboxReceiver<M>) {
        let (tx, rx) = mpsc::channel(self.capacity);
        let pool = SlabPool::with_admission(self.byte_budget, self.admission);
        let (ring, merge) = crate::ring::channel(self.capacity, self.single_lane);
        (
            MailboxSender {
                tx,
                ring,
                pool: pool.clone(),
                policy: self.policy,
            },
            MailboxReceiver::new(rx, merge, pool),
        )
    }
}

/// The most frames a mailbox of `capacity` holds at once: one more than its capacity, for a
/// moment. A receive gives the message's slot back (tokio's `try_recv` and `poll_recv` do)
/// before the mailbox drops its envelope, and with it the frame; a sender waiting for that
/// slot can be admitted in between. The receiver holds one received envelope at a time, so
/// one more on the shared lane. (The ring can hold a few more for a moment: threads sharing
/// one handle each admit their bytes before taking its token; it exists only up to capacity
/// 1024, far below the atomic word's 2^23 frames.)
fn most_frames(capacity: usize) -> usize {
    capacity.saturating_add(1)
}

/// The sending half. Clone it for every producer; the mailbox closes for the receiver when
/// the last sender is dropped.
pub struct MailboxSender<M> {
    tx: mpsc::Sender<Envelope<M>>,
    pub(crate) ring: Arc<Lane<M>>,
    pub(crate) pool: SlabPool,
    pub(crate) policy: Policy,
}

impl<M> Clone for MailboxSender<M> {
    /// Another sender. The mailbox leaves the single-sender lane for good (crate docs,
    /// "The single-sender lane").
    fn clone(&self) -> Self {
        self.switch();
        MailboxSender {
            tx: self.tx.clone(),
            ring: self.ring.clone(),
            pool: self.pool.clone(),
            policy: self.policy,
        }
    }
}

impl<M> MailboxSender<M> {
    /// Moves the mailbox to the shared lane (one load once there), reserving a slot of the
    /// tokio channel for each message still in the ring; waits for a switch in progress. Every
    /// send to the tokio channel comes here first (the ring's module docs).
    #[inline]
    pub(crate) fn switch(&self) {
        self.ring
            .switch(|| self.tx.clone().try_reserve_owned().ok());
    }
}

impl<M: ByteSize> MailboxSender<M> {
    /// Sends under the mailbox's policy: with [`Policy::Block`] waits for a slot and then
    /// for the bytes; with [`Policy::Fail`] behaves exactly as [`MailboxSender::try_send`].
    ///
    /// Errors: `Closed(msg)` when the receiver is gone or closed (also while waiting),
    /// `Oversize` at once when the message exceeds the whole byte budget, `Full(msg)` only
    /// under `Policy::Fail`.
    ///
    /// # Cancel safety
    /// If the future is dropped before it completes, the message was not sent and is
    /// dropped with the future; any slot or bytes it had reserved are given back.
    #[inline]
    pub fn send(&self, msg: M) -> impl Future<Output = Result<(), SendError<M>>> + '_ {
        SendFuture::new(self, msg, Self::send_shared)
    }

    /// [`MailboxSender::send`] on the shared lane (tokio's channel).
    async fn send_shared(&self, msg: M, size: usize) -> Result<(), SendError<M>> {
        // Slot first: a closed mailbox is reported before any bytes are taken, and the
        // receiver frees slot and bytes together, so holding a slot while waiting for
        // bytes cannot deadlock.
        //
        // A free slot is taken without a future (`try_reserve`: no semaphore waiter, no
        // `Acquire` to set up and drop); only a full mailbox waits in `reserve`, whose
        // queue is fair, and a free slot is never free while senders queue for one (tokio's
        // semaphore hands released permits to its waiters first). The fast path still
        // spends the task's cooperative budget as `reserve` does, so a sender that never
        // finds the mailbox full still yields to the scheduler now and then.
        let fast = {
            let coop = std::future::poll_fn(tokio::task::coop::poll_proceed).await;
            let fast = self.tx.try_reserve();
            if fast.is_ok() {
                coop.made_progress();
            }
            fast
        };
        let permit = match fast {
            Ok(permit) => permit,
            Err(mpsc::error::TrySendError::Full(())) => {
                let Ok(permit) = self.tx.reserve().await else {
                    return Err(SendError::Closed(msg));
                };
                permit
            }
            Err(mpsc::error::TrySendError::Closed(())) => return Err(SendError::Closed(msg)),
        };
        // Admission without a future first: the bytes are there (always, for an empty
        // message), or the pool is closed. Only a full pool waits, in `admit`.
        let admitted = match self.pool.try_admit(size) {
            Err(AdmitError::Full) => self.pool.admit(size).await,
            done => done,
        };
        let frame = match admitted {
            Ok(frame) => frame,
            Err(AdmitError::Closed) => return Err(SendError::Closed(msg)),
            Err(AdmitError::Full | AdmitError::Oversize) => {
                unreachable!("admit waits while full and the size was checked against the budget")
            }
        };
        self.push(permit, Envelope { msg, _frame: frame });
        Ok(())
    }

    /// Puts an admitted message into the shared lane through the door ([`crate::door`]): the
    /// receiver gets it, or the receiver's drop drops it. The send took its slot before the
    /// close, so it counts as sent before that drop: past a shut door the message is dropped
    /// here, with its slot and bytes, as the drop would have. Nothing comes back: a
    /// `Closed(msg)` from here made lto+pgo copy every message more, single lane included
    /// (`docs/results/2026-12-02-mailbox-closing.md`).
    #[inline]
    fn push(&self, permit: mpsc::Permit<'_, Envelope<M>>, envelope: Envelope<M>) {
        // Every push into `tx` passes the door ([`crate::door`]), kept in the ring.
        match self.ring.door().enter() {
            Some(_inside) => permit.send(envelope),
            None => drop(envelope),
        }
    }

    /// Sends now or fails at once, whatever the policy: `Full(msg)` when no slot or not
    /// enough bytes are free, `Closed(msg)`, or `Oversize`.
    #[inline]
    pub fn try_send(&self, msg: M) -> Result<(), SendError<M>> {
        self.try_send_held(&mut Held::new(msg))
    }

    /// [`MailboxSender::try_send`] on the shared lane.
    pub(crate) fn try_send_shared(&self, msg: M, size: usize) -> Result<(), SendError<M>> {
        let permit = match self.tx.try_reserve() {
            Ok(permit) => permit,
            Err(mpsc::error::TrySendError::Full(())) => return Err(SendError::Full(msg)),
            Err(mpsc::error::TrySendError::Closed(())) => return Err(SendError::Closed(msg)),
        };
        match self.pool.try_admit(size) {
            Ok(frame) => {
                self.push(permit, Envelope { msg, _frame: frame });
                Ok(())
            }
            Err(AdmitError::Full) => Err(SendError::Full(msg)),
            Err(AdmitError::Closed) => Err(SendError::Closed(msg)),
            Err(AdmitError::Oversize) => Err(self.oversize(msg, size)),
        }
    }

    pub(crate) fn oversize(&self, msg: M, size: usize) -> SendError<M> {
        SendError::Oversize {
            msg,
            size,
            budget: self.pool.byte_budget(),
        }
    }
}

impl<M> MailboxSender<M> {
    /// Whether the receiver is gone or closed.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// The mailbox's policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The byte accounting of this mailbox.
    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// Whether the mailbox is still on its single-sender lane (see the crate docs): `false`
    /// once it has moved to the shared lane, for good. For tests and measurements, hidden
    /// from the documented API.
    #[doc(hidden)]
    pub fn on_single_lane(&self) -> bool {
        self.ring.on_single_lane()
    }
}

/// What a send on the single lane did: `Sent` took the message, every other outcome left it
/// held.
enum Single {
    Sent,
    Closed,
    /// No free slot in the ring, or not the bytes.
    Full,
    Oversize,
    /// The mailbox is on (or moving to) the shared lane: switch and send there.
    Elsewhere,
}

impl<M: ByteSize> SendNow<M> for MailboxSender<M> {
    /// The part of [`MailboxSender::send`] that never waits: on the single lane, the message
    /// goes from `msg` straight into the ring ([`crate::send`]); `Wait` leaves it held for the
    /// shared lane, switched to.
    #[inline]
    fn poll_send_now(&self, cx: &mut Context<'_>, msg: &mut Held<M>) -> Poll<Step<M>> {
        if self.policy == Policy::Fail {
            return Poll::Ready(Step::Done(self.try_send_held(msg)));
        }
        let size = msg.get().byte_size();
        if size > self.pool.byte_budget() {
            return Poll::Ready(Step::Done(Err(self.oversize(msg.take(), size))));
        }
        if self.ring.is_single() {
            // Spends the task's cooperative budget as the shared lane's `reserve` does.
            let coop = ready!(tokio::task::coop::poll_proceed(cx));
            match self.send_single(msg, size) {
                Single::Sent => {
                    coop.made_progress();
                    return Poll::Ready(Step::Done(Ok(())));
                }
                Single::Closed => {
                    return Poll::Ready(Step::Done(Err(SendError::Closed(msg.take()))));
                }
                Single::Oversize => {
                    return Poll::Ready(Step::Done(Err(self.oversize(msg.take(), size))));
                }
                // Waiting (for a slot or for bytes) is the shared lane's.
                Single::Full | Single::Elsewhere => {}
            }
        }
        self.switch();
        Poll::Ready(Step::Wait(size))
    }
}

impl<M: ByteSize> MailboxSender<M> {
    /// A send on the single lane, never waiting: the slot and the bytes are there now, and the
    /// message moves from `msg` into the ring, or it says why not (nothing taken).
    #[inline]
    fn send_single(&self, msg: &mut Held<M>, size: usize) -> Single {
        if !self.ring.has_room() {
            if self.ring.is_closed() {
                return Single::Closed;
            }
            return Single::Full;
        }
        let frame = match self.pool.try_admit(size) {
            Ok(frame) => frame,
            Err(AdmitError::Full) => return Single::Full,
            Err(AdmitError::Closed) => return Single::Closed,
            Err(AdmitError::Oversize) => return Single::Oversize,
        };
        // A refused push never calls this: the frame goes with it (its bytes given back).
        let envelope = || Envelope {
            msg: msg.take(),
            _frame: frame,
        };
        match self.ring.try_push_with(envelope) {
            Push::Done => Single::Sent,
            Push::Full => Single::Full,
            Push::Closed => Single::Closed,
            Push::Shared => Single::Elsewhere,
        }
    }

    /// [`MailboxSender::try_send`] of a held message: taken, whatever the outcome.
    #[inline]
    pub(crate) fn try_send_held(&self, msg: &mut Held<M>) -> Result<(), SendError<M>> {
        let size = msg.get().byte_size();
        // First, as in `send`: an oversize message is refused whatever the lane and state.
        if size > self.pool.byte_budget() {
            return Err(self.oversize(msg.take(), size));
        }
        if self.ring.is_single() {
            match self.send_single(msg, size) {
                Single::Sent => return Ok(()),
                Single::Closed => return Err(SendError::Closed(msg.take())),
                Single::Full => return Err(SendError::Full(msg.take())),
                Single::Oversize => return Err(self.oversize(msg.take(), size)),
                Single::Elsewhere => {}
            }
        }
        // Also when the lane was not single to begin with: it may be switching, and a permit
        // taken now would be one the switch needs for a message still in the ring.
        self.switch();
        self.try_send_shared(msg.take(), size)
    }
}
