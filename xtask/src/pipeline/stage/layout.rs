//! The `layout` stage: each build of `layout.builds` relinked K times with its functions in
//! another order, so that the measurement can tell an optimisation from layout luck.
//!
//! 1. The build again in `target/pgo/<folder>-layout/` (seeded from its own folder, so only
//!    the final crate compiles), with `-Csave-temps` and rustc's linker command written out
//!    (`cargo::relinkable`).
//! 2. That linker command run again with no extra flag must give the measured executable
//!    byte for byte: the relink reproduces the build, so a variant differs by its flag alone.
//! 3. Variant k: the same link with `-Wl,--shuffle-sections=.text*=<seed + k>` (lld, rustc's
//!    bundled linker, shuffles the input sections of functions; each function's own code and
//!    internal alignment stay as they were).
//! 4. Each variant is checked: at least half of its functions at another address than the
//!    base's, the same functions, and (with valgrind) the same instructions per message within
//!    `layout.max_instructions_change_pct`. A variant that fails is refused: the floor would
//!    measure something else than layout.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::baselines::Baselines;
use super::measure::Arms;
use super::optimize::OptimizedBuild;
use crate::toolchain::build::Built;
use crate::config::Workload;
use crate::flags::PgoArgs;
use crate::base::fsx;
use crate::analysis::outputs::{LayoutSet, LayoutVariant, LayoutVariants};
use crate::pipeline::ctx::Ctx;
use crate::pipeline::fresh::{Artifacts, Inputs};
use crate::pipeline::runner::{self, Timer};
use crate::toolchain::relink::{self, Moved};
use crate::base::stages::Stage;
use crate::toolchain::tools::Toolchain;

/// The linker flag of a variant, `{seed}` replaced by its seed.
const SHUFFLE: &str = "-Wl,--shuffle-sections=.text*={seed}";
/// Fewer of the functions at another address than this (%) is not another layout.
const MIN_MOVED_PCT: f64 = 50.0;

impl Artifacts for LayoutVariants {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        self.arms()
            .map(|(_, b)| (b.exe.clone(), Some(b.hash.clone())))
            .collect()
    }
}

/// The relinked builds by content, the toolchain (its linker), the layout config and the
/// instruction count's (the variants are checked with it).
fn inputs(ctx: &Ctx, toolchain: &Toolchain, builds: &[Built]) -> Result<Inputs> {
    let cfg = &ctx.config.settings;
    let mut inputs = Inputs::new()
        .text("toolchain", toolchain.rustc_vv.clone())
        .json("config.layout", &cfg.layout)
        // The workloads it measures on: `check.workloads` by default, not the rest of `check`.
        .json("layout.workloads", &cfg.layout.workloads_of(&cfg.check))
        .json("config.measure.workloads", &cfg.measure.workloads)
        .json("config.instructions", &cfg.instructions);
    for b in builds
        .iter()
        .filter(|b| cfg.layout.builds.iter().any(|n| n == b.name()))
    {
        inputs = inputs.built(b)?;
    }
    Ok(inputs)
}

/// `layout.builds` relinked in `layout.variants` other function orders, each checked to
/// differ from its build in layout only (`layout.rs`); `None` when `layout.variants = 0`.
pub fn run(
    ctx: &Ctx,
    toolchain: &Toolchain,
    timer: &mut Timer,
    optimized: &OptimizedBuild,
    base: &Baselines,
) -> Result<Option<LayoutVariants>> {
    let cfg = &ctx.config.settings;
    let why = if cfg.layout.variants == 0 {
        Some("`layout.variants = 0`")
    } else if cfg.layout.workloads_of(&cfg.check).is_empty() {
        Some(
            "no workload to measure the variants on (`layout.workloads`, else `check.workloads`, is empty)",
        )
    } else {
        None
    };
    if let Some(why) = why {
        ctx.forget(Stage::Layout)?;
        timer.skip(Stage::Layout, why);
        return Ok(None);
    }
    let builds = Arms::builds(optimized, base, None, None);
    runner::run(ctx, timer, Stage::Layout, inputs(ctx, toolchain, &builds)?, || {
        variants(ctx, toolchain, &builds)
    })
    .map(Some)
}

/// The variants of every build of `layout.builds`, from the measured `builds`.
fn variants(ctx: &Ctx, toolchain: &Toolchain, builds: &[Built]) -> Result<LayoutVariants> {
    let cfg = &ctx.config.settings;
    let workloads = cfg.layout.workloads_of(&cfg.check).to_vec();
    let (dir, counted) = prepare(ctx, &workloads)?;
    let mut sets = Vec::new();
    for name in &cfg.layout.builds {
        let base = builds.iter().find(|b| b.name() == name).with_context(|| {
            format!("`layout.builds` names `{name}`, which this run did not build")
        })?;
        sets.push(set(ctx, toolchain, base, counted, &dir)?);
    }
    Ok(LayoutVariants { sets, workloads })
}

