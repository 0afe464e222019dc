//! The final link of an executable, repeated: rustc's own linker command line (`--print
//! link-args`, with `-Csave-temps` so that its object files stay), run again with other
//! linker flags into another file. A relink takes well under a second, where rebuilding the
//! final crate repeats its codegen (and, under fat LTO, the whole program's).
//!
//! And what a relink moved: each function's address (`nm`), compared between two executables.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::base::exec::Cmd;

/// One linker invocation as rustc printed it: its environment, the program and its
/// arguments, and which argument is the output path.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkLine {
    pub env: Vec<(String, String)>,
    pub program: String,
    pub args: Vec<String>,
    output: usize,
}

impl LinkLine {
    /// Parses rustc's `--print link-args` output: `KEY="value" … "cc" "-m64" … "-o" "path" …`,
    /// each item quoted with Rust's string escapes.
    pub fn parse(text: &str) -> Result<LinkLine> {
        let mut env = Vec::new();
        let mut words = Vec::new();
        for token in tokens(text.trim())? {
            match token {
                Token::Env(k, v) if words.is_empty() => env.push((k, v)),
                Token::Env(k, v) => words.push(format!("{k}={v}")),
                Token::Word(w) => words.push(w),
            }
        }
        if words.is_empty() {
            bail!("no linker command in rustc's link-args output");
        }
        let program = words.remove(0);
        let output = words
            .iter()
            .position(|w| w == "-o")
            .filter(|i| i + 1 < words.len())
            .context("the linker command has no `-o <output>`")?
            + 1;
        Ok(LinkLine {
            env,
            program,
            args: words,
            output,
        })
    }

    /// The executable the line writes.
    pub fn output(&self) -> &Path {
        Path::new(&self.args[self.output])
    }

    /// The same link into `out`, with `extra` linker-driver arguments appended.
    pub fn relink(&self, out: &Path, extra: &[String]) -> Result<()> {
        let mut args = self.args.clone();
        args[self.output] = out.display().to_string();
        args.extend(extra.iter().cloned());
        let mut cmd = Cmd::new(self.program.clone()).args(args);
        for (k, v) in &self.env {
            cmd = cmd.env(k, v);
        }
        // One short line instead of the whole command (kilobytes of object paths): the
        // command is rustc's, in the link-args file; a failure still shows all of it.
        eprintln!(
            "$ {} (rustc's link of {}) -o {}{}",
            self.program,
            self.output().display(),
            out.display(),
            extra.iter().map(|e| format!(" {e}")).collect::<String>()
        );
        let output = cmd.output_unlogged()?;
        crate::base::exec::check(&cmd, &output).with_context(|| {
            format!(
                "relinking {} into {} with {}",
                self.output().display(),
                out.display(),
                if extra.is_empty() {
                    "no extra flag".to_string()
                } else {
                    extra.join(" ")
                }
            )
        })?;
        Ok(())
    }
}

enum Token {
    Env(String, String),
    Word(String),
}

/// Splits on spaces outside quotes; `KEY="v"` is an environment entry, `"w"` a word.
fn tokens(text: &str) -> Result<Vec<Token>> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        let Some(&c) = chars.peek() else {
            return Ok(out);
        };
        let mut key = String::new();
        if c != '"' {
            while let Some(&c) = chars.peek() {
                if c == '=' || c == ' ' || c == '"' {
                    break;
                }
                key.push(c);
                chars.next();
            }
            if chars.next() != Some('=') || chars.peek() != Some(&'"') {
                bail!("unexpected unquoted text `{key}` in rustc's link-args output");
            }
        }
        chars.next(); // the opening quote
        let mut value = String::new();
        loop {
            match chars.next() {
                None => bail!("an unterminated quote in rustc's link-args output"),
                Some('"') => break,
                Some('\\') => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some('t') => value.push('\t'),
                    Some('r') => value.push('\r'),
                    Some('0') => value.push('\0'),
                    Some('u') => {
                        let hex: String = chars
                            .by_ref()
                            .skip_while(|c| *c == '{')
                            .take_while(|c| *c != '}')
                            .collect();
                        let ch = u32::from_str_radix(&hex, 16)
                            .ok()
                            .and_then(char::from_u32)
                            .with_context(|| format!("a bad escape \\u{{{hex}}}"))?;
                        value.push(ch);
                    }
                    Some(c) => value.push(c),
                    None => bail!("a trailing backslash in rustc's link-args output"),
                },
                Some(c) => value.push(c),
            }
        }
        out.push(if key.is_empty() {
            Token::Word(value)
        } else {
            Token::Env(key, value)
        });
    }
}

