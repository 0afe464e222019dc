//! `cargo xtask tune --measure`: training mixes chosen by measuring them, not by the
//! agreement's prediction. The candidates are the config's weights, the agreement's choice
//! and, for each training workload, the mix with that workload weighed down (every other
//! weight times [`DOWN`]). Each is merged from the training workloads' own profiles, built as
//! lto+pgo (under `target/pgo/tune/`), and all of them are arms of the same lockstep sessions
//! on the validation workloads, the config's mix as the baseline. A second round measures
//! the neighbours of round 1's leader (its mix with one more workload weighed down) and the
//! leader again. A mix of the last round may be kept when it is faster than the config's
//! beyond its interval on one validation workload and slower beyond its interval on none; of
//! those, the one whose smallest gain (by its estimates) is the largest; else the config's.
//! The measured workloads never enter it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::analysis;
use crate::build::Build;
use crate::exec::Cmd;
use crate::fsx;
use crate::measure::{self, BASELINE, BASELINE_AGAIN, MeasuredArm};
use crate::outputs::TrainingPart;
use crate::pipeline::ctx::Ctx;
use crate::pipeline::profile::{Change, Measured, Mix};
use crate::toolchain::Toolchain;

/// A weighed-down workload's share falls this many times: every other weight is multiplied
/// by it (llvm-profdata's weights are integers, and a weight of 0 is no weight).
pub const DOWN: u64 = 16;

/// The config's mix: the baseline every other mix is measured against.
pub const CONFIG: &str = "config";

