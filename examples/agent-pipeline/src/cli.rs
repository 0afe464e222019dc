//! The command line, read by clap (derive).
//!
//! clap reads the words and each value (through a parser of ours, which says what is wrong
//! with a bad one); [`parse`] checks the flags that depend on each other and words what clap
//! refused. The messages are this program's own, not clap's: the tests, and whoever reads
//! the tail of its stderr, match them. No `--help`: any mistake prints [`USAGE`].

use std::path::PathBuf;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Parser, Subcommand};

use crate::generator::Mix;

pub const USAGE: &str = "\
usage: agent-pipeline run [--input FILE] [--repeat N]
       agent-pipeline run [--input FILE] --lockstep BATCH [--warmup N]
       agent-pipeline gen --seed S --records N --mix train|heldout

run: pushes every record of FILE (JSON lines; stdin without --input) through the pipeline,
     --repeat times (1 by default), and prints the outcome as one JSON line, with
     `elapsed_ns`: the time from starting the agents to the last result, not reading input.
     With --lockstep BATCH: sets the agents up, streams --warmup records (1000 by default)
     as a whole run does,
     then serves the lockstep protocol on stdin and stdout, each batch BATCH records taken in
     turn from FILE, each timed from its send until its effect reaches the sink.
gen: writes N deterministic records of the mix to stdout.";

/// What to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Run {
        /// `None`: stdin.
        input: Option<PathBuf>,
        how: Run,
    },
    Gen {
        seed: u64,
        records: u64,
        mix: Mix,
    },
}

/// How `run` pushes the records.
#[derive(Debug, PartialEq, Eq)]
pub enum Run {
    /// Every record, `repeat` times.
    Whole { repeat: u64 },
    /// The lockstep protocol.
    Lockstep { batch: u64, warmup: u64 },
}

/// The words as clap reads them, before [`parse`] makes a [`Command`] of them.
#[derive(Parser)]
#[command(
    name = "agent-pipeline",
    disable_help_flag = true,
    disable_help_subcommand = true,
    disable_version_flag = true
)]
struct Cli {
    /// `None`: no arguments at all.
    #[command(subcommand)]
    command: Option<Verb>,
}

/// Each flag takes the next word as its value whatever it starts with (`allow_hyphen_values`):
/// `--repeat -1` is a bad number, not a missing one.
#[derive(Subcommand)]
enum Verb {
    /// Pushes the records through the pipeline.
    Run {
        /// The records (JSON lines); stdin without it.
        #[arg(long, allow_hyphen_values = true)]
        input: Option<PathBuf>,
        /// Every record this many times (1 without it); whole runs only.
        #[arg(long, allow_hyphen_values = true, value_parser = at_least_one("--repeat"))]
        repeat: Option<u64>,
        /// Serve the lockstep protocol, each batch this many records.
        #[arg(long, allow_hyphen_values = true, value_parser = at_least_one("--lockstep"))]
        lockstep: Option<u64>,
        /// Records streamed before the lockstep protocol starts (1000 without it).
        #[arg(long, allow_hyphen_values = true, value_parser = number("--warmup"))]
        warmup: Option<u64>,
    },
    /// Writes deterministic records to stdout.
    Gen {
        #[arg(long, allow_hyphen_values = true, value_parser = number("--seed"))]
        seed: u64,
        #[arg(long, allow_hyphen_values = true, value_parser = number("--records"))]
        records: u64,
        #[arg(long, allow_hyphen_values = true, value_parser = mix)]
        mix: Mix,
    },
}

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let args: Vec<String> = args.into_iter().collect();
    let words = std::iter::once("agent-pipeline").chain(args.iter().map(String::as_str));
    let cli = Cli::try_parse_from(words).map_err(|err| refusal(&err, args.first()))?;
    match cli.command {
        None => Err("no command: `run` or `gen`".into()),
        Some(Verb::Gen { seed, records, mix }) => Ok(Command::Gen { seed, records, mix }),
        Some(Verb::Run {
            input,
            repeat,
            lockstep,
            warmup,
        }) => {
            let how = match (lockstep, repeat, warmup) {
                (Some(_), Some(_), _) => {
                    return Err("`--repeat` is for whole runs; lockstep cycles through the \
                                input for as long as it is asked"
                        .into());
                }
                (None, _, Some(_)) => return Err("`--warmup` goes with `--lockstep`".into()),
                (Some(batch), None, warmup) => Run::Lockstep {
                    batch,
                    warmup: warmup.unwrap_or(1000),
                },
                (None, repeat, None) => Run::Whole {
                    repeat: repeat.unwrap_or(1),
                },
            };
            Ok(Command::Run { input, how })
        }
    }
}

