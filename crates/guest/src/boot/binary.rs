//! The ptelab a guest runs (as /init and as the CLI): a static musl build of
//! this same source for the guest's arch, without the results database (the
//! host keeps results). See docs/guests.md, "Guest binary".
//!
//! `PTELAB_GUEST_BINARY_X86_64` / `PTELAB_GUEST_BINARY_ARM64` name a ready
//! binary; otherwise ptelab builds one with cargo in the source tree it was
//! built from (`target/<triple>/guest/ptelab`, incremental).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

use anyhow::Context;
use goblin::elf::{header, program_header, Elf};

use crate::arch::facts;

use crate::error::usage;
use crate::workload::Arch;

/// The largest file taken for a guest binary (a guest build is 4 MB, a
/// release build with debug info about 30 MB).
const MAX_BINARY_BYTES: u64 = 256 << 20;

/// The cargo command of a guest build, less `--target`. The `guest`
/// profile (Cargo.toml) drops debug info; `.cargo/config.toml` links the
/// musl targets with rust-lld and their self-contained C runtime, so no C
/// toolchain is needed. Without the `host` feature there is no SQLite to
/// compile.
const BUILD: [&str; 6] = [
    "build",
    "--profile",
    "guest",
    "--bin",
    "ptelab",
    "--no-default-features",
];

/// The path of a static ptelab for `arch`: the environment's override,
/// checked, or a build from the source tree (done now if out of date).
pub fn guest_binary(arch: Arch) -> anyhow::Result<PathBuf> {
    let mut one = guest_binaries(&[arch])?;
    Ok(one.remove(&arch).expect("asked for"))
}

/// [`guest_binary`] of each of `arches`: the ones to build are built by one
/// cargo invocation (its jobs shared by the targets), not one after the other.
pub fn guest_binaries(arches: &[Arch]) -> anyhow::Result<BTreeMap<Arch, PathBuf>> {
    let mut found = BTreeMap::new();
    let mut to_build = Vec::new();
    for &arch in arches {
        match std::env::var_os(facts(arch).binary_env) {
            Some(path) => {
                found.insert(arch, overridden(arch, PathBuf::from(path))?);
            }
            None if !to_build.contains(&arch) => to_build.push(arch),
            None => {}
        }
    }
    if to_build.is_empty() {
        return Ok(found);
    }
    let Some(tree) = source_tree() else {
        return Err(no_source_tree(to_build[0], &workspace_dir()));
    };
    found.extend(build(&tree, &to_build)?);
    Ok(found)
}

/// The binary the environment names, if it is a static one for `arch`.
fn overridden(arch: Arch, path: PathBuf) -> anyhow::Result<PathBuf> {
    match check_file(&path, arch) {
        Ok(()) => Ok(path),
        Err(why) => Err(usage(format!(
            "{}={}: {why}; accepted: a static {} ELF executable such as `cargo {} --target {}` \
             makes",
            facts(arch).binary_env,
            path.display(),
            facts(arch).elf_name,
            BUILD.join(" "),
            facts(arch).musl_target
        ))),
    }
}

/// Without a source tree to build in, the override is the only way.
fn no_source_tree(arch: Arch, tree: &Path) -> anyhow::Error {
    usage(format!(
        "no guest binary for {arch}: this ptelab does not run from its source tree ({} is \
         gone), so it cannot build one; set {} to a static ptelab for {arch} (`cargo {} \
         --target {}` in ptelab's source tree)",
        tree.display(),
        facts(arch).binary_env,
        BUILD.join(" "),
        facts(arch).musl_target
    ))
}

/// The workspace this crate was built in (two levels above it).
fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The source tree this binary was built from, when it is still there.
pub(super) fn source_tree() -> Option<PathBuf> {
    let tree = workspace_dir().canonicalize().ok()?;
    let manifest = std::fs::read_to_string(tree.join("Cargo.toml")).ok()?;
    manifest
        .lines()
        .any(|l| l.replace(' ', "") == "name=\"ptelab\"")
        .then_some(tree)
}

/// Where cargo puts the guest binary of `arch` built in `tree`.
fn built_path(tree: &Path, arch: Arch) -> PathBuf {
    tree.join("target")
        .join(facts(arch).musl_target)
        .join("guest/ptelab")
}

