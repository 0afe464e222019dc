//! The stopping rule's tests: the t quantiles against the tables, Stein's plan and interval, and
//! the coverage simulated on sessions recorded by a real run.

use super::*;
use crate::SplitMix64;

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
    // The points the stopping rule spends error at (the planned count's 4 %, the looks'
    // 0.5 %, 0.25 %, 0.125 %, 0.0625 %), against the t distribution integrated numerically.
    for (df, alpha, t) in [
        (7, 0.04, 2.516_75),
        (100, 0.04, 2.080_88),
        (5, 0.04, 2.756_51),
        (7, 0.005, 4.029_34),
        (15, 0.0025, 3.623_92),
        (31, 0.001_25, 3.550_87),
    ] {
        let got = t_two_sided(df, alpha);
        assert!(
            (got - t).abs() < 5e-3 * t,
            "t({df}, {alpha}) = {got}, not {t}"
        );
    }
}

#[test]
fn looks_fall_at_the_pilot_and_its_doublings_and_spend_one_percent_in_all() {
    let looks: Vec<(usize, u32)> = (1..=100)
        .filter_map(|n| Some((n, look_at(n, 12)?)))
        .collect();
    assert_eq!(looks, [(12, 0), (24, 1), (48, 2), (96, 3)]);
    assert_eq!(look_at(4, 4), Some(0));
    assert_eq!(look_at(5, 0), None);
    let spent: f64 = (0..40).map(look_alpha).sum();
    assert!(
        spent < ALPHA_EARLY && spent > 0.999 * ALPHA_EARLY,
        "{spent}"
    );
    assert!((ALPHA_PLANNED + ALPHA_EARLY - 0.05).abs() < 1e-15);
    // Beyond ±1 %: wholly faster, wholly slower, or not settled.
    assert!(beyond(log_width(-5.0), 0.01, 1.0));
    assert!(beyond(log_width(5.0), 0.01, 1.0));
    assert!(!beyond(log_width(-1.5), 0.01, 1.0));
    assert!(!beyond(0.0, 0.001, 1.0));
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
        (12.0 * (t_two_sided(7, ALPHA_PLANNED) * se / 0.01).powi(2)).ceil() as usize
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

/// What a file does in the simulation (log space): every arm runs from a fresh copy of its
/// file every session, so each arm's file moves each session's value by an effect drawn anew.
/// The most a build moved against a copy of itself in the recorded runs, and the sessions'
/// spread did not grow with per-session copies (docs/results/2026-12-04-fresh-copies.md).
const FILE_SD: f64 = 0.003;

/// The run component's truth (log space): what every session of one run shares for one build.
/// Runs of the same executables with per-session copies showed a run component for one
/// single-thread build, `try_send`'s lto, and none for the others
/// (docs/results/2026-12-04-fresh-copies.md). Drawn at 1 % for `try_send`'s lto, none for the
/// others.
const RUN_SD_ONE: f64 = 0.010;

/// How one simulated run treats its comparisons.
struct Sim<'a> {
    population: &'a [Vec<f64>],
    truth: &'a [f64],
    pilot: usize,
    max: usize,
    /// Each comparison's target half-width (log space: its role's) and whether it may stop
    /// settled (a verdict's comparison).
    targets: &'a [f64],
    settles: &'a [bool],
    /// The measured comparisons (lto and lto+pgo against release): never settle, and their
    /// target is at least 5 % of the pilot's estimate (`measure::Role::Measured`).
    headline: &'a [bool],
    /// The threshold a settled interval must lie beyond (%): the min effect.
    threshold_pct: f64,
    /// Comparisons that are builds: a run effect each (`run_sd`), and
    /// intervals that carry the run component where earlier runs show one. The others (the
    /// A/A arm, workload against workload) compare the same executable, or two workloads.
    builds: &'a [bool],
    /// Each comparison's run component (log space; 0 for the others).
    run_sd: &'a [f64],
    /// Earlier runs of the same executables (0: a first run).
    history: usize,
    /// Per comparison, the comparison that keeps its arm in the sessions after it settles
    /// (the oracle's capture keeps lto and lto+pgo): a settled one then takes every session
    /// up to that one's stop, at [`ALPHA_PLANNED`] (xtask's `Watched::run_on`, `measure/progress.rs`).
    kept_by: &'a [Option<usize>],
}

