//! The separate-process protocol, kept only as calibration's contrast: K blocks per workload,
//! each a random order of one whole-process run per arm (release twice: the A/A pair); runs
//! the machine disturbed (too many involuntary context switches, too much system time) drop
//! their block whole; per block the log ratio of each run to the block's release run, mean
//! and bootstrap over blocks. On a machine whose speed flips every second or so its intervals
//! are not honest (docs/findings.md): the pipeline measures in lockstep, and `calibrate` runs
//! this beside it to show the difference.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::analysis::{self, Comparison, Row, WorkloadAnalysis};
use crate::config::{Calibrate, Measure};
use crate::instructions::InstructionCount;
use crate::measure::{BASELINE, MeasuredArm};
use crate::stats::median;
use crate::stats::{self, Estimate, SplitMix64};
use crate::workload::{WorkloadLine, parse_line, pinned};

/// One process run of one workload on one build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub workload: String,
    /// A variant's name, or [`BASELINE_AGAIN`] for the A/A run.
    pub build: String,
    /// The block (pair index) this run belongs to.
    pub pair: u32,
    /// Position within its block (0 = first).
    pub slot: usize,
    /// Why this run counts as disturbed, if it does.
    pub disturbed: Option<String>,
    #[serde(flatten)]
    pub result: WorkloadLine,
}

/// Why a run counts as disturbed, or `None`.
pub fn disturbed(line: &WorkloadLine, cfg: &Calibrate) -> Option<String> {
    if line.involuntary_ctx_switches > cfg.max_involuntary_switches {
        return Some(format!(
            "{} involuntary context switches (limit {})",
            line.involuntary_ctx_switches, cfg.max_involuntary_switches
        ));
    }
    let cpu = line.user_ms + line.sys_ms;
    if cpu > 0.0 && line.sys_ms / cpu > cfg.max_sys_fraction {
        return Some(format!(
            "system time {:.0} ms of {:.0} ms CPU (limit {:.0} %)",
            line.sys_ms,
            cpu,
            100.0 * cfg.max_sys_fraction
        ));
    }
    None
}

