//! Unit tests of `analysis.rs`.

use super::sessions::analyze_lockstep;
use crate::testing::fixtures::builds;

use super::{Bound, LayoutFloor};
use crate::testing::fixtures::measure_config;
use stats::Verdict;

#[test]
fn the_layout_floor_recovers_known_layout_shifts_through_state_flips() {
    // Four layouts of release shifted by known amounts (sd 0.93 %), in sessions whose
    // machine state flips between 170 and 235 ns.
    let shifts = [-1.0, -0.3, 0.4, 1.1];
    let sessions = crate::testing::fixtures::layout_sessions(30, 20, &shifts);
    let w = &analyze_lockstep(
        &["agent_send_latency".into()],
        &builds(),
        &sessions,
        &[],
        &measure_config(),
        &crate::analysis::sessions::Pooled::none(&Default::default()),
    )
    .unwrap()[0];
    let l = w.layout.as_ref().expect("a layout floor");
    assert_eq!(l.variants.len(), 4);
    for ((arm, e), truth) in l.variants.iter().zip(shifts) {
        assert!(
            (e.change_pct - truth).abs() < 0.3,
            "{arm}: {} against {truth}",
            e.change_pct
        );
    }
    let truth_sd = stats::sequential::sd(&shifts);
    assert!(
        (l.sd_pct - truth_sd).abs() < 0.2,
        "{} against {truth_sd}",
        l.sd_pct
    );
    assert!(
        (l.layout_sd_pct - truth_sd).abs() < 0.3,
        "{} against {truth_sd}",
        l.layout_sd_pct
    );
    // The prediction interval reaches past every layout measured; the floor is its farther
    // bound from 0 (the centre kept).
    assert!(l.low_pct < -1.0 && l.high_pct > 1.1, "{l:?}");
    assert!(
        (l.floor_pct - l.low_pct.abs().max(l.high_pct.abs())).abs() < 1e-9,
        "{l:?}"
    );
    assert_eq!(l.layouts, 4);
    assert!((l.lowest_pct + 1.0).abs() < 0.3 && (l.highest_pct - 1.1).abs() < 0.3);
    // Four layouts do not veto: the threshold is the farthest layout measured, not the
    // floor (wider than every layout measured). lto's 1 % lies within the layouts;
    // lto+pgo's 10 % beyond them.
    let judged = |b: &str| {
        w.rows
            .iter()
            .find(|r| r.build == b)
            .and_then(|r| r.vs_release.clone())
            .unwrap()
            .primary()
            .clone()
    };
    let (lto, pgo) = (judged("lto"), judged("lto+pgo"));
    assert_eq!(
        (lto.bound, pgo.bound),
        (Bound::LayoutRange, Bound::LayoutRange)
    );
    assert!(lto.threshold_pct < l.floor_pct, "{lto:?} {l:?}");
    assert!((lto.threshold_pct - l.highest_pct.abs().max(l.lowest_pct.abs())).abs() < 1e-9);
    assert_eq!(lto.verdict, Verdict::NoDetectableChange, "{lto:?}");
    assert_eq!(pgo.verdict, Verdict::Faster, "{pgo:?}");
    // The A/A arm is the same executable: no layout floor on it.
    assert_ne!(w.aa.primary().bound, Bound::LayoutFloor);
    // Eight layouts or more (earlier runs' of the same executable pooled): the floor vetoes.
    let mut pooled = l.clone();
    pooled.layouts = LayoutFloor::VETO_LAYOUTS;
    assert_eq!(pooled.threshold(), (pooled.floor_pct, Bound::LayoutFloor));
    // No variants, no floor.
    let plain = &analyze_lockstep(
        &["agent_send_latency".into()],
        &builds(),
        &crate::testing::fixtures::sessions(30, 20),
        &[],
        &measure_config(),
        &crate::analysis::sessions::Pooled::none(&Default::default()),
    )
    .unwrap()[0];
    assert!(plain.layout.is_none());
    assert!(
        plain
            .rows
            .iter()
            .filter_map(|r| r.vs_release.as_ref())
            .all(|c| c.primary().bound != Bound::LayoutFloor)
    );
}

