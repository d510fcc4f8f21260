//! Tree kernels (`tree:PATH@REV`, `--series`) through the binary, on a
//! stand-in kernel tree: its Makefile does what the kernel's does for a
//! build (the config targets write `.config` in `O`; `bzImage` writes the
//! image), and its image is a cached Debian kernel named by the file
//! `KERNEL`, so that no kernel is compiled and the guests still boot. The
//! base names 6.16.12; the series changes it to 6.17.13, whose order-0
//! mprotect is seed 001's regression: the patch's figure moves as a real
//! patch's would. The user's tree is left as found every time.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::bisect_cli::sh;
use crate::common::testcluster::TestSlurm;
use crate::common::{assert_success, cached_x86_image, ptelab, TempDb};
use ptelab_guest::build::kconfig;
use ptelab_workload::Arch;

/// The stand-in tree (branch `work`, one commit whose `KERNEL` names
/// `base`), and beside it the mbox of a series that names `patched`.
struct StandIn {
    dir: tempfile::TempDir,
    series: PathBuf,
}

impl StandIn {
    fn new(base: &str, patched: &str) -> StandIn {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path();
        let defconfig = kconfig::config_lines(Arch::X86_64, kconfig::Section::ALL);
        std::fs::write(t.join("defconfig.txt"), defconfig).unwrap();
        std::fs::write(
            t.join("Makefile"),
            "VERSION = 7\nPATCHLEVEL = 3\n\
             defconfig:\n\tcp defconfig.txt $(O)/.config\n\
             olddefconfig:\n\t@true\n\
             savedefconfig:\n\tcp $(O)/.config $(O)/defconfig\n\
             bzImage:\n\tmkdir -p $(O)/arch/x86/boot\n\t@echo '  CC      mm/mprotect.o'\n\
             \tcp \"$$(cat KERNEL)\" $(O)/arch/x86/boot/bzImage\n",
        )
        .unwrap();
        sh(
            t,
            &format!(
                "git init -q -b work . && touch Kconfig && mkdir arch && touch arch/.keep \
                 && echo untracked > notes.txt && echo notes.txt > .git/info/exclude \
                 && printf '%s\\n' '{base}' > KERNEL && git add -A && git commit -qm base"
            ),
        );
        let series = dir.path().with_extension("mbox");
        sh(
            t,
            &format!(
                "git checkout -q -b patch && printf '%s\\n' '{patched}' > KERNEL \
                 && git commit -qam 'mm: the patch' && git format-patch -q -1 --stdout > {} \
                 && git checkout -q work && git branch -q -D patch",
                series.display()
            ),
        );
        StandIn { dir, series }
    }

    fn path(&self) -> &str {
        self.dir.path().to_str().unwrap()
    }

    fn spec(&self) -> String {
        format!("tree:{}@work", self.path())
    }

    /// Refs, work trees, HEAD, status and the untracked file: what must be
    /// as found.
    fn state(&self) -> String {
        sh(
            self.dir.path(),
            "git for-each-ref; git worktree list --porcelain; git symbolic-ref HEAD; \
             git status --porcelain; cat notes.txt; ls -a",
        )
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.series);
    }
}

