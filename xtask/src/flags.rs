//! The command line: one clap subcommand per job, each with only its own flags. Help and
//! usage errors are clap's; a usage error exits 2, a failed run 1. docs/commands.md's option table
//! is checked against these definitions (`flags/tests.rs`).

use std::path::PathBuf;

use clap::builder::{PossibleValue, TypedValueParser};
use clap::{Args, Parser, Subcommand};

use crate::base::stages::Stage;

/// The PGO pipeline and its companions, for this workspace or another (`--manifest-path`).
#[derive(Debug, Parser)]
#[command(
    name = "cargo-xtask",
    bin_name = "cargo xtask",
    about = "Profile-guided optimisation, measured: build, train, optimise, measure, report",
    after_help = "Installed (`cargo install --path xtask`), the same commands are `cargo mty <COMMAND>`."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The pipeline: instrument, train, merge, optimise, measure, report (or one STAGE)
    #[command(long_about = PGO_ABOUT)]
    Pgo(PgoArgs),
    /// Release against release with a known cost injected: what the statistics detect
    #[command(long_about = CALIBRATE_ABOUT)]
    Calibrate(CalibrateArgs),
    /// The training's weights, chosen on the validation workloads ([validate])
    #[command(long_about = TUNE_ABOUT)]
    Tune(TuneArgs),
    /// Two executables as arms of the same lockstep sessions: NEW against OLD
    #[command(long_about = AB_ABOUT)]
    Ab(AbArgs),
    /// Write this run's profile and its manifest as a bundle into DIR
    Export(ExportArgs),
    /// The mailbox workload beside bare tokio, C++ (asio, condition variables) and Go
    #[command(long_about = COMPARE_ABOUT)]
    Compare(CompareArgs),
}

const PGO_ABOUT: &str = "\
Builds the config's binary instrumented, trains it, merges the profiles with a version-matched
llvm-profdata, rebuilds it with the profile (fat LTO), builds the non-PGO baselines, measures
them in lockstep sessions and writes pgo-data/report.json and its renderings.

STAGE runs one stage alone, reading the earlier stages' outputs from pgo-data/stages/.
Without STAGE: all of them, in order.";

const CALIBRATE_ABOUT: &str = "\
Release against release with a known cost injected into every timed round trip (config section
[calibrate]): what it detects at each size, and that nothing is detected when nothing is
injected.";

const TUNE_ABOUT: &str = "\
The training workloads' weights chosen on the validation workloads (config section [validate]),
never on the measured ones; kept in pgo-data/tune.json, which later runs merge with.";

const AB_ABOUT: &str = "\
Two executables of the binary (e.g. two commits' release builds) as arms of the same lockstep
sessions, with OLD's A/A arm and a copy of OLD: NEW's change against OLD per measured workload,
with its 95 % interval (pgo-data/ab.json).";

const COMPARE_ABOUT: &str = "\
The mailbox workload on Mighty's mailbox (Block and Fail), bare tokio mpsc, a C++ asio coroutine
channel, a C++ condition-variable channel (cross-thread) and a Go buffered channel, in one table
(config section [compare]), on a release build. `cargo xtask pgo` adds the LTO and PGO rows to
its report. A missing g++ (or $CXX), asio header or Go toolchain (or $GO) skips its row with the
package to install.";

/// What every command shares; a path not given is found from the workspace (`Ctx::open`).
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct CommonFlags {
    /// Pipeline config [default: <workspace>/profiles/default.toml; profiles/quick.toml is a
    /// short run]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The workspace to build, train and measure [default: this one; as `cargo mty`, the one
    /// around the current directory]
    #[arg(long, value_name = "FILE")]
    pub manifest_path: Option<PathBuf>,
    /// Where artifacts go [default: <workspace>/pgo-data]
    #[arg(long, value_name = "DIR")]
    pub pgo_data: Option<PathBuf>,
    /// Root of the per-build cargo target directories [default: <workspace's target>/pgo]
    #[arg(long, value_name = "DIR")]
    pub target_dir: Option<PathBuf>,
    /// Queue behind another run holding the artifact directory instead of stopping
    #[arg(long)]
    pub wait: bool,
}

/// How the stages of a run are reused: every command that runs stages takes these.
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct RunFlags {
    /// Run every stage (or STAGE and every later one) although it is up to date
    #[arg(long, value_name = "STAGE", num_args = 0..=1, default_missing_value = "doctor",
          hide_possible_values = true,
          value_parser = StageParser)]
    pub force: Option<Stage>,
}

