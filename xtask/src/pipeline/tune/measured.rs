//! `cargo xtask tune --measure`: training mixes chosen by measuring them, not by the
//! agreement's prediction. The candidates are the config's weights, the agreement's choice
//! and, for each training workload, the mix with that workload weighed down (every other
//! weight times [`DOWN`]). Each is merged from the training workloads' own profiles, built as
//! lto+pgo (under `target/pgo/tune/`), and all of them are arms of the same lockstep sessions
//! on the validation workloads, the config's mix as the baseline, beside lto and a validation
//! oracle (lto+pgo trained on the validation workloads themselves): each mix's capture of
//! the oracle's gain over lto on each validation workload. The config's mix relinked in
//! other function orders runs beside them too: every mix is another build, and a change
//! counts only beyond that layout floor. A second round measures the
//! neighbours of round 1's leader (its mix with one more workload weighed down) and the
//! leader again. The objective is issue 34's: the smallest capture, raised ([`choose`]). The
//! measured workloads never enter it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::analysis;
use crate::analysis::outputs::TrainingPart;
use crate::base::exec::Cmd;
use crate::base::fsx;
use crate::measure::{self, BASELINE, MeasuredArm};
use crate::pipeline::ab;
use crate::pipeline::ctx::Ctx;
use crate::pipeline::profile::{Change, Measured, Mix};
use crate::report::words;
use crate::toolchain::build::{Build, Built};
use crate::toolchain::tools::Toolchain;

/// A weighed-down workload's share falls this many times: every other weight is multiplied
/// by it (llvm-profdata's weights are integers, and a weight of 0 is no weight).
pub const DOWN: u64 = 16;

/// The config's mix: the baseline every other mix is measured against.
pub const CONFIG: &str = "config";

/// The arms beside the mixes that make a capture: lto, and lto+pgo from the validation
/// workloads' own profiles merged.
pub const LTO: &str = "lto";
pub const ORACLE: &str = "oracle";

/// The mixes to measure, the config's first; each weight list in `config`'s order, no two
/// alike.
pub fn candidates(config: &Weights, agreement: &Weights) -> Vec<(String, Weights)> {
    let mut out: Vec<(String, Weights)> = vec![(CONFIG.to_string(), config.to_vec())];
    let mut add = |label: String, weights: Weights| {
        let weights = lowest_terms(weights);
        if !out.iter().any(|(_, w)| same_mix(w, &weights)) {
            out.push((label, weights));
        }
    };
    add("agreement".to_string(), agreement.to_vec());
    if config.len() > 1 {
        for (down, _) in config {
            let weights = config
                .iter()
                .map(|(n, w)| (n.clone(), if n == down { *w } else { w * DOWN }))
                .collect();
            add(format!("less-{down}"), weights);
        }
    }
    out
}

/// The same mix in its smallest integer weights (every weight divided by their greatest
/// common divisor): 2048, 256, 32 is 64, 8, 1.
fn lowest_terms(weights: Weights) -> Weights {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 { a } else { gcd(b, a % b) }
    }
    let g = weights.iter().fold(0, |g, (_, w)| gcd(g, *w)).max(1);
    weights.into_iter().map(|(n, w)| (n, w / g)).collect()
}

/// Two weight lists that merge to the same mix (one a multiple of the other).
fn same_mix(a: &[(String, u64)], b: &[(String, u64)]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((na, wa), (nb, wb))| na == nb && wa * b[0].1 == wb * a[0].1)
}

/// Per validation workload, a capture (%), or `None` where the oracle's gain over lto was
/// below the min effect (no share to take of it).
pub type Captures = Vec<(String, Option<f64>)>;

/// The rule, on one round's figures: raise the smallest capture. With `config` the config's
/// captures, a mix may be kept when
/// - it is faster than the config's mix on a workload with a capture, its whole interval
///   beyond the threshold (the min effect, and the layout floor: every mix is another
///   build): a gain that is not chance;
/// - its own smallest capture (by the estimates) is larger than the config's: a workload may
///   pay for another's gain, as long as it stays above the config's floor;
/// - it is slower beyond its interval and the threshold on no workload without a capture
///   (nothing to trade there);
///
/// of those, the one whose smallest capture is the largest; `None` (keep the config's) when
/// there is none. Where the smallest capture is need not be where the gain is: the smallest
/// is often the noisiest workload's (a contended one's capture scatters widely:
/// docs/findings.md, "Tune by measuring captures, in rounds, past the layout floor"), and
/// requiring the gain there would keep every real gain elsewhere out. Without any capture
/// (no oracle gain anywhere) it falls back to the gains: [`choose_by_gain`].
pub fn choose<'a>(mixes: &'a [Mix], config: &[(String, Option<f64>)]) -> Option<&'a Mix> {
    let Some((_, floor)) = smallest(config) else {
        return choose_by_gain(mixes);
    };
    mixes
        .iter()
        .filter(|m| safe_without_capture(m))
        .filter(|m| {
            m.against_config
                .iter()
                .any(|c| c.capture_pct.is_some() && c.ci_high_pct < -c.threshold_pct)
        })
        .filter(|m| smallest_capture(m).is_some_and(|c| c > floor))
        .max_by(|a, b| by_capture(a, b))
}

