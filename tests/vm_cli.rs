//! `ptelab vm`: bad input refused before any boot, and one real guest run
//! (arm64, Debian's 6.17.13 from the kernel cache) stored with its
//! provenance, plus SIGINT during a guest leaving no QEMU behind. The
//! guests whose arch is not the point are arm64, the quicker TCG boot
//! (docs/guests.md, "One boot per kernel").

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{ptelab, ptelab_std, TempDb};

const KERNEL: &str = "debian:6.17.13";
/// The arch of the guests that are not about an arch.
const ARCH: &str = "arm64";

fn refused(args: &[&str], needle: &str) {
    let out = ptelab().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn bad_input_is_refused_before_booting() {
    let k = [
        "vm",
        "--kernel",
        KERNEL,
        "--arch",
        "x86_64",
        "--no-store",
        "--",
    ];
    let with = |tail: &[&'static str]| -> Vec<&str> { k.iter().chain(tail).copied().collect() };
    refused(
        &with(&["reproduce", "--quick"]),
        "accepted commands after -- are bench, sweep, crosscheck, doctor, model",
    );
    refused(
        &with(&["bench", "mprotect-toggle", "--db", "x.db"]),
        "--db belongs to vm",
    );
    refused(
        &with(&["bench", "mprotect-toggle", "--size", "4Q"]),
        "in the guest command",
    );
    let mut small = with(&["bench", "mprotect-toggle", "--size", "900M"]);
    small.splice(1..1, ["--memory", "512M"]);
    refused(&small, "pass --memory 1280M or more");
    refused(
        &["vm", "--kernel", "debian:6.17.13-sparc", "--", "doctor"],
        "",
    );
    refused(
        &with(&["bench", "mprotect-toggle", "--then", "doctor"]),
        "--then joins commands whose results are stored (bench, sweep); doctor runs alone",
    );
    refused(
        &with(&["bench", "mprotect-toggle", "--then"]),
        "--then joins two guest commands",
    );
    refused(
        &with(&[
            "bench",
            "mprotect-toggle",
            "--then",
            "sweep",
            "mprotect-toggle",
            "--sizes",
            "4Q",
        ]),
        "in the guest command",
    );
}

#[test]
fn reproduce_guest_flags_are_refused_before_anything_runs() {
    for (tail, needle) in [
        (
            &["--arch", "arm64"][..],
            "give --kernels auto or --kernels SPEC,… too",
        ),
        (
            &["--kernels", "auto", "--arch", "x86_64,sparc"],
            "unknown --arch 'sparc'",
        ),
        (
            &["--kernels", "debian:6.17", "--arch", "sparc"],
            "not 'debian:6.17'",
        ),
        (
            &["--kernels", "debian:6.17.13,debian:6.17.13-arm64"],
            "--arch picks the arches",
        ),
        (
            &["--kernels", "debian:6.17.13-sparc"],
            "debian:6.17.13-sparc",
        ),
    ] {
        let args: Vec<&str> = ["reproduce", "001", "--quick", "--no-store"]
            .iter()
            .chain(tail)
            .copied()
            .collect();
        refused(&args, needle);
    }
}

/// The cached kernel (`KERNEL` for `ARCH`) the guest tests boot, or why
/// there is none.
fn cached_kernel() -> Option<()> {
    crate::common::cached_image("6.17.13", ARCH).map(|_| ())
}

fn cached(version: &str) -> Option<()> {
    crate::common::cached_x86_image(version).map(|_| ())
}

#[test]
fn a_guest_bench_is_stored_in_instructions_with_its_provenance() {
    if cached_kernel().is_none() {
        return;
    }
    let db = TempDb::new();
    let out = ptelab()
        .args([
            "vm",
            "--kernel",
            KERNEL,
            "--arch",
            ARCH,
            "--db",
            db.path(),
            "--tag",
            "vmtest",
        ])
        .args([
            "--",
            "bench",
            "mprotect-toggle",
            "--size",
            "400K",
            "--folio",
            "4K",
            "--blocks",
            "3",
        ])
        .timeout(Duration::from_secs(600))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("instr_per_call"), "{text}");
    assert!(!text.contains("nsec_per_call"), "{text}");
    let show = ptelab()
        .args(["show", "vmtest", "--json", "--db", db.path()])
        .output()
        .unwrap();
    let run: Value = serde_json::from_slice(&show.stdout).unwrap();
    let guest = &run["host"]["guest"];
    assert_eq!(guest["metric"], "instructions", "{run}");
    assert_eq!(guest["accel"], "tcg");
    assert!(guest["kernel_source"].as_str().unwrap().starts_with(KERNEL));
    assert_eq!(guest["kernel_sha256"].as_str().unwrap().len(), 64);
    assert!(run["host"]["kernel_release"]
        .as_str()
        .unwrap()
        .starts_with("6.17.13"));
    let tags = run["run"]["tags"].as_array().unwrap();
    assert!(tags.iter().any(|t| t == KERNEL) && tags.iter().any(|t| t == "vmtest"));
    let cell = &run["cells"][0]["cell"];
    assert_eq!(cell["layout"]["matches"], true);
    // 400K of order-0 PTEs cost tens of thousands of guest instructions.
    assert_eq!(cell["unit"], "instructions");
    let per_call = cell["per_call"]["median"].as_f64().unwrap();
    assert!((5_000.0..5_000_000.0).contains(&per_call), "{per_call}");
}

/// Commands joined by `--then` run in one boot of the kernel, one after
/// the other, each stored as its own run.
#[test]
fn commands_joined_by_then_share_one_boot_and_store_a_run_each() {
    if cached_kernel().is_none() {
        return;
    }
    let db = TempDb::new();
    let out = ptelab()
        .args(["vm", "--kernel", KERNEL, "--arch", ARCH, "--db", db.path()])
        .args(["--tag", "joined", "--json", "--"])
        .args(["bench", "mprotect-toggle", "--size", "40K", "--blocks", "1"])
        .args([
            "--then",
            "bench",
            "prot-transition",
            "--size",
            "4K",
            "--blocks",
            "1",
        ])
        .timeout(Duration::from_secs(600))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let boots: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("ptelab: booting"))
        .collect();
    assert_eq!(boots.len(), 1, "{err}");
    assert!(
        boots[0].contains("for mprotect-toggle, prot-transition"),
        "{err}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let guests = doc["guests"].as_array().unwrap();
    let commands: Vec<&str> = guests
        .iter()
        .map(|g| g["command"].as_str().unwrap())
        .collect();
    assert_eq!(
        commands,
        [
            "bench mprotect-toggle --size 40K --blocks 1",
            "bench prot-transition --size 4K --blocks 1"
        ]
    );
    let workloads: Vec<&str> = guests
        .iter()
        .map(|g| g["cells"][0]["workload"].as_str().unwrap())
        .collect();
    assert_eq!(workloads, ["mprotect-toggle", "prot-transition"]);
    let ids: Vec<i64> = guests
        .iter()
        .map(|g| g["run_id"].as_i64().unwrap())
        .collect();
    assert!(ids[0] < ids[1], "stored in the order given: {ids:?}");
    for (id, workload) in ids.iter().zip(workloads) {
        let show = ptelab()
            .args(["show", &id.to_string(), "--json", "--db", db.path()])
            .output()
            .unwrap();
        let run: Value = serde_json::from_slice(&show.stdout).unwrap();
        assert_eq!(run["cells"][0]["cell"]["workload"], workload, "{run}");
        let tags = run["run"]["tags"].as_array().unwrap();
        assert!(tags.iter().any(|t| t == "joined"), "{run}");
    }
}

/// QEMU processes whose parent is `pid`.
fn qemu_children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let Some((comm, rest)) = stat.split_once(") ") else {
            continue;
        };
        let ppid = rest.split(' ').nth(1).and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) && comm.contains("(qemu-system") {
            found.push(child);
        }
    }
    found
}

