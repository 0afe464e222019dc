//! The command line of both commands, `cargo xtask pgo` and `cargo xtask compare`: one table
//! of flags per command, from which the parser and the help are both made, so a flag cannot
//! be accepted without being shown. A usage error (unknown command, flag or stage; a missing
//! value) is told apart from a failure of the work: the first exits 2, the second 1.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::stage::Stage;

/// One flag of a command: its name, the placeholder of its value (if it takes one), its help.
#[derive(Debug)]
pub struct FlagSpec {
    pub name: &'static str,
    pub value: Option<&'static str>,
    pub help: &'static str,
}

const fn flag(name: &'static str, value: Option<&'static str>, help: &'static str) -> FlagSpec {
    FlagSpec { name, value, help }
}

/// Flags both commands take.
const COMMON: [FlagSpec; 5] = [
    flag(
        "--config",
        Some("FILE"),
        "pipeline config (default: <workspace>/profiles/default.toml; profiles/quick.toml is a \
         short run)",
    ),
    flag(
        "--manifest-path",
        Some("FILE"),
        "the workspace to build, train and measure (default: this one; as `cargo mty`, the one \
         around the current directory)",
    ),
    flag(
        "--pgo-data",
        Some("DIR"),
        "where artifacts go (default: <workspace>/pgo-data)",
    ),
    flag(
        "--target-dir",
        Some("DIR"),
        "root of the per-build cargo target directories (default: <workspace's target>/pgo)",
    ),
    flag(
        "--wait",
        None,
        "queue behind another run holding the artifact directory instead of stopping",
    ),
];

/// Flags only `cargo xtask pgo` takes.
const PGO_ONLY: [FlagSpec; 14] = [
    flag(
        "--check",
        None,
        "gate: fail unless PGO is significantly faster than release by the config's \
         `check.min_pgo_gain_pct` on `check.workloads`",
    ),
    flag(
        "--baseline",
        Some("FILE"),
        "gate too, against this earlier report.json: fail when a build's paired change against \
         release grew beyond the noise threshold, or its instructions/message by more than 1 %",
    ),
    flag(
        "--skip-bad-profiles",
        None,
        "merge the readable raw profiles when some are corrupt (the report lists the skipped)",
    ),
    flag(
        "--allow-stale",
        None,
        "optimise with a profile whose sources, toolchain or training config changed, instead \
         of retraining (the report shows the hash mismatches)",
    ),
    flag(
        "--force",
        Some("[STAGE]"),
        "run every stage (or STAGE and every later one) although it is up to date",
    ),
    flag(
        "--against",
        Some("REV"),
        "also build that git revision's release and lto+pgo (its own training, in a worktree \
         under target/against/) and measure them in the same sessions: this commit against REV \
         per workload and build; with --check, a significant slowdown fails",
    ),
    flag(
        "--half-width",
        Some("PCT"),
        "the stopping rule's target: measure until every interval is expected within ±PCT % \
         (the config's `measure.target_half_width_pct`, 1.0 by default; 0.5 for a precise run)",
    ),
    flag(
        "--seed",
        Some("N"),
        "seed the arms' places and turn orders with N (the config's `measure.seed`) instead of \
         a seed drawn for this run: replays a run whose report.json recorded N",
    ),
    flag(
        "--repeat",
        Some("R"),
        "with `calibrate`: the whole calibration R times, each with a fresh seed, and how often \
         the verdicts agreed and whether the intervals overlapped",
    ),
    flag(
        "--remeasure",
        None,
        "measure again although the measured executables and the measure config are unchanged",
    ),
    flag(
        "--publish",
        None,
        "after the report, write this run's report.md with a line of context (machine, date, \
         commit) to docs/results/<date>-<commit>.md and add its headline row to docs/results/README.md",
    ),
    flag(
        "--profile",
        Some("PATH"),
        "build from this stored profile instead of training: a bundle directory (checked against \
         these sources and toolchain) or an indexed .profdata; skips instrument, train, insight \
         and oracle; the apply check runs as always",
    ),
    flag(
        "--bundle",
        Some("DIR"),
        "with `train` or `merge`: also write the resulting profile and its manifest into DIR",
    ),
    flag(
        "--input",
        Some("DIR[:WEIGHT]"),
        "with `merge`, repeatable: merge these bundles (llvm-profdata's weighted inputs, weight 1 \
         when not given) instead of this pgo-data's raw profiles",
    ),
];

