//! A kernel source for tests: `fake:VERSION` resolves to a made-up x86
//! image, "fetched" into the cache the first time (no apt, no network) and
//! served from it after, so that what sits above the sources (the fleet,
//! fetching through the cache) runs in tests. It is not in [`SOURCES`]:
//! tests build its specs with [`Fake::spec`].
//!
//! [`SOURCES`]: super::SOURCES

use std::sync::atomic::AtomicBool;

use super::cache::{now_rfc3339, Cache, Cached, Manifest, Package};
use super::image::{detect_arch, sha256_file, HEADER_LEN};
use super::spec::{Flavour, Version};
use super::{Kernel, KernelId, KernelPattern, KernelSource, KernelSpec, Options};
use crate::error::bail_usage;
use crate::record::Guest;
use crate::workload::Arch;

pub struct Fake;

static NEVER: AtomicBool = AtomicBool::new(false);

impl Fake {
    pub fn spec(version: &str) -> KernelSpec {
        Fake.parse(&format!("fake:{version}")).unwrap()
    }

    /// Options that never ask for an arch or a mirror, and are never interrupted.
    pub fn options() -> Options<'static> {
        Options {
            arch: None,
            mirror: None,
            interrupted: &NEVER,
            config: crate::build::Config::Ptelab,
            needs: Default::default(),
        }
    }
}

/// The image of a fake kernel: an x86 boot header and nothing else.
fn image() -> Vec<u8> {
    let mut head = vec![0u8; HEADER_LEN];
    head[0x202..0x206].copy_from_slice(b"HdrS");
    assert_eq!(detect_arch(&head), Some(Arch::X86_64));
    head
}

fn kernel(spec: &KernelSpec, c: &Cached, fetched: bool) -> Kernel {
    let m = &c.manifest;
    Kernel {
        spec: spec.clone(),
        arch: m.arch,
        image: c.image(),
        source: format!("{spec} {}", m.package.name),
        sha256: m.sha256.clone(),
        version: c.version(),
        line: format!("{spec}: {}\n", c.image().display()),
        json: serde_json::json!({ "spec": spec.to_string(), "source": "fake", "fetched": fetched }),
    }
}

impl KernelSource for Fake {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn prefix(&self) -> Option<&'static str> {
        Some("fake:")
    }

    fn accepted(&self) -> &'static str {
        "fake:VERSION (tests)"
    }

    fn parse(&self, text: &str) -> anyhow::Result<KernelSpec> {
        let v = text.strip_prefix("fake:").and_then(Version::parse);
        match v {
            Some(v) => Ok(KernelSpec::new(&Fake, format!("fake:{v}"))),
            None => bail_usage!("bad fake spec '{text}': accepted: fake:VERSION"),
        }
    }

    fn resolve(&self, cache: &Cache, spec: &KernelSpec, _opts: &Options) -> anyhow::Result<Kernel> {
        let version = &spec.text()["fake:".len()..];
        let release = format!("{version}-fake");
        let _lock = cache.lock()?;
        if let Some(c) = cache.get(&release)? {
            if c.manifest.source == self.name() && c.intact() {
                return Ok(kernel(spec, &c, false));
            }
        }
        let staging = cache.stage(&release)?;
        let path = staging.entry().join("vmlinuz");
        std::fs::write(&path, image())?;
        let package = Package {
            name: format!("fake-image-{version}"),
            version: version.into(),
            sha256: None,
        };
        let manifest = Manifest {
            source: self.name().into(),
            spec: spec.to_string(),
            release,
            version: version.into(),
            arch: Arch::X86_64,
            flavour: Flavour::Cloud,
            packages: vec![package.clone()],
            package,
            mirror: String::new(),
            image: "vmlinuz".into(),
            config: None,
            modules: None,
            sha256: sha256_file(&path)?,
            size: image().len() as u64,
            fetched_at: now_rfc3339(),
        };
        Ok(kernel(spec, &staging.commit(cache, &manifest)?, true))
    }

    fn tags_runs(&self) -> bool {
        true
    }

    fn stored(&self, guest: &Guest, arch: Option<Arch>) -> Option<KernelId> {
        let spec = guest.kernel_source.split_whitespace().next()?;
        let version = Version::parse(spec.strip_prefix("fake:")?)?;
        Some(KernelId {
            source: self.name(),
            line: String::new(),
            version: Some(version),
            arch,
            sha256: guest.kernel_sha256.clone(),
            key: spec.to_string(),
            label: spec.to_string(),
        })
    }

    fn pattern(&self, spec: &KernelSpec, arch: Option<Arch>) -> anyhow::Result<KernelPattern> {
        Ok(KernelPattern {
            source: self.name(),
            line: None,
            version: Version::parse(&spec.text()["fake:".len()..]),
            arch,
            sha256: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_fetches_into_the_cache_once_and_then_serves_from_it() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache {
            root: d.path().to_owned(),
        };
        let spec = Fake::spec("6.17.13");
        let k = spec.resolve(&cache, &Fake::options()).unwrap();
        assert_eq!(
            (k.arch, k.json["fetched"].as_bool()),
            (Arch::X86_64, Some(true))
        );
        assert_eq!(k.version, Version::parse("6.17.13"));
        assert_eq!(k.sha256, sha256_file(&k.image).unwrap());
        assert_eq!(k.tag().as_deref(), Some("fake:6.17.13"));
        let again = spec.resolve(&cache, &Fake::options()).unwrap();
        assert_eq!(
            (again.image, again.json["fetched"].as_bool()),
            (k.image.clone(), Some(false))
        );
        // The manifest is keyed by source: Debian's lookups do not see it.
        let want = Version::parse("6.17").unwrap();
        let arch = Arch::X86_64;
        assert!(cache
            .find("debian", &want, Flavour::Cloud, arch)
            .unwrap()
            .is_none());
        assert!(cache
            .find("fake", &want, Flavour::Cloud, arch)
            .unwrap()
            .is_some());
        // A changed image is fetched again.
        std::fs::write(&k.image, b"tampered").unwrap();
        let fresh = spec.resolve(&cache, &Fake::options()).unwrap();
        assert_eq!(fresh.json["fetched"].as_bool(), Some(true));
        assert_eq!(fresh.sha256, k.sha256);
    }
}
