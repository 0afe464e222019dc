//! The `measure` stage: every measured workload on every build, interleaved round by round
//! (the build order rotates each round), so drift on a shared machine hits all builds alike.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::config::Measure;
use crate::exec::Cmd;

/// A build to measure.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Variant {
    /// `release`, `release-lto`, `release-pgo`.
    pub name: String,
    pub exe: PathBuf,
}

/// What one `mty-bench` latency run printed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadLine {
    pub median_ns: u64,
    pub p95_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    pub clock_overhead_ns: u64,
}

/// One process run of one workload on one build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub workload: String,
    pub build: String,
    pub round: u32,
    /// Position of this build within its round (0 = first).
    pub slot: usize,
    #[serde(flatten)]
    pub result: WorkloadLine,
}

/// Parses the JSON line a latency workload prints (the last non-empty line of stdout).
pub fn parse_line(stdout: &str) -> Result<WorkloadLine> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .context("it printed nothing on stdout")?;
    serde_json::from_str(line)
        .with_context(|| format!("its last line is not a latency report: {line}"))
}

/// The build order of `round`: the variants rotated by the round number.
pub fn order(variants: usize, round: u32) -> Vec<usize> {
    (0..variants)
        .map(|i| (i + round as usize) % variants)
        .collect()
}

pub fn run(variants: &[Variant], cfg: &Measure) -> Result<Vec<Run>> {
    let total = cfg.rounds as u64 * cfg.workloads.len() as u64 * variants.len() as u64;
    let bar = ProgressBar::new(total).with_prefix("measure").with_style(
        ProgressStyle::with_template(
            "{prefix:>12} [{bar:30}] {pos}/{len} runs {elapsed} {wide_msg}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    let mut runs = Vec::new();
    for round in 0..cfg.rounds {
        for workload in &cfg.workloads {
            for (slot, index) in order(variants.len(), round).into_iter().enumerate() {
                let variant = &variants[index];
                bar.set_message(format!(
                    "round {} {} on {}",
                    round + 1,
                    workload.name,
                    variant.name
                ));
                let cmd =
                    Cmd::new(variant.exe.display().to_string()).args(workload.args.iter().cloned());
                let output =
                    bar.suspend(|| cmd.run_with_timeout(Duration::from_secs(cfg.timeout_secs)))?;
                let result =
                    parse_line(&String::from_utf8_lossy(&output.stdout)).with_context(|| {
                        format!(
                            "measured workload `{}` on {}: `{}`",
                            workload.name,
                            variant.name,
                            cmd.display()
                        )
                    })?;
                runs.push(Run {
                    workload: workload.name.clone(),
                    build: variant.name.clone(),
                    round,
                    slot,
                    result,
                });
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    Ok(runs)
}

/// The median of `values` (mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_line_mty_bench_prints() {
        let out = "{\"workload\":\"agent_send_latency\",\"messages\":200000,\"warmup\":10000,\"policy\":\"block\",\"payload_bytes\":0,\"capacity\":8,\"median_ns\":191,\"p95_ns\":254,\"p99_ns\":407,\"max_ns\":358655,\"mean_ns\":210.1,\"clock_overhead_ns\":23}\n";
        let line = parse_line(out).unwrap();
        assert_eq!(
            (
                line.median_ns,
                line.p95_ns,
                line.p99_ns,
                line.clock_overhead_ns
            ),
            (191, 254, 407, 23)
        );
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
    fn every_build_takes_every_slot_over_a_full_rotation() {
        assert_eq!(order(3, 0), vec![0, 1, 2]);
        assert_eq!(order(3, 1), vec![1, 2, 0]);
        assert_eq!(order(3, 2), vec![2, 0, 1]);
        assert_eq!(order(3, 3), vec![0, 1, 2]);
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
