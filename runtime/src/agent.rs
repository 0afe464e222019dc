//! A minimal agent: a task that owns a mailbox's receiver and runs a handler per message.

use std::future::Future;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::mailbox::{Mailbox, MailboxSender};
use crate::payload::ByteSize;

/// What an agent did before it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentReport {
    /// Messages handed to the handler.
    pub processed: u64,
    /// Whether it stopped on [`AgentHandle::stop`] rather than because every sender was gone.
    pub stopped_explicitly: bool,
}

/// Controls a spawned agent. Dropping the handle detaches the agent; it then runs until
/// every sender is gone.
pub struct AgentHandle {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<AgentReport>,
}

/// Spawns an agent on `runtime` with its own mailbox and returns a sender to it.
///
/// The agent calls `handler` for each message in order, one at a time. It stops when every
/// sender is gone or on [`AgentHandle::stop`]; either way it first drains every message
/// already admitted to its mailbox.
pub fn spawn_agent<M, F, Fut>(
    runtime: &tokio::runtime::Handle,
    mailbox: Mailbox,
    mut handler: F,
) -> (MailboxSender<M>, AgentHandle)
where
    M: ByteSize + Send + 'static,
    F: FnMut(M) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let (tx, mut rx) = mailbox.open::<M>();
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let task = runtime.spawn(async move {
        let mut report = AgentReport {
            processed: 0,
            stopped_explicitly: false,
        };
        let mut stop_armed = true;
        loop {
            tokio::select! {
                biased;
                stop = &mut stop_rx, if stop_armed => {
                    stop_armed = false;
                    if stop.is_ok() {
                        // Close, then keep receiving: recv drains what was admitted and
                        // returns None after it.
                        rx.close();
                        report.stopped_explicitly = true;
                    }
                }
                msg = rx.recv() => match msg {
                    Some(msg) => {
                        handler(msg).await;
                        report.processed += 1;
                    }
                    None => break,
                },
            }
        }
        report
    });
    (
        tx,
        AgentHandle {
            stop: Some(stop_tx),
            task,
        },
    )
}

impl AgentHandle {
    /// Asks the agent to stop: its mailbox closes to new messages, and it handles every
    /// message already admitted before it ends.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The agent may have ended already; then there is nothing to stop.
            let _ = stop.send(());
        }
    }

    /// Waits for the agent to end and returns its report.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves the agent running (detached).
    ///
    /// # Panics
    /// Re-raises a panic of the handler.
    pub async fn join(self) -> AgentReport {
        match self.task.await {
            Ok(report) => report,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            Err(err) => panic!("agent task was cancelled: {err}"),
        }
    }
}
