//! What the `doctor` stage checks: rustc's version and LLVM major, and an llvm-profdata of the SAME
//! LLVM major. An older llvm-profdata cannot read rustc's raw profiles; a newer one writes an
//! indexed profile rustc may silently ignore. A mismatched tool is never used.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::base::exec::Cmd;

/// What `rustc -vV` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RustcInfo {
    pub release: String,
    pub host: String,
    pub commit_hash: String,
    pub llvm_version: String,
    pub llvm_major: u32,
}

/// The toolchain the pipeline runs with: the doctor's output.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Toolchain {
    /// The user's rustflags for the host target, and their source: every build gets them.
    #[serde(default)]
    pub user_rustflags: crate::toolchain::rustflags::UserFlags,
    /// llvm-bolt and merge-fdata, when found (the `bolt` stage).
    #[serde(default)]
    pub bolt: Option<crate::toolchain::bolt::BoltTools>,
    pub rustc: RustcInfo,
    /// `rustc -vV`, verbatim, for the report.
    pub rustc_vv: String,
    pub sysroot: PathBuf,
    pub llvm_profdata: PathBuf,
    /// The version line llvm-profdata printed.
    pub llvm_profdata_version: String,
}

/// Parses `rustc -vV`.
pub fn parse_rustc_vv(text: &str) -> Result<RustcInfo> {
    let field = |key: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix(':').map(str::trim))
            .map(str::to_string)
            .with_context(|| format!("`rustc -vV` printed no `{key}:` line:\n{text}"))
    };
    let llvm_version = field("LLVM version")?;
    Ok(RustcInfo {
        release: field("release")?,
        host: field("host")?,
        commit_hash: field("commit-hash").unwrap_or_default(),
        llvm_major: major(&llvm_version).with_context(|| {
            format!("cannot read the LLVM major from `LLVM version: {llvm_version}`")
        })?,
        llvm_version,
    })
}

/// The LLVM major of whatever llvm-profdata printed for `--version` (or `merge --version`):
/// `LLVM version 22.1.2-rust-1.95.0-stable`, `Debian LLVM version 14.0.6`,
/// `Ubuntu LLVM version 19.1.7`, `Homebrew LLVM version 19.1.7`, `LLVM version 19.1.7`.
pub fn parse_profdata_version(text: &str) -> Option<(u32, String)> {
    text.lines().find_map(|line| {
        let at = line.find("LLVM version ")?;
        let version = line[at + "LLVM version ".len()..].trim();
        Some((major(version)?, line.trim().to_string()))
    })
}

fn major(version: &str) -> Option<u32> {
    let digits: String = version.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Asks an llvm-profdata its version: `--version` first, then `merge --version`, because
/// LLVM 14's llvm-profdata rejects a bare `--version` ("Unknown command!").
pub fn profdata_version(tool: &Path) -> Option<(u32, String)> {
    for args in [&["--version"][..], &["merge", "--version"][..]] {
        let Ok(out) = Cmd::new(tool.display().to_string())
            .args(args.iter().copied())
            .output()
        else {
            return None;
        };
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some(found) = parse_profdata_version(&text) {
            return Some(found);
        }
    }
    None
}

/// The doctor: finds rustc and a version-matched llvm-profdata, installing the rustup
/// `llvm-tools` component when the sysroot lacks one. Everything is asked in the workspace's
/// directory `dir`, as cargo building there would: its `rust-toolchain.toml` chooses rustc, and
/// its `.cargo/config.toml` files add rustflags.
pub fn doctor(dir: &Path) -> Result<Toolchain> {
    let rustc_vv = Cmd::new("rustc")
        .cwd(dir)
        .arg("-vV")
        .read()
        .context("cannot ask rustc its version; is Rust installed?")?;
    let rustc = parse_rustc_vv(&rustc_vv)?;
    let sysroot = PathBuf::from(
        Cmd::new("rustc")
            .cwd(dir)
            .args(["--print", "sysroot"])
            .read()?
            .trim(),
    );
    let in_sysroot = sysroot_profdata(&sysroot, &rustc.host);
    if !in_sysroot.exists() {
        eprintln!(
            "llvm-profdata is not in the sysroot ({}); installing it: rustup component add llvm-tools",
            in_sysroot.display()
        );
        if let Err(err) = Cmd::new("rustup")
            .cwd(dir)
            .args(["component", "add", "llvm-tools"])
            .read()
        {
            eprintln!("warning: could not install llvm-tools ({err:#}); looking on PATH instead");
        }
    }
    let (llvm_profdata, llvm_profdata_version) =
        choose_profdata(&rustc, &in_sysroot, &path_dirs())?;
    // The user's own rustflags, as cargo would take them for the host target.
    let cfg = Cmd::new("rustc")
        .cwd(dir)
        .args(["--print", "cfg", "--target", &rustc.host])
        .read()?;
    let user_rustflags = crate::toolchain::rustflags::effective(
        &crate::toolchain::rustflags::Sources::at(dir),
        &rustc.host,
        &cfg,
    )?;
    crate::toolchain::rustflags::check_conflicts(&user_rustflags)?;
    let bolt = crate::toolchain::bolt::find(rustc.llvm_major, &path_dirs());
    Ok(Toolchain {
        bolt,
        rustc,
        rustc_vv,
        sysroot,
        llvm_profdata,
        llvm_profdata_version,
        user_rustflags,
    })
}

pub fn sysroot_profdata(sysroot: &Path, host: &str) -> PathBuf {
    sysroot
        .join("lib/rustlib")
        .join(host)
        .join("bin/llvm-profdata")
}

fn path_dirs() -> Vec<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default()
}

