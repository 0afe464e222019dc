//! BOLT's tools and outputs, numbers only: finding `llvm-bolt` and `merge-fdata` (the
//! `bolt-<LLVM major>` package first), reading BOLT's report (how many functions have a
//! profile, the dyno-stats), the functions a `.fdata` profile holds, and whether an
//! executable kept its relocations (BOLT needs them to move code).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::base::exec::Cmd;

/// `llvm-bolt` and its `merge-fdata`, with the version `llvm-bolt --version` printed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoltTools {
    pub llvm_bolt: PathBuf,
    pub merge_fdata: PathBuf,
    pub version: String,
}

/// The Debian package to install for rustc's LLVM.
pub fn package(llvm_major: u32) -> String {
    format!("bolt-{llvm_major}")
}

/// Finds llvm-bolt and merge-fdata: `llvm-bolt-<major>` (rustc's LLVM) on PATH or in
/// `/usr/lib/llvm-<major>/bin`, then other versions, newest first, then unversioned ones.
pub fn find(llvm_major: u32, path_dirs: &[PathBuf]) -> Option<BoltTools> {
    let mut versions: BTreeSet<u32> = BTreeSet::new();
    for dir in path_dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(v) = name.strip_prefix("llvm-bolt-").and_then(|v| v.parse().ok()) {
                versions.insert(v);
            }
        }
    }
    let mut order = vec![Some(llvm_major)];
    order.extend(
        versions
            .iter()
            .rev()
            .filter(|v| **v != llvm_major)
            .map(|v| Some(*v)),
    );
    order.push(None);
    for v in order {
        let (bolt, merge) = match v {
            Some(v) => (format!("llvm-bolt-{v}"), format!("merge-fdata-{v}")),
            None => ("llvm-bolt".to_string(), "merge-fdata".to_string()),
        };
        let mut dirs: Vec<PathBuf> = path_dirs.to_vec();
        if let Some(v) = v {
            // Debian's unversioned names live here.
            let lib = PathBuf::from(format!("/usr/lib/llvm-{v}/bin"));
            for (b, m) in [(lib.join("llvm-bolt"), lib.join("merge-fdata"))] {
                if b.is_file() && m.is_file() {
                    return Some(tools(b, m));
                }
            }
            dirs.retain(|d| d.join(&bolt).is_file());
        }
        for dir in dirs {
            let (b, m) = (dir.join(&bolt), dir.join(&merge));
            if b.is_file() && m.is_file() {
                return Some(tools(b, m));
            }
        }
    }
    None
}

fn tools(llvm_bolt: PathBuf, merge_fdata: PathBuf) -> BoltTools {
    let version = Cmd::new(llvm_bolt.display().to_string())
        .arg("--version")
        .read()
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.contains("LLVM version"))
                .map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "unknown version".into());
    BoltTools {
        llvm_bolt,
        merge_fdata,
        version,
    }
}

/// What llvm-bolt said about an optimisation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BoltReport {
    /// "N out of M functions in the binary (X%) have non-empty execution profile".
    pub functions_profiled: u64,
    pub functions_total: u64,
    /// The dyno-stats after optimisation: (what, count, change as BOLT printed it).
    pub dyno: Vec<(String, u64, String)>,
}

/// Parses llvm-bolt's output (stdout and stderr together).
pub fn parse_report(text: &str) -> Result<BoltReport> {
    let mut r = BoltReport::default();
    let line = text
        .lines()
        .find(|l| l.contains("have non-empty execution profile"))
        .context("llvm-bolt did not say how many functions have a profile (no \"have non-empty execution profile\" line)")?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == "out")
        .context("unexpected profile line")?;
    r.functions_profiled = words[at - 1]
        .parse()
        .context("the profiled-function count")?;
    r.functions_total = words[at + 2].parse().context("the function count")?;
    // Dyno-stats after optimisation: the lines with a change in parentheses.
    for l in text.lines() {
        let Some((count, rest)) = l.trim().split_once(" : ") else {
            continue;
        };
        let Ok(count) = count.trim().parse::<u64>() else {
            continue;
        };
        if let (Some(open), true) = (rest.rfind(" ("), rest.ends_with(')')) {
            let what = rest[..open].trim().to_string();
            let change = rest[open + 2..rest.len() - 1].to_string();
            r.dyno.push((what, count, change));
        }
    }
    Ok(r)
}

