//! A receiver's waker that waits for the receiver's drop (issue 59): a send on the shared lane
//! wakes the receiver inside the lane's door, and the drop waits for the sends inside. A
//! waker that blocks on a lock the dropping thread holds, or that drops the receiver itself
//! (an executor polling the task inline), used to hang the drop for good; now the drop waits
//! a bounded time, then hands the drain to the last send out. Real threads and wakers; both
//! tests hung before (each bounds its wait, so a hang fails it).

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicIsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, mpsc as std_mpsc};
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use mty_runtime::{ByteSize, Mailbox, MailboxReceiver, MailboxSender};

/// Far beyond the door's patience (a second): a hang, not a slow wait.
const HANG: Duration = Duration::from_secs(30);

/// A message that counts itself alive.
struct Msg(Arc<AtomicIsize>);

impl Msg {
    fn new(live: &Arc<AtomicIsize>) -> Msg {
        live.fetch_add(1, SeqCst);
        Msg(live.clone())
    }
}

impl Drop for Msg {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

impl ByteSize for Msg {
    fn byte_size(&self) -> usize {
        8
    }
}

/// A mailbox on the shared lane (where the door is) whose receiver waits, empty, with `waker`.
fn waiting(waker: &Waker) -> (MailboxSender<Msg>, MailboxReceiver<Msg>) {
    let (tx, mut rx) = Mailbox::new(8, 1000)
        .single_sender_lane(false)
        .open::<Msg>();
    {
        let mut recv = pin!(rx.recv());
        assert!(
            recv.as_mut()
                .poll(&mut Context::from_waker(waker))
                .is_pending(),
            "empty: the receiver's waker is registered"
        );
    }
    (tx, rx)
}

/// Runs `f` on a thread of its own: its result, or a panic naming `what` if it hangs.
fn bounded<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (done, finished) = std_mpsc::channel();
    std::thread::spawn(move || done.send(f()).unwrap());
    finished
        .recv_timeout(HANG)
        .unwrap_or_else(|_| panic!("{what} hung"))
}

/// The waker drops the receiver: an executor that polls the woken task inline, on the thread
/// that woke it, where the task owns the receiver and ends.
struct DropsTheReceiver(Mutex<Option<MailboxReceiver<Msg>>>);

impl Wake for DropsTheReceiver {
    fn wake(self: Arc<Self>) {
        let rx = self.0.lock().unwrap().take();
        drop(rx);
    }
}

/// The send wakes the receiver inside the door, and the waker drops the receiver on that
/// same thread: the drop's wait is for the very send that runs it. It returns after the
/// door's patience, the send returns `Ok`, and its message, queued in the channel, is
/// dropped as the send leaves, with its bytes.
#[test]
fn a_waker_that_drops_the_receiver_inline_does_not_hang_the_send() {
    let live = Arc::new(AtomicIsize::new(0));
    let wake = Arc::new(DropsTheReceiver(Mutex::new(None)));
    let (tx, rx) = waiting(&Waker::from(wake.clone()));
    *wake.0.lock().unwrap() = Some(rx);
    let tx = Arc::new(tx);
    let (sender, msg) = (tx.clone(), Msg::new(&live));
    let sent = bounded("a send whose waker drops the receiver", move || {
        sender.try_send(msg).is_ok()
    });
    assert!(sent, "the message was in before the close: Ok");
    assert!(wake.0.lock().unwrap().is_none(), "the waker dropped it");
    assert_eq!(live.load(SeqCst), 0, "the queued message was dropped");
    assert_eq!(tx.pool_stats().bytes_in_use, 0, "its bytes given back");
}

/// The waker takes a lock.
struct TakesALock {
    lock: Arc<Mutex<()>>,
    entered: Mutex<Option<std_mpsc::Sender<()>>>,
}

impl Wake for TakesALock {
    fn wake(self: Arc<Self>) {
        if let Some(entered) = self.entered.lock().unwrap().take() {
            entered.send(()).unwrap();
        }
        drop(self.lock.lock().unwrap());
    }
}

/// A send is inside the door, in the receiver's waker, waiting for a lock that the main thread
/// holds while it waits for the receiver's drop (on a thread of its own). The drop returns after the door's patience; once the lock is let go
/// the send returns `Ok`, and as it leaves it drops what the channel holds (its message and
/// another's): nothing is left alive and every byte is back.
#[test]
fn a_waker_blocked_on_a_lock_the_dropping_thread_holds_does_not_hang_the_drop() {
    let live = Arc::new(AtomicIsize::new(0));
    let lock = Arc::new(Mutex::new(()));
    let (entered_tx, entered) = std_mpsc::channel();
    let (tx, rx) = waiting(&Waker::from(Arc::new(TakesALock {
        lock: lock.clone(),
        entered: Mutex::new(Some(entered_tx)),
    })));
    let tx = Arc::new(tx);
    let held = lock.lock().unwrap();
    let (sender, msg) = (tx.clone(), Msg::new(&live));
    let racing = std::thread::spawn(move || sender.try_send(msg).is_ok());
    entered.recv().unwrap();
    // The racing send is inside the door, waiting for `held`; another message queues.
    assert!(tx.try_send(Msg::new(&live)).is_ok(), "queued");
    bounded("the receiver's drop", move || drop(rx));
    drop(held);
    assert!(
        racing.join().unwrap(),
        "its message was in before the close"
    );
    assert_eq!(live.load(SeqCst), 0, "both queued messages were dropped");
    assert_eq!(tx.pool_stats().bytes_in_use, 0, "every byte back");
}
