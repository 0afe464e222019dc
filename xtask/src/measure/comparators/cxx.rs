//! The C++ comparators' compile, skipped when nothing it read has changed: a stamp beside
//! the executable records the compiler (path and version), the arguments, and every file
//! the last compile read (g++'s own `-MD` list: the source and each header, asio's
//! included) with its size and modification time. A cold run still compiles (asio's
//! channel is slow to compile); a rerun of the report does not.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Output;

use anyhow::{Context, Result};

use crate::base::exec::Cmd;
use crate::base::fsx;

const FLAGS: [&str; 4] = ["-std=c++20", "-O3", "-DNDEBUG", "-pthread"];

/// Compiles `source` into `exe` with `compiler`, unless its stamp still holds. Returns the
/// command and its output (`None`: up to date, not run). A failed compile leaves no stamp.
pub fn compile(compiler: &Path, source: &Path, exe: &Path) -> Result<(Cmd, Option<Output>)> {
    compile_logged(compiler, source, exe, true)
}

/// [`compile`] without the `$ g++ …` line (for a compile in the background).
pub fn compile_quietly(
    compiler: &Path,
    source: &Path,
    exe: &Path,
) -> Result<(Cmd, Option<Output>)> {
    compile_logged(compiler, source, exe, false)
}

fn compile_logged(
    compiler: &Path,
    source: &Path,
    exe: &Path,
    logged: bool,
) -> Result<(Cmd, Option<Output>)> {
    let deps = exe.with_extension("d");
    let stamp = exe.with_extension("stamp");
    let cmd = Cmd::new(compiler.display().to_string())
        .args(FLAGS)
        .args(["-MD", "-MF"])
        .arg(deps.display().to_string())
        .arg("-o")
        .arg(exe.display().to_string())
        .arg(source.display().to_string());
    let head = format!("{}\n{}\n", version(compiler), cmd.display());
    if exe.is_file()
        && let Ok(old) = std::fs::read_to_string(&stamp)
        && let Some(files) = old.strip_prefix(&head)
    {
        let read: Vec<PathBuf> = files
            .lines()
            .filter_map(|l| {
                l.rsplit_once(' ')?
                    .0
                    .rsplit_once(' ')
                    .map(|(p, _)| p.into())
            })
            .collect();
        if !read.is_empty() && stamp_text(&head, &read) == old {
            return Ok((cmd, None));
        }
    }
    let _ = std::fs::remove_file(&stamp);
    let output = if logged {
        cmd.output()?
    } else {
        cmd.output_unlogged()?
    };
    if output.status.success() {
        let listed = std::fs::read_to_string(&deps)
            .with_context(|| format!("g++ wrote no dependency list {}", deps.display()))?;
        fsx::write_atomic(&stamp, stamp_text(&head, &dep_files(&listed)).as_bytes())?;
    }
    Ok((cmd, Some(output)))
}

/// The compiler's first `--version` line (its path alone does not change with an upgrade).
fn version(compiler: &Path) -> String {
    std::process::Command::new(compiler)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "unknown version".to_string())
}

/// `head`, then one line per file: its path, size and modification time (`?` when gone).
fn stamp_text(head: &str, files: &[PathBuf]) -> String {
    let mut text = head.to_string();
    for f in files {
        let seen = std::fs::metadata(f).ok().and_then(|m| {
            let t = m
                .modified()
                .ok()?
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?;
            Some((m.len(), t.as_nanos()))
        });
        match seen {
            Some((len, ns)) => writeln!(text, "{} {len} {ns}", f.display()),
            None => writeln!(text, "{} ? ?", f.display()),
        }
        .expect("writing to a String");
    }
    text
}

/// The files a make-style dependency list (`exe: a.cpp b.h \` …) names.
fn dep_files(listed: &str) -> Vec<PathBuf> {
    let Some((_, rest)) = listed.split_once(": ") else {
        return Vec::new();
    };
    rest.split_whitespace()
        .filter(|w| *w != "\\")
        .map(PathBuf::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real compile twice, then again after the source changes: g++ runs the first and
    /// the last time only. Skips (saying so) without g++.
    #[test]
    fn a_compile_is_skipped_until_something_it_read_changes() {
        let gxx = crate::measure::comparators::find_program("g++");
        if !crate::testing::optional::have(
            "the C++ compile cache (g++)",
            gxx.is_some(),
            "apt-get install g++",
        ) {
            return;
        }
        let gxx = gxx.unwrap();
        let dir = std::env::temp_dir().join(format!("mty-cxx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, header) = (dir.join("main.cpp"), dir.join("answer.h"));
        std::fs::write(&header, "#define ANSWER 42\n").unwrap();
        std::fs::write(
            &src,
            "#include \"answer.h\"\nint main() { return ANSWER - 42; }\n",
        )
        .unwrap();
        let exe = dir.join("main");
        let ran = |n: &str| {
            let (cmd, out) = compile(&gxx, &src, &exe).unwrap();
            if let Some(out) = &out {
                crate::base::exec::check(&cmd, out).unwrap();
            }
            assert!(exe.is_file(), "{n}");
            out.is_some()
        };
        assert!(ran("first"), "the first compile runs");
        assert!(!ran("second"), "nothing changed: skipped");
        // A header it read: a new size.
        std::fs::write(&header, "#define ANSWER (40 + 2)\n").unwrap();
        assert!(ran("header"), "a header changed: compiled again");
        assert!(!ran("again"), "and then skipped again");
        std::fs::remove_file(&exe).unwrap();
        assert!(ran("gone"), "the executable is gone: compiled again");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_a_make_style_dependency_list() {
        let listed = "/t/asio_channel: /src/a.cpp /usr/include/asio.hpp \\\n /usr/include/x.h\n";
        assert_eq!(
            dep_files(listed),
            ["/src/a.cpp", "/usr/include/asio.hpp", "/usr/include/x.h"].map(PathBuf::from)
        );
    }
}
