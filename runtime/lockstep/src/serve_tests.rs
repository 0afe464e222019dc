//! The protocol driven over in-memory input and output.

use std::io::Write;

use super::*;

/// Batch 1 of every session below: 8 iterations of 130 ns and 2 of 140 ns (one clock step up);
/// the later ones: 10 of 50 ns.
fn known_times(batch: u64, calls: &mut Vec<u64>) -> impl FnMut(u64, &mut Vec<u64>) + '_ {
    move |n, times| {
        assert!(times.is_empty(), "each batch starts with no times");
        assert_eq!(n, batch, "every batch runs the session's batch size");
        match calls.len() {
            0 => times.extend([140, 130, 130, 130, 130, 140, 130, 130, 130, 130]),
            _ => times.extend([50; 10]),
        }
        calls.push(n);
    }
}

fn serve(lockstep: Lockstep, input: &str) -> (Result<Served, ServeError>, String, usize) {
    let mut calls = Vec::new();
    let mut output = Vec::new();
    let result = lockstep.serve_on(input.as_bytes(), &mut output, known_times(10, &mut calls));
    (result, String::from_utf8(output).unwrap(), calls.len())
}

#[test]
fn answers_each_g_with_the_batch_summary_until_q() {
    let (served, output, calls) = serve(Lockstep::new(10), "g\ng\nq\ng\n");
    let served = served.unwrap();
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines.len(), 3, "{output}");
    assert_eq!(calls, 2, "nothing runs after `q`");

    assert_eq!(
        lines[0],
        format!(
            r#"{{"ready":true,"pid":{},"clock_overhead_ns":{}}}"#,
            std::process::id(),
            served.clock_overhead_ns
        )
    );
    // The median lies 0.5 / 0.8 into the 130 ns class [125, 135]; p95 is 1.5 of the 2 values
    // into the 140 ns class [135, 145], p99 1.9 of them, p99.9 1.99.
    let (first, elapsed) = lines[1].split_once(r#","elapsed_ns":"#).unwrap();
    assert_eq!(
        first,
        r#"{"median_ns":131.25,"p95_ns":142.5,"p99_ns":144.5,"p999_ns":144.95,"mean_ns":132.0"#
    );
    let elapsed: u64 = elapsed.strip_suffix('}').unwrap().parse().unwrap();
    assert!(elapsed > 0, "the batch's wall time is reported");
    let (second, _) = lines[2].split_once(r#","elapsed_ns":"#).unwrap();
    assert_eq!(
        second,
        r#"{"median_ns":50.0,"p95_ns":50.0,"p99_ns":50.0,"p999_ns":50.0,"mean_ns":50.0"#
    );

    assert_eq!(served.batches, 2);
    let hist = &served.histogram;
    assert_eq!(hist.len(), 20, "every time of both batches is recorded");
    assert_eq!((hist.min(), hist.max()), (50, 140));
    assert_eq!(hist.count_at(130), 8);
}

#[test]
fn the_end_of_input_ends_the_session_as_q_does() {
    let (served, output, calls) = serve(Lockstep::new(10), "g\n");
    assert_eq!(served.unwrap().batches, 1);
    assert_eq!((output.lines().count(), calls), (2, 1));
}

#[test]
fn answers_carry_the_injected_nanoseconds() {
    let (served, output, _) = serve(Lockstep::new(10).inject_ns(7), "g\nq\n");
    served.unwrap();
    let answer = output.lines().nth(1).unwrap();
    assert!(answer.ends_with(r#","inject_ns":7.0}"#), "{answer}");
    // Zero is no injection: not reported (as without `inject_ns`, checked above).
    let (_, output, _) = serve(Lockstep::new(10).inject_ns(0), "g\nq\n");
    assert!(!output.contains("inject_ns"), "{output}");
}

#[test]
fn an_unknown_command_is_an_error_naming_it() {
    let (served, output, calls) = serve(Lockstep::new(10), "g\n go \nq\n");
    let err = served.unwrap_err();
    assert!(
        matches!(&err, ServeError::UnknownCommand(c) if c == "go"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "unknown lockstep command `go` (expected `g` or `q`)"
    );
    assert_eq!(calls, 1, "the batch before it ran");
    assert_eq!(output.lines().count(), 2, "the ready line and one answer");
}

/// A writer whose reader is gone.
struct ClosedPipe;

impl Write for ClosedPipe {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::ErrorKind::BrokenPipe.into())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_closed_output_stops_before_any_batch() {
    let mut calls = Vec::new();
    let result =
        Lockstep::new(10).serve_on("g\n".as_bytes(), ClosedPipe, known_times(10, &mut calls));
    let err = result.unwrap_err();
    assert!(
        matches!(&err, ServeError::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe),
        "{err:?}"
    );
    assert!(
        calls.is_empty(),
        "no batch runs for a coordinator that is gone"
    );
}

#[test]
#[should_panic(expected = "at least one iteration")]
fn a_batch_of_zero_is_refused() {
    Lockstep::new(0);
}
