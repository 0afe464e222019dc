//! What each build cost: its wall time and peak memory, recorded beside its target folder
//! whenever cargo compiled something for it (a fresh build keeps the figures of the build
//! that made its executable), and its executable's size and `.text` size, read at report time.
//! A user deciding on fat LTO weighs these beside its speed.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::base::fsx;
use crate::toolchain::build::Built;

/// The record a compiling build leaves in its target folder.
pub const FILE: &str = "mty-build-cost.json";

/// One build's compile, as recorded when cargo compiled for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compiled {
    /// `cargo build`'s wall time, s.
    pub wall_secs: f64,
    /// The largest resident set of any process of the build, in bytes: what `wait4` reports
    /// for cargo, the largest of it and every process it waited for (usually the fat-LTO
    /// rustc of the final crate, or the link).
    pub peak_rss_bytes: u64,
    /// Crates cargo compiled (a build that found most of them fresh cost less than a whole one).
    pub crates: u64,
    /// When, in seconds since the epoch.
    pub unix_secs: u64,
}

/// Records `c` in `target_dir` (atomically: a reader never sees half of it).
pub fn record(target_dir: &Path, c: &Compiled) -> Result<()> {
    fsx::write_json(&target_dir.join(FILE), c)
}

/// One build's cost, as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildCost {
    pub build: String,
    /// The last compile that made this build's executable; `None` where no record was left
    /// (built before xtask recorded costs, or the record was removed).
    pub compiled: Option<Compiled>,
    /// The executable's size, bytes (`None` where it is gone: a report rendered again after
    /// its target folder was cleaned).
    pub exe_bytes: Option<u64>,
    /// Its `.text` section's size, bytes (`None` where it is gone or not an ELF file with one).
    pub text_bytes: Option<u64>,
}

impl BuildCost {
    /// Its row as words: build, built in, crates, peak memory, binary, `.text` ("-" where
    /// not recorded or gone), for the terminal's table and report.md's.
    pub fn cells(&self) -> [String; 6] {
        let (secs, crates, rss) = match &self.compiled {
            Some(c) => (
                format!("{:.1} s", c.wall_secs),
                c.crates.to_string(),
                bytes(c.peak_rss_bytes),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        [
            self.build.clone(),
            secs,
            crates,
            rss,
            self.exe_bytes.map_or("-".into(), bytes),
            self.text_bytes.map_or("-".into(), bytes),
        ]
    }
}

/// `built`'s cost: its record in `target_root`'s folder for it, its executable's sizes. What
/// cannot be read is left out with a warning: a cost table never fails a report.
pub fn of(built: &Built, target_root: &Path) -> BuildCost {
    let warn = |what: &str, err: anyhow::Error| {
        eprintln!(
            "warning: {}'s {what} is left out of the build costs: {err:#}",
            built.name()
        );
    };
    let record = target_root.join(built.build.target_folder()).join(FILE);
    let compiled = match record.is_file() {
        true => fsx::read_json(&record, "a build's cost record")
            .map_err(|e| warn("compile", e))
            .ok(),
        false => None,
    };
    let exe_bytes = std::fs::metadata(&built.exe).ok().map(|m| m.len());
    let text_bytes = match exe_bytes {
        Some(_) => text_size(&built.exe)
            .map_err(|e| warn(".text size", e))
            .ok()
            .flatten(),
        None => None,
    };
    BuildCost {
        build: built.name().to_string(),
        compiled,
        exe_bytes,
        text_bytes,
    }
}

/// The size of the `.text` section of the ELF file `path`; `None` where it is not a 64-bit
/// little-endian ELF file or has no `.text`. Fails only when the file cannot be read or its
/// section table points outside it.
pub fn text_size(path: &Path) -> Result<Option<u64>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    // ELFCLASS64, ELFDATA2LSB.
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
        return Ok(None);
    }
    let corrupt = || {
        format!(
            "{}: its ELF section table points outside the file",
            path.display()
        )
    };
    // Offsets come from the file: every sum is checked, so a crafted one is an error, not an
    // overflow.
    let field = |at: Option<usize>, len: usize| -> Option<u64> {
        let at = at?;
        let raw = bytes.get(at..at.checked_add(len)?)?;
        let mut word = [0u8; 8];
        word[..len].copy_from_slice(raw);
        Some(u64::from_le_bytes(word))
    };
    let num = |v: u64| usize::try_from(v).ok();
    let (shoff, shentsize, shnum, shstrndx) = (
        field(Some(0x28), 8).and_then(num).with_context(corrupt)?,
        field(Some(0x3a), 2).and_then(num).with_context(corrupt)?,
        field(Some(0x3c), 2).and_then(num).with_context(corrupt)?,
        field(Some(0x3e), 2).and_then(num).with_context(corrupt)?,
    );
    // No sections, or their names' section past the first header (SHN_XINDEX): not read here.
    if shnum == 0 || shstrndx >= 0xff00 {
        return Ok(None);
    }
    if shentsize < 0x28 || shstrndx >= shnum {
        bail!(corrupt());
    }
    // A section header: name (u32, an offset into the names' section), …, offset at 0x18,
    // size at 0x20.
    let header = |i: usize, plus: usize| {
        i.checked_mul(shentsize)
            .and_then(|o| o.checked_add(shoff))
            .and_then(|o| o.checked_add(plus))
    };
    let names = field(header(shstrndx, 0x18), 8)
        .and_then(num)
        .with_context(corrupt)?;
    for i in 0..shnum {
        let name_at = field(header(i, 0), 4)
            .and_then(num)
            .and_then(|n| n.checked_add(names))
            .with_context(corrupt)?;
        let name = bytes.get(name_at..).with_context(corrupt)?;
        if name.starts_with(b".text\0") {
            return Ok(Some(field(header(i, 0x20), 8).with_context(corrupt)?));
        }
    }
    Ok(None)
}

