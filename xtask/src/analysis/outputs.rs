//! The stage outputs the report reads (the profile, insight, BOLT and layout records), kept
//! below the report layer. The other stages' outputs live in their own files
//! (`pipeline/stage/<name>.rs`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::analysis::insight::{Contents, HotFunction};
use crate::toolchain::bolt::{BoltReport, BoltTools};
use crate::toolchain::build::Built;

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
    pub moved: crate::toolchain::relink::Moved,
    /// Instructions per message of `instructions_workload`; `None` (with the reason in
    /// `instructions_note`) when not counted.
    pub instructions: Option<f64>,
    #[serde(default)]
    pub instructions_note: Option<String>,
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
    pub agreement: Option<crate::analysis::insight::Agreement>,
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
