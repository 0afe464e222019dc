//! The lockstep protocol (`mty-lockstep`): how `cargo xtask pgo` measures a program, batch by
//! batch, against other builds of it.
//!
//! Why batches: a machine's speed can change between runs (docs/findings.md, "Why lockstep
//! exists"), so separate whole-process runs land in one state or another at random and
//! disagree by more than the effect measured. Builds that take turns in short batches see the same state within a round.
//! Any program that links this crate and serves the protocol can be measured that way.
//!
//! # The protocol
//! On the program's stdin and stdout, after it has set up and warmed up:
//! 1. it prints `{"ready":true,"pid":…,"clock_overhead_ns":…}`;
//! 2. for each line `g` it reads, it runs one batch (only the per-iteration regions are
//!    timed) and answers with one line
//!    `{"median_ns":…,"p95_ns":…,"p99_ns":…,"p999_ns":…,"mean_ns":…,"elapsed_ns":…}`: the
//!    batch's quantiles interpolated within the clock's steps ([`grouped_quantile`]), its mean,
//!    and its own wall time (what the coordinator's overhead is reckoned against); with
//!    [`Lockstep::inject_ns`], `"inject_ns":…` too;
//! 3. at `q` or the end of input, [`Lockstep::serve`] returns what it measured ([`Served`]),
//!    and the program prints [`Served::summary`] as its last line and exits 0.
//!
//! Any other line is an error: [`Lockstep::serve`] says so on stderr and exits 2. A closed
//! stdout means the coordinator is gone: it exits 0.
//!
//! # Serving it
//! A program parses its own `--lockstep BATCH` flag, sets up, warms up, and hands its hot loop
//! to [`Lockstep::serve`]:
//!
//! ```no_run
//! use std::time::Instant;
//!
//! use mty_lockstep::Lockstep;
//!
//! /// One unit of the program's work. Never inlined: a whole run (what PGO training runs)
//! /// and a lockstep batch must execute this very function.
//! #[inline(never)]
//! fn work(state: &mut u64) {
//!     *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
//! }
//!
//! let args: Vec<String> = std::env::args().collect();
//! let batch = args
//!     .iter()
//!     .position(|a| a == "--lockstep")
//!     .map(|i| args.get(i + 1).and_then(|n| n.parse::<u64>().ok()).filter(|&n| n > 0));
//! let mut state = 1;
//! match batch {
//!     Some(Some(batch)) => {
//!         for _ in 0..10_000 {
//!             work(&mut state); // warm up before the ready line
//!         }
//!         let served = Lockstep::new(batch).serve(|n, times| {
//!             for _ in 0..n {
//!                 let t = Instant::now();
//!                 work(&mut state);
//!                 times.push(t.elapsed().as_nanos() as u64);
//!             }
//!         });
//!         println!("{}", serde_json::to_string(&served.summary()).unwrap());
//!     }
//!     Some(None) => {
//!         eprintln!("--lockstep takes a batch size of at least 1");
//!         std::process::exit(2);
//!     }
//!     None => {
//!         for _ in 0..1_000_000 {
//!             work(&mut state); // the whole run, what training runs
//!         }
//!         println!("{state}");
//!     }
//! }
//! ```
//!
//! **Run the same never-inlined function in training and in the batches.** PGO lays code out
//! by the counts of the functions the training ran, and the training runs whole runs. A loop
//! written for lockstep alone, with the work inlined into it, was never trained: PGO
//! optimises it as cold, for size, and the batches then measure a build nobody ships
//! (`docs/findings.md`, "the cold-loop trap").
//! The timing around the call (two clock reads, a push) is the only code of its own a batch
//! may have.

mod quantile;
mod summary;
mod usage;

#[cfg(test)]
mod serve_tests;

use std::io::{BufRead, Write};
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::Serialize;

pub use quantile::grouped_quantile;
pub use summary::{Summary, clock_overhead_ns, new_histogram};
pub use usage::Usage;

/// A lockstep session to serve: the batch size, and what each answer reports beside the
/// times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lockstep {
    batch: u64,
    inject_ns: u64,
}

impl Lockstep {
    /// A session whose every batch runs `batch` iterations.
    ///
    /// # Panics
    /// If `batch` is 0: a batch without times has no quantiles. Programs refuse
    /// `--lockstep 0` when parsing their flags.
    pub fn new(batch: u64) -> Self {
        assert!(batch > 0, "a lockstep batch runs at least one iteration");
        Lockstep {
            batch,
            inject_ns: 0,
        }
    }

    /// Reports `ns` as `inject_ns` in every answer: the nanoseconds the program adds to each
    /// time it records, a known effect with which the coordinator calibrates its detection.
    /// The program adds them itself (so that whole runs carry them too); this only says so.
    /// Zero, the default, is not reported.
    pub fn inject_ns(self, ns: u64) -> Self {
        Lockstep {
            inject_ns: ns,
            ..self
        }
    }

    /// Serves the session on stdin and stdout (see the [crate] docs): the `ready` line, then
    /// one batch per `g`, `run_batch(batch, &mut times)` pushing each iteration's time in ns
    /// onto `times` (empty at each call). Returns at `q` or the end of stdin.
    ///
    /// Exits the process with status 0 when stdout is closed (the coordinator is gone), and
    /// with status 2, after saying why on stderr, on an unknown command.
    pub fn serve(self, run_batch: impl FnMut(u64, &mut Vec<u64>)) -> Served {
        match self.serve_on(std::io::stdin().lock(), std::io::stdout().lock(), run_batch) {
            Ok(served) => served,
            Err(ServeError::Output(_)) => std::process::exit(0),
            Err(err @ ServeError::UnknownCommand(_)) => {
                eprintln!("{}: {err}", program_name());
                std::process::exit(2);
            }
        }
    }

