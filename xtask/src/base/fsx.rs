//! File helpers: atomic writes (temporary file, then rename) and content hashes.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Writes `bytes` to `path` so that readers see the old file or the whole new one, never a
/// half-written one: write a temporary file beside it, sync, rename over.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create directory {}", dir.display()))?;
    let tmp = temp_path(path);
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()
    };
    if let Err(err) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(err).with_context(|| format!("cannot write {}", path.display()));
    }
    rename(&tmp, path)
}

/// Renames, naming both paths on failure and removing the source then.
pub fn rename(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to).map_err(|err| {
        let _ = std::fs::remove_file(from);
        anyhow::Error::new(err).context(format!(
            "cannot move {} to {}",
            from.display(),
            to.display()
        ))
    })
}

/// Moves a content-addressed `from` into place at `to`, unless `to` already holds the same
/// bytes: then the old file stays, with its modification time, and `from` is removed. (rustc
/// records a `-Cprofile-use` file as a dependency, so cargo rebuilds when its time changes.)
pub fn rename_content_addressed(from: &Path, to: &Path) -> Result<()> {
    if to.is_file() && file_hash(to)? == file_hash(from)? {
        std::fs::remove_file(from).with_context(|| format!("cannot remove {}", from.display()))?;
        return Ok(());
    }
    rename(from, to)
}

/// Copies `from` to `to` (its permissions too) through a temporary file renamed into place,
/// making `to`'s folder.
pub fn copy_atomic(from: &Path, to: &Path) -> Result<()> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let tmp = temp_path(to);
    std::fs::copy(from, &tmp)
        .with_context(|| format!("cannot copy {} to {}", from.display(), tmp.display()))?;
    rename(&tmp, to)
}

/// A sibling of `path` for a temporary file: `.<name>.tmp-<pid>`.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// Appends one line in a single write (O_APPEND), so concurrent readers never see half of it.
pub fn append_line(path: &Path, line: &str) -> Result<()> {
    let mut text = line.trim_end().to_string();
    text.push('\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("cannot append to {}", path.display()))
}

pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut text = serde_json::to_string_pretty(value).context("cannot serialize")?;
    text.push('\n');
    write_atomic(path, text.as_bytes())
}

pub fn read_json<T: DeserializeOwned>(path: &Path, what: &str) -> Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read {} ({what}); run the earlier stages first, or the whole `cargo xtask pgo`",
            path.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a valid {what}; rerun the stage that writes it",
            path.display()
        )
    })
}

/// A file's content hash, as 16 hex digits (the form every artifact name and fingerprint uses).
pub fn file_hash(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(format!("{:016x}", fnv1a64(&bytes)))
}

/// FNV-1a, 64 bits: a stable content hash for naming files (not for security).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_the_published_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn write_atomic_replaces_whole_files_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("xtask-fsx-{}", std::process::id()));
        let path = dir.join("a.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.json")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_content_addressed_file_with_the_same_bytes_keeps_its_time() {
        let dir = std::env::temp_dir().join(format!("xtask-fsx-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (tmp, to) = (dir.join("tmp"), dir.join("merged-x.profdata"));
        std::fs::write(&to, b"profile").unwrap();
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        std::fs::File::options()
            .write(true)
            .open(&to)
            .unwrap()
            .set_modified(old)
            .unwrap();
        std::fs::write(&tmp, b"profile").unwrap();
        rename_content_addressed(&tmp, &to).unwrap();
        assert!(!tmp.exists());
        assert_eq!(std::fs::metadata(&to).unwrap().modified().unwrap(), old);
        std::fs::write(&tmp, b"another").unwrap();
        rename_content_addressed(&tmp, &to).unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), b"another");
        assert_ne!(std::fs::metadata(&to).unwrap().modified().unwrap(), old);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
