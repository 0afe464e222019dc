//! Paired statistics: per lockstep session r = ln(candidate / baseline), the median of its
//! rounds'. The estimate is a 20 % trimmed mean of r with the stopping rule's interval
//! (`sequential.rs`), widened by the run component (`components.rs`); the oracle capture has a
//! seeded nested bootstrap. Numbers in, numbers out: no processes here.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

pub mod components;
pub mod layout;
pub mod sequential;

/// The comparison of a candidate build with a baseline over paired runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Units of inference: lockstep sessions.
    pub pairs: usize,
    /// Lockstep mode: the rounds behind the sessions, in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<usize>,
    /// The estimate of ln(candidate / baseline): the 20 % trimmed mean over lockstep sessions.
    pub mean_log_ratio: f64,
    /// exp(mean): the typical candidate/baseline ratio.
    pub ratio: f64,
    /// (ratio − 1) × 100: negative is faster.
    pub change_pct: f64,
    /// The 95 % interval of `change_pct`: the stopping rule's, widened by `arm` where given.
    pub ci_low_pct: f64,
    pub ci_high_pct: f64,
    /// Sessions: the degrees of freedom of the sessions' half-width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub df: Option<usize>,
    /// The run component the interval carries (`components.rs`): its sd in % and the null
    /// arms it was estimated from; `None`: the sessions' interval alone (a null arm itself, a
    /// layout variant, workload against workload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arm: Option<components::Component>,
    /// The error the interval spends where the stopping rule gave it less than 5 %
    /// (`sequential.rs`: 4 % at a comparison's planned count, less at an early look); `None`:
    /// 5 %.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
}

impl Estimate {
    /// The same estimate, its interval widened by the run component (`components.rs`).
    pub fn with_arm(&self, arm: Option<&components::Component>) -> Estimate {
        let (Some(arm), Some(df)) = (arm, self.df) else {
            return self.clone();
        };
        let pct = |x: f64| (x.exp() - 1.0) * 100.0;
        let m = self.mean_log_ratio;
        let session_half = ((self.ci_high_pct / 100.0 + 1.0).ln() - m).max(0.0);
        let half = components::widened(session_half, df as f64, arm, self.alpha());
        Estimate {
            ci_low_pct: pct(m - half),
            ci_high_pct: pct(m + half),
            arm: Some(*arm),
            ..self.clone()
        }
    }

    /// The error its interval spends (two-sided).
    pub fn alpha(&self) -> f64 {
        self.alpha.unwrap_or(sequential::ALPHA)
    }

    /// The standard error of the sessions' estimate (log space), from their interval's
    /// half-width and degrees of freedom; `None` without them or once widened.
    pub fn se_log(&self) -> Option<f64> {
        let df = self.df?;
        if self.arm.is_some() {
            return None;
        }
        let half = (self.ci_high_pct / 100.0 + 1.0).ln() - self.mean_log_ratio;
        Some(half.max(0.0) / sequential::t_two_sided(df.max(1), self.alpha()))
    }

    /// Whether the interval holds 0 (a null arm's should).
    pub fn holds_zero(&self) -> bool {
        self.ci_low_pct <= 0.0 && 0.0 <= self.ci_high_pct
    }
}

/// Lockstep sessions: `sessions[s]` holds the per-round ln(candidate / baseline) of session
/// s, in the order the sessions ran, the first `pilot` of them the stopping rule's pilot. The
/// estimate is robust to a speed flip inside a session (the median of its rounds' ratios) and
/// takes sessions as the unit (a 20 % trimmed mean of the session medians): whole sessions
/// differ by per-process effects, rounds within one do not sample those. The interval is the
/// stopping rule's (`sequential::interval`), valid whatever number of sessions the rule chose.
pub fn compare_sessions(sessions: &[Vec<f64>], pilot: usize) -> Result<Estimate> {
    compare_sessions_at(sessions, pilot, sequential::ALPHA)
}

