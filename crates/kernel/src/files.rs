//! Scratch files that cannot outlive ptelab.

use std::fs::File;
use std::path::Path;

use anyhow::Context;

/// An unnamed temporary file in `dir` (O_TMPFILE), or, where the filesystem
/// lacks O_TMPFILE, a named one (`ptelab-<tag>-<pid>`) unlinked at once: either
/// way nothing is left behind, even after SIGKILL.
pub fn unlinked_temp_file(dir: &Path, tag: &str) -> anyhow::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .mode(0o600)
        .open(dir);
    if let Ok(f) = tmp {
        return Ok(f);
    }
    let path = dir.join(format!("ptelab-{tag}-{}", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_CLOEXEC)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    std::fs::remove_file(&path).with_context(|| format!("unlinking {}", path.display()))?;
    Ok(f)
}

/// Name of a filesystem magic from statfs(2).
pub fn fs_name(magic: i64) -> &'static str {
    match magic {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x8584_58f6 => "ramfs",
        0xF2F5_2010 => "f2fs",
        0xCA45_1A4E => "bcachefs",
        0x6969 => "nfs",
        0x794C_7630 => "overlayfs",
        _ => "unknown-fs",
    }
}

/// The filesystem magic (`f_type`) of the filesystem holding `dir`.
pub fn statfs_magic(dir: &Path) -> anyhow::Result<i64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())?;
    // SAFETY: a zeroed statfs is a valid out-parameter; c is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statfs {}", dir.display()));
    }
    #[allow(clippy::unnecessary_cast)]
    Ok(st.f_type as i64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let f = super::unlinked_temp_file(dir.path(), "test").unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        drop(f);
    }

    #[test]
    fn fs_names() {
        assert_eq!(super::fs_name(0xEF53), "ext4");
        assert_eq!(super::fs_name(0x0102_1994), "tmpfs");
        assert_eq!(super::fs_name(1), "unknown-fs");
    }
}
