//! The command line's parser, help and README option table, checked against the flag tables.
use super::*;

fn parse_words(s: &str) -> Result<Command, UsageError> {
    parse(s.split_whitespace().map(String::from))
}

fn pgo(s: &str) -> PgoFlags {
    match parse_words(&format!("pgo {s}")).unwrap() {
        Command::Pgo(f) => *f,
        other => panic!("{other:?}"),
    }
}

fn usage_error(s: &str) -> String {
    parse_words(s).unwrap_err().message
}

#[test]
fn stages_flags_and_their_errors() {
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
    assert!(pgo("--baseline r.json").check, "--baseline implies --check");
    assert_eq!(usage_error("pgo bake"), "unknown stage `bake`");
    assert_eq!(
        usage_error("pgo --fast"),
        "unknown flag `--fast` for `cargo xtask pgo`"
    );
    assert_eq!(
        usage_error("pgo merge train"),
        "give at most one stage (or `calibrate`, `tune`, `export DIR`, `ab OLD NEW`)"
    );
    assert_eq!(pgo("export out/b").export, Some(PathBuf::from("out/b")));
    assert_eq!(pgo("export out/b").stage, None);
    assert_eq!(
        pgo("ab old/x new/x").ab,
        Some((PathBuf::from("old/x"), PathBuf::from("new/x")))
    );
    assert_eq!(
        usage_error("pgo ab old/x"),
        "`ab` needs two executables (cargo xtask pgo ab OLD NEW)"
    );
    assert_eq!(
        usage_error("pgo ab a b c"),
        "give at most one stage (or `calibrate`, `tune`, `export DIR`, `ab OLD NEW`)"
    );
    assert_eq!(
        usage_error("pgo export"),
        "`export` needs a directory (cargo xtask pgo export DIR)"
    );
    let merge = pgo("merge --input a --input b:3 --bundle m");
    assert_eq!(merge.inputs, ["a", "b:3"]);
    assert_eq!(merge.bundle, Some(PathBuf::from("m")));
    assert_eq!(
        usage_error("pgo --input a"),
        "`--input` is for `cargo xtask pgo merge`"
    );
    assert_eq!(
        usage_error("pgo measure --bundle a"),
        "`--bundle` is for `cargo xtask pgo train` or `merge`"
    );
    assert_eq!(
        usage_error("pgo train --profile p"),
        "`--profile` is for the whole pipeline (`cargo xtask pgo --profile PATH`)"
    );
    assert!(pgo("calibrate").calibrate);
    // `--force [STAGE]`: the stage is its value only when it names one.
    assert_eq!(pgo("--force").force, Some(Stage::Doctor));
    assert_eq!(pgo("--force").stage, None);
    assert_eq!(pgo("--force train").force, Some(Stage::Train));
    assert_eq!(pgo("--force train").stage, None);
    let alone = pgo("train --force --remeasure");
    assert_eq!(
        (alone.stage, alone.force),
        (Some(Stage::Train), Some(Stage::Doctor))
    );
    assert!(alone.remeasure);
    assert_eq!(pgo("--half-width 0.5").half_width, Some(0.5));
    assert_eq!(pgo("--against HEAD~3").against.as_deref(), Some("HEAD~3"));
    assert_eq!(
        usage_error("pgo measure --against HEAD"),
        "`--against` is for the whole pipeline (`cargo xtask pgo --against REV`)"
    );
    // `tune` trains here: neither another commit nor a stored profile.
    assert!(pgo("tune").tune);
    assert_eq!(
        usage_error("pgo tune --against HEAD"),
        "`--against` is for the whole pipeline (`cargo xtask pgo --against REV`)"
    );
    assert_eq!(
        usage_error("pgo tune --profile x.profdata"),
        "`--profile` is for the whole pipeline (`cargo xtask pgo --profile PATH`)"
    );
    assert_eq!(pgo("measure").half_width, None);
    assert_eq!(
        usage_error("pgo --half-width fine"),
        "`--half-width` takes a half-width in % (1.0, 0.5), not `fine`"
    );
    assert_eq!(
        usage_error("pgo --half-width -1"),
        "`--half-width` takes a half-width in % (1.0, 0.5), not `-1`"
    );
    assert_eq!(
        (
            pgo("--force measure report").force,
            pgo("--force measure report").stage
        ),
        (Some(Stage::Measure), Some(Stage::Report))
    );
    assert_eq!(
        usage_error("pgo calibrate merge"),
        "give at most one stage (or `calibrate`, `tune`, `export DIR`, `ab OLD NEW`)"
    );
    assert_eq!(
        usage_error("pgo --pgo-data"),
        "`--pgo-data` needs a value (--pgo-data DIR)"
    );
    assert_eq!(
        usage_error("compare --check"),
        "unknown flag `--check` for `cargo xtask compare`"
    );
    assert_eq!(
        usage_error("compare merge"),
        "`cargo xtask compare` takes no positional argument (got `merge`)"
    );
    assert_eq!(usage_error("bake"), "unknown command `bake`");
    assert_eq!(usage_error(""), "no command given");
    let err = parse_words("pgo --fast").unwrap_err();
    assert!(err.usage.starts_with("usage: cargo xtask pgo"), "{err}");
}

