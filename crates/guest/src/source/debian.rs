//! Debian's prebuilt kernels through apt, with a private apt state below the
//! user's cache: the system's sources, lists and dpkg status are never read
//! or written (only its apt.conf, so proxies apply). apt verifies the
//! suites' InRelease signatures against Debian's archive keyring and every
//! downloaded package against the signed hash chain, as it does for an
//! install.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

use super::spec::{Flavour, Version};
use crate::arch::facts;

use crate::error::bail_usage;
use crate::workload::Arch;

/// Suites searched, oldest first.
pub const SUITES: [&str; 3] = ["trixie", "trixie-backports", "sid"];
/// The keyring apt checks the suites' signatures with (package
/// debian-archive-keyring; it carries the trixie keys from bookworm on).
pub const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// A kernel Debian offers: `linux-image-RELEASE` with RELEASE =
/// `VERSION+debN-TAIL` (`6.17.13+deb13-cloud-amd64`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    pub release: String,
    pub version: Version,
    /// The N of `+debN`: the Debian release the kernel was built for.
    pub abi: u32,
    pub flavour: Flavour,
    pub arch: Arch,
}

impl Offer {
    /// The offer a `linux-image-*` package name stands for (None for the
    /// meta packages, `-dbg`, `-unsigned` and anything unknown).
    pub fn from_package(name: &str) -> Option<Offer> {
        Offer::from_release(name.strip_prefix("linux-image-")?)
    }

    pub fn from_release(release: &str) -> Option<Offer> {
        let (v, rest) = release.split_once("+deb")?;
        let (abi, tail) = rest.split_once('-')?;
        let version = Version::parse(v)?;
        version.patch?;
        let abi = abi.parse().ok()?;
        let (flavour, arch) = Flavour::from_release_tail(tail)?;
        Some(Offer {
            release: release.to_string(),
            version,
            abi,
            flavour,
            arch,
        })
    }

    pub fn package(&self) -> String {
        format!("linux-image-{}", self.release)
    }
}

/// The newest offer matching a version request (`6.17` takes the newest
/// 6.17.x; among equal versions the newest Debian ABI).
pub fn select<'a>(
    offers: &'a [Offer],
    want: &Version,
    flavour: Flavour,
    arch: Arch,
) -> Option<&'a Offer> {
    offers
        .iter()
        .filter(|o| o.flavour == flavour && o.arch == arch && want.matches(&o.version))
        .max_by_key(|o| (o.version, o.abi))
}

/// Up to `n` of `versions` nearest to `want` (same minor first, then the
/// nearest minors), in ascending order.
pub fn nearest_of(
    versions: impl IntoIterator<Item = Version>,
    want: &Version,
    n: usize,
) -> Vec<Version> {
    let versions: BTreeSet<Version> = versions.into_iter().collect();
    let line = |v: &Version| i64::from(v.major) * 1000 + i64::from(v.minor);
    let mut scored: Vec<_> = versions
        .into_iter()
        .map(|v| {
            let patch = match (want.patch, v.patch) {
                (Some(a), Some(b)) => (i64::from(a) - i64::from(b)).abs(),
                _ => 0,
            };
            (
                (line(&v) - line(want)).abs(),
                patch,
                std::cmp::Reverse(v),
                v,
            )
        })
        .collect();
    scored.sort();
    let mut out: Vec<Version> = scored.into_iter().take(n).map(|s| s.3).collect();
    out.sort();
    out
}

/// Offered versions per flavour, for one arch.
pub fn by_flavour(offers: &[Offer], arch: Arch) -> BTreeMap<Flavour, Vec<Version>> {
    let mut m: BTreeMap<Flavour, BTreeSet<Version>> = BTreeMap::new();
    for o in offers.iter().filter(|o| o.arch == arch) {
        m.entry(o.flavour).or_default().insert(o.version);
    }
    m.into_iter()
        .map(|(f, v)| (f, v.into_iter().collect()))
        .collect()
}

/// One package stanza as `apt-cache show` prints it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stanza {
    pub fields: Vec<(String, String)>,
}

