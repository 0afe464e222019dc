//! Mighty (`mty-runtime`): an agent-first runtime whose primitive is the mailbox.
//!
//! A mailbox is a bounded channel (a single-producer ring while it has one sender, tokio's
//! mpsc channel after) behind an admission step that accounts for each message's byte size (lock-free byte credits, or a locked slab: [`Admission`]), so
//! back-pressure holds on bytes as well as on count.
//!
//! ```
//! use mty_runtime::{Mailbox, SmallPayload};
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let (tx, mut rx) = Mailbox::new(8, 4096).open::<SmallPayload>();
//! tx.send(SmallPayload::copy_from(b"hello")).await.unwrap();
//! assert_eq!(rx.recv().await.unwrap().as_slice(), b"hello");
//! # });
//! ```
//!
//! # Ordering
//! Messages from one [`MailboxSender`] (and its clones used from one task, one after the
//! other) arrive in the order they were sent. Across senders there is no order but the
//! order in which sends completed.
//!
//! # Back-pressure
//! A mailbox holds at most `capacity` messages and `byte_budget` bytes of them at once
//! (`byte_budget` counts what [`ByteSize::byte_size`] says, recorded at admission).
//! A send needs a slot *and* the bytes:
//! * under [`Policy::Block`], [`MailboxSender::send`] waits for a slot, then for the bytes;
//! * under [`Policy::Fail`], and always with [`MailboxSender::try_send`], a send that
//!   cannot complete now returns [`SendError::Full`] with the message, even when count
//!   slots are free but bytes are not.
//!
//! A send under [`Policy::Block`] that finds a slot and its bytes free takes them without
//! waiting (no semaphore waiter is set up); a slot freed while senders queue for one goes
//! to the first of them, never to a later send. Like tokio's `reserve`, every such send
//! spends the task's cooperative budget, so a sender that never finds the mailbox full
//! still yields to the scheduler now and then.
//!
//! Bytes are given back when the message leaves the mailbox: on receive, or when a closed
//! mailbox drops what it still held. The budget bounds bytes *queued*, not bytes being
//! handled.
//!
//! **Fairness.** Senders waiting for a slot are served first come, first served (tokio's
//! fair semaphore), and so are senders waiting for bytes: bytes given back go to the
//! longest-waiting sender as soon as its whole message fits, then to the next; a later,
//! smaller message never takes bytes ahead of it. While any sender waits for bytes, a send of
//! a non-empty message that would not wait (`try_send`, or `send` under [`Policy::Fail`])
//! returns [`SendError::Full`] even if bytes are free, and `send` under [`Policy::Block`]
//! queues behind (a zero-byte message needs no bytes and is not held back). The bound: once a sender waits for bytes, at most one message per other sending
//! thread (a send already past its check at that moment) is admitted ahead of it; and once
//! it waits for a slot, at most one sender per other thread is ahead of it in the slot
//! queue. So a large message among a stream of small ones gets through once the messages
//! already in the mailbox are received.
//!
//! A message larger than the whole budget could never be admitted: every send returns
//! [`SendError::Oversize`] with it at once, never waits.
//!
//! # The single-sender lane
//! A mailbox starts on its **single-sender lane**: while it has one [`MailboxSender`] (no
//! clone was ever made), that sender's messages go through a lock-free single-producer ring
//! (of `capacity + 1` slots, rounded up to a power of two) instead of tokio's multi-producer channel (a send takes and gives
//! back the ring's token, two read-modify-writes of one word, and publishes with a store
//! between them; a receive frees its slot with a store and a fence). The mailbox leaves the lane for good,
//! to the **shared lane** (tokio's bounded mpsc channel), on the first of:
//! * a clone of the sender ([`Clone::clone`] switches before it returns);
//! * a send under [`Policy::Block`] that would have to wait for a slot or for bytes (all
//!   waiting, with its fairness, is the shared lane's; [`MailboxSender::try_send`] and
//!   [`Policy::Fail`] return `Full` on the single lane without switching);
//! * two threads sending through one `&MailboxSender` at the same moment.
//!
//! A mailbox whose capacity is over 1024 starts on the shared lane. Dropping clones does not
//! bring it back. The switch loses, duplicates and reorders nothing: the messages still in
//! the ring are received before any sent on the shared lane, and each holds a slot of the
//! shared lane's capacity until received, so the capacity holds across the switch, whatever
//! the interleaving of sends, `try_send`s, clones and receives (the loom models check it).
//!
//! # Allocation
//! Zero-byte messages (such as [`SmallPayload::Empty`]) take the fast path: no lock, no
//! allocation, no counter. Other messages take no lock while no sender waits for bytes: one
//! compare-and-swap of an atomic word on admission, one atomic subtraction on release (with
//! waiters, a release takes the waiters' queue lock to serve them). A mailbox whose byte budget
//! (2^40 bytes or more) or capacity (2^23 - 1 or more) is too large for that word takes a
//! lock once on admission and once on release instead, and records each size in a slab
//! slot. Both hold the byte budget as a hard bound, and no count can wrap (a budget of
//! `usize::MAX` is a budget like any other). The channel itself allocates in blocks, as
//! tokio's does. [`SmallPayload`] keeps up to 64 bytes inline.
//!
//! # Closing
//! The mailbox closes when its [`MailboxReceiver`] is dropped or
//! [`closed`](MailboxReceiver::close): from then on sends fail with
//! [`SendError::Closed`] carrying the message, and senders waiting for a slot or for bytes
//! wake with it. After `close`, [`MailboxReceiver::recv`] still returns everything already
//! admitted, then `None`. When every sender is dropped, `recv` returns what is queued, then
//! `None`.
//!
//! **Nothing a send accepted outlives the mailbox.** However it closes (the receiver
//! dropped, `close`, the last sender dropped), on either lane, for `send` and `try_send`,
//! and for senders that waited for a slot or for bytes: once the close is observed (the
//! receiver's drop has returned, or `recv` has returned `None`) and the sends racing it have
//! returned, every message was received, or came back in its send's error, or has been
//! dropped with its bytes given back. A send that returns `Ok` hands its message to the
//! receiver or to the receiver's drop (or to the send it handed its drain to, below). The receiver's drop drops what the mailbox holds on its
//! own thread; when sends are putting messages into the shared lane at that moment, it waits
//! for them to finish their push first (a send runs the destructor of a message but its own
//! only in the case below, and its own only when it finds the mailbox closed after taking its
//! slot). A push wakes the receiver's task inside it, so a receiver's waker that blocks on a
//! lock the dropping thread holds, or that drops the receiver inline, would have the drop wait
//! for a push that waits for the drop. The drop waits a bounded time (about a second), then
//! hands the rest to the last of those sends: it drops what the channel holds, on its own
//! thread, before it returns. tokio's wakers do neither; the hand-over then needs a send held
//! inside that long for another reason (its thread preempted or stopped).
//!
//! A waker that panics during the close is tokio's to survive for senders waiting for a slot:
//! tokio's close stops waking its waiters at the panic, and those may wait on. Senders
//! waiting for bytes, the ring and the queued messages are the mailbox's own: all are woken
//! and dropped past such a panic.
//!
//! # Errors give the message back
//! Every [`SendError`] holds the message; [`SendError::into_inner`] returns it. Nothing is
//! lost on a failed send.
//!
//! # Cancel safety
//! * [`MailboxSender::send`]: if dropped before completing, the message was not sent (it is
//!   dropped with the future); any slot or bytes it held are given back.
//! * [`MailboxReceiver::recv`]: cancel safe, no message is lost.
//! * [`AgentHandle::join`]: cancel safe, the agent keeps running.
//!
//! # Agents
//! [`spawn_agent`] runs a handler per message on a tokio runtime, with a mailbox of its
//! own. It stops when every sender is gone or on [`AgentHandle::stop`], and drains what was
//! admitted first.

//!
//! # Measurement switches
//! `Mailbox::admission` (with `Admission`), `Mailbox::single_sender_lane` and
//! `MailboxSender::on_single_lane` exist for the benchmarks and tests that measure the
//! designs against each other. They are `#[doc(hidden)]`: not part of the documented API,
//! and free to change.

#![deny(clippy::undocumented_unsafe_blocks)]

mod agent;
mod door;
mod envelope;
mod error;
mod mailbox;
mod payload;
mod pool;
mod receiver;
mod ring;
mod send;
mod sync;

pub use agent::{AgentHandle, AgentReport, spawn_agent};
pub use error::SendError;
pub use mailbox::{Mailbox, MailboxSender, Policy};
pub use payload::{ByteSize, INLINE_CAPACITY, InlineBytes, SmallPayload};
#[doc(hidden)]
pub use pool::Admission;
pub use pool::PoolStats;
pub use receiver::{MailboxReceiver, TryRecvError};
#[cfg(mty_loom)]
#[doc(hidden)]
pub use sync::set_loom_patience;