/// Every flag of `cargo xtask pgo`, in the order the help shows them.
pub fn pgo_flags() -> impl Iterator<Item = &'static FlagSpec> {
    COMMON.iter().chain(PGO_ONLY.iter())
}

/// Every flag of `cargo xtask compare`.
pub fn compare_flags() -> impl Iterator<Item = &'static FlagSpec> {
    COMMON.iter()
}

/// What both commands share; a path not given is found from the workspace (`Ctx::open`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommonFlags {
    pub config: Option<PathBuf>,
    /// `--manifest-path`: another workspace's `Cargo.toml`.
    pub manifest_path: Option<PathBuf>,
    pub pgo_data: Option<PathBuf>,
    pub target_dir: Option<PathBuf>,
    /// Queue behind another run holding pgo-data/ instead of stopping.
    pub wait: bool,
}

impl CommonFlags {
    fn set(&mut self, name: &str, value: Option<String>) -> bool {
        let path = || Some(PathBuf::from(value.clone().expect("takes a value")));
        match name {
            "--config" => self.config = path(),
            "--manifest-path" => self.manifest_path = path(),
            "--pgo-data" => self.pgo_data = path(),
            "--target-dir" => self.target_dir = path(),
            "--wait" => self.wait = true,
            _ => return false,
        }
        true
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct PgoFlags {
    pub common: CommonFlags,
    /// One stage alone, or `None` for all of them.
    pub stage: Option<Stage>,
    /// Run the gate after the report.
    pub check: bool,
    /// A stored report.json to check for regressions against (implies `check`).
    pub baseline: Option<PathBuf>,
    /// Merge the good raw profiles when some are corrupt, and say which were skipped.
    pub skip_bad_profiles: bool,
    /// Optimise with a stale profile instead of retraining; the report shows the mismatches.
    pub allow_stale: bool,
    /// `cargo xtask pgo calibrate`: the sensitivity check instead of the pipeline.
    pub calibrate: bool,
    /// `cargo xtask pgo tune`: the training's weights chosen on the validation workloads.
    pub tune: bool,
    /// `--force [STAGE]`: from this stage on (`doctor`: all), run although up to date.
    pub force: Option<Stage>,
    /// `--remeasure`: measure although the measurement's inputs are unchanged.
    pub remeasure: bool,
    /// `--against REV`: that revision's builds measured beside this tree's.
    pub against: Option<String>,
    /// `--half-width PCT`: the stopping rule's target, over the config's.
    pub half_width: Option<f64>,
    /// `--seed N`: the run's seed, over the config's (else one drawn per run).
    pub seed: Option<u64>,
    /// `--repeat R` (calibrate): the calibration R times with fresh seeds.
    pub repeat: Option<u32>,
    /// `--publish`: keep this run's report.md in docs/results/, with a row in its index.
    pub publish: bool,
    /// `--profile PATH`: a stored profile or bundle instead of training.
    pub profile: Option<PathBuf>,
    /// `--bundle DIR` (train, merge): also write the profile as a bundle into DIR.
    pub bundle: Option<PathBuf>,
    /// `--input DIR[:WEIGHT]` (merge), in order.
    pub inputs: Vec<String>,
    /// `cargo xtask pgo export DIR`.
    pub export: Option<PathBuf>,
    /// `cargo xtask pgo ab OLD NEW`: two executables as arms of the same lockstep sessions.
    pub ab: Option<(PathBuf, PathBuf)>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompareFlags {
    pub common: CommonFlags,
}

/// What the command line asks for.
#[derive(Debug, PartialEq)]
pub enum Command {
    Pgo(Box<PgoFlags>),
    Compare(CompareFlags),
    /// `--help` (of a command, or of xtask): print this and exit 0.
    Help(String),
}

impl Command {
    /// The flags every command shares (none for `--help`).
    pub fn common_mut(&mut self) -> Option<&mut CommonFlags> {
        match self {
            Command::Pgo(flags) => Some(&mut flags.common),
            Command::Compare(flags) => Some(&mut flags.common),
            Command::Help(_) => None,
        }
    }
}

/// A command line that does not parse: exit 2 with this line and the usage.
#[derive(Debug, PartialEq)]
pub struct UsageError {
    pub message: String,
    pub usage: String,
}

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "error: {}\n\n{}", self.message, self.usage)
    }
}