impl Stanza {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    }

    /// Every stanza of `apt-cache show` output.
    pub fn parse_all(text: &str) -> Vec<Stanza> {
        let mut out = Vec::new();
        let mut cur = Stanza::default();
        for line in text.lines() {
            if line.trim().is_empty() {
                if !cur.fields.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            } else if line.starts_with([' ', '\t']) {
                if let Some(last) = cur.fields.last_mut() {
                    last.1.push('\n');
                    last.1.push_str(line.trim());
                }
            } else if let Some((k, v)) = line.split_once(':') {
                cur.fields.push((k.to_string(), v.trim().to_string()));
            }
        }
        if !cur.fields.is_empty() {
            out.push(cur);
        }
        out
    }

    /// The packages of the same kernel release this one depends on
    /// (`linux-binary-R`, `linux-modules-R`, `linux-base-R`: from 6.19 on,
    /// `linux-image-R` is an empty package and the image is in
    /// `linux-binary-R`), with the version each is pinned to.
    pub fn release_dependencies(&self, release: &str) -> Vec<(String, Option<String>)> {
        let mut out = Vec::new();
        for dep in self.get("Depends").unwrap_or("").split(',') {
            // First alternative only; a kernel's own parts have none.
            let alt = dep.split('|').next().unwrap_or("").trim();
            let (name, rest) = alt.split_once(' ').unwrap_or((alt, ""));
            let name = name.split(':').next().unwrap_or(name);
            let ours = ["linux-binary-", "linux-modules-", "linux-base-"]
                .iter()
                .any(|p| name.strip_prefix(p) == Some(release));
            if !ours {
                continue;
            }
            let pinned = rest
                .trim()
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .and_then(|r| r.trim().strip_prefix('='))
                .map(|v| v.trim().to_string());
            out.push((name.to_string(), pinned));
        }
        out
    }
}

/// A private apt state for one arch, below the user's cache.
pub struct Apt {
    pub dir: PathBuf,
    pub mirror: String,
    pub arch: Arch,
}

/// The index is updated when older than this (or on `--available`).
pub const INDEX_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

impl Apt {
    pub fn new(root: &Path, mirror: &str, arch: Arch) -> Apt {
        Apt {
            dir: root.join(facts(arch).debian),
            mirror: mirror.trim_end_matches('/').to_string(),
            arch,
        }
    }

    /// The deb822 source of the private state: the three suites, this
    /// arch only, Packages indices only, checked with Debian's keyring.
    pub fn source_text(&self) -> String {
        format!(
            "Types: deb\nURIs: {}\nSuites: {}\nComponents: main\nArchitectures: {}\n\
             Targets: Packages\nSigned-By: {KEYRING}\n",
            self.mirror,
            SUITES.join(" "),
            facts(self.arch).debian
        )
    }

    /// Make the state's directories and files (the source is rewritten
    /// each time, so a changed `--mirror` takes effect).
    pub fn prepare(&self) -> anyhow::Result<()> {
        if !Path::new(KEYRING).is_file() {
            bail_usage!(
                "Debian's archive keyring {KEYRING} is missing: install the package \
                 debian-archive-keyring (it verifies the kernels' signatures), or pass the path of a kernel image"
            );
        }
        for sub in ["lists/partial", "cache/archives/partial", "sources.list.d"] {
            std::fs::create_dir_all(self.dir.join(sub))
                .with_context(|| format!("creating {}", self.dir.join(sub).display()))?;
        }
        std::fs::write(self.dir.join("sources.list"), "")?;
        std::fs::write(
            self.dir.join("sources.list.d/debian.sources"),
            self.source_text(),
        )?;
        let status = self.dir.join("status");
        if !status.exists() {
            std::fs::write(&status, "")?;
        }
        Ok(())
    }

