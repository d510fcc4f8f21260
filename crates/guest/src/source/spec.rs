//! Debian's kernel specs as users type them: `debian:6.17.13`,
//! `debian:6.17`, `debian:6.17.13-generic`, `debian:6.17-cloud-arm64`; and
//! the upstream [`Version`] every source names its kernels by.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::arch::facts;
use crate::error::bail_usage;
use crate::workload::Arch;

/// What a Debian spec looks like.
pub const ACCEPTED: &str = "debian:VERSION[-FLAVOUR][-ARCH] \
(e.g. debian:6.17.13, debian:6.17, debian:6.17.13-generic, debian:6.16.12-arm64; \
flavours cloud (default), generic, rt, 16k)";

/// A Debian kernel flavour (the part of the package name between the ABI and
/// the arch: `6.17.13+deb13-cloud-amd64`; generic has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavour {
    Cloud,
    Generic,
    Rt,
    /// arm64 with 16K pages (`arm64-16k`).
    #[serde(rename = "16k")]
    K16,
}

impl Flavour {
    pub const ALL: [Flavour; 4] = [Flavour::Cloud, Flavour::Generic, Flavour::Rt, Flavour::K16];

    pub fn parse(s: &str) -> Option<Flavour> {
        match s {
            "cloud" => Some(Flavour::Cloud),
            "generic" => Some(Flavour::Generic),
            "rt" => Some(Flavour::Rt),
            "16k" => Some(Flavour::K16),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Flavour::Cloud => "cloud",
            Flavour::Generic => "generic",
            Flavour::Rt => "rt",
            Flavour::K16 => "16k",
        }
    }

    /// The tail of Debian's kernel release for this flavour on `arch`
    /// (`cloud-amd64`, `amd64`, `rt-arm64`, `arm64-16k`); None where Debian
    /// has no such flavour.
    pub fn release_tail(self, arch: Arch) -> Option<String> {
        let a = facts(arch).debian;
        match self {
            Flavour::Cloud => Some(format!("cloud-{a}")),
            Flavour::Generic => Some(a.to_string()),
            Flavour::Rt => Some(format!("rt-{a}")),
            Flavour::K16 => (arch == Arch::Arm64).then(|| format!("{a}-16k")),
        }
    }

    /// The flavour and arch of a release tail (inverse of [`Self::release_tail`]).
    pub fn from_release_tail(tail: &str) -> Option<(Flavour, Arch)> {
        for arch in Arch::ALL {
            for fl in Flavour::ALL {
                if fl.release_tail(arch).as_deref() == Some(tail) {
                    return Some((fl, arch));
                }
            }
        }
        None
    }
}

impl fmt::Display for Flavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An upstream kernel version `major.minor[.patch]`; a spec without a patch
/// level asks for the newest offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: Option<u32>,
}

impl Version {
    pub fn parse(s: &str) -> Option<Version> {
        let mut it = s.split('.');
        let num = |p: Option<&str>| -> Option<u32> {
            let p = p?;
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.len() > 6 {
                return None;
            }
            p.parse().ok()
        };
        let major = num(it.next())?;
        let minor = num(it.next())?;
        let patch = match it.next() {
            None => None,
            Some(p) => Some(num(Some(p))?),
        };
        if it.next().is_some() {
            return None;
        }
        Some(Version {
            major,
            minor,
            patch,
        })
    }

    /// True when `full` (a version with a patch level) is what `self` asks for.
    pub fn matches(&self, full: &Version) -> bool {
        self.major == full.major
            && self.minor == full.minor
            && (self.patch.is_none() || self.patch == full.patch)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.patch {
            Some(p) => write!(f, "{}.{}.{}", self.major, self.minor, p),
            None => write!(f, "{}.{}", self.major, self.minor),
        }
    }
}

/// A Debian kernel spec, parsed: a prebuilt kernel from Debian's archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DebianSpec {
    pub version: Version,
    pub flavour: Flavour,
    /// Arch named in the spec itself (`debian:6.17.13-arm64`).
    pub arch: Option<Arch>,
}

impl DebianSpec {
    /// Parse a spec that starts with `debian:`.
    pub fn parse(s: &str) -> anyhow::Result<DebianSpec> {
        let s = s.trim();
        let accepted = super::accepted();
        let Some(rest) = s.strip_prefix("debian:") else {
            bail_usage!("unknown kernel source in '{s}': {accepted}");
        };
        let mut parts = rest.split('-');
        let v = parts.next().unwrap_or_default();
        let Some(version) = Version::parse(v) else {
            bail_usage!("bad kernel version '{v}' in '{s}': {accepted}");
        };
        let tokens: Vec<&str> = parts.collect();
        let (mut flavour, mut arch) = (None, None);
        let mut i = 0;
        while i < tokens.len() {
            let t = tokens[i];
            // Debian's own spelling of the 16K flavour: `arm64-16k`.
            if t == "arm64" && tokens.get(i + 1) == Some(&"16k") && flavour.is_none() {
                flavour = Some(Flavour::K16);
                arch = Some(Arch::Arm64);
                i += 2;
                continue;
            }
            if let (Some(f), None) = (Flavour::parse(t), flavour) {
                flavour = Some(f);
            } else if let (Some(a), None) = (Arch::parse(t), arch) {
                arch = Some(a);
            } else {
                bail_usage!("bad flavour or arch '{t}' in '{s}': {accepted}");
            }
            i += 1;
        }
        let flavour = flavour.unwrap_or(Flavour::Cloud);
        if flavour == Flavour::K16 && arch == Some(Arch::X86_64) {
            bail_usage!("the 16k flavour is arm64 only ('{s}'): {accepted}");
        }
        // The 16k flavour implies arm64: the spec is the same with or
        // without it, and prints without it.
        let arch = arch.filter(|_| flavour != Flavour::K16);
        Ok(DebianSpec {
            version,
            flavour,
            arch,
        })
    }

