//! What keeps pgo-data/ sound across runs: one pipeline at a time (an OS file lock that dies
//! with its process), no leftovers of an interrupted run, and the fingerprint that tells a
//! stale profile from a current one.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::base::fsx;
use crate::config::Config;

/// Held for the whole run; the OS releases it when the process ends, however it ends.
pub struct Lock {
    _file: File,
}

/// Takes `<data>/.lock`. Another holder: fail naming its process, or wait for it (`wait`).
pub fn lock(data: &Path, wait: bool) -> Result<Lock> {
    std::fs::create_dir_all(data).with_context(|| {
        format!("cannot create the artifact directory {}: is the path writable and a directory? (choose another with --pgo-data)", data.display())
    })?;
    let path = data.join(".lock");
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("cannot open the lock file {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let holder = holder(&mut file);
            if !wait {
                bail!(
                    "another `cargo xtask` run ({holder}) is using {}: it holds {}. Let it finish, or pass --wait to queue behind it",
                    data.display(),
                    path.display()
                );
            }
            eprintln!("waiting for the lock on {} ({holder}) ...", path.display());
            file.lock()
                .with_context(|| format!("cannot lock {}", path.display()))?;
        }
        Err(TryLockError::Error(err)) => {
            return Err(err).with_context(|| format!("cannot lock {}", path.display()));
        }
    }
    file.set_len(0)?;
    file.rewind()?;
    write!(file, "{}", std::process::id())?;
    Ok(Lock { _file: file })
}

fn holder(file: &mut File) -> String {
    let mut pid = String::new();
    let _ = file.read_to_string(&mut pid);
    match pid.trim() {
        "" => "process unknown".to_string(),
        pid => format!("process {pid}"),
    }
}

/// Removes temporary files an interrupted run left (`.<name>.tmp-<pid>`, see
/// [`fsx::temp_path`]) in `data`, its `stages/` and `callgrind/`. Call with the lock held.
pub fn remove_leftover_temps(data: &Path) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for dir in [
        data.to_path_buf(),
        data.join("stages"),
        data.join("callgrind"),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(|e| e.ok()) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.contains(".tmp-") {
                std::fs::remove_file(entry.path())
                    .with_context(|| format!("cannot remove {}", entry.path().display()))?;
                removed.push(entry.path());
            }
        }
    }
    Ok(removed)
}

/// A hash of everything a profile depends on: the toolchain, the training commands and
/// binary, and the sources ([`super::fresh::sources`]). A profile whose fingerprint differs from the
/// current one is stale.
pub fn fingerprint(sources: &str, rustc_vv: &str, config: &Config) -> Result<String> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(rustc_vv.as_bytes());
    bytes.extend_from_slice(config.binary.as_bytes());
    bytes.extend_from_slice(serde_json::to_string(&config.train.commands())?.as_bytes());
    bytes.extend_from_slice(sources.as_bytes());
    Ok(format!("{:016x}", fsx::fnv1a64(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-guard-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_second_lock_names_the_holder_and_the_first_release_frees_it() {
        let dir = tmp("lock");
        let first = lock(&dir, false).unwrap();
        let err = lock(&dir, false).err().unwrap().to_string();
        assert!(
            err.contains(&format!("(process {})", std::process::id())),
            "{err}"
        );
        assert!(err.contains("pass --wait"), "{err}");
        drop(first);
        // Freed: at once, unless another test's child forked while the lock's file was open
        // and holds it until its exec closes it (the lock is per open file): moments.
        let mut again = lock(&dir, false);
        for _ in 0..100 {
            if again.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            again = lock(&dir, false);
        }
        again.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_artifact_path_through_a_file_is_a_clear_error() {
        let dir = tmp("notdir");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("file"), b"x").unwrap();
        let err = lock(&dir.join("file/pgo-data"), false).err().unwrap();
        let text = format!("{err:#}");
        assert!(
            text.contains(&format!(
                "cannot create the artifact directory {}/file/pgo-data",
                dir.display()
            )),
            "{text}"
        );
        assert!(text.contains("Not a directory"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn leftover_temporaries_are_removed_and_nothing_else() {
        let dir = tmp("temps");
        std::fs::create_dir_all(dir.join("stages")).unwrap();
        std::fs::create_dir_all(dir.join("callgrind")).unwrap();
        for f in [
            ".report.json.tmp-123",
            "stages/.merge.json.tmp-9",
            "callgrind/.w.release.2000.out.tmp-77",
            "callgrind/w.release.2000.out",
            "report.json",
            ".lock",
        ] {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        let mut removed = remove_leftover_temps(&dir).unwrap();
        removed.sort();
        assert_eq!(
            removed,
            vec![
                dir.join(".report.json.tmp-123"),
                dir.join("callgrind/.w.release.2000.out.tmp-77"),
                dir.join("stages/.merge.json.tmp-9")
            ]
        );
        assert!(dir.join("report.json").exists() && dir.join(".lock").exists());
        assert!(dir.join("callgrind/w.release.2000.out").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_fingerprint_follows_toolchain_training_config_and_sources() {
        let root = crate::toolchain::cargo::project_root();
        let cfg = crate::config::load(&root.join("profiles/quick.toml"))
            .unwrap()
            .settings;
        let src = super::super::fresh::sources(&root, &[root.join("runtime")], &[]).unwrap();
        let a = fingerprint(&src, "rustc 1", &cfg).unwrap();
        assert_eq!(a, fingerprint(&src, "rustc 1", &cfg).unwrap());
        assert_ne!(a, fingerprint(&src, "rustc 2", &cfg).unwrap());
        let mut trained_more = cfg.clone();
        trained_more.train.workloads[0].args.push("--warmup".into());
        assert_ne!(a, fingerprint(&src, "rustc 1", &trained_more).unwrap());
        let mut measured_more = cfg.clone();
        measured_more.measure.lockstep.sessions += 1;
        assert_eq!(
            a,
            fingerprint(&src, "rustc 1", &measured_more).unwrap(),
            "measuring differently does not stale a profile"
        );

        // A source edit, on a copy of the layout.
        let fake = tmp("fingerprint");
        std::fs::create_dir_all(fake.join("runtime/src")).unwrap();
        std::fs::create_dir_all(fake.join("runtime/target")).unwrap();
        for (f, text) in [
            ("Cargo.toml", "[workspace]"),
            ("Cargo.lock", ""),
            ("runtime/src/lib.rs", "fn a() {}"),
            ("runtime/target/junk.rs", "1"),
        ] {
            std::fs::write(fake.join(f), text).unwrap();
        }
        let fake_src =
            || super::super::fresh::sources(&fake, &[fake.join("runtime")], &[]).unwrap();
        let before = fingerprint(&fake_src(), "rustc 1", &cfg).unwrap();
        std::fs::write(fake.join("runtime/target/junk.rs"), "2").unwrap();
        assert_eq!(
            before,
            fingerprint(&fake_src(), "rustc 1", &cfg).unwrap(),
            "build output is not a source"
        );
        std::fs::write(fake.join("runtime/src/lib.rs"), "fn a() { b() }").unwrap();
        assert_ne!(before, fingerprint(&fake_src(), "rustc 1", &cfg).unwrap());
        std::fs::remove_dir_all(&fake).unwrap();
    }
}
