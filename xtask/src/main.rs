//! xtask: the project's automation, run as `cargo xtask <command>` (alias in
//! `.cargo/config.toml`). Parses the command line (`flags.rs`), then hands each command to
//! its own module.

mod analysis;
mod build;
mod callgrind;
mod cargo;
mod compare;
mod config;
mod exec;
#[cfg(test)]
mod fixtures;
mod flags;
mod fsx;
mod insight_data;
mod instructions;
mod llvm_bolt;
mod lockstep;
mod measure;
mod outputs;
mod pipeline;
mod relink;
mod report;
mod rustflags;
mod stage;
mod stats;
#[cfg(test)]
mod testutil;
#[cfg(test)]
mod tidy;
mod toolchain;
mod versus;
mod warnings;
mod workload;

use std::process::ExitCode;

fn main() -> ExitCode {
    let command = match flags::parse(std::env::args().skip(1)) {
        Ok(command) => command,
        Err(usage) => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    };
    let result = match command {
        flags::Command::Help(text) => {
            println!("{text}");
            return ExitCode::SUCCESS;
        }
        flags::Command::Pgo(flags) => pipeline::run(*flags),
        flags::Command::Compare(flags) => pipeline::compare_command::run(flags),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