/// [`compare_sessions`] with an interval that misses with probability `alpha`: what the
/// stopping rule spent on the comparison (`sequential.rs`).
pub fn compare_sessions_at(sessions: &[Vec<f64>], pilot: usize, alpha: f64) -> Result<Estimate> {
    if sessions.len() < 2 {
        bail!(
            "{} session(s): an interval needs at least 2",
            sessions.len()
        );
    }
    if let Some(i) = sessions.iter().position(|s| s.is_empty()) {
        bail!("session {i} has no rounds");
    }
    if sessions.iter().flatten().any(|x| !x.is_finite()) {
        bail!("a round's ratio is not a finite number (a zero or negative latency?)");
    }
    let per_session: Vec<f64> = sessions.iter().map(|s| median_of(&mut s.clone())).collect();
    let (m, half, df) = sequential::interval_df(&per_session, pilot, alpha);
    let pct = |x: f64| (x.exp() - 1.0) * 100.0;
    Ok(Estimate {
        pairs: sessions.len(),
        rounds: Some(sessions.iter().map(Vec::len).sum()),
        mean_log_ratio: m,
        ratio: m.exp(),
        change_pct: pct(m),
        ci_low_pct: pct(m - half),
        ci_high_pct: pct(m + half),
        df: Some(df),
        arm: None,
        alpha: (alpha != sequential::ALPHA).then_some(alpha),
    })
}

/// How much of the oracle's gain a candidate gets, both against the same reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capture {
    /// candidate's gain / oracle's gain, in % (100 = all of it).
    pub pct: f64,
    pub ci_low_pct: f64,
    pub ci_high_pct: f64,
    /// Each one's gain against the reference, in % (positive = faster).
    pub candidate_gain_pct: f64,
    pub oracle_gain_pct: f64,
}

/// `cand[s][r]` and `oracle[s][r]`: ln(build / reference) in round r of session s, the same
/// rounds for both. The gain of each is the 20 % trimmed mean over sessions of each session's
/// median over rounds, as in [`compare_sessions`], so that the capture and the rows estimate
/// alike; the capture is their ratio, with a nested bootstrap that draws the same sessions
/// and rounds for both.
///
/// `extra`: what every build's interval carries beyond its sessions' (the arm and run
/// components, [`components::Component`]: the sd of one executable against another). The
/// three executables (candidate, oracle, reference) each get an effect of their own in every
/// resample, normal with half that variance, the variance itself drawn from its scaled
/// inverse χ² on the component's degrees of freedom: the candidate and the oracle share the
/// reference's (docs/findings.md, "A capture needs each executable's own effect").
pub fn capture_nested(
    cand: &[Vec<f64>],
    oracle: &[Vec<f64>],
    extra: Option<&components::Component>,
    resamples: usize,
    seed: u64,
) -> Result<Capture> {
    if cand.len() != oracle.len() || cand.iter().zip(oracle).any(|(a, b)| a.len() != b.len()) {
        bail!("the candidate and the oracle must come from the same sessions and rounds");
    }
    if cand.len() < 2 || cand.iter().any(Vec::is_empty) {
        bail!("an interval needs at least 2 sessions, each with rounds");
    }
    let gain = |x: f64| (1.0 - x.exp()) * 100.0;
    let point = |sessions: &[Vec<f64>]| {
        let medians: Vec<f64> = sessions.iter().map(|s| median_of(&mut s.clone())).collect();
        sequential::trimmed(&medians).0
    };
    let (gc, go) = (gain(point(cand)), gain(point(oracle)));
    let mut rng = SplitMix64::new(seed);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (mut ma, mut mb) = (Vec::new(), Vec::new());
    let mut oracle_gains = Vec::with_capacity(resamples.max(1));
    let mut ratios: Vec<f64> = (0..resamples.max(1))
        .map(|_| {
            ma.clear();
            mb.clear();
            for _ in 0..cand.len() {
                let s = rng.below(cand.len());
                a.clear();
                b.clear();
                for _ in 0..cand[s].len() {
                    let r = rng.below(cand[s].len());
                    a.push(cand[s][r]);
                    b.push(oracle[s][r]);
                }
                ma.push(median_of(&mut a));
                mb.push(median_of(&mut b));
            }
            let (sa, sb) = (sequential::trimmed(&ma).0, sequential::trimmed(&mb).0);
            let (ea, eb) = extra.map_or((0.0, 0.0), |c| executable_effects(c, &mut rng));
            oracle_gains.push(gain(sb + eb));
            100.0 * gain(sa + ea) / gain(sb + eb)
        })
        .filter(|x| x.is_finite())
        .collect();
    oracle_gains.sort_by(f64::total_cmp);
    // A share of a gain that may be none is no figure: divided by a gain near 0, the share
    // and its interval run to absurd values.
    if ratios.is_empty() || quantile_sorted(&oracle_gains, 0.025) <= 0.0 {
        bail!(
            "the oracle's gain over the reference ({go:.1} %) is not distinguishable from 0: no share to give"
        );
    }
    ratios.sort_by(f64::total_cmp);
    Ok(Capture {
        pct: 100.0 * gc / go,
        ci_low_pct: quantile_sorted(&ratios, 0.025),
        ci_high_pct: quantile_sorted(&ratios, 0.975),
        candidate_gain_pct: gc,
        oracle_gain_pct: go,
    })
}

