//! Property tests: whatever sequence of sends, receives and drops, the byte accounting is
//! exact at every step and back at zero at the end.

use std::collections::VecDeque;

use mty_runtime::{Admission, AdmitError, Mailbox, PooledFrame, SendError, SlabPool, SmallPayload};
use proptest::prelude::*;

const BUDGET: usize = 256;
const CAPACITY: usize = 4;

#[derive(Debug, Clone)]
enum PoolOp {
    Admit(usize),
    Release(usize),
}

fn pool_op() -> impl Strategy<Value = PoolOp> {
    prop_oneof![
        (0..=BUDGET + 20).prop_map(PoolOp::Admit),
        any::<usize>().prop_map(PoolOp::Release),
    ]
}

#[derive(Debug, Clone)]
enum MailOp {
    TrySend(usize),
    Recv,
    CloneSender,
    DropSender(usize),
    DropReceiver,
}

fn mail_op() -> impl Strategy<Value = MailOp> {
    prop_oneof![
        4 => (0..=BUDGET + 20).prop_map(MailOp::TrySend),
        3 => Just(MailOp::Recv),
        1 => Just(MailOp::CloneSender),
        1 => any::<usize>().prop_map(MailOp::DropSender),
        1 => Just(MailOp::DropReceiver),
    ]
}

proptest! {
    #[test]
    fn pool_accounting_is_exact(
        ops in prop::collection::vec(pool_op(), 0..200),
        admission in prop_oneof![Just(Admission::Locked), Just(Admission::Atomic)],
    ) {
        let pool = SlabPool::with_admission(BUDGET, admission);
        let mut held: Vec<(usize, PooledFrame)> = Vec::new();
        for op in ops {
            let in_use: usize = held.iter().map(|(n, _)| n).sum();
            match op {
                PoolOp::Admit(n) => match pool.try_admit(n) {
                    Ok(frame) => {
                        prop_assert!(in_use + n <= BUDGET);
                        prop_assert_eq!(frame.is_tombstone(), n == 0);
                        held.push((n, frame));
                    }
                    Err(AdmitError::Full) => prop_assert!(n <= BUDGET && in_use + n > BUDGET),
                    Err(AdmitError::Oversize { size, budget }) => {
                        prop_assert!(n > BUDGET);
                        prop_assert_eq!((size, budget), (n, BUDGET));
                    }
                    Err(AdmitError::Closed) => prop_assert!(false, "never closed"),
                },
                PoolOp::Release(i) if !held.is_empty() => {
                    drop(held.swap_remove(i % held.len()));
                }
                PoolOp::Release(_) => {}
            }
            let stats = pool.stats();
            prop_assert_eq!(stats.bytes_in_use, held.iter().map(|(n, _)| n).sum::<usize>());
            prop_assert_eq!(stats.slots_in_use, held.iter().filter(|(n, _)| *n > 0).count());
        }
        drop(held);
        prop_assert_eq!(pool.stats().bytes_in_use, 0);
        prop_assert_eq!(pool.stats().slots_in_use, 0);
    }

    #[test]
    fn mailbox_accounting_is_exact(
        ops in prop::collection::vec(mail_op(), 0..200),
        admission in prop_oneof![Just(Admission::Locked), Just(Admission::Atomic)],
    ) {
        let (tx, rx) = Mailbox::new(CAPACITY, BUDGET).admission(admission).open::<SmallPayload>();
        let observer = tx.clone(); // keeps the pool visible after every other handle is gone
        let mut senders = vec![tx];
        let mut rx = Some(rx);
        let mut queue: VecDeque<usize> = VecDeque::new(); // the model: queued sizes, in order
        for op in ops {
            match op {
                MailOp::TrySend(n) => {
                    let Some(tx) = senders.first() else { continue };
                    let bytes: usize = queue.iter().sum();
                    match tx.try_send(SmallPayload::copy_from(&vec![1; n])) {
                        Ok(()) => queue.push_back(n),
                        Err(SendError::Closed(m)) => {
                            prop_assert!(rx.is_none());
                            prop_assert_eq!(m.len(), n);
                        }
                        Err(SendError::Full(m)) => {
                            prop_assert!(queue.len() == CAPACITY || bytes + n > BUDGET);
                            prop_assert_eq!(m.len(), n);
                        }
                        Err(SendError::Oversize { msg, .. }) => {
                            prop_assert!(n > BUDGET);
                            prop_assert_eq!(msg.len(), n);
                        }
                    }
                }
                MailOp::Recv => if let Some(rx) = rx.as_mut() {
                    match rx.try_recv() {
                        Ok(m) => prop_assert_eq!(Some(m.len()), queue.pop_front()),
                        Err(_) => prop_assert!(queue.is_empty()),
                    }
                },
                MailOp::CloneSender => if let Some(tx) = senders.first() {
                    senders.push(tx.clone());
                },
                MailOp::DropSender(i) => if !senders.is_empty() {
                    senders.remove(i % senders.len());
                },
                MailOp::DropReceiver => if rx.take().is_some() {
                    queue.clear(); // the channel drops what it held, giving bytes back
                },
            }
            let stats = observer.pool_stats();
            prop_assert_eq!(stats.bytes_in_use, queue.iter().sum::<usize>());
            prop_assert_eq!(stats.slots_in_use, queue.iter().filter(|n| **n > 0).count());
        }
        drop(senders);
        drop(rx);
        prop_assert_eq!(observer.pool_stats().bytes_in_use, 0);
        prop_assert_eq!(observer.pool_stats().slots_in_use, 0);
    }
}