    /// The arch a Debian spec asks for: its own, else `--arch`, else the
    /// 16k flavour's, else the host's. Conflicts are usage errors.
    pub fn arch(&self, flag: Option<Arch>) -> anyhow::Result<Arch> {
        let implied = self
            .arch
            .or((self.flavour == Flavour::K16).then_some(Arch::Arm64));
        match (implied, flag) {
            (Some(a), Some(f)) if a != f => {
                bail_usage!("kernel spec {self} is for {a} but --arch is {f}: drop one of them")
            }
            (Some(a), _) | (None, Some(a)) => Ok(a),
            (None, None) => match Arch::host() {
                Some(a) => Ok(a),
                None => bail_usage!(
                    "this host ({}) is neither x86_64 nor arm64: pass --arch x86_64|arm64",
                    std::env::consts::ARCH
                ),
            },
        }
    }
}

impl fmt::Display for DebianSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "debian:{}", self.version)?;
        if self.flavour != Flavour::Cloud {
            write!(f, "-{}", self.flavour)?;
        }
        if let Some(a) = self.arch {
            if self.flavour != Flavour::K16 {
                write!(f, "-{a}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::KernelSpec;

    fn deb(s: &str) -> (String, Flavour, Option<Arch>) {
        let spec = KernelSpec::parse(s).unwrap();
        assert_eq!(spec.source().name(), "debian", "{s}");
        let d = DebianSpec::parse(spec.text()).unwrap();
        (d.version.to_string(), d.flavour, d.arch)
    }

    #[test]
    fn debian_specs() {
        assert_eq!(
            deb("debian:6.17.13"),
            ("6.17.13".into(), Flavour::Cloud, None)
        );
        assert_eq!(deb("debian:6.17"), ("6.17".into(), Flavour::Cloud, None));
        assert_eq!(
            deb("debian:6.17.13-generic"),
            ("6.17.13".into(), Flavour::Generic, None)
        );
        assert_eq!(
            deb("debian:6.16.12-arm64"),
            ("6.16.12".into(), Flavour::Cloud, Some(Arch::Arm64))
        );
        assert_eq!(
            deb("debian:6.16-rt-amd64"),
            ("6.16".into(), Flavour::Rt, Some(Arch::X86_64))
        );
        assert_eq!(
            deb("debian:6.17.13-arm64-16k"),
            ("6.17.13".into(), Flavour::K16, None)
        );
        assert_eq!(
            deb("debian:7.3.4-cloud-aarch64"),
            ("7.3.4".into(), Flavour::Cloud, Some(Arch::Arm64))
        );
    }

    #[test]
    fn paths_are_images() {
        for path in ["arch/x86/boot/bzImage", "/tmp/a:b/Image"] {
            let spec = KernelSpec::parse(path).unwrap();
            assert_eq!((spec.source().name(), spec.text()), ("image", path));
        }
    }

    #[test]
    fn bad_specs_are_usage_errors_naming_what_is_accepted() {
        for bad in [
            "",
            "debian:",
            "debian:6",
            "debian:6.x",
            "debian:6.17.13.1",
            "debian:6.17.13-fancy",
            "debian:6.17.13-cloud-generic",
            "debian:6.17.13-amd64-arm64",
            "debian:6.17-16k-amd64",
            "ubuntu:6.17",
        ] {
            let err = KernelSpec::parse(bad).unwrap_err();
            assert!(crate::error::is_usage(&err), "{bad}");
            assert!(
                err.to_string().contains("accepted: debian:"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn arch_comes_from_the_spec_the_flag_or_the_host() {
        let s = DebianSpec::parse("debian:6.17.13-arm64").unwrap();
        assert_eq!(s.arch(None).unwrap(), Arch::Arm64);
        assert_eq!(s.arch(Some(Arch::Arm64)).unwrap(), Arch::Arm64);
        assert!(crate::error::is_usage(
            &s.arch(Some(Arch::X86_64)).unwrap_err()
        ));
        let s = DebianSpec::parse("debian:6.17.13").unwrap();
        assert_eq!(s.arch(Some(Arch::X86_64)).unwrap(), Arch::X86_64);
        assert_eq!(s.arch(None).unwrap(), Arch::host().unwrap());
        let s = DebianSpec::parse("debian:6.17-16k").unwrap();
        assert_eq!(s.arch(None).unwrap(), Arch::Arm64);
    }

    #[test]
    fn flavours_round_trip_through_release_tails() {
        for arch in Arch::ALL {
            for fl in Flavour::ALL {
                if let Some(t) = fl.release_tail(arch) {
                    assert_eq!(Flavour::from_release_tail(&t), Some((fl, arch)));
                }
            }
        }
        assert_eq!(Flavour::release_tail(Flavour::K16, Arch::X86_64), None);
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "debian:6.17.13",
            "debian:6.17-generic",
            "debian:6.17.13-arm64",
            "debian:6.17-16k",
        ] {
            assert_eq!(KernelSpec::parse(s).unwrap().to_string(), s);
        }
        // A source keeps a spec as its text: the text parses back to it.
        for s in [
            "debian:6.17.13-arm64-16k",
            "debian:6.16-rt-amd64",
            "debian:7.3.4-cloud-aarch64",
        ] {
            let d = DebianSpec::parse(s).unwrap();
            assert_eq!(DebianSpec::parse(&d.to_string()).unwrap(), d, "{s}");
        }
    }
}
