//! The binary as a process: exit codes, what it prints, and the committed inputs.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs `agent-pipeline args` with `stdin` as its input.
fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-pipeline"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(stdin.as_bytes())
        .expect("the binary reads its input");
    child.wait_with_output().expect("the binary ends")
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("UTF-8 output")
}

#[test]
fn bad_arguments_exit_2_with_the_reason_last() {
    for (args, reason) in [
        (
            &["run", "--repeat", "0"][..],
            "`--repeat` must be at least 1",
        ),
        (&["run", "--lockstep"], "`--lockstep` needs a value"),
        (&["gen", "--seed", "1"], "`gen` needs `--records`"),
        (&["serve"], "unknown command `serve`: `run` or `gen`"),
        (&[], "no command: `run` or `gen`"),
    ] {
        let out = run(args, "");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.starts_with("usage: agent-pipeline run"), "{stderr}");
        assert!(
            stderr
                .trim_end()
                .ends_with(&format!("agent-pipeline: {reason}")),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn an_unreadable_input_exits_1_naming_it() {
    let out = run(&["run", "--input", "/nonexistent/records.jsonl"], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("agent-pipeline: reading /nonexistent/records.jsonl: "),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_whole_run_reads_stdin_and_prints_one_line() {
    let input = concat!(
        r#"{"id":1,"kind":"order","user":"ann","amount":12.5}"#,
        "\n",
        r#"{"id":2,"kind":"view","user":"ann"}"#,
        "\n",
        "{oops\n",
    );
    let out = run(&["run", "--repeat", "2"], input);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let line: serde_json::Value = serde_json::from_str(stdout).unwrap();
    assert_eq!(
        (&line["records"], &line["accepted"], &line["net_cents"]),
        (&6.into(), &4.into(), &2500.into())
    );
    assert_eq!(line["rejects"][0]["line"], 3);
    assert!(line["elapsed_ns"].as_u64().unwrap() > 0);
}

#[test]
fn lockstep_answers_each_batch_and_exits_2_on_an_unknown_command() {
    let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("inputs/train-1.jsonl");
    let input = input.to_str().unwrap();
    let args = [
        "run",
        "--input",
        input,
        "--lockstep",
        "50",
        "--warmup",
        "10",
    ];

    let out = run(&args, "g\ng\nq\n");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines: Vec<&str> = text(&out.stdout).lines().collect();
    assert_eq!(lines.len(), 4, "ready, two answers, the summary");
    assert!(lines[0].starts_with(r#"{"ready":true,"pid":"#));
    assert!(lines[1].starts_with(r#"{"median_ns":"#));
    let summary: serde_json::Value = serde_json::from_str(lines[3]).unwrap();
    assert!(summary["median_ns"].as_u64().unwrap() > 0);
    assert!(summary["percentiles"].is_array() && summary["user_ms"].is_number());

    let out = run(&args, "g\nstop\n");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "agent-pipeline: unknown lockstep command `stop` (expected `g` or `q`)\n"
    );
}

/// The committed inputs are `gen`'s output for these arguments, byte for byte.
#[test]
fn the_committed_inputs_are_what_gen_writes() {
    let inputs = Path::new(env!("CARGO_MANIFEST_DIR")).join("inputs");
    for (file, seed, records, mix) in [
        ("train-1.jsonl", "1", "600", "train"),
        ("train-2.jsonl", "2", "600", "train"),
        ("heldout-1.jsonl", "101", "800", "heldout"),
        ("validate-1.jsonl", "201", "800", "heldout"),
    ] {
        let out = run(
            &["gen", "--seed", seed, "--records", records, "--mix", mix],
            "",
        );
        assert_eq!(out.status.code(), Some(0));
        let committed = std::fs::read(inputs.join(file)).unwrap();
        assert!(out.stdout == committed, "{file} differs from gen's output");
    }
}
