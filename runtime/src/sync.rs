//! The synchronisation primitives the pool and the ring use: std's, or loom's when the crate is
//! built with `RUSTFLAGS="--cfg mty_loom"` for the models in `tests/loom.rs` and `ring.rs`. (A
//! cfg of our own, not `loom`: under `--cfg loom` tokio would switch to loom as well and not
//! build.)

#[cfg(mty_loom)]
pub(crate) use loom::cell::UnsafeCell;
#[cfg(mty_loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(mty_loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(not(mty_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(mty_loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

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