/// The mixes to measure, the config's first; each weight list in `config`'s order, no two
/// alike.
pub fn candidates(config: &Weights, agreement: &Weights) -> Vec<(String, Weights)> {
    let mut out: Vec<(String, Weights)> = vec![(CONFIG.to_string(), config.to_vec())];
    let mut add = |label: String, weights: Weights| {
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

/// Two weight lists that merge to the same mix (one a multiple of the other).
fn same_mix(a: &[(String, u64)], b: &[(String, u64)]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((na, wa), (nb, wb))| na == nb && wa * b[0].1 == wb * a[0].1)
}

/// The rule: among the mixes faster than the config's beyond the interval on one workload
/// and slower beyond it on none, the one whose smallest gain (by its estimates) is the
/// largest; `None` (keep the config's) when there is none. A workload a mix leaves as it was
/// reads a little faster or slower by chance, so the estimates alone would keep almost
/// nothing, and the intervals alone would not rank.
pub fn choose(mixes: &[Mix]) -> Option<&Mix> {
    mixes
        .iter()
        .filter(|m| !m.against_config.is_empty())
        .filter(|m| m.against_config.iter().all(|c| c.ci_low_pct <= 0.0))
        .filter(|m| m.against_config.iter().any(|c| c.ci_high_pct < 0.0))
        .max_by(|a, b| smallest_gain(a).total_cmp(&smallest_gain(b)))
}

/// How many rounds the search may take: round 1 measures the config's neighbours, round 2
/// the neighbours of round 1's leader ([`leader`]) with the leader itself again. Two, because
/// the training that bare tokio and the contended workload need (docs/findings.md) weighs
/// two phases down together, which no single step reaches; each round costs a lockstep run.
pub const ROUNDS: u32 = 2;

/// A list of training workloads and their weights, in the config's order.
pub type Weights = Vec<(String, u64)>;

/// The mix the next round starts from: the one [`choose`] would keep; else, of the mixes
/// slower beyond their interval nowhere and faster by their estimate somewhere, the one whose
/// smallest gain is the largest (a step the intervals could not yet confirm, worth taking
/// further); else none, and the search ends.
pub fn leader(mixes: &[Mix]) -> Option<&Mix> {
    choose(mixes).or_else(|| {
        mixes
            .iter()
            .filter(|m| !m.against_config.is_empty())
            .filter(|m| m.against_config.iter().all(|c| c.ci_low_pct <= 0.0))
            .filter(|m| m.against_config.iter().any(|c| c.change_pct < 0.0))
            .max_by(|a, b| smallest_gain(a).total_cmp(&smallest_gain(b)))
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
        let weights: Weights = lead
            .weights
            .iter()
            .map(|(n, w)| (n.clone(), if *n == d.0 { *w } else { w * DOWN }))
            .collect();
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
/// the config's mix on the validation workloads in the same sessions, round by round (up to
/// [`ROUNDS`]), and says which to keep: [`choose`] on the last round's mixes.
pub fn run(
    ctx: &Ctx,
    tc: &Toolchain,
    parts: &[TrainingPart],
    config: &Weights,
    agreement: &Weights,
) -> Result<Measured> {
    let dir = ctx.data.join("tune");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut round = candidates(config, agreement);
    let config_exe = built(ctx, tc, parts, &round.remove(0), &dir)?;
    let mut seen = vec![config.clone()];
    let mut mixes: Vec<Mix> = Vec::new();
    for r in 1..=ROUNDS {
        seen.extend(round.iter().map(|(_, w)| w.clone()));
        let measured = measure_round(ctx, tc, parts, &dir, &config_exe, &round, r)?;
        let next = match leader(&measured) {
            Some(lead) if r < ROUNDS => neighbours(config, lead, &seen),
            _ => Vec::new(),
        };
        mixes.extend(measured);
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
    let chosen = choose(&last_round).map_or(CONFIG.to_string(), |m| m.label.clone());
    print(&mixes, &chosen, last);
    Ok(Measured { mixes, chosen })
}

/// One mix merged, built as lto+pgo and copied to `dir/<label>`.
fn built(
    ctx: &Ctx,
    tc: &Toolchain,
    parts: &[TrainingPart],
    (label, weights): &(String, Weights),
    dir: &Path,
) -> Result<PathBuf> {
    eprintln!(
        "tune: mix {label}: {}",
        weights
            .iter()
            .map(|(n, w)| format!("{n} ×{w}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let profile = merge(tc, parts, weights, dir)?;
    build(ctx, tc, &profile, dir, label)
}

/// One round: `round`'s mixes built and measured against `config_exe` in the same sessions.
fn measure_round(
    ctx: &Ctx,
    tc: &Toolchain,
    parts: &[TrainingPart],
    dir: &Path,
    config_exe: &Path,
    round: &[(String, Weights)],
    number: u32,
) -> Result<Vec<Mix>> {
    let mut arms = Vec::new();
    for mix in round {
        arms.push((mix.0.clone(), built(ctx, tc, parts, mix, dir)?));
    }
    let arm = |name: &str, exe: &Path| MeasuredArm {
        name: name.to_string(),
        exe: exe.to_path_buf(),
        extra: Vec::new(),
    };
    let mut measured = vec![arm(BASELINE, config_exe), arm(BASELINE_AGAIN, config_exe)];
    let mut m = ctx.validation_measure_config()?;
    // Each round's own seed: it identifies the round's nulls in the history.
    m.seed = Some(m.seed.map_or_else(crate::stats::fresh_seed, |s| {
        s.wrapping_add(u64::from(number))
    }));
    let m = &m;
    // The other mixes are other files: the config's bytes in another file are the null their
    // arm component rests on, as in `cargo xtask ab`.
    if m.null_copy {
        let copy = ctx.data.join("copy").join("tune-config");
        fsx::copy_atomic(config_exe, &copy)?;
        measured.push(arm(&measure::copy_arm(BASELINE), &copy));
    }
    measured.extend(arms.iter().map(|(label, exe)| arm(label, exe)));
    eprintln!(
        "tune: round {number}: {} mix(es) against the config's on {} validation workload(s), in the same sessions",
        arms.len(),
        m.workloads.len()
    );
    let (sessions, stopped) = measure::run_lockstep(&measured, m)?;
    let names: Vec<String> = m.workloads.iter().map(|w| w.name.clone()).collect();
    let builds: Vec<String> = std::iter::once(BASELINE.to_string())
        .chain(arms.iter().map(|(l, _)| l.clone()))
        .collect();
    let analysed = analysis::sessions::analyze_recorded(
        &ctx.data.join("history.json"),
        &names,
        &builds,
        &sessions,
        m,
        &stopped,
    )?;
    let mut out = Vec::new();
    for (label, weights) in round {
        let mut against_config = Vec::new();
        for w in &analysed {
            let e = w
                .rows
                .iter()
                .find(|r| r.build == *label)
                .and_then(|r| r.vs_release.as_ref())
                .with_context(|| format!("`{}`: no comparison of mix `{label}`", w.workload))?
                .median
                .estimate
                .clone();
            against_config.push(Change {
                workload: w.workload.clone(),
                change_pct: e.change_pct,
                ci_low_pct: e.ci_low_pct,
                ci_high_pct: e.ci_high_pct,
                sessions: w.sessions,
            });
        }
        out.push(Mix {
            label: label.clone(),
            round: number,
            weights: weights.clone(),
            against_config,
        });
    }
    Ok(out)
}

fn print(mixes: &[Mix], chosen: &str, last: u32) {
    eprintln!("tune: each mix against the config's, median per message (negative: faster):");
    for m in mixes {
        let mark = if m.label == chosen && m.round == last {
            "  ← kept"
        } else {
            ""
        };
        eprintln!("  round {}: {}{mark}", m.round, m.label);
        for c in &m.against_config {
            eprintln!(
                "    {:<26} {:+.2} % [{:+.2}, {:+.2}] ({} sessions)",
                c.workload, c.change_pct, c.ci_low_pct, c.ci_high_pct, c.sessions
            );
        }
    }
    if chosen == CONFIG {
        eprintln!(
            "tune: no mix of round {last} was faster than the config's beyond its interval on a validation workload without being slower beyond it on another: the config's weights are kept"
        );
    }
}

/// The training workloads' profiles merged with `weights`, content-addressed in `dir` (cargo
/// fingerprints `-Cprofile-use`'s path, not the file).
fn merge(
    tc: &Toolchain,
    parts: &[TrainingPart],
    weights: &[(String, u64)],
    dir: &Path,
) -> Result<PathBuf> {
    let tmp = fsx::temp_path(&dir.join("mix.profdata"));
    let inputs = parts.iter().map(|p| {
        let w = weights
            .iter()
            .find(|(n, _)| *n == p.workload)
            .map_or(p.weight, |(_, w)| *w);
        format!("-weighted-input={w},{}", p.profile.display())
    });
    let merged = Cmd::new(tc.llvm_profdata.display().to_string())
        .args(["merge", "-o"])
        .arg(tmp.display().to_string())
        .args(inputs)
        .run_with_timeout(Duration::from_secs(300));
    if let Err(err) = merged {
        let _ = std::fs::remove_file(&tmp);
        return Err(err.context("cannot merge a training mix"));
    }
    let bytes = std::fs::read(&tmp).with_context(|| format!("cannot read {}", tmp.display()))?;
    let path = dir.join(format!("mix-{:016x}.profdata", fsx::fnv1a64(&bytes)));
    fsx::rename_content_addressed(&tmp, &path)?;
    Ok(path)
}

/// lto+pgo from `profile`, built under `target/pgo/tune/` and copied to `dir/<label>`.
fn build(ctx: &Ctx, tc: &Toolchain, profile: &Path, dir: &Path, label: &str) -> Result<PathBuf> {
    let build = Build::LtoPgo;
    let (built, _) = ctx.build_in(
        tc,
        build,
        build.rustflags(Some(profile)),
        &ctx.target_root.join("tune"),
    )?;
    let exe = dir.join(label);
    fsx::copy_atomic(&built.exe, &exe)?;
    Ok(exe)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(list: &[(&str, u64)]) -> Vec<(String, u64)> {
        list.iter().map(|(n, w)| (n.to_string(), *w)).collect()
    }

    fn mix(label: &str, changes: &[(f64, f64, f64)]) -> Mix {
        Mix {
            label: label.to_string(),
            round: 1,
            weights: Vec::new(),
            against_config: changes
                .iter()
                .enumerate()
                .map(|(i, (c, lo, hi))| Change {
                    workload: format!("v{i}"),
                    change_pct: *c,
                    ci_low_pct: *lo,
                    ci_high_pct: *hi,
                    sessions: 12,
                })
                .collect(),
        }
    }

    #[test]
    fn the_candidates_are_the_config_the_agreement_and_each_weighed_down() {
        let config = w(&[("a", 8), ("b", 1), ("c", 2)]);
        let got = candidates(&config, &w(&[("a", 3), ("b", 1), ("c", 2)]));
        let labels: Vec<&str> = got.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            labels,
            ["config", "agreement", "less-a", "less-b", "less-c"]
        );
        assert_eq!(got[2].1, w(&[("a", 8), ("b", 16), ("c", 32)]));
        // The agreement kept the config's mix (or a multiple of it): measured once.
        let got = candidates(&config, &w(&[("a", 16), ("b", 2), ("c", 4)]));
        assert_eq!(got.len(), 4, "{got:?}");
        // One training workload: nothing to weigh down.
        assert_eq!(candidates(&w(&[("a", 1)]), &w(&[("a", 1)])).len(), 1);
    }

    #[test]
    fn a_mix_is_kept_only_when_faster_beyond_its_interval_and_never_slower() {
        // Faster on one beyond its interval, slower by its estimate alone on another: may be
        // kept (the measured B of docs/results/2026-12-03-fresh-vm.md).
        let mixed = mix("less-a", &[(-6.3, -10.5, -1.9), (1.7, -0.2, 3.6)]);
        assert_eq!(
            choose(std::slice::from_ref(&mixed)).map(|m| m.label.as_str()),
            Some("less-a")
        );
        // Faster by its estimate on both, beyond the interval on one: a smaller smallest gain
        // lost than the one above, so this one is kept over it.
        let better = mix("less-b", &[(-1.5, -2.1, -0.9), (-0.3, -1.3, 0.8)]);
        // Faster on both by more, but slower beyond its interval on a third: not kept.
        let risky = mix(
            "less-c",
            &[(-3.0, -4.0, -2.0), (-2.0, -3.0, -1.0), (0.8, 0.2, 1.4)],
        );
        // Faster on every workload, never beyond its interval: noise, not kept.
        let unclear = mix("agreement", &[(-0.4, -1.2, 0.4), (-0.2, -0.9, 0.5)]);
        let all = [mixed, better.clone(), risky, unclear];
        assert_eq!(choose(&all).map(|m| m.label.as_str()), Some("less-b"));
        // Of two kept, the larger smallest gain wins.
        let best = mix("less-d", &[(-1.0, -1.8, -0.2), (-0.9, -1.5, -0.3)]);
        assert_eq!(
            choose(&[better, best]).map(|m| m.label.as_str()),
            Some("less-d")
        );
    }

    #[test]
    fn round_two_weighs_down_one_more_workload_beside_the_leader() {
        let config = w(&[("a", 8), ("b", 1), ("c", 2)]);
        let round1 = candidates(&config, &config);
        // No mix is kept, but less-b is slower beyond its interval nowhere and has the
        // largest smallest gain: it leads (the search takes a step the intervals could not
        // yet confirm). less-c is slower beyond its interval on the first workload.
        let mut lead = mix("less-b", &[(0.3, -0.5, 1.1), (-1.2, -2.4, 0.0)]);
        lead.weights = round1[2].1.clone();
        let all = [
            mix("less-a", &[(0.9, -0.2, 2.0), (-0.4, -1.0, 0.2)]),
            lead.clone(),
            mix("less-c", &[(1.4, 0.1, 2.7), (-3.0, -4.0, -2.0)]),
            mix("noise", &[(0.1, -0.5, 0.7), (0.2, -0.4, 0.8)]),
        ];
        assert_eq!(choose(&all).map(|m| m.label.as_str()), None);
        assert_eq!(leader(&all).map(|m| m.label.as_str()), Some("less-b"));
        let seen: Vec<Weights> = round1.iter().map(|(_, w)| w.clone()).collect();
        let got = neighbours(&config, &lead, &seen);
        let labels: Vec<&str> = got.iter().map(|(l, _)| l.as_str()).collect();
        // The leader again, then b weighed down with a, and with c; b is not weighed down
        // twice.
        assert_eq!(labels, ["less-b", "less-b+a", "less-b+c"]);
        assert_eq!(got[1].1, w(&[("a", 128), ("b", 16), ("c", 512)]));
        // Every workload but one weighed down is the config's mix with that one weighed up:
        // a new mix; every workload weighed down is the config's again, and not measured.
        let mut two = lead.clone();
        two.label = "less-b+a".to_string();
        two.weights = got[1].1.clone();
        let got = neighbours(&config, &two, &seen);
        assert_eq!(got.len(), 1, "{got:?}");
        // Nothing slower-free and faster anywhere: no leader, the search ends.
        assert!(leader(&all[2..]).is_none());
    }
}
