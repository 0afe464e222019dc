//! Profile bundles: a merged profile plus a manifest saying what it was trained from, so a
//! profile can be shipped, reused without training (`--profile`), and trained on several
//! machines and merged (`train --bundle`, `merge --input DIR[:WEIGHT]`).
//!
//! A bundle is a directory holding `profile.profdata` (indexed) and `manifest.json`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::ctx::Ctx;
use crate::analysis::outputs::ProfileInfo;
use crate::base::fsx;
use crate::config::Train;
use crate::toolchain::tools::Toolchain;

pub const MANIFEST: &str = "manifest.json";
pub const PROFILE: &str = "profile.profdata";
/// The manifest's `format`: bumped when its fields change meaning.
pub const FORMAT: u32 = 1;

/// What `manifest.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: u32,
    /// `rustc -vV` of the toolchain that built the instrumented binary.
    pub rustc_vv: String,
    pub llvm_profdata_version: String,
    pub git_commit: String,
    pub git_dirty: bool,
    /// The sources that go into the binary, hashed (`fresh::sources`).
    pub sources: String,
    pub binary: String,
    /// The training config it was trained with (of the last merge step, for a merged one),
    /// each workload with the weight it was merged with.
    pub training: Train,
    /// The content hash of the instrumented executable that wrote the raw profiles: bundles
    /// of different executables are not merged (their counters do not line up).
    pub instrumented_hash: String,
    pub profile: Summary,
    /// A merged bundle: its inputs, `path×weight`.
    #[serde(default)]
    pub merged_from: Vec<String>,
}

/// The profile's per-function counts, summarised (`llvm-profdata show`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// Content hash of `profile.profdata`.
    pub hash: String,
    pub functions: u64,
    pub total_count: u64,
    pub max_function_count: u64,
}

impl Manifest {
    /// The manifest of `profile`, trained by `instrumented_hash` in this checkout.
    pub fn new(
        ctx: &Ctx,
        toolchain: &Toolchain,
        profile: &ProfileInfo,
        instrumented_hash: &str,
        merged_from: Vec<String>,
    ) -> Result<Manifest> {
        let (git_commit, git_dirty) = crate::report::git_state(&ctx.ws.root);
        Ok(Manifest {
            format: FORMAT,
            rustc_vv: toolchain.rustc_vv.clone(),
            llvm_profdata_version: toolchain.llvm_profdata_version.clone(),
            git_commit,
            git_dirty,
            sources: ctx.sources_hash()?,
            binary: ctx.config.settings.binary.clone(),
            // With the weights the profile was merged with (`tune`'s, where it chose them).
            training: {
                let mut train = ctx.config.settings.train.clone();
                for w in &mut train.workloads {
                    if let Some(part) = profile.parts.iter().find(|p| p.workload == w.name) {
                        w.weight = Some(part.weight);
                    }
                }
                train
            },
            instrumented_hash: instrumented_hash.to_string(),
            profile: Summary {
                hash: profile.hash.clone(),
                functions: profile.functions,
                total_count: profile.total_count,
                max_function_count: profile.max_function_count,
            },
            merged_from,
        })
    }

    /// Why this bundle's profile does not match the current tree and toolchain; empty when
    /// it does.
    pub fn stale_reasons(&self, ctx: &Ctx, toolchain: &Toolchain) -> Result<Vec<String>> {
        let mut why = Vec::new();
        let sources = ctx.sources_hash()?;
        if self.sources != sources {
            why.push(format!(
                "the sources differ (trained from {} at commit {}{}; sources fingerprint {} there, {sources} here)",
                self.binary,
                short(&self.git_commit),
                if self.git_dirty { ", dirty" } else { "" },
                self.sources
            ));
        }
        if self.rustc_vv != toolchain.rustc_vv {
            why.push(format!(
                "the toolchain differs ({} there, {} here)",
                first_line(&self.rustc_vv),
                first_line(&toolchain.rustc_vv)
            ));
        }
        if self.binary != ctx.config.settings.binary {
            why.push(format!(
                "it profiles `{}`, the config builds `{}`",
                self.binary, ctx.config.settings.binary
            ));
        }
        Ok(why)
    }

