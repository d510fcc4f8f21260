//! `ptelab vm -- crosscheck` in an x86_64 guest of Debian's 6.17.13 (a
//! batched kernel): every row matches the model of that version, including
//! the row that tells batched from per-PTE kernels. Skipped (saying why)
//! without QEMU, the cached kernel or the musl target; on CI it must run.

use std::time::Duration;

use serde_json::Value;

use crate::common::{ptelab, skip};

#[test]
fn crosscheck_in_a_6_17_guest_matches_the_batched_model() {
    if crate::common::cached_x86_image("6.17.13").is_none() {
        return;
    }
    let out = ptelab()
        .args([
            "vm",
            "--json",
            "--kernel",
            "debian:6.17.13",
            "--arch",
            "x86_64",
            "--",
            "crosscheck",
            "mprotect-ro-rw",
            "mremap-move",
            "--sizes",
            "64K,2M",
            "--folios",
            "4K,64K",
        ])
        .timeout(Duration::from_secs(600))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(2) && stderr.contains("rustup target add") {
        skip(stderr.trim());
        return;
    }
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let vm: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stderr}"));
    let doc = &vm["guests"][0]["output"];
    assert_eq!(doc["schema"], "ptelab/crosscheck/v1", "{vm}");
    assert_eq!(doc["arch"], "x86_64");
    assert!(doc["kernel"].as_str().unwrap().starts_with("6.17.13"));
    assert_eq!(doc["strategy"], "v6.17", "{}", doc["strategy_reason"]);
    let rows = doc["rows"].as_array().unwrap();
    assert!(rows.len() > 50, "{} rows", rows.len());
    let bad: Vec<&Value> = rows.iter().filter(|r| r["match"] != true).collect();
    assert!(bad.is_empty(), "mismatches: {bad:#?}");
    let flush_rows = rows.iter().filter(|r| r["observable"] == "tlb flushes");
    assert!(flush_rows.count() > 10, "x86 flush rows are compared");
    // After clear_refs a batched kernel's merged pte_mkdirty() makes the
    // PTEs of a 64K folio soft-dirty, so RO->RW upgrades them and the
    // re-touch takes no fault; a per-PTE kernel (6.16) faults on all 16.
    let retouch = rows
        .iter()
        .find(|r| {
            r["workload"] == "mprotect-ro-rw"
                && r["size_bytes"] == 65536
                && r["folio"] == "64K"
                && r["scenario"] == "after clear_refs: re-touch"
        })
        .unwrap_or_else(|| panic!("no clear_refs re-touch row: {rows:#?}"));
    assert_eq!(retouch["kernel"], "none of 16", "{retouch}");
    let n = rows.len();
    assert!(
        stderr.contains(&format!(
            "crosscheck in guests: {n}/{n} rows match on x86_64 6.17.13"
        )),
        "{stderr}"
    );
}
