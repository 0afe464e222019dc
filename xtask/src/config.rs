//! The pipeline's configuration: `profiles/*.toml`, read with serde + toml and checked.
//! Unknown keys and wrong types are errors naming the file, the line and the key; the schema
//! is `config/schema.rs`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

mod schema;
mod workload;
pub use schema::*;
#[cfg(test)]
pub use workload::Service;
pub use workload::{CPU_PER_REQUEST, Mode, Stdout, Workload};

/// The config as loaded, with where it came from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadedConfig {
    pub path: PathBuf,
    /// What the file sets, defaults filled in (report.json's `config.settings`).
    #[serde(rename = "config")]
    pub settings: Config,
}

pub fn load(path: &Path) -> Result<LoadedConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read pipeline config {}", path.display()))?;
    let mut config = parse(&text)
        .map_err(|err| anyhow::anyhow!("invalid pipeline config {}: {err}", path.display()))?;
    if let Some(profile) = &mut config.bolt.profile
        && profile.is_relative()
    {
        *profile = path.parent().unwrap_or(Path::new(".")).join(&*profile);
    }
    Ok(LoadedConfig {
        path: path.to_path_buf(),
        settings: config,
    })
}

/// A service workload has its `service` table and a way to tell the server its port; other
/// workloads have no `service` table.
fn check_service(w: &Workload) -> Result<()> {
    let Some(service) = &w.service else {
        if w.mode == Mode::Service {
            bail!(
                "workload `{}` has `mode = \"service\"` but no `service` table: give at least `service = {{ driver = [\"mty-loadgen\", \"--url\", \"http://{{addr}}\"] }}`",
                w.name
            );
        }
        return Ok(());
    };
    if w.mode != Mode::Service {
        bail!(
            "workload `{}` has a `service` table but not `mode = \"service\"`",
            w.name
        );
    }
    if service.driver.first().is_none_or(|p| p.is_empty()) {
        bail!(
            "service workload `{}`: `service.driver` is empty: name the command that loads the server (e.g. `[\"mty-loadgen\", \"--url\", \"http://{{addr}}\"]`)",
            w.name
        );
    }
    let told = w
        .args
        .iter()
        .chain(w.env.values())
        .any(|a| a.contains("{addr}") || a.contains("{port}"));
    if !told {
        bail!(
            "service workload `{}`: neither its `args` nor its `env` contain `{{addr}}` or `{{port}}`: every arm is a server of its own and needs a port of its own (e.g. `args = [\"--listen\", \"{{addr}}\"]`)",
            w.name
        );
    }
    if w.stdin.is_some() {
        bail!(
            "service workload `{}`: `stdin` is not for a server (give its input through the driver)",
            w.name
        );
    }
    if service.ready_timeout_secs == Some(0) || service.stop_timeout_secs == Some(0) {
        bail!(
            "service workload `{}`: `ready_timeout_secs` and `stop_timeout_secs` must be at least 1",
            w.name
        );
    }
    Ok(())
}

