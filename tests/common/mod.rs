//! Shared helpers for the integration tests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// The throwaway PostgreSQL server of the store's own tests.
#[path = "../../crates/store/src/testserver.rs"]
pub mod testserver;

/// The throwaway single-node Slurm of `fleet::slurm`'s own tests.
#[path = "../../crates/fleet/src/slurm/testcluster.rs"]
pub mod testcluster;

/// A scratch working directory for the binary under test, so that commands
/// run without `--db` write their default `./ptelab.db` there, not into the
/// source tree. It lives in Cargo's per-target scratch space, emptied when
/// the test binary first asks for it: a static is never dropped, so a
/// `TempDir` here would leave one directory in /tmp per test run.
pub fn scratch_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ptelab-tests-cwd");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
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

/// Assert that a finished command succeeded, with its stderr as the message.
pub fn assert_success(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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

/// Tests in this binary that compare knobs before and after hold this shared;
/// tests that SIGKILL a ptelab hold it exclusively, because the killed
/// process's knobs stay changed (with the flock released) until the next
/// ptelab repairs them from the recovery file.
static KNOB_TESTS: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Hold while comparing THP knobs before and after something.
pub fn knob_watch() -> std::sync::RwLockReadGuard<'static, ()> {
    KNOB_TESTS.read().unwrap_or_else(|e| e.into_inner())
}

/// Hold while a killed ptelab may leave knobs changed until repaired.
pub fn knob_kill() -> std::sync::RwLockWriteGuard<'static, ()> {
    KNOB_TESTS.write().unwrap_or_else(|e| e.into_inner())
}

/// The lock every ptelab takes while it changes THP knobs.
const KNOB_LOCK: &str = "/run/lock/ptelab.lock";

/// Every THP/mTHP knob file (top level, khugepaged, per size) and its
/// content, read while holding the lock ptelab takes to change knobs, so a
/// concurrent ptelab (another test) is never caught mid-run.
pub fn knob_snapshot() -> BTreeMap<String, String> {
    use std::os::unix::io::AsRawFd;
    fn walk(dir: &Path, m: &mut BTreeMap<String, String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if name != "stats" {
                    walk(&p, m);
                }
            } else if !matches!(name.as_str(), "pages_collapsed" | "full_scans") {
                if let Ok(v) = std::fs::read_to_string(&p) {
                    m.insert(p.display().to_string(), v.trim().to_owned());
                }
            }
        }
    }
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(KNOB_LOCK);
    if let Ok(f) = &lock {
        // SAFETY: flock on a valid descriptor; released when `f` closes.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    }
    let mut m = BTreeMap::new();
    walk(Path::new("/sys/kernel/mm/transparent_hugepage"), &mut m);
    drop(lock);
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

/// A measured mprotect-toggle cell as `runs --import` reads it: every page
/// present in folios of `folio_bytes`, the layout matching, `samples` around
/// `median` (a ±0.5% CI, 2000 calls), half a flush per call.
pub fn kernel_cell(
    size_kib: u64,
    folio: &str,
    folio_bytes: u64,
    median: f64,
    samples: Vec<f64>,
) -> Value {
    let pages = size_kib / 4;
    json!({
        "backend": "kernel",
        "cell": {
            "workload": "mprotect-toggle",
            "size_bytes": size_kib * 1024,
            "folio": folio,
            "regions": 1,
            "neighbor": false,
            "phase": null,
            "layout": {
                "histogram": { (folio_bytes.to_string()): size_kib * 1024 / folio_bytes },
                "pages_present": pages,
                "pages_total": pages,
                "pmd_mapped_bytes": 0,
                "misaligned_folios": 0,
                "matches": true,
                "mismatch": null,
            },
            "layout_after": null,
            "verified": true,
            "vmas_before": 1,
            "vmas_after": 1,
            "ns_per_call": {
                "median": median,
                "ci_low": median * 0.995,
                "ci_high": median * 1.005,
                "min": median * 0.99,
                "mean": median,
                "samples": samples,
            },
            "ns_per_page": median / pages as f64,
            "calls": 2000,
            "calls_per_sample": 100,
            "pinned_cpu": 1,
            "tlb_flushes": {
                "per_call": 0.5,
                "events": 32,
                "calls": 64,
                "breakdown": {},
                "unavailable": null,
            },
            "elapsed_s": 0.25,
            "warnings": [],
        }
    })
}

/// Merge `patch` into `doc`: objects key by key, any other value replaces.
pub fn merge(doc: &mut Value, patch: Value) {
    match (doc, patch) {
        (Value::Object(d), Value::Object(p)) => {
            for (k, v) in p {
                merge(d.entry(k).or_insert(Value::Null), v);
            }
        }
        (d, p) => *d = p,
    }
}

/// Write `docs` (run documents) next to the database and `runs --import`
/// them all in one call.
pub fn import_runs(db: &TempDb, docs: &[Value]) {
    let mut args = vec!["runs".to_string(), "--db".into(), db.path().into()];
    for (i, doc) in docs.iter().enumerate() {
        let f = db.dir().join(format!("run{i}.json"));
        std::fs::write(&f, serde_json::to_string_pretty(doc).unwrap()).unwrap();
        args.push("--import".into());
        args.push(f.display().to_string());
    }
    ptelab().args(&args).assert().success();
}

/// The image of Debian's `version` for x86_64 in the kernel cache, with
/// QEMU here to boot it; else None, having said why (`skip`).
pub fn cached_x86_image(version: &str) -> Option<String> {
    cached_image(version, "x86_64")
}

/// The image of Debian's `version` for `arch` (x86_64, arm64) in the
/// kernel cache, with QEMU here to boot it; else None, having said why.
pub fn cached_image(version: &str, arch: &str) -> Option<String> {
    let (qemu, package) = match arch {
        "arm64" => ("qemu-system-aarch64", "qemu-system-arm"),
        _ => ("qemu-system-x86_64", "qemu-system-x86"),
    };
    if std::process::Command::new(qemu)
        .arg("--version")
        .output()
        .is_err()
    {
        skip(&format!(
            "{qemu} is not installed (apt-get install {package})"
        ));
        return None;
    }
    let out = ptelab()
        .args(["kernel", "list", "--json"])
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let image = list.as_array().and_then(|l| {
        l.iter()
            .find(|k| k["manifest"]["version"] == version && k["manifest"]["arch"] == arch)
            .and_then(|k| k["image"].as_str().map(String::from))
    });
    if image.is_none() {
        skip(&format!(
            "Debian's {version} {arch} kernel is not cached (ptelab kernel fetch debian:{version} --arch {arch})"
        ));
    }
    image
}

/// A shell script `name` in `dir` running `body`, executable: a stand-in
/// for a program (a QEMU that refuses or fails) first on a test's PATH.
pub fn script(dir: &std::path::Path, name: &str, body: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}