/// Where one comparison stops under the rule (`measure::judge`): its planned count (Stein's,
/// within the pilot and `max`) at [`ALPHA_PLANNED`], or, settling, an earlier look at that
/// look's error, its interval widened by the run component `arm` a build carries. Its
/// session count, its interval's error and whether `max` cut its planned count (its interval
/// then of all its sessions: `measure::stops::Spend::pilot_or`).
fn stop_of(
    values: &[f64],
    sim: &Sim,
    c: usize,
    shift: f64,
    arm: Option<&super::super::components::Component>,
) -> (usize, f64, bool) {
    let mut target = sim.targets[c];
    if sim.headline[c] {
        let pilot_pct = 100.0 * trimmed(&values[..sim.pilot]).0.exp_m1().abs();
        target = target.max(log_width(0.05 * pilot_pct));
    }
    let needed = sessions_needed(&values[..sim.pilot], target);
    let planned = needed.clamp(sim.pilot, sim.max);
    if sim.settles[c] {
        let mut n = sim.pilot;
        while n < planned {
            let k = look_at(n, sim.pilot).expect("a look");
            let (m, half, df) = interval_df(&values[..n], sim.pilot, look_alpha(k));
            let half = match arm {
                Some(arm) => super::super::components::widened(half, df as f64, arm, look_alpha(k)),
                None => half,
            };
            if beyond(m + shift, half, sim.threshold_pct) {
                return (n, look_alpha(k), false);
            }
            n *= 2;
        }
    }
    (planned, ALPHA_PLANNED, needed > sim.max)
}

/// The pilot an interval is made with: none (all of its values) where a cap set its count.
fn pilot_of(pilot: usize, capped: bool) -> usize {
    if capped { usize::MAX } else { pilot }
}

/// One simulated measurement under the stopping rule, each comparison stopped at its own
/// time (sessions drawn with replacement; its planned count or an early look where it
/// settles). Each session's value of each comparison moves by its two files' effects (each
/// of sd [`FILE_SD`], drawn per session: the copies); each build's estimate by a run effect of
/// sd `sim.run_sd` (drawn before it is measured: the rule sees it), and its interval carries
/// what the run test finds in `history` earlier runs of the same executables (each with a
/// run effect of its own) and this one. Whether each interval covered its population's
/// value, and each comparison's stop.
fn simulate(sim: &Sim, rng: &mut SplitMix64) -> Vec<(bool, usize, bool, bool)> {
    use super::super::components::{Component, run_test, widened};
    let population = sim.population;
    let k = sim.truth.len();
    let rows: Vec<Vec<f64>> = (0..sim.max)
        .map(|_| {
            let row = &population[rng.below(population.len())];
            let base = FILE_SD * rng.normal();
            row.iter()
                .map(|x| x + FILE_SD * rng.normal() - base)
                .collect()
        })
        .collect();
    let column = |rows: &[Vec<f64>], c: usize| rows.iter().map(|r| r[c]).collect::<Vec<f64>>();
    let shifts: Vec<f64> = (0..k).map(|c| sim.run_sd[c] * rng.normal()).collect();
    // Earlier runs of each build: the truth, a run effect of their own, and their sessions'
    // noise at this run's standard error (as planned for the same target).
    let se_of = |(_, half, df): (f64, f64, usize), alpha: f64| half / t_two_sided(df, alpha);
    let earlier: Vec<Vec<(f64, f64)>> = (0..k)
        .map(|c| {
            if !sim.builds[c] || sim.history == 0 {
                return Vec::new();
            }
            let values = column(&rows, c);
            let n = sessions_needed(&values[..sim.pilot], sim.targets[c]).clamp(sim.pilot, sim.max);
            let se = se_of(
                interval_df(&values[..n], sim.pilot, ALPHA_PLANNED),
                ALPHA_PLANNED,
            );
            (0..sim.history)
                .map(|_| {
                    (
                        sim.truth[c] + sim.run_sd[c] * rng.normal() + se * rng.normal(),
                        se,
                    )
                })
                .collect()
        })
        .collect();
    let prior: Vec<Option<Component>> = earlier
        .iter()
        .map(|e| run_test(std::slice::from_ref(e)).and_then(|t| t.carried))
        .collect();
    let own: Vec<(usize, f64, bool)> = (0..k)
        .map(|c| stop_of(&column(&rows, c), sim, c, shifts[c], prior[c].as_ref()))
        .collect();
    let stops: Vec<(usize, f64, bool)> = (0..k)
        .map(|c| match sim.kept_by[c].map(|o| own[o].0) {
            Some(n) if own[c].1 < ALPHA_PLANNED && n > own[c].0 => (n, ALPHA_PLANNED, false),
            _ => own[c],
        })
        .collect();
    let intervals: Vec<(f64, f64, usize)> = (0..k)
        .map(|c| {
            let pilot = pilot_of(sim.pilot, stops[c].2);
            interval_df(&column(&rows[..stops[c].0], c), pilot, stops[c].1)
        })
        .collect();
    (0..k)
        .map(|c| {
            let (estimate, half, df) = intervals[c];
            let estimate = estimate + shifts[c];
            let settled = own[c].1 < ALPHA_PLANNED;
            let mut runs = earlier[c].clone();
            runs.push((estimate, se_of(intervals[c], stops[c].1)));
            let half = match run_test(&[runs]).and_then(|t| t.carried) {
                Some(run) => widened(half, df as f64, &run, stops[c].1),
                None => half,
            };
            let covered = (estimate - sim.truth[c]).abs() <= half;
            (covered, stops[c].0, settled, stops[c] != own[c])
        })
        .collect()
}

