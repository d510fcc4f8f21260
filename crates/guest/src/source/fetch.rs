//! Debian's prebuilt kernels as a kernel source ([`Debian`]): a spec
//! resolves to a kernel from the cache, fetched first when it is not there
//! or its image no longer matches its manifest; the versions Debian offers.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context};

use super::cache::{now_rfc3339, Cache, Cached, Manifest, Package};
use serde_json::json;

use super::debian::{self, Apt, Offer, Stanza, INDEX_MAX_AGE};
use super::image;
use super::sources;
use super::spec::{DebianSpec, Flavour, Version};
use super::{
    Kernel, KernelId, KernelPattern, KernelSource, KernelSpec, Offered, Options, Versions,
};
use crate::error::usage;
use crate::record::Guest;
use crate::workload::Arch;

/// Resolve a Debian spec: the cache entry, and whether it was fetched now
/// (false: served from the cache).
fn fetch(cache: &Cache, spec: &DebianSpec, opts: &Options) -> anyhow::Result<(Cached, bool)> {
    let DebianSpec {
        version, flavour, ..
    } = spec;
    let arch = spec.arch(opts.arch)?;
    let _lock = cache.lock()?;
    cache.sweep_partials();
    // An exact version in the cache needs no network at all.
    let mut warned = false;
    if version.patch.is_some() {
        if let Some(c) = cache.find(Debian.name(), version, *flavour, arch)? {
            if c.intact() {
                return Ok((c, false));
            }
            warn_changed(&c);
            warned = true;
        }
    }
    let mirror = mirror(opts.mirror.as_deref())?;
    let apt = Apt::new(&cache.apt(), &mirror, arch);
    apt.prepare()?;
    let mut updated = false;
    if apt.index_age().is_none_or(|a| a > INDEX_MAX_AGE) {
        if let Err(e) = apt.update() {
            check_interrupt_after_failure(opts.interrupted)?;
            return offline(cache, spec, *version, *flavour, arch, &mirror, &e);
        }
        updated = true;
    }
    let mut offers = apt.offers()?;
    if debian::select(&offers, version, *flavour, arch).is_none() && !updated {
        // The index may predate the version asked for.
        if let Err(e) = apt.update() {
            check_interrupt_after_failure(opts.interrupted)?;
            return offline(cache, spec, *version, *flavour, arch, &mirror, &e);
        }
        offers = apt.offers()?;
    }
    let Some(offer) = debian::select(&offers, version, *flavour, arch).cloned() else {
        return Err(not_offered(&offers, *version, *flavour, arch));
    };
    if let Some(c) = cache.get(&offer.release)? {
        if c.intact() {
            return Ok((c, false));
        }
        if !warned {
            warn_changed(&c);
        }
    }
    let entry = install(cache, &apt, &offer, spec, opts.interrupted)?;
    Ok((entry, true))
}

/// What Debian offers for `arch` now (the index is updated first; when
/// that fails, an older index is used with a warning).
pub fn available(
    cache: &Cache,
    arch: Arch,
    mirror_flag: Option<&str>,
) -> anyhow::Result<(Vec<Offer>, String)> {
    let mirror = mirror(mirror_flag)?;
    let apt = Apt::new(&cache.apt(), &mirror, arch);
    let _lock = cache.lock()?;
    apt.prepare()?;
    if let Err(e) = apt.update() {
        let Some(age) = apt.index_age() else {
            return Err(usage(format!(
                "cannot reach the Debian archive at {mirror} ({}); pass --mirror URL of a reachable Debian mirror",
                root_cause(&e)
            )));
        };
        eprintln!(
            "ptelab: warning: could not update the Debian index ({}); showing the index of {} hours ago",
            root_cause(&e),
            age.as_secs() / 3600
        );
    }
    Ok((apt.offers()?, mirror))
}

