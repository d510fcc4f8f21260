//! `ptelab bisect`: bad input refused with the tree left as found, and end
//! to end with real boots (a git tree made here whose commits name cached
//! Debian kernel images; the build step copies the named one).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::common::{ptelab, ptelab_std, skip, TempDb};

const BENCH: [&str; 8] = [
    "bench",
    "mprotect-toggle",
    "--size",
    "400K",
    "--folio",
    "4K",
    "--iters",
    "200",
];

/// A kernel-looking git tree: commits 0 ..= n on branch `work`, commit i
/// writing `KERNEL` with `kernel(i)`.
pub struct Tree {
    pub dir: tempfile::TempDir,
    pub ids: Vec<String>,
}

/// `sh -c` in a directory as a committer named `t`; its stdout.
pub use ptelab_guest::build::git::fixture::sh;

impl Tree {
    pub fn new(n: usize, kernel: impl Fn(usize) -> String) -> Tree {
        let dir = tempfile::tempdir().unwrap();
        sh(
            dir.path(),
            "git init -q -b work . && printf 'VERSION = 6\\nPATCHLEVEL = 16\\n' > Makefile \
             && touch Kconfig && mkdir arch && touch arch/.keep && echo untracked > notes.txt \
             && echo notes.txt > .git/info/exclude",
        );
        for i in 0..=n {
            let k = kernel(i);
            sh(
                dir.path(),
                &format!(
                    "printf '%s\\n' '{k}' > KERNEL && echo {i} > n && git add -A && git commit -qm 'step {i}'"
                ),
            );
        }
        let ids = sh(dir.path(), "git rev-list --reverse HEAD")
            .lines()
            .map(String::from)
            .collect();
        Tree { dir, ids }
    }

    pub fn path(&self) -> &str {
        self.dir.path().to_str().unwrap()
    }

    /// Branch, HEAD, status and bisect state: what must be as found.
    pub fn state(&self) -> String {
        sh(
            self.dir.path(),
            "git symbolic-ref HEAD; git rev-parse HEAD; git status --porcelain; \
             test -e .git/BISECT_START && echo bisecting; cat notes.txt",
        )
    }
}

fn bisect(tree: &Tree, extra: &[&str]) -> assert_cmd::Command {
    let mut c = ptelab();
    c.args(["bisect", "--repo", tree.path(), "--no-store"])
        .args(extra);
    c
}

fn refused(mut cmd: assert_cmd::Command, needle: &str) {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(needle), "wanted '{needle}' in: {err}");
}

