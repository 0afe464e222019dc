//! `baselines`: what every build is compared against: no LTO and no PGO (`release`), and fat
//! LTO without PGO (`lto`).

use std::path::PathBuf;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::toolchain::build::{Build, Built};
use crate::flags::PgoArgs;
use crate::pipeline::ctx::Ctx;
use crate::pipeline::fresh::{Artifacts, Inputs};
use crate::pipeline::runner::{self, Timer};
use crate::base::stages::Stage;
use crate::toolchain::tools::Toolchain;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Baselines {
    pub release: Built,
    pub lto: Built,
}

impl Artifacts for Baselines {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        [&self.release, &self.lto]
            .iter()
            .flat_map(|b| b.artifacts())
            .collect()
    }
    fn compiled(&self) -> u64 {
        self.release.compiled + self.lto.compiled
    }
}

fn inputs(ctx: &Ctx, toolchain: &Toolchain) -> Result<Inputs> {
    Ok(super::build_inputs(ctx, toolchain, Build::Release, "")?
        .text("lto.cargo_profile", Build::Lto.cargo_profile())
        .text("lto.rustflags", ""))
}

/// What we compare against: no LTO and no PGO (`release`); fat LTO without PGO (`lto`).
pub fn run(ctx: &Ctx, toolchain: &Toolchain, timer: &mut Timer) -> Result<Baselines> {
    runner::run(ctx, timer, Stage::Baselines, inputs(ctx, toolchain)?, || {
        let (release, _) = ctx.build(toolchain, Build::Release, Build::Release.rustflags(None))?;
        let (lto, _) = ctx.build(toolchain, Build::Lto, Build::Lto.rustflags(None))?;
        Ok(Baselines { release, lto })
    })
}

/// `cargo xtask pgo baselines`.
pub fn alone(ctx: &Ctx, toolchain: &Toolchain, timer: &mut Timer, _args: &PgoArgs) -> Result<()> {
    run(ctx, toolchain, timer).map(drop)
}