#[test]
fn sigint_during_a_guest_leaves_no_qemu() {
    if cached_kernel().is_none() {
        return;
    }
    let child = ptelab_std()
        .args(["vm", "--kernel", KERNEL, "--arch", ARCH, "--no-store"])
        .args([
            "--",
            "sweep",
            "mprotect-toggle",
            "--sizes",
            "4M,40M",
            "--folios",
            "4K",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = Instant::now();
    let qemu = loop {
        if let Some(&q) = qemu_children(pid).first() {
            break q;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "no QEMU started"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{qemu}")).exists(),
        "QEMU {qemu} survived"
    );
}

/// `reproduce --kernels`: seed 002 on x86_64 guests of the kernels before
/// and after mremap batching. Every claim gets a verdict word with what was
/// compared; the arm64 claim says it was not asked for; the Markdown report
/// leads with the claims and has the table across kernels.
#[test]
fn reproduce_measures_a_seed_in_guests_of_the_kernels_around_its_change() {
    if cached("6.16.12").is_none() || cached("6.17.13").is_none() {
        return;
    }
    let _knobs = crate::common::knob_watch();
    let db = TempDb::new();
    let md = db.dir().join("report.md");
    let out = ptelab()
        .args([
            "reproduce",
            "002",
            "--quick",
            "--kernels",
            "debian:6.16.12,debian:6.17.13",
            "--arch",
            "x86_64",
            "--json",
            "--db",
            db.path(),
            "-o",
        ])
        .arg(&md)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let guests = doc["guests"].as_array().unwrap();
    assert_eq!(guests.len(), 2, "{stderr}");
    for g in guests {
        assert_eq!(g["metric"], "instructions");
        assert_eq!(g["arch"], "x86_64");
        // 4K and 64K, each with its mremap and whole-iteration phase.
        assert_eq!(g["cells"].as_array().unwrap().len(), 4, "{g}");
    }
    let claims = doc["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 2);
    let words = [
        "reproduced",
        "partly reproduced",
        "not reproduced",
        "not measured",
    ];
    for c in claims {
        let v = c["verdict"].as_str().unwrap();
        assert!(words.iter().any(|w| v.starts_with(w)), "{v}");
    }
    // The arm64 claim: no arm64 guests were asked for, and it says so.
    assert!(claims[0]["verdict"]
        .as_str()
        .unwrap()
        .starts_with("not measured"));
    assert!(claims[0]["measured"]
        .as_str()
        .unwrap()
        .contains("not asked for"));
    // The small-folio claim compares x86_64 guests 6.16.12 -> 6.17.13 in
    // instructions.
    let m = claims[1]["measured"].as_str().unwrap();
    assert!(
        m.contains("x86_64 guests 6.16.12 -> 6.17.13, instructions per call"),
        "{m}"
    );
    // Nothing is stored twice, and every guest run reads back.
    let runs = ptelab()
        .args(["runs", "--db", db.path(), "--json"])
        .output()
        .unwrap();
    let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
    let runs = runs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3, "host run + 2 guest runs");
    for r in runs {
        let id = r["id"].to_string();
        let show = ptelab()
            .args(["show", &id, "--db", db.path(), "--json"])
            .output()
            .unwrap();
        assert!(show.status.success(), "run {id} reads back");
    }
    let report = std::fs::read_to_string(&md).unwrap();
    let claims_at = report.find("## Claims").unwrap();
    let kernels_at = report.find("## Seed 002: x86_64 guests").unwrap();
    let env_at = report.find("## Environment").unwrap();
    assert!(claims_at < kernels_at && kernels_at < env_at, "{report}");
}
