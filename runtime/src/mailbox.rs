//! The mailbox: a bounded channel behind a byte admission step. While it has one sender
//! handle its messages go through a single-producer ring ([`crate::ring`]); from the first
//! clone (or wait, or contention) on, through tokio's bounded mpsc channel.

use std::mem::ManuallyDrop;
use std::task::{Context, Poll, ready};

use crate::error::SendError;
use crate::payload::ByteSize;
use crate::pool::{Admission, AdmitError, PoolStats, PooledFrame, SlabPool};
use crate::ring::{Merge, Ring};
use crate::send::{Held, SendFuture};
use crate::sync::{Arc, mpsc};

/// Why [`MailboxReceiver::try_recv`] returned no message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryRecvError {
    /// No message is queued now; one may come.
    Empty,
    /// The mailbox is closed (every sender is gone, or it was closed) and empty: no message
    /// will ever come.
    Disconnected,
}

impl std::fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TryRecvError::Empty => "mailbox empty",
            TryRecvError::Disconnected => "mailbox closed and empty",
        })
    }
}

impl std::error::Error for TryRecvError {}

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
            MailboxReceiver {
                rx: ManuallyDrop::new(rx),
                merge,
                pool,
            },
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

/// The single lane's ring: envelopes, and the tokio channel's permits it holds for its
/// messages after the switch.
pub(crate) type Lane<M> = Ring<Envelope<M>, Slot<M>>;

/// A slot of the shared lane held for a message of the ring after the switch.
pub(crate) type Slot<M> = mpsc::OwnedPermit<Envelope<M>>;

/// A message in the channel together with the frame that holds its bytes. Dropping the
/// envelope (on receive, or when the channel drops what it still holds) gives them back.
pub(crate) struct Envelope<M> {
    pub(crate) msg: M,
    pub(crate) _frame: PooledFrame,
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

/// The receiving half. Dropping it closes the mailbox: waiting senders wake with
/// `Closed(msg)`, and every message a send was told `Ok` for and that was not received is
/// dropped by the drop, on its thread, giving its bytes back (when sends are putting messages
/// into the shared lane at that moment, it waits for them to finish their push first; past a
/// second, the last of them drops the rest: the crate docs, "Closing"). Once it and the sends racing it have
/// returned, none is left. A message's destructor or a waker that panics does not stop it:
/// the rest are still dropped, the senders waiting for bytes woken (tokio's for a slot: the
/// crate docs, "Closing"), and the panic reaches the caller.
pub struct MailboxReceiver<M> {
    /// Taken by the drop, which drops it once the door is shut.
    rx: ManuallyDrop<mpsc::Receiver<Envelope<M>>>,
    /// The ring's one consumer.
    merge: Merge<Envelope<M>, Slot<M>>,
    pool: SlabPool,
}

impl<M> MailboxReceiver<M> {
    /// The next message, or `None` once the mailbox is closed and empty (every sender is
    /// gone, or [`MailboxReceiver::close`] was called and the rest drained). The message's
    /// bytes are given back to the budget as it leaves the mailbox.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped before it completes, no message was taken.
    #[inline]
    pub fn recv(&mut self) -> impl Future<Output = Option<M>> + '_ {
        // A `poll_fn` over `poll_recv` rather than an `async fn` awaiting `self.rx.recv()`:
        // the same wait (tokio's own `recv` is such a `poll_fn`), without two state
        // machines nested around it that moved the message in and out on every call.
        std::future::poll_fn(move |cx| self.poll_recv(cx))
    }

    /// [`MailboxReceiver::recv`]'s poll: the envelope taken apart where it is popped (its
    /// frame dropped, its bytes given back), not wrapped once more in a `Poll` on the way,
    /// which cost a copy of the message (`crate::send` says why moves matter).
    #[inline]
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<M>> {
        if self.merge.ring_done() {
            return self
                .rx
                .poll_recv(cx)
                .map(|got| got.map(|envelope| envelope.msg));
        }
        // The ring's path spends the cooperative budget as tokio's `recv` does.
        let coop = ready!(tokio::task::coop::poll_proceed(cx));
        if let Some(envelope) = self.merge.ready() {
            coop.made_progress();
            return Poll::Ready(Some(envelope.msg));
        }
        drop(coop);
        let rx = &mut self.rx;
        self.merge
            .poll_rest(cx, |cx| rx.poll_recv(cx))
            .map(|got| got.map(|envelope| envelope.msg))
    }

