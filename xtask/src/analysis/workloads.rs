//! One workload against another on the same build, paired in lockstep: "the mailbox costs
//! 1.04× bare tokio, 95 % CI [1.03, 1.05]". The builds' comparison (`analysis`) pairs builds
//! of one workload; this pairs workloads of one build, with the same protocol and statistics,
//! so the ratio rests on batches run moments apart rather than on two measurements of a
//! machine whose speed flips between them.
//!
//! Each session runs, for every shipped build (release and lto+pgo), a live process of the
//! subject workload and one of the reference workload, all taking turns on one core.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::config::{Measure, Versus, Workload};
use crate::measure::Group;
use crate::measure::instructions::InstructionCount;
use crate::measure::session::{Arm, Batch, Session};
use crate::toolchain::build::{Build, Built};
use stats::{self, Estimate};

/// The builds compared across workloads: what is shipped without PGO, and with it.
pub const BUILDS: [Build; 2] = [Build::Release, Build::LtoPgo];

/// One pair of workloads on one build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VersusResult {
    pub subject: String,
    pub reference: String,
    pub build: String,
    /// ln(subject batch / reference batch of the same round), nested as the builds' are:
    /// `ratio` is subject / reference; `change_pct` > 0 means the subject is slower.
    pub median: Estimate,
    /// The same for the batches' p99 and p99.9 (the tail; `None` when the batches did not
    /// report p99.9).
    #[serde(default)]
    pub p99: Option<Estimate>,
    #[serde(default)]
    pub p999: Option<Estimate>,
    /// Instructions per message, subject / reference, when both were counted.
    #[serde(default)]
    pub instructions_ratio: Option<f64>,
}

fn arm_name(build: &str, workload: &str) -> String {
    format!("{build}:{workload}")
}

fn session_name(v: &Versus) -> String {
    format!("{} vs {}", v.subject, v.reference)
}

fn workload<'a>(cfg: &'a Measure, name: &str) -> Result<&'a Workload> {
    cfg.workloads
        .iter()
        .find(|w| w.name == name)
        .with_context(|| format!("`measure.versus` names `{name}`, which is not measured"))
}

/// `measure.versus`'s pairs on the shipped builds among `builds`, as lockstep groups: per
/// pair, for every shipped build, a live process of the subject workload and one of the
/// reference, all taking turns; the stopping rule watches subject against reference on each
/// build.
pub fn groups(builds: &[Built], cfg: &Measure) -> Result<Vec<Group>> {
    let mut groups = Vec::new();
    for v in &cfg.versus {
        let mut arms = Vec::new();
        let mut pairs = Vec::new();
        for b in builds.iter().filter(|b| BUILDS.contains(&b.build)) {
            for name in [&v.subject, &v.reference] {
                arms.push(Arm {
                    name: arm_name(b.name(), name),
                    exe: b.exe.clone(),
                    args: workload(cfg, name)?.args.clone(),
                });
            }
            pairs.push((
                arm_name(b.name(), &v.subject),
                arm_name(b.name(), &v.reference),
            ));
        }
        // The arms carry their whole command line; the group's workload only names it, and
        // is pinned, counted and stopped as the subject workload is.
        let subject = workload(cfg, &v.subject)?;
        groups.push(Group {
            workload: Workload {
                name: session_name(v),
                args: Vec::new(),
                ..subject.clone()
            },
            arms,
            pairs,
            // Workload against workload on the same build: no file between them.
            run_components: Vec::new(),
        });
    }
    Ok(groups)
}