/// The variants' folder, made, and the workload whose instructions per message they are
/// checked on: the first of `workloads` that counts them, else the first measured one.
fn prepare<'a>(ctx: &'a Ctx, workloads: &[String]) -> Result<(PathBuf, &'a Workload)> {
    let dir = ctx.pgo_data.join("layout");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let measured = &ctx.config.settings.measure.workloads;
    let counted = measured
        .iter()
        .find(|w| workloads.contains(&w.name) && w.instructions != Some(false))
        .or_else(|| measured.first())
        .context("the config measures no workload")?;
    Ok((dir, counted))
}

fn set(
    ctx: &Ctx,
    toolchain: &Toolchain,
    base: &Built,
    counted: &Workload,
    dir: &Path,
) -> Result<LayoutSet> {
    let cfg = &ctx.config.settings;
    let layout = &cfg.layout;
    let callgrind = dir.join("callgrind");
    let base_instructions = instructions(base, counted, ctx, &callgrind).0;
    // New layouts each time the stage runs, unless `layout.seed` is given.
    let first = layout
        .seed
        .unwrap_or_else(|| (stats::fresh_seed() >> 33) as u32);
    let mut variants = Vec::new();
    for (seed, arm, built, moved) in
        shuffled(ctx, toolchain, base, &ctx.target_root, dir, layout.variants, first)?
    {
        let (count, note) = instructions(&built, counted, ctx, &callgrind);
        if let (Some(a), Some(b)) = (base_instructions, count) {
            let change = 100.0 * (b - a) / a;
            if change.abs() > layout.max_instructions_change_pct {
                bail!(
                    "the layout variant {arm} ({}) runs {b:.1} instructions per message of `{}` against {a:.1} for {}: \
                     {change:+.2} %, beyond `layout.max_instructions_change_pct` ({} %); the relink changed more than the layout",
                    built.exe.display(),
                    counted.name,
                    base.name(),
                    layout.max_instructions_change_pct
                );
            }
        }
        eprintln!(
            "layout: {arm}: {} of {} functions moved ({:.0} %){}",
            moved.moved,
            moved.common,
            moved.pct(),
            match (base_instructions, count) {
                (Some(a), Some(b)) => format!(
                    "; {b:.1} instructions per message of `{}` against {a:.1}",
                    counted.name
                ),
                _ => String::new(),
            }
        );
        variants.push(LayoutVariant {
            arm,
            seed,
            built,
            moved,
            instructions: count,
            instructions_note: note,
        });
    }
    Ok(LayoutSet {
        build: base.name().to_string(),
        base_hash: base.hash.clone(),
        flag: SHUFFLE.to_string(),
        instructions_workload: counted.name.clone(),
        base_instructions,
        variants,
    })
}

/// `base` relinked `count` times in other function orders (seeds `first + 1` on), under
/// `target_root` (where `base` was built) into `dir`: (seed, arm, variant, functions moved).
/// 1. The build again in `<folder>-layout/` (seeded from its own folder, so only the final
///    crate compiles), with `-Csave-temps` and rustc's linker command written out.
/// 2. That linker command run again with no extra flag must give `base` byte for byte.
/// 3. Variant k: the same link with `--shuffle-sections`, refused unless another layout
///    ([`check_moved`]).
pub fn shuffled(
    ctx: &Ctx,
    toolchain: &Toolchain,
    base: &Built,
    target_root: &Path,
    dir: &Path,
    count: u32,
    first: u32,
) -> Result<Vec<(u32, String, Built, Moved)>> {
    // 1. Its flags exactly as built (the final crate's own flags come back from `final_args`).
    let own = base.build.final_args().len();
    let flags = &base.rustflags_exact[..base.rustflags_exact.len() - own];
    let (_, line) = crate::toolchain::cargo::relinkable(
        &ctx.ws,
        &toolchain.rustc.host,
        base.build,
        flags,
        target_root,
        &ctx.logs(),
    )?;
    // 2. The relink reproduces the measured executable.
    let folder = base.build.target_folder();
    let again = dir.join(format!("{folder}.relinked"));
    line.relink(&again, &[])?;
    let hash = fsx::file_hash(&again)?;
    if hash != base.hash {
        bail!(
            "relinking {} without a layout flag did not reproduce the measured executable {} \
             (content {} against {}): a variant would differ by more than its layout; \
             rebuild with `cargo xtask pgo --force baselines`",
            base.name(),
            base.exe.display(),
            &hash[..hash.len().min(12)],
            &base.hash[..base.hash.len().min(12)]
        );
    }
    let base_functions = relink::function_addresses(&base.exe)?;
    let mut out = Vec::new();
    for k in 1..=count {
        let seed = first.wrapping_add(k);
        let flag = SHUFFLE.replace("{seed}", &seed.to_string());
        let exe = dir.join(format!("{folder}.L{k}"));
        let tmp = fsx::temp_path(&exe);
        line.relink(&tmp, std::slice::from_ref(&flag))
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            })?;
        fsx::rename(&tmp, &exe)?;
        let arm = crate::measure::layout_arm(base.name(), k);
        let mut built = base.clone();
        built.exe = exe;
        built.hash = fsx::file_hash(&built.exe)?;
        built.rustflags_exact.push(flag.clone());
        built.rustflags = built.rustflags_exact.join(" ");
        let moved = check_moved(&base_functions, &built.exe, &arm)?;
        out.push((seed, arm, built, moved));
    }
    Ok(out)
}

