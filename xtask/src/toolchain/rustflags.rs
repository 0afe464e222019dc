//! The user's own rustflags, found as cargo finds them, so that every build the pipeline
//! makes is built with them plus the pipeline's own flags: the builds measured are the builds
//! shipped.
//!
//! Cargo takes a target's extra flags from exactly one source, the first that is set
//! (cargo's reference, `build.rustflags`):
//! 1. `CARGO_ENCODED_RUSTFLAGS` (flags separated by `\x1f`);
//! 2. `RUSTFLAGS` (separated by spaces);
//! 3. every matching `target.<triple>.rustflags` and `target.'cfg(…)'.rustflags` of the cargo
//!    config, joined (the `cfg(…)` ones first, in key order; `CARGO_TARGET_<TRIPLE>_RUSTFLAGS`
//!    after the config's);
//! 4. `build.rustflags` of the cargo config (`CARGO_BUILD_RUSTFLAGS` after the config's).
//!
//! The config is every `.cargo/config.toml` (or legacy `.cargo/config`) from the directory
//! cargo runs in up to `/`, then `$CARGO_HOME/config.toml`; a value defined in several files
//! is their arrays joined, the file nearer the directory last. A value may be an array or
//! a space-separated string. xtask runs cargo in its own working directory, so it reads the
//! same files cargo reads. The pipeline then passes the user's flags and its own together in
//! `CARGO_ENCODED_RUSTFLAGS`, the one source cargo then uses; with `--target`, build scripts
//! and proc-macros get none of them, as cargo does.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{Context, Result, bail};
use cargo_metadata::cargo_platform::{Cfg, CfgExpr};
use serde::{Deserialize, Serialize};

/// The user's flags for the host target and where they came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UserFlags {
    pub flags: Vec<String>,
    /// "RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "<file> build.rustflags", …; empty for none.
    pub source: String,
}

impl UserFlags {
    pub fn describe(&self) -> String {
        if self.source.is_empty() {
            "none (RUSTFLAGS, CARGO_ENCODED_RUSTFLAGS and the cargo config's target and build rustflags are unset)".into()
        } else if self.flags.is_empty() {
            format!("none (from {}, which is set but empty)", self.source)
        } else {
            format!("{} (from {})", self.flags.join(" "), self.source)
        }
    }
}

/// Where the user's configuration is read from: the directory cargo runs in, cargo's home,
/// the environment (a lookup, so tests can give their own).
pub struct Sources<'a> {
    pub cwd: PathBuf,
    pub cargo_home: PathBuf,
    pub env: &'a dyn Fn(&str) -> Option<String>,
}

impl Sources<'static> {
    /// A cargo run in `dir` (the workspace's root), with this process's `$CARGO_HOME` (else
    /// `~/.cargo`) and environment.
    pub fn at(dir: &Path) -> Sources<'static> {
        let cwd = dir.to_path_buf();
        let cargo_home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
            .unwrap_or_else(|| PathBuf::from("/root/.cargo"));
        Sources {
            cwd,
            cargo_home,
            env: &|k| std::env::var(k).ok(),
        }
    }
}

/// The user's effective rustflags for `host`, whose `rustc --print cfg` lines are `cfg`.
pub fn effective(src: &Sources, host: &str, cfg: &str) -> Result<UserFlags> {
    let found = |flags: Vec<String>, source: String| Ok(UserFlags { flags, source });
    if let Some(v) = (src.env)("CARGO_ENCODED_RUSTFLAGS") {
        let flags = if v.is_empty() {
            Vec::new()
        } else {
            v.split('\x1f').map(String::from).collect()
        };
        return found(flags, "CARGO_ENCODED_RUSTFLAGS".into());
    }
    if let Some(v) = (src.env)("RUSTFLAGS") {
        return found(split(&v), "RUSTFLAGS".into());
    }
    let cfgs: Vec<Cfg> = cfg
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Cfg::from_str(l.trim()).with_context(|| format!("cannot read the cfg `{l}`")))
        .collect::<Result<_>>()?;
    let files = config_files(&src.cwd, &src.cargo_home);
    let mut target = Vec::new();
    let mut sources = Vec::new();
    // cfg(…) entries first, in key order; then the triple's own.
    let mut cfg_keys: Vec<String> = Vec::new();
    for (_, doc) in &files {
        if let Some(t) = doc.get("target").and_then(|t| t.as_table()) {
            cfg_keys.extend(t.keys().filter(|k| k.starts_with("cfg(")).cloned());
        }
    }
    cfg_keys.sort();
    cfg_keys.dedup();
    for key in &cfg_keys {
        if CfgExpr::matches_key(key, &cfgs) {
            collect(
                &files,
                &["target", key, "rustflags"],
                &mut target,
                &mut sources,
            )?;
        }
    }
    collect(
        &files,
        &["target", host, "rustflags"],
        &mut target,
        &mut sources,
    )?;
    let env_key = format!(
        "CARGO_TARGET_{}_RUSTFLAGS",
        host.to_uppercase().replace(['-', '.'], "_")
    );
    if let Some(v) = (src.env)(&env_key) {
        target.extend(split(&v));
        sources.push(env_key);
    }
    if !target.is_empty() {
        return found(target, sources.join(" + "));
    }
    let mut build = Vec::new();
    let mut sources = Vec::new();
    collect(&files, &["build", "rustflags"], &mut build, &mut sources)?;
    if let Some(v) = (src.env)("CARGO_BUILD_RUSTFLAGS") {
        build.extend(split(&v));
        sources.push("CARGO_BUILD_RUSTFLAGS".into());
    }
    found(build, sources.join(" + "))
}

