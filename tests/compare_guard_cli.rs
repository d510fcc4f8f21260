//! What `compare`, `model --predict` and `report` refuse to mix, and how a
//! kernel is named across spellings (issue 30, items 5 and 9): the two real
//! TCG guest sweeps of tests/fixtures/predict, stored as `reproduce
//! --kernels auto` stores them (`debian:6.16.12-x86_64`), beside a copy of
//! the 6.16.12 sweep relabelled as an arm64 guest's and a host run.

use serde_json::{json, Value};

use crate::common::{import_runs, ptelab, TempDb};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/predict");

fn fixture(version: &str) -> Value {
    let path = format!("{FIXTURES}/x86_64-{version}-toggle.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The run as stored by a guest of `spec` on `arch` booting Debian's `package`.
fn as_guest(mut doc: Value, spec: &str, arch: &str, package: &str) -> Value {
    let source = json!(format!("{spec} {package} 6.x-1"));
    doc["run"]["tags"] = json!([spec]);
    doc["run"]["arch"] = json!(arch);
    doc["host"]["arch"] = json!(arch);
    doc["run"]["guest"]["kernel_source"] = source.clone();
    doc["host"]["guest"]["kernel_source"] = source;
    doc
}

/// Runs 1 and 2: x86_64 guests of 6.16.12 and 6.17.8, spelt as `reproduce
/// --kernels auto` spells them; run 3: the 6.16.12 cells as an arm64
/// guest's; run 4: the 6.17.8 cells measured on the host, in time.
fn db() -> TempDb {
    let db = TempDb::new();
    let x86 = |v: &str| {
        as_guest(
            fixture(v),
            &format!("debian:{v}-x86_64"),
            "x86_64",
            &format!("linux-image-{v}+deb13-cloud-amd64"),
        )
    };
    let arm = as_guest(
        fixture("6.16.12"),
        "debian:6.16.12-arm64",
        "aarch64",
        "linux-image-6.16.12+deb13-cloud-arm64",
    );
    let mut host = fixture("6.17.8");
    host["run"].as_object_mut().unwrap().remove("guest");
    host["host"].as_object_mut().unwrap().remove("guest");
    host["run"]["tags"] = json!(["host"]);
    import_runs(&db, &[x86("6.16.12"), x86("6.17.8"), arm, host]);
    db
}

fn refused(db: &TempDb, args: &[&str]) -> String {
    let out = ptelab()
        .args(args)
        .args(["--db", db.path()])
        .assert()
        .code(2);
    String::from_utf8(out.get_output().stderr.clone()).unwrap()
}

#[test]
fn compare_refuses_another_arch_naming_what_would_compare() {
    let db = db();
    for (a, b) in [
        ("1", "3"),
        ("debian:6.16.12-x86_64", "debian:6.16.12-arm64"),
        // A set with one arm64 run in it.
        ("1,3", "2"),
    ] {
        let err = refused(&db, &["compare", a, b]);
        for needle in [
            "as x86_64 instructions in a tcg guest",
            "as arm64 instructions in a tcg guest",
            "compare runs of one arch",
            "stored runs measured as x86_64 instructions in a tcg guest: 2 \
             (debian:6.17.8-x86_64), 1 (debian:6.16.12-x86_64)",
            "runs measured as arm64 instructions in a tcg guest: 3 (debian:6.16.12-arm64)",
        ] {
            assert!(
                err.contains(needle),
                "compare {a} {b}: missing {needle:?} in\n{err}"
            );
        }
    }
    // --functions too.
    let err = refused(&db, &["compare", "1", "3", "--functions"]);
    assert!(err.contains("compare runs of one arch"), "{err}");
}

#[test]
fn compare_refuses_another_metric() {
    let db = db();
    let err = refused(&db, &["compare", "2", "host"]);
    assert!(err.contains("as x86_64 time on the host"), "{err}");
    assert!(
        err.contains("runs measured as x86_64 time on the host: 4 ("),
        "{err}"
    );
}

#[test]
fn compare_refuses_runs_with_no_cell_in_common() {
    let db = TempDb::new();
    let mut toggle = fixture("6.16.12");
    let mut other = fixture("6.17.8");
    // Keep one cell each, of different sizes.
    let keep = |doc: &mut Value, size: u64| {
        let cells = doc["cells"].as_array_mut().unwrap();
        cells.retain(|c| c["cell"]["size_bytes"] == json!(size));
        assert!(!cells.is_empty());
    };
    keep(&mut toggle, 4096);
    keep(&mut other, 40960);
    import_runs(&db, &[toggle, other]);
    let err = refused(&db, &["compare", "1", "2"]);
    assert!(err.contains("no cell in common"), "{err}");
    assert!(err.contains("A holds mprotect-toggle 4K"), "{err}");
    assert!(err.contains("B holds mprotect-toggle 40K"), "{err}");
}

#[test]
fn a_kernel_is_one_kernel_whatever_its_spelling() {
    let db = db();
    // Stored as `debian:6.16.12-x86_64`, named `debian:6.16.12`.
    let out = ptelab()
        .args(["model", "--predict", "--db", db.path(), "--arch", "x86_64"])
        .args(["--fit", "debian:6.16.12", "--kernel", "debian:6.17.8"])
        .args(["mprotect-toggle", "--folio", "4K"])
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(text.contains("debian:6.16.12 -> debian:6.17.8"), "{text}");
    // Each spelling of one kernel finds the same run; a spec without an arch
    // that names kernels of two arches asks for one.
    for spelling in ["debian:6.17.8", "debian:6.17.8-cloud-amd64", "debian:6.17"] {
        let out = ptelab()
            .args(["compare", "debian:6.16.12-x86_64", spelling, "--json"])
            .args(["--db", db.path(), "--resamples", "200"])
            .assert()
            .success();
        let doc: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
        assert_eq!(doc["b"]["id"], json!(2), "{spelling}");
    }
    let err = refused(&db, &["compare", "debian:6.16.12", "debian:6.17.8"]);
    assert!(
        err.contains(
            "debian:6.16.12 names 2 stored kernels: debian:6.16.12-arm64, debian:6.16.12-x86_64"
        ),
        "{err}"
    );
    let err = refused(&db, &["compare", "debian:6.16.11", "2"]);
    assert!(
        err.contains("no stored guest run of debian:6.16.11"),
        "{err}"
    );
    // crosscheck --stored and report take the same names.
    ptelab()
        .args([
            "crosscheck",
            "--stored",
            "--arch",
            "x86_64",
            "--kernel",
            "debian:6.17.8",
        ])
        .args(["--db", db.path()])
        .assert()
        .code(predicates::ord::ne(2));
    let html = db.dir().join("r.md");
    ptelab()
        .args([
            "report",
            "debian:6.17.8",
            "--vs",
            "debian:6.16.12-x86_64",
            "-o",
        ])
        .arg(&html)
        .args(["--db", db.path()])
        .assert()
        .success();
}
