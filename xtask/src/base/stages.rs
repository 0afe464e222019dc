//! The pipeline's stages by name, and how each ended: what the command line, the timing
//! table, report.json and `pgo-data/stages/<stage>.json` call them.

use serde::{Deserialize, Serialize};

/// The stage list, one line a stage in the order the pipeline runs them: its variant, its
/// file under `pipeline/stage/` (also its name on the command line, in the timing table and
/// in `pgo-data/stages/<name>.json`) and its help. `$then` receives the list: the `Stage`
/// enum below and the stage modules of `pipeline/stage.rs` are made from it.
macro_rules! for_each_stage {
    ($then:ident) => {
        $then! {
            Doctor doctor "rustc and a version-matched llvm-profdata";
            Instrument instrument "the -Cprofile-generate build (cargo profile release-pgo)";
            Train train "the training workloads; raw profiles into pgo-data/raw/";
            Merge merge "raw profiles -> pgo-data/merged-<hash>.profdata";
            Optimize optimize "the lto+pgo build, and the check that the profile applied";
            Bolt bolt "BOLT after PGO: relinked with relocations, instrumented, trained, optimised (bolt.enabled)";
            Insight insight "what the profile holds; each measured workload profiled alone and compared with the training";
            Oracle oracle "the oracle build: PGO from the measured workloads' own profiles (never shipped)";
            Baselines baselines "the release (no LTO, no PGO) and lto (fat LTO only) builds";
            Layout layout "release (and `layout.builds`) relinked with its functions shuffled, K layouts checked (layout.variants)";
            Measure measure "the measured workloads on every build, interleaved";
            Report report "statistics, the table, report.json, report.md, latency.svg, benchmark.json, history.jsonl";
        }
    };
}
pub(crate) use for_each_stage;

macro_rules! stage_enum {
    ($($variant:ident $file:ident $help:literal;)*) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Stage {
            $($variant,)*
        }

        impl Stage {
            /// Every stage, in the order the pipeline runs them.
            pub const ALL: &'static [Stage] = &[$(Stage::$variant,)*];

            /// Its name on the command line, in the timing table and in
            /// `pgo-data/stages/<name>.json`.
            pub fn name(self) -> &'static str {
                match self {
                    $(Stage::$variant => stringify!($file),)*
                }
            }

            pub fn help(self) -> &'static str {
                match self {
                    $(Stage::$variant => $help,)*
                }
            }
        }
    };
}
for_each_stage!(stage_enum);

impl Stage {
    pub fn parse(name: &str) -> Option<Stage> {
        Stage::ALL.iter().copied().find(|s| s.name() == name)
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
