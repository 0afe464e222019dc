//! The synchronisation primitives the mailbox, the ring and the pool use: std's and tokio's,
//! or loom's when the crate is built with `RUSTFLAGS="--cfg mty_loom"` for the loom models
//! (`tests/loom/`, `pool_tests.rs`). The same code runs either way; only these swap. (A cfg
//! of our own, not `loom`: under `--cfg loom` tokio would switch to loom as well and not
//! build.)
//!
//! The shared lane is tokio's bounded mpsc channel, which loom cannot see into: under the cfg
//! it is `loom_mpsc`, a loom-aware channel with the same interface and semantics, so the
//! ring, the switch, the stash and the admission run as shipped around it.

#[cfg(mty_loom)]
#[path = "sync/loom_mpsc.rs"]
pub(crate) mod mpsc;
#[cfg(not(mty_loom))]
pub(crate) use tokio::sync::mpsc;

#[cfg(mty_loom)]
pub(crate) use loom::cell::UnsafeCell;
#[cfg(mty_loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(mty_loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
/// A wait on another thread's progress: loom's yield to the other threads, under the cfg.
#[cfg(mty_loom)]
pub(crate) use loom::thread::yield_now;

#[cfg(not(mty_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(mty_loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(mty_loom))]
pub(crate) use std::{hint::spin_loop, thread::yield_now};

/// A bounded wait on another thread's progress, one step per [`Patience::wait`]: spins, then
/// yields, then short sleeps, until [`PATIENCE`] has passed; under loom, which has no clock,
/// yields, as many as the model sets ([`set_loom_patience`]).
pub(crate) struct Patience {
    tries: u32,
    #[cfg(not(mty_loom))]
    deadline: Option<std::time::Instant>,
}

/// How long [`Patience`] waits in all: far beyond a preempted thread's push, short enough
/// that a wait that can never end (the door's: `crate::door`) is given up soon.
#[cfg(not(mty_loom))]
pub(crate) const PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

#[cfg(not(mty_loom))]
impl Patience {
    /// Spins before the first yield: a push takes well under a microsecond unless its thread
    /// was preempted, which a yield lets run again.
    const SPINS: u32 = 64;
    /// Yields before the sleeps.
    const YIELDS: u32 = 1_000;
}

impl Patience {
    pub(crate) fn new() -> Self {
        Patience {
            tries: 0,
            #[cfg(not(mty_loom))]
            deadline: None,
        }
    }

    /// Waits a little: `false` once patience has run out.
    #[cfg(not(mty_loom))]
    pub(crate) fn wait(&mut self) -> bool {
        let now = std::time::Instant::now();
        let deadline = *self.deadline.get_or_insert(now + PATIENCE);
        self.tries = self.tries.saturating_add(1);
        if now >= deadline {
            return false;
        }
        if self.tries <= Self::SPINS {
            spin_loop();
        } else if self.tries <= Self::SPINS + Self::YIELDS {
            yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        true
    }

    /// Waits a little: `false` once patience has run out.
    #[cfg(mty_loom)]
    pub(crate) fn wait(&mut self) -> bool {
        if self.tries >= LOOM_PATIENCE.with(std::cell::Cell::get) {
            return false;
        }
        self.tries += 1;
        yield_now();
        true
    }
}

#[cfg(mty_loom)]
std::thread_local! {
    /// A bounded wait's yields under loom (unbounded unless a model sets it): loom runs a
    /// model's threads on one of the process's, so this holds for the whole model.
    static LOOM_PATIENCE: std::cell::Cell<u32> = const { std::cell::Cell::new(u32::MAX) };
}

/// Loom models only: the yields after which a bounded wait gives up (loom has no clock), for
/// the models run on this thread. Unbounded unless set, so a model sees the wait end unless
/// it asks for the other end.
#[cfg(mty_loom)]
#[doc(hidden)]
pub fn set_loom_patience(yields: u32) {
    LOOM_PATIENCE.with(|p| p.set(yields));
}

/// std's `UnsafeCell` behind loom's closure interface, so the ring reads the same either way.
#[cfg(not(mty_loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(mty_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
