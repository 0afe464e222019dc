//! The shared lane's door: a send on tokio's channel that returns `Ok` hands its message to
//! the receiver or to the receiver's drop, never to neither.
//!
//! tokio's receiver, when dropped, closes the channel and drops the values in it *at that
//! moment*. A sender that took its slot (a permit) before the close can still put its value
//! in afterwards: the value would stay in the channel, holding its bytes, never received and
//! never dropped until the last sender handle goes (a reply channel inside it would never
//! resolve). A check of "closed" before the push cannot close that window; the door does.
//!
//! Every push into the channel passes the door: [`Door::enter`] counts the sender in, and
//! fails once the door is shut (the sender then drops its message itself: it took its slot
//! before the close, so its message is one the receiver's drop drops); the push happens
//! inside; dropping the [`Inside`] guard counts it out. The receiver's drop hands tokio's receiver to [`Door::shut`], which parks it here
//! and then shuts the door. Whoever sees the door shut with nobody inside drops the parked
//! receiver, and with it everything the channel holds: the shut itself when no send was
//! inside, else the last send to leave. From the shut on nobody enters, so that drop is the
//! last word: no value is pushed after it, and none is half-pushed during it (every push is
//! inside the door). tokio's drain stops at a slot claimed but not yet written; at that
//! moment there is none.
//!
//! One word holds it all: `inside << 1 | SHUT`. Entering is a compare-and-swap that fails
//! once `SHUT` is set; leaving and shutting are read-modify-writes of the same word, so
//! their order is total and exactly one of them sees the count reach zero with `SHUT` set.
//! The parked receiver is stored before the `SHUT` bit (release), and the last one out reads
//! the word after it (acquire), so it finds the receiver there. The cost on the shared
//! lane's send: one compare-and-swap and one subtraction, uncontended while one thread
//! sends.
//!
//! It lives in the lane's ring ([`crate::ring::Ring::door`]), which every sender handle and
//! the receiver already share: no allocation or handle word of its own.

use crate::sync::{AtomicUsize, Mutex, Ordering, mpsc};

/// Set once the receiver is gone: no send enters after it.
const SHUT: usize = 1;
/// One send inside.
const ONE: usize = 2;

/// The door of one mailbox's shared lane; `T` is what its channel carries.
pub(crate) struct Door<T> {
    /// Sends inside (times [`ONE`]) | [`SHUT`].
    state: AtomicUsize,
    /// tokio's receiver, from the receiver's drop until the last send inside leaves.
    parked: Mutex<Option<mpsc::Receiver<T>>>,
}

/// A send inside the door; dropping it leaves.
#[must_use = "the push happens while this lives"]
pub(crate) struct Inside<'a, T> {
    door: &'a Door<T>,
}

impl<T> Door<T> {
    pub(crate) fn new() -> Self {
        Door {
            state: AtomicUsize::new(0),
            parked: Mutex::new(None),
        }
    }

    /// Counts a send in, or `None` once the receiver is gone.
    #[inline]
    pub(crate) fn enter(&self) -> Option<Inside<'_, T>> {
        let mut seen = self.state.load(Ordering::Relaxed);
        loop {
            if seen & SHUT != 0 {
                return None;
            }
            // Relaxed: what orders the push before the final drain is the leave (release)
            // and the shut or last leave reading it (acquire); entering only has to be
            // counted, and read-modify-writes of one word are totally ordered.
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

    /// Parks the receiver's tokio half and shuts the door: it is dropped (draining the
    /// channel) now if no send is inside, else by the last send to leave.
    pub(crate) fn shut(&self, receiver: mpsc::Receiver<T>) {
        *lock(&self.parked) = Some(receiver);
        let before = self.state.fetch_or(SHUT, Ordering::AcqRel);
        debug_assert_eq!(before & SHUT, 0, "shut twice");
        if before == 0 {
            self.drop_parked();
        }
    }

    #[cold]
    #[inline(never)]
    fn drop_parked(&self) {
        let receiver = lock(&self.parked).take();
        debug_assert!(
            receiver.is_some(),
            "the receiver was parked before the shut"
        );
        // Dropped outside the lock: the values' destructors may do anything.
        drop(receiver);
    }
}

impl<T> Drop for Inside<'_, T> {
    #[inline]
    fn drop(&mut self) {
        let before = self.door.state.fetch_sub(ONE, Ordering::AcqRel);
        if before == ONE | SHUT {
            // The last send out of a shut door: the drop of the receiver is ours.
            self.door.drop_parked();
        }
    }
}

/// The lock guards one `Option` moved in or out whole: a poisoned lock still holds a
/// consistent value.
fn lock<G>(mutex: &Mutex<G>) -> crate::sync::MutexGuard<'_, G> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
