//! The guest build (docs/guests.md, "Guest binary"): the static musl ptelab
//! for this machine's arch, built the way `ptelab vm` builds it, runs here
//! and behaves as the default build does, less the results database.
//! (`guest::boot::binary`'s own test builds both arches and checks their ELF.)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::common::{
    assert_success, is_root, knob_snapshot, knob_watch, ptelab, scratch_dir, skip,
};

const GUEST_BUILD: &str = "this ptelab was built without the results database (a guest build)";

/// Whether the Rust standard library for `target` is installed.
pub fn target_installed(target: &str) -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(out) = Command::new(rustc)
        .args(["--print", "target-libdir", "--target", target])
        .output()
    else {
        return false;
    };
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    out.status.success()
        && std::fs::read_dir(dir).is_ok_and(|rd| {
            rd.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("libstd-"))
        })
}

/// The guest binary for this arch, built once per test run (seconds when up
/// to date, minutes the first time); `None`, said why, when the musl target
/// is not installed (`.ci/run` installs it).
fn guest_ptelab() -> Option<&'static Path> {
    let target = format!("{}-unknown-linux-musl", std::env::consts::ARCH);
    if !target_installed(&target) {
        skip(&format!(
            "the Rust target {target} is not installed (rustup target add {target})"
        ));
        return None;
    }
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    Some(BIN.get_or_init(|| {
        let tree = Path::new(env!("CARGO_MANIFEST_DIR"));
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .current_dir(tree)
            .args(["build", "--profile", "guest", "--bin", "ptelab"])
            .args(["--no-default-features", "--target", &target, "--target-dir"])
            .arg(tree.join("target"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the guest build failed (is the target installed? rustup target add {target}):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        tree.join("target").join(&target).join("guest/ptelab")
    }))
}

fn guest(args: &[&str]) -> Option<std::process::Output> {
    Some(
        Command::new(guest_ptelab()?)
            .args(args)
            .current_dir(scratch_dir())
            .output()
            .unwrap(),
    )
}

#[test]
fn the_model_prints_what_the_default_build_prints() {
    for arch in ["arm64", "x86_64"] {
        let args = ["model", "mprotect-toggle", "--arch", arch, "--size", "4M"];
        let Some(g) = guest(&args) else { return };
        assert_success(&g);
        let host = ptelab().args(args).arg("--no-store").output().unwrap();
        assert_success(&host);
        assert!(!g.stdout.is_empty());
        assert_eq!(
            String::from_utf8_lossy(&g.stdout),
            String::from_utf8_lossy(&host.stdout),
            "{arch}"
        );
    }
    assert!(
        !scratch_dir().join("ptelab.db").exists(),
        "the guest build stored a run"
    );
}

#[test]
fn asking_a_guest_build_for_the_database_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.db");
    let db = db.to_str().unwrap();
    let cases: [&[&str]; 7] = [
        &["model", "mprotect-toggle", "--tag", "t"],
        &["model", "mprotect-toggle", "--db", db],
        &[
            "bench",
            "mprotect-toggle",
            "--allow-unverified",
            "--tag",
            "t",
        ],
        &["runs", "--db", db],
        &["runs"],
        &["show", "latest"],
        &["compare", "latest~1", "latest"],
    ];
    for args in cases {
        let Some(out) = guest(args) else { return };
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        // Asked to store: no database; a host command: not built in.
        let why = match args[0] {
            "model" | "bench" => GUEST_BUILD,
            _ => "this ptelab is a guest build (no `host` feature): it runs doctor, bench",
        };
        assert!(err.contains(why), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    assert!(!Path::new(db).exists());
}

#[test]
fn a_guest_build_measures_without_storing() {
    let _watch = knob_watch();
    let before = knob_snapshot();
    let mut args = vec!["bench", "mprotect-toggle", "--size", "400K", "--iters", "4"];
    if !is_root() {
        args.push("--allow-unverified");
    }
    let Some(out) = guest(&args) else { return };
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("nsec_per_call"), "{text}");
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("400 |")),
        "{text}"
    );
    assert!(!text.contains("stored as run"), "{text}");
    assert!(!scratch_dir().join("ptelab.db").exists());
    assert_eq!(knob_snapshot(), before);
}