/// The stopping rule with per-session copies and a per-build run component keeps its
/// coverage on real sessions, each
/// comparison at its own stopping time: many measurements simulated by drawing sessions from
/// recorded runs (100 sessions a workload), each comparison stopped on its own (a pilot of
/// 12, then its planned count, at most 300, or settled at a look; the contended workload at
/// its real settings, ±2 % and at most 30; the oracle at its own ±2 %), at the default target
/// (1 %) and the precise one (0.5 %); as recorded, with an effect that differs from session to
/// session (+2 % in a random half of them, so the population is no longer one hump), and
/// with every comparison moved to −2.5 % (near the 1 % threshold, where settling on a look
/// at the estimate is most tempting); every session's arms moved by their files' effects;
/// `try_send`'s lto moved by a run effect ([`RUN_SD_ONE`]), on a first run (no component
/// carried: none can be estimated), a second (seen at most, not carried) and after three and
/// ten runs of the same executables. Each interval must contain its population's
/// value.
#[test]
fn the_stopping_rule_covers_the_truth_on_recorded_sessions() {
    let data = recorded();
    let trials = 2000;
    let mut rng = SplitMix64::new(20261201);
    let (mut hits, mut total) = (0usize, 0usize);
    let mut worst = (1.0f64, String::new());
    let mut worst_build = (1.0f64, String::new());
    let mut unseen = (1.0f64, String::new());
    let mut lines = Vec::new();
    let (mut settled_total, mut sessions_total) = (0usize, 0usize);
    // Settled comparisons whose arms ran on (lto and lto+pgo, kept by the oracle): covered, of.
    let mut ran_on_hits = (0usize, 0usize);
    for w in &data.workloads {
        let contended = w.name.contains("contended");
        let cands: Vec<&str> = w
            .comparisons
            .iter()
            .map(|c| c.split(" / ").next().unwrap())
            .collect();
        let builds: Vec<bool> = w
            .comparisons
            .iter()
            .map(|c| !c.starts_with("release-aa") && !w.name.contains(" vs "))
            .collect();
        // The roles xtask's `measure::Role::of` gives these recorded arms: the A/A arm
        // (`release-aa`) is a null that never settles, the oracle has its own target, lto and
        // lto+pgo are measured to their targets (never settle), and every other arm (BOLT,
        // versus pairs) gets a verdict and may settle.
        let oracle: Vec<bool> = cands.iter().map(|c| *c == "oracle").collect();
        let headline: Vec<bool> = cands
            .iter()
            .map(|c| (*c == "lto+pgo" || *c == "lto") && !w.name.contains(" vs "))
            .collect();
        let settles: Vec<bool> = cands
            .iter()
            .zip(&headline)
            .map(|(c, h)| *c != "oracle" && *c != "release-aa" && !h)
            .collect();
        let oracle_at = cands.iter().position(|c| *c == "oracle");
        let kept_by: Vec<Option<usize>> = cands
            .iter()
            .map(|c| oracle_at.filter(|_| *c == "lto" || *c == "lto+pgo"))
            .collect();
        for scenario in ["recorded", "injected", "near"] {
            let population: Vec<Vec<f64>> = w
                .sessions
                .iter()
                .map(|row| {
                    let bump = if scenario == "injected" && rng.below(2) == 0 {
                        log_width(2.0)
                    } else {
                        0.0
                    };
                    row.iter().map(|x| x + bump).collect()
                })
                .collect();
            let trimmed_of = |pop: &[Vec<f64>], c: usize| {
                trimmed(&pop.iter().map(|r| r[c]).collect::<Vec<_>>()).0
            };
            // Near the threshold: each column moved so that its trimmed mean is −2.5 %.
            let population: Vec<Vec<f64>> = if scenario == "near" {
                let moves: Vec<f64> = (0..w.comparisons.len())
                    .map(|c| log_width(-2.5) - trimmed_of(&population, c))
                    .collect();
                population
                    .iter()
                    .map(|r| r.iter().zip(&moves).map(|(x, m)| x + m).collect())
                    .collect()
            } else {
                population
            };
            // The population's 20 % trimmed mean: what the sample's estimates.
            let truth: Vec<f64> = (0..w.comparisons.len())
                .map(|c| trimmed_of(&population, c))
                .collect();
            let settings: &[(f64, usize)] = if contended {
                &[(2.0, 30)]
            } else {
                &[(1.0, 300), (0.5, 300)]
            };
            for &(target, max) in settings {
                let targets: Vec<f64> = oracle
                    .iter()
                    .map(|&o| log_width(if o { target.max(2.0) } else { target }))
                    .collect();
                let run_sd: Vec<f64> = cands
                    .iter()
                    .zip(&builds)
                    .map(|(c, &b)| match (b, *c) {
                        (false, _) => 0.0,
                        (true, "lto") if w.name == "agent_try_send_latency" => RUN_SD_ONE,
                        (true, _) => 0.0,
                    })
                    .collect();
                for history in [0, 1, 3, 10] {
                    let sim = Sim {
                        population: &population,
                        truth: &truth,
                        pilot: 12,
                        max,
                        targets: &targets,
                        settles: &settles,
                        headline: &headline,
                        threshold_pct: 1.0,
                        builds: &builds,
                        run_sd: &run_sd,
                        history,
                        kept_by: &kept_by,
                    };
                    let mut covered = vec![0usize; truth.len()];
                    let mut settled = vec![0usize; truth.len()];
                    let mut sessions = vec![0usize; truth.len()];
                    for _ in 0..trials {
                        for (i, (hit, n, early, ran_on)) in
                            simulate(&sim, &mut rng).into_iter().enumerate()
                        {
                            let ran_on = ran_on && !(history < 3 && run_sd[i] > 0.0);
                            ran_on_hits.0 += (ran_on && hit) as usize;
                            ran_on_hits.1 += ran_on as usize;
                            covered[i] += hit as usize;
                            settled[i] += early as usize;
                            sessions[i] += n;
                        }
                    }
                    for (i, c) in covered.iter().enumerate() {
                        let share = *c as f64 / trials as f64;
                        let what = format!(
                            "{} {} (±{target} %, {scenario}, run {}: {:.0} sessions, {:.0} % settled)",
                            w.name,
                            w.comparisons[i],
                            1 + history,
                            sessions[i] as f64 / trials as f64,
                            100.0 * settled[i] as f64 / trials as f64
                        );
                        // A first run cannot see a run component: it has no runs to test; a
                        // second carries none yet (`MIN_RUN_DF`). Their coverage is reported
                        // apart.
                        if history < 3 && run_sd[i] > 0.0 {
                            if share < unseen.0 {
                                unseen = (share, what);
                            }
                            continue;
                        }
                        if share < worst.0 {
                            worst = (share, what.clone());
                        }
                        if builds[i] && share < worst_build.0 {
                            worst_build = (share, what);
                        }
                    }
                    hits += covered.iter().sum::<usize>();
                    total += covered.len() * trials;
                    settled_total += settled.iter().sum::<usize>();
                    sessions_total += sessions.iter().sum::<usize>();
                    lines.push(format!(
                        "{:>48} ±{target} % {scenario:>8} run {:>2}: {:.1} % covered, sessions {:?}, settled {:?}",
                        w.name,
                        1 + history,
                        100.0 * covered.iter().sum::<usize>() as f64
                            / (covered.len() * trials) as f64,
                        sessions.iter().map(|n| n / trials).collect::<Vec<_>>(),
                        settled
                            .iter()
                            .map(|n| (100 * n / trials) as u32)
                            .collect::<Vec<_>>(),
                    ));
                }
            }
        }
    }
    let coverage = hits as f64 / total as f64;
    let ran_on = ran_on_hits.0 as f64 / ran_on_hits.1.max(1) as f64;
    eprintln!(
        "{}\nall: {:.2} % of {total} intervals ({:.1} % settled early, {:.1} sessions a comparison; {:.2} % of the {} settled ones whose arms ran on covered); worst comparison {:.2} %: {}; worst build {:.2} %: {}; a build's run component on a first or second run, which cannot carry it: worst {:.2} %: {}",
        lines.join("\n"),
        100.0 * coverage,
        100.0 * settled_total as f64 / total as f64,
        sessions_total as f64 / total as f64,
        100.0 * ran_on,
        ran_on_hits.1,
        100.0 * worst.0,
        worst.1,
        100.0 * worst_build.0,
        worst_build.1,
        100.0 * unseen.0,
        unseen.1
    );
    assert!(
        coverage >= 0.95,
        "coverage {:.2} % < 95 %",
        100.0 * coverage
    );
    // Those that settled and ran on (their interval at the count the oracle set) keep theirs.
    // (lto and lto+pgo, which the oracle keeps, no longer settle: none may be left.)
    assert!(ran_on_hits.1 == 0 || ran_on >= 0.95, "{ran_on_hits:?}");
    // Some comparisons settle early (lto+pgo at −20 % against ±1 %), or the rule is not tried.
    assert!(settled_total > total / 10, "{settled_total} of {total}");
    // Each comparison's own share, over 2000 trials (binomial sd 0.5 %; the seed is fixed, so
    // the figures are too).
    assert!(worst.0 >= 0.93, "{:.1} % for {}", 100.0 * worst.0, worst.1);
    assert!(
        worst_build.0 >= 0.93,
        "{:.1} % for {}",
        100.0 * worst_build.0,
        worst_build.1
    );
}