/// pulldown-cmark, whole-process (issue 32's figures): four layouts within −2.1…+1.4 %
/// gave a floor of ±5.8 % that called lto's 5.5 % [3.7, 7.3] no change. Below eight
/// layouts the threshold is the farthest layout measured, so lto's gain stands; from
/// eight on the floor decides.
#[test]
fn a_floor_of_few_layouts_does_not_veto_a_gain_beyond_every_layout() {
    let estimate = |change: f64, lo: f64, hi: f64| stats::Estimate {
        pairs: 12,
        rounds: None,
        mean_log_ratio: (1.0 + change / 100.0f64).ln(),
        ratio: 1.0 + change / 100.0,
        change_pct: change,
        ci_low_pct: lo,
        ci_high_pct: hi,
        df: Some(7),
        arm: None,
        alpha: None,
    };
    let mut floor = LayoutFloor {
        build: "release".into(),
        variants: Vec::new(),
        layouts: 4,
        mean_pct: -0.3,
        sd_pct: 1.5,
        layout_sd_pct: 1.4,
        lowest_pct: -2.1,
        highest_pct: 1.4,
        low_pct: -5.8,
        high_pct: 5.2,
        floor_pct: 5.8,
        max_half_width_pct: 1.0,
        gains: Vec::new(),
        bolt_vs_layouts: Vec::new(),
    };
    let lto = || estimate(-5.5, -7.3, -3.7);
    let j = super::judged(lto(), 1.0, Some(&floor));
    assert_eq!((j.verdict, j.bound), (Verdict::Faster, Bound::LayoutRange));
    assert!((j.threshold_pct - 2.1).abs() < 1e-12);
    // A gain within the layouts measured is not called one.
    let within = super::judged(estimate(-1.8, -2.6, -1.0), 1.0, Some(&floor));
    assert_eq!(within.verdict, Verdict::NoDetectableChange);
    // Eight layouts: the floor vetoes.
    floor.layouts = LayoutFloor::VETO_LAYOUTS;
    let j = super::judged(lto(), 1.0, Some(&floor));
    assert_eq!(
        (j.verdict, j.bound),
        (Verdict::NoDetectableChange, Bound::LayoutFloor)
    );
    // The min effect still binds above a narrow floor.
    floor.floor_pct = 0.4;
    assert_eq!(super::threshold(1.0, Some(&floor)), (1.0, Bound::MinEffect));
    assert!(
        crate::report::lines::layout_floor(&floor).starts_with("layout floor ±0.4 % (8 layouts"),
        "{}",
        crate::report::lines::layout_floor(&floor)
    );
}