pub fn parse(argv: impl IntoIterator<Item = String>) -> Result<Command, UsageError> {
    let mut argv = argv.into_iter();
    let usage_error = |message: String, usage: String| Err(UsageError { message, usage });
    match argv.next().as_deref() {
        Some("pgo") => {
            let mut flags = PgoFlags::default();
            let mut stage = None;
            let mut calibrate = false;
            let mut tune = false;
            // `export` takes the next positional word as its directory; `ab` the next two.
            let mut export: Option<Option<PathBuf>> = None;
            let mut ab: Option<Vec<PathBuf>> = None;
            let help = parse_command(argv, "pgo", &mut |arg| {
                match arg {
                Arg::Flag(name, value) => {
                    if !flags.common.set(name, value.clone()) {
                        match name {
                            "--check" => flags.check = true,
                            "--baseline" => {
                                flags.baseline = value.map(PathBuf::from);
                                flags.check = true;
                            }
                            "--skip-bad-profiles" => flags.skip_bad_profiles = true,
                            "--allow-stale" => flags.allow_stale = true,
                            "--force" => {
                                flags.force = Some(match value.as_deref() {
                                    None => Stage::Doctor,
                                    Some(s) => Stage::parse(s).expect("only a stage is taken"),
                                })
                            }
                            "--remeasure" => flags.remeasure = true,
                            "--against" => flags.against = value,
                            "--half-width" => {
                                let v = value.unwrap_or_default();
                                match v.parse::<f64>() {
                                    Ok(pct) if pct >= 0.0 && pct.is_finite() => {
                                        flags.half_width = Some(pct)
                                    }
                                    _ => {
                                        return Err(format!(
                                            "`--half-width` takes a half-width in % (1.0, 0.5), not `{v}`"
                                        ));
                                    }
                                }
                            }
                            "--seed" => {
                                let v = value.unwrap_or_default();
                                flags.seed = Some(v.parse::<u64>().map_err(|_| {
                                    format!("`--seed` takes a whole number (a report.json's `seed`), not `{v}`")
                                })?);
                            }
                            "--repeat" => {
                                let v = value.unwrap_or_default();
                                match v.parse::<u32>() {
                                    Ok(r) if r >= 1 => flags.repeat = Some(r),
                                    _ => {
                                        return Err(format!(
                                            "`--repeat` takes a count of at least 1, not `{v}`"
                                        ));
                                    }
                                }
                            }
                            "--publish" => flags.publish = true,
                            "--profile" => flags.profile = value.map(PathBuf::from),
                            "--bundle" => flags.bundle = value.map(PathBuf::from),
                            "--input" => flags.inputs.extend(value),
                            other => unreachable!("{other} is in the table but not handled"),
                        }
                    }
                    Ok(())
                }
                Arg::Positional(word) => match (Stage::parse(&word), stage) {
                    _ if export == Some(None) => {
                        export = Some(Some(PathBuf::from(word)));
                        Ok(())
                    }
                    _ if ab.as_ref().is_some_and(|exes| exes.len() < 2) => {
                        ab.as_mut().expect("checked").push(PathBuf::from(word));
                        Ok(())
                    }
                    _ if stage.is_some()
                        || calibrate
                        || tune
                        || export.is_some()
                        || ab.is_some() =>
                    {
                        Err(
                            "give at most one stage (or `calibrate`, `tune`, `export DIR`, `ab OLD NEW`)"
                                .to_string(),
                        )
                    }
                    _ if word == "export" => {
                        export = Some(None);
                        Ok(())
                    }
                    _ if word == "ab" => {
                        ab = Some(Vec::new());
                        Ok(())
                    }
                    _ if word == "calibrate" => {
                        calibrate = true;
                        Ok(())
                    }
                    _ if word == "tune" => {
                        tune = true;
                        Ok(())
                    }
                    (Some(s), _) => {
                        stage = Some(s);
                        Ok(())
                    }
                    (None, _) => Err(format!("unknown stage `{word}`")),
                },
            }
            })?;
            flags.stage = stage;
            flags.calibrate = calibrate;
            flags.tune = tune;
            if help.is_none() {
                flags.export = match export {
                    Some(None) => {
                        return Err(UsageError {
                            message: "`export` needs a directory (cargo xtask pgo export DIR)"
                                .into(),
                            usage: command_help("pgo"),
                        });
                    }
                    Some(dir) => dir,
                    None => None,
                };
                flags.ab = match ab.as_deref() {
                    Some([old, new]) => Some((old.clone(), new.clone())),
                    Some(_) => {
                        return Err(UsageError {
                            message: "`ab` needs two executables (cargo xtask pgo ab OLD NEW)"
                                .into(),
                            usage: command_help("pgo"),
                        });
                    }
                    None => None,
                };
                let misplaced = |flag: &str, wanted: &str| UsageError {
                    message: format!("`{flag}` is for {wanted}"),
                    usage: command_help("pgo"),
                };
                if flags.bundle.is_some()
                    && !matches!(flags.stage, Some(Stage::Train | Stage::Merge))
                {
                    return Err(misplaced("--bundle", "`cargo xtask pgo train` or `merge`"));
                }
                if flags.repeat.is_some() && !flags.calibrate {
                    return Err(misplaced("--repeat", "`cargo xtask pgo calibrate`"));
                }
                if !flags.inputs.is_empty() && flags.stage != Some(Stage::Merge) {
                    return Err(misplaced("--input", "`cargo xtask pgo merge`"));
                }
                if flags.profile.is_some()
                    && (flags.stage.is_some() || flags.export.is_some() || flags.tune)
                {
                    return Err(misplaced(
                        "--profile",
                        "the whole pipeline (`cargo xtask pgo --profile PATH`)",
                    ));
                }
                if flags.against.is_some()
                    && (flags.stage.is_some()
                        || flags.export.is_some()
                        || flags.ab.is_some()
                        || flags.calibrate
                        || flags.tune)
                {
                    return Err(misplaced(
                        "--against",
                        "the whole pipeline (`cargo xtask pgo --against REV`)",
                    ));
                }
            }
            Ok(help.map_or(Command::Pgo(Box::new(flags)), Command::Help))
        }
        Some("compare") => {
            let mut flags = CompareFlags::default();
            let help = parse_command(argv, "compare", &mut |arg| match arg {
                Arg::Flag(name, value) => {
                    let known = flags.common.set(name, value);
                    assert!(known, "{name} is in the table but not handled");
                    Ok(())
                }
                Arg::Positional(word) => Err(format!(
                    "`cargo xtask compare` takes no positional argument (got `{word}`)"
                )),
            })?;
            Ok(help.map_or(Command::Compare(flags), Command::Help))
        }
        Some("help" | "--help" | "-h") => Ok(Command::Help(xtask_help())),
        None => usage_error("no command given".into(), xtask_help()),
        Some(other) => usage_error(format!("unknown command `{other}`"), xtask_help()),
    }
}

