//! What each stage hands the next, as recorded in `pgo-data/stages/<stage>.json`: typed, so
//! that a stage accepts only what the stage before it makes (the optimised build takes a
//! `MergedProfile`, which only `merge`, a shipped profile or a validated record makes).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::bolt::{BoltReport, BoltTools};
use crate::build::{Build, Built};
use crate::insight::{Contents, HotFunction};
use crate::instructions::InstructionCount;
use crate::lockstep::Session;
use crate::warnings::ApplyReport;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstrumentedBuild(pub Built);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainingRun {
    pub profraw: Vec<PathBuf>,
    /// What the profile depends on (toolchain, training config, sources), hashed.
    pub fingerprint: String,
}

/// An indexed profile produced by `merge` from this run's training.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MergedProfile(pub ProfileInfo);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OptimizedBuild {
    pub build: Built,
    pub apply: ApplyReport,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Baselines {
    pub release: Built,
    pub lto: Built,
}

/// `--against REV`: another commit's `release` and `lto+pgo`, built from its own worktree
/// with its own training, measured beside this tree's builds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgainstBuilds {
    /// The revision as given (`HEAD~3`, a tag, a hash).
    pub rev: String,
    /// The commit it names, in full.
    pub commit: String,
    pub release: Built,
    pub lto_pgo: Built,
}

impl AgainstBuilds {
    /// The commit's short hash: the prefix of its arms' names.
    pub fn short(&self) -> &str {
        &self.commit[..self.commit.len().min(12)]
    }

    /// Its builds under their arm names (`<short>:release`, `<short>:lto+pgo`), each with the
    /// name of this tree's build it is compared with.
    pub fn arms(&self) -> [(String, &Built, &'static str); 2] {
        [
            (
                format!("{}:{}", self.short(), self.release.name()),
                &self.release,
                self.release.name(),
            ),
            (
                format!("{}:{}", self.short(), self.lto_pgo.name()),
                &self.lto_pgo,
                self.lto_pgo.name(),
            ),
        ]
    }
}

/// The `layout` stage's output: per relinked build, its variants, each verified to differ
/// from its base in layout only.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LayoutVariants {
    pub sets: Vec<LayoutSet>,
    /// The workloads whose sessions carry the variants.
    pub workloads: Vec<String>,
}

impl LayoutVariants {
    /// Every variant as (arm name, executable).
    pub fn arms(&self) -> impl Iterator<Item = (&str, &Built)> {
        self.sets
            .iter()
            .flat_map(|s| s.variants.iter().map(|v| (v.arm.as_str(), &v.built)))
    }

    /// Every variant's arm and `--shuffle-sections` seed.
    pub fn seeds(&self) -> Vec<(String, u32)> {
        self.sets
            .iter()
            .flat_map(|s| s.variants.iter().map(|v| (v.arm.clone(), v.seed)))
            .collect()
    }
}

