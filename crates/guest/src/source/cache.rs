//! The kernel cache: `$XDG_CACHE_HOME/ptelab/kernels/RELEASE/` (default
//! `~/.cache/ptelab/kernels`; `$PTELAB_CACHE/kernels` for a shared one), one directory per Debian kernel release with
//! its image, config, modules and a JSON manifest. An entry is assembled in
//! a `.partial-PID-…` directory and renamed into place with its manifest
//! already inside, so a directory with a manifest is always complete; what
//! an interrupted fetch leaves is a `.partial-*` that the next fetch removes.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::image::sha256_file;
use super::spec::{Flavour, Version};
use crate::workload::Arch;

/// The manifest file of a cache entry.
pub const MANIFEST: &str = "manifest.json";
const PARTIAL: &str = ".partial-";

/// One package a cached kernel came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    pub name: String,
    pub version: String,
    /// The .deb's sha256 as the signed index lists it.
    pub sha256: Option<String>,
}

/// What is known about a cached kernel (its `manifest.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The kernel source it came from (`KernelSource::name`). Manifests
    /// written before sources had names are Debian's, the only source that
    /// cached then.
    #[serde(default = "debian")]
    pub source: String,
    /// The spec it was first fetched for.
    pub spec: String,
    /// Debian's kernel release (`6.17.13+deb13-cloud-amd64`): `uname -r` in the guest.
    pub release: String,
    pub version: String,
    pub arch: Arch,
    pub flavour: Flavour,
    /// The package holding the image and its version.
    pub package: Package,
    /// Every package extracted (the image's, and from 6.19 on its modules and base).
    pub packages: Vec<Package>,
    pub mirror: String,
    /// File names inside the entry.
    pub image: String,
    pub config: Option<String>,
    pub modules: Option<String>,
    /// sha256 and size of the image.
    pub sha256: String,
    pub size: u64,
    /// UTC, RFC 3339.
    pub fetched_at: String,
}

fn debian() -> String {
    "debian".into()
}

/// A cache entry.
#[derive(Debug, Clone)]
pub struct Cached {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

impl Cached {
    pub fn image(&self) -> PathBuf {
        self.dir.join(&self.manifest.image)
    }

    pub fn config(&self) -> Option<PathBuf> {
        self.manifest.config.as_ref().map(|c| self.dir.join(c))
    }

    pub fn modules(&self) -> Option<PathBuf> {
        self.manifest.modules.as_ref().map(|m| self.dir.join(m))
    }

    /// The image still hashes to the manifest's sha256.
    pub fn intact(&self) -> bool {
        sha256_file(&self.image()).is_ok_and(|h| h == self.manifest.sha256)
    }

    /// The version as a [`Version`] (manifests are written by ptelab).
    pub fn version(&self) -> Option<Version> {
        Version::parse(&self.manifest.version)
    }
}

/// The user's cache directory for ptelab.
pub struct Cache {
    pub root: PathBuf,
}

impl Cache {
    /// `$PTELAB_CACHE` (a cache shared by the nodes of a cluster,
    /// docs/cluster.md), else `$XDG_CACHE_HOME/ptelab` (an absolute
    /// XDG_CACHE_HOME only, as the XDG spec says), else `$HOME/.cache/ptelab`.
    pub fn from_env() -> anyhow::Result<Cache> {
        if let Some(root) = std::env::var_os("PTELAB_CACHE").filter(|p| !p.is_empty()) {
            return Ok(Cache {
                root: std::path::absolute(root).context("PTELAB_CACHE")?,
            });
        }
        let xdg = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute());
        let base = match xdg {
            Some(p) => p,
            None => match std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
            {
                Some(h) => h.join(".cache"),
                None => crate::error::bail_usage!(
                    "no cache directory: set XDG_CACHE_HOME or HOME to an absolute path"
                ),
            },
        };
        Ok(Cache {
            root: base.join("ptelab"),
        })
    }

    pub fn kernels(&self) -> PathBuf {
        self.root.join("kernels")
    }

    /// Root of the private apt states (one per arch).
    pub fn apt(&self) -> PathBuf {
        self.root.join("apt")
    }

