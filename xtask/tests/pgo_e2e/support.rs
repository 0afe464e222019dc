//! Helpers shared by the end-to-end test and its fault cases: running xtask on a config,
//! config variants, reading what it wrote.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

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
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
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
    command(config, args, data, target)
        .output()
        .expect("xtask runs")
}

/// quick.toml with `from` replaced by `to`, written to `path`.
pub fn config_variant(path: &Path, from: &str, to: &str) -> PathBuf {
    config_edits(path, &[(from, to)])
}

/// quick.toml with each `from` replaced by its `to`, written to `path`.
pub fn config_edits(path: &Path, edits: &[(&str, &str)]) -> PathBuf {
    let mut text = std::fs::read_to_string(root().join("profiles/quick.toml")).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "quick.toml has no {from:?}");
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
    std::process::Child,
    std::io::Lines<std::io::BufReader<std::process::ChildStderr>>,
) {
    use std::io::BufRead;
    let mut child = command(&root().join("profiles/quick.toml"), args, data, target)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
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
