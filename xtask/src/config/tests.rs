//! The config's parsing and validation, on TOML text and the committed profiles.

use super::*;

fn check_err(text: &str, expected: &[&str]) {
    let err = parse(text).unwrap_err().to_string();
    for part in expected {
        assert!(err.contains(part), "expected {part:?} in:\n{err}");
    }
}

const GOOD: &str = r#"
binary = "mty-bench"
[train]
timeout_secs = 60
workloads = [{ name = "train", args = ["train"] }]
[measure]
bootstrap_resamples = 10000
seed = 1
timeout_secs = 60
min_effect_pct = 1.0
workloads = [{ name = "lat", args = ["agent_send_latency"] }]
[instructions]
messages = 1000
timeout_secs = 60
[apply_check]
required = ["mty_runtime::"]
[check]
workloads = ["lat"]
min_pgo_gain_pct = 0.0
[compare]
messages = 1000
warmup = 100
rounds = 1
seed = 1
timeout_secs = 60
"#;

#[test]
fn the_committed_profiles_parse() {
    // Every config shipped in profiles/, also those no test runs (contended.toml).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            load(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
            names.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    names.sort();
    assert_eq!(names, ["contended.toml", "default.toml", "quick.toml"]);
    parse(GOOD).unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/agent-pipeline/pgo.toml");
    let example = load(&example).unwrap().settings;
    assert_eq!(example.package.as_deref(), Some("mty-agent-pipeline"));
    assert_eq!(example.measure.workloads[1].mode, Mode::Process);
}

/// Another program's config: no `[instructions]`, `[check]` or `[compare]`, training commands
/// with their environment, directory, stdin and timeout, a whole-process workload.
const OTHER: &str = r#"
binary = "app"
[train]
timeout_secs = 60
workloads = [{ name = "t", args = ["--fast"], env = { APP_MODE = "train" }, cwd = "data", stdin = "data/a.json", timeout_secs = 5 }]
[measure]
bootstrap_resamples = 10000
seed = 1
timeout_secs = 60
min_effect_pct = 1.0
workloads = [
    { name = "whole", args = [], mode = "process", stdin = "data/b.json", metric = "elapsed_ns" },
    { name = "hot", args = ["--bench"] },
]
[apply_check]
required = ["app::"]
"#;

#[test]
fn another_programs_config_needs_only_its_own_sections() {
    let c = parse(OTHER).unwrap();
    assert_eq!(c.instructions.messages, 0, "no [instructions]: off");
    assert!(c.compare.is_none() && c.check.workloads.is_empty());
    let (t, w) = (&c.train.workloads[0], &c.measure.workloads[0]);
    assert_eq!(t.env["APP_MODE"], "train");
    assert_eq!(
        (t.cwd.as_deref(), t.timeout_secs),
        (Some(Path::new("data")), Some(5))
    );
    assert_eq!(
        (w.mode, w.metric.as_deref()),
        (Mode::Process, Some("elapsed_ns"))
    );
    // A whole-process workload runs once a turn unless it says; an in-process one batches.
    assert_eq!(w.batch_in(&c.measure.lockstep), 1);
    // Started from the workspace root, whatever directory xtask runs in.
    let (rt, rw) = (t.resolved(Path::new("/ws")), w.resolved(Path::new("/ws")));
    assert_eq!(rt.cwd.as_deref(), Some(Path::new("/ws/data")));
    assert_eq!(rt.stdin.as_deref(), Some(Path::new("/ws/data/a.json")));
    assert_eq!(
        rw.cwd.as_deref(),
        Some(Path::new("/ws")),
        "no cwd: the root"
    );
    assert_eq!(c.measure.workloads[1].batch_in(&c.measure.lockstep), 6000);
}

