//! The binary's layers import one way (docs/architecture.md): this test reads
//! every path in `src/` that names a module of the crate (`crate::…`,
//! `super::…`, `self::…`, resolved against the module the file and its inline
//! `mod`s declare) and fails on an edge the rules do not allow.

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
    ("predict", &["model", "record", "workload", "text", "error"]),
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
            "fleet", "guest", "store", "kernel", "record", "workload", "text", "error",
        ],
    ),
    (
        "report",
        &["analysis", "store", "record", "workload", "text", "error"],
    ),
    (
        "reproduce",
        &[
            "report",
            "analysis",
            "fleet",
            "guest",
            "store",
            "crosscheck",
            "measure",
            "predict",
            "record",
            "workload",
            "text",
            "error",
        ],
    ),
    (
        "cli",
        &[
            "analysis", "store", "measure", "kernel", "guest", "record", "workload", "text",
            "error",
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
            "predict",
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

/// Code with comments, string literals and character literals blanked out,
/// lines kept: paths cited in prose or printed in messages are not imports.
fn strip_comments(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let at = |j: usize| c.get(j).copied().unwrap_or('\0');
        match c[i] {
            // Line comment, doc comments included.
            '/' if at(i + 1) == '/' => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            // Block comments nest.
            '/' if at(i + 1) == '*' => {
                let mut depth = 0;
                while i < c.len() {
                    if c[i] == '/' && at(i + 1) == '*' {
                        depth += 1;
                        out.push_str("  ");
                        i += 2;
                    } else if c[i] == '*' && at(i + 1) == '/' {
                        depth -= 1;
                        out.push_str("  ");
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        blank(&mut out, c[i]);
                        i += 1;
                    }
                }
            }
            '"' => {
                out.push('"');
                i += 1;
                while i < c.len() && c[i] != '"' {
                    if c[i] == '\\' {
                        blank(&mut out, c[i]);
                        i += 1;
                    }
                    if i < c.len() {
                        blank(&mut out, c[i]);
                        i += 1;
                    }
                }
                out.push('"');
                i += 1;
            }
            // A character literal ('x', '\n', '\''), not a lifetime ('a).
            '\'' if at(i + 1) == '\\' || (at(i + 1) != '\'' && at(i + 2) == '\'') => {
                out.push('\'');
                i += 1;
                while i < c.len() && c[i] != '\'' {
                    if c[i] == '\\' {
                        blank(&mut out, c[i]);
                        i += 1;
                    }
                    if i < c.len() {
                        blank(&mut out, c[i]);
                        i += 1;
                    }
                }
                out.push('\'');
                i += 1;
            }
            ch if ch.is_alphabetic() || ch == '_' => {
                let start = i;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                let word: String = c[start..i].iter().collect();
                let hashes = c[i..].iter().take_while(|&&h| h == '#').count();
                if matches!(word.as_str(), "r" | "br" | "cr") && at(i + hashes) == '"' {
                    // A raw string ends at a quote followed by as many hashes.
                    out.push_str(&word);
                    out.extend(std::iter::repeat_n('#', hashes));
                    out.push('"');
                    i += hashes + 1;
                    while i < c.len()
                        && !(c[i] == '"'
                            && c[i + 1..]
                                .iter()
                                .take(hashes)
                                .filter(|&&h| h == '#')
                                .count()
                                == hashes)
                    {
                        blank(&mut out, c[i]);
                        i += 1;
                    }
                    out.push('"');
                    out.extend(std::iter::repeat_n('#', hashes));
                    i += 1 + hashes;
                } else {
                    out.push_str(&word);
                }
            }
            ch => {
                out.push(ch);
                i += 1;
            }
        }
    }
    out
}

/// Identifiers, `::` and single punctuation characters.
fn tokens(code: &str) -> Vec<String> {
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if c[i].is_whitespace() {
            i += 1;
        } else if c[i].is_alphanumeric() || c[i] == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
        } else if c[i] == ':' && c.get(i + 1) == Some(&':') {
            out.push("::".to_string());
            i += 2;
        } else {
            out.push(c[i].to_string());
            i += 1;
        }
    }
    out
}

