//! The daemon's top-level modules form no cycle (issue 33): each imports only modules
//! below it, so a reader can take the daemon in from the bottom up, and a new arrow
//! that closes a loop fails here with the loop named.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../daemon/src");

/// Every `.rs` file below `dir`.
fn sources(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("daemon/src").flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The top-level module a file of daemon/src belongs to (`None`: lib.rs).
fn module_of(file: &Path) -> Option<String> {
    let relative = file.strip_prefix(SRC).expect("under daemon/src");
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then(|| name.to_string())
}

/// The modules `text` names as `crate::NAME`, also inside `crate::{A, B::c}`.
fn named(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        let names: Vec<&str> = match rest.strip_prefix('{') {
            Some(group) => group
                .split('}')
                .next()
                .unwrap_or("")
                .split(',')
                .map(|part| part.trim().split("::").next().unwrap_or(""))
                .collect(),
            None => vec![rest
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("")],
        };
        found.extend(
            names
                .into_iter()
                .filter(|name| modules.contains(*name))
                .map(str::to_string),
        );
    }
    found
}

/// Which top-level module imports which.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(Path::new(SRC), &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("a source file");
        let mut uses = named(&text, &modules);
        uses.remove(&module);
        graph.entry(module).or_default().extend(uses);
    }
    graph
}

/// A path that leads from `from` back to `from`, if there is one.
fn loop_through(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().expect("a path is never empty");
        for next in graph.get(last).into_iter().flatten() {
            if next == from {
                let mut whole = path.clone();
                whole.push(next.clone());
                return Some(whole);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

#[test]
fn the_daemons_top_level_modules_form_no_cycle() {
    let graph = imports();
    assert!(graph.len() > 10, "read too few modules: {graph:?}");
    for module in graph.keys() {
        if let Some(cycle) = loop_through(&graph, module) {
            panic!(
                "daemon/src has an import cycle: {}; move what the lower module needs \
                 down, or hand it in from above (a callback, a message)",
                cycle.join(" -> ")
            );
        }
    }
}

#[test]
fn the_daemon_links_no_shim_code() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../daemon/Cargo.toml"))
            .expect("daemon/Cargo.toml");
    assert!(
        !manifest.contains("grove-agent-shim"),
        "the daemon depends on the shim crate; their contract is grove_proto::shim"
    );
}