    /// The next message if one is queued now.
    #[inline]
    pub fn try_recv(&mut self) -> Result<M, TryRecvError> {
        use mpsc::error::TryRecvError as Shared;
        if self.merge.ring_done() {
            return match self.rx.try_recv() {
                Ok(envelope) => Ok(envelope.msg),
                Err(Shared::Empty) => Err(TryRecvError::Empty),
                Err(Shared::Disconnected) => Err(TryRecvError::Disconnected),
            };
        }
        if let Some(envelope) = self.merge.ready() {
            return Ok(envelope.msg);
        }
        // The same order-keeping rest as `recv`, asking tokio's lane without waiting.
        let rx = &mut self.rx;
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let rest = self.merge.poll_rest(&mut cx, |_| match rx.try_recv() {
            Ok(envelope) => Poll::Ready(Some(envelope)),
            Err(Shared::Empty) => Poll::Pending,
            Err(Shared::Disconnected) => Poll::Ready(None),
        });
        match rest {
            Poll::Ready(Some(envelope)) => Ok(envelope.msg),
            Poll::Ready(None) => Err(TryRecvError::Disconnected),
            Poll::Pending => Err(TryRecvError::Empty),
        }
    }

    /// Closes the mailbox without dropping what it holds: new sends fail with
    /// `Closed(msg)`, senders waiting for bytes wake with `Closed(msg)`, and
    /// [`MailboxReceiver::recv`] still returns every message already admitted.
    pub fn close(&mut self) {
        close_lanes(&self.merge, &mut self.rx, &self.pool);
    }

    /// How many messages are queued.
    pub fn len(&self) -> usize {
        self.merge.len() + self.rx.len()
    }

    /// Whether no message is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The byte accounting of this mailbox.
    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }
}

impl<M> Drop for MailboxReceiver<M> {
    fn drop(&mut self) {
        // Taken first, into the guard that shuts the door and drops it (draining the shared
        // lane) last: also when a step below panics (a waker woken by the close, a message's
        // destructor: user code).
        // SAFETY: `rx` is taken once, here, and not used after but through the guard.
        let rx = unsafe { ManuallyDrop::take(&mut self.rx) };
        let mut shut = Shut {
            lane: self.merge.lane(),
            rx: Some(rx),
        };
        // What the ring and the stash hold is dropped as this guard goes, before the door's
        // drain, also on a panic.
        let clear = Clear(&mut self.merge);
        let rx = shut.rx.as_mut().expect("taken by its drop");
        close_lanes(clear.0, rx, &self.pool);
    }
}

/// Closes the mailbox for every send: tokio's channel, then the single lane, then the pool,
/// so a thread told `Closed` by one finds every later one closed: with the pool before the
/// ring, a zero-byte send (it takes no bytes) could be told `Ok` on the ring after a sized
/// one was told `Closed`; with the ring before the channel, a send finding the ring's token
/// taken by the close moves to the channel, and could be told `Ok` there (loom found it).
/// The ring and the pool close, and the pool's waiters wake, also past a panicking waker.
fn close_lanes<M>(
    merge: &Merge<Envelope<M>, Slot<M>>,
    rx: &mut mpsc::Receiver<Envelope<M>>,
    pool: &SlabPool,
) {
    /// The ring's close and the pool's, after tokio's channel, also when a waker woken by
    /// its close panics.
    struct Rest<'a, M> {
        merge: &'a Merge<Envelope<M>, Slot<M>>,
        pool: &'a SlabPool,
    }
    impl<M> Drop for Rest<'_, M> {
        fn drop(&mut self) {
            self.merge.close();
            self.pool.close();
        }
    }
    let _rest = Rest { merge, pool };
    rx.close();
}

/// The receiver's drop: the ring and the stash cleared as it goes.
struct Clear<'a, M>(&'a mut Merge<Envelope<M>, Slot<M>>);

impl<M> Drop for Clear<'_, M> {
    fn drop(&mut self) {
        self.0.clear();
    }
}

/// The receiver's drop's last step: the shared lane's door shut, then tokio's receiver dropped
/// with what the channel holds, once the sends inside are out ([`crate::door::Door::shut`]).
struct Shut<M> {
    lane: Arc<Lane<M>>,
    rx: Option<mpsc::Receiver<Envelope<M>>>,
}

impl<M> Drop for Shut<M> {
    fn drop(&mut self) {
        if let Some(rx) = self.rx.take() {
            self.lane.door().shut(rx);
        }
    }
}
