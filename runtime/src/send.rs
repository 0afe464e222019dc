//! The sending half's paths that never wait, the send future, and the message it holds in
//! place until the mailbox takes it.
//!
//! A message moves as few times as a send can manage: from the caller into the future when
//! the future is made, then, on the single lane, straight from the future into the ring's slot
//! ([`crate::ring::Ring::try_push_with`] makes the value only once the slot is the sender's).
//! As an `async fn`, `send` moved it more: its argument into the generator, into a local held
//! across the cooperative-budget wait, into the lane's arguments, back out of a refusal; each
//! move of a message a few cache lines long is a dozen instructions or more
//! (`docs/results/2026-12-06-mailbox-closing-and-send-path.md`, "Fewer moves, and the harness").
//!
//! Only the path that waits (the shared lane's `send_shared`, in [`crate::mailbox`]) is an
//! `async fn`; the future starts it, with the message, when the fast path cannot finish.

use std::future::Future;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use crate::error::SendError;
use crate::mailbox::{Envelope, MailboxSender, Policy};
use crate::payload::ByteSize;
use crate::pool::AdmitError;
use crate::ring::Push;

/// A message held where it is until one step takes it: the ring's slot write, an error that
/// hands it back, or the shared lane's send. Dropped with its holder when nothing took it.
pub(crate) struct Held<M> {
    msg: ManuallyDrop<M>,
    present: bool,
}

impl<M> Held<M> {
    #[inline]
    pub(crate) fn new(msg: M) -> Self {
        Held {
            msg: ManuallyDrop::new(msg),
            present: true,
        }
    }

    /// The message, still held.
    #[inline]
    pub(crate) fn get(&self) -> &M {
        assert!(self.present, "a held message read after it was taken");
        &self.msg
    }

    /// Takes the message; a holder gives it up once.
    #[inline]
    pub(crate) fn take(&mut self) -> M {
        assert!(self.present, "a held message taken twice");
        self.present = false;
        // SAFETY: `present` was true, so the value is there and nothing took it; it is false
        // from now on, so neither a second `take` nor the drop touches it again.
        unsafe { ManuallyDrop::take(&mut self.msg) }
    }
}

impl<M> Drop for Held<M> {
    fn drop(&mut self) {
        if self.present {
            // SAFETY: present, and never taken (`take` clears `present` first).
            unsafe { ManuallyDrop::drop(&mut self.msg) }
        }
    }
}

/// What the part of a send that never waits did.
pub(crate) enum Step<M> {
    /// The send is over: sent, or refused with the message.
    Done(Result<(), SendError<M>>),
    /// The message (still held) goes to the shared lane, which may wait; its byte size.
    Wait(usize),
}

/// [`MailboxSender::send`]'s future: the fast path in `poll` itself, the waiting path (`slow`,
/// made by `make_slow`, an `async fn` of the sender) once the fast path cannot finish. `S` is
/// that function's item type (zero-sized), `F` its future.
///
/// `slow` is uninitialised until then, and not an `Option`: a `None` of a future that large
/// was built on the stack and copied into place, twice, on every send (408 bytes each time, a
/// call to `memcpy`), where an uninitialised field is not written at all.
pub(crate) struct SendFuture<'a, M, F, S> {
    sender: &'a MailboxSender<M>,
    msg: Held<M>,
    make_slow: S,
    /// Whether `slow` holds the waiting path's future.
    started: bool,
    /// Pinned with the future (never moved once written; dropped in place).
    slow: MaybeUninit<F>,
}

impl<'a, M, F, S> SendFuture<'a, M, F, S> {
    #[inline]
    pub(crate) fn new(sender: &'a MailboxSender<M>, msg: M, make_slow: S) -> Self {
        SendFuture {
            sender,
            msg: Held::new(msg),
            make_slow,
            started: false,
            slow: MaybeUninit::uninit(),
        }
    }
}

impl<M, F, S> Drop for SendFuture<'_, M, F, S> {
    fn drop(&mut self) {
        if self.started {
            // SAFETY: written once `started` was set, and dropped only here, in place.
            unsafe { self.slow.assume_init_drop() }
        }
    }
}

impl<'a, M, F, S> Future for SendFuture<'a, M, F, S>
where
    M: ByteSize,
    S: Fn(&'a MailboxSender<M>, M, usize) -> F,
    F: Future<Output = Result<(), SendError<M>>>,
{
    type Output = Result<(), SendError<M>>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: nothing below moves out of `this`: `slow` is written once, in place, and
        // polled through a pin of that place; the other fields are not structurally pinned.
        let this = unsafe { self.get_unchecked_mut() };
        if !this.started {
            let sender: &'a MailboxSender<M> = this.sender;
            let size = match ready!(sender.poll_send_now(cx, &mut this.msg)) {
                Step::Done(done) => return Poll::Ready(done),
                Step::Wait(size) => size,
            };
            this.slow
                .write((this.make_slow)(sender, this.msg.take(), size));
            this.started = true;
        }
        // SAFETY: `started`: written above or by an earlier poll, and pinned with `self`.
        unsafe { Pin::new_unchecked(this.slow.assume_init_mut()) }.poll(cx)
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

impl<M: ByteSize> MailboxSender<M> {
    /// The part of [`MailboxSender::send`] that never waits: on the single lane, the message
    /// goes from `msg` straight into the ring ([`crate::send`]); `Wait` leaves it held for the
    /// shared lane, switched to.
    #[inline]
    pub(crate) fn poll_send_now(&self, cx: &mut Context<'_>, msg: &mut Held<M>) -> Poll<Step<M>> {
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
            let refused = match self.send_single(msg, size) {
                Single::Sent => {
                    coop.made_progress();
                    return Poll::Ready(Step::Done(Ok(())));
                }
                Single::Closed => SendError::Closed(msg.take()),
                Single::Oversize => self.oversize(msg.take(), size),
                // Waiting (for a slot or for bytes) is the shared lane's.
                Single::Full | Single::Elsewhere => {
                    self.switch();
                    return Poll::Ready(Step::Wait(size));
                }
            };
            return Poll::Ready(Step::Done(Err(refused)));
        }
        self.switch();
        Poll::Ready(Step::Wait(size))
    }

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

#[cfg(all(test, not(mty_loom)))]
mod tests {
    use super::Held;
    use std::sync::Arc;

    #[test]
    fn a_held_message_is_dropped_once_whether_taken_or_not() {
        let counted = Arc::new(());
        let taken = {
            let mut held = Held::new(counted.clone());
            held.take()
        };
        assert_eq!(Arc::strong_count(&counted), 2, "taken: alive in `taken`");
        drop(taken);
        drop(Held::new(counted.clone()));
        assert_eq!(Arc::strong_count(&counted), 1, "left held: dropped with it");
    }

    #[test]
    #[should_panic(expected = "taken twice")]
    fn a_held_message_cannot_be_taken_twice() {
        let mut held = Held::new(1u8);
        held.take();
        held.take();
    }
}
