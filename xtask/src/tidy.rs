//! Tidy checks, as ordinary tests (after rust-analyzer's `tidy.rs`). The module graph keeps
//! the layers ARCHITECTURE.md lists and has no circle. Every file says what it is and is in
//! the codemap. docs/configuration.md lists exactly the keys the config accepts, with the
//! code's defaults, and the shipped profile keeps those defaults.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod docs;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

/// Every `.rs` file of xtask's `src/`, by module path (`main` for the crate root,
/// `report::markdown` for `src/report/markdown.rs`).
fn modules() -> BTreeMap<String, PathBuf> {
    modules_in(&root().join("xtask/src"))
}

/// Every `.rs` file under a crate's `src/`, by module path (`main` or `lib` for a root).
fn modules_in(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).unwrap().with_extension("");
                let name = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("::");
                out.insert(name, path);
            }
        }
    }
    out
}

/// Every crate of the workspace (the root manifest's `members`): its folder and its files.
fn crates() -> Vec<(String, BTreeMap<String, PathBuf>)> {
    let manifest: toml::Value =
        toml::from_str(&std::fs::read_to_string(root().join("Cargo.toml")).unwrap()).unwrap();
    let members = manifest["workspace"]["members"]
        .as_array()
        .expect("the workspace lists its members");
    let crates: Vec<(String, BTreeMap<String, PathBuf>)> = members
        .iter()
        .map(|m| {
            let dir = m.as_str().unwrap().to_string();
            let files = modules_in(&root().join(&dir).join("src"));
            (dir, files)
        })
        .collect();
    assert!(
        crates.len() >= 8,
        "the workspace lists {} crates",
        crates.len()
    );
    crates
}

/// Test-only code: a module's `tests` (inline or in `<module>/tests.rs`), and the fixtures.
fn test_only(module: &str) -> bool {
    let last = module.rsplit("::").next().unwrap_or(module);
    last == "tests" || last.ends_with("_tests") || ["testing", "tidy"].contains(&top(module))
}

/// The text without its `#[cfg(test)]` items (a `mod tests { … }` block, a `mod x;` line).
fn without_tests(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let (brace, semi) = (after.find('{'), after.find(';'));
        let end = match (brace, semi) {
            (_, Some(s)) if brace.is_none_or(|b| s < b) => s + 1,
            (Some(b), _) => b + matching_brace(&after[b..]),
            _ => after.len(),
        };
        rest = &after[end.min(after.len())..];
    }
    out.push_str(rest);
    out
}

/// The length up to and including the brace that closes the one `text` starts with,
/// skipping strings, character literals and comments.
fn matching_brace(text: &str) -> usize {
    let bytes = text.as_bytes();
    let (mut depth, mut i) = (0i32, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' if bytes.get(i + 2) == Some(&b'\'') => i += 2,
            b'\'' if bytes.get(i + 1) == Some(&b'\\') => {
                while i + 1 < bytes.len() && bytes[i + 1] != b'\'' {
                    i += 1;
                }
                i += 1;
            }
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    bytes.len()
}