#[test]
fn bad_input_is_refused_and_the_tree_left_as_found() {
    let t = Tree::new(3, |i| format!("/nonexistent/{i}"));
    let (g, b) = (t.ids[0].clone(), t.ids[3].clone());
    let before = t.state();
    let with = |good: &str, bad: &str, more: &[&str]| {
        let mut c = bisect(
            &t,
            &[
                "--good",
                good,
                "--bad",
                bad,
                "--build-cmd",
                "cp \"$(cat KERNEL)\" \"$OUT\"",
            ],
        );
        c.args(more).arg("--").args(BENCH);
        c
    };
    refused(with(&b, &g, &[]), "wrong order");
    refused(with(&g, &g, &[]), "same commit");
    refused(with("v9.9", &b, &[]), "--good v9.9 names no commit");
    // The image a build writes must be a kernel: an endpoint that gives
    // none is bad input.
    refused(with(&g, &b, &[]), "--good");
    assert_eq!(t.state(), before);
    // A bench of one cell only.
    let mut c = bisect(&t, &["--good", &g, "--bad", &b, "--"]);
    c.args(["sweep", "mprotect-toggle"]);
    refused(c, "a bench of one cell");
    // Version bisects: order, equality, exact versions.
    for (good, bad, needle) in [
        ("debian:6.17.13", "debian:6.16.12", "wrong order"),
        ("debian:6.17.13", "debian:6.17.13", "same version"),
        ("debian:6.16", "debian:6.17.13", "no exact version"),
    ] {
        let mut c = ptelab();
        c.args([
            "bisect", "--good", good, "--bad", bad, "--arch", "x86_64", "--",
        ])
        .args(BENCH);
        refused(c, needle);
    }
    // tree:PATH@REV endpoints are --repo PATH with those revisions; both
    // must be of one tree, without a series.
    let tree = |rev: &str| format!("tree:{}@{rev}", t.path());
    let endpoints = |good: &str, bad: &str| {
        let mut c = ptelab();
        c.args(["bisect", "--no-store", "--good", good, "--bad", bad])
            .args(["--build-cmd", "cp \"$(cat KERNEL)\" \"$OUT\"", "--"])
            .args(BENCH);
        c
    };
    refused(endpoints(&tree(&b), &tree(&g)), "wrong order");
    refused(
        endpoints(&tree(&g), "debian:6.17.13"),
        "both tree kernels of one tree",
    );
    let other = tempfile::tempdir().unwrap();
    let elsewhere = format!("tree:{}@HEAD", other.path().display());
    refused(endpoints(&tree(&g), &elsewhere), "name two trees");
    refused(
        endpoints(&tree(&g), &format!("{}+/l/v2.mbox", tree(&b))),
        "not a series",
    );
    let mut c = ptelab();
    c.args([
        "bisect",
        "--good",
        "debian:6.16.12",
        "--bad",
        "debian:6.17.13",
    ])
    .args(["--build-cmd", "true", "--"])
    .args(BENCH);
    refused(c, "--build-cmd builds a tree's commits");
    assert_eq!(t.state(), before);
    // A bisect in progress, a dirty tree, a tree that is not a kernel's.
    sh(t.dir.path(), "git bisect start");
    refused(with(&g, &b, &[]), "already in progress");
    sh(t.dir.path(), "git bisect reset");
    assert_eq!(t.state(), before);
    sh(t.dir.path(), "echo x >> KERNEL");
    refused(with(&g, &b, &[]), "uncommitted changes");
    sh(
        t.dir.path(),
        "git checkout -q KERNEL && git rm -q Kconfig && git commit -qm 'no Kconfig'",
    );
    refused(with(&g, &b, &[]), "not a Linux kernel tree");
    let plain = tempfile::tempdir().unwrap();
    let mut c = ptelab();
    c.args([
        "bisect",
        "--repo",
        plain.path().to_str().unwrap(),
        "--good",
        "a",
        "--bad",
        "b",
        "--",
    ])
    .args(BENCH);
    refused(c, "not a git work tree");
}

#[test]
fn a_missing_cross_compiler_names_the_package() {
    let t = Tree::new(2, |i| i.to_string());
    let (other, package) = if cfg!(target_arch = "aarch64") {
        ("x86_64", "gcc-x86-64-linux-gnu")
    } else {
        ("arm64", "gcc-aarch64-linux-gnu")
    };
    // A PATH with git and make but no cross compiler.
    let bin = tempfile::tempdir().unwrap();
    for tool in ["git", "make"] {
        let Some(found) = which(tool) else {
            skip(&format!("{tool} is not installed"));
            return;
        };
        std::os::unix::fs::symlink(found, bin.path().join(tool)).unwrap();
    }
    let before = t.state();
    let mut c = bisect(
        &t,
        &["--good", &t.ids[0], "--bad", &t.ids[2], "--arch", other],
    );
    c.env("PATH", bin.path()).arg("--").args(BENCH);
    refused(c, &format!("apt-get install {package}"));
    assert_eq!(t.state(), before);
}

