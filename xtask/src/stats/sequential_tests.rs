//! The stopping rule's tests: the t quantiles against the tables, Stein's plan and interval, and
//! the coverage simulated on sessions recorded by a real run.

use super::*;
use crate::stats::SplitMix64;

#[test]
fn quantiles_match_the_tables() {
    for (p, z) in [
        (0.975, 1.959_964),
        (0.5, 0.0),
        (0.995, 2.575_829),
        (0.01, -2.326_348),
    ] {
        assert!((normal_quantile(p) - z).abs() < 1e-5, "z({p})");
    }
    for (df, t) in [
        (1, 12.706_20),
        (2, 4.302_653),
        (5, 2.570_582),
        (9, 2.262_157),
        (11, 2.200_985),
        (29, 2.045_230),
        (100, 1.983_972),
    ] {
        assert!((t95(df) - t).abs() < 2e-4 * t, "t95({df}) = {}", t95(df));
    }
    // 3 degrees of freedom: the expansion's worst case, 0.12 % short.
    assert!((t95(3) - 3.182_446).abs() < 1.5e-3 * 3.182_446);
}

#[test]
fn stein_plans_from_the_pilots_spread() {
    // A pilot of 12 alternating ±0.02: 2 trimmed from each end, 8 kept (t with 7 df); the
    // winsorized values are the same ±0.02 (sd 0.0209); se = sd / (0.6 · √12).
    let pilot: Vec<f64> = (0..12)
        .map(|i| if i % 2 == 0 { 0.02 } else { -0.02 })
        .collect();
    let (m, se, kept) = trimmed(&pilot);
    assert!(m.abs() < 1e-15 && kept == 8, "{m} {kept}");
    assert!((se - 0.020_889 / (0.6 * 12f64.sqrt())).abs() < 1e-5, "{se}");
    assert_eq!(
        sessions_needed(&pilot, 0.01),
        (12.0 * (t95(7) * se / 0.01).powi(2)).ceil() as usize
    );
    // Fewer than five values: nothing trimmed, the plain mean's s/√n.
    let (m, se, kept) = trimmed(&[1.0, 2.0, 3.0, 4.0]);
    assert_eq!((m, kept), (2.5, 4));
    assert!((se - sd(&[1.0, 2.0, 3.0, 4.0]) / 2.0).abs() < 1e-12);
    // Trimming drops an outlier's pull: one session at +1.0 moves the plain mean by 0.08.
    let mut outlier = pilot.clone();
    outlier[0] = 1.0;
    assert!(trimmed(&outlier).0.abs() < 0.006, "{}", trimmed(&outlier).0);
    // A quiet pilot needs no more than itself.
    assert_eq!(sessions_needed(&[0.001, 0.0011, 0.0009], 0.01), 3);
    // The interval is the wider of Stein's and the whole sample's.
    let mut all = pilot.clone();
    all.extend([0.05, -0.05].repeat(6));
    let (_, se_all, kept) = trimmed(&all);
    assert_eq!(kept, 16, "4 of 24 trimmed from each end");
    assert!((interval(&all, 12).1 - t95(15) * se_all).abs() < 1e-12);
    // A quiet tail after a noisy pilot keeps the pilot's width, scaled to all the sessions.
    let mut quiet = pilot.clone();
    quiet.extend([0.0; 20]);
    let (_, se0, k0) = trimmed(&pilot);
    assert!((interval(&quiet, 12).1 - t95(k0 - 1) * se0 * (12.0f64 / 32.0).sqrt()).abs() < 1e-12);
    // A broken pilot asks for the most there is.
    assert_eq!(
        sessions_needed(&[f64::NAN, 1.0, 2.0, 3.0, 4.0, 5.0], 0.01),
        usize::MAX
    );
}

/// Sessions recorded by a real run: per workload, per session, each comparison's value.
#[derive(serde::Deserialize)]
struct Recorded {
    workloads: Vec<RecordedWorkload>,
}