/// The Debian mirror: `--mirror`, else the first Debian archive among the
/// system's apt sources.
pub fn mirror(flag: Option<&str>) -> anyhow::Result<String> {
    if let Some(m) = flag {
        let ok = ["http://", "https://", "file:/", "mirror+"]
            .iter()
            .any(|p| m.starts_with(p));
        if !ok {
            return Err(usage(format!(
                "bad --mirror '{m}': accepted: the URL of a Debian mirror (http://HOST/debian, https://…, file:/…)"
            )));
        }
        return Ok(m.trim_end_matches('/').to_string());
    }
    let entries = sources::system_entries(Path::new("/etc/apt"));
    sources::debian_mirror(&entries).ok_or_else(|| {
        usage(
            "no Debian archive among apt's sources (/etc/apt/sources.list, /etc/apt/sources.list.d): \
             pass --mirror URL of a Debian mirror",
        )
    })
}

fn warn_changed(c: &Cached) {
    eprintln!(
        "ptelab: cached {} no longer matches its manifest's sha256: fetching it again",
        c.image().display()
    );
}

fn root_cause(e: &anyhow::Error) -> String {
    e.to_string()
}

/// The index could not be updated: a cached kernel that fits a minor-version
/// request still serves; otherwise say that neither network nor cache has it.
fn offline(
    cache: &Cache,
    spec: &DebianSpec,
    version: Version,
    flavour: Flavour,
    arch: Arch,
    mirror: &str,
    err: &anyhow::Error,
) -> anyhow::Result<(Cached, bool)> {
    if let Some(c) = cache.find(Debian.name(), &version, flavour, arch)? {
        if c.intact() {
            eprintln!(
                "ptelab: warning: cannot update the Debian index ({}); using the cached {}",
                root_cause(err),
                c.manifest.release
            );
            return Ok((c, false));
        }
    }
    Err(usage(format!(
        "cannot reach the Debian archive at {mirror} ({}) and no cached kernel matches {spec} ({flavour}, {arch}): \
         connect to the network, pass --mirror URL, or use a cached kernel (ptelab kernel list)",
        root_cause(err)
    )))
}

/// The usage error for a version Debian does not offer, with the nearest.
pub fn not_offered(
    offers: &[Offer],
    version: Version,
    flavour: Flavour,
    arch: Arch,
) -> anyhow::Error {
    not_offered_in(&lines(offers, arch), version, flavour.name(), arch)
}

/// The versions of `offers` per flavour, for `arch` (flavours in their order).
fn lines(offers: &[Offer], arch: Arch) -> Vec<(String, Vec<Version>)> {
    debian::by_flavour(offers, arch)
        .into_iter()
        .map(|(f, v)| (f.to_string(), v))
        .collect()
}

/// [`not_offered`], from the versions offered per flavour.
fn not_offered_in(
    lines: &[(String, Vec<Version>)],
    version: Version,
    flavour: &str,
    arch: Arch,
) -> anyhow::Error {
    let versions = lines
        .iter()
        .find(|(l, _)| l == flavour)
        .map_or(&[][..], |(_, v)| v.as_slice());
    let near = debian::nearest_of(versions.iter().copied(), &version, 5);
    if near.is_empty() {
        let flavours: Vec<&str> = lines.iter().map(|(l, _)| l.as_str()).collect();
        return usage(format!(
            "Debian offers no {flavour} kernel for {arch}; flavours offered for {arch}: {}",
            if flavours.is_empty() {
                "none".into()
            } else {
                flavours.join(", ")
            }
        ));
    }
    let near: Vec<String> = near.iter().map(|v| v.to_string()).collect();
    usage(format!(
        "Debian does not offer kernel {version} ({flavour}, {arch}); nearest offered: {} \
         (all: ptelab kernel list --available --arch {arch})",
        near.join(", ")
    ))
}