    /// Every complete entry (with a readable manifest), sorted by arch,
    /// flavour and version.
    pub fn entries(&self) -> anyhow::Result<Vec<Cached>> {
        let dir = self.kernels();
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
        };
        let mut out = Vec::new();
        for e in rd {
            let path = e?.path();
            if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(path.join(MANIFEST)) else {
                continue;
            };
            match serde_json::from_str::<Manifest>(&text) {
                Ok(manifest) => out.push(Cached {
                    dir: path,
                    manifest,
                }),
                Err(e) => eprintln!(
                    "ptelab: warning: ignoring {} ({e}); `kernel fetch` replaces it",
                    path.join(MANIFEST).display()
                ),
            }
        }
        out.sort_by_key(|c| {
            (
                c.manifest.arch,
                c.manifest.flavour,
                c.version(),
                c.manifest.release.clone(),
            )
        });
        Ok(out)
    }

    /// The newest entry of `source` matching a version request.
    pub fn find(
        &self,
        source: &str,
        want: &Version,
        flavour: Flavour,
        arch: Arch,
    ) -> anyhow::Result<Option<Cached>> {
        Ok(self
            .entries()?
            .into_iter()
            .filter(|c| {
                c.manifest.source == source
                    && c.manifest.arch == arch
                    && c.manifest.flavour == flavour
                    && c.version().is_some_and(|v| want.matches(&v))
            })
            .max_by_key(|c| c.version()))
    }

    /// The entry of one release.
    pub fn get(&self, release: &str) -> anyhow::Result<Option<Cached>> {
        Ok(self
            .entries()?
            .into_iter()
            .find(|c| c.manifest.release == release))
    }

    /// Hold the cache's lock (one fetch at a time per cache; another
    /// ptelab waits). Released when the returned file is dropped.
    pub fn lock(&self) -> anyhow::Result<File> {
        let dir = self.kernels();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(".lock");
        let f = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            eprintln!(
                "ptelab: waiting for another ptelab fetching into {}",
                dir.display()
            );
            // SAFETY: as above.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
                return Err(std::io::Error::last_os_error()).context("locking the kernel cache");
            }
        }
        Ok(f)
    }

    /// Remove what interrupted fetches left (`.partial-PID-*` of processes
    /// that are gone). Call with the lock held.
    pub fn sweep_partials(&self) {
        let Ok(rd) = std::fs::read_dir(self.kernels()) else {
            return;
        };
        for e in rd.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(PARTIAL) else {
                continue;
            };
            let pid = rest.split('-').next().unwrap_or("");
            let alive = pid.parse::<u32>().is_ok_and(|p| {
                p == std::process::id() || Path::new("/proc").join(p.to_string()).exists()
            });
            if !alive {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }

    /// A fresh staging directory for `release`, removed on drop unless
    /// committed.
    pub fn stage(&self, release: &str) -> anyhow::Result<Staging> {
        let dir = self
            .kernels()
            .join(format!("{PARTIAL}{}-{release}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(dir.join("entry"))
            .with_context(|| format!("creating {}", dir.display()))?;
        Ok(Staging { dir })
    }
}

/// An entry being assembled (`entry/` inside a `.partial-*` directory).
pub struct Staging {
    pub dir: PathBuf,
}

impl Staging {
    pub fn entry(&self) -> PathBuf {
        self.dir.join("entry")
    }

    /// Write the manifest into the entry and rename the entry into place,
    /// replacing an older entry of the same release.
    pub fn commit(self, cache: &Cache, manifest: &Manifest) -> anyhow::Result<Cached> {
        let entry = self.entry();
        let mpath = entry.join(MANIFEST);
        let mut f =
            File::create(&mpath).with_context(|| format!("creating {}", mpath.display()))?;
        serde_json::to_writer_pretty(&mut f, manifest)?;
        std::io::Write::write_all(&mut f, b"\n")?;
        f.sync_all()?;
        let target = cache.kernels().join(&manifest.release);
        if target.exists() {
            // Moved aside first: the rename below needs the name free, and
            // a crash in between leaves a .partial-* the next fetch removes.
            let old = self.dir.join("old");
            std::fs::rename(&target, &old)
                .with_context(|| format!("moving the old {} aside", target.display()))?;
        }
        std::fs::rename(&entry, &target)
            .with_context(|| format!("renaming {} to {}", entry.display(), target.display()))?;
        if let Ok(d) = File::open(cache.kernels()) {
            let _ = d.sync_all();
        }
        Ok(Cached {
            dir: target,
            manifest: manifest.clone(),
        })
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Now, as RFC 3339 UTC (seconds).
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// Unix seconds as RFC 3339 UTC (civil-from-days, H. Hinnant's algorithm).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(any(test, feature = "testing"))]
pub mod tests {
    // Helpers for other layers' tests (feature `testing`) beside this
    // layer's own tests, which alone use the rest.
    #![cfg_attr(not(test), allow(dead_code, unused_imports))]

    use super::*;

    pub fn manifest(release: &str) -> Manifest {
        let o = super::super::debian::Offer::from_release(release).unwrap();
        let pkg = Package {
            name: format!("linux-image-{release}"),
            version: format!("{}-1", o.version),
            sha256: None,
        };
        Manifest {
            source: "debian".into(),
            spec: format!("debian:{}", o.version),
            release: release.into(),
            version: o.version.to_string(),
            arch: o.arch,
            flavour: o.flavour,
            package: pkg.clone(),
            packages: vec![pkg],
            mirror: "http://m.example/debian".into(),
            image: "vmlinuz".into(),
            config: None,
            modules: None,
            sha256: String::new(),
            size: 0,
            fetched_at: rfc3339(0),
        }
    }

    fn put(cache: &Cache, release: &str, image: &[u8]) -> Cached {
        let st = cache.stage(release).unwrap();
        std::fs::write(st.entry().join("vmlinuz"), image).unwrap();
        let mut m = manifest(release);
        m.sha256 = sha256_file(&st.entry().join("vmlinuz")).unwrap();
        m.size = image.len() as u64;
        st.commit(cache, &m).unwrap()
    }

    #[test]
    fn entries_are_committed_whole_and_found_by_request() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache {
            root: d.path().to_owned(),
        };
        assert!(cache.entries().unwrap().is_empty());
        put(&cache, "6.17.8+deb13-cloud-amd64", b"a");
        let c = put(&cache, "6.17.13+deb13-cloud-amd64", b"b");
        put(&cache, "6.17.13+deb13-cloud-arm64", b"c");
        assert!(c.intact());
        let names: Vec<_> = std::fs::read_dir(cache.kernels())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(PARTIAL))
            .collect();
        assert!(names.is_empty(), "staging left behind: {names:?}");
        let want = Version::parse("6.17").unwrap();
        let got = cache
            .find("debian", &want, Flavour::Cloud, Arch::X86_64)
            .unwrap()
            .unwrap();
        assert_eq!(got.manifest.release, "6.17.13+deb13-cloud-amd64");
        assert!(cache
            .find("debian", &want, Flavour::Generic, Arch::X86_64)
            .unwrap()
            .is_none());
        assert_eq!(cache.entries().unwrap().len(), 3);

        // A changed image no longer matches; a new commit replaces the entry.
        std::fs::write(c.image(), b"tampered").unwrap();
        assert!(!cache.get(&c.manifest.release).unwrap().unwrap().intact());
        let again = put(&cache, "6.17.13+deb13-cloud-amd64", b"b");
        assert!(again.intact());
        assert_eq!(cache.entries().unwrap().len(), 3);
    }

    #[test]
    fn manifests_are_keyed_by_source_and_old_ones_are_debians() {
        let mut json = serde_json::to_value(manifest("6.17.13+deb13-cloud-amd64")).unwrap();
        assert_eq!(json["source"], "debian");
        json.as_object_mut().unwrap().remove("source");
        let old: Manifest = serde_json::from_value(json).unwrap();
        assert_eq!(old.source, "debian");

        let d = tempfile::tempdir().unwrap();
        let cache = Cache {
            root: d.path().to_owned(),
        };
        let st = cache.stage("6.17.13+other").unwrap();
        std::fs::write(st.entry().join("vmlinuz"), b"x").unwrap();
        let mut m = manifest("6.17.13+deb13-cloud-amd64");
        m.source = "other".into();
        m.release = "6.17.13+other".into();
        st.commit(&cache, &m).unwrap();
        let want = Version::parse("6.17").unwrap();
        assert!(cache
            .find("debian", &want, Flavour::Cloud, Arch::X86_64)
            .unwrap()
            .is_none());
        assert!(cache
            .find("other", &want, Flavour::Cloud, Arch::X86_64)
            .unwrap()
            .is_some());
    }

    #[test]
    fn an_abandoned_staging_is_never_an_entry_and_is_swept() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache {
            root: d.path().to_owned(),
        };
        let st = cache.stage("6.17.13+deb13-cloud-amd64").unwrap();
        std::fs::write(st.entry().join("vmlinuz"), b"x").unwrap();
        std::fs::write(st.entry().join(MANIFEST), "{}").unwrap();
        let dir = st.dir.clone();
        std::mem::forget(st);
        assert!(cache.entries().unwrap().is_empty());
        // A dead process's staging (pid 0 never names one) is removed.
        let dead = cache.kernels().join(".partial-0-x");
        std::fs::rename(&dir, &dead).unwrap();
        cache.sweep_partials();
        assert!(!dead.exists());
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_958_245), "2026-11-29T13:17:25Z");
    }
}
