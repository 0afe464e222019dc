//! Cargo: the workspace layout (cargo_metadata) and builds whose JSON message stream gives
//! both the built executable's path and rustc's diagnostics (the PGO warnings).

use std::collections::{BTreeSet, VecDeque};
use std::io::BufReader;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use cargo_metadata::{DependencyKind, Message, MetadataCommand, PackageId, TargetKind};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

/// The progress lines of every build, drawn together.
fn bars() -> &'static MultiProgress {
    static BARS: std::sync::OnceLock<MultiProgress> = std::sync::OnceLock::new();
    BARS.get_or_init(MultiProgress::new)
}

use crate::base::exec::{self, Cmd};
use crate::toolchain::build::Build;

/// What the pipeline needs to know about the workspace.
#[derive(Debug, Clone)]
pub struct Workspace {
    pub root: PathBuf,
    /// Cargo's target directory of the workspace (`target/` unless configured otherwise).
    pub target_directory: PathBuf,
    /// The directories of the workspace's own packages the binary is built from (itself and
    /// its path dependencies, none inside another): what the sources hash reads.
    pub source_dirs: Vec<PathBuf>,
    /// The package whose bin target is the configured binary.
    pub package: String,
    pub binary: String,
    /// How many crates a build of `package` compiles (for the progress bar).
    pub crate_count: u64,
    /// Whether the workspace's manifest defines the `release-pgo` profile; where it does not,
    /// each build defines it on cargo's command line (`PGO_PROFILE`).
    pub defines_pgo_profile: bool,
}

/// The `release-pgo` profile, for a workspace that does not define it: release with fat LTO
/// and one codegen unit, as Mighty's own Cargo.toml has it (cargo `--config` values).
const PGO_PROFILE: [&str; 3] = [
    "profile.release-pgo.inherits=\"release\"",
    "profile.release-pgo.lto=\"fat\"",
    "profile.release-pgo.codegen-units=1",
];

/// The workspace root: xtask lives at `<root>/xtask`.
pub fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits one level below the workspace root")
        .to_path_buf()
}

/// The `Cargo.toml` of the workspace around the current directory: what the installed
/// subcommand `cargo mty` works on when `--manifest-path` is not given (`cargo xtask` works
/// on this one).
pub fn manifest_here() -> Result<PathBuf> {
    let found = Cmd::new("cargo")
        .args(["locate-project", "--workspace", "--message-format", "plain"])
        .output_unlogged()?;
    if !found.status.success() {
        bail!(
            "no Cargo.toml in {} or above it: run `cargo mty` inside a workspace, or give `--manifest-path`",
            std::env::current_dir().unwrap_or_default().display()
        );
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&found.stdout).trim()))
}

