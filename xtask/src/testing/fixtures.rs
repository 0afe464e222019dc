//! Test data shared by the unit tests of several modules, in one place: synthetic lockstep
//! sessions with known ratios, the measurement config of `profiles/quick.toml`, a workload's
//! real output line, and the `Report` that `xtask/expected/`'s files are rendered from.
//! Tests only; nothing here is compiled into `cargo xtask`.

use std::path::{Path, PathBuf};

use crate::analysis::outputs::ProfileInfo;
use crate::config::{Measure, Versus, Workload};
use crate::measure::instructions::InstructionCount;
use crate::measure::program::parse_line;
use crate::measure::session::{Batch, Session};
use crate::report::{Environment, Report, SCHEMA};
use crate::toolchain::build::{Build, Built};
use crate::toolchain::warnings::{ApplyReport, CrateCounts};

/// Synthetic lockstep sessions in a fixed environment: what `xtask/expected/`'s files are
/// rendered from.
pub fn report() -> Report {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles/quick.toml");
    let config = crate::config::load(&root).unwrap();
    let mut config = config;
    config.path = PathBuf::from("profiles/quick.toml");
    config.settings.measure.lockstep.sessions = 10;
    config.settings.measure.lockstep.rounds = 20;
    let sessions = sessions(10, 20);
    let instructions: Vec<InstructionCount> = [
        ("release", 1106.0),
        ("lto", 1043.0),
        ("lto+pgo", 917.0),
        ("oracle", 880.0),
    ]
    .into_iter()
    .map(|(b, i)| InstructionCount {
        workload: "agent_send_latency".into(),
        build: b.into(),
        per_message: Some(i),
        totals: Some((1_000_000, 1_000_000 + (i * 2000.0) as u64)),
        simulated: Some(crate::measure::callgrind::Simulated {
            cond_branches: i / 6.0,
            cond_mispredicts: i / 300.0,
            indirect_branches: 11.0,
            indirect_mispredicts: 0.4,
            i1_misses: 0.02,
            d1_misses: i / 30.0,
            ll_misses: 0.01,
        }),
        ..InstructionCount::default()
    })
    .collect();
    let workloads = crate::analysis::sessions::analyze_lockstep(
        &["agent_send_latency".into()],
        &builds(),
        &sessions,
        &instructions,
        &config.settings.measure,
        &crate::analysis::sessions::Pooled::none(&Default::default()),
    )
    .unwrap();
    let build = |b: Build| {
        Built::new(
            b,
            PathBuf::from(format!("target/pgo/{}/mty-bench", b.target_folder())),
            String::new(),
        )
    };
    let mut apply_check = ApplyReport::default();
    apply_check.per_crate.insert(
        "std".into(),
        CrateCounts {
            missing: 2,
            mismatch: 0,
        },
    );
    apply_check.missing_total = 2;
    Report {
        seed: 1,
        schema: SCHEMA,
        generated_unix_secs: 1_796_000_000,
        config,
        environment: Environment {
            rustc_vv: "rustc 1.95.0 (59807616e 2026-04-14)\nrelease: 1.95.0\nLLVM version: 22.1.2"
                .into(),
            llvm_profdata: PathBuf::from("/sysroot/bin/llvm-profdata"),
            llvm_profdata_version: "LLVM version 22.1.2-rust-1.95.0-stable".into(),
            cpu_model: "Test CPU @ 2.00GHz".into(),
            cores: 2,
            kernel: "6.1.0-test".into(),
            git_commit: "0123456789abcdef0123456789abcdef01234567".into(),
            git_dirty: false,
        },
        profile: ProfileInfo {
            path: PathBuf::from("pgo-data/merged-00000000deadbeef.profdata"),
            hash: "00000000deadbeef".into(),
            functions: 1138,
            max_function_count: 180000,
            total_count: 9704034,
            fingerprint: "0123456789abcdef".into(),
            skipped_raw: Vec::new(),
            origin: String::new(),
            parts: Vec::new(),
        },
        apply_check,
        insight: Some(insight()),
        // The synthetic data has no BOLT build (as a run without llvm-bolt).
        builds: Build::MEASURED
            .into_iter()
            .filter(|b| *b != Build::Bolt)
            .map(build)
            .collect(),
        workloads,
        instructions,
        comparators: Vec::new(),
        sessions,
        versus: Vec::new(),
        versus_sessions: Vec::new(),
        stopped: vec![crate::measure::Stopping {
            workload: "agent_send_latency".into(),
            target_half_width_pct: 1.0,
            pilot: 12,
            needed: Some(31),
            sessions: 31,
            reason: crate::measure::StopReason::Target,
            secs: 1.9,
            timing: crate::measure::session::Timing {
                setup_secs: 1.67,
                waited_secs: 0.03,
                copy_secs: 0.002,
                move_secs: 0.01,
                turns_secs: 1.79,
                batch_secs: 1.31,
                close_secs: 0.08,
            },
            comparisons: Vec::new(),
        }],
        against: None,
        stages: Vec::new(),
        bolt: None,
        layout: None,
        costs: None,
    }
}

