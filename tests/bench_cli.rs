//! `ptelab bench` and `ptelab sweep` end to end on the running kernel.
//!
//! Tests that need root and mTHP say why they skip; CI runs as root on a
//! kernel with mTHP, where they must run.

use std::process::Command as StdCommand;
use std::time::Duration;

use predicates::prelude::*;
use serde_json::Value;

use crate::common::{assert_success, is_root, knob_snapshot, ptelab, skip, TempDb};

fn bench_json(args: &[&str]) -> Value {
    let db = TempDb::new();
    let out = ptelab()
        .args(["bench"])
        .args(args)
        .args(["--json", "--db", db.path()])
        .output()
        .unwrap();
    assert_success(&out);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// [`bench_json`] of mprotect-toggle over `size` in `folio` folios, with `extra`.
fn toggle_json(size: &str, folio: &str, extra: &[&str]) -> Value {
    let mut args = vec!["mprotect-toggle", "--size", size, "--folio", folio];
    args.extend(extra);
    bench_json(&args)
}

#[test]
fn bad_input_is_exit_2_with_what_is_accepted() {
    let cases: &[(&[&str], &str)] = &[
        (&["bench", "mprotect-toggle", "--size", "12Q"], "K, M, G"),
        (&["bench", "mprotect-toggle", "--size", "0"], "above zero"),
        (
            &["bench", "mprotect-toggle", "--folio", "48K"],
            "4K, 16K, 32K, 64K",
        ),
        (&["bench", "mprotect-frob"], "mprotect-toggle"),
        (
            &["bench", "mprotect-toggle", "--size", "1T"],
            "MemAvailable",
        ),
        (
            &["sweep", "mprotect-toggle", "--sizes", "4K,1T"],
            "MemAvailable",
        ),
        (&["bench", "mprotect-toggle", "--time", "fast"], "duration"),
        (&["bench", "mprotect-toggle", "--pin", "4096"], "online"),
    ];
    for (args, needle) in cases {
        ptelab()
            .args(*args)
            .args(["--no-store"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(*needle));
    }
}

#[test]
fn folio_not_offered_lists_offered_sizes() {
    if !is_root() {
        return skip("needs root to read which mTHP sizes apply");
    }
    // 8K is never an anonymous mTHP size; the grammar already refuses it.
    ptelab()
        .args(["bench", "mprotect-toggle", "--folio", "8K", "--no-store"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("accepted"));
}

#[test]
fn not_root_needs_allow_unverified() {
    if is_root() {
        // Drop to nobody for this one check, when possible.
        let exe = assert_cmd::cargo::cargo_bin("ptelab");
        let out = StdCommand::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe)
            .args(["bench", "mprotect-toggle", "--size", "40K", "--no-store"])
            .output();
        let Ok(out) = out else {
            return skip("setpriv not available");
        };
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-unverified"));
    }
}

#[test]
fn bench_json_has_the_documented_fields() {
    if !is_root() {
        return skip("needs root for layout control");
    }
    let _knobs = crate::common::knob_watch();
    let before = knob_snapshot();
    let v = toggle_json("400K", "4K", &["--time", "300ms"]);
    assert_eq!(v["schema"], "ptelab/bench/v1");
    for f in [
        "workload",
        "size_bytes",
        "folio",
        "layout",
        "ns_per_call",
        "ns_per_page",
        "calls",
        "kernel",
        "cpu",
        "thp_knobs",
    ] {
        assert!(!v[f].is_null(), "missing {f}");
    }
    assert_eq!(v["workload"], "mprotect-toggle");
    assert_eq!(v["size_bytes"], 400 * 1024);
    assert_eq!(v["layout"]["matches"], true);
    let ns = &v["ns_per_call"];
    assert!(ns["median"].as_f64().unwrap() > 0.0);
    assert!(ns["ci_low"].as_f64().unwrap() <= ns["median"].as_f64().unwrap());
    assert!(!ns["samples"].as_array().unwrap().is_empty());
    assert_eq!(v["vmas_before"], 1);
    // One kernel-speed and one memory-latency probe per block, each a
    // plausible syscall time or load latency.
    let blocks = v["blocks"].as_array().unwrap();
    for (name, low) in [("probe_ns", 5.0), ("memory_probe_ns", 1.0)] {
        let probes = v[name].as_array().unwrap();
        assert_eq!(
            probes.len(),
            blocks.len(),
            "{name}: {probes:?} vs {blocks:?}"
        );
        assert!(probes
            .iter()
            .all(|p| (low..100_000.0).contains(&p.as_f64().unwrap())));
    }
    assert_eq!(knob_snapshot(), before, "THP knobs changed by bench");
}

#[test]
fn layouts_are_obtained_and_verified() {
    if !is_root() {
        return skip("needs root for layout control");
    }
    let _knobs = crate::common::knob_watch();
    let before = knob_snapshot();
    // --folio 64K on a 64M region: 100% 64K folios.
    let v = toggle_json("64M", "64K", &["--iters", "4"]);
    assert_eq!(v["layout"]["matches"], true, "{}", v["layout"]);
    assert_eq!(v["layout"]["histogram"]["65536"], 1024);
    // 2M-pte: 2M folios, none PMD-mapped.
    let v = toggle_json("8M", "2M-pte", &["--iters", "4"]);
    assert_eq!(v["layout"]["histogram"]["2097152"], 4, "{}", v["layout"]);
    assert_eq!(v["layout"]["pmd_mapped_bytes"], 0);
    // 2M: PMD-mapped.
    let v = toggle_json("8M", "2M", &["--iters", "4"]);
    assert_eq!(v["layout"]["pmd_mapped_bytes"], 8 << 20, "{}", v["layout"]);
    // 4K: no large folio.
    let v = toggle_json("4M", "4K", &["--iters", "4"]);
    assert_eq!(v["layout"]["histogram"].as_object().unwrap().len(), 1);
    assert_eq!(v["layout"]["histogram"]["4096"], 1024);
    assert_eq!(knob_snapshot(), before, "THP knobs changed by bench");
}

#[test]
fn neighbor_merges_and_splits_every_call() {
    if !is_root() {
        return skip("needs root for layout control");
    }
    let v = bench_json(&[
        "mprotect-toggle",
        "--size",
        "40K",
        "--neighbor",
        "--iters",
        "100",
    ]);
    // An even number of toggles leaves the region RW and merged again.
    assert_eq!(v["vmas_before"], 1);
    assert_eq!(v["neighbor"], true);
}

#[test]
fn sweep_prints_the_seed_table_and_stores_cells() {
    if !is_root() {
        return skip("needs root for layout control");
    }
    let db = TempDb::new();
    ptelab()
        .args([
            "sweep",
            "mprotect-toggle",
            "--sizes",
            "4K,40K",
            "--folios",
            "4K,16K",
            "--time",
            "200ms",
        ])
        .args(["--db", db.path(), "--tag", "base", "--tag", "v6.18"])
        .assert()
        .success()
        .stdout(predicate::str::contains("size_kib | nsec_per_call"))
        .stdout(predicate::str::contains("folio 16K"));
    // The run carries its tags, and a tag names it.
    let out = ptelab()
        .args(["runs", "--json", "--db", db.path()])
        .output()
        .unwrap();
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        runs["runs"][0]["tags"],
        serde_json::json!(["base", "v6.18"])
    );
    ptelab()
        .args(["show", "base", "--db", db.path()])
        .assert()
        .success();
}

/// A cell is labelled by what it holds: a region smaller than one folio of
/// the request would hold only 4K pages, so bench refuses it (naming the
/// smallest size that holds one), before anything is mapped.
#[test]
fn a_size_below_one_folio_is_refused_naming_the_smallest_size() {
    for (args, needle) in [
        (
            &["bench", "mremap-move", "--size", "1M", "--folio", "2M-pte"][..],
            "the smallest size for --folio 2M-pte is 2M",
        ),
        (
            &[
                "bench",
                "mprotect-toggle",
                "--size",
                "32K",
                "--folio",
                "64K",
            ][..],
            "the smallest size for --folio 64K is 64K",
        ),
        (
            &[
                "sweep",
                "mprotect-toggle",
                "--sizes",
                "4K,16K",
                "--folios",
                "64K,2M",
            ][..],
            "no size of the grid can hold one folio",
        ),
    ] {
        let out = ptelab().args(args).args(["--no-store"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

/// Inside a sweep, a cell whose region cannot hold one folio of its layout
/// is skipped with a note (stderr, and `skipped` in the JSON); it is never
/// measured or stored under the large-folio label.
#[test]
fn sweep_skips_cells_too_small_for_one_folio() {
    if !is_root() {
        return skip("needs root for layout control");
    }
    let _knobs = crate::common::knob_watch();
    let before = knob_snapshot();
    let db = TempDb::new();
    let out = ptelab()
        .args(["sweep", "mprotect-toggle", "--sizes", "16K,64K"])
        .args(["--folios", "4K,64K", "--time", "150ms", "--blocks", "2"])
        .args(["--json", "--db", db.path()])
        .output()
        .unwrap();
    assert_success(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("skipped cell 16K 64K: a 16K region cannot hold one 64K folio"),
        "{err}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["skipped"].as_array().unwrap().len(),
        1,
        "{}",
        v["skipped"]
    );
    let cells: Vec<(u64, String)> = v["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["size_bytes"].as_u64().unwrap(),
                c["folio"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        cells,
        [(16384, "4K"), (65536, "4K"), (65536, "64K")].map(|(s, f)| (s, f.to_string()))
    );
    // Only the measured cells are stored.
    let shown = ptelab()
        .args(["show", "latest", "--json", "--db", db.path()])
        .output()
        .unwrap();
    assert_success(&shown);
    let run: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(run["cells"].as_array().unwrap().len(), 3, "{run}");
    assert_eq!(knob_snapshot(), before, "THP knobs changed by sweep");
}

#[test]
fn bad_tags_are_refused_before_measuring() {
    for (tag, extra, needle) in [
        ("12", None, "invalid value '12' for '--tag <TAG>'"),
        ("a,b", None, "no comma"),
        ("latest-ish", None, "'latest'"),
        (
            "base",
            Some("--no-store"),
            "cannot be used with '--no-store'",
        ),
    ] {
        ptelab()
            .args(["bench", "mprotect-toggle", "--tag", tag])
            .args(extra)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(needle));
    }
}

#[test]
fn sigint_mid_sweep_restores_knobs_and_keeps_finished_cells() {
    if !is_root() {
        return skip("needs root to change THP knobs");
    }
    let _knobs = crate::common::knob_watch();
    let before = knob_snapshot();
    let db = TempDb::new();
    let child = crate::common::ptelab_std()
        .args([
            "sweep",
            "mprotect-toggle",
            "--sizes",
            "4K,40K,400K,4M",
            "--folios",
            "64K,4K,2M-pte",
        ])
        .args(["--time", "1s", "--db", db.path()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the sweep holds the knob lock and has begun its run (other
    // tests may hold the lock for a while), let it measure, then interrupt.
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_secs(120) {
        let out = ptelab()
            .args(["runs", "--json", "--db", db.path()])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if v["runs"].as_array().is_some_and(|r| !r.is_empty()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(2500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        knob_snapshot(),
        before,
        "THP knobs not restored after SIGINT"
    );
    // The finished cells are in the database.
    let runs = ptelab()
        .args(["runs", "--json", "--db", db.path()])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&runs.stdout).unwrap();
    let run = &v["runs"][0];
    assert_eq!(run["status"], "interrupted", "{run}");
    assert!(run["cells"].as_u64().unwrap_or(0) >= 1, "{run}");
}
