//! `vm --profile`: the mechanism counters of real guests (QEMU TCG with
//! ptelab's plugin), on the kernels each figure is about, stored, shown and
//! compared per function; and its bad input refused before any boot.

use std::time::Duration;

use serde_json::Value;

use crate::common::{assert_success, cached_image, ptelab, TempDb};

/// Debian's `old` and `new` of `arch` booted with `--profile`, one bench
/// each, stored in `db` tagged by kernel: the kernel names and the stored
/// runs' cells, one list per kernel; None (having said why) when they are
/// not cached.
fn profiled(
    db: &TempDb,
    arch: &str,
    (old, new): (&str, &str),
    bench: &[&str],
) -> Option<([String; 2], Vec<Vec<Value>>)> {
    cached_image(old, arch)?;
    cached_image(new, arch)?;
    let kernels = [format!("debian:{old}"), format!("debian:{new}")];
    let out = ptelab()
        .args([
            "vm",
            "--kernel",
            &kernels.join(","),
            "--arch",
            arch,
            "--profile",
        ])
        .args(["--db", db.path(), "--", "bench"])
        .args(bench)
        .args(["--blocks", "3"])
        .timeout(Duration::from_secs(900))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let runs = kernels
        .iter()
        .map(|k| {
            let show = ptelab()
                .args(["show", k, "--json", "--db", db.path()])
                .output()
                .unwrap();
            let run: Value = serde_json::from_slice(&show.stdout).unwrap();
            run["cells"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["cell"].clone())
                .collect()
        })
        .collect();
    Some((kernels, runs))
}

/// `crosscheck --stored` over `db`: its text, every row having matched.
fn crosscheck_stored(db: &TempDb) -> String {
    let cc = ptelab()
        .args(["crosscheck", "--stored", "--db", db.path()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&cc.stdout).into_owned();
    assert!(
        cc.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    text
}

fn phase<'a>(cells: &'a [Value], name: &str) -> &'a Value {
    cells
        .iter()
        .find(|c| c["phase"] == name)
        .unwrap_or_else(|| panic!("no phase {name}: {cells:?}"))
}

