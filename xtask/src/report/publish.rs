//! `--publish`: a measured run kept with the sources. The run's report.md, under one line of
//! context (machine, date, commit, command), goes to `docs/results/<date>-<commit>.md`, and its
//! headline row (the PGO gain with its interval, the A/A floor, the mailbox against tokio)
//! into the index `docs/results/README.md`, newest first. Publishing the same run again
//! replaces its row.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::Report;
use crate::base::fsx;

/// The line above the index's table; published rows go right under the table's header.
pub const MARKER: &str =
    "<!-- runs published by cargo xtask pgo --publish are added to the table below this line -->";

const INDEX_HEADER: &str = "# Results

Measured runs of `cargo xtask pgo`, one file per run, each stamped with its machine, date and
commit; `cargo xtask pgo --publish` adds them.

";

const TABLE_HEADER: &str = "| date | machine | commit | lto+pgo vs release, `agent_send_latency` | A/A floor | mailbox / tokio (release) | file | how measured |
|---|---|---|---|---|---|---|---|
";

/// How this version measures, as the index's last column names it (its README says what each
/// name means).
const PROTOCOL: &str = "per comparison";

/// Writes the run's page and its index row under `root/docs/results/`; returns the page.
pub fn publish(root: &Path, data: &Path, report: &Report) -> Result<PathBuf> {
    let dir = root.join("docs/results");
    let page_md = data.join("report.md");
    let body = std::fs::read_to_string(&page_md).with_context(|| {
        format!(
            "cannot read {} to publish it: run the report stage first",
            page_md.display()
        )
    })?;
    let name = page_name(report);
    let page = dir.join(&name);
    fsx::write_atomic(
        &page,
        format!("{}\n\n{body}", context_line(report, root)).as_bytes(),
    )?;
    let index = dir.join("README.md");
    let old = match std::fs::read_to_string(&index) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            format!("{INDEX_HEADER}{MARKER}\n{TABLE_HEADER}")
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", index.display())),
    };
    let updated = with_row(&old, &name, &index_row(report, &name)).with_context(|| {
        format!(
            "{} has no line `{MARKER}` above a table to add the row to; put it back above the table",
            index.display()
        )
    })?;
    fsx::write_atomic(&index, updated.as_bytes())?;
    Ok(page)
}

/// `2026-12-01-0123456789ab.md`: the day the report was written (UTC) and the commit.
pub fn page_name(report: &Report) -> String {
    let commit: String = report.environment.git_commit.chars().take(12).collect();
    format!("{}-{commit}.md", utc_date(report.generated_unix_secs))
}

/// What the page was measured on, when, from what (the config path relative to `root`).
pub fn context_line(report: &Report, root: &Path) -> String {
    let env = &report.environment;
    let config = &report.config.path;
    format!(
        "Measured on {} ({} cores, Linux {}), {} UTC, commit `{}`{}, with `cargo xtask pgo --config {}`.",
        env.cpu_model,
        env.cores,
        env.kernel,
        utc_date(report.generated_unix_secs),
        env.git_commit,
        if env.git_dirty {
            " (with uncommitted changes)"
        } else {
            ""
        },
        config.strip_prefix(root).unwrap_or(config).display()
    )
}

/// The index row: date, machine, commit, the PGO gain on the first gated (else first
/// measured) workload with its interval, that workload's A/A floor, the mailbox against tokio
/// on release, the link.
pub fn index_row(report: &Report, page: &str) -> String {
    let env = &report.environment;
    let check = &report.config.settings.check.workloads;
    let headline = report
        .workloads
        .iter()
        .find(|w| check.contains(&w.workload))
        .or(report.workloads.first());
    let (gain, floor) = match headline {
        Some(w) => {
            let gain = w
                .rows
                .iter()
                .find(|r| r.build == "lto+pgo")
                .and_then(|r| r.vs_release.as_ref())
                .map_or("—".to_string(), |c| {
                    crate::report::words::estimate_short(&c.primary().estimate)
                });
            let named = if w.workload == "agent_send_latency" {
                gain
            } else {
                format!("{gain} (`{}`)", w.workload)
            };
            let floor = format!("±{:.1} %", stats::noise_floor_pct(&w.aa.primary().estimate));
            (named, floor)
        }
        None => ("—".into(), "—".into()),
    };
    let versus = report
        .versus
        .iter()
        .find(|v| v.build == "release")
        .map_or("—".to_string(), |v| {
            crate::report::words::ratio(&v.median)
        });
    let mut row = String::new();
    let _ = write!(
        row,
        "| {} | {} ({} cores) | `{}`{} | {gain} | {floor} | {versus} | [{page}]({page}) | {PROTOCOL} |",
        utc_date(report.generated_unix_secs),
        env.cpu_model,
        env.cores,
        env.git_commit.chars().take(12).collect::<String>(),
        if env.git_dirty { " (dirty)" } else { "" },
    );
    row
}