/// Earlier runs' layouts of the same release executable pool with this run's (another
/// executable's do not): K grows past the point where the floor vetoes, the floor keeps
/// its centre, and this run's records go to the history under their seeds.
#[test]
fn the_floor_pools_earlier_runs_layouts_and_keeps_its_centre() {
    use super::history::{History, LayoutRecord};
    use super::sessions::{Pooled, records};
    let sessions = crate::testing::fixtures::layout_sessions(30, 20, &[-1.0, -0.3, 0.4, 1.1]);
    let record = |hash: &str, seed: u32, pct: f64| LayoutRecord {
        workload: "agent_send_latency".into(),
        exe_hash: hash.into(),
        layout_seed: seed,
        log: (1.0 + pct / 100.0f64).ln(),
        se: 0.001,
        metric: crate::measure::session::Metric::Median,
    };
    let mut history = History::default();
    // An earlier run: six layouts of this executable, all a little slower than its
    // default order; and one of another executable, far off.
    let earlier: Vec<LayoutRecord> = (0..6)
        .map(|k| record("abc", 100 + k, 0.3 + 0.1 * k as f64))
        .chain([record("another", 7, 9.0)])
        .collect();
    history.add_layouts(earlier);
    let seeds: Vec<(String, u32)> = (1..=4).map(|k| (format!("release/L{k}"), k)).collect();
    let pooled = Pooled {
        history: &history,
        run_seed: 9,
        release_hash: Some("abc"),
        layout_seeds: &seeds,
        build_hashes: &[],
        stops: &[],
    };
    let w = &analyze_lockstep(
        &["agent_send_latency".into()],
        &builds(),
        &sessions,
        &[],
        &measure_config(),
        &pooled,
    )
    .unwrap()[0];
    let l = w.layout.as_ref().unwrap();
    assert_eq!((l.layouts, l.variants.len()), (10, 4), "{l:?}");
    assert!(
        l.highest_pct < 1.5,
        "another executable's layout left out: {l:?}"
    );
    // Ten layouts: the floor itself is the threshold; its centre (the shuffled orders
    // lean slower than the default) stays in, so it reaches past the half-width.
    assert_eq!(l.threshold(), (l.floor_pct, Bound::LayoutFloor));
    assert!(l.mean_pct > 0.1, "{l:?}");
    assert!(
        (l.floor_pct - l.high_pct).abs() < 1e-9
            && l.floor_pct > (l.high_pct - l.low_pct) / 2.0 + 0.1,
        "{l:?}"
    );
    // This run's layouts, for the next run.
    let (layouts, runs) = records(std::slice::from_ref(w), &pooled, true);
    assert!(runs.is_empty(), "no build hashes given, no run records");
    let mut recorded: Vec<u32> = layouts.iter().map(|r| r.layout_seed).collect();
    recorded.sort();
    assert_eq!(recorded, [1, 2, 3, 4]);
    assert!(layouts.iter().all(|r| r.exe_hash == "abc"));
    // The same run rendered again does not count its layouts twice.
    let mut history = history.clone();
    history.add_layouts(layouts);
    let again = Pooled {
        history: &history,
        run_seed: 9,
        release_hash: Some("abc"),
        layout_seeds: &seeds,
        build_hashes: &[],
        stops: &[],
    };
    let w2 = &analyze_lockstep(
        &["agent_send_latency".into()],
        &builds(),
        &sessions,
        &[],
        &measure_config(),
        &again,
    )
    .unwrap()[0];
    assert_eq!(w2.layout.as_ref().unwrap().layouts, 10);
}

