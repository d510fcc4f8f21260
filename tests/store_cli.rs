//! `ptelab runs`, `show` and `compare` on a database seeded through the hidden
//! `runs --import` path with run documents (`ptelab/run/v1`) built here, so
//! the outputs are fixed and snapshotted.

use serde_json::{json, Value};

use crate::common::{import_runs, kernel_cell, merge, ptelab, TempDb};

/// Deterministic samples spread ±0.5% around `median` (their median is `median`).
fn samples(median: f64, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| {
            median * (1.0 + (((i * 7) % n) as f64 - (n - 1) as f64 / 2.0) / (n as f64 * 100.0))
        })
        .collect()
}

/// The shared cell with `n` samples, a ±0.3% CI, a full flush per call, and
/// a layout that matches or not.
fn cell(
    size_kib: u64,
    folio: &str,
    folio_bytes: u64,
    median: f64,
    n: usize,
    matches: bool,
) -> Value {
    let mut c = kernel_cell(size_kib, folio, folio_bytes, median, samples(median, n));
    merge(
        &mut c,
        json!({
            "cell": {
                "layout": {
                    "matches": matches,
                    "mismatch": if matches { Value::Null } else { json!("requested 64K folios: none found") },
                },
                "ns_per_call": {
                    "ci_low": median * 0.997,
                    "ci_high": median * 1.003,
                    "min": median * 0.995,
                },
                "calls": 100 * n,
                "tlb_flushes": {
                    "per_call": 1.0,
                    "events": 64,
                    "breakdown": { "0/all": 64 },
                },
            }
        }),
    );
    c
}

fn run_doc(
    id: i64,
    kernel: &str,
    day: u32,
    status: &str,
    tags: &[&str],
    cells: Vec<Value>,
) -> Value {
    json!({
        "schema": "ptelab/run/v1",
        "run": {
            "id": id,
            "kind": "sweep",
            "command": "ptelab sweep mprotect-toggle --sizes 4K,40K,400K,4M --folios 4K,64K",
            "started_at": format!("2026-05-{day:02}T10:00:00Z"),
            "finished_at": if status == "running" { Value::Null } else { json!(format!("2026-05-{day:02}T10:05:00Z")) },
            "status": status,
            "kernel_release": kernel,
            "arch": "x86_64",
            "machine_id": "0123456789abcdef0123456789abcdef",
            "tool_version": "0.1.0",
            "git_revision": "abc1234",
            "tags": tags,
            "cells": cells.len(),
        },
        "host": {
            "kernel_release": kernel,
            "arch": "x86_64",
            "cpu_model": "AMD EPYC (test)",
            "cores": 2,
            "paravirt": null,
            "machine_id": "0123456789abcdef0123456789abcdef",
            "tool_version": "0.1.0",
            "git_revision": "abc1234",
        },
        "cells": cells,
    })
}

/// Three runs: a v6.16-like baseline, a v6.17-like candidate (the seed 001
/// regression from 400K up, a layout that went wrong at 64K, a cell with too
/// few samples), and an interrupted run.
fn seeded_db() -> TempDb {
    let db = TempDb::new();
    let base = run_doc(
        1,
        "6.16.0",
        1,
        "complete",
        &["v6.16", "baseline"],
        vec![
            cell(4, "4K", 4096, 1713.0, 30, true),
            cell(40, "4K", 4096, 2071.0, 30, true),
            cell(400, "4K", 4096, 3453.0, 30, true),
            cell(4000, "4K", 4096, 18804.0, 30, true),
            cell(4000, "64K", 65536, 9000.0, 30, true),
            cell(40000, "4K", 4096, 172613.0, 3, true),
        ],
    );
    let cand = run_doc(
        2,
        "6.17.0-rc1",
        2,
        "complete",
        &["v6.17-rc1"],
        vec![
            cell(4, "4K", 4096, 1720.0, 30, true),
            cell(40, "4K", 4096, 2080.0, 30, true),
            cell(400, "4K", 4096, 5993.0, 30, true),
            cell(4000, "4K", 4096, 44116.0, 30, true),
            cell(4000, "64K", 65536, 9100.0, 30, false),
            cell(40000, "4K", 4096, 427731.0, 30, true),
        ],
    );
    let killed = run_doc(
        3,
        "6.17.0-rc1",
        3,
        "running",
        &[],
        vec![cell(4, "4K", 4096, 1700.0, 30, true)],
    );
    import_runs(&db, &[base, cand, killed]);
    db
}

