//! The variance components of a comparison, and the run component a build may carry.
//!
//! The model (log space, one comparison of arm c against release):
//!
//! ```text
//! y[s][r] = δ + v + u[s] + e[s][r]
//! ```
//!
//! with δ the effect of the code, v the run's (what every session of one run shares for this
//! build), u[s] ~ (0, σ_s²) the session's and e[s][r] ~ (0, σ_r²) the round's. What used to
//! stay with an arm for a whole run is drawn anew every session: its place, its heap offset
//! and its file (every arm runs from a fresh copy of its executable, `measure.fresh_copies`),
//! so those parts are in u[s] and the sessions' own interval covers them. The A/A arm,
//! release's bytes in another new file every session, is the check that must hold 0.
//!
//! v is invisible to one run's sessions. Runs of the same executables show it: their
//! estimates scatter beyond their own standard errors. [`run_test`] asks whether they do
//! (Cochran's Q at [`RUN_TEST_LEVEL`], a liberal level: missing a real component costs
//! coverage, carrying a spurious one only width), and where they do carries τ̂ (DerSimonian
//! and Laird's moment estimate) with its degrees of freedom, for that build alone: a build's
//! interval is then δ̂ ± t(ν)·√(se² + τ̂²), ν by Welch–Satterthwaite ([`widened`]).
//!
//! This is the multi-level design of Kalibera and Jones ("Rigorous benchmarking in
//! reasonable time", ISMM 2013), with runs as the top level; σ_s² and σ_r² are estimated by
//! the nested one-way ANOVA's mean squares ([`components`]) and reported, the interval uses
//! the sessions' robust estimate (`sequential.rs`), not these.

use super::sequential::t_two_sided;

/// A variance component beyond the sessions', carried by an interval.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Component {
    /// Its sd, log space.
    pub sd: f64,
    /// Its degrees of freedom.
    #[serde(alias = "nulls")]
    pub df: usize,
}

/// The level of the run test: a component is carried where runs scatter beyond their
/// intervals with p below this (Bancroft's level for a preliminary test before pooling).
pub const RUN_TEST_LEVEL: f64 = 0.25;

/// The degrees of freedom from which a component seen is carried (four runs of the same
/// executables): on one or two, Student's t is 12.7 or 4.3, and an interval of ±40 % says
/// nothing a user can act on. Seen on fewer, it is reported, not carried.
pub const MIN_RUN_DF: usize = 3;

/// What runs of one build's executables say of a run component.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunTest {
    /// The runs of the same executables (this one among them where it was given).
    pub runs: usize,
    /// Cochran's Q of the runs' estimates about their weighted mean (per pair of
    /// executables), and its degrees of freedom.
    pub q: f64,
    pub df: usize,
    /// P(χ²(df) ≥ Q) without a run component (Wilson–Hilferty).
    pub p: f64,
    /// The component carried, where p < [`RUN_TEST_LEVEL`] on at least [`MIN_RUN_DF`]
    /// degrees of freedom (the runs less one).
    pub carried: Option<Component>,
}

/// The run test of one build: `groups`, per pair of fixed executables, each run's (estimate,
/// se) against release. `None` without a group of two runs.
pub fn run_test(groups: &[Vec<(f64, f64)>]) -> Option<RunTest> {
    let (mut q, mut df, mut c, mut runs) = (0.0, 0usize, 0.0, 0usize);
    for g in groups.iter().filter(|g| g.len() >= 2) {
        let w: Vec<f64> = g.iter().map(|x| 1.0 / x.1.max(1e-6).powi(2)).collect();
        let sw: f64 = w.iter().sum();
        let mean = g.iter().zip(&w).map(|(x, w)| w * x.0).sum::<f64>() / sw;
        q += g
            .iter()
            .zip(&w)
            .map(|(x, w)| w * (x.0 - mean).powi(2))
            .sum::<f64>();
        c += sw - w.iter().map(|w| w * w).sum::<f64>() / sw;
        df += g.len() - 1;
        runs += g.len();
    }
    if df == 0 {
        return None;
    }
    let p = chi_square_upper(q, df as f64);
    let carried = (p < RUN_TEST_LEVEL && df >= MIN_RUN_DF).then(|| Component {
        sd: ((q - df as f64) / c).max(0.0).sqrt(),
        df,
    });
    Some(RunTest {
        runs,
        q,
        df,
        p,
        carried,
    })
}

