//! What a program prints at the end: its times over every batch, and what it cost the machine.

use std::hint::black_box;
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::usage::Usage;

/// The quantiles reported in [`Summary::percentiles`].
const QUANTILES: [f64; 16] = [
    0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999,
];

/// The closing line of a measured run, over every time recorded (all batches of a lockstep
/// session, or a whole run). `cargo xtask pgo` reads these fields from the last line of the
/// program's stdout (xtask's `WorkloadLine`): a program may print more fields around them
/// (`#[serde(flatten)]` this into its own report), not fewer.
///
/// The quantiles here are the histogram's (nearest rank, 3 significant figures); the per-batch
/// answers' are interpolated ([`grouped_quantile`](crate::grouped_quantile)).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub median_ns: u64,
    pub p95_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    /// Included in every time recorded, not subtracted ([`clock_overhead_ns`]).
    pub clock_overhead_ns: u64,
    /// `[quantile, ns]` pairs of the distribution (1 % to 99.99 %), for plots.
    pub percentiles: Vec<(f64, u64)>,
    /// This process's CPU time and context switches, to tell disturbed runs.
    #[serde(flatten)]
    pub usage: Usage,
}

impl Summary {
    /// The summary of `histogram`'s times. An empty histogram gives zeros (what a run that
    /// times nothing, such as one counting instructions, reports).
    pub fn new(histogram: &Histogram<u64>, clock_overhead_ns: u64, usage: Usage) -> Self {
        Summary {
            median_ns: histogram.value_at_quantile(0.5),
            p95_ns: histogram.value_at_quantile(0.95),
            p99_ns: histogram.value_at_quantile(0.99),
            p999_ns: histogram.value_at_quantile(0.999),
            max_ns: histogram.max(),
            mean_ns: histogram.mean(),
            clock_overhead_ns,
            percentiles: QUANTILES
                .iter()
                .map(|&q| (q, histogram.value_at_quantile(q)))
                .collect(),
            usage,
        }
    }
}

/// A histogram of nanoseconds from 1 ns to 60 s at 3 significant figures: values below
/// 2048 ns are exact. Record with `saturating_record`: a time out of range is clamped, never
/// a panic in the middle of a measurement.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// Median cost of one timed region that contains nothing: two back-to-back `Instant::now()`
/// (20 000 of them, well under a millisecond). Every time recorded includes it once.
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
    fn summary_carries_every_field_xtask_reads_at_the_top_level() {
        let mut hist = new_histogram();
        for v in 1..=1000 {
            hist.saturating_record(v);
        }
        let usage = Usage {
            user_ms: 20.0,
            sys_ms: 10.0,
            voluntary_ctx_switches: 3,
            involuntary_ctx_switches: 1,
        };
        let summary = Summary::new(&hist, 30, usage);
        assert_eq!(
            (summary.median_ns, summary.p99_ns, summary.max_ns),
            (500, 990, 1000)
        );
        assert_eq!(summary.mean_ns, 500.5);
        assert_eq!(summary.percentiles.len(), QUANTILES.len());
        assert_eq!(summary.percentiles[0], (0.01, 10));

        let line = serde_json::to_string(&summary).unwrap();
        assert!(
            line.starts_with(
                r#"{"median_ns":500,"p95_ns":950,"p99_ns":990,"p999_ns":999,"max_ns":1000,"mean_ns":500.5,"clock_overhead_ns":30,"percentiles":[[0.01,10],"#
            ),
            "{line}"
        );
        assert!(
            line.ends_with(
                r#""user_ms":20.0,"sys_ms":10.0,"voluntary_ctx_switches":3,"involuntary_ctx_switches":1}"#
            ),
            "{line}"
        );
    }

    #[test]
    fn an_empty_histogram_summarises_to_zeros() {
        let summary = Summary::new(&new_histogram(), 0, Usage::default());
        assert_eq!((summary.median_ns, summary.max_ns), (0, 0));
        assert_eq!(summary.mean_ns, 0.0);
        assert!(summary.percentiles.iter().all(|&(_, ns)| ns == 0));
    }
}
