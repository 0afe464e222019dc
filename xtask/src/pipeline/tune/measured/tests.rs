//! The rule, the candidates and the rounds of `tune --measure` on made-up figures.
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
                threshold_pct: 0.0,
                capture_pct: None,
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
    // a at 8 against 16 and 32: in lowest terms.
    assert_eq!(got[2].1, w(&[("a", 1), ("b", 2), ("c", 4)]));
    // The agreement kept the config's mix (or a multiple of it): measured once.
    let got = candidates(&config, &w(&[("a", 16), ("b", 2), ("c", 4)]));
    assert_eq!(got.len(), 4, "{got:?}");
    // One training workload: nothing to weigh down.
    assert_eq!(candidates(&w(&[("a", 1)]), &w(&[("a", 1)])).len(), 1);
}

#[test]
fn without_captures_a_mix_is_kept_only_when_faster_beyond_its_interval_and_never_slower() {
    // Faster on one beyond its interval, slower by its estimate alone on another: may be
    // kept (the measured B of docs/results/2026-12-03-fresh-vm.md).
    let mixed = mix("less-a", &[(-6.3, -10.5, -1.9), (1.7, -0.2, 3.6)]);
    assert_eq!(
        choose(std::slice::from_ref(&mixed), &[]).map(|m| m.label.as_str()),
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
    assert_eq!(choose(&all, &[]).map(|m| m.label.as_str()), Some("less-b"));
    // Of two kept, the larger smallest gain wins.
    let best = mix("less-d", &[(-1.0, -1.8, -0.2), (-0.9, -1.5, -0.3)]);
    assert_eq!(
        choose(&[better, best], &[]).map(|m| m.label.as_str()),
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
    assert_eq!(choose(&all, &[]).map(|m| m.label.as_str()), None);
    assert_eq!(leader(&all, &[]).map(|m| m.label.as_str()), Some("less-b"));
    let seen: Vec<Weights> = round1.iter().map(|(_, w)| w.clone()).collect();
    let got = neighbours(&config, &lead, &seen);
    let labels: Vec<&str> = got.iter().map(|(l, _)| l.as_str()).collect();
    // The leader again, then b weighed down with a, and with c; b is not weighed down
    // twice.
    assert_eq!(labels, ["less-b", "less-b+a", "less-b+c"]);
    assert_eq!(got[1].1, w(&[("a", 8), ("b", 1), ("c", 32)]));
    // Every workload but one weighed down is the config's mix with that one weighed up:
    // a new mix; every workload weighed down is the config's again, and not measured.
    let mut two = lead.clone();
    two.label = "less-b+a".to_string();
    two.weights = got[1].1.clone();
    let got = neighbours(&config, &two, &seen);
    assert_eq!(got.len(), 1, "{got:?}");
    // Nothing slower-free and faster anywhere: no leader, the search ends.
    assert!(leader(&all[2..], &[]).is_none());
}

/// A mix whose changes are `(change, low, high, capture)` per workload v0, v1, ….
fn captured(label: &str, changes: &[(f64, f64, f64, Option<f64>)]) -> Mix {
    let mut m = mix(
        label,
        &changes
            .iter()
            .map(|(c, lo, hi, _)| (*c, *lo, *hi))
            .collect::<Vec<_>>(),
    );
    for (c, (_, _, _, capture)) in m.against_config.iter_mut().zip(changes) {
        c.capture_pct = *capture;
    }
    m
}

#[test]
fn with_captures_a_real_gain_is_kept_when_the_smallest_capture_rises() {
    // The config captures 95 % on v0 and 76 % on v1; v2 has no oracle gain.
    let config: Captures = vec![
        ("v0".to_string(), Some(95.0)),
        ("v1".to_string(), Some(76.0)),
        ("v2".to_string(), None),
    ];
    let none = (0.1, -0.5, 0.7, None);
    // v0 pays for v1 (slower beyond its interval there), and both stay at 88 %: kept.
    let trade = captured(
        "trade",
        &[
            (2.0, 1.0, 3.0, Some(88.0)),
            (-1.5, -2.2, -0.8, Some(88.0)),
            none,
        ],
    );
    // Both above the config's 76 % too, but the smallest (85 %) lower than the trade's.
    let better = captured(
        "better",
        &[
            (0.5, -0.3, 1.3, Some(92.0)),
            (-1.1, -1.8, -0.4, Some(85.0)),
            none,
        ],
    );
    // Faster by its estimates alone: not kept, however high its smallest capture.
    let unclear = captured(
        "unclear",
        &[
            (0.0, -0.7, 0.7, Some(95.0)),
            (-1.0, -2.0, 0.1, Some(90.0)),
            none,
        ],
    );
    // v1 up to 99 %, v0 down to 70 %: the smallest fell.
    let lopsided = captured(
        "lopsided",
        &[
            (5.0, 4.0, 6.0, Some(70.0)),
            (-2.5, -3.2, -1.8, Some(99.0)),
            none,
        ],
    );
    // Slower beyond its interval on v2, which has no capture to trade: not kept.
    let unsafe_ = captured(
        "unsafe",
        &[
            (0.0, -0.7, 0.7, Some(95.0)),
            (-2.0, -2.7, -1.3, Some(93.0)),
            (1.5, 0.8, 2.2, None),
        ],
    );
    // A real gain on v0 (not where the smallest is) and v1 above 76 % by its estimate:
    // kept, and its smallest capture (91 %) is the largest.
    let elsewhere = captured(
        "elsewhere",
        &[
            (-2.0, -2.8, -1.2, Some(99.0)),
            (-0.3, -1.2, 0.6, Some(91.0)),
            none,
        ],
    );
    let all = [
        better.clone(),
        trade.clone(),
        unclear.clone(),
        lopsided.clone(),
        unsafe_,
    ];
    assert_eq!(
        choose(&all, &config).map(|m| m.label.as_str()),
        Some("trade")
    );
    let with = [trade, elsewhere];
    assert_eq!(
        choose(&with, &config).map(|m| m.label.as_str()),
        Some("elsewhere")
    );
    assert_eq!(
        choose(std::slice::from_ref(&better), &config).map(|m| m.label.as_str()),
        Some("better")
    );
    // The same gains within a layout floor of 2 %: chance layout, not kept.
    let mut floored = all.to_vec();
    for m in &mut floored {
        for c in &mut m.against_config {
            c.threshold_pct = 2.0;
        }
    }
    assert!(choose(&floored, &config).is_none());
    // Nothing kept: the round-2 leader is the one whose smallest capture rose most by its
    // estimates, when slower beyond its interval nowhere without a capture.
    let rest = [unclear, lopsided];
    assert!(choose(&rest, &config).is_none());
    assert_eq!(
        leader(&rest, &config).map(|m| m.label.as_str()),
        Some("unclear")
    );
    // Nothing above the config's smallest: no leader.
    assert!(leader(&rest[1..], &config).is_none());
}
