//! `ptelab report` on a database seeded through `runs --import` with run
//! documents built here (a v6.16-like baseline and a v6.17-like run with
//! model cells): HTML and Markdown files, the `--json` view model, usage
//! errors, and the HTML rendered by a real headless Chromium.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{import_runs, kernel_cell, ptelab, skip, TempDb};

const CHROMIUM: &str = "/usr/bin/chromium";

fn samples(median: f64, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| median * (1.0 + ((i * 7) % 11) as f64 / 1000.0 - 0.005))
        .collect()
}

fn cell(size_kib: u64, folio: &str, folio_bytes: u64, median: f64) -> Value {
    kernel_cell(size_kib, folio, folio_bytes, median, samples(median, 20))
}

fn model_cell(size_kib: u64, strategy: &str, folio_lookups: f64) -> Value {
    json!({
        "backend": "model",
        "cell": {
            "workload": "mprotect-toggle",
            "size_bytes": size_kib * 1024,
            "folio": "4K",
            "arch": "x86_64",
            "strategy": strategy,
            "params": { "granule": "4K", "contpte": false },
            "counters": {
                "pte_loads": (size_kib / 4) as f64,
                "folio_lookups": folio_lookups,
                "tlb_flush_calls": 0.5,
            },
        }
    })
}

fn run_doc(id: i64, kernel: &str, cells: Vec<Value>) -> Value {
    json!({
        "schema": "ptelab/run/v1",
        "run": {
            "id": id,
            "kind": "sweep",
            "command": "ptelab sweep mprotect-toggle --sizes 4K,40K,400K,4000K --folios 4K,64K",
            "started_at": format!("2026-05-0{id}T10:00:00Z"),
            "finished_at": format!("2026-05-0{id}T10:05:00Z"),
            "status": "complete",
            "kernel_release": kernel,
            "arch": "x86_64",
            "machine_id": "0123456789abcdef0123456789abcdef",
            "tool_version": "0.1.0",
            "git_revision": "abc1234",
            "tags": [format!("v{kernel}")],
            "cells": cells.len(),
        },
        "host": {
            "kernel_release": kernel,
            "kernel_version": "#1 SMP PREEMPT_DYNAMIC",
            "kernel_cmdline": "console=ttyS0 quiet transparent_hugepage=madvise",
            "arch": "x86_64",
            "page_size": 4096,
            "cpu_model": "AMD EPYC (test)",
            "cores": 2,
            "mem_total_bytes": 25_769_803_776u64,
            "paravirt": null,
            "thp_knobs": { "enabled": "madvise", "hugepages-64kB/enabled": "always" },
            "machine_id": "0123456789abcdef0123456789abcdef",
            "tool_version": "0.1.0",
            "git_revision": "abc1234",
        },
        "cells": cells,
    })
}

/// Run 1 (v6.16-like) and run 2 (v6.17-like, with model cells).
fn seeded_db() -> TempDb {
    let db = TempDb::new();
    let base = run_doc(
        1,
        "6.16.0",
        vec![
            cell(4, "4K", 4096, 1713.0),
            cell(40, "4K", 4096, 2071.0),
            cell(400, "4K", 4096, 3453.0),
            cell(4000, "4K", 4096, 18804.0),
            cell(4096, "64K", 65536, 9000.0),
        ],
    );
    let run = run_doc(
        2,
        "6.17.0-rc1",
        vec![
            cell(4, "4K", 4096, 1775.0),
            cell(40, "4K", 4096, 2362.0),
            cell(400, "4K", 4096, 5993.0),
            cell(4000, "4K", 4096, 44116.0),
            cell(4096, "64K", 65536, 8950.0),
            model_cell(400, "per-pte", 50.0),
            model_cell(400, "batched", 100.0),
        ],
    );
    import_runs(&db, &[base, run]);
    db
}

/// `ptelab report 2 --vs 1 -o DIR/name`; returns the written file's text.
fn report(db: &TempDb, name: &str) -> (PathBuf, String) {
    let out = db.dir().join(name);
    ptelab()
        .args(["report", "2", "--vs", "1", "-o"])
        .arg(&out)
        .args(["--db", db.path()])
        .assert()
        .success();
    let text = std::fs::read_to_string(&out).unwrap();
    (out, text)
}

#[test]
fn html_report_is_one_self_contained_file() {
    let db = seeded_db();
    let (_, html) = report(&db, "report.html");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<svg ").count(), 3, "ns/call, ns/page, ratio");
    for absent in ["<script", "<link", "<img", "@import", "https://"] {
        assert!(!html.contains(absent), "found {absent}");
    }
    for want in [
        "ns per call vs region size",
        "ns per page vs region size",
        "run 2 / baseline",
        "REGRESSION",
        "Layout evidence",
        "console=ttyS0 quiet transparent_hugepage=madvise",
        "hugepages-64kB/enabled=always",
        "0.1.0 (abc1234)",
        "folio_lookups",
        ">4K</text>",
        ">1 µs</text>",
    ] {
        assert!(html.contains(want), "missing {want}");
    }
}

#[test]
fn markdown_report_has_seed_blocks_and_ratio_tables() {
    let db = seeded_db();
    let (_, md) = report(&db, "report.md");
    assert!(md.starts_with("# ptelab report: run 2"));
    assert!(md.contains("size_kib | nsec_per_call\n4 | 1775\n40 | 2362\n400 | 5993\n"));
    assert!(md.contains("| size_kib | base nsec | run nsec | ratio |"));
    assert!(md.contains("REGRESSION"));
    assert!(md.contains("| folio_lookups |      50 |     100 |"));
    assert!(!md.contains("<svg"));
}

