//! The measured workloads: per-message send→recv latency, one message at a time.
//!
//! The timed region of one message is exactly: `Instant::now()`, the send call (`send(..).await`
//! under `--policy block`, `try_send` under `--policy fail`), the `recv().await` that returns
//! the same message (for the mailbox this includes giving its bytes back), `Instant::now()`.
//! Building the payload before, and dropping the received payload after, are outside it.
//! Sender and receiver run in one task on a current-thread tokio runtime, so the receive
//! never parks: this times the channel's own path, not the scheduler's. The reported
//! `clock_overhead_ns` (median of back-to-back `Instant::now()` pairs) is included in every
//! sample and is NOT subtracted.

use std::hint::black_box;
use std::time::Instant;

use hdrhistogram::Histogram;
use mty_runtime::{Policy, SmallPayload};
use serde::Serialize;

use crate::args::{Args, PolicyArg};

/// Slots in the measured channel, for the mailbox and the bare tokio comparator alike.
pub const CAPACITY: usize = 8;
/// The mailbox's byte budget in the measured workload: ample, so only count matters.
pub const BYTE_BUDGET: usize = 64 * 1024;

#[derive(Debug, Serialize)]
pub struct LatencyReport {
    pub workload: &'static str,
    pub messages: u64,
    pub warmup: u64,
    pub policy: &'static str,
    pub payload_bytes: usize,
    pub capacity: usize,
    pub median_ns: u64,
    pub p95_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    pub clock_overhead_ns: u64,
    /// `[quantile, ns]` pairs of the distribution, for plots.
    pub percentiles: Vec<(f64, u64)>,
    /// This process's CPU time and context switches, to tell disturbed runs.
    #[serde(flatten)]
    pub usage: crate::usage::Usage,
    /// Every measured latency, in order (only with `--emit-values`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values_ns: Option<Vec<u64>>,
}

/// The quantiles reported in `percentiles`.
const QUANTILES: [f64; 16] = [
    0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999,
];

/// `mty-bench agent_send_latency`.
pub fn mailbox(args: &Args) -> LatencyReport {
    let policy = match args.policy {
        PolicyArg::Block => Policy::Block,
        PolicyArg::Fail => Policy::Fail,
    };
    let (tx, mut rx) = args
        .mailbox(CAPACITY, BYTE_BUDGET.max(args.payload_bytes))
        .policy(policy)
        .open::<SmallPayload>();
    // Under Policy::Fail, `send` is `try_send`: the policy decides, as a user would see it.
    run(args, async |msg| {
        tx.send(msg).await.expect("the receiver is alive");
        rx.recv().await.expect("the message just sent")
    })
}

/// `mty-bench tokio_mpsc_send_latency`: the same protocol on a bare tokio channel.
pub fn tokio_mpsc(args: &Args) -> LatencyReport {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<SmallPayload>(CAPACITY);
    match args.policy {
        PolicyArg::Block => run(args, async |msg| {
            tx.send(msg).await.expect("the receiver is alive");
            rx.recv().await.expect("the message just sent")
        }),
        PolicyArg::Fail => run(args, async |msg| {
            tx.try_send(msg)
                .expect("one message at a time never fills 8 slots");
            rx.recv().await.expect("the message just sent")
        }),
    }
}

fn run(
    args: &Args,
    mut round_trip: impl AsyncFnMut(SmallPayload) -> SmallPayload,
) -> LatencyReport {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread tokio runtime");
    let bytes: Vec<u8> = (0..args.payload_bytes).map(|i| i as u8).collect();
    let inject = std::time::Duration::from_nanos(args.inject_ns);
    let mut trips = |n: u64, values: Option<&mut Vec<u64>>| {
        round_trips(&rt, &mut round_trip, &bytes, inject, n, values)
    };
    if args.untimed {
        trips(args.warmup + args.messages, None);
        // Nothing that varies from run to run: no clock, no /proc read (its parse time
        // depends on the numbers in it).
        let hist = new_histogram();
        return report(args, &hist, 0, crate::usage::Usage::default(), None);
    }
    let mut values = Vec::with_capacity(args.warmup.max(args.messages) as usize);
    trips(args.warmup, Some(&mut values));
    if let Some(batch) = args.lockstep {
        return lockstep_protocol(args, batch, |values| trips(batch, Some(values)));
    }
    values.clear();
    trips(args.messages, Some(&mut values));
    let mut hist = new_histogram();
    for &v in &values {
        hist.saturating_record(v);
    }
    report(
        args,
        &hist,
        clock_overhead_ns(),
        crate::usage::Usage::of_this_process(),
        args.emit_values.then_some(values),
    )
}