    /// [`serve`](Self::serve) on any input and output, returning its errors instead of
    /// exiting. A failed read ends the session as the end of input does: whoever wrote the
    /// commands is gone.
    pub fn serve_on(
        self,
        mut input: impl BufRead,
        mut output: impl Write,
        mut run_batch: impl FnMut(u64, &mut Vec<u64>),
    ) -> Result<Served, ServeError> {
        let mut histogram = new_histogram();
        let mut times: Vec<u64> = Vec::with_capacity(self.batch as usize);
        let clock_overhead_ns = clock_overhead_ns();
        let mut answer = |line: &str| {
            writeln!(output, "{line}")
                .and_then(|()| output.flush())
                .map_err(ServeError::Output)
        };
        answer(&format!(
            r#"{{"ready":true,"pid":{},"clock_overhead_ns":{clock_overhead_ns}}}"#,
            std::process::id()
        ))?;
        let mut batches = 0;
        let mut command = String::new();
        loop {
            command.clear();
            match input.read_line(&mut command) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            match command.trim() {
                "g" => {}
                "q" => break,
                other => return Err(ServeError::UnknownCommand(other.to_string())),
            }
            times.clear();
            let started = Instant::now();
            run_batch(self.batch, &mut times);
            let elapsed_ns = started.elapsed().as_nanos() as u64;
            // The batch's total is summed here, beside the recording: `serve_on` is generic, so
            // this loop is compiled into the program, like the one its whole runs record times
            // with. A per-time loop in a function of this crate's own would show in the
            // program's profile as per-iteration work no whole run trains (xtask's
            // `every_mode_runs_the_code_a_whole_run_trains` allows only the quantiles and the
            // sort).
            let mut total_ns = 0u64;
            for &t in &times {
                histogram.saturating_record(t);
                total_ns += t;
            }
            times.sort_unstable();
            let line = BatchLine::new(&times, total_ns, elapsed_ns, self.inject_ns);
            answer(&serde_json::to_string(&line).expect("numbers serialize"))?;
            batches += 1;
        }
        Ok(Served {
            histogram,
            clock_overhead_ns,
            batches,
        })
    }
}

/// What a lockstep session measured, once the coordinator said `q` (or went away).
#[derive(Debug, Clone)]
pub struct Served {
    /// Every time recorded, over all batches.
    pub histogram: Histogram<u64>,
    /// As in the `ready` line ([`clock_overhead_ns`]).
    pub clock_overhead_ns: u64,
    /// Batches run (`g` commands answered).
    pub batches: u64,
}

impl Served {
    /// The closing line's figures over every batch, with this process's CPU time and context
    /// switches as of now.
    pub fn summary(&self) -> Summary {
        Summary::new(
            &self.histogram,
            self.clock_overhead_ns,
            Usage::of_this_process(),
        )
    }
}

/// Why [`Lockstep::serve_on`] stopped before `q` or the end of input.
#[derive(Debug)]
pub enum ServeError {
    /// A line that is neither `g` nor `q` (trimmed, as read).
    UnknownCommand(String),
    /// An answer could not be written: the coordinator is gone.
    Output(std::io::Error),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::UnknownCommand(command) => write!(
                f,
                "unknown lockstep command `{command}` (expected `g` or `q`)"
            ),
            ServeError::Output(err) => write!(f, "writing a lockstep answer: {err}"),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::UnknownCommand(_) => None,
            ServeError::Output(err) => Some(err),
        }
    }
}

/// One batch's answer to `g`.
#[derive(Debug, Serialize)]
struct BatchLine {
    median_ns: f64,
    p95_ns: f64,
    p99_ns: f64,
    p999_ns: f64,
    mean_ns: f64,
    elapsed_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    inject_ns: Option<f64>,
}

impl BatchLine {
    /// From the batch's times, sorted, and their total.
    fn new(sorted: &[u64], total_ns: u64, elapsed_ns: u64, inject_ns: u64) -> Self {
        // Thousandths of a nanosecond are plenty, and keep the answers short.
        let milli = |x: f64| (x * 1000.0).round() / 1000.0;
        BatchLine {
            median_ns: milli(grouped_quantile(sorted, 0.5)),
            p95_ns: milli(grouped_quantile(sorted, 0.95)),
            p99_ns: milli(grouped_quantile(sorted, 0.99)),
            p999_ns: milli(grouped_quantile(sorted, 0.999)),
            mean_ns: milli(total_ns as f64 / sorted.len() as f64),
            elapsed_ns,
            inject_ns: (inject_ns > 0).then_some(inject_ns as f64),
        }
    }
}

/// The executable's file name, to prefix messages as its own would be.
fn program_name() -> String {
    std::env::args_os()
        .next()
        .as_deref()
        .and_then(|arg0| std::path::Path::new(arg0).file_name())
        .map_or_else(
            || "lockstep".to_string(),
            |name| name.to_string_lossy().into_owned(),
        )
}
