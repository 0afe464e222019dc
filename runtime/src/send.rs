//! The send future, and the message it holds in place until the mailbox takes it.
//!
//! A message moves as few times as a send can manage: from the caller into the future when
//! the future is made, then, on the single lane, straight from the future into the ring's slot
//! ([`crate::ring::Ring::try_push_with`] makes the value only once the slot is the sender's).
//! As an `async fn`, `send` moved it more: its argument into the generator, into a local held
//! across the cooperative-budget wait, into the lane's arguments, back out of a refusal; each
//! move of a message a few cache lines long is a dozen instructions or more
//! (`docs/results/2026-12-06-mailbox-closing-and-send-path.md`, "Fewer moves, and the harness").
//!
//! The sender's part that never waits is [`SendNow`], implemented in [`crate::mailbox`]; only
//! the path that waits (the shared lane's `send_shared`, there too) is an `async fn`, which
//! the future starts, with the message, when the fast path cannot finish.

use std::future::Future;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use crate::error::SendError;

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

/// A sender's part of a send that never waits ([`crate::MailboxSender`]'s, in
/// [`crate::mailbox`]): the message moves from `msg` into the mailbox, or is refused
/// (`Done`), or stays held for the waiting path (`Wait`); `Pending` only for the task's
/// cooperative budget, the message still held.
pub(crate) trait SendNow<M> {
    fn poll_send_now(&self, cx: &mut Context<'_>, msg: &mut Held<M>) -> Poll<Step<M>>;
}

/// `MailboxSender::send`'s future: the fast path ([`SendNow`]) in `poll` itself, the waiting
/// path (`slow`, made by `make_slow`, an `async fn` of the sender) once the fast path cannot
/// finish. `S` is that function's item type (zero-sized), `F` its future.
///
/// `slow` is uninitialised until then, and not an `Option`: a `None` of a future that large
/// was built on the stack and copied into place, twice, on every send (408 bytes each time, a
/// call to `memcpy`), where an uninitialised field is not written at all.
pub(crate) struct SendFuture<'a, T, M, F, S> {
    sender: &'a T,
    msg: Held<M>,
    make_slow: S,
    /// Whether `slow` holds the waiting path's future.
    started: bool,
    /// Pinned with the future (never moved once written; dropped in place).
    slow: MaybeUninit<F>,
}

impl<'a, T, M, F, S> SendFuture<'a, T, M, F, S> {
    #[inline]
    pub(crate) fn new(sender: &'a T, msg: M, make_slow: S) -> Self {
        SendFuture {
            sender,
            msg: Held::new(msg),
            make_slow,
            started: false,
            slow: MaybeUninit::uninit(),
        }
    }
}

impl<T, M, F, S> Drop for SendFuture<'_, T, M, F, S> {
    fn drop(&mut self) {
        if self.started {
            // SAFETY: written once `started` was set, and dropped only here, in place.
            unsafe { self.slow.assume_init_drop() }
        }
    }
}

impl<'a, T, M, F, S> Future for SendFuture<'a, T, M, F, S>
where
    T: SendNow<M>,
    S: Fn(&'a T, M, usize) -> F,
    F: Future<Output = Result<(), SendError<M>>>,
{
    type Output = Result<(), SendError<M>>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: nothing below moves out of `this`: `slow` is written once, in place, and
        // polled through a pin of that place; the other fields are not structurally pinned.
        let this = unsafe { self.get_unchecked_mut() };
        if !this.started {
            let sender: &'a T = this.sender;
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