/// A run tagged with markup: both reports print the tag as text, and the
/// HTML page does not substitute a `{{nav}}` that came from the data.
#[test]
fn tags_and_commands_are_text_in_both_reports() {
    let db = TempDb::new();
    let evil = "<img src=x onerror=alert(1)>";
    let mut base = run_doc(1, "6.16.0", vec![cell(4, "4K", 4096, 1713.0)]);
    let mut run = run_doc(2, "6.17.0", vec![cell(4, "4K", 4096, 1775.0)]);
    run["run"]["tags"] = json!([evil, "{{nav}}"]);
    run["run"]["command"] = json!("ptelab bench `x` <script>alert(1)</script> {{body}}");
    base["run"]["tags"] = json!(["base"]);
    import_runs(&db, &[base, run]);

    let (_, md) = report(&db, "report.md");
    assert!(
        md.contains("- tags:    \\<img src=x onerror=alert(1)>, {{nav}}"),
        "{md}"
    );
    assert!(md.contains("- command: `` ptelab bench `x` <script>alert(1)</script> {{body}} ``"));
    assert!(!md.contains("\n<img") && !md.contains(" <img"));

    let (_, html) = report(&db, "report.html");
    for absent in ["<img", "<script"] {
        assert!(!html.contains(absent), "found {absent}");
    }
    assert!(html.contains("{{nav}}") && html.contains("{{body}}"));
    assert_eq!(html.matches("<nav>").count(), 1);
    assert_eq!(html.matches("href=\"#env\"").count(), 1);
}

#[test]
fn json_prints_the_view_model() {
    let db = seeded_db();
    let out = db.dir().join("r.md");
    let assert = ptelab()
        .args(["report", "latest", "--json", "-o"])
        .arg(&out)
        .args(["--db", db.path()])
        .assert()
        .success();
    let doc: Value = serde_json::from_slice(&assert.get_output().stdout).unwrap();
    assert_eq!(doc["schema"], "ptelab/report/v1");
    assert_eq!(doc["runs"][0]["id"], 2);
    assert_eq!(doc["comparison"], Value::Null);
    assert_eq!(doc["workloads"][0]["plots"].as_array().unwrap().len(), 2);
    assert_eq!(
        doc["models"][0]["strategies"],
        json!(["per-pte", "batched"])
    );
}

#[test]
fn bad_extension_and_unknown_run_exit_2() {
    let db = seeded_db();
    let bad = ptelab()
        .args(["report", "2", "-o"])
        .arg(db.dir().join("report.pdf"))
        .args(["--db", db.path()])
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&bad.get_output().stderr).to_string();
    assert!(err.contains("*.html") && err.contains("*.md"), "{err}");
    assert!(!db.dir().join("report.pdf").exists());
    ptelab()
        .args(["report", "9", "-o"])
        .arg(db.dir().join("r.html"))
        .args(["--db", db.path()])
        .assert()
        .code(2);
    ptelab()
        .args(["report", "2", "--model", "1", "-o"])
        .arg(db.dir().join("r.html"))
        .args(["--db", db.path()])
        .assert()
        .code(2);
}

/// Chromium with everything that could reach the network or a profile off.
fn chromium(profile: &Path) -> Command {
    let mut c = Command::new(CHROMIUM);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// Run `cmd` with a deadline; returns (stdout, stderr).
fn run_with_deadline(cmd: &mut Command, limit: Duration) -> (String, String) {
    let out = assert_cmd::Command::from_std(std::mem::replace(cmd, Command::new("true")))
        .timeout(limit)
        .output()
        .expect("chromium runs");
    assert!(out.status.success(), "chromium failed: {out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn html_report_renders_in_headless_chromium() {
    if !Path::new(CHROMIUM).exists() {
        skip("no /usr/bin/chromium (CI installs the `chromium` package)");
        return;
    }
    let db = seeded_db();
    let (html, _) = report(&db, "report.html");
    let url = format!("file://{}", html.display());
    let profile = tempfile::tempdir().unwrap();
    let png_path = db.dir().join("report.png");

    let (_, log) = run_with_deadline(
        chromium(profile.path())
            .arg(format!("--screenshot={}", png_path.display()))
            .arg("--window-size=1200,2000")
            .arg(&url),
        Duration::from_secs(90),
    );
    let console: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Uncaught") || l.contains("CONSOLE"))
        .collect();
    assert!(console.is_empty(), "console errors: {console:?}");

    // The screenshot decodes and is not blank: many distinct colours, and
    // a good share of the pixels are not the white background.
    let decoder = png::Decoder::new(std::fs::File::open(&png_path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1200, 2000));
    let px = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(px).collect();
    let distinct: std::collections::HashSet<&[u8]> = pixels.iter().copied().collect();
    let inked = pixels.iter().filter(|p| p[..3] != [255, 255, 255]).count();
    assert!(distinct.len() > 50, "{} distinct colours", distinct.len());
    assert!(
        inked * 100 > pixels.len(),
        "only {inked} of {} pixels not white",
        pixels.len()
    );

    // The DOM Chromium built holds the inline plots.
    let (dom, _) = run_with_deadline(
        chromium(profile.path()).arg("--dump-dom").arg(&url),
        Duration::from_secs(90),
    );
    assert_eq!(dom.matches("<svg ").count(), 3);
    assert!(dom.contains("ratio of medians"));
}