/// The demangled names of the functions a `.fdata` profile counts (BOLT's text format: `1
/// <from function> <offset> 1 <to function> <offset> <mispredictions> <count>`).
pub fn fdata_functions(text: &str) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.is_empty() || fields[0] == "no_lbr" || fields[0] == "boltedcollection" {
            continue;
        }
        if fields.len() != 8 {
            bail!(
                "line {}: {} fields, a branch record has 8: {line:?}",
                i + 1,
                fields.len()
            );
        }
        let count: u64 = fields[7]
            .parse()
            .with_context(|| format!("line {}: the count `{}`", i + 1, fields[7]))?;
        if count == 0 {
            continue;
        }
        for f in [fields[1], fields[4]] {
            // A local symbol carries `/<n>`: its file's index, not part of the name.
            let name = f.split('/').next().unwrap_or(f);
            out.insert(format!("{:#}", rustc_demangle::demangle(name)));
        }
    }
    Ok(out)
}

/// The functions a merged `.fdata` profile file counts; an unreadable, empty or malformed
/// file, or one without a single non-zero count, is an error naming the file and the fix.
pub fn read_fdata(path: &Path) -> Result<BTreeSet<String>> {
    const FIX: &str = "a BOLT profile is merge-fdata's output for this relinked executable, \
        as `cargo xtask pgo bolt` writes it to pgo-data/bolt/merged.fdata; remove `bolt.profile` to train one";
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read the BOLT profile {}", path.display()))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        bail!("the BOLT profile {} is empty: {FIX}", path.display());
    }
    let Ok(text) = std::str::from_utf8(&bytes) else {
        bail!("the BOLT profile {} is not text: {FIX}", path.display());
    };
    let functions = fdata_functions(text).map_err(|e| {
        anyhow::anyhow!(
            "the BOLT profile {} is corrupt ({e:#}): {FIX}",
            path.display()
        )
    })?;
    if functions.is_empty() {
        bail!(
            "the BOLT profile {} counts no branch (every count is 0): {FIX}",
            path.display()
        );
    }
    Ok(functions)
}

/// Whether an ELF executable kept its relocations (a `.rela.text` section, from
/// `-Wl,-q` / `--emit-relocs`): BOLT needs them to move functions.
pub fn has_relocations(exe: &Path) -> Result<bool> {
    let bytes = std::fs::read(exe).with_context(|| format!("cannot read {}", exe.display()))?;
    let names = section_names(&bytes)
        .with_context(|| format!("{} is not a 64-bit little-endian ELF file", exe.display()))?;
    Ok(names.iter().any(|n| n == ".rela.text"))
}

/// Fails, naming the file and the fix, unless `exe` kept its relocations.
pub fn require_relocations(exe: &Path) -> Result<()> {
    if !has_relocations(exe)? {
        bail!(
            "{} has no relocations (.rela.text): BOLT cannot move its code. Link it with `-Clink-arg=-Wl,-q` \
             (--emit-relocs); a RUSTC_WRAPPER or a linker setting may have dropped it",
            exe.display()
        );
    }
    Ok(())
}

/// What `bolt.enabled` and the tools found make of the stage: run it, or skip it saying
/// why; an error when it is required and the tools are missing.
pub fn decide(
    enabled: crate::config::BoltEnabled,
    tools: Option<&BoltTools>,
    llvm_major: u32,
) -> Result<Result<&BoltTools, String>> {
    use crate::config::BoltEnabled;
    let package = package(llvm_major);
    match (enabled, tools) {
        (BoltEnabled::Off, _) => Ok(Err("bolt.enabled = false".into())),
        (BoltEnabled::Auto, None) => Ok(Err(format!(
            "llvm-bolt not found; install it with `apt-get install {package}`"
        ))),
        (BoltEnabled::On, None) => bail!(
            "bolt.enabled = true, but no llvm-bolt and merge-fdata were found on PATH or in /usr/lib/llvm-*/bin; \
             install them with `apt-get install {package}`, or set bolt.enabled = \"auto\""
        ),
        (_, Some(tools)) => Ok(Ok(tools)),
    }
}

