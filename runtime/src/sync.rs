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
pub(crate) use loom::{hint::spin_loop, thread::yield_now};

#[cfg(not(mty_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(mty_loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(mty_loom))]
pub(crate) use std::{hint::spin_loop, thread::yield_now};

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
