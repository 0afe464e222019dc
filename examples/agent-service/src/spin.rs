//! `--spin-ns`: a fixed amount of extra CPU work on every request, calibrated at start-up to
//! take about a given time. A benchmark tool's measure of CPU per request can then be checked
//! against a known extra cost.

use std::hint::black_box;
use std::time::Duration;

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

/// This thread's CPU time: what it ran, not what the clock on the wall saw while other
/// processes shared its core.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_THREAD_CPUTIME_ID is
    // supported by every Linux this runs on.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The CPU time `iters` iterations took on this thread.
fn time(iters: u64) -> Duration {
    let t = thread_cpu();
    black_box(spin(iters));
    thread_cpu().saturating_sub(t)
}

/// How many iterations of [`spin`] take about `ns` nanoseconds of CPU on this machine: the
/// count doubled until one run takes at least 20 ms, then the fastest of 9 runs of that count
/// gives iterations per nanosecond. Timed by the thread's CPU clock: a server started beside
/// others on a busy core (as a benchmark tool's arms set up) would otherwise count their time
/// as its own and spin about half as much as asked. 0 for `ns == 0`, without timing anything.
pub fn calibrate(ns: u64) -> u64 {
    if ns == 0 {
        return 0;
    }
    let mut iters = 1 << 10;
    while time(iters) < Duration::from_millis(20) {
        iters *= 2;
    }
    let fastest = (0..9).map(|_| time(iters)).min().expect("9 runs");
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

    /// Pins the calling thread to `cpu`.
    fn pin(cpu: usize) {
        // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and sched_setaffinity(0, …)
        // act on it and on the calling thread only.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
                0
            );
        }
    }

    /// A server set up beside another busy process on its core spins as much as one set up
    /// alone: timed by the wall clock it counted the other's time as its own and spun about
    /// half as much. Three calibrations each way, interleaved, the largest count of each (the
    /// machine's fastest moment in both).
    #[test]
    fn a_busy_neighbour_on_the_core_does_not_shrink_the_spin() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        // SAFETY: sched_getcpu has no preconditions.
        let cpu = usize::try_from(unsafe { libc::sched_getcpu() }).expect("a CPU");
        let (mut alone, mut beside) = (0, 0);
        for _ in 0..3 {
            let calibrated = std::thread::spawn(move || {
                pin(cpu);
                calibrate(1_000_000)
            });
            alone = alone.max(calibrated.join().unwrap());
            let stop = Arc::new(AtomicBool::new(false));
            let busy = {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    pin(cpu);
                    while !stop.load(Ordering::Relaxed) {
                        black_box(spin(10_000));
                    }
                })
            };
            let calibrated = std::thread::spawn(move || {
                pin(cpu);
                calibrate(1_000_000)
            });
            beside = beside.max(calibrated.join().unwrap());
            stop.store(true, Ordering::Relaxed);
            busy.join().unwrap();
        }
        let ratio = beside as f64 / alone as f64;
        assert!(
            (0.75..=1.33).contains(&ratio),
            "{beside} iterations beside a busy thread, {alone} alone (ratio {ratio:.2})"
        );
    }
}