/// Parses and checks a config. Errors carry the line and key (toml's message shows both).
pub fn parse(text: &str) -> Result<Config> {
    let config: Config =
        toml::from_str(text).map_err(|err| anyhow::anyhow!("{}", err.to_string().trim_end()))?;
    if config.train.workloads.is_empty() {
        bail!("`train.workloads` is empty: nothing would be trained");
    }
    if config.measure.workloads.is_empty() {
        bail!("`measure.workloads` is empty: nothing would be measured");
    }
    let l = &config.measure.lockstep;
    if l.sessions < 2 || l.rounds < 2 || l.batch_messages < 1 {
        bail!(
            "`measure.lockstep` needs at least 2 sessions, 2 rounds and 1 message a batch (an interval needs several sessions; 10 or more is sound)"
        );
    }
    if l.min_sessions < 2 {
        bail!(
            "`measure.lockstep.min_sessions` must be at least 2 (the pilot estimates a spread; 12 or more is sound)"
        );
    }
    if l.max_secs.is_nan() || l.max_secs <= 0.0 {
        bail!("`measure.lockstep.max_secs` must be a positive number of seconds");
    }
    let targets = std::iter::once(config.measure.target_half_width_pct).chain(
        config
            .measure
            .workloads
            .iter()
            .filter_map(|w| w.target_half_width_pct),
    );
    for t in targets {
        if !(t >= 0.0 && t.is_finite()) {
            bail!(
                "`target_half_width_pct` is {t}: it must be a half-width in % (1.0, 0.5 for a precise run), or 0 to always run `measure.lockstep.sessions`"
            );
        }
    }
    if config.measure.bootstrap_resamples < 1000 {
        bail!("`measure.bootstrap_resamples` must be at least 1000");
    }
    for w in config
        .train
        .workloads
        .iter()
        .chain(&config.measure.workloads)
    {
        if w.args.is_empty() && config.binary == "mty-bench" {
            bail!(
                "workload `{}` has no `args`: the first argument names the mty-bench workload",
                w.name
            );
        }
        if w.timeout_secs == Some(0) {
            bail!("workload `{}`: `timeout_secs` must be at least 1", w.name);
        }
        if w.sessions.is_some_and(|n| n < 2) {
            bail!(
                "workload `{}`: `sessions` must be at least 2 (an interval needs several sessions)",
                w.name
            );
        }
        if w.batch_messages == Some(0) {
            bail!("workload `{}`: `batch_messages` must be at least 1", w.name);
        }
    }
    for w in config
        .train
        .workloads
        .iter()
        .chain(&config.measure.workloads)
        .chain(&config.validate.workloads)
    {
        check_service(w)?;
    }
    for (kind, list) in [
        ("training", &config.train.workloads),
        ("validation", &config.validate.workloads),
    ] {
        for (i, w) in list.iter().enumerate() {
            if w.name.is_empty()
                || w.name.starts_with('.')
                || !w
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                bail!(
                    "{kind} workload `{}`: its name names the folder of its raw profiles: letters, digits, `-`, `_` and `.` only, `.` not first",
                    w.name
                );
            }
            if list[..i].iter().any(|o| o.name == w.name) {
                bail!(
                    "two {kind} workloads are named `{}`: each one's raw profiles are kept apart by name",
                    w.name
                );
            }
            if w.args.is_empty() && config.binary == "mty-bench" {
                bail!(
                    "{kind} workload `{}` has no `args`: the first argument names the mty-bench workload",
                    w.name
                );
            }
        }
    }
    for w in &config.train.workloads {
        if w.weight == Some(0) || w.weight.is_some_and(|v| v > MAX_WEIGHT) {
            bail!(
                "training workload `{}`: `weight` must be 1 to {MAX_WEIGHT} (remove the workload to leave it out)",
                w.name
            );
        }
        if w.mode == Mode::Process || w.metric.is_some() || w.stdout.is_some() {
            bail!(
                "training workload `{}`: `mode = \"process\"`, `metric` and `stdout` are for measured workloads (a training command runs once, whole)",
                w.name
            );
        }
    }
    for w in &config.measure.workloads {
        if w.weight.is_some() {
            bail!(
                "measured workload `{}`: `weight` is for training workloads (how much of the merged profile each makes)",
                w.name
            );
        }
        if w.timeout_secs.is_some() {
            bail!(
                "measured workload `{}`: `timeout_secs` is for training workloads; a measured one's turns are bounded by `measure.timeout_secs`",
                w.name
            );
        }
        if w.mode == Mode::Lockstep && w.stdin.is_some() {
            bail!(
                "measured workload `{}`: `stdin` needs `mode = \"process\"`: an in-process lockstep arm's stdin carries the protocol (give the file as an argument instead)",
                w.name
            );
        }
        if w.mode == Mode::Lockstep && w.metric.is_some() {
            bail!(
                "measured workload `{}`: `metric` needs `mode = \"process\"` (an in-process arm times its own iterations)",
                w.name
            );
        }
        if w.stdout.is_some() && w.mode != Mode::Process {
            bail!(
                "measured workload `{}`: `stdout` is for `mode = \"process\"` (where each run's output goes)",
                w.name
            );
        }
        if w.stdout == Some(Stdout::Null) && w.metric.is_some() {
            bail!(
                "measured workload `{}`: `stdout = \"null\"` leaves nothing to read `metric` from (leave `stdout` out: with `metric` it is a pipe)",
                w.name
            );
        }
        // Judged by the server's CPU time per request (the default): mty-loadgen reads it
        // only when told the server's pid.
        let by_cpu = w.metric.as_deref().is_none_or(|m| m == CPU_PER_REQUEST);
        if w.mode == Mode::Service
            && by_cpu
            && let Some(driver) = w.service.as_ref().map(|s| &s.driver)
            && driver.first().is_some_and(|p| p.ends_with("mty-loadgen"))
            && !driver.iter().any(|a| a.contains("{pid}"))
        {
            bail!(
                "measured workload `{}`: judged by the server's CPU time per request (`metric` unset or `\"cpu_per_request\"`), mty-loadgen must read the server's threads: add `\"--server-pid\", \"{{pid}}\"` to its `driver`, or set `metric` to a latency key (`p50_ns`)",
                w.name
            );
        }
    }
    for v in &config.validate.workloads {
        if v.weight.is_some() {
            bail!(
                "validation workload `{}`: `weight` is not for validation workloads (each is profiled alone; `tune` weighs the training's)",
                v.name
            );
        }
        for m in &config.measure.workloads {
            if let Some(input) = shared_input(v, m) {
                bail!(
                    "validation workload `{}` shares {input} with measured workload `{}`: tuning on it would tune on what the report measures (give it other inputs: other sizes, counts, files)",
                    v.name,
                    m.name
                );
            }
        }
    }
    let names: Vec<&str> = config
        .measure
        .workloads
        .iter()
        .map(|w| w.name.as_str())
        .collect();
    if let Some(dup) = names
        .iter()
        .enumerate()
        .find_map(|(i, n)| names[..i].contains(n).then_some(n))
    {
        bail!("two measured workloads are named `{dup}`: names key the report");
    }
    if let Some(w) = &config.calibrate.workload
        && !names.contains(&w.as_str())
    {
        bail!(
            "`calibrate.workload` names `{w}`, which is not a measured workload ({})",
            names.join(", ")
        );
    }
    for name in config
        .measure
        .versus
        .iter()
        .flat_map(|v| [&v.subject, &v.reference])
    {
        let Some(w) = config.measure.workloads.iter().find(|w| &w.name == name) else {
            bail!(
                "`measure.versus` names `{name}`, which is not a measured workload ({})",
                names.join(", ")
            );
        };
        if w.mode != Mode::Lockstep || w.cwd.is_some() || !w.env.is_empty() {
            bail!(
                "`measure.versus` names `{name}`: a versus pair runs both workloads' arguments in one setting, so each must be an in-process lockstep workload without `env` or `cwd`"
            );
        }
    }
    for name in &config.check.workloads {
        if !names.contains(&name.as_str()) {
            bail!(
                "`check.workloads` names `{name}`, which is not a measured workload ({})",
                names.join(", ")
            );
        }
    }
    let layout = &config.layout;
    if let Some(b) = layout
        .builds
        .iter()
        .find(|b| !LAYOUT_BUILDS.contains(&b.as_str()))
    {
        bail!(
            "`layout.builds` names `{b}`, which cannot be relinked in another layout (one of: {})",
            LAYOUT_BUILDS.join(", ")
        );
    }
    if layout.variants > 0 && !layout.builds.iter().any(|b| b == "release") {
        bail!(
            "`layout.builds` must include `release`: the layout floor is release's variants against release"
        );
    }
    if layout.variants == 1 {
        bail!(
            "`layout.variants` is 1: a spread over layouts needs at least 2 variants (4 or more is sound), or 0 to turn the stage off"
        );
    }
    for name in layout.workloads_of(&config.check) {
        if !names.contains(&name.as_str()) {
            bail!(
                "`layout.workloads` names `{name}`, which is not a measured workload ({})",
                names.join(", ")
            );
        }
    }
    if layout.max_instructions_change_pct.is_nan() || layout.max_instructions_change_pct < 0.0 {
        bail!("`layout.max_instructions_change_pct` must be a percentage, 0 or more");
    }
    Ok(config)
}

