//! The config's schema: every section and key, with its default and what it means. Loading
//! and checking a config is `config.rs`'s.

use std::path::PathBuf;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::workload::{Mode, Workload};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The one executable that is trained and measured (a bin target of the workspace).
    /// One for both on purpose: generic code is monomorphised into each binary, so a profile
    /// trained by another executable misses the measured hot path.
    pub binary: String,
    /// The package whose bin target `binary` is, when two packages of the workspace have a
    /// bin target of that name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    pub train: Train,
    pub measure: Measure,
    /// Absent: no instruction counts (they need a workload that runs `--messages N
    /// --untimed`, as mty-bench's do).
    #[serde(default)]
    pub instructions: Instructions,
    pub apply_check: ApplyCheck,
    #[serde(default)]
    pub check: Check,
    /// Absent: no comparator rows (they run Mighty's mailbox workload in other languages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare: Option<Compare>,
    #[serde(default)]
    pub calibrate: Calibrate,
    #[serde(default)]
    pub insight: Insight,
    #[serde(default)]
    pub bolt: Bolt,
    #[serde(default)]
    pub layout: Layout,
    /// Workloads the training's weights are tuned on (`cargo xtask tune`), never the
    /// measured ones: the measured workloads' capture stays held out.
    #[serde(default)]
    pub validate: Validate,
}

/// `[validate]`: the validation workloads of `cargo xtask tune`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Validate {
    /// Run whole on the instrumented binary, each profiled alone, like a measured workload's
    /// insight profile; none may share an input with a measured workload.
    #[serde(default)]
    pub workloads: Vec<Workload>,
}

/// The `layout` stage: builds relinked with their functions in another order
/// (`--shuffle-sections`), measured beside the others, so that a gain can be told from layout
/// luck (the layout floor).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Layout {
    /// Variants per build (K); 0 turns the stage off.
    pub variants: u32,
    /// The builds relinked: `release` (the layout floor), and optionally `lto` and `lto+pgo`
    /// (their gains over release as a range over layouts; BOLT against random layouts).
    pub builds: Vec<String>,
    /// The workloads whose sessions carry the variants (default: `check.workloads`); the others
    /// have no layout floor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workloads: Option<Vec<String>>,
    /// Variant k is linked with `--shuffle-sections=.text*=<seed + k>`; unset (the default),
    /// drawn each time the stage runs, so that every run adds new layouts to the floor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u32>,
    /// A variant's instructions per message may differ from its base's by at most this (%):
    /// more means the relink changed the code, not only where it lies.
    pub max_instructions_change_pct: f64,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            variants: 4,
            builds: vec!["release".to_string()],
            workloads: None,
            seed: None,
            max_instructions_change_pct: 1.0,
        }
    }
}

impl Layout {
    /// The workloads whose sessions carry the variants.
    pub fn workloads_of<'a>(&'a self, check: &'a Check) -> &'a [String] {
        self.workloads.as_deref().unwrap_or(&check.workloads)
    }
}

/// The builds that can be relinked in another layout (BOLT's is its own layout; the oracle is
/// a yardstick).
pub const LAYOUT_BUILDS: [&str; 3] = ["release", "lto", "lto+pgo"];

/// The `bolt` stage: BOLT on top of PGO + fat LTO, in instrumentation mode (no `perf`, no
/// hardware counters), trained with the `[train]` mix.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Bolt {
    /// `"auto"` (run when llvm-bolt is found, else skip saying so), `true` (missing is an
    /// error), `false`.
    pub enabled: BoltEnabled,
    /// `llvm-bolt` options of the optimising step (after `-data=<profile>`).
    pub options: Vec<String>,
    /// Seconds each BOLT step and each training workload may take.
    pub timeout_secs: u64,
    /// A merged `.fdata` profile to optimise with instead of training (a shipped
    /// `pgo-data/bolt/merged.fdata`, say); a relative path is taken from the config file's
    /// folder. It must come from the same relinked executable, or the proof fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<PathBuf>,
}

impl Default for Bolt {
    fn default() -> Self {
        Bolt {
            enabled: BoltEnabled::Auto,
            options: [
                "-reorder-blocks=ext-tsp",
                "-reorder-functions=cdsort",
                "-split-functions",
                "-split-all-cold",
                "-dyno-stats",
            ]
            .map(String::from)
            .to_vec(),
            timeout_secs: 300,
            profile: None,
        }
    }
}

/// `bolt.enabled`: `"auto"`, `true` or `false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BoltEnabled {
    #[default]
    Auto,
    On,
    Off,
}

