//! `mty-bench`: the one workload executable the PGO pipeline trains and measures.
//!
//! One executable on purpose: generic code (tokio's channel, the mailbox's methods) is
//! compiled into the crate that instantiates it, so a profile trained by another binary
//! would miss the measured hot path. Training and measurement differ by subcommand and
//! inputs, not by executable.
//!
//! ```text
//! mty-bench <workload> [--messages N] [--warmup N] [--policy block|fail] [--payload-bytes N]
//! ```
//! Each run prints one JSON line on stdout.
//!
//! The modules in layers, each importing only those below it: `shared` (capacity, policy,
//! the training phases, the mailbox constructor), `args` (the command line), `report` (what
//! the latency workloads print), the workloads `latency` and `contended`, then `train`, the
//! training mix, which runs them.

mod args;
mod contended;
mod latency;
mod report;
mod shared;
mod train;

use std::process::ExitCode;

use args::{Args, Workload};

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(err) => {
            // The error last: whoever shows only the tail of stderr (xtask does) shows it.
            eprintln!("{}\n\nmty-bench: {err}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    let line = match args.workload {
        Workload::AgentSendLatency => serde_json::to_string(&latency::mailbox(&args)),
        Workload::TokioMpscSendLatency => serde_json::to_string(&latency::tokio_mpsc(&args)),
        Workload::AgentSendContended => serde_json::to_string(&contended::run(&args)),
        Workload::Train => serde_json::to_string(&train::run(&args)),
    };
    println!(
        "{}",
        line.expect("a report of numbers and strings serializes")
    );
    ExitCode::SUCCESS
}
