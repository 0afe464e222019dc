//! Tidy checks of the documents against the code: docs/configuration.md lists exactly the
//! keys the config accepts, with the code's defaults; the shipped profile keeps those
//! defaults; the README stays a guide; commit subjects stay short.

use std::collections::BTreeSet;

use super::{root, section};

/// The keys the config accepts, by its own deserializer: for each table, the field list of
/// the error serde gives for an unknown key; the tables among those fields are walked in turn.
/// Tables and arrays of tables, by dotted path ("[]" for an array's elements).
const TABLES: [&str; 15] = [
    "",
    "validate",
    "validate.workloads[]",
    "train",
    "train.workloads[]",
    "measure",
    "measure.lockstep",
    "measure.workloads[]",
    "measure.versus[]",
    "instructions",
    "apply_check",
    "check",
    "compare",
    "calibrate",
    "insight",
];
const MORE: [&str; 2] = ["bolt", "layout"];

fn schema_keys() -> BTreeSet<String> {
    let base: toml::Table =
        toml::from_str(&std::fs::read_to_string(root().join("profiles/default.toml")).unwrap())
            .unwrap();
    let mut keys = BTreeSet::new();
    for table in TABLES.iter().chain(&MORE) {
        let mut doc = base.clone();
        let mut at = &mut doc;
        for part in table.split('.').filter(|p| !p.is_empty()) {
            let (name, array) = match part.strip_suffix("[]") {
                Some(n) => (n, true),
                None => (part, false),
            };
            let value = at
                .entry(name)
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let value = if array {
                &mut value.as_array_mut().expect("an array of tables")[0]
            } else {
                value
            };
            at = value.as_table_mut().expect("a table");
        }
        at.insert("zz_not_a_key".into(), toml::Value::Integer(0));
        let err = crate::config::parse(&toml::to_string(&doc).unwrap())
            .expect_err("an unknown key is refused")
            .to_string();
        let expected = err
            .split_once("expected")
            .unwrap_or_else(|| panic!("no field list in: {err}"))
            .1;
        for field in expected.split('`').skip(1).step_by(2) {
            let key = match table {
                &"" => field.to_string(),
                t => format!("{t}.{field}"),
            };
            let nested = TABLES
                .iter()
                .chain(&MORE)
                .any(|t| t.trim_end_matches("[]") == key);
            if !nested {
                keys.insert(key);
            }
        }
    }
    keys
}

/// The dotted keys of `table` (under `prefix`) that the config does not accept: neither a key
/// of `keys` nor a table of the schema holding only accepted keys.
fn unknown_keys(table: &toml::Table, prefix: &str, keys: &BTreeSet<String>) -> Vec<String> {
    let known_table = |path: &str| TABLES.iter().chain(&MORE).any(|t| *t == path);
    let mut out = Vec::new();
    for (k, v) in table {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        // A fragment quoted without its table header (`pin_core = 1` under a heading naming
        // `measure.pin_core`): a key some table accepts.
        let fragment = prefix.is_empty() && keys.iter().any(|x| x.ends_with(&format!(".{k}")));
        if keys.contains(&path) || fragment {
            continue;
        }
        match v {
            toml::Value::Table(t) if known_table(&path) => {
                out.extend(unknown_keys(t, &path, keys));
            }
            toml::Value::Array(items) if known_table(&format!("{path}[]")) => {
                for item in items {
                    if let Some(t) = item.as_table() {
                        out.extend(unknown_keys(t, &format!("{path}[]"), keys));
                    }
                }
            }
            _ => out.push(path),
        }
    }
    out
}