impl Serialize for BoltEnabled {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            BoltEnabled::Auto => s.serialize_str("auto"),
            BoltEnabled::On => s.serialize_bool(true),
            BoltEnabled::Off => s.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for BoltEnabled {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(BoltEnabled::On),
            Raw::Bool(false) => Ok(BoltEnabled::Off),
            Raw::Text(t) if t == "auto" => Ok(BoltEnabled::Auto),
            Raw::Text(t) => Err(serde::de::Error::custom(format!(
                "`bolt.enabled` is \"auto\", true or false, not \"{t}\""
            ))),
        }
    }
}

/// The largest training weight accepted (weights are relative; llvm-profdata's are integers).
pub const MAX_WEIGHT: u64 = 1_000_000;

/// `insight.min_agreement_pct`'s default: set from recorded runs (docs/findings.md).
pub const AGREEMENT_WARNING_PCT: f64 = 89.0;

/// The `insight` stage: what the profile holds, and whether the training looks like the
/// measured workloads.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Insight {
    /// How many of the hottest functions to list (training profile, and each workload's).
    pub top: usize,
    /// A measured workload whose agreement with the training (`insight::agreement`,
    /// the predictor of capture, %) is below this is warned about.
    pub min_agreement_pct: f64,
}

impl Default for Insight {
    fn default() -> Self {
        Insight {
            top: 12,
            min_agreement_pct: AGREEMENT_WARNING_PCT,
        }
    }
}

/// `[measure.lockstep]`, the measurement protocol: every arm a live process for a whole session, all pinned to
/// one core, taking turns one batch at a time in a seeded random order each round.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Lockstep {
    /// The most sessions a workload runs, each with new processes: the unit of inference.
    /// How many it runs below that is the stopping rule's (`measure.target_half_width_pct`).
    pub sessions: u32,
    /// The stopping rule's pilot: the sessions every workload runs before its count is
    /// planned from their spread (at most `sessions`).
    pub min_sessions: u32,
    /// A whole-process workload's pilot, in adjacent pairs of each comparison: its sessions
    /// are this many pairs over `rounds`, at least two (its runs are whole processes, so a
    /// pilot of `min_sessions` sessions of every comparison would cost minutes). Without
    /// `measure.fresh_copies` the pilot stays `min_sessions`: the test of whether its sessions
    /// hold a component of their own needs them.
    pub min_pairs: u32,
    /// A workload's sessions stop once they have taken this many seconds in all (the pilot
    /// always runs whole): the interval is then wider than the target, and says so.
    pub max_secs: f64,
    /// Rounds per session; each round runs every arm's batch once. Few: a session's spread is
    /// its processes', and each turn costs its answer's round trip besides its batch.
    pub rounds: u32,
    /// Messages (iterations) per batch of an in-process workload (about 1 ms of work); a
    /// whole-process workload runs its command once a turn unless it sets its own.
    pub batch_messages: u64,
    /// Whether the arms share one core (`measure.pin_core`, else the last), as they do by
    /// default. `false` leaves them unpinned: for workloads of several threads
    /// (`agent_send_contended`), which then have every core while the other arms wait.
    pub share_core: bool,
}

impl Default for Lockstep {
    fn default() -> Self {
        Lockstep {
            sessions: 400,
            min_sessions: 12,
            min_pairs: 24,
            max_secs: 60.0,
            rounds: 6,
            batch_messages: 6000,
            share_core: true,
        }
    }
}

/// `cargo xtask calibrate`: release against release with a known cost injected.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Calibrate {
    /// The measured workload (a name from `measure.workloads`) to inject into; the first
    /// measured one when not given.
    pub workload: Option<String>,
    /// Injected costs, in % of that workload's median.
    pub sizes_pct: Vec<f64>,
    /// The threshold a detection must clear (%): 0, the default, calls any injected cost
    /// whose interval excludes 0 detected (the statistics' own sensitivity); the pipeline's
    /// verdicts clear `measure.min_effect_pct` too.
    pub min_effect_pct: f64,
}

