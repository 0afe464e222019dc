//! The layout floor: how far another layout of the same code moves a workload.
//!
//! K variants of one build, each relinked with its functions in another order, are measured
//! against the build itself in the same sessions. Variant k's shift e_k = L_k − L_base (log
//! space) is a draw of "a new layout against this one", which is exactly what another build
//! (with its own, new layout) carries against release on top of its real effect. The 95 %
//! prediction interval of one more draw is mean(e) ± t(K−1)·sd(e)·√(1 + 1/K); the floor is its
//! farther bound from 0 (the mean is the shuffled orders' place against the linker's default
//! order, which every build ships in: it stays in). Shifts of earlier runs' layouts of the
//! same executable pool with this run's ([`pooled`]), so K grows. The sd includes each shift's measurement noise: a
//! build's interval must clear the floor, so that noise counts twice, on purpose (the floor
//! errs wide). The layouts' own sd, that noise removed, is reported beside it; release's noise
//! is common to every variant, so it is removed too much and that figure errs low.

use super::sequential::t95;

/// The variants' shifts and what they say about layouts, in log space.
#[derive(Debug, Clone, PartialEq)]
pub struct Spread {
    /// Each variant's shift (the 20 % trimmed mean of its session values) and its standard
    /// error.
    pub shifts: Vec<(f64, f64)>,
    pub mean: f64,
    /// The shifts' sample sd.
    pub sd: f64,
    /// The layouts' own sd: √max(0, sd² − mean se²).
    pub layout_sd: f64,
    /// The 95 % prediction interval of another layout's shift.
    pub low: f64,
    pub high: f64,
}

/// The spread of `variants` (per variant, its session values against the base); `None` for
/// fewer than two variants or a variant with fewer than two sessions.
#[cfg(test)]
pub fn spread(variants: &[Vec<f64>]) -> Option<Spread> {
    if variants.iter().any(|v| v.len() < 2) {
        return None;
    }
    let shifts: Vec<(f64, f64)> = variants
        .iter()
        .map(|v| {
            let (m, se, _) = super::sequential::trimmed(v);
            (m, se)
        })
        .collect();
    pooled(&shifts)
}

/// The spread of layouts' shifts, each (estimate, standard error) in log space, whichever
/// run measured them; `None` for fewer than two.
pub fn pooled(shifts: &[(f64, f64)]) -> Option<Spread> {
    let k = shifts.len();
    if k < 2 {
        return None;
    }
    let values: Vec<f64> = shifts.iter().map(|s| s.0).collect();
    let mean = values.iter().sum::<f64>() / k as f64;
    let sd = super::sequential::sd(&values);
    let noise = shifts.iter().map(|s| s.1 * s.1).sum::<f64>() / k as f64;
    let half = t95(k - 1) * sd * (1.0 + 1.0 / k as f64).sqrt();
    Some(Spread {
        shifts: shifts.to_vec(),
        mean,
        sd,
        layout_sd: (sd * sd - noise).max(0.0).sqrt(),
        low: mean - half,
        high: mean + half,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SplitMix64;

    /// Sessions of a variant whose true shift is `shift`: per session, the rounds' log ratios
    /// (the machine's state flips cancel within a round's pair) around its processes' own
    /// offset (sd `process`), each round with its own noise.
    fn variant(rng: &mut SplitMix64, shift: f64, sessions: usize, process: f64) -> Vec<f64> {
        (0..sessions)
            .map(|_| {
                let offset = process * rng.normal();
                let mut rounds: Vec<f64> = (0..12)
                    .map(|_| shift + offset + 0.002 * rng.normal())
                    .collect();
                rounds.sort_by(f64::total_cmp);
                (rounds[5] + rounds[6]) / 2.0
            })
            .collect()
    }

    #[test]
    fn another_layout_lands_in_the_prediction_interval() {
        // Layouts with a known spread (sd 0.5 %), four variants and a fifth layout drawn from
        // the same distribution: the fifth's true shift lies inside the interval ~95 % of the
        // time, and the noise-corrected sd recovers 0.5 % on average.
        let mut rng = SplitMix64::new(23);
        let (trials, sigma) = (2000, 0.005);
        let (mut covered, mut sd_sum) = (0, 0.0);
        for _ in 0..trials {
            let base = sigma * rng.normal();
            let shifts: Vec<f64> = (0..4).map(|_| sigma * rng.normal() - base).collect();
            let new = sigma * rng.normal() - base;
            let variants: Vec<Vec<f64>> = shifts
                .iter()
                .map(|s| variant(&mut rng, *s, 30, 0.01))
                .collect();
            let s = spread(&variants).unwrap();
            covered += usize::from(s.low <= new && new <= s.high);
            sd_sum += s.layout_sd;
        }
        let coverage = covered as f64 / trials as f64;
        let mean_sd = sd_sum / trials as f64;
        eprintln!("coverage {coverage}, mean layout sd {mean_sd} (truth {sigma})");
        assert!((0.93..0.995).contains(&coverage), "coverage {coverage}");
        // The sd of 4 draws is biased low (E[s] = 0.92 σ for n = 4) and the correction clips
        // at zero: the mean lands near σ, within 20 %.
        assert!(
            (mean_sd - sigma).abs() < 0.2 * sigma,
            "mean layout sd {mean_sd} against {sigma}"
        );
    }

    #[test]
    fn no_layout_effect_gives_a_floor_of_noise_only() {
        let mut rng = SplitMix64::new(5);
        let variants: Vec<Vec<f64>> = (0..4).map(|_| variant(&mut rng, 0.0, 40, 0.01)).collect();
        let s = spread(&variants).unwrap();
        assert!(s.layout_sd < 0.002, "{s:?}");
        assert!(s.high - s.low < 0.03, "{s:?}");
        assert!(spread(&variants[..1]).is_none(), "one variant is no spread");
    }
}
