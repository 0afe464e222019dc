//! The agents, the mailboxes between them, and the driver that pushes records through.
//!
//! ```text
//!            lines           raw records          records                  records         effects
//! driver ──▶ parse ────────▶ normalise ─────────▶ route ──┬──────────────▶ payments   ──┐
//!   ▲                                                     ├──────────────▶ engagement ──┤
//!   │                                                     ├──────────────▶ accounts   ──┤
//!   │                                                     └── rejections ───────────────┤
//!   └──────────────────────────────────────── sink (the driver folds each effect) ◀─────┘
//! ```
//!
//! Every stage is an agent ([`spawn_agent`]) with its own mailbox: it does its work on a
//! message, then sends the result on, waiting for room there, so a slow stage holds back the
//! ones before it. Each mailbox bounds the *bytes* of text queued in it
//! ([`Config::budget_bytes`]) as well as the messages: with lines of 100-300 bytes, bytes bind
//! first. A record turned down at any stage reaches the sink as a rejection, so every record
//! the driver sends comes back as exactly one effect.
//!
//! Everything runs on one current-thread tokio runtime: the stages take turns whenever the
//! driver waits, which is what a per-record time (one record alone in the pipeline) needs to
//! be the pipeline's own work, not thread wake-ups.

use std::io::{self, BufRead};
use std::sync::Arc;
use std::time::Instant;

use mty_runtime::{
    AgentHandle, ByteSize, Mailbox, MailboxReceiver, MailboxSender, SendError, spawn_agent,
};
use tokio::runtime::{Handle, Runtime};

use crate::aggregate::{Aggregator, Effect, Outcome, Sink};
use crate::record::{self, Family, Record};

/// How big the mailboxes are, and how many records a whole run keeps in flight.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Messages each stage's mailbox holds.
    pub capacity: usize,
    /// Bytes of text each stage's mailbox holds (the lines at the parse stage, the records'
    /// strings after it). A line longer than this can never enter: it is rejected.
    pub budget_bytes: usize,
    /// Records a whole run keeps in the pipeline at once; the sink's mailbox holds as many
    /// effects, so the stages never wait on the driver while it waits on them.
    pub window: usize,
}

impl Default for Config {
    /// 4 KiB per stage: the parse stage's mailbox holds 25-40 lines of the committed inputs,
    /// well under its 64 slots.
    fn default() -> Self {
        Config {
            capacity: 64,
            budget_bytes: 4096,
            window: 64,
        }
    }
}

/// An input line's text, shared between the feed and the message (sending it again, as
/// `--repeat` and lockstep do, copies no bytes).
#[derive(Debug, Clone)]
pub struct Text(Arc<str>);

impl ByteSize for Text {
    fn byte_size(&self) -> usize {
        self.0.len()
    }
}

/// What passes between the stages up to the router.
#[derive(Debug)]
enum Msg<T> {
    /// A record, at its stage's step, with its line number.
    Item {
        line: u64,
        item: T,
    },
    Rejected {
        line: u64,
        reason: String,
    },
    /// The driver's request for the aggregators' totals; it follows every record sent
    /// before it.
    Flush,
}

impl<T> Msg<T> {
    /// This stage's step: `step` turns the item into the next stage's, or rejects it.
    fn and_then<U>(self, step: impl FnOnce(T) -> Result<U, String>) -> Msg<U> {
        match self {
            Msg::Item { line, item } => match step(item) {
                Ok(item) => Msg::Item { line, item },
                Err(reason) => Msg::Rejected { line, reason },
            },
            Msg::Rejected { line, reason } => Msg::Rejected { line, reason },
            Msg::Flush => Msg::Flush,
        }
    }
}

impl<T: ByteSize> ByteSize for Msg<T> {
    /// A record's text; a rejection's reason and a flush take the zero-byte fast path.
    fn byte_size(&self) -> usize {
        match self {
            Msg::Item { item, .. } => item.byte_size(),
            Msg::Rejected { .. } | Msg::Flush => 0,
        }
    }
}

/// What the router sends an aggregator.
#[derive(Debug)]
enum ToAggregator {
    Record(Record),
    Flush,
}

impl ByteSize for ToAggregator {
    fn byte_size(&self) -> usize {
        match self {
            ToAggregator::Record(record) => record.byte_size(),
            ToAggregator::Flush => 0,
        }
    }
}

