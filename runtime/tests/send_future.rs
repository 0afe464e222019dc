//! `send`'s future holds its message in place until the mailbox takes it (`runtime/src/send.rs`):
//! whichever way the future ends (never polled, refused, waiting and dropped, sent), the
//! message is dropped exactly once, or handed back exactly once.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use mty_runtime::{ByteSize, Mailbox, SendError};

/// A message whose copies are counted by its `Arc`: a lost drop leaves the count high, a
/// second drop of one message would take it below what is alive.
struct Counted {
    _copy: Arc<()>,
}

impl ByteSize for Counted {
    fn byte_size(&self) -> usize {
        0
    }
}

fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn a_send_future_drops_or_hands_back_its_message_exactly_once() {
    let alive = Arc::new(());
    let count = || Arc::strong_count(&alive) - 1;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let (tx, mut rx) = Mailbox::new(1, 100).open::<Counted>();
        // Never polled: dropped with the future.
        drop(tx.send(Counted {
            _copy: alive.clone(),
        }));
        assert_eq!(count(), 0, "an unpolled send drops its message");
        // Sent on the single lane: alive once, in the mailbox.
        tx.send(Counted {
            _copy: alive.clone(),
        })
        .await
        .unwrap();
        assert_eq!(count(), 1);
        // The mailbox full: the send moves to the shared lane and waits, holding its message
        // in the waiting path's future; dropped there, it is dropped once.
        {
            let mut waiting = pin!(tx.send(Counted {
                _copy: alive.clone()
            }));
            assert!(poll_once(waiting.as_mut()).is_pending());
            assert_eq!(count(), 2, "the waiting send still holds its message");
        }
        assert_eq!(count(), 1, "the cancelled send dropped its message once");
        drop(rx.recv().await.unwrap());
        assert_eq!(count(), 0);
        // Refused: handed back once, in the error.
        rx.close();
        match tx
            .send(Counted {
                _copy: alive.clone(),
            })
            .await
        {
            Err(SendError::Closed(msg)) => {
                assert_eq!(count(), 1, "the refused message comes back");
                drop(msg);
            }
            other => panic!("expected Closed, got ok={}", other.is_ok()),
        }
        assert_eq!(count(), 0);
        // try_send's held path: refused and handed back, or sent and dropped with the mailbox.
        assert!(matches!(
            tx.try_send(Counted {
                _copy: alive.clone()
            }),
            Err(SendError::Closed(_))
        ));
        assert_eq!(count(), 0);
    });
}
