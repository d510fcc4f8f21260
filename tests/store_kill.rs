//! A sweep killed with SIGKILL keeps every finished cell: each cell is its own
//! transaction, the run reads as interrupted once its process is gone, and
//! the next ptelab repairs the THP knobs from the recovery file.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{is_root, knob_snapshot, ptelab, ptelab_std, skip, TempDb};

fn stored_cells(db: &TempDb) -> (u64, String) {
    let out = ptelab()
        .args(["runs", "--json", "--db", db.path()])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let run = &v["runs"][0];
    (
        run["cells"].as_u64().unwrap_or(0),
        run["status"].as_str().unwrap_or("").to_string(),
    )
}

#[test]
fn sigkill_mid_sweep_keeps_finished_cells() {
    if !is_root() {
        return skip("needs root to change THP knobs");
    }
    let _knobs = crate::common::knob_kill();
    let before = knob_snapshot();
    let db = TempDb::new();
    let mut child = ptelab_std()
        .args([
            "sweep",
            "mprotect-toggle",
            "--sizes",
            "4K,40K,400K,4M,40M",
            "--folios",
            "64K,4K",
        ])
        .args(["--time", "500ms", "--blocks", "1", "--db", db.path()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until at least two cells are stored, then kill without warning.
    let t = Instant::now();
    while stored_cells(&db).0 < 2 && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let (cells, status) = stored_cells(&db);
    assert!(cells >= 2, "finished cells lost: {cells}");
    assert_eq!(
        status, "interrupted",
        "a run whose process died must not read as running or complete"
    );
    // The database is consistent: the run and its cells load.
    ptelab()
        .args(["show", "latest", "--json", "--db", db.path()])
        .assert()
        .success();
    // The next ptelab restores the knobs the killed one changed.
    ptelab()
        .args([
            "bench",
            "mprotect-toggle",
            "--size",
            "4K",
            "--iters",
            "2",
            "--no-store",
        ])
        .assert()
        .success();
    assert_eq!(
        knob_snapshot(),
        before,
        "THP knobs not repaired after SIGKILL"
    );
}
