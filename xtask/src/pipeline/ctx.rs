//! What every stage of a run shares: the config, the workspace, where artifacts and builds
//! go, what is forced, the records of `pgo-data/stages/`, and the lock on pgo-data/ for as
//! long as the run lives.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::Serialize;

use super::{fresh, guard};
use crate::base::fsx;
use crate::base::stages::Stage;
use crate::config::{self, LoadedConfig};
use crate::flags::CommonFlags;
use crate::toolchain::build::{Build, Built};
use crate::toolchain::cargo::{self, Workspace};
use crate::toolchain::tools::Toolchain;

/// Everything the stages share, and the lock on pgo-data/ for as long as it lives.
pub struct Ctx {
    pub config: LoadedConfig,
    pub ws: Workspace,
    /// The pgo-data folder: every artifact, record and report of the runs.
    pub pgo_data: PathBuf,
    pub target_root: PathBuf,
    /// `--force [STAGE]`: this stage and every later one run even when up to date.
    pub force_from: Option<Stage>,
    /// `--remeasure`: measure (with new layouts) and report again even when the builds are
    /// unchanged.
    pub remeasure: bool,
    /// Service drivers already resolved this run: a name to the program run.
    drivers: std::sync::Mutex<std::collections::BTreeMap<String, PathBuf>>,
    _lock: guard::Lock,
}

impl Ctx {
    /// Reads the config and the workspace, then takes pgo-data/ for this run (one run at a
    /// time) and removes what an interrupted run left.
    pub fn open(flags: &CommonFlags) -> Result<Ctx> {
        let manifest = match &flags.manifest_path {
            Some(path) => path.clone(),
            None => cargo::project_root().join("Cargo.toml"),
        };
        Ctx::open_manifest(&manifest, flags)
    }

    /// The same for the workspace at `root` (`--against`'s worktree of another commit).
    pub fn open_at(root: &std::path::Path, flags: &CommonFlags) -> Result<Ctx> {
        Ctx::open_manifest(&root.join("Cargo.toml"), flags)
    }

    /// The same for the workspace of `manifest`: the config is `--config`, else
    /// `profiles/default.toml` beside the manifest; artifacts go to `--pgo-data`, else the
    /// workspace's `pgo-data/`; builds under `--target-dir`, else its target directory's `pgo/`.
    fn open_manifest(manifest: &std::path::Path, flags: &CommonFlags) -> Result<Ctx> {
        if !manifest.is_file() {
            anyhow::bail!(
                "{} is not a file: `--manifest-path` takes the Cargo.toml of the workspace to build",
                manifest.display()
            );
        }
        let manifest = std::path::absolute(manifest)
            .with_context(|| format!("cannot make {} absolute", manifest.display()))?;
        let beside = manifest.parent().expect("a file has a parent");
        let config_path = match &flags.config {
            Some(path) => path.clone(),
            None => {
                let path = beside.join("profiles/default.toml");
                if !path.is_file() {
                    anyhow::bail!(
                        "no pipeline config given, and {} does not exist: give one with `--config FILE` (README, the recipes)",
                        path.display()
                    );
                }
                path
            }
        };
        let config = config::load(&config_path)?;
        let ws = cargo::workspace_at(
            &manifest,
            &config.settings.binary,
            config.settings.package.as_deref(),
        )
        .with_context(|| format!("checking the config {}", config_path.display()))?;
        // Profile paths reach rustc inside RUSTFLAGS, which cargo splits on whitespace; and
        // they must be absolute, since rustc runs in each crate's directory.
        let mut dirs = [
            flags
                .pgo_data
                .clone()
                .unwrap_or_else(|| ws.root.join("pgo-data")),
            flags
                .target_dir
                .clone()
                .unwrap_or_else(|| ws.target_directory.join("pgo")),
        ];
        for path in &mut dirs {
            *path = std::path::absolute(&*path)
                .with_context(|| format!("cannot make {} absolute", path.display()))?;
            if path.to_string_lossy().contains(char::is_whitespace) {
                anyhow::bail!(
                    "{} contains whitespace, which RUSTFLAGS cannot carry; choose another directory",
                    path.display()
                );
            }
        }
        let [data, target_root] = dirs;
        let lock = guard::lock(&data, flags.wait)?;
        for leftover in guard::remove_leftover_temps(&data)? {
            eprintln!(
                "removed {} (left by an interrupted run)",
                leftover.display()
            );
        }
        Ok(Ctx {
            config,
            ws,
            pgo_data: data,
            target_root,
            force_from: None,
            remeasure: false,
            drivers: Default::default(),
            _lock: lock,
        })
    }