/// A build carries a run component only where earlier runs of its own two executables
/// (that ran from fresh copies, as this one) scattered beyond their intervals: not on a first
/// run (which says so), not where runs agree, not for another build, not from runs of other
/// executables or of runs without fresh copies; this run's estimates go to the history.
#[test]
fn a_build_carries_a_run_component_only_where_its_runs_showed_one() {
    use super::history::{History, RunRecord};
    use super::sessions::{Pooled, records};
    let sessions = crate::testing::fixtures::sessions(20, 20);
    let hashes: Vec<(String, String)> = [
        ("release", "r"),
        ("lto", "l"),
        ("lto+pgo", "p"),
        ("oracle", "o"),
    ]
    .map(|(b, h)| (b.to_string(), h.to_string()))
    .to_vec();
    let record = |hash: &str, seed: u64, log: f64, fresh: bool| RunRecord {
        workload: "agent_send_latency".into(),
        build: "lto+pgo".into(),
        exe_hash: hash.into(),
        release_hash: "r".into(),
        run_seed: seed,
        log,
        se: 0.001,
        fresh,
        metric: crate::measure::session::Metric::Median,
    };
    let analyse = |history: &History| {
        let pooled = Pooled {
            history,
            run_seed: 99,
            release_hash: Some("r"),
            layout_seeds: &[],
            build_hashes: &hashes,
            stops: &[],
        };
        let w = analyze_lockstep(
            &["agent_send_latency".into()],
            &builds(),
            &sessions,
            &[],
            &measure_config(),
            &pooled,
        )
        .unwrap()
        .remove(0);
        let (_, runs) = records(std::slice::from_ref(&w), &pooled, true);
        (w, runs)
    };
    let width = |w: &super::WorkloadAnalysis, build: &str| {
        let e = &w
            .rows
            .iter()
            .find(|r| r.build == build)
            .unwrap()
            .vs_release
            .as_ref()
            .unwrap()
            .primary()
            .estimate;
        e.ci_high_pct - e.ci_low_pct
    };
    let (alone, runs) = analyse(&History::default());
    assert!(
        alone
            .runs
            .iter()
            .all(|(_, t)| t.runs == 1 && t.carried.is_none())
    );
    assert_eq!(runs.len(), 3);
    assert!(
        runs.iter()
            .all(|r| r.release_hash == "r" && r.run_seed == 99 && r.fresh)
    );
    let line = crate::report::lines::nulls_line(&alone);
    assert!(
        line.contains("run component: none estimated (no earlier run of these executables"),
        "{line}"
    );
    let this = alone.raw.iter().find(|(b, _, _)| b == "lto+pgo").unwrap().1;
    // Three earlier runs that agree with this one within their intervals: none carried.
    let mut history = History::default();
    history.add_runs(vec![
        record("p", 1, this + 0.0005, true),
        record("p", 2, this - 0.0005, true),
        record("p", 3, this, true),
    ]);
    let (agree, _) = analyse(&history);
    let (_, t) = agree.runs.iter().find(|(b, _)| b == "lto+pgo").unwrap();
    assert_eq!((t.runs, t.carried), (4, None), "{t:?}");
    assert!((width(&agree, "lto+pgo") - width(&alone, "lto+pgo")).abs() < 1e-9);
    // One earlier run 2 % off: seen, not carried on one degree of freedom, and said so.
    let mut history = History::default();
    history.add_runs(vec![record("p", 1, this + 0.02, true)]);
    let (two, _) = analyse(&history);
    let (_, t) = two.runs.iter().find(|(b, _)| b == "lto+pgo").unwrap();
    assert!(t.seen() && t.carried.is_none(), "{t:?}");
    assert!((width(&two, "lto+pgo") - width(&alone, "lto+pgo")).abs() < 1e-9);
    let line = crate::report::lines::nulls_line(&two);
    assert!(
        line.contains(
            "lto+pgo scatters beyond its intervals (2 runs, p 0.00): not carried until 4 runs"
        ),
        "{line}"
    );
    // Three earlier runs ±1 % apart (their se 0.1 %), one of another lto+pgo executable and
    // two that did not run from fresh copies: lto+pgo alone carries a component, from the
    // four runs of its executables.
    let mut history = History::default();
    history.add_runs(vec![
        record("p", 1, this - 0.01, true),
        record("p", 2, this, true),
        record("p", 3, this + 0.01, true),
        record("another", 4, 0.5, true),
        record("p", 5, this + 0.2, false),
        record("p", 6, this - 0.2, false),
    ]);
    let (scattered, _) = analyse(&history);
    let (_, t) = scattered.runs.iter().find(|(b, _)| b == "lto+pgo").unwrap();
    let run = t.carried.expect("a run component");
    assert_eq!((t.runs, run.df), (4, 3), "{t:?}");
    assert!(run.sd > 0.006 && run.sd < 0.012, "{run:?}");
    assert!(
        width(&scattered, "lto+pgo") > width(&alone, "lto+pgo") + 1.0,
        "{} against {}",
        width(&scattered, "lto+pgo"),
        width(&alone, "lto+pgo")
    );
    assert!((width(&scattered, "lto") - width(&alone, "lto")).abs() < 1e-9);
    let line = crate::report::lines::nulls_line(&scattered);
    assert!(
        line.contains(&format!(
            "lto+pgo CARRIES sd {:.2} % (4 runs scatter beyond their intervals",
            100.0 * run.sd
        )) && line.contains("lto first run")
            && line.contains("where its sessions alone give ±"),
        "{line}"
    );
}