/// An insight of made-up but plausible figures (the parsers are tested on real output).
pub fn insight() -> crate::analysis::outputs::InsightReport {
    use crate::analysis::insight::{FunctionCount, HotFunction, contents};
    let f = |name: &str, count: u64| FunctionCount {
        symbol: format!("_ZN{name}"),
        name: name.into(),
        count,
        counters: vec![count],
    };
    let training = vec![
        f("mty_runtime::pool::PoolInner::lock", 2_172_987),
        f("tokio::task::coop::RestoreOnPending::drop", 3_314_986),
        f("tokio::sync::mpsc::list::Rx<T>::pop", 900_000),
        f("serde_json::de::from_str", 0),
    ];
    crate::analysis::outputs::InsightReport {
        training: contents(&training, 12),
        required: vec![
            crate::analysis::outputs::RequiredCoverage {
                prefix: "mty_runtime::".into(),
                functions: 40,
                nonzero: 31,
            },
            crate::analysis::outputs::RequiredCoverage {
                prefix: "tokio::sync::mpsc::".into(),
                functions: 25,
                nonzero: 22,
            },
        ],
        workloads: vec![crate::analysis::outputs::WorkloadInsight {
            workload: "agent_send_latency".into(),
            profile: PathBuf::from("pgo-data/insight/agent_send_latency.profdata"),
            overlap_pct: 53.8,
            untrained_share_pct: 17.9,
            hot: vec![
                HotFunction {
                    name: "mty_runtime::mailbox::MailboxSender<M>::send".into(),
                    workload_share_pct: 11.2,
                    training_share_pct: 0.4,
                },
                HotFunction {
                    name: "tokio::sync::mpsc::list::Rx<T>::pop".into(),
                    workload_share_pct: 8.1,
                    training_share_pct: 3.9,
                },
            ],
            never_trained: Vec::new(),
            agreement: Some(crate::analysis::insight::Agreement {
                score_pct: 84.2,
                hot_pct: 99.0,
                lacking: Vec::new(),
            }),
        }],
        previous_overlap_pct: Some(97.5),
        min_agreement_pct: 89.0,
        warnings: Vec::new(),
    }
}

/// The report of a run from a shipped profile, with stages reused and skipped and a
/// `versus` pair: every optional section of report.md.
pub fn full_report() -> Report {
    let mut r = report();
    r.profile.origin = "bundle /ci/bundles/merged: trained at commit 0123456789ab with rustc 1.95.0, 1 training workload(s)".into();
    r.stages = [
        ("instrument", crate::base::stages::Outcome::Skipped),
        ("merge", crate::base::stages::Outcome::Reused),
        ("measure", crate::base::stages::Outcome::Ran),
    ]
    .map(|(stage, outcome)| crate::base::stages::StageRun {
        stage: stage.into(),
        seconds: 1.0,
        outcome,
        fingerprint: None,
    })
    .to_vec();
    r.versus_sessions = versus_sessions(1.08);
    r.versus = crate::analysis::workloads::analyze(
        &r.versus_sessions,
        &r.instructions,
        &versus_config(),
        &[],
    )
    .unwrap();
    r
}

