//! One session's copies of its arms' executables (`measure.fresh_copies`), and the sweep of
//! what killed runs left behind.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};

use crate::config::Measure;

/// One session's copies of its arms' executables (`measure.fresh_copies`): each arm's bytes in
/// a new file, `<dir>/<pid>-<session seed>/<arm index>/<its file name>` (the name kept, for a
/// program that looks at its own), removed when dropped. A new file gets pages of its own in
/// the page cache, placed and grouped into folios anew: what stays with a file varies from
/// session to session instead of with a build for a whole run.
pub(super) struct Copies {
    dir: PathBuf,
    /// Each arm's file, in the arms' order.
    pub(super) exes: Vec<PathBuf>,
    /// Seconds the copying took.
    pub(super) secs: f64,
}

impl Copies {
    /// Copies of `arms` (each its name and executable) for the session of `seed`.
    pub(super) fn write(cfg: &Measure, seed: u64, arms: &[(&str, &Path)]) -> Result<Copies> {
        let started = Instant::now();
        let root = cfg
            .copies_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("mty-copies"));
        let dir = root.join(format!("{}-{seed:016x}", std::process::id()));
        let mut copies = Copies {
            dir,
            exes: Vec::new(),
            secs: 0.0,
        };
        for (i, &(arm, exe)) in arms.iter().enumerate() {
            // A bare name looked up on PATH (or a missing file) is run as it is: spawning it
            // says what is wrong.
            let (Some(name), true) = (exe.file_name(), exe.is_file()) else {
                copies.exes.push(exe.to_path_buf());
                continue;
            };
            // Indices of one width: every copy's path has the same length.
            let to = copies.dir.join(format!("{i:03}")).join(name);
            let parent = to.parent().expect("joined above");
            std::fs::create_dir_all(parent)
                .and_then(|()| std::fs::copy(exe, &to))
                .with_context(|| {
                    format!(
                        "copying arm `{}`'s executable {} to {} (`measure.fresh_copies`; free some space there, or set it to false)",
                        arm,
                        exe.display(),
                        to.display()
                    )
                })?;
            copies.exes.push(to);
        }
        copies.secs = started.elapsed().as_secs_f64();
        Ok(copies)
    }
}

impl Drop for Copies {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes what killed runs left in `cfg`'s copies folder: the folders of processes that
/// no longer exist.
pub fn sweep(cfg: &Measure) {
    let Some(root) = &cfg.copies_dir else { return };
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let alive = name
            .split_once('-')
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
            .is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