/// Reads the workspace of `manifest` (this one, another one given by `--manifest-path`, or
/// `--against`'s worktree of another commit) and finds the package that builds `binary`
/// (of `package`, when given).
pub fn workspace_at(manifest: &Path, binary: &str, package: Option<&str>) -> Result<Workspace> {
    let metadata = MetadataCommand::new()
        .manifest_path(manifest)
        .exec()
        .with_context(|| {
            format!(
                "cannot read the workspace of {} with `cargo metadata`",
                manifest.display()
            )
        })?;
    let members = metadata.workspace_packages();
    let mut bins = Vec::new();
    let mut found = Vec::new();
    for pkg in &members {
        for target in pkg
            .targets
            .iter()
            .filter(|t| t.kind.contains(&TargetKind::Bin))
        {
            bins.push(format!("{} (package {})", target.name, pkg.name));
            if target.name == binary && package.is_none_or(|p| p == pkg.name.as_str()) {
                found.push((*pkg).clone());
            }
        }
    }
    let pkg = match found.as_slice() {
        [pkg] => pkg,
        [] => bail!(
            "`binary = \"{binary}\"`{} is not a bin target of the workspace {} (its bins: {})",
            package.map_or(String::new(), |p| format!(" of `package = \"{p}\"`")),
            metadata.workspace_root,
            bins.join(", ")
        ),
        several => bail!(
            "`binary = \"{binary}\"` is a bin target of {} packages ({}): name one with `package`",
            several.len(),
            several
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let deps = metadata
        .resolve
        .as_ref()
        .map(|resolve| reachable(resolve, &pkg.id))
        .unwrap_or_else(|| BTreeSet::from([pkg.id.clone()]));
    let mut dirs: Vec<PathBuf> = metadata
        .packages
        .iter()
        .filter(|p| p.source.is_none() && deps.contains(&p.id))
        .filter_map(|p| {
            p.manifest_path
                .parent()
                .map(|d| d.as_std_path().to_path_buf())
        })
        .collect();
    dirs.sort();
    // Sorted, a directory comes before those inside it.
    let mut source_dirs: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        if !source_dirs.iter().any(|d| dir.starts_with(d)) {
            source_dirs.push(dir);
        }
    }
    let root = metadata.workspace_root.into_std_path_buf();
    let root_manifest = root.join("Cargo.toml");
    let text = std::fs::read_to_string(&root_manifest)
        .with_context(|| format!("cannot read {}", root_manifest.display()))?;
    let defines_pgo_profile = text
        .parse::<toml::Table>()
        .with_context(|| format!("cannot parse {}", root_manifest.display()))?
        .get("profile")
        .and_then(|p| p.get("release-pgo"))
        .is_some();
    Ok(Workspace {
        root,
        defines_pgo_profile,
        target_directory: metadata.target_directory.into_std_path_buf(),
        source_dirs,
        package: pkg.name.to_string(),
        binary: binary.to_string(),
        crate_count: deps.len() as u64,
    })
}

/// Packages reachable from `start` through normal and build dependencies.
fn reachable(resolve: &cargo_metadata::Resolve, start: &PackageId) -> BTreeSet<PackageId> {
    let mut seen = BTreeSet::from([start.clone()]);
    let mut queue = VecDeque::from([start.clone()]);
    while let Some(id) = queue.pop_front() {
        let Some(node) = resolve.nodes.iter().find(|n| n.id == id) else {
            continue;
        };
        for dep in &node.deps {
            let wanted = dep
                .dep_kinds
                .iter()
                .any(|k| matches!(k.kind, DependencyKind::Normal | DependencyKind::Build));
            if wanted && seen.insert(dep.pkg.clone()) {
                queue.push_back(dep.pkg.clone());
            }
        }
    }
    seen
}

/// What cargo produced for one build.
pub struct CargoOutput {
    pub exe: PathBuf,
    /// The text of every diagnostic rustc emitted while building (all crates; cargo replays
    /// a fresh crate's cached ones).
    pub diagnostics: Vec<String>,
    /// Artifacts cargo compiled rather than found fresh.
    pub compiled: u64,
}

/// A copy of the target folder `from` at `to`, when `to` does not exist yet and `from` does
/// (made under a temporary name, then renamed: never half a folder).
fn seed(from: &Path, to: &Path) -> Result<()> {
    if to.exists() || !from.is_dir() {
        return Ok(());
    }
    // What an interrupted seeding left (`.<name>.tmp-<pid>`): tens of megabytes each.
    let stale = format!(
        ".{}.tmp-",
        to.file_name().unwrap_or_default().to_string_lossy()
    );
    if let Ok(entries) = std::fs::read_dir(to.parent().unwrap_or(Path::new("."))) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&stale) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let tmp = crate::base::fsx::temp_path(to);
    Cmd::new("cp")
        .args([
            "-a".to_string(),
            from.display().to_string(),
            tmp.display().to_string(),
        ])
        .read()
        .with_context(|| format!("cannot seed {} from {}", to.display(), from.display()))?;
    std::fs::rename(&tmp, to)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), to.display()))
}

/// `cargo build` of the configured binary for `host`, with a progress bar of crates compiled
/// (`cargo rustc` when the build has [`Build::final_args`]).
///
/// `--target <host>` keeps RUSTFLAGS away from build scripts and proc-macros (they are
/// built for the host without `--target`'s flags), so only target code is instrumented.
/// `build` gets a target directory of its own under `target_root`, so builds do not rebuild
/// one another; `rustflags` are all the flags it is built with.
pub fn build(
    ws: &Workspace,
    host: &str,
    build: Build,
    rustflags: &[String],
    target_root: &Path,
    log_dir: &Path,
) -> Result<CargoOutput> {
    if let Some(from) = build.seeded_from() {
        seed(
            &target_root.join(from.target_folder()),
            &target_root.join(build.target_folder()),
        )?;
    }
    let final_args: Vec<String> = build.final_args().iter().map(|a| a.to_string()).collect();
    cargo_build(
        ws,
        host,
        build,
        rustflags,
        &target_root.join(build.target_folder()),
        &final_args,
        &log_dir.join(format!("build-{}.log", build.target_folder())),
    )
}

/// `build` again in a target folder of its own (`<folder>-layout`, seeded from the build's),
/// its final crate compiled with `-Csave-temps` (its object files kept) and rustc's linker
/// command written to [`crate::toolchain::relink::link_args_file`]: the link, ready to be repeated with
/// other flags. Same flags otherwise, so the same executable (the caller checks).
pub fn relinkable(
    ws: &Workspace,
    host: &str,
    build: Build,
    rustflags: &[String],
    target_root: &Path,
    log_dir: &Path,
) -> Result<(CargoOutput, crate::toolchain::relink::LinkLine)> {
    let dir = target_root.join(format!("{}-layout", build.target_folder()));
    seed(&target_root.join(build.target_folder()), &dir)?;
    let file = crate::toolchain::relink::link_args_file(&dir, &ws.binary);
    let final_args: Vec<String> = build
        .final_args()
        .iter()
        .map(|a| a.to_string())
        .chain([
            "-Csave-temps".to_string(),
            format!("--print=link-args={}", file.display()),
        ])
        .collect();
    let out = cargo_build(
        ws,
        host,
        build,
        rustflags,
        &dir,
        &final_args,
        &log_dir.join(format!("build-{}-layout.log", build.target_folder())),
    )?;
    let text = std::fs::read_to_string(&file).with_context(|| {
        format!(
            "cannot read rustc's linker command {} (written by `--print=link-args`)",
            file.display()
        )
    })?;
    let line = crate::toolchain::relink::LinkLine::parse(&text)
        .with_context(|| format!("reading rustc's linker command {}", file.display()))?;
    Ok((out, line))
}

