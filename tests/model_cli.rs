//! `ptelab model`: the table, the JSON schema, --list-strategies, and every
//! bad input (exit 2, one line saying what is accepted).

use serde_json::Value;

use crate::common::ptelab;

fn model(args: &[&str]) -> assert_cmd::assert::Assert {
    ptelab().arg("model").args(args).assert()
}

#[test]
fn model_table_shows_strategies_side_by_side() {
    let out = model(&[
        "mprotect-toggle",
        "--arch",
        "arm64",
        "--folio",
        "64K",
        "--size",
        "64K",
    ])
    .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    for needle in [
        "per mm call",
        "v6.16",
        "v6.17",
        "v6.19",
        "v7.1",
        "pte_xchg",
        "tlbi_sync",
        "mprotect(PROT_NONE):",
        "mprotect(PROT_READ|PROT_WRITE):",
        "same page-table primitives",
        "ratio",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn model_json_schema() {
    let out = model(&[
        "mprotect-ro-rw",
        "--arch",
        "x86_64",
        "--folio",
        "64K",
        "--size",
        "2M",
        "--strategy",
        "all",
        "--json",
    ])
    .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v["schema"], "ptelab/model/v1");
    assert_eq!(v["workload"], "mprotect-ro-rw");
    assert_eq!(v["arch"], "x86_64");
    assert_eq!(v["pages"], 512);
    assert_eq!(v["calls_per_iteration"], 2);
    let s = v["strategies"].as_array().unwrap();
    let names: Vec<&str> = s.iter().map(|x| x["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["v6.16", "v6.17", "v6.18", "v6.19", "v7.0", "v7.1", "v7.2", "v7.3"]
    );
    assert_eq!(s[0]["kernel"], "v6.12 … v6.16");
    // Per mprotect call (2 calls per iteration): 512 PTEs each.
    assert_eq!(s[0]["counters"]["pte_xchg"].as_f64(), Some(512.0));
    assert_eq!(s[1]["counters"]["batches"].as_f64(), Some(32.0));
    assert_eq!(s[1]["ratio_vs_first"]["pte_xchg"].as_f64(), Some(1.0));
    // x86 flush list per call: one full flush each (512 > 33 pages).
    let flushes = s[0]["calls"][0]["flushes"].as_array().unwrap();
    assert_eq!(flushes.len(), 1);
    assert_eq!(flushes[0]["trace_pages"], -1);
    assert_eq!(s[0]["outside"]["write_faults"], 0);
    // Out-of-line function entries per call: x86 paravirt per PTE.
    assert_eq!(s[0]["functions"]["native_set_pte"].as_f64(), Some(512.0));
    assert_eq!(s[0]["calls"][0]["functions"]["native_set_pte"], 512);
}

#[test]
fn model_lists_strategies() {
    let out = model(&["--list-strategies"]).success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(
        text.contains("v6.16")
            && text.contains("v6.17")
            && text.contains("v6.19")
            && text.contains("Falcato")
    );
    let out = model(&["--list-strategies", "--json"]).success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v["strategies"].as_array().unwrap().len(), 8);
}

fn bad(args: &[&str], accepted: &str) {
    let out = model(args).code(2);
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    // One line saying what is wrong; a value clap refuses at the flag may put
    // its accepted values on a line of their own, and clap adds a pointer to
    // --help.
    let said: Vec<&str> = err
        .lines()
        .take_while(|l| !l.starts_with("For more information"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    let clap_list = said.len() == 2 && said[1].trim_start().starts_with("[possible values:");
    assert!(said.len() == 1 || clap_list, "{err}");
    assert!(err.contains(accepted), "expected {accepted:?} in {err}");
}

#[test]
fn model_bad_arch() {
    bad(&["mprotect-toggle", "--arch", "riscv64"], "x86_64, arm64");
}

#[test]
fn model_bad_strategy() {
    bad(&["mprotect-toggle", "--strategy", "v5.10"], "per-pte");
}

#[test]
fn model_bad_granule() {
    bad(
        &["mprotect-toggle", "--arch", "arm64", "--granule", "8K"],
        "4K, 16K, 64K",
    );
    bad(
        &["mprotect-toggle", "--arch", "x86_64", "--granule", "16K"],
        "4K",
    );
}

#[test]
fn model_bad_folio() {
    bad(&["mprotect-toggle", "--folio", "48K"], "4K, 16K, 32K, 64K");
    bad(
        &[
            "mprotect-toggle",
            "--arch",
            "arm64",
            "--granule",
            "16K",
            "--folio",
            "4K",
        ],
        "at least 16K",
    );
}

#[test]
fn model_offset_past_the_folio() {
    bad(
        &["mprotect-toggle", "--folio", "64K", "--offset", "16"],
        "0..15",
    );
}

#[test]
fn model_size_not_a_page_multiple() {
    bad(&["mprotect-toggle", "--size", "5000"], "multiples of 4K");
    bad(
        &[
            "mprotect-toggle",
            "--arch",
            "arm64",
            "--granule",
            "64K",
            "--folio",
            "64K",
            "--size",
            "4K",
        ],
        "64K",
    );
}

#[test]
fn model_reclaim_arm64_batched_does_c_times_fewer_cas() {
    let out = model(&[
        "reclaim",
        "--arch",
        "arm64",
        "--folio",
        "64K",
        "--size",
        "1M",
        "--strategy",
        "per-pte,smallfast",
        "--json",
        "--no-store",
    ])
    .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let s = v["strategies"].as_array().unwrap();
    let clears = |i: usize| s[i]["counters"]["young_clears"].as_f64().unwrap();
    let flushes = |i: usize| s[i]["counters"]["young_flushes"].as_f64().unwrap();
    // 16 folios: 256 CAS per folio before 2026, 16 with the batched series.
    assert_eq!((clears(0), clears(1)), (16.0 * 256.0, 16.0 * 16.0));
    assert_eq!((flushes(0), flushes(1)), (16.0, 16.0));
}

#[test]
fn list_strategies_names_the_reclaim_behaviour() {
    let out = model(&["--list-strategies"]).success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(text.contains("clear_flush_young_ptes"), "{text}");
}

/// `--db`, `--tag` and `--no-store` are one group on every command that
/// stores: a model run carries its tags like a bench run.
#[test]
fn model_runs_take_tags_like_every_stored_run() {
    let db = crate::common::TempDb::new();
    ptelab()
        .args(["model", "mprotect-toggle", "--size", "64K"])
        .args(["--tag", "m1", "--tag", "x86", "--db", db.path()])
        .assert()
        .success();
    let out = ptelab()
        .args(["runs", "--json", "--db", db.path()])
        .output()
        .unwrap();
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs["runs"][0]["tags"], serde_json::json!(["m1", "x86"]));
    let out = model(&["mprotect-toggle", "--tag", "m1", "--no-store"]).code(2);
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(err.contains("cannot be used with '--no-store'"), "{err}");
}