/// Every build's cost and the training's wall time: report.json's `costs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    pub builds: Vec<BuildCost>,
    /// The training stage's wall time, s (`None`: a run from a stored profile, or a training
    /// recorded before it was timed).
    pub training_secs: Option<f64>,
}

impl Costs {
    /// The costs of `builds` (their records under `target_root`) and of the training.
    pub fn of<'a>(
        builds: impl IntoIterator<Item = &'a Built>,
        target_root: &Path,
        training_secs: Option<f64>,
    ) -> Costs {
        Costs {
            builds: builds.into_iter().map(|b| of(b, target_root)).collect(),
            training_secs,
        }
    }

    /// The terminal's table: one line a build, then the training.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{:<14} {:>10} {:>7} {:>12} {:>11} {:>11}\n",
            "build cost", "built in", "crates", "peak memory", "binary", ".text"
        );
        for b in &self.builds {
            let [build, secs, crates, rss, exe, text] = b.cells();
            out += &format!("{build:<14} {secs:>10} {crates:>7} {rss:>12} {exe:>11} {text:>11}\n");
        }
        out += &match self.training_secs {
            Some(t) => format!("training: {t:.1} s on the instrumented build\n"),
            None => "training: not timed (no training in this pgo-data)\n".to_string(),
        };
        out += "built in and peak memory are each build's last compile (\"-\": none recorded); a build cargo found fresh keeps them";
        out
    }
}

/// `n` bytes in KiB, MiB or GiB, one decimal.
pub fn bytes(n: u64) -> String {
    let n = n as f64;
    match n {
        _ if n >= 1024.0 * 1024.0 * 1024.0 => format!("{:.1} GiB", n / (1024.0 * 1024.0 * 1024.0)),
        _ if n >= 1024.0 * 1024.0 => format!("{:.1} MiB", n / (1024.0 * 1024.0)),
        _ => format!("{:.1} KiB", n / 1024.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test's own executable: an ELF file with a `.text`, smaller than the file.
    #[test]
    fn text_size_reads_a_real_executable() {
        let me = std::env::current_exe().unwrap();
        let text = text_size(&me).unwrap().expect("a .text section");
        let size = std::fs::metadata(&me).unwrap().len();
        assert!(text > 0 && text < size, "{text} of {size}");
    }

    /// Not an ELF file: no size, no error. A cut one: an error naming it.
    #[test]
    fn text_size_of_other_files_and_a_cut_one() {
        let dir = std::env::temp_dir().join(format!("mty-cost-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("script.sh");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        assert_eq!(text_size(&script).unwrap(), None);
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let cut = dir.join("cut");
        std::fs::write(&cut, &me[..4096]).unwrap();
        let err = text_size(&cut).unwrap_err().to_string();
        assert!(
            err.contains("points outside the file") && err.contains("cut"),
            "{err}"
        );
        // A section table offset at the top of the address space: an error, not an overflow.
        let mut crafted = me.clone();
        crafted[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        let far = dir.join("far");
        std::fs::write(&far, &crafted).unwrap();
        let err = text_size(&far).unwrap_err().to_string();
        assert!(err.contains("points outside the file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A build's record is read back beside its executable's sizes; one without a record
    /// says so in the table.
    #[test]
    fn costs_read_the_record_and_render_a_line_a_build() {
        let root = std::env::temp_dir().join(format!("mty-costs-{}", std::process::id()));
        let folder = root.join(crate::toolchain::build::Build::Release.target_folder());
        std::fs::create_dir_all(&folder).unwrap();
        let compiled = Compiled {
            wall_secs: 12.5,
            peak_rss_bytes: 3 << 29,
            crates: 42,
            unix_secs: 1,
        };
        record(&folder, &compiled).unwrap();
        let me = std::env::current_exe().unwrap();
        let release = Built::new(
            crate::toolchain::build::Build::Release,
            me.clone(),
            String::new(),
        );
        let lto = Built::new(crate::toolchain::build::Build::Lto, me, String::new());
        // A build whose executable is gone (its target folder cleaned): no sizes, no error.
        let gone = Built::new(
            crate::toolchain::build::Build::Oracle,
            root.join("gone"),
            String::new(),
        );
        let costs = Costs::of([&release, &lto, &gone], &root, Some(3.25));
        assert_eq!(
            (costs.builds[2].exe_bytes, costs.builds[2].text_bytes),
            (None, None)
        );
        assert_eq!(costs.builds[0].compiled.as_ref(), Some(&compiled));
        assert_eq!(costs.builds[1].compiled, None);
        assert!(costs.builds[1].text_bytes.is_some());
        let table = costs.render();
        let line = |name: &str| {
            table
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap()
                .to_string()
        };
        assert!(
            line("release").contains("12.5 s") && line("release").contains("1.5 GiB"),
            "{table}"
        );
        assert!(line("lto").contains(" - "), "{table}");
        assert!(
            table.contains("training: 3.2 s") || table.contains("training: 3.3 s"),
            "{table}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn bytes_in_binary_units() {
        assert_eq!(bytes(512), "0.5 KiB");
        assert_eq!(bytes(3 * 1024 * 1024 / 2), "1.5 MiB");
        assert_eq!(bytes(2 * 1024 * 1024 * 1024), "2.0 GiB");
    }
}
