//! Profile files and what is recorded of them: `llvm-profdata show`, the check that a file is
//! an indexed profile, and `tune`'s records (the weights chosen, the mixes measured).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::ctx::Ctx;

use crate::analysis::outputs::ProfileInfo;
use crate::base::exec::Cmd;
use crate::base::fsx;
use crate::config::Config;
use crate::toolchain::tools::Toolchain;

/// The training profile of the run before this one (kept by `merge`, compared by `insight`).
pub const PREVIOUS_PROFILE: &str = "previous.profdata";

/// Where the tuned weights are kept, in pgo-data.
pub const TUNED: &str = "tune.json";

/// What `tune` chose, and on what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tuned {
    /// Each training workload's weight, in the config's order.
    pub weights: Vec<(String, u64)>,
    /// The training commands the weights are for (hashed, without weights): a training of
    /// other commands ignores them.
    pub commands: String,
    /// The config's weights `tune` started from: once the config's change, its own win.
    pub from: Vec<(String, u64)>,
    /// Each validation workload's agreement (%) at the config's weights and at these.
    pub validation: Vec<Scored>,
    /// With `--measure`: the mixes measured, and which was kept.
    #[serde(default)]
    pub measured: Option<Measured>,
    /// With `--measure`: how the agreement, the warning's predictor, ranked the captures
    /// measured.
    #[serde(default)]
    pub check: Option<AgreementCheck>,
}

/// The agreement (`insight.min_agreement_pct`'s predictor) against every capture `tune
/// --measure` measured: every mix on every validation workload with a capture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgreementCheck {
    pub cases: Vec<CheckCase>,
    /// Spearman's rank correlation of agreement and capture.
    pub spearman: Option<f64>,
    /// The warning's threshold (%).
    pub threshold_pct: f64,
    /// Of the captures under 80 %, how many the warning names, and how many there are.
    pub warned_under_80: (usize, usize),
    /// Of the captures of 95 % or more, how many the warning leaves alone, and how many.
    pub quiet_over_95: (usize, usize),
}

/// One mix on one validation workload: its agreement and its measured capture (%).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckCase {
    pub mix: String,
    pub workload: String,
    pub agreement_pct: f64,
    pub capture_pct: f64,
}

/// What `tune --measure` found: training mixes measured against the config's on the
/// validation workloads (`pipeline/tune/measured.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Every mix but the config's, against the config's, round by round.
    pub mixes: Vec<Mix>,
    /// Per validation workload, the config's mix's capture (%) of the validation oracle's
    /// gain over lto (from round 1); `None` where the oracle's gain is below the min effect.
    #[serde(default)]
    pub config_capture: Vec<(String, Option<f64>)>,
    /// The label of the mix kept (`config` when none of the last round qualified).
    pub chosen: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mix {
    pub label: String,
    /// The round of the search it was measured in (1: the config's neighbours; 2: the
    /// neighbours of round 1's leader).
    #[serde(default = "first_round")]
    pub round: u32,
    pub weights: Vec<(String, u64)>,
    /// Per validation workload: its median per message against the config's mix.
    pub against_config: Vec<Change>,
}

fn first_round() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub workload: String,
    /// % change of the median per message (negative: faster), with its 95 % interval.
    pub change_pct: f64,
    pub ci_low_pct: f64,
    pub ci_high_pct: f64,
    pub sessions: usize,
    /// What the change must pass to count (%): max(the min effect, the layout floor of the
    /// config's mix relinked in other function orders, where measured).
    #[serde(default)]
    pub threshold_pct: f64,
    /// The mix's capture (%) of the validation oracle's gain over lto on this workload;
    /// `None` where the oracle's gain is below the min effect.
    #[serde(default)]
    pub capture_pct: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scored {
    pub workload: String,
    pub before_pct: f64,
    pub after_pct: f64,
}

/// The hash of the training commands, without weights.
pub fn commands_hash(config: &Config) -> Result<String> {
    let text = serde_json::to_string(&config.train.commands())?;
    Ok(format!(
        "{:016x}",
        crate::base::fsx::fnv1a64(text.as_bytes())
    ))
}

/// The tuned weights, when `tune` made them for this config's training commands and weights
/// (a config edited since wins: a stale tune.json is said to be ignored).
pub fn tuned_weights(ctx: &Ctx) -> Result<Option<Vec<(String, u64)>>> {
    let path = ctx.pgo_data.join(TUNED);
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let tuned: Tuned = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is corrupt: delete it, or run `cargo xtask tune` again",
            path.display()
        )
    })?;
    let config = &ctx.config.settings;
    if tuned.commands == commands_hash(config)? && tuned.weights == config.train.weights() {
        // The config carries the tuned weights now: nothing to say.
        return Ok(None);
    }
    if tuned.commands != commands_hash(config)? || tuned.from != config.train.weights() {
        eprintln!(
            "merge: {} was tuned for other training commands or weights than {}'s: the config's weights are used (run `cargo xtask tune` again)",
            path.display(),
            ctx.config.path.display()
        );
        return Ok(None);
    }
    Ok(Some(tuned.weights))
}

