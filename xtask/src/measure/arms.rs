//! The measured arms' names (each build under its own, release twice, layout variants) and the list of builds as arms.

use std::path::PathBuf;

use crate::toolchain::build::{Build, Built};

/// The baseline build's name, and the name of its second run in each block (A/A).
pub const BASELINE: &str = Build::BASELINE.name();
pub const BASELINE_AGAIN: &str = "release-aa";
/// `cargo xtask ab`'s NEW arm (OLD runs as the baseline).
pub const AB_NEW: &str = "new";

/// The arm of a build's k-th layout variant (`release/L1`).
pub fn layout_arm(build: &str, k: u32) -> String {
    format!("{build}/L{k}")
}

/// The layout variants of `build` among `arms`, by number (`L1`, `L2`, …; a session's arms
/// come in a random order).
pub fn layout_arms_of<'a>(arms: &'a [String], build: &str) -> Vec<&'a str> {
    let prefix = format!("{build}/L");
    let mut found: Vec<(u32, &str)> = arms
        .iter()
        .filter_map(|a| Some((a.strip_prefix(&prefix)?.parse().ok()?, a.as_str())))
        .collect();
    found.sort();
    found.into_iter().map(|(_, a)| a).collect()
}

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