/// `calibrate.blocks` blocks per workload, each a random order of one
/// whole-process run per arm.
pub fn run(arms: &[MeasuredArm], cfg: &Measure, blocks: &Calibrate) -> Result<Vec<Run>> {
    let total = blocks.blocks as u64 * cfg.workloads.len() as u64 * arms.len() as u64;
    let bar = ProgressBar::new(total).with_prefix("measure").with_style(
        ProgressStyle::with_template(
            "{prefix:>12} [{bar:30}] {pos}/{len} runs {elapsed} {wide_msg}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    let mut rng = SplitMix64::new(cfg.seed);
    let mut runs = Vec::new();
    for pair in 0..blocks.blocks {
        for workload in &cfg.workloads {
            let mut order: Vec<usize> = (0..arms.len()).collect();
            rng.shuffle(&mut order);
            for (slot, index) in order.into_iter().enumerate() {
                let arm = &arms[index];
                let name = &arm.name;
                bar.set_message(format!("pair {} {} on {}", pair + 1, workload.name, name));
                let cmd = pinned(&arm.exe, cfg.pin_core)
                    .args(workload.args.iter().cloned())
                    .args(arm.extra.iter().cloned());
                let output =
                    bar.suspend(|| cmd.run_with_timeout(Duration::from_secs(cfg.timeout_secs)))?;
                let result =
                    parse_line(&String::from_utf8_lossy(&output.stdout)).with_context(|| {
                        format!(
                            "measured workload `{}` on {name}: `{}`",
                            workload.name,
                            cmd.display()
                        )
                    })?;
                runs.push(Run {
                    workload: workload.name.clone(),
                    build: name.clone(),
                    pair,
                    slot,
                    disturbed: disturbed(&result, blocks),
                    result,
                });
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    Ok(runs)
}

type Metric = fn(&Run) -> u64;
const METRICS: [Metric; 3] = [
    |r| r.result.median_ns,
    |r| r.result.p95_ns,
    |r| r.result.p99_ns,
];

pub fn analyze(
    workloads: &[String],
    builds: &[String],
    runs: &[Run],
    instructions: &[InstructionCount],
    cfg: &Measure,
) -> Result<Vec<WorkloadAnalysis>> {
    workloads
        .iter()
        .map(|w| analyze_one(w, builds, runs, instructions, cfg))
        .collect()
}

fn analyze_one(
    workload: &str,
    builds: &[String],
    runs: &[Run],
    instructions: &[InstructionCount],
    cfg: &Measure,
) -> Result<WorkloadAnalysis> {
    let mine: Vec<&Run> = runs.iter().filter(|r| r.workload == workload).collect();
    let (_, clean) = clean_blocks(workload, &mine)?;
    // The value of `metric` for `build` in each clean block, in block order.
    let series = |build: &str, metric: Metric| -> Result<Vec<f64>> {
        clean
            .iter()
            .map(|p| {
                mine.iter()
                    .find(|r| r.pair == *p && r.build == build)
                    .map(|r| metric(r) as f64)
                    .ok_or_else(|| anyhow::anyhow!("`{workload}`: block {p} has no run of {build}"))
            })
            .collect()
    };
    let compare = |cand: &str| -> Result<[Estimate; 3]> {
        let mut out = Vec::new();
        for metric in METRICS {
            out.push(stats::compare(
                &series(BASELINE, metric)?,
                &series(cand, metric)?,
                cfg.bootstrap_resamples,
                cfg.seed,
            )?);
        }
        Ok(out.try_into().expect("three metrics"))
    };
    let (aa, rows) = analysis::judge_rows(
        builds,
        cfg.min_effect_pct,
        None,
        compare,
        |build, vs_release| build_row(workload, build, &mine, &clean, instructions, vs_release),
    )?;
    Ok(WorkloadAnalysis {
        layout: None,
        workload: workload.to_string(),
        capture: None,
        rounds_per_session: 1,
        sessions: clean.len(),
        aa,
        rows,
        bolt_vs_pgo: None,
    })
}

/// The blocks of a workload, and those none of whose runs was disturbed (at least two).
fn clean_blocks(workload: &str, mine: &[&Run]) -> Result<(Vec<u32>, Vec<u32>)> {
    let mut blocks: Vec<u32> = mine.iter().map(|r| r.pair).collect();
    blocks.sort_unstable();
    blocks.dedup();
    let clean: Vec<u32> = blocks
        .iter()
        .copied()
        .filter(|p| {
            mine.iter()
                .filter(|r| r.pair == *p)
                .all(|r| r.disturbed.is_none())
        })
        .collect();
    if clean.len() < 2 {
        bail!(
            "`{workload}`: only {} of {} blocks were undisturbed; the machine was too busy to compare. \
             Rerun on a quieter machine, or raise `calibrate.max_involuntary_switches` / `calibrate.max_sys_fraction`",
            clean.len(),
            blocks.len()
        );
    }
    Ok((blocks, clean))
}

/// One build's row: medians over its clean runs, its instructions, its comparison.
fn build_row(
    workload: &str,
    build: &str,
    mine: &[&Run],
    clean: &[u32],
    instructions: &[InstructionCount],
    vs_release: Option<Comparison>,
) -> Row {
    let runs_of: Vec<&Run> = mine
        .iter()
        .copied()
        .filter(|r| r.build == build && clean.contains(&r.pair))
        .collect();
    let med = |metric: Metric| {
        median(&runs_of.iter().map(|r| metric(r) as f64).collect::<Vec<_>>()).unwrap_or(f64::NAN)
    };
    let instr = instructions
        .iter()
        .find(|i| i.workload == workload && i.build == build);
    let distribution =
        analysis::median_distribution(runs_of.iter().map(|r| r.result.percentiles.as_slice()));
    Row {
        build: build.to_string(),
        runs: runs_of.len(),
        median_ns: med(METRICS[0]),
        p95_ns: med(METRICS[1]),
        p99_ns: med(METRICS[2]),
        instructions_per_message: instr.and_then(|i| i.per_message),
        instructions_note: instr.and_then(|i| i.note.clone()),
        vs_release,
        distribution,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::builds;
    use crate::fixtures::{LINE, measure_config};
    use crate::stats::Verdict;
    use crate::workload::parse_line;

    /// Synthetic runs: release ~200 ns, LTO the same, PGO 10 % faster, with a deterministic
    /// wobble; block 2 disturbed.
    fn synthetic_runs(pairs: u32) -> Vec<Run> {
        let mut runs = Vec::new();
        for pair in 0..pairs {
            let wobble = [0.0, 3.0, -2.0, 1.0, -1.0, 2.0][pair as usize % 6];
            for (slot, (build, base)) in [
                ("release", 200.0),
                ("release-aa", 200.5),
                ("lto", 199.0),
                ("lto+pgo", 180.0),
                ("oracle", 170.0),
            ]
            .into_iter()
            .enumerate()
            {
                let mut result = parse_line(LINE).unwrap();
                let v = base + wobble + slot as f64 * 0.25;
                result.median_ns = v as u64;
                result.p95_ns = (v * 1.2) as u64;
                result.p99_ns = (v * 2.0) as u64;
                result.percentiles = vec![(0.5, v as u64), (0.99, (v * 2.0) as u64)];
                runs.push(Run {
                    workload: "agent_send_latency".into(),
                    build: build.into(),
                    pair,
                    slot,
                    disturbed: (pair == 2 && build == "lto")
                        .then(|| "99 involuntary context switches (limit 50)".into()),
                    result,
                });
            }
        }
        runs
    }

    #[test]
    fn drops_disturbed_blocks_whole_and_judges_against_the_noise_floor() {
        let cfg = measure_config();
        let a = analyze(
            &["agent_send_latency".into()],
            &builds(),
            &synthetic_runs(12),
            &[],
            &cfg,
        )
        .unwrap();
        let a = &a[0];
        assert_eq!(a.sessions, 11, "12 blocks, one disturbed");
        assert!(a.rows.iter().all(|r| r.runs == 11));
        let pgo = a.rows[2].vs_release.as_ref().unwrap();
        assert_eq!(pgo.median.verdict, Verdict::Faster, "{pgo:?}");
        assert!(
            pgo.median.estimate.ci_low_pct < -9.0 && pgo.median.estimate.ci_high_pct > -11.0,
            "{pgo:?}"
        );
        let lto = a.rows[1].vs_release.as_ref().unwrap();
        assert_eq!(lto.median.verdict, Verdict::NoDetectableChange, "{lto:?}");
        assert!(a.aa.median.estimate.ci_low_pct <= 0.5, "{:?}", a.aa);
        assert!(a.rows[0].vs_release.is_none());
        assert_eq!(a.rows[2].distribution[0].0, 0.5);
    }

    #[test]
    fn too_few_undisturbed_blocks_is_a_clear_error() {
        let mut runs = synthetic_runs(3);
        for r in runs.iter_mut().filter(|r| r.pair == 0) {
            r.disturbed = Some("x".into());
        }
        let err = analyze(
            &["agent_send_latency".into()],
            &builds(),
            &runs,
            &[],
            &measure_config(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("only 1 of 3 blocks were undisturbed"),
            "{err}"
        );
    }

    #[test]
    fn disturbed_runs_are_flagged_with_the_reason() {
        let cfg = crate::config::Calibrate::default();
        let mut line = parse_line(LINE).unwrap();
        assert_eq!(disturbed(&line, &cfg), None);
        line.involuntary_ctx_switches = 51;
        assert_eq!(
            disturbed(&line, &cfg).unwrap(),
            "51 involuntary context switches (limit 50)"
        );
        line.involuntary_ctx_switches = 0;
        line.sys_ms = 40.0;
        assert_eq!(
            disturbed(&line, &cfg).unwrap(),
            "system time 40 ms of 110 ms CPU (limit 25 %)"
        );
    }
}
