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

#[cfg(test)]
mod tests {
    #[test]
    fn leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let f = super::unlinked_temp_file(dir.path(), "test").unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        drop(f);
    }
}