/// Sessions beside a busy neighbour are named; a workload of several threads leaves
/// them out of its figures and says so, or withholds its verdicts when too few are left;
/// a session-sharing one keeps them.
#[test]
fn disturbed_sessions_are_named_and_left_out_of_a_multi_thread_workload() {
    let mut sessions = crate::testing::fixtures::sessions(10, 20);
    for s in &mut sessions {
        s.machine = Some(crate::measure::machine::OtherLoad {
            secs: 0.5,
            measured_pct: if s.session == 3 || s.session == 7 {
                45.0
            } else {
                2.0
            },
            setup_pct: Some(4.0),
            steal_pct: 1.0,
        });
    }
    let analyse = |cfg: &crate::config::Measure| {
        analyze_lockstep(
            &["agent_send_latency".into()],
            &builds(),
            &sessions,
            &[],
            cfg,
            &super::sessions::Pooled::none(&Default::default()),
        )
        .unwrap()
        .remove(0)
    };
    let mut cfg = measure_config();
    let shared = analyse(&cfg);
    let m = shared.machine.as_ref().unwrap();
    assert_eq!((m.disturbed.clone(), m.left_out), (vec![3, 7], false));
    assert_eq!(shared.sessions, 10);
    assert_eq!(
        (m.median_pct, m.max_pct, m.setup_median_pct),
        (2.0, 45.0, Some(4.0))
    );
    let line = crate::report::lines::machine(m, shared.sessions);
    assert!(
        line.contains("2 of 10 sessions disturbed (over 10 %): 4, 8"),
        "{line}"
    );
    assert!(line.contains("(the hypervisor's steal 1.0 %)"), "{line}");
    // Several threads, a pilot of 4: eight undisturbed sessions are enough.
    cfg.workloads[0].share_core = Some(false);
    cfg.lockstep.min_sessions = 4;
    let spread = analyse(&cfg);
    let m = spread.machine.as_ref().unwrap();
    assert!(m.left_out && !m.unjudged);
    assert_eq!(spread.sessions, 8);
    assert!(
        crate::report::lines::machine(m, 10).contains("the disturbed sessions are left out"),
        "{}",
        crate::report::lines::machine(m, 10)
    );
    // A pilot of 12: too few undisturbed sessions, so no verdict is given.
    cfg.lockstep.min_sessions = 12;
    let busy = analyse(&cfg);
    let m = busy.machine.as_ref().unwrap();
    assert!(m.unjudged && !m.left_out);
    assert_eq!(busy.sessions, 10);
    assert!(
        crate::report::lines::machine(m, 10).contains("its verdicts are not judged"),
        "{}",
        crate::report::lines::machine(m, 10)
    );
    let verdicts: Vec<Verdict> = busy
        .rows
        .iter()
        .filter_map(|r| r.vs_release.as_ref())
        .flat_map(|c| c.iter().map(|(_, j)| j.verdict).collect::<Vec<_>>())
        .chain([busy.aa.primary().verdict])
        .collect();
    assert!(verdicts.len() > 4 && verdicts.iter().all(|v| *v == Verdict::NotJudged));
    assert_eq!(
        crate::report::words::verdict(Verdict::NotJudged),
        "not judged (machine busy)"
    );
}

