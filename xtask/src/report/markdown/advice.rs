//! "When you see…, do…": every verdict word and warning the report can print, what it means
//! and what to do. The one source of the table: report.md ends with it and links each word
//! where it appears, and docs/troubleshooting.md shows the same rows (a tidy test compares).

/// One row of the table.
pub struct Advice {
    /// How the docs and the page's table show it.
    pub shown: &'static str,
    /// The text that marks it in report.md, and the part of it linked to the table where it
    /// appears (outside code spans); none where the page shows it in other words.
    pub marker: Option<(&'static str, &'static str)>,
    pub means: &'static str,
    pub action: &'static str,
}

/// The table's heading, and the anchor GitHub and most renderers make of it.
pub const HEADING: &str = "When you see…, do…";
pub const ANCHOR: &str = "#when-you-see-do";

pub const ADVICE: &[Advice] = &[
    Advice {
        shown: "`no detectable change`",
        marker: Some(("no detectable change", "no detectable change")),
        means: "the interval reaches into ±threshold: this run cannot tell a change there from noise or layout luck",
        action: "for a tighter interval, more sessions: `measure.lockstep.max_secs`, or `--half-width 0.5`; where the threshold is the layout floor, pool more layouts (rerun)",
    },
    Advice {
        shown: "`(±X %, layout floor)` after a verdict",
        marker: Some(("layout floor)", "layout floor")),
        means: "the threshold is where another function order of the same code may land",
        action: "a gain inside it may be layout luck; it narrows as runs pool their layouts in `pgo-data/history.json` (rerun, or more `layout.variants` a run)",
    },
    Advice {
        shown: "`farthest layout measured`",
        marker: Some(("farthest layout measured", "farthest layout measured")),
        means: "fewer than 8 layouts pooled: the threshold is the farthest one measured so far, not yet a floor",
        action: "rerun: every run adds its `layout.variants`",
    },
    Advice {
        shown: "`not judged (machine busy)`",
        marker: Some(("not judged (machine busy)", "not judged (machine busy)")),
        means: "a workload of several threads, and too few of its sessions ran undisturbed",
        action: "rerun on a quiet machine",
    },
    Advice {
        shown: "`N of M sessions disturbed (over X %)`",
        marker: Some(("sessions disturbed", "sessions disturbed")),
        means: "other processes used more than `measure.max_other_cpu_pct` of the arms' core in those sessions",
        action: "find what ran beside (a build, a cron job) and rerun quietly",
    },
    Advice {
        shown: "`NOT APPLIED`",
        marker: Some(("NOT APPLIED", "NOT APPLIED")),
        means: "rustc's PGO warnings name required functions without profile data",
        action: "rerun the whole pipeline (the profile came from another executable, source or cargo profile); check `apply_check.required`",
    },
    Advice {
        shown: "``warning: the training stands for `w` at N %``",
        marker: Some(("the training stands for", "the training stands for")),
        means: "the training weighs `w`'s hot code unlike `w` itself (under `insight.min_agreement_pct`)",
        action: "run the named training workload more (its `weight`), or add one like `w`; `cargo xtask tune` weighs them",
    },
    Advice {
        shown: "`the training captures N %` (well under 100)",
        marker: Some(("the training captures", "the training captures")),
        means: "lto+pgo gets only part of what a profile of the measured workload itself gets",
        action: "the training misses what the workload does: the report's insight section names the functions; weigh the training up",
    },
    Advice {
        shown: "`N of M turns saturated` (a service)",
        marker: Some(("turns saturated", "turns saturated")),
        means: "the server fell behind the offered rate in those turns: their CPU per request is not comparable",
        action: "measure at a rate the server keeps up with",
    },
    Advice {
        shown: "the null arm's (`release-aa`) interval `does NOT hold 0`",
        marker: Some(("does NOT hold 0", "does NOT hold 0")),
        means: "this run's intervals are narrower than its noise",
        action: "rerun; where it repeats, the run component (`history.json`) widens the next runs' intervals",
    },
];

/// The table's rows as Markdown, header included.
pub fn table() -> String {
    let mut out = String::from("| you see | it means | do |\n|---|---|---|\n");
    for a in ADVICE {
        out.push_str(&format!("| {} | {} | {} |\n", a.shown, a.means, a.action));
    }
    out
}

