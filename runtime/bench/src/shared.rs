//! What the command line and the workloads share: the channel's default capacity, the send
//! policy, the training mix's phases, and the mailbox every workload opens.
//!
//! The bottom of the crate: it imports no module of its own. `args` (the command line) sits on
//! it, the report on `args`, the workloads (`latency`, `contended`, then `train`, which runs
//! the other two) on those; `main` on top.

use mty_runtime::{Admission, Mailbox};

/// Slots in the measured channel, for the mailbox and the bare tokio comparator alike
/// (`--capacity`'s default).
pub const CAPACITY: usize = 8;

/// `--policy`: what a send does when the channel is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyArg {
    Block,
    Fail,
}

impl PolicyArg {
    pub fn name(self) -> &'static str {
        match self {
            PolicyArg::Block => "block",
            PolicyArg::Fail => "fail",
        }
    }
}

/// A part of the training mix (`train.rs`), run alone with `--phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Round trips of empty messages through the mailbox, Block and Fail: the fast path
    /// the latency workloads take.
    MailboxEmpty,
    /// Round trips of inline and heap payloads through the mailbox, Block and Fail.
    MailboxPayloads,
    /// Round trips through bare tokio mpsc (`send` and `try_send`), empty and with a payload.
    Tokio,
    /// Four Block senders against a byte budget that fills, on one thread and on two; the
    /// channel's count never binds, so they wait in the mailbox's own admission.
    Pressure,
    /// Four Block senders against a channel whose count fills (capacity 8, bytes unbounded),
    /// on one thread and on two: they wait in tokio's semaphore, a path bare tokio's round
    /// trips never take.
    PressureCount,
    /// The measured contended workload's own code (`contended.rs`) with other inputs: six
    /// senders of 24-byte messages, a budget of four of them, on two pinned workers (the
    /// measured workload has four senders of 32 bytes, its validation workload five of 48).
    /// A phase of its own code path left the harness's sender tasks, 8 % of that workload's
    /// count, untrained: PGO compiled them as cold.
    Contended,
    /// Fail policy: fill the mailbox until it refuses, then drain it.
    FillAndDrain,
    /// Agents: a handler per message, stopped explicitly and by dropping every sender.
    Agents,
}

/// Every phase, in the order `train` runs them without `--phase`.
pub const PHASES: [Phase; 8] = [
    Phase::MailboxEmpty,
    Phase::MailboxPayloads,
    Phase::Tokio,
    Phase::Pressure,
    Phase::PressureCount,
    Phase::Contended,
    Phase::FillAndDrain,
    Phase::Agents,
];

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::MailboxEmpty => "mailbox-empty",
            Phase::MailboxPayloads => "mailbox-payloads",
            Phase::Tokio => "tokio",
            Phase::Pressure => "pressure",
            Phase::PressureCount => "pressure-count",
            Phase::Contended => "contended",
            Phase::FillAndDrain => "fill-and-drain",
            Phase::Agents => "agents",
        }
    }

    pub fn parse(name: &str) -> Option<Phase> {
        PHASES.into_iter().find(|p| p.name() == name)
    }
}

/// A mailbox of `capacity` and `budget` bytes with the admission design (`--admission`;
/// `None`: the mailbox's default) and lane (`--single-lane`) asked for; the policy is the
/// caller's.
pub fn mailbox(
    capacity: usize,
    budget: usize,
    admission: Option<Admission>,
    single_lane: bool,
) -> Mailbox {
    let mailbox = Mailbox::new(capacity, budget).single_sender_lane(single_lane);
    match admission {
        Some(admission) => mailbox.admission(admission),
        None => mailbox,
    }
}