enum Arg<'a> {
    Flag(&'a str, Option<String>),
    Positional(String),
}

/// Walks one command's arguments against its flag table. `Ok(Some(help))` when `--help` was
/// asked for.
fn parse_command(
    argv: impl Iterator<Item = String>,
    command: &str,
    handle: &mut dyn FnMut(Arg) -> Result<(), String>,
) -> Result<Option<String>, UsageError> {
    let table: Vec<&FlagSpec> = match command {
        "pgo" => pgo_flags().collect(),
        _ => compare_flags().collect(),
    };
    let usage = || command_help(command);
    let err = |message: String| UsageError {
        message,
        usage: usage(),
    };
    let mut argv = argv.peekable();
    while let Some(arg) = argv.next() {
        if arg == "--help" || arg == "-h" {
            return Ok(Some(usage()));
        }
        if arg.starts_with('-') {
            let Some(spec) = table.iter().find(|f| f.name == arg) else {
                return Err(err(format!(
                    "unknown flag `{arg}` for `cargo xtask {command}`"
                )));
            };
            let value =
                match spec.value {
                    // `[STAGE]`: optional, taken only when the next word names a stage.
                    Some(placeholder) if placeholder.starts_with('[') => {
                        argv.next_if(|next| Stage::parse(next).is_some())
                    }
                    Some(placeholder) => Some(argv.next().ok_or_else(|| {
                        err(format!("`{arg}` needs a value ({arg} {placeholder})"))
                    })?),
                    None => None,
                };
            handle(Arg::Flag(spec.name, value)).map_err(err)?;
        } else {
            handle(Arg::Positional(arg)).map_err(err)?;
        }
    }
    Ok(None)
}

