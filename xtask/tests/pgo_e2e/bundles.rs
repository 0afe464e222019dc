//! Shipped profiles: a bundle exported from the good run builds the PGO binary without
//! training; bundles of two trainings merge with weights; bundles that cannot be merged or
//! used are refused, naming the file and the field.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::own_program::{own_run, own_xtask, ws};
use super::support::*;

fn ok(out: &std::process::Output) -> String {
    let err = stderr_of(out);
    assert!(out.status.success(), "{err}");
    err
}

/// `llvm-profdata show`'s total count of an indexed profile, with the run's llvm-profdata.
fn total_count(data: &Path, profile: &Path) -> u64 {
    let tool = json(&data.join("stages/doctor.json"))["llvm_profdata"]
        .as_str()
        .unwrap()
        .to_string();
    let out = Command::new(tool)
        .arg("show")
        .arg(profile)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Total count:"))
        .unwrap_or_else(|| panic!("no total count in:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("manifest.json");
    let mut m = json(&path);
    edit(&mut m);
    std::fs::write(&path, m.to_string()).unwrap();
}

fn copy_bundle(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in ["manifest.json", "profile.profdata"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
}

/// On the small workspace, where the lto+pgo build from the bundle takes seconds.
#[test]
fn an_exported_bundle_builds_the_pgo_binary_without_training() {
    let run = own_run();
    let (config, data) = (ws().join("pgo.toml"), &*run.data);
    let bundle = run.tmp.join("exported");
    ok(&own_xtask(&config, &["export", bundle.to_str().unwrap()]));
    let m = json(&bundle.join("manifest.json"));
    assert_eq!(m["format"], 1);
    assert_eq!(m["binary"], "jsonsum");
    assert_eq!(
        m["instrumented_hash"],
        json(&data.join("stages/instrument.json"))["hash"],
        "{m}"
    );
    assert_eq!(
        m["profile"]["hash"],
        json(&data.join("stages/merge.json"))["hash"]
    );
    assert!(
        m["rustc_vv"].as_str().unwrap().contains("LLVM version: "),
        "{m}"
    );
    assert_eq!(m["git_commit"].as_str().unwrap().len(), 40, "{m}");
    assert!(m["profile"]["functions"].as_u64().unwrap() > 100, "{m}");

    let out = own_xtask(&config, &["pgo", "--profile", bundle.to_str().unwrap()]);
    let err = ok(&out);
    for stage in ["instrument", "train", "insight", "oracle"] {
        assert!(err.contains(&format!("{stage}: skipped (")), "{err}");
    }
    assert!(
        !err.contains("LLVM_PROFILE_FILE="),
        "nothing was trained:\n{err}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("APPLIED"));
    let report = json(&data.join("report.json"));
    let origin = report["profile"]["origin"].as_str().unwrap();
    assert!(
        origin.starts_with(&format!("bundle {}", bundle.display())),
        "{origin}"
    );
    let builds: Vec<&str> = report["workloads"][0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["build"].as_str().unwrap())
        .collect();
    // Its config turns BOLT off.
    assert_eq!(
        builds,
        ["release", "lto", "lto+pgo"],
        "no oracle without a training"
    );
    assert!(
        !data.join("stages/insight.json").exists(),
        "an old insight would mislead"
    );
}

#[test]
fn bundles_of_two_trainings_merge_with_their_weights() {
    let run = good_run();
    let (tmp, data, target) = (&*run.tmp, &*run.data, &*run.target);
    let (a, b, merged) = (tmp.join("a"), tmp.join("b"), tmp.join("merged"));
    ok(&xtask(
        &["pgo", "train", "--bundle", a.to_str().unwrap()],
        data,
        target,
    ));
    // Another mix, on the same instrumented binary: bare tokio only.
    let other = config_variant(
        &tmp.join("other-mix.toml"),
        r#"args = ["train", "--messages", "20000"]"#,
        r#"args = ["tokio_mpsc_send_latency", "--messages", "20000"]"#,
    );
    ok(&xtask_with(
        &other,
        &["pgo", "train", "--bundle", b.to_str().unwrap()],
        data,
        target,
    ));
    assert_eq!(
        json(&a.join("manifest.json"))["instrumented_hash"],
        json(&b.join("manifest.json"))["instrumented_hash"]
    );
    let (ta, tb) = (
        total_count(data, &a.join("profile.profdata")),
        total_count(data, &b.join("profile.profdata")),
    );
    assert_ne!(ta, tb, "two different mixes");
    let input_a = format!("{}:3", a.display());
    ok(&xtask(
        &[
            "pgo",
            "merge",
            "--input",
            &input_a,
            "--input",
            b.to_str().unwrap(),
            "--bundle",
            merged.to_str().unwrap(),
        ],
        data,
        target,
    ));
    // llvm-profdata's weighted inputs: 3 × a + 1 × b, exactly.
    assert_eq!(
        total_count(data, &merged.join("profile.profdata")),
        3 * ta + tb
    );
    let m = json(&merged.join("manifest.json"));
    assert_eq!(
        m["merged_from"],
        serde_json::json!([format!("{}×3", a.display()), format!("{}×1", b.display())])
    );
    let recorded = json(&data.join("stages/merge.json"));
    assert_eq!(recorded["total_count"].as_u64(), Some(3 * ta + tb));
    assert!(
        recorded["origin"]
            .as_str()
            .unwrap()
            .starts_with("merged from bundles "),
        "{recorded}"
    );
}

/// On the small workspace: its second instrumented build (another pgo-data) takes seconds.
#[test]
fn a_bundle_of_another_instrumented_binary_is_refused_naming_both() {
    let run = own_run();
    let config = ws().join("pgo.toml");
    let (a, c) = (run.tmp.join("here"), run.tmp.join("elsewhere"));
    ok(&own_xtask(&config, &["export", a.to_str().unwrap()]));
    // Another pgo-data is another raw-profile path compiled into the instrumented binary:
    // another executable (built in a target directory of its own, not to disturb the rest).
    let (other_data, other_target) = (run.tmp.join("other-data"), run.tmp.join("other-target"));
    ok(&own_xtask(
        &config,
        &[
            "pgo",
            "train",
            "--bundle",
            c.to_str().unwrap(),
            "--pgo-data",
            other_data.to_str().unwrap(),
            "--target-dir",
            other_target.to_str().unwrap(),
        ],
    ));
    let out = own_xtask(
        &config,
        &[
            "pgo",
            "merge",
            "--input",
            a.to_str().unwrap(),
            "--input",
            c.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let err = stderr_of(&out);
    assert!(
        err.contains(&format!(
            "cannot merge {} and {}: they were trained on different instrumented binaries",
            a.display(),
            c.display()
        )),
        "{err}"
    );
}

#[test]
fn a_corrupt_or_stale_bundle_is_refused_naming_the_file_and_the_field() {
    let run = good_run();
    let (tmp, data, target) = (&*run.tmp, &*run.data, &*run.target);
    let good = tmp.join("good");
    ok(&xtask(&["export", good.to_str().unwrap()], data, target));
    let refused = |dir: &Path, expected: &[&str]| {
        let out = xtask(&["pgo", "--profile", dir.to_str().unwrap()], data, target);
        assert!(!out.status.success());
        let err = stderr_of(&out);
        for part in expected {
            assert!(err.contains(part), "expected {part:?} in:\n{err}");
        }
    };
    // A field missing from the manifest.
    let missing = tmp.join("missing-field");
    copy_bundle(&good, &missing);
    edit_manifest(&missing, |m| {
        m.as_object_mut().unwrap().remove("instrumented_hash");
    });
    let manifest = missing.join("manifest.json");
    refused(
        &missing,
        &[
            &format!("the bundle manifest {} is corrupt", manifest.display()),
            "missing field `instrumented_hash`",
        ],
    );
    // A truncated manifest.
    let truncated = tmp.join("truncated");
    copy_bundle(&good, &truncated);
    let text = std::fs::read(truncated.join("manifest.json")).unwrap();
    std::fs::write(truncated.join("manifest.json"), &text[..text.len() / 2]).unwrap();
    refused(
        &truncated,
        &[&format!(
            "the bundle manifest {} is corrupt",
            truncated.join("manifest.json").display()
        )],
    );
    // A profile that is not the one the manifest describes.
    let replaced = tmp.join("replaced");
    copy_bundle(&good, &replaced);
    edit_manifest(&replaced, |m| {
        m["profile"]["hash"] = "0000000000000000".into()
    });
    refused(
        &replaced,
        &["field `profile.hash` is 0000000000000000, but "],
    );
    // Trained from other sources: stale, with the reason and the way out.
    let stale = tmp.join("stale");
    copy_bundle(&good, &stale);
    edit_manifest(&stale, |m| m["sources"] = "00000000deadbeef".into());
    refused(
        &stale,
        &[
            "is stale: the sources differ",
            "sources fingerprint 00000000deadbeef there",
            "--allow-stale",
        ],
    );
}
