//! xtask: the project's automation, run as `cargo xtask <command>` (alias in
//! `.cargo/config.toml`). Parses flags, then hands each command to its own module.

mod analysis;
mod cargo;
mod compare;
mod config;
mod exec;
mod fsx;
mod gate;
mod instructions;
mod markdown;
mod measure;
mod pgo;
mod plot;
mod report;
mod stats;
mod toolchain;
mod warnings;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};

const USAGE: &str = "\
usage: cargo xtask pgo [STAGE] [--config FILE] [--pgo-data DIR] [--target-dir DIR]
                      [--check] [--baseline FILE]
       cargo xtask compare [--config FILE] [--pgo-data DIR] [--target-dir DIR]

Builds mty-bench instrumented, trains it, merges the profiles with a version-matched
llvm-profdata, rebuilds it with the profile (fat LTO), builds the non-PGO baselines,
measures them interleaved and writes pgo-data/report.json.

STAGE runs one stage alone, reading the earlier stages' outputs from pgo-data/:
  doctor      rustc and a version-matched llvm-profdata
  instrument  the -Cprofile-generate build (cargo profile release-pgo)
  train       the training workloads; raw profiles into pgo-data/raw/
  merge       raw profiles -> pgo-data/merged-<hash>.profdata
  optimize    the -Cprofile-use build, and the check that the profile applied
  baselines   release (no LTO, no PGO) and release-pgo without a profile (fat LTO only)
  measure     the measured workloads on every build, interleaved round by round
  report      statistics, the table, report.json, report.md, latency.svg,
              benchmark.json, history.jsonl
Without STAGE: all of them, in this order.

compare: the mailbox workload on Mighty's mailbox (Block and Fail), bare tokio mpsc, a C++
asio coroutine channel, a C++ condition-variable channel (cross-thread) and a Go buffered
channel, in one table (config section [compare]), on a release build; `cargo xtask pgo`
adds the LTO and PGO rows to its report. A missing g++ (or $CXX), asio header or Go
toolchain (or $GO) skips its row with the package to install.

options:
  --config FILE     pipeline config (default: profiles/default.toml; profiles/quick.toml is
                    the seconds-long one)
  --pgo-data DIR    where artifacts go (default: <workspace>/pgo-data)
  --target-dir DIR  root of the per-variant cargo target directories
                    (default: <workspace>/target/pgo)
  --check           gate: fail unless PGO is significantly faster than release by the
                    config's `check.min_pgo_gain_pct` on `check.workloads`
  --baseline FILE   gate too, against this earlier report.json: fail when a build's paired
                    change against release grew beyond the noise threshold, or its
                    instructions/message by more than 1 %";

fn main() -> ExitCode {
    let mut argv = std::env::args().skip(1);
    let result = match argv.next().as_deref() {
        Some("pgo") => pgo::Flags::parse(argv).and_then(pgo::run),
        Some("compare") => pgo::Flags::parse(argv).and_then(pgo::compare_command),
        Some("help" | "--help" | "-h") | None => {
            println!("{USAGE}");
            return if std::env::args().len() > 1 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
        Some(other) => Err(anyhow::anyhow!("unknown command `{other}`\n\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Takes the value of `flag` from the argument list.
fn flag_value(flag: &str, argv: &mut impl Iterator<Item = String>) -> anyhow::Result<PathBuf> {
    argv.next()
        .map(PathBuf::from)
        .with_context(|| format!("`{flag}` needs a value"))
}

fn unknown_flag<T>(flag: &str) -> anyhow::Result<T> {
    bail!("unknown flag `{flag}`\n\n{USAGE}")
}
