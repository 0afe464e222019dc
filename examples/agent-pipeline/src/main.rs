//! `agent-pipeline`: an example program on Mighty. JSON-lines records go through a pipeline of
//! agents (parse → normalise → route by kind → an aggregator per family of kinds → sink),
//! each stage's mailbox bounded in bytes; the outcome (counts, sums, a checksum) is printed as
//! one JSON line, the same for the same input.
//!
//! It is also a program `cargo xtask pgo` can train and measure: the same binary runs whole
//! (`run --input FILE --repeat N`, what training runs) and serves the lockstep protocol
//! (`run --input FILE --lockstep BATCH`, through `mty-lockstep`), the per-record work being
//! the same agents and the same driver function in both. See [`cli::USAGE`].

mod aggregate;
mod cli;
mod generator;
mod pipeline;
mod record;

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::process::ExitCode;
use std::time::Instant;

use mty_lockstep::Lockstep;
use serde::Serialize;

use cli::{Command, Run};
use pipeline::{Config, Feed, Pipeline};

fn main() -> ExitCode {
    let command = match cli::parse(std::env::args().skip(1)) {
        Ok(command) => command,
        Err(err) => {
            // The error last: whoever shows only the tail of stderr shows it.
            eprintln!("{}\n\nagent-pipeline: {err}", cli::USAGE);
            return ExitCode::from(2);
        }
    };
    match execute(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("agent-pipeline: {err}");
            ExitCode::FAILURE
        }
    }
}

/// A whole run's line: the outcome and how long the pipeline took.
#[derive(Serialize)]
struct RunReport {
    #[serde(flatten)]
    outcome: aggregate::Outcome,
    elapsed_ns: u64,
}

fn execute(command: Command) -> Result<(), String> {
    match command {
        Command::Gen { seed, records, mix } => {
            let mut out = BufWriter::new(io::stdout().lock());
            generator::generate(seed, records, mix, &mut out)
                .map_err(|err| format!("writing records: {err}"))
        }
        Command::Run { input, how } => {
            let feed = match &input {
                Some(path) => File::open(path)
                    .and_then(|file| Feed::read(BufReader::new(file)))
                    .map_err(|err| format!("reading {}: {err}", path.display())),
                None => {
                    Feed::read(io::stdin().lock()).map_err(|err| format!("reading stdin: {err}"))
                }
            }?;
            let line = match how {
                Run::Whole { repeat } => serde_json::to_string(&whole_run(feed, repeat)),
                Run::Lockstep { batch, warmup } => {
                    serde_json::to_string(&lockstep(feed, batch, warmup)?.summary())
                }
            };
            let line = line.expect("numbers and strings serialize");
            writeln!(io::stdout(), "{line}").map_err(|err| format!("writing the result: {err}"))
        }
    }
}

/// Every record of `feed`, `repeat` times.
fn whole_run(mut feed: Feed, repeat: u64) -> RunReport {
    let started = Instant::now();
    let mut pipeline = Pipeline::start(Config::default());
    let records = feed.len() as u64 * repeat;
    pipeline.stream(&mut feed, records);
    let outcome = pipeline.finish();
    RunReport {
        outcome,
        elapsed_ns: started.elapsed().as_nanos() as u64,
    }
}

/// The lockstep protocol over `feed`'s records, one at a time, after `warmup` of them.
///
/// The warm-up streams, as a whole run does, so that each mailbox is on the lane a whole run
/// leaves it on: a send that had to wait (for bytes, mostly) moved its mailbox from the
/// single-sender ring to the shared lane for good. Warmed up one record at a time, no send
/// would ever wait, and the batches would run the ring's park-and-wake path, which whole
/// runs (what PGO trains on) do not.
fn lockstep(mut feed: Feed, batch: u64, warmup: u64) -> Result<mty_lockstep::Served, String> {
    if feed.len() == 0 {
        return Err("the input has no records to push".into());
    }
    let mut pipeline = Pipeline::start(Config::default());
    pipeline.stream(&mut feed, warmup);
    Ok(Lockstep::new(batch).serve(|n, times| pipeline.one_by_one(&mut feed, n, times)))
}