#[derive(serde::Deserialize)]
struct RecordedWorkload {
    name: String,
    comparisons: Vec<String>,
    sessions: Vec<Vec<f64>>,
}

fn recorded() -> Recorded {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/sessions-93241eb.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The arm component's truth in the simulation (log space). Before arms' heaps were shifted
/// (`measure.shift_heap`), the 13 null arms recorded in docs/results had an sd of 0.46 % with
/// their own noise in it, and with 0.4 % here a first run's worst build covered 91 %. With
/// shifted heaps, 9 copies (three runs, three single-thread workloads) had an RMS of 0.21 %
/// against their own se of 0.28 %: no arm component seen, its 95 % upper bound 0.19 %. 0.3 %
/// is beyond that bound.
const ARM_SD: f64 = 0.003;

/// How one simulated run treats its comparisons.
struct Sim<'a> {
    population: &'a [Vec<f64>],
    truth: &'a [f64],
    pilot: usize,
    max: usize,
    target_log: f64,
    /// Comparisons that are builds (other files): an arm effect each, and intervals that
    /// carry the estimated component. The others (the A/A arm, workload against workload)
    /// differ from their baseline in no file.
    builds: &'a [bool],
    /// Null shifts of earlier runs pooled with this run's (0: a first run).
    history: usize,
}

/// One simulated measurement under the stopping rule, each comparison stopped at its own
/// count (sessions drawn with replacement; Stein's plan from the pilot, within `max`); each
/// build's estimate shifted by an arm effect of sd [`ARM_SD`] and its interval widened by
/// the component estimated from the nulls in other files (this run's copy and `history`
/// earlier runs' copies). Whether each interval covered its population's value.
fn simulate(sim: &Sim, rng: &mut SplitMix64) -> Vec<bool> {
    let population = sim.population;
    let k = sim.truth.len();
    let draw = |n: usize, rng: &mut SplitMix64| -> Vec<&Vec<f64>> {
        (0..n)
            .map(|_| &population[rng.below(population.len())])
            .collect()
    };
    let rows = draw(sim.max, rng);
    let column = |rows: &[&Vec<f64>], c: usize| rows.iter().map(|r| r[c]).collect::<Vec<f64>>();
    let counts: Vec<usize> = (0..k)
        .map(|c| {
            sessions_needed(&column(&rows[..sim.pilot], c), sim.target_log)
                .clamp(sim.pilot, sim.max)
        })
        .collect();
    let intervals: Vec<(f64, f64, usize)> = (0..k)
        .map(|c| interval_df(&column(&rows[..counts[c]], c), sim.pilot))
        .collect();
    // The nulls: copies in other files (the same population as the A/A comparison, column
    // 0, other sessions, an arm effect each): this run's and `history` earlier runs'. The A/A
    // arm is release's own file, with no arm effect to show: not one of them.
    let se = |(_, half, df): (f64, f64, usize)| half / t95(df);
    let mut nulls = Vec::new();
    for _ in 0..=sim.history {
        let copy = interval_df(&column(&draw(counts[0], rng), 0), sim.pilot);
        nulls.push((copy.0 - sim.truth[0] + ARM_SD * rng.normal(), se(copy)));
    }
    let arm = super::super::components::ArmSpread::from_nulls(&nulls).unwrap();
    (0..k)
        .map(|c| {
            let (estimate, half, df) = intervals[c];
            if sim.builds[c] {
                let shifted = estimate + ARM_SD * rng.normal();
                let half = super::super::components::widened(half, df as f64, &arm);
                (shifted - sim.truth[c]).abs() <= half
            } else {
                (estimate - sim.truth[c]).abs() <= half
            }
        })
        .collect()
}