/// The input's non-blank lines, handed out in order and round again: what whole runs
/// (`--repeat`) and lockstep batches push through.
#[derive(Debug)]
pub struct Feed {
    /// (line number in the input, from 1; its text).
    lines: Vec<(u64, Text)>,
    next: usize,
}

impl Feed {
    /// Reads every line of `input`; blank lines are skipped but counted in line numbers.
    pub fn read(input: impl BufRead) -> io::Result<Feed> {
        let mut lines = Vec::new();
        for (i, line) in input.lines().enumerate() {
            let number = i as u64 + 1;
            let line =
                line.map_err(|err| io::Error::new(err.kind(), format!("line {number}: {err}")))?;
            if !line.trim().is_empty() {
                lines.push((number, Text(line.into())));
            }
        }
        Ok(Feed { lines, next: 0 })
    }

    /// Records in one pass over the input.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// The next record (the first again after the last) and its line number.
    ///
    /// # Panics
    /// If the input has no records.
    fn next(&mut self) -> (u64, Msg<Text>) {
        let (line, text) = &self.lines[self.next];
        self.next = (self.next + 1) % self.lines.len();
        let msg = Msg::Item {
            line: *line,
            item: text.clone(),
        };
        (*line, msg)
    }
}

/// The running pipeline: its agents, the mailbox into the first, the sink.
pub struct Pipeline {
    input: MailboxSender<Msg<Text>>,
    effects: MailboxReceiver<Effect>,
    sink: Sink,
    agents: Vec<AgentHandle>,
    window: usize,
    /// Runs the agents, and the driver whenever it waits.
    rt: Runtime,
}

