//! The machine's state beside a session: how much CPU time other processes took on the
//! cores the arms ran on, and on the set-up core, while the arms took their turns.
//!
//! From `/proc` alone: each core's busy time (`/proc/stat`: user, nice, system, irq, softirq
//! and steal, the hypervisor's share, in clock ticks) less what this tool's own process tree
//! took (`/proc/<pid>/stat`: utime and stime, plus cutime and cstime for children already
//! reaped, such as a whole-process arm's runs): that is the others' time. It is split between
//! the two cores this way: on the measured core, at most its busy time less the arms' (pinned
//! there for the turns) and xtask's own (its threads pass the turns and may run there); the
//! rest is the set-up core's. A service workload's arms each keep a server (a live child,
//! counted with its arm) and reap a driver every turn that ran on the other cores: there an
//! arm's reaped children are left out of what ran on the measured core. Workloads of several threads run on every core: there "other"
//! is every core's busy time less the whole tree's. The resolution is a clock tick (10 ms),
//! so a session of 0.2 s reads in steps of 5 %.

use serde::{Deserialize, Serialize};

/// Other processes' CPU time during one session's turns.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OtherLoad {
    /// The wall time watched (s).
    pub secs: f64,
    /// On the cores the arms ran on, as a share of one core over that time (%).
    pub measured_pct: f64,
    /// On the set-up core (%), where the arms had one to move from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_pct: Option<f64>,
    /// Of `measured_pct`, the hypervisor's steal (another guest of the host ran), % of a core.
    #[serde(default)]
    pub steal_pct: f64,
}

/// The counters at the start of the turns.
pub struct LoadWatch {
    measured: Option<usize>,
    setup: Option<usize>,
    arms: Vec<u32>,
    /// The arms' reaped children ran on other cores (a service workload's drivers).
    children_elsewhere: bool,
    at: std::time::Instant,
    busy: Vec<(u64, u64)>,
    arms_ticks: u64,
    own_ticks: u64,
    tree_ticks: u64,
}

impl LoadWatch {
    /// Reads the counters; `None` where `/proc` cannot be read (not Linux).
    pub fn start(
        measured: Option<usize>,
        setup: Option<usize>,
        arms: impl Iterator<Item = u32>,
        children_elsewhere: bool,
    ) -> Option<LoadWatch> {
        let arms: Vec<u32> = arms.collect();
        Some(LoadWatch {
            busy: core_busy()?,
            arms_ticks: arms_ticks(&arms, children_elsewhere),
            children_elsewhere,
            own_ticks: ticks(std::process::id())?,
            tree_ticks: tree_ticks(),
            measured,
            setup,
            arms,
            at: std::time::Instant::now(),
        })
    }

    /// The other processes' share since the start.
    pub fn stop(self) -> Option<OtherLoad> {
        let secs = self.at.elapsed().as_secs_f64();
        let busy = core_busy()?;
        let arms = arms_ticks(&self.arms, self.children_elsewhere);
        let own = ticks(std::process::id())?;
        let tree = tree_ticks();
        let hz = clock_ticks_per_sec();
        let d = |after: u64, before: u64| after.saturating_sub(before) as f64 / hz;
        let core = |c: usize| Some(d(busy.get(c)?.0, self.busy.get(c)?.0));
        let steal = |c: usize| Some(d(busy.get(c)?.1, self.busy.get(c)?.1));
        let (arms, own, tree) = (
            d(arms, self.arms_ticks),
            d(own, self.own_ticks),
            d(tree, self.tree_ticks),
        );
        let share = |x: f64| 100.0 * x.max(0.0) / secs.max(1e-9);
        Some(match (self.measured, self.setup) {
            (Some(m), Some(s)) => {
                let others = (core(m)? + core(s)? - tree).max(0.0);
                let on_measured = (core(m)? - arms - own).clamp(0.0, others);
                OtherLoad {
                    secs,
                    measured_pct: share(on_measured),
                    setup_pct: Some(share(others - on_measured)),
                    steal_pct: share(steal(m)?),
                }
            }
            (Some(m), None) => OtherLoad {
                secs,
                measured_pct: share(core(m)? - tree),
                setup_pct: None,
                steal_pct: share(steal(m)?),
            },
            (None, _) => {
                let cores = 0..busy.len().min(self.busy.len());
                let all: f64 = cores.clone().filter_map(core).sum();
                OtherLoad {
                    secs,
                    measured_pct: share(all - tree),
                    setup_pct: None,
                    steal_pct: share(cores.filter_map(steal).sum()),
                }
            }
        })
    }
}

