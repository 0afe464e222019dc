//! Helpers shared by the end-to-end tests: the one good run they all work on, running xtask
//! on a config, config variants, reading what it wrote.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use serde_json::Value;

/// The artifacts of one good `cargo xtask pgo`: on quick.toml ([`good_run`]), or on the small
/// workspace of a registry crate's program ([`super::own_program::own_run`]).
pub struct GoodRun {
    pub tmp: PathBuf,
    pub data: PathBuf,
    pub target: PathBuf,
    /// What that run printed.
    pub stdout: String,
    pub stderr: String,
}

pub type Slot = Mutex<Option<Result<GoodRun, String>>>;

static GOOD_RUN: Slot = Mutex::new(None);

/// The good run, made by the first test that asks and shared by all of them: tests of one
/// binary run on threads of one process, so they take turns, each holding this for its whole
/// length, and each finds the artifacts as the good run left them (they are put back when
/// the guard drops, also when a test fails). Its target directory lives under cargo's
/// `CARGO_TARGET_TMPDIR` and is kept between `cargo test` runs, so only the first is cold
/// (`tests/compare.rs`, which runs before, builds release and the comparators into it).
pub fn good_run() -> Turn {
    turn(&GOOD_RUN, make_good_run)
}

/// A turn on the shared run held in `slot`, made by `make` if no test made it yet.
pub fn turn(slot: &'static Slot, make: fn() -> Result<GoodRun, String>) -> Turn {
    let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
    if slot.is_none() {
        *slot = Some(make());
    }
    let data = match slot.as_ref().unwrap() {
        Ok(run) => run.data.clone(),
        Err(why) => panic!("the good run that this test works on failed:\n{why}"),
    };
    Turn {
        snapshot: snapshot(&data),
        data,
        slot,
    }
}

fn make_good_run() -> Result<GoodRun, String> {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pgo-e2e");
    let (data, target) = (tmp.join("pgo-data"), tmp.join("target"));
    for dir in [&data, &tmp.join("scratch")] {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
    }
    std::fs::create_dir_all(tmp.join("scratch")).unwrap();
    let out = xtask(&["pgo"], &data, &target);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "cargo xtask pgo failed:\n{}\n{stdout}",
            stderr_of(&out)
        ));
    }
    Ok(GoodRun {
        tmp: tmp.join("scratch"),
        data,
        target,
        stdout,
        stderr: stderr_of(&out),
    })
}

/// One test's turn on the good run; puts the artifacts back as they were when dropped.
pub struct Turn {
    slot: MutexGuard<'static, Option<Result<GoodRun, String>>>,
    data: PathBuf,
    snapshot: BTreeMap<PathBuf, (Vec<u8>, SystemTime)>,
}

impl std::ops::Deref for Turn {
    type Target = GoodRun;
    fn deref(&self) -> &GoodRun {
        self.slot.as_ref().unwrap().as_ref().unwrap()
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let now = snapshot(&self.data);
        for path in now.keys().filter(|p| !self.snapshot.contains_key(*p)) {
            let _ = std::fs::remove_file(path);
        }
        for (path, was) in &self.snapshot {
            if now.get(path) != Some(was) {
                let _ = std::fs::create_dir_all(path.parent().unwrap());
                let _ = std::fs::write(path, &was.0);
                // Its time too: cargo rebuilds what a profile newer than its build fed
                // (rustc lists `-Cprofile-use`'s file among a crate's inputs), and a merge
                // removes the profiles it replaced, so this one is written anew.
                if let Ok(file) = std::fs::File::options().write(true).open(path) {
                    let _ = file.set_modified(was.1);
                }
            }
        }
    }
}

/// Every file under `dir` (but the build logs and the lock), with its bytes and time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() {
                if name != "logs" {
                    stack.push(path);
                }
            } else if name != ".lock"
                && let Ok(bytes) = std::fs::read(&path)
                && let Ok(time) = entry.metadata().and_then(|m| m.modified())
            {
                out.insert(path, (bytes, time));
            }
        }
    }
    out
}

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn xtask(args: &[&str], data: &Path, target: &Path) -> std::process::Output {
    xtask_with(&root().join("profiles/quick.toml"), args, data, target)
}

pub fn command(config: &Path, args: &[&str], data: &Path, target: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cargo-mty"));
    cmd.args(args)
        .arg("--config")
        .arg(config)
        .arg("--pgo-data")
        .arg(data)
        .arg("--target-dir")
        .arg(target);
    cmd
}

