//! The measured arms (each build under its name, release twice) and the schedule of lockstep
//! sessions, each workload's taking turns with the others' (one session: `lockstep.rs`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::build::{Build, Built};
use crate::config::{Measure, Workload};
use crate::lockstep::{self, Arm, Session};
use crate::stats::SplitMix64;

/// The baseline build's name, and the name of its second run in each block (A/A).
pub const BASELINE: &str = Build::BASELINE.name();
pub const BASELINE_AGAIN: &str = "release-aa";

/// Something measured against the others: a build (or, when calibrating, a build with extra
/// arguments), under a name of its own.
#[derive(Debug, Clone)]
pub struct MeasuredArm {
    pub name: String,
    pub exe: PathBuf,
    /// Appended to each workload's arguments.
    pub extra: Vec<String>,
}

/// The arms: the baseline twice (the second is the A/A arm), then the other builds.
pub fn arms(builds: &[Built]) -> Vec<MeasuredArm> {
    let mut arms = Vec::new();
    for v in builds {
        let arm = |name: &str| MeasuredArm {
            name: name.to_string(),
            exe: v.exe.clone(),
            extra: Vec::new(),
        };
        arms.push(arm(v.name()));
        if v.name() == BASELINE {
            arms.push(arm(BASELINE_AGAIN));
        }
    }
    arms
}

/// Per workload, `lockstep.sessions` sessions of the arms taking
/// turns (`lockstep.rs`). Sessions of the workloads alternate, so a slow stretch of the
/// machine is shared among them rather than landing on one.
pub fn run_lockstep(arms: &[MeasuredArm], cfg: &Measure) -> Result<Vec<Session>> {
    let l = &cfg.lockstep;
    let schedule = lockstep_schedule(cfg);
    let total = schedule.len() as u64 * l.rounds as u64;
    let bar = ProgressBar::new(total).with_prefix("measure").with_style(
        ProgressStyle::with_template(
            "{prefix:>12} [{bar:30}] {pos}/{len} rounds {elapsed} {wide_msg}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    let mut rng = SplitMix64::new(cfg.seed);
    let mut sessions = Vec::new();
    for (s, workload) in schedule {
        bar.set_message(format!("session {} of {}", s + 1, workload.name));
        let arms: Vec<Arm> = arms
            .iter()
            .map(|a| Arm {
                name: a.name.clone(),
                exe: a.exe.clone(),
                args: workload.args.iter().chain(&a.extra).cloned().collect(),
            })
            .collect();
        let session = lockstep::session(workload, s, &arms, cfg, &mut rng, &bar)
            .with_context(|| format!("measuring `{}` (lockstep)", workload.name))?;
        sessions.push(session);
    }
    bar.finish_and_clear();
    Ok(sessions)
}

/// The lockstep sessions in the order they run: session by session, each workload that
/// takes part in it (a workload's own `sessions` ends its part early).
fn lockstep_schedule(cfg: &Measure) -> Vec<(u32, &Workload)> {
    let l = &cfg.lockstep;
    (0..l.sessions)
        .flat_map(|s| {
            cfg.workloads
                .iter()
                .filter(move |w| s < w.sessions_in(l))
                .map(move |w| (s, w))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::LINE;
    use crate::fixtures::measure_config;
    use crate::stats::median;
    use crate::workload::parse_line;

    /// A workload with fewer sessions of its own takes part in the first ones only; the
    /// others alternate with it as before.
    #[test]
    fn the_lockstep_schedule_gives_each_workload_its_sessions() {
        let mut cfg = measure_config();
        cfg.lockstep.sessions = 3;
        cfg.workloads = vec![
            Workload::new("a", vec!["a".into()]),
            Workload {
                sessions: Some(2),
                ..Workload::new("b", vec!["b".into()])
            },
            Workload {
                sessions: Some(9),
                ..Workload::new("c", vec!["c".into()])
            },
        ];
        let order: Vec<(u32, &str)> = lockstep_schedule(&cfg)
            .into_iter()
            .map(|(s, w)| (s, w.name.as_str()))
            .collect();
        assert_eq!(
            order,
            [
                (0, "a"),
                (0, "b"),
                (0, "c"),
                (1, "a"),
                (1, "b"),
                (1, "c"),
                (2, "a"),
                (2, "c")
            ],
            "b stops after its 2; c's 9 is capped at the config's 3"
        );
    }

    #[test]
    fn parses_the_line_mty_bench_prints() {
        let line = parse_line(&format!("{LINE}\n")).unwrap();
        assert_eq!(
            (
                line.median_ns,
                line.p95_ns,
                line.p99_ns,
                line.clock_overhead_ns
            ),
            (253, 302, 563, 30)
        );
        assert_eq!(line.percentiles[1], (0.5, 253));
        assert_eq!(line.involuntary_ctx_switches, 1);
        assert!(
            parse_line("")
                .unwrap_err()
                .to_string()
                .contains("printed nothing")
        );
        assert!(
            parse_line("hello\n")
                .unwrap_err()
                .to_string()
                .contains("not a latency report: hello")
        );
    }

    #[test]
    fn each_block_runs_the_baseline_twice() {
        let builds: Vec<Built> = Build::MEASURED
            .iter()
            .map(|b| Built::new(*b, PathBuf::from(format!("/{}", b.name())), String::new()))
            .collect();
        let names: Vec<String> = arms(&builds).into_iter().map(|a| a.name).collect();
        assert_eq!(
            names,
            [
                "release",
                "release-aa",
                "lto",
                "lto+pgo",
                "lto+pgo+bolt",
                "oracle"
            ]
        );
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
