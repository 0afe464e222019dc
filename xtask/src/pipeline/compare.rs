//! `cargo xtask compare`: the comparison table alone, on a release build of the binary, and
//! on its lto+pgo build where this pgo-data holds a profile trained on these sources.

use anyhow::Result;

use super::ctx::Ctx;
use super::stage::merge::{load_merged, stale};
use crate::base::fsx;
use crate::flags::CompareArgs;
use crate::measure::comparators::run_comparators;
use crate::report::comparators::lines;
use crate::toolchain::build::{Build, Built};
use crate::toolchain::tools::Toolchain;

/// `cargo xtask compare`: the comparison table alone, on a release build of the binary (and
/// its lto+pgo build, where [`lto_pgo`] finds a current profile)
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
    let mut builds = vec![release];
    builds.extend(lto_pgo(&ctx, &toolchain)?);
    let rows = run_comparators(
        &ctx.ws.root,
        &ctx.target_root.join("comparators"),
        compare,
        &builds,
    )?;
    let path = ctx.pgo_data.join("compare.json");
    fsx::write_json(&path, &rows)?;
    println!("\n{}", lines(&rows, compare));
    println!("wrote {}", path.display());
    Ok(())
}

/// The lto+pgo build from this pgo-data's merged profile, when there is one and it was trained
/// on these sources, toolchain and training config; else `None`, saying why on stderr (the
/// table then has the release rows alone).
fn lto_pgo(ctx: &Ctx, toolchain: &Toolchain) -> Result<Option<Built>> {
    let merged = match load_merged(ctx) {
        Ok(merged) => merged,
        Err(err) => {
            eprintln!(
                "compare: no lto+pgo rows: no usable merged profile in {} ({err:#}); `cargo xtask pgo` trains one",
                ctx.pgo_data.display()
            );
            return Ok(None);
        }
    };
    if let Some(why) = stale(ctx, toolchain, &merged)? {
        eprintln!("compare: no lto+pgo rows: {why}; `cargo xtask pgo` trains a current one");
        return Ok(None);
    }
    let flags = Build::LtoPgo.rustflags(Some(&merged.0.path));
    let (built, _) = ctx.build(toolchain, Build::LtoPgo, flags)?;
    Ok(Some(built))
}
