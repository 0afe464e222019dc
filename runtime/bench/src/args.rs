//! The command-line protocol every workload shares.
//!
//! Hand-written rather than clap: clap made every fat-LTO build of this binary (the pipeline
//! makes several a run, instrumented and not) clearly slower and the binary larger, for a
//! command line that xtask writes (docs/results/2026-12-05-clap-build-cost.md). The example
//! program, whose command line people type, uses clap.

use std::fmt;

use crate::shared::{CAPACITY, PHASES, Phase, PolicyArg};

pub const USAGE: &str = "\
usage: mty-bench <workload> [--messages N] [--warmup N] [--policy block|fail] [--payload-bytes N]
                 [--untimed] [--emit-values] [--lockstep BATCH] [--inject-ns N]
                 [--senders N] [--workers N] [--budget-bytes N] [--admission locked|atomic]
                 [--single-lane on|off] [--pin-workers] [--phase NAME] [--capacity N]

workloads:
  agent_send_latency       per-message send->recv latency through a Mighty mailbox (capacity 8)
  tokio_mpsc_send_latency  the same on a bare tokio::sync::mpsc channel (capacity 8)
  agent_send_contended     --senders tasks (4) on a --workers thread runtime (2) sending
                           --payload-bytes messages (at least 8: the send instant rides in
                           them) to one receiver through a mailbox (capacity 8) whose byte
                           budget (--budget-bytes, default 4 messages' worth) binds first;
                           each message's latency from its send to its receipt
  train                    the PGO training mix: both policies, all payload kinds, several
                           senders, agents, full-mailbox back-pressure; each phase
                           --messages long

--untimed: no clock reads and no histogram, only the round trips (for counting instructions
           with callgrind: what is left repeats to the instruction); the figures are then 0.

--emit-values: also print every measured per-message latency as `values_ns`.

--lockstep BATCH: set up, warm up, print a `ready` line, then run one batch of BATCH
           messages each time a line `g` arrives on stdin, answering with one JSON line of
           that batch's median, p95, p99, p99.9 and mean; at `q` or end of input, print the usual
           report over every batch and exit. `--messages` is not used. (The protocol of
           `cargo xtask pgo`'s lockstep measurement.)

--admission locked|atomic: the mailbox's admission design for non-empty messages (the
           pool's lock and slab, or lock-free byte credits, the default; mty_runtime::Admission).

--single-lane on|off: the mailbox's single-sender lane (on, the default) or the shared lane
           from the start (mty_runtime::Mailbox::single_sender_lane): what the lane buys.

--pin-workers: agent_send_contended's runtime threads each on a CPU of its own (thread i on
           CPU i mod the CPUs), so batches do not differ by where the scheduler put them.

--capacity N: the channel's capacity in messages (8 by default): another input of the same
           code, for validation workloads that must not be the measured ones.

--phase NAME: train only: run one phase of the mix (mailbox-empty, mailbox-payloads, tokio,
           pressure, pressure-count, contended, fill-and-drain, agents), so that each can be
           a training command of its own, weighed by the pipeline; every phase when not given.

--inject-ns N: add N ns to every measured round trip: a known effect, exactly, for
           `cargo xtask calibrate` to check what the measurement detects. Lockstep
           answers then carry `inject_ns`.

defaults: --messages 200000 --warmup 10000 --policy block --payload-bytes 0
          (agent_send_contended: --payload-bytes 32 --senders 4 --workers 2)";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    AgentSendLatency,
    TokioMpscSendLatency,
    AgentSendContended,
    Train,
}

