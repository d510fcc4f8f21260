//! `ptelab bench mremap-move` and `ptelab bench reclaim` end to end on the
//! running kernel: layouts verified, TLB flushes per mremap call, the reclaim
//! method reported, and nothing left behind (cgroups, THP knobs, swapfiles).
//!
//! Tests that need root say why they skip.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

use crate::common::{is_root, knob_snapshot, ptelab, skip};

/// Run `ptelab bench ARGS --json --no-store`; the JSON document, or the
/// stderr on failure.
fn bench(args: &[&str], env: &[(&str, &str)]) -> Result<Value, String> {
    let mut cmd = ptelab();
    cmd.arg("bench").args(args).args(["--json", "--no-store"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_slice(&out.stdout).unwrap())
}

/// The cells of a bench document: `cells` when a workload reports several
/// phases, else the document is the one cell.
fn cells(doc: &Value) -> Vec<Value> {
    match doc["cells"].as_array() {
        Some(c) => c.clone(),
        None => vec![doc.clone()],
    }
}

fn phase(doc: &Value, name: &str) -> Value {
    cells(doc)
        .into_iter()
        .find(|c| c["phase"] == name)
        .unwrap_or_else(|| panic!("no phase {name} in {doc:#}"))
}

/// `ptelab-*` cgroups under every mounted cgroup hierarchy.
fn ptelab_cgroups() -> Vec<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut found = Vec::new();
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 2 && (f[2] == "cgroup" || f[2] == "cgroup2") {
            if let Ok(rd) = std::fs::read_dir(Path::new(f[1])) {
                for e in rd.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name.starts_with("ptelab-") {
                        found.push(e.path().display().to_string());
                    }
                }
            }
        }
    }
    found
}

/// Reclaim tests that compare cgroups or swap areas before and after run one
/// at a time (another one's ptelab would add its own meanwhile).
static RECLAIM: Mutex<()> = Mutex::new(());

fn reclaim_serial() -> MutexGuard<'static, ()> {
    RECLAIM.lock().unwrap_or_else(|e| e.into_inner())
}

/// Active swap areas made by ptelab (/proc/swaps).
fn ptelab_swaps() -> Vec<String> {
    std::fs::read_to_string("/proc/swaps")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("ptelab-swap-"))
        .map(str::to_string)
        .collect()
}

