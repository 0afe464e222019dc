//! The agents behind the handlers. Each owns its state and is fed through a Mighty mailbox
//! bounded in count and in bytes, so a burst of large requests waits at the door instead of
//! growing a queue: sessions sharded by key, one rate limiter, one aggregator.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use mty_runtime::{AgentHandle, ByteSize, Mailbox, MailboxSender, spawn_agent};
use serde::Serialize;
use tokio::sync::oneshot;

/// Messages a mailbox holds at most, and the bytes they may carry together.
const CAPACITY: usize = 256;
const BYTE_BUDGET: usize = 64 * 1024;
/// Notes a session keeps, newest last.
const NOTES_KEPT: usize = 8;
/// The rate limiter's bucket per client: this many events at once, refilled at this rate.
const BURST: f64 = 40.0;
const PER_SEC: f64 = 20.0;

/// A visit to a session, with a note to keep.
pub struct Visit {
    key: String,
    note: Option<String>,
    reply: oneshot::Sender<SessionView>,
}

impl ByteSize for Visit {
    fn byte_size(&self) -> usize {
        self.key.len() + self.note.as_ref().map_or(0, String::len)
    }
}

/// What a visit answers.
#[derive(Debug, Serialize)]
pub struct SessionView {
    pub key: String,
    pub visits: u64,
    pub notes: usize,
    pub last_note: Option<String>,
}

#[derive(Default)]
struct Session {
    visits: u64,
    notes: Vec<String>,
}

/// May this client send an event now?
pub struct Ask {
    client: String,
    reply: oneshot::Sender<bool>,
}

impl ByteSize for Ask {
    fn byte_size(&self) -> usize {
        self.client.len()
    }
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// What the aggregator is told.
pub enum Tally {
    Event { kind: String, value: f64 },
    Snapshot(oneshot::Sender<Stats>),
}

impl ByteSize for Tally {
    fn byte_size(&self) -> usize {
        match self {
            Tally::Event { kind, .. } => kind.len() + 8,
            Tally::Snapshot(_) => 0,
        }
    }
}

/// The aggregator's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub events: u64,
    pub kinds: BTreeMap<String, KindStats>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct KindStats {
    pub count: u64,
    pub sum: f64,
    pub max: f64,
}

/// The running agents and the senders to them.
pub struct Agents {
    sessions: Vec<MailboxSender<Visit>>,
    limiter: MailboxSender<Ask>,
    aggregator: MailboxSender<Tally>,
    handles: Vec<AgentHandle>,
}

fn mailbox() -> Mailbox {
    Mailbox::new(CAPACITY, BYTE_BUDGET)
}

impl Agents {
    /// Starts `shards` session agents, the rate limiter and the aggregator on `runtime`.
    pub fn spawn(runtime: &tokio::runtime::Handle, shards: usize) -> Agents {
        let mut handles = Vec::new();
        let sessions = (0..shards.max(1))
            .map(|_| {
                let mut table: HashMap<String, Session> = HashMap::new();
                let (tx, handle) = spawn_agent(runtime, mailbox(), move |v: Visit| {
                    let s = table.entry(v.key.clone()).or_default();
                    s.visits += 1;
                    if let Some(note) = v.note {
                        if s.notes.len() == NOTES_KEPT {
                            s.notes.remove(0);
                        }
                        s.notes.push(note);
                    }
                    let _ = v.reply.send(SessionView {
                        key: v.key,
                        visits: s.visits,
                        notes: s.notes.len(),
                        last_note: s.notes.last().cloned(),
                    });
                    std::future::ready(())
                });
                handles.push(handle);
                tx
            })
            .collect();
        let mut buckets: HashMap<String, Bucket> = HashMap::new();
        let (limiter, handle) = spawn_agent(runtime, mailbox(), move |a: Ask| {
            let now = Instant::now();
            let b = buckets.entry(a.client).or_insert(Bucket {
                tokens: BURST,
                at: now,
            });
            b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * PER_SEC).min(BURST);
            b.at = now;
            let allowed = b.tokens >= 1.0;
            if allowed {
                b.tokens -= 1.0;
            }
            let _ = a.reply.send(allowed);
            std::future::ready(())
        });
        handles.push(handle);
        let mut stats = Stats::default();
        let (aggregator, handle) = spawn_agent(runtime, mailbox(), move |t: Tally| {
            match t {
                Tally::Event { kind, value } => {
                    stats.events += 1;
                    let k = stats.kinds.entry(kind).or_default();
                    k.count += 1;
                    k.sum += value;
                    k.max = k.max.max(value);
                }
                Tally::Snapshot(reply) => {
                    let _ = reply.send(stats.clone());
                }
            }
            std::future::ready(())
        });
        handles.push(handle);
        Agents {
            sessions,
            limiter,
            aggregator,
            handles,
        }
    }

    /// Visits session `key` (on the shard its hash picks), keeping `note`; `None` when the
    /// agent is gone (shutting down).
    pub async fn visit(&self, key: String, note: Option<String>) -> Option<SessionView> {
        let shard = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
        }) as usize
            % self.sessions.len();
        let (reply, answer) = oneshot::channel();
        self.sessions[shard]
            .send(Visit { key, note, reply })
            .await
            .ok()?;
        answer.await.ok()
    }

    /// Whether `client` may send an event now (a token bucket per client).
    pub async fn allow(&self, client: String) -> bool {
        let (reply, answer) = oneshot::channel();
        if self.limiter.send(Ask { client, reply }).await.is_err() {
            return false;
        }
        answer.await.unwrap_or(false)
    }

    /// Counts an event; waits while the aggregator's mailbox is full (in count or bytes).
    pub async fn record(&self, kind: String, value: f64) -> bool {
        self.aggregator
            .send(Tally::Event { kind, value })
            .await
            .is_ok()
    }

    pub async fn stats(&self) -> Option<Stats> {
        let (reply, answer) = oneshot::channel();
        self.aggregator.send(Tally::Snapshot(reply)).await.ok()?;
        answer.await.ok()
    }

    /// Stops every agent after it has drained what its mailbox admitted.
    pub fn stop(&mut self) {
        for h in &mut self.handles {
            h.stop();
        }
    }
}