pub fn xtask_with(
    config: &Path,
    args: &[&str],
    data: &Path,
    target: &Path,
) -> std::process::Output {
    bounded_output(&mut command(config, args, data, target))
}

/// How long one xtask run of a test may take before it is killed and the test fails: a
/// hang must fail the run with what it printed, not hold CI until its own deadline. The good
/// run on a cold target directory is the longest; `MTY_TEST_XTASK_TIMEOUT_SECS` changes it
/// (900 s by default, several times a cold good run: docs/results/2026-12-03-test-suite-time.md).
fn xtask_deadline() -> std::time::Duration {
    let secs = std::env::var("MTY_TEST_XTASK_TIMEOUT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(900);
    std::time::Duration::from_secs(secs)
}

/// `cmd.output()`, in a process group of its own, killed with everything it started when it
/// outlives [`xtask_deadline`] (then the test fails with what it had printed).
pub fn bounded_output(cmd: &mut Command) -> std::process::Output {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = Group::spawn(cmd.stdout(Stdio::piped()).stderr(Stdio::piped()));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.0.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.0.stderr.take().unwrap()));
    let deadline = std::time::Instant::now() + xtask_deadline();
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let Some(status) = status else {
        child.kill_all();
        let err = String::from_utf8_lossy(&stderr.join().unwrap()).into_owned();
        panic!(
            "`{cmd:?}` ran longer than {} s and was killed (MTY_TEST_XTASK_TIMEOUT_SECS); it had printed:\n{err}",
            xtask_deadline().as_secs()
        );
    };
    // Whatever it started dies with it, so nothing holds the pipes (or the lock) after it.
    child.kill_all();
    std::process::Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// A child started in a process group of its own. Dropping it (also when the test fails)
/// kills the whole group: nothing xtask started (a lockstep arm, a stopped one, a training)
/// outlives the test to hold the lock or a core while the next test runs.
pub struct Group(pub std::process::Child);