/// What a validation workload and a measured one share, if anything that makes them the same
/// input: the same command (arguments, environment, directory, stdin), or a file named by
/// both (an argument or stdin that names the same path).
fn shared_input(v: &Workload, m: &Workload) -> Option<String> {
    if v.args == m.args && v.env == m.env && v.cwd == m.cwd && v.stdin == m.stdin {
        return Some("its command line".to_string());
    }
    let files = |w: &Workload| -> Vec<PathBuf> {
        let dir = w.cwd.clone().unwrap_or_default();
        // `--input=FILE` names a file as `--input FILE` does.
        let words = w.args.iter().map(|a| match a.split_once('=') {
            Some((flag, value)) if flag.starts_with('-') => value,
            _ => a.as_str(),
        });
        words
            .filter(|a| {
                !a.starts_with('-')
                    && (a.contains('/')
                        || a.rsplit_once('.')
                            .is_some_and(|(_, ext)| ext.chars().any(|c| c.is_ascii_alphabetic())))
            })
            .map(|a| dir.join(a))
            .chain(w.stdin.clone())
            // `./a.json` and `a.json` are one file.
            .map(|p| p.components().filter(|c| c.as_os_str() != ".").collect())
            .collect()
    };
    let theirs = files(m);
    files(v)
        .into_iter()
        .find(|f| theirs.contains(f))
        .map(|f| format!("the input file `{}`", f.display()))
}

#[cfg(test)]
mod tests;
