//! What the mailbox's two lanes carry: a message with the frame that holds its bytes, and
//! the ring's and the shared lane's types over it.

use crate::pool::PooledFrame;
use crate::ring::Ring;
use crate::sync::mpsc;

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