/// lto and lto+pgo relinked too: a gain that holds in every layout is said so, one that
/// depends on the layout is called layout luck; BOLT is paired with each random layout.
#[test]
fn gains_over_layouts_and_bolt_against_random_layouts() {
    let sessions = crate::testing::fixtures::sessions_with(
        30,
        20,
        &[
            ("release/L1", 1.003),
            ("release/L2", 0.997),
            ("lto/L1", 0.995),
            ("lto/L2", 0.980),
            ("lto+pgo/L1", 0.905),
            ("lto+pgo/L2", 0.895),
            ("lto+pgo+bolt", 0.88),
        ],
    );
    let w = &analyze_lockstep(
        &["agent_send_latency".into()],
        &builds(),
        &sessions,
        &[],
        &measure_config(),
        &crate::analysis::sessions::Pooled::none(&Default::default()),
    )
    .unwrap()[0];
    let l = w.layout.as_ref().expect("a layout floor");
    let gain = |b: &str| l.gains.iter().find(|g| g.build == b).unwrap();
    // lto: 1 % faster in its own layout, 0.5 % and 2 % in the others.
    let lto = gain("lto");
    assert_eq!(lto.layouts.len(), 3);
    assert_eq!(lto.verdict, None, "{lto:?}");
    assert!(
        (lto.low_pct + 2.0).abs() < 0.3 && (lto.high_pct + 0.5).abs() < 0.3,
        "{lto:?}"
    );
    assert!(
        crate::report::lines::layout_gain(lto)
            .contains("depends on its layout: within layout luck (range over 3 layouts"),
        "{}",
        crate::report::lines::layout_gain(lto)
    );
    let pgo = gain("lto+pgo");
    assert_eq!(pgo.verdict, Some(Verdict::Faster), "{pgo:?}");
    assert!(
        crate::report::lines::layout_gain(pgo)
            .starts_with("lto+pgo against release: faster whatever the layout"),
        "{}",
        crate::report::lines::layout_gain(pgo)
    );
    // BOLT (12 % faster) against each of lto+pgo's random layouts (9.5 %, 10.5 %).
    assert_eq!(l.bolt_vs_layouts.len(), 2);
    let b: Vec<f64> = l
        .bolt_vs_layouts
        .iter()
        .map(|(_, e)| e.change_pct)
        .collect();
    assert!(
        (b[0] + 2.76).abs() < 0.3 && (b[1] + 1.68).abs() < 0.3,
        "{b:?}"
    );
    // The floor's line and the report's lines say all of it.
    let lines = crate::report::lines::layout_lines(w);
    assert!(lines[0].starts_with("layout floor ±"), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|x| x
                .starts_with("lto+pgo+bolt against lto+pgo/L1 (a random layout of lto+pgo): 2.")),
        "{lines:?}"
    );
}

