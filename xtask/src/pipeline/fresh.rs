//! Stages that know when they are up to date.
//!
//! Each stage names its inputs ([`Inputs`]: the sources that go into mty-bench, the
//! toolchain, its config section, the content hashes of the artifacts it reads); their hash is
//! the stage's fingerprint, recorded beside its output in `pgo-data/stages/<stage>.inputs.json`.
//! A stage whose fingerprint matches the recorded one, and whose recorded artifacts are still
//! there with the same content hashes, is reused instead of run. Build stages always ask
//! cargo, which is the authority on what to recompile: they are up to date when the
//! fingerprint matches and cargo compiled nothing. Downstream stages key on the content
//! hashes of what upstream produced, so a rebuild that changes an executable's bytes reruns
//! what depends on it, and one that does not (a fresh build) reruns nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::base::fsx;
use crate::toolchain::build::Built;

/// A stage's inputs, by name: each a short text or a content hash.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inputs(BTreeMap<String, String>);

impl Inputs {
    pub fn new() -> Self {
        Inputs::default()
    }

    pub fn text(mut self, name: &str, value: impl Into<String>) -> Self {
        self.0.insert(name.to_string(), value.into());
        self
    }

    /// A value by its JSON form (a config section, a list of paths).
    pub fn json<T: Serialize>(self, name: &str, value: &T) -> Self {
        let text = serde_json::to_string(value).expect("config values serialise");
        self.text(name, format!("{:016x}", fsx::fnv1a64(text.as_bytes())))
    }

    /// A file by its content hash ("missing" when it is not there).
    pub fn file(self, name: &str, path: &Path) -> Result<Self> {
        let hash = if path.exists() {
            fsx::file_hash(path)?
        } else {
            "missing".to_string()
        };
        Ok(self.text(name, hash))
    }

    /// A finished build: its executable's content hash (of the file as it is now, not as
    /// recorded) and the flags it was built with.
    pub fn built(self, built: &Built) -> Result<Self> {
        let name = built.name();
        Ok(self
            .file(&format!("{name}.exe"), &built.exe)?
            .text(&format!("{name}.rustflags"), built.rustflags.clone()))
    }

    pub fn fingerprint(&self) -> String {
        let mut bytes = Vec::new();
        for (k, v) in &self.0 {
            bytes.extend_from_slice(k.as_bytes());
            bytes.push(0);
            bytes.extend_from_slice(v.as_bytes());
            bytes.push(0);
        }
        format!("{:016x}", fsx::fnv1a64(&bytes))
    }

    pub fn record(&self) -> Recorded {
        Recorded {
            fingerprint: self.fingerprint(),
            inputs: self.0.clone(),
        }
    }
}

/// What `pgo-data/stages/<stage>.inputs.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    pub fingerprint: String,
    pub inputs: BTreeMap<String, String>,
}

impl Recorded {
    /// The inputs that differ between this record and `now` (added, removed or changed).
    pub fn changed(&self, now: &Inputs) -> Vec<String> {
        let mut names: Vec<String> = now
            .0
            .iter()
            .filter(|(k, v)| self.inputs.get(*k) != Some(v))
            .map(|(k, _)| k.clone())
            .collect();
        names.extend(
            self.inputs
                .keys()
                .filter(|k| !now.0.contains_key(*k))
                .cloned(),
        );
        names.sort();
        names
    }
}

/// The artifacts a stage's output points to, with the content hashes they must still have
/// for the output to be reused; and how many crates cargo compiled to make it.
pub trait Artifacts {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)>;
    fn compiled(&self) -> u64 {
        0
    }
}

impl Artifacts for Built {
    fn artifacts(&self) -> Vec<(PathBuf, Option<String>)> {
        vec![(self.exe.clone(), Some(self.hash.clone()))]
    }
    fn compiled(&self) -> u64 {
        self.compiled
    }
}

/// Whether every artifact is there with its recorded hash; the first that is not, if any.
pub fn missing_artifact(out: &impl Artifacts) -> Result<Option<String>> {
    for (path, hash) in out.artifacts() {
        if !path.exists() {
            return Ok(Some(format!("{} is gone", path.display())));
        }
        if let Some(want) = hash {
            let got = fsx::file_hash(&path)
                .with_context(|| format!("checking the recorded {}", path.display()))?;
            if got != want {
                return Ok(Some(format!(
                    "{} changed since it was recorded (content hash {want} then, {got} now)",
                    path.display()
                )));
            }
        }
    }
    Ok(None)
}

/// A hash of the sources that go into the binary: every `.rs` file and `Cargo.toml` under
/// `dirs` (the workspace's packages it is built from: `runtime/` for mty-bench), the workspace
/// manifest and Cargo.lock. Skipped: the folders in `skip` (the target directories, pgo-data),
/// any folder named `target` or `pgo-data`, hidden ones, and every other file (a pipeline
/// config beside the sources is not a source: measuring differently must not stale a profile).
pub fn sources(root: &Path, dirs: &[PathBuf], skip: &[PathBuf]) -> Result<String> {
    let mut files = vec![root.join("Cargo.toml")];
    if root.join("Cargo.lock").is_file() {
        files.push(root.join("Cargo.lock"));
    }
    for dir in dirs {
        collect_sources(dir, skip, &mut files)?;
    }
    files.sort();
    files.dedup();
    let mut bytes = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(root).unwrap_or(file);
        bytes.extend_from_slice(rel.to_string_lossy().as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(
            &std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?,
        );
        bytes.push(0);
    }
    Ok(format!("{:016x}", fsx::fnv1a64(&bytes)))
}

