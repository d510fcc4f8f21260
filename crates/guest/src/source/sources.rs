//! The Debian archive's address, read from the system's own apt sources
//! (one-line `sources.list` and deb822 `*.sources`), so that a user's mirror
//! or proxy is what ptelab uses too. ptelab ships no address of its own.

use std::path::Path;

/// One `deb` entry of the system's sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub uri: String,
    pub suites: Vec<String>,
}

/// Debian release names and aliases: an entry with one of these (or
/// `NAME-updates`, `NAME-backports`, ...) is Debian's archive.
const DEBIAN_SUITES: &[&str] = &[
    "buster",
    "bullseye",
    "bookworm",
    "trixie",
    "forky",
    "duke",
    "sid",
    "oldoldstable",
    "oldstable",
    "stable",
    "testing",
    "unstable",
    "experimental",
];

impl Entry {
    /// True for Debian's main archive (not its security archive, not a
    /// third-party repository).
    pub fn is_debian_archive(&self) -> bool {
        let security = self.uri.trim_end_matches('/').ends_with("-security")
            || self.suites.iter().any(|s| s.ends_with("-security"));
        !security
            && self.suites.iter().any(|s| {
                let base = s.split('-').next().unwrap_or(s);
                DEBIAN_SUITES.contains(&base)
            })
    }
}

/// `deb` entries of a one-line sources.list (`deb [opts] URI SUITE COMP...`).
pub fn parse_one_line(text: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some(rest) = line
            .strip_prefix("deb ")
            .or_else(|| line.strip_prefix("deb\t"))
        else {
            continue;
        };
        let mut rest = rest.trim_start();
        if let Some(opts) = rest.strip_prefix('[') {
            let Some(end) = opts.find(']') else { continue };
            rest = opts[end + 1..].trim_start();
        }
        let mut words = rest.split_whitespace();
        if let (Some(uri), Some(suite)) = (words.next(), words.next()) {
            out.push(Entry {
                uri: uri.to_string(),
                suites: vec![suite.to_string()],
            });
        }
    }
    out
}

/// `deb` entries of a deb822 `.sources` file (stanzas separated by blank
/// lines; `Enabled: no` turns one off; continuation lines start with space).
pub fn parse_deb822(text: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n").flat_map(|s| s.split("\r\n\r\n")) {
        let mut fields: Vec<(String, String)> = Vec::new();
        for line in stanza.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            if line.starts_with([' ', '\t']) {
                if let Some(last) = fields.last_mut() {
                    last.1.push(' ');
                    last.1.push_str(line.trim());
                }
                continue;
            }
            if let Some((k, v)) = line.split_once(':') {
                fields.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let get = |k: &str| {
            fields
                .iter()
                .find(|(fk, _)| fk == k)
                .map(|(_, v)| v.as_str())
        };
        let words = |k: &str| -> Vec<String> {
            get(k)
                .unwrap_or("")
                .split_whitespace()
                .map(str::to_string)
                .collect()
        };
        if !words("types").iter().any(|t| t == "deb") {
            continue;
        }
        if get("enabled").is_some_and(|e| e.eq_ignore_ascii_case("no")) {
            continue;
        }
        let suites = words("suites");
        for uri in words("uris") {
            out.push(Entry {
                uri,
                suites: suites.clone(),
            });
        }
    }
    out
}

/// Every `deb` entry of the sources apt reads: `sources.list`, then the
/// `.list` and `.sources` files of `sources.list.d` in name order.
pub fn system_entries(etc_apt: &Path) -> Vec<Entry> {
    let mut out = Vec::new();
    if let Ok(t) = std::fs::read_to_string(etc_apt.join("sources.list")) {
        out.extend(parse_one_line(&t));
    }
    let mut files: Vec<_> = std::fs::read_dir(etc_apt.join("sources.list.d"))
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    for f in files {
        let Ok(t) = std::fs::read_to_string(&f) else {
            continue;
        };
        match f.extension().and_then(|e| e.to_str()) {
            Some("list") => out.extend(parse_one_line(&t)),
            Some("sources") => out.extend(parse_deb822(&t)),
            _ => {}
        }
    }
    out
}

/// The first Debian archive address among `entries`.
pub fn debian_mirror(entries: &[Entry]) -> Option<String> {
    entries
        .iter()
        .find(|e| e.is_debian_archive())
        .map(|e| e.uri.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_format() {
        let text = "\
# deb http://old.example/debian buster main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example/debian/ bookworm main contrib
deb-src http://mirror.example/debian bookworm main
deb http://security.debian.org/debian-security bookworm-security main
deb\thttps://packages.cloud.google.com/apt cloud-sdk-bookworm main # trailing
";
        let e = parse_one_line(text);
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].uri, "http://mirror.example/debian/");
        assert_eq!(e[0].suites, ["bookworm"]);
        assert_eq!(e[2].uri, "https://packages.cloud.google.com/apt");
        assert_eq!(
            debian_mirror(&e).as_deref(),
            Some("http://mirror.example/debian")
        );
    }

    #[test]
    fn deb822_format() {
        let text = "\
Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main

Types: deb-src deb
URIs: http://ftp.example.org/debian
  http://second.example.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
Enabled: no
URIs: http://disabled.example/debian
Suites: trixie
";
        let e = parse_deb822(text);
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(!e[0].is_debian_archive());
        assert_eq!(e[1].uri, "http://ftp.example.org/debian");
        assert_eq!(e[2].uri, "http://second.example.org/debian");
        assert_eq!(e[1].suites, ["bookworm", "bookworm-updates"]);
        assert_eq!(
            debian_mirror(&e).as_deref(),
            Some("http://ftp.example.org/debian")
        );
    }

    #[test]
    fn third_party_and_other_distributions_are_not_debian() {
        let e = parse_one_line(
            "deb http://archive.ubuntu.com/ubuntu jammy main\n\
             deb https://deb.nodesource.com/node_20.x nodistro main\n",
        );
        assert_eq!(debian_mirror(&e), None);
    }

    #[test]
    fn system_files_are_read_in_apt_order() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sources.list.d")).unwrap();
        std::fs::write(d.path().join("sources.list"), "# empty\n").unwrap();
        std::fs::write(
            d.path().join("sources.list.d/b.sources"),
            "Types: deb\nURIs: http://b.example/debian\nSuites: trixie\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("sources.list.d/a.list"),
            "deb http://a.example/debian sid main\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("sources.list.d/c.list.disabled"),
            "deb http://c.example/debian sid main\n",
        )
        .unwrap();
        let e = system_entries(d.path());
        assert_eq!(e.len(), 2);
        assert_eq!(
            debian_mirror(&e).as_deref(),
            Some("http://a.example/debian")
        );
    }
}