fn split(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// The config files cargo reads, lowest precedence first, each parsed.
fn config_files(cwd: &Path, cargo_home: &Path) -> Vec<(PathBuf, toml::Table)> {
    let mut dirs: Vec<PathBuf> = cwd.ancestors().map(|d| d.join(".cargo")).collect();
    let home = cargo_home.to_path_buf();
    if !dirs.contains(&home) {
        dirs.push(home);
    }
    let mut out = Vec::new();
    // Nearest last: it wins.
    for dir in dirs.into_iter().rev() {
        // Legacy `config` wins over `config.toml` when both exist, as in cargo.
        let file = [dir.join("config"), dir.join("config.toml")]
            .into_iter()
            .find(|f| f.is_file());
        if let Some(file) = file
            && let Ok(text) = std::fs::read_to_string(&file)
            && let Ok(doc) = text.parse::<toml::Table>()
        {
            out.push((file, doc));
        }
    }
    out
}

/// Appends the value at `path` of every file that has it (arrays joined, lowest precedence
/// first), naming each source.
fn collect(
    files: &[(PathBuf, toml::Table)],
    path: &[&str],
    flags: &mut Vec<String>,
    sources: &mut Vec<String>,
) -> Result<()> {
    for (file, doc) in files {
        let mut v: Option<&toml::Value> = None;
        let mut table = Some(doc);
        for key in path {
            v = table.and_then(|t| t.get(*key));
            table = v.and_then(|v| v.as_table());
        }
        let Some(v) = v else { continue };
        let key = path.join(".");
        match v {
            toml::Value::String(s) => flags.extend(split(s)),
            toml::Value::Array(items) => {
                for item in items {
                    let Some(s) = item.as_str() else {
                        bail!(
                            "{}: `{key}` must hold strings, found {item}",
                            file.display()
                        );
                    };
                    flags.push(s.to_string());
                }
            }
            other => bail!(
                "{}: `{key}` must be a string or an array of strings, found {other}",
                file.display()
            ),
        }
        sources.push(format!("{} {key}", file.display()));
    }
    Ok(())
}

/// A build's flags: the user's first, then the pipeline's own (`Build::rustflags`).
pub fn compose(user: &UserFlags, pipeline: &str) -> Vec<String> {
    user.flags
        .iter()
        .cloned()
        .chain(pipeline.split_whitespace().map(String::from))
        .collect()
}

/// Refuses a user's flag the pipeline must own: profile generation and use (the pipeline's
/// instrumented and PGO builds set them), and LTO or codegen units (the cargo profiles set
/// them; flags would override them in some builds and not others).
pub fn check_conflicts(user: &UserFlags) -> Result<()> {
    let mut options = Vec::new();
    let mut flags = user.flags.iter();
    while let Some(flag) = flags.next() {
        if flag == "-C" || flag == "--codegen" {
            if let Some(next) = flags.next() {
                options.push((format!("{flag} {next}"), next.clone()));
            }
        } else if let Some(opt) = flag
            .strip_prefix("-C")
            .or_else(|| flag.strip_prefix("--codegen="))
        {
            options.push((flag.clone(), opt.to_string()));
        }
    }
    for (shown, opt) in options {
        let name = opt.split('=').next().unwrap_or("");
        let why = match name {
            "profile-generate" | "profile-use" => {
                "the pipeline sets it itself: -Cprofile-generate for the instrumented build, -Cprofile-use for the PGO builds"
            }
            "lto" | "codegen-units" => {
                "the pipeline's cargo profiles set it (`release`, and `release-pgo`: fat LTO, one codegen unit); set it in Cargo.toml's [profile.release] instead"
            }
            _ => continue,
        };
        bail!(
            "the rustflag `{shown}` from {} conflicts with the pipeline: {why}. Remove it there and run again",
            user.source
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
