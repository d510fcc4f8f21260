//! ptelab's QEMU plugin on every QEMU the suite is given: the one first on
//! PATH (Debian 12's 7.2 here) and each emulator named in
//! `PTELAB_TEST_QEMUS`, paths separated by `:` (`.ci/run` names Debian 13's
//! 10.0 and sid's 11.1, unpacked by `bench/debian-qemu.sh`). Each loads the
//! plugin and counts, per call, what the QEMU on PATH counts; a QEMU that
//! cannot load it makes `vm --profile` refuse with the remedy, and
//! `reproduce` measure its guests plain and say why nothing was counted.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::common::{assert_success, cached_image, ptelab, script, TempDb};

/// The emulators named in `PTELAB_TEST_QEMUS` for `arch`'s binary name.
fn given(binary: &str) -> Vec<PathBuf> {
    std::env::var("PTELAB_TEST_QEMUS")
        .unwrap_or_default()
        .split(':')
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.file_name().is_some_and(|n| n == binary))
        .collect()
}

/// PATH with `emulator`'s directory first (None: PATH as it is).
fn path_with(emulator: Option<&Path>) -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    match emulator.and_then(Path::parent) {
        Some(dir) => format!("{}:{path}", dir.display()),
        None => path,
    }
}

/// One profiled bench on `kernel` under `emulator` (None: PATH's): the
/// stored run's cells, and the QEMU version it recorded.
fn profiled(emulator: Option<&Path>, kernel: &str, arch: &str) -> (Vec<Value>, String) {
    let db = TempDb::new();
    let out = ptelab()
        .env("PATH", path_with(emulator))
        .args(["vm", "--kernel", kernel, "--arch", arch, "--profile"])
        .args(["--db", db.path(), "--", "bench", "prot-transition"])
        .args(["--size", "400K", "--folio", "4K", "--blocks", "3"])
        .timeout(Duration::from_secs(900))
        .output()
        .unwrap();
    assert_success(&out);
    let show = ptelab()
        .args(["show", kernel, "--json", "--db", db.path()])
        .output()
        .unwrap();
    let run: Value = serde_json::from_slice(&show.stdout).unwrap();
    let cells = run["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cell"].clone())
        .collect();
    let qemu = run["run"]["guest"]["qemu_version"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (cells, qemu)
}

/// The TLB invalidations per call by kind, the kinds with a median of 0
/// left out (a kind any window saw is listed, with its median).
fn tlb(profile: &Value) -> Value {
    let kinds = profile["tlb"].as_object().cloned().unwrap_or_default();
    Value::Object(
        kinds
            .into_iter()
            .filter(|(_, v)| v.as_f64() != Some(0.0))
            .collect(),
    )
}

/// What must be the same on every QEMU, per phase: the icount figure per
/// call, the instructions counted in the windows, the TLB invalidations by
/// kind and every function's entries and instructions, all per call. (How
/// many windows a time budget takes is not: the stop rule counts guest time
/// that includes the boot's asynchronous work, which differs between QEMU
/// releases.)
fn counted(cells: &[Value], functions: bool) -> Vec<Value> {
    cells
        .iter()
        .map(|c| {
            let p = &c["profile"];
            serde_json::json!({
                "phase": c["phase"],
                // The guest's clock reads nanoseconds: a median over 12
                // calls may be off by 1 ns in 12.
                "per_call": c["per_call"]["median"].as_f64().map(f64::round),
                "kernel": p["kernel_instructions"],
                "user": p["user_instructions"],
                "tlb": tlb(p),
                "functions": if functions { p["functions"].clone() } else { Value::Null },
            })
        })
        .collect()
}

/// x86-64: every count and the icount figure are the same to the last
/// instruction on every QEMU (the guest sees QEMU 7.2's CPU on each, and a
/// sample lasts a quarter of a timer tick: docs/guests.md, "QEMU versions").
#[test]
fn x86_counts_are_the_same_on_every_qemu() {
    let others = given("qemu-system-x86_64");
    if others.is_empty() {
        eprintln!("no other x86_64 QEMU given (PTELAB_TEST_QEMUS): only PATH's is tested");
    }
    if cached_image("6.17.13", "x86_64").is_none() {
        return;
    }
    let (base, base_qemu) = profiled(None, "debian:6.17.13", "x86_64");
    let want = counted(&base, true);
    for q in &others {
        let (cells, qemu) = profiled(Some(q), "debian:6.17.13", "x86_64");
        assert_ne!(qemu, base_qemu, "{} is the QEMU on PATH", q.display());
        assert_eq!(
            counted(&cells, true),
            want,
            "{} (QEMU {qemu}) against QEMU {base_qemu}",
            q.display()
        );
    }
}

