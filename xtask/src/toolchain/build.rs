//! The builds the pipeline makes, in one enum: each build's name (as the table, report.json,
//! report.md, the plot and the docs show it), cargo profile, target folder, description and
//! rustflags. A new build variant is one new arm here plus the stage that makes it.
//!
//! Build names are not cargo profile names: the cargo profile `release-pgo` (fat LTO, one
//! codegen unit) is shared by the `instrumented`, `lto`, `lto+pgo`, `oracle` and
//! `lto+pgo+bolt` builds, which differ only in the pipeline's own rustflags (cargo's `-C metadata` hash depends on the profile, so instrumenting and
//! optimising under one profile is what lets a profile apply).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Build {
    /// `-Cprofile-generate`: the executable the training runs.
    #[serde(rename = "instrumented")]
    Instrumented,
    /// The baseline: cargo's `release`, no LTO, no PGO.
    #[serde(rename = "release")]
    Release,
    /// Fat LTO and one codegen unit, no profile: LTO's share, told apart from PGO's.
    #[serde(rename = "lto")]
    Lto,
    /// Fat LTO plus the merged profile: what the benchmark page calls `release-pgo`.
    #[serde(rename = "lto+pgo")]
    LtoPgo,
    /// Fat LTO plus a profile of the measured workloads themselves: a yardstick for the
    /// training (not always a bound: its profile is merged from every measured workload).
    /// Measured beside the others, never shipped.
    #[serde(rename = "oracle")]
    Oracle,
    /// The PGO build relinked with its relocations (`-Wl,-q`), then optimised after link by
    /// BOLT with a profile of the same training mix (the `bolt` stage).
    #[serde(rename = "lto+pgo+bolt")]
    Bolt,
}

impl Build {
    /// The builds measured, in the order every table and plot shows them.
    pub const MEASURED: [Build; 5] = [
        Build::Release,
        Build::Lto,
        Build::LtoPgo,
        Build::Bolt,
        Build::Oracle,
    ];
    /// Every build, the instrumented one too.
    #[cfg(test)]
    pub const ALL: [Build; 6] = [
        Build::Instrumented,
        Build::Release,
        Build::Lto,
        Build::LtoPgo,
        Build::Bolt,
        Build::Oracle,
    ];
    /// What every other measured build is compared against.
    pub const BASELINE: Build = Build::Release;

    pub const fn name(self) -> &'static str {
        match self {
            Build::Instrumented => "instrumented",
            Build::Release => "release",
            Build::Lto => "lto",
            Build::LtoPgo => "lto+pgo",
            Build::Oracle => "oracle",
            Build::Bolt => "lto+pgo+bolt",
        }
    }

    pub fn cargo_profile(self) -> &'static str {
        match self {
            Build::Release => "release",
            Build::Instrumented | Build::Lto | Build::LtoPgo | Build::Oracle | Build::Bolt => {
                "release-pgo"
            }
        }
    }

    /// Its own folder under the target root, so builds never rebuild one another.
    pub fn target_folder(self) -> &'static str {
        match self {
            Build::Instrumented => "instrumented",
            Build::Release => "release",
            Build::Lto => "lto",
            Build::LtoPgo => "lto-pgo",
            Build::Oracle => "oracle",
            Build::Bolt => "lto-pgo-relocs",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Build::Instrumented => "fat LTO, -Cprofile-generate (training only)",
            Build::Release => "baseline: no LTO, no PGO",
            Build::Lto => "fat LTO, no PGO",
            Build::LtoPgo => "fat LTO + PGO",
            Build::Oracle => {
                "fat LTO + PGO trained on the measured workloads themselves (a yardstick, never shipped)"
            }
            Build::Bolt => "fat LTO + PGO, then BOLT (post-link layout from the same training mix)",
        }
    }

    /// The pipeline's own rustflags for this build. `pgo` is the raw-profile directory of the
    /// instrumented build and the merged profile of the PGO and oracle builds; the others take
    /// none.
    pub fn rustflags(self, pgo: Option<&Path>) -> String {
        let path = || {
            pgo.unwrap_or_else(|| panic!("the {} build needs a profile path", self.name()))
                .display()
        };
        match self {
            Build::Instrumented => format!("-Cprofile-generate={}", path()),
            // The missing-function warnings are the proof that the profile applied.
            Build::LtoPgo | Build::Oracle => format!(
                "-Cprofile-use={} -Cllvm-args=-pgo-warn-missing-function",
                path()
            ),
            // The same PGO build (its relocations kept by `final_args`).
            Build::Bolt => format!(
                "-Cprofile-use={} -Cllvm-args=-pgo-warn-missing-function",
                path()
            ),
            Build::Release | Build::Lto => String::new(),
        }
    }

    /// Flags for the final crate's rustc only (`cargo rustc -- …`): the link step is the
    /// final crate's, so the dependencies keep the flags of the build this one is seeded
    /// from and stay fresh.
    pub fn final_args(self) -> &'static [&'static str] {
        match self {
            // Relocations kept in the executable, for BOLT.
            Build::Bolt => &["-Clink-arg=-Wl,-q"],
            _ => &[],
        }
    }

    /// The build whose target folder seeds this one's when it does not exist yet: same
    /// profile, same rustflags, so cargo finds every dependency fresh and compiles only the
    /// final crate.
    pub fn seeded_from(self) -> Option<Build> {
        match self {
            Build::Bolt => Some(Build::LtoPgo),
            _ => None,
        }
    }
}

