//! ptelab's QEMU TCG plugin on this machine (docs/guests.md, "Mechanism
//! counters"): the shared library QEMU loads for `vm --profile`, built from
//! `crates/qemu-plugin` in the source tree once (and again when out of
//! date) like the guest binary, and the checks that this QEMU can load it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;
use ptelab_counts::{FIRST_QEMU_WITHOUT_API_V1, PLUGIN_API_VERSION};

use super::binary::{newer_than_sources, source_tree};
use crate::error::usage;

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

/// Refuse a QEMU that cannot load the plugin: one built without plugin
/// support, or one from 9.0 on (plugin API level 2 and up).
pub fn check_qemu(emulator: &Path, version: &str) -> anyhow::Result<()> {
    if let Some((major, minor)) = major_minor(version) {
        if (major, minor) >= FIRST_QEMU_WITHOUT_API_V1 {
            let (m, n) = FIRST_QEMU_WITHOUT_API_V1;
            return Err(usage(format!(
                "{} is QEMU {version}: QEMU {m}.{n} and later load only plugins of API level 2 \
                 and up, and ptelab's plugin speaks level {PLUGIN_API_VERSION} (QEMU 4.2 to \
                 8.2; Debian 12's qemu-system-* 7.2 loads it); --profile needs such a QEMU \
                 first on PATH",
                emulator.display()
            )));
        }
    }
    let help = Command::new(emulator)
        .arg("-help")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .with_context(|| format!("running {} -help", emulator.display()))?;
    if !supports_plugins(&String::from_utf8_lossy(&help.stdout)) {
        return Err(usage(format!(
            "{} (QEMU {version}) was built without TCG plugin support (its -help lists no \
             -plugin option); --profile needs a QEMU configured with --enable-plugins, such as \
             Debian's qemu-system-x86 and qemu-system-arm packages",
            emulator.display()
        )));
    }
    Ok(())
}

/// `7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)` → (7, 2).
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut it = version.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

fn supports_plugins(help: &str) -> bool {
    help.lines().any(|l| l.trim_start().starts_with("-plugin"))
}

/// QEMU's `-plugin` argument: commas in a path are doubled (QEMU's option
/// syntax).
pub fn qemu_arg(library: &Path, out: &Path) -> String {
    let esc = |p: &Path| p.to_string_lossy().replace(',', ",,");
    format!("{},out={}", esc(library), esc(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_that_load_the_plugin() {
        assert_eq!(
            major_minor("7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"),
            Some((7, 2))
        );
        assert_eq!(major_minor("9.0.0"), Some((9, 0)));
        assert_eq!(major_minor("garbage"), None);
    }

    #[test]
    fn a_newer_qemu_is_refused_naming_its_version() {
        let e = check_qemu(Path::new("/usr/bin/qemu-system-x86_64"), "9.2.1 (v9.2.1)").unwrap_err();
        assert!(crate::error::is_usage(&e));
        let msg = e.to_string();
        assert!(
            msg.contains("QEMU 9.2.1") && msg.contains("level 1"),
            "{msg}"
        );
    }

    #[test]
    fn a_qemu_without_plugins_is_refused() {
        // A stand-in "QEMU" whose -help lists no -plugin option.
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("qemu-system-x86_64");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho '-accel tcg'\necho '-icount shift=N'\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = check_qemu(&fake, "7.2.0").unwrap_err();
        assert!(crate::error::is_usage(&e));
        assert!(e.to_string().contains("without TCG plugin support"), "{e}");
        assert!(supports_plugins(
            "-plugin [file=]<file>[,<argname>=<argvalue>]\n                load a plugin\n"
        ));
    }

    #[test]
    fn commas_in_paths_are_doubled() {
        assert_eq!(
            qemu_arg(Path::new("/a,b/lib.so"), Path::new("/proc/1/fd/5")),
            "/a,,b/lib.so,out=/proc/1/fd/5"
        );
    }
}
