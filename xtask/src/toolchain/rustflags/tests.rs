//! The user's rustflags from each source cargo reads, on real config files in temporary
//! directories and a real `rustc --print cfg`; then each of the pipeline's builds, composed
//! with them, checked by rustc itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::*;
use crate::base::exec::Cmd;
use crate::toolchain::build::Build;

const HOST: &str = "x86_64-unknown-linux-gnu";

struct Tree {
    root: PathBuf,
}

impl Tree {
    fn new(name: &str) -> Tree {
        let root =
            std::env::temp_dir().join(format!("xtask-rustflags-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("home")).unwrap();
        std::fs::create_dir_all(root.join("project/sub")).unwrap();
        Tree { root }
    }
    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }
    fn flags(&self, env: &[(&str, &str)]) -> Result<UserFlags> {
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| env.get(k).cloned();
        let src = Sources {
            cwd: self.root.join("project/sub"),
            cargo_home: self.root.join("home"),
            env: &lookup,
        };
        effective(&src, HOST, &host_cfg())
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn host_cfg() -> String {
    Cmd::new("rustc")
        .args(["--print", "cfg", "--target", HOST])
        .read()
        .unwrap()
}

#[test]
fn build_rustflags_from_the_config_files_joined_nearest_last() {
    let t = Tree::new("build");
    assert_eq!(t.flags(&[]).unwrap(), UserFlags::default(), "nothing set");
    let home = t.write(
        "home/config.toml",
        "[build]\nrustflags = \"--cfg from_home\"\n",
    );
    let near = t.write(
        "project/.cargo/config.toml",
        "[build]\nrustflags = [\"-Ctarget-cpu=x86-64-v3\"]\n",
    );
    let got = t.flags(&[]).unwrap();
    assert_eq!(got.flags, ["--cfg", "from_home", "-Ctarget-cpu=x86-64-v3"]);
    assert_eq!(
        got.source,
        format!(
            "{} build.rustflags + {} build.rustflags",
            home.display(),
            near.display()
        )
    );
    // The environment's comes after the config's.
    let got = t
        .flags(&[("CARGO_BUILD_RUSTFLAGS", "--cfg from_env")])
        .unwrap();
    assert_eq!(got.flags.last().map(String::as_str), Some("from_env"));
    assert!(
        got.source.ends_with(" + CARGO_BUILD_RUSTFLAGS"),
        "{}",
        got.source
    );
}

#[test]
fn target_rustflags_win_over_build_and_cfg_entries_match_the_host() {
    let t = Tree::new("target");
    t.write(
        "project/.cargo/config.toml",
        &format!(
            "[build]\nrustflags = [\"--cfg\", \"from_build\"]\n\
             [target.{HOST}]\nrustflags = [\"--cfg\", \"from_triple\"]\n\
             [target.'cfg(target_os = \"linux\")']\nrustflags = [\"--cfg\", \"from_linux\"]\n\
             [target.'cfg(windows)']\nrustflags = [\"--cfg\", \"from_windows\"]\n"
        ),
    );
    let got = t.flags(&[]).unwrap();
    assert_eq!(got.flags, ["--cfg", "from_linux", "--cfg", "from_triple"]);
    assert!(
        got.source
            .contains("target.cfg(target_os = \"linux\").rustflags + ")
            && got.source.ends_with(&format!("target.{HOST}.rustflags")),
        "{}",
        got.source
    );
    // Only a cfg entry: it alone.
    let t = Tree::new("cfg");
    t.write(
        "project/.cargo/config.toml",
        "[build]\nrustflags = \"--cfg from_build\"\n[target.'cfg(target_os = \"linux\")']\nrustflags = \"-Ctarget-cpu=x86-64-v3\"\n",
    );
    assert_eq!(t.flags(&[]).unwrap().flags, ["-Ctarget-cpu=x86-64-v3"]);
    let env = format!(
        "CARGO_TARGET_{}_RUSTFLAGS",
        HOST.to_uppercase().replace('-', "_")
    );
    let got = t.flags(&[(env.as_str(), "--cfg from_env")]).unwrap();
    assert_eq!(got.flags, ["-Ctarget-cpu=x86-64-v3", "--cfg", "from_env"]);
}

#[test]
fn the_environment_wins_over_the_config_encoded_first() {
    let t = Tree::new("env");
    t.write(
        "project/.cargo/config.toml",
        "[build]\nrustflags = \"--cfg from_build\"\n",
    );
    let got = t
        .flags(&[("RUSTFLAGS", "  -Ctarget-cpu=x86-64-v3   --cfg  a ")])
        .unwrap();
    assert_eq!(got.flags, ["-Ctarget-cpu=x86-64-v3", "--cfg", "a"]);
    assert_eq!(got.source, "RUSTFLAGS");
    let got = t
        .flags(&[
            ("RUSTFLAGS", "--cfg from_rustflags"),
            ("CARGO_ENCODED_RUSTFLAGS", "--cfg\x1fwith space"),
        ])
        .unwrap();
    assert_eq!(got.flags, ["--cfg", "with space"], "split on \\x1f only");
    assert_eq!(got.source, "CARGO_ENCODED_RUSTFLAGS");
    // Set but empty: no flags, and no fallback to the config (as cargo).
    let got = t.flags(&[("RUSTFLAGS", "")]).unwrap();
    assert!(got.flags.is_empty() && got.source == "RUSTFLAGS", "{got:?}");
}

#[test]
fn a_value_of_the_wrong_type_names_the_file_and_key() {
    let t = Tree::new("type");
    let f = t.write("project/.cargo/config.toml", "[build]\nrustflags = 3\n");
    let err = t.flags(&[]).unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "{}: `build.rustflags` must be a string or an array",
            f.display()
        )),
        "{err}"
    );
}

