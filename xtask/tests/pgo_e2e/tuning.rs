//! `cargo xtask tune` on real profiles of mty-bench: a training whose fast-path phase is
//! starved of weight is found and corrected on a validation workload, and later merges use
//! the weights it chose.

use super::support::*;

/// A training workload's weight in tune.json.
fn weight_of(tuned: &serde_json::Value, name: &str) -> u64 {
    tuned["weights"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w[0] == name)
        .unwrap_or_else(|| panic!("{name} in {tuned}"))[1]
        .as_u64()
        .unwrap()
}

#[test]
fn the_tuner_gives_a_starved_phase_its_weight_back() {
    let run = good_run();
    let (tmp, data, target) = (&*run.tmp, &*run.data, &*run.target);
    let phase = |name: &str, weight: u64| {
        format!(
            r#"{{ name = "{name}", args = ["train", "--phase", "{name}", "--messages", "20000"], weight = {weight} }},"#
        )
    };
    let training = [
        phase("mailbox-empty", 1),
        phase("pressure", 64),
        phase("agents", 64),
    ]
    .join("\n    ");
    let config = config_edits(
        &tmp.join("tune.toml"),
        &[
            (
                r#"{ name = "train", args = ["train", "--messages", "20000"] },"#,
                &training,
            ),
            (
                "[measure]\n",
                "[validate]\nworkloads = [{ name = \"send_capacity_32\", args = [\"agent_send_latency\", \"--capacity\", \"32\", \"--messages\", \"20000\", \"--warmup\", \"0\"] }]\n\n[measure]\n",
            ),
        ],
    );
    let out = xtask_with(&config, &["tune"], data, target);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    let tuned = json(&data.join("tune.json"));
    let weight = |name: &str| weight_of(&tuned, name);
    let (fast, others) = (
        weight("mailbox-empty"),
        weight("pressure").max(weight("agents")),
    );
    assert!(
        fast * 64 > others,
        "the starved phase's share rose from 1:64 to {fast}:{others}:\n{err}"
    );
    let v = &tuned["validation"][0];
    assert!(
        v["after_pct"].as_f64().unwrap() > v["before_pct"].as_f64().unwrap() + 5.0,
        "{tuned}"
    );
    assert!(err.contains("tune: weights (config → tuned):"), "{err}");
    // The next merge weighs the training with them, and says so.
    let out = xtask_with(&config, &["pgo", "merge"], data, target);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("merge: the weights `cargo xtask tune` chose"),
        "{err}"
    );
    let parts = json(&data.join("stages/merge.json"))["parts"].clone();
    for part in parts.as_array().unwrap() {
        let name = part["workload"].as_str().unwrap();
        assert_eq!(part["weight"].as_u64(), Some(weight(name)), "{parts}");
    }
    // The config's weights edited after tuning: they win, and the merge says so.
    let edited = tmp.join("tune-edited.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        r#""--messages", "20000"], weight = 1 }"#,
        r#""--messages", "20000"], weight = 2 }"#,
    );
    std::fs::write(&edited, text).unwrap();
    let out = xtask_with(&edited, &["pgo", "merge"], data, target);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("was tuned for other training commands or weights than"),
        "{err}"
    );
    let parts = json(&data.join("stages/merge.json"))["parts"].clone();
    assert_eq!(parts[0]["weight"].as_u64(), Some(2), "{parts}");
    // Back to the tuned config: merged with the tuned weights again.
    let out = xtask_with(&config, &["pgo", "merge"], data, target);
    assert!(out.status.success(), "{}", stderr_of(&out));
    // The tuned weights written into the config: merged with them, without a word of a stale
    // tune.json.
    let carried = tmp.join("tune-carried.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    for name in ["mailbox-empty", "pressure", "agents"] {
        let old = |w: u64| phase(name, w);
        let from = [1, 64]
            .into_iter()
            .map(old)
            .find(|line| text.contains(line.as_str()))
            .unwrap();
        text = text.replace(&from, &phase(name, weight(name)));
    }
    std::fs::write(&carried, text).unwrap();
    let out = xtask_with(&carried, &["pgo", "merge"], data, target);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("was tuned for other"), "{err}");
    // A bundle of that profile keeps them.
    let bundle = tmp.join("tuned-bundle");
    let out = xtask_with(&config, &["export", bundle.to_str().unwrap()], data, target);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let manifest = json(&bundle.join("manifest.json"));
    for w in manifest["training"]["workloads"].as_array().unwrap() {
        let name = w["name"].as_str().unwrap();
        assert_eq!(w["weight"].as_u64(), Some(weight(name)), "{manifest}");
    }
}