/// `n` round trips; with `values`, each one's timed region in ns (plus `inject`, when
/// calibrating) is pushed. The message is built before the clock starts, checked and dropped
/// after it stops.
///
/// One loop, never inlined, for every mode (`--untimed`, the warm-up, a whole run, each
/// lockstep batch), as `agent_send_contended` has: PGO lays code out by the counts of the
/// functions the training ran, and the training runs whole runs. When lockstep batches had
/// a loop of their own, nothing had trained it and PGO optimised it as cold: on one machine
/// here the lto+pgo build measured 9 % slower than release in lockstep while whole runs of
/// the same binaries were 25-30 % faster.
#[inline(never)]
fn round_trips(
    rt: &tokio::runtime::Runtime,
    round_trip: &mut impl AsyncFnMut(SmallPayload) -> SmallPayload,
    bytes: &[u8],
    inject: std::time::Duration,
    n: u64,
    mut values: Option<&mut Vec<u64>>,
) {
    rt.block_on(async {
        for _ in 0..n {
            let msg = SmallPayload::copy_from(bytes);
            let start = values.is_some().then(Instant::now);
            let got = round_trip(msg).await;
            if let (Some(start), Some(values)) = (start, values.as_deref_mut()) {
                values.push((start.elapsed() + inject).as_nanos() as u64);
            }
            assert_eq!(
                got.len(),
                bytes.len(),
                "the mailbox returned another message"
            );
            black_box(got);
        }
    })
}

/// One batch's summary, the answer to one `g`. The clock advances in steps here (10 ns on
/// this kind of VM; a message's time reads as 130 or 140 ns, never between), so a batch's
/// nearest-rank median jumps between two values and a ratio of two of them by 7 %. Each
/// quantile is therefore interpolated within its step ([`grouped_quantile`]): it moves
/// smoothly with the share of values on either side of a step, which is what a small change
/// in the true latency changes.
#[derive(Debug, Serialize)]
struct BatchLine {
    median_ns: f64,
    p95_ns: f64,
    p99_ns: f64,
    p999_ns: f64,
    mean_ns: f64,
    /// The batch's own wall time (what the coordinator's overhead is reckoned against).
    elapsed_ns: u64,
    /// The nanoseconds added to every value (with `--inject-ns`).
    #[serde(skip_serializing_if = "Option::is_none")]
    inject_ns: Option<f64>,
}

/// The lockstep protocol, after set-up and warm-up: the `ready` line, then per `g` one batch
/// (`run_batch` fills the per-message latencies) answered with its summary line; at `q` or
/// end of input, the report over every batch.
pub fn lockstep_protocol(
    args: &Args,
    batch: u64,
    mut run_batch: impl FnMut(&mut Vec<u64>),
) -> LatencyReport {
    use std::io::{BufRead, Write};
    let mut hist = new_histogram();
    let mut values: Vec<u64> = Vec::with_capacity(batch as usize);
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    let clock = clock_overhead_ns();
    let answer = |out: &mut std::io::StdoutLock, line: String| {
        // A closed pipe means the coordinator is gone: nothing left to do.
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            std::process::exit(0);
        }
    };
    answer(
        &mut stdout,
        format!(
            r#"{{"ready":true,"pid":{},"clock_overhead_ns":{clock}}}"#,
            std::process::id()
        ),
    );
    let mut command = String::new();
    loop {
        command.clear();
        match stdin.lock().read_line(&mut command) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        match command.trim() {
            "g" => {}
            "q" => break,
            other => {
                eprintln!("mty-bench: unknown lockstep command `{other}` (expected `g` or `q`)");
                std::process::exit(2);
            }
        }
        values.clear();
        let started = Instant::now();
        run_batch(&mut values);
        let elapsed_ns = started.elapsed().as_nanos() as u64;
        for &v in &values {
            hist.saturating_record(v);
        }
        values.sort_unstable();
        // Thousandths of a nanosecond are plenty, and keep the records short.
        let milli = |x: f64| (x * 1000.0).round() / 1000.0;
        let line = BatchLine {
            median_ns: milli(grouped_quantile(&values, 0.5)),
            p95_ns: milli(grouped_quantile(&values, 0.95)),
            p99_ns: milli(grouped_quantile(&values, 0.99)),
            p999_ns: milli(grouped_quantile(&values, 0.999)),
            mean_ns: milli(values.iter().sum::<u64>() as f64 / values.len() as f64),
            elapsed_ns,
            inject_ns: (args.inject_ns > 0).then_some(args.inject_ns as f64),
        };
        answer(
            &mut stdout,
            serde_json::to_string(&line).expect("numbers serialize"),
        );
    }
    report(
        args,
        &hist,
        clock,
        crate::usage::Usage::of_this_process(),
        None,
    )
}