impl Pipeline {
    /// Spawns the agents, from the sink back to the parse stage (each needs the next one's
    /// sender).
    ///
    /// # Panics
    /// If a capacity, the window or the budget is 0.
    pub fn start(config: Config) -> Pipeline {
        assert!(
            config.capacity > 0 && config.window > 0 && config.budget_bytes > 0,
            "a pipeline needs room: {config:?}"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread tokio runtime");
        let handle = rt.handle();
        let stage = || Mailbox::new(config.capacity, config.budget_bytes);
        // The effects hold no text but a family's totals (a few hundred bytes).
        let (effects_tx, effects) = Mailbox::new(config.window, 64 * 1024).open::<Effect>();
        let mut agents = Vec::with_capacity(6);

        let aggregators = Family::ALL.map(|family| {
            let mut state = Aggregator::new(family);
            let (tx, agent) =
                spawn_stage(handle, stage(), effects_tx.clone(), move |msg| match msg {
                    ToAggregator::Record(record) => Effect::Applied(state.apply(&record)),
                    ToAggregator::Flush => Effect::Totals(state.totals()),
                });
            agents.push(agent);
            tx
        });
        let router = Arc::new(Router {
            aggregators,
            effects: effects_tx,
        });
        let (router_tx, agent) = spawn_agent(handle, stage(), move |msg| {
            let router = Arc::clone(&router);
            async move { router.route(msg).await }
        });
        agents.push(agent);
        let (normalise_tx, agent) = spawn_stage(handle, stage(), router_tx, |msg: Msg<_>| {
            msg.and_then(record::normalise)
        });
        agents.push(agent);
        let (input, agent) = spawn_stage(handle, stage(), normalise_tx, |msg: Msg<Text>| {
            msg.and_then(|text| record::parse(&text.0))
        });
        agents.push(agent);

        Pipeline {
            input,
            effects,
            sink: Sink::default(),
            agents,
            window: config.window,
            rt,
        }
    }

    /// A whole run's worth: `count` records from `feed`, up to [`Config::window`] in the
    /// pipeline at once.
    pub fn stream(&mut self, feed: &mut Feed, count: u64) {
        let window = self.window;
        self.pump(feed, count, window, None);
    }

    /// `count` records from `feed`, each alone in the pipeline: sent, and its effect folded
    /// into the sink, before the next is sent. Each one's time from send to sink, in ns, is
    /// pushed onto `times`.
    pub fn one_by_one(&mut self, feed: &mut Feed, count: u64, times: &mut Vec<u64>) {
        self.pump(feed, count, 1, Some(times));
    }

    /// The driver: sends records while fewer than `window` are in the pipeline, otherwise
    /// folds the next effect into the sink, until `count` records are done.
    ///
    /// One function, never inlined, for whole runs, warm-up and lockstep batches alike: PGO
    /// lays code out by what its training ran (whole runs), and a loop of lockstep's own
    /// would be cold to it. The stages' code is the same agents' in every mode.
    #[inline(never)]
    fn pump(
        &mut self,
        feed: &mut Feed,
        count: u64,
        window: usize,
        mut times: Option<&mut Vec<u64>>,
    ) {
        assert!(
            times.is_none() || window == 1,
            "only a record alone in the pipeline is timed"
        );
        let Pipeline {
            input,
            effects,
            sink,
            rt,
            ..
        } = self;
        rt.block_on(async {
            let (mut sent, mut in_flight, mut done) = (0u64, 0usize, 0u64);
            let mut started = None;
            while done < count {
                if sent < count && in_flight < window {
                    let (line, msg) = feed.next();
                    sent += 1;
                    started = times.is_some().then(Instant::now);
                    match input.send(msg).await {
                        Ok(()) => {
                            in_flight += 1;
                            continue;
                        }
                        // Done at once: it can never enter.
                        Err(SendError::Oversize { size, budget, .. }) => sink.reject(
                            line,
                            format!("{size} bytes, more than a stage's byte budget of {budget}"),
                        ),
                        Err(err) => panic!("the parse stage is gone: {err}"),
                    }
                } else {
                    let effect = effects
                        .recv()
                        .await
                        .expect("the stages run while records are in flight");
                    sink.fold(effect);
                    in_flight -= 1;
                }
                done += 1;
                if let (Some(start), Some(times)) = (started.take(), times.as_deref_mut()) {
                    times.push(start.elapsed().as_nanos() as u64);
                }
            }
        });
    }

    /// Asks the aggregators for their totals, lets the agents end (each once the stage
    /// before it has), and returns the outcome of every record pushed through.
    pub fn finish(self) -> Outcome {
        let Pipeline {
            input,
            mut effects,
            mut sink,
            agents,
            rt,
            ..
        } = self;
        rt.block_on(async move {
            input
                .send(Msg::Flush)
                .await
                .expect("the parse stage is alive");
            drop(input);
            // `None` once the router and the aggregators, the effects' senders, have ended.
            while let Some(effect) = effects.recv().await {
                sink.fold(effect);
            }
            for agent in agents {
                agent.join().await;
            }
            sink.outcome()
        })
    }
}

/// Spawns a stage: an agent that does `work` on each message and sends the result on to
/// `next`, waiting for room there (back-pressure travels upstream).
fn spawn_stage<I, O>(
    handle: &Handle,
    mailbox: Mailbox,
    next: MailboxSender<O>,
    mut work: impl FnMut(I) -> O + Send + 'static,
) -> (MailboxSender<I>, AgentHandle)
where
    I: ByteSize + Send + 'static,
    O: ByteSize + Send + 'static,
{
    // The handler's future owns what it sends through: a share of the sender, not a clone
    // (a clone would take the mailbox off its single-sender lane for good).
    let next = Arc::new(next);
    spawn_agent(handle, mailbox, move |msg| {
        let out = work(msg);
        let next = Arc::clone(&next);
        async move { send_on(&next, out).await }
    })
}

/// The router's outlets: an aggregator per family, and the sink for rejections.
struct Router {
    aggregators: [MailboxSender<ToAggregator>; Family::ALL.len()],
    effects: MailboxSender<Effect>,
}

impl Router {
    async fn route(&self, msg: Msg<Record>) {
        match msg {
            Msg::Item { item, .. } => {
                let aggregator = &self.aggregators[item.kind.family().index()];
                send_on(aggregator, ToAggregator::Record(item)).await;
            }
            Msg::Rejected { line, reason } => {
                send_on(&self.effects, Effect::Rejected { line, reason }).await;
            }
            Msg::Flush => {
                for aggregator in &self.aggregators {
                    send_on(aggregator, ToAggregator::Flush).await;
                }
            }
        }
    }
}

/// Sends `msg` to the next stage, waiting for room. A failure is a bug (a stage that
/// panicked closed its mailbox, or a message outgrew a budget its line fitted): it panics,
/// and the panic shows where the agents are joined.
async fn send_on<M: ByteSize>(next: &MailboxSender<M>, msg: M) {
    if let Err(err) = next.send(msg).await {
        panic!("sending to the next stage: {err}");
    }
}

#[cfg(test)]
#[path = "pipeline_tests.rs"]
mod tests;