/// Swapfile recovery records in /run/lock.
fn swap_records() -> Vec<String> {
    std::fs::read_dir("/run/lock")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("ptelab.swap."))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn mremap_move_1m_verified_one_flush_per_call() {
    if !is_root() {
        return skip("mremap-move layout verification needs root");
    }
    let _knobs = crate::common::knob_watch();
    let knobs = knob_snapshot();
    for folio in ["4K", "64K"] {
        let doc = match bench(
            &[
                "mremap-move",
                "--size",
                "1M",
                "--folio",
                folio,
                "--time",
                "300ms",
            ],
            &[],
        ) {
            Ok(d) => d,
            Err(e) if e.contains("not offered") => return skip(&format!("{folio}: {e}")),
            Err(e) => panic!("mremap-move --folio {folio} failed: {e}"),
        };
        assert_eq!(cells(&doc).len(), 2, "{doc:#}");
        let m = phase(&doc, "mremap");
        let it = phase(&doc, "iteration");
        for c in [&m, &it] {
            assert_eq!(c["verified"], true);
            assert_eq!(c["layout"]["matches"], true, "{folio}: {c:#}");
            assert_eq!(c["layout_after"]["matches"], true, "{folio}: {c:#}");
            assert_eq!(c["vmas_after"], 1);
        }
        let per = |c: &Value| c["tlb_flushes"]["per_call"].as_f64();
        let Some(flushes) = per(&m) else {
            return skip(&format!(
                "tlb:tlb_flush not countable: {}",
                m["tlb_flushes"]["unavailable"]
            ));
        };
        if std::env::consts::ARCH == "x86_64" {
            // docs/kernel.md §7: one flush_tlb_range per move_ptes call (one PMD
            // extent for 1 MiB at a 2 MiB-aligned address); 256 pages > 33
            // make it a full flush.
            assert_eq!(flushes, 1.0, "{folio}: {}", m["tlb_flushes"]);
            assert!(
                m["tlb_flushes"]["breakdown"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .all(|k| k.ends_with("/all")),
                "{}",
                m["tlb_flushes"]
            );
            // The iteration adds munmap's own flush.
            assert!(per(&it).unwrap() >= 2.0, "{}", it["tlb_flushes"]);
        }
        // The move is part of the iteration.
        let ns = |c: &Value| c["ns_per_call"]["median"].as_f64().unwrap();
        assert!(
            ns(&m) > 0.0 && ns(&it) > ns(&m),
            "{} vs {}",
            ns(&m),
            ns(&it)
        );
    }
    assert_eq!(knob_snapshot(), knobs, "THP knobs changed by mremap-move");
}

#[test]
fn reclaim_reports_its_method_and_leaves_nothing_behind() {
    if !is_root() {
        return skip("reclaim needs root (memory cgroup, layout verification)");
    }
    let _serial = reclaim_serial();
    let _knobs = crate::common::knob_watch();
    let knobs = knob_snapshot();
    let before = ptelab_cgroups();
    let res = bench(
        &[
            "reclaim", "--size", "8M", "--folio", "64K", "--time", "300ms",
        ],
        &[],
    );
    assert_eq!(knob_snapshot(), knobs, "THP knobs changed by reclaim");
    let after = ptelab_cgroups();
    assert!(
        after.iter().all(|c| before.contains(c)),
        "cgroups left behind: {after:?}"
    );
    let doc = match res {
        Ok(d) => d,
        Err(e) if e.contains("did not get") || e.contains("swap-backed") => {
            return skip(&format!("no large page-cache folios here: {e}"))
        }
        Err(e) => panic!("reclaim failed: {e}"),
    };
    let c = &cells(&doc)[0];
    let label = c["phase"].as_str().expect("method label");
    let method = label.split(' ').next().unwrap();
    assert!(
        ["memcg-v2-reclaim", "memcg-v1-limit", "madv-pageout"].contains(&method),
        "{label}"
    );
    assert!(
        label.split(' ').nth(1).is_some(),
        "no filesystem in {label}"
    );
    assert!(c["ns_per_call"]["median"].as_f64().unwrap() > 0.0);
    // Pages per call are the pages that left the page cache (target: 80%).
    let pages = c["ns_per_call"]["median"].as_f64().unwrap() / c["ns_per_page"].as_f64().unwrap();
    assert!(
        pages > 0.5 * 2048.0 && pages <= 2048.5,
        "{pages} pages per call"
    );
    assert_eq!(c["layout_after"]["histogram"]["65536"], 128, "{c:#}");
}

#[test]
fn reclaim_pageout_method_can_be_forced() {
    if !is_root() {
        return skip("reclaim layout verification needs root");
    }
    let _serial = reclaim_serial();
    let before = ptelab_cgroups();
    let doc = match bench(
        &[
            "reclaim", "--size", "4M", "--folio", "4K", "--time", "200ms",
        ],
        &[("PTELAB_RECLAIM_METHOD", "pageout")],
    ) {
        Ok(d) => d,
        Err(e) if e.contains("swap-backed") => return skip(&e),
        Err(e) => panic!("reclaim (pageout) failed: {e}"),
    };
    let label = cells(&doc)[0]["phase"].as_str().unwrap().to_string();
    assert!(label.starts_with("madv-pageout "), "{label}");
    // MADV_PAGEOUT makes no cgroup.
    assert_eq!(ptelab_cgroups(), before);
}

#[test]
fn reclaim_unknown_method_fails_the_cell_with_a_message() {
    if !is_root() {
        return skip("reclaim needs root");
    }
    let err = bench(
        &["reclaim", "--size", "4M", "--time", "200ms"],
        &[("PTELAB_RECLAIM_METHOD", "drop-caches")],
    )
    .map(|d| d.to_string())
    .unwrap_or_else(|e| e);
    assert!(err.contains("PTELAB_RECLAIM_METHOD"), "{err}");
}

#[test]
fn anon_reclaim_swaps_64k_folios_to_a_temporary_swapfile_and_removes_it() {
    if !is_root() {
        return skip("anonymous reclaim needs root (swapon, memory cgroup)");
    }
    let Ok(dir) = tempfile::tempdir_in("/var/tmp") else {
        return skip("no writable /var/tmp");
    };
    let _serial = reclaim_serial();
    let _knobs = crate::common::knob_watch();
    let knobs = knob_snapshot();
    let cgroups = ptelab_cgroups();
    assert!(ptelab_swaps().is_empty(), "{:?}", ptelab_swaps());
    let res = bench(
        &[
            "reclaim",
            "--size",
            "8M",
            "--folio",
            "64K",
            "--time",
            "400ms",
            "--blocks",
            "2",
            "--swapfile",
            "256M",
        ],
        &[("PTELAB_RECLAIM_DIR", dir.path().to_str().unwrap())],
    );
    // Nothing left behind, whatever happened.
    assert_eq!(knob_snapshot(), knobs, "THP knobs changed by anon reclaim");
    assert!(
        ptelab_swaps().is_empty(),
        "swap left active: {:?}",
        ptelab_swaps()
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert!(
        left.is_empty(),
        "files left in the swapfile directory: {left:?}"
    );
    assert!(
        swap_records().is_empty(),
        "records left: {:?}",
        swap_records()
    );
    let after = ptelab_cgroups();
    assert!(
        after.iter().all(|c| cgroups.contains(c)),
        "cgroups left behind: {after:?}"
    );
    let doc = match res {
        Ok(d) => d,
        Err(e) if e.contains("not offered") || e.contains("cannot hold an active swapfile") => {
            return skip(&format!("anon reclaim unavailable here: {e}"))
        }
        Err(e) => panic!("anon reclaim failed: {e}"),
    };
    let c = &cells(&doc)[0];
    let label = c["phase"].as_str().expect("method label");
    let words: Vec<&str> = label.split(' ').collect();
    assert!(
        ["memcg-v2-reclaim", "memcg-v1-limit", "madv-pageout"].contains(&words[0]),
        "{label}"
    );
    assert_eq!(words.get(1), Some(&"anon"), "{label}");
    assert!(
        words.last().unwrap().starts_with("swpout-"),
        "no split verdict in {label}"
    );
    assert_eq!(c["layout"]["matches"], true, "{c:#}");
    let ns = c["ns_per_call"]["median"].as_f64().unwrap();
    assert!(ns > 0.0);
    // Pages per call: those whose PTE became a swap entry (target: 80%).
    let pages = ns / c["ns_per_page"].as_f64().unwrap();
    assert!(
        pages > 0.5 * 2048.0 && pages <= 2048.5,
        "{pages} pages per call"
    );
}

#[test]
fn anon_reclaim_without_swapfile_is_refused_naming_the_option() {
    let out = ptelab()
        .args([
            "bench",
            "reclaim",
            "--size",
            "4M",
            "--iters",
            "1",
            "--no-store",
        ])
        .env("PTELAB_RECLAIM_MEMORY", "anon")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--swapfile"), "{err}");
    // Too small for the region.
    let out = ptelab()
        .args([
            "bench",
            "reclaim",
            "--size",
            "8M",
            "--iters",
            "1",
            "--no-store",
            "--swapfile",
            "4M",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot hold") && err.contains("8M"), "{err}");
    // Other workloads take no swapfile.
    let out = ptelab()
        .args([
            "bench",
            "mprotect-toggle",
            "--iters",
            "1",
            "--no-store",
            "--swapfile",
            "64M",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