/// Each watched comparison is read as the stopping rule left it: lto+pgo settled after 4
/// of the 10 sessions (its arm then left), lto ran to its planned count: their intervals
/// rest on their own sessions and spend the error recorded for them.
#[test]
fn each_comparison_is_read_at_its_own_stop_and_error() {
    use crate::measure::{ComparisonStop, Role, StopReason, Stopping};
    use stats::sequential;
    let mut sessions = crate::testing::fixtures::sessions(10, 20);
    for s in &mut sessions[5..] {
        let i = s.arms.iter().position(|a| a == "lto+pgo").unwrap();
        s.arms.remove(i);
        s.batches.remove(i);
        s.totals.remove(i);
    }
    let stop = |cand: &str, n: u32, reason, alpha| ComparisonStop {
        cand: cand.into(),
        base: "release".into(),
        role: Role::Verdict,
        target_half_width_pct: 1.0,
        needed: Some(10),
        sessions: n,
        through: n,
        unit: crate::measure::stops::Unit::Session,
        pilot: 4,
        reason,
        alpha,
        threshold_pct: (reason == StopReason::Settled).then_some(1.0),
        settled_at: None,
    };
    let stops = [Stopping {
        workload: "agent_send_latency".into(),
        target_half_width_pct: 1.0,
        pilot: 4,
        needed: Some(10),
        sessions: 10,
        reason: StopReason::Target,
        secs: 1.0,
        timing: Default::default(),
        comparisons: vec![
            stop("lto+pgo", 4, StopReason::Settled, sequential::look_alpha(0)),
            stop("lto", 10, StopReason::Target, sequential::ALPHA_PLANNED),
        ],
    }];
    let history = Default::default();
    let pooled = crate::analysis::sessions::Pooled {
        stops: &stops,
        ..crate::analysis::sessions::Pooled::none(&history)
    };
    let w = &analyze_lockstep(
        &["agent_send_latency".into()],
        &builds(),
        &sessions,
        &[],
        &measure_config(),
        &pooled,
    )
    .unwrap()[0];
    let row = |b: &str| w.rows.iter().find(|r| r.build == b).unwrap();
    let pgo = &row("lto+pgo")
        .vs_release
        .as_ref()
        .unwrap()
        .primary()
        .estimate;
    assert_eq!((pgo.pairs, pgo.alpha), (4, Some(sequential::look_alpha(0))));
    assert!(
        crate::report::words::estimate(pgo).ends_with(" (settled after 4)"),
        "{}",
        crate::report::words::estimate(pgo)
    );
    // The sixth session, which lto+pgo also ran in, is not in its interval.
    assert_eq!(row("lto+pgo").runs, 5);
    let lto = &row("lto").vs_release.as_ref().unwrap().primary().estimate;
    assert_eq!(
        (lto.pairs, lto.alpha),
        (10, Some(sequential::ALPHA_PLANNED))
    );
    // The A/A arm was not watched here: every session, 5 %.
    assert_eq!(
        (w.aa.primary().estimate.pairs, w.aa.primary().estimate.alpha),
        (10, None)
    );
    // An interval at 0.5 % is wider than the same sessions' at 5 %.
    let plain = &analyze_lockstep(
        &["agent_send_latency".into()],
        &builds(),
        &sessions[..4],
        &[],
        &measure_config(),
        &crate::analysis::sessions::Pooled::none(&history),
    )
    .unwrap()[0];
    let plain_pgo = &plain.rows.iter().find(|r| r.build == "lto+pgo").unwrap();
    let plain_pgo = &plain_pgo.vs_release.as_ref().unwrap().primary().estimate;
    assert_eq!(plain_pgo.mean_log_ratio, pgo.mean_log_ratio);
    assert!(
        pgo.ci_high_pct - pgo.ci_low_pct > plain_pgo.ci_high_pct - plain_pgo.ci_low_pct,
        "{pgo:?} {plain_pgo:?}"
    );
}

#[test]
fn lockstep_sessions_give_the_known_ratios_through_state_flips() {
    let sessions = crate::testing::fixtures::sessions(10, 20);
    let w = &analyze_lockstep(
        &["agent_send_latency".into()],
        &builds(),
        &sessions,
        &[],
        &measure_config(),
        &crate::analysis::sessions::Pooled::none(&Default::default()),
    )
    .unwrap()[0];
    assert_eq!((w.sessions, w.rounds_per_session), (10, 20));
    assert!(w.aa.primary().estimate.change_pct.abs() < 0.5, "{:?}", w.aa);
    let pgo = w.rows[2].vs_release.as_ref().unwrap();
    assert!(
        (pgo.primary().estimate.change_pct + 10.0).abs() < 0.5,
        "{pgo:?}"
    );
    assert_eq!(pgo.primary().verdict, Verdict::Faster);
    assert_eq!(w.rows[0].runs, 10);
    assert_eq!(
        crate::report::lines::basis(w),
        "10 sessions × 20 rounds (lockstep)"
    );
    // The rows' figures: medians over sessions of medians over rounds; the flips put
    // half the rounds at 170 and half at 235.
    assert!(
        (w.rows[0].median_ns - 202.5).abs() < 2.0,
        "{}",
        w.rows[0].median_ns
    );
    let one = analyze_lockstep(
        &["agent_send_latency".into()],
        &builds(),
        &sessions[..1],
        &[],
        &measure_config(),
        &crate::analysis::sessions::Pooled::none(&Default::default()),
    )
    .unwrap_err();
    assert!(
        one.to_string()
            .contains("1 lockstep session(s) recorded; an interval needs at least 2"),
        "{one}"
    );
}