/// Coverage over the settings of a simulation: each setting's share and line, the worst.
#[derive(Default)]
struct Tally {
    hits: usize,
    total: usize,
    worst: (f64, String),
    lines: Vec<String>,
}

impl Tally {
    /// A setting `what`: `covered` of `trials`, and the rest of its line.
    fn add(&mut self, what: String, covered: usize, trials: usize, rest: String) {
        let share = covered as f64 / trials as f64;
        if self.lines.is_empty() || share < self.worst.0 {
            self.worst = (share, what.clone());
        }
        (self.hits, self.total) = (self.hits + covered, self.total + trials);
        self.lines.push(format!(
            "{what:>32}: {:.1} % covered, {rest}",
            100.0 * share
        ));
    }

    /// Prints every line under `header`; at least 95 % covered in all, 93 % in the worst.
    fn check(&self, header: &str) {
        let (hits, total) = (self.hits, self.total);
        eprintln!(
            "{header}{}\nall: {:.2} %; worst {:.1} % ({})",
            self.lines.join("\n"),
            100.0 * hits as f64 / total as f64,
            100.0 * self.worst.0,
            self.worst.1
        );
        assert!(hits as f64 >= 0.95 * total as f64, "{hits} of {total}");
        assert!(
            self.worst.0 >= 0.93,
            "{:.1} % ({})",
            100.0 * self.worst.0,
            self.worst.1
        );
    }
}