/// The q-quantile of sorted, stepped values, interpolated as for grouped data. Values within
/// 2 ns of their neighbour form one step (the clock reads 130 or 131 for the same tick); each
/// step is a class from the midpoint with the step below to the midpoint with the step above
/// (half a gap beyond the ends); the quantile lies in the class holding the q·n-th value, as
/// far into it as that value's rank is into the class's count.
pub fn grouped_quantile(sorted: &[u64], q: f64) -> f64 {
    // (centre, count) of each step, in order.
    let mut steps: Vec<(f64, usize)> = Vec::new();
    let (mut sum, mut count) = (0u64, 0usize);
    for (i, &v) in sorted.iter().enumerate() {
        if i > 0 && v > sorted[i - 1] + 2 {
            steps.push((sum as f64 / count as f64, count));
            (sum, count) = (0, 0);
        }
        sum += v;
        count += 1;
    }
    if count > 0 {
        steps.push((sum as f64 / count as f64, count));
    }
    match steps.len() {
        0 => return f64::NAN,
        1 => return steps[0].0,
        _ => {}
    }
    let target = q * sorted.len() as f64;
    let mut below = 0usize;
    for (k, &(centre, n)) in steps.iter().enumerate() {
        if (below + n) as f64 >= target || k == steps.len() - 1 {
            let lower = match k {
                0 => centre - (steps[1].0 - centre) / 2.0,
                _ => (steps[k - 1].0 + centre) / 2.0,
            };
            let upper = match steps.get(k + 1) {
                Some(next) => (centre + next.0) / 2.0,
                None => centre + (centre - steps[k - 1].0) / 2.0,
            };
            let into = ((target - below as f64) / n as f64).clamp(0.0, 1.0);
            return lower + into * (upper - lower);
        }
        below += n;
    }
    unreachable!("the last step ends the loop")
}

pub fn report(
    args: &Args,
    hist: &Histogram<u64>,
    clock_overhead_ns: u64,
    usage: crate::usage::Usage,
    values_ns: Option<Vec<u64>>,
) -> LatencyReport {
    LatencyReport {
        workload: args.workload.name(),
        messages: args.messages,
        warmup: args.warmup,
        policy: args.policy.name(),
        payload_bytes: args.payload_bytes,
        capacity: CAPACITY,
        median_ns: hist.value_at_quantile(0.5),
        p95_ns: hist.value_at_quantile(0.95),
        p99_ns: hist.value_at_quantile(0.99),
        p999_ns: hist.value_at_quantile(0.999),
        max_ns: hist.max(),
        mean_ns: hist.mean(),
        clock_overhead_ns,
        percentiles: QUANTILES
            .iter()
            .map(|&q| (q, hist.value_at_quantile(q)))
            .collect(),
        usage,
        values_ns,
    }
}

/// Nanoseconds from 1 ns to 60 s at 3 significant figures: values below 2048 ns are exact.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// Median cost of one timed region that contains nothing: two back-to-back `Instant::now()`.
pub fn clock_overhead_ns() -> u64 {
    let mut hist = new_histogram();
    for _ in 0..20_000 {
        let start = Instant::now();
        let elapsed = black_box(start).elapsed();
        hist.saturating_record(elapsed.as_nanos() as u64);
    }
    hist.value_at_quantile(0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_quantiles_move_smoothly_across_clock_steps() {
        // 10 ns steps: the nearest-rank median is 130 either way; the interpolated one moves
        // with the share of values at 130.
        let v: Vec<u64> = [vec![130; 800], vec![140; 200]].concat();
        assert_eq!(grouped_quantile(&v, 0.5), 125.0 + 0.5 / 0.8 * 10.0);
        let v: Vec<u64> = [vec![130; 700], vec![140; 300]].concat();
        assert_eq!(grouped_quantile(&v, 0.5), 125.0 + 0.5 / 0.7 * 10.0);
        // 130 and 131 are one tick read two ways: one step.
        let v: Vec<u64> = [vec![130; 400], vec![131; 400], vec![140; 200]].concat();
        let m = grouped_quantile(&v, 0.5);
        assert!((m - (125.75 + 0.5 / 0.8 * 9.5)).abs() < 1e-9, "{m}");
        // The tail: p99 in the last step.
        let v: Vec<u64> = [vec![130; 980], vec![250; 20]].concat();
        assert_eq!(grouped_quantile(&v, 0.99), 190.0 + 0.5 * 120.0);
        assert_eq!(grouped_quantile(&[7, 7, 7], 0.99), 7.0);
        assert!(grouped_quantile(&[], 0.5).is_nan());
    }
}
