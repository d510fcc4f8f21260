//! `ptelab bench mremap-move` and `ptelab bench reclaim` end to end on the
//! running kernel: layouts verified, TLB flushes per mremap call, the reclaim
//! method reported, and nothing left behind (cgroups, THP knobs).
//!
//! Tests that need root say why they skip.

use std::path::Path;

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
            // Spec §6: one flush_tlb_range per move_ptes call (one PMD
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
