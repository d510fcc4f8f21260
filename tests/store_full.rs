//! A results database whose file system fills up while a command measures
//! (issue 30): the command prints every figure it measured, then exits 2
//! naming the database and the remedy; the run reads "failed", never
//! "interrupted". The database is on a small tmpfs (mounted for the test,
//! unmounted after), filled to its last page once the first cell is stored.
//! Needs root (mount, and the commands' layout control).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{is_root, ptelab, ptelab_std, skip};

/// A tmpfs on a new temporary directory; unmounted on drop.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    /// None (having said why) where it cannot be mounted.
    fn mount(size: &str) -> Option<SmallFs> {
        if !is_root() {
            skip("mounting a small file system needs root");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "ptelab-test"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            skip("mount -t tmpfs failed");
            return None;
        }
        Some(SmallFs { dir })
    }

    fn db(&self) -> String {
        self.dir.path().join("ptelab.db").display().to_string()
    }

    /// Fill it to the last page; the filler's path, to remove to make room.
    fn fill(&self) -> PathBuf {
        let path = self.dir.path().join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let page = [0u8; 4096];
        while f.write(&page).is_ok_and(|n| n > 0) {}
        path
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// `sql`'s count on the database at `db`, 0 before it has the table. Never
/// creates the file: ptelab must find it new.
fn count(db: &str, sql: &str) -> i64 {
    rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
        .and_then(|c| c.query_row(sql, [], |r| r.get(0)))
        .unwrap_or(0)
}

/// Start `args` on `fs`'s database, fill the file system once `ready`
/// holds of it, and wait for the command: its output.
fn fill_under(fs: &SmallFs, args: &[&str], ready: impl Fn(&str) -> bool) -> std::process::Output {
    let db = fs.db();
    let mut child = ptelab_std()
        .args(args)
        .args(["--db", &db])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !ready(&db) {
        assert!(t.elapsed() < Duration::from_secs(120), "never ready");
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "{args:?} ended before the disk was filled: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let filler = fs.fill();
    let out = child.wait_with_output().unwrap();
    // Room again, to read what was stored.
    std::fs::remove_file(filler).unwrap();
    out
}

/// The database is full: exit 2, with its path and the remedy.
fn refused_as_full(out: &std::process::Output, db: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for says in [db, "is full", "free space there", "--db"] {
        assert!(err.contains(says), "{says:?} not in {err}");
    }
}

/// Every run's status and cells stored, oldest first.
fn runs(db: &str) -> Vec<(String, u64)> {
    let out = ptelab()
        .args(["runs", "--json", "--db", db])
        .output()
        .unwrap();
    crate::common::assert_success(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["status"].as_str().unwrap().to_string(),
                r["cells"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The rows of the seed table in `text` (`size_kib | nsec_per_call`).
fn table_rows(text: &str) -> usize {
    text.lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()) && l.contains('|'))
        .count()
}

/// See: #30. A sweep whose disk fills up prints every figure measured, the
/// refused cell's included, exits 2 with the path and remedy, and its run
/// reads failed, holding the cells stored before.
#[test]
fn a_sweep_on_a_full_disk_prints_its_figures_and_reads_failed() {
    let Some(fs) = SmallFs::mount("8m") else {
        return;
    };
    let out = fill_under(
        &fs,
        &[
            "sweep",
            "mprotect-toggle",
            "--sizes",
            "16K,64K,256K",
            "--folios",
            "4K",
            "--time",
            "1s",
            "--blocks",
            "1",
        ],
        |db| count(db, "SELECT COUNT(*) FROM cell") >= 1,
    );
    refused_as_full(&out, &fs.db());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        table_rows(&text),
        2,
        "the stored and the refused cell:\n{text}"
    );
    assert!(text.contains("not all stored"), "{text}");
    assert_eq!(runs(&fs.db()), [("failed".to_string(), 1)]);
}

/// See: #30. calibrate on a disk that fills up after its first run (4 runs
/// of 6 cells: the fewest that give it enough A/A differences) prints
/// the figures of every run measured, exits 2 with the path and remedy,
/// and no run reads interrupted.
#[test]
fn calibrate_on_a_full_disk_prints_its_runs() {
    let Some(fs) = SmallFs::mount("8m") else {
        return;
    };
    let _knobs = crate::common::knob_watch();
    let out = fill_under(
        &fs,
        &[
            "calibrate",
            "--runs",
            "4",
            "--sizes",
            "64K,400K",
            "--folios",
            "4K,64K,16K",
            "--time",
            "0.1s",
            "--blocks",
            "1",
            "--span",
            "6s",
        ],
        // The first run complete.
        |db| count(db, "SELECT COUNT(*) FROM run WHERE status = 'complete'") >= 1,
    );
    refused_as_full(&out, &fs.db());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("stopped in run 2 of 4"), "{text}");
    assert!(text.contains("calibration run 1 of 4 (run 1)"), "{text}");
    assert!(table_rows(&text) >= 6, "{text}");
    let runs = runs(&fs.db());
    assert_eq!(runs[0], ("complete".to_string(), 6));
    assert!(runs.iter().all(|(s, _)| s != "interrupted"), "{runs:?}");
}

/// See: #30. reproduce on a disk that fills up after its first cell judges
/// and prints what it measured, the verdicts last, writes no report, and
/// exits 2 with the path and remedy.
#[test]
fn reproduce_on_a_full_disk_prints_its_verdicts() {
    let Some(fs) = SmallFs::mount("16m") else {
        return;
    };
    let report = fs.dir.path().join("r.html");
    let out = fill_under(
        &fs,
        &[
            "reproduce",
            "001",
            "--quick",
            "-o",
            report.to_str().unwrap(),
        ],
        |db| count(db, "SELECT COUNT(*) FROM cell") >= 1,
    );
    refused_as_full(&out, &fs.db());
    let text = String::from_utf8_lossy(&out.stdout);
    for says in [
        "measured here:",
        "measuring stopped when the results database failed",
        "not all stored: run 1",
        "verdicts:",
        "no report written",
    ] {
        assert!(text.contains(says), "{says:?} not in:\n{text}");
    }
    assert!(!Path::new(&report).exists());
    assert_eq!(runs(&fs.db())[0].0, "failed");
}