/// Entries of `function` per call, 0 when it did not run.
fn entries(cell: &Value, function: &str) -> f64 {
    cell["profile"]["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == function)
        .map_or(0.0, |f| f["entries"].as_f64().unwrap())
}

/// Seed 001's mechanism: from 6.17 change_pte_range looks up the folio of
/// every PTE (vm_normal_page) even on the PROT_NONE call, which 6.16 did
/// not do for an order-0 anonymous page.
#[test]
fn x86_folio_lookups_per_pte_go_from_0_to_1() {
    let db = TempDb::new();
    let bench = ["prot-transition", "--size", "400K", "--folio", "4K"];
    let Some((kernels, runs)) = profiled(&db, "x86_64", ("6.16.12", "6.17.13"), &bench) else {
        return;
    };
    let names: Vec<&str> = kernels.iter().map(String::as_str).collect();
    let old = names[0];
    let ptes = 100.0;
    let per_pte: Vec<f64> = runs
        .iter()
        .map(|cells| entries(phase(cells, "rw-to-none"), "vm_normal_page") / ptes)
        .collect();
    assert_eq!(
        per_pte,
        [0.0, 1.0],
        "vm_normal_page entries per PTE, PROT_NONE call"
    );
    // The counted instructions are the cell's own figure, less the clock
    // reads the windows leave out.
    for cells in &runs {
        let c = phase(cells, "rw-to-none");
        let p = &c["profile"];
        let counted =
            p["kernel_instructions"].as_f64().unwrap() + p["user_instructions"].as_f64().unwrap();
        let figure = c["per_call"]["median"].as_f64().unwrap();
        assert!(
            counted <= figure * 1.001 && counted > figure * 0.8,
            "{counted} vs {figure}"
        );
        assert!(p["symbols"].as_str().unwrap().contains("kallsyms"), "{p}");
        assert!(p["windows"].as_u64().unwrap() >= 3, "{p}");
    }

    // show prints the mechanism; compare --functions the per-function change.
    let show = ptelab()
        .args(["show", names[1], "--db", db.path()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(text.contains("mechanism (ptelab's QEMU plugin"), "{text}");
    assert!(text.contains("vm_normal_page"), "{text}");
    let cmp = ptelab()
        .args([
            "compare",
            names[0],
            names[1],
            "--functions",
            "--db",
            db.path(),
        ])
        .args(["--function", "vm_normal_page", "--json"])
        .output()
        .unwrap();
    assert!(
        cmp.status.success(),
        "{}",
        String::from_utf8_lossy(&cmp.stderr)
    );
    let view: Value = serde_json::from_slice(&cmp.stdout).unwrap();
    let cells = view["comparison"]["cells"].as_array().unwrap();
    let down = cells
        .iter()
        .find(|c| c["cell"].as_str().unwrap().contains("rw-to-none"))
        .unwrap();
    let row = &down["functions"][0];
    assert_eq!(row["name"], "vm_normal_page");
    assert_eq!(row["entries_a"], Value::Null, "did not run on {old}");
    assert_eq!(row["entries_b"], 100.0);
    // A function that ran nowhere is refused with the nearest names.
    let bad = ptelab()
        .args([
            "compare",
            names[0],
            names[1],
            "--functions",
            "--db",
            db.path(),
        ])
        .args(["--function", "vm_normal_folio"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no kernel function 'vm_normal_folio'"),
        "{err}"
    );
    assert!(
        err.contains("vm_normal_page"),
        "nearest names listed: {err}"
    );

    // The model held to both guests (issue 18's mechanism rows): every
    // out-of-line function it counts, and the INVLPGs, match per call.
    let text = crosscheck_stored(&db);
    for k in &kernels {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("{k} x86_64:")))
            .unwrap_or_else(|| panic!("{text}"));
        let counts: Vec<&str> = line
            .split_whitespace()
            .filter(|w| w.parse::<u32>().is_ok())
            .collect();
        assert_eq!(counts.len(), 2, "{line}");
        assert_eq!(counts[0], counts[1], "{line}");
    }
}

/// `ptelab vm --kernel debian:6.16.12 --arch arm64 --profile`, to which a
/// test adds its options and command.
fn arm64_6_16_profiled() -> assert_cmd::Command {
    let mut c = ptelab();
    c.args([
        "vm",
        "--kernel",
        "debian:6.16.12",
        "--arch",
        "arm64",
        "--profile",
    ]);
    c
}

/// arm64 TLBIs of an order-0 flush, held to the model: Debian's arm64
/// kernels run with LPA2 under `-cpu max`, where a flush issues one TLBI per
/// page up to the first 64K boundary before its range TLBIs, so a region at
/// a random address would count 0 to 15 more invalidations per call than
/// one on a PMD boundary, which is where ptelab maps it.
#[test]
fn arm64_order0_flush_rows_match_the_model() {
    let db = TempDb::new();
    let Some(_) = cached_image("6.16.12", "arm64") else {
        return;
    };
    let out = arm64_6_16_profiled()
        .args(["--db", db.path(), "--", "sweep", "mprotect-toggle"])
        .args(["--sizes", "40K,400K", "--folios", "4K", "--time", "100ms"])
        .args(["--blocks", "1"])
        .timeout(Duration::from_secs(900))
        .output()
        .unwrap();
    assert_success(&out);
    let text = crosscheck_stored(&db);
    assert!(text.contains("debian:6.16.12 arm64:"), "{text}");
    let run: Value = serde_json::from_slice(
        &ptelab()
            .args(["show", "1", "--json", "--db", db.path()])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    for c in run["cells"].as_array().unwrap() {
        let p = &c["cell"]["profile"];
        let tlb = p["tlb"].as_object().unwrap();
        assert!(
            tlb.get("tlbi-page").is_none_or(|v| v.as_f64() == Some(0.0)),
            "no single-page TLBI on a PMD-aligned region: {tlb:?}"
        );
        // Each toggle call is counted as its direction (as many calls
        // each): the directions' TLBIs and kernel instructions average to
        // the cell's. (On 6.16.12 arm64 both directions flush.)
        let parts = p["parts"].as_array().expect("a toggle profile has parts");
        let names: Vec<&str> = parts.iter().map(|x| x["phase"].as_str().unwrap()).collect();
        assert_eq!(names, ["none-to-rw", "rw-to-none"]);
        let inv = |x: &Value| {
            x["tlb"]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| k.starts_with("tlbi"))
                .map(|(_, v)| v.as_f64().unwrap())
                .sum::<f64>()
        };
        assert_eq!((inv(&parts[0]) + inv(&parts[1])) / 2.0, inv(p));
        assert!(inv(&parts[1]) > 0.0, "a PROT_NONE call invalidates");
        let k = |x: &Value| x["kernel_instructions"].as_f64().unwrap();
        let mean = (k(&parts[0]) + k(&parts[1])) / 2.0;
        assert!(
            (mean - k(p)).abs() <= 0.02 * k(p),
            "{mean} against {}",
            k(p)
        );
    }
}

/// `vm --profile -- crosscheck` on arm64, which has no tlb:tlb_flush
/// tracepoint: each flush row becomes the TLBIs the plugin counted in that
/// call's window against the model's, and none is left "not observable".
/// The mid-folio scenario starts 4 pages into a 64K block, so LPA2's
/// single-page TLBIs up to the boundary are in it.
#[test]
fn arm64_crosscheck_counts_every_flush_row() {
    let Some(_) = cached_image("6.16.12", "arm64") else {
        return;
    };
    let out = arm64_6_16_profiled()
        .args(["--json", "--", "crosscheck", "mprotect-toggle"])
        .args(["--sizes", "40K", "--folios", "4K"])
        .timeout(Duration::from_secs(900))
        .output()
        .unwrap();
    assert_success(&out);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = doc["guests"][0]["output"]["rows"]
        .as_array()
        .unwrap()
        .clone();
    let flush: Vec<&Value> = rows
        .iter()
        .filter(|r| r["observable"].as_str().unwrap().starts_with("tlb"))
        .collect();
    assert!(flush.len() >= 6, "{rows:?}");
    for r in &flush {
        assert_eq!(r["observable"], "tlb invalidations", "{r}");
        assert_eq!(r["match"], true, "{r}");
        assert!(
            r.get("unobservable").is_none() && r.get("window").is_none(),
            "{r}"
        );
    }
    assert!(
        flush
            .iter()
            .any(|r| r["kernel"].as_str().unwrap().contains("tlbi-page 12")),
        "mid-folio: 12 single-page TLBIs up to the 64K boundary: {flush:?}"
    );
}

/// Seed 003's mechanism: arm64 6.19 no longer flushes the TLB when an
/// mprotect makes a PROT_NONE page accessible (pte_needs_flush).
#[test]
fn arm64_tlbi_per_none_to_rw_call_goes_from_1_to_0() {
    let db = TempDb::new();
    let bench = ["prot-transition", "--size", "4K", "--folio", "4K"];
    let Some((_, runs)) = profiled(&db, "arm64", ("6.18.15", "6.19.6"), &bench) else {
        return;
    };
    let tlbi = |cell: &Value| -> f64 {
        let tlb = cell["profile"]["tlb"].as_object().unwrap();
        tlb.iter()
            .filter(|(k, _)| k.starts_with("tlbi"))
            .map(|(_, v)| v.as_f64().unwrap())
            .sum()
    };
    let up: Vec<f64> = runs.iter().map(|c| tlbi(phase(c, "none-to-rw"))).collect();
    assert_eq!(up, [1.0, 0.0], "TLBIs per NONE->RW call");
    // The RW->NONE call still flushes on both.
    let down: Vec<f64> = runs.iter().map(|c| tlbi(phase(c, "rw-to-none"))).collect();
    assert_eq!(down, [1.0, 1.0], "TLBIs per RW->NONE call");
}

fn refused(args: &[&str], path: Option<&std::path::Path>, needle: &str) {
    let mut cmd = ptelab();
    cmd.args(args);
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
}

#[test]
fn a_qemu_without_plugins_is_refused_naming_the_remedy() {
    if cached_image("6.17.13", "x86_64").is_none() {
        return;
    }
    // A "QEMU" built without plugins: it answers --version, and its -help
    // lists no -plugin option.
    let dir = tempfile::tempdir().unwrap();
    crate::common::script(
        dir.path(),
        "qemu-system-x86_64",
        "case \"$1\" in --version) echo 'QEMU emulator version 7.2.0';; \
         *) echo '-accel tcg';; esac\n",
    );
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap()
    );
    refused(
        &[
            "vm",
            "--kernel",
            "debian:6.17.13",
            "--arch",
            "x86_64",
            "--profile",
            "--no-store",
            "--",
            "bench",
            "mprotect-toggle",
            "--size",
            "4K",
            "--folio",
            "4K",
        ],
        Some(std::path::Path::new(&path)),
        "built without TCG plugin support",
    );
}