/// The module a file under `src/` declares: `kernel/thp/lock.rs` is
/// `kernel::thp::lock`, `kernel/thp/mod.rs` is `kernel::thp`.
fn file_module(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// A path into the crate, resolved to its segments from the crate root
/// (`["*"]` is a glob of the root, `[]` the root itself, renamed).
type Resolved = Vec<String>;

/// Reads one path (or use tree) at `pos`, relative to `base`; pushes every
/// path it names and returns the position after it.
fn read_tree(t: &[String], mut pos: usize, mut base: Resolved, out: &mut Vec<Resolved>) -> usize {
    loop {
        match t.get(pos).map(String::as_str) {
            Some("super") => {
                base.pop();
                pos += 1;
            }
            Some("self") => pos += 1,
            Some("{") => {
                pos += 1;
                while pos < t.len() && t[pos] != "}" {
                    let before = pos;
                    pos = read_tree(t, pos, base.clone(), out);
                    if t.get(pos).is_some_and(|s| s == ",") || pos == before {
                        pos += 1;
                    }
                }
                return pos + 1;
            }
            Some("*") => {
                base.push("*".to_string());
                out.push(base);
                return pos + 1;
            }
            Some(id) if id.chars().all(|ch| ch.is_alphanumeric() || ch == '_') => {
                base.push(id.to_string());
                pos += 1;
            }
            _ => break,
        }
        if t.get(pos).is_some_and(|s| s == "::") {
            pos += 1;
        } else {
            break;
        }
    }
    // The root itself is only a path worth reporting when it is renamed.
    if !base.is_empty() || t.get(pos).is_some_and(|s| s == "as") {
        out.push(base);
    }
    pos
}

/// Every path of `code` (comments already stripped) that names the crate, as
/// seen from `module`: `crate::` paths, and `super::`/`self::` chains resolved
/// against `module` and the inline `mod`s around them.
fn crate_paths(module: &[String], code: &str) -> Vec<Resolved> {
    crate_paths_marked(module, code)
        .into_iter()
        .map(|(path, _)| path)
        .collect()
}

/// [`crate_paths`], each marked true when it is inside an inline `mod tests`.
fn crate_paths_marked(module: &[String], code: &str) -> Vec<(Resolved, bool)> {
    let t = tokens(code);
    let mut out = Vec::new();
    let mut marked = Vec::new();
    // Inline modules open: their name and the brace depth they opened at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut pending_mod: Option<String> = None;
    let mut depth = 0;
    let mut i = 0;
    while i < t.len() {
        let in_tests = inline.iter().any(|(n, _)| n == "tests");
        marked.extend(out.drain(..).map(|p| (p, in_tests)));
        let prev = if i > 0 { t[i - 1].as_str() } else { "" };
        let next = t.get(i + 1).map_or("", String::as_str);
        let here = || {
            let mut m = module.to_vec();
            m.extend(inline.iter().map(|(n, _)| n.clone()));
            m
        };
        match t[i].as_str() {
            "mod" if t.get(i + 2).is_some_and(|s| s == "{") => pending_mod = Some(next.to_string()),
            "{" => {
                if let Some(name) = pending_mod.take() {
                    inline.push((name, depth));
                }
                depth += 1;
            }
            "}" => {
                depth -= 1;
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
            }
            "crate" if next == "::" && prev != "::" => {
                i = read_tree(&t, i + 2, Vec::new(), &mut out);
                continue;
            }
            "crate" if next == "as" => out.push(Vec::new()),
            "super" | "self" if next == "::" && prev != "::" => {
                i = read_tree(&t, i, here(), &mut out);
                continue;
            }
            _ => {}
        }
        i += 1;
        let in_tests = inline.iter().any(|(n, _)| n == "tests");
        marked.extend(out.drain(..).map(|p| (p, in_tests)));
    }
    marked.extend(out.drain(..).map(|p| (p, false)));
    marked
}

/// What is wrong with the imports of these files (`(path under src/, code)`).
fn violations(files: &[(String, String)], commands: &BTreeSet<String>) -> Vec<String> {
    let rules: BTreeMap<&str, &[&str]> = RULES.iter().copied().collect();
    let mut violations = Vec::new();
    for (rel, text) in files {
        if rel == "main.rs" {
            continue;
        }
        let module = file_module(rel);
        let top = module[0].as_str();
        let Some(allowed) = rules.get(top) else {
            violations.push(format!(
                "src/{rel}: src/{top} has no layer: add it to RULES and docs/architecture.md"
            ));
            continue;
        };
        // The command a file of `cmd/` belongs to; `cmd/mod.rs` is glue.
        let own = (top == "cmd").then(|| module.get(1).map_or("mod", String::as_str));
        for path in crate_paths(&module, &strip_comments(text)) {
            let Some(target) = path.first() else {
                violations.push(format!("src/{rel} renames the crate root"));
                continue;
            };
            if target == "*" {
                violations.push(format!("src/{rel} imports every module (crate::*)"));
            } else if target == top {
                if let (Some(own), Some(other)) = (own, path.get(1)) {
                    let command = commands.contains(other) || other == "*";
                    if own != "mod" && command && other != own {
                        violations.push(format!("src/{rel} uses the command cmd::{other}"));
                    }
                }
            } else if !allowed.contains(&target.as_str()) {
                violations.push(format!("src/{rel} ({top}) uses {target}"));
            }
        }
    }
    violations.sort();
    violations.dedup();
    violations
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `src/`: its path there and its text.
fn src_files() -> Vec<(String, String)> {
    let src = src();
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths
        .iter()
        .map(|file| {
            let rel = file.strip_prefix(&src).unwrap();
            let rel = rel.iter().map(|p| p.to_str().unwrap()).collect::<Vec<_>>();
            (rel.join("/"), std::fs::read_to_string(file).unwrap())
        })
        .collect()
}

/// The subcommands: the modules of `src/cmd/` but its `mod.rs`.
fn commands() -> BTreeSet<String> {
    std::fs::read_dir(src().join("cmd"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs") || p.join("mod.rs").exists())
        .map(|p| p.file_stem().unwrap().to_str().unwrap().to_string())
        .filter(|n| n != "mod")
        .collect()
}

#[test]
fn imports_follow_the_layers() {
    let files = src_files();
    let violations = violations(&files, &commands());
    assert!(
        violations.is_empty(),
        "imports against the layers:\n  {}",
        violations.join("\n  ")
    );
}

/// The test of the test: a forbidden import, however it is written, fails it;
/// the same words where they are not an import do not.
#[test]
fn planted_imports_fail_the_layers_test() {
    let commands = commands();
    let check =
        |file: &str, code: &str| violations(&[(file.to_string(), code.to_string())], &commands);
    let lock = "kernel/thp/lock.rs";
    let forbidden = [
        (lock, "use crate::cmd::bench;", "(kernel) uses cmd"),
        (
            lock,
            "use crate::{record::Host, cmd::{bench}};",
            "(kernel) uses cmd",
        ),
        (
            lock,
            "use crate::{\n    record::{self, Host},\n    cmd,\n};",
            "(kernel) uses cmd",
        ),
        (
            lock,
            "fn f() { crate::cmd::bench::run() }",
            "(kernel) uses cmd",
        ),
        (lock, "use crate\n    :: cmd;", "(kernel) uses cmd"),
        (lock, "use super::super::super::cmd;", "(kernel) uses cmd"),
        (
            lock,
            "use super::super::super::{record, cmd};",
            "(kernel) uses cmd",
        ),
        (
            lock,
            "use self::super::super::super::cmd;",
            "(kernel) uses cmd",
        ),
        (
            lock,
            "fn f() { super::super::super::cmd::bench::run() }",
            "(kernel) uses cmd",
        ),
        ("kernel/mod.rs", "use super::cmd;", "(kernel) uses cmd"),
        (
            "kernel/thp/mod.rs",
            "use super::super::cmd;",
            "(kernel) uses cmd",
        ),
        (
            lock,
            "mod inner {\n    use super::super::super::super::cmd;\n}",
            "(kernel) uses cmd",
        ),
        (
            lock,
            "mod a { mod b { use super::super::super::super::super::cmd; } }",
            "(kernel) uses cmd",
        ),
        // After an inline module closes, `super` counts from the file again.
        (
            lock,
            "mod inner { const C: char = '{'; }\nuse super::super::super::cmd;",
            "(kernel) uses cmd",
        ),
        (
            lock,
            "let s = \"//\"; crate::cmd::x();",
            "(kernel) uses cmd",
        ),
        (
            lock,
            "let s = \"a \\\" // b\"; crate::cmd::x();",
            "(kernel) uses cmd",
        ),
        (
            lock,
            "let s = r#\"\" // \"#; crate::cmd::x();",
            "(kernel) uses cmd",
        ),
        (
            lock,
            "let c = '\"'; crate::cmd::x(); let d = '\"';",
            "(kernel) uses cmd",
        ),
        (
            lock,
            "fn f<'a>(s: &'a str) { crate::cmd::x() }",
            "(kernel) uses cmd",
        ),
        (
            lock,
            "/* a /* nested */ comment */ crate::cmd::x();",
            "(kernel) uses cmd",
        ),
        (lock, "pub(in crate::cmd) fn f() {}", "(kernel) uses cmd"),
        (lock, "use crate as root;", "renames the crate root"),
        (
            lock,
            "use super::super::super as root;",
            "renames the crate root",
        ),
        (lock, "use crate::*;", "imports every module"),
        (lock, "use crate::run;", "(kernel) uses run"),
        (
            "cmd/bench.rs",
            "use super::sweep;",
            "uses the command cmd::sweep",
        ),
        (
            "cmd/bench.rs",
            "use crate::cmd::sweep::run;",
            "uses the command cmd::sweep",
        ),
        (
            "cmd/bench.rs",
            "use crate::cmd::{print_json, sweep};",
            "uses the command cmd::sweep",
        ),
        ("cmd/bench.rs", "use super::*;", "uses the command cmd::*"),
        ("newlayer/mod.rs", "", "has no layer"),
    ];
    for (file, code, expected) in forbidden {
        let found = check(file, code);
        assert!(
            found.iter().any(|v| v.contains(expected)),
            "src/{file} should fail with \"{expected}\", found {found:?}:\n{code}"
        );
    }
    let allowed = [
        (lock, "let s = \"a\"; // crate::cmd::x"),
        (lock, "let s = \"crate::cmd::x\";"),
        (lock, "let s = r#\"crate::cmd::x \"# ;"),
        (lock, "/* crate::cmd /* crate::cmd */ crate::cmd */"),
        (lock, "/// See crate::cmd::bench.\nfn f() {}"),
        (lock, "use crate::error::bail_usage;"),
        (lock, "use super::super::super::record::{Host, CellSink};"),
        (lock, "use super::super::cmd;"),
        (
            lock,
            "mod inner { use super::super::super::super::record; }",
        ),
        (
            lock,
            "mod inner { const C: char = '}'; }\nuse super::super::knobs;",
        ),
        (
            lock,
            "pub(crate) fn f() {} pub(super) fn g() {} pub(in crate::kernel) fn h() {}",
        ),
        (lock, "fn f<'a>(s: &'a str) -> &'a str { s }"),
        (
            "cmd/bench.rs",
            "use super::print_json; use super::bench::x; use crate::cmd::bench;",
        ),
        ("cmd/bench.rs", "mod tests { use super::*; }"),
        ("cmd/mod.rs", "use self::bench; use super::cmd::sweep;"),
        ("main.rs", "use crate::cmd::bench;"),
    ];
    for (file, code) in allowed {
        assert_eq!(
            check(file, code),
            Vec::<String>::new(),
            "src/{file}:\n{code}"
        );
    }
}

/// A source's own modules, which only `guest::source` (and tests) may name:
/// the layers above it speak `KernelSpec`, `Kernel` and the `KernelSource`
/// trait (docs/architecture.md, "Kernel sources").
const SOURCE_MODULES: &[&str] = &["debian", "fetch", "spec", "image", "sources", "fake"];

/// What outside `guest/` names a kernel source's own module, tests aside.
fn source_leaks(files: &[(String, String)]) -> Vec<String> {
    let mut leaks = Vec::new();
    for (rel, text) in files {
        let module = file_module(rel);
        if rel == "main.rs" || module[0] == "guest" || module.iter().any(|m| m.ends_with("tests")) {
            continue;
        }
        for (path, in_tests) in crate_paths_marked(&module, &strip_comments(text)) {
            if let [g, s, m, ..] = path.as_slice() {
                if !in_tests
                    && g == "guest"
                    && s == "source"
                    && SOURCE_MODULES.contains(&m.as_str())
                {
                    leaks.push(format!("src/{rel} names guest::source::{m}"));
                }
            }
        }
    }
    leaks.sort();
    leaks.dedup();
    leaks
}

#[test]
fn only_the_source_layer_names_a_kernel_source() {
    let files = src_files();
    let leaks = source_leaks(&files);
    assert!(
        leaks.is_empty(),
        "kernel sources named above guest::source:\n  {}",
        leaks.join("\n  ")
    );
    let one = |rel: &str, code: &str| source_leaks(&[(rel.to_string(), code.to_string())]);
    assert_eq!(
        one("fleet/mod.rs", "use crate::guest::source::fetch::Debian;").len(),
        1
    );
    assert_eq!(
        one(
            "cmd/kernel.rs",
            "use crate::guest::source::{self, debian::Offer};"
        )
        .len(),
        1
    );
    assert!(one(
        "cmd/kernel.rs",
        "use crate::guest::source::{Kernel, KernelSpec};"
    )
    .is_empty());
    assert!(one(
        "cmd/kernel.rs",
        "mod tests { use crate::guest::source::fetch; }"
    )
    .is_empty());
    assert!(one(
        "guest/boot/run.rs",
        "use crate::guest::source::spec::Version;"
    )
    .is_empty());
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