/// What Debian offers: the index when it was updated recently, else
/// updated first (see [`available`]).
fn recent_offers(
    cache: &Cache,
    arch: Arch,
    mirror_flag: Option<&str>,
) -> anyhow::Result<(Vec<Offer>, String)> {
    let m = mirror(mirror_flag)?;
    let apt = Apt::new(&cache.apt(), &m, arch);
    if apt.index_age().is_some_and(|a| a < INDEX_MAX_AGE) {
        let _lock = cache.lock()?;
        return Ok((apt.offers()?, m));
    }
    available(cache, arch, mirror_flag)
}

/// What `offers` holds for `arch`, from `mirror`, as a source's [`Offered`].
pub fn offered(offers: &[Offer], arch: Arch, mirror: String) -> Offered {
    Offered {
        arch,
        lines: lines(offers, arch),
        default_line: Flavour::Cloud.to_string(),
        heading: format!(
            "Debian kernels for {arch} at {mirror} ({})",
            debian::SUITES.join(", ")
        ),
        hint: "fetch one: ptelab kernel fetch debian:VERSION[-FLAVOUR] --arch ARCH".into(),
        json: [("suites".to_string(), json!(debian::SUITES))]
            .into_iter()
            .collect(),
        from: mirror,
    }
}

/// Debian's prebuilt kernels: `debian:VERSION[-FLAVOUR][-ARCH]`.
pub struct Debian;

/// The Debian spec a [`KernelSpec`] of this source holds.
fn own(spec: &KernelSpec) -> DebianSpec {
    DebianSpec::parse(spec.text()).expect("a Debian spec parses again")
}

fn spec_of(d: DebianSpec) -> KernelSpec {
    KernelSpec::new(&Debian, d.to_string())
}

impl KernelSource for Debian {
    fn name(&self) -> &'static str {
        "debian"
    }

    fn prefix(&self) -> Option<&'static str> {
        Some("debian:")
    }

    fn accepted(&self) -> &'static str {
        super::spec::ACCEPTED
    }

    fn parse(&self, text: &str) -> anyhow::Result<KernelSpec> {
        Ok(spec_of(DebianSpec::parse(text)?))
    }

    fn check(&self, opts: &Options) -> anyhow::Result<()> {
        if let Some(m) = &opts.mirror {
            mirror(Some(m))?;
        }
        Ok(())
    }

    fn resolve(&self, cache: &Cache, spec: &KernelSpec, opts: &Options) -> anyhow::Result<Kernel> {
        let (entry, fetched) = fetch(cache, &own(spec), opts)?;
        let m = &entry.manifest;
        Ok(Kernel {
            line: format!(
                "{spec}: {} ({}, {} {}, sha256 {}, {})\n",
                entry.image().display(),
                m.arch,
                m.package.name,
                m.package.version,
                m.sha256,
                if fetched { "fetched" } else { "cached" }
            ),
            json: json!({
                "spec": spec.to_string(),
                "source": "debian",
                "fetched": fetched,
                "image": entry.image(),
                "config": entry.config(),
                "modules": entry.modules(),
                "manifest": m,
            }),
            arch: m.arch,
            image: entry.image(),
            source: format!("{spec} {} {}", m.package.name, m.package.version),
            sha256: m.sha256.clone(),
            version: entry.version(),
            spec: spec.clone(),
        })
    }

    fn tags_runs(&self) -> bool {
        true
    }

    // The package booted names the kernel (`linux-image-6.16.12+deb13-cloud-amd64`),
    // whichever spec asked for it; runs stored without one fall back on their spec.
    fn stored(&self, guest: &Guest, arch: Option<Arch>) -> Option<KernelId> {
        let mut words = guest.kernel_source.split_whitespace();
        let spec = DebianSpec::parse(words.next()?).ok()?;
        let (version, flavour, arch) = match words.next().and_then(Offer::from_package) {
            Some(o) => (o.version, o.flavour, o.arch),
            None => (spec.version, spec.flavour, spec.arch(arch).ok()?),
        };
        let on = |arch| DebianSpec {
            version,
            flavour,
            arch,
        };
        Some(KernelId {
            source: self.name(),
            line: flavour.to_string(),
            version: Some(version),
            arch: Some(arch),
            sha256: guest.kernel_sha256.clone(),
            key: on(Some(arch)).to_string(),
            label: on(None).to_string(),
        })
    }

    fn pattern(&self, spec: &KernelSpec, arch: Option<Arch>) -> anyhow::Result<KernelPattern> {
        let d = own(spec);
        let arch = match d
            .arch
            .or((d.flavour == Flavour::K16).then_some(Arch::Arm64))
        {
            Some(_) => Some(d.arch(arch)?),
            None => arch,
        };
        Ok(KernelPattern {
            source: self.name(),
            line: Some(d.flavour.to_string()),
            version: Some(d.version),
            arch,
            sha256: None,
        })
    }

    fn versions(&self) -> Option<&dyn Versions> {
        Some(self)
    }
}