/// One whole-process comparison under the rule as `measure::judge` runs it: where `test`,
/// the pooling test at the pilot of `pilot` sessions (else its values within sessions are
/// its unit: every run from a copy of its own), Stein's count for `target` in pairs (or
/// turns) or in sessions within `max` sessions, looks at the pilot's doublings where its
/// interval may lie beyond ±1 %. Its estimate and half-width at its stop, whether the pairs
/// were its unit, and the sessions it ran.
fn whole_process_stop(
    sessions: &[Vec<f64>],
    pilot: usize,
    target: f64,
    test: bool,
) -> (f64, f64, bool, usize) {
    let (rounds, max) = (sessions[0].len(), sessions.len());
    let pooled = !test || super::super::components::no_session_component(&sessions[..pilot]);
    let values: Vec<f64> = if pooled {
        sessions.iter().flatten().copied().collect()
    } else {
        sessions.iter().map(|s| crate::median(s).unwrap()).collect()
    };
    let per = if pooled { rounds } else { 1 };
    let pilot_values = pilot * per;
    let needed = sessions_needed(&values[..pilot_values], target);
    let planned = needed.clamp(pilot_values, max * per);
    let mut stop = (planned, ALPHA_PLANNED, needed > max * per);
    let mut n = pilot_values;
    while n < planned {
        let k = look_at(n, pilot_values).unwrap();
        let (m, half, _) = interval_df(&values[..n], pilot_values, look_alpha(k));
        if beyond(m, half, 1.0) {
            stop = (n, look_alpha(k), false);
            break;
        }
        n *= 2;
    }
    let (m, half, _) = interval_df(&values[..stop.0], pilot_of(pilot_values, stop.2), stop.1);
    (m, half, pooled, stop.0.div_ceil(per))
}