    /// The measure config with the validation workloads (`[validate]`) as its workloads,
    /// resolved as [`Ctx::measure_config`]'s are, and no versus pairs: `tune --measure`
    /// measures training mixes on them.
    pub fn validation_measure_config(&self) -> Result<config::Measure> {
        let mut measure = self.measure_with(self.config.settings.validate.workloads.clone())?;
        measure.versus.clear();
        Ok(measure)
    }

    /// `measure` with each workload's directory and stdin file made absolute (against the
    /// workspace root), for the lockstep arms, which may run anywhere, and each service
    /// driver's program resolved.
    pub fn measure_config(&self) -> Result<config::Measure> {
        self.measure_with(self.config.settings.measure.workloads.clone())
    }

    /// `measure` with `workloads`, resolved.
    fn measure_with(&self, workloads: Vec<config::Workload>) -> Result<config::Measure> {
        let mut measure = self.config.settings.measure.clone();
        measure.workloads = workloads;
        measure.copies_dir = Some(self.pgo_data.join("copies"));
        for w in &mut measure.workloads {
            *w = w.resolved(&self.ws.root);
        }
        self.resolve_drivers(&mut measure.workloads)?;
        Ok(measure)
    }

    /// The hash of the sources the binary is built from ([`fresh::sources`]), this run's
    /// target directories and artifacts left out.
    pub fn sources_hash(&self) -> Result<String> {
        fresh::sources(
            &self.ws.root,
            &self.ws.source_dirs,
            &[
                self.ws.target_directory.clone(),
                self.target_root.clone(),
                self.pgo_data.clone(),
            ],
        )
    }

    /// The instrumented build's flags: `-Cprofile-generate`, and with `train.continuous`
    /// what LLVM's continuous mode needs on Linux (counters relocated at run time; value
    /// profiles off, which it cannot keep: docs/findings.md).
    pub fn instrument_rustflags(&self) -> String {
        let flags = Build::Instrumented.rustflags(Some(&self.raw_dir()));
        if self.config.settings.train.continuous {
            format!("{flags} -Cllvm-args=-runtime-counter-relocation -Cllvm-args=-disable-vp=true")
        } else {
            flags
        }
    }

    /// `LLVM_PROFILE_FILE` for an instrumented run writing into `dir`: one file per binary
    /// and process, kept in step with its counters under `train.continuous` (`%c`).
    pub fn profile_pattern(&self, dir: &std::path::Path) -> String {
        let continuous = if self.config.settings.train.continuous {
            "%c"
        } else {
            ""
        };
        format!("{}/{continuous}%m_%p.profraw", dir.display())
    }

    /// Each service workload's driver program resolved: a bin of the workspace built (release,
    /// no profile flags, in `<target-root>/driver`), a path with a `/` made absolute against
    /// the workspace, anything else left to PATH.
    pub fn resolve_drivers(&self, workloads: &mut [config::Workload]) -> Result<()> {
        for w in workloads {
            if let Some(service) = &mut w.service
                && let Some(program) = service.driver.first_mut()
            {
                *program = self.driver_program(program)?.display().to_string();
            }
        }
        Ok(())
    }

    fn driver_program(&self, name: &str) -> Result<PathBuf> {
        if name.contains('/') {
            return Ok(self.ws.root.join(name));
        }
        let mut known = self.drivers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(path) = known.get(name) {
            return Ok(path.clone());
        }
        let manifest = self.ws.root.join("Cargo.toml");
        let metadata = cargo_metadata::MetadataCommand::new()
            .manifest_path(&manifest)
            .no_deps()
            .exec()
            .with_context(|| format!("reading the workspace at {}", manifest.display()))?;
        let package = metadata.workspace_packages().into_iter().find(|p| {
            p.targets
                .iter()
                .any(|t| t.name == name && t.kind.contains(&cargo_metadata::TargetKind::Bin))
        });
        let path = match package {
            None => PathBuf::from(name),
            Some(package) => {
                let dir = self.target_root.join("driver");
                crate::base::exec::Cmd::new("cargo")
                    .args(["build", "--release", "--manifest-path"])
                    .arg(manifest.display().to_string())
                    .args(["-p", package.name.as_str(), "--bin", name, "--target-dir"])
                    .arg(dir.display().to_string())
                    .read()
                    .with_context(|| format!("building the service driver `{name}`"))?;
                dir.join("release").join(name)
            }
        };
        known.insert(name.to_string(), path.clone());
        Ok(path)
    }

