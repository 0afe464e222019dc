//! The profile stages: the instrumented build, training, merging, and the optimised build
//! with the proof (rustc's own warnings) that the profile applied.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use super::ctx::Ctx;

use crate::outputs::{InstrumentedBuild, MergedProfile, OptimizedBuild, TrainingRun};

use crate::build::Build;
use crate::config::Config;
use crate::exec::Cmd;
use crate::fsx;
use crate::outputs::{ProfileInfo, TrainingPart};
use crate::stage::Stage;
use crate::toolchain::Toolchain;
use crate::warnings::ApplyReport;

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
    Ok(format!("{:016x}", crate::fsx::fnv1a64(text.as_bytes())))
}

/// The tuned weights, when `tune` made them for this config's training commands and weights
/// (a config edited since wins: a stale tune.json is said to be ignored).
pub fn tuned_weights(ctx: &Ctx) -> Result<Option<Vec<(String, u64)>>> {
    let path = ctx.data.join(TUNED);
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
    let config = &ctx.config.config;
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

/// Why the merged profile's weights are not the ones a merge would use now, or `None`.
pub fn reweighed(ctx: &Ctx, merged: &MergedProfile) -> Result<Option<String>> {
    if merged.0.parts.is_empty() {
        return Ok(None);
    }
    let now = weights(ctx)?;
    let then: Vec<(String, u64)> = merged
        .0
        .parts
        .iter()
        .map(|p| (p.workload.clone(), p.weight))
        .collect();
    let differ = then
        .iter()
        .any(|(n, w)| now.iter().any(|(m, v)| m == n && v != w));
    Ok(differ.then(|| {
        format!(
            "the profile {} was merged with other weights than the config's (or tune.json's)",
            merged.0.path.display()
        )
    }))
}

/// The weights `merge` uses: the tuned ones when there are, else the config's.
pub fn weights(ctx: &Ctx) -> Result<Vec<(String, u64)>> {
    Ok(match tuned_weights(ctx)? {
        Some(w) => w,
        None => ctx.config.config.train.weights(),
    })
}

/// The marker of LLVM's profiling runtime in an instrumented executable.
const PROFILE_RUNTIME_MARKER: &[u8] = b"__llvm_profile";

pub fn contains_bytes(path: &Path, needle: &[u8]) -> Result<bool> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(bytes.windows(needle.len()).any(|w| w == needle))
}

pub(super) fn instrument(ctx: &Ctx, tc: &Toolchain) -> Result<InstrumentedBuild> {
    let (record, _) = ctx.build(tc, Build::Instrumented, ctx.instrument_rustflags())?;
    if !contains_bytes(&record.exe, PROFILE_RUNTIME_MARKER)? {
        bail!(
            "{} has no `__llvm_profile` symbols: -Cprofile-generate did not reach it (a RUSTC_WRAPPER or a cargo config that replaces the flags?)",
            record.exe.display()
        );
    }
    Ok(InstrumentedBuild(record))
}

