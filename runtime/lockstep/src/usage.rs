//! This process's CPU time and context switches, read from /proc (Linux), so the pipeline can
//! tell a run the machine disturbed from a clean one.

use serde::Serialize;

/// CPU time and context switches of this process since it started. A run the machine
/// disturbed shows it here: involuntary switches (preempted) or system time it did not need.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Usage {
    /// CPU time in user mode, in ms (10 ms resolution: clock ticks).
    pub user_ms: f64,
    /// CPU time in the kernel, in ms (10 ms resolution).
    pub sys_ms: f64,
    /// Times the process gave up the CPU itself (blocked: on stdin between batches, say).
    pub voluntary_ctx_switches: u64,
    /// Times the scheduler took the CPU away.
    pub involuntary_ctx_switches: u64,
}

impl Usage {
    /// Zeros where /proc is unreadable (not Linux).
    pub fn of_this_process() -> Usage {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        Usage::parse(&stat, &status, clock_ticks_per_sec())
    }

    /// From `/proc/self/stat` (utime, stime: fields 14 and 15, in clock ticks) and
    /// `/proc/self/status` (`voluntary_ctxt_switches`, `nonvoluntary_ctxt_switches`).
    pub fn parse(stat: &str, status: &str, ticks_per_sec: f64) -> Usage {
        // The command name (field 2) is in parentheses and may hold spaces: count from the
        // last ')'. After it come field 3 onwards.
        let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |field: usize| {
            fields
                .get(field - 3)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let count = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
                .unwrap_or(0)
        };
        Usage {
            user_ms: ticks(14) * 1000.0 / ticks_per_sec,
            sys_ms: ticks(15) * 1000.0 / ticks_per_sec,
            voluntary_ctx_switches: count("voluntary_ctxt_switches:"),
            involuntary_ctx_switches: count("nonvoluntary_ctxt_switches:"),
        }
    }
}

/// `USER_HZ`: 100 on every Linux architecture this runs on (the kernel's ABI for /proc).
fn clock_ticks_per_sec() -> f64 {
    100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_and_status() {
        let stat =
            "4242 (mty bench) R 1 4242 4242 0 -1 4194304 120 0 0 0 37 5 0 0 20 0 1 0 99 1000 200";
        let status =
            "Name:\tmty-bench\nvoluntary_ctxt_switches:\t3\nnonvoluntary_ctxt_switches:\t17\n";
        let u = Usage::parse(stat, status, 100.0);
        assert_eq!((u.user_ms, u.sys_ms), (370.0, 50.0));
        assert_eq!(
            (u.voluntary_ctx_switches, u.involuntary_ctx_switches),
            (3, 17)
        );
    }
}