#[test]
fn the_instruction_capture_needs_an_oracle_that_saves_instructions() {
    let report = crate::testing::fixtures::report();
    let mut w = report.workloads[0].clone();
    let set = |w: &mut super::WorkloadAnalysis, build: &str, n: Option<f64>| {
        w.rows
            .iter_mut()
            .find(|r| r.build == build)
            .unwrap()
            .instructions_per_message = n;
    };
    set(&mut w, "lto", Some(1000.0));
    set(&mut w, "lto+pgo", Some(940.0));
    set(&mut w, "oracle", Some(900.0));
    let i = w.instruction_capture().unwrap();
    assert!((i.pct - 60.0).abs() < 1e-9, "{i:?}");
    assert!(
        crate::report::lines::capture(&w)
            .unwrap()
            .contains("the oracle saves, 60 %")
    );
    // An oracle within 1 % of lto's count: no share of a saving that is hardly one.
    set(&mut w, "oracle", Some(995.0));
    assert_eq!(w.instruction_capture(), None);
    set(&mut w, "oracle", None);
    assert_eq!(w.instruction_capture(), None);
}

/// A build whose sessions fall into two speeds is named with its modes and shares (in the
/// table and report.md); builds of one speed are not.
#[test]
fn a_build_of_two_speeds_is_named_with_its_modes() {
    let mut sessions = crate::testing::fixtures::sessions(40, 6);
    // lto 8 % slower in every third session: 26 sessions at about −1 %, 14 at about +7 %.
    for s in sessions.iter_mut().filter(|s| s.session % 3 == 0) {
        let i = s.arms.iter().position(|a| a == "lto").unwrap();
        for b in &mut s.batches[i] {
            b.median_ns *= 1.08;
        }
    }
    let w = analyze_lockstep(
        &["agent_send_latency".into()],
        &builds(),
        &sessions,
        &[],
        &measure_config(),
        &super::sessions::Pooled::none(&Default::default()),
    )
    .unwrap()
    .remove(0);
    let names: Vec<&str> = w.speeds.iter().map(|(b, _)| b.as_str()).collect();
    assert_eq!(names, ["lto"], "{:?}", w.speeds);
    let lines = crate::report::lines::speeds(&w);
    assert!(
        lines[0].starts_with(
            "lto's sessions fall into two speeds: 65 % of them at -1.1 % against release, 35 % at +6.9 %"
        ),
        "{lines:?}"
    );
}

/// A candidate's ratios to release in pairs end with the first session in which it ran
/// without a pair with release (another comparison kept it: `--against`'s, BOLT's): no
/// error, and the sessions before it, a prefix, as the capture's zip assumes.
#[test]
fn pair_ratios_end_where_the_candidate_ran_without_release() {
    let with = crate::testing::fixtures::paired(
        &["release", "a"],
        vec![vec![0, 1], vec![1, 0]],
        &[&[100.0, 100.0], &[90.0, 80.0]],
    );
    let mut without = crate::testing::fixtures::paired(
        &["a", "x:a"],
        vec![vec![0, 1], vec![1, 0]],
        &[&[90.0, 90.0], &[91.0, 89.0]],
    );
    without.session = 1;
    let got = super::ratios::round_ratios(
        &[&with, &without, &with],
        "a",
        crate::measure::session::Metric::Median,
    )
    .unwrap();
    assert_eq!(got, [vec![0.9f64.ln(), 0.8f64.ln()]]);
    let err =
        super::ratios::round_ratios(&[&without], "a", crate::measure::session::Metric::Median)
            .unwrap_err();
    assert!(
        format!("{err}").contains("session 1 of `w` has no arm `release` beside `a`"),
        "{err}"
    );
}