/// Whether the tools a tree build needs are here (CI installs them).
fn build_tools() -> bool {
    let ok = ["git", "make", "flex", "bison", "bc"].iter().all(|t| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !ok {
        eprintln!("skipped: a tree build needs git, make, flex, bison and bc (./setup)");
        assert!(std::env::var_os("CI").is_none(), "CI runs ./setup");
    }
    ok && Arch::host() == Some(Arch::X86_64)
}

fn refused(args: &[&str], cache: &Path, needle: &str) {
    let out = ptelab()
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(
        err.contains(needle),
        "{args:?}: wanted '{needle}' in: {err}"
    );
}

/// `kernel fetch` builds a tree kernel once and serves it from the cache
/// after; a series is another image; bad input is refused before anything
/// builds; the tree is left as found.
#[test]
fn kernel_fetch_builds_a_tree_once_and_refuses_bad_input() {
    if !build_tools() {
        return;
    }
    // Any image with an x86 boot header: nothing boots here.
    let img = tempfile::tempdir().unwrap();
    let (a, b) = (img.path().join("a"), img.path().join("b"));
    for (p, fill) in [(&a, 1u8), (&b, 2u8)] {
        let mut bytes = vec![fill; 0x400];
        bytes[0x202..0x206].copy_from_slice(b"HdrS");
        std::fs::write(p, bytes).unwrap();
    }
    let t = StandIn::new(a.to_str().unwrap(), b.to_str().unwrap());
    let before = t.state();
    let cache = tempfile::tempdir().unwrap();
    let fetch = |extra: &[&str]| {
        ptelab()
            .args(["kernel", "fetch", "--arch", "x86_64", "--json"])
            .args(extra)
            .env("XDG_CACHE_HOME", cache.path())
            .output()
            .unwrap()
    };
    let out = fetch(&[&t.spec()]);
    assert_success(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("building ") && err.contains("built "), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let k = &doc[0];
    assert_eq!(
        (k["source"].as_str(), k["built"].as_bool()),
        (Some("tree"), Some(true)),
        "{doc}"
    );
    assert_eq!(
        std::fs::read(k["image"].as_str().unwrap()).unwrap(),
        std::fs::read(&a).unwrap()
    );
    // Again: the cache's, and another spelling of the same commit too.
    let out = fetch(&[&format!("tree:{}@HEAD", t.path())]);
    assert_success(&out);
    let again: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again[0]["built"], false, "{again}");
    assert_eq!(again[0]["image"], k["image"]);
    // With the series: the patched tree's image.
    let series = t.series.display().to_string();
    let out = fetch(&[&format!("{}+{series}", t.spec())]);
    assert_success(&out);
    let patched: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        std::fs::read(patched[0]["image"].as_str().unwrap()).unwrap(),
        std::fs::read(&b).unwrap()
    );
    assert_eq!(patched[0]["series"].as_str(), Some(series.as_str()));

    let c = cache.path();
    let spec = t.spec();
    refused(
        &["kernel", "fetch", &format!("tree:{}@v9.9", t.path())],
        c,
        "names no commit",
    );
    refused(
        &["kernel", "fetch", &format!("tree:{}", img.path().display())],
        c,
        "not a git work tree",
    );
    refused(
        &["kernel", "fetch", &format!("{spec}+/nonexistent.mbox")],
        c,
        "is not a file",
    );
    refused(&["kernel", "fetch", "tree:"], c, "tree:PATH@REV");
    refused(
        &["kernel", "fetch", "debian:6.17.13", "--defconfig"],
        c,
        "none is named here",
    );
    let mine = img.path().join("my.config");
    std::fs::write(&mine, "CONFIG_SMP=y\n").unwrap();
    refused(
        &[
            "kernel",
            "fetch",
            &format!("tree:{}@work~0", t.path()),
            "--arch",
            "x86_64",
            "--config",
            mine.to_str().unwrap(),
        ],
        c,
        "CONFIG_BLK_DEV_INITRD",
    );
    // A config that boots but has no THP cannot run a 64K cell: refused
    // before the image builds (no boot), naming what the cell needs.
    let boots = kconfig::config_lines(Arch::X86_64, &[kconfig::Section::Boot]);
    std::fs::write(&mine, boots).unwrap();
    refused(
        &[
            "vm",
            "--kernel",
            &spec,
            "--arch",
            "x86_64",
            "--config",
            mine.to_str().unwrap(),
            "--",
            "bench",
            "mprotect-toggle",
            "--folio",
            "64K",
        ],
        c,
        "the x86_64 config cannot run the cells asked for: folios above 4K need \
         CONFIG_TRANSPARENT_HUGEPAGE",
    );
    refused(
        &[
            "vm",
            "--kernel",
            "debian:6.17.13",
            "--series",
            &series,
            "--",
            "doctor",
        ],
        c,
        "--series applies to tree kernels",
    );
    assert_eq!(t.state(), before, "the tree is left as found");
}

