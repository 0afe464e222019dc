//! The shared lane's door: a send on tokio's channel that returns `Ok` hands its message to
//! the receiver or to the receiver's drop, never to neither, and never drops another send's
//! message.
//!
//! tokio's receiver, when dropped, closes the channel and drops the values in it *at that
//! moment*. A sender that took its slot (a permit) before the close can still put its value
//! in afterwards: the value would stay in the channel, holding its bytes, never received and
//! never dropped until the last sender handle goes (a reply channel inside it would never
//! resolve). A check of "closed" before the push cannot close that window; the door does.
//!
//! Every push into the channel passes the door: [`Door::enter`] counts the sender in, and
//! fails once the door is shut (the sender then drops its own message: it took its slot
//! before the close, so its message is one the receiver's drop would have dropped); the push
//! happens inside; dropping the [`Inside`] guard counts it out. The receiver's drop calls
//! [`Door::shut`], which shuts the door and waits for the sends inside to leave (a push is a
//! few instructions and a wake-up of the receiver's task, whose waker must not wait for the
//! dropping thread: the crate docs, "Closing"), and then drops tokio's
//! receiver itself, on its own thread, with everything the channel holds. From the shut on
//! nobody enters, so that drop is the last word: no value is pushed after it, none is
//! half-pushed during it, and no send runs another's destructor. (Before, the last send to
//! leave a shut door dropped the receiver: the channel's messages then died inside an
//! unrelated `send`, where a destructor that panics or takes a lock the sender holds does
//! harm. tokio never drops queued values inside a send.)
//!
//! One word holds it all: `inside << 1 | SHUT`. Entering is a compare-and-swap that fails
//! once `SHUT` is set; leaving (release) and shutting are read-modify-writes of the same word,
//! so their order is total, and the shut's wait reads the count reach zero with acquire: every
//! push inside happens before the drain. The cost on the shared lane's send: one
//! compare-and-swap and one subtraction, uncontended while one thread sends.
//!
//! It lives in the lane's ring ([`crate::ring::Ring::door`]), which every sender handle and
//! the receiver already share: no allocation or handle word of its own.

use crate::sync::{AtomicUsize, Ordering, spin_loop, yield_now};

/// Set once the receiver is gone: no send enters after it.
const SHUT: usize = 1;
/// One send inside.
const ONE: usize = 2;
/// Spins on the count before each yield of the shut's wait: a push inside takes well under a
/// microsecond unless its thread was preempted, which a yield lets run again.
const SPINS: u32 = 64;

/// The door of one mailbox's shared lane.
pub(crate) struct Door {
    /// Sends inside (times [`ONE`]) | [`SHUT`].
    state: AtomicUsize,
}

/// A send inside the door; dropping it leaves.
#[must_use = "the push happens while this lives"]
pub(crate) struct Inside<'a> {
    door: &'a Door,
}

impl Door {
    pub(crate) fn new() -> Self {
        Door {
            state: AtomicUsize::new(0),
        }
    }

    /// Counts a send in, or `None` once the receiver is gone.
    #[inline]
    pub(crate) fn enter(&self) -> Option<Inside<'_>> {
        let mut seen = self.state.load(Ordering::Relaxed);
        loop {
            if seen & SHUT != 0 {
                return None;
            }
            // Relaxed: what orders the push before the drain is the leave (release) and the
            // shut's wait reading it (acquire); entering only has to be counted, and
            // read-modify-writes of one word are totally ordered.
            match self.state.compare_exchange_weak(
                seen,
                seen + ONE,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(Inside { door: self }),
                Err(now) => seen = now,
            }
        }
    }

    /// Shuts the door and returns once no send is inside: from then on none enters, and
    /// every push that entered before is complete (the caller drops tokio's receiver, draining
    /// the channel, on its own thread).
    pub(crate) fn shut(&self) {
        let before = self.state.fetch_or(SHUT, Ordering::Acquire);
        debug_assert_eq!(before & SHUT, 0, "shut twice");
        if before != 0 {
            self.wait_empty();
        }
    }

    #[cold]
    #[inline(never)]
    fn wait_empty(&self) {
        let mut spins = 0u32;
        while self.state.load(Ordering::Acquire) != SHUT {
            if spins < SPINS {
                spins += 1;
                spin_loop();
            } else {
                yield_now();
            }
        }
    }
}

impl Drop for Inside<'_> {
    #[inline]
    fn drop(&mut self) {
        self.door.state.fetch_sub(ONE, Ordering::Release);
    }
}
