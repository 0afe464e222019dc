//! Unit tests of `schedule.rs`.

use std::path::PathBuf;

use super::*;
use crate::config::Workload;
use crate::measure::arms::{AB_NEW, BASELINE_AGAIN, arms};
use crate::measure::program::parse_line;
use crate::measure::stops::Spend;
use crate::measure::stops::{ComparisonStop, Role, StopReason, Unit, spend};
use crate::testing::fixtures::LINE;
use crate::testing::fixtures::measure_config;
use crate::toolchain::build::Build;
use crate::toolchain::build::Built;
use stats::median;
use stats::sequential;

/// An arm in sh that serves the protocol: ready, a batch of `median` ns for every `g`
/// (a shell expression, evaluated once per process: its per-process effect), mty-bench's
/// closing line at `q`.
fn sh_arm(name: &str, median: &str) -> Arm {
    let script = format!(
        r#"m=$(({median}))
echo '{{"ready":true,"pid":1,"clock_overhead_ns":20}}'
while read w; do
  [ "$w" = q ] && break
  echo "{{\"median_ns\":$m,\"p95_ns\":$m,\"p99_ns\":$m,\"mean_ns\":$m,\"elapsed_ns\":1000000}}"
done
echo '{LINE}'"#
    );
    Arm {
        name: name.to_string(),
        exe: "sh".into(),
        args: vec!["-c".into(), script, name.into()],
    }
}

fn group(name: &str, spread: &str) -> Group {
    Group {
        workload: Workload::new(name, vec![]),
        arms: vec![sh_arm("base", "1000"), sh_arm("cand", spread)],
        pairs: vec![("cand".into(), "base".into())],
        run_components: Vec::new(),
    }
}

/// The stopping rule, on real processes: a quiet comparison stops at its pilot (target
/// met), a scattered one at the session cap, or at the time cap once the pilot is in; no
/// target runs the fixed count. Two groups take turns, and every session runs whole.
#[test]
fn sessions_stop_by_the_rule_and_say_why() {
    let mut cfg = measure_config();
    cfg.lockstep.rounds = 3;
    (cfg.lockstep.min_sessions, cfg.lockstep.sessions) = (4, 9);
    cfg.target_half_width_pct = 1.0;
    // No threshold to settle beyond: four scattered sessions can land on one side of
    // release by chance (the pids of a busy machine), and settle at a look.
    cfg.min_effect_pct = 1e6;
    // ±~20 % per process (the pid's remainder): far more than 9 sessions for ±1 %.
    let scattered = "800 + ($$ % 41) * 10";
    let groups = [group("quiet", "1010"), group("scattered", scattered)];
    let (sessions, stopped) = run_groups(&groups, &cfg).unwrap();
    let by = |w: &str| stopped.iter().find(|s| s.workload == w).unwrap();
    let count = |w: &str| sessions.iter().filter(|s| s.workload == w).count() as u32;
    let quiet = by("quiet");
    assert_eq!(
        (quiet.sessions, quiet.reason, quiet.needed, quiet.pilot),
        (4, StopReason::Target, Some(4), 4)
    );
    let scattered_run = by("scattered");
    assert_eq!(
        (scattered_run.sessions, scattered_run.reason),
        (9, StopReason::SessionCap)
    );
    assert!(scattered_run.needed.unwrap() > 9, "{scattered_run:?}");
    assert_eq!((count("quiet"), count("scattered")), (4, 9));
    // Every session whole, numbered in order, and timed; the batches' own time counted.
    for w in ["quiet", "scattered"] {
        let mine: Vec<u32> = sessions
            .iter()
            .filter(|s| s.workload == w)
            .map(|s| s.session)
            .collect();
        assert_eq!(mine, (0..mine.len() as u32).collect::<Vec<_>>());
    }
    assert!(
        sessions
            .iter()
            .all(|s| s.order.len() == 3 && s.timing.is_some())
    );
    assert!((by("quiet").timing.batch_secs - 4.0 * 3.0 * 2.0 * 1e-3).abs() < 1e-9);
    assert!(by("quiet").overhead_pct().is_some());
    assert!(
        crate::report::words::stopping(by("quiet")).starts_with("4 sessions in "),
        "{}",
        crate::report::words::stopping(by("quiet"))
    );
    assert!(
        crate::report::words::stopping(by("quiet"))
            .ends_with(": the count planned for ±1 % (the pilot of 4 asked for 4)")
    );

    // The time cap: the pilot runs whole, then it stops.
    cfg.lockstep.max_secs = 1e-6;
    let (_, stopped) = run_groups(&[group("scattered", scattered)], &cfg).unwrap();
    assert_eq!(
        (stopped[0].sessions, stopped[0].reason),
        (4, StopReason::TimeCap)
    );
    // No target: the fixed count.
    (cfg.target_half_width_pct, cfg.lockstep.max_secs) = (0.0, 60.0);
    let (_, stopped) = run_groups(&[group("quiet", "1010")], &cfg).unwrap();
    assert_eq!(
        (stopped[0].sessions, stopped[0].reason, stopped[0].needed),
        (9, StopReason::Fixed, None)
    );
}