/// One resample's executable effects for [`capture_nested`]: (candidate − reference,
/// oracle − reference) in log space. σ² is drawn as ν·σ̂²/χ²_ν (its uncertainty on ν degrees
/// of freedom, capped at 200 where the draw hardly varies), each executable's effect as
/// N(0, σ²/2), so that one executable against another has variance σ².
fn executable_effects(c: &components::Component, rng: &mut SplitMix64) -> (f64, f64) {
    if c.sd == 0.0 {
        return (0.0, 0.0);
    }
    let nu = c.df.clamp(1, 200);
    let chi2: f64 = (0..nu).map(|_| rng.normal().powi(2)).sum();
    let sd = (nu as f64 * c.sd * c.sd / chi2.max(1e-12) / 2.0).sqrt();
    let reference = sd * rng.normal();
    let (cand, oracle) = (sd * rng.normal(), sd * rng.normal());
    (cand - reference, oracle - reference)
}

/// The median of `v`, reordering it in place (the bootstrap's inner loop); `v` not empty.
fn median_of(v: &mut [f64]) -> f64 {
    let n = v.len();
    let (_, &mut hi, _) = v.select_nth_unstable_by(n / 2, f64::total_cmp);
    if n % 2 == 1 {
        hi
    } else {
        let lo = v[..n / 2].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo + hi) / 2.0
    }
}

/// A seed drawn for this run: the kernel's random bytes (`/dev/urandom`), else the clock
/// and the process id. Recorded with what it seeded, so the run can be replayed.
pub fn fresh_seed() -> u64 {
    use std::io::Read;
    let mut buf = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok()
    {
        return u64::from_le_bytes(buf);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    SplitMix64::new(now ^ (std::process::id() as u64) << 32).next_u64()
}

/// SplitMix64: a small, well-known seeded generator (Steele, Lea, Flood 2014).
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below 2^-32 for small n).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }
    /// A standard normal draw (Box–Muller), for the simulations (here and in xtask's tests).
    pub fn normal(&mut self) -> f64 {
        let a = ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let b = ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        (-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()
    }
    /// Shuffles in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

/// Linear-interpolated quantile of sorted data.
fn quantile_sorted(v: &[f64], q: f64) -> f64 {
    let pos = q * (v.len() - 1) as f64;
    let (i, frac) = (pos.floor() as usize, pos - pos.floor());
    if i + 1 < v.len() {
        v[i] + frac * (v[i + 1] - v[i])
    } else {
        v[i]
    }
}

/// What a comparison says, judged against the noise floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Faster,
    Slower,
    NoDetectableChange,
    /// Not judged: the workload's figures depend on the machine's load, and too few of its
    /// sessions ran on a quiet machine.
    NotJudged,
}

/// "faster" or "slower" only when the whole interval lies beyond ±`threshold_pct`.
pub fn verdict(e: &Estimate, threshold_pct: f64) -> Verdict {
    if e.ci_high_pct < -threshold_pct {
        Verdict::Faster
    } else if e.ci_low_pct > threshold_pct {
        Verdict::Slower
    } else {
        Verdict::NoDetectableChange
    }
}

/// The noise floor from an A/A comparison: the farther bound of its interval from zero, in %.
pub fn noise_floor_pct(aa: &Estimate) -> f64 {
    aa.ci_low_pct.abs().max(aa.ci_high_pct.abs())
}

/// The median of `values` (mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| median_of(&mut values.to_vec()))
}