impl Workload {
    const ALL: [Workload; 4] = [
        Workload::AgentSendLatency,
        Workload::TokioMpscSendLatency,
        Workload::AgentSendContended,
        Workload::Train,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::AgentSendLatency => "agent_send_latency",
            Workload::TokioMpscSendLatency => "tokio_mpsc_send_latency",
            Workload::AgentSendContended => "agent_send_contended",
            Workload::Train => "train",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Args {
    pub workload: Workload,
    pub messages: u64,
    pub warmup: u64,
    pub policy: PolicyArg,
    pub payload_bytes: usize,
    /// No clock reads, no histogram: only the round trips, for counting instructions.
    pub untimed: bool,
    /// Also print every measured per-message latency (`values_ns`), for comparisons whose
    /// percentiles are computed elsewhere.
    pub emit_values: bool,
    /// Take turns with other processes: one batch of this many messages per `g` on stdin.
    pub lockstep: Option<u64>,
    /// Nanoseconds added to every measured round trip (calibration).
    pub inject_ns: u64,
    /// `agent_send_contended`: sender tasks, runtime worker threads, the byte budget
    /// (`None`: four messages' worth).
    pub senders: usize,
    pub workers: usize,
    pub budget_bytes: Option<usize>,
    /// The mailbox's admission design (`--admission`; `None`: the mailbox's default).
    pub admission: Option<mty_runtime::Admission>,
    /// The mailbox's single-sender lane (`--single-lane`; on unless `off`).
    pub single_lane: bool,
    /// `agent_send_contended`: each runtime thread pinned to a CPU of its own.
    pub pin_workers: bool,
    /// `train` only: the one phase to run (`--phase`; every phase when not given).
    pub phase: Option<Phase>,
    /// The channel's capacity in messages (`--capacity`).
    pub capacity: usize,
}

#[derive(Debug)]
pub struct ArgError(String);

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Args {
    /// A mailbox of `capacity` and `budget` bytes with the admission design and lane asked
    /// for (the policy is the caller's).
    pub fn mailbox(&self, capacity: usize, budget: usize) -> mty_runtime::Mailbox {
        crate::shared::mailbox(capacity, budget, self.admission, self.single_lane)
    }

    /// The arguments after the program name. A flag given again takes its later value:
    /// xtask appends `--messages N --warmup 0 --untimed` to a workload's own arguments.
    pub fn parse(mut argv: impl Iterator<Item = String>) -> Result<Args, ArgError> {
        let name = argv
            .next()
            .ok_or_else(|| ArgError("no workload given".into()))?;
        let workload = Workload::ALL
            .into_iter()
            .find(|w| w.name() == name)
            .ok_or_else(|| ArgError(format!("unknown workload `{name}`")))?;
        let mut args = Args {
            workload,
            messages: 200_000,
            warmup: 10_000,
            policy: PolicyArg::Block,
            payload_bytes: if workload == Workload::AgentSendContended {
                32
            } else {
                0
            },
            untimed: false,
            emit_values: false,
            lockstep: None,
            inject_ns: 0,
            senders: 4,
            workers: 2,
            budget_bytes: None,
            admission: None,
            single_lane: true,
            pin_workers: false,
            phase: None,
            capacity: CAPACITY,
        };
        while let Some(flag) = argv.next() {
            let mut value = || {
                argv.next()
                    .ok_or_else(|| ArgError(format!("`{flag}` needs a value")))
            };
            match flag.as_str() {
                "--messages" => args.messages = number(&flag, &value()?)?,
                "--warmup" => args.warmup = number(&flag, &value()?)?,
                "--payload-bytes" => args.payload_bytes = number(&flag, &value()?)?,
                "--untimed" => args.untimed = true,
                "--pin-workers" => args.pin_workers = true,
                "--capacity" => args.capacity = number(&flag, &value()?)?,
                "--phase" => {
                    let name = value()?;
                    args.phase = Some(Phase::parse(&name).ok_or_else(|| {
                        let names: Vec<&str> = PHASES.iter().map(|p| p.name()).collect();
                        ArgError(format!(
                            "`--phase` takes one of {}, not `{name}`",
                            names.join(", ")
                        ))
                    })?);
                }
                "--emit-values" => args.emit_values = true,
                "--lockstep" => args.lockstep = Some(number(&flag, &value()?)?),
                "--inject-ns" => args.inject_ns = number(&flag, &value()?)?,
                "--senders" => args.senders = number(&flag, &value()?)?,
                "--workers" => args.workers = number(&flag, &value()?)?,
                "--budget-bytes" => args.budget_bytes = Some(number(&flag, &value()?)?),
                "--admission" => {
                    let locked = ("locked", mty_runtime::Admission::Locked);
                    let atomic = ("atomic", mty_runtime::Admission::Atomic);
                    args.admission = Some(either(&flag, &value()?, locked, atomic)?);
                }
                "--single-lane" => {
                    args.single_lane = either(&flag, &value()?, ("on", true), ("off", false))?;
                }
                "--policy" => {
                    let (block, fail) = (("block", PolicyArg::Block), ("fail", PolicyArg::Fail));
                    args.policy = either(&flag, &value()?, block, fail)?;
                }
                other => return Err(ArgError(format!("unknown flag `{other}`"))),
            }
        }
        if args.messages == 0 {
            return Err(ArgError("`--messages` must be at least 1".into()));
        }
        if args.capacity == 0 {
            return Err(ArgError("`--capacity` must be at least 1".into()));
        }
        if args.phase.is_some() && args.workload != Workload::Train {
            return Err(ArgError("`--phase` is for the `train` workload".into()));
        }
        if args.lockstep == Some(0) {
            return Err(ArgError("`--lockstep` must be at least 1".into()));
        }
        if args.workload == Workload::AgentSendContended {
            if args.payload_bytes < 8 {
                return Err(ArgError(
                    "agent_send_contended needs `--payload-bytes` of at least 8: each message carries its send instant".into(),
                ));
            }
            if args.senders == 0 || args.workers == 0 {
                return Err(ArgError(
                    "`--senders` and `--workers` must be at least 1".into(),
                ));
            }
            if args.policy != PolicyArg::Block {
                return Err(ArgError(
                    "agent_send_contended takes `--policy block` only: its senders wait for room"
                        .into(),
                ));
            }
            if args.budget_bytes.is_some_and(|b| b < args.payload_bytes) {
                return Err(ArgError(
                    "`--budget-bytes` below `--payload-bytes`: no message could ever be admitted"
                        .into(),
                ));
            }
        }
        Ok(args)
    }
}

/// `text` as the value named `a.0` or the one named `b.0`, or why neither.
fn either<T>(flag: &str, text: &str, a: (&str, T), b: (&str, T)) -> Result<T, ArgError> {
    if text == a.0 {
        Ok(a.1)
    } else if text == b.0 {
        Ok(b.1)
    } else {
        let (a, b) = (a.0, b.0);
        Err(ArgError(format!(
            "`{flag}` takes `{a}` or `{b}`, not `{text}`"
        )))
    }
}

fn number<T: std::str::FromStr>(flag: &str, text: &str) -> Result<T, ArgError> {
    text.parse().map_err(|_| {
        ArgError(format!(
            "`{flag}` takes a non-negative integer, not `{text}`"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Args, String> {
        Args::parse(line.split_whitespace().map(String::from)).map_err(|e| e.0)
    }

    #[test]
    fn parses_the_shared_protocol() {
        let a = parse("agent_send_latency --messages 5 --warmup 1 --policy fail --payload-bytes 9")
            .unwrap();
        assert_eq!(a.workload, Workload::AgentSendLatency);
        assert_eq!((a.messages, a.warmup, a.payload_bytes), (5, 1, 9));
        assert_eq!(a.policy, PolicyArg::Fail);
        assert!(parse("agent_send_latency --untimed").unwrap().untimed);
        assert_eq!(parse("agent_send_latency").unwrap().capacity, 8);
        assert_eq!(
            parse("tokio_mpsc_send_latency --capacity 32")
                .unwrap()
                .capacity,
            32
        );
        assert_eq!(
            parse("agent_send_latency --capacity 0").unwrap_err(),
            "`--capacity` must be at least 1"
        );
        let l = parse("agent_send_latency --lockstep 5000 --inject-ns 7").unwrap();
        assert_eq!((l.lockstep, l.inject_ns), (Some(5000), 7));
        assert!(
            parse("tokio_mpsc_send_latency --emit-values")
                .unwrap()
                .emit_values
        );
        let d = parse("train").unwrap();
        assert_eq!(
            (d.messages, d.warmup, d.policy, d.phase),
            (200_000, 10_000, PolicyArg::Block, None)
        );
    }

    #[test]
    fn a_training_phase_is_named_and_only_for_train() {
        for phase in PHASES {
            let a = parse(&format!("train --phase {}", phase.name())).unwrap();
            assert_eq!(a.phase, Some(phase));
        }
        let err = parse("train --phase warp").unwrap_err();
        assert!(
            err.contains("`--phase` takes one of mailbox-empty, mailbox-payloads,")
                && err.contains("not `warp`"),
            "{err}"
        );
        assert_eq!(
            parse("agent_send_latency --phase tokio").unwrap_err(),
            "`--phase` is for the `train` workload"
        );
    }

    #[test]
    fn the_contended_workload_has_its_own_defaults_and_checks() {
        let c = parse("agent_send_contended").unwrap();
        assert_eq!(
            (c.payload_bytes, c.senders, c.workers, c.budget_bytes),
            (32, 4, 2, None)
        );
        assert_eq!(c.admission, None);
        let c = parse("agent_send_contended --senders 6 --workers 3 --budget-bytes 400 --payload-bytes 200 --admission atomic").unwrap();
        assert_eq!(
            (c.payload_bytes, c.senders, c.workers, c.budget_bytes),
            (200, 6, 3, Some(400))
        );
        assert_eq!(c.admission, Some(mty_runtime::Admission::Atomic));
        // The lane flag reaches the mailbox the workloads open.
        for (line, lane) in [
            ("agent_send_latency", true),
            ("agent_send_latency --single-lane on", true),
            ("agent_send_contended --single-lane off", false),
        ] {
            let a = parse(line).unwrap();
            assert_eq!(a.single_lane, lane, "{line}");
            let (tx, _rx) = a.mailbox(8, 64).open::<mty_runtime::SmallPayload>();
            assert_eq!(tx.on_single_lane(), lane, "{line}");
        }
        for (line, expected) in [
            (
                "agent_send_contended --payload-bytes 7",
                "at least 8: each message carries its send instant",
            ),
            (
                "agent_send_contended --senders 0",
                "`--senders` and `--workers` must be at least 1",
            ),
            (
                "agent_send_contended --policy fail",
                "takes `--policy block` only",
            ),
            (
                "agent_send_contended --budget-bytes 16",
                "`--budget-bytes` below `--payload-bytes`",
            ),
            (
                "agent_send_latency --admission some",
                "`--admission` takes `locked` or `atomic`, not `some`",
            ),
            (
                "agent_send_latency --single-lane maybe",
                "`--single-lane` takes `on` or `off`, not `maybe`",
            ),
        ] {
            let err = parse(line).unwrap_err();
            assert!(err.contains(expected), "{line}: {err}");
        }
    }

    #[test]
    fn rejects_bad_input_with_the_reason() {
        for (line, expected) in [
            ("", "no workload given"),
            ("bogus", "unknown workload `bogus`"),
            ("train --messages", "`--messages` needs a value"),
            (
                "train --messages x",
                "`--messages` takes a non-negative integer, not `x`",
            ),
            ("train --messages 0", "`--messages` must be at least 1"),
            (
                "train --policy maybe",
                "`--policy` takes `block` or `fail`, not `maybe`",
            ),
            ("train --fast", "unknown flag `--fast`"),
            (
                "agent_send_latency --lockstep 0",
                "`--lockstep` must be at least 1",
            ),
        ] {
            assert_eq!(parse(line).unwrap_err(), expected, "input: {line:?}");
        }
    }
}