#[test]
fn settings_that_cannot_apply_to_a_workload_are_refused() {
    let measured = r#"{ name = "whole", args = [], mode = "process", stdin = "data/b.json", metric = "elapsed_ns" }"#;
    check_err(
        &OTHER.replace(
            measured,
            r#"{ name = "whole", args = [], stdin = "data/b.json" }"#,
        ),
        &["`whole`", "`stdin` needs `mode = \"process\"`", "protocol"],
    );
    check_err(
        &OTHER.replace(measured, r#"{ name = "whole", args = [], metric = "ns" }"#),
        &["`whole`", "`metric` needs `mode = \"process\"`"],
    );
    check_err(
        &OTHER.replace(
            measured,
            r#"{ name = "whole", args = [], stdout = "pipe" }"#,
        ),
        &["`whole`", "`stdout` is for `mode = \"process\"`"],
    );
    check_err(
        &OTHER.replace(
            measured,
            r#"{ name = "whole", args = [], mode = "process", metric = "ns", stdout = "null" }"#,
        ),
        &["`whole`", "nothing to read `metric` from"],
    );
    let piped = OTHER.replace(
        measured,
        r#"{ name = "whole", args = [], mode = "process", stdout = "pipe" }"#,
    );
    assert_eq!(
        parse(&piped).unwrap().measure.workloads[0].stdout,
        Some(Stdout::Pipe)
    );
    check_err(
        &OTHER.replace(
            measured,
            r#"{ name = "whole", args = [], mode = "process", timeout_secs = 9 }"#,
        ),
        &[
            "`whole`",
            "`timeout_secs` is for training workloads",
            "measure.timeout_secs",
        ],
    );
    check_err(
        &OTHER.replace(
            "timeout_secs = 5 }",
            r#"timeout_secs = 5, mode = "process" }"#,
        ),
        &["training workload `t`", "runs once, whole"],
    );
    check_err(
        &OTHER.replace("timeout_secs = 5 }", "timeout_secs = 0 }"),
        &["workload `t`", "`timeout_secs` must be at least 1"],
    );
    check_err(
        &OTHER.replace(r#"mode = "process","#, r#"mode = "forked","#),
        &[
            "unknown variant `forked`",
            "expected one of `lockstep`, `process`, `service`",
        ],
    );
    check_err(
        &format!("{OTHER}\n[[measure.versus]]\nsubject = \"hot\"\nreference = \"whole\"\n"),
        &[
            "`measure.versus` names `whole`",
            "in-process lockstep workload",
        ],
    );
}

#[test]
fn an_unknown_key_names_line_and_key() {
    check_err(
        &GOOD.replace(
            "bootstrap_resamples = 10000",
            "bootstrap_resamples = 10000\nwarmups = 3",
        ),
        &["line 8", "unknown field `warmups`"],
    );
}

#[test]
fn a_wrong_type_names_line_and_key() {
    check_err(
        &GOOD.replace(
            "bootstrap_resamples = 10000",
            "bootstrap_resamples = \"many\"",
        ),
        &[
            "line 7",
            "bootstrap_resamples = \"many\"",
            "invalid type: string \"many\", expected usize",
        ],
    );
}

#[test]
fn a_syntax_error_names_the_line() {
    check_err(
        &GOOD.replace("[measure]", "[measure"),
        &["line 6", "unclosed table"],
    );
}

#[test]
fn a_missing_key_is_named() {
    check_err(
        &GOOD.replace("binary = \"mty-bench\"", ""),
        &["missing field `binary`"],
    );
}

#[test]
fn empty_or_duplicate_workloads_are_refused() {
    check_err(
        &format!("{GOOD}[calibrate]\nsizes_pct = [0.0]\nblocks = 1\n"),
        &["unknown field `blocks`"],
    );
    check_err(
        &GOOD.replace(
            r#"workloads = [{ name = "lat", args = ["agent_send_latency"] }]"#,
            "workloads = []",
        ),
        &["`measure.workloads` is empty"],
    );
    check_err(
        &GOOD.replace(r#"workloads = ["lat"]"#, r#"workloads = ["nope"]"#),
        &["`check.workloads` names `nope`, which is not a measured workload (lat)"],
    );
    check_err(
        &GOOD.replace(
            "[instructions]",
            "versus = [{ subject = \"lat\", reference = \"tokio\" }]\n[instructions]",
        ),
        &["`measure.versus` names `tokio`, which is not a measured workload (lat)"],
    );
    check_err(
        &GOOD.replace(
            r#"[{ name = "lat", args = ["agent_send_latency"] }]"#,
            r#"[{ name = "a", args = ["x"] }, { name = "a", args = ["y"] }]"#,
        ),
        &["two measured workloads are named `a`"],
    );
}

#[test]
fn training_weights_are_checked_and_kept_out_of_what_is_trained() {
    let train = |list: &str| {
        GOOD.replace(
            r#"workloads = [{ name = "train", args = ["train"] }]"#,
            &format!("workloads = [{list}]"),
        )
    };
    let config = parse(&train(
        r#"{ name = "a", args = ["train", "--phase", "tokio"], weight = 3 }, { name = "b", args = ["train"] }"#,
    ))
    .unwrap();
    assert_eq!(
        config.train.weights(),
        [("a".to_string(), 3), ("b".to_string(), 1)]
    );
    // A weight is how the profiles merge: the commands trained do not carry it.
    assert!(
        config
            .train
            .commands()
            .workloads
            .iter()
            .all(|w| w.weight.is_none())
    );
    assert_eq!(config.train.commands().workloads[0].args[2], "tokio");
    check_err(
        &train(r#"{ name = "a", args = ["train"], weight = 0 }"#),
        &["training workload `a`: `weight` must be 1 to 1000000"],
    );
    check_err(
        &train(r#"{ name = "a", args = ["x"] }, { name = "a", args = ["y"] }"#),
        &["two training workloads are named `a`"],
    );
    check_err(
        &train(r#"{ name = "../up", args = ["x"] }"#),
        &["training workload `../up`: its name names the folder of its raw profiles"],
    );
    check_err(
        &train(r#"{ name = "a", args = ["x"], weight = 1_000_001 }"#),
        &["training workload `a`: `weight` must be 1 to 1000000"],
    );
    check_err(
        &GOOD.replace(
            r#"{ name = "lat", args = ["agent_send_latency"] }"#,
            r#"{ name = "lat", args = ["agent_send_latency"], weight = 2 }"#,
        ),
        &["measured workload `lat`: `weight` is for training workloads"],
    );
}

#[test]
fn a_validation_workload_sharing_an_input_with_a_measured_one_is_refused() {
    let with = |validate: &str, measured: &str| {
        GOOD.replace(
            r#"workloads = [{ name = "lat", args = ["agent_send_latency"] }]"#,
            &format!("workloads = [{measured}]"),
        ) + &format!("[validate]\nworkloads = [{validate}]\n")
    };
    // Other inputs of the same code: accepted.
    let config = parse(&with(
        r#"{ name = "v", args = ["agent_send_latency", "--capacity", "32"] }"#,
        r#"{ name = "lat", args = ["agent_send_latency"] }"#,
    ))
    .unwrap();
    assert_eq!(config.validate.workloads[0].name, "v");
    check_err(
        &with(
            r#"{ name = "v", args = ["agent_send_latency"] }"#,
            r#"{ name = "lat", args = ["agent_send_latency"] }"#,
        ),
        &["validation workload `v` shares its command line with measured workload `lat`"],
    );
    check_err(
        &with(
            r#"{ name = "v", args = ["--fast", "docs/a.md"] }"#,
            r#"{ name = "lat", args = ["--slow", "docs/a.md"] }"#,
        ),
        &["validation workload `v` shares the input file `docs/a.md` with measured workload `lat`"],
    );
    check_err(
        &with(
            r#"{ name = "v", args = ["-"], stdin = "in/b.json" }"#,
            r#"{ name = "lat", args = ["x"], mode = "process", stdin = "in/b.json" }"#,
        ),
        &["shares the input file `in/b.json`"],
    );
    check_err(
        &with(
            r#"{ name = "v", args = ["--input=./docs/a.md"] }"#,
            r#"{ name = "lat", args = ["--input", "docs/a.md"] }"#,
        ),
        &["shares the input file `docs/a.md`"],
    );
    check_err(
        &with(
            r#"{ name = "..", args = ["x"] }"#,
            r#"{ name = "lat", args = ["y"] }"#,
        ),
        &["validation workload `..`: its name names the folder of its raw profiles"],
    );
    // A number is not a file.
    parse(&with(
        r#"{ name = "v", args = ["x", "0.5"] }"#,
        r#"{ name = "lat", args = ["y", "0.5"] }"#,
    ))
    .unwrap();
    // Whole-process, as `tune --measure` measures it.
    parse(&with(
        r#"{ name = "v", args = ["x"], mode = "process" }"#,
        r#"{ name = "lat", args = ["y"] }"#,
    ))
    .unwrap();
    check_err(
        &with(
            r#"{ name = "v", args = ["x"], weight = 2 }"#,
            r#"{ name = "lat", args = ["y"] }"#,
        ),
        &["validation workload `v`: `weight` is not for validation workloads"],
    );
}

#[test]
fn bolt_enabled_is_auto_true_or_false() {
    assert_eq!(parse(GOOD).unwrap().bolt.enabled, BoltEnabled::Auto);
    for (text, want) in [
        ("\"auto\"", BoltEnabled::Auto),
        ("true", BoltEnabled::On),
        ("false", BoltEnabled::Off),
    ] {
        let c = parse(&format!("{GOOD}[bolt]\nenabled = {text}\n")).unwrap();
        assert_eq!(c.bolt.enabled, want);
        assert_eq!(c.bolt.options[0], "-reorder-blocks=ext-tsp");
    }
    check_err(
        &format!("{GOOD}[bolt]\nenabled = \"sometimes\"\n"),
        &["`bolt.enabled` is \"auto\", true or false, not \"sometimes\""],
    );
}

#[test]
fn a_file_error_names_the_file() {
    let err = load(Path::new("/nonexistent/profiles/x.toml")).unwrap_err();
    assert!(
        format!("{err:#}").contains("cannot read pipeline config /nonexistent/profiles/x.toml"),
        "{err:#}"
    );
}

#[test]
fn a_workloads_own_lockstep_keys_parse_and_are_checked() {
    let text = GOOD.replace(
        r#"workloads = [{ name = "lat", args = ["agent_send_latency"] }]"#,
        r#"workloads = [{ name = "lat", args = ["agent_send_latency"], share_core = false, sessions = 7, batch_messages = 9000, instructions = false }]"#,
    );
    let config = parse(&text).unwrap();
    let (w, l) = (&config.measure.workloads[0], &config.measure.lockstep);
    assert_eq!(
        (w.share_core, w.sessions, w.instructions),
        (Some(false), Some(7), Some(false))
    );
    assert_eq!(w.sessions_in(l), 7.min(l.sessions));
    assert!(!w.shares_core_in(l));
    assert_eq!((w.batch_messages, w.batch_in(l)), (Some(9000), 9000));
    check_err(
        &text.replace("sessions = 7", "sessions = 1"),
        &["workload `lat`", "`sessions` must be at least 2"],
    );
    check_err(
        &text.replace("batch_messages = 9000", "batch_messages = 0"),
        &["workload `lat`", "`batch_messages` must be at least 1"],
    );
}

#[test]
fn the_stopping_rule_keys_are_checked() {
    let m = parse(GOOD).unwrap().measure;
    assert_eq!(
        (
            m.target_half_width_pct,
            m.lockstep.min_sessions,
            m.lockstep.max_secs
        ),
        (1.0, 12, 60.0),
        "the defaults"
    );
    check_err(
        &GOOD.replace(
            "bootstrap_resamples = 10000",
            "bootstrap_resamples = 10000\ntarget_half_width_pct = -1",
        ),
        &["`target_half_width_pct` is -1: it must be a half-width in %"],
    );
    check_err(
        &GOOD.replace("[measure]", "[measure.lockstep]\nsessions = 9\nrounds = 3\nbatch_messages = 10\nmin_sessions = 1\n\n[measure]"),
        &["`measure.lockstep.min_sessions` must be at least 2"],
    );
    check_err(
        &GOOD.replace("[measure]", "[measure.lockstep]\nsessions = 9\nrounds = 3\nbatch_messages = 10\nmax_secs = 0\n\n[measure]"),
        &["`measure.lockstep.max_secs` must be a positive number of seconds"],
    );
}

#[test]
fn the_layout_keys_are_checked() {
    let c = parse(GOOD).unwrap();
    assert_eq!(
        (c.layout.variants, c.layout.builds.as_slice()),
        (4, &["release".to_string()][..])
    );
    assert_eq!(
        c.layout.workloads_of(&c.check),
        ["lat"],
        "check.workloads by default"
    );
    let with = |t: &str| format!("{GOOD}[layout]\n{t}\n");
    check_err(
        &with(r#"builds = ["release", "oracle"]"#),
        &["`layout.builds` names `oracle`, which cannot be relinked"],
    );
    check_err(
        &with(r#"builds = ["lto"]"#),
        &["`layout.builds` must include `release`"],
    );
    check_err(&with("variants = 1"), &["`layout.variants` is 1"]);
    check_err(
        &with(r#"workloads = ["nope"]"#),
        &["`layout.workloads` names `nope`, which is not a measured workload (lat)"],
    );
    check_err(
        &with("max_instructions_change_pct = -1.0"),
        &["`layout.max_instructions_change_pct` must be a percentage"],
    );
    assert_eq!(
        parse(&with("variants = 0\nbuilds = []"))
            .unwrap()
            .layout
            .variants,
        0
    );
}

#[test]
fn the_minimal_config_in_the_reference_parses() {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md"),
    )
    .unwrap();
    let toml = doc
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/configuration.md shows a config");
    let c = parse(toml).unwrap();
    assert_eq!((c.binary.as_str(), c.check.workloads.len()), ("app", 1));
}

#[test]
fn a_service_workload_is_checked_for_its_table_port_and_metric() {
    const SERVICE: &str = r#"
binary = "srv"
[train]
timeout_secs = 60
workloads = [{ name = "t", mode = "service", args = ["--listen", "{addr}"], service = { driver = ["mty-loadgen", "--url", "http://{addr}"] } }]
[measure]
bootstrap_resamples = 10000
timeout_secs = 60
min_effect_pct = 1.0
workloads = [{ name = "m", mode = "service", args = ["--listen", "{addr}"], metric = "p50_ns", service = { driver = ["mty-loadgen", "--url", "http://{addr}"], ready_line = "listening" } }]
[apply_check]
required = ["srv::"]
"#;
    let good = parse(SERVICE).unwrap();
    let m = &good.measure.workloads[0];
    assert_eq!(m.mode, Mode::Service);
    let service = m.service.as_ref().unwrap();
    assert_eq!(service.ready_line.as_deref(), Some("listening"));
    assert_eq!(service.stop_timeout().as_secs(), 10);
    assert!(!good.train.continuous);
    assert!(
        parse(&SERVICE.replace("[train]\n", "[train]\ncontinuous = true\n"))
            .unwrap()
            .train
            .continuous
    );
    // Without `metric`, judged by CPU per request: mty-loadgen needs the server's pid.
    check_err(
        &SERVICE.replace(r#", metric = "p50_ns""#, ""),
        &[
            "measured workload `m`",
            "CPU time per request",
            "--server-pid",
            "{pid}",
        ],
    );
    let by_cpu = parse(&SERVICE.replace(
        r#", metric = "p50_ns", service = { driver = ["mty-loadgen", "--url", "http://{addr}"]"#,
        r#", service = { driver = ["mty-loadgen", "--url", "http://{addr}", "--server-pid", "{pid}"]"#,
    ))
    .unwrap();
    assert_eq!(by_cpu.measure.workloads[0].metric, None);
    check_err(
        &SERVICE.replacen(
            r#"args = ["--listen", "{addr}"]"#,
            r#"args = ["--listen", "127.0.0.1:8080"]"#,
            1,
        ),
        &[
            "service workload `t`",
            "`{addr}` or `{port}`",
            "a port of its own",
        ],
    );
    check_err(
        &SERVICE.replacen(
            r#", service = { driver = ["mty-loadgen", "--url", "http://{addr}"] }"#,
            "",
            1,
        ),
        &["workload `t` has `mode = \"service\"` but no `service` table"],
    );
    check_err(
        &SERVICE.replacen(r#"mode = "service", "#, "", 1),
        &["workload `t` has a `service` table but not `mode = \"service\"`"],
    );
    check_err(
        &SERVICE.replacen(
            r#"driver = ["mty-loadgen", "--url", "http://{addr}"]"#,
            "driver = []",
            1,
        ),
        &["`service.driver` is empty"],
    );
    check_err(
        &SERVICE.replacen(
            "] } }]\n[measure]",
            "], stop_timeout_secs = 0 } }]\n[measure]",
            1,
        ),
        &["`stop_timeout_secs` must be at least 1"],
    );
}