impl Group {
    pub fn spawn(cmd: &mut Command) -> Group {
        use std::os::unix::process::CommandExt;
        Group(cmd.process_group(0).spawn().expect("xtask starts"))
    }

    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// SIGKILL to every process of the group, then reaps the leader.
    pub fn kill_all(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = self.0.wait();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// quick.toml with `extra` (TOML: a section of its own) added at its end, written to `path`.
pub fn config_with(path: &Path, extra: &str) -> PathBuf {
    let text = std::fs::read_to_string(root().join("profiles/quick.toml")).unwrap();
    std::fs::write(path, format!("{text}\n{extra}")).unwrap();
    path.to_path_buf()
}

/// A mount point, unmounted when dropped (also when the test fails).
pub struct Mount(pub PathBuf);

impl Mount {
    /// A tmpfs with `options` (`size=1m`, `ro,size=64k`) mounted on `dir` (made if missing);
    /// needs root, as CI runs.
    pub fn tmpfs(dir: &Path, options: &str) -> Mount {
        std::fs::create_dir_all(dir).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(
            mounted.success(),
            "mount a tmpfs ({options}) on {} (needs root, as CI runs)",
            dir.display()
        );
        Mount(dir.to_path_buf())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// quick.toml with `from` replaced by `to`, written to `path`.
pub fn config_variant(path: &Path, from: &str, to: &str) -> PathBuf {
    config_edits(path, &[(from, to)])
}

/// quick.toml with each `from` replaced by its `to`, written to `path`.
pub fn config_edits(path: &Path, edits: &[(&str, &str)]) -> PathBuf {
    let quick = std::fs::read_to_string(root().join("profiles/quick.toml")).unwrap();
    edited_config(&quick, "quick.toml", path, edits)
}

/// The config `text` (called `name` in a failure) with each `from` replaced by its `to`,
/// written to `path`.
pub fn edited_config(text: &str, name: &str, path: &Path, edits: &[(&str, &str)]) -> PathBuf {
    let mut text = text.to_string();
    for (from, to) in edits {
        assert!(text.contains(from), "{name} has no {from:?}");
        text = text.replacen(from, to, 1);
    }
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

/// Starts xtask on quick.toml with its stderr piped: the child and its stderr, line by line.
pub fn spawn(
    args: &[&str],
    data: &Path,
    target: &Path,
) -> (
    Group,
    std::io::Lines<std::io::BufReader<std::process::ChildStderr>>,
) {
    use std::io::BufRead;
    let mut child = Group::spawn(
        command(&root().join("profiles/quick.toml"), args, data, target)
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null()),
    );
    let lines = std::io::BufReader::new(child.0.stderr.take().unwrap()).lines();
    (child, lines)
}

/// Each file under `data` still holds exactly the bytes it held before.
pub fn assert_kept(data: &Path, files: &[(&str, &[u8])]) {
    for (file, before) in files {
        assert!(
            std::fs::read(data.join(file)).unwrap() == *before,
            "{file} changed; the last good one must be kept"
        );
    }
}

pub fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn json(path: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

/// A JSON array of strings (arm names, builds) as `&str`s.
pub fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_str().unwrap_or_else(|| panic!("not a string: {x}")))
        .collect()
}

pub fn contains(path: &str, needle: &[u8]) -> bool {
    std::fs::read(path)
        .unwrap()
        .windows(needle.len())
        .any(|w| w == needle)
}

/// The first raw profile the training recorded.
pub fn instrumented_profraw(data: &Path) -> PathBuf {
    let train = json(&data.join("stages/train.json"));
    PathBuf::from(train["profraw"][0].as_str().unwrap())
}

/// A process as /proc shows it.
struct Proc {
    pid: u32,
    ppid: u32,
    pgrp: u32,
    cmdline: String,
}

fn processes() -> Vec<Proc> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let fields: Vec<u32> = stat
            .rsplit_once(')')
            .map(|(_, rest)| {
                rest.split_whitespace()
                    .skip(1)
                    .take(2)
                    .filter_map(|f| f.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if let [ppid, pgrp] = fields[..] {
            found.push(Proc {
                pid,
                ppid,
                pgrp,
                cmdline: String::from_utf8_lossy(&cmdline).replace('\0', " "),
            });
        }
    }
    found
}

/// The descendants of process `root` whose command line holds every one of `needles`, by
/// pid. Only descendants: another test's processes, or a stray one, never match.
pub fn descendants_with(root: u32, needles: &[&str]) -> Vec<u32> {
    let all = processes();
    let parent: BTreeMap<u32, u32> = all.iter().map(|p| (p.pid, p.ppid)).collect();
    let descends = |mut pid: u32| {
        while let Some(&up) = parent.get(&pid) {
            if up == root {
                return true;
            }
            if up <= 1 {
                return false;
            }
            pid = up;
        }
        false
    };
    all.iter()
        .filter(|p| needles.iter().all(|n| p.cmdline.contains(n)) && descends(p.pid))
        .map(|p| p.pid)
        .collect()
}

/// The live members of process group `pgrp` (a [`Group`]'s id) whose command line holds
/// every one of `needles`: what a child left running, even after the child itself exited.
pub fn group_members_with(pgrp: u32, needles: &[&str]) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|p| p.pgrp == pgrp && needles.iter().all(|n| p.cmdline.contains(n)))
        .map(|p| p.pid)
        .collect()
}

/// Polls `check` until it holds or `secs` pass; whether it held.
pub fn eventually(secs: u64, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        // Not a busy loop: on two cores that would take one from the processes watched.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    check()
}

/// Whether the pipeline will make the BOLT build: llvm-bolt is installed (Debian's
/// `bolt-<N>`: `/usr/lib/llvm-<N>/bin/llvm-bolt`, or `llvm-bolt*` on PATH). Without it the
/// BOLT checks skip, saying so (or fail under `MTY_TEST_REQUIRE_ALL=1`).
pub fn expect_bolt() -> bool {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PRESENT.get_or_init(|| {
        let in_lib = std::fs::read_dir("/usr/lib")
            .map(|d| {
                d.flatten().any(|e| {
                    e.file_name().to_string_lossy().starts_with("llvm-")
                        && e.path().join("bin/llvm-bolt").is_file()
                })
            })
            .unwrap_or(false);
        let on_path = std::env::var_os("PATH").is_some_and(|p| {
            std::env::split_paths(&p).any(|d| {
                std::fs::read_dir(d).is_ok_and(|mut entries| {
                    entries.any(|e| {
                        e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("llvm-bolt"))
                    })
                })
            })
        });
        super::testutil::have(
            "the BOLT build (llvm-bolt)",
            in_lib || on_path,
            "apt-get install bolt-22",
        )
    })
}