impl Default for Calibrate {
    fn default() -> Self {
        Calibrate {
            workload: None,
            sizes_pct: vec![0.0, 1.0, 2.0, 5.0],
            min_effect_pct: 0.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Train {
    /// Seconds each training workload may run before it is killed.
    pub timeout_secs: u64,
    /// LLVM's continuous mode: the instrumented build keeps its counters in the raw profile
    /// as they change (`%c` in `LLVM_PROFILE_FILE`, with runtime counter relocation and
    /// without value profiles), so a server killed by SIGKILL still leaves its profile.
    /// Loses indirect-call and memcpy-size profiles; for servers that cannot exit cleanly.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub continuous: bool,
    pub workloads: Vec<Workload>,
}

impl Default for Train {
    fn default() -> Self {
        Train {
            timeout_secs: 300,
            continuous: false,
            workloads: Vec::new(),
        }
    }
}

impl Train {
    /// The training as it runs: the commands without their weights (a weight changes how
    /// the raw profiles merge, not what is trained).
    pub fn commands(&self) -> Train {
        Train {
            workloads: self
                .workloads
                .iter()
                .map(|w| Workload {
                    weight: None,
                    ..w.clone()
                })
                .collect(),
            ..self.clone()
        }
    }

    /// Each training workload's name and weight (1 when not given), in order.
    pub fn weights(&self) -> Vec<(String, u64)> {
        self.workloads
            .iter()
            .map(|w| (w.name.clone(), w.weight.unwrap_or(1)))
            .collect()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Measure {
    pub lockstep: Lockstep,
    /// Run every arm of a session from a fresh copy of its executable, written on the set-up
    /// core while the session before takes its turns and removed after it. What stays with a
    /// file (where the page cache put its pages, in which folio sizes) is then drawn anew
    /// every session, like the arms' places and heaps: it is in the sessions' own spread,
    /// and the A/A arm (release's bytes in another new file every session) is a null that
    /// must hold 0. `false`: each arm runs from its own file, for a program that looks for
    /// files beside its executable; what stays with a file is then in no interval.
    pub fresh_copies: bool,
    /// Where the copies are written (`pgo-data/copies`, set by the pipeline; elsewhere the
    /// system's temporary directory). Not a key of the file.
    #[serde(skip)]
    pub copies_dir: Option<std::path::PathBuf>,
    /// Start each arm with a random number (0 to 2047) of extra leading slashes in the path
    /// it runs as, drawn anew every session (every run of a whole-process workload). The path
    /// names the same file; its length is `argv[0]`'s, which a program copies to its heap as
    /// it starts (Rust's `std::env::args` does), so every later allocation starts at an
    /// offset drawn per session instead of one fixed by the file's name and the arm's
    /// arguments: what a build's heap layout does to it moves into session noise.
    pub shift_heap: bool,
    /// A session with more of other processes' CPU time than this on the arms' core(s) (% of
    /// a core over its turns) is disturbed: named in the report, and left out of a workload
    /// of several threads (whose figures depend on the load).
    pub max_other_cpu_pct: f64,
    /// Seeds the arms' places, heap shifts and turn orders (and the capture's bootstrap). Unset (the
    /// default): drawn per run and recorded in report.json, so that no fixed order is
    /// replayed run after run; set (or `--seed N`): that run replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Seconds each answer of a lockstep arm (its setup, one batch) may take before it is
    /// killed.
    pub timeout_secs: u64,
    /// Pin every measured run to this CPU (`taskset -c`), or leave it to the scheduler.
    pub pin_core: Option<usize>,
    /// Bootstrap resamples for the oracle capture's interval (at least 10,000 for a stable
    /// 95 % interval).
    pub bootstrap_resamples: usize,
    /// The stopping rule's target: each median comparison a workload reports (each build
    /// against release, the null arms, the `versus` pairs, `--against`'s) runs the sessions
    /// its pilot's spread asks for to be at most this wide on either side, in %, unless it
    /// settles earlier beyond every threshold (0: no target, `lockstep.sessions` unless
    /// `lockstep.max_secs` comes first).
    pub target_half_width_pct: f64,
    /// The layout variants' own target (%), where wider than `target_half_width_pct`: the
    /// floor rests on their spread, which needs less precision than a verdict.
    pub layout_half_width_pct: f64,
    /// The oracle's own target (%), where wider than `target_half_width_pct`: the capture
    /// share needs less precision than a verdict.
    pub oracle_half_width_pct: f64,
    /// The smallest change called a change, in %: the verdict threshold is the larger of this
    /// and the A/A noise floor.
    pub min_effect_pct: f64,
    /// The same for a service's CPU time per request (`Metric::CpuPerRequest`), in %: a
    /// server's CPU per request is steadier than any time a client sees, so a smaller change
    /// is callable.
    pub cpu_min_effect_pct: f64,
    pub workloads: Vec<Workload>,
    /// Pairs of measured workloads compared on the same build, paired in the
    /// same sessions (`analysis/workloads.rs`), e.g. the mailbox against bare tokio.
    pub versus: Vec<Versus>,
}

impl Default for Measure {
    fn default() -> Self {
        Measure {
            lockstep: Lockstep::default(),
            fresh_copies: true,
            copies_dir: None,
            shift_heap: true,
            max_other_cpu_pct: 10.0,
            seed: None,
            timeout_secs: 120,
            pin_core: None,
            bootstrap_resamples: 10_000,
            target_half_width_pct: 1.0,
            layout_half_width_pct: 1.5,
            oracle_half_width_pct: 2.0,
            min_effect_pct: 1.0,
            cpu_min_effect_pct: 0.5,
            workloads: Vec::new(),
            versus: Vec::new(),
        }
    }
}

/// `subject`'s cost over `reference`'s, both names of measured workloads.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Versus {
    pub subject: String,
    pub reference: String,
}

/// Instructions per message from `valgrind --tool=callgrind`: deterministic where wall time
/// is not. Two runs of `messages` and 2 × `messages` messages; the difference removes setup.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Instructions {
    /// 0 turns the measurement off.
    pub messages: u64,
    pub timeout_secs: u64,
}

impl Default for Instructions {
    /// Off.
    fn default() -> Self {
        Instructions {
            messages: 0,
            timeout_secs: 300,
        }
    }
}

/// The comparators (`cargo xtask compare`, and the comparison section of the report).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Compare {
    /// Measured messages per run of every same-thread row.
    pub messages: u64,
    /// Measured messages per run of the cross-thread row (at most `messages`): one thread
    /// wake-up per message makes it far slower per message, and a few thousand samples give
    /// its percentiles.
    pub cross_thread_messages: u64,
    /// Messages before measuring.
    pub warmup: u64,
    /// Interleaved rounds: each runs every row once, in a seeded random order.
    pub rounds: u32,
    pub seed: u64,
    /// Seconds each run may take.
    pub timeout_secs: u64,
}

impl Default for Compare {
    fn default() -> Self {
        Compare {
            messages: 50_000,
            cross_thread_messages: 5000,
            warmup: 2500,
            rounds: 3,
            seed: 20261130,
            timeout_secs: 120,
        }
    }
}

/// `cargo xtask pgo --check`: the gate.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Check {
    /// The measured workloads the gate judges.
    pub workloads: Vec<String>,
    /// PGO must be significantly faster than release by at least this much (%): the upper
    /// bound of its interval must lie below −this.
    pub min_pgo_gain_pct: f64,
}

/// A workload's own lockstep settings, resolved against the config's.
impl Workload {
    /// Its lockstep sessions under `lockstep`.
    pub fn sessions_in(&self, lockstep: &Lockstep) -> u32 {
        self.sessions
            .map_or(lockstep.sessions, |n| n.min(lockstep.sessions))
    }

