//! The pipeline's stages by name, and how each ended: what the command line, the timing
//! table, report.json and `pgo-data/stages/<stage>.json` call them.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Doctor,
    Instrument,
    Train,
    Merge,
    Optimize,
    Bolt,
    Insight,
    Oracle,
    Baselines,
    Layout,
    Measure,
    Report,
}

impl Stage {
    /// Every stage, in the order the pipeline runs them.
    pub const ALL: [Stage; 12] = [
        Stage::Doctor,
        Stage::Instrument,
        Stage::Train,
        Stage::Merge,
        Stage::Optimize,
        Stage::Bolt,
        Stage::Insight,
        Stage::Oracle,
        Stage::Baselines,
        Stage::Layout,
        Stage::Measure,
        Stage::Report,
    ];

    /// Its name on the command line, in the timing table and in `pgo-data/stages/<name>.json`.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Doctor => "doctor",
            Stage::Instrument => "instrument",
            Stage::Train => "train",
            Stage::Merge => "merge",
            Stage::Optimize => "optimize",
            Stage::Bolt => "bolt",
            Stage::Insight => "insight",
            Stage::Oracle => "oracle",
            Stage::Baselines => "baselines",
            Stage::Layout => "layout",
            Stage::Measure => "measure",
            Stage::Report => "report",
        }
    }

    pub fn help(self) -> &'static str {
        match self {
            Stage::Doctor => "rustc and a version-matched llvm-profdata",
            Stage::Instrument => "the -Cprofile-generate build (cargo profile release-pgo)",
            Stage::Train => "the training workloads; raw profiles into pgo-data/raw/",
            Stage::Merge => "raw profiles -> pgo-data/merged-<hash>.profdata",
            Stage::Optimize => "the lto+pgo build, and the check that the profile applied",
            Stage::Bolt => {
                "BOLT after PGO: relinked with relocations, instrumented, trained, optimised (bolt.enabled)"
            }
            Stage::Insight => {
                "what the profile holds; each measured workload profiled alone and compared with the training"
            }
            Stage::Oracle => {
                "the oracle build: PGO from the measured workloads' own profiles (never shipped)"
            }
            Stage::Baselines => "the release (no LTO, no PGO) and lto (fat LTO only) builds",
            Stage::Layout => {
                "release (and `layout.builds`) relinked with its functions shuffled, K layouts checked (layout.variants)"
            }
            Stage::Measure => "the measured workloads on every build, interleaved",
            Stage::Report => {
                "statistics, the table, report.json, report.md, latency.svg, benchmark.json, history.jsonl"
            }
        }
    }

    pub fn parse(name: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Stages that build with cargo: they always ask cargo, which decides what to compile.
    /// (`bolt` builds with cargo too, but its output is BOLT's, from a training: it is reused
    /// by its inputs, which include everything the relinked build depends on.)
    pub fn builds(self) -> bool {
        matches!(
            self,
            Stage::Instrument | Stage::Optimize | Stage::Oracle | Stage::Baselines
        )
    }
}

/// How a stage of this run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ran,
    /// Up to date: its recorded output was reused (a build stage: cargo found it fresh).
    Reused,
    /// Not needed in this run (e.g. no training with `--profile`).
    Skipped,
    Failed,
}

/// One line of the timing table, also kept in report.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRun {
    pub stage: String,
    pub seconds: f64,
    pub outcome: Outcome,
    /// The stage's input fingerprint, when it has one (`doctor` has none: it always runs).
    #[serde(default)]
    pub fingerprint: Option<String>,
}