/// Without captures: among the mixes faster than the config's beyond the interval and the
/// threshold on one workload and slower beyond them on none, the one whose smallest gain (by
/// its estimates) is the largest. A workload a mix leaves as it was reads a little faster or
/// slower by chance, so the estimates alone would keep almost nothing, and the intervals
/// alone would not rank.
pub fn choose_by_gain(mixes: &[Mix]) -> Option<&Mix> {
    mixes
        .iter()
        .filter(|m| never_slower(m))
        .filter(|m| {
            m.against_config
                .iter()
                .any(|c| c.ci_high_pct < -c.threshold_pct)
        })
        .max_by(|a, b| smallest_gain(a).total_cmp(&smallest_gain(b)))
}

/// The workload of the smallest capture, and that capture.
fn smallest(captures: &[(String, Option<f64>)]) -> Option<(&str, f64)> {
    captures
        .iter()
        .filter_map(|(w, c)| Some((w.as_str(), (*c)?)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

fn smallest_capture(m: &Mix) -> Option<f64> {
    m.against_config
        .iter()
        .filter_map(|c| c.capture_pct)
        .min_by(f64::total_cmp)
}

fn by_capture(a: &Mix, b: &Mix) -> std::cmp::Ordering {
    let of = |m: &Mix| smallest_capture(m).unwrap_or(f64::NEG_INFINITY);
    of(a).total_cmp(&of(b))
}

/// Measured, and slower beyond its interval and the threshold on no workload.
fn never_slower(m: &Mix) -> bool {
    !m.against_config.is_empty()
        && m.against_config
            .iter()
            .all(|c| c.ci_low_pct <= c.threshold_pct)
}

fn safe_without_capture(m: &Mix) -> bool {
    m.against_config
        .iter()
        .filter(|c| c.capture_pct.is_none())
        .all(|c| c.ci_low_pct <= c.threshold_pct)
}

/// How many rounds the search may take: round 1 measures the config's neighbours, round 2
/// the neighbours of round 1's leader ([`leader`]) with the leader itself again. Two, because
/// the training that bare tokio and the contended workload need (docs/findings.md) weighs
/// two phases down together, which no single step reaches; each round costs a lockstep run.
pub const ROUNDS: u32 = 2;

/// A list of training workloads and their weights, in the config's order.
pub type Weights = Vec<(String, u64)>;

/// The mix the next round starts from: the one [`choose`] would keep; else the one whose
/// smallest capture (by its estimates) is the largest, if above the config's and slower
/// beyond its interval on no workload without a capture (a step the intervals could not yet
/// confirm, worth taking further); else none, and the search ends. Without any capture, the
/// same by the gains.
pub fn leader<'a>(mixes: &'a [Mix], config: &[(String, Option<f64>)]) -> Option<&'a Mix> {
    choose(mixes, config).or_else(|| match smallest(config) {
        Some((_, floor)) => mixes
            .iter()
            .filter(|m| safe_without_capture(m))
            .filter(|m| smallest_capture(m).is_some_and(|c| c > floor))
            .max_by(|a, b| by_capture(a, b)),
        None => mixes
            .iter()
            .filter(|m| never_slower(m))
            .filter(|m| m.against_config.iter().any(|c| c.change_pct < 0.0))
            .max_by(|a, b| smallest_gain(a).total_cmp(&smallest_gain(b))),
    })
}

/// The next round's mixes: `lead` again (its figures chose it, so they flatter it), then
/// `lead` with each workload it does not already weigh down (against `config`) weighed down
/// too; none already in `seen`. Only `lead` when it has no new neighbour.
pub fn neighbours(config: &Weights, lead: &Mix, seen: &[Weights]) -> Vec<(String, Weights)> {
    // A workload's weight against the config's, as a fraction: the largest is "not down".
    let ratio = |(n, w): &(String, u64)| {
        let c = config.iter().find(|(cn, _)| cn == n).map_or(1, |(_, c)| *c);
        (*w as f64) / (c as f64)
    };
    let top = lead.weights.iter().map(ratio).fold(0.0, f64::max);
    let mut out = vec![(lead.label.clone(), lead.weights.clone())];
    for d in lead.weights.iter().filter(|d| ratio(d) >= top) {
        let weights = lowest_terms(
            lead.weights
                .iter()
                .map(|(n, w)| (n.clone(), if *n == d.0 { *w } else { w * DOWN }))
                .collect(),
        );
        if seen
            .iter()
            .chain(out.iter().map(|(_, w)| w))
            .any(|w| same_mix(w, &weights))
        {
            continue;
        }
        let label = match lead.label.strip_prefix("less-") {
            Some(_) => format!("{}+{}", lead.label, d.0),
            None => format!("{}-less-{}", lead.label, d.0),
        };
        out.push((label, weights));
    }
    out
}

fn smallest_gain(m: &Mix) -> f64 {
    m.against_config
        .iter()
        .map(|c| -c.change_pct)
        .fold(f64::INFINITY, f64::min)
}

/// Merges `parts` with each mix's weights, builds lto+pgo from each, measures them against
/// the config's mix on the validation workloads in the same sessions (beside lto and the
/// oracle from `validation`, the validation workloads' profiles), round by round (up to
/// [`ROUNDS`]), and says which to keep: [`choose`] on the last round's figures.
pub fn run(
    ctx: &Ctx,
    toolchain: &Toolchain,
    parts: &[TrainingPart],
    validation: &[PathBuf],
    config: &Weights,
    agreement: &Weights,
) -> Result<Measured> {
    let dir = ctx.pgo_data.join("tune");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut round = candidates(config, agreement);
    let config_built = built(ctx, toolchain, parts, &round.remove(0), &dir)?;
    let layouts = layouts_of(ctx, toolchain, &config_built, &dir)?;
    let config_exe = dir.join(CONFIG);
    fsx::copy_atomic(&config_built.exe, &config_exe)?;
    let (lto, _) = ctx.build(toolchain, Build::Lto, Build::Lto.rustflags(None))?;
    let beside = References {
        config: config_exe,
        layouts,
        lto: dir.join(LTO),
        oracle: oracle(ctx, toolchain, validation, &dir)?,
    };
    fsx::copy_atomic(&lto.exe, &beside.lto)?;
    let mut seen = vec![config.clone()];
    let mut mixes: Vec<Mix> = Vec::new();
    let mut config_capture = Vec::new();
    for r in 1..=ROUNDS {
        seen.extend(round.iter().map(|(_, w)| w.clone()));
        let (measured, captures) = measure_round(ctx, toolchain, parts, &dir, &beside, &round, r)?;
        let next = match leader(&measured, &captures) {
            Some(lead) if r < ROUNDS => neighbours(config, lead, &seen),
            _ => Vec::new(),
        };
        mixes.extend(measured);
        config_capture = captures;
        if next.len() < 2 {
            break;
        }
        eprintln!(
            "tune: round {} starts from `{}`, with {} neighbour(s) of it",
            r + 1,
            next[0].0,
            next.len() - 1
        );
        round = next;
    }
    let last = mixes.iter().map(|m| m.round).max().unwrap_or(1);
    let last_round: Vec<Mix> = mixes.iter().filter(|m| m.round == last).cloned().collect();
    let chosen =
        choose(&last_round, &config_capture).map_or(CONFIG.to_string(), |m| m.label.clone());
    print(&mixes, &config_capture, &chosen, last);
    Ok(Measured {
        mixes,
        config_capture,
        chosen,
    })
}

/// The config's mix relinked in `layout.variants` other function orders (as the layout stage
/// relinks release): (arm, executable). Every mix is another build, so a change must pass
/// the layout floor as well as the min effect.
fn layouts_of(
    ctx: &Ctx,
    toolchain: &Toolchain,
    config: &Built,
    dir: &Path,
) -> Result<Vec<(String, PathBuf)>> {
    let layout = &ctx.config.settings.layout;
    if layout.variants == 0 {
        return Ok(Vec::new());
    }
    let first = layout
        .seed
        .unwrap_or_else(|| (stats::fresh_seed() >> 33) as u32);
    let out = dir.join("layout");
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let shuffled = crate::pipeline::stage::layout::shuffled(
        ctx,
        toolchain,
        config,
        &ctx.target_root.join("tune"),
        &out,
        layout.variants,
        first,
    )?;
    Ok((1..)
        .zip(shuffled)
        .map(|(k, (_, _, variant, _))| (measure::layout_arm(BASELINE, k), variant.exe))
        .collect())
}

/// The validation oracle: lto+pgo from the validation workloads' own profiles, merged with
/// equal weights (as the pipeline's oracle merges the measured workloads').
fn oracle(ctx: &Ctx, toolchain: &Toolchain, validation: &[PathBuf], dir: &Path) -> Result<PathBuf> {
    eprintln!("tune: the validation oracle: the validation workloads' own profiles");
    let inputs: Vec<(u64, &Path)> = validation.iter().map(|p| (1, p.as_path())).collect();
    let profile = merge(toolchain, &inputs, dir, "oracle")?;
    let exe = dir.join(ORACLE);
    fsx::copy_atomic(&build(ctx, toolchain, &profile)?.exe, &exe)?;
    Ok(exe)
}

/// The executables every round measures beside its mixes: the config's mix (the baseline)
/// and its layouts, lto and the validation oracle.
struct References {
    config: PathBuf,
    /// The config's mix relinked in other function orders: (arm, executable).
    layouts: Vec<(String, PathBuf)>,
    lto: PathBuf,
    oracle: PathBuf,
}

/// One mix merged and built as lto+pgo (the executable in its target folder until the next
/// build there: copy it).
fn built(
    ctx: &Ctx,
    toolchain: &Toolchain,
    parts: &[TrainingPart],
    (label, weights): &(String, Weights),
    dir: &Path,
) -> Result<Built> {
    eprintln!(
        "tune: mix {label}: {}",
        weights
            .iter()
            .map(|(n, w)| format!("{n} ×{w}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let inputs: Vec<(u64, &Path)> = parts
        .iter()
        .map(|p| {
            let w = weights
                .iter()
                .find(|(n, _)| *n == p.workload)
                .map_or(p.weight, |(_, w)| *w);
            (w, p.profile.as_path())
        })
        .collect();
    let profile = merge(toolchain, &inputs, dir, "mix")?;
    build(ctx, toolchain, &profile)
}

/// One round: `round`'s mixes built and measured against the config's in the same sessions,
/// with lto and the oracle beside them; each mix's change on each validation workload with
/// its capture, and the config's captures.
fn measure_round(
    ctx: &Ctx,
    toolchain: &Toolchain,
    parts: &[TrainingPart],
    dir: &Path,
    beside: &References,
    round: &[(String, Weights)],
    number: u32,
) -> Result<(Vec<Mix>, Captures)> {
    let mut arms = Vec::new();
    for mix in round {
        let exe = dir.join(&mix.0);
        fsx::copy_atomic(&built(ctx, toolchain, parts, mix, dir)?.exe, &exe)?;
        arms.push((mix.0.clone(), exe));
    }
    let arm = |name: &str, exe: &Path| MeasuredArm {
        name: name.to_string(),
        exe: exe.to_path_buf(),
        extra: Vec::new(),
    };
    let mut others = vec![arm(LTO, &beside.lto), arm(ORACLE, &beside.oracle)];
    others.extend(beside.layouts.iter().map(|(name, exe)| arm(name, exe)));
    others.extend(arms.iter().map(|(label, exe)| arm(label, exe)));
    let mut m = ctx.validation_measure_config()?;
    // Each round's own seed (drawn, or the given one moved on).
    m.seed = m.seed.map(|s| s.wrapping_add(u64::from(number)));
    let min_effect_pct = m.min_effect_pct;
    eprintln!(
        "tune: round {number}: {} mix(es) against the config's on {} validation workload(s), in the same sessions, beside lto and the oracle",
        arms.len(),
        m.workloads.len()
    );
    // Every arm runs from a fresh copy every session, as in `cargo xtask ab`.
    let analysed = ab::measure_against(&beside.config, others, m)?.analysed;
    let estimate = |w: &analysis::WorkloadAnalysis, build: &str| {
        w.rows
            .iter()
            .find(|r| r.build == build)
            .and_then(|r| r.vs_release.as_ref())
            .map(|c| c.primary().clone())
            .with_context(|| format!("`{}`: no comparison of `{build}`", w.workload))
    };
    // ln(x / config) of lto and the oracle per workload: a capture's scale, where the oracle
    // gains more than the min effect over lto.
    let mut scales = Vec::new();
    for w in &analysed {
        let (lto, oracle) = (estimate(w, LTO)?.estimate, estimate(w, ORACLE)?.estimate);
        let gain = lto.mean_log_ratio - oracle.mean_log_ratio;
        let beyond = (1.0 - (-gain).exp()) * 100.0 > min_effect_pct;
        scales.push(beyond.then_some((lto.mean_log_ratio, gain)));
    }
    let capture =
        |scale: Option<(f64, f64)>, log: f64| scale.map(|(lto, gain)| (lto - log) / gain * 100.0);
    let config_capture: Captures = analysed
        .iter()
        .zip(&scales)
        .map(|(w, s)| (w.workload.clone(), capture(*s, 0.0)))
        .collect();
    let mut out = Vec::new();
    for (label, weights) in round {
        let mut against_config = Vec::new();
        for (w, scale) in analysed.iter().zip(&scales) {
            let judged = estimate(w, label)?;
            let e = &judged.estimate;
            against_config.push(Change {
                workload: w.workload.clone(),
                change_pct: e.change_pct,
                ci_low_pct: e.ci_low_pct,
                ci_high_pct: e.ci_high_pct,
                sessions: w.sessions,
                threshold_pct: judged.threshold_pct,
                capture_pct: capture(*scale, e.mean_log_ratio),
            });
        }
        out.push(Mix {
            label: label.clone(),
            round: number,
            weights: weights.clone(),
            against_config,
        });
    }
    Ok((out, config_capture))
}

fn print(mixes: &[Mix], config: &[(String, Option<f64>)], chosen: &str, last: u32) {
    eprintln!("tune: the config's mix on the validation workloads (last round):");
    for (w, c) in config {
        eprintln!("    {w:<26} {}", words::capture_pct(*c));
    }
    eprintln!(
        "tune: each mix against the config's, {} per message (negative: faster):",
        words::metric(crate::measure::session::Metric::Median)
    );
    for m in mixes {
        let mark = if m.label == chosen && m.round == last {
            "  ← kept"
        } else {
            ""
        };
        eprintln!("  round {}: {}{mark}", m.round, m.label);
        for c in &m.against_config {
            eprintln!(
                "    {:<26} {} (threshold ±{:.1} %; {} sessions; {})",
                c.workload,
                words::signed(c.change_pct, c.ci_low_pct, c.ci_high_pct),
                c.threshold_pct,
                c.sessions,
                words::capture_pct(c.capture_pct)
            );
        }
    }
    if chosen == CONFIG {
        eprintln!(
            "tune: no mix of round {last} was faster beyond its interval and threshold on a workload while raising the smallest capture: the config's weights are kept"
        );
    }
}

/// `inputs` (weight, profile) merged, content-addressed in `dir` as `<stem>-<hash>.profdata`
/// (cargo fingerprints `-Cprofile-use`'s path, not the file).
fn merge(
    toolchain: &Toolchain,
    inputs: &[(u64, &Path)],
    dir: &Path,
    stem: &str,
) -> Result<PathBuf> {
    let tmp = fsx::temp_path(&dir.join(format!("{stem}.profdata")));
    let merged = Cmd::new(toolchain.llvm_profdata.display().to_string())
        .args(["merge", "-o"])
        .arg(tmp.display().to_string())
        .args(
            inputs
                .iter()
                .map(|(w, p)| format!("-weighted-input={w},{}", p.display())),
        )
        .run_with_timeout(Duration::from_secs(300));
    if let Err(err) = merged {
        let _ = std::fs::remove_file(&tmp);
        return Err(err.context(format!("cannot merge the profiles of `{stem}`")));
    }
    let bytes = std::fs::read(&tmp).with_context(|| format!("cannot read {}", tmp.display()))?;
    let path = dir.join(format!("{stem}-{:016x}.profdata", fsx::fnv1a64(&bytes)));
    fsx::rename_content_addressed(&tmp, &path)?;
    Ok(path)
}

/// lto+pgo from `profile`, built under `target/pgo/tune/`.
fn build(ctx: &Ctx, toolchain: &Toolchain, profile: &Path) -> Result<Built> {
    let build = Build::LtoPgo;
    let (built, _) = ctx.build_in(
        toolchain,
        build,
        build.rustflags(Some(profile)),
        &ctx.target_root.join("tune"),
    )?;
    Ok(built)
}

#[cfg(test)]
mod tests;