/// Every defined function symbol's addresses (`nm --defined-only`, text symbols), by name.
pub fn function_addresses(exe: &Path) -> Result<BTreeMap<String, Vec<u64>>> {
    let text = Cmd::new("nm")
        .args(["--defined-only".to_string(), exe.display().to_string()])
        .read()
        .with_context(|| {
            format!(
                "cannot list the symbols of {} (`nm` is binutils': `apt-get install binutils`)",
                exe.display()
            )
        })?;
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if !matches!(kind, "t" | "T") {
            continue;
        }
        if let Ok(addr) = u64::from_str_radix(addr, 16) {
            out.entry(name.to_string()).or_default().push(addr);
        }
    }
    for addrs in out.values_mut() {
        addrs.sort_unstable();
    }
    if out.is_empty() {
        bail!(
            "{} has no function symbols: a stripped executable cannot show its layout",
            exe.display()
        );
    }
    Ok(out)
}

/// How two executables' functions lie: how many of the functions both define sit at another
/// address, of how many, and how many names only one of them defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Moved {
    pub moved: usize,
    pub common: usize,
    pub only_one: usize,
}

impl Moved {
    pub fn between(base: &BTreeMap<String, Vec<u64>>, other: &BTreeMap<String, Vec<u64>>) -> Moved {
        let mut m = Moved {
            moved: 0,
            common: 0,
            only_one: 0,
        };
        for (name, addrs) in base {
            match other.get(name) {
                Some(theirs) => {
                    m.common += 1;
                    m.moved += usize::from(theirs != addrs);
                }
                None => m.only_one += 1,
            }
        }
        m.only_one += other.keys().filter(|k| !base.contains_key(*k)).count();
        m
    }

    /// The share of common functions at another address, in %.
    pub fn pct(&self) -> f64 {
        if self.common == 0 {
            0.0
        } else {
            100.0 * self.moved as f64 / self.common as f64
        }
    }
}

/// Where `--print link-args=<file>` writes for a target folder.
///
/// One file per binary: a target folder holds the builds of every binary the pipeline was
/// run on, and a binary cargo finds fresh is not linked again, so its file must still be its
/// own (the example's relink once read mty-bench's command, and the byte-for-byte check
/// refused it).
pub fn link_args_file(target_dir: &Path, binary: &str) -> PathBuf {
    target_dir.join(format!("link-args-{binary}.txt"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rustcs_link_line() {
        let text = r#"LC_ALL="C" PATH="/a:/b" VSLANG="1033" "cc" "-m64" "/t/deps/rustcZe2ooM/symbols.o" "/t/x y.o" "-Wl,--as-needed" "a\"q\\b" "-o" "/t/deps/mty_bench-1c3d" "-nodefaultlibs"
"#;
        let line = LinkLine::parse(text).unwrap();
        assert_eq!(
            line.env,
            [("LC_ALL", "C"), ("PATH", "/a:/b"), ("VSLANG", "1033")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        assert_eq!(line.program, "cc");
        assert_eq!(line.args[2], "/t/x y.o");
        assert_eq!(line.args[4], r#"a"q\b"#);
        assert_eq!(line.output(), Path::new("/t/deps/mty_bench-1c3d"));
        assert!(LinkLine::parse(r#""cc" "-m64""#).is_err(), "no -o");
        assert!(LinkLine::parse(r#""cc" "-o"#).is_err(), "unterminated");
        assert!(LinkLine::parse("cc -o x").is_err(), "unquoted");
    }

    #[test]
    fn counts_the_functions_that_moved() {
        let map = |v: &[(&str, u64)]| -> BTreeMap<String, Vec<u64>> {
            v.iter().map(|(n, a)| (n.to_string(), vec![*a])).collect()
        };
        let base = map(&[("a", 0x10), ("b", 0x20), ("c", 0x30)]);
        let same = Moved::between(&base, &base);
        assert_eq!((same.moved, same.common, same.only_one), (0, 3, 0));
        let other = map(&[("a", 0x10), ("b", 0x30), ("c", 0x20), ("d", 0x40)]);
        let m = Moved::between(&base, &other);
        assert_eq!((m.moved, m.common, m.only_one), (2, 3, 1));
        assert!((m.pct() - 66.666).abs() < 0.01);
    }
}