/// `cargo xtask --help`.
pub fn xtask_help() -> String {
    "\
usage: cargo xtask <COMMAND> [OPTIONS]

commands:
  pgo       the PGO pipeline: instrument, train, merge, optimise, measure, report
  compare   the mailbox workload beside bare tokio, C++ (asio, condition variables) and Go
  help      this text

`cargo xtask <COMMAND> --help` shows a command's options."
        .to_string()
}

/// `cargo xtask pgo --help` / `cargo xtask compare --help`, made from the flag tables.
pub fn command_help(command: &str) -> String {
    let mut out = String::new();
    let flags: Vec<&FlagSpec> = if command == "pgo" {
        out.push_str(
            "usage: cargo xtask pgo [STAGE] [OPTIONS]   (installed: cargo mty pgo [STAGE] [OPTIONS])\n\n\
             Builds the config's binary (mty-bench) instrumented, trains it, merges the profiles with\n\
             a version-matched llvm-profdata, rebuilds it with the profile (fat LTO), builds the non-PGO\n\
             baselines, measures them interleaved and writes pgo-data/report.json and its renderings.\n\n\
             STAGE runs one stage alone, reading the earlier stages' outputs from pgo-data/stages/:\n",
        );
        for stage in Stage::ALL {
            let _ = writeln!(out, "  {:<11} {}", stage.name(), stage.help());
        }
        out.push_str(
            "Without STAGE: all of them, in this order.\n\n\
             cargo xtask pgo calibrate: release against release with a known cost injected into\n\
             every timed round trip (config section [calibrate]): what it detects at each size, and\n\
             that nothing is detected when nothing is injected; --repeat R replicates it.\n\n\
             cargo xtask pgo tune: the training workloads' weights chosen on the validation\n\
             workloads (config section [validate]), never on the measured ones; kept in\n\
             pgo-data/tune.json, which later runs merge with.\n\n\
             cargo xtask pgo ab OLD NEW: two executables of the binary (e.g. two commits' release\n\
             builds) as arms of the same lockstep sessions, with OLD's A/A arm: NEW's change\n\
             against OLD per measured workload, with its 95 % interval (pgo-data/ab.json).\n",
        );
        pgo_flags().collect()
    } else {
        out.push_str(
            "usage: cargo xtask compare [OPTIONS]\n\n\
             The mailbox workload on Mighty's mailbox (Block and Fail), bare tokio mpsc, a C++ asio\n\
             coroutine channel, a C++ condition-variable channel (cross-thread) and a Go buffered\n\
             channel, in one table (config section [compare]), on a release build; `cargo xtask pgo`\n\
             adds the LTO and PGO rows to its report. A missing g++ (or $CXX), asio header or Go\n\
             toolchain (or $GO) skips its row with the package to install.\n",
        );
        compare_flags().collect()
    };
    out.push_str("\noptions:\n");
    for f in flags {
        let left = match f.value {
            Some(v) => format!("{} {v}", f.name),
            None => f.name.to_string(),
        };
        let _ = writeln!(out, "  {left:<20} {}", wrap(f.help, 23, 92));
    }
    let _ = write!(out, "  {:<20} this text", "-h, --help");
    out
}

/// `text` in lines of at most `width` columns, the continuation lines indented by `indent`.
fn wrap(text: &str, indent: usize, width: usize) -> String {
    let mut out = String::new();
    let mut column = indent;
    for word in text.split_whitespace() {
        if column > indent && column + 1 + word.len() > width {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            column = indent;
        } else if column > indent {
            out.push(' ');
            column += 1;
        }
        out.push_str(word);
        column += word.len();
    }
    out
}

#[cfg(test)]
#[path = "flags_tests.rs"]
mod tests;
