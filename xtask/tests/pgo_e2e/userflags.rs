//! A rustflag the pipeline must own is refused, naming it and its source. (That the user's
//! rustflags reach every build, for real, is checked on another workspace's cargo config in
//! `own_program.rs`.)

use super::support::*;

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
