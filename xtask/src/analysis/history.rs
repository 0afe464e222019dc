//! What earlier runs measured that this one pools with its own (`pgo-data/history.json`):
//! the layout variants' shifts per (release executable, workload) (the layout floor's K
//! grows with every run of the layout stage, each drawing new layouts), and each build's
//! estimate per run (how far runs of the same executables scatter: the run component).

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::measure::session::Metric;

/// The most recent records of one kind kept per key: old runs of another machine state
/// should not outvote this one's forever.
const KEEP: usize = 40;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    #[serde(default)]
    pub layouts: Vec<LayoutRecord>,
    #[serde(default)]
    pub runs: Vec<RunRecord>,
}

/// A build's estimate against release in one run, the sessions' alone (log space): runs of
/// the same two executables show how much a run's estimate moves beyond its interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub workload: String,
    pub build: String,
    /// The build's and release's content hashes: the comparison of fixed executables.
    pub exe_hash: String,
    pub release_hash: String,
    pub run_seed: u64,
    pub log: f64,
    pub se: f64,
    /// Whether its arms ran from fresh copies every session (`measure.fresh_copies`): runs
    /// without carried what stays with a file, another population.
    #[serde(default)]
    pub fresh: bool,
    /// The metric of the estimate (a record from before it was kept: the median): a
    /// service's CPU per request and its latency are other populations.
    #[serde(default)]
    pub metric: Metric,
}

/// How a run measured, as a record must match it to be the same population: from fresh
/// copies or not, and on which metric.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    pub fresh: bool,
    pub metric: Metric,
}

/// A layout variant's shift against release (log space).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayoutRecord {
    pub workload: String,
    /// Release's content hash: layouts of another executable are another population.
    pub exe_hash: String,
    /// The variant's `--shuffle-sections` seed: the same layout measured again replaces its
    /// record instead of counting twice.
    pub layout_seed: u32,
    pub log: f64,
    pub se: f64,
    /// The metric of the shift, as [`RunRecord::metric`].
    #[serde(default)]
    pub metric: Metric,
}

impl History {
    /// The history at `path`; none yet is an empty one.
    pub fn load(path: &Path) -> Result<History> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text).with_context(|| {
                format!(
                    "{} is not a history this tool wrote; delete it (the floors start again from this run's layouts and null arms)",
                    path.display()
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(History::default()),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        crate::base::fsx::write_json(path, self)
    }

    /// The layout shifts of `workload` on release `exe_hash`, but those of `seeds` (this
    /// run's own).
    pub fn layouts_of(
        &self,
        workload: &str,
        exe_hash: &str,
        seeds: &[u32],
        metric: Metric,
    ) -> Vec<(f64, f64)> {
        self.layouts
            .iter()
            .filter(|r| {
                r.workload == workload
                    && r.exe_hash == exe_hash
                    && !seeds.contains(&r.layout_seed)
                    && r.metric == metric
            })
            .map(|r| (r.log, r.se))
            .collect()
    }

    /// The estimates of `workload`'s builds in runs other than `run_seed`'s.
    pub fn runs_of(&self, workload: &str, run_seed: u64) -> impl Iterator<Item = &RunRecord> {
        self.runs
            .iter()
            .filter(move |r| r.workload == workload && r.run_seed != run_seed)
    }

    /// Earlier runs' estimates (log, se) of `build`'s executable `exe_hash` on `workload`
    /// against release `release_hash`, in runs other than `run_seed`'s that measured as this
    /// one does (`how`): what [`stats::components::run_test`] takes, this run's added.
    pub fn same_runs(
        &self,
        workload: &str,
        build: &str,
        (exe_hash, release_hash): (&str, &str),
        run_seed: u64,
        how: Measured,
    ) -> Vec<(f64, f64)> {
        self.runs_of(workload, run_seed)
            .filter(|r| {
                r.build == build
                    && r.exe_hash == exe_hash
                    && r.release_hash == release_hash
                    && r.fresh == how.fresh
                    && r.metric == how.metric
            })
            .map(|r| (r.log, r.se))
            .collect()
    }

    /// Adds this run's builds' estimates (replacing a re-rendered run's), keeping the newest
    /// [`KEEP`] per workload and build.
    pub fn add_runs(&mut self, runs: Vec<RunRecord>) {
        for n in runs {
            self.runs.retain(|r| {
                !(r.workload == n.workload && r.build == n.build && r.run_seed == n.run_seed)
            });
            self.runs.push(n);
        }
        keep_newest(&mut self.runs, |r| format!("{} {}", r.workload, r.build));
    }

    /// Adds (or replaces) this run's layouts, keeping the newest [`KEEP`] per key.
    pub fn add_layouts(&mut self, layouts: Vec<LayoutRecord>) {
        for l in layouts {
            self.layouts.retain(|r| {
                !(r.workload == l.workload
                    && r.exe_hash == l.exe_hash
                    && r.layout_seed == l.layout_seed)
            });
            self.layouts.push(l);
        }
        keep_newest(&mut self.layouts, |r| {
            format!("{} {}", r.workload, r.exe_hash)
        });
    }
}

fn keep_newest<T>(v: &mut Vec<T>, key: impl Fn(&T) -> String) {
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut keep = vec![false; v.len()];
    for (i, r) in v.iter().enumerate().rev() {
        let n = seen.entry(key(r)).or_default();
        *n += 1;
        keep[i] = *n <= KEEP;
    }
    let mut i = 0;
    v.retain(|_| {
        i += 1;
        keep[i - 1]
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(seed: u32, log: f64) -> LayoutRecord {
        LayoutRecord {
            workload: "w".into(),
            exe_hash: "abc".into(),
            layout_seed: seed,
            log,
            se: 0.001,
            metric: Metric::Median,
        }
    }

    /// Runs pool: the same layout measured again replaces its record, the newest are kept, and a file that is not a history is
    /// refused with what to do.
    #[test]
    fn records_pool_across_runs_without_counting_twice() {
        let dir = std::env::temp_dir().join(format!("mty-history-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("history.json");
        let mut h = History::load(&path).unwrap();
        assert_eq!(h, History::default());
        h.add_layouts(vec![layout(10, 0.01), layout(11, -0.01)]);
        h.save(&path).unwrap();
        let mut h = History::load(&path).unwrap();
        h.add_layouts(vec![layout(11, -0.02), layout(12, 0.0)]);
        assert_eq!(h.layouts_of("w", "abc", &[], Metric::Median).len(), 3);
        assert_eq!(
            h.layouts_of("w", "abc", &[12], Metric::Median),
            vec![(0.01, 0.001), (-0.02, 0.001)]
        );
        assert!(
            h.layouts_of("w", "another exe", &[], Metric::Median)
                .is_empty()
        );
        // A service's CPU per request is another population than its latency.
        assert!(
            h.layouts_of("w", "abc", &[], Metric::CpuPerRequest)
                .is_empty()
        );
        for s in 0..100 {
            h.add_layouts(vec![layout(100 + s, 0.0)]);
        }
        assert_eq!(h.layouts.len(), KEEP);
        assert_eq!(h.layouts.last().unwrap().layout_seed, 199);
        std::fs::write(&path, "not json").unwrap();
        let err = format!("{:#}", History::load(&path).unwrap_err());
        assert!(
            err.contains("is not a history this tool wrote; delete it"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
