//! Kernel images: which arch an image is for (from its boot header), and its
//! sha256. An image of the user's own build is checked here before use:
//! the source of kernel specs that are paths ([`ImagePath`]).

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::cache::Cache;
use super::{Kernel, KernelId, KernelPattern, KernelSource, KernelSpec, Options};
use crate::error::bail_usage;
use crate::record::Guest;
use crate::workload::Arch;

/// x86 boot protocol: "HdrS" at 0x202 (Documentation/arch/x86/boot.rst).
const X86_MAGIC: (usize, &[u8]) = (0x202, b"HdrS");
/// arm64 Image header: "ARM\x64" at 0x38 (Documentation/arch/arm64/booting.rst).
const ARM64_MAGIC: (usize, &[u8]) = (0x38, b"ARM\x64");
/// Bytes of an image that hold both headers.
pub const HEADER_LEN: usize = 0x206;

/// What an image is accepted as, for messages about a file that is not one.
pub const ACCEPTED: &str = "accepted: an x86 bzImage (arch/x86/boot/bzImage) or an \
uncompressed arm64 Image (arch/arm64/boot/Image)";

/// The arch of a kernel image from its first bytes; None when it is neither
/// an x86 bzImage nor an arm64 Image.
pub fn detect_arch(head: &[u8]) -> Option<Arch> {
    let at = |(off, magic): (usize, &[u8])| head.get(off..off + magic.len()) == Some(magic);
    if at(X86_MAGIC) {
        Some(Arch::X86_64)
    } else if at(ARM64_MAGIC) {
        Some(Arch::Arm64)
    } else {
        None
    }
}

/// The arch of the image at `path` (a usage error when it is not a kernel).
pub fn arch_of(path: &Path) -> anyhow::Result<Arch> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => bail_usage!(
            "cannot read kernel image {}: {e}; {ACCEPTED}",
            path.display()
        ),
    };
    let mut head = Vec::with_capacity(HEADER_LEN);
    f.by_ref()
        .take(HEADER_LEN as u64)
        .read_to_end(&mut head)
        .with_context(|| format!("reading {}", path.display()))?;
    match detect_arch(&head) {
        Some(a) => Ok(a),
        None => bail_usage!(
            "{} is not a kernel image (no x86 \"HdrS\" or arm64 \"ARM\\x64\" boot header); {ACCEPTED}",
            path.display()
        ),
    }
}

/// Hex sha256 of a file.
pub fn sha256_file(path: &Path) -> anyhow::Result<String> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).with_context(|| format!("reading {}", path.display()))?;
    Ok(format!("{:x}", h.finalize()))
}

/// An image of the user's own build, checked.
#[derive(Debug, Clone, Serialize)]
pub struct OwnImage {
    pub image: PathBuf,
    pub arch: Arch,
    pub sha256: String,
    /// The build's `.config`, when one is beside the image or at the root of
    /// its build tree.
    pub config: Option<PathBuf>,
}

/// Check an image of the user's own build: a kernel, for `want` when given.
pub fn inspect(path: &Path, want: Option<Arch>) -> anyhow::Result<OwnImage> {
    if !path.is_file() {
        bail_usage!(
            "kernel image {} does not exist or is not a file; {ACCEPTED}, or a spec such as debian:6.17.13",
            path.display()
        );
    }
    let arch = arch_of(path)?;
    if let Some(w) = want {
        if w != arch {
            bail_usage!(
                "{} is an {arch} kernel image, not {w}: pass --arch {arch} or an image built for {w}",
                path.display()
            );
        }
    }
    let image = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    Ok(OwnImage {
        sha256: sha256_file(path)?,
        config: config_beside(&image),
        image,
        arch,
    })
}

