//! The command line.

use std::path::PathBuf;

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

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut args = args.into_iter();
    let command = args.next().ok_or("no command: `run` or `gen`")?;
    let mut flags = Flags::default();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("`{flag}` needs a value"));
        let slot = match (command.as_str(), flag.as_str()) {
            ("run", "--input") => &mut flags.input,
            ("run", "--repeat") => &mut flags.repeat,
            ("run", "--lockstep") => &mut flags.lockstep,
            ("run", "--warmup") => &mut flags.warmup,
            ("gen", "--seed") => &mut flags.seed,
            ("gen", "--records") => &mut flags.records,
            ("gen", "--mix") => &mut flags.mix,
            ("run" | "gen", _) => return Err(format!("`{command}` takes no `{flag}`")),
            _ => return Err(format!("unknown command `{command}`: `run` or `gen`")),
        };
        if slot.replace(value()?).is_some() {
            return Err(format!("`{flag}` given twice"));
        }
    }
    match command.as_str() {
        "run" => {
            let input = flags.input.map(PathBuf::from);
            let how = match (flags.lockstep, flags.repeat, flags.warmup) {
                (Some(_), Some(_), _) => {
                    return Err("`--repeat` is for whole runs; lockstep cycles through the \
                                input for as long as it is asked"
                        .into());
                }
                (None, _, Some(_)) => return Err("`--warmup` goes with `--lockstep`".into()),
                (Some(batch), None, warmup) => Run::Lockstep {
                    batch: at_least_one("--lockstep", &batch)?,
                    warmup: warmup.map_or(Ok(1000), |w| number("--warmup", &w))?,
                },
                (None, repeat, None) => Run::Whole {
                    repeat: repeat.map_or(Ok(1), |r| at_least_one("--repeat", &r))?,
                },
            };
            Ok(Command::Run { input, how })
        }
        "gen" => {
            let required = |value: Option<String>, flag: &str| {
                value.ok_or_else(|| format!("`gen` needs `{flag}`"))
            };
            let seed = number("--seed", &required(flags.seed, "--seed")?)?;
            let records = number("--records", &required(flags.records, "--records")?)?;
            let mix = required(flags.mix, "--mix")?;
            let mix = Mix::parse(&mix)
                .ok_or_else(|| format!("`--mix` is `train` or `heldout`, not `{mix}`"))?;
            Ok(Command::Gen { seed, records, mix })
        }
        _ => Err(format!("unknown command `{command}`: `run` or `gen`")),
    }
}

/// Each flag's value as given, at most once.
#[derive(Default)]
struct Flags {
    input: Option<String>,
    repeat: Option<String>,
    lockstep: Option<String>,
    warmup: Option<String>,
    seed: Option<String>,
    records: Option<String>,
    mix: Option<String>,
}

fn number(flag: &str, value: &str) -> Result<u64, String> {
    value
        .parse()
        .map_err(|_| format!("`{flag}` takes a whole number, not `{value}`"))
}

fn at_least_one(flag: &str, value: &str) -> Result<u64, String> {
    match number(flag, value)? {
        0 => Err(format!("`{flag}` must be at least 1")),
        n => Ok(n),
    }
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