pub(super) fn train(
    ctx: &Ctx,
    tc: &Toolchain,
    instrumented: &InstrumentedBuild,
) -> Result<TrainingRun> {
    let raw = ctx.raw_dir();
    std::fs::create_dir_all(&raw).with_context(|| format!("cannot create {}", raw.display()))?;
    // Start from nothing: a profile from an earlier build must not be merged into this one.
    for old in profraw_files(&raw)? {
        std::fs::remove_file(&old)
            .with_context(|| format!("cannot remove stale {}", old.display()))?;
    }
    for entry in std::fs::read_dir(&raw)?.filter_map(|e| e.ok()) {
        if entry.path().is_dir() {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
    let train = &ctx.config.config.train;
    let bar = ProgressBar::new(train.workloads.len() as u64)
        .with_prefix("train")
        .with_style(
            ProgressStyle::with_template(
                "{prefix:>12} [{bar:30}] {pos}/{len} workloads {elapsed} {wide_msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
    let mut workloads = train.workloads.clone();
    ctx.resolve_drivers(&mut workloads)?;
    for workload in &workloads {
        bar.set_message(workload.name.clone());
        let timeout = Duration::from_secs(workload.timeout_secs.unwrap_or(train.timeout_secs));
        // Each workload's raw profiles in a folder of its own: `merge` weighs them apart.
        bar.suspend(|| {
            profile_run(
                ctx,
                &instrumented.0.exe,
                workload,
                &raw.join(&workload.name),
                timeout,
            )
        })
        .with_context(|| format!("training workload `{}` failed", workload.name))?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    let profraw = profraw_files(&raw)?;
    if profraw.is_empty() {
        bail!(
            "no profiles were written: was the binary built instrumented? (looked for *.profraw in {})",
            raw.display()
        );
    }
    eprintln!(
        "train: {} raw profile(s) in {}",
        profraw.len(),
        raw.display()
    );
    let fingerprint =
        super::guard::fingerprint(&ctx.sources_hash()?, &tc.rustc_vv, &ctx.config.config)?;
    Ok(TrainingRun {
        profraw,
        fingerprint,
    })
}

/// Runs workload `w` once on the instrumented `exe`, its raw profiles written into `dir`; a
/// service workload's server started, loaded and stopped. Fails when a server killed by a
/// signal wrote nothing, saying why.
pub(super) fn profile_run(
    ctx: &Ctx,
    exe: &Path,
    w: &crate::config::Workload,
    dir: &Path,
    timeout: Duration,
) -> Result<()> {
    let env = [("LLVM_PROFILE_FILE".to_string(), ctx.profile_pattern(dir))];
    let stopped = crate::service::run_once(exe, w, &ctx.ws.root, &env, timeout)?;
    // A server's missing profile has a cause of its own to name; a command's is checked
    // with the others' by the caller.
    if let Some(why) = stopped.and_then(|s| s.why_no_profile())
        && profraw_files(dir)?.is_empty()
    {
        bail!("no raw profile was written in {}: {why}", dir.display());
    }
    Ok(())
}

/// The raw profiles in `dir` and in its folders (one a training workload).
fn profraw_files(dir: &Path) -> Result<Vec<PathBuf>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut files = Vec::new();
    for path in std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
    {
        if path.is_dir() {
            files.extend(profraw_files(&path)?);
        } else if path.extension().is_some_and(|x| x == "profraw") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The training workload a raw profile belongs to: the folder it was written in, under
/// `raw`; `None` for one written by a training before workloads had folders.
fn workload_of(raw: &Path, file: &Path) -> Option<String> {
    let parent = file.parent()?;
    (parent != raw).then(|| parent.file_name()?.to_str().map(str::to_string))?
}

/// `skip_bad`: merge the readable raw profiles when some are not (`--skip-bad-profiles`).
pub(super) fn merge(
    ctx: &Ctx,
    tc: &Toolchain,
    training: &TrainingRun,
    skip_bad: bool,
) -> Result<MergedProfile> {
    // Read each raw profile alone first: llvm-profdata's own error for a bad input among good
    // ones is "no profile can be merged", which names no file.
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for file in &training.profraw {
        match raw_profile_problem(tc, file) {
            None => good.push(file.clone()),
            Some(why) => bad.push(format!("{}: {why}", file.display())),
        }
    }
    if !bad.is_empty() {
        if !skip_bad || good.is_empty() {
            bail!(
                "{} of {} raw profiles cannot be read:\n  {}\n{}",
                bad.len(),
                training.profraw.len(),
                bad.join("\n  "),
                if good.is_empty() {
                    "None is usable: rerun the training (`cargo xtask pgo`)."
                } else {
                    "Rerun the training (`cargo xtask pgo`), or pass --skip-bad-profiles to merge the good ones."
                }
            );
        }
        eprintln!(
            "merge: skipping {} unreadable raw profile(s) (--skip-bad-profiles):\n  {}",
            bad.len(),
            bad.join("\n  ")
        );
    }
    let parts = merge_parts(ctx, tc, &good)?;
    let tmp = fsx::temp_path(&ctx.data.join("merged.profdata"));
    let cmd = Cmd::new(tc.llvm_profdata.display().to_string())
        .args(["merge", "-o"])
        .arg(tmp.display().to_string())
        .args(
            parts
                .iter()
                .map(|p| format!("-weighted-input={},{}", p.weight, p.profile.display())),
        );
    if let Err(err) = cmd.run_with_timeout(Duration::from_secs(300)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(err.context("cannot merge the training workloads' profiles"));
    }
    let bytes = std::fs::read(&tmp).with_context(|| format!("cannot read {}", tmp.display()))?;
    // Content-addressed: cargo fingerprints the -Cprofile-use PATH, not the file's content,
    // so a new profile must get a new name or cargo would not rebuild.
    let hash = format!("{:016x}", fsx::fnv1a64(&bytes));
    let path = ctx.data.join(format!("merged-{hash}.profdata"));
    fsx::rename_content_addressed(&tmp, &path)?;
    // The newest older profile becomes the previous one (the insight stage compares the two
    // trainings); the rest go.
    let mut older: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&ctx.data)?
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("merged-") && name.ends_with(".profdata") && e.path() != path
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    older.sort();
    if let Some((_, newest)) = older.pop() {
        fsx::rename(&newest, &ctx.data.join(PREVIOUS_PROFILE))?;
    }
    for (_, old) in older {
        let _ = std::fs::remove_file(old);
    }
    let show = Cmd::new(tc.llvm_profdata.display().to_string())
        .arg("show")
        .arg(path.display().to_string())
        .read()?;
    let mut info = parse_show(&show, path, hash)?;
    info.fingerprint = training.fingerprint.clone();
    info.skipped_raw = bad;
    info.origin = "trained in this pgo-data (`cargo xtask pgo train`)".to_string();
    eprintln!(
        "merge: {} ({} functions, max function count {}, total count {})",
        info.path.display(),
        info.functions,
        info.max_function_count,
        info.total_count
    );
    if parts.len() > 1 {
        eprintln!(
            "merge: weights {}",
            parts
                .iter()
                .map(|p| format!("{} ×{}", p.workload, p.weight))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    info.parts = parts;
    Ok(MergedProfile(info))
}

/// Each training workload's raw profiles merged alone into `pgo-data/train/<name>.profdata`
/// (what `insight` and `tune` read), with its weight from the config.
fn merge_parts(ctx: &Ctx, tc: &Toolchain, raw: &[PathBuf]) -> Result<Vec<TrainingPart>> {
    let tuned = tuned_weights(ctx)?;
    if tuned.is_some() {
        eprintln!(
            "merge: the weights `cargo xtask tune` chose ({}), not the config's",
            ctx.data.join(TUNED).display()
        );
    }
    let weights = tuned.unwrap_or_else(|| ctx.config.config.train.weights());
    let mut groups: Vec<(String, Vec<&PathBuf>)> = Vec::new();
    for file in raw {
        let name = workload_of(&ctx.raw_dir(), file).unwrap_or_else(|| "train".to_string());
        match groups.iter_mut().find(|(n, _)| *n == name) {
            Some((_, files)) => files.push(file),
            None => groups.push((name, vec![file])),
        }
    }
    let dir = ctx.data.join("train");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut parts = Vec::new();
    for (workload, files) in groups {
        let profile = dir.join(format!("{workload}.profdata"));
        let tmp = fsx::temp_path(&profile);
        let merged = Cmd::new(tc.llvm_profdata.display().to_string())
            .args(["merge", "-o"])
            .arg(tmp.display().to_string())
            .args(files.iter().map(|p| p.display().to_string()))
            .run_with_timeout(Duration::from_secs(300));
        if let Err(err) = merged {
            let _ = std::fs::remove_file(&tmp);
            return Err(err.context(format!(
                "cannot merge the raw profiles of training workload `{workload}`"
            )));
        }
        fsx::rename(&tmp, &profile)?;
        let weight = weights
            .iter()
            .chain(&ctx.config.config.train.weights())
            .find(|(n, _)| *n == workload)
            .map_or(1, |(_, w)| *w);
        parts.push(TrainingPart {
            workload,
            weight,
            profile,
        });
    }
    // In the config's order (the raw files come sorted by name).
    parts.sort_by_key(|p| weights.iter().position(|(n, _)| *n == p.workload));
    // Profiles of workloads no longer trained would mislead a reader of train/.
    for entry in std::fs::read_dir(&dir)?.filter_map(|e| e.ok()) {
        if !parts.iter().any(|p| p.profile == entry.path()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(parts)
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
pub fn show(tc: &Toolchain, path: &Path) -> Result<ProfileInfo> {
    let text = Cmd::new(tc.llvm_profdata.display().to_string())
        .arg("show")
        .arg(path.display().to_string())
        .read()?;
    parse_show(&text, path.to_path_buf(), fsx::file_hash(path)?)
}

/// Why llvm-profdata cannot read this raw profile, or `None` when it can.
fn raw_profile_problem(tc: &Toolchain, file: &Path) -> Option<String> {
    let out = Cmd::new(tc.llvm_profdata.display().to_string())
        .arg("show")
        .arg(file.display().to_string())
        .output();
    match out {
        Ok(out) if out.status.success() => None,
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let line = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("unreadable");
            // "error: <file>: <reason>" -> "<reason>"
            Some(line.rsplit(": ").next().unwrap_or(line).trim().to_string())
        }
        Err(err) => Some(format!("{err:#}")),
    }
}

/// Why the merged profile no longer fits the sources, toolchain or training config, or `None`.
pub(super) fn stale(ctx: &Ctx, tc: &Toolchain, merged: &MergedProfile) -> Result<Option<String>> {
    let now = super::guard::fingerprint(&ctx.sources_hash()?, &tc.rustc_vv, &ctx.config.config)?;
    Ok((merged.0.fingerprint != now).then(|| {
        format!(
            "the profile {} is stale: the sources, toolchain or training config changed since it was trained \
             (fingerprint {} then, {now} now)",
            merged.0.path.display(),
            if merged.0.fingerprint.is_empty() { "unknown" } else { &merged.0.fingerprint }
        )
    }))
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

pub(super) fn load_merged(ctx: &Ctx) -> Result<MergedProfile> {
    let merged: MergedProfile = ctx.load(Stage::Merge)?;
    check_indexed_profile(&merged.0.path)?;
    Ok(merged)
}

/// The PGO build and rustc's PGO warnings about it. Whether the profile applied is judged
/// by [`check_applied`], after the pipeline has recorded the counts.
pub(super) fn optimize(
    ctx: &Ctx,
    tc: &Toolchain,
    merged: &MergedProfile,
) -> Result<OptimizedBuild> {
    pgo_build(ctx, tc, Build::LtoPgo, &merged.0.path)
}

/// A build with an indexed profile (`lto+pgo`, `oracle`), and rustc's PGO warnings about it.
pub(super) fn pgo_build(
    ctx: &Ctx,
    tc: &Toolchain,
    build: Build,
    profile: &Path,
) -> Result<OptimizedBuild> {
    check_indexed_profile(profile)?;
    let (record, diagnostics) = ctx.build(tc, build, build.rustflags(Some(profile)))?;
    if contains_bytes(&record.exe, PROFILE_RUNTIME_MARKER)? {
        bail!(
            "{} contains `__llvm_profile` symbols: the optimised build is instrumented",
            record.exe.display()
        );
    }
    let required = &ctx.config.config.apply_check.required;
    let apply = ApplyReport::from_messages(diagnostics.iter().map(String::as_str), required);
    eprintln!(
        "{}: {} functions without profile data, {} hash mismatches; {} of them in {}",
        build.name(),
        apply.missing_total,
        apply.mismatch_total,
        apply.required_violations.len(),
        required.join(", ")
    );
    Ok(OptimizedBuild {
        build: record,
        apply,
    })
}

/// Fails unless the profile applied to every `apply_check.required` function; with
/// `allow_stale`, hash mismatches alone (a stale profile) only warn.
pub fn check_applied(optimized: &OptimizedBuild, allow_stale: bool) -> Result<()> {
    let a = &optimized.apply;
    if a.applied() {
        return Ok(());
    }
    if allow_stale && a.applied_but_stale() {
        eprintln!(
            "warning: {} required function(s) have a stale profile (hash mismatch); proceeding (--allow-stale)",
            a.required_mismatched
        );
        return Ok(());
    }
    let shown: Vec<&str> = a
        .required_violations
        .iter()
        .take(10)
        .map(String::as_str)
        .collect();
    bail!(
        "the profile did NOT apply to the measured code: {} required function(s) lack profile data or mismatch \
         (first: {}){}. Was the profile trained on this same executable, source and cargo profile? \
         Rerun the whole `cargo xtask pgo`.",
        a.required_violations.len(),
        shown.join(", "),
        if a.unusable.is_empty() {
            String::new()
        } else {
            format!("; rustc said: {}", a.unusable.join("; "))
        }
    );
}

#[cfg(test)]
mod tests {
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