/// Each core's busy and steal clock ticks (`cpuN` lines of `/proc/stat`), by core number.
fn core_busy() -> Option<Vec<(u64, u64)>> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let mut out = Vec::new();
    for line in stat.lines() {
        // `cpuN …`, not the `cpu …` total line.
        let Some(rest) = line
            .strip_prefix("cpu")
            .filter(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let Some(Ok(n)) = fields.next().map(str::parse::<usize>) else {
            continue;
        };
        let v: Vec<u64> = fields.filter_map(|f| f.parse().ok()).collect();
        // user nice system idle iowait irq softirq steal
        if v.len() < 8 {
            return None;
        }
        if out.len() <= n {
            out.resize(n + 1, (0, 0));
        }
        out[n] = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7], v[7]);
    }
    (!out.is_empty()).then_some(out)
}

/// A process's CPU clock ticks, its reaped children's included; `None` once it is gone.
fn ticks(pid: u32) -> Option<u64> {
    let (_, fields) = stat_fields(pid)?;
    // After the command: state (0), ppid (1), … utime (11), stime (12), cutime (13),
    // cstime (14).
    let f = |i: usize| fields.get(i).and_then(|x| x.parse::<u64>().ok());
    Some(f(11)? + f(12)? + f(13)? + f(14)?)
}

/// The parent and the fields after the command of `/proc/<pid>/stat`.
fn stat_fields(pid: u32) -> Option<(u32, Vec<String>)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may hold spaces and parentheses: the fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<String> = rest.split_whitespace().map(str::to_string).collect();
    let ppid = fields.get(1)?.parse().ok()?;
    Some((ppid, fields))
}

/// This process and every descendant of it: their clock ticks in all.
/// The arms' CPU time: each arm's own with its reaped children's, or without them when
/// they ran elsewhere; with its live descendants' (a service arm's server) then.
fn arms_ticks(arms: &[u32], children_elsewhere: bool) -> u64 {
    if !children_elsewhere {
        return arms.iter().filter_map(|p| ticks(*p)).sum();
    }
    let own: u64 = arms.iter().filter_map(|p| own_ticks(*p)).sum();
    let live: u64 = descendants(arms)
        .iter()
        .filter(|p| !arms.contains(p))
        .filter_map(|p| ticks(*p))
        .sum();
    own + live
}

/// utime and stime alone, reaped children left out.
fn own_ticks(pid: u32) -> Option<u64> {
    let (_, fields) = stat_fields(pid)?;
    let f = |i: usize| fields.get(i).and_then(|x| x.parse::<u64>().ok());
    Some(f(11)? + f(12)?)
}

/// `roots` and every live process below them.
fn descendants(roots: &[u32]) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return roots.to_vec();
    };
    let parents: Vec<(u32, u32)> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, stat_fields(pid)?.0)))
        .collect();
    let mut tree = roots.to_vec();
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    tree
}

fn tree_ticks() -> u64 {
    descendants(&[std::process::id()])
        .iter()
        .filter_map(|p| ticks(*p))
        .sum()
}

fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real CPU-bound process on the measured core that is not this tool's (its parent
    /// exited, so it is nobody's child here) is seen; the same load as one of our arms is
    /// not.
    #[test]
    fn a_busy_neighbour_is_seen_and_the_arms_are_not() {
        let Some(cores) = core_busy() else {
            eprintln!("skipped: no /proc/stat here");
            return;
        };
        let (core, other) = (cores.len() - 1, 0);
        let watch = |arms: Vec<u32>| {
            let w = LoadWatch::start(Some(core), Some(other), arms.into_iter(), false).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(600));
            w.stop().unwrap()
        };
        // Ours: a spinning child, named as an arm.
        let mut arm = std::process::Command::new("taskset")
            .args(["-c", &core.to_string(), "sh", "-c", "while :; do :; done"])
            .spawn()
            .expect("taskset and sh");
        let as_arm = watch(vec![arm.id()]);
        arm.kill().unwrap();
        arm.wait().unwrap();
        // Not ours: started in the background by a shell that exits at once.
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("taskset -c {core} sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!"),
            ])
            .output()
            .expect("sh");
        let pid: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        let beside = watch(Vec::new());
        // SAFETY: kill(2) on the pid the shell printed, its own background child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        eprintln!("as an arm: {as_arm:?}; a neighbour: {beside:?}");
        // A neighbour: up to a whole core's worth of someone else (ticks of 10 ms over 0.6 s,
        // and the other tests running beside it on that core, which share it, leave room).
        // Which core it is charged to is approximate: this process's own time is taken from
        // the measured core first.
        let total = |b: &OtherLoad| b.measured_pct + b.setup_pct.unwrap_or(0.0);
        assert!(total(&beside) > 40.0, "{beside:?}");
        // An arm: its time is the session's own. What is left on the measured core is other
        // load (other tests beside this one, the hypervisor's steal) that the neighbour's
        // watch saw too, so the arm's reading is held against the neighbour's rather than a
        // fixed bound, which the hypervisor's steal alone can exceed.
        assert!(
            as_arm.measured_pct + 25.0 < total(&beside),
            "{as_arm:?} against {beside:?}"
        );
        assert!(ticks(u32::MAX).is_none());
    }
}
