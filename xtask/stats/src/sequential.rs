//! The stopping rule: when each comparison of a workload has had sessions enough, and the
//! interval that keeps its 95 % coverage whatever number of sessions that turned out to be.
//!
//! Each comparison (a candidate arm against its baseline) stops on its own, on whichever of
//! two rules comes first, and an arm leaves the sessions once every comparison that needs it
//! has stopped (xtask's `measure/schedule.rs`):
//! - **Its planned count** (Stein's two-stage procedure). The first `pilot` sessions estimate
//!   its standard error; it then runs `N = pilot · (t · se0 / d)²` sessions in all (clamped to
//!   the configured bounds), `d` being its target half-width in log space and `t` the point
//!   of [`ALPHA_PLANNED`] with the pilot's degrees of freedom. `N` depends on the pilot's
//!   *spread* only, never on its estimate, so the estimate over the `N` sessions is nearly
//!   as at a fixed `N`: for a plain mean of normal values `(mean − μ) / (se0 · √(pilot / N))`
//!   is exactly Student's t with `pilot − 1` degrees of freedom (Stein). The interval is the
//!   larger of that one and the interval of all `N` sessions.
//! - **Settled early.** At the looks (the pilot, then each doubling of it, before its planned
//!   count) a build's comparison stops when its interval lies beyond every threshold its
//!   verdict could face by more than its half-width (lto+pgo at −20 % against ±1 %). That rule
//!   looks at the estimate, so its intervals are wider: error spending (Bonferroni over the
//!   looks). Look k spends [`look_alpha`]`(k)` (0.5 %, 0.25 %, …: [`ALPHA_EARLY`] = 1 % in
//!   all), the planned count the remaining 4 %. Whichever interval a comparison ends with,
//!   the chance that it misses is at most the sum: 5 %. A confidence sequence (Howard et al.
//!   2021) would allow a look after every session, at a price: at the session count it is
//!   tuned for, its half-width is about 1.5 times the fixed-count one, so a comparison
//!   stopped on its width needs twice the sessions; here the looks are few and the planned
//!   count pays only t(98 %) for t(97.5 %) (5 % wider at 100 sessions).
//!
//! The sessions are not normal, so the estimate is a 20 % trimmed mean with its winsorized
//! standard error ([`TRIM`]; the degrees of freedom are those of the values kept): the
//! coverage is then approximate, and checked by simulation on recorded sessions, each
//! comparison at its own stopping time (`sequential/tests.rs`). A time cap or a session cap
//! that cuts `N` short leaves the interval wider than the target (and the report says so).
//! Such a count rests on the cap, not on the pilot, so its interval is that of all its
//! sessions, Stein's term dropped: the caps reach the comparisons whose pilots scattered
//! widely, whose values then widen the interval of all of them, never narrow it. The clock
//! depends a little on the batches' own times, which the simulation does not model.

/// The error every watched comparison's interval may spend in all (two-sided): 95 % coverage.
pub const ALPHA: f64 = 0.05;
/// The share of [`ALPHA`] spent on the early looks, where a comparison may stop settled.
pub const ALPHA_EARLY: f64 = 0.01;
/// The share spent at the planned count (and at a cap): what is left.
pub const ALPHA_PLANNED: f64 = ALPHA - ALPHA_EARLY;

/// The error look `k` spends (0: the pilot; k: `pilot · 2^k` sessions): half of
/// [`ALPHA_EARLY`], then half of what is left, and so on.
pub fn look_alpha(k: u32) -> f64 {
    ALPHA_EARLY / 2f64.powi(k as i32 + 1)
}

/// Which look `n` sessions are, for a pilot of `pilot`: `Some(k)` at `pilot · 2^k`.
pub fn look_at(n: usize, pilot: usize) -> Option<u32> {
    if pilot == 0 || n < pilot || !n.is_multiple_of(pilot) || !(n / pilot).is_power_of_two() {
        return None;
    }
    Some((n / pilot).trailing_zeros())
}

