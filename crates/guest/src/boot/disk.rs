//! A guest's disk: a sparse raw image formatted ext4 on this machine and
//! attached to QEMU's NVMe controller, for guest commands that need files on
//! a real filesystem (the reclaim workload: page-cache folios that can be
//! dropped, or a swapfile). The guest's root is the initramfs (rootfs,
//! RAM-backed), whose pages cannot be reclaimed without swap.
//!
//! Why NVMe and ext4: Debian's cloud kernels build both in (virtio-blk and
//! xfs are modules, and the guest has no modules), and ext4 gives regular
//! files large page-cache folios from Linux 6.16 on.
//!
//! The image is an unnamed temporary file (`O_TMPFILE`): nothing is left on
//! disk after success, an error, SIGINT or even SIGKILL. `mkfs.ext4` and QEMU
//! open it by `/proc/PID/fd/N` while ptelab holds it open.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;

use crate::error::bail_usage;

/// The device the guest sees (the first namespace of the only NVMe controller).
pub const GUEST_DEVICE: &str = "/dev/nvme0n1";
/// Where the guest's init mounts the disk.
pub const GUEST_MOUNT: &str = "/mnt/ptelab";
/// The disk's filesystem.
pub const FSTYPE: &str = "ext4";
/// The environment variable that points the guest command at the disk: the
/// reclaim workload's directory for its files and swapfiles.
pub const GUEST_ENV: &str = "PTELAB_RECLAIM_DIR";
/// How the reclaim workload refills its page cache (`write` or `reread`).
pub const REFILL_ENV: &str = "PTELAB_RECLAIM_REFILL";

/// Fixed room beside the data: ext4's metadata and 4 MiB journal, and small
/// data sizes.
const SLACK: u64 = 64 << 20;

/// A disk a guest command needs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DiskSpec {
    /// The image's size (sparse: only what is written takes room here).
    pub bytes: u64,
    /// Where the unnamed image file is made.
    pub dir: PathBuf,
}

impl DiskSpec {
    /// A disk for `data` bytes of files at once (the reclaim workload's file,
    /// size x regions, or its swapfile): twice the data, so that blocks freed
    /// when the file is truncated and written again need not be reused at
    /// once, plus 64 MiB for the filesystem itself; whole MiB.
    pub fn for_data(data: u64, dir: PathBuf) -> DiskSpec {
        DiskSpec {
            bytes: (data.saturating_mul(2) + SLACK).next_multiple_of(1 << 20),
            dir,
        }
    }
}

/// `mkfs.ext4` on `PATH` or in the sbin directories (not on a normal user's
/// `PATH`); missing is a usage error naming the package.
pub fn find_mkfs() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    find_mkfs_in(&path)
}

fn find_mkfs_in(path: &std::ffi::OsStr) -> anyhow::Result<PathBuf> {
    let sbin = ["/usr/sbin", "/sbin"].map(PathBuf::from);
    for dir in std::env::split_paths(path).chain(sbin) {
        let p = dir.join("mkfs.ext4");
        if let Ok(m) = p.metadata() {
            use std::os::unix::fs::PermissionsExt;
            if m.is_file() && m.permissions().mode() & 0o111 != 0 {
                return Ok(p);
            }
        }
    }
    bail_usage!(
        "mkfs.ext4 not found: this guest command needs a disk formatted ext4 on this machine; \
         install Debian's e2fsprogs (apt-get install e2fsprogs)"
    )
}

/// A formatted image, open; gone when dropped.
#[derive(Debug)]
pub struct DiskImage {
    file: File,
    pub bytes: u64,
}