/// The paths a file names: every `crate::…`, `super::…` and child-module path of its `use`
/// items (braces expanded) and of inline paths, as module paths relative to the crate.
fn references(module: &str, text: &str, all: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
    // Comments aside: a doc link (`[`crate::ring::Ring`]`) is no import.
    let code: String = without_tests(text)
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut paths: Vec<String> = Vec::new();
    // `use` items, braces expanded.
    let mut rest = code.as_str();
    while let Some(at) = find_use(rest) {
        let item = &rest[at..];
        let end = item.find(';').unwrap_or(item.len());
        let body = item[..end]
            .trim_start_matches("pub ")
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("use ");
        let body = body.split_whitespace().collect::<Vec<_>>().join(" ");
        expand(&body.replace(":: ", "::").replace("{ ", "{"), &mut paths);
        rest = &item[end..];
    }
    // Inline paths.
    for start in ["crate::", "super::"] {
        for (at, _) in code.match_indices(start) {
            let before = code[..at].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let path: String = code[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            // `super::{a, b}` is a `use` item, read above with its braces.
            if !path.ends_with("::") {
                paths.push(path);
            }
        }
    }
    let parent = module.rsplit_once("::").map(|(p, _)| p.to_string());
    let mut out = BTreeSet::new();
    for path in paths {
        let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        let (mut at, mut rest): (Option<String>, &[&str]) = match segments.first() {
            Some(&"crate") => (None, &segments[1..]),
            Some(&"super") => {
                let mut base = parent.clone();
                let mut i = 1;
                while segments.get(i) == Some(&"super") {
                    base = base.and_then(|b| b.rsplit_once("::").map(|(p, _)| p.to_string()));
                    i += 1;
                }
                (base, &segments[i..])
            }
            Some(&"self") => (Some(module.to_string()), &segments[1..]),
            // A child module of this one (`use sessions::analyze_lockstep`).
            Some(first) if all.contains_key(&child(Some(module), first)) => {
                (Some(module.to_string()), &segments[..])
            }
            _ => continue,
        };
        // Descend while the next segment is a module; the deepest one is the target.
        while let Some(next) = rest.first() {
            let candidate = child(at.as_deref(), next);
            if !all.contains_key(&candidate) {
                break;
            }
            at = Some(candidate);
            rest = &rest[1..];
        }
        match at {
            Some(target) if target != module => {
                out.insert(target);
            }
            _ => {}
        }
    }
    out
}

fn child(parent: Option<&str>, name: &str) -> String {
    match parent {
        None | Some("main" | "lib") => name.to_string(),
        Some(p) => format!("{p}::{name}"),
    }
}

/// The next `use` item at the start of a line.
fn find_use(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find("use ") {
        let abs = from + at;
        let line_start = text[..abs].rfind('\n').map_or(0, |n| n + 1);
        let prefix = text[line_start..abs].trim();
        if ["", "pub", "pub(crate)", "pub(super)"].contains(&prefix) {
            return Some(abs);
        }
        from = abs + 4;
    }
    None
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e` (`self` for the prefix itself).
fn expand(path: &str, out: &mut Vec<String>) {
    let path = path.trim();
    let Some(open) = path.find('{') else {
        out.push(path.split(" as ").next().unwrap_or(path).to_string());
        return;
    };
    let prefix = &path[..open];
    let inner = &path[open + 1..path.rfind('}').unwrap_or(path.len())];
    let mut depth = 0;
    let mut part = String::new();
    let mut parts = Vec::new();
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut part));
                continue;
            }
            _ => {}
        }
        part.push(c);
    }
    parts.push(part);
    for p in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        let p = p.split(" as ").next().unwrap_or(p);
        if p == "self" {
            out.push(prefix.trim_end_matches("::").to_string());
        } else {
            expand(&format!("{prefix}{p}"), out);
        }
    }
}

/// The `## NAME` section of a Markdown document, up to the next `## `.
fn section<'a>(text: &'a str, file: &str, name: &str) -> &'a str {
    text.split("\n## ")
        .find(|s| s.starts_with(name))
        .unwrap_or_else(|| panic!("{file} has no `## {name}` section"))
}

/// ARCHITECTURE.md's layer list: each top-level module of xtask with its layer's number.
fn layers() -> BTreeMap<String, (usize, String)> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let section = section(&text, "ARCHITECTURE.md", "Layers");
    let mut out = BTreeMap::new();
    for line in section.lines() {
        let Some((number, rest)) = line.split_once(". **") else {
            continue;
        };
        let Ok(number) = number.trim().parse::<usize>() else {
            continue;
        };
        let (name, modules) = rest.split_once("**").expect("`N. **name**: `a`, `b``");
        for m in modules.split('`').skip(1).step_by(2) {
            let old = out.insert(m.to_string(), (number, name.to_string()));
            assert!(
                old.is_none(),
                "`{m}` is listed in two layers of ARCHITECTURE.md"
            );
        }
    }
    assert!(
        !out.is_empty(),
        "ARCHITECTURE.md's `## Layers` lists no module"
    );
    out
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

/// The import arrows between xtask's files (tests aside).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    graph_of(&modules())
}

/// The import arrows between one crate's files (tests aside).
fn graph_of(all: &BTreeMap<String, PathBuf>) -> BTreeMap<String, BTreeSet<String>> {
    all.iter()
        .filter(|(m, _)| !test_only(m))
        .map(|(m, path)| {
            let text = std::fs::read_to_string(path).unwrap();
            let refs = references(m, &text, all)
                .into_iter()
                .filter(|t| !test_only(t))
                .collect();
            (m.clone(), refs)
        })
        .collect()
}

#[test]
fn no_module_imports_from_a_layer_above_its_own() {
    let layers = layers();
    let graph = graph();
    for m in modules().keys().map(|m| top(m)).filter(|m| !test_only(m)) {
        assert!(
            layers.contains_key(m),
            "the module `{m}` is in no layer of ARCHITECTURE.md's `## Layers`: add it"
        );
    }
    let mut upward = Vec::new();
    for (from, targets) in &graph {
        let (mine, my_name) = &layers[top(from)];
        for to in targets {
            let (theirs, their_name) = &layers[top(to)];
            if theirs > mine {
                upward.push(format!(
                    "{from} ({my_name}) imports {to} ({their_name}), a layer above it"
                ));
            }
        }
    }
    assert!(upward.is_empty(), "{}", upward.join("\n"));
    let arrows: usize = graph.values().map(BTreeSet::len).sum();
    assert!(arrows > 50, "the parser found only {arrows} import arrows");
}

/// No crate's files import each other in a circle: each crate's graph is layered, each file
/// standing on the files it imports (xtask's layers are named below).
#[test]
fn no_crates_imports_go_round_in_a_circle() {
    // Depth-first search; a node met again on the current path closes a circle.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut arrows = 0;
    for (dir, files) in crates() {
        let graph = graph_of(&files);
        arrows += graph.values().map(BTreeSet::len).sum::<usize>();
        let mut done = BTreeSet::new();
        for node in graph.keys() {
            if let Some(circle) = visit(node, &graph, &mut Vec::new(), &mut done) {
                panic!(
                    "{dir}: the imports go round in a circle: {}",
                    circle.join(" -> ")
                );
            }
        }
    }
    assert!(arrows > 80, "the parser found only {arrows} import arrows");
}

