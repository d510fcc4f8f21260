//! What Cargo cannot check of the layers (docs/architecture.md). Each layer
//! is a crate, so no layer can name one above it; Cargo does not know that
//! the commands of `src/cmd/` do not use each other, that only the kernel
//! source layer names a kernel source's own modules, or that the
//! architecture doc's crate table is the workspace's. This test reads every
//! path that names a module (`crate::…`, `ptelab_…::`, `super::…`,
//! `self::…`, resolved against the module the file and its inline `mod`s
//! declare) and checks those three.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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

/// The module a file under a crate's `src/` declares: `thp/lock.rs` is
/// `thp::lock`, `thp/mod.rs` is `thp`, `lib.rs` and `main.rs` the root.
fn file_module(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if parts.last().is_some_and(|p| p == "mod")
        || (parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main"))
    {
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
            // Another layer's crate by its own name: as the layer's alias.
            id if id.starts_with("ptelab_") && next == "::" && prev != "::" => {
                let layer = id.trim_start_matches("ptelab_").replace('_', "-");
                i = read_tree(&t, i + 2, vec![layer], &mut out);
                continue;
            }
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

/// The `.rs` files under `dir`: their path there and their text.
fn files_under(dir: &Path) -> Vec<(String, String)> {
    let mut paths = Vec::new();
    rust_files(dir, &mut paths);
    paths
        .iter()
        .map(|file| {
            let rel = file.strip_prefix(dir).unwrap();
            let rel = rel.iter().map(|p| p.to_str().unwrap()).collect::<Vec<_>>();
            (rel.join("/"), std::fs::read_to_string(file).unwrap())
        })
        .collect()
}

/// The glue the commands share: `cmd/mod.rs`, and `cmd/host.rs` for the
/// host's commands. Glue may name a command (a constant of it).
const GLUE: &[&str] = &["mod", "host"];

/// The subcommands: the modules of `src/cmd/` but its glue.
fn commands() -> BTreeSet<String> {
    std::fs::read_dir(root().join("src/cmd"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs") || p.join("mod.rs").exists())
        .map(|p| p.file_stem().unwrap().to_str().unwrap().to_string())
        .filter(|n| !GLUE.contains(&n.as_str()))
        .collect()
}

/// Commands that use another command, among these files of the binary
/// (`(path under src/, code)`).
fn command_uses(files: &[(String, String)], commands: &BTreeSet<String>) -> Vec<String> {
    let mut found = Vec::new();
    for (rel, text) in files {
        let module = file_module(rel);
        let Some(own) = (module.first().is_some_and(|m| m == "cmd"))
            .then(|| module.get(1))
            .flatten()
        else {
            continue;
        };
        if GLUE.contains(&own.as_str()) {
            continue;
        }
        for path in crate_paths(&module, &strip_comments(text)) {
            if let [c, other, ..] = path.as_slice() {
                let command = commands.contains(other) || other == "*";
                if c == "cmd" && command && other != own {
                    found.push(format!("src/{rel} uses the command cmd::{other}"));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn no_command_uses_another() {
    let found = command_uses(&files_under(&root().join("src")), &commands());
    assert!(
        found.is_empty(),
        "commands using commands:\n  {}",
        found.join("\n  ")
    );
}

/// The test of the test: a command naming another, however it is written,
/// fails it; the same words where they are not an import do not.
#[test]
fn planted_command_imports_fail() {
    let commands = commands();
    let check =
        |file: &str, code: &str| command_uses(&[(file.to_string(), code.to_string())], &commands);
    let bench = "cmd/bench.rs";
    for code in [
        "use crate::cmd::sweep;",
        "use crate::{record::Host, cmd::{sweep}};",
        "use crate::{\n    record::{self, Host},\n    cmd::sweep,\n};",
        "fn f() { crate::cmd::sweep::run() }",
        "use crate\n    :: cmd::sweep;",
        "use super::sweep;",
        "use self::super::sweep::run;",
        "use super::{sweep, print_json};",
        "use super::*;",
        "mod inner {\n    use super::super::sweep;\n}",
        "fn f<'a>(s: &'a str) { crate::cmd::sweep::run() }",
    ] {
        let other = if code.contains('*') { "*" } else { "sweep" };
        assert_eq!(
            check(bench, code),
            vec![format!("src/cmd/bench.rs uses the command cmd::{other}")],
            "{code}"
        );
    }
    for code in [
        "use super::print_json;",
        "// see crate::cmd::sweep\nfn f() {}",
        "/// See crate::cmd::sweep.\nfn f() {}",
        "fn f() { let s = \"crate::cmd::sweep\"; }",
        "use crate::cmd::bench::run;",
    ] {
        assert_eq!(check(bench, code), Vec::<String>::new(), "{code}");
    }
    // The glue and the layers below are not commands.
    assert!(check("cmd/mod.rs", "use self::bench;").is_empty());
    assert!(check("cmd/host.rs", "use super::calibrate::guest::TAG;").is_empty());
    assert!(check("cli/flags.rs", "use crate::cmd::bench;").is_empty());
}

/// A source's own modules, which only `guest::source` (and tests) may name:
/// the layers above it speak `KernelSpec`, `Kernel` and the `KernelSource`
/// trait (docs/architecture.md, "Kernel sources").
const SOURCE_MODULES: &[&str] = &["debian", "fetch", "spec", "image", "sources", "fake"];

/// What outside the guest layer names a kernel source's own module, tests
/// aside, in these files (`(path shown, path in its crate's src/, code)`).
fn source_leaks(files: &[(String, String, String)]) -> Vec<String> {
    let mut leaks = Vec::new();
    for (shown, rel, text) in files {
        let module = file_module(rel);
        if module.iter().any(|m| m.ends_with("tests")) {
            continue;
        }
        for (path, in_tests) in crate_paths_marked(&module, &strip_comments(text)) {
            if let [g, s, m, ..] = path.as_slice() {
                if !in_tests
                    && g == "guest"
                    && s == "source"
                    && SOURCE_MODULES.contains(&m.as_str())
                {
                    leaks.push(format!("{shown} names guest::source::{m}"));
                }
            }
        }
    }
    leaks.sort();
    leaks.dedup();
    leaks
}

/// Every layer crate's and the binary's files, but the guest layer's own.
fn files_above_the_source() -> Vec<(String, String, String)> {
    let mut dirs = vec![("src".to_string(), root().join("src"))];
    for e in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = e.unwrap().path();
        let name = dir.file_name().unwrap().to_str().unwrap().to_string();
        if name != "guest" {
            dirs.push((format!("crates/{name}/src"), dir.join("src")));
        }
    }
    let mut out = Vec::new();
    for (shown, dir) in dirs {
        for (rel, text) in files_under(&dir) {
            out.push((format!("{shown}/{rel}"), rel, text));
        }
    }
    out
}

#[test]
fn only_the_source_layer_names_a_kernel_source() {
    let leaks = source_leaks(&files_above_the_source());
    assert!(
        leaks.is_empty(),
        "kernel sources named above guest::source:\n  {}",
        leaks.join("\n  ")
    );
    let one = |rel: &str, code: &str| {
        source_leaks(&[(rel.to_string(), rel.to_string(), code.to_string())])
    };
    assert_eq!(
        one("lib.rs", "use crate::guest::source::fetch::Debian;").len(),
        1
    );
    assert_eq!(
        one("slurm.rs", "use ptelab_guest::source::fetch::Debian;").len(),
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
}

/// The workspace's crates and the layer crates each depends on (normal
/// dependencies only), read from their manifests: `ptelab-X` for each
/// `ptelab-X` line of `[dependencies]`.
fn crate_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut manifests = vec![root().join("Cargo.toml")];
    for e in std::fs::read_dir(root().join("crates")).unwrap() {
        manifests.push(e.unwrap().path().join("Cargo.toml"));
    }
    let mut graph = BTreeMap::new();
    for m in manifests {
        let text = std::fs::read_to_string(&m).unwrap();
        let mut name = None;
        let mut deps = BTreeSet::new();
        let mut section = "";
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                section = if line == "[package]" || line == "[dependencies]" {
                    line
                } else {
                    ""
                };
                continue;
            }
            let key = line.split(['=', '.', ' ']).next().unwrap_or("");
            match section {
                "[package]" if key == "name" => {
                    name = Some(line.split('"').nth(1).unwrap().to_string());
                }
                "[dependencies]" if key.starts_with("ptelab-") => {
                    deps.insert(key.to_string());
                }
                _ => {}
            }
        }
        graph.insert(name.expect("a package name"), deps);
    }
    graph
}

/// docs/architecture.md's layer table names each layer's crate and the
/// layers it uses; those are the manifests' dependencies, word for word.
#[test]
fn the_architecture_doc_shows_the_crate_graph() {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Layers\n"))
        .expect("docs/architecture.md has a Layers section");
    let unquote = |s: &str| s.trim_matches('`').to_string();
    let mut rows = Vec::new();
    for line in section.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if let [_, layer, krate, uses, _, _] = cells.as_slice() {
            if layer.starts_with('`') && krate.starts_with('`') {
                let uses: BTreeSet<String> = uses
                    .split(',')
                    .map(|u| u.trim().to_string())
                    .filter(|u| !u.is_empty() && u != "—")
                    .collect();
                rows.push((unquote(layer), unquote(krate), uses));
            }
        }
    }
    assert!(rows.len() > 10, "the layer table has a row per layer");
    let crate_of: BTreeMap<&str, &str> = rows
        .iter()
        .map(|(l, c, _)| (l.as_str(), c.as_str()))
        .collect();
    let layer_of: BTreeMap<&str, &str> = rows
        .iter()
        .map(|(l, c, _)| (c.as_str(), l.as_str()))
        .collect();
    let graph = crate_graph();
    for (layer, krate, uses) in &rows {
        let deps = graph
            .get(krate)
            .unwrap_or_else(|| panic!("{layer}: no crate {krate} in the workspace"));
        // The pure crates (model, stats, counts) are not layers.
        let used: BTreeSet<String> = deps
            .iter()
            .filter_map(|d| layer_of.get(d.as_str()).map(|l| l.to_string()))
            .collect();
        assert_eq!(
            &used, uses,
            "{layer} ({krate}): the doc's uses differ from Cargo.toml's"
        );
    }
    for (krate, deps) in &graph {
        let is_layer = layer_of.contains_key(krate.as_str());
        let uses_layers = deps.iter().any(|d| layer_of.contains_key(d.as_str()));
        assert!(
            is_layer || !uses_layers,
            "{krate} uses layers but has no row in the doc"
        );
    }
    assert!(crate_of.contains_key("cmd"));
}
