//! `cargo xtask compare`: the comparison table alone, on a release build of the binary.

use anyhow::Result;

use super::ctx::Ctx;
use crate::base::fsx;
use crate::flags::CompareArgs;
use crate::measure::comparators::run_comparators;
use crate::report::comparators::lines;
use crate::toolchain::build::Build;

/// `cargo xtask compare`: the comparison table alone, on a release build of the binary
/// (cargo rebuilds it only when stale). The LTO and PGO rows come with `cargo xtask pgo`,
/// whose report holds the same table for all three builds: reusing old pipeline builds here
/// could silently measure stale executables.
pub fn run(flags: CompareArgs) -> Result<()> {
    let ctx = Ctx::open(&flags.common)?;
    let Some(compare) = &ctx.config.settings.compare else {
        anyhow::bail!(
            "the config {} has no `[compare]` section: the comparators run Mighty's mailbox workload in other languages, for `mty-bench` only",
            ctx.config.path.display()
        );
    };
    let toolchain = crate::toolchain::tools::doctor(&ctx.ws.root)?;
    let (release, _) = ctx.build(&toolchain, Build::Release, Build::Release.rustflags(None))?;
    let rows = run_comparators(
        &ctx.ws.root,
        &ctx.target_root.join("comparators"),
        compare,
        &[release],
    )?;
    let path = ctx.pgo_data.join("compare.json");
    fsx::write_json(&path, &rows)?;
    println!("\n{}", lines(&rows, compare));
    println!("wrote {}", path.display());
    Ok(())
}