/// `md` with each marker linked to the table where it stands outside a code span, and the
/// table appended.
pub fn render(md: &mut String) {
    // Lines inside a fenced block are code, left as they are.
    let mut fenced = false;
    let linked: Vec<String> = md
        .lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return line.to_string();
            }
            if fenced {
                line.to_string()
            } else {
                link_line(line)
            }
        })
        .collect();
    *md = linked.join("\n");
    md.push_str(&format!(
        "\n\n## {HEADING}\n\nWhat the page says beside a figure, and what to do about it:\n\n{}",
        table()
    ));
}

/// One line with every marker outside code spans made a link (`[no detectable change](#…)`).
/// A code span opens with a run of backticks and closes at the next run of the same length
/// (``a `b` c`` is one span). Headings are left as they are.
fn link_line(line: &str) -> String {
    if line.starts_with('#') {
        return line.to_string();
    }
    let mut out = String::new();
    let mut rest = line;
    while !rest.is_empty() {
        let Some(open) = rest.find('`') else {
            out.push_str(&link_prose(rest));
            break;
        };
        out.push_str(&link_prose(&rest[..open]));
        let run = rest[open..].chars().take_while(|&c| c == '`').count();
        let fence = &rest[open..open + run];
        let after = &rest[open + run..];
        // The span ends at the next run of exactly `run` backticks; without one, the rest is
        // text as it stands.
        let close = (0..after.len())
            .filter(|&i| after.is_char_boundary(i))
            .find(|&i| {
                after[i..].starts_with(fence)
                    && !after[i + run..].starts_with('`')
                    && (i == 0 || !after[..i].ends_with('`'))
            });
        match close {
            Some(i) => {
                out.push_str(&rest[open..open + run + i + run]);
                rest = &after[i + run..];
            }
            None => {
                out.push_str(&rest[open..]);
                break;
            }
        }
    }
    out
}

/// Prose with every marker made a link.
fn link_prose(piece: &str) -> String {
    let mut piece = piece.to_string();
    for a in ADVICE {
        let Some((marker, text)) = a.marker else {
            continue;
        };
        let linked = marker.replacen(text, &format!("[{text}]({ANCHOR})"), 1);
        piece = piece.replace(marker, &linked);
    }
    piece
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_is_linked_in_prose_and_left_alone_in_code() {
        let line = "- lto 0.3 % faster → no detectable change (±1.1 %, layout floor); `no detectable change` stays";
        assert_eq!(
            link_line(line),
            "- lto 0.3 % faster → [no detectable change](#when-you-see-do) (±1.1 %, [layout floor](#when-you-see-do)); `no detectable change` stays"
        );
        assert_eq!(
            link_line("## no detectable change"),
            "## no detectable change"
        );
        // A double-backtick span holds single backticks; the prose after it is linked.
        assert_eq!(
            link_line("``the training stands for `w` `` then NOT APPLIED"),
            "``the training stands for `w` `` then [NOT APPLIED](#when-you-see-do)"
        );
        let mut md = "```\nno detectable change\n```\nno detectable change".to_string();
        render(&mut md);
        assert!(
            md.starts_with(
                "```\nno detectable change\n```\n[no detectable change](#when-you-see-do)"
            ),
            "{md}"
        );
    }

    /// docs/troubleshooting.md shows this table, row for row: one source, checked.
    #[test]
    fn the_troubleshooting_page_shows_this_table() {
        let page = std::fs::read_to_string(
            crate::toolchain::cargo::project_root().join("docs/troubleshooting.md"),
        )
        .unwrap();
        let section = page
            .split(&format!("## {HEADING}"))
            .nth(1)
            .expect("docs/troubleshooting.md has the section");
        let rows: Vec<&str> = section
            .lines()
            .skip_while(|l| !l.starts_with("| you see"))
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert_eq!(
            rows.join("\n") + "\n",
            table(),
            "docs/troubleshooting.md's \"{HEADING}\" table differs from report/markdown/advice.rs: write the code's rows there"
        );
    }
}