fn section_names(b: &[u8]) -> Option<Vec<String>> {
    if b.get(..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let shoff = u64_at(0x28)? as usize;
    let shentsize = u16_at(0x3a)? as usize;
    let shnum = u16_at(0x3c)? as usize;
    let shstrndx = u16_at(0x3e)? as usize;
    let strtab = shoff + shstrndx * shentsize;
    let str_off = u64_at(strtab + 0x18)? as usize;
    let mut names = Vec::new();
    for i in 0..shnum {
        let name_off =
            u32::from_le_bytes(b.get(shoff + i * shentsize..)?.get(..4)?.try_into().ok()?);
        let start = str_off + name_off as usize;
        let end = start + b.get(start..)?.iter().position(|&c| c == 0)?;
        names.push(String::from_utf8_lossy(&b[start..end]).into_owned());
    }
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llvm-bolt 22.1.8's output on mty-bench (abridged to the lines read).
    const REPORT: &str = "BOLT-INFO: pre-processing profile using branch profile reader
BOLT-INFO: 256 out of 946 functions in the binary (27.1%) have non-empty execution profile
BOLT-INFO: 7 functions with profile could not be optimized
BOLT-INFO: program-wide dynostats after all optimizations before SCTC and FOP:
            16632245 : taken forward branches
            30185678 : taken branches
             6677866 : taken forward branches (-59.8%)
             1387112 : taken jump table branches (=)
            17381414 : taken branches (-42.4%)
";

    #[test]
    fn reads_bolts_profile_line_and_dyno_stats() {
        let r = parse_report(REPORT).unwrap();
        assert_eq!((r.functions_profiled, r.functions_total), (256, 946));
        assert_eq!(
            r.dyno,
            [
                (
                    "taken forward branches".to_string(),
                    6677866,
                    "-59.8%".to_string()
                ),
                (
                    "taken jump table branches".to_string(),
                    1387112,
                    "=".to_string()
                ),
                ("taken branches".to_string(), 17381414, "-42.4%".to_string()),
            ]
        );
        let err = parse_report("BOLT-ERROR: nothing").unwrap_err().to_string();
        assert!(err.contains("have non-empty execution profile"), "{err}");
    }

    #[test]
    fn reads_the_functions_of_an_fdata_profile() {
        // Real records of mty-bench's training (llvm-bolt 22 instrumentation).
        let fdata = "1 _ZN11mty_runtime7mailbox22MailboxSender$LT$M$GT$4send28_$u7b$$u7b$closure$u7d$$u7d$17h45289db598ff230cE/1 59b 1 _ZN11mty_runtime7mailbox22MailboxSender$LT$M$GT$4send28_$u7b$$u7b$closure$u7d$$u7d$17h45289db598ff230cE/1 5a1 0 27268
1 _ZN12hdrhistogram18Histogram$LT$T$GT$17value_at_quantile17h2e6a8816cc7c39ffE/1 238 1 _ZN12hdrhistogram18Histogram$LT$T$GT$17value_at_quantile17h2e6a8816cc7c39ffE/1 342 0 0
";
        let f = fdata_functions(fdata).unwrap();
        assert_eq!(
            f.into_iter().collect::<Vec<_>>(),
            ["mty_runtime::mailbox::MailboxSender<M>::send::{{closure}}"],
            "a record counted zero times does not count"
        );
        let err = fdata_functions("1 a 0 1 b\n").unwrap_err().to_string();
        assert!(err.contains("line 1: 5 fields"), "{err}");
    }

    #[test]
    fn a_given_profile_file_that_is_empty_corrupt_or_all_zero_is_refused_naming_it() {
        let dir = std::env::temp_dir().join(format!("mty-fdata-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good =
            "1 _ZN3foo3bar17h0123456789abcdefE 10 1 _ZN3foo3bar17h0123456789abcdefE 20 0 7\n";
        for (name, bytes, says) in [
            ("empty.fdata", &b"\n"[..], "is empty: "),
            (
                "cut.fdata",
                &good.as_bytes()[..40],
                "is corrupt (line 1: 5 fields",
            ),
            ("binary.fdata", &[0xff, 0xfe, 0x00][..], "is not text: "),
            (
                "zero.fdata",
                &good.replace(" 7\n", " 0\n").into_bytes()[..],
                "counts no branch",
            ),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, bytes).unwrap();
            let err = format!("{:#}", read_fdata(&path).unwrap_err());
            assert!(
                err.starts_with(&format!("the BOLT profile {} ", path.display()))
                    && err.contains(says)
                    && err.contains("remove `bolt.profile` to train one"),
                "{name}: {err}"
            );
        }
        let path = dir.join("good.fdata");
        std::fs::write(&path, good).unwrap();
        assert_eq!(
            read_fdata(&path).unwrap().into_iter().collect::<Vec<_>>(),
            ["foo::bar"]
        );
        let missing = dir.join("missing.fdata");
        let err = format!("{:#}", read_fdata(&missing).unwrap_err());
        assert!(
            err.starts_with(&format!(
                "cannot read the BOLT profile {}",
                missing.display()
            )),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tells_an_executable_with_relocations_from_one_without() {
        // This test binary itself: linked without -Wl,-q.
        let me = std::env::current_exe().unwrap();
        assert!(!has_relocations(&me).unwrap());
        let err = require_relocations(&me).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("{} has no relocations (.rela.text)", me.display()))
                && err.contains("Link it with `-Clink-arg=-Wl,-q`"),
            "{err}"
        );
        let err = has_relocations(Path::new("/etc/hostname"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("is not a 64-bit little-endian ELF file"),
            "{err}"
        );
    }

    #[test]
    fn bolt_enabled_runs_skips_or_refuses() {
        use crate::config::BoltEnabled;
        let tools = BoltTools {
            llvm_bolt: "/usr/bin/llvm-bolt-22".into(),
            merge_fdata: "/usr/bin/merge-fdata-22".into(),
            version: "LLVM version 22".into(),
        };
        for on in [BoltEnabled::Auto, BoltEnabled::On] {
            assert_eq!(decide(on, Some(&tools), 22).unwrap(), Ok(&tools));
        }
        assert_eq!(
            decide(BoltEnabled::Off, Some(&tools), 22).unwrap(),
            Err("bolt.enabled = false".to_string())
        );
        assert_eq!(
            decide(BoltEnabled::Auto, None, 22).unwrap(),
            Err("llvm-bolt not found; install it with `apt-get install bolt-22`".to_string())
        );
        let err = decide(BoltEnabled::On, None, 22).unwrap_err().to_string();
        assert!(
            err.starts_with("bolt.enabled = true, but no llvm-bolt")
                && err.contains("`apt-get install bolt-22`"),
            "{err}"
        );
    }

    #[test]
    fn prefers_rustcs_llvm_major_then_the_newest() {
        let dir = std::env::temp_dir().join(format!("xtask-bolt-find-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in [
            "llvm-bolt-19",
            "merge-fdata-19",
            "llvm-bolt-21",
            "merge-fdata-21",
        ] {
            std::fs::write(dir.join(name), "#!/bin/sh\necho 'LLVM version 0'\n").unwrap();
        }
        let found = find(99, std::slice::from_ref(&dir)).map(|t| t.llvm_bolt);
        // rustc's 99 is not there; 21 is the newest here (a real /usr/lib/llvm-99 is not).
        assert_eq!(found, Some(dir.join("llvm-bolt-21")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
