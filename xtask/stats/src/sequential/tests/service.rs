//! Coverage on recorded service sessions, where the time cap ends the comparisons: a capped
//! count's interval is that of all its sessions (`Spend::pilot_or`).

use super::super::*;
use super::{Tally, pilot_of};
use crate::SplitMix64;

/// Service sessions recorded by ten first runs of the example service: per run and workload,
/// per comparison against release, each session's median over its rounds of the log ratio
/// of the server's CPU per request.
#[derive(serde::Deserialize)]
struct RecordedService {
    runs: Vec<RecordedServiceRun>,
}

#[derive(serde::Deserialize)]
struct RecordedServiceRun {
    run: String,
    workload: String,
    sessions: std::collections::BTreeMap<String, Vec<f64>>,
}

/// One service comparison under the rule as `measure::judge` runs it: a pilot of `pilot`
/// sessions, Stein's count for `target` within `max` sessions (the time cap), and, where it
/// `settles`, looks at the pilot's doublings where its interval may lie beyond ±0.5 % (the
/// CPU metric's min effect). Its estimate and half-width at its stop, with a capped count's
/// interval of all its sessions (`new`) or Stein's as before (`!new`).
fn service_stop(values: &[f64], pilot: usize, target: f64, settles: bool, new: bool) -> (f64, f64) {
    let max = values.len();
    let needed = sessions_needed(&values[..pilot], target);
    let planned = needed.clamp(pilot, max);
    let mut n = pilot;
    while settles && n < planned {
        let k = look_at(n, pilot).unwrap();
        let (m, half, _) = interval_df(&values[..n], pilot, look_alpha(k));
        if beyond(m, half, 0.5) {
            return (m, half);
        }
        n *= 2;
    }
    let (m, half, _) = interval_df(
        &values[..planned],
        pilot_of(pilot, new && needed > max),
        ALPHA_PLANNED,
    );
    (m, half)
}

/// A service's CPU per request keeps its coverage when a capped count's interval is that of
/// all its sessions: sessions resampled from ten recorded first runs of the example service
/// (its A/A, lto and lto+pgo comparisons at 4k and 12k requests a second), each comparison's
/// own sessions less their trimmed mean, drawn with replacement within one recorded
/// comparison (its run's own spread and tails) or from all of them pooled, as recorded or
/// twice as wide; an effect added (none, −1 % near the ±0.5 % threshold, −15 %); the rule as
/// `measure::judge` runs it with the example's settings (a pilot of 12, ±0.5 %, the time cap
/// at 24 sessions or a cap of 60), for a comparison that never settles (the A/A arm, a
/// measured build) and one that may (a verdict). Each interval must contain the
/// population's value; the line shows the median half-width beside Stein's at the cap.
#[test]
fn service_sessions_keep_their_coverage_with_a_capped_interval_of_all() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/service-sessions.json"
    );
    let recorded: RecordedService =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut comparisons: Vec<Vec<f64>> = Vec::new();
    for r in &recorded.runs {
        for (c, values) in &r.sessions {
            assert!(
                values.len() >= 20,
                "{} {} {c}: {}",
                r.run,
                r.workload,
                values.len()
            );
            let centre = trimmed(values).0;
            comparisons.push(values.iter().map(|x| x - centre).collect());
        }
    }
    assert_eq!(
        comparisons.len(),
        60,
        "ten runs, two workloads, three comparisons"
    );
    let pooled: Vec<f64> = comparisons.iter().flatten().copied().collect();
    let (pilot, trials) = (12usize, 4000);
    let target = log_width(0.5);
    let mut rng = SplitMix64::new(20261206);
    let mut tally = Tally::default();
    let (mut old_hits, mut old_total) = (0usize, 0usize);
    for (draw, scale) in [("within", 1.0), ("pooled", 1.0), ("pooled", 2.0)] {
        for max in [24usize, 60] {
            for settles in [false, true] {
                for effect in [0.0, log_width(-1.0), log_width(-15.0)] {
                    let (mut covered, mut old) = (0usize, 0usize);
                    let (mut halves, mut old_halves) = (Vec::new(), Vec::new());
                    for _ in 0..trials {
                        let population: &[f64] = if draw == "within" {
                            &comparisons[rng.below(comparisons.len())]
                        } else {
                            &pooled
                        };
                        let truth = effect + scale * trimmed(population).0;
                        let values: Vec<f64> = (0..max)
                            .map(|_| effect + scale * population[rng.below(population.len())])
                            .collect();
                        let (m, half) = service_stop(&values, pilot, target, settles, true);
                        covered += ((m - truth).abs() <= half) as usize;
                        halves.push(100.0 * half);
                        let (m, half) = service_stop(&values, pilot, target, settles, false);
                        old += ((m - truth).abs() <= half) as usize;
                        old_halves.push(100.0 * half);
                    }
                    (old_hits, old_total) = (old_hits + old, old_total + trials);
                    tally.add(
                        format!(
                            "{draw} ×{scale}, cap {max}, {}, effect {:+.0} %",
                            if settles { "settles" } else { "runs on" },
                            100.0 * effect.exp_m1()
                        ),
                        covered,
                        trials,
                        format!(
                            "median ±{:.2} %; Stein's at the cap {:.1} % covered, median ±{:.2} %",
                            crate::median(&halves).unwrap(),
                            100.0 * old as f64 / trials as f64,
                            crate::median(&old_halves).unwrap()
                        ),
                    );
                }
            }
        }
    }
    tally.check(&format!(
        "{} recorded service comparisons, {} sessions; Stein's at the cap: {:.2} % covered\n",
        comparisons.len(),
        pooled.len(),
        100.0 * old_hits as f64 / old_total as f64
    ));
}