fn cargo_build(
    ws: &Workspace,
    host: &str,
    build: Build,
    rustflags: &[String],
    target_dir: &Path,
    final_args: &[String],
    log: &Path,
) -> Result<CargoOutput> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    // In the workspace's root, as `cargo build` there: its `.cargo/config.toml` and
    // `rust-toolchain.toml` apply whichever directory xtask was started from.
    let cmd = Cmd::new(cargo)
        .cwd(&ws.root)
        .arg(if final_args.is_empty() {
            "build"
        } else {
            "rustc"
        })
        .args(["--profile", build.cargo_profile(), "--target", host])
        .arg("--target-dir")
        .arg(target_dir.display().to_string())
        .args(["--package", &ws.package, "--bin", &ws.binary])
        .args([
            "--manifest-path",
            &ws.root.join("Cargo.toml").display().to_string(),
        ])
        .arg("--message-format=json")
        .args(
            PGO_PROFILE
                .iter()
                .filter(|_| !ws.defines_pgo_profile && build.cargo_profile() == "release-pgo")
                .flat_map(|value| ["--config", value]),
        )
        .args(if final_args.is_empty() {
            Vec::new()
        } else {
            std::iter::once("--".to_string())
                .chain(final_args.iter().cloned())
                .collect()
        })
        // Every flag in the one source cargo reads first: the user's own (found as cargo
        // would, `rustflags.rs`) and the pipeline's, nothing dropped silently.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags.join("\x1f"));
    let bar = bars()
        .add(ProgressBar::new(ws.crate_count))
        .with_prefix(build.name())
        .with_style(
            ProgressStyle::with_template(
                "{prefix:>12} [{bar:30}] {pos}/{len} crates {elapsed} {wide_msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
    let started = std::time::Instant::now();
    let mut child = cmd.spawn_streaming(log)?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut exe = None;
    let mut diagnostics = Vec::new();
    let mut compiled = 0;
    let read = (|| -> Result<()> {
        for message in Message::parse_stream(BufReader::new(stdout)) {
            match message.with_context(|| {
                format!("cannot read cargo's JSON output of `{}`", cmd.display())
            })? {
                Message::CompilerArtifact(artifact) => {
                    compiled += u64::from(!artifact.fresh);
                    if !artifact.target.kind.contains(&TargetKind::CustomBuild) {
                        if bar.position() >= bar.length().unwrap_or(0) {
                            bar.inc_length(1);
                        }
                        bar.inc(1);
                        bar.set_message(artifact.target.name.clone());
                    }
                    if artifact.target.name == ws.binary {
                        exe = artifact.executable.map(|p| p.into_std_path_buf());
                    }
                }
                Message::CompilerMessage(msg) => diagnostics.push(msg.message.message),
                _ => {}
            }
        }
        Ok(())
    })();
    if read.is_err() {
        let _ = child.kill();
    }
    let reaped = exec::reap(&child);
    bar.finish_and_clear();
    read.with_context(|| format!("cargo's log: {}", log.display()))?;
    let reaped = reaped.with_context(|| format!("cannot wait for `{}`", cmd.display()))?;
    if !reaped.status.success() {
        let stderr = std::fs::read_to_string(log).unwrap_or_default();
        bail!(
            "`{}` {} (full log: {}){}",
            cmd.display(),
            exec::describe_status(&reaped.status),
            log.display(),
            exec::stderr_tail(&stderr)
        );
    }
    // What it cost, when it compiled: a fresh build keeps the record of the one that did.
    if compiled > 0
        && let Err(err) = crate::toolchain::cost::record(
            target_dir,
            &crate::toolchain::cost::Compiled {
                wall_secs: started.elapsed().as_secs_f64(),
                peak_rss_bytes: reaped.peak_rss_bytes,
                crates: compiled,
                unix_secs: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
            },
        )
    {
        eprintln!(
            "warning: the cost of building {} is not recorded: {err:#}",
            build.name()
        );
    }
    let exe = exe.with_context(|| {
        format!(
            "`{}` succeeded but reported no executable for `{}`",
            cmd.display(),
            ws.binary
        )
    })?;
    eprintln!(
        "{:>12} {} ({} diagnostics; {})",
        build.name(),
        exe.display(),
        diagnostics.len(),
        match compiled {
            0 => "cargo: fresh".to_string(),
            n => format!("cargo compiled {n} crate(s)"),
        }
    );
    Ok(CargoOutput {
        exe,
        diagnostics,
        compiled,
    })
}