/// Build (or find up to date) the guest binaries of `arches` in `tree`, in
/// one cargo invocation.
fn build(tree: &Path, arches: &[Arch]) -> anyhow::Result<BTreeMap<Arch, PathBuf>> {
    let stale: Vec<Arch> = arches
        .iter()
        .copied()
        .filter(|&a| !up_to_date(tree, &built_path(tree, a)))
        .collect();
    if !stale.is_empty() {
        for &arch in &stale {
            check_target_installed(tree, arch)?;
        }
        let names: Vec<&str> = stale.iter().map(|a| a.name()).collect();
        eprintln!(
            "ptelab: building the guest binary for {} (first time: a few minutes)…",
            names.join(" and ")
        );
        let targets: Vec<&str> = stale
            .iter()
            .flat_map(|&a| ["--target", facts(a).musl_target])
            .collect();
        let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cargo
            .current_dir(tree)
            .args(BUILD)
            .args(&targets)
            .arg("--target-dir")
            .arg(tree.join("target"))
            // Cargo's progress goes to stderr; keep stdout for ptelab's output.
            .stdout(Stdio::from(std::io::stderr()));
        let status = cargo.status().with_context(|| {
            format!(
                "cannot run cargo to build the guest binary in {}",
                tree.display()
            )
        })?;
        if !status.success() {
            anyhow::bail!(
                "building the guest binary for {} failed ({status}): cargo's output is above; \
                 the command was `cargo {} {}` in {}",
                names.join(" and "),
                BUILD.join(" "),
                targets.join(" "),
                tree.display()
            );
        }
    }
    let mut out = BTreeMap::new();
    for &arch in arches {
        let path = built_path(tree, arch);
        check_file(&path, arch).map_err(|why| {
            anyhow::anyhow!("the guest binary cargo built, {}: {why}", path.display())
        })?;
        out.insert(arch, path);
    }
    Ok(out)
}

/// Whether the binary at `out` is newer than every file the build reads, so
/// cargo need not be asked. (Cargo's own check takes longer, and whenever
/// git's index changes the build script re-runs and ptelab is compiled again.)
fn up_to_date(tree: &Path, out: &Path) -> bool {
    newer_than_sources(tree, out, &["src", "crates"])
}

/// Whether `out` is newer than the workspace's manifests and every file
/// below the `dirs` of `tree`.
pub(super) fn newer_than_sources(tree: &Path, out: &Path, dirs: &[&str]) -> bool {
    let Ok(built) = out.metadata().and_then(|m| m.modified()) else {
        return false;
    };
    let mut newest = SystemTime::UNIX_EPOCH;
    for f in ["Cargo.toml", "Cargo.lock", "build.rs"] {
        newest = newest.max(mtime(&tree.join(f)));
    }
    for d in dirs {
        newest = newest.max(newest_in(&tree.join(d)));
    }
    newest < built
}

fn mtime(path: &Path) -> SystemTime {
    path.metadata()
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// The newest mtime below `dir` (directories too: a removed file changes
/// its directory), skipping build outputs and hidden entries.
fn newest_in(dir: &Path) -> SystemTime {
    let mut newest = mtime(dir);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return newest;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = e.path();
        newest = newest.max(match e.file_type() {
            Ok(t) if t.is_dir() => newest_in(&path),
            _ => mtime(&path),
        });
    }
    newest
}

/// Refuse to start a build that cannot finish: the target's standard
/// library must be installed for the toolchain cargo uses in `tree`.
fn check_target_installed(tree: &Path, arch: Arch) -> anyhow::Result<()> {
    let target = facts(arch).musl_target;
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(&rustc)
        .current_dir(tree)
        .args(["--print", "target-libdir", "--target", target])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| {
            format!(
                "cannot run {} to build the guest binary: install Rust with rustup, or set {} \
                 to a static ptelab for {arch}",
                rustc.to_string_lossy(),
                facts(arch).binary_env
            )
        })?;
    let libdir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && has_std(&libdir) {
        return Ok(());
    }
    Err(usage(not_installed(arch)))
}