/// SIGINT during a build stops it (its process group is killed) and puts
/// the tree back; nothing is cached for the commit.
#[test]
fn sigint_during_a_build_leaves_the_tree_as_found() {
    let t = Tree::new(2, |i| i.to_string());
    let before = t.state();
    let cache = tempfile::tempdir().unwrap();
    let marker = cache.path().join("still-running");
    let mut child = ptelab_std()
        .args([
            "bisect",
            "--repo",
            t.path(),
            "--good",
            &t.ids[0],
            "--bad",
            &t.ids[2],
        ])
        .args(["--arch", "x86_64", "--no-store", "--build-cmd"])
        .arg(format!("sleep 30; touch '{}'", marker.display()))
        .arg("--")
        .args(BENCH)
        .env("XDG_CACHE_HOME", cache.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !t.state().contains("bisecting") {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no bisect started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "the build was waited for: {err}"
    );
    assert_eq!(t.state(), before, "{err}");
    std::thread::sleep(Duration::from_secs(1));
    assert!(!marker.exists());
    let images = cache.path().join("ptelab/bisect/images");
    let cached = walk(&images)
        .into_iter()
        .filter(|p| p.ends_with("bzImage"))
        .count();
    assert_eq!(cached, 0);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Guest tests of this file boot one guest at a time (TCG takes a CPU).
static GUESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The cached x86_64 images of Debian's 6.16.12 and 6.17.13, or why not.
fn images() -> Option<(String, String)> {
    let good = crate::common::cached_x86_image("6.16.12")?;
    let bad = crate::common::cached_x86_image("6.17.13")?;
    Some((good, bad))
}

/// Commits 1..=8 after a good commit 0: the change at a random one of them.
/// arm64 guests: the bisect's steps are the point (docs/guests.md, "One
/// boot per kernel").
#[test]
fn the_bisect_finds_the_changing_commit_in_log2_steps() {
    let _one = GUESTS.lock().unwrap_or_else(|e| e.into_inner());
    let (Some(good), Some(bad)) = (
        crate::common::cached_image("6.16.12", "arm64"),
        crate::common::cached_image("6.17.13", "arm64"),
    ) else {
        return;
    };
    let n = 8;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as usize;
    let change = 1 + nanos % n;
    eprintln!("the change is at commit {change} of {n}");
    let t = Tree::new(n, |i| {
        if i >= change {
            bad.clone()
        } else {
            good.clone()
        }
    });
    let before = t.state();
    let cache = tempfile::tempdir().unwrap();
    let db = TempDb::new();
    let md = db.dir().join("report.md");
    let out = ptelab()
        .args([
            "bisect",
            "--repo",
            t.path(),
            "--good",
            &t.ids[0],
            "--bad",
            &t.ids[n],
        ])
        .args([
            "--build-cmd",
            "cp \"$(cat KERNEL)\" \"$OUT\"",
            "--arch",
            "arm64",
        ])
        .args([
            "--db",
            db.path(),
            "--json",
            "--markdown",
            md.to_str().unwrap(),
        ])
        .arg("--")
        .args(BENCH)
        .env("XDG_CACHE_HOME", cache.path())
        .timeout(Duration::from_secs(1200))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let b = &doc["bisect"];
    assert_eq!(b["first_bad"][0]["id"], t.ids[change], "{err}");
    assert_eq!(b["first_bad"].as_array().unwrap().len(), 1);
    let steps = b["steps"].as_array().unwrap();
    let probed = steps.iter().filter(|s| s["role"] == "step").count();
    assert_eq!(probed, (n as f64).log2().ceil() as usize, "{b}");
    assert!(
        steps.iter().all(|s| s["verdict"]["verdict"] != "skip"),
        "{b}"
    );
    assert_eq!(b["classifier"]["metric"], "instructions");
    assert_eq!(t.state(), before, "the tree is left as found");
    let report = std::fs::read_to_string(&md).unwrap();
    assert!(
        report.contains(&format!("first bad commit: {}", &t.ids[change][..12])),
        "{report}"
    );
    assert!(
        report.contains("instr_per_call") && !report.contains("nsec"),
        "{report}"
    );
    // Every guest run is stored with the bisect's tag.
    let runs = ptelab()
        .args(["runs", "--json", "--db", db.path()])
        .output()
        .unwrap();
    let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
    let tag = format!("bisect:{}", b["id"].as_str().unwrap());
    let tagged = runs["runs"]
        .as_array()
        .or(runs.as_array())
        .unwrap()
        .iter()
        .filter(|r| {
            r["tags"]
                .as_array()
                .is_some_and(|t| t.iter().any(|x| x == tag.as_str()))
        })
        .count();
    assert_eq!(tagged, 2 + probed, "{runs}");
    // Run again: every figure comes from the state, no guest boots.
    let again = ptelab()
        .args([
            "bisect",
            "--repo",
            t.path(),
            "--good",
            &t.ids[0],
            "--bad",
            &t.ids[n],
        ])
        .args([
            "--build-cmd",
            "cp \"$(cat KERNEL)\" \"$OUT\"",
            "--arch",
            "arm64",
        ])
        .args(["--db", db.path(), "--json"])
        .arg("--")
        .args(BENCH)
        .env("XDG_CACHE_HOME", cache.path())
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{err}");
    assert!(
        err.contains("resuming") && !err.contains("booting"),
        "{err}"
    );
    assert_eq!(t.state(), before);
}

/// An endpoint whose image does not boot (a truncated bzImage: the header
/// is a kernel's, the rest is missing) is bad input, and SIGINT during a
/// guest leaves the tree as found.
#[test]
fn a_kernel_that_does_not_boot_and_sigint_leave_the_tree_as_found() {
    let _one = GUESTS.lock().unwrap_or_else(|e| e.into_inner());
    let Some((good, bad)) = images() else { return };
    let scratch = tempfile::tempdir().unwrap();
    let broken = scratch.path().join("broken");
    sh(scratch.path(), &format!("head -c 65536 '{good}' > broken"));
    let t = Tree::new(2, |i| {
        if i == 0 {
            broken.display().to_string()
        } else {
            bad.clone()
        }
    });
    let before = t.state();
    let cache = tempfile::tempdir().unwrap();
    let mut c = bisect(
        &t,
        &["--good", &t.ids[0], "--bad", &t.ids[2], "--arch", "x86_64"],
    );
    c.args([
        "--build-cmd",
        "cp \"$(cat KERNEL)\" \"$OUT\"",
        "--timeout",
        "40s",
        "--",
    ])
    .args(BENCH)
    .env("XDG_CACHE_HOME", cache.path())
    .timeout(Duration::from_secs(300));
    refused(c, "the good endpoint");
    assert_eq!(t.state(), before);

    let t = Tree::new(2, |i| if i == 0 { good.clone() } else { bad.clone() });
    let before = t.state();
    let cache = tempfile::tempdir().unwrap();
    let mut child = ptelab_std()
        .args([
            "bisect",
            "--repo",
            t.path(),
            "--good",
            &t.ids[0],
            "--bad",
            &t.ids[2],
        ])
        .args([
            "--build-cmd",
            "cp \"$(cat KERNEL)\" \"$OUT\"",
            "--arch",
            "x86_64",
            "--no-store",
            "--",
        ])
        .args(BENCH)
        .env("XDG_CACHE_HOME", cache.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first guest to boot (the tree is mid-bisect then).
    let logs = cache.path().join("ptelab").join("logs");
    let start = std::time::Instant::now();
    while std::fs::read_dir(&logs).map_or(true, |d| d.count() == 0) {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "no guest booted"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(t.state().contains("bisecting"), "{}", t.state());
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert_eq!(t.state(), before, "{err}");
}

/// `--metric` is checked before anything is fetched or booted: its name,
/// a TLB kind of the other arch, a counter or instructions under KVM.
#[test]
fn a_bad_metric_is_refused_before_anything_boots() {
    for (metric, accel, needle) in [
        (
            "entries:vm_normal_page",
            "auto",
            "accepted are instructions, time, tlbi",
        ),
        ("tlbi:pages", "auto", "accepted kinds are page, range"),
        ("calls:", "auto", "names no kernel function"),
        ("tlbi:page", "auto", "x86_64 guests never execute"),
        ("calls:vm_normal_page", "kvm", "drop --accel kvm"),
        ("instructions", "kvm", "drop --accel kvm"),
        ("time", "tcg", "drop --accel tcg"),
    ] {
        let mut c = ptelab();
        c.args([
            "bisect",
            "--good",
            "debian:6.16.12",
            "--bad",
            "debian:6.17.8",
            "--arch",
            "x86_64",
            "--no-store",
            "--metric",
            metric,
            "--accel",
            accel,
            "--",
        ])
        .args(BENCH);
        refused(c, needle);
    }
}

/// Seed 001's pair bisected on counter `metric`, with `flags` (output and
/// store) before the bench: arm64 guests (docs/guests.md, "One boot per
/// kernel"); the folio lookup changed in the generic mprotect code, on
/// both arches.
fn counter_bisect_cmd(metric: &str, flags: &[&str]) -> assert_cmd::Command {
    let mut c = ptelab();
    c.args([
        "bisect",
        "--good",
        "debian:6.16.12",
        "--bad",
        "debian:6.17.8",
    ])
    .args(["--arch", "arm64", "--metric", metric])
    .args(flags)
    .args([
        "--",
        "bench",
        "mprotect-toggle",
        "--size",
        "400K",
        "--folio",
        "4K",
    ]);
    c
}

fn counter_bisect(metric: &str, db: &TempDb) -> std::process::Output {
    counter_bisect_cmd(metric, &["--db", db.path(), "--json"])
        .timeout(Duration::from_secs(1200))
        .output()
        .unwrap()
}

/// Seed 001's folio lookup, bisected by its mechanism: from 6.17,
/// change_pte_range calls vm_normal_page for every PTE of an order-0
/// region on the PROT_NONE call too, where 6.16 did on the
/// PROT_READ|PROT_WRITE call only (to see whether the page may be made
/// writable), so per call of mprotect-toggle, which alternates the two,
/// 0.5 lookups per PTE become 1. Debian offers no version between 6.16.12
/// and 6.17.8, so the bisect measures both ends (profiled, under TCG) and
/// names 6.17.8.
/// Then a misspelt function is refused without a boot (both kernels'
/// symbols are cached now), with the nearest names.
#[test]
fn a_counter_bisect_finds_where_the_folio_lookup_begins() {
    let _one = GUESTS.lock().unwrap_or_else(|e| e.into_inner());
    if crate::common::cached_image("6.16.12", "arm64").is_none()
        || crate::common::cached_image("6.17.8", "arm64").is_none()
    {
        return;
    }
    let db = TempDb::new();
    let out = counter_bisect("calls:vm_normal_page", &db);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let b = &doc["bisect"];
    // The state file lets a second run resume; removed when the test ends
    // so that the next run measures again.
    let _state = StateRemoved::of(&b["id"]);
    assert_eq!(b["first_bad"][0]["id"], "6.17.8", "{b}");
    assert_eq!(b["first_bad"].as_array().unwrap().len(), 1, "{b}");
    assert_eq!(b["last_good"], "6.16.12", "{b}");
    let c = &b["classifier"];
    assert_eq!(c["counter"], "calls:vm_normal_page", "{c}");
    assert_eq!(c["metric"], "instructions", "{c}");
    // 100 order-0 PTEs per call: a lookup on every other call, then on each.
    let per_pte = |v: &Value| v.as_f64().unwrap() / 100.0;
    assert_eq!((per_pte(&c["good"]), per_pte(&c["bad"])), (0.5, 1.0), "{c}");
    let steps = b["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{b}");
    assert!(
        steps
            .iter()
            .all(|s| s["measurement"]["counter"] == "calls:vm_normal_page"),
        "{b}"
    );
    // Both guests were profiled and stored with the bisect's tag.
    let tag = format!("bisect:{}", b["id"].as_str().unwrap());
    let show = ptelab()
        .args(["show", "debian:6.17.8", "--json", "--db", db.path()])
        .output()
        .unwrap();
    let run: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert!(
        run["run"]["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == tag.as_str()),
        "{run}"
    );
    assert!(
        run["cells"][0]["cell"]["profile"]["functions"].is_array(),
        "{run}"
    );

    // Run again: from the state, no boot, the same text in its unit.
    let again = counter_bisect_cmd("calls:vm_normal_page", &["--no-store"])
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{err}");
    assert!(
        err.contains("resuming") && !err.contains("booting"),
        "{err}"
    );
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(
        text.contains("vm_normal_page calls/call") && text.contains("first bad version: 6.17.8"),
        "{text}"
    );

    let out = counter_bisect("calls:vm_normal_pag", &db);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no kernel function 'vm_normal_pag'")
            && err.contains("nearest names: vm_normal_page"),
        "{err}"
    );
    assert!(!err.contains("booting"), "{err}");
}

/// `--phase` is checked against the bench's phases before anything is
/// fetched or booted: prot-transition measures two, one cell each.
#[test]
fn a_missing_or_unknown_phase_is_refused_before_anything_boots() {
    let run = |phase: Option<&str>, bench: &[&str], needle: &str| {
        let mut c = ptelab();
        c.args([
            "bisect",
            "--good",
            "debian:6.18.15",
            "--bad",
            "debian:6.19.6",
            "--arch",
            "arm64",
            "--metric",
            "tlbi",
            "--no-store",
        ]);
        if let Some(p) = phase {
            c.args(["--phase", p]);
        }
        c.arg("--").args(bench);
        let out = c.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(needle), "wanted '{needle}' in: {err}");
        assert!(
            !err.contains("booting") && !err.contains("kernel debian"),
            "{err}"
        );
    };
    let prot = ["bench", "prot-transition", "--size", "4K", "--folio", "4K"];
    run(
        None,
        &prot,
        "pass --phase NAME, one of none-to-rw, rw-to-none",
    );
    run(
        Some("none-to-ro"),
        &prot,
        "accepted names: none-to-rw, rw-to-none",
    );
    run(Some("none-to-rw"), &BENCH, "one unnamed phase");
}

/// Seed 003 on arm64: from 6.19 a PROT_NONE -> PROT_READ|PROT_WRITE call
/// on an order-0 4K region issues no TLB invalidation (the old PTE was not
/// accessible, so no stale entry can be cached), where 6.18.15 issued one.
/// Debian offers no arm64 cloud kernel between 6.18.15 and 6.19.6, so
/// the bisect measures both ends (profiled, under TCG) and names 6.19.6.
#[test]
fn a_phase_bisect_finds_where_arm64_stops_flushing_on_none_to_rw() {
    let _one = GUESTS.lock().unwrap_or_else(|e| e.into_inner());
    if crate::common::cached_image("6.18.15", "arm64").is_none()
        || crate::common::cached_image("6.19.6", "arm64").is_none()
    {
        return;
    }
    let db = TempDb::new();
    let out = ptelab()
        .args([
            "bisect",
            "--good",
            "debian:6.18.15",
            "--bad",
            "debian:6.19.6",
            "--arch",
            "arm64",
            "--metric",
            "tlbi",
            "--phase",
            "none-to-rw",
            "--db",
            db.path(),
            "--json",
            "--",
            "bench",
            "prot-transition",
            "--size",
            "4K",
            "--folio",
            "4K",
        ])
        .timeout(Duration::from_secs(1200))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let b = &doc["bisect"];
    // Removed when the test ends so that the next run measures again.
    let _state = StateRemoved::of(&b["id"]);
    assert_eq!(b["phase"], "none-to-rw", "{b}");
    assert_eq!(b["first_bad"][0]["id"], "6.19.6", "{b}");
    assert_eq!(b["first_bad"].as_array().unwrap().len(), 1, "{b}");
    assert_eq!(b["last_good"], "6.18.15", "{b}");
    let c = &b["classifier"];
    assert_eq!(c["counter"], "tlbi", "{c}");
    assert_eq!(
        (c["good"].as_f64(), c["bad"].as_f64()),
        (Some(1.0), Some(0.0)),
        "{c}"
    );
    assert_eq!(b["steps"].as_array().unwrap().len(), 2, "{b}");
}

/// A Debian bisect's state file (`~/.cache/ptelab/bisect/state/ID.json`),
/// removed when dropped so that the next test run measures again.
struct StateRemoved(PathBuf);

impl StateRemoved {
    fn of(id: &Value) -> StateRemoved {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
            .unwrap();
        let file = cache
            .join("ptelab/bisect/state")
            .join(format!("{}.json", id.as_str().unwrap()));
        StateRemoved(file)
    }
}

impl Drop for StateRemoved {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// See: #30. A bisect refused once its endpoints are looked at (here: an
/// endpoint whose build gives no kernel) creates no results database.
#[test]
fn a_refused_bisect_creates_no_database() {
    let t = Tree::new(3, |i| format!("/nonexistent/{i}"));
    let db = TempDb::new();
    let mut c = ptelab();
    c.args(["bisect", "--repo", t.path(), "--db", db.path()])
        .args(["--good", &t.ids[0], "--bad", &t.ids[3]])
        .args(["--build-cmd", "cp \"$(cat KERNEL)\" \"$OUT\""])
        .arg("--")
        .args(BENCH);
    refused(c, "--good");
    let left: Vec<_> = std::fs::read_dir(db.dir()).unwrap().collect();
    assert!(left.is_empty(), "written: {left:?}");
}
