//! `cargo xtask pgo --against REV`: another commit's `release` and `lto+pgo`, measured as
//! arms of this run's own lockstep sessions, so "did this commit make the mailbox slower?" is
//! answered side by side, in the same sessions, with the same A/A floor and verdict rule: the
//! only comparison this machine's drift allows (two runs' figures never are).
//!
//! The revision is checked out in a git worktree under `target/against/<commit>/` and built
//! there by this run's own stages, with its own training: instrumented, trained on this
//! config's `[train]` workloads, merged, `lto+pgo` with the apply check, and `release`. Its
//! artifacts stay in that worktree (`pgo-data/`, `target/pgo/`), so a second run against the
//! same commit finds them up to date.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::ctx::Ctx;
use super::runner::Timer;
use super::stage::merge::ProfileSource;
use super::stage::{instrument, merge, optimize, train};
use crate::base::exec::Cmd;
use crate::flags::CommonFlags;
use crate::toolchain::build::{Build, Built};
use crate::toolchain::tools::Toolchain;

/// Builds `rev`'s release and lto+pgo in its worktree.
pub(super) fn build(ctx: &Ctx, toolchain: &Toolchain, rev: &str) -> Result<AgainstBuilds> {
    let root = &ctx.ws.root;
    let commit = git(root)
        .args(["rev-parse", "--verify", "--quiet", &format!("{rev}^{{commit}}")])
        .read()
        .with_context(|| {
            format!(
                "`--against {rev}`: git knows no commit by that name in {} (give a hash, tag, branch or HEAD~N of this repository)",
                root.display()
            )
        })?
        .trim()
        .to_string();
    let dir = root.join("target/against").join(&commit[..12]);
    worktree(root, &dir, &commit)?;
    eprintln!(
        "against: {rev} is {commit}: its release and lto+pgo, trained on its own instrumented build, in {}",
        dir.display()
    );
    let theirs = Ctx::open_at(
        &dir,
        &CommonFlags {
            config: Some(ctx.config.path.clone()),
            manifest_path: None,
            pgo_data: Some(dir.join("pgo-data")),
            target_dir: Some(dir.join("target/pgo")),
            wait: false,
        },
    )
    .with_context(|| format!("`--against {rev}`: the worktree {}", dir.display()))?;
    let mut timer = Timer::default();
    let built = (|| -> Result<AgainstBuilds> {
        let instrumented = instrument::run(&theirs, toolchain, &mut timer)?;
        let training = train::run(&theirs, toolchain, &mut timer, &instrumented)?;
        let source = ProfileSource::Training {
            training: &training,
            skip_bad: false,
        };
        let merged = merge::run(&theirs, toolchain, &mut timer, source)?;
        let optimized = optimize::run(&theirs, toolchain, &mut timer, &merged, false)?;
        let (release, _) =
            theirs.build(toolchain, Build::Release, Build::Release.rustflags(None))?;
        Ok(AgainstBuilds {
            rev: rev.to_string(),
            commit: commit.clone(),
            release,
            lto_pgo: optimized.build,
        })
    })();
    built.with_context(|| format!("`--against {rev}`: building {commit} in {}", dir.display()))
}

fn git(root: &Path) -> Cmd {
    Cmd::new("git").args(["-C".to_string(), root.display().to_string()])
}

/// A detached worktree of `commit` at `dir`: kept when it is one already, else made afresh.
fn worktree(root: &Path, dir: &Path, commit: &str) -> Result<()> {
    if dir.join(".git").exists()
        && let Ok(head) = git(dir).args(["rev-parse", "HEAD"]).read()
    {
        if head.trim() == commit {
            return Ok(());
        }
        bail!(
            "{} is a worktree of {}, not of {commit}: remove it (`git worktree remove --force {}`)",
            dir.display(),
            head.trim(),
            dir.display()
        );
    }
    // What an interrupted `worktree add` left, and git's record of it.
    if dir.exists() {
        std::fs::remove_dir_all(dir)
            .with_context(|| format!("cannot remove the unfinished worktree {}", dir.display()))?;
    }
    git(root).args(["worktree", "prune"]).read()?;
    git(root)
        .args(["worktree", "add", "--detach", "--quiet"])
        .arg(dir.display().to_string())
        .arg(commit)
        .read()
        .with_context(|| format!("cannot check {commit} out into {}", dir.display()))?;
    Ok(())
}

/// `--against REV`: another commit's `release` and `lto+pgo`, built from its own worktree
/// with its own training, measured beside this tree's builds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgainstBuilds {
    /// The revision as given (`HEAD~3`, a tag, a hash).
    pub rev: String,
    /// The commit it names, in full.
    pub commit: String,
    pub release: Built,
    pub lto_pgo: Built,
}

impl AgainstBuilds {
    /// The commit's short hash: the prefix of its arms' names.
    pub fn short(&self) -> &str {
        &self.commit[..self.commit.len().min(12)]
    }

    /// Its builds under their arm names (`<short>:release`, `<short>:lto+pgo`), each with the
    /// name of this tree's build it is compared with.
    pub fn arms(&self) -> [(String, &Built, &'static str); 2] {
        [
            (
                format!("{}:{}", self.short(), self.release.name()),
                &self.release,
                self.release.name(),
            ),
            (
                format!("{}:{}", self.short(), self.lto_pgo.name()),
                &self.lto_pgo,
                self.lto_pgo.name(),
            ),
        ]
    }
}