/// A results page that quotes a config the code no longer accepts says so at its top: the
/// keys of its ```toml blocks are checked against the schema, and each key that is gone must
/// be named, with "no longer accepts", in the page's first lines.
#[test]
fn results_pages_say_which_quoted_keys_are_gone() {
    let keys = schema_keys();
    let mut missing = Vec::new();
    let mut pages: Vec<_> = std::fs::read_dir(root().join("docs/results"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        let mut gone = BTreeSet::new();
        for block in text.split("```toml\n").skip(1) {
            let block = block.split("\n```").next().unwrap_or_default();
            // A fragment that is not whole TOML (an ellipsis, a placeholder) is not checked.
            if let Ok(table) = toml::from_str::<toml::Table>(block) {
                gone.extend(unknown_keys(&table, "", &keys));
            }
        }
        let top: String = text.lines().take(12).collect::<Vec<_>>().join("\n");
        let named = top.contains("no longer accepts");
        for key in gone {
            if !named || !top.contains(&format!("`{key}`")) {
                missing.push(format!(
                    "{}: `{key}`",
                    page.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "results pages quote config keys the config no longer accepts; say so in their first lines (\"the config no longer accepts `key`\"): {missing:?}"
    );
}

/// The README is a user's guide, not a notebook: measured runs live in docs/results/.
#[test]
fn the_readme_stays_a_guide() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines (at most 250): move measurements to docs/results/, findings to docs/findings.md"
    );
}

/// The README's configs are real ones: each ```toml block parses as a whole config, and the
/// first recipe's is `examples/agent-pipeline/cli.toml`, the config that recipe's output was
/// made with, less its header comment.
#[test]
fn the_readmes_configs_parse_and_the_first_recipe_is_the_example() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let blocks: Vec<&str> = readme
        .split("```toml\n")
        .skip(1)
        .map(|b| b.split("\n```").next().unwrap())
        .collect();
    assert!(blocks.len() >= 2, "README.md has the recipes' configs");
    for (i, block) in blocks.iter().enumerate() {
        if let Err(err) = crate::config::parse(block) {
            panic!(
                "README.md's config {} does not parse: {err:#}\n{block}",
                i + 1
            );
        }
    }
    let cli = std::fs::read_to_string(root().join("examples/agent-pipeline/cli.toml")).unwrap();
    let cli: String = cli
        .lines()
        .skip_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        format!("{}\n", blocks[0]),
        cli,
        "README.md's first recipe and examples/agent-pipeline/cli.toml differ"
    );
}

#[test]
fn the_configuration_reference_lists_every_key() {
    let reference = std::fs::read_to_string(root().join("docs/configuration.md")).unwrap();
    let documented: BTreeSet<String> = section(&reference, "docs/configuration.md", "Keys")
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        // Every key quoted in the first cell (a row may name several).
        .flat_map(|l| {
            let cell = l.split(" | ").next().unwrap_or("");
            format!("`{cell}")
                .split('`')
                .skip(1)
                .step_by(2)
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect();
    let schema = schema_keys();
    assert!(schema.len() > 30, "{schema:?}");
    let missing: Vec<&String> = schema.difference(&documented).collect();
    let extra: Vec<&String> = documented.difference(&schema).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/configuration.md's table and the config differ: not documented {missing:?}; \
         documented but not accepted {extra:?}"
    );
}

/// The config with every default: only what has none given.
fn defaults() -> toml::Value {
    let config: crate::config::Config = toml::from_str(
        "binary = \"x\"\n[train]\n[measure]\n[apply_check]\nrequired = []\n[compare]\n",
    )
    .unwrap();
    toml::Value::try_from(config).unwrap()
}

/// The value at a dotted key (`measure.lockstep.sessions`) of a TOML document.
fn at<'a>(doc: &'a toml::Value, key: &str) -> Option<&'a toml::Value> {
    key.split('.').try_fold(doc, |v, part| v.get(part))
}

/// A documented default (`6,000`, `` `true` ``, `1.0`) equal to the code's.
fn same_value(documented: &str, code: &toml::Value) -> bool {
    let text = documented.replace([',', '`'], "");
    match code {
        toml::Value::Boolean(b) => text == b.to_string(),
        toml::Value::Integer(i) => text.parse::<f64>() == Ok(*i as f64),
        toml::Value::Float(f) => text.parse::<f64>() == Ok(*f),
        toml::Value::String(s) => text.trim_matches('"') == s,
        toml::Value::Array(a) if text == "none" => a.is_empty(),
        // `[0, 1, 2, 5]`, `["release"]`: read as TOML, numbers compared as numbers.
        toml::Value::Array(a) => {
            toml::from_str::<toml::Table>(&format!("v = {}", documented.replace('`', "")))
                .ok()
                .and_then(|t| t.get("v").and_then(|v| v.as_array()).cloned())
                .is_some_and(|d| {
                    d.len() == a.len()
                        && d.iter().zip(a).all(|(d, c)| {
                            let num =
                                |v: &toml::Value| v.as_float().or(v.as_integer().map(|i| i as f64));
                            match (num(d), num(c)) {
                                (Some(x), Some(y)) => x == y,
                                _ => d == c,
                            }
                        })
                })
        }
        _ => false,
    }
}