    /// The `-o` options that point apt at the private state.
    pub fn options(&self) -> Vec<String> {
        let d = self.dir.display();
        let mut o = vec![
            format!("Dir::Etc::SourceList={d}/sources.list"),
            format!("Dir::Etc::SourceParts={d}/sources.list.d"),
            format!("Dir::State::Lists={d}/lists"),
            format!("Dir::Cache={d}/cache"),
            // Kept (some images, Docker's among them, turn it off): without
            // it every apt-cache call parses the whole index again (~3 s).
            "Dir::Cache::pkgcache=pkgcache.bin".to_string(),
            "Dir::Cache::srcpkgcache=".to_string(),
            format!("Dir::State::Status={d}/status"),
            format!("APT::Architectures::={}", facts(self.arch).debian),
            "Acquire::Languages=none".to_string(),
            // One retry: an unreachable archive should fail in seconds.
            "Acquire::Retries=1".to_string(),
        ];
        // As root apt would hand downloads to the _apt user, who cannot
        // write into root's private cache directory.
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            o.push("APT::Sandbox::User=root".to_string());
        }
        o
    }

    fn command(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        c.env("LC_ALL", "C").arg("-q");
        for o in self.options() {
            c.arg("-o").arg(o);
        }
        c
    }

    /// Age of the index of this mirror (its newest InRelease); None when
    /// there is none.
    pub fn index_age(&self) -> Option<Duration> {
        let prefix = list_prefix(&self.mirror);
        std::fs::read_dir(self.dir.join("lists"))
            .ok()?
            .filter_map(|e| e.ok())
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with(&prefix) && n.ends_with("_InRelease")
            })
            .filter_map(|e| e.metadata().ok()?.modified().ok())
            .max()
            .map(|t| t.elapsed().unwrap_or_default())
    }

    /// `apt-get update` on the private state. Any failed or unverifiable
    /// index is an error (`--error-on=any`), not a warning.
    pub fn update(&self) -> anyhow::Result<()> {
        eprintln!(
            "ptelab: updating the Debian index ({}; {}) from {}",
            SUITES.join(", "),
            facts(self.arch).debian,
            self.mirror
        );
        let mut c = self.command("apt-get");
        c.arg("--error-on=any").arg("update");
        run_streaming(c, "apt-get update")
    }

    /// The kernels the index offers for this arch.
    pub fn offers(&self) -> anyhow::Result<Vec<Offer>> {
        let mut c = self.command("apt-cache");
        c.args(["pkgnames", "linux-image-"]);
        let out = run_captured(c, "apt-cache pkgnames")?;
        let mut offers: Vec<Offer> = out
            .lines()
            .filter_map(|l| Offer::from_package(l.trim()))
            .filter(|o| o.arch == self.arch)
            .collect();
        offers.sort_by_key(|o| (o.version, o.abi, o.flavour));
        Ok(offers)
    }

    /// The candidate stanza of a package of this arch (the highest version
    /// when several suites carry it).
    pub fn show(&self, package: &str) -> anyhow::Result<Stanza> {
        let mut c = self.command("apt-cache");
        c.arg("show")
            .arg(format!("{package}:{}", facts(self.arch).debian));
        let out = run_captured(c, "apt-cache show")?;
        let mut all = Stanza::parse_all(&out);
        let mut best = all
            .pop()
            .with_context(|| format!("apt-cache show {package}: no stanza"))?;
        for s in all {
            if let (Some(a), Some(b)) = (s.get("Version"), best.get("Version")) {
                if version_gt(a, b)? {
                    best = s;
                }
            }
        }
        Ok(best)
    }

    /// `apt-get download` of exact package versions into `dir`. apt checks
    /// each file against the SHA256 of the signed index.
    pub fn download(&self, packages: &[(String, String)], dir: &Path) -> anyhow::Result<()> {
        let mut c = self.command("apt-get");
        c.arg("download").current_dir(dir);
        for (name, version) in packages {
            c.arg(format!("{name}:{}={version}", facts(self.arch).debian));
        }
        run_streaming(c, "apt-get download")
    }
}

/// How apt names the list files of a mirror: the URI without its scheme,
/// `/` as `_` (`deb.debian.org_debian_dists_…`).
fn list_prefix(mirror: &str) -> String {
    let rest = mirror.split_once("://").map_or(mirror, |(_, r)| r);
    format!("{}_dists_", rest.trim_end_matches('/').replace('/', "_"))
}

/// dpkg's version order (`a` newer than `b`).
fn version_gt(a: &str, b: &str) -> anyhow::Result<bool> {
    let st = Command::new("dpkg")
        .args(["--compare-versions", a, "gt", b])
        .status()
        .context("running dpkg --compare-versions")?;
    Ok(st.success())
}

fn spawn_error(e: std::io::Error, what: &str) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        crate::error::usage(format!(
            "{what}: not installed; Debian kernels are fetched with apt and dpkg (a Debian or \
             Ubuntu host): install them, or pass the path of a kernel image"
        ))
    } else {
        anyhow::Error::new(e).context(format!("running {what}"))
    }
}