#[test]
fn a_conflicting_flag_is_refused_naming_it_and_its_source() {
    let t = Tree::new("conflict");
    let f = t.write(
        "project/.cargo/config.toml",
        "[build]\nrustflags = [\"-Clto=fat\"]\n",
    );
    let err = check_conflicts(&t.flags(&[]).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "the rustflag `-Clto=fat` from {} build.rustflags conflicts with the pipeline",
            f.display()
        )),
        "{err}"
    );
    for (flags, shown) in [
        ("-C profile-use=/x.profdata", "-C profile-use=/x.profdata"),
        ("-Cprofile-generate=/raw", "-Cprofile-generate=/raw"),
        ("--codegen=codegen-units=4", "--codegen=codegen-units=4"),
    ] {
        let got = t.flags(&[("RUSTFLAGS", flags)]).unwrap();
        let err = check_conflicts(&got).unwrap_err().to_string();
        assert!(
            err.contains(&format!("the rustflag `{shown}` from RUSTFLAGS conflicts")),
            "{err}"
        );
    }
    // Everything else is the user's business.
    let got = t
        .flags(&[("RUSTFLAGS", "-Ctarget-cpu=x86-64-v3 -C panic=abort --cfg x")])
        .unwrap();
    check_conflicts(&got).unwrap();
}

/// rustc's own view of each build's flags: the user's target feature reaches all of them.
#[test]
fn the_users_flag_reaches_every_build_by_rustc_print_cfg() {
    let t = Tree::new("reach");
    t.write(
        "project/.cargo/config.toml",
        "[target.'cfg(target_os = \"linux\")']\nrustflags = [\"-Ctarget-feature=+bmi2\"]\n",
    );
    let user = t.flags(&[]).unwrap();
    let profile = t.write("merged.profdata", "");
    let plain = Cmd::new("rustc")
        .args(["--print", "cfg", "--target", HOST])
        .read()
        .unwrap();
    assert!(
        !plain.contains("target_feature=\"bmi2\""),
        "the baseline lacks it"
    );
    for build in Build::ALL {
        let pgo: Option<&Path> = match build {
            Build::Instrumented => Some(t.root.as_path()),
            Build::LtoPgo | Build::Oracle | Build::Bolt => Some(profile.as_path()),
            Build::Release | Build::Lto => None,
        };
        let flags = compose(&user, &build.rustflags(pgo));
        let cfg = Cmd::new("rustc")
            .args(["--print", "cfg", "--target", HOST])
            .args(flags.iter().cloned())
            .read()
            .unwrap_or_else(|e| panic!("{}: {e:#}", build.name()));
        assert!(
            cfg.contains("target_feature=\"bmi2\""),
            "{}: {flags:?}",
            build.name()
        );
        assert_eq!(
            &flags[..1],
            ["-Ctarget-feature=+bmi2"],
            "the user's first, then the pipeline's"
        );
    }
}