    /// The sessions of its stopping rule's pilot under `lockstep`.
    pub fn pilot_in(&self, lockstep: &Lockstep) -> u32 {
        lockstep
            .min_sessions
            .clamp(2, self.sessions_in(lockstep).max(2))
    }

    /// The sessions of a whole-process workload's pilot under `lockstep`: `min_pairs` pairs
    /// of each comparison, one a round.
    pub fn pair_pilot_in(&self, lockstep: &Lockstep) -> u32 {
        lockstep
            .min_pairs
            .div_ceil(lockstep.rounds.max(1))
            .clamp(2, self.sessions_in(lockstep).max(2))
    }

    /// Its target half-width (%) under `measure`.
    pub fn target_in(&self, measure: &Measure) -> f64 {
        self.target_half_width_pct
            .unwrap_or(measure.target_half_width_pct)
    }

    /// Its messages per lockstep batch under `lockstep` (a whole-process workload: runs per
    /// turn, one unless it says).
    pub fn batch_in(&self, lockstep: &Lockstep) -> u64 {
        match self.mode {
            Mode::Lockstep => self.batch_messages.unwrap_or(lockstep.batch_messages),
            Mode::Process | Mode::Service => self.batch_messages.unwrap_or(1),
        }
    }

    /// Whether its lockstep arms share one core under `lockstep`.
    pub fn shares_core_in(&self, lockstep: &Lockstep) -> bool {
        self.share_core.unwrap_or(lockstep.share_core)
    }

    /// report.md's line on how it was measured in lockstep, where that differs from `lockstep`.
    pub fn own_lockstep_line(&self, l: &Lockstep) -> Option<String> {
        let own = (
            self.sessions_in(l),
            self.batch_in(l),
            self.shares_core_in(l),
        );
        if own == (l.sessions, l.batch_messages, l.share_core) {
            return None;
        }
        let pin = match own.2 {
            true => "its arms pinned to the shared core",
            false => "its arms not pinned (`share_core = false`: it runs several threads)",
        };
        Some(format!(
            "- `{}`: {} sessions, batches of {} messages, {pin}.",
            self.name, own.0, own.1
        ))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyCheck {
    /// Symbol paths that must all have profile data in the optimised build (prefixes of
    /// demangled names, matched anywhere in the name so monomorphised copies and trait
    /// impls count). Any "no profile data" or "hash mismatch" warning for one fails the run.
    pub required: Vec<String>,
}
