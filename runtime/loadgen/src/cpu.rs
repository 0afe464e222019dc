//! A server's CPU time, read from `/proc/PID/task/TID/schedstat` per thread, and its sum
//! over a window (`--server-pid`).

use std::collections::BTreeMap;

use anyhow::{Result, anyhow};

/// Nanoseconds on a CPU per thread of a process, by thread id.
pub type ThreadCpu = BTreeMap<u32, u64>;

/// The first field of a `schedstat` line (`NS_ON_CPU NS_WAITING TIMESLICES`): the thread's
/// nanoseconds on a CPU, user and system.
fn parse_schedstat(line: &str) -> Option<u64> {
    line.split_whitespace().next()?.parse().ok()
}

/// Each thread's CPU time of process `pid`, from `/proc/PID/task/TID/schedstat`. A thread
/// whose file cannot be read or parsed is left out (it exited after the listing); it fails
/// only when the process's threads cannot be listed or none of them reads.
pub fn read_threads_cpu(pid: u32) -> Result<ThreadCpu> {
    let dir = format!("/proc/{pid}/task");
    let unreadable = |file: &str, why: &dyn std::fmt::Display| {
        anyhow!(
            "cannot read the CPU time of process {pid} ({file}): {why}; is it running, and is it yours?"
        )
    };
    let entries = std::fs::read_dir(&dir).map_err(|err| unreadable(&dir, &err))?;
    let mut cpu = ThreadCpu::new();
    let mut first_failure = None;
    for entry in entries {
        let entry = entry.map_err(|err| unreadable(&dir, &err))?;
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let file = format!("{dir}/{tid}/schedstat");
        match std::fs::read_to_string(&file) {
            Ok(text) => match parse_schedstat(&text) {
                Some(ns) => {
                    cpu.insert(tid, ns);
                }
                None => {
                    first_failure.get_or_insert_with(|| {
                        unreadable(
                            &file,
                            &format!("`{}` is not `NS_ON_CPU NS_WAITING TIMESLICES`", text.trim()),
                        )
                    });
                }
            },
            Err(err) => {
                first_failure.get_or_insert_with(|| unreadable(&file, &err));
            }
        }
    }
    if cpu.is_empty() {
        return Err(first_failure
            .unwrap_or_else(|| unreadable(&format!("{dir}/*/schedstat"), &"it lists no thread")));
    }
    Ok(cpu)
}

/// A server's CPU time over a window, from its threads' CPU times at the start and the end.
#[derive(Debug, PartialEq, Eq)]
pub struct WindowCpu {
    /// Over the threads alive at the end: end minus start, a thread started during the
    /// window counting from 0.
    pub cpu_ns: u64,
    /// Threads alive at the end.
    pub threads: usize,
    /// Threads alive at the start and not at the end: their CPU in the window is lost.
    pub gone: usize,
}

pub fn window_cpu(start: &ThreadCpu, end: &ThreadCpu) -> WindowCpu {
    WindowCpu {
        // Saturating: a thread id reused within the window (only after the kernel's ids wrap)
        // would otherwise go below 0.
        cpu_ns: end
            .iter()
            .map(|(tid, ns)| ns.saturating_sub(start.get(tid).copied().unwrap_or(0)))
            .sum(),
        threads: end.len(),
        gone: start.keys().filter(|tid| !end.contains_key(tid)).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_schedstat_line_gives_its_first_field() {
        assert_eq!(parse_schedstat("341248136 442858 73\n"), Some(341_248_136));
        assert_eq!(parse_schedstat("0 0 1"), Some(0));
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_schedstat("-5 1 2"), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
    }

    #[test]
    fn the_window_counts_new_threads_from_zero_and_loses_gone_ones() {
        let start = ThreadCpu::from([(1, 100), (2, 50), (3, 70)]);
        // 1 ran 50 ns, 2 did not run, 3 exited, 4 started and ran 30 ns.
        let end = ThreadCpu::from([(1, 150), (2, 50), (4, 30)]);
        assert_eq!(
            window_cpu(&start, &end),
            WindowCpu {
                cpu_ns: 80,
                threads: 3,
                gone: 1
            }
        );
        assert_eq!(
            window_cpu(&end, &end),
            WindowCpu {
                cpu_ns: 0,
                threads: 3,
                gone: 0
            }
        );
    }

    /// This thread's CPU time, as the kernel accounts it for the function under test.
    fn own_thread_cpu() -> u64 {
        parse_schedstat(&std::fs::read_to_string("/proc/thread-self/schedstat").unwrap()).unwrap()
    }

    #[test]
    fn a_busy_thread_shows_in_this_process_cpu() {
        const BURN: Duration = Duration::from_millis(50);
        let pid = std::process::id();
        let before = read_threads_cpu(pid).unwrap();
        let (burnt, told) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let burner = std::thread::spawn(move || {
            // `/proc/thread-self` links to `PID/task/TID`.
            let link = std::fs::read_link("/proc/thread-self").unwrap();
            let tid: u32 = link.file_name().unwrap().to_str().unwrap().parse().unwrap();
            // Until this thread itself was on a CPU that long, however busy the machine; the
            // wall-clock bound only stops a kernel that never accounts it.
            let give_up = Instant::now() + Duration::from_secs(30);
            let mut x = 1u64;
            while own_thread_cpu() < BURN.as_nanos() as u64 && Instant::now() < give_up {
                for _ in 0..10_000 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
            burnt.send(tid).unwrap();
            // Alive until read: the CPU of a thread that exited is no longer listed.
            let _ = released.recv();
        });
        let tid = told.recv().unwrap();
        let after = read_threads_cpu(pid).unwrap();
        release.send(()).unwrap();
        burner.join().unwrap();
        assert!(!before.contains_key(&tid), "{tid} in {before:?}");
        let thread_ns = *after
            .get(&tid)
            .unwrap_or_else(|| panic!("{tid} in {after:?}"));
        assert!(thread_ns >= 30_000_000, "the burner: {thread_ns} ns");
        let window = window_cpu(&before, &after);
        assert!(window.cpu_ns >= 30_000_000, "{window:?}");
        assert!(window.threads >= 2, "{window:?}");
    }
}
