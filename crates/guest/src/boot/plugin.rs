//! ptelab's QEMU TCG plugin on this machine (docs/guests.md, "Mechanism
//! counters"): the shared library QEMU loads for `vm --profile`, built from
//! `crates/qemu-plugin` in the source tree once (and again when out of
//! date) like the guest binary, and the checks that this QEMU can load it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use anyhow::Context;
use ptelab_counts::api;

use super::binary::{newer_than_sources, source_tree};
use crate::error::usage;
use crate::workload::Arch;

/// Names a ready plugin library instead of a build.
pub const ENV: &str = "PTELAB_QEMU_PLUGIN";
const PACKAGE: &str = "ptelab-qemu-plugin";
const LIBRARY: &str = "libptelab_qemu_plugin.so";

/// The plugin library: the environment's override, or a release build in
/// the source tree (built now when out of date).
pub fn library() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os(ENV) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            return Err(usage(format!(
                "{ENV}={}: no such file; accepted: the {LIBRARY} that `cargo build --release -p \
                 {PACKAGE}` makes",
                p.display()
            )));
        }
        return Ok(p);
    }
    let Some(tree) = source_tree() else {
        return Err(usage(format!(
            "no QEMU plugin: this ptelab does not run from its source tree, so it cannot build \
             one; set {ENV} to the {LIBRARY} that `cargo build --release -p {PACKAGE}` makes in \
             ptelab's source tree"
        )));
    };
    let out = tree.join("target/release").join(LIBRARY);
    if !newer_than_sources(&tree, &out, &["crates/counts", "crates/qemu-plugin"]) {
        eprintln!("ptelab: building the QEMU plugin ({PACKAGE})…");
        let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .current_dir(&tree)
            .args(["build", "--release", "-p", PACKAGE, "--target-dir"])
            .arg(tree.join("target"))
            .stdout(Stdio::from(std::io::stderr()))
            .status()
            .with_context(|| {
                format!("cannot run cargo to build {PACKAGE} in {}", tree.display())
            })?;
        if !status.success() {
            anyhow::bail!(
                "building the QEMU plugin failed ({status}): cargo's output is above; the \
                 command was `cargo build --release -p {PACKAGE}` in {}",
                tree.display()
            );
        }
    }
    anyhow::ensure!(
        out.is_file(),
        "cargo built {PACKAGE} but {} is missing",
        out.display()
    );
    Ok(out)
}

/// A QEMU that loads the plugin, and the level it loads it at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loads {
    /// The level the plugin declares to this QEMU (passed in
    /// [`api::ENV`] to every QEMU that loads it).
    pub level: i32,
    /// The levels this QEMU accepts, as it reported them: `min..cur`.
    pub accepts: String,
    /// The QEMU's release (major, minor), which the plugin is told
    /// (`qemu=`: how its blocks list instructions).
    pub release: (u32, u32),
}