/// Each comparison stops on its own: BOLT, far slower than release, settles at the pilot
/// (beyond ±1 % by far) but its arm stays, for its comparison with lto+pgo is still open, so
/// its interval takes every session its arm ran in; lto+pgo, as far off, is measured (never
/// settled) to its own target, 5 % of its estimate, and stays for the oracle's capture; a
/// null arm as far off does not settle (its value is the point); the scattered oracle runs
/// on to the session cap at its own target. The analysis reads each one's sessions and error
/// from the stops.
#[test]
fn comparisons_stop_on_their_own_and_their_arms_leave() {
    let mut cfg = measure_config();
    cfg.lockstep.rounds = 3;
    (cfg.lockstep.min_sessions, cfg.lockstep.sessions) = (4, 9);
    cfg.target_half_width_pct = 1.0;
    let scattered = "800 + ($$ % 41) * 10";
    let far = "2000 + ($$ % 41) * 10";
    // As far, but 15 % below, at, and 15 % above it in turn, session by session (a counter
    // in a file): BOLT against lto+pgo then scatters by 12 % about 0 in every stretch of
    // sessions, so it never settles and its count is always past the cap. (`far` on both,
    // spawned a few pids apart, made it a few tenths of a percent of one sign now and then,
    // which settled, or planned fewer sessions, and took BOLT's arm out: a flaky test.)
    let counter = std::env::temp_dir().join(format!("mty-bolt-turns-{}", std::process::id()));
    let _ = std::fs::remove_file(&counter);
    let far_bolt = format!(
        "2000 + ($(n=$(cat {0} 2>/dev/null || echo 0); echo $((n + 1)) > {0}; echo $((n % 3 - 1)))) * 300",
        counter.display()
    );
    let mut pairs: Vec<(String, String)> = ["lto+pgo+bolt", "lto+pgo", BASELINE_AGAIN, "oracle"]
        .map(|c| (c.to_string(), "release".to_string()))
        .to_vec();
    pairs.push(("lto+pgo+bolt".to_string(), "lto+pgo".to_string()));
    let g = Group {
        workload: Workload::new("w", vec![]),
        arms: vec![
            sh_arm("release", "1000"),
            sh_arm("lto+pgo+bolt", &far_bolt),
            sh_arm("lto+pgo", far),
            sh_arm(BASELINE_AGAIN, "2000 + ($$ % 2)"),
            sh_arm("oracle", scattered),
        ],
        pairs,
        run_components: Vec::new(),
    };
    let (sessions, stopped) = run_groups(std::slice::from_ref(&g), &cfg).unwrap();
    let _ = std::fs::remove_file(&counter);
    let s = &stopped[0];
    let of = |c: &str| s.of(c, "release").unwrap();
    let with = |a: &str| sessions.iter().filter(|x| x.arm(a).is_some()).count();
    let bolt = of("lto+pgo+bolt");
    assert_eq!(
        (bolt.role, bolt.reason),
        (Role::Verdict, StopReason::Settled)
    );
    assert_eq!(bolt.threshold_pct, Some(1.0));
    // Settled at the pilot's look; its arm ran on (BOLT against lto+pgo needed it), so its
    // interval is of all the sessions, at the planned error.
    let n = with("lto+pgo+bolt");
    assert_eq!(n, 9, "BOLT against lto+pgo kept its arm");
    assert_eq!(
        (bolt.sessions, bolt.through, bolt.alpha, bolt.settled_at),
        (9, 9, sequential::ALPHA_PLANNED, Some(4))
    );
    assert!(
        crate::report::words::stop(bolt).starts_with("settled after 4: beyond ±1.0 %")
            && crate::report::words::stop(bolt).contains("of all 9 (4 % error)"),
        "{}",
        crate::report::words::stop(bolt)
    );
    // lto+pgo: about 2× release, so its target is 5 % of its estimate, never settled.
    let pgo = of("lto+pgo");
    assert_eq!(pgo.role, Role::Measured);
    assert!(
        matches!(pgo.reason, StopReason::Target | StopReason::SessionCap),
        "{pgo:?}"
    );
    assert!(pgo.target_half_width_pct > 4.0, "{pgo:?}");
    assert_eq!(
        with("lto+pgo"),
        9,
        "the oracle kept lto+pgo in every session"
    );
    // Every session's arms set up on the other core and moved onto the measured one, those
    // started during the turns before (by a thread pinned to the set-up core) too.
    if std::thread::available_parallelism().is_ok_and(|n| n.get() > 1) {
        for x in &sessions {
            assert_eq!(x.moves.len(), x.arms.len(), "session {}", x.session);
        }
    }
    // The machine's state beside each session (its start read by a thread beside the
    // first turns), wherever /proc can be read.
    if std::path::Path::new("/proc/stat").exists() {
        for x in &sessions {
            let m = x
                .machine
                .as_ref()
                .expect("the machine's state beside the session");
            assert!(
                m.secs > 0.0 && m.measured_pct >= 0.0,
                "session {}: {m:?}",
                x.session
            );
        }
    }
    let aa = of(BASELINE_AGAIN);
    assert_eq!((aa.role, aa.alpha), (Role::Null, sequential::ALPHA_PLANNED));
    assert_ne!(aa.reason, StopReason::Settled);
    let oracle = of("oracle");
    assert_eq!(
        (oracle.role, oracle.reason, oracle.sessions),
        (Role::Oracle, StopReason::SessionCap, 9)
    );
    assert_eq!(oracle.target_half_width_pct, 2.0, "the oracle's own target");
    assert_eq!((with("release"), s.sessions), (9, 9));
    assert_eq!(s.reason, StopReason::SessionCap);
    assert!(
        crate::report::words::stopping(s).contains("1 of 5 comparisons settled early"),
        "{}",
        crate::report::words::stopping(s)
    );
    let bolt = spend(&stopped, "w", "lto+pgo+bolt", "release");
    assert_eq!(
        (bolt.through, bolt.alpha, bolt.unit, bolt.pilot),
        (9, sequential::ALPHA_PLANNED, Unit::Session, Some(4))
    );
    let none = spend(&stopped, "w", "nothing", "release");
    assert_eq!(
        (none.through, none.alpha, none.pilot),
        (u32::MAX, sequential::ALPHA, None)
    );
}