/// Spearman's rank correlation of `x` and `y` (ties take their mean rank); `None` for fewer
/// than three pairs, unequal lengths, or a side without spread.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() != y.len() || x.len() < 3 {
        return None;
    }
    let ranks = |v: &[f64]| {
        let mut order: Vec<usize> = (0..v.len()).collect();
        order.sort_by(|a, b| v[*a].total_cmp(&v[*b]));
        let mut rank = vec![0.0; v.len()];
        let mut i = 0;
        while i < order.len() {
            let mut j = i;
            while j + 1 < order.len() && v[order[j + 1]] == v[order[i]] {
                j += 1;
            }
            for k in &order[i..=j] {
                rank[*k] = (i + j) as f64 / 2.0 + 1.0;
            }
            i = j + 1;
        }
        rank
    };
    let (rx, ry) = (ranks(x), ranks(y));
    let mean = (x.len() as f64 + 1.0) / 2.0;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        sxy += (a - mean) * (b - mean);
        sxx += (a - mean) * (a - mean);
        syy += (b - mean) * (b - mean);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_ranks_with_ties_at_their_mean_rank() {
        let x = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(spearman(&x, &[10.0, 20.0, 30.0, 400.0]), Some(1.0));
        assert_eq!(spearman(&x, &[4.0, 3.0, 2.0, 1.0]), Some(-1.0));
        // y's ranks 1, 2.5, 2.5, 4 against 1..4: 4.5 / sqrt(5 * 4.5).
        let r = spearman(&x, &[1.0, 5.0, 5.0, 9.0]).unwrap();
        assert!((r - 4.5 / (5.0f64 * 4.5).sqrt()).abs() < 1e-12, "{r}");
        assert_eq!(spearman(&x, &[1.0; 4]), None);
        assert_eq!(spearman(&x[..2], &[1.0, 2.0]), None);
    }

    /// Synthetic lockstep sessions: per round, baseline and candidate batches measured
    /// moments apart, so both see the machine's state of that round: fast (170 ns) or slow
    /// (235 ns), flipping every `flip_every` rounds. Each session has a per-process offset of
    /// the candidate (±`session_spread`), and each batch a little noise of its own. The true
    /// ratio is `ratio`.
    fn sessions(
        n: usize,
        rounds: usize,
        ratio: f64,
        flip_every: usize,
        session_spread: f64,
        seed: u64,
    ) -> Vec<Vec<f64>> {
        let mut rng = SplitMix64::new(seed);
        let mut u = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
        (0..n)
            .map(|_| {
                let offset = 1.0 + 2.0 * session_spread * u();
                (0..rounds)
                    .map(|r| {
                        let state = if (r / flip_every).is_multiple_of(2) {
                            170.0
                        } else {
                            235.0
                        };
                        let base = state * (1.0 + 0.01 * u());
                        let cand = state * ratio * offset * (1.0 + 0.01 * u());
                        (cand / base).ln()
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_session_interval_covers_a_known_ratio_through_state_flips() {
        // 3 % slower, the machine flipping state every 7 rounds, ±1 % per-process offsets.
        let s = sessions(12, 200, 1.03, 7, 0.01, 5);
        let e = compare_sessions(&s, 12).unwrap();
        assert!(e.ci_low_pct < 3.0 && 3.0 < e.ci_high_pct, "{e:?}");
        assert!(e.ci_high_pct - e.ci_low_pct < 1.5, "{e:?}");
        assert_eq!((e.pairs, e.rounds), (12, Some(2400)));
        // A/A under the same flips: an interval around 0, and narrow.
        let aa = compare_sessions(&sessions(12, 200, 1.0, 7, 0.01, 9), 12).unwrap();
        assert!(aa.ci_low_pct < 0.0 && 0.0 < aa.ci_high_pct, "{aa:?}");
        assert!(noise_floor_pct(&aa) < 1.0, "{aa:?}");
    }

    #[test]
    fn capture_is_the_share_of_the_oracles_gain() {
        // Against the same reference: the oracle 10 % faster, the candidate 8 % faster.
        let oracle = sessions(12, 40, 0.90, 7, 0.005, 21);
        let cand: Vec<Vec<f64>> = oracle
            .iter()
            .map(|s| {
                s.iter()
                    .map(|x| x - (0.90f64).ln() + (0.92f64).ln())
                    .collect()
            })
            .collect();
        let c = capture_nested(&cand, &oracle, None, 2000, 1).unwrap();
        assert!((c.pct - 80.0).abs() < 3.0, "{c:?}");
        assert!(c.ci_low_pct <= c.pct && c.pct <= c.ci_high_pct, "{c:?}");
        assert!((c.candidate_gain_pct - 8.0).abs() < 0.6, "{c:?}");
        assert!(capture_nested(&cand[..1], &oracle[..1], None, 100, 1).is_err());
        // An oracle no faster than the reference: no share.
        let flat = sessions(12, 40, 1.0, 7, 0.005, 22);
        let err = capture_nested(&cand, &flat, None, 2000, 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not distinguishable from 0"), "{err}");
        assert!(capture_nested(&cand, &oracle[..3], None, 100, 1).is_err());
    }

    #[test]
    fn capture_carries_the_executables_own_effects_across_runs() {
        // 300 runs of the same builds: candidate 8 % and oracle 10 % faster than the reference
        // (a capture of 80 %), each executable off by its own effect in each run (sd 1 %
        // between two executables: the arm and run components), 16 sessions of 12 rounds.
        let sigma = 0.01;
        let component = components::Component { sd: sigma, df: 40 };
        let mut rng = SplitMix64::new(7);
        let (mut with, mut without) = (0, 0);
        let runs = 300;
        for run in 0..runs {
            let mut effect = || sigma / 2f64.sqrt() * rng.normal();
            let (r, c, o) = (effect(), effect(), effect());
            let mut one = |gain: f64, e: f64| -> Vec<Vec<f64>> {
                (0..16)
                    .map(|_| {
                        (0..12)
                            .map(|_| (1.0 - gain).ln() + e - r + 0.01 * rng.normal())
                            .collect()
                    })
                    .collect()
            };
            let (cand, oracle) = (one(0.08, c), one(0.10, o));
            let covers = |x: &Capture| x.ci_low_pct <= 80.0 && 80.0 <= x.ci_high_pct;
            without += covers(&capture_nested(&cand, &oracle, None, 1000, run).unwrap()) as u32;
            with += covers(&capture_nested(&cand, &oracle, Some(&component), 1000, run).unwrap())
                as u32;
        }
        let pct = |n: u32| 100.0 * n as f64 / runs as f64;
        eprintln!(
            "capture's coverage over {runs} runs: {:.1} % with the executables' effects, {:.1} % without",
            pct(with),
            pct(without)
        );
        // The sessions alone cover the truth in about a quarter of the runs; with the
        // executables' effects drawn in every resample, in about 95 %.
        assert!(pct(without) < 60.0, "without: {:.1} %", pct(without));
        assert!(pct(with) >= 92.0, "with: {:.1} %", pct(with));
    }

    #[test]
    fn a_flip_inside_a_round_moves_the_session_median_little() {
        // One round in ten caught a flip between the two batches (a ratio of 235/170 or its
        // inverse): the mean of the ratios would move, the median of the rounds does not.
        let mut s = sessions(6, 100, 1.02, 1000, 0.0, 3);
        for session in &mut s {
            for (r, x) in session.iter_mut().enumerate() {
                if r % 10 == 0 {
                    *x += (235.0f64 / 170.0).ln();
                }
            }
        }
        let e = compare_sessions(&s, 6).unwrap();
        assert!((e.change_pct - 2.0).abs() < 0.5, "{e:?}");
        let contaminated_mean: f64 =
            s.iter().flatten().sum::<f64>() / s.iter().flatten().count() as f64;
        assert!(((contaminated_mean.exp() - 1.0) * 100.0 - 2.0).abs() > 2.0);
    }

    #[test]
    fn the_session_interval_refuses_what_it_cannot_judge() {
        assert!(compare_sessions(&[vec![0.1]], 2).is_err());
        assert!(compare_sessions(&[vec![0.1], vec![]], 2).is_err());
        assert!(compare_sessions(&[vec![0.1], vec![f64::NAN]], 2).is_err());
        assert_eq!(median(&[3.0, 1.0, 2.0, 4.0]), Some(2.5));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[]), None);
    }
}