/// P(χ²(k) ≥ x), by Wilson and Hilferty's normal approximation.
fn chi_square_upper(x: f64, k: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let v = 2.0 / (9.0 * k);
    let z = ((x / k).cbrt() - (1.0 - v)) / v.sqrt();
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// The complementary error function (Numerical Recipes' `erfcc`, relative error < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

impl RunTest {
    /// Whether the runs scattered beyond their intervals (carried or not yet).
    pub fn seen(&self) -> bool {
        self.p < RUN_TEST_LEVEL
    }
}

impl Component {
    /// Two independent components as one: variances add, degrees of freedom by
    /// Welch–Satterthwaite.
    pub fn plus(a: Option<Component>, b: Option<Component>) -> Option<Component> {
        match (a, b) {
            (Some(a), Some(b)) => {
                let (va, vb) = (a.sd * a.sd, b.sd * b.sd);
                if va + vb == 0.0 {
                    return Some(Component {
                        sd: 0.0,
                        df: a.df.min(b.df),
                    });
                }
                let nu = (va + vb).powi(2) / (va * va / a.df as f64 + vb * vb / b.df as f64);
                Some(Component {
                    sd: (va + vb).sqrt(),
                    df: (nu.floor() as usize).max(1),
                })
            }
            (a, b) => a.or(b),
        }
    }
}

/// The half-width of an interval that misses with probability `alpha` from the sessions'
/// half-width `half` (at the same `alpha`, with `df` degrees of freedom) and a component
/// beyond them: t(ν)·√(se² + σ²). ν is the component's own degrees of freedom (the runs less
/// one): σ̂² is the runs' scatter less their own noise, so its variance is about
/// 2(σ² + se²)²/ν, not 2σ⁴/ν, and Welch–Satterthwaite on σ̂² alone would count more degrees
/// of freedom than the runs hold (an interval about 30 % too narrow with four runs and σ near
/// se); the whole of se² + σ̂² is taken to rest on the runs' count instead.
pub fn widened(half: f64, df: f64, extra: &Component, alpha: f64) -> f64 {
    if extra.sd == 0.0 {
        return half;
    }
    let df = df.max(1.0);
    let se = half / t_two_sided(df.round() as usize, alpha);
    let (vs, va) = (se * se, extra.sd * extra.sd);
    t_two_sided(extra.df.max(1), alpha) * (vs + va).sqrt()
}

/// A comparison whose sessions fall into two speeds: each mode's centre (log space) and the
/// share of sessions in the first (the faster, lower one).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Speeds {
    pub low: f64,
    pub high: f64,
    pub low_share: f64,
    /// Ashman's D of the two modes: √2·|μ₁ − μ₂| / √(σ₁² + σ₂²), above 2 for a clean split.
    pub separation: f64,
}

/// How far apart two speeds must be to be named (log space, 2 %): closer modes are within a
/// verdict's threshold of each other, and within a session's own spread (docs/findings.md,
/// "A session's spread is its processes', not its rounds'").
pub const SPEEDS_APART: f64 = 0.02;

