//! The variance components of a comparison, and the arm's own.
//!
//! The model (log space, one comparison of arm c against release):
//!
//! ```text
//! y[s][r] = δ + a + u[s] + e[s][r]
//! ```
//!
//! with δ the effect of the code, `a` the arm's own effect (its file: what stays with an arm
//! for a whole run; its place in the session and its heap offsets are drawn anew every
//! session, so those parts move into u), u[s] ~ (0, σ_s²) the session's (a process's addresses, the
//! machine's state while it ran) and e[s][r] ~ (0, σ_r²) the round's. The sessions give δ + a
//! with the stopping rule's interval; `a` is invisible to them. Its variance σ_a² is estimated
//! from null arms in other files, which have δ = 0 by construction (the copy: release's bytes
//! in another file; the A/A arm, release's own file, has no `a` to show and is left out): a
//! null's estimate d_k has E[d_k²] = σ_a² + se_k², and
//! σ̂_a² = mean(d_k²), K degrees of freedom (the nulls are centred on 0 by construction, not
//! on their mean). The nulls' own noise is left in on purpose: taken out (the method of
//! moments), a handful of nulls often reads σ_a = 0 and the simulated coverage fell to 93 %. Nulls of earlier runs of the
//! same workload are pooled with this run's (`analysis::history`), so K grows run by run. A
//! comparison's interval is then δ̂ ± t(ν)·√(se² + σ̂_a²), ν by Welch–Satterthwaite.
//!
//! This is the two-level random-effects design of Kalibera and Jones ("Rigorous benchmarking
//! in reasonable time", ISMM 2013), with arms as the third level; σ_s² and σ_r² are estimated
//! by the nested one-way ANOVA's mean squares ([`components`]) and reported, the interval uses
//! the sessions' robust estimate (`sequential.rs`), not these.

use super::sequential::t_two_sided;

/// The arm component, estimated from null arms.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ArmSpread {
    /// σ̂_a, log space.
    pub sd: f64,
    /// The nulls it rests on (its degrees of freedom).
    pub nulls: usize,
}

impl ArmSpread {
    /// From null arms' (estimate, standard error), log space; `None` without any. (The
    /// standard errors are kept for the record; the estimate errs wide by leaving them in.)
    pub fn from_nulls(nulls: &[(f64, f64)]) -> Option<ArmSpread> {
        if nulls.is_empty() {
            return None;
        }
        let mean_square = nulls.iter().map(|(d, _)| d * d).sum::<f64>() / nulls.len() as f64;
        Some(ArmSpread {
            sd: mean_square.sqrt(),
            nulls: nulls.len(),
        })
    }
}

impl ArmSpread {
    /// The run component: the same executables measured in several runs scatter by more
    /// than each run's sessions show (the machine's state of a run, what a run's processes
    /// shared). `groups`: per comparison of fixed executables, each run's (estimate, se);
    /// the pooled within-group variance less the mean se² (method of moments), with
    /// Σ(n − 1) degrees of freedom; `None` without a group of two runs.
    pub fn from_runs(groups: &[Vec<(f64, f64)>]) -> Option<ArmSpread> {
        let (mut ss, mut df, mut noise, mut n) = (0.0, 0usize, 0.0, 0usize);
        for g in groups.iter().filter(|g| g.len() >= 2) {
            let mean = g.iter().map(|x| x.0).sum::<f64>() / g.len() as f64;
            ss += g.iter().map(|x| (x.0 - mean).powi(2)).sum::<f64>();
            df += g.len() - 1;
            noise += g.iter().map(|x| x.1 * x.1).sum::<f64>();
            n += g.len();
        }
        (df > 0).then(|| ArmSpread {
            sd: (ss / df as f64 - noise / n as f64).max(0.0).sqrt(),
            nulls: df,
        })
    }

    /// Two independent components as one: variances add, degrees of freedom by
    /// Welch–Satterthwaite.
    pub fn plus(a: Option<ArmSpread>, b: Option<ArmSpread>) -> Option<ArmSpread> {
        match (a, b) {
            (Some(a), Some(b)) => {
                let (va, vb) = (a.sd * a.sd, b.sd * b.sd);
                if va + vb == 0.0 {
                    return Some(ArmSpread {
                        sd: 0.0,
                        nulls: a.nulls.min(b.nulls),
                    });
                }
                let nu = (va + vb).powi(2) / (va * va / a.nulls as f64 + vb * vb / b.nulls as f64);
                Some(ArmSpread {
                    sd: (va + vb).sqrt(),
                    nulls: (nu.floor() as usize).max(1),
                })
            }
            (a, b) => a.or(b),
        }
    }
}

