//! `doctor`: rustc and a version-matched llvm-profdata, or nothing works. Cheap, so every
//! command that builds runs it.

use anyhow::Result;

use crate::flags::PgoArgs;
use crate::pipeline::ctx::Ctx;
use crate::pipeline::fresh::Artifacts;
use crate::pipeline::runner::Timer;
use crate::base::stages::Stage;
use crate::toolchain::tools::{self, Toolchain};

/// Checks the toolchain and records it.
pub fn run(ctx: &Ctx, timer: &mut Timer) -> Result<Toolchain> {
    let toolchain = timer.section(Stage::Doctor, || {
        let toolchain = tools::doctor(&ctx.ws.root)?;
        eprintln!(
            "doctor: rustc {} (LLVM {}, host {}); llvm-profdata {} ({})",
            toolchain.rustc.release,
            toolchain.rustc.llvm_version,
            toolchain.rustc.host,
            toolchain.llvm_profdata.display(),
            toolchain.llvm_profdata_version
        );
        eprintln!(
            "doctor: the user's rustflags: {}",
            toolchain.user_rustflags.describe()
        );
        match &toolchain.bolt {
            Some(b) => eprintln!(
                "doctor: llvm-bolt {} ({}), merge-fdata {}",
                b.llvm_bolt.display(),
                b.version,
                b.merge_fdata.display()
            ),
            None => eprintln!(
                "doctor: llvm-bolt not found (the bolt stage needs it: apt-get install {})",
                crate::toolchain::bolt::package(toolchain.rustc.llvm_major)
            ),
        }
        Ok(toolchain)
    })?;
    ctx.record(Stage::Doctor, &toolchain)?;
    Ok(toolchain)
}

/// Doctor's output: not fingerprinted (it always runs), never reused.
impl Artifacts for crate::toolchain::tools::Toolchain {
    fn artifacts(&self) -> Vec<(std::path::PathBuf, Option<String>)> {
        Vec::new()
    }
}

/// `cargo xtask pgo doctor`: nothing more than every command runs first.
pub fn alone(_ctx: &Ctx, _toolchain: &Toolchain, _timer: &mut Timer, _args: &PgoArgs) -> Result<()> {
    Ok(())
}