impl Loads {
    /// The environment a QEMU loading the plugin runs with.
    pub fn env(&self) -> [(&'static str, String); 1] {
        [(api::ENV, self.level.to_string())]
    }
}

/// Whether `emulator` (QEMU `version`) loads the plugin `library`: a QEMU
/// too old for plugins, built without them, or refusing every level the
/// plugin speaks is a usage error saying why and what to install. The
/// answer comes from loading the plugin in this QEMU (`probe=on`: it
/// reports and declines, and QEMU exits at once, about 0.1 s), once per
/// emulator and library in a process.
pub fn probe(emulator: &Path, version: &str, library: &Path) -> anyhow::Result<Loads> {
    static SEEN: Mutex<Vec<((PathBuf, PathBuf), Loads)>> = Mutex::new(Vec::new());
    let key = (emulator.to_path_buf(), library.to_path_buf());
    if let Some((_, l)) = SEEN.lock().unwrap().iter().find(|(k, _)| *k == key) {
        return Ok(l.clone());
    }
    let release = api::release(version);
    let Some((level, release)) =
        release.and_then(|(m, n)| Some((api::level_for_qemu(m, n)?, (m, n))))
    else {
        let (m, n) = api::FIRST_QEMU_WITH_PLUGINS;
        return Err(usage(format!(
            "{} is QEMU {version}, which has no TCG plugins (they came with QEMU {m}.{n}); \
             counting the mechanism needs QEMU {m}.{n} to 11.x first on PATH, such as Debian's \
             qemu-system-x86 and qemu-system-arm packages",
            emulator.display()
        )));
    };
    let help = Command::new(emulator)
        .arg("-help")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .with_context(|| format!("running {} -help", emulator.display()))?;
    if !supports_plugins(&String::from_utf8_lossy(&help.stdout)) {
        return Err(usage(format!(
            "{} (QEMU {version}) was built without TCG plugin support (its -help lists no \
             -plugin option); counting the mechanism needs a QEMU configured with \
             --enable-plugins, such as Debian's qemu-system-x86 and qemu-system-arm packages",
            emulator.display()
        )));
    }
    let out = Command::new(emulator)
        .args([
            "-M",
            "none",
            "-display",
            "none",
            "-nodefaults",
            "-no-user-config",
        ])
        .arg("-plugin")
        .arg(format!("{},probe=on", escape(library)))
        .env(api::ENV, level.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .with_context(|| format!("running {} to load the QEMU plugin", emulator.display()))?;
    let err = String::from_utf8_lossy(&out.stderr);
    let loads = parse_probe(&err, level, release).ok_or_else(|| {
        let said = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("(nothing on stderr)")
            .trim();
        let (m, n) = api::NEWEST_QEMU_MEASURED;
        usage(format!(
            "{} (QEMU {version}) cannot load ptelab's QEMU plugin at level {level}: {said}. \
             ptelab's plugin speaks levels 1 to {newest} (QEMU 4.2 to {m}.{n}); put such a QEMU \
             first on PATH (Debian 12's qemu-system-* are 7.2, Debian 13's 10.0), or run \
             without counting (without --profile)",
            emulator.display(),
            newest = api::NEWEST,
        ))
    })?;
    SEEN.lock().unwrap().push((key, loads.clone()));
    Ok(loads)
}

/// Whether the QEMU of `arch` on PATH loads the plugin `library`
/// ([`probe`]).
pub fn loads_in(arch: Arch, library: &Path) -> anyhow::Result<Loads> {
    let emulator = super::qemu::find_emulator(arch)?;
    let version = super::qemu::version(&emulator)?;
    probe(&emulator, &version, library)
}

/// The plugin's probe line (`ptelab plugin: loads: level 7, QEMU accepts
/// 7..7, target aarch64`) in QEMU's stderr.
fn parse_probe(stderr: &str, level: i32, release: (u32, u32)) -> Option<Loads> {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix(api::PROBE_LINE))?;
    let accepts = line
        .split_once("QEMU accepts ")?
        .1
        .split(',')
        .next()?
        .trim();
    Some(Loads {
        level,
        accepts: accepts.to_string(),
        release,
    })
}

fn supports_plugins(help: &str) -> bool {
    help.lines().any(|l| l.trim_start().starts_with("-plugin"))
}

/// QEMU's `-plugin` argument: commas in a path are doubled (QEMU's option
/// syntax).
pub fn qemu_arg(library: &Path, out: &Path, loads: &Loads) -> String {
    let (major, minor) = loads.release;
    format!(
        "{},out={},qemu={major}.{minor}",
        escape(library),
        escape(out)
    )
}

fn escape(p: &Path) -> String {
    p.to_string_lossy().replace(',', ",,")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in "QEMU" running `script` (sh), executable, in `dir`.
    fn fake_qemu(dir: &Path, script: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let fake = dir.join("qemu-system-x86_64");
        std::fs::write(&fake, format!("#!/bin/sh\n{script}")).unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        fake
    }

    #[test]
    fn a_qemu_before_plugins_is_refused_naming_its_version() {
        let e = probe(
            Path::new("/usr/bin/qemu-system-x86_64"),
            "4.1.1 (v4.1.1)",
            Path::new("/l.so"),
        )
        .unwrap_err();
        assert!(crate::error::is_usage(&e));
        let msg = e.to_string();
        assert!(msg.contains("QEMU 4.1.1") && msg.contains("4.2"), "{msg}");
    }

    #[test]
    fn a_qemu_without_plugins_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fake = fake_qemu(dir.path(), "echo '-accel tcg'\necho '-icount shift=N'\n");
        let e = probe(&fake, "7.2.0", Path::new("/l.so")).unwrap_err();
        assert!(crate::error::is_usage(&e));
        assert!(e.to_string().contains("without TCG plugin support"), "{e}");
        assert!(supports_plugins(
            "-plugin [file=]<file>[,<argname>=<argvalue>]\n                load a plugin\n"
        ));
    }

    #[test]
    fn a_qemu_refusing_the_level_is_refused_with_its_words_and_a_remedy() {
        // A future QEMU that no longer accepts level 7: its own message is
        // quoted, with what to do instead.
        let dir = tempfile::tempdir().unwrap();
        let fake = fake_qemu(
            dir.path(),
            "case \"$1\" in -help) echo '-plugin [file=]<file>' ;; *) \
             echo \"qemu-system-x86_64: Could not load plugin l.so: plugin requires API version \
             $PTELAB_QEMU_PLUGIN_API, but this QEMU supports only a minimum version of 9\" >&2; \
             exit 1 ;; esac\n",
        );
        let e = probe(&fake, "12.0.0", Path::new("/l.so")).unwrap_err();
        assert!(crate::error::is_usage(&e));
        let msg = e.to_string();
        assert!(
            msg.contains("QEMU 12.0.0")
                && msg.contains(
                    "requires API version 7, but this QEMU supports only a minimum version of 9"
                )
                && msg.contains("put such a QEMU first on PATH"),
            "{msg}"
        );
    }

    #[test]
    fn a_qemu_that_loads_the_plugin_says_at_which_level() {
        let dir = tempfile::tempdir().unwrap();
        let fake = fake_qemu(
            dir.path(),
            "case \"$1\" in -help) echo '-plugin [file=]<file>' ;; *) \
             echo \"ptelab plugin: loads: level $PTELAB_QEMU_PLUGIN_API, QEMU accepts 2..4, \
             target x86_64\" >&2; echo 'qemu: Could not load plugin: returned error code 1' >&2; \
             exit 1 ;; esac\n",
        );
        let l = probe(
            &fake,
            "10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)",
            Path::new("/l.so"),
        )
        .unwrap();
        assert_eq!(
            l,
            Loads {
                level: 2,
                accepts: "2..4".into(),
                release: (10, 0)
            }
        );
        assert_eq!(l.env(), [("PTELAB_QEMU_PLUGIN_API", "2".to_string())]);
    }

    #[test]
    fn commas_in_paths_are_doubled() {
        assert_eq!(
            qemu_arg(
                Path::new("/a,b/lib.so"),
                Path::new("/proc/1/fd/5"),
                &Loads {
                    level: 1,
                    accepts: "0..1".into(),
                    release: (7, 2)
                }
            ),
            "/a,,b/lib.so,out=/proc/1/fd/5,qemu=7.2"
        );
    }
}