fn stdout(args: &[&str], db: &TempDb) -> String {
    let out = ptelab()
        .args(args)
        .args(["--db", db.path()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn runs_lists_runs_and_marks_the_killed_one_interrupted() {
    let db = seeded_db();
    let text = stdout(&["runs"], &db);
    insta::assert_snapshot!("runs_text", text);
    let v: Value = serde_json::from_str(&stdout(&["runs", "--json"], &db)).unwrap();
    assert_eq!(v["schema"], "ptelab/runs/v1");
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[0]["id"], 1);
    assert_eq!(runs[0]["tags"], json!(["baseline", "v6.16"]));
    assert_eq!(runs[2]["status"], "interrupted");
    assert_eq!(runs[2]["cells"], 1);
}

#[test]
fn show_prints_tables_csv_and_a_document_that_imports_back() {
    let db = seeded_db();
    insta::assert_snapshot!("show_text", stdout(&["show", "1"], &db));
    let csv = stdout(&["show", "v6.17-rc1", "--csv"], &db);
    insta::assert_snapshot!("show_csv", csv);
    let doc = stdout(&["show", "latest~1", "--json"], &db);
    let v: Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(v["schema"], "ptelab/run/v1");
    assert_eq!(v["run"]["id"], 2);
    // Figures named by what they hold, the unit beside them (the seeded
    // runs were imported with the record's own names, `ns_per_call`).
    let cell = &v["cells"][0]["cell"];
    assert_eq!(cell["per_call"]["samples"].as_array().unwrap().len(), 30);
    assert_eq!(cell["unit"], "ns");
    assert!(cell["per_page"].as_f64().unwrap() > 0.0);
    assert!(cell.get("ns_per_call").is_none() && cell.get("ns_per_page").is_none());
    // Export, import, show again: the same cells.
    let f = db.dir().join("export.json");
    std::fs::write(&f, &doc).unwrap();
    ptelab()
        .args(["runs", "--db", db.path(), "--import", f.to_str().unwrap()])
        .assert()
        .success();
    let again: Value = serde_json::from_str(&stdout(&["show", "latest", "--json"], &db)).unwrap();
    assert_eq!(again["run"]["id"], 4);
    assert_eq!(again["cells"], v["cells"]);
}

#[test]
fn compare_gives_verdicts_with_reasons() {
    let db = seeded_db();
    let text = stdout(&["compare", "baseline", "2"], &db);
    insta::assert_snapshot!("compare_text", text);
    let md = stdout(&["compare", "1", "2", "--format", "markdown"], &db);
    assert!(
        md.contains("| size_kib | A nsec | B nsec |  %change ±% | verdict ")
            && md.contains("|---------:|-------:|"),
        "{md}"
    );
    let v: Value =
        serde_json::from_str(&stdout(&["compare", "v6.16", "v6.17-rc1", "--json"], &db)).unwrap();
    assert_eq!(v["schema"], "ptelab/compare/v1");
    assert_eq!(v["method"]["seed"], "0x7074656c61620001");
    let verdicts: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(
        verdicts,
        [
            "no-change",
            "no-change",
            "regression",
            "regression",
            "not-comparable",
            "not-comparable"
        ]
    );
    assert_eq!(v["summary"]["regressions"], 2);
}

/// Three baseline runs and three candidate runs, as a kernel developer
/// would make them on a noisy machine: the 4 MiB cell regresses by 50%, the
/// 400 KiB one moves by 1% inside the runs' own 1-2% spread, and the 40 KiB
/// one is missing from the candidate.
fn replicated_db() -> TempDb {
    let db = TempDb::new();
    let mut docs = Vec::new();
    for (i, level) in [1.0, 1.02, 0.985].into_iter().enumerate() {
        let id = i as i64 + 1;
        docs.push(run_doc(
            id,
            "6.18.0",
            id as u32,
            "complete",
            &["base"],
            vec![
                cell(40, "4K", 4096, 2071.0 * level, 30, true),
                cell(400, "4K", 4096, 3453.0 * level, 30, true),
                cell(4000, "4K", 4096, 18804.0 * level, 30, true),
            ],
        ));
    }
    for (i, level) in [1.01, 0.995, 1.025].into_iter().enumerate() {
        let id = i as i64 + 4;
        docs.push(run_doc(
            id,
            "6.18.0",
            id as u32,
            "complete",
            &["patched"],
            vec![
                cell(400, "4K", 4096, 3453.0 * level, 30, true),
                cell(4000, "4K", 4096, 1.5 * 18804.0 * level, 30, true),
            ],
        ));
    }
    import_runs(&db, &docs);
    db
}

#[test]
fn replicated_compare_takes_the_run_as_the_unit() {
    let db = replicated_db();
    let text = stdout(&["compare", "base", "patched", "--replicates"], &db);
    insta::assert_snapshot!("compare_replicated_text", text);
    // A comma list names the same runs.
    let listed = stdout(&["compare", "1,2,3", "4,5,6", "--json"], &db);
    let v: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(v["a"]["runs"], json!([1, 2, 3]));
    assert_eq!(v["method"]["replicated"], json!({"runs_a": 3, "runs_b": 3}));
    assert_eq!(
        v["method"]["test"],
        "student-t, pooled variance, on ln run medians"
    );
    assert_eq!(v["method"]["noise"], 0.02);
    let rows = v["rows"].as_array().unwrap();
    let verdicts: Vec<&str> = rows
        .iter()
        .map(|r| r["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["not-comparable", "no-change", "regression"]);
    assert_eq!(rows[0]["reason"], "only in A");
    assert_eq!(rows[2]["a"]["runs"], 3);
    let ratio = rows[2]["ratio"].as_f64().unwrap();
    assert!(
        (ratio
            - 1.5 * 1.01f64.cbrt() * 0.995f64.cbrt() * 1.025f64.cbrt()
                / (1.02f64.cbrt() * 0.985f64.cbrt()))
        .abs()
            < 1e-9
    );
    // The run-level spread (about 1.7%) is what the interval is built on.
    let sd = rows[1]["run_sd"].as_f64().unwrap();
    assert!(sd > 0.01 && sd < 0.03, "{sd}");
    let tagged = stdout(
        &["compare", "base", "patched", "--replicates", "--json"],
        &db,
    );
    let t: Value = serde_json::from_str(&tagged).unwrap();
    assert_eq!(t["rows"], v["rows"]);

    // Without --replicates a tag is still its newest run.
    let single: Value =
        serde_json::from_str(&stdout(&["compare", "base", "patched", "--json"], &db)).unwrap();
    assert_eq!(single["a"]["id"], 3);
    assert!(single["method"]["replicated"].is_null());

    // One run against two: 3 runs in all is enough; 1 + 1 is not replicated.
    let few: Value =
        serde_json::from_str(&stdout(&["compare", "1", "4,5", "--json"], &db)).unwrap();
    assert_eq!(few["rows"][1]["verdict"], "no-change");
    assert_eq!(few["rows"][2]["verdict"], "regression");
    assert_eq!(few["method"]["replicated"]["runs_b"], 2);
}

#[test]
fn replicated_compare_refuses_bad_sides() {
    let db = replicated_db();
    for (args, needle) in [
        (&["compare", "1,2", "2,3"][..], "run 2 is on both sides"),
        (
            &["compare", "base", "nosuch", "--replicates"][..],
            "no run tagged 'nosuch'",
        ),
        (&["compare", "1,2", "4,99"][..], "no run '99'"),
    ] {
        ptelab()
            .args(args)
            .args(["--db", db.path()])
            .assert()
            .code(2)
            .stderr(predicates::str::contains(needle));
    }
}

#[test]
fn compare_is_reproducible_and_the_seed_changes_intervals() {
    let db = seeded_db();
    let one = stdout(&["compare", "1", "2", "--json"], &db);
    assert_eq!(one, stdout(&["compare", "1", "2", "--json"], &db));
    let other = stdout(&["compare", "1", "2", "--json", "--seed", "0x2a"], &db);
    let v: Value = serde_json::from_str(&other).unwrap();
    assert_eq!(v["method"]["seed"], "0x000000000000002a");
    assert_ne!(one, other);
}

#[test]
fn fail_on_regression_exits_1() {
    let db = seeded_db();
    ptelab()
        .args([
            "compare",
            "1",
            "2",
            "--fail-on-regression",
            "--db",
            db.path(),
        ])
        .assert()
        .code(1);
    // A run against itself: no regression.
    ptelab()
        .args([
            "compare",
            "1",
            "1",
            "--fail-on-regression",
            "--db",
            db.path(),
        ])
        .assert()
        .success();
}

#[test]
fn bad_names_and_options_are_usage_errors() {
    let db = seeded_db();
    let cases: [(&[&str], &str); 5] = [
        (&["show", "nope"], "latest~N"),
        (&["show", "latest~9"], "no run 'latest~9'"),
        (&["compare", "1", "2", "--noise", "1.5"], "noise"),
        (
            &["compare", "1", "2", "--format", "html"],
            "[possible values: text, markdown]",
        ),
        (&["compare", "1", "2", "--seed", "zz"], "--seed"),
    ];
    for (args, want) in cases {
        let out = ptelab()
            .args(args)
            .args(["--db", db.path()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let missing = db.dir().join("missing.db");
    let out = ptelab()
        .args(["runs", "--db", missing.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no results database"));
    assert!(
        !missing.exists(),
        "a read-only command must not create a database"
    );
}

#[test]
fn compare_of_two_measured_runs_adjusts_for_drift_unless_told_not_to() {
    if !crate::common::is_root() {
        return crate::common::skip("needs root for layout control");
    }
    let _knobs = crate::common::knob_watch();
    let db = TempDb::new();
    for _ in 0..2 {
        let out = ptelab()
            .args([
                "sweep",
                "mprotect-toggle",
                "--sizes",
                "400K,4M",
                "--folios",
                "4K",
            ])
            .args(["--time", "300ms", "--blocks", "3", "--db", db.path()])
            .output()
            .unwrap();
        crate::common::assert_success(&out);
    }
    let auto: Value =
        serde_json::from_str(&stdout(&["compare", "latest~1", "latest", "--json"], &db)).unwrap();
    let drift = &auto["drift"];
    assert_eq!(drift["corrected"], true, "{drift}");
    assert!(drift["probe_a_ns"].as_f64().unwrap() > 0.0);
    assert!(drift["memory_b_ns"].as_f64().unwrap() > 0.0);
    for r in auto["rows"].as_array().unwrap() {
        for slope in ["drift_slope", "memory_slope"] {
            let s = r[slope].as_f64().unwrap();
            assert!((0.0..=2.0).contains(&s), "{slope}: {r}");
        }
        assert!(r["ratio_raw"].as_f64().unwrap() > 0.0, "{r}");
    }
    let text = stdout(&["compare", "latest~1", "latest"], &db);
    assert!(text.contains("Machine drift: kernel-speed probe"), "{text}");
    assert!(text.contains("raw %"), "{text}");

    let none: Value = serde_json::from_str(&stdout(
        &[
            "compare",
            "latest~1",
            "latest",
            "--json",
            "--normalize",
            "none",
        ],
        &db,
    ))
    .unwrap();
    assert_eq!(none["drift"]["corrected"], false);
    assert!(none["rows"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["ratio_raw"].is_null()
            && r["drift_slope"].is_null()
            && r["memory_slope"].is_null()));
}

/// `ptelab calibrate` on the real kernel: it stores its runs and the
/// machine's repeatability, and `compare` of two runs of this machine then
/// takes the calibrated noise threshold (or keeps the 2% floor).
#[test]
fn calibrate_stores_repeatability_and_compare_uses_it() {
    if !crate::common::is_root() {
        return crate::common::skip("calibrate needs root (folio layouts are set and verified)");
    }
    let _knobs = crate::common::knob_watch();
    let db = TempDb::new();
    // Small and short: 4 runs of 6 cells give 6 pairs x 6 = 36 A/A
    // differences.
    let out = ptelab()
        .args([
            "calibrate",
            "--runs",
            "4",
            "--sizes",
            "64K,400K",
            "--folios",
            "4K,64K,16K",
        ])
        .args([
            "--time",
            "0.15s",
            "--blocks",
            "2",
            "--span",
            "9s",
            "--db",
            db.path(),
            "--json",
        ])
        .output()
        .unwrap();
    crate::common::assert_success(&out);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema"], "ptelab/calibrate/v1");
    let cal = &doc["calibration"];
    assert_eq!(cal["runs"].as_array().unwrap().len(), 4);
    // The 4 runs start 3 s apart (each takes about 1.5 s), so the last one
    // ends after the 9 s span.
    let span = cal["span_s"].as_f64().unwrap();
    assert!((9.0..30.0).contains(&span), "span {span} s");
    assert_eq!(cal["adjusted"]["n"], 36);
    // No upper bound on the figure itself: the other tests of this binary
    // run beside it on 2 cores, and CI once saw one run's 64K cell at 3x
    // the others (|ln ratio| 1.1). The test checks that the figure is
    // stored and used, not that the machine was quiet.
    let adjusted = cal["adjusted"]["coefficient"].as_f64().unwrap();
    let max = cal["adjusted"]["max"].as_f64().unwrap();
    assert!(
        adjusted.is_finite() && adjusted > 0.0 && adjusted <= max,
        "{cal}"
    );
    assert_eq!(cal["cells"].as_array().unwrap().len(), 6);

    // The calibration runs are ordinary runs, tagged.
    let runs: Value = serde_json::from_slice(
        &ptelab()
            .args(["runs", "--db", db.path(), "--json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let runs = runs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    assert!(runs
        .iter()
        .all(|r| r["kind"] == "calibrate" && r["tags"][0] == "calibrate"));

    let out = ptelab()
        .args(["compare", "latest~1", "latest", "--db", db.path(), "--json"])
        .output()
        .unwrap();
    crate::common::assert_success(&out);
    let cmp: Value = serde_json::from_slice(&out.stdout).unwrap();
    let noise = cmp["method"]["noise"].as_f64().unwrap();
    let source = cmp["method"]["noise_source"].as_str().unwrap();
    assert!(source.contains("calibration"), "{source}");
    // The 2% floor, and at most 99% (a run-to-run spread CI once measured
    // at 113% here).
    let expect = adjusted.clamp(0.02, 0.99);
    assert!((noise - expect).abs() < 1e-12, "{noise} vs {adjusted}");
    // --noise overrides.
    let out = ptelab()
        .args([
            "compare",
            "latest~1",
            "latest",
            "--db",
            db.path(),
            "--json",
            "--noise",
            "0.1",
        ])
        .output()
        .unwrap();
    let cmp: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cmp["method"]["noise"], 0.1);
}

#[test]
fn calibrate_refuses_a_grid_too_small_for_a_quantile() {
    let db = TempDb::new();
    ptelab()
        .args([
            "calibrate",
            "--runs",
            "3",
            "--sizes",
            "400K",
            "--folios",
            "4K",
            "--db",
            db.path(),
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "3 runs of a 1-cell grid give 3 A/A differences",
        ));
    ptelab()
        .args(["calibrate", "--runs", "2", "--db", db.path()])
        .assert()
        .code(2);
    ptelab()
        .args(["calibrate", "--span", "soon", "--db", db.path()])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "invalid value 'soon' for '--span <DURATION>': expected a duration such as 500ms",
        ));
}

/// SIGINT while `calibrate` idles between its spread-out runs: it stops at
/// once with 130, keeps the finished run, stores no calibration and leaves
/// the knobs as found.
#[test]
fn calibrate_interrupted_while_idle_keeps_its_runs() {
    if !crate::common::is_root() {
        return crate::common::skip("calibrate needs root (folio layouts are set and verified)");
    }
    let _knobs = crate::common::knob_watch();
    let db = TempDb::new();
    let child = crate::common::ptelab_std()
        .args(["calibrate", "--runs", "4", "--sizes", "400K,4M,40M"])
        .args(["--folios", "4K,64K", "--time", "0.1s", "--blocks", "2"])
        .args(["--span", "10m", "--db", db.path()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The first run (6 cells of 0.1 s) is stored within seconds; then
    // calibrate idles for 3 minutes.
    let listed = || -> usize {
        let out = ptelab()
            .args(["runs", "--db", db.path(), "--json"])
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout)
            .map(|v| {
                v["runs"].as_array().map_or(0, |r| {
                    r.iter().filter(|r| r["status"] == "complete").count()
                })
            })
            .unwrap_or(0)
    };
    let t = std::time::Instant::now();
    while listed() == 0 {
        assert!(t.elapsed().as_secs() < 60, "no finished calibration run");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("calibration interrupted after 1 of 4 runs"),
        "{stderr}"
    );
    assert!(t.elapsed().as_secs() < 60);
    assert_eq!(listed(), 1);
}

/// Every reader of a run: `show` (text, JSON, CSV), `report` (HTML,
/// Markdown, alone and against itself) and `compare`; returns compare's
/// JSON document.
fn read_everywhere(db: &TempDb, run: &str) -> Value {
    let text = stdout(&["show", run], db);
    let doc: Value = serde_json::from_str(&stdout(&["show", run, "--json"], db)).unwrap();
    let ns = &doc["cells"][0]["cell"]["per_call"];
    assert!(ns["median"].as_f64().unwrap() > 0.0, "{ns}");
    // One sample: no interval, null in JSON, n/a in text. (`--iters` may
    // also give a few samples, whose interval is [min, max].)
    if ns["samples"].as_array().unwrap().len() == 1 {
        assert!(ns["ci_low"].is_null() && ns["ci_high"].is_null(), "{ns}");
        assert!(text.contains("n/a"), "the undefined CI reads n/a:\n{text}");
    }
    stdout(&["show", run, "--csv"], db);
    for out in ["r.html", "r.md"] {
        let path = db.dir().join(out);
        let path = path.to_str().unwrap();
        stdout(&["report", run, "-o", path], db);
        stdout(&["report", run, "--vs", run, "-o", path], db);
        assert!(std::fs::metadata(path).unwrap().len() > 0);
    }
    serde_json::from_str(&stdout(&["compare", run, run, "--json"], db)).unwrap()
}

/// A cell of fewer than 5 samples (one has no confidence interval): compare
/// and report must not draw a verdict from it.
fn assert_not_judged(cmp: &Value) {
    for row in cmp["rows"].as_array().unwrap() {
        assert_eq!(row["verdict"], "not-comparable", "{row}");
        assert!(
            row["reason"].as_str().unwrap().contains("too few samples"),
            "{row}"
        );
    }
}

#[test]
fn a_one_sample_run_reads_back_everywhere() {
    // As `bench --iters` stores it: one sample, the interval null in JSON.
    let db = TempDb::new();
    let mut c = kernel_cell(40, "4K", 4096, 1706.0, vec![1706.0]);
    merge(
        &mut c,
        json!({"cell": {"ns_per_call": {"ci_low": null, "ci_high": null}}}),
    );
    import_runs(&db, &[run_doc(1, "6.18.0", 1, "complete", &[], vec![c])]);
    let text = stdout(&["show", "1"], &db);
    assert!(text.contains("n/a"), "the undefined CI reads n/a:\n{text}");
    assert_not_judged(&read_everywhere(&db, "1"));
}

#[test]
fn a_bench_iters_run_reads_back_everywhere() {
    if !crate::common::is_root() {
        return crate::common::skip("needs root for layout control");
    }
    let _knobs = crate::common::knob_watch();
    let db = TempDb::new();
    // Two iterations are one sample however slow the machine is (a larger
    // budget is split into batches of about one sample's target time, so
    // a loaded machine took several samples).
    let out = ptelab()
        .args(["bench", "mprotect-toggle", "--size", "40K", "--iters", "2"])
        .args(["--db", db.path()])
        .output()
        .unwrap();
    crate::common::assert_success(&out);
    assert_not_judged(&read_everywhere(&db, "latest"));
}

#[test]
fn a_file_that_is_not_a_ptelab_database_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, "garbage\n").unwrap();
    // Another application's SQLite database.
    let other = dir.path().join("other.db");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);")
        .unwrap();
    for (path, why) in [
        (&garbage, "SQLite cannot read it as a database"),
        (&other, "it holds another application's tables: notes"),
    ] {
        let before = std::fs::read(path).unwrap();
        let db = path.to_str().unwrap();
        for args in [
            &["runs"][..],
            &["show", "latest"],
            &["compare", "1", "2"],
            &["report", "latest", "-o", "x.html"],
        ] {
            let out = ptelab().args(args).args(["--db", db]).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            let want = format!("{db} is not a ptelab results database ({why}): pass --db");
            assert!(err.contains(&want), "{args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
        assert_eq!(std::fs::read(path).unwrap(), before, "{db} was changed");
    }
    // A ptelab database from a newer schema says so.
    let db = TempDb::new();
    import_runs(&db, &[run_doc(1, "6.18.0", 1, "complete", &[], vec![])]);
    rusqlite::Connection::open(db.path())
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    ptelab()
        .args(["runs", "--db", db.path()])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "has schema version 99, newer than this ptelab knows",
        ));
}

/// `ptelab ARGS --db DB` must be refused as bad input (exit 2) with a message
/// holding each of `want`; returns the message.
fn refused_store(args: &[&str], db: &str, want: &[&str]) -> String {
    let out = ptelab().args(args).args(["--db", db]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?} --db {db}: {err}");
    for w in want {
        assert!(err.contains(w), "{args:?} --db {db}: no '{w}' in: {err}");
    }
    err
}

const MODEL: [&str; 4] = ["model", "mprotect-toggle", "--size", "64K"];

/// The file names in `dir`, sorted.
fn names(dir: &std::path::Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

/// See: #30. A database in a directory that does not exist: every command
/// says so the same way, and creates nothing.
#[test]
fn a_database_in_a_missing_directory_is_refused_alike_by_every_command() {
    let db = TempDb::new();
    let missing = db.dir().join("no/such/dir/ptelab.db");
    let missing = missing.to_str().unwrap();
    refused_store(
        &MODEL,
        missing,
        &["no directory", "no/such/dir", "mkdir -p"],
    );
    refused_store(&["runs"], missing, &["no/such/dir/ptelab.db"]);
    assert!(!db.dir().join("no").exists());
}

/// See: #30. A damaged (truncated) file: exit 2 naming it and the remedy,
/// not SQLite's "malformed: Error code 11"; the file is left as it was.
#[test]
fn a_damaged_database_is_refused_with_a_remedy() {
    let db = TempDb::new();
    for i in 0..3 {
        ptelab()
            .args(MODEL)
            .args(["--tag", &format!("t{i}"), "--db", db.path()])
            .assert()
            .success();
    }
    let file = std::fs::read(db.path()).unwrap();
    assert!(file.len() > 3 * 4096, "{} bytes", file.len());
    let cut = &file[..file.len() / 2];
    std::fs::write(db.path(), cut).unwrap();
    for args in [&["runs"][..], &["show", "latest"], &MODEL] {
        refused_store(
            args,
            db.path(),
            &[db.path(), "is damaged", "--db", ".recover"],
        );
        assert_eq!(
            std::fs::read(db.path()).unwrap(),
            cut,
            "{args:?} wrote to it"
        );
    }
}

/// Makes a file or directory immutable (`chattr +i`: read-only even for
/// root) for as long as it lives, always undone.
struct Immutable(std::path::PathBuf);

impl Immutable {
    fn new(path: &std::path::Path) -> Option<Immutable> {
        let ok = std::process::Command::new("chattr")
            .arg("+i")
            .arg(path)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Immutable(path.to_path_buf()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .status();
    }
}

/// See: #30. A read-only database, or a new one in a read-only directory:
/// exit 2 naming the path and what to do; nothing written.
#[test]
fn a_read_only_database_or_directory_is_refused_with_a_remedy() {
    let db = TempDb::new();
    ptelab()
        .args(MODEL)
        .args(["--db", db.path()])
        .assert()
        .success();
    let before = std::fs::read(db.path()).unwrap();
    let listed = names(db.dir());
    {
        // Root writes through file modes; an immutable file stops it too.
        let Some(_ro) = Immutable::new(std::path::Path::new(db.path())) else {
            crate::common::skip(
                "chattr +i does not work here (not root, or a file system without it)",
            );
            return;
        };
        refused_store(&MODEL, db.path(), &[db.path(), "read-only", "writable"]);
    }
    assert_eq!(std::fs::read(db.path()).unwrap(), before);
    assert_eq!(names(db.dir()), listed);
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("ptelab.db");
    {
        let Some(_ro) = Immutable::new(dir.path()) else {
            crate::common::skip("chattr +i does not work on directories here");
            return;
        };
        refused_store(
            &MODEL,
            new.to_str().unwrap(),
            &[
                new.to_str().unwrap(),
                "cannot open or create",
                "its directory",
            ],
        );
    }
    assert!(names(dir.path()).is_empty());
}
