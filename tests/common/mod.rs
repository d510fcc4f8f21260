//! Shared helpers for the integration tests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

/// A scratch working directory for the binary under test, so that commands
/// run without `--db` write their default `./ptelab.db` there, not into the
/// source tree.
pub fn scratch_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// The ptelab binary under test, started in [`scratch_dir`].
pub fn ptelab() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("ptelab").unwrap();
    cmd.current_dir(scratch_dir());
    cmd
}

/// The same as a `std::process::Command`, for tests that signal the child.
pub fn ptelab_std() -> std::process::Command {
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("ptelab"));
    cmd.current_dir(scratch_dir());
    cmd
}

/// Effective user is root.
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Say why a test does not run here. On CI (root, mTHP kernel) none may skip.
pub fn skip(why: &str) {
    eprintln!("SKIPPED: {why}");
    if std::env::var_os("CI").is_some() && is_root() {
        panic!("test skipped on CI as root: {why}");
    }
}

/// Every THP/mTHP knob file and its content, for before/after comparisons.
pub fn knob_snapshot() -> BTreeMap<String, String> {
    let root = Path::new("/sys/kernel/mm/transparent_hugepage");
    let mut m = BTreeMap::new();
    let mut files = vec![
        root.join("enabled"),
        root.join("defrag"),
        root.join("shmem_enabled"),
    ];
    if let Ok(rd) = std::fs::read_dir(root) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with("hugepages-") {
                files.push(e.path().join("enabled"));
            }
        }
    }
    for f in files {
        if let Ok(v) = std::fs::read_to_string(&f) {
            m.insert(f.display().to_string(), v.trim().to_string());
        }
    }
    m
}

/// A database path in a temporary directory, removed on drop.
pub struct TempDb {
    dir: tempfile::TempDir,
    path: String,
}

impl TempDb {
    pub fn new() -> TempDb {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ptelab.db").display().to_string();
        TempDb { dir, path }
    }
    pub fn path(&self) -> &str {
        &self.path
    }
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
