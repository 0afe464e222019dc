//! xtask: the project's automation, run as `cargo xtask <command>` (alias in
//! `.cargo/config.toml`). Parses the command line (`flags.rs`), then hands each command to
//! its own module.

mod analysis;
mod base;
mod config;
mod flags;
mod measure;
mod pipeline;
mod report;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tidy;
mod toolchain;

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut argv = std::env::args().skip(1).peekable();
    if argv.peek().map(String::as_str) == Some(measure::process_arm::SUBCOMMAND) {
        argv.next();
        return measure::process_arm::main(argv);
    }
    if argv.peek().map(String::as_str) == Some(measure::service_arm::SUBCOMMAND) {
        argv.next();
        return measure::service_arm::main(argv);
    }
    // Installed (`cargo install --path xtask`), this executable is the cargo subcommand
    // `cargo mty`: cargo runs it as `cargo-mty mty ARGS`, and it works on the workspace
    // around the current directory.
    let subcommand = argv.peek().map(String::as_str) == Some("mty");
    if subcommand {
        argv.next();
    }
    let bin_name = if subcommand {
        "cargo mty"
    } else {
        "cargo xtask"
    };
    let mut command = match flags::parse(argv, bin_name) {
        Ok(command) => command,
        Err(err) => {
            // Help and version exit 0, usage errors 2.
            let _ = err.print();
            return ExitCode::from(err.exit_code().clamp(0, 255) as u8);
        }
    };
    let common = command.common_mut();
    if subcommand && common.manifest_path.is_none() {
        match toolchain::cargo::manifest_here() {
            Ok(manifest) => common.manifest_path = Some(manifest),
            Err(err) => {
                eprintln!("error: {err:#}");
                return ExitCode::FAILURE;
            }
        }
    }
    let result = match command {
        flags::Command::Pgo(args) => pipeline::pgo(args),
        flags::Command::Calibrate(args) => pipeline::calibrate(args),
        flags::Command::Tune(args) => pipeline::tune(args),
        flags::Command::Ab(args) => pipeline::ab(args),
        flags::Command::Export(args) => pipeline::export(args),
        flags::Command::Compare(args) => pipeline::compare::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