/// One build's layout variants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayoutSet {
    /// The build relinked (`release`, `lto`, `lto+pgo`).
    pub build: String,
    /// Its measured executable's hash, which the relink without a flag reproduced.
    pub base_hash: String,
    /// The linker flags of variant k, with `{seed}` for its seed.
    pub flag: String,
    /// The workload whose instructions per message were compared, and the base's count.
    pub instructions_workload: String,
    pub base_instructions: Option<f64>,
    pub variants: Vec<LayoutVariant>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayoutVariant {
    /// Its arm's name: `<build>/L<k>`.
    pub arm: String,
    pub seed: u32,
    pub built: Built,
    /// Its functions against the base's.
    pub moved: crate::relink::Moved,
    /// Instructions per message of `instructions_workload`; `None` (with the reason in
    /// `instructions_note`) when not counted.
    pub instructions: Option<f64>,
    #[serde(default)]
    pub instructions_note: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measurements {
    /// The measured builds, in [`Build::MEASURED`] order.
    pub builds: Vec<Built>,
    /// Every lockstep session.
    pub sessions: Vec<Session>,
    /// The sessions of `measure.versus`, workload against workload.
    pub versus_sessions: Vec<Session>,
    /// Per workload and `versus` pair: the stopping rule's sessions, why they stopped, where
    /// their time went.
    #[serde(default)]
    pub stopped: Vec<crate::measure::Stopping>,
    /// `--against REV`: that revision's builds, measured as arms of the same sessions.
    #[serde(default)]
    pub against: Option<AgainstBuilds>,
    /// The layout variants measured as arms of the sessions of their workloads.
    #[serde(default)]
    pub layout: Option<LayoutVariants>,
    pub instructions: Vec<InstructionCount>,
    pub comparators: Vec<crate::compare::Row>,
    /// The run's seed: the arms' places and turn orders (`--seed` replays them).
    #[serde(default)]
    pub seed: u64,
}

impl Measurements {
    /// The measured builds; without an oracle (`--profile`: nothing trained here to make
    /// one from) the others.
    pub fn builds_of(
        optimized: &OptimizedBuild,
        base: &Baselines,
        oracle: Option<&OptimizedBuild>,
        bolt: Option<&BoltBuild>,
    ) -> Vec<Built> {
        Build::MEASURED
            .iter()
            .filter_map(|b| match b {
                Build::Release => Some(base.release.clone()),
                Build::Lto => Some(base.lto.clone()),
                Build::LtoPgo => Some(optimized.build.clone()),
                Build::Oracle => oracle.map(|o| o.build.clone()),
                Build::Bolt => bolt.map(|b| b.build.clone()),
                Build::Instrumented => unreachable!("the instrumented build is not measured"),
            })
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InsightReport {
    /// The merged training profile: hottest functions, crates.
    pub training: Contents,
    /// Per `apply_check.required` prefix: its functions in the profile, and how many ran.
    pub required: Vec<RequiredCoverage>,
    pub workloads: Vec<WorkloadInsight>,
    /// This training's overlap with the previous run's profile (when there was one), in %.
    pub previous_overlap_pct: Option<f64>,
    /// The agreement (%) below which a workload is warned about (`insight.min_agreement_pct`).
    #[serde(default)]
    pub min_agreement_pct: f64,
    /// What deserves a look, in words (also printed).
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequiredCoverage {
    pub prefix: String,
    pub functions: usize,
    pub nonzero: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadInsight {
    pub workload: String,
    /// The workload's own profile (in `pgo-data/insight/`; the oracle build's input).
    pub profile: PathBuf,
    /// Program-level edge overlap of the workload's profile with the training's, in %.
    pub overlap_pct: f64,
    /// The share of the workload's count in functions the training never ran, in %.
    #[serde(default)]
    pub untrained_share_pct: f64,
    /// The workload's hottest functions, with their share there and in the training.
    pub hot: Vec<HotFunction>,
    /// Functions of the required paths the workload ran and the training never did.
    pub never_trained: Vec<String>,
    /// How well the training stands for this workload in what PGO reads (the predictor of
    /// capture); absent in records made before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agreement: Option<crate::insight::Agreement>,
}

/// The stage's output.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BoltBuild {
    /// The BOLT-optimised executable (`exe`), with the relinked PGO build's flags.
    pub build: Built,
    /// The PGO build relinked with relocations, the input of BOLT.
    pub relinked: PathBuf,
    pub tools: BoltTools,
    /// The merged `.fdata` profile.
    pub profile: PathBuf,
    /// The profile was given (`bolt.profile`), not trained in this run.
    #[serde(default)]
    pub given: bool,
    /// The optimising step's options (`bolt.options`).
    #[serde(default)]
    pub options: Vec<String>,
    pub report: BoltReport,
    /// Per `apply_check.required` prefix: how many of the profiled functions match it.
    pub required: Vec<(String, usize)>,
    /// Instructions per message of the first measured workload, relinked against the plain
    /// lto+pgo build (the relink must not change the code); `None` without valgrind.
    #[serde(default)]
    pub relink_instructions: Option<(f64, f64)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileInfo {
    pub path: PathBuf,
    pub hash: String,
    pub functions: u64,
    pub max_function_count: u64,
    pub total_count: u64,
    /// What the profile was trained from, hashed (see `pipeline/guard.rs`).
    #[serde(default)]
    pub fingerprint: String,
    /// Raw profiles left out by `--skip-bad-profiles`, with the reason.
    #[serde(default)]
    pub skipped_raw: Vec<String>,
    /// Where the profile came from, in words: trained in this run, or a stored profile or
    /// bundle (`--profile`), or bundles merged (`merge --input`).
    #[serde(default)]
    pub origin: String,
    /// Trained here: each training workload's own profile and its weight in the merge.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<TrainingPart>,
}

/// One training workload's part of a merged profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainingPart {
    pub workload: String,
    pub weight: u64,
    /// Its raw profiles merged alone (`pgo-data/train/<workload>.profdata`).
    pub profile: PathBuf,
}

/// What the report stage records: where report.json is, and its content hash (the other
/// documents are rendered from it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rendered {
    pub report_json: std::path::PathBuf,
    pub hash: String,
}