impl Versions for Debian {
    fn title(&self) -> &'static str {
        "Debian"
    }

    fn version(&self, spec: &KernelSpec) -> Version {
        own(spec).version
    }

    fn line(&self, spec: &KernelSpec, flag: Option<Arch>) -> anyhow::Result<(String, Arch)> {
        let d = own(spec);
        Ok((d.flavour.to_string(), d.arch(flag)?))
    }

    fn at(&self, spec: &KernelSpec, v: Version) -> KernelSpec {
        spec_of(DebianSpec {
            version: v,
            ..own(spec)
        })
    }

    fn default_at(&self, v: Version, arch: Option<Arch>) -> KernelSpec {
        spec_of(DebianSpec {
            version: v,
            flavour: Flavour::Cloud,
            arch,
        })
    }

    fn is_default(&self, spec: &KernelSpec) -> bool {
        let d = own(spec);
        d.flavour == Flavour::Cloud && d.arch.is_none()
    }

    fn offered(
        &self,
        cache: &Cache,
        arch: Arch,
        opts: &Options,
        recent: bool,
    ) -> anyhow::Result<Offered> {
        let flag = opts.mirror.as_deref();
        let (offers, mirror) = if recent {
            recent_offers(cache, arch, flag)?
        } else {
            available(cache, arch, flag)?
        };
        Ok(offered(&offers, arch, mirror))
    }

    fn not_offered(&self, offered: &Offered, v: Version, line: &str) -> anyhow::Error {
        not_offered_in(&offered.lines, v, line, offered.arch)
    }
}