/// A whole-process workload's comparison takes its pairs as the unit where its sessions
/// show no component of their own, and stays with sessions where they do; either way
/// it stops at its planned count of values, and the analysis reads them the same way.
#[test]
fn a_whole_process_comparison_pools_its_pairs_only_without_a_session_component() {
    let mut cfg = measure_config();
    // Per-session copies (or none): a session could hold a file's effect of its own.
    cfg.fresh_copies = false;
    (
        cfg.lockstep.min_pairs,
        cfg.lockstep.rounds,
        cfg.lockstep.sessions,
    ) = (240, 20, 60);
    cfg.target_half_width_pct = 1.0;
    let mut workload = Workload::new("w", vec![]);
    workload.mode = crate::config::Mode::Process;
    let g = Group {
        workload,
        arms: vec![sh_arm("release", "1"), sh_arm("lto", "1")],
        pairs: vec![("lto".into(), "release".into())],
        run_components: Vec::new(),
    };
    let mut rng = stats::SplitMix64::new(7);
    // 20 pairs a session, each run ±2 % on its own; `between`: each session's own shift.
    let sessions = |effect: f64, between: f64, rng: &mut stats::SplitMix64| {
        let mut out = crate::testing::fixtures::sessions(60, 20);
        for s in &mut out {
            s.arms = vec!["release".into(), "lto".into()];
            s.batches.truncate(2);
            s.totals.truncate(2);
            s.paired = true;
            s.order = (0..20u8).map(|r| vec![r % 2, 1 - r % 2]).collect();
            let shift = between * rng.normal();
            for r in 0..20 {
                s.batches[0][r].median_ns = 1000.0 * (0.02 * rng.normal()).exp();
                s.batches[1][r].median_ns = 1000.0 * (effect + shift + 0.02 * rng.normal()).exp();
            }
        }
        out
    };
    let run = |done: Vec<Session>, cfg: &Measure| {
        let mut p = Progress::of(&g, cfg);
        for s in done {
            p.done.push(s);
            judge(&mut p, &g, cfg);
            if p.ended() {
                break;
            }
        }
        let w = &p.watches[0];
        (w.unit, w.per, w.pilot_values, w.stop.clone().unwrap())
    };
    let (unit, per, pilot, stop) = run(sessions(-0.05, 0.0, &mut rng), &cfg);
    assert_eq!((unit, per, pilot), (Unit::Pair, 20, 240));
    // 240 pairs of ±2 % give ±0.4 %: the pilot's values are enough.
    assert_eq!(
        (stop.reason, stop.sessions, stop.through),
        (StopReason::Target, 240, 12)
    );
    assert!(
        crate::report::words::stop(&stop).contains("pairs as the unit"),
        "{}",
        crate::report::words::stop(&stop)
    );
    // No effect, sessions shifted by 3 %: sessions stay the unit, and ±1 % needs more
    // than the pilot's 12.
    let (unit, per, pilot, stop) = run(sessions(0.0, 0.03, &mut rng), &cfg);
    assert_eq!((unit, per, pilot), (Unit::Session, 1, 12));
    assert!(
        stop.sessions > 12 && stop.reason != StopReason::Settled,
        "{stop:?}"
    );
    // Every run from a copy of its own (`measure.fresh_copies`): nothing is left to a
    // session, so the pairs are the unit without the test.
    cfg.fresh_copies = true;
    let (unit, per, pilot, _) = run(sessions(0.0, 0.03, &mut rng), &cfg);
    assert_eq!((unit, per, pilot), (Unit::Pair, 20, 240));
    let spend = Spend {
        through: 12,
        unit: Unit::Pair,
        pilot: Some(240),
        capped: false,
        alpha: sequential::ALPHA_PLANNED,
    };
    let units = spend.units(vec![vec![0.1, 0.2], vec![0.3]]);
    assert_eq!(units, [vec![0.1], vec![0.2], vec![0.3]]);
}