/// A circle is found: the checker on a made-up crate of two files importing each other.
#[test]
fn a_circle_is_found() {
    let dir = std::env::temp_dir().join(format!("xtask-tidy-circle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("main.rs"), "//! m\nmod a;\nmod b;\n").unwrap();
    std::fs::write(dir.join("a.rs"), "//! a\nuse crate::b::B;\npub struct A;\n").unwrap();
    std::fs::write(dir.join("b.rs"), "//! b\nuse crate::a::A;\npub struct B;\n").unwrap();
    let graph = graph_of(&modules_in(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        graph["a"].contains("b") && graph["b"].contains("a"),
        "{graph:?}"
    );
}

/// Files stay short enough to read: no source file but tests (and this one) over
/// [`MAX_LINES`] lines, in any crate; xtask's `src/` holds at most [`MAX_TOP`] files at its
/// top level, the rest in the folders of their layers.
#[test]
fn files_stay_short_and_xtask_keeps_its_folders() {
    const MAX_LINES: usize = 600;
    const MAX_TOP: usize = 12;
    let mut long = Vec::new();
    for (dir, files) in crates() {
        for (module, path) in files {
            if test_only(&module) {
                continue;
            }
            let lines = std::fs::read_to_string(&path).unwrap().lines().count();
            if lines > MAX_LINES {
                long.push(format!("{dir}/src/{module}: {lines} lines"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines (split them by what they do): {long:?}"
    );
    let top: Vec<String> = std::fs::read_dir(root().join("xtask/src"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        top.len() <= MAX_TOP,
        "xtask/src has {} files at its top level, more than {MAX_TOP} (put them in their layer's folder): {top:?}",
        top.len()
    );
}

/// The checker itself, on made-up files: a child reaching its parent's item, braces, a
/// re-exported child, and test code left out.
#[test]
fn imports_are_resolved_to_the_file_that_defines_them() {
    let all: BTreeMap<String, PathBuf> = ["a", "a::b", "a::c", "d", "main"]
        .into_iter()
        .map(|m| (m.to_string(), PathBuf::new()))
        .collect();
    let text = "//! x\nuse super::Thing;\nuse crate::{d::{self, Y}, a::c::Z};\n\
                fn f() { crate::d::g(); }\n#[cfg(test)]\nmod tests {\n    use crate::main;\n}\n";
    let refs: Vec<String> = references("a::b", text, &all).into_iter().collect();
    assert_eq!(refs, ["a", "a::c", "d"]);
    let parent = "pub use b::Thing;\nmod b;\n";
    let refs: Vec<String> = references("a", parent, &all).into_iter().collect();
    assert_eq!(refs, ["a::b"]);
}

/// One layout of unit tests: a module's child `tests`, declared last under `#[cfg(test)]`,
/// its body inline or in `<module>/tests.rs` by Rust's own rule; no `#[path]`.
#[test]
fn unit_tests_are_each_modules_child_tests() {
    for (module, path) in modules() {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.lines().any(|l| l.trim_start().starts_with("#[path")),
            "{}: a `#[path]` attribute (declare `mod tests;`, in <module>/tests.rs)",
            path.display()
        );
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.starts_with("mod tests") {
                assert!(
                    i > 0 && lines[i - 1] == "#[cfg(test)]",
                    "{module}: `mod tests` without `#[cfg(test)]` before it"
                );
            }
        }
    }
}

#[test]
fn every_file_says_what_it_is() {
    for path in modules().values() {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(
            text.starts_with("//!"),
            "{} does not start with a `//!` line saying what it is",
            path.display()
        );
    }
}

/// ARCHITECTURE.md's codemap names every file of xtask's `src/` by its path, and every
/// `src/….rs` path it names under `xtask/` exists.
#[test]
fn the_codemap_names_every_file_and_no_file_that_is_gone() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let codemap = section(&text, "ARCHITECTURE.md", "Codemap");
    let xtask = codemap
        .split("\n- `")
        .find(|s| s.starts_with("xtask/`"))
        .expect("the codemap has an `xtask/` entry");
    // The entry starts inside its first backtick pair: put the backtick back for the parity.
    let named: BTreeSet<String> = format!("`{xtask}")
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|p| p.starts_with("src/") && p.ends_with(".rs"))
        .map(String::from)
        .collect();
    let src = root().join("xtask");
    let files: BTreeSet<String> = modules()
        .values()
        .map(|p| p.strip_prefix(&src).unwrap().to_string_lossy().into_owned())
        .collect();
    let unnamed: Vec<&String> = files.difference(&named).collect();
    let gone: Vec<&String> = named.difference(&files).collect();
    assert!(
        unnamed.is_empty() && gone.is_empty(),
        "ARCHITECTURE.md's codemap and xtask/src differ: not named {unnamed:?}; named but gone {gone:?}"
    );
}