/// Run an apt tool whose stdout is progress for the user: its `Get:`,
/// `Hit:` and `Fetched` lines go to our stderr as they come; the rest
/// (`Ign:`/`Err:` retries) is left to the one-line error.
fn run_streaming(mut c: Command, what: &str) -> anyhow::Result<()> {
    use std::io::{BufRead, BufReader, Read};
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().map_err(|e| spawn_error(e, what))?;
    let mut err_pipe = child.stderr.take().expect("piped stderr");
    // Read apart from stdout, so that neither pipe can fill and block apt.
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    for line in BufReader::new(child.stdout.take().expect("piped stdout"))
        .lines()
        .map_while(Result::ok)
    {
        if ["Get:", "Hit:", "Fetched "]
            .iter()
            .any(|p| line.starts_with(p))
        {
            eprintln!("  {line}");
        }
    }
    let status = child
        .wait()
        .with_context(|| format!("waiting for {what}"))?;
    let err = err_reader.join().unwrap_or_default();
    if status.success() {
        // Warnings are worth seeing; nothing else is printed there.
        eprint!("{err}");
        return Ok(());
    }
    bail!("{what} failed ({status}): {}", apt_errors(&err));
}

fn run_captured(mut c: Command, what: &str) -> anyhow::Result<String> {
    let out = c.output().map_err(|e| spawn_error(e, what))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            apt_errors(&String::from_utf8_lossy(&out.stderr))
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// apt's first `E:` line, with how many more there were (all of stderr on
/// one line when there is none).
pub fn apt_errors(stderr: &str) -> String {
    let e: Vec<String> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("E: "))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    match e.as_slice() {
        [] => stderr.trim().replace('\n', "; "),
        [one] => one.clone(),
        [first, rest @ ..] => format!("{first} (and {} more errors)", rest.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offers(names: &[&str]) -> Vec<Offer> {
        names
            .iter()
            .filter_map(|n| Offer::from_package(n))
            .collect()
    }

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    const NAMES: &[&str] = &[
        "linux-image-6.12.117+deb13-cloud-amd64",
        "linux-image-6.16.3+deb13-cloud-amd64",
        "linux-image-6.16.12+deb13-cloud-amd64",
        "linux-image-6.17.8+deb13-cloud-amd64",
        "linux-image-6.17.13+deb13-cloud-amd64",
        "linux-image-6.17.13+deb13-amd64",
        "linux-image-6.17.13+deb13-cloud-arm64",
        "linux-image-6.17.13+deb13-arm64-16k",
        "linux-image-6.18.5+deb13-cloud-amd64",
        "linux-image-7.2.12+deb13-cloud-amd64",
        "linux-image-7.2.13+deb14-cloud-amd64",
        "linux-image-6.17.13+deb13-cloud-amd64-dbg",
        "linux-image-6.17.13+deb13-cloud-amd64-unsigned",
        "linux-image-cloud-amd64",
        "linux-image-amd64-signed-template",
    ];

    #[test]
    fn package_names_parse_into_offers() {
        let o = offers(NAMES);
        assert_eq!(o.len(), 11, "{o:?}");
        let k = Offer::from_package("linux-image-6.17.13+deb13-arm64-16k").unwrap();
        assert_eq!((k.flavour, k.arch, k.abi), (Flavour::K16, Arch::Arm64, 13));
        let g = Offer::from_package("linux-image-6.17.13+deb13-amd64").unwrap();
        assert_eq!((g.flavour, g.arch), (Flavour::Generic, Arch::X86_64));
        assert_eq!(g.package(), "linux-image-6.17.13+deb13-amd64");
    }

    #[test]
    fn a_minor_version_selects_the_newest_patch() {
        let o = offers(NAMES);
        let pick = |w: &str, f, a| select(&o, &v(w), f, a).map(|o| o.release.clone());
        assert_eq!(
            pick("6.17", Flavour::Cloud, Arch::X86_64).as_deref(),
            Some("6.17.13+deb13-cloud-amd64")
        );
        assert_eq!(
            pick("6.16", Flavour::Cloud, Arch::X86_64).as_deref(),
            Some("6.16.12+deb13-cloud-amd64")
        );
        assert_eq!(
            pick("6.17.8", Flavour::Cloud, Arch::X86_64).as_deref(),
            Some("6.17.8+deb13-cloud-amd64")
        );
        assert_eq!(
            pick("7.2", Flavour::Cloud, Arch::X86_64).as_deref(),
            Some("7.2.13+deb14-cloud-amd64")
        );
        assert_eq!(
            pick("6.17", Flavour::Generic, Arch::X86_64).as_deref(),
            Some("6.17.13+deb13-amd64")
        );
        assert_eq!(pick("6.16", Flavour::Cloud, Arch::Arm64), None);
        assert_eq!(pick("6.17.9", Flavour::Cloud, Arch::X86_64), None);
    }

    #[test]
    fn an_unknown_version_lists_the_nearest() {
        let o = offers(NAMES);
        let nearest = |w: &str, flavour, n| {
            let of = o
                .iter()
                .filter(|x| x.flavour == flavour && x.arch == Arch::X86_64);
            nearest_of(of.map(|x| x.version), &v(w), n)
        };
        let near = |w: &str, n| {
            nearest(w, Flavour::Cloud, n)
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(near("6.17.9", 3), ["6.16.12", "6.17.8", "6.17.13"]);
        assert_eq!(near("6.17.9", 2), ["6.17.8", "6.17.13"]);
        assert_eq!(near("6.15", 2), ["6.16.3", "6.16.12"]);
        assert_eq!(near("7.1", 1), ["7.2.13"]);
        assert!(nearest("6.17", Flavour::Rt, 5).is_empty());
    }

    #[test]
    fn offers_group_by_flavour() {
        let o = offers(NAMES);
        let m = by_flavour(&o, Arch::Arm64);
        assert_eq!(m.len(), 2);
        assert_eq!(m[&Flavour::K16], vec![v("6.17.13")]);
        assert_eq!(by_flavour(&o, Arch::X86_64)[&Flavour::Cloud].len(), 8);
    }

    #[test]
    fn stanzas_and_their_release_dependencies() {
        let text = "\
Package: linux-image-7.2.6+deb13-cloud-arm64
Source: linux-signed-arm64 (7.2.6+1~bpo13+1)
Version: 7.2.6-1~bpo13+1
Depends: dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, linux-base-7.2.6+deb13-cloud-arm64 (= 7.2.6-1~bpo13+1), linux-binary-7.2.6+deb13-cloud-arm64 (= 7.2.6-1~bpo13+1), linux-modules-7.2.6+deb13-cloud-arm64:arm64 (= 7.2.6-1~bpo13+1), kmod
Description: Linux 7.2 for cloud
 more text
SHA256: 6c65

Package: other
Version: 1
";
        let s = Stanza::parse_all(text);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].get("version"), Some("7.2.6-1~bpo13+1"));
        assert_eq!(
            s[0].get("Description"),
            Some("Linux 7.2 for cloud\nmore text")
        );
        let deps = s[0].release_dependencies("7.2.6+deb13-cloud-arm64");
        let pin = Some("7.2.6-1~bpo13+1".to_string());
        assert_eq!(
            deps,
            [
                (
                    "linux-base-7.2.6+deb13-cloud-arm64".to_string(),
                    pin.clone()
                ),
                (
                    "linux-binary-7.2.6+deb13-cloud-arm64".to_string(),
                    pin.clone()
                ),
                ("linux-modules-7.2.6+deb13-cloud-arm64".to_string(), pin),
            ]
        );
        assert!(s[1]
            .release_dependencies("7.2.6+deb13-cloud-arm64")
            .is_empty());
    }

    #[test]
    fn the_private_state_never_names_system_paths() {
        let apt = Apt::new(Path::new("/c/apt"), "http://m.example/debian/", Arch::Arm64);
        let o = apt.options().join(" ");
        assert!(o.contains("Dir::State::Lists=/c/apt/arm64/lists"), "{o}");
        assert!(o.contains("Dir::State::Status=/c/apt/arm64/status"), "{o}");
        assert!(o.contains("APT::Architectures::=arm64"), "{o}");
        assert!(!o.contains("/etc/apt") && !o.contains("/var/lib"), "{o}");
        let src = apt.source_text();
        assert!(src.contains("URIs: http://m.example/debian\n"), "{src}");
        assert!(
            src.contains("Suites: trixie trixie-backports sid\n"),
            "{src}"
        );
        assert!(src.contains("Architectures: arm64\n"), "{src}");
    }

    #[test]
    fn list_files_are_named_after_the_mirror() {
        assert_eq!(
            list_prefix("http://deb.debian.org/debian"),
            "deb.debian.org_debian_dists_"
        );
        assert_eq!(
            list_prefix("https://m.example:8080/pub/debian/"),
            "m.example:8080_pub_debian_dists_"
        );
    }

    #[test]
    fn apt_errors_are_one_line() {
        let e = "W: GPG error: x\nE: The repository 'a' is not signed.\nE: Failed to fetch b\n";
        assert_eq!(
            apt_errors(e),
            "The repository 'a' is not signed. (and 1 more errors)"
        );
        assert_eq!(
            apt_errors("E: Failed to fetch http://x/InRelease  Could not resolve 'x'\n"),
            "Failed to fetch http://x/InRelease Could not resolve 'x'"
        );
        assert_eq!(apt_errors("oops\nmore"), "oops; more");
    }
}
