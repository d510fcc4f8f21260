//! A kernel's identity, whatever spelling named it (docs/guests.md, "One
//! kernel, many spellings"): `debian:6.16.12`, `debian:6.16.12-x86_64` and
//! `debian:6.16.12-cloud-amd64` on x86-64 are one kernel, Debian's resolved
//! package (upstream version, flavour, arch); an image of one's own build is
//! its sha256. Stored runs are matched on what they recorded when they
//! booted (the guest record's package and sha256, the run's arch), never on
//! the text a user typed then.

use super::spec::Version;
use super::{KernelSpec, SOURCES};
use crate::record::Guest;
use crate::workload::Arch;

/// The kernel a stored guest run booted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelId {
    /// The source's name (`debian`, `image`).
    pub source: &'static str,
    /// What stays the same across versions (Debian: the flavour; empty for
    /// images).
    pub line: String,
    pub version: Option<Version>,
    pub arch: Option<Arch>,
    pub sha256: String,
    /// Equal for two runs of one kernel, and only then: the canonical spec
    /// with its arch (`debian:6.16.12-x86_64`), or `sha256:HEX`.
    pub key: String,
    /// How it is printed beside figures of one arch: the shortest spec
    /// (`debian:6.16.12`), or the image's path.
    pub label: String,
}

/// What a spec names among stored kernels (from [`KernelSpec::pattern`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelPattern {
    pub source: &'static str,
    pub line: Option<String>,
    /// Without a patch level: the newest stored of that minor.
    pub version: Option<Version>,
    pub arch: Option<Arch>,
    pub sha256: Option<String>,
}

impl KernelPattern {
    pub fn matches(&self, id: &KernelId) -> bool {
        let version = match (self.version, id.version) {
            (Some(want), Some(have)) if have.patch.is_some() => want.matches(&have),
            (Some(want), have) => Some(want) == have,
            (None, _) => true,
        };
        self.source == id.source
            && self.line.as_ref().is_none_or(|l| *l == id.line)
            && version
            && self.arch.is_none_or(|a| Some(a) == id.arch)
            && self.sha256.as_ref().is_none_or(|s| *s == id.sha256)
    }

    /// The kernels of `ids` it names: those it matches, and of a version
    /// without a patch level only the newest (as resolving it would fetch).
    pub fn pick<'a>(&self, ids: impl IntoIterator<Item = &'a KernelId>) -> Vec<&'a KernelId> {
        let found: Vec<&KernelId> = ids.into_iter().filter(|id| self.matches(id)).collect();
        if self.version.is_some_and(|v| v.patch.is_none()) {
            let newest = found.iter().filter_map(|id| id.version).max();
            return found
                .into_iter()
                .filter(|id| id.version == newest)
                .collect();
        }
        found
    }
}

/// The identity of the kernel a stored guest run booted on `arch` (the
/// run's, as stored); None when no source recognises it.
pub fn stored(guest: &Guest, arch: &str) -> Option<KernelId> {
    let arch = Arch::parse(arch);
    SOURCES.iter().find_map(|s| s.stored(guest, arch))
}

impl KernelSpec {
    /// What this spec names among stored kernels, on `arch` when it names
    /// none (None: any arch). A conflict with its own arch is a usage error.
    pub fn pattern(&self, arch: Option<Arch>) -> anyhow::Result<KernelPattern> {
        self.source().pattern(self, arch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Accel, Guest};

    fn guest(source: &str, sha: &str) -> Guest {
        Guest::new(Accel::Tcg, "QEMU 10", source, sha)
    }

    fn names(spec: &str, arch: Option<Arch>, id: &KernelId) -> bool {
        KernelSpec::parse(spec)
            .unwrap()
            .pattern(arch)
            .unwrap()
            .matches(id)
    }

    #[test]
    fn spellings_of_one_debian_kernel_are_one_kernel() {
        // As `reproduce --kernels auto` stores it, and as `vm --kernel` does.
        let auto = guest(
            "debian:6.16.12-x86_64 linux-image-6.16.12+deb13-cloud-amd64 6.16.12-1",
            "aa",
        );
        let typed = guest(
            "debian:6.16.12 linux-image-6.16.12+deb13-cloud-amd64 6.16.12-1",
            "aa",
        );
        let (a, t) = (
            stored(&auto, "x86_64").unwrap(),
            stored(&typed, "x86_64").unwrap(),
        );
        assert_eq!(a, t);
        assert_eq!(a.key, "debian:6.16.12-x86_64");
        assert_eq!(a.label, "debian:6.16.12");
        for spec in [
            "debian:6.16.12",
            "debian:6.16.12-x86_64",
            "debian:6.16.12-cloud-amd64",
            "debian:6.16",
        ] {
            assert!(names(spec, Some(Arch::X86_64), &a), "{spec}");
            assert!(names(spec, None, &a), "{spec}");
        }
        for spec in [
            "debian:6.16.12-arm64",
            "debian:6.16.12-generic",
            "debian:6.16.11",
        ] {
            assert!(!names(spec, None, &a), "{spec}");
        }
        assert!(!names("debian:6.16.12", Some(Arch::Arm64), &a));
        // A spec's own arch against another --arch is bad input.
        let spec = KernelSpec::parse("debian:6.16.12-arm64").unwrap();
        assert!(crate::error::is_usage(
            &spec.pattern(Some(Arch::X86_64)).unwrap_err()
        ));
    }

    #[test]
    fn a_minor_names_the_newest_stored_patch() {
        let ids: Vec<KernelId> = ["6.17.8", "6.17.13", "6.16.12"]
            .iter()
            .map(|v| {
                let g = guest(
                    &format!("debian:{v} linux-image-{v}+deb13-cloud-arm64 {v}-1"),
                    v,
                );
                stored(&g, "aarch64").unwrap()
            })
            .collect();
        let p = KernelSpec::parse("debian:6.17")
            .unwrap()
            .pattern(None)
            .unwrap();
        let picked: Vec<&str> = p.pick(&ids).iter().map(|id| id.label.as_str()).collect();
        assert_eq!(picked, ["debian:6.17.13"]);
    }

    #[test]
    fn an_image_is_its_sha256() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bzImage");
        std::fs::write(&path, b"an image").unwrap();
        let sha = super::super::sha256_file(&path).unwrap();
        let id = stored(&guest("/elsewhere/bzImage", &sha), "x86_64").unwrap();
        assert_eq!(
            (id.source, id.key.clone()),
            ("image", format!("sha256:{sha}"))
        );
        // Another path to the same bytes names it; other bytes do not.
        assert!(names(path.to_str().unwrap(), None, &id));
        std::fs::write(&path, b"another image").unwrap();
        assert!(!names(path.to_str().unwrap(), None, &id));
    }
}