/// The ratios, per pair and build, from the sessions of [`groups`].
pub fn analyze(
    sessions: &[Session],
    instructions: &[InstructionCount],
    cfg: &Measure,
    stops: &[crate::measure::Stopping],
) -> Result<Vec<VersusResult>> {
    let mut out = Vec::new();
    for v in &cfg.versus {
        let name = session_name(v);
        let mine: Vec<&Session> = sessions.iter().filter(|s| s.workload == name).collect();
        for build in BUILDS.map(Build::name) {
            let (subject, reference) = (arm_name(build, &v.subject), arm_name(build, &v.reference));
            if !mine.iter().any(|s| s.arm(&subject).is_some()) {
                continue; // this build was not measured (e.g. a run without PGO)
            }
            // The sessions the stopping rule gave this pair, at the error it spent; the pair
            // leaves the sessions when it stops.
            let spend = crate::measure::spend(stops, &name, &subject, &reference);
            let mine: Vec<&Session> = mine
                .iter()
                .filter(|s| s.session < spend.through && s.arm(&subject).is_some())
                .copied()
                .collect();
            // Per session, per round: ln(subject batch / reference batch) of one statistic
            // (`None` when a batch lacks it).
            let ratios = |of: fn(&Batch) -> Option<f64>| {
                mine.iter()
                    .map(|s| match (s.arm(&subject), s.arm(&reference)) {
                        (Some(a), Some(b)) => Ok(a
                            .iter()
                            .zip(b)
                            .map(|(a, b)| Some((of(a)? / of(b)?).ln()))
                            .collect::<Option<Vec<f64>>>()),
                        _ => bail!(
                            "session {} of `{name}` lacks the arm `{subject}` or `{reference}`",
                            s.session
                        ),
                    })
                    .collect::<Result<Option<Vec<_>>>>()
            };
            let estimate =
                |of: fn(&Batch) -> Option<f64>, what: &str| -> Result<Option<Estimate>> {
                    let Some(r) = ratios(of)? else {
                        return Ok(None);
                    };
                    let pilot = cfg.lockstep.min_sessions.clamp(2, r.len().max(2) as u32);
                    let pilot = spend.pilot_or(pilot as usize);
                    stats::compare_sessions_at(&spend.units(r), pilot, spend.alpha)
                        .with_context(|| format!("`{name}` on {build}: the {what}"))
                        .map(Some)
                };
            let median = estimate(|b| Some(b.median_ns), "median")?.expect("every batch has one");
            let p99 = estimate(|b| Some(b.p99_ns), "p99")?;
            let p999 = estimate(|b| b.p999_ns, "p99.9")?;
            let count = |w: &str| {
                instructions
                    .iter()
                    .find(|i| i.workload == w && i.build == build)
                    .and_then(|i| i.per_message)
            };
            out.push(VersusResult {
                subject: v.subject.clone(),
                reference: v.reference.clone(),
                build: build.to_string(),
                median,
                p99,
                p999,
                instructions_ratio: count(&v.subject)
                    .zip(count(&v.reference))
                    .map(|(a, b)| a / b),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fixtures::{versus_config, versus_sessions};

    #[test]
    fn a_known_ratio_is_recovered_through_speed_flips() {
        let instructions = ["mailbox", "tokio"]
            .iter()
            .zip([780.0, 700.0])
            .map(|(w, n)| InstructionCount {
                workload: w.to_string(),
                build: "release".into(),
                per_message: Some(n),
                ..InstructionCount::default()
            })
            .collect::<Vec<_>>();
        let got = analyze(&versus_sessions(1.08), &instructions, &versus_config(), &[]).unwrap();
        assert_eq!(got.len(), 1, "only release was measured: {got:?}");
        let r = &got[0];
        assert_eq!((r.build.as_str(), r.median.pairs), ("release", 12));
        assert!(
            r.median.ci_low_pct > 7.9 && r.median.ci_high_pct < 8.6,
            "{r:?}"
        );
        assert!(r.median.ci_low_pct <= r.median.change_pct);
        assert_eq!(r.instructions_ratio, Some(780.0 / 700.0));
        // The tail: the same ratio in these batches, so the same recovery.
        for tail in [&r.p99, &r.p999] {
            let t = tail.as_ref().expect("reported");
            assert!(t.ci_low_pct > 7.9 && t.ci_high_pct < 8.6, "{t:?}");
        }
        let line = crate::report::workload_ratios::versus_lines(&got);
        assert!(line.contains("mailbox / tokio on release"), "{line}");
        assert!(line.contains("instructions per message 1.114×"), "{line}");
    }

    #[test]
    fn batches_without_p999_leave_that_ratio_unreported() {
        let mut s = versus_sessions(1.08);
        for batch in s.iter_mut().flat_map(|s| s.batches.iter_mut().flatten()) {
            batch.p999_ns = None;
        }
        let got = analyze(&s, &[], &versus_config(), &[]).unwrap();
        assert!(got[0].p99.is_some() && got[0].p999.is_none(), "{got:?}");
        let line = crate::report::workload_ratios::versus_lines(&got);
        assert!(line.contains("p99.9 not reported"), "{line}");
    }

    #[test]
    fn a_session_missing_an_arm_is_an_error_naming_it() {
        let mut s = versus_sessions(1.0);
        s[3].arms[1] = "release:other".into();
        let err = analyze(&s, &[], &versus_config(), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "session 3 of `mailbox vs tokio` lacks the arm `release:mailbox` or `release:tokio`"
            ),
            "{err}"
        );
    }
}
