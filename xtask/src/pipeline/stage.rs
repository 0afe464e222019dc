//! The pipeline's stages, one file each. A stage's file holds what its output depends on
//! (`inputs`), its run (`run`: the work, or the recorded output while those inputs are
//! unchanged), its own check, its output type and what it prints. `alone` runs it on the
//! recorded outputs of the stages before it (`cargo xtask pgo <STAGE>`). The modules are
//! declared from the stage list in `crate::base::stages`: a new stage is its file, a line there
//! and its call in `pipeline()`.

use std::path::Path;

use anyhow::Result;

use super::ctx::Ctx;
use super::fresh::Inputs;
use super::runner::Timer;
use crate::base::stages::Outcome;
use crate::base::stages::Stage;
use crate::flags::PgoArgs;
use crate::toolchain::build::Build;
use crate::toolchain::tools::Toolchain;

/// A stage's module, and its `alone`, for each line of the stage list (`crate::base::stages`).
macro_rules! stage_files {
    ($($variant:ident $file:ident $help:literal;)*) => {
        $(pub mod $file;)*

        /// `cargo xtask pgo <STAGE>`: the stage alone, on the recorded outputs of the
        /// stages before it.
        pub fn alone(
            stage: Stage,
        ) -> fn(&Ctx, &Toolchain, &mut Timer, &PgoArgs) -> Result<()> {
            match stage {
                $(Stage::$variant => $file::alone,)*
            }
        }
    };
}
crate::base::stages::for_each_stage!(stage_files);

/// What every build depends on: the toolchain, the sources that go into mty-bench, the
/// binary's name, and this build's cargo profile and flags.
pub fn build_inputs(
    ctx: &Ctx,
    toolchain: &Toolchain,
    build: Build,
    rustflags: &str,
) -> Result<Inputs> {
    Ok(Inputs::new()
        .text("toolchain", toolchain.rustc_vv.clone())
        .text("sources", ctx.sources_hash()?)
        .text("binary", ctx.config.settings.binary.clone())
        .text(
            &format!("{}.cargo_profile", build.name()),
            build.cargo_profile(),
        )
        .text(
            &format!("{}.rustflags", build.name()),
            [rustflags]
                .into_iter()
                .chain(build.final_args().iter().copied())
                .collect::<Vec<_>>()
                .join(" "),
        )
        .text(
            "user_rustflags",
            toolchain.user_rustflags.flags.join("\x1f"),
        ))
}

/// Whether the stage just run was up to date (its record reused).
pub fn reused(timer: &Timer) -> bool {
    timer
        .runs
        .last()
        .is_some_and(|r| r.outcome == Outcome::Reused)
}

/// Every file under `dir`, by path and content.
pub fn tree_hash(dir: &Path) -> Result<String> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if !d.is_dir() {
            continue;
        }
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut inputs = Inputs::new();
    for f in &files {
        inputs = inputs.file(&f.strip_prefix(dir).unwrap_or(f).to_string_lossy(), f)?;
    }
    Ok(inputs.fingerprint())
}
