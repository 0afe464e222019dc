//! `instrument`: the `-Cprofile-generate` build, under the same cargo profile as the
//! optimised one, checked to carry LLVM's profiling runtime.

use std::path::PathBuf;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use crate::toolchain::build::{Build, Built};
use crate::flags::PgoArgs;
use crate::pipeline::ctx::Ctx;
use crate::pipeline::fresh::{Artifacts, Inputs};
use crate::pipeline::profile::{PROFILE_RUNTIME_MARKER, contains_bytes};
use crate::pipeline::runner::{self, Timer};
use crate::base::stages::Stage;
use crate::toolchain::tools::Toolchain;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstrumentedBuild(pub Built);

impl Artifacts for InstrumentedBuild {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        self.0.artifacts()
    }
    fn compiled(&self) -> u64 {
        self.0.compiled
    }
}

fn inputs(ctx: &Ctx, toolchain: &Toolchain) -> Result<Inputs> {
    super::build_inputs(ctx, toolchain, Build::Instrumented, &ctx.instrument_rustflags())
}

/// The instrumented build, under the SAME cargo profile as the optimised one.
pub fn run(ctx: &Ctx, toolchain: &Toolchain, timer: &mut Timer) -> Result<InstrumentedBuild> {
    runner::run(ctx, timer, Stage::Instrument, inputs(ctx, toolchain)?, || {
        build(ctx, toolchain)
    })
}

fn build(ctx: &Ctx, toolchain: &Toolchain) -> Result<InstrumentedBuild> {
    let (record, _) = ctx.build(toolchain, Build::Instrumented, ctx.instrument_rustflags())?;
    if !contains_bytes(&record.exe, PROFILE_RUNTIME_MARKER)? {
        bail!(
            "{} has no `__llvm_profile` symbols: -Cprofile-generate did not reach it (a RUSTC_WRAPPER or a cargo config that replaces the flags?)",
            record.exe.display()
        );
    }
    Ok(InstrumentedBuild(record))
}

/// `cargo xtask pgo instrument`.
pub fn alone(ctx: &Ctx, toolchain: &Toolchain, timer: &mut Timer, _args: &PgoArgs) -> Result<()> {
    run(ctx, toolchain, timer).map(drop)
}