/// One source of truth per default: every key the code gives a default has a "(default X" in
/// docs/configuration.md's table, and X is the code's (a row names one key, or as many keys as
/// defaults, in order; a key the code leaves unset needs none).
#[test]
fn the_documented_defaults_are_the_codes() {
    let reference = std::fs::read_to_string(root().join("docs/configuration.md")).unwrap();
    let mut defaults = defaults();
    // Keys the config leaves out when at their default (`skip_serializing_if`): that default.
    const UNSERIALISED: [(&str, bool); 1] = [("train.continuous", false)];
    for (key, value) in UNSERIALISED {
        let (table, field) = key.split_once('.').unwrap();
        if let Some(t) = defaults.get_mut(table).and_then(|t| t.as_table_mut()) {
            t.entry(field).or_insert(toml::Value::Boolean(value));
        }
    }
    let mut checked = 0;
    let mut wrong = Vec::new();
    let mut documented = BTreeSet::new();
    for row in section(&reference, "docs/configuration.md", "Keys")
        .lines()
        .filter(|l| l.starts_with("| `"))
    {
        let mut cells = row.split(" | ");
        let keys: Vec<&str> = cells
            .next()
            .unwrap_or("")
            .split('`')
            .skip(1)
            .step_by(2)
            .collect();
        let said: Vec<&str> = cells
            .next()
            .unwrap_or("")
            .split("(default ")
            .skip(1)
            .map(|rest| {
                // An array, `[…]`, whole; else up to the first `)`, `;`, `:` or `, `.
                if rest.starts_with("`[") {
                    return rest.find("]`").map_or(rest, |end| &rest[..end + 2]);
                }
                let value = rest.split([')', ';', ':']).next().unwrap_or("");
                value.split(", ").next().unwrap_or("").trim()
            })
            .collect();
        if said.is_empty() || said.len() != keys.len() {
            continue;
        }
        for (key, value) in keys.iter().zip(&said) {
            // A key the code leaves unset has its default said in words (`(default none)`).
            documented.insert(key.to_string());
            if let Some(code) = at(&defaults, key) {
                checked += 1;
                if !same_value(value, code) {
                    wrong.push(format!("{key}: documented {value}, code {code}"));
                }
            }
        }
    }
    // Keys a config must give: no default to document.
    const REQUIRED: [&str; 2] = ["binary", "apply_check.required"];
    for key in schema_keys() {
        let given =
            at(&defaults, &key).is_some_and(|v| !v.is_table()) && !REQUIRED.contains(&key.as_str());
        if given && !documented.contains(&key) {
            wrong.push(format!(
                "{key}: no documented default, code {}",
                at(&defaults, &key).unwrap()
            ));
        }
    }
    assert!(checked >= 10, "only {checked} documented defaults found");
    assert!(
        wrong.is_empty(),
        "docs/configuration.md and the code differ: {wrong:#?}"
    );
}

/// The shipped profile sets no default of its own: where it gives a key the code defaults, the
/// value is the code's (program-specific keys aside), so a user's config gets the same shape.
#[test]
fn the_shipped_profile_keeps_the_codes_defaults() {
    // mty-bench's own: what it is, where its profile must reach, its core, its instruction
    // counts, its calibration sizes, its workloads compared.
    const ITS_OWN: [&str; 7] = [
        "binary",
        "apply_check.required",
        "measure.pin_core",
        "measure.versus",
        "instructions.messages",
        "calibrate.sizes_pct",
        "check.workloads",
    ];
    let shipped: toml::Value =
        toml::from_str(&std::fs::read_to_string(root().join("profiles/default.toml")).unwrap())
            .unwrap();
    let defaults = defaults();
    let mut differ = Vec::new();
    let mut checked = 0;
    let mut stack = vec![(String::new(), &shipped)];
    while let Some((path, value)) = stack.pop() {
        if let toml::Value::Table(t) = value {
            for (k, v) in t {
                let key = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                stack.push((key, v));
            }
            continue;
        }
        if ITS_OWN.contains(&path.as_str()) || value.is_array() && path.ends_with("workloads") {
            continue;
        }
        if let Some(code) = at(&defaults, &path).filter(|c| !c.is_table()) {
            checked += 1;
            let number = |v: &toml::Value| v.as_float().or(v.as_integer().map(|i| i as f64));
            let same = match (number(code), number(value)) {
                (Some(a), Some(b)) => a == b,
                _ => code == value,
            };
            if !same {
                differ.push(format!("{path}: shipped {value}, code {code}"));
            }
        }
    }
    assert!(checked >= 10, "only {checked} keys compared");
    assert!(
        differ.is_empty(),
        "profiles/default.toml and the code's defaults differ: {differ:#?}"
    );
}

/// Commit subjects since the house rule (issue 36) are at most 72 characters, git's
/// convention: details go in the body. A clone without that history has nothing to check.
#[test]
fn commit_subjects_are_at_most_72_characters() {
    const SINCE: &str = "9bfb083";
    let out = std::process::Command::new("git")
        .args([
            "log",
            "--no-merges",
            "--format=%h %s",
            &format!("{SINCE}..HEAD"),
        ])
        .current_dir(root())
        .output()
        .expect("git runs");
    if !out.status.success() {
        eprintln!(
            "no history since {SINCE} in this clone: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return;
    }
    let long: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.split_once(' ')
                .is_some_and(|(_, s)| s.chars().count() > 72)
        })
        .map(String::from)
        .collect();
    assert!(
        long.is_empty(),
        "commit subjects over 72 characters: {long:#?}"
    );
}