/// `patch` on the stand-in: a patch touching none of the seeds' code is
/// refused with the remedy; with `--seeds 001` it boots the base and the
/// head, stores both runs, and prints seed 001's table (sizes × folio,
/// base, head, change, verdict: the head's order-0 mprotect regressed) with
/// the mechanism's changes, as text and as Markdown, and the command that
/// made it. `compare` finds the stored runs by their tree specs. Then `vm
/// --series` through Slurm builds both kernels on the node, as one job
/// array, and its guests measure what patch's measured.
#[test]
fn patch_and_vm_series_measure_the_base_and_the_head_here_and_through_slurm() {
    if !build_tools() {
        return;
    }
    let (Some(base), Some(patched)) = (cached_x86_image("6.16.12"), cached_x86_image("6.17.13"))
    else {
        return;
    };
    let t = StandIn::new(&base, &patched);
    let before = t.state();
    let series = t.series.display().to_string();
    let db = TempDb::new();
    let cache = tempfile::tempdir().unwrap();
    let md = cache.path().join("cover.md");
    let patch = |extra: &[&str]| {
        ptelab()
            .args([
                "patch",
                "--base",
                &t.spec(),
                "--series",
                &series,
                "--arch",
                "x86_64",
            ])
            .args(["--accel", "tcg", "--quick", "--db", db.path()])
            .args(extra)
            .env("XDG_CACHE_HOME", cache.path())
            .output()
            .unwrap()
    };
    let out = patch(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("touches none of the seeds' code (KERNEL)") && err.contains("--seeds all"),
        "{err}"
    );

    let out = patch(&["--seeds", "001", "--markdown", md.to_str().unwrap()]);
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    let md = std::fs::read_to_string(&md).unwrap();
    eprintln!("{text}\n{md}");
    assert!(text.contains("001 [REGRESSION] mm/mprotect"), "{text}");
    assert!(
        text.contains("guest instructions per call (QEMU TCG, icount: a count, not time)"),
        "{text}"
    );
    assert!(text.contains("Mechanism per call, base → head"), "{text}");
    assert!(text.contains("ptelab patch --base tree:"), "{text}");
    assert!(
        md.contains("| size | folio | base | head | change | verdict |"),
        "{md}"
    );
    assert!(md.contains("```\nptelab patch --base"), "{md}");
    assert!(
        md.contains("![seed 001 on x86_64](cover-plots/001-x86_64-mprotect-toggle.svg)"),
        "{md}"
    );
    let svg = cache
        .path()
        .join("cover-plots/001-x86_64-mprotect-toggle.svg");
    assert!(
        std::fs::read_to_string(&svg).unwrap().starts_with("<svg"),
        "{}",
        svg.display()
    );

    // The stored runs, found by the tree specs.
    let spec = t.spec();
    let patched_spec = format!("{spec}+{series}");
    let out = ptelab()
        .args(["compare", &spec, &patched_spec, "--json", "--db", db.path()])
        .output()
        .unwrap();
    assert_success(&out);
    let cmp: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cmp["a"]["name"].as_str(), Some(spec.as_str()), "{cmp}");
    let at_400k = cmp["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["size_bytes"] == 400 << 10)
        .expect("a 400K cell");
    assert_eq!(at_400k["verdict"], "regression", "{cmp}");
    assert!(at_400k["ratio"].as_f64().unwrap() > 1.5, "{cmp}");
    let figure = |r: &Value, side: &str| r[side]["median_ns"].as_f64().unwrap();
    let here = (figure(at_400k, "a"), figure(at_400k, "b"));

    let Some(slurm) = TestSlurm::start_or_skip("vm_series_through_slurm") else {
        return;
    };
    let shared = tempfile::tempdir().unwrap();
    let there = TempDb::new();
    let out = Command::new(assert_cmd::cargo::cargo_bin("ptelab"))
        .envs(slurm.env())
        .args(["vm", "--kernel", &spec, "--series", &series])
        .args([
            "--arch",
            "x86_64",
            "--accel",
            "tcg",
            "--json",
            "--db",
            there.path(),
        ])
        .args(["--executor", "slurm", "--time", "30"])
        .args(["--cache", shared.path().to_str().unwrap()])
        .args([
            "--",
            "bench",
            "mprotect-toggle",
            "--size",
            "400K",
            "--folio",
            "4K",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("builds on the cluster").count(), 2, "{err}");
    assert!(
        err.contains("2 tasks (0,1)"),
        "one array for both builds: {err}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let figures: Vec<f64> = doc["guests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["cells"][0]["per_call"]["median"].as_f64().unwrap())
        .collect();
    for (x, y) in [here.0, here.1].iter().zip(&figures) {
        assert!((x - y).abs() <= x * 1e-3, "patch's {x} vs slurm's {y}");
    }
    // Built in the shared cache, each in a repository of its own.
    let src = shared.path().join("builds/src");
    let trees = std::fs::read_dir(&src)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().is_dir())
        .count();
    assert_eq!(trees, 2, "{}", src.display());
    assert_eq!(t.state(), before, "the tree is left as found");
}