/// Every session draws its arms' places and turn orders from the run's seed: recorded in
/// the session, the same under the same seed (a replay), other under another.
#[test]
fn places_and_orders_are_drawn_per_session_and_replay_from_the_seed() {
    let mut cfg = measure_config();
    cfg.lockstep.rounds = 3;
    (cfg.lockstep.min_sessions, cfg.lockstep.sessions) = (4, 4);
    cfg.target_half_width_pct = 0.0;
    let mut g = group("w", "1000");
    for name in ["c", "d", "e"] {
        g.arms.push(sh_arm(name, "1000"));
    }
    let mut places = |seed: u64| {
        cfg.seed = Some(seed);
        let (sessions, _) = run_groups(std::slice::from_ref(&g), &cfg).unwrap();
        sessions
            .into_iter()
            .map(|s| (s.arms, s.moves, s.order))
            .collect::<Vec<_>>()
    };
    let (a, again, other) = (places(7), places(7), places(8));
    assert_eq!(a, again, "a seed replays its places and orders");
    assert_ne!(a, other);
    // Within a run the spawn order differs between sessions.
    let spawned: std::collections::BTreeSet<_> = a.iter().map(|s| s.0.clone()).collect();
    assert!(spawned.len() > 1, "{spawned:?}");
    for (arms, moves, order) in &a {
        let mut sorted = arms.clone();
        sorted.sort();
        assert_eq!(sorted, ["base", "c", "cand", "d", "e"]);
        // Moves are recorded where the arms move (a machine of two cores or more).
        if !moves.is_empty() {
            let mut m = moves.clone();
            m.sort();
            assert_eq!(m, [0, 1, 2, 3, 4]);
        }
        assert_eq!(order.len(), 3);
    }
}

