//! The command line: what each command accepts and refuses, old spellings, and docs/commands.md's
//! option table against the definitions.
use super::*;
use clap::CommandFactory;

fn parse_words(s: &str) -> Result<Command, clap::Error> {
    parse(s.split_whitespace().map(String::from), "cargo xtask")
}

fn pgo(s: &str) -> PgoArgs {
    match parse_words(&format!("pgo {s}")).unwrap() {
        Command::Pgo(a) => a,
        other => panic!("{other:?}"),
    }
}

/// The first line of the usage error, which must exit 2.
fn usage_error(s: &str) -> String {
    let err = parse_words(s).expect_err(s);
    assert_eq!(err.exit_code(), 2, "{s}: {err}");
    err.to_string()
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn stages_and_their_flags() {
    assert_eq!(pgo("merge --config x.toml").stage, Some(Stage::Merge));
    assert_eq!(
        pgo("merge --config x.toml").common.config,
        Some(PathBuf::from("x.toml"))
    );
    assert_eq!(
        pgo("--manifest-path ../app/Cargo.toml")
            .common
            .manifest_path,
        Some(PathBuf::from("../app/Cargo.toml"))
    );
    assert_eq!(pgo("").stage, None);
    assert!(pgo("--baseline r.json").gates(), "--baseline gates too");
    let merge = pgo("merge --input a --input b:3 --bundle m");
    assert_eq!(merge.inputs, ["a", "b:3"]);
    assert_eq!(merge.bundle, Some(PathBuf::from("m")));
    // `--force [STAGE]`: the stage is its value only when it names one.
    assert_eq!(pgo("--force").run.force, Some(Stage::Doctor));
    assert_eq!(pgo("--force").stage, None);
    assert_eq!(pgo("--force train").run.force, Some(Stage::Train));
    assert_eq!(pgo("--force train").stage, None);
    let alone = pgo("train --force --remeasure");
    assert_eq!(
        (alone.stage, alone.run.force),
        (Some(Stage::Train), Some(Stage::Doctor))
    );
    assert!(alone.remeasure);
    assert_eq!(
        (
            pgo("--force measure report").run.force,
            pgo("--force measure report").stage
        ),
        (Some(Stage::Measure), Some(Stage::Report))
    );
    assert_eq!(pgo("--half-width 0.5").measure.half_width, Some(0.5));
    assert_eq!(pgo("measure").measure.half_width, None);
    assert_eq!(pgo("--seed 7").measure.seed, Some(7));
    assert_eq!(pgo("--against HEAD~3").against.as_deref(), Some("HEAD~3"));
}

#[test]
fn each_command_takes_its_own_arguments() {
    let Command::Calibrate(c) = parse_words("calibrate --repeat 3 --half-width 0.5").unwrap()
    else {
        panic!()
    };
    assert_eq!((c.repeat, c.measure.half_width), (3, Some(0.5)));
    let Command::Calibrate(c) = parse_words("calibrate").unwrap() else {
        panic!()
    };
    assert_eq!(c.repeat, 1);
    let Command::Ab(ab) = parse_words("ab old/x new/x --seed 3").unwrap() else {
        panic!()
    };
    assert_eq!(
        (ab.old, ab.new, ab.measure.seed),
        (PathBuf::from("old/x"), PathBuf::from("new/x"), Some(3))
    );
    let Command::Export(e) = parse_words("export out/b --config q.toml").unwrap() else {
        panic!()
    };
    assert_eq!(
        (e.dir, e.common.config),
        (PathBuf::from("out/b"), Some(PathBuf::from("q.toml")))
    );
    let Command::Tune(t) = parse_words("tune --skip-bad-profiles --force").unwrap() else {
        panic!()
    };
    assert!(t.skip_bad_profiles && t.run.force == Some(Stage::Doctor));
    assert!(matches!(
        parse_words("compare --wait").unwrap(),
        Command::Compare(CompareArgs {
            common: CommonFlags { wait: true, .. }
        })
    ));
}

#[test]
fn usage_errors_name_the_problem_and_exit_2() {
    assert_eq!(
        usage_error("pgo bake"),
        "error: invalid value 'bake' for '[STAGE]'"
    );
    assert_eq!(
        usage_error("pgo --fast"),
        "error: unexpected argument '--fast' found"
    );
    assert_eq!(
        usage_error("pgo merge train"),
        "error: unexpected argument 'train' found"
    );
    assert_eq!(
        usage_error("pgo --input a"),
        "error: `--input` is for `cargo xtask pgo merge`"
    );
    assert_eq!(
        usage_error("pgo measure --bundle a"),
        "error: `--bundle` is for `cargo xtask pgo train` or `merge`"
    );
    assert_eq!(
        usage_error("pgo train --profile p"),
        "error: `--profile` is for the whole pipeline (`cargo xtask pgo --profile PATH`)"
    );
    assert_eq!(
        usage_error("pgo measure --against HEAD"),
        "error: `--against` is for the whole pipeline (`cargo xtask pgo --against REV`)"
    );
    assert_eq!(
        usage_error("pgo --half-width fine"),
        "error: invalid value 'fine' for '--half-width <PCT>': a half-width in % (1.0, 0.5), not `fine`"
    );
    assert_eq!(
        usage_error("pgo --pgo-data"),
        "error: a value is required for '--pgo-data <DIR>' but none was supplied"
    );
    assert_eq!(
        usage_error("calibrate --repeat 0"),
        "error: invalid value '0' for '--repeat <R>': 0 is not in 1..=4294967295"
    );
    // Each command has only its own flags.
    assert_eq!(
        usage_error("compare --check"),
        "error: unexpected argument '--check' found"
    );
    assert_eq!(
        usage_error("tune --against HEAD"),
        "error: unexpected argument '--against' found"
    );
    assert_eq!(
        usage_error("ab old --repeat 2"),
        "error: unexpected argument '--repeat' found"
    );
    assert_eq!(
        usage_error("compare merge"),
        "error: unexpected argument 'merge' found"
    );
    assert_eq!(usage_error("bake"), "error: unrecognized subcommand 'bake'");
    assert_eq!(
        usage_error("ab old/x"),
        "error: the following required arguments were not provided:"
    );
    assert!(parse_words("").is_err(), "no command is a usage error");
}

/// The words that were `pgo`'s are refused with their new spelling, wherever they stand,
/// but not as a flag's value.
#[test]
fn old_spellings_name_the_new_command() {
    for word in MOVED {
        assert_eq!(
            usage_error(&format!("pgo {word} x y")),
            format!(
                "error: `cargo xtask pgo {word}` is now `cargo xtask {word}` (`cargo xtask {word} --help`)"
            )
        );
    }
    assert!(usage_error("pgo --seed 3 calibrate").contains("is now `cargo xtask calibrate`"));
    assert_eq!(
        pgo("--config export").common.config,
        Some(PathBuf::from("export")),
        "a flag's value is not a command"
    );
    let err = parse(["pgo", "tune"].map(String::from), "cargo mty").unwrap_err();
    assert!(err.to_string().contains("is now `cargo mty tune`"), "{err}");
}

#[test]
fn help_exits_0_and_lists_every_stage() {
    for line in [
        "--help",
        "help",
        "pgo --help",
        "pgo merge -h",
        "calibrate --help",
    ] {
        let err = parse_words(line).expect_err(line);
        assert_eq!(err.exit_code(), 0, "{line}");
    }
    let help = parse_words("pgo --help").unwrap_err().to_string();
    for stage in Stage::ALL.iter().copied() {
        assert!(
            help.contains(&format!("- {}:", stage.name())),
            "pgo --help lacks {}: {help}",
            stage.name()
        );
    }
}

/// Every long flag of every command as docs/commands.md writes it (`--force [STAGE]`,
/// `--config FILE`), with the commands that take it.
fn flags_by_command() -> std::collections::BTreeMap<String, Vec<String>> {
    let mut cli = Cli::command();
    cli.build();
    let mut out = std::collections::BTreeMap::<String, Vec<String>>::new();
    for sub in cli.get_subcommands().filter(|s| s.get_name() != "help") {
        for arg in sub.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if long == "help" {
                continue;
            }
            let takes = arg.get_num_args().expect("built");
            let value = arg
                .get_value_names()
                .and_then(|v| v.first())
                .map(|v| v.to_string());
            let spelled = match (takes.min_values(), takes.max_values(), value) {
                (_, 0, _) | (_, _, None) => format!("--{long}"),
                (0, _, Some(v)) => format!("--{long} [{v}]"),
                (_, _, Some(v)) => format!("--{long} {v}"),
            };
            out.entry(spelled)
                .or_default()
                .push(sub.get_name().to_string());
        }
    }
    out
}

/// Tidy: docs/commands.md's option table lists exactly the flags the commands take, each with
/// the commands that take it.
#[test]
fn the_option_table_matches_the_commands() {
    let readme =
        std::fs::read_to_string(crate::toolchain::cargo::project_root().join("docs/commands.md"))
            .expect("docs/commands.md");
    let listed: std::collections::BTreeMap<String, Vec<String>> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `--"))
        .map(|l| {
            let mut cells = l.split(" | ");
            let flag = format!("--{}", cells.next().unwrap().trim_end_matches('`'));
            let commands = cells
                .next()
                .unwrap_or_default()
                .split(", ")
                .map(|c| c.trim_matches('`').to_string())
                .collect();
            (flag, commands)
        })
        .collect();
    let ours = flags_by_command();
    assert_eq!(
        listed, ours,
        "docs/commands.md's option table (`| `--flag VALUE` | `command`, … | what |`) and the commands' flags differ"
    );
}
