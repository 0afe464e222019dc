//! Quantiles of a clock that advances in steps.
//!
//! The clock advances in steps (docs/findings.md): an iteration reads as one step or the next,
//! never between, so a batch's nearest-rank median jumps between two values, and a ratio of
//! two of them by a whole step's share. [`grouped_quantile`] interpolates within the step instead: it
//! moves smoothly with the share of values on either side of a step, which is what a small
//! change in the true time changes.

/// The q-quantile of sorted, stepped values, interpolated as for grouped data. Values within
/// 2 ns of their neighbour form one step (the clock reads 130 or 131 for the same tick); each
/// step is a class from the midpoint with the step below to the midpoint with the step above
/// (half a gap beyond the ends); the quantile lies in the class holding the q·n-th value, as
/// far into it as that value's rank is into the class's count. NaN for no values.
pub fn grouped_quantile(sorted: &[u64], q: f64) -> f64 {
    // (centre, count) of each step, in order.
    let mut steps: Vec<(f64, usize)> = Vec::new();
    let (mut sum, mut count) = (0u64, 0usize);
    for (i, &v) in sorted.iter().enumerate() {
        if i > 0 && v > sorted[i - 1] + 2 {
            steps.push((sum as f64 / count as f64, count));
            (sum, count) = (0, 0);
        }
        sum += v;
        count += 1;
    }
    if count > 0 {
        steps.push((sum as f64 / count as f64, count));
    }
    match steps.len() {
        0 => return f64::NAN,
        1 => return steps[0].0,
        _ => {}
    }
    let target = q * sorted.len() as f64;
    let mut below = 0usize;
    for (k, &(centre, n)) in steps.iter().enumerate() {
        if (below + n) as f64 >= target || k == steps.len() - 1 {
            let lower = match k {
                0 => centre - (steps[1].0 - centre) / 2.0,
                _ => (steps[k - 1].0 + centre) / 2.0,
            };
            let upper = match steps.get(k + 1) {
                Some(next) => (centre + next.0) / 2.0,
                None => centre + (centre - steps[k - 1].0) / 2.0,
            };
            let into = ((target - below as f64) / n as f64).clamp(0.0, 1.0);
            return lower + into * (upper - lower);
        }
        below += n;
    }
    unreachable!("the last step ends the loop")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_quantiles_move_smoothly_across_clock_steps() {
        // 10 ns steps: the nearest-rank median is 130 either way; the interpolated one moves
        // with the share of values at 130.
        let v: Vec<u64> = [vec![130; 800], vec![140; 200]].concat();
        assert_eq!(grouped_quantile(&v, 0.5), 125.0 + 0.5 / 0.8 * 10.0);
        let v: Vec<u64> = [vec![130; 700], vec![140; 300]].concat();
        assert_eq!(grouped_quantile(&v, 0.5), 125.0 + 0.5 / 0.7 * 10.0);
        // 130 and 131 are one tick read two ways: one step.
        let v: Vec<u64> = [vec![130; 400], vec![131; 400], vec![140; 200]].concat();
        let m = grouped_quantile(&v, 0.5);
        assert!((m - (125.75 + 0.5 / 0.8 * 9.5)).abs() < 1e-9, "{m}");
        // The tail: p99 in the last step.
        let v: Vec<u64> = [vec![130; 980], vec![250; 20]].concat();
        assert_eq!(grouped_quantile(&v, 0.99), 190.0 + 0.5 * 120.0);
        assert_eq!(grouped_quantile(&[7, 7, 7], 0.99), 7.0);
        assert!(grouped_quantile(&[], 0.5).is_nan());
    }
}