/// Compares with a committed expected file; `UPDATE_EXPECT=1` rewrites it.
pub fn expect_file(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("expected")
        .join(name);
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == actual,
        "{} differs from what was rendered (rerun with UPDATE_EXPECT=1 to accept):\n{actual}",
        path.display()
    );
}

/// The measured builds of the synthetic data.
pub fn builds() -> Vec<String> {
    ["release", "lto", "lto+pgo", "oracle"]
        .map(String::from)
        .to_vec()
}

/// Synthetic lockstep sessions: release ~200 ns, release-aa the same, lto 1 % faster,
/// lto+pgo 10 % faster; the machine's state flips between 170 and 235 ns every 5 rounds
/// (all arms alike), each arm process has its own small offset.
pub fn sessions(n: u32, rounds: usize) -> Vec<Session> {
    sessions_of(
        &["release", "release-aa", "lto", "lto+pgo", "oracle"],
        &[1.0, 1.0, 0.99, 0.90, 0.85],
        n,
        rounds,
    )
}

/// [`sessions`] with release's layout variants `release/L1`… beside the builds, variant k
/// shifted by `shifts[k]` (%).
pub fn layout_sessions(n: u32, rounds: usize, shifts: &[f64]) -> Vec<Session> {
    let names: Vec<String> = (1..=shifts.len())
        .map(|k| crate::measure::layout_arm("release", k as u32))
        .collect();
    let extra: Vec<(&str, f64)> = names
        .iter()
        .map(String::as_str)
        .zip(shifts.iter().map(|s| 1.0 + s / 100.0))
        .collect();
    sessions_with(n, rounds, &extra)
}

/// [`sessions`] with more arms, each `(name, factor against release)`.
pub fn sessions_with(n: u32, rounds: usize, extra: &[(&str, f64)]) -> Vec<Session> {
    let arms: Vec<&str> = ["release", "release-aa", "lto", "lto+pgo", "oracle"]
        .into_iter()
        .chain(extra.iter().map(|e| e.0))
        .collect();
    let factors: Vec<f64> = [1.0, 1.0, 0.99, 0.90, 0.85]
        .into_iter()
        .chain(extra.iter().map(|e| e.1))
        .collect();
    sessions_of(&arms, &factors, n, rounds)
}

fn sessions_of(arms: &[&str], factor: &[f64], n: u32, rounds: usize) -> Vec<Session> {
    (0..n)
        .map(|s| {
            // Per-process offsets: ±0.4 % in steps, and ±0.3 % more that no trim collapses.
            let offsets: Vec<f64> = (0..arms.len())
                .map(|a| {
                    let (s, a) = (s as usize, a);
                    1.0 + 0.002 * (((s * 7 + a * 3) % 5) as f64 - 2.0)
                        + 0.001 * (((s * s * 13 + a * 5) % 7) as f64 - 3.0)
                })
                .collect();
            let batches = (0..arms.len())
                .map(|a| {
                    (0..rounds)
                        .map(|r| {
                            let state = if (r / 5) % 2 == 0 { 170.0 } else { 235.0 };
                            let m = state * factor[a] * offsets[a];
                            Batch {
                                median_ns: m,
                                p95_ns: m * 1.2,
                                p99_ns: m * 2.0,
                                p999_ns: Some(m * 3.0),
                                mean_ns: m * 1.05,
                                elapsed_ns: None,
                                inject_ns: None,
                                cpu_per_request_ns: None,
                                saturated: false,
                            }
                        })
                        .collect()
                })
                .collect();
            let mut total = parse_line(LINE).unwrap();
            total.percentiles = vec![(0.5, 200), (0.99, 400)];
            Session {
                moves: Vec::new(),
                machine: None,
                workload: "agent_send_latency".into(),
                session: s,
                arms: arms.iter().map(|a| a.to_string()).collect(),
                order: (0..rounds)
                    .map(|_| (0..arms.len() as u8).collect())
                    .collect(),
                paired: false,
                batches,
                totals: vec![total; arms.len()],
                timing: None,
            }
        })
        .collect()
}