    pub fn stage_file(&self, stage: Stage) -> PathBuf {
        self.pgo_data
            .join("stages")
            .join(format!("{}.json", stage.name()))
    }
    pub fn raw_dir(&self) -> PathBuf {
        self.pgo_data.join("raw")
    }
    pub fn logs(&self) -> PathBuf {
        self.pgo_data.join("logs")
    }
    /// A stage's recorded output, for running a later stage alone.
    pub fn load<T: serde::de::DeserializeOwned>(&self, stage: Stage) -> Result<T> {
        fsx::read_json(
            &self.stage_file(stage),
            &format!("output of the `{}` stage", stage.name()),
        )
    }
    /// Records a stage's output in `pgo-data/stages/<stage>.json`.
    pub fn record<T: Serialize>(&self, stage: Stage, out: &T) -> Result<()> {
        fsx::write_json(&self.stage_file(stage), out)
    }
    /// A stage's recorded output when there is one (a stage that was skipped has none).
    pub fn load_optional<T: serde::de::DeserializeOwned>(&self, stage: Stage) -> Result<Option<T>> {
        self.stage_file(stage)
            .is_file()
            .then(|| self.load(stage))
            .transpose()
    }
    /// Removes a stage's records: what they describe is not this run's.
    pub fn forget(&self, stage: Stage) -> Result<()> {
        for file in [self.stage_file(stage), self.inputs_file(stage)] {
            if file.exists() {
                std::fs::remove_file(&file)
                    .with_context(|| format!("cannot remove {}", file.display()))?;
            }
        }
        Ok(())
    }
    pub fn inputs_file(&self, stage: Stage) -> PathBuf {
        self.pgo_data
            .join("stages")
            .join(format!("{}.inputs.json", stage.name()))
    }
    /// The inputs the stage's recorded output was made from; `None` when there is no
    /// readable record (it then runs).
    pub fn load_inputs(&self, stage: Stage) -> Option<fresh::Recorded> {
        fsx::read_json(&self.inputs_file(stage), "stage inputs").ok()
    }
    pub fn record_inputs(&self, stage: Stage, inputs: &fresh::Recorded) -> Result<()> {
        fsx::write_json(&self.inputs_file(stage), inputs)
    }
    /// Whether `stage` must run although it may be up to date.
    pub fn forced(&self, stage: Stage) -> bool {
        let index = |s: Stage| Stage::ALL.iter().position(|x| *x == s);
        self.force_from
            .is_some_and(|from| index(stage) >= index(from))
            || (self.remeasure && matches!(stage, Stage::Measure | Stage::Layout))
    }

    /// Builds `build` with `rustflags` in its own target folder.
    pub fn build(
        &self,
        toolchain: &Toolchain,
        build: Build,
        rustflags: String,
    ) -> Result<(Built, Vec<String>)> {
        self.build_in(toolchain, build, rustflags, &self.target_root)
    }

    /// [`Ctx::build`] under another root of target folders (`tune --measure`'s mixes).
    pub fn build_in(
        &self,
        toolchain: &Toolchain,
        build: Build,
        rustflags: String,
        target_root: &std::path::Path,
    ) -> Result<(Built, Vec<String>)> {
        let flags = crate::toolchain::rustflags::compose(&toolchain.user_rustflags, &rustflags);
        let out = cargo::build(
            &self.ws,
            &toolchain.rustc.host,
            build,
            &flags,
            target_root,
            &self.logs(),
        )?;
        // The final crate's own flags (`cargo rustc -- …`) are part of how it was built.
        let flags: Vec<String> = flags
            .into_iter()
            .chain(build.final_args().iter().map(|a| a.to_string()))
            .collect();
        let mut built = Built::new(build, out.exe, flags.join(" "));
        built.rustflags_exact = flags;
        built.user_rustflags_source = toolchain.user_rustflags.source.clone();
        built.hash = fsx::file_hash(&built.exe)?;
        built.compiled = out.compiled;
        Ok((built, out.diagnostics))
    }
}