#[test]
fn parses_the_line_mty_bench_prints() {
    let line = parse_line(&format!("{LINE}\n")).unwrap();
    assert_eq!(
        (
            line.median_ns,
            line.p95_ns,
            line.p99_ns,
            line.clock_overhead_ns
        ),
        (253, 302, 563, 30)
    );
    assert_eq!(line.percentiles[1], (0.5, 253));
    assert_eq!(line.involuntary_ctx_switches, 1);
    assert!(
        parse_line("")
            .unwrap_err()
            .to_string()
            .contains("printed nothing")
    );
    assert!(
        parse_line("hello\n")
            .unwrap_err()
            .to_string()
            .contains("not a latency report: hello")
    );
}

#[test]
fn each_block_runs_the_baseline_twice() {
    let builds: Vec<Built> = Build::MEASURED
        .iter()
        .map(|b| Built::new(*b, PathBuf::from(format!("/{}", b.name())), String::new()))
        .collect();
    let names: Vec<String> = arms(&builds).into_iter().map(|a| a.name).collect();
    assert_eq!(
        names,
        [
            "release",
            "release-aa",
            "lto",
            "lto+pgo",
            "lto+pgo+bolt",
            "oracle"
        ]
    );
}

#[test]
fn median_of_odd_even_and_empty() {
    assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(median(&[]), None);
}

/// Each comparison's role from its arms' names: the numbers users quote are measured to their
/// target, `--against`'s pairs too; a workload against another, BOLT and the rest may settle.
#[test]
fn roles_follow_the_arms_names() {
    for (cand, base, role) in [
        ("lto", "release", Role::Measured),
        ("lto+pgo", "release", Role::Measured),
        (AB_NEW, "release", Role::Measured),
        ("lto+pgo", "4002ecc:lto+pgo", Role::Measured),
        ("lto+pgo+bolt", "release", Role::Verdict),
        ("lto+pgo+bolt", "lto+pgo", Role::Verdict),
        (
            "release:agent_send_latency",
            "release:tokio_mpsc_send_latency",
            Role::Verdict,
        ),
        (BASELINE_AGAIN, "release", Role::Null),
        ("release/L3", "release", Role::Layout),
        ("oracle", "release", Role::Oracle),
    ] {
        assert_eq!(Role::of(cand, base), role, "{cand} against {base}");
    }
}