impl DiskImage {
    /// Make the unnamed sparse image in `spec.dir` and format it ext4 with
    /// `mkfs`: 4 KiB blocks (mke2fs would pick 1 KiB for a small
    /// filesystem), no reserved blocks, few inodes, a 4 MiB journal, and
    /// inode tables and journal written now, so that the guest kernel starts
    /// no `ext4lazyinit` thread to run beside a measurement.
    pub fn create(spec: &DiskSpec, mkfs: &Path) -> anyhow::Result<DiskImage> {
        std::fs::create_dir_all(&spec.dir)
            .with_context(|| format!("creating {}", spec.dir.display()))?;
        let free = free_bytes(&spec.dir)?;
        if free < spec.bytes {
            anyhow::bail!(
                "the guest's disk image may take up to {} MiB in {}, which has {} MiB free",
                spec.bytes >> 20,
                spec.dir.display(),
                free >> 20
            );
        }
        let file = tempfile::tempfile_in(&spec.dir)
            .with_context(|| format!("a temporary disk image in {}", spec.dir.display()))?;
        file.set_len(spec.bytes)
            .context("sizing the guest's disk image")?;
        let img = DiskImage {
            file,
            bytes: spec.bytes,
        };
        let out = Command::new(mkfs)
            .args([
                "-q", "-F", "-b", "4096", "-m", "0", "-N", "256", "-J", "size=4",
            ])
            .args(["-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard"])
            .args(["-L", "ptelab"])
            .arg(img.path())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", mkfs.display()))?;
        if !out.status.success() {
            anyhow::bail!(
                "{} failed ({}) on the guest's disk image: {}",
                mkfs.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(img)
    }

    /// A path other processes open the image by while it is held open here.
    pub fn path(&self) -> PathBuf {
        held_path(&self.file)
    }
}

/// The path other processes (QEMU, mkfs) open an unnamed file by while this
/// process holds it open: the file has no name to leave behind.
pub fn held_path(file: &File) -> PathBuf {
    PathBuf::from(format!(
        "/proc/{}/fd/{}",
        std::process::id(),
        file.as_raw_fd()
    ))
}

/// Bytes an unprivileged user may still write in `dir`'s filesystem.
fn free_bytes(dir: &Path) -> anyhow::Result<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .context("a directory path with a NUL byte")?;
    // SAFETY: statvfs fills the zeroed struct; `c` is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", dir.display()));
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// QEMU's arguments attaching `image` as the only NVMe namespace. Writes are
/// not flushed to this machine's disk (`cache=unsafe`): the image is thrown
/// away after the run.
pub fn qemu_args(image: &Path) -> Vec<OsString> {
    // QEMU's option syntax doubles a comma inside a value.
    let file = image.to_string_lossy().replace(',', ",,");
    vec![
        "-drive".into(),
        format!("file={file},format=raw,if=none,id=ptelab-disk,cache=unsafe").into(),
        "-device".into(),
        "nvme,drive=ptelab-disk,serial=ptelab".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizing() {
        let d = DiskSpec::for_data(64 << 20, "/x".into());
        assert_eq!(d.bytes, 192 << 20);
        assert_eq!(DiskSpec::for_data(0, "/x".into()).bytes, 64 << 20);
        assert_eq!(DiskSpec::for_data(1, "/x".into()).bytes, 65 << 20);
    }

    #[test]
    fn qemu_attaches_one_nvme_namespace() {
        let a: Vec<String> = qemu_args(Path::new("/proc/1/fd/7"))
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            a,
            [
                "-drive",
                "file=/proc/1/fd/7,format=raw,if=none,id=ptelab-disk,cache=unsafe",
                "-device",
                "nvme,drive=ptelab-disk,serial=ptelab"
            ]
        );
        let a = qemu_args(Path::new("/a,b"));
        assert!(a[1].to_string_lossy().starts_with("file=/a,,b,format"));
    }

    #[test]
    fn missing_mkfs_names_the_package() {
        // The sbin directories are searched too: only check the message
        // where this machine has none.
        let empty = tempfile::tempdir().unwrap();
        match find_mkfs_in(empty.path().as_os_str()) {
            Ok(p) => assert!(
                p.starts_with("/usr/sbin") || p.starts_with("/sbin"),
                "{p:?}"
            ),
            Err(e) => {
                assert!(crate::error::is_usage(&e));
                assert!(e.to_string().contains("apt-get install e2fsprogs"), "{e}");
            }
        }
    }

    /// Files of `dir` (an image must leave none).
    fn entries(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    }

    #[test]
    fn image_is_formatted_sparse_and_gone_when_dropped() {
        let Ok(mkfs) = find_mkfs() else {
            eprintln!("skipped: mkfs.ext4 not installed");
            if std::env::var_os("CI").is_some() {
                panic!("mkfs.ext4 missing on CI (.ci/run installs e2fsprogs)");
            }
            return;
        };
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let spec = DiskSpec::for_data(16 << 20, dir.path().join("disks"));
        let img = DiskImage::create(&spec, &mkfs).unwrap();
        let path = img.path();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), 96 << 20);
        use std::os::unix::fs::MetadataExt;
        assert!(
            meta.blocks() * 512 < 16 << 20,
            "sparse: {} bytes allocated",
            meta.blocks() * 512
        );
        // The ext4 superblock: magic 0xEF53 at byte 1024 + 56.
        let mut sb = [0u8; 2];
        use std::os::unix::fs::FileExt;
        img.file.read_exact_at(&mut sb, 1024 + 56).unwrap();
        assert_eq!(u16::from_le_bytes(sb), 0xEF53);
        // Unnamed: nothing in the directory even while it exists.
        assert!(entries(&spec.dir).is_empty(), "{:?}", entries(&spec.dir));
        let target = std::fs::read_link(&path).unwrap();
        assert!(target.to_string_lossy().contains("(deleted)"), "{target:?}");
        drop(img);
        assert!(
            std::fs::read_link(&path).map_or(true, |t| t != target),
            "the image is still open after drop"
        );
        assert!(entries(&spec.dir).is_empty());
    }

    #[test]
    fn an_image_larger_than_the_free_space_is_refused() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let spec = DiskSpec {
            bytes: u64::MAX >> 1,
            dir: dir.path().to_path_buf(),
        };
        let e = DiskImage::create(&spec, Path::new("/bin/true")).unwrap_err();
        assert!(e.to_string().contains("MiB free"), "{e:#}");
        assert!(entries(dir.path()).is_empty());
    }

    #[test]
    fn mkfs_failure_leaves_nothing() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let spec = DiskSpec::for_data(0, dir.path().to_path_buf());
        let e = DiskImage::create(&spec, Path::new("/bin/false")).unwrap_err();
        assert!(e.to_string().contains("/bin/false failed"), "{e:#}");
        assert!(entries(dir.path()).is_empty());
    }
}
