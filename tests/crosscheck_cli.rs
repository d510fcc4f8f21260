//! `ptelab crosscheck` on the running kernel: every row of a small grid and
//! of the batching scenarios matches the model, and the THP knobs are left
//! as found.

use crate::common::{is_root, knob_snapshot, ptelab, skip, TempDb};

#[test]
fn crosscheck_small_grid_matches_the_model() {
    if !is_root() {
        skip("crosscheck needs root (tracepoint, THP knobs, pagemap)");
        return;
    }
    if std::env::consts::ARCH != "x86_64" {
        skip("crosscheck compares x86 tlb:tlb_flush records");
        return;
    }
    let db = TempDb::new();
    let _knobs = crate::common::knob_watch();
    let before = knob_snapshot();
    let out = ptelab()
        .args([
            "crosscheck",
            "mprotect-toggle",
            "mprotect-ro-rw",
            "mremap-move",
            "prot-transition",
            "--sizes",
            "64K,2M",
            "--folios",
            "4K,64K,2M-pte",
            "--json",
            "--db",
            db.path(),
        ])
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    assert_eq!(knob_snapshot(), before, "THP knobs changed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "bad JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(doc["schema"], "ptelab/crosscheck/v1");
    assert!(doc["strategy"].is_string());
    let rows = doc["rows"].as_array().unwrap();
    let bad: Vec<_> = rows.iter().filter(|r| r["match"] != true).collect();
    assert!(bad.is_empty(), "mismatches: {bad:#?}");
    assert_eq!(out.status.code(), Some(0));
    for obs in [
        "tlb flushes",
        "write faults",
        "pagemap present",
        "pagemap exclusive",
        "folio splits",
    ] {
        assert!(rows.iter().any(|r| r["observable"] == obs), "no {obs} row");
    }
    for wl in [
        "mprotect-toggle",
        "mprotect-ro-rw",
        "mremap-move",
        "prot-transition",
    ] {
        assert!(rows.iter().any(|r| r["workload"] == wl), "no {wl} row");
    }
    assert!(rows.iter().any(|r| r["scenario"]
        .as_str()
        .unwrap()
        .starts_with("fork-mixed-exclusive")));
    assert!(rows.iter().any(|r| r["scenario"]
        .as_str()
        .unwrap()
        .starts_with("mid-folio-range")));
    // 64K of 2M-pte folios is skipped, saying so.
    let skipped = doc["skipped"].as_array().unwrap();
    assert!(skipped
        .iter()
        .any(|s| s.as_str().unwrap().contains("64K 2M-pte")));
    // The run is stored with its model cells.
    let runs = ptelab()
        .args(["runs", "--db", db.path(), "--json"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&runs.stdout).contains("crosscheck"));
}

#[test]
fn crosscheck_rejects_reclaim() {
    ptelab()
        .args(["crosscheck", "reclaim", "--no-store"])
        .assert()
        .code(2);
}

/// Scenario (b): a shared ext4 file mapping with some dirty pages. The rows
/// must match (batched: clean PTEs in a batch with a dirty sibling become
/// writable without a fault), and the temporary file leaves nothing behind.
#[test]
fn crosscheck_shared_file_writenotify_matches_and_leaves_no_file() {
    if !is_root() {
        skip("crosscheck needs root (tracepoint, THP knobs, pagemap)");
        return;
    }
    if std::env::consts::ARCH != "x86_64" {
        skip("crosscheck compares x86 tlb:tlb_flush records");
        return;
    }
    // /var/tmp is the default and on a disk file system; a fresh directory
    // there shows whether anything is left behind.
    let dir = tempfile::Builder::new()
        .prefix("ptelab-crosscheck-test")
        .tempdir_in("/var/tmp")
        .unwrap();
    let _knobs = crate::common::knob_watch();
    let out = ptelab()
        .args([
            "crosscheck",
            "mprotect-toggle",
            "--sizes",
            "64K",
            "--folios",
            "64K",
            "--json",
            "--no-store",
        ])
        .env("PTELAB_CROSSCHECK_DIR", dir.path())
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "the scenario left a file behind"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "bad JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let skipped = doc["skipped"].as_array().unwrap();
    if let Some(s) = skipped
        .iter()
        .find(|s| s.as_str().unwrap().starts_with("shared-file-writenotify"))
    {
        skip(&format!("scenario skipped here: {s}"));
        return;
    }
    let rows: Vec<&serde_json::Value> = doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["scenario"]
                .as_str()
                .unwrap()
                .starts_with("shared-file-writenotify")
        })
        .collect();
    let bad: Vec<_> = rows.iter().filter(|r| r["match"] != true).collect();
    assert!(bad.is_empty(), "mismatches: {bad:#?}");
    assert_eq!(out.status.code(), Some(0));
    for obs in [
        "page-cache folios",
        "tlb flushes",
        "write faults",
        "pagemap present",
        "folio splits",
    ] {
        assert!(rows.iter().any(|r| r["observable"] == obs), "no {obs} row");
    }
    // The write-fault row names the v6.16 (per-PTE) expectation.
    let faults = rows
        .iter()
        .find(|r| r["observable"] == "write faults")
        .unwrap();
    assert!(faults["note"]
        .as_str()
        .unwrap()
        .contains("v6.16 per-PTE faults"));
}