/// Whether session values fall into two speeds: a mixture of two normals (fitted by EM) is
/// preferred to one by BIC by more than 10, its modes are apart by Ashman's D > 2 and by at
/// least [`SPEEDS_APART`], and each holds at least 10 % of at least 24 sessions. A heavy tail or a few outlying sessions are
/// not two speeds: a wide second component centred with the first has a small D.
pub fn two_speeds(values: &[f64]) -> Option<Speeds> {
    let n = values.len();
    if n < 24 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let var = values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
    if var <= 0.0 {
        return None;
    }
    let floor = 1e-4 * var;
    let ln_normal = |x: f64, m: f64, v: f64| {
        -0.5 * ((2.0 * std::f64::consts::PI * v).ln() + (x - m).powi(2) / v)
    };
    let one: f64 = values.iter().map(|&x| ln_normal(x, mean, var)).sum();
    // Started from the split at the median, as two halves.
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let (lo, hi) = sorted.split_at(n / 2);
    let moments = |h: &[f64]| {
        let m = h.iter().sum::<f64>() / h.len() as f64;
        let v = h.iter().map(|x| (x - m).powi(2)).sum::<f64>() / h.len() as f64;
        (m, v.max(floor))
    };
    let ((mut m1, mut v1), (mut m2, mut v2)) = (moments(lo), moments(hi));
    let mut p: f64 = 0.5;
    let mut two = f64::NEG_INFINITY;
    for _ in 0..500 {
        let (mut w1, mut s1, mut q1, mut s2, mut q2, mut ll) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        for &x in values {
            let (a, b) = (
                p.ln() + ln_normal(x, m1, v1),
                (1.0 - p).ln() + ln_normal(x, m2, v2),
            );
            let top = a.max(b);
            let total = top + ((a - top).exp() + (b - top).exp()).ln();
            ll += total;
            let r = (a - total).exp();
            w1 += r;
            s1 += r * x;
            q1 += r * x * x;
            s2 += (1.0 - r) * x;
            q2 += (1.0 - r) * x * x;
        }
        let w2 = n as f64 - w1;
        if w1 < 1.0 || w2 < 1.0 {
            return None;
        }
        (m1, m2) = (s1 / w1, s2 / w2);
        v1 = (q1 / w1 - m1 * m1).max(floor);
        v2 = (q2 / w2 - m2 * m2).max(floor);
        p = w1 / n as f64;
        let done = (ll - two).abs() < 1e-9 * ll.abs().max(1.0);
        two = ll;
        if done {
            break;
        }
    }
    let bic = |ll: f64, k: f64| -2.0 * ll + k * (n as f64).ln();
    let separation = std::f64::consts::SQRT_2 * (m1 - m2).abs() / (v1 + v2).sqrt();
    let (low, high, low_share) = if m1 <= m2 {
        (m1, m2, p)
    } else {
        (m2, m1, 1.0 - p)
    };
    (bic(two, 5.0) < bic(one, 2.0) - 10.0
        && separation > 2.0
        && high - low >= SPEEDS_APART
        && low_share.min(1.0 - low_share) >= 0.1)
        .then_some(Speeds {
            low,
            high,
            low_share,
            separation,
        })
}

/// The within-session (rounds) and between-session components of per-round values
/// `sessions[s][r]`: the nested one-way ANOVA's method of moments, sd in log space.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Components {
    pub rounds_sd: f64,
    pub sessions_sd: f64,
}

/// Whether `sessions[s][r]` show no between-session component: the one-way ANOVA's F =
/// MS_between / MS_within is below its 75th percentile under none (a preliminary test at 25 %,
/// the level Bancroft recommends for pooling; F's quantile by Paulson's normal approximation),
/// on the values winsorized at the 20 % trimmed mean's bounds (a whole process that hit a
/// hiccup is an outlier, not a session effect). Then the rounds (turns) can be the unit of
/// inference, not the sessions. `false` for fewer than two sessions of two rounds.
pub fn no_session_component(sessions: &[Vec<f64>]) -> bool {
    let mut all: Vec<f64> = sessions.iter().flatten().copied().collect();
    if all.len() < 4 {
        return false;
    }
    all.sort_by(f64::total_cmp);
    let k = (super::sequential::TRIM * all.len() as f64).floor() as usize;
    let (lo, hi) = (all[k], all[all.len() - 1 - k]);
    let winsorized: Vec<Vec<f64>> = sessions
        .iter()
        .map(|r| r.iter().map(|x| x.clamp(lo, hi)).collect())
        .collect();
    let Some(a) = anova(&winsorized) else {
        return false;
    };
    if a.ms_within <= 0.0 {
        return a.ms_between <= 0.0;
    }
    let f = a.ms_between / a.ms_within;
    let (d1, d2) = (a.df_between as f64, a.df_within as f64);
    let (c1, c2) = (2.0 / (9.0 * d1), 2.0 / (9.0 * d2));
    let z = ((1.0 - c2) * f.cbrt() - (1.0 - c1)) / (c1 + f.cbrt().powi(2) * c2).sqrt();
    z <= super::sequential::normal_quantile(0.75)
}

/// The one-way ANOVA of `sessions` (at least two, each of at least two rounds).
struct Anova {
    ms_between: f64,
    ms_within: f64,
    df_between: usize,
    df_within: usize,
    /// The rounds per session of the expected mean squares (unbalanced: the one-way
    /// ANOVA's n0).
    n0: f64,
}

