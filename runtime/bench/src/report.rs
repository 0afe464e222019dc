//! What the latency workloads (`latency`, `contended`) print: one report of what ran and what
//! it measured, after a whole run or after serving the lockstep protocol.

use mty_lockstep::{Lockstep, Summary};
use serde::Serialize;

use crate::args::Args;

#[derive(Debug, Serialize)]
pub struct LatencyReport {
    pub workload: &'static str,
    pub messages: u64,
    pub warmup: u64,
    pub policy: &'static str,
    pub payload_bytes: usize,
    pub capacity: usize,
    /// The latencies' figures, CPU time and context switches (what xtask reads).
    #[serde(flatten)]
    pub summary: Summary,
    /// Every measured latency, in order (only with `--emit-values`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values_ns: Option<Vec<u64>>,
}

/// `--lockstep BATCH`, after set-up and warm-up: serves the protocol (`mty_lockstep`), each
/// batch one call of the workload's never-inlined loop, and reports over every batch.
pub fn serve_lockstep(
    args: &Args,
    batch: u64,
    run_batch: impl FnMut(u64, &mut Vec<u64>),
) -> LatencyReport {
    let served = Lockstep::new(batch)
        .inject_ns(args.inject_ns)
        .serve(run_batch);
    report(args, served.summary(), None)
}

/// The workload's report: what ran, and `summary` of what it measured.
pub fn report(args: &Args, summary: Summary, values_ns: Option<Vec<u64>>) -> LatencyReport {
    LatencyReport {
        workload: args.workload.name(),
        messages: args.messages,
        warmup: args.warmup,
        policy: args.policy.name(),
        payload_bytes: args.payload_bytes,
        capacity: args.capacity,
        summary,
        values_ns,
    }
}