/// The half-width of an interval that misses with probability `alpha` from the sessions'
/// half-width `half` (at the same `alpha`, with `df` degrees of freedom) and the arm
/// component: t(ν)·√(se² + σ_a²), ν by Welch–Satterthwaite.
pub fn widened(half: f64, df: f64, arm: &ArmSpread, alpha: f64) -> f64 {
    if arm.sd == 0.0 {
        return half;
    }
    let df = df.max(1.0);
    let se = half / t_two_sided(df.round() as usize, alpha);
    let (vs, va) = (se * se, arm.sd * arm.sd);
    let nu = (vs + va).powi(2) / (vs * vs / df + va * va / arm.nulls as f64);
    t_two_sided(nu.floor().max(1.0) as usize, alpha) * (vs + va).sqrt()
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
    use crate::sequential::sd;

    /// Simulated sessions with known components: the ANOVA recovers the rounds' and the
    /// sessions' sd, and null arms with a known arm sd give it back (with their own noise in:
    /// se ≈ 0.07 % here), each within ±20 % (averaged over repetitions, as a run of the
    /// pipeline pools nulls over runs).
    #[test]
    fn the_components_recover_known_ones() {
        let mut rng = SplitMix64::new(32);
        let (rounds_sd, sessions_sd, arm_sd) = (0.010, 0.004, 0.003);
        let (mut r_sum, mut s_sum, reps) = (0.0, 0.0, 50);
        let mut nulls = Vec::new();
        for _ in 0..reps {
            let arm = arm_sd * rng.normal();
            let sessions: Vec<Vec<f64>> = (0..40)
                .map(|_| {
                    let u = sessions_sd * rng.normal();
                    (0..12)
                        .map(|_| arm + u + rounds_sd * rng.normal())
                        .collect()
                })
                .collect();
            let c = components(&sessions).unwrap();
            r_sum += c.rounds_sd;
            s_sum += c.sessions_sd;
            // The null's estimate and its standard error, as the sessions give them.
            let means: Vec<f64> = sessions
                .iter()
                .map(|r| r.iter().sum::<f64>() / r.len() as f64)
                .collect();
            let d = means.iter().sum::<f64>() / means.len() as f64;
            nulls.push((d, sd(&means) / (means.len() as f64).sqrt()));
        }
        let (r, s) = (r_sum / reps as f64, s_sum / reps as f64);
        let a = ArmSpread::from_nulls(&nulls).unwrap();
        eprintln!(
            "rounds {r} sessions {s} arm {} (truth {rounds_sd} {sessions_sd} {arm_sd})",
            a.sd
        );
        assert!((r - rounds_sd).abs() < 0.2 * rounds_sd, "rounds {r}");
        assert!((s - sessions_sd).abs() < 0.2 * sessions_sd, "sessions {s}");
        assert!((a.sd - arm_sd).abs() < 0.2 * arm_sd, "arm {}", a.sd);
        assert_eq!(a.nulls, reps);
        // No arm effect: the component is the nulls' noise alone and barely widens an interval.
        let quiet: Vec<(f64, f64)> = (0..50).map(|_| (0.001 * rng.normal(), 0.001)).collect();
        let q = ArmSpread::from_nulls(&quiet).unwrap();
        assert!(q.sd < 0.0013, "{q:?}");
        assert!(widened(0.01, 20.0, &q, 0.05) < 0.0105);
        // A real one widens it: ±1 % of sessions and an arm sd of 0.5 % from 13 nulls.
        let w = widened(
            0.01,
            20.0,
            &ArmSpread {
                sd: 0.005,
                nulls: 13,
            },
            0.05,
        );
        assert!(w > 0.014 && w < 0.016, "{w}");
        assert!(ArmSpread::from_nulls(&[]).is_none());
        // The run component: three comparisons, each measured in four runs whose estimates
        // scatter by a run effect of sd 0.5 % beyond their own se of 0.2 %.
        let mut runs_sd = 0.0;
        for _ in 0..reps {
            let groups: Vec<Vec<(f64, f64)>> = (0..3)
                .map(|c| {
                    (0..4)
                        .map(|_| {
                            (
                                0.1 * c as f64 + 0.005 * rng.normal() + 0.002 * rng.normal(),
                                0.002,
                            )
                        })
                        .collect()
                })
                .collect();
            let r = ArmSpread::from_runs(&groups).unwrap();
            assert_eq!(r.nulls, 9);
            runs_sd += r.sd;
        }
        let runs_sd = runs_sd / reps as f64;
        assert!((runs_sd - 0.005).abs() < 0.001, "run sd {runs_sd}");
        assert!(ArmSpread::from_runs(&[vec![(0.1, 0.01)]]).is_none());
        // Two components: variances add.
        let both = ArmSpread::plus(
            Some(ArmSpread {
                sd: 0.003,
                nulls: 10,
            }),
            Some(ArmSpread {
                sd: 0.004,
                nulls: 10,
            }),
        )
        .unwrap();
        assert!(
            (both.sd - 0.005).abs() < 1e-12 && both.nulls >= 10,
            "{both:?}"
        );
        assert_eq!(ArmSpread::plus(None, Some(q)), Some(q));
        assert!(components(&[vec![0.0, 1.0]]).is_none());
    }
}