/// A measured comparison's target is a share of its estimate: its reason shows it to two
/// decimals, not to the float's last digit, and in the unit it was counted in.
#[test]
fn a_stops_reason_rounds_a_measured_target() {
    let mut stop = ComparisonStop {
        cand: "lto".into(),
        base: "release".into(),
        role: Role::Measured,
        target_half_width_pct: 1.1279582511992288,
        needed: Some(256),
        sessions: 24,
        through: 4,
        unit: Unit::Pair,
        pilot: 24,
        reason: StopReason::SessionCap,
        alpha: sequential::ALPHA_PLANNED,
        threshold_pct: None,
        settled_at: None,
    };
    assert_eq!(
        crate::report::words::stop(&stop),
        "session cap (±1.13 % asked for 256)"
    );
    (stop.reason, stop.target_half_width_pct) = (StopReason::Target, 1.0);
    assert_eq!(
        crate::report::words::stop(&stop),
        "its target ±1 %, pairs as the unit (the pilot's 24 asked for 256)"
    );
}

/// A count that a cap (of sessions or of time) or a fixed count ended rests on no pilot: its
/// interval is that of all its sessions, where Stein's term would keep a pilot that scattered
/// widely; a count the pilot planned, or a settled one, keeps Stein's.
#[test]
fn a_capped_comparisons_interval_is_of_all_its_sessions() {
    // A pilot of 8 that scattered, then 16 quiet sessions (each one value: its median).
    let values: Vec<f64> = (0..24)
        .map(|i| {
            let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
            sign * if i < 8 {
                0.03
            } else {
                0.004 + 0.0001 * i as f64
            }
        })
        .collect();
    let rounds: Vec<Vec<f64>> = values.iter().map(|v| vec![*v]).collect();
    let half = |reason: StopReason, settled_at: Option<u32>| {
        let stopping = Stopping {
            workload: "w".into(),
            target_half_width_pct: 0.5,
            pilot: 8,
            needed: Some(400),
            sessions: 24,
            reason,
            secs: 1.0,
            timing: Default::default(),
            comparisons: vec![ComparisonStop {
                cand: "lto".into(),
                base: "release".into(),
                role: Role::Measured,
                target_half_width_pct: 0.5,
                needed: Some(400),
                sessions: 24,
                through: 24,
                unit: Unit::Session,
                pilot: 8,
                reason,
                alpha: sequential::ALPHA_PLANNED,
                threshold_pct: None,
                settled_at,
            }],
        };
        let spend = spend(&[stopping], "w", "lto", "release");
        let e = stats::compare_sessions_at(
            &spend.units(rounds.clone()),
            spend.pilot_or(8),
            spend.alpha,
        )
        .unwrap();
        (e.ci_high_pct - e.ci_low_pct, e.df)
    };
    let whole = sequential::interval_df(&values, values.len(), sequential::ALPHA_PLANNED);
    let stein = sequential::interval_df(&values, 8, sequential::ALPHA_PLANNED);
    assert!(stein.1 > 1.5 * whole.1, "{stein:?} {whole:?}");
    let width = |(m, h, _): (f64, f64, usize)| 100.0 * ((m + h).exp() - (m - h).exp());
    for reason in [
        StopReason::SessionCap,
        StopReason::TimeCap,
        StopReason::Fixed,
    ] {
        let (w, df) = half(reason, None);
        assert!(
            (w - width(whole)).abs() < 1e-9,
            "{reason:?}: {w} against {}",
            width(whole)
        );
        assert_eq!(df, Some(whole.2), "{reason:?}");
    }
    for (reason, settled_at) in [(StopReason::Target, None), (StopReason::Settled, Some(4))] {
        let (w, df) = half(reason, settled_at);
        assert!(
            (w - width(stein)).abs() < 1e-9,
            "{reason:?}: {w} against {}",
            width(stein)
        );
        assert_eq!(df, Some(stein.2), "{reason:?}");
    }
}