/// arm64: seed 003's mechanism, the TLB invalidations of each call, is the
/// same on every QEMU (QEMU's `max` arm64 CPU gains features from release
/// to release, FEAT_MOPS in 10.0, GCS in 11.1, and the kernel's memset and
/// mprotect paths follow them, so instructions are compared only on one
/// QEMU: docs/guests.md, "QEMU versions").
#[test]
fn arm64_tlb_invalidations_are_the_same_on_every_qemu() {
    let others = given("qemu-system-aarch64");
    if cached_image("6.19.6", "arm64").is_none() {
        return;
    }
    let kinds = |cells: &[Value]| -> Vec<Value> {
        cells
            .iter()
            .map(|c| serde_json::json!([c["phase"], tlb(&c["profile"])]))
            .collect()
    };
    let (base, base_qemu) = profiled(None, "debian:6.19.6", "arm64");
    // 6.19.6 issues no TLBI on the NONE->RW call (seed 003's change).
    let up = base.iter().find(|c| c["phase"] == "none-to-rw").unwrap();
    assert_eq!(tlb(&up["profile"]), serde_json::json!({}), "{up}");
    for q in &others {
        let (cells, qemu) = profiled(Some(q), "debian:6.19.6", "arm64");
        assert_eq!(
            kinds(&cells),
            kinds(&base),
            "{} (QEMU {qemu}) against QEMU {base_qemu}",
            q.display()
        );
    }
}

/// A stand-in for `qemu-system-x86_64` that runs the real one but cannot
/// load plugins, as a QEMU of a plugin level ptelab does not speak.
fn refusing_qemu(dir: &Path, binary: &str) -> PathBuf {
    let real = which(binary);
    script(
        dir,
        binary,
        &format!(
            "for a in \"$@\"; do case \"$a\" in *.so,*) echo \"{binary}: \
             Could not load plugin $a: plugin requires API version \
             $PTELAB_QEMU_PLUGIN_API, but this QEMU supports only a minimum version of 99\" >&2; \
             exit 1;; esac; done\nexec {} \"$@\"\n",
            real.display()
        ),
    )
}

fn which(binary: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join(binary))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{binary} not on PATH"))
}

/// `vm --profile` on a QEMU that cannot load the plugin exits 2 before
/// booting, quoting QEMU and naming the remedy; `reproduce` measures the
/// same guests plain, says on each mechanism claim and in its closing lines
/// why nothing was counted, and succeeds.
#[test]
fn a_qemu_that_cannot_count_is_refused_by_vm_and_measured_plain_by_reproduce() {
    // arm64 guests: what is checked is the plugin's refusal (docs/guests.md,
    // "One boot per kernel").
    if cached_image("6.16.12", "arm64").is_none() || cached_image("6.17.13", "arm64").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fake = refusing_qemu(dir.path(), "qemu-system-aarch64");
    let path = path_with(Some(&fake));
    let out = ptelab()
        .env("PATH", &path)
        .args([
            "vm",
            "--kernel",
            "debian:6.17.13",
            "--arch",
            "arm64",
            "--profile",
            "--no-store",
        ])
        .args([
            "--",
            "bench",
            "prot-transition",
            "--size",
            "4K",
            "--folio",
            "4K",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot load ptelab's QEMU plugin")
            && err.contains("supports only a minimum version of 99")
            && err.contains("put such a QEMU first on PATH"),
        "{err}"
    );
    assert!(!err.contains("booting"), "refused before booting: {err}");

    let _knobs = crate::common::knob_watch();
    let out = ptelab()
        .env("PATH", &path)
        .args(["reproduce", "001", "--quick", "--no-store", "--json"])
        .args([
            "--kernels",
            "debian:6.16.12,debian:6.17.13",
            "--arch",
            "arm64",
        ])
        .timeout(Duration::from_secs(1200))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let uncounted = doc["guest_arches_uncounted"].as_array().unwrap();
    assert_eq!(uncounted.len(), 1, "{doc}");
    assert!(
        uncounted[0]["why"]
            .as_str()
            .unwrap()
            .contains("cannot load ptelab's QEMU plugin"),
        "{uncounted:?}"
    );
    assert_eq!(doc["guests_measured"], true);
    let guests = doc["guests"].as_array().unwrap();
    assert!(
        guests
            .iter()
            .any(|g| !g["cells"].as_array().unwrap().is_empty()),
        "guests measured plain: {doc}"
    );
    let mechanism: Vec<&Value> = doc["claims"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            c["claim"]
                .as_str()
                .is_some_and(|s| s.starts_with("arm64: mechanism"))
        })
        .collect();
    assert!(!mechanism.is_empty(), "{doc}");
    for c in mechanism {
        assert_eq!(c["verdict"], "not counted", "{c}");
        let m = c["measured"].as_str().unwrap();
        assert!(m.contains("cannot load ptelab's QEMU plugin"), "{m}");
    }
}

/// Guests asked for that all fail: `reproduce` exits 1 and its last line
/// says no guest measured anything.
#[test]
fn reproduce_whose_guests_all_fail_says_so_and_fails() {
    if cached_image("6.17.13", "x86_64").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A QEMU that starts and dies at once: every boot fails.
    let fake = script(
        dir.path(),
        "qemu-system-x86_64",
        "case \"$1\" in --version) echo 'QEMU emulator version 7.2.0';; \
         -help) echo '-plugin [file=]<file>';; -cpu) echo 'Recognized CPUID flags:'; echo '  fpu';; \
         *) echo 'qemu: cannot start' >&2; exit 1;; esac\n",
    );
    let _knobs = crate::common::knob_watch();
    let out = ptelab()
        .env("PATH", path_with(Some(&fake)))
        .args(["reproduce", "001", "--quick", "--no-store"])
        .args(["--kernels", "debian:6.17.13", "--arch", "x86_64"])
        .timeout(Duration::from_secs(900))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("no guest measured anything, though guests were asked for"),
        "{text}"
    );
}
