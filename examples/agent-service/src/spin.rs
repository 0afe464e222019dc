//! `--spin-ns`: a fixed amount of extra CPU work on every request, calibrated at start-up to
//! take about a given time. A benchmark tool's measure of CPU per request can then be checked
//! against a known extra cost.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Runs `iters` steps of a dependent multiply-add chain over a u64: CPU work proportional to
/// `iters`, with no clock read and no memory beyond a register or two. What `--spin-ns` adds
/// to every request, so that a benchmark tool can be calibrated against a known extra CPU
/// cost per request. `black_box` on every step keeps the chain from being folded or cut.
#[inline(never)]
pub fn spin(iters: u64) -> u64 {
    let mut x = black_box(iters);
    for _ in 0..iters {
        x = black_box(
            x.wrapping_mul(0x5851_F42D_4C95_7F2D)
                .wrapping_add(0x1405_7B7E_F767_814F),
        );
    }
    x
}

fn time(iters: u64) -> Duration {
    let t = Instant::now();
    black_box(spin(iters));
    t.elapsed()
}

/// How many iterations of [`spin`] take about `ns` nanoseconds on this machine: the count
/// doubled until one run takes at least 20 ms, then the fastest of 5 runs of that count (the
/// one least disturbed by the machine's other work) gives iterations per nanosecond. 0 for
/// `ns == 0`, without timing anything.
pub fn calibrate(ns: u64) -> u64 {
    if ns == 0 {
        return 0;
    }
    let mut iters = 1 << 10;
    while time(iters) < Duration::from_millis(20) {
        iters *= 2;
    }
    let fastest = (0..5).map(|_| time(iters)).min().expect("5 runs");
    let per_ns = iters as f64 / fastest.as_nanos().max(1) as f64;
    (ns as f64 * per_ns).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_nanoseconds_is_no_work() {
        assert_eq!(calibrate(0), 0);
        assert_eq!(spin(0), 0);
    }

    #[test]
    fn the_calibrated_spin_takes_about_its_time() {
        const NS: u64 = 200_000;
        let iters = calibrate(NS);
        assert!(iters > 0);
        // The fastest of several runs: another process or test can only make a run slower.
        let fastest = (0..20).map(|_| time(iters)).min().unwrap().as_nanos() as f64;
        assert!(
            fastest >= 0.5 * NS as f64 && fastest <= 3.0 * NS as f64,
            "{iters} iterations took {fastest} ns, for {NS} ns"
        );
    }
}