#[test]
fn help_is_asked_for_anywhere() {
    for line in ["--help", "help", "-h"] {
        assert_eq!(parse_words(line).unwrap(), Command::Help(xtask_help()));
    }
    assert_eq!(
        parse_words("pgo merge --help").unwrap(),
        Command::Help(command_help("pgo"))
    );
    assert_eq!(
        parse_words("compare -h").unwrap(),
        Command::Help(command_help("compare"))
    );
}

/// Tidy: every flag in a command's table parses and changes what was parsed (so none is
/// accepted and ignored), every flag is in the help, and every stage is in the help.
#[test]
fn every_flag_in_the_tables_is_parsed_and_shown() {
    for (command, flags) in [
        ("pgo", pgo_flags().collect::<Vec<_>>()),
        ("compare", compare_flags().collect()),
    ] {
        let help = command_help(command);
        for f in flags {
            let value = match f.value {
                Some(v) if v.starts_with('[') => "",
                Some("PCT") => "0.5",
                Some("N") | Some("R") => "3",
                Some(_) => "v",
                None => "",
            };
            // The flags of one stage are tried with that stage.
            let context = match f.name {
                "--bundle" => format!("{command} train"),
                "--input" => format!("{command} merge"),
                "--repeat" => format!("{command} calibrate"),
                _ => command.to_string(),
            };
            let default = parse_words(&context).unwrap();
            let line = format!("{context} {} {value}", f.name);
            let parsed = parse_words(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_ne!(parsed, default, "`{line}` changed nothing");
            let shown = match f.value {
                Some(v) => format!("  {} {v} ", f.name),
                None => format!("  {} ", f.name),
            };
            assert!(help.contains(&shown), "{command} help lacks {shown:?}");
        }
    }
    let help = command_help("pgo");
    for stage in Stage::ALL {
        assert!(help.contains(&format!("\n  {} ", stage.name())), "{help}");
    }
}

/// Tidy: the README's option table lists exactly the flags the commands take.
#[test]
fn the_readme_option_table_matches_the_flags() {
    let readme =
        std::fs::read_to_string(crate::cargo::project_root().join("README.md")).expect("README.md");
    let mut listed: Vec<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `--"))
        .map(|l| format!("--{}", l.split('`').next().unwrap()))
        .collect();
    listed.sort();
    let mut ours: Vec<String> = pgo_flags()
        .map(|f| match f.value {
            Some(v) => format!("{} {v}", f.name),
            None => f.name.to_string(),
        })
        .collect();
    ours.sort();
    assert_eq!(
        listed, ours,
        "README.md's option table (`| `--flag VALUE` | …`) and the flags of `cargo xtask pgo` differ"
    );
}
