//! `cargo xtask pgo tune` on real profiles of mty-bench: a training whose fast-path phase is
//! starved of weight is found and corrected on a validation workload, and later merges use
//! the weights it chose.

use super::support::*;

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
    let out = xtask_with(&config, &["pgo", "tune"], data, target);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    let tuned = json(&data.join("tune.json"));
    let weight = |name: &str| {
        tuned["weights"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w[0] == name)
            .unwrap_or_else(|| panic!("{name} in {tuned}"))[1]
            .as_u64()
            .unwrap()
    };
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
        err.contains("merge: the weights `cargo xtask pgo tune` chose"),
        "{err}"
    );
    let parts = json(&data.join("stages/merge.json"))["parts"].clone();
    for part in parts.as_array().unwrap() {
        let name = part["workload"].as_str().unwrap();
        assert_eq!(part["weight"].as_u64(), Some(weight(name)), "{parts}");
    }
}