/// `index` with `row` first in the table under the marker (right after the table's `|---|`
/// line: a line between would end the table), and any earlier row of the same page removed;
/// `None` without the marker and a table under it.
fn with_row(index: &str, page: &str, row: &str) -> Option<String> {
    let link = format!("]({page})");
    let mut out = String::new();
    let (mut marker, mut done) = (false, false);
    for line in index.lines() {
        if line.starts_with('|') && line.contains(&link) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
        if line.trim() == MARKER {
            marker = true;
        } else if marker && !done && line.starts_with("|---") {
            done = true;
            out.push_str(row);
            out.push('\n');
        }
    }
    done.then_some(out)
}

/// The UTC calendar date of a Unix time, `YYYY-MM-DD` (Howard Hinnant's days-to-civil).
pub fn utc_date(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fixtures::report;

    #[test]
    fn dates_are_utc_calendar_days() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_796_083_200), "2026-12-01");
        assert_eq!(utc_date(1_796_169_599), "2026-12-01");
    }

    /// A real publish into a temporary project: the page carries the context line over the
    /// report.md, the index gets one row after its marker (newest first), and publishing the
    /// same run again replaces the row instead of adding another.
    #[test]
    fn a_run_is_published_as_a_page_and_one_index_row() {
        let root = std::env::temp_dir().join(format!("xtask-publish-{}", std::process::id()));
        let data = root.join("pgo-data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("report.md"), "# the report\n").unwrap();
        let r = report();
        let page = publish(&root, &data, &r).unwrap();
        assert_eq!(
            page.file_name().unwrap().to_str().unwrap(),
            format!("{}-0123456789ab.md", utc_date(r.generated_unix_secs))
        );
        let text = std::fs::read_to_string(&page).unwrap();
        assert!(
            text.starts_with("Measured on Test CPU @ 2.00GHz (2 cores, Linux 6.1.0-test)"),
            "{text}"
        );
        assert!(text.ends_with("\n\n# the report\n"), "{text}");
        let index = root.join("docs/results/README.md");
        publish(&root, &data, &r).unwrap();
        let text = std::fs::read_to_string(&index).unwrap();
        let rows: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("|---"))
            .skip(1)
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert_eq!(rows.len(), 1, "one row, in the table: {text}");
        assert!(
            rows[0].contains("| 10.2 % faster, [9.8, 10.6] |"),
            "{}",
            rows[0]
        );
        assert!(rows[0].contains("`0123456789ab`"), "{}", rows[0]);
        // As many cells as the header has: the protocol last.
        let header = TABLE_HEADER.lines().next().unwrap();
        assert_eq!(
            rows[0].matches(" | ").count(),
            header.matches(" | ").count()
        );
        assert!(rows[0].ends_with("| per comparison |"), "{}", rows[0]);
        // An index without the marker is refused, naming the fix.
        std::fs::write(&index, "# Results\n").unwrap();
        let err = format!("{:#}", publish(&root, &data, &r).unwrap_err());
        assert!(err.contains("has no line `<!-- runs published"), "{err}");
        // The real index takes a row as its first.
        let real = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/results/README.md"),
        )
        .unwrap();
        let with = with_row(&real, "x.md", "| new | row | [x.md](x.md) |").unwrap();
        let table: Vec<&str> = with
            .lines()
            .skip_while(|l| !l.starts_with("|---"))
            .skip(1)
            .collect();
        assert_eq!(table[0], "| new | row | [x.md](x.md) |");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
