//! A loom model of the slab admission and release: every interleaving of two or three threads
//! admitting, releasing and closing keeps the byte accounting within the budget and exact.
//! Run: `RUSTFLAGS="--cfg mty_loom" cargo test -p mty-runtime --test loom --release
//! --target-dir target/loom` (CI does). Without the cfg this file is empty.
#![cfg(mty_loom)]

use loom::thread;
use mty_runtime::{Admission, AdmitError, SlabPool};

#[test]
fn concurrent_admissions_never_exceed_the_budget_and_release_exactly() {
    concurrent_admissions(Admission::Locked);
}

/// The lock-free design: two compare-and-swaps racing for one budget.
#[test]
fn atomic_admissions_never_exceed_the_budget_and_release_exactly() {
    concurrent_admissions(Admission::Atomic);
}

fn concurrent_admissions(admission: Admission) {
    loom::model(move || {
        let pool = SlabPool::with_admission(100, admission);
        let handles: Vec<_> = [60usize, 50]
            .into_iter()
            .map(|size| {
                let pool = pool.clone();
                thread::spawn(move || match pool.try_admit(size) {
                    Ok(frame) => {
                        let stats = pool.stats();
                        assert!(
                            stats.bytes_in_use >= size && stats.bytes_in_use <= 100,
                            "{stats:?}"
                        );
                        drop(frame);
                        true
                    }
                    Err(AdmitError::Full) => false,
                    Err(other) => panic!("{other:?}"),
                })
            })
            .collect();
        let admitted: Vec<bool> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        // 60 + 50 > 100: at least one got in (whichever came first), never both at once.
        assert!(admitted.contains(&true));
        let stats = pool.stats();
        assert_eq!((stats.bytes_in_use, stats.slots_in_use), (0, 0));
    });
}

#[test]
fn frames_released_on_other_threads_give_back_every_byte() {
    frames_released_elsewhere(Admission::Locked);
}

#[test]
fn atomic_frames_released_on_other_threads_give_back_every_byte() {
    frames_released_elsewhere(Admission::Atomic);
}

fn frames_released_elsewhere(admission: Admission) {
    loom::model(move || {
        let pool = SlabPool::with_admission(30, admission);
        let a = pool.try_admit(10).unwrap();
        let b = pool.try_admit(20).unwrap();
        let t1 = thread::spawn(move || drop(a));
        let p2 = pool.clone();
        let t2 = thread::spawn(move || {
            drop(b);
            // After its own release, 20 bytes are surely free whatever the other thread did.
            let again = p2.try_admit(20).expect("20 bytes came back");
            drop(again);
        });
        t1.join().unwrap();
        t2.join().unwrap();
        assert_eq!(pool.stats().bytes_in_use, 0);
        assert_eq!(pool.stats().slots_in_use, 0);
    });
}

#[test]
fn closing_races_admission_without_leaking() {
    loom::model(|| {
        let pool = SlabPool::new(100);
        let p2 = pool.clone();
        let t = thread::spawn(move || match p2.try_admit(40) {
            Ok(frame) => drop(frame),
            Err(AdmitError::Closed) => {}
            Err(other) => panic!("{other:?}"),
        });
        pool.close();
        t.join().unwrap();
        assert!(pool.is_closed());
        assert_eq!(pool.stats().bytes_in_use, 0);
        assert_eq!(pool.try_admit(1).unwrap_err(), AdmitError::Closed);
    });
}