/// The same on a registry crate's program (serde_json): a training of the workspace's orders
/// starved against one of bare numbers, a validation corpus of orders of its own (no measured
/// input): the orders' training gets its weight back.
#[test]
fn a_registry_crates_training_is_tuned_on_its_own_validation_corpus() {
    use super::own_program::{corpus, own_config_edits, own_run, own_xtask, ws};
    let run = own_run();
    let ws = ws();
    // The two corpora are gone again when the test ends, passed or failed: the workspace is a
    // git repository of its own, and other tests read its state.
    struct Remove(Vec<std::path::PathBuf>);
    impl Drop for Remove {
        fn drop(&mut self) {
            for f in &self.0 {
                let _ = std::fs::remove_file(f);
            }
        }
    }
    let _gone = Remove(vec![
        ws.join("corpus/numbers.jsonl"),
        ws.join("corpus/validate.jsonl"),
    ]);
    let numbers: String = (0..20_000)
        .map(|i| format!("{{\"amount\":{i}}}\n"))
        .collect();
    std::fs::write(ws.join("corpus/numbers.jsonl"), numbers).unwrap();
    // Orders drawn with a seed of their own: neither the training's nor the measured ones.
    std::fs::write(ws.join("corpus/validate.jsonl"), corpus(3, 10_000)).unwrap();
    // Orders starved 1:64 against bare numbers; `mode` the validation workload's.
    let config_with = |file: &str, mode: &str| {
        let to = format!(
            "workloads = [\n    {{ name = \"orders\", args = [], stdin = \"corpus/train.jsonl\", weight = 1 }},\n    \
             {{ name = \"numbers\", args = [], stdin = \"corpus/numbers.jsonl\", weight = 64 }},\n]\n\n\
             [validate]\nworkloads = [{{ name = \"other_orders\", args = []{mode}, stdin = \"corpus/validate.jsonl\" }}]"
        );
        own_config_edits(
            &run.tmp.join(file),
            &[(
                r#"workloads = [{ name = "orders", args = [], stdin = "corpus/train.jsonl" }]"#,
                to.as_str(),
            )],
        )
    };
    let config = config_with("tune.toml", "");
    let out = own_xtask(&config, &["tune"]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    let tuned = json(&run.data.join("tune.json"));
    let weight = |name: &str| weight_of(&tuned, name);
    assert!(
        weight("orders") * 64 > weight("numbers"),
        "the orders' share rose from 1:64: {tuned}\n{err}"
    );
    let v = &tuned["validation"][0];
    assert!(
        v["after_pct"].as_f64().unwrap() > v["before_pct"].as_f64().unwrap(),
        "{tuned}"
    );

    // Measured instead of predicted: the validation corpus whole-process, as the program is
    // measured. Each mix is built and measured against the config's in the same sessions.
    let measured = config_with("tune-measured.toml", ", mode = \"process\"");
    let out = own_xtask(&measured, &["tune", "--measure"]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    let tuned = json(&run.data.join("tune.json"));
    let found = &tuned["measured"];
    let mixes = found["mixes"]
        .as_array()
        .unwrap_or_else(|| panic!("{tuned}"));
    let labels: Vec<&str> = mixes.iter().map(|m| m["label"].as_str().unwrap()).collect();
    // The config's mix is the baseline; the agreement's (orders weighed up) and each training
    // workload weighed down 16 times are measured against it (a mix twice, once).
    assert!(
        labels.contains(&"less-orders")
            && (labels.contains(&"agreement") || labels.contains(&"less-numbers")),
        "{labels:?}"
    );
    for m in mixes {
        let label = m["label"].as_str().unwrap();
        assert!(
            run.data.join("tune").join(label).is_file(),
            "{label}'s lto+pgo"
        );
        let c = &m["against_config"][0];
        assert_eq!(c["workload"], "other_orders", "{m}");
        let (lo, mid, hi) = (
            c["ci_low_pct"].as_f64().unwrap(),
            c["change_pct"].as_f64().unwrap(),
            c["ci_high_pct"].as_f64().unwrap(),
        );
        assert!(
            lo <= mid && mid <= hi && c["sessions"].as_u64().unwrap() >= 4,
            "{m}"
        );
        // Judged against a threshold, as the pipeline's verdicts are.
        assert!(c["threshold_pct"].as_f64().unwrap() > 0.0, "{m}");
    }
    // Beside the mixes, lto and the validation oracle (its profile the validation corpus's
    // own): each mix's capture of the oracle's gain on the validation workload, and the
    // config's, where the oracle gains more than the min effect.
    for arm in ["lto", "oracle", "config"] {
        assert!(run.data.join("tune").join(arm).is_file(), "{arm}");
    }
    // The config's mix relinked in the config's four function orders, measured beside it:
    // the layout floor a change must pass.
    for k in 1..=4 {
        let variant = run.data.join(format!("tune/layout/lto-pgo.L{k}"));
        assert!(variant.is_file(), "{}", variant.display());
    }
    // Each arm ran from a fresh copy of its file, which keeps the file's name.
    assert!(
        err.contains(r#"/lto-pgo.L4","args""#) && err.contains("/copies/"),
        "the layouts ran as arms: {err}"
    );
    let config_capture = found["config_capture"]
        .as_array()
        .unwrap_or_else(|| panic!("{tuned}"));
    assert_eq!(config_capture.len(), 1, "{tuned}");
    assert_eq!(config_capture[0][0], "other_orders", "{tuned}");
    // The weights kept are those of the mix the rule chose (the config's when none).
    let chosen = found["chosen"].as_str().unwrap();
    let kept: Vec<(String, u64)> = ["orders", "numbers"]
        .iter()
        .map(|n| (n.to_string(), weight_of(&tuned, n)))
        .collect();
    let expected: Vec<(String, u64)> = if chosen == "config" {
        vec![("orders".into(), 1), ("numbers".into(), 64)]
    } else {
        let m = mixes.iter().find(|m| m["label"] == chosen).unwrap();
        serde_json::from_value(m["weights"].clone()).unwrap()
    };
    assert_eq!(kept, expected, "{tuned}\n{err}");
    assert!(err.contains("each mix against the config's"), "{err}");
    // The agreement checked against every capture measured: one case per mix with a capture
    // on the one validation workload, the config's among them.
    let check = &tuned["check"];
    let cases = check["cases"]
        .as_array()
        .unwrap_or_else(|| panic!("{tuned}"));
    let with_capture = mixes
        .iter()
        .filter(|m| !m["against_config"][0]["capture_pct"].is_null())
        .count()
        + usize::from(!config_capture[0][1].is_null());
    assert_eq!(cases.len(), with_capture, "{tuned}");
    assert!(
        cases.iter().all(|c| {
            let a = c["agreement_pct"].as_f64().unwrap();
            c["workload"] == "other_orders" && (0.0..=100.0).contains(&a)
        }),
        "{tuned}"
    );
    assert!(err.contains("tune: the agreement against the "), "{err}");
    // Each arm ran from a fresh copy every session: no copy of the config's build is kept
    // for a component to rest on, and no null joins the history.
    let history = json(&run.data.join("history.json"));
    assert!(history.get("nulls").is_none(), "{history}");
}