/// The variant's functions against its base's: refused unless at least half of them moved
/// and both define the same functions.
pub(super) fn check_moved(
    base: &std::collections::BTreeMap<String, Vec<u64>>,
    exe: &Path,
    arm: &str,
) -> Result<Moved> {
    let moved = Moved::between(base, &relink::function_addresses(exe)?);
    if moved.pct() < MIN_MOVED_PCT {
        bail!(
            "the layout variant {arm} ({}) is not another layout: {} of its {} functions moved ({:.1} %, fewer than {MIN_MOVED_PCT} %); \
             is the linker lld (rustc's default here), and did it take `--shuffle-sections`?",
            exe.display(),
            moved.moved,
            moved.common,
            moved.pct()
        );
    }
    if moved.only_one > 0 {
        bail!(
            "the layout variant {arm} ({}) does not define the same functions as its base ({} differ): it is another program, not another layout",
            exe.display(),
            moved.only_one
        );
    }
    Ok(moved)
}

/// Instructions per message of `workload` on `built` (callgrind, kept by content hash), or
/// why not.
fn instructions(
    built: &Built,
    workload: &Workload,
    ctx: &Ctx,
    out_dir: &Path,
) -> (Option<f64>, Option<String>) {
    let counted = crate::measure::instructions::measure(
        std::slice::from_ref(built),
        std::slice::from_ref(workload),
        &ctx.config.settings.instructions,
        out_dir,
    );
    match counted.into_iter().next() {
        Some(c) => (c.per_message, c.note),
        None => (None, Some("not counted".to_string())),
    }
}

/// `cargo xtask pgo layout`: of the recorded builds.
pub fn alone(ctx: &Ctx, toolchain: &Toolchain, timer: &mut Timer, _args: &PgoArgs) -> Result<()> {
    let optimized: OptimizedBuild = ctx.load(Stage::Optimize)?;
    let base: Baselines = ctx.load(Stage::Baselines)?;
    run(ctx, toolchain, timer, &optimized, &base).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolchain::relink::LinkLine;

    /// A real program compiled by rustc with its linker command kept, relinked for real: the
    /// relink without a flag reproduces it byte for byte and is refused as a layout variant;
    /// the shuffled relink is accepted.
    #[test]
    fn a_relink_that_did_not_change_the_layout_is_refused() {
        let dir = std::env::temp_dir().join(format!("xtask-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("hello.rs");
        std::fs::write(
            &src,
            "fn main() { let v: Vec<u64> = (0..10).collect(); println!(\"{}\", v.iter().sum::<u64>()); }\n",
        )
        .unwrap();
        let exe = dir.join("hello");
        let args = dir.join("link-args.txt");
        crate::base::exec::Cmd::new("rustc")
            .args([
                "-O".to_string(),
                "-Csave-temps".to_string(),
                format!("--print=link-args={}", args.display()),
                "-o".to_string(),
                exe.display().to_string(),
                src.display().to_string(),
            ])
            .read()
            .unwrap();
        let line = LinkLine::parse(&std::fs::read_to_string(&args).unwrap()).unwrap();
        let base = relink::function_addresses(&exe).unwrap();
        // Without the flag: the same bytes, and refused.
        let same = dir.join("same");
        line.relink(&same, &[]).unwrap();
        assert_eq!(
            fsx::file_hash(&same).unwrap(),
            fsx::file_hash(&exe).unwrap(),
            "the relink reproduces the executable"
        );
        let err = check_moved(&base, &same, "hello/L0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not another layout: 0 of its"), "{err}");
        // With it: another layout, accepted.
        let shuffled = dir.join("shuffled");
        line.relink(&shuffled, &[SHUFFLE.replace("{seed}", "7")])
            .unwrap();
        let moved = check_moved(&base, &shuffled, "hello/L1").unwrap();
        assert!(moved.pct() > 50.0, "{moved:?}");
        let out = crate::base::exec::Cmd::new(shuffled.display().to_string())
            .read()
            .unwrap();
        assert_eq!(out.trim(), "45", "the shuffled program still runs");
        // Another program (one more function) is refused as a layout of this one.
        let other_src = dir.join("other.rs");
        std::fs::write(
            &other_src,
            "#[inline(never)] fn twice(x: u64) -> u64 { x * 2 }\nfn main() { let v: Vec<u64> = (0..10).map(twice).collect(); println!(\"{}\", v.iter().sum::<u64>()); }\n",
        )
        .unwrap();
        let other = dir.join("other");
        crate::base::exec::Cmd::new("rustc")
            .args([
                "-O".to_string(),
                "-o".to_string(),
                other.display().to_string(),
                other_src.display().to_string(),
            ])
            .read()
            .unwrap();
        let err = check_moved(&base, &other, "hello/L2")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("does not define the same functions as its base"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
