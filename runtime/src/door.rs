//! The shared lane's door: a send on tokio's channel that returns `Ok` hands its message to
//! the receiver or to the receiver's drop, never to neither, and drops another send's message
//! only when the drop has handed it the drain (below).
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
//! [`Door::shut`] with tokio's receiver: it shuts the door, waits for the sends inside to
//! leave (a push is a few instructions and a wake-up of the receiver's task), and then drops
//! tokio's receiver itself, on its own thread, with everything the channel holds. From the
//! shut on nobody enters, so that drop is the last word: no value is pushed after it, none is
//! half-pushed during it, and no send runs another's destructor. (Before, the last send to
//! leave a shut door always dropped the receiver: the channel's messages then died inside an
//! unrelated `send`, where a destructor that panics or takes a lock the sender holds does
//! harm. tokio never drops queued values inside a send.)
//!
//! The wait is bounded ([`Patience`]: about a second). A send inside runs the receiver's
//! waker, which is user code: one that blocks on a lock the dropping thread holds, or that
//! drops the receiver itself (an executor polling the task inline, on the sending thread),
//! would wait for the drop while the drop waits for it. When patience runs out, the shut
//! parks the receiver here and marks it handed ([`HANDED`]); the last send to leave then drops
//! it, on its own thread, after its push: the one case where a send runs the other messages'
//! destructors. It is a deadlock's way out, but it is timed: a send held inside for as long
//! for another reason (a slow waker, its thread preempted or stopped that long) takes it too.
//! A waker that drops the receiver inline waits out the whole second, for itself. If a waker
//! panics inside the push of the last send out of a handed door, the drain runs during that
//! unwinding, and a destructor that panics there aborts the process.
//!
//! One word holds it all: `inside << 2 | HANDED | SHUT`. Entering is a compare-and-swap that
//! fails once `SHUT` is set; leaving (release), shutting and handing over are
//! read-modify-writes of the same word, so their order is total: the shut's wait reads the
//! count reach zero with acquire (every push inside happens before the drain), and of the
//! hand-over and the last leave, whichever comes second drops the receiver. The cost on the
//! shared lane's send: one compare-and-swap and one subtraction, uncontended while one thread
//! sends.
//!
//! It lives in the lane's ring ([`crate::ring::Ring::door`]), which every sender handle and
//! the receiver already share: no allocation or handle word of its own.

use crate::sync::{AtomicUsize, Mutex, Ordering, Patience, fence, mpsc};

/// Set once the receiver is gone: no send enters after it.
const SHUT: usize = 1;
/// Set when the shut ran out of patience: the receiver is parked, and the last send to leave
/// drops it.
const HANDED: usize = 2;
/// One send inside.
const ONE: usize = 4;

/// The door of one mailbox's shared lane; `T` is what its channel carries.
pub(crate) struct Door<T> {
    /// Sends inside (times [`ONE`]) | [`HANDED`] | [`SHUT`].
    state: AtomicUsize,
    /// tokio's receiver, handed to the last send to leave ([`HANDED`]).
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

    /// Shuts the door and drops `receiver` (draining the channel) once no send is inside:
    /// here, on this thread, unless the sends inside outlast its patience; then the last of
    /// them to leave drops it. From the shut on none enters.
    pub(crate) fn shut(&self, receiver: mpsc::Receiver<T>) {
        let before = self.state.fetch_or(SHUT, Ordering::Acquire);
        debug_assert_eq!(before & SHUT, 0, "shut twice");
        if before != 0 && !self.wait_empty() {
            self.hand_over(receiver);
        }
        // Else every send inside has left: `receiver` drops here.
    }

    /// Waits, for a while, for the sends inside to leave: whether they all did.
    #[cold]
    #[inline(never)]
    fn wait_empty(&self) -> bool {
        let mut patience = Patience::new();
        loop {
            if self.state.load(Ordering::Acquire) == SHUT {
                return true;
            }
            if !patience.wait() {
                return false;
            }
        }
    }

    /// Parks `receiver` for the last send to leave; drops it here if they all left meanwhile.
    #[cold]
    #[inline(never)]
    fn hand_over(&self, receiver: mpsc::Receiver<T>) {
        *lock(&self.parked) = Some(receiver);
        let mut seen = self.state.load(Ordering::Relaxed);
        loop {
            if seen == SHUT {
                // Every send left before the hand-over: the drop is still ours. (Acquire:
                // their pushes happen before it.)
                fence(Ordering::Acquire);
                let receiver = lock(&self.parked).take();
                // Dropped outside the lock.
                drop(receiver);
                return;
            }
            // Release: the parked receiver is there for whoever reads `HANDED`.
            match self.state.compare_exchange_weak(
                seen,
                seen | HANDED,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => seen = now,
            }
        }
    }

    /// The last send out of a handed door: drops the parked receiver, outside the lock (the
    /// values' destructors may do anything).
    #[cold]
    #[inline(never)]
    fn drop_parked(&self) {
        // Acquire: the hand-over (and every push, released by its leave) happens before.
        fence(Ordering::Acquire);
        let receiver = lock(&self.parked).take();
        debug_assert!(receiver.is_some(), "parked before it was handed");
        drop(receiver);
    }
}

impl<T> Drop for Inside<'_, T> {
    #[inline]
    fn drop(&mut self) {
        let before = self.door.state.fetch_sub(ONE, Ordering::Release);
        if before == ONE | HANDED | SHUT {
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