/// The weights `merge` uses: the tuned ones when there are, else the config's.
pub fn weights(ctx: &Ctx) -> Result<Vec<(String, u64)>> {
    Ok(match tuned_weights(ctx)? {
        Some(w) => w,
        None => ctx.config.settings.train.weights(),
    })
}

/// The marker of LLVM's profiling runtime in an instrumented executable.
pub const PROFILE_RUNTIME_MARKER: &[u8] = b"__llvm_profile";

pub fn contains_bytes(path: &Path, needle: &[u8]) -> Result<bool> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(bytes.windows(needle.len()).any(|w| w == needle))
}

/// The summary `llvm-profdata show` prints.
pub fn parse_show(text: &str, path: PathBuf, hash: String) -> Result<ProfileInfo> {
    let field = |key: &str| -> Result<u64> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key)?.trim().parse().ok())
            .with_context(|| format!("`llvm-profdata show` printed no `{key}` line:\n{text}"))
    };
    Ok(ProfileInfo {
        path,
        hash,
        functions: field("Total functions:")?,
        max_function_count: field("Maximum function count:")?,
        total_count: field("Total count:")?,
        fingerprint: String::new(),
        skipped_raw: Vec::new(),
        origin: String::new(),
        parts: Vec::new(),
    })
}

/// `llvm-profdata show` of an indexed profile, summarised.
pub fn show(toolchain: &Toolchain, path: &Path) -> Result<ProfileInfo> {
    let text = Cmd::new(toolchain.llvm_profdata.display().to_string())
        .arg("show")
        .arg(path.display().to_string())
        .read()?;
    parse_show(&text, path.to_path_buf(), fsx::file_hash(path)?)
}

/// The first 8 bytes of an indexed profile, as LLVM 22 writes them (`\xfflprofi\x81`). A raw
/// .profraw starts with `\x81rforpl\xff` instead.
const INDEXED_MAGIC: [u8; 8] = [0xff, b'l', b'p', b'r', b'o', b'f', b'i', 0x81];

/// Refuses anything but an existing, non-empty, indexed profile: rustc only WARNS on a raw
/// .profraw ("bad magic") and then builds without PGO.
pub fn check_indexed_profile(path: &Path) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| {
        format!(
            "the merged profile {} cannot be read; run `cargo xtask pgo merge`",
            path.display()
        )
    })?;
    if bytes.is_empty() {
        bail!(
            "the merged profile {} is empty; run `cargo xtask pgo merge` again",
            path.display()
        );
    }
    if !bytes.starts_with(&INDEXED_MAGIC) {
        bail!(
            "{} is not an indexed profile (a raw .profraw or another file?): rustc would only warn and build WITHOUT PGO; \
             give it the output of `llvm-profdata merge`",
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    // Real `llvm-profdata show` output (LLVM 22.1.2-rust-1.95.0-stable, mty-bench train).
    const SHOW: &str = "Instrumentation level: IR  entry_first = 0  instrument_loop_entries = 0
Total functions: 1138
Maximum function count: 180000
Maximum internal block count: 442352
Total number of blocks: 11863
Total count: 9704034
";

    #[test]
    fn parses_llvm_profdata_show() {
        let info = parse_show(SHOW, PathBuf::from("p"), "h".into()).unwrap();
        assert_eq!(
            (info.functions, info.max_function_count, info.total_count),
            (1138, 180000, 9704034)
        );
        assert!(
            parse_show("nothing", PathBuf::new(), String::new())
                .unwrap_err()
                .to_string()
                .contains("Total functions:")
        );
    }

    use super::*;

    #[test]
    fn optimize_refuses_a_missing_empty_or_raw_profile_before_building() {
        let dir = std::env::temp_dir().join(format!("xtask-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.profdata");
        let err = format!("{:#}", check_indexed_profile(&missing).unwrap_err());
        assert!(
            err.starts_with(&format!(
                "the merged profile {} cannot be read; run `cargo xtask pgo merge`",
                missing.display()
            )),
            "{err}"
        );
        let empty = dir.join("empty.profdata");
        std::fs::write(&empty, b"").unwrap();
        let err = check_indexed_profile(&empty).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "the merged profile {} is empty; run `cargo xtask pgo merge` again",
                empty.display()
            )
        );
        // The first bytes of a real raw profile (LLVM 22), then of a real indexed one.
        let raw = dir.join("x.profraw");
        std::fs::write(
            &raw,
            [0x81, b'r', b'f', b'o', b'r', b'p', b'l', 0xff, 10, 0],
        )
        .unwrap();
        let err = check_indexed_profile(&raw).unwrap_err().to_string();
        assert!(
            err.contains("is not an indexed profile (a raw .profraw or another file?)"),
            "{err}"
        );
        let indexed = dir.join("x.profdata");
        std::fs::write(
            &indexed,
            [0xff, b'l', b'p', b'r', b'o', b'f', b'i', 0x81, 13, 0],
        )
        .unwrap();
        check_indexed_profile(&indexed).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