fn anova(sessions: &[Vec<f64>]) -> Option<Anova> {
    let s = sessions.len();
    if s < 2 || sessions.iter().any(|r| r.len() < 2) {
        return None;
    }
    let means: Vec<f64> = sessions
        .iter()
        .map(|r| r.iter().sum::<f64>() / r.len() as f64)
        .collect();
    let within: f64 = sessions
        .iter()
        .zip(&means)
        .map(|(r, m)| r.iter().map(|x| (x - m) * (x - m)).sum::<f64>())
        .sum();
    let n: usize = sessions.iter().map(Vec::len).sum();
    let n0 = (n as f64
        - sessions
            .iter()
            .map(|r| (r.len() * r.len()) as f64)
            .sum::<f64>()
            / n as f64)
        / (s - 1) as f64;
    let grand = sessions.iter().flatten().sum::<f64>() / n as f64;
    let ms_between = sessions
        .iter()
        .zip(&means)
        .map(|(r, m)| r.len() as f64 * (m - grand) * (m - grand))
        .sum::<f64>()
        / (s - 1) as f64;
    Some(Anova {
        ms_between,
        ms_within: within / (n - s) as f64,
        df_between: s - 1,
        df_within: n - s,
        n0,
    })
}

/// The components of `sessions` (at least two, each of at least two rounds).
pub fn components(sessions: &[Vec<f64>]) -> Option<Components> {
    let a = anova(sessions)?;
    Some(Components {
        rounds_sd: a.ms_within.sqrt(),
        sessions_sd: ((a.ms_between - a.ms_within) / a.n0).max(0.0).sqrt(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pooling test: sessions of independent turns pool (at most about a quarter of the
    /// time they do not, the test's level), sessions with a shift of their own as large as
    /// a turn's spread do not; a few outlying turns do not make a session component.
    #[test]
    fn turns_pool_only_without_a_session_component() {
        let mut rng = SplitMix64::new(11);
        let draw = |between: f64, rng: &mut SplitMix64| -> Vec<Vec<f64>> {
            (0..12)
                .map(|_| {
                    let b = between * rng.normal();
                    (0..20).map(|_| b + 0.02 * rng.normal()).collect()
                })
                .collect()
        };
        let pooled = (0..400)
            .filter(|_| no_session_component(&draw(0.0, &mut rng)))
            .count();
        assert!((260..=340).contains(&pooled), "{pooled} of 400");
        let pooled = (0..400)
            .filter(|_| no_session_component(&draw(0.02, &mut rng)))
            .count();
        assert!(pooled < 8, "{pooled} of 400");
        let mut outliers = draw(0.0, &mut rng);
        while !no_session_component(&outliers) {
            outliers = draw(0.0, &mut rng);
        }
        outliers[3][5] = 1.0;
        outliers[7][0] = -1.0;
        assert!(no_session_component(&outliers));
        assert!(!no_session_component(&[vec![0.1, 0.2]]));
    }
    use crate::SplitMix64;

    /// Simulated sessions with known components: the ANOVA recovers the rounds' and the
    /// sessions' sd within ±20 % (averaged over repetitions).
    #[test]
    fn the_components_recover_known_ones() {
        let mut rng = SplitMix64::new(32);
        let (rounds_sd, sessions_sd) = (0.010, 0.004);
        let (mut r_sum, mut s_sum, reps) = (0.0, 0.0, 50);
        for _ in 0..reps {
            let sessions: Vec<Vec<f64>> = (0..40)
                .map(|_| {
                    let u = sessions_sd * rng.normal();
                    (0..12).map(|_| u + rounds_sd * rng.normal()).collect()
                })
                .collect();
            let c = components(&sessions).unwrap();
            r_sum += c.rounds_sd;
            s_sum += c.sessions_sd;
        }
        let (r, s) = (r_sum / reps as f64, s_sum / reps as f64);
        assert!((r - rounds_sd).abs() < 0.2 * rounds_sd, "rounds {r}");
        assert!((s - sessions_sd).abs() < 0.2 * sessions_sd, "sessions {s}");
        assert!(components(&[vec![0.0, 1.0]]).is_none());
    }

    /// The run test: runs that scatter only by their own se are carried at about the test's
    /// level (a quarter of the time); runs with a component of 0.7 % beyond an se of 0.3 %
    /// are carried nearly always, and the component comes back; one run is no test.
    #[test]
    fn the_run_test_carries_a_component_only_where_runs_show_one() {
        let mut rng = SplitMix64::new(7);
        let se = 0.003;
        let draw = |tau: f64, runs: usize, rng: &mut SplitMix64| -> Vec<(f64, f64)> {
            (0..runs)
                .map(|_| (0.2 + tau * rng.normal() + se * rng.normal(), se))
                .collect()
        };
        let reps = 2000;
        let carried = (0..reps)
            .filter(|_| {
                run_test(&[draw(0.0, 4, &mut rng)])
                    .unwrap()
                    .carried
                    .is_some()
            })
            .count();
        let level = carried as f64 / reps as f64;
        assert!((level - RUN_TEST_LEVEL).abs() < 0.04, "carried {level}");
        let (mut found, mut sd_sum) = (0, 0.0);
        for _ in 0..reps {
            let t = run_test(&[draw(0.007, 8, &mut rng)]).unwrap();
            assert_eq!((t.runs, t.df), (8, 7));
            if let Some(c) = t.carried {
                found += 1;
                sd_sum += c.sd;
            }
        }
        assert!(found as f64 > 0.95 * reps as f64, "found {found}");
        let mean_sd = sd_sum / found as f64;
        assert!((mean_sd - 0.007).abs() < 0.0015, "τ̂ {mean_sd}");
        assert!(run_test(&[vec![(0.1, 0.01)]]).is_none());
        // Two runs far apart: seen, not carried on one degree of freedom.
        let two = run_test(&[vec![(0.10, 0.002), (0.14, 0.002)]]).unwrap();
        assert!(two.seen() && two.carried.is_none(), "{two:?}");
        let two = run_test(&[draw(0.0, 3, &mut rng), draw(0.0, 2, &mut rng)]).unwrap();
        assert_eq!((two.runs, two.df), (5, 3));
        // Wilson–Hilferty against tabulated χ² quantiles.
        assert!((chi_square_upper(7.815, 3.0) - 0.05).abs() < 0.002);
        assert!((chi_square_upper(1.323, 1.0) - 0.25).abs() < 0.01);
        assert!((chi_square_upper(13.36, 8.0) - 0.10).abs() < 0.003);
    }

    /// Components add as variances; a component widens an interval on its own degrees of
    /// freedom.
    #[test]
    fn components_add_and_widen() {
        let both = Component::plus(
            Some(Component { sd: 0.003, df: 10 }),
            Some(Component { sd: 0.004, df: 10 }),
        )
        .unwrap();
        assert!((both.sd - 0.005).abs() < 1e-12 && both.df >= 10, "{both:?}");
        let q = Component { sd: 0.001, df: 50 };
        assert_eq!(Component::plus(None, Some(q)), Some(q));
        // ±1 % of sessions and a run sd of 0.5 % from 13 degrees of freedom: t(13)·√(se² + σ²).
        let w = widened(0.01, 20.0, &Component { sd: 0.005, df: 13 }, 0.05);
        let se = 0.01 / t_two_sided(20, 0.05);
        let expected = t_two_sided(13, 0.05) * (se * se + 0.005f64.powi(2)).sqrt();
        assert!(
            (w - expected).abs() < 1e-12 && w > 0.0145 && w < 0.0155,
            "{w}"
        );
        // A component is carried on the runs' degrees of freedom: few runs, a wide t.
        let few = widened(0.01, 20.0, &Component { sd: 0.005, df: 3 }, 0.05);
        assert!(few > 1.4 * w, "{few} against {w}");
    }

    /// Two speeds are found where sessions fall into two, with their centres and shares; one
    /// speed, a heavy tail or too few sessions are not two.
    #[test]
    fn two_speeds_are_told_from_one_and_from_a_heavy_tail() {
        let mut rng = SplitMix64::new(3);
        let split: Vec<f64> = (0..400)
            .map(|i| {
                let centre = if i % 5 < 3 { -0.06 } else { 0.03 };
                centre + 0.015 * rng.normal()
            })
            .collect();
        let s = two_speeds(&split).expect("two speeds");
        assert!(
            (s.low + 0.06).abs() < 0.005 && (s.high - 0.03).abs() < 0.005,
            "{s:?}"
        );
        assert!(
            (s.low_share - 0.6).abs() < 0.06 && s.separation > 4.0,
            "{s:?}"
        );
        let one: Vec<f64> = (0..400).map(|_| 0.02 * rng.normal()).collect();
        assert_eq!(two_speeds(&one), None);
        let tail: Vec<f64> = (0..400)
            .map(|i| if i % 10 == 0 { 0.08 } else { 0.01 } * rng.normal())
            .collect();
        assert_eq!(two_speeds(&tail), None, "a heavy tail is one speed");
        assert_eq!(two_speeds(&split[..20]), None, "too few sessions");
        // Two tight clusters 1 % apart: modes, but not speeds worth naming.
        let close: Vec<f64> = (0..400)
            .map(|i| if i % 2 == 0 { 0.0 } else { 0.01 } + 0.001 * rng.normal())
            .collect();
        assert_eq!(two_speeds(&close), None, "closer than {SPEEDS_APART}");
    }
}
