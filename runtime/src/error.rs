//! Send errors. Every failed send gives the message back: nothing is lost.

use std::fmt;

/// Why a message was not sent; the message is inside, take it back with
/// [`SendError::into_inner`].
#[derive(PartialEq, Eq)]
pub enum SendError<M> {
    /// The receiver is gone or closed.
    Closed(M),
    /// No slot or not enough bytes free, and the send could not wait (`try_send`, or the
    /// [`crate::Policy::Fail`] policy).
    Full(M),
    /// The message is larger than the mailbox's whole byte budget: it can never be sent,
    /// however long one waits.
    Oversize {
        /// The message.
        msg: M,
        /// Its byte size.
        size: usize,
        /// The mailbox's byte budget.
        budget: usize,
    },
}

impl<M> SendError<M> {
    /// The message that was not sent.
    pub fn into_inner(self) -> M {
        match self {
            SendError::Closed(m) | SendError::Full(m) => m,
            SendError::Oversize { msg, .. } => msg,
        }
    }

    /// Whether the receiver is gone.
    pub fn is_closed(&self) -> bool {
        matches!(self, SendError::Closed(_))
    }

    /// Whether the mailbox was full.
    pub fn is_full(&self) -> bool {
        matches!(self, SendError::Full(_))
    }
}

impl<M> fmt::Debug for SendError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Closed(_) => f.write_str("Closed(..)"),
            SendError::Full(_) => f.write_str("Full(..)"),
            SendError::Oversize { size, budget, .. } => f
                .debug_struct("Oversize")
                .field("size", size)
                .field("budget", budget)
                .finish_non_exhaustive(),
        }
    }
}

impl<M> fmt::Display for SendError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Closed(_) => f.write_str("mailbox closed: the receiver is gone"),
            SendError::Full(_) => f.write_str("mailbox full: no slot or not enough bytes free"),
            SendError::Oversize { size, budget, .. } => write!(
                f,
                "message of {size} bytes exceeds the mailbox's whole byte budget of {budget} bytes; \
                 it can never be admitted (raise the budget or split the message)"
            ),
        }
    }
}

impl<M> std::error::Error for SendError<M> {}