/// A finished build: which one, where its executable is, and exactly how it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Built {
    pub build: Build,
    pub exe: PathBuf,
    pub cargo_profile: String,
    pub rustflags: String,
    /// [`Build::description`], kept in report.json for its readers.
    pub description: String,
    /// Every flag it was built with, exactly (`rustflags` joins them with spaces): the
    /// user's own first (`rustflags.rs`), then the pipeline's.
    #[serde(default)]
    pub rustflags_exact: Vec<String>,
    /// Where the user's flags came from ("" for none).
    #[serde(default)]
    pub user_rustflags_source: String,
    /// The executable's content hash ([`crate::base::fsx::file_hash`]): what later stages key on.
    #[serde(default)]
    pub hash: String,
    /// How many crates cargo compiled for this build (0: everything was fresh). Not
    /// recorded: a stage's record must not change when nothing but this did.
    #[serde(skip)]
    pub compiled: u64,
}

impl Built {
    pub fn new(build: Build, exe: PathBuf, rustflags: String) -> Built {
        Built {
            build,
            exe,
            cargo_profile: build.cargo_profile().to_string(),
            rustflags,
            description: build.description().to_string(),
            rustflags_exact: Vec::new(),
            user_rustflags_source: String::new(),
            hash: String::new(),
            compiled: 0,
        }
    }

    pub fn name(&self) -> &'static str {
        self.build.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_profiles_folders_and_flags() {
        let names: Vec<&str> = Build::MEASURED.iter().map(|b| b.name()).collect();
        assert_eq!(
            names,
            ["release", "lto", "lto+pgo", "lto+pgo+bolt", "oracle"]
        );
        assert_eq!(Build::Lto.cargo_profile(), "release-pgo");
        assert_eq!(Build::Release.cargo_profile(), "release");
        // The JSON name is the display name.
        assert_eq!(
            serde_json::to_string(&Build::LtoPgo).unwrap(),
            r#""lto+pgo""#
        );
        let mut folders: Vec<&str> = [
            Build::Instrumented,
            Build::Release,
            Build::Lto,
            Build::LtoPgo,
            Build::Oracle,
            Build::Bolt,
        ]
        .iter()
        .map(|b| b.target_folder())
        .collect();
        folders.sort();
        folders.dedup();
        assert_eq!(folders.len(), 6, "one target folder each");
        assert_eq!(
            Build::LtoPgo.rustflags(Some(Path::new("/p/m.profdata"))),
            "-Cprofile-use=/p/m.profdata -Cllvm-args=-pgo-warn-missing-function"
        );
        assert_eq!(
            Build::Instrumented.rustflags(Some(Path::new("/raw"))),
            "-Cprofile-generate=/raw"
        );
        assert_eq!(Build::Release.rustflags(None), "");
    }
}