/// `.config` beside the image, or at the root of a kernel build tree whose
/// image sits in `arch/ARCH/boot/`.
fn config_beside(image: &Path) -> Option<PathBuf> {
    let dir = image.parent()?;
    let mut candidates = vec![dir.join(".config")];
    if dir.file_name()? == "boot" {
        let arch_dir = dir.parent()?;
        if arch_dir.parent()?.file_name()? == "arch" {
            candidates.push(arch_dir.parent()?.parent()?.join(".config"));
        }
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// Images of the user's own builds: the spec is the image's path.
pub struct ImagePath;

impl KernelSource for ImagePath {
    fn name(&self) -> &'static str {
        "image"
    }

    fn prefix(&self) -> Option<&'static str> {
        None
    }

    fn accepted(&self) -> &'static str {
        "the path of a kernel image (arch/x86/boot/bzImage, arch/arm64/boot/Image)"
    }

    fn parse(&self, text: &str) -> anyhow::Result<KernelSpec> {
        let path = PathBuf::from(text);
        Ok(KernelSpec::new(&ImagePath, path.display().to_string()))
    }

    fn resolve(&self, _cache: &Cache, spec: &KernelSpec, opts: &Options) -> anyhow::Result<Kernel> {
        let img = inspect(Path::new(spec.text()), opts.arch)?;
        let config = img
            .config
            .as_ref()
            .map_or("none".to_string(), |c| c.display().to_string());
        Ok(Kernel {
            line: format!(
                "{spec}: {} ({}, own build, sha256 {}, config {config})\n",
                img.image.display(),
                img.arch,
                img.sha256,
            ),
            json: json!({
                "spec": spec.to_string(),
                "source": "image",
                "image": img.image,
                "arch": img.arch,
                "sha256": img.sha256,
                "config": img.config,
            }),
            spec: spec.clone(),
            arch: img.arch,
            source: img.image.display().to_string(),
            image: img.image,
            sha256: img.sha256,
            version: None,
        })
    }

    // The fallback source: any guest run no other source recognises was
    // booted from an image, which is its sha256.
    fn stored(&self, guest: &Guest, arch: Option<Arch>) -> Option<KernelId> {
        let path = guest.kernel_source.split_whitespace().next().unwrap_or("");
        Some(KernelId {
            source: self.name(),
            line: String::new(),
            version: None,
            arch,
            sha256: guest.kernel_sha256.clone(),
            key: format!("sha256:{}", guest.kernel_sha256),
            label: path.to_string(),
        })
    }

    fn pattern(&self, spec: &KernelSpec, arch: Option<Arch>) -> anyhow::Result<KernelPattern> {
        let path = Path::new(spec.text());
        if !path.is_file() {
            bail_usage!(
                "no kernel image at {}: name an image by its path, or a kernel by its spec ({})",
                path.display(),
                super::accepted()
            );
        }
        Ok(KernelPattern {
            source: self.name(),
            line: None,
            version: None,
            arch,
            sha256: Some(sha256_file(path)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_magic(off: usize, magic: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 0x400];
        b[off..off + magic.len()].copy_from_slice(magic);
        b
    }

    #[test]
    fn headers_name_the_arch() {
        assert_eq!(detect_arch(&with_magic(0x202, b"HdrS")), Some(Arch::X86_64));
        assert_eq!(
            detect_arch(&with_magic(0x38, b"ARM\x64")),
            Some(Arch::Arm64)
        );
        // An arm64 Image as Debian ships it: a PE/EFI stub "MZ" first.
        let mut efi = with_magic(0x38, b"ARM\x64");
        efi[..2].copy_from_slice(b"MZ");
        assert_eq!(detect_arch(&efi), Some(Arch::Arm64));
        assert_eq!(detect_arch(&with_magic(0x200, b"HdrS")), None);
        assert_eq!(detect_arch(&with_magic(0x38, b"ARM\x65")), None);
        assert_eq!(detect_arch(b"\x7fELF"), None);
        assert_eq!(detect_arch(&[]), None);
        // Truncated right inside the x86 magic.
        assert_eq!(detect_arch(&with_magic(0x202, b"HdrS")[..0x204]), None);
    }

    #[test]
    fn own_images_are_checked_and_their_config_found() {
        let tree = tempfile::tempdir().unwrap();
        let boot = tree.path().join("arch/x86/boot");
        std::fs::create_dir_all(&boot).unwrap();
        let img = boot.join("bzImage");
        std::fs::write(&img, with_magic(0x202, b"HdrS")).unwrap();
        std::fs::write(tree.path().join(".config"), "CONFIG_X=y\n").unwrap();
        let got = inspect(&img, None).unwrap();
        assert_eq!(got.arch, Arch::X86_64);
        assert_eq!(got.config, Some(tree.path().join(".config")));
        assert_eq!(got.sha256, sha256_file(&img).unwrap());
        assert_eq!(got.sha256.len(), 64);

        let wrong = inspect(&img, Some(Arch::Arm64)).unwrap_err();
        assert!(crate::error::is_usage(&wrong));
        assert!(
            wrong
                .to_string()
                .contains("is an x86_64 kernel image, not arm64"),
            "{wrong}"
        );

        let text = tree.path().join("notes.txt");
        std::fs::write(&text, "hello").unwrap();
        let err = inspect(&text, None).unwrap_err();
        assert!(crate::error::is_usage(&err));
        assert!(err.to_string().contains("is not a kernel image"), "{err}");
        assert!(crate::error::is_usage(
            &inspect(&tree.path().join("nope"), None).unwrap_err()
        ));
    }

    #[test]
    fn sha256_of_a_known_input() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("abc");
        std::fs::write(&p, "abc").unwrap();
        assert_eq!(
            sha256_file(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
