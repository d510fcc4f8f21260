//! `ptelab calibrate --guest`: bad input refused before any boot, and one
//! real calibration (arm64, Debian's 6.16.12 from the kernel cache, two
//! boots of a small cell; arm64, the quicker TCG boot: docs/guests.md,
//! "One boot per kernel") that stores the bias, prints it, and that
//! `compare` of two guest runs of that kernel then judges against.

use std::time::Duration;

use serde_json::Value;

use crate::common::{ptelab, TempDb};

fn refused(args: &[&str], needle: &str) {
    let out = ptelab().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
}

#[test]
fn bad_guest_calibrations_are_refused_before_booting() {
    let db = TempDb::new();
    let g = [
        "calibrate",
        "--guest",
        "--kernel",
        "debian:6.16.12",
        "--db",
        db.path(),
    ];
    let with = |tail: &[&'static str]| -> Vec<&str> { g.iter().chain(tail).copied().collect() };
    refused(&["calibrate", "--guest"], "--kernel");
    refused(&with(&["--runs", "3"]), "cannot be used with");
    refused(&with(&["--boots", "1"]), "--boots");
    refused(
        &with(&["--", "doctor"]),
        "the command after -- is bench or sweep",
    );
    refused(&with(&["--accel", "kvm"]), "drop --accel kvm");
    refused(&with(&["--no-store"]), "drop --no-store");
    refused(
        &with(&["--", "bench", "mprotect-toggle", "--db", "x.db"]),
        "--db belongs to calibrate",
    );
    refused(
        &["calibrate", "--", "bench"],
        "calibrate --guest --kernel SPEC",
    );
    refused(&["calibrate", "--kernel", "debian:6.16.12"], "--guest");
}

#[test]
fn a_guest_calibration_is_stored_printed_and_used_by_compare() {
    if crate::common::cached_image("6.16.12", "arm64").is_none() {
        return;
    }
    let db = TempDb::new();
    let out = ptelab()
        .args([
            "calibrate",
            "--guest",
            "--kernel",
            "debian:6.16.12",
            "--arch",
            "arm64",
            "--boots",
            "2",
            "--jobs",
            "1",
            "--db",
            db.path(),
            "--",
            "bench",
            "mprotect-toggle",
            "--size",
            "40K",
            "--folio",
            "4K",
            "--time",
            "200ms",
        ])
        .timeout(Duration::from_secs(900))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for part in [
        "Bias of a guest figure: 2 boots per kernel",
        "== debian:6.16.12",
        "arm64 guest, instructions per call",
        "mprotect-toggle 40K 4K",
        "(guest bias 1;",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
    let bias = text
        .lines()
        .find(|l| l.starts_with("mprotect-toggle 40K 4K"))
        .and_then(|l| l.split_whitespace().last())
        .unwrap();
    assert!(bias.starts_with('±') && bias.ends_with('%'), "{text}");

    // The two boots are runs tagged calibrate-guest, not the kernel's.
    let runs = ptelab()
        .args(["runs", "--json", "--db", db.path()])
        .output()
        .unwrap();
    let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
    let runs = runs["runs"].as_array().or(runs.as_array()).unwrap().clone();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for r in &runs {
        let tags = r["tags"].as_array().unwrap();
        assert!(tags.iter().any(|t| t == "calibrate-guest"), "{r}");
        assert!(!tags.iter().any(|t| t == "debian:6.16.12"), "{r}");
    }

    // compare reads the stored bias back for guest runs of that kernel.
    let cmp = ptelab()
        .args(["compare", "1", "2", "--json", "--db", db.path()])
        .output()
        .unwrap();
    let view: Value = serde_json::from_slice(&cmp.stdout).unwrap();
    let g = view["method"]["guest_bias"].as_str().unwrap();
    assert!(
        g.contains("mprotect-toggle 40K 4K: ±")
            && g.contains("calibrate --guest on debian:6.16.12"),
        "{g}"
    );
    // The two boots differ by the bias itself (two boots: it is their
    // change), so no direction can be told.
    let row = &view["rows"][0];
    assert!(row["guest_bias"].as_str().is_some(), "{view}");
    assert!(
        ["within-guest-bias", "no-change"].contains(&row["verdict"].as_str().unwrap()),
        "{view}"
    );
}