/// The stopping rule with the arm component keeps its coverage on real sessions: many
/// measurements simulated by drawing sessions from recorded runs (100 sessions a workload),
/// each comparison stopped at its own count (a pilot of 12, then
/// Stein's count, at most 300; the contended workload at its real settings, ±2 % and at most
/// 30), at the default target (1 %) and the precise one (0.5 %), with and without an effect
/// that differs from session to session (+2 % in a random half of them, so the population is
/// no longer one hump), each build carrying an arm effect, on a first run (one copy) and
/// after ten runs (eleven). Each interval must contain its population's value.
#[test]
fn the_stopping_rule_covers_the_truth_on_recorded_sessions() {
    let data = recorded();
    let trials = 2000;
    let mut rng = SplitMix64::new(20261201);
    let (mut hits, mut total) = (0usize, 0usize);
    let mut worst = (1.0f64, String::new());
    let mut worst_build = (1.0f64, String::new());
    let mut lines = Vec::new();
    for w in &data.workloads {
        let contended = w.name.contains("contended");
        let builds: Vec<bool> = w
            .comparisons
            .iter()
            .map(|c| !c.starts_with("release-aa") && !w.name.contains(" vs "))
            .collect();
        for inject in [false, true] {
            let population: Vec<Vec<f64>> = w
                .sessions
                .iter()
                .map(|row| {
                    let bump = if inject && rng.below(2) == 0 {
                        log_width(2.0)
                    } else {
                        0.0
                    };
                    row.iter().map(|x| x + bump).collect()
                })
                .collect();
            // The population's 20 % trimmed mean: what the sample's estimates.
            let truth: Vec<f64> = (0..w.comparisons.len())
                .map(|c| trimmed(&population.iter().map(|r| r[c]).collect::<Vec<_>>()).0)
                .collect();
            let settings: &[(f64, usize)] = if contended {
                &[(2.0, 30)]
            } else {
                &[(1.0, 300), (0.5, 300)]
            };
            for &(target, max) in settings {
                for history in [0, 10] {
                    let sim = Sim {
                        population: &population,
                        truth: &truth,
                        pilot: 12,
                        max,
                        target_log: log_width(target),
                        builds: &builds,
                        history,
                    };
                    let mut covered = vec![0usize; truth.len()];
                    for _ in 0..trials {
                        for (i, hit) in simulate(&sim, &mut rng).into_iter().enumerate() {
                            covered[i] += hit as usize;
                        }
                    }
                    for (i, c) in covered.iter().enumerate() {
                        let share = *c as f64 / trials as f64;
                        let what = format!(
                            "{} {} (±{target} %, injected {inject}, {} nulls)",
                            w.name,
                            w.comparisons[i],
                            1 + history
                        );
                        if share < worst.0 {
                            worst = (share, what.clone());
                        }
                        if builds[i] && share < worst_build.0 {
                            worst_build = (share, what);
                        }
                    }
                    hits += covered.iter().sum::<usize>();
                    total += covered.len() * trials;
                    lines.push(format!(
                        "{:>48} ±{target} % injected {inject:>5} nulls {:>2}: {:.1} % covered",
                        w.name,
                        1 + history,
                        100.0 * covered.iter().sum::<usize>() as f64
                            / (covered.len() * trials) as f64,
                    ));
                }
            }
        }
    }
    let coverage = hits as f64 / total as f64;
    eprintln!(
        "{}\nall: {:.2} % of {total} intervals; worst comparison {:.2} %: {}; worst build {:.2} %: {}",
        lines.join("\n"),
        100.0 * coverage,
        100.0 * worst.0,
        worst.1,
        100.0 * worst_build.0,
        worst_build.1
    );
    assert!(
        coverage >= 0.95,
        "coverage {:.2} % < 95 %",
        100.0 * coverage
    );
    // Each comparison's own share, over 2000 trials (binomial sd 0.5 %; the seed is fixed, so
    // the figures are too). When this was written: 97.1 % pooled, the worst 93.0 % (a versus
    // pair at ±1 %), the worst build 94.0 % (the oracle at ±0.5 % on a first run, one copy).
    assert!(worst.0 >= 0.93, "{:.1} % for {}", 100.0 * worst.0, worst.1);
    assert!(
        worst_build.0 >= 0.93,
        "{:.1} % for {}",
        100.0 * worst_build.0,
        worst_build.1
    );
}