/// What clap refused, in the words of this program: a value's own parser says what is wrong
/// with it; the rest names the flag (the command, for one that does not exist).
fn refusal(err: &clap::Error, command: Option<&String>) -> String {
    let command = command.map_or("", String::as_str);
    if !matches!(command, "run" | "gen") {
        return format!("unknown command `{command}`: `run` or `gen`");
    }
    // The flag clap names (`--repeat <REPEAT>`, or the first of those missing), alone.
    let flag = match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.as_str(),
        Some(ContextValue::Strings(args)) => args.first().map_or("", String::as_str),
        _ => "",
    };
    let flag = flag.split(' ').next().unwrap_or_default();
    match err.kind() {
        ErrorKind::ValueValidation => match std::error::Error::source(err) {
            Some(why) => why.to_string(),
            None => err.to_string(),
        },
        ErrorKind::InvalidValue => format!("`{flag}` needs a value"),
        ErrorKind::ArgumentConflict => format!("`{flag}` given twice"),
        ErrorKind::MissingRequiredArgument => format!("`{command}` needs `{flag}`"),
        ErrorKind::UnknownArgument => format!("`{command}` takes no `{flag}`"),
        _ => err.to_string(),
    }
}

/// `flag`'s value as a whole number, or why not.
fn number(flag: &'static str) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    move |value| {
        value
            .parse()
            .map_err(|_| format!("`{flag}` takes a whole number, not `{value}`"))
    }
}

/// `flag`'s value as a whole number of at least 1, or why not.
fn at_least_one(flag: &'static str) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    move |value| match number(flag)(value)? {
        0 => Err(format!("`{flag}` must be at least 1")),
        n => Ok(n),
    }
}

fn mix(value: &str) -> Result<Mix, String> {
    Mix::parse(value).ok_or_else(|| format!("`--mix` is `train` or `heldout`, not `{value}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(line: &str) -> Result<Command, String> {
        parse(line.split_whitespace().map(String::from))
    }

    #[test]
    fn parses_runs_and_gen() {
        assert_eq!(
            parsed("run").unwrap(),
            Command::Run {
                input: None,
                how: Run::Whole { repeat: 1 }
            }
        );
        assert_eq!(
            parsed("run --repeat 20 --input in.jsonl").unwrap(),
            Command::Run {
                input: Some("in.jsonl".into()),
                how: Run::Whole { repeat: 20 }
            }
        );
        assert_eq!(
            parsed("run --input in.jsonl --lockstep 500").unwrap(),
            Command::Run {
                input: Some("in.jsonl".into()),
                how: Run::Lockstep {
                    batch: 500,
                    warmup: 1000
                }
            }
        );
        assert_eq!(
            parsed("run --lockstep 5 --warmup 0").unwrap(),
            Command::Run {
                input: None,
                how: Run::Lockstep {
                    batch: 5,
                    warmup: 0
                }
            }
        );
        assert_eq!(
            parsed("gen --mix heldout --records 10 --seed 3").unwrap(),
            Command::Gen {
                seed: 3,
                records: 10,
                mix: Mix::Heldout
            }
        );
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        for (line, error) in [
            ("", "no command: `run` or `gen`"),
            ("train", "unknown command `train`: `run` or `gen`"),
            ("train --seed 1", "unknown command `train`: `run` or `gen`"),
            ("run --seed 1", "`run` takes no `--seed`"),
            ("gen --input x", "`gen` takes no `--input`"),
            ("run --input", "`--input` needs a value"),
            ("run --repeat 0", "`--repeat` must be at least 1"),
            (
                "run --repeat many",
                "`--repeat` takes a whole number, not `many`",
            ),
            ("run --lockstep 0", "`--lockstep` must be at least 1"),
            ("run --repeat 1 --repeat 2", "`--repeat` given twice"),
            ("run --warmup 5", "`--warmup` goes with `--lockstep`"),
            ("gen --seed 1 --records 5", "`gen` needs `--mix`"),
            ("gen --mix train --records 5", "`gen` needs `--seed`"),
            (
                "gen --seed 1 --records 5 --mix test",
                "`--mix` is `train` or `heldout`, not `test`",
            ),
        ] {
            assert_eq!(parsed(line).unwrap_err(), error, "{line:?}");
        }
        assert!(
            parsed("run --lockstep 5 --repeat 2")
                .unwrap_err()
                .starts_with("`--repeat` is for whole runs")
        );
    }
}
