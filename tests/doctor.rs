//! `ptelab doctor`: the table, the JSON schema, exit 0, no knob changed.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::common::{is_root, knob_snapshot, ptelab};

fn doctor_json() -> Value {
    let out = ptelab().args(["doctor", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("doctor --json prints one JSON document")
}

/// The JSON with every machine-specific value replaced by its type.
fn shape(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(a) => Value::Array(a.first().map(shape).into_iter().collect()),
        Value::String(_) => Value::String("<string>".into()),
        Value::Number(_) => Value::String("<number>".into()),
        Value::Bool(_) => Value::String("<bool>".into()),
        Value::Null => Value::Null,
    }
}

#[test]
fn json_schema() {
    let mut doc = doctor_json();
    assert_eq!(doc["schema"], "ptelab/doctor/v1");
    let checks = doc["checks"].as_array().unwrap();
    let names: Vec<&str> = checks.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for c in checks {
        let status = c["status"].as_str().unwrap();
        assert!(["ok", "missing", "warn", "info"].contains(&status), "{c}");
        assert!(c["value"].is_string() && c["impact"].is_string(), "{c}");
    }
    for want in [
        "kernel",
        "arch",
        "page_size",
        "root",
        "pagemap_pfn",
        "kpageflags",
        "tlb_flush_tracepoint",
        "kvm",
        "cpu",
        "cores",
        "memory",
        "swap",
        "memcg",
        "damon",
        "mglru",
        "virtualization",
    ] {
        assert!(names.contains(&want), "no check {want}: {names:?}");
    }
    // Every THP knob the host reports has its own line.
    let knobs: BTreeMap<String, String> =
        serde_json::from_value(doc["host"]["thp_knobs"].clone()).unwrap();
    for (k, v) in &knobs {
        let c = checks
            .iter()
            .find(|c| c["name"] == format!("thp:{k}"))
            .unwrap_or_else(|| panic!("no line for {k}"));
        assert_eq!(c["value"], v.as_str());
    }
    // Machine-specific parts redacted; the structure is the contract.
    doc["checks"] = Value::Array(vec![checks[0].clone()]);
    doc["host"]["thp_knobs"] = Value::Object(Default::default());
    doc["host"]["paravirt"] = Value::Null;
    doc["host"]["git_revision"] = Value::Null;
    insta::assert_json_snapshot!(shape(&doc), @r#"
    {
      "checks": [
        {
          "impact": "<string>",
          "name": "<string>",
          "status": "<string>",
          "value": "<string>"
        }
      ],
      "host": {
        "arch": "<string>",
        "cores": "<number>",
        "cpu_model": "<string>",
        "git_revision": null,
        "is_root": "<bool>",
        "kernel_cmdline": "<string>",
        "kernel_release": "<string>",
        "kernel_version": "<string>",
        "machine_id": "<string>",
        "mem_available_bytes": "<number>",
        "mem_total_bytes": "<number>",
        "page_size": "<number>",
        "paravirt": null,
        "thp_knobs": {},
        "tool_version": "<string>"
      },
      "schema": "<string>"
    }
    "#);
}

#[test]
fn table_lists_checks_with_status() {
    let out = ptelab().arg("doctor").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["check", "status", "value"]);
    let doc = doctor_json();
    for c in doc["checks"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no table line for {name}:\n{text}"));
        assert_eq!(
            line.split_whitespace().nth(1),
            c["status"].as_str(),
            "{line}"
        );
    }
    let root_line = text.lines().find(|l| l.starts_with("root ")).unwrap();
    if is_root() {
        assert!(root_line.contains(" ok "), "{root_line}");
    } else {
        assert!(text.contains(
            "no root: layout control and verification unavailable; bench needs --allow-unverified"
        ));
    }
}

#[test]
fn doctor_changes_no_knob_and_leaves_tracefs_as_found() {
    let mounts = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(" - tracefs "))
            .count()
    };
    let _knobs = crate::common::knob_watch();
    // Other tests' ptelab processes mount tracefs for a moment to read the
    // tracepoint's id and format: the baseline is the fewest mounts seen
    // over a moment, and afterwards the count must settle back to it (a
    // mount doctor leaked would stay).
    let settled = || {
        (0..6)
            .map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                mounts()
            })
            .min()
            .unwrap()
    };
    let (knobs, tracefs) = (knob_snapshot(), settled());
    ptelab().arg("doctor").assert().success();
    assert_eq!(knob_snapshot(), knobs);
    let t = std::time::Instant::now();
    while mounts() > tracefs && t.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(mounts() <= tracefs, "doctor left a tracefs mount behind");
}

#[test]
fn closed_stdout_is_not_an_error() {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("ptelab"))
        .args(["doctor", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