/// Download, verify, extract and commit one Debian kernel release.
fn install(
    cache: &Cache,
    apt: &Apt,
    offer: &Offer,
    spec: &DebianSpec,
    interrupted: &AtomicBool,
) -> anyhow::Result<Cached> {
    let stop = || check_interrupt(interrupted);
    let staging = cache.stage(&offer.release)?;
    let image_stanza = apt.show(&offer.package())?;
    let mut parts: Vec<(String, String, Stanza)> = vec![(
        offer.package(),
        field(&image_stanza, "Version")?,
        image_stanza.clone(),
    )];
    for (name, pinned) in image_stanza.release_dependencies(&offer.release) {
        // The archive sometimes keeps a release's image but no longer its
        // linux-base or linux-modules package (seen for 7.0.13 in
        // trixie-backports). A guest needs only the image: those may be
        // missing; linux-binary (the image itself from 6.19 on) may not.
        let s = match apt.show(&name) {
            Ok(s) => s,
            Err(e) if !name.starts_with("linux-binary-") => {
                eprintln!("ptelab: note: {name} is not in the archive's index ({e:#}); a guest boots without it");
                continue;
            }
            Err(e) => return Err(e),
        };
        let v = match pinned {
            Some(v) => v,
            None => field(&s, "Version")?,
        };
        parts.push((name, v, s));
    }
    let bytes: u64 = parts
        .iter()
        .filter_map(|(_, _, s)| s.get("Size")?.parse::<u64>().ok())
        .sum();
    let names: Vec<&str> = parts.iter().map(|(n, _, _)| n.as_str()).collect();
    eprintln!(
        "ptelab: downloading {} ({:.1} MB) from {}",
        names.join(", "),
        bytes as f64 / 1e6,
        apt.mirror
    );
    let debs = staging.dir.join("debs");
    std::fs::create_dir_all(&debs)?;
    let want: Vec<(String, String)> = parts
        .iter()
        .map(|(n, v, _)| (n.clone(), v.clone()))
        .collect();
    if let Err(e) = apt.download(&want, &debs) {
        check_interrupt_after_failure(interrupted)?;
        return Err(e);
    }
    stop()?;

    eprintln!("ptelab: extracting {}", offer.release);
    let root = staging.dir.join("root");
    std::fs::create_dir_all(&root)?;
    let mut image_package = None;
    for (name, version, stanza) in &parts {
        let deb = deb_file(&debs, name)?;
        let st = Command::new("dpkg-deb")
            .arg("-x")
            .arg(&deb)
            .arg(&root)
            .status()
            .context("running dpkg-deb -x")?;
        if !st.success() {
            check_interrupt_after_failure(interrupted)?;
            bail!("dpkg-deb -x {} failed ({st})", deb.display());
        }
        stop()?;
        if image_package.is_none() && find_image(&root, &offer.release).is_some() {
            image_package = Some(Package {
                name: name.clone(),
                version: version.clone(),
                sha256: stanza.get("SHA256").map(str::to_string),
            });
        }
    }
    let (Some(package), Some(found)) = (image_package, find_image(&root, &offer.release)) else {
        bail!(
            "the packages of {} hold no kernel image (looked for boot/vmlinuz-R and usr/lib/modules/R/vmlinuz)",
            offer.release
        );
    };
    let head = read_head(&found)?;
    if image::detect_arch(&head) != Some(offer.arch) {
        bail!(
            "{} from {} is not an {} kernel image",
            found.display(),
            package.name,
            offer.arch
        );
    }
    let entry = staging.entry();
    std::fs::rename(&found, entry.join("vmlinuz"))?;
    let r = &offer.release;
    let mut config = None;
    for c in [
        root.join(format!("boot/config-{r}")),
        root.join(format!("usr/lib/modules/{r}/config")),
        root.join(format!("lib/modules/{r}/config")),
    ] {
        if c.is_file() {
            std::fs::rename(&c, entry.join("config"))?;
            config = Some("config".to_string());
            break;
        }
    }
    let mut modules = None;
    for m in [
        root.join(format!("usr/lib/modules/{r}")),
        root.join(format!("lib/modules/{r}")),
    ] {
        if m.is_dir() {
            std::fs::rename(&m, entry.join("modules"))?;
            modules = Some("modules".to_string());
            break;
        }
    }
    stop()?;
    let image_path = entry.join("vmlinuz");
    let manifest = Manifest {
        source: Debian.name().into(),
        spec: spec.to_string(),
        release: offer.release.clone(),
        version: offer.version.to_string(),
        arch: offer.arch,
        flavour: offer.flavour,
        package,
        packages: parts
            .iter()
            .map(|(n, v, s)| Package {
                name: n.clone(),
                version: v.clone(),
                sha256: s.get("SHA256").map(str::to_string),
            })
            .collect(),
        mirror: apt.mirror.clone(),
        image: "vmlinuz".into(),
        config,
        modules,
        sha256: image::sha256_file(&image_path)?,
        size: std::fs::metadata(&image_path)?.len(),
        fetched_at: now_rfc3339(),
    };
    let cached = staging.commit(cache, &manifest)?;
    eprintln!("ptelab: cached {}", cached.dir.display());
    Ok(cached)
}