/// Whole-process turns as the unit keep their coverage at each comparison's own stopping
/// time: sessions of 20 turns, each run ±2 % or ±8 % (5 % of them 5 times as far, either
/// way), each session shifted by a component of its own (none, small enough that the
/// pooling test often misses it, or large), the effect far beyond the ±1 % threshold, near it, or none;
/// the rule as `measure::judge` runs it ([`whole_process_stop`], a pilot of 12 sessions).
#[test]
fn whole_process_turns_keep_their_coverage() {
    let (rounds, pilot, max, trials) = (20usize, 12usize, 60usize, 1000);
    let target = log_width(1.0);
    let mut rng = SplitMix64::new(20261203);
    let (mut tally, mut pooled_total) = (Tally::default(), 0usize);
    for (sd, between) in [
        (0.02, 0.0),
        (0.02, 0.002),
        (0.02, 0.01),
        (0.08, 0.0),
        (0.08, 0.008),
        (0.08, 0.04),
    ] {
        for effect in [-0.05, -0.015, 0.0] {
            let (mut covered, mut pooled, mut units) = (0usize, 0usize, 0usize);
            for _ in 0..trials {
                let sessions: Vec<Vec<f64>> = (0..max)
                    .map(|_| {
                        let b = between * rng.normal();
                        (0..rounds)
                            .map(|_| {
                                let far = if rng.below(20) == 0 { 5.0 } else { 1.0 };
                                effect + b + sd * far * rng.normal()
                            })
                            .collect()
                    })
                    .collect();
                let (m, half, turns, ran) = whole_process_stop(&sessions, pilot, target, true);
                covered += ((m - effect).abs() <= half) as usize;
                pooled += turns as usize;
                units += ran;
            }
            pooled_total += pooled;
            tally.add(
                format!("turns ±{sd}, between {between}, effect {effect}"),
                covered,
                trials,
                format!(
                    "turns the unit in {:.0} %, {:.1} sessions",
                    100.0 * pooled as f64 / trials as f64,
                    units as f64 / trials as f64
                ),
            );
        }
    }
    tally.check("");
    // Turns were the unit in most trials without a large component, or it was not tried.
    assert!(
        pooled_total > tally.total / 3,
        "{pooled_total} of {}",
        tally.total
    );
}

