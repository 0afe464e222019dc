//! The mailbox: a bounded tokio mpsc channel behind a slab admission step.

use tokio::sync::mpsc;

use crate::error::SendError;
use crate::payload::ByteSize;
use crate::pool::{Admission, AdmitError, PoolStats, PooledFrame, SlabPool};

pub use tokio::sync::mpsc::error::TryRecvError;

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
}

impl Mailbox {
    /// A mailbox holding at most `capacity` messages and `byte_budget` bytes of them, with
    /// the [`Policy::Block`] policy and [`Admission::Atomic`] (lock-free) admission, or
    /// [`Admission::Locked`] where the atomic word cannot count that high: a byte budget of
    /// 2^40 bytes or more, or a capacity of 2^24 messages or more.
    ///
    /// # Panics
    /// When `capacity` is zero (as tokio's bounded channel does).
    pub fn new(capacity: usize, byte_budget: usize) -> Self {
        assert!(capacity > 0, "mailbox capacity must be at least 1");
        Mailbox {
            capacity,
            byte_budget,
            policy: Policy::Block,
            admission: Admission::fitting(capacity, byte_budget),
        }
    }

    /// The same mailbox with another policy.
    pub fn policy(self, policy: Policy) -> Self {
        Mailbox { policy, ..self }
    }

    /// The same mailbox with another admission design for non-empty messages (see
    /// [`Admission`]; the byte budget bounds them the same way).
    ///
    /// # Panics
    /// [`Admission::Atomic`] with a byte budget of 2^40 bytes or more.
    pub fn admission(self, admission: Admission) -> Self {
        Mailbox { admission, ..self }
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
        (
            MailboxSender {
                tx,
                pool: pool.clone(),
                policy: self.policy,
            },
            MailboxReceiver { rx, pool },
        )
    }
}

/// A message in the channel together with the frame that holds its bytes. Dropping the
/// envelope (on receive, or when the channel drops what it still holds) gives them back.
struct Envelope<M> {
    msg: M,
    _frame: PooledFrame,
}

/// The sending half. Clone it for every producer; the mailbox closes for the receiver when
/// the last sender is dropped.
pub struct MailboxSender<M> {
    tx: mpsc::Sender<Envelope<M>>,
    pool: SlabPool,
    policy: Policy,
}

impl<M> Clone for MailboxSender<M> {
    fn clone(&self) -> Self {
        MailboxSender {
            tx: self.tx.clone(),
            pool: self.pool.clone(),
            policy: self.policy,
        }
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
    pub async fn send(&self, msg: M) -> Result<(), SendError<M>> {
        if self.policy == Policy::Fail {
            return self.try_send(msg);
        }
        let size = msg.byte_size();
        if size > self.pool.byte_budget() {
            return Err(self.oversize(msg, size));
        }
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
            Err(AdmitError::Full | AdmitError::Oversize { .. }) => {
                unreachable!("admit waits while full and the size was checked against the budget")
            }
        };
        permit.send(Envelope { msg, _frame: frame });
        Ok(())
    }

    /// Sends now or fails at once, whatever the policy: `Full(msg)` when no slot or not
    /// enough bytes are free, `Closed(msg)`, or `Oversize`.
    #[inline]
    pub fn try_send(&self, msg: M) -> Result<(), SendError<M>> {
        let size = msg.byte_size();
        let permit = match self.tx.try_reserve() {
            Ok(permit) => permit,
            Err(mpsc::error::TrySendError::Full(())) => {
                if size > self.pool.byte_budget() {
                    return Err(self.oversize(msg, size));
                }
                return Err(SendError::Full(msg));
            }
            Err(mpsc::error::TrySendError::Closed(())) => return Err(SendError::Closed(msg)),
        };
        match self.pool.try_admit(size) {
            Ok(frame) => {
                permit.send(Envelope { msg, _frame: frame });
                Ok(())
            }
            Err(AdmitError::Full) => Err(SendError::Full(msg)),
            Err(AdmitError::Closed) => Err(SendError::Closed(msg)),
            Err(AdmitError::Oversize { .. }) => Err(self.oversize(msg, size)),
        }
    }

    fn oversize(&self, msg: M, size: usize) -> SendError<M> {
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
}

/// The receiving half. Dropping it closes the mailbox: waiting senders wake with
/// `Closed(msg)` and queued messages are dropped, giving their bytes back.
pub struct MailboxReceiver<M> {
    rx: mpsc::Receiver<Envelope<M>>,
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
        std::future::poll_fn(move |cx| {
            self.rx
                .poll_recv(cx)
                .map(|envelope| envelope.map(|envelope| envelope.msg))
        })
    }

    /// The next message if one is queued now.
    #[inline]
    pub fn try_recv(&mut self) -> Result<M, TryRecvError> {
        self.rx.try_recv().map(|envelope| envelope.msg)
    }

    /// Closes the mailbox without dropping what it holds: new sends fail with
    /// `Closed(msg)`, senders waiting for bytes wake with `Closed(msg)`, and
    /// [`MailboxReceiver::recv`] still returns every message already admitted.
    pub fn close(&mut self) {
        self.rx.close();
        self.pool.close();
    }

    /// How many messages are queued.
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    /// Whether no message is queued.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    /// The byte accounting of this mailbox.
    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }
}

impl<M> Drop for MailboxReceiver<M> {
    fn drop(&mut self) {
        self.rx.close();
        self.pool.close();
    }
}