pub const LINE: &str = r#"{"workload":"agent_send_latency","messages":200000,"warmup":10000,"policy":"block","payload_bytes":0,"capacity":8,"median_ns":253,"p95_ns":302,"p99_ns":563,"max_ns":161151,"mean_ns":267.68,"clock_overhead_ns":30,"percentiles":[[0.01,197],[0.5,253],[0.99,563]],"user_ms":70.0,"sys_ms":0.0,"voluntary_ctx_switches":0,"involuntary_ctx_switches":1}"#;

pub fn measure_config() -> Measure {
    crate::config::parse(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../profiles/quick.toml"
        ))
        .unwrap(),
    )
    .unwrap()
    .measure
}

pub fn batch(ns: f64) -> Batch {
    Batch {
        median_ns: ns,
        p95_ns: ns,
        p99_ns: ns,
        p999_ns: Some(ns),
        mean_ns: ns,
        elapsed_ns: None,
        inject_ns: None,
        cpu_per_request_ns: None,
        saturated: false,
    }
}

pub fn versus_config() -> Measure {
    let mut m = measure_config();
    m.workloads = ["mailbox", "tokio"]
        .map(|n| Workload::new(n, vec![n.to_string()]))
        .to_vec();
    m.versus = vec![Versus {
        subject: "mailbox".into(),
        reference: "tokio".into(),
    }];
    m
}

/// Sessions where the subject costs `ratio` times the reference, on a machine whose
/// speed flips between rounds and sessions (both arms of a round share the state).
pub fn versus_sessions(ratio: f64) -> Vec<Session> {
    let arms = ["release:mailbox", "release:tokio"];
    (0..12)
        .map(|s| {
            let speeds: Vec<f64> = (0..10)
                .map(|r| if (r + s) % 3 == 0 { 1.4 } else { 1.0 } * (1.0 + s as f64 / 50.0))
                .collect();
            let wobble = |r: usize| 1.0 + ((r * 7 + s as usize) % 5) as f64 / 1000.0;
            Session {
                moves: Vec::new(),
                machine: None,
                workload: "mailbox vs tokio".into(),
                session: s,
                arms: arms.map(String::from).to_vec(),
                order: vec![vec![0, 1]; 10],
                paired: false,
                batches: vec![
                    speeds
                        .iter()
                        .enumerate()
                        .map(|(r, v)| batch(100.0 * ratio * v * wobble(r)))
                        .collect(),
                    speeds.iter().map(|v| batch(100.0 * v)).collect(),
                ],
                totals: Vec::new(),
                timing: None,
            }
        })
        .collect()
}

/// A paired session of `arms` whose rounds ran `order` (arm indices, two by two), each arm's
/// turns taking `times` in the order it ran them.
pub fn paired(arms: &[&str], order: Vec<Vec<u8>>, times: &[&[f64]]) -> Session {
    let batch = |t: f64| crate::measure::session::Batch {
        median_ns: t,
        p95_ns: t,
        p99_ns: t,
        p999_ns: None,
        mean_ns: t,
        elapsed_ns: None,
        inject_ns: None,
        cpu_per_request_ns: None,
        saturated: false,
    };
    Session {
        workload: "w".into(),
        session: 0,
        arms: arms.iter().map(|a| a.to_string()).collect(),
        order,
        paired: true,
        moves: Vec::new(),
        machine: None,
        batches: times
            .iter()
            .map(|t| t.iter().map(|&t| batch(t)).collect())
            .collect(),
        totals: Vec::new(),
        timing: None,
    }
}
