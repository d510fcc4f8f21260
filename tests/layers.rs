//! The binary's layers import one way (docs/architecture.md): this test reads
//! every `crate::…` path in `src/` and fails on an edge the rules do not allow.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module and the modules it may use. `main.rs` may use all;
/// a command (`cmd/X.rs`) may use every layer but no other command.
const RULES: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("workload", &["error"]),
    ("text", &["workload"]),
    ("record", &["workload", "text", "error"]),
    ("kernel", &["record", "workload", "text", "error"]),
    (
        "measure",
        &["kernel", "record", "workload", "text", "error"],
    ),
    ("model", &["record", "workload", "text", "error"]),
    (
        "crosscheck",
        &[
            "measure", "model", "kernel", "record", "workload", "text", "error",
        ],
    ),
    ("store", &["record", "workload", "text", "error"]),
    (
        "analysis",
        &["store", "record", "workload", "text", "error"],
    ),
    ("guest", &["record", "workload", "text", "error"]),
    (
        "fleet",
        &[
            "guest", "store", "kernel", "record", "workload", "text", "error",
        ],
    ),
    (
        "bisect",
        &[
            "fleet", "guest", "store", "kernel", "record", "text", "error",
        ],
    ),
    (
        "report",
        &["analysis", "store", "record", "workload", "text", "error"],
    ),
    (
        "reproduce",
        &[
            "report", "analysis", "fleet", "guest", "store", "measure", "record", "workload",
            "text", "error",
        ],
    ),
    (
        "cli",
        &[
            "analysis", "store", "measure", "kernel", "record", "workload", "text", "error",
        ],
    ),
    // The renderers' round-trip property test (test-only, above every
    // layer like main.rs).
    (
        "roundtrip",
        &["cmd", "report", "analysis", "store", "error"],
    ),
    (
        "cmd",
        &[
            "cli",
            "bisect",
            "reproduce",
            "report",
            "analysis",
            "fleet",
            "store",
            "crosscheck",
            "measure",
            "model",
            "kernel",
            "guest",
            "record",
            "workload",
            "text",
            "error",
        ],
    ),
];

/// Crate-root items that belong to a module (macros are exported at the root).
fn owner(item: &str) -> &str {
    match item {
        "bail_usage" => "error",
        other => other,
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every module named right after `crate::`, including inside `crate::{a, b::c}`.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The group ends at its matching brace.
            let mut depth = 0;
            let end = group
                .char_indices()
                .find(|&(_, ch)| {
                    match ch {
                        '{' => depth += 1,
                        '}' if depth == 0 => return true,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    false
                })
                .map_or(group.len(), |(j, _)| j);
            // Top-level names of a group: split at commas outside nested braces.
            let (mut depth, mut start) = (0, 0);
            let g = &group[..end];
            for (j, ch) in g.char_indices().chain([(g.len(), ',')]) {
                match ch {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        let name: String = g[start..j]
                            .trim()
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        if !name.is_empty() {
                            refs.insert(name);
                        }
                        start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                refs.insert(name);
            }
        }
    }
    refs
}

/// Commands (of `commands`) a file in `src/cmd/` names, as `crate::cmd::X`
/// or `super::X`; the helpers of `cmd/mod.rs` are glue, not commands.
fn command_refs(code: &str, commands: &BTreeSet<String>) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    for prefix in ["crate::cmd::", "super::"] {
        for (i, _) in code.match_indices(prefix) {
            let name: String = code[i + prefix.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if commands.contains(&name) {
                refs.insert(name);
            }
        }
    }
    refs
}

/// Code without `//` comments (doc comments cite paths in prose).
fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn imports_follow_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rules: BTreeMap<&str, &[&str]> = RULES.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let commands: BTreeSet<String> = std::fs::read_dir(src.join("cmd"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .file_name()
                .to_str()
                .unwrap()
                .trim_end_matches(".rs")
                .to_string()
        })
        .filter(|n| n != "mod")
        .collect();
    let mut violations = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let mut parts = rel.iter().map(|p| p.to_str().unwrap());
        let first = parts.next().unwrap();
        if first == "main.rs" {
            continue;
        }
        let module = first.trim_end_matches(".rs");
        let allowed = rules.get(module).unwrap_or_else(|| {
            panic!("src/{module} has no layer: add it to RULES and docs/architecture.md")
        });
        let code = strip_comments(&std::fs::read_to_string(&file).unwrap());
        if module == "cmd" {
            let own = parts.next().unwrap().trim_end_matches(".rs");
            for other in command_refs(&code, &commands) {
                if own != "mod" && other != own {
                    violations.push(format!(
                        "src/{} uses the command cmd::{other}",
                        rel.display()
                    ));
                }
            }
        }
        for name in crate_refs(&code) {
            let target = owner(&name);
            if target == module {
                continue;
            }
            if !allowed.contains(&target) {
                violations.push(format!("src/{} ({module}) uses {target}", rel.display()));
            }
        }
    }
    violations.sort();
    violations.dedup();
    assert!(
        violations.is_empty(),
        "imports against the layers:\n  {}",
        violations.join("\n  ")
    );
}

/// docs/architecture.md's layer table states these rules, word for word.
#[test]
fn the_architecture_doc_lists_the_rules() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
            .unwrap();
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Layers\n"))
        .expect("docs/architecture.md has a Layers section");
    let mut documented = BTreeMap::new();
    for line in section.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if let [_, layer, uses, _, _] = cells.as_slice() {
            if let Some(name) = layer.strip_prefix('`').and_then(|l| l.strip_suffix('`')) {
                let uses: BTreeSet<String> = uses
                    .split(',')
                    .map(|u| u.trim().to_string())
                    .filter(|u| !u.is_empty() && u != "—")
                    .collect();
                documented.insert(name.to_string(), uses);
            }
        }
    }
    let rules: BTreeMap<String, BTreeSet<String>> = RULES
        .iter()
        .map(|(l, uses)| (l.to_string(), uses.iter().map(|u| u.to_string()).collect()))
        .collect();
    assert_eq!(
        documented, rules,
        "docs/architecture.md's layer table differs from RULES"
    );
}

#[test]
fn the_reference_reader_sees_groups_and_paths() {
    let refs = crate_refs("use crate::{kernel::{a, b}, record::X};\nlet x = crate::store::open();");
    assert_eq!(
        refs.into_iter().collect::<Vec<_>>(),
        ["kernel", "record", "store"]
    );
    let commands = BTreeSet::from(["bench".to_string(), "sweep".to_string()]);
    assert_eq!(
        command_refs(
            "super::bench::run(); super::print_json(); crate::cmd::sweep::x",
            &commands
        )
        .into_iter()
        .collect::<Vec<_>>(),
        ["bench", "sweep"]
    );
    assert_eq!(
        strip_comments("a // crate::cmd::x\n\"//\" b"),
        "a \n\"//\" b"
    );
}