/// The stopping rule and the seed: every command that measures takes these.
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct MeasureFlags {
    /// The stopping rule's target: measure until every interval is expected within ±PCT %
    /// [default: the config's `measure.target_half_width_pct`, 1.0; 0.5 for a precise run]
    #[arg(long, value_name = "PCT", value_parser = half_width)]
    pub half_width: Option<f64>,
    /// Seed the arms' places and turn orders with N (the config's `measure.seed`) instead of a
    /// seed drawn for this run: replays a run whose report.json recorded N
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct PgoArgs {
    /// One stage alone, on the recorded outputs of the earlier ones
    #[arg(value_name = "STAGE", value_parser = StageParser)]
    pub stage: Option<Stage>,
    #[command(flatten)]
    pub common: CommonFlags,
    #[command(flatten)]
    pub run: RunFlags,
    #[command(flatten)]
    pub measure: MeasureFlags,
    /// Gate: fail unless PGO is significantly faster than release by the config's
    /// `check.min_pgo_gain_pct` on `check.workloads`
    #[arg(long)]
    pub check: bool,
    /// Gate too, against this earlier report.json: fail when a build's paired change against
    /// release grew beyond the noise threshold, or its instructions/message by more than 1 %
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// Merge the readable raw profiles when some are corrupt (the report lists the skipped)
    #[arg(long)]
    pub skip_bad_profiles: bool,
    /// Optimise with a profile whose sources, toolchain or training config changed, instead
    /// of retraining (the report shows the hash mismatches)
    #[arg(long)]
    pub allow_stale: bool,
    /// Also build that git revision's release and lto+pgo (its own training, in a worktree
    /// under target/against/) and measure them in the same sessions; with --check, a
    /// significant slowdown fails
    #[arg(long, value_name = "REV")]
    pub against: Option<String>,
    /// Measure again although the measured executables and the measure config are unchanged
    #[arg(long)]
    pub remeasure: bool,
    /// After the report, copy report.md with a line of context (machine, date, commit) to
    /// docs/results/<date>-<commit>.md and add its headline row to docs/results/README.md
    #[arg(long)]
    pub publish: bool,
    /// Build from this stored profile instead of training: a bundle directory (checked
    /// against these sources and toolchain) or an indexed .profdata; skips instrument, train,
    /// insight and oracle; the apply check runs as always
    #[arg(long, value_name = "PATH")]
    pub profile: Option<PathBuf>,
    /// With `train` or `merge`: also write the resulting profile and its manifest into DIR
    #[arg(long, value_name = "DIR")]
    pub bundle: Option<PathBuf>,
    /// With `merge`, repeatable: merge these bundles (llvm-profdata's weighted inputs, weight
    /// 1 when not given) instead of this pgo-data's raw profiles
    #[arg(long = "input", value_name = "DIR[:WEIGHT]")]
    pub inputs: Vec<String>,
}

impl PgoArgs {
    /// `--baseline` gates too.
    pub fn gates(&self) -> bool {
        self.check || self.baseline.is_some()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct CalibrateArgs {
    #[command(flatten)]
    pub common: CommonFlags,
    #[command(flatten)]
    pub measure: MeasureFlags,
    /// The whole calibration R times, each with a fresh seed, and how often the verdicts
    /// agreed and whether the intervals overlapped
    #[arg(long, value_name = "R", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct TuneArgs {
    #[command(flatten)]
    pub common: CommonFlags,
    #[command(flatten)]
    pub run: RunFlags,
    #[command(flatten)]
    pub measure: MeasureFlags,
    /// Merge the readable raw profiles when some are corrupt
    #[arg(long)]
    pub skip_bad_profiles: bool,
    /// Build lto+pgo from the config's mix, the agreement's and one with each training
    /// workload weighed down, and choose by measuring them against each other on the
    /// validation workloads
    #[arg(long = "measure")]
    pub measured: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct AbArgs {
    /// The executable measured against
    #[arg(value_name = "OLD")]
    pub old: PathBuf,
    /// The executable judged
    #[arg(value_name = "NEW")]
    pub new: PathBuf,
    #[command(flatten)]
    pub common: CommonFlags,
    #[command(flatten)]
    pub measure: MeasureFlags,
}

#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct ExportArgs {
    /// Where the bundle goes
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    #[command(flatten)]
    pub common: CommonFlags,
}

#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub common: CommonFlags,
}

impl Command {
    /// The flags every command shares.
    pub fn common_mut(&mut self) -> &mut CommonFlags {
        match self {
            Command::Pgo(a) => &mut a.common,
            Command::Calibrate(a) => &mut a.common,
            Command::Tune(a) => &mut a.common,
            Command::Ab(a) => &mut a.common,
            Command::Export(a) => &mut a.common,
            Command::Compare(a) => &mut a.common,
        }
    }
}

/// Words that were `cargo xtask pgo <WORD>` before they became commands of their own.
const MOVED: [&str; 4] = ["calibrate", "tune", "ab", "export"];

/// A stage name, with clap's list of them in the help.
#[derive(Clone)]
struct StageParser;

impl TypedValueParser for StageParser {
    type Value = Stage;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Stage, clap::Error> {
        let word = value.to_string_lossy();
        if let Some(stage) = Stage::parse(&word) {
            return Ok(stage);
        }
        let mut err = clap::Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(cmd);
        use clap::error::{ContextKind, ContextValue};
        let name = arg.map_or("STAGE".to_string(), |a| a.to_string());
        err.insert(ContextKind::InvalidArg, ContextValue::String(name));
        err.insert(ContextKind::InvalidValue, ContextValue::String(word.into()));
        err.insert(
            ContextKind::ValidValue,
            ContextValue::Strings(Stage::ALL.iter().map(|s| s.name().to_string()).collect()),
        );
        Err(err)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            Stage::ALL
                .iter()
                .map(|s| PossibleValue::new(s.name()).help(s.help())),
        ))
    }
}

