//! Profiles that were not trained in this run: a stored profile or bundle (`--profile`),
//! bundles trained on several machines and merged (`merge --input DIR[:WEIGHT]`), and the
//! bundle a run exports (`export DIR`, `train --bundle DIR`; `stage/merge.rs` calls these).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail};

use super::bundle::{self, Manifest};
use super::ctx::Ctx;
use super::fresh::Inputs;
use crate::analysis::outputs::ProfileInfo;
use crate::base::exec::Cmd;
use crate::base::fsx;
use crate::toolchain::tools::Toolchain;

/// What `--profile PATH` depends on: the profile's bytes and, for a bundle, its manifest.
pub fn inputs(path: &Path, allow_stale: bool) -> Result<Inputs> {
    let inputs = Inputs::new().text("allow_stale", allow_stale.to_string());
    if path.is_dir() {
        inputs
            .file("profile", &path.join(bundle::PROFILE))?
            .file("manifest", &path.join(bundle::MANIFEST))
    } else {
        inputs.file("profile", path)
    }
}

/// `--profile PATH`: a bundle directory (checked against this tree: stale is refused unless
/// `allow_stale`) or a bare indexed profile (no manifest: only the apply check can tell),
/// copied into pgo-data/ under its content hash, as `merge` would have left it.
pub fn use_profile(
    ctx: &Ctx,
    toolchain: &Toolchain,
    path: &Path,
    allow_stale: bool,
) -> Result<ProfileInfo> {
    let (profile, origin) = if path.is_dir() {
        let (manifest, profile) = bundle::read(path)?;
        let why = manifest.stale_reasons(ctx, toolchain)?;
        if !why.is_empty() {
            let why = why.join("; ");
            if !allow_stale {
                bail!(
                    "the bundle {} is stale: {why}. Train a new one (`cargo xtask pgo`, then `cargo xtask export DIR`), \
                     or pass --allow-stale to build with it anyway (the report then shows the functions without profile \
                     data and the hash mismatches)",
                    path.display()
                );
            }
            eprintln!(
                "warning: the bundle {} is stale: {why}; using it anyway (--allow-stale)",
                path.display()
            );
        }
        (profile, manifest.origin(path))
    } else {
        super::profile::check_indexed_profile(path)?;
        (
            path.to_path_buf(),
            format!(
                "file {} (no manifest: whether it matches these sources is told by the apply check alone)",
                path.display()
            ),
        )
    };
    let mut info = super::profile::show(toolchain, &profile)?;
    let placed = ctx.pgo_data.join(format!("merged-{}.profdata", info.hash));
    let tmp = fsx::temp_path(&placed);
    std::fs::copy(&profile, &tmp).map_err(|e| {
        anyhow::anyhow!(
            "cannot copy {} to {}: {e}",
            profile.display(),
            tmp.display()
        )
    })?;
    fsx::rename_content_addressed(&tmp, &placed)?;
    info.path = placed;
    info.origin = origin;
    eprintln!(
        "profile: {} ({} functions, total count {}), from {}",
        info.path.display(),
        info.functions,
        info.total_count,
        info.origin
    );
    Ok(info)
}

/// The bundles of `merge --input DIR[:WEIGHT] …`, read and checked.
pub fn read_inputs(args: &[String]) -> Result<Vec<(PathBuf, u64, Manifest, PathBuf)>> {
    let mut out = Vec::new();
    for arg in args {
        let (dir, weight) = bundle::parse_input(arg)?;
        let (manifest, profile) = bundle::read(&dir)?;
        out.push((dir, weight, manifest, profile));
    }
    let pairs: Vec<(PathBuf, Manifest)> = out
        .iter()
        .map(|(d, _, m, _)| (d.clone(), m.clone()))
        .collect();
    bundle::check_compatible(&pairs)?;
    Ok(out)
}

pub fn merge_inputs_fingerprint(
    bundles: &[(PathBuf, u64, Manifest, PathBuf)],
    toolchain: &Toolchain,
) -> Result<Inputs> {
    let mut inputs = Inputs::new().text("llvm-profdata", toolchain.llvm_profdata_version.clone());
    for (i, (_, weight, _, profile)) in bundles.iter().enumerate() {
        inputs = inputs
            .file(&format!("input{i}.profile"), profile)?
            .text(&format!("input{i}.weight"), weight.to_string());
    }
    Ok(inputs)
}

/// `merge --input`: the bundles' profiles merged with llvm-profdata's weighted inputs into
/// pgo-data/merged-<hash>.profdata.
pub fn merge_bundles(
    ctx: &Ctx,
    toolchain: &Toolchain,
    bundles: &[(PathBuf, u64, Manifest, PathBuf)],
) -> Result<ProfileInfo> {
    let tmp = fsx::temp_path(&ctx.pgo_data.join("merged.profdata"));
    std::fs::create_dir_all(&ctx.pgo_data)?;
    let cmd = Cmd::new(toolchain.llvm_profdata.display().to_string())
        .args(["merge", "-o"])
        .arg(tmp.display().to_string())
        .args(
            bundles
                .iter()
                .map(|(_, w, _, p)| format!("-weighted-input={w},{}", p.display())),
        );
    if let Err(err) = cmd.run_with_timeout(Duration::from_secs(300)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(err.context("cannot merge the bundles' profiles"));
    }
    let hash = fsx::file_hash(&tmp)?;
    let path = ctx.pgo_data.join(format!("merged-{hash}.profdata"));
    fsx::rename_content_addressed(&tmp, &path)?;
    let mut info = super::profile::show(toolchain, &path)?;
    info.origin = format!("merged from bundles {}", provenance(bundles).join(", "));
    eprintln!(
        "merge: {} ({} functions, total count {}), {}",
        info.path.display(),
        info.functions,
        info.total_count,
        info.origin
    );
    Ok(info)
}

fn provenance(bundles: &[(PathBuf, u64, Manifest, PathBuf)]) -> Vec<String> {
    bundles
        .iter()
        .map(|(d, w, _, _)| format!("{}×{w}", d.display()))
        .collect()
}

/// The bundle of a merge of bundles: the first one's manifest, with the new profile.
pub fn write_merged_bundle(
    dir: &Path,
    info: &ProfileInfo,
    bundles: &[(PathBuf, u64, Manifest, PathBuf)],
) -> Result<()> {
    let first = &bundles[0].2;
    let manifest = Manifest {
        profile: bundle::Summary {
            hash: info.hash.clone(),
            functions: info.functions,
            total_count: info.total_count,
            max_function_count: info.max_function_count,
        },
        merged_from: provenance(bundles),
        ..first.clone()
    };
    bundle::write(dir, &info.path, &manifest)
}