/// After a tool failed: was it because of SIGINT/SIGTERM? The signal reaches
/// the tool (same process group) as it reaches ptelab, and the tool may die
/// of it before ptelab's signal thread has set the flag, so wait up to half
/// a second for the flag before calling the failure a failure.
fn check_interrupt_after_failure(interrupted: &AtomicBool) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
    while !interrupted.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    check_interrupt(interrupted)
}

fn check_interrupt(interrupted: &AtomicBool) -> anyhow::Result<()> {
    if interrupted.load(Ordering::SeqCst) {
        bail!("interrupted: nothing was added to the kernel cache");
    }
    Ok(())
}

fn field(s: &Stanza, key: &str) -> anyhow::Result<String> {
    s.get(key)
        .map(str::to_string)
        .with_context(|| format!("apt-cache show: no {key} field"))
}

/// The .deb apt-get downloaded for `name` (`NAME_VERSION_ARCH.deb`).
fn deb_file(dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let prefix = format!("{name}_");
    std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
        })
        .with_context(|| format!("apt-get download left no {name}_*.deb in {}", dir.display()))
}

/// Where a Debian kernel package puts its image: `boot/vmlinuz-R` up to
/// 6.18, `usr/lib/modules/R/vmlinuz` in `linux-binary-R` from 6.19 on.
fn find_image(root: &Path, release: &str) -> Option<PathBuf> {
    [
        root.join(format!("boot/vmlinuz-{release}")),
        root.join(format!("usr/lib/modules/{release}/vmlinuz")),
        root.join(format!("lib/modules/{release}/vmlinuz")),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

fn read_head(path: &Path) -> anyhow::Result<Vec<u8>> {
    let mut head = Vec::new();
    std::fs::File::open(path)?
        .take(image::HEADER_LEN as u64)
        .read_to_end(&mut head)?;
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_flag_is_checked() {
        assert_eq!(
            mirror(Some("http://m.example/debian/")).unwrap(),
            "http://m.example/debian"
        );
        let e = mirror(Some("m.example/debian")).unwrap_err();
        assert!(crate::error::is_usage(&e));
        assert!(e.to_string().contains("accepted:"), "{e}");
    }

    #[test]
    fn not_offered_names_the_nearest_or_the_flavours() {
        let offers: Vec<Offer> = [
            "6.16.12+deb13-cloud-amd64",
            "6.17.8+deb13-cloud-amd64",
            "6.17.13+deb13-cloud-amd64",
            "6.17.13+deb13-amd64",
        ]
        .iter()
        .filter_map(|r| Offer::from_release(r))
        .collect();
        let v = Version::parse("6.17.9").unwrap();
        let e = not_offered(&offers, v, Flavour::Cloud, Arch::X86_64);
        assert!(crate::error::is_usage(&e));
        assert_eq!(
            e.to_string(),
            "Debian does not offer kernel 6.17.9 (cloud, x86_64); nearest offered: 6.16.12, 6.17.8, 6.17.13 \
             (all: ptelab kernel list --available --arch x86_64)"
        );
        let e = not_offered(&offers, v, Flavour::Rt, Arch::X86_64);
        assert_eq!(
            e.to_string(),
            "Debian offers no rt kernel for x86_64; flavours offered for x86_64: cloud, generic"
        );
    }

    #[test]
    fn images_are_found_in_both_package_layouts() {
        let d = tempfile::tempdir().unwrap();
        let r = "7.2.6+deb13-cloud-arm64";
        assert_eq!(find_image(d.path(), r), None);
        let new = d.path().join(format!("usr/lib/modules/{r}"));
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(new.join("vmlinuz"), b"x").unwrap();
        assert_eq!(find_image(d.path(), r), Some(new.join("vmlinuz")));
        let boot = d.path().join("boot");
        std::fs::create_dir_all(&boot).unwrap();
        std::fs::write(boot.join(format!("vmlinuz-{r}")), b"x").unwrap();
        assert_eq!(
            find_image(d.path(), r),
            Some(boot.join(format!("vmlinuz-{r}")))
        );
    }
}