/// The message for a missing Rust target: the command that installs it.
fn not_installed(arch: Arch) -> String {
    let target = facts(arch).musl_target;
    format!(
        "the Rust target {target} is not installed, and the guest binary for {arch} is built \
         for it: run `rustup target add {target}` (or set {} to a static ptelab for {arch})",
        facts(arch).binary_env
    )
}

/// Whether `libdir` holds a standard library.
fn has_std(libdir: &Path) -> bool {
    std::fs::read_dir(libdir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("libstd-") && n.ends_with(".rlib")
        })
    })
}

/// Read `path` and check that it is a static executable for `arch`.
fn check_file(path: &Path, arch: Arch) -> Result<(), String> {
    let len = path
        .metadata()
        .map_err(|e| format!("cannot read it: {e}"))?
        .len();
    if len > MAX_BINARY_BYTES {
        return Err(format!(
            "{len} bytes is too large for a ptelab binary (at most {MAX_BINARY_BYTES})"
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read it: {e}"))?;
    check_elf(&bytes, arch)
}

/// Why `bytes` are not a static 64-bit executable for `arch`, if they are not.
fn check_elf(bytes: &[u8], arch: Arch) -> Result<(), String> {
    let hdr = Elf::parse_header(bytes).map_err(|_| "not an ELF file".to_string())?;
    if hdr.e_ident[header::EI_CLASS] != header::ELFCLASS64 {
        return Err("a 32-bit ELF file, not a 64-bit one".into());
    }
    let (want, name) = (facts(arch).elf_machine, facts(arch).elf_name);
    if hdr.e_machine != want {
        return Err(format!(
            "an ELF file for {} (e_machine {}), not {name}",
            header::machine_to_str(hdr.e_machine),
            hdr.e_machine
        ));
    }
    if hdr.e_type != header::ET_EXEC && hdr.e_type != header::ET_DYN {
        return Err(format!(
            "an ELF {}, not an executable",
            header::et_to_str(hdr.e_type)
        ));
    }
    let elf = Elf::parse(bytes).map_err(|e| format!("a damaged ELF file: {e}"))?;
    if let Some(interp) = elf
        .program_headers
        .iter()
        .find(|p| p.p_type == program_header::PT_INTERP)
        .map(|_| elf.interpreter.unwrap_or("?"))
    {
        return Err(format!(
            "dynamically linked (interpreter {interp}): a guest has no shared libraries"
        ));
    }
    if !elf.libraries.is_empty() {
        return Err(format!(
            "needs shared libraries ({}): a guest has none",
            elf.libraries.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal 64-bit little-endian ELF: header, program headers of the
    /// given types (an interpreter path after them when one is PT_INTERP).
    fn elf(machine: u16, e_type: u16, phdrs: &[u32]) -> Vec<u8> {
        let phoff = 64u64;
        let interp_off = phoff + 56 * phdrs.len() as u64;
        let interp = b"/lib/ld-musl-x86_64.so.1\0";
        let mut b = Vec::new();
        b.extend_from_slice(b"\x7fELF");
        b.extend_from_slice(&[2, 1, 1, 0]); // 64-bit, little-endian, version 1, SysV
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&e_type.to_le_bytes());
        b.extend_from_slice(&machine.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes()); // e_version
        b.extend_from_slice(&0x40_1000u64.to_le_bytes()); // e_entry
        b.extend_from_slice(&phoff.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
        b.extend_from_slice(&0u32.to_le_bytes()); // e_flags
        for v in [64u16, 56, phdrs.len() as u16, 64, 0, 0] {
            // e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx
            b.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(b.len(), 64);
        for &t in phdrs {
            let (off, size) = if t == program_header::PT_INTERP {
                (interp_off, interp.len() as u64)
            } else {
                (0, 0)
            };
            b.extend_from_slice(&t.to_le_bytes());
            b.extend_from_slice(&4u32.to_le_bytes()); // p_flags
            for v in [off, off, off, size, size, 0x1000] {
                // p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_align
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        b.extend_from_slice(interp);
        b
    }

    const LOAD: u32 = program_header::PT_LOAD;
    const INTERP: u32 = program_header::PT_INTERP;

    #[test]
    fn a_static_executable_of_the_arch_passes() {
        let x86 = elf(header::EM_X86_64, header::ET_EXEC, &[LOAD]);
        assert_eq!(check_elf(&x86, Arch::X86_64), Ok(()));
        // static-pie (what rust-lld makes for x86_64-unknown-linux-musl)
        let pie = elf(header::EM_X86_64, header::ET_DYN, &[LOAD]);
        assert_eq!(check_elf(&pie, Arch::X86_64), Ok(()));
        let arm = elf(header::EM_AARCH64, header::ET_EXEC, &[LOAD]);
        assert_eq!(check_elf(&arm, Arch::Arm64), Ok(()));
    }

    #[test]
    fn the_other_arch_is_refused_by_name() {
        let arm = elf(header::EM_AARCH64, header::ET_EXEC, &[LOAD]);
        let why = check_elf(&arm, Arch::X86_64).unwrap_err();
        assert_eq!(why, "an ELF file for AARCH64 (e_machine 183), not x86-64");
        let x86 = elf(header::EM_X86_64, header::ET_EXEC, &[LOAD]);
        let why = check_elf(&x86, Arch::Arm64).unwrap_err();
        assert_eq!(why, "an ELF file for X86_64 (e_machine 62), not aarch64");
    }

    #[test]
    fn a_dynamic_executable_is_refused_with_its_interpreter() {
        let dynamic = elf(header::EM_X86_64, header::ET_DYN, &[INTERP, LOAD]);
        let why = check_elf(&dynamic, Arch::X86_64).unwrap_err();
        assert_eq!(
            why,
            "dynamically linked (interpreter /lib/ld-musl-x86_64.so.1): a guest has no shared \
             libraries"
        );
    }

    #[test]
    fn not_an_executable_elf_or_not_64_bit_is_refused() {
        assert_eq!(
            check_elf(b"#!/bin/sh\necho hi\n", Arch::X86_64).unwrap_err(),
            "not an ELF file"
        );
        assert_eq!(check_elf(b"", Arch::X86_64).unwrap_err(), "not an ELF file");
        let obj = elf(header::EM_X86_64, header::ET_REL, &[]);
        assert_eq!(
            check_elf(&obj, Arch::X86_64).unwrap_err(),
            "an ELF REL, not an executable"
        );
        let mut elf32 = elf(header::EM_X86_64, header::ET_EXEC, &[LOAD]);
        elf32[header::EI_CLASS] = header::ELFCLASS32;
        assert_eq!(
            check_elf(&elf32, Arch::X86_64).unwrap_err(),
            "a 32-bit ELF file, not a 64-bit one"
        );
        // A header promising program headers past the end of the file.
        let mut cut = elf(header::EM_X86_64, header::ET_EXEC, &[LOAD, LOAD]);
        cut.truncate(64 + 56);
        assert!(check_elf(&cut, Arch::X86_64)
            .unwrap_err()
            .starts_with("a damaged ELF file"));
    }

    #[test]
    fn the_override_is_checked_and_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("ptelab");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert_eq!(
            check_file(&script, Arch::Arm64).unwrap_err(),
            "not an ELF file"
        );
        let missing = dir.path().join("nope");
        assert!(check_file(&missing, Arch::Arm64)
            .unwrap_err()
            .starts_with("cannot read it: "));
        let good = dir.path().join("good");
        std::fs::write(&good, elf(header::EM_AARCH64, header::ET_EXEC, &[LOAD])).unwrap();
        assert_eq!(check_file(&good, Arch::Arm64), Ok(()));
    }

    #[test]
    fn a_bad_override_is_bad_input_naming_the_variable() {
        let dir = tempfile::tempdir().unwrap();
        let x86 = dir.path().join("ptelab");
        std::fs::write(&x86, elf(header::EM_X86_64, header::ET_EXEC, &[LOAD])).unwrap();
        assert_eq!(overridden(Arch::X86_64, x86.clone()).unwrap(), x86);
        let err = overridden(Arch::Arm64, x86.clone()).unwrap_err();
        assert!(crate::error::is_usage(&err));
        assert_eq!(
            err.to_string(),
            format!(
                "PTELAB_GUEST_BINARY_ARM64={}: an ELF file for X86_64 (e_machine 62), not \
                 aarch64; accepted: a static aarch64 ELF executable such as `cargo build \
                 --profile guest --bin ptelab --no-default-features --target \
                 aarch64-unknown-linux-musl` makes",
                x86.display()
            )
        );
        let err = no_source_tree(Arch::X86_64, Path::new("/gone/ptelab"));
        assert!(crate::error::is_usage(&err));
        assert_eq!(
            err.to_string(),
            "no guest binary for x86_64: this ptelab does not run from its source tree \
             (/gone/ptelab is gone), so it cannot build one; set PTELAB_GUEST_BINARY_X86_64 to \
             a static ptelab for x86_64 (`cargo build --profile guest --bin ptelab \
             --no-default-features --target x86_64-unknown-linux-musl` in ptelab's source tree)"
        );
    }

    #[test]
    fn a_target_counts_as_installed_with_its_std() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!has_std(&dir.path().join("missing")));
        assert!(!has_std(dir.path()));
        std::fs::write(dir.path().join("libcore-0123.rlib"), "").unwrap();
        assert!(!has_std(dir.path()));
        std::fs::write(dir.path().join("libstd-0123.rlib"), "").unwrap();
        assert!(has_std(dir.path()));
    }

    #[test]
    fn build_settings_per_arch() {
        assert_eq!(
            not_installed(Arch::Arm64),
            "the Rust target aarch64-unknown-linux-musl is not installed, and the guest binary \
             for arm64 is built for it: run `rustup target add aarch64-unknown-linux-musl` (or \
             set PTELAB_GUEST_BINARY_ARM64 to a static ptelab for arm64)"
        );
    }

    #[test]
    fn up_to_date_follows_the_newest_source() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path();
        std::fs::create_dir_all(t.join("src/cmd")).unwrap();
        std::fs::create_dir_all(t.join("target/x/guest")).unwrap();
        let src = t.join("src/cmd/a.rs");
        std::fs::write(&src, "").unwrap();
        let out = t.join("target/x/guest/ptelab");
        assert!(!up_to_date(t, &out), "no binary yet");
        let set = |p: &Path, secs: u64| {
            let f = std::fs::File::options().write(true).open(p).unwrap();
            f.set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs))
                .unwrap();
        };
        std::fs::write(&out, "").unwrap();
        for d in ["src", "src/cmd", "target", "target/x", "target/x/guest"] {
            let f = std::fs::File::open(t.join(d)).unwrap();
            f.set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(10))
                .unwrap();
        }
        set(&src, 100);
        set(&out, 200);
        assert!(up_to_date(t, &out));
        set(&src, 300);
        assert!(!up_to_date(t, &out), "a newer source");
        set(&src, 100);
        std::fs::write(t.join("Cargo.lock"), "").unwrap(); // now: newer than the binary
        assert!(!up_to_date(t, &out), "a newer Cargo.lock");
    }

    /// The real thing: cargo builds both guest binaries (minutes the first
    /// time; CI installs the targets, see .ci/run), each a static ELF for
    /// its arch; asked again, nothing is rebuilt.
    #[test]
    fn builds_a_static_binary_for_each_arch() {
        let tree = &source_tree().expect("the source tree");
        for arch in Arch::ALL {
            if let Err(e) = check_target_installed(tree, arch) {
                // .ci/run installs the targets: there, this must run.
                assert!(std::env::var_os("CI").is_none(), "{e:#}");
                eprintln!("SKIPPED: {e:#}");
                return;
            }
        }
        for arch in Arch::ALL {
            let t0 = std::time::Instant::now();
            let path = guest_binary(arch).unwrap();
            let built = mtime(&path);
            eprintln!(
                "guest binary for {arch}: {} in {:.1?}",
                path.display(),
                t0.elapsed()
            );
            assert_eq!(check_file(&path, arch), Ok(()));
            let t1 = std::time::Instant::now();
            assert_eq!(guest_binary(arch).unwrap(), path);
            eprintln!("again: {:.1?}", t1.elapsed());
            assert_eq!(mtime(&path), built, "rebuilt though up to date");
        }
        // This test's own binary is a glibc one: dynamically linked.
        let me = std::env::current_exe().unwrap();
        let why = check_file(&me, Arch::host().unwrap()).unwrap_err();
        assert!(
            why.starts_with("dynamically linked (interpreter /"),
            "{why}"
        );
    }
}