/// The standard normal quantile (Acklam's rational approximation, relative error < 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    assert!(p > 0.0 && p < 1.0, "a quantile of (0, 1), not {p}");
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let tail = |q: f64| {
        let q = (-2.0 * q.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail(p)
    } else if p > 1.0 - 0.02425 {
        -tail(1.0 - p)
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Student's t quantile with `df` degrees of freedom: exact for 1 and 2, else the
/// Cornish-Fisher expansion around the normal quantile (Abramowitz & Stegun 26.7.5; at the
/// 97.5 % point within 2e-4 of the tables, relatively, from 5 degrees of freedom, and 1.2e-3
/// at 3).
pub fn t_quantile(df: usize, p: f64) -> f64 {
    assert!(df >= 1, "a t quantile needs at least one degree of freedom");
    match df {
        1 => (std::f64::consts::PI * (p - 0.5)).tan(),
        2 => (2.0 * p - 1.0) / (2.0 * p * (1.0 - p)).sqrt(),
        _ => {
            let z = normal_quantile(p);
            let v = df as f64;
            let z2 = z * z;
            let g1 = (z2 + 1.0) * z / 4.0;
            let g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0;
            let g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0;
            let g4 =
                ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0;
            z + g1 / v + g2 / (v * v) + g3 / (v * v * v) + g4 / (v * v * v * v)
        }
    }
}

/// The two-sided 95 % point of t with `df` degrees of freedom.
pub fn t95(df: usize) -> f64 {
    t_quantile(df, 0.975)
}

/// The two-sided point of t with `df` degrees of freedom for an interval that misses with
/// probability `alpha`.
pub fn t_two_sided(df: usize, alpha: f64) -> f64 {
    t_quantile(df, 1.0 - alpha / 2.0)
}

/// The sample standard deviation (n − 1); 0 for fewer than two values.
pub fn sd(values: &[f64]) -> f64 {
    let n = values.len();
    if n < 2 {
        return 0.0;
    }
    let m = values.iter().sum::<f64>() / n as f64;
    (values.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1) as f64).sqrt()
}

/// The share of sessions trimmed from each end: the estimate is the 20 % trimmed mean of the
/// session values. Session values are skewed and heavy-tailed (a process that drew a bad
/// layout or state sits several sd out), and a plain mean's t interval then undercovers at the
/// session counts used here (simulated on recorded sessions: docs/findings.md, "Sessions are
/// skewed: a trimmed mean keeps the interval honest");
/// the trimmed mean with its winsorized spread (Tukey and McLaughlin; Yuen) keeps 95 %.
pub const TRIM: f64 = 0.2;

/// The 20 % trimmed mean of `values`, its standard error and the count it keeps (its degrees
/// of freedom are one fewer). The standard error is Tukey and McLaughlin's, the winsorized sd
/// over `(1 − 2·TRIM)·√n` (Wilcox's form: the nominal trim, h = n − 2·⌊TRIM·n⌋); below five
/// values nothing is trimmed and it is the plain mean's `s/√n`. (Yuen's `(n − 1)·s_w² /
/// (h·(h − 1))` is up to 9 % narrower at 12 sessions; with it the simulated coverage fell
/// below 95 % on one comparison.)
pub fn trimmed(values: &[f64]) -> (f64, f64, usize) {
    let n = values.len();
    assert!(n >= 1, "a trimmed mean of no values");
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let k = (TRIM * n as f64).floor() as usize;
    let kept = &v[k..n - k];
    let h = kept.len();
    let mean = kept.iter().sum::<f64>() / h as f64;
    let (lo, hi) = (v[k], v[n - 1 - k]);
    let winsorized: Vec<f64> = v.iter().map(|x| x.clamp(lo, hi)).collect();
    let shrink = if k == 0 { 1.0 } else { 1.0 - 2.0 * TRIM };
    let se = sd(&winsorized) / (shrink * (n as f64).sqrt());
    (mean, se, h)
}

/// Stein's second stage: the sessions in all that one comparison needs for a half-width of
/// `target_log` (log space) at [`ALPHA_PLANNED`], from its pilot's session values (at least
/// two): the pilot's standard error, scaled as 1/√N.
pub fn sessions_needed(pilot: &[f64], target_log: f64) -> usize {
    assert!(pilot.len() >= 2, "a pilot of at least two sessions");
    assert!(target_log > 0.0, "a positive target half-width");
    let (_, se, kept) = trimmed(pilot);
    let h = t_two_sided(kept.max(2) - 1, ALPHA_PLANNED) * se / target_log;
    let needed = pilot.len() as f64 * h * h;
    // NaN (a broken pilot) asks for the most the caps allow.
    if needed.is_nan() {
        return usize::MAX;
    }
    needed.ceil().clamp(pilot.len() as f64, u32::MAX as f64) as usize
}

/// The estimate (trimmed mean, log space) of `values` and the half-width of its 95 % interval,
/// the first `pilot` of them having been the pilot (a fixed count: [`ALPHA`]).
#[cfg(test)]
pub fn interval(values: &[f64], pilot: usize) -> (f64, f64) {
    let (estimate, half, _) = interval_df(values, pilot, ALPHA);
    (estimate, half)
}

/// The estimate (trimmed mean, log space) of `values`, the half-width of its interval that
/// misses with probability `alpha`, and the degrees of freedom of that half-width, the first
/// `pilot` values having been the pilot: the larger of Stein's (the pilot's standard error
/// scaled to all of them, with the pilot's degrees of freedom) and the interval of all of
/// them; from four times the pilot on, the interval of all of them (the count then rests on
/// the pilot's spread while the spread rests mostly on later values: Stein's term would only
/// keep a pilot that happened to scatter widely; simulated, the coverage holds). A `pilot` of
/// at least `values.len()` says that no pilot set the count (a cap or a fixed count ended
/// it): the interval of all of them, as at any count fixed in advance.
pub fn interval_df(values: &[f64], pilot: usize, alpha: f64) -> (f64, f64, usize) {
    let n = values.len();
    assert!(n >= 2, "an interval needs at least two sessions");
    let pilot = pilot.clamp(2, n);
    let (_, se0, kept0) = trimmed(&values[..pilot]);
    let (estimate, se, kept) = trimmed(values);
    let stein = t_two_sided(kept0.max(2) - 1, alpha) * se0 * (pilot as f64 / n as f64).sqrt();
    let whole = t_two_sided(kept.max(2) - 1, alpha) * se;
    if stein > whole && n < 4 * pilot {
        (estimate, stein, kept0.max(2) - 1)
    } else {
        (estimate, whole, kept.max(2) - 1)
    }
}

/// Whether an interval (log space) lies beyond ±`threshold_pct` by more than its half-width:
/// wholly faster or wholly slower than the threshold, in %.
pub fn beyond(estimate: f64, half: f64, threshold_pct: f64) -> bool {
    let pct = |x: f64| (x.exp() - 1.0) * 100.0;
    pct(estimate + half) < -threshold_pct || pct(estimate - half) > threshold_pct
}

/// The target half-width in % as a log-ratio half-width: ln(1 + pct/100).
pub fn log_width(pct: f64) -> f64 {
    (1.0 + pct / 100.0).ln()
}

#[cfg(test)]
mod tests;