fn collect_sources(dir: &Path, skip: &[PathBuf], out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            let skipped = path.file_name().is_none_or(|n| {
                let n = n.to_string_lossy();
                n == "target" || n == "pgo-data" || n.starts_with('.')
            });
            if !skipped && !skip.contains(&path) {
                collect_sources(&path, skip, out)?;
            }
        } else if path.extension().is_some_and(|x| x == "rs")
            || path.file_name().is_some_and(|n| n == "Cargo.toml")
        {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-fresh-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_fingerprint_changes_when_and_only_when_an_input_does() {
        let dir = tmp("inputs");
        let exe = dir.join("exe");
        std::fs::write(&exe, b"\x7fELF one").unwrap();
        let make = |config: &str, toolchain: &str| {
            Inputs::new()
                .text("toolchain", toolchain)
                .json("config.train", &config)
                .file("instrumented.exe", &exe)
                .unwrap()
        };
        let a = make("[train] n = 1", "rustc 1.95.0");
        // The same inputs, in another order of insertion: the same fingerprint.
        let again = Inputs::new()
            .file("instrumented.exe", &exe)
            .unwrap()
            .json("config.train", &"[train] n = 1")
            .text("toolchain", "rustc 1.95.0");
        assert_eq!(a.fingerprint(), again.fingerprint());
        assert!(a.record().changed(&again).is_empty());
        // One config key, the toolchain string, one byte of an artifact: each changes it,
        // and the record names what changed.
        let config = make("[train] n = 2", "rustc 1.95.0");
        assert_ne!(a.fingerprint(), config.fingerprint());
        assert_eq!(a.record().changed(&config), ["config.train"]);
        let toolchain = make("[train] n = 1", "rustc 1.96.0");
        assert_ne!(a.fingerprint(), toolchain.fingerprint());
        assert_eq!(a.record().changed(&toolchain), ["toolchain"]);
        std::fs::write(&exe, b"\x7fELF onf").unwrap();
        let byte = make("[train] n = 1", "rustc 1.95.0");
        assert_ne!(a.fingerprint(), byte.fingerprint());
        assert_eq!(a.record().changed(&byte), ["instrumented.exe"]);
        // A removed input is a change too.
        let fewer = Inputs::new().text("toolchain", "rustc 1.95.0");
        assert_eq!(
            a.record().changed(&fewer),
            ["config.train", "instrumented.exe"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_sources_hash_follows_a_source_byte_and_nothing_else() {
        let root = tmp("sources");
        for (path, text) in [
            ("Cargo.toml", "[workspace]"),
            ("Cargo.lock", "# lock"),
            ("runtime/src/lib.rs", "fn a() {}"),
            ("runtime/Cargo.toml", "[package]"),
        ] {
            let p = root.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let before = sources(&root, &[root.join("runtime")], &[]).unwrap();
        // Not sources: a build output under runtime/target and a text file.
        std::fs::create_dir_all(root.join("runtime/target")).unwrap();
        std::fs::write(root.join("runtime/target/x.rs"), "junk").unwrap();
        std::fs::write(root.join("runtime/NOTES.md"), "notes").unwrap();
        std::fs::write(root.join("runtime/pgo.toml"), "[measure]").unwrap();
        // A target directory of another name, given as skipped: a build script's output.
        std::fs::create_dir_all(root.join("runtime/out")).unwrap();
        std::fs::write(root.join("runtime/out/generated.rs"), "1").unwrap();
        let skipped = [root.join("runtime/out")];
        let with_skip = sources(&root, &[root.join("runtime")], &skipped).unwrap();
        std::fs::write(root.join("runtime/out/generated.rs"), "2").unwrap();
        assert_eq!(
            with_skip,
            sources(&root, &[root.join("runtime")], &skipped).unwrap()
        );
        std::fs::remove_dir_all(root.join("runtime/out")).unwrap();
        assert_eq!(
            before,
            sources(&root, &[root.join("runtime")], &[]).unwrap()
        );
        std::fs::write(root.join("runtime/src/lib.rs"), "fn a() { }").unwrap();
        assert_ne!(
            before,
            sources(&root, &[root.join("runtime")], &[]).unwrap()
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_changed_or_missing_artifact_prevents_reuse() {
        let dir = tmp("artifacts");
        let exe = dir.join("mty-bench");
        std::fs::write(&exe, b"binary").unwrap();
        let mut built = Built::new(
            crate::toolchain::build::Build::Release,
            exe.clone(),
            String::new(),
        );
        built.hash = fsx::file_hash(&exe).unwrap();
        assert_eq!(missing_artifact(&built).unwrap(), None);
        std::fs::write(&exe, b"binarz").unwrap();
        let why = missing_artifact(&built).unwrap().unwrap();
        assert!(why.contains("changed since it was recorded"), "{why}");
        std::fs::remove_file(&exe).unwrap();
        let why = missing_artifact(&built).unwrap().unwrap();
        assert!(why.ends_with("mty-bench is gone"), "{why}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
