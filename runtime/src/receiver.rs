//! The receiving half: [`MailboxReceiver`], the ring read before the shared lane, and the
//! receiver's drop, which closes the mailbox and drops what it holds.

use std::mem::ManuallyDrop;
use std::task::{Context, Poll, ready};

use crate::envelope::{Envelope, Lane, Slot};
use crate::pool::{PoolStats, SlabPool};
use crate::ring::Merge;
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
    /// The receiver of a mailbox just opened ([`crate::Mailbox::open`]).
    pub(crate) fn new(
        rx: mpsc::Receiver<Envelope<M>>,
        merge: Merge<Envelope<M>, Slot<M>>,
        pool: SlabPool,
    ) -> Self {
        MailboxReceiver {
            rx: ManuallyDrop::new(rx),
            merge,
            pool,
        }
    }

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