/// Picks the first llvm-profdata whose LLVM major equals rustc's: the sysroot's, then
/// `llvm-profdata-<major>` and `llvm-profdata` in each PATH directory. Fails naming every
/// candidate it rejected and how to fix it.
pub fn choose_profdata(
    rustc: &RustcInfo,
    in_sysroot: &Path,
    path: &[PathBuf],
) -> Result<(PathBuf, String)> {
    let mut candidates = vec![in_sysroot.to_path_buf()];
    for dir in path {
        candidates.push(dir.join(format!("llvm-profdata-{}", rustc.llvm_major)));
        candidates.push(dir.join("llvm-profdata"));
    }
    let mut rejected = Vec::new();
    for tool in candidates.iter().filter(|c| c.is_file()) {
        match profdata_version(tool) {
            Some((major, line)) if major == rustc.llvm_major => return Ok((tool.clone(), line)),
            Some((_, line)) => rejected.push(format!("  {} ({line})", tool.display())),
            None => rejected.push(format!(
                "  {} (its version could not be read)",
                tool.display()
            )),
        }
    }
    let found = if rejected.is_empty() {
        "  none found".to_string()
    } else {
        rejected.join("\n")
    };
    bail!(
        "no llvm-profdata matches rustc {} (LLVM {}); a mismatched one is never used (an older one \
         cannot read rustc's raw profiles, a newer one writes profiles rustc ignores).\n\
         Rejected:\n{found}\n\
         Fix: `rustup component add llvm-tools` (puts a matching one at {}), or install \
         llvm-profdata-{} on PATH (Debian: apt-get install llvm-{})",
        rustc.release,
        rustc.llvm_version,
        in_sysroot.display(),
        rustc.llvm_major,
        rustc.llvm_major
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUSTC_VV: &str = "rustc 1.95.0 (59807616e 2026-04-14)
binary: rustc
commit-hash: 59807616e1fa2540724bfbac14d7976d7e4a3860
commit-date: 2026-04-14
host: x86_64-unknown-linux-gnu
release: 1.95.0
LLVM version: 22.1.2
";

    #[test]
    fn parses_rustc_vv() {
        let info = parse_rustc_vv(RUSTC_VV).unwrap();
        assert_eq!(info.release, "1.95.0");
        assert_eq!(info.host, "x86_64-unknown-linux-gnu");
        assert_eq!(info.llvm_version, "22.1.2");
        assert_eq!(info.llvm_major, 22);
        let err = parse_rustc_vv("rustc 1.0\nhost: x\nrelease: 1.0\n").unwrap_err();
        assert!(err.to_string().contains("no `LLVM version:` line"), "{err}");
    }

    #[test]
    fn parses_llvm_profdata_versions_in_their_several_forms() {
        for (text, major) in [
            (
                "LLVM (http://llvm.org/):\n  LLVM version 22.1.2-rust-1.95.0-stable\n  Optimized build.\n",
                22,
            ),
            ("Debian LLVM version 14.0.6\n\n  Optimized build.\n", 14),
            ("Ubuntu LLVM version 19.1.7\n", 19),
            ("Homebrew LLVM version 19.1.7\n", 19),
            ("LLVM (http://llvm.org/):\n  LLVM version 19.1.7\n", 19),
        ] {
            assert_eq!(
                parse_profdata_version(text).map(|v| v.0),
                Some(major),
                "{text:?}"
            );
        }
        assert_eq!(
            parse_profdata_version("llvm-profdata: Unknown command!\n"),
            None
        );
    }

    /// Real tools on a real PATH: a directory whose `llvm-profdata` is Debian's LLVM 14 is
    /// refused, naming both versions; the sysroot's matching one is taken first when present.
    #[test]
    fn a_mismatched_llvm_profdata_is_refused_naming_both_versions() {
        let debian14 = Path::new("/usr/bin/llvm-profdata");
        // Debian 12's `llvm` package (.ci/run installs it).
        if !crate::testing::optional::have(
            "a mismatched llvm-profdata: Debian's LLVM 14 at /usr/bin/llvm-profdata",
            profdata_version(debian14).is_some_and(|v| v.0 == 14),
            "apt-get install llvm",
        ) {
            return;
        }
        let rustc = parse_rustc_vv(RUSTC_VV).unwrap();
        let nowhere = Path::new("/nonexistent/llvm-profdata");
        let err = choose_profdata(&rustc, nowhere, &[PathBuf::from("/usr/bin")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no llvm-profdata matches rustc 1.95.0 (LLVM 22.1.2)"),
            "{err}"
        );
        assert!(
            err.contains("/usr/bin/llvm-profdata (Debian LLVM version 14.0.6)"),
            "{err}"
        );
        assert!(err.contains("rustup component add llvm-tools"), "{err}");
    }
}