fn half_width(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(pct) if pct >= 0.0 && pct.is_finite() => Ok(pct),
        _ => Err(format!("a half-width in % (1.0, 0.5), not `{value}`")),
    }
}

/// The command line, or clap's error (help included, which exits 0).
pub fn parse(
    argv: impl IntoIterator<Item = String>,
    bin_name: &str,
) -> Result<Command, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let mut cmd = Cli::command().bin_name(bin_name);
    cmd.build();
    let argv: Vec<String> = argv.into_iter().collect();
    if let Some(word) = moved_word(&cmd, &argv) {
        let message = format!(
            "`{bin_name} pgo {word}` is now `{bin_name} {word}` (`{bin_name} {word} --help`)"
        );
        let sub = cmd.find_subcommand_mut("pgo").expect("defined");
        return Err(sub.error(clap::error::ErrorKind::InvalidSubcommand, message));
    }
    let matches =
        cmd.try_get_matches_from_mut(std::iter::once(bin_name.to_string()).chain(argv))?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| e.with_cmd(&cmd))?;
    if let Command::Pgo(pgo) = &cli.command {
        check_pgo(pgo).map_err(|message| {
            let sub = cmd.find_subcommand_mut("pgo").expect("defined");
            sub.error(clap::error::ErrorKind::ArgumentConflict, message)
        })?;
    }
    Ok(cli.command)
}

/// A word of `pgo`'s command line (not a flag's value) that is now a command of its own.
fn moved_word<'a>(cmd: &clap::Command, argv: &'a [String]) -> Option<&'a str> {
    let (first, rest) = argv.split_first()?;
    if first != "pgo" {
        return None;
    }
    let pgo = cmd.find_subcommand("pgo").expect("defined");
    let takes_value = |word: &str| {
        pgo.get_arguments().any(|a| {
            a.get_long().is_some_and(|l| word == format!("--{l}"))
                && a.get_num_args().is_some_and(|n| n.min_values() > 0)
        })
    };
    rest.iter()
        .enumerate()
        .find(|(i, w)| MOVED.contains(&w.as_str()) && (*i == 0 || !takes_value(&rest[i - 1])))
        .map(|(_, w)| w.as_str())
}

/// The flags of `pgo` that belong to one stage, or to the whole pipeline.
fn check_pgo(a: &PgoArgs) -> Result<(), String> {
    let misplaced = |flag: &str, wanted: &str| Err(format!("`{flag}` is for {wanted}"));
    if a.bundle.is_some() && !matches!(a.stage, Some(Stage::Train | Stage::Merge)) {
        return misplaced("--bundle", "`cargo xtask pgo train` or `merge`");
    }
    if !a.inputs.is_empty() && a.stage != Some(Stage::Merge) {
        return misplaced("--input", "`cargo xtask pgo merge`");
    }
    if a.profile.is_some() && a.stage.is_some() {
        return misplaced(
            "--profile",
            "the whole pipeline (`cargo xtask pgo --profile PATH`)",
        );
    }
    if a.against.is_some() && a.stage.is_some() {
        return misplaced(
            "--against",
            "the whole pipeline (`cargo xtask pgo --against REV`)",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
