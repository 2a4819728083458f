//! The top-level module graph of the library is acyclic: every `crate::<module>` path in a
//! non-test source file under `src/` is an edge from the file's top-level module to
//! `<module>`, and those edges must form a DAG (layers such as `framework` below both
//! `plugins` and `scheduling`). Test-only code (`tests.rs`, `*_tests.rs`, files under a
//! `tests/` directory, `test_util.rs`, items behind `#[cfg(test)]`) may reach across layers and
//! is not scanned. A few layering rules that acyclicity alone does not imply are checked too.
//!
//! Hand-written scanner (no parser crate): `use` trees and inline paths both spell the module
//! after `crate::`, which is all this check needs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Edges ignored by the cycle check, each with the reason it cannot go yet. Every entry must
/// still exist in the code (stale entries fail the test).
const ALLOWED: &[(&str, &str, &str)] = &[];

/// Edges that must not exist even though they would not close a cycle today.
const FORBIDDEN: &[(&str, &str, &str)] = &[
    ("framework", "plugins", "the framework names no plugin; the catalogue is plugins::registry"),
    ("framework", "scheduling", "the scheduler sits above the framework"),
    ("scheduling", "plugins", "the scheduler reaches plugins only through framework traits"),
    ("flowcontrol", "plugins", "Flow Control owns its extension points (flowcontrol::policy)"),
    ("flowcontrol", "framework", "Flow Control sits below the plugin framework"),
    ("suggest", "config", "the suggestion helper is a leaf"),
    ("replica", "plugins", "replica sync reaches plugins only through framework::replica hooks"),
];

/// One edge occurrence: file and line.
type Site = (PathBuf, usize);

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name != "tests.rs" && !name.ends_with("_tests.rs") {
                out.push(path);
            }
        }
    }
}

/// Lines of `text` outside `#[cfg(test)]` items (the attribute's item: one line ending in
/// `;`, or everything up to its balancing closing brace).
fn non_test_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            let mut depth = 0i64;
            let mut opened = false;
            for (_, item) in lines.by_ref() {
                let code = item.split("//").next().unwrap_or_default();
                depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
                opened |= code.contains('{');
                if (opened && depth <= 0) || (!opened && code.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        out.push((n + 1, line));
    }
    out
}

/// `crate::<module>` targets on one line of code (comments skipped).
fn targets(line: &str) -> Vec<&str> {
    let code = line.split("//").next().unwrap_or_default();
    code.match_indices("crate::")
        .filter(|(i, _)| !code[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$'))
        .map(|(i, m)| {
            let rest = &code[i + m.len()..];
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
            &rest[..end]
        })
        .filter(|t| !t.is_empty())
        .collect()
}

fn graph() -> BTreeMap<String, BTreeMap<String, Vec<Site>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut edges: BTreeMap<String, BTreeMap<String, Vec<Site>>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src");
        let top = rel.iter().next().and_then(|c| c.to_str()).expect("utf-8 path").trim_end_matches(".rs").to_string();
        if matches!(top.as_str(), "lib" | "main" | "test_util") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read source");
        for (n, line) in non_test_lines(&text) {
            for t in targets(line) {
                if t != top {
                    edges
                        .entry(top.clone())
                        .or_default()
                        .entry(t.to_string())
                        .or_default()
                        .push((rel.to_path_buf(), n));
                }
            }
        }
    }
    edges
}

fn allowed(from: &str, to: &str) -> bool {
    ALLOWED.iter().any(|(f, t, _)| *f == from && *t == to)
}

/// A cycle through `start`, if any, as a list of modules.
fn cycle_from(
    start: &str,
    node: &str,
    edges: &BTreeMap<String, BTreeMap<String, Vec<Site>>>,
    path: &mut Vec<String>,
    seen: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    path.push(node.to_string());
    for next in edges.get(node).into_iter().flat_map(|m| m.keys()) {
        if allowed(node, next) {
            continue;
        }
        if next == start {
            let mut cycle = path.clone();
            cycle.push(start.to_string());
            return Some(cycle);
        }
        if seen.insert(next.clone())
            && let Some(c) = cycle_from(start, next, edges, path, seen)
        {
            return Some(c);
        }
    }
    path.pop();
    None
}

fn describe(cycle: &[String], edges: &BTreeMap<String, BTreeMap<String, Vec<Site>>>) -> String {
    cycle
        .windows(2)
        .map(|w| {
            let (file, line) = &edges[&w[0]][&w[1]][0];
            format!("{} -> {} ({}:{line})", w[0], w[1], file.display())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn top_level_modules_form_a_dag() {
    let edges = graph();
    for start in edges.keys() {
        if let Some(cycle) = cycle_from(start, start, &edges, &mut Vec::new(), &mut BTreeSet::new()) {
            panic!("import cycle between top-level modules: {}", describe(&cycle, &edges));
        }
    }
}

#[test]
fn allow_list_entries_are_still_needed() {
    let edges = graph();
    for (from, to, why) in ALLOWED {
        assert!(
            edges.get(*from).is_some_and(|m| m.contains_key(*to)),
            "allow-listed edge {from} -> {to} ({why}) no longer exists: remove it"
        );
    }
}

#[test]
fn layering_rules_hold() {
    let edges = graph();
    for (from, to, why) in FORBIDDEN {
        if let Some(sites) = edges.get(*from).and_then(|m| m.get(*to)) {
            let (file, line) = &sites[0];
            panic!("{from} must not import {to} ({why}): {}:{line}", file.display());
        }
    }
}

#[test]
fn scanner_sees_edges_and_skips_test_items() {
    let text = "use crate::a::B;\n#[cfg(test)]\nmod tests {\n    use crate::c::D;\n}\nfn f() { crate::e::g(); }\n#[cfg(test)]\nmod t;\nuse crate::h;\n";
    let found: Vec<_> = non_test_lines(text).into_iter().flat_map(|(_, l)| targets(l)).collect();
    assert_eq!(found, ["a", "e", "h"]);
    assert!(targets("// crate::x is mentioned in a comment").is_empty());
    assert!(targets("let y = $crate::z;").is_empty());
}