/// Adjacent pairs recorded by real runs of a registry crate's binary (pulldown-cmark 0.13.6,
/// whole-process, the schedule's pairs): per run and comparison against release, its
/// sessions' pair log ratios.
#[derive(serde::Deserialize)]
struct RecordedPairs {
    comparisons: Vec<RecordedComparison>,
}

#[derive(serde::Deserialize)]
struct RecordedComparison {
    sessions: Vec<Vec<f64>>,
}

/// Whole-process pairs keep their coverage, resampled from recorded ones: each comparison's
/// sessions less its own trimmed mean, pooled (so the sessions' own components, and the
/// pairs' tails, are the recorded ones), drawn with replacement as whole sessions, scaled
/// as recorded or three times as wide (as wide as pairs in a noisy hour:
/// docs/results/2026-12-04-whole-process-pairs.md), an effect added; the rule as `measure::judge` runs
/// it on a first run ([`whole_process_stop`]: a pilot of 4 sessions of 6 pairs, ±1 %, pairs
/// the unit as with `measure.fresh_copies`; and, for comparison, with the pooling test). The
/// truth is what the 20 % trimmed mean estimates in that population: the effect plus the
/// pooled pairs' own trimmed mean.
#[test]
fn whole_process_pairs_keep_their_coverage_on_recorded_pairs() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/pairs-pulldown-cmark.json"
    );
    let recorded: RecordedPairs =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut pool: Vec<Vec<f64>> = Vec::new();
    for c in &recorded.comparisons {
        let all: Vec<f64> = c.sessions.iter().flatten().copied().collect();
        let centre = trimmed(&all).0;
        pool.extend(
            c.sessions
                .iter()
                .filter(|s| s.len() == 6)
                .map(|s| s.iter().map(|x| x - centre).collect::<Vec<f64>>()),
        );
    }
    assert!(
        pool.len() >= 100,
        "{} recorded sessions of 6 pairs",
        pool.len()
    );
    let (pilot, max, trials) = (4usize, 100usize, 2000);
    let target = log_width(1.0);
    let mut rng = SplitMix64::new(20261205);
    let mut tally = Tally::default();
    for (scale, test) in [(1.0, false), (3.0, false), (1.0, true), (3.0, true)] {
        let all: Vec<f64> = pool.iter().flatten().map(|x| scale * x).collect();
        let centre = trimmed(&all).0;
        for effect in [-0.15, -0.04, -0.015, 0.0] {
            let (mut covered, mut pooled, mut units) = (0usize, 0usize, 0usize);
            let mut halves = Vec::new();
            for _ in 0..trials {
                let sessions: Vec<Vec<f64>> = (0..max)
                    .map(|_| {
                        let s = &pool[rng.below(pool.len())];
                        s.iter().map(|x| effect + scale * x).collect()
                    })
                    .collect();
                let (m, half, pairs, ran) = whole_process_stop(&sessions, pilot, target, test);
                covered += ((m - effect - centre).abs() <= half) as usize;
                pooled += pairs as usize;
                units += ran;
                halves.push(100.0 * half);
            }
            tally.add(
                format!(
                    "pairs ×{scale}{}, effect {effect}",
                    if test { ", tested" } else { "" }
                ),
                covered,
                trials,
                format!(
                    "pairs the unit in {:.0} %, {:.1} sessions, median ±{:.2} %",
                    100.0 * pooled as f64 / trials as f64,
                    units as f64 / trials as f64,
                    crate::median(&halves).unwrap()
                ),
            );
        }
    }
    tally.check(&format!("{} recorded sessions of 6 pairs\n", pool.len()));
}

/// The service's sessions: a capped count's interval of all of them.
mod service;
