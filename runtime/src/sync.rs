//! The synchronisation primitives the pool uses: std's, or loom's when the crate is built
//! with `RUSTFLAGS="--cfg mty_loom"` for the model in `tests/loom.rs`. (A cfg of our own, not
//! `loom`: under `--cfg loom` tokio would switch to loom as well and not build.)

#[cfg(mty_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(mty_loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};

#[cfg(not(mty_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(mty_loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};
