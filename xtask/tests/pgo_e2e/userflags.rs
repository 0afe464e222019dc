//! The user's rustflags reach every build the pipeline makes, for real: with
//! `RUSTFLAGS=-Ctarget-cpu=x86-64-v3` exported, the instrumented, PGO and baseline builds
//! all use BMI2 instructions (counted in their disassembly), and the profile still applies.
//! A flag the pipeline must own is refused, naming it and its source.

use std::path::Path;
use std::process::Command;

use super::support::*;
use super::testutil;

/// BMI2 instructions in an executable's disassembly (`shlx`, `sarx`, `shrx`, `andn`, `rorx`:
/// what `-Ctarget-cpu=x86-64-v3` lets LLVM use, and the default x86-64 target never does).
fn bmi2(exe: &Path) -> usize {
    let out = Command::new("objdump").arg("-d").arg(exe).output().unwrap();
    assert!(out.status.success(), "objdump -d {}", exe.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.split('\t')
                .nth(2)
                .and_then(|ins| ins.split_whitespace().next())
                .is_some_and(|m| ["shlx", "sarx", "shrx", "andn", "rorx"].contains(&m))
        })
        .count()
}

fn exe_of(stage: &serde_json::Value) -> &str {
    stage["exe"].as_str().unwrap()
}

#[test]
fn the_users_rustflags_reach_every_build_and_the_profile_still_applies() {
    if !testutil::have(
        "counting instructions in the builds (objdump)",
        testutil::on_path("objdump"),
        "apt-get install binutils",
    ) {
        return;
    }
    // Its own pgo-data and target directory (other flags rebuild everything), while holding
    // the good run's turn so no other end-to-end test runs beside it.
    let run = good_run();
    let (data, target) = (run.tmp.join("user-data"), run.tmp.join("user-target"));
    let with_flags = |args: &[&str]| {
        let out = bounded_output(
            command(&root().join("profiles/quick.toml"), args, &data, &target)
                .env("RUSTFLAGS", "-Ctarget-cpu=x86-64-v3")
                .env_remove("CARGO_ENCODED_RUSTFLAGS"),
        );
        let err = stderr_of(&out);
        assert!(out.status.success(), "{args:?}: {err}");
        err
    };
    let err = with_flags(&["pgo", "instrument"]);
    assert!(
        err.contains("doctor: the user's rustflags: -Ctarget-cpu=x86-64-v3 (from RUSTFLAGS)"),
        "{err}"
    );
    with_flags(&["pgo", "train"]);
    with_flags(&["pgo", "merge"]);
    let err = with_flags(&["pgo", "optimize"]);
    assert!(
        err.contains("lto+pgo: 0 functions without profile data"),
        "{err}"
    );
    with_flags(&["pgo", "baselines"]);

    let stage = |name: &str| json(&data.join(format!("stages/{name}.json")));
    let (instrument, optimize, baselines) =
        (stage("instrument"), stage("optimize"), stage("baselines"));
    let builds = [
        &instrument,
        &optimize["build"],
        &baselines["release"],
        &baselines["lto"],
    ];
    for built in builds {
        let flags = built["rustflags_exact"].as_array().unwrap();
        assert_eq!(flags[0], "-Ctarget-cpu=x86-64-v3", "{built}");
        assert_eq!(built["user_rustflags_source"], "RUSTFLAGS", "{built}");
        let n = bmi2(Path::new(exe_of(built)));
        assert!(n >= 20, "{}: {n} BMI2 instructions: {built}", exe_of(built));
    }
    // The good run's release build, without the flag, has next to none.
    let plain = json(&run.data.join("stages/baselines.json"));
    let n = bmi2(Path::new(exe_of(&plain["release"])));
    assert!(n < 10, "the plain release build has {n}");
}

#[test]
fn a_flag_the_pipeline_owns_is_refused_naming_its_source() {
    let run = good_run();
    let out = bounded_output(
        command(
            &root().join("profiles/quick.toml"),
            &["pgo", "doctor"],
            &run.data,
            &run.target,
        )
        .env("RUSTFLAGS", "-Ctarget-cpu=x86-64-v3 -C lto=thin")
        .env_remove("CARGO_ENCODED_RUSTFLAGS"),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(
        err.contains("the rustflag `-C lto=thin` from RUSTFLAGS conflicts with the pipeline"),
        "{err}"
    );
}