    /// One line for the report: where the profile came from.
    pub fn origin(&self, dir: &Path) -> String {
        let mut s = format!(
            "bundle {}: trained at commit {}{} with {}, {} training workload(s)",
            dir.display(),
            short(&self.git_commit),
            if self.git_dirty { " (dirty)" } else { "" },
            first_line(&self.rustc_vv),
            self.training.workloads.len()
        );
        if !self.merged_from.is_empty() {
            s.push_str(&format!("; merged from {}", self.merged_from.join(", ")));
        }
        s
    }
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// Writes `profile` and its manifest into `dir` (created if missing), each file atomically.
pub fn write(dir: &Path, profile: &Path, manifest: &Manifest) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let bytes =
        std::fs::read(profile).with_context(|| format!("cannot read {}", profile.display()))?;
    fsx::write_atomic(&dir.join(PROFILE), &bytes)?;
    fsx::write_json(&dir.join(MANIFEST), manifest)?;
    eprintln!(
        "bundle: wrote {} ({} functions, total count {}) and {}",
        dir.join(PROFILE).display(),
        manifest.profile.functions,
        manifest.profile.total_count,
        dir.join(MANIFEST).display()
    );
    Ok(())
}

/// Reads and checks a bundle: the manifest parses (an error names the file, and the field
/// or line), its format is known, and the profile is there, indexed, with the content hash
/// the manifest records.
pub fn read(dir: &Path) -> Result<(Manifest, PathBuf)> {
    let manifest_path = dir.join(MANIFEST);
    if !dir.is_dir() {
        bail!(
            "{} is not a profile bundle (a directory with {MANIFEST} and {PROFILE}, made by `cargo xtask export DIR` or `train --bundle DIR`)",
            dir.display()
        );
    }
    let text = std::fs::read_to_string(&manifest_path).with_context(|| {
        format!(
            "cannot read the bundle manifest {}",
            manifest_path.display()
        )
    })?;
    let manifest: Manifest = serde_json::from_str(&text).map_err(|err| {
        anyhow::anyhow!(
            "the bundle manifest {} is corrupt: {err}; export the bundle again",
            manifest_path.display()
        )
    })?;
    if manifest.format != FORMAT {
        bail!(
            "the bundle manifest {}: field `format` is {}, this xtask reads format {FORMAT}",
            manifest_path.display(),
            manifest.format
        );
    }
    let profile = dir.join(PROFILE);
    super::profile::check_indexed_profile(&profile)?;
    let hash = fsx::file_hash(&profile)?;
    if hash != manifest.profile.hash {
        bail!(
            "the bundle manifest {}: field `profile.hash` is {}, but {} hashes to {hash}: the profile was replaced or damaged",
            manifest_path.display(),
            manifest.profile.hash,
            profile.display()
        );
    }
    Ok((manifest, profile))
}

/// `DIR[:WEIGHT]` of `merge --input`: the weight a positive integer, 1 when not given.
pub fn parse_input(arg: &str) -> Result<(PathBuf, u64)> {
    match arg.rsplit_once(':') {
        Some((dir, w)) if !dir.is_empty() && w.chars().all(|c| c.is_ascii_digit()) => {
            let weight: u64 = w.parse().ok().filter(|w| *w > 0).with_context(|| {
                format!("`--input {arg}`: the weight must be a positive integer")
            })?;
            Ok((PathBuf::from(dir), weight))
        }
        _ => Ok((PathBuf::from(arg), 1)),
    }
}

/// Refuses to merge bundles whose counters do not line up: another instrumented binary or
/// another toolchain. Names both bundles.
pub fn check_compatible(bundles: &[(PathBuf, Manifest)]) -> Result<()> {
    let Some((first_dir, first)) = bundles.first() else {
        bail!("`merge --input` needs at least one bundle");
    };
    for (dir, m) in &bundles[1..] {
        if m.instrumented_hash != first.instrumented_hash {
            bail!(
                "cannot merge {} and {}: they were trained on different instrumented binaries \
                 (content hash {} and {}); train every bundle with the same commit, toolchain and \
                 paths (`cargo xtask pgo train --bundle DIR`)",
                first_dir.display(),
                dir.display(),
                first.instrumented_hash,
                m.instrumented_hash
            );
        }
        if m.rustc_vv != first.rustc_vv {
            bail!(
                "cannot merge {} and {}: they were trained with different toolchains ({} and {})",
                first_dir.display(),
                dir.display(),
                first_line(&first.rustc_vv),
                first_line(&m.rustc_vv)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_take_an_optional_positive_weight() {
        assert_eq!(parse_input("a/b").unwrap(), (PathBuf::from("a/b"), 1));
        assert_eq!(parse_input("a/b:3").unwrap(), (PathBuf::from("a/b"), 3));
        // A colon that is not followed by a number is part of the path.
        assert_eq!(parse_input("c:d").unwrap(), (PathBuf::from("c:d"), 1));
        let err = parse_input("a:0").unwrap_err().to_string();
        assert!(
            err.contains("the weight must be a positive integer"),
            "{err}"
        );
    }
}
