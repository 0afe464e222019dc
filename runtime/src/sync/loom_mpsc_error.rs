//! The stand-in channel's error types, as tokio's `mpsc::error`.

use std::error::Error;
use std::fmt;

/// Error of [`Sender::reserve`](super::Sender::reserve): the channel is closed.
#[derive(PartialEq, Eq, Clone, Copy)]
pub struct SendError<T>(pub T);

impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendError").finish_non_exhaustive()
    }
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "channel closed")
    }
}

impl<T> Error for SendError<T> {}

/// Error of [`Sender::try_reserve`](super::Sender::try_reserve) and
/// [`Sender::try_reserve_owned`](super::Sender::try_reserve_owned).
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum TrySendError<T> {
    /// No free slot now.
    Full(T),
    /// The receiver closed the channel or is gone.
    Closed(T),
}

impl<T> TrySendError<T> {
    /// The value given back.
    pub fn into_inner(self) -> T {
        match self {
            TrySendError::Full(value) | TrySendError::Closed(value) => value,
        }
    }
}

impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(..) => "Full(..)".fmt(f),
            TrySendError::Closed(..) => "Closed(..)".fmt(f),
        }
    }
}

impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(..) => write!(f, "no available capacity"),
            TrySendError::Closed(..) => write!(f, "channel closed"),
        }
    }
}

impl<T> Error for TrySendError<T> {}

impl<T> From<SendError<T>> for TrySendError<T> {
    fn from(error: SendError<T>) -> TrySendError<T> {
        TrySendError::Closed(error.0)
    }
}

/// Error of [`Receiver::try_recv`](super::Receiver::try_recv).
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
pub enum TryRecvError {
    /// Nothing queued now, but a value may still come.
    Empty,
    /// Nothing queued, and nothing will come.
    Disconnected,
}

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryRecvError::Empty => write!(f, "receiving on an empty channel"),
            TryRecvError::Disconnected => write!(f, "receiving on a closed channel"),
        }
    }
}

impl Error for TryRecvError {}
