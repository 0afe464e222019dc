//! A process's threads, from `/proc`: moved onto CPUs (a service's server follows its arm
//! onto the measured core) and their CPU time (what a service turn is judged by). The CPUs
//! a thread may run on, and the others.

use anyhow::{Context, Result};

/// The CPU time of every thread of process `pid`, in ns (`/proc/PID/task/*/schedstat`, its
/// first field: time on a CPU, user and system); a thread that has exited is not counted.
pub fn cpu_ns(pid: u32) -> Result<u64> {
    let dir = format!("/proc/{pid}/task");
    let mut total = 0;
    for task in std::fs::read_dir(&dir).with_context(|| format!("cannot list {dir}"))? {
        let path = task?.path().join("schedstat");
        // A thread that ended since the listing is skipped.
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        total += text
            .split_whitespace()
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .with_context(|| {
                format!("{} is not `ns waiting timeslices`: {text}", path.display())
            })?;
    }
    Ok(total)
}

/// Moves every thread of process `pid` (`/proc/PID/task`) onto `cpus`: the threads that
/// could not be moved, with why. A thread that ended since the listing (`ESRCH`: a service
/// arm's driver-reading threads end after each run) is not one of them.
pub(crate) fn move_threads(pid: u32, cpus: &[usize]) -> Result<Vec<(libc::pid_t, std::io::Error)>> {
    let mut failed = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let tid: libc::pid_t = task?
            .file_name()
            .to_string_lossy()
            .parse()
            .context("a task id in /proc")?;
        match set_affinity(tid, cpus) {
            Err(err) if err.raw_os_error() != Some(libc::ESRCH) => failed.push((tid, err)),
            _ => {}
        }
    }
    Ok(failed)
}

pub(crate) fn set_affinity(tid: libc::pid_t, cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is a plain bit array, valid all zeros.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: `set` is a valid cpu_set_t and CPU_SET bounds-checks `cpu`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` outlives the call, whose size argument is its own.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The CPUs this thread may run on.
pub(crate) fn own_cpus() -> Vec<usize> {
    // SAFETY: as in `set_affinity`; sched_getaffinity fills the set it is given.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if rc != 0 {
        return (0..n).collect();
    }
    // SAFETY: CPU_ISSET bounds-checks its index.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Every online CPU but `taken`; all of them where that leaves none.
pub(crate) fn other_cpus(taken: &[usize]) -> Vec<usize> {
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    let others: Vec<usize> = (0..online).filter(|c| !taken.contains(c)).collect();
    if others.is_empty() {
        (0..online).collect()
    } else {
        others
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threads_of_a_process_move_and_one_that_ended_is_no_failure() {
        let cpus: Vec<usize> = (0..std::thread::available_parallelism().unwrap().get()).collect();
        assert!(move_threads(std::process::id(), &cpus).unwrap().is_empty());
        assert!(
            move_threads(u32::MAX - 1, &cpus).is_err(),
            "no such process"
        );
    }

    /// A thread's CPU time is counted while it lives (an ended thread's is not).
    #[test]
    fn the_cpu_time_of_a_process_grows_by_what_its_threads_ran() {
        const BURN_NS: u64 = 30_000_000;
        let me = std::process::id();
        let before = cpu_ns(me).unwrap();
        let (burnt, told) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let burner = std::thread::spawn(move || {
            let own = || {
                let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
                text.split_whitespace()
                    .next()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            };
            // Until this thread itself ran that long, however busy the machine.
            let mut x = 1u64;
            while own() < BURN_NS {
                for _ in 0..10_000 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
            burnt.send(()).unwrap();
            // Alive until read.
            let _ = released.recv();
        });
        told.recv().unwrap();
        let after = cpu_ns(me).unwrap();
        release.send(()).unwrap();
        burner.join().unwrap();
        assert!(after >= before + BURN_NS, "{before} -> {after} ns");
        assert!(cpu_ns(u32::MAX - 1).is_err(), "no such process");
    }

    #[test]
    fn every_other_cpu_or_all_when_none_is_left() {
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) } as usize;
        let all: Vec<usize> = (0..online).collect();
        assert_eq!(other_cpus(&all), all);
        if online > 1 {
            assert!(!other_cpus(&[0]).contains(&0));
        }
    }
}
