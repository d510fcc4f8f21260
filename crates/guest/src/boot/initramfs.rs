//! The initramfs a guest boots: a newc cpio archive (uncompressed: the kernel
//! takes it as is and unpacking costs no decompression under TCG) holding
//! ptelab itself as `/init`, the job it is to run, and the directories the
//! kernel layer mounts on. No shell, no busybox.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::workload::Arch;

/// Where the job sits in the guest; its presence is what tells ptelab,
/// started as PID 1, that it is a guest's init and not, say, a container's.
pub const JOB_PATH: &str = "/ptelab/job.json";

/// Directories the guest's init mounts on or the kernel layer expects.
const DIRS: &[&str] = &[
    "/dev",
    "/proc",
    "/sys",
    "/tmp",
    "/run",
    "/run/lock",
    "/var",
    "/var/tmp",
    "/root",
    "/ptelab",
];

/// What the guest's init is to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFile {
    pub schema: String,
    /// The commands, run one after the other in this boot, each answered.
    pub steps: Vec<JobStep>,
    /// The most stdout the guest sends back, all commands together; more is
    /// an error.
    pub max_output: u64,
    /// A disk the init mounts for the first command that needs it (`disk`);
    /// such a command does not run without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<JobDisk>,
    /// Environment of the commands, besides `PATH`, `HOME` and `TERM`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Send the kernel's text symbols (from `/proc/kallsyms`) after the
    /// commands, for the host to name what the QEMU plugin counted. Always
    /// written, as 0 or 1, so that a job asking for them is as long as one
    /// that does not: a job that only named `symbols` moved an arm64 guest's
    /// figure by 9% (docs/guests.md, "Symbols").
    #[serde(default, with = "zero_or_one")]
    pub symbols: bool,
}

/// A flag as the digit 0 or 1: the same length either way.
mod zero_or_one {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(flag: &bool, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(u8::from(*flag))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        match u8::deserialize(d)? {
            0 => Ok(false),
            1 => Ok(true),
            n => Err(serde::de::Error::custom(format!(
                "symbols is 0 or 1, not {n}"
            ))),
        }
    }
}

/// One command of a job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStep {
    /// Arguments of `/init` (ptelab) run as an ordinary child process.
    pub args: Vec<String>,
    /// Run `/files/NAME` with `args` instead of ptelab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// Turn the multi-gen LRU on first, when the kernel has it and it is off
    /// (it stays on for the commands after this one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mglru: bool,
    /// Mount the job's disk first (it stays mounted).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disk: bool,
}

/// A block device the guest's init mounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDisk {
    pub device: String,
    pub fstype: String,
    pub mount: String,
}

#[cfg(test)]
impl JobStep {
    /// ptelab with `args`.
    pub fn ptelab(args: Vec<String>) -> JobStep {
        JobStep {
            args,
            ..JobStep::default()
        }
    }
}

pub const JOB_SCHEMA: &str = "ptelab/guest-job/v3";

enum Content {
    Dir,
    File(PathBuf),
    Bytes(Vec<u8>),
    /// A character device node (major, minor).
    Char(u32, u32),
}

struct Entry {
    name: String,
    mode: u32,
    content: Content,
}

/// An archive being assembled; entries are written in the order added, so
/// parents are added before what they contain.
#[derive(Default)]
pub struct Initramfs {
    entries: Vec<Entry>,
}

impl Initramfs {
    /// The archive for one job: `binary` as `/init`, the job file, the
    /// directories, `/dev/console` (so the kernel can give init its
    /// console before devtmpfs is mounted), and `libs`, host files copied
    /// to the same paths (the shared libraries of a dynamically linked binary).
    pub fn for_job(binary: &Path, job: &JobFile, libs: &[PathBuf]) -> anyhow::Result<Initramfs> {
        let mut a = Initramfs::default();
        for d in DIRS {
            a.dir(d);
        }
        a.push("/dev/console", 0o600, Content::Char(5, 1));
        a.push("/init", 0o755, Content::File(binary.to_owned()));
        a.push(JOB_PATH, 0o644, Content::Bytes(serde_json::to_vec(job)?));
        for lib in libs {
            let name = lib.to_str().context("library path is not UTF-8")?;
            let parts: Vec<&str> = name.split('/').filter(|p| !p.is_empty()).collect();
            let mut parent = String::new();
            for part in &parts[..parts.len().saturating_sub(1)] {
                parent.push('/');
                parent.push_str(part);
                a.dir(&parent);
            }
            a.push(name, 0o755, Content::File(lib.clone()));
        }
        Ok(a)
    }

    /// Add host files as `/files/NAME` (NAME: the file name), executable.
    pub fn with_files(mut self, files: &[PathBuf]) -> anyhow::Result<Initramfs> {
        if !files.is_empty() {
            self.dir("/files");
        }
        for f in files {
            let name = f
                .file_name()
                .and_then(|n| n.to_str())
                .with_context(|| format!("{}: no UTF-8 file name", f.display()))?;
            self.push(&format!("/files/{name}"), 0o755, Content::File(f.clone()));
        }
        Ok(self)
    }

    fn dir(&mut self, name: &str) {
        if !self.entries.iter().any(|e| e.name == name) {
            self.push(name, 0o755, Content::Dir);
        }
    }

    fn push(&mut self, name: &str, mode: u32, content: Content) {
        self.entries.push(Entry {
            name: name.trim_start_matches('/').to_string(),
            mode,
            content,
        });
    }

    /// Write the archive (files are streamed from disk).
    pub fn write<W: Write>(&self, out: W) -> anyhow::Result<W> {
        let mut out = out;
        for (ino, e) in self.entries.iter().enumerate() {
            let b = cpio::newc::Builder::new(&e.name)
                .ino(ino as u32 + 1)
                .nlink(1);
            out = match &e.content {
                Content::Dir => b.mode(0o040000 | e.mode).nlink(2).write(out, 0).finish()?,
                Content::Char(maj, min) => b
                    .mode(0o020000 | e.mode)
                    .rdev_major(*maj)
                    .rdev_minor(*min)
                    .write(out, 0)
                    .finish()?,
                Content::Bytes(data) => {
                    let mut w = b
                        .mode(0o100000 | e.mode)
                        .write(out, size32(data.len() as u64, &e.name)?);
                    w.write_all(data)?;
                    w.finish()?
                }
                Content::File(path) => {
                    let f = File::open(path).with_context(|| format!("{}", path.display()))?;
                    let len = f.metadata()?.len();
                    let mut w = b.mode(0o100000 | e.mode).write(out, size32(len, &e.name)?);
                    let copied = io::copy(&mut f.take(len), &mut w)?;
                    if copied != len {
                        bail!("{} changed size while being archived", path.display());
                    }
                    w.finish()?
                }
            };
        }
        Ok(cpio::newc::trailer(out)?)
    }

    /// Write the archive to an unnamed temporary file in the system's
    /// temporary directory (see [`Initrd`]).
    pub fn write_temp(&self) -> anyhow::Result<Initrd> {
        self.write_temp_in(&std::env::temp_dir())
    }

    /// Write the archive to an unnamed temporary file in `dir`.
    pub fn write_temp_in(&self, dir: &Path) -> anyhow::Result<Initrd> {
        let file = tempfile::tempfile_in(dir)
            .with_context(|| format!("creating the initramfs in {}", dir.display()))?;
        let w = self
            .write(BufWriter::new(file))
            .context("writing the initramfs")?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all().ok();
        Ok(Initrd { file })
    }
}

/// A written initramfs: an unnamed file (`O_TMPFILE`), so that nothing is
/// left behind whatever ends ptelab, SIGKILL included (a named one of
/// several MB per boot was). QEMU opens it by [`Initrd::path`] while this
/// is held.
pub struct Initrd {
    file: File,
}

impl Initrd {
    pub fn path(&self) -> PathBuf {
        super::disk::held_path(&self.file)
    }

    pub fn bytes(&self) -> anyhow::Result<u64> {
        Ok(self.file.metadata().context("the initramfs's size")?.len())
    }
}

fn size32(len: u64, name: &str) -> anyhow::Result<u32> {
    u32::try_from(len).with_context(|| format!("{name} is too large for a cpio archive"))
}

/// What the ELF header of a binary says: its arch and whether it needs a
/// dynamic loader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfInfo {
    pub arch: Option<Arch>,
    pub dynamic: bool,
}

/// Read the ELF header and program headers of `path` (64-bit only).
pub fn elf_info(path: &Path) -> anyhow::Result<ElfInfo> {
    // The largest file taken (a debug build with its debug info is ~80 MB).
    const MAX: u64 = 512 << 20;
    let mut bytes = Vec::new();
    File::open(path)
        .with_context(|| format!("{}", path.display()))?
        .take(MAX)
        .read_to_end(&mut bytes)
        .with_context(|| format!("{}", path.display()))?;
    parse_elf(&bytes).with_context(|| format!("{} is not a 64-bit ELF executable", path.display()))
}

fn parse_elf(bytes: &[u8]) -> anyhow::Result<ElfInfo> {
    use goblin::elf::{header, program_header, Elf};
    let hdr = Elf::parse_header(bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
    if hdr.e_ident[header::EI_CLASS] != header::ELFCLASS64 {
        bail!("32-bit");
    }
    let arch = match hdr.e_machine {
        header::EM_X86_64 => Some(Arch::X86_64),
        header::EM_AARCH64 => Some(Arch::Arm64),
        _ => None,
    };
    let elf = Elf::parse(bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
    let dynamic = elf
        .program_headers
        .iter()
        .any(|p| p.p_type == program_header::PT_INTERP);
    Ok(ElfInfo { arch, dynamic })
}

/// The shared libraries (and the loader) `ldd` lists for a dynamically
/// linked binary of this machine, as absolute paths.
pub fn shared_libs(binary: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .context(
            "running ldd (to find the shared libraries a dynamic ptelab needs in the guest)",
        )?;
    if !out.status.success() {
        bail!(
            "ldd {}: {}",
            binary.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(parse_ldd(&String::from_utf8_lossy(&out.stdout)))
}

fn parse_ldd(text: &str) -> Vec<PathBuf> {
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
        let path = match line.split_once("=>") {
            Some((_, rhs)) => rhs.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            if !libs.iter().any(|l: &PathBuf| l == Path::new(p)) {
                libs.push(PathBuf::from(p));
            }
        }
    }
    libs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobFile {
        JobFile {
            schema: JOB_SCHEMA.into(),
            steps: vec![JobStep {
                args: vec!["doctor".into(), "--json".into()],
                program: None,
                mglru: false,
                disk: false,
            }],
            max_output: 1 << 20,
            disk: None,
            env: BTreeMap::new(),
            symbols: false,
        }
    }

    /// An entry read back: (name, mode, size, rdev, data).
    type ReadBack = (String, u32, u32, (u32, u32), Vec<u8>);

    /// Read an archive back with the crate's reader.
    fn read_back(bytes: &[u8]) -> Vec<ReadBack> {
        let mut out = Vec::new();
        let mut r: &[u8] = bytes;
        loop {
            let mut reader = cpio::newc::Reader::new(r).unwrap();
            let e = reader.entry().clone();
            if e.is_trailer() {
                break;
            }
            let mut data = Vec::new();
            reader.read_to_end(&mut data).unwrap();
            out.push((
                e.name().to_string(),
                e.mode(),
                e.file_size(),
                (e.rdev_major(), e.rdev_minor()),
                data,
            ));
            r = reader.finish().unwrap();
        }
        out
    }

    #[test]
    fn archive_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("ptelab");
        std::fs::write(&bin, b"\x7fELF binary bytes").unwrap();
        let lib = dir.path().join("lib").join("libfoo.so.1");
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        std::fs::write(&lib, b"lib").unwrap();
        let a = Initramfs::for_job(&bin, &job(), std::slice::from_ref(&lib)).unwrap();
        let bytes = a.write(Vec::new()).unwrap();
        assert_eq!(bytes.len() % 4, 0);
        let entries = read_back(&bytes);
        let find = |n: &str| {
            entries
                .iter()
                .find(|e| e.0 == n)
                .unwrap_or_else(|| panic!("{n} missing"))
        };
        let init = find("init");
        assert_eq!(
            (init.1, init.4.as_slice()),
            (0o100755, &b"\x7fELF binary bytes"[..])
        );
        let j: JobFile = serde_json::from_slice(&find("ptelab/job.json").4).unwrap();
        assert_eq!(j, job());
        let console = find("dev/console");
        assert_eq!((console.1, console.3), (0o020600, (5, 1)));
        for d in ["proc", "sys", "dev", "tmp", "run/lock", "var/tmp"] {
            assert_eq!(find(d).1, 0o040755, "{d}");
        }
        let libname = lib.to_str().unwrap().trim_start_matches('/');
        assert_eq!(find(libname).4, b"lib");
        // Parents come before their children.
        let pos = |n: &str| entries.iter().position(|e| e.0 == n).unwrap();
        assert!(
            pos(lib
                .parent()
                .unwrap()
                .to_str()
                .unwrap()
                .trim_start_matches('/'))
                < pos(libname)
        );
        assert!(pos("run") < pos("run/lock"));
    }

    #[test]
    fn asking_for_symbols_leaves_the_archive_as_long() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("ptelab");
        std::fs::write(&bin, b"ptelab").unwrap();
        let archive = |symbols: bool| {
            let j = JobFile { symbols, ..job() };
            let bytes = Initramfs::for_job(&bin, &j, &[])
                .unwrap()
                .write(Vec::new())
                .unwrap();
            let text = read_back(&bytes)
                .into_iter()
                .find(|e| e.0 == "ptelab/job.json")
                .unwrap()
                .4;
            (bytes.len(), String::from_utf8(text).unwrap())
        };
        let (without, with) = (archive(false), archive(true));
        assert_eq!(without.0, with.0);
        assert!(without.1.contains(r#""symbols":0"#), "{}", without.1);
        assert!(with.1.contains(r#""symbols":1"#), "{}", with.1);
        let back: JobFile = serde_json::from_str(&with.1).unwrap();
        assert!(back.symbols);
        let two = with.1.replace(r#""symbols":1"#, r#""symbols":2"#);
        let e = serde_json::from_str::<JobFile>(&two).unwrap_err();
        assert!(e.to_string().contains("symbols is 0 or 1, not 2"), "{e}");
    }

    #[test]
    fn extra_files_go_to_files_executable() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("ptelab");
        std::fs::write(&bin, b"ptelab").unwrap();
        let prog = dir.path().join("mprot");
        std::fs::write(&prog, b"reproducer").unwrap();
        let mut j = job();
        j.steps[0].program = Some("mprot".into());
        let a = Initramfs::for_job(&bin, &j, &[])
            .unwrap()
            .with_files(std::slice::from_ref(&prog))
            .unwrap();
        let entries = read_back(&a.write(Vec::new()).unwrap());
        let find = |n: &str| {
            entries
                .iter()
                .find(|e| e.0 == n)
                .unwrap_or_else(|| panic!("{n}"))
        };
        assert_eq!(find("files").1, 0o040755);
        assert_eq!(
            (find("files/mprot").1, find("files/mprot").4.as_slice()),
            (0o100755, &b"reproducer"[..])
        );
        let back: JobFile = serde_json::from_slice(&find("ptelab/job.json").4).unwrap();
        assert_eq!(back.steps[0].program.as_deref(), Some("mprot"));
    }

    #[test]
    fn job_file_with_a_disk_and_steps_round_trips() {
        let mut j = job();
        j.disk = Some(JobDisk {
            device: "/dev/nvme0n1".into(),
            fstype: "ext4".into(),
            mount: "/mnt/ptelab".into(),
        });
        j.steps.push(JobStep {
            args: vec!["sweep".into(), "reclaim".into()],
            program: None,
            mglru: true,
            disk: true,
        });
        j.env
            .insert("PTELAB_RECLAIM_DIR".into(), "/mnt/ptelab".into());
        let text = serde_json::to_string(&j).unwrap();
        assert_eq!(serde_json::from_str::<JobFile>(&text).unwrap(), j);
        // Only what a job uses is written, and `symbols` always.
        let plain = serde_json::to_value(job()).unwrap();
        assert_eq!(
            plain,
            serde_json::json!({"schema": JOB_SCHEMA, "steps": [{"args": ["doctor", "--json"]}],
                "max_output": 1048576, "symbols": 0})
        );
    }

    #[test]
    fn cpio_tool_lists_it_when_installed() {
        let Ok(mut child) = std::process::Command::new("cpio")
            .args(["-t", "--quiet"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
        else {
            eprintln!("skipped: no cpio tool");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("ptelab");
        std::fs::write(&bin, vec![7u8; 10_000]).unwrap();
        let bytes = Initramfs::for_job(&bin, &job(), &[])
            .unwrap()
            .write(Vec::new())
            .unwrap();
        child.stdin.take().unwrap().write_all(&bytes).unwrap();
        let out = child.wait_with_output().unwrap();
        let list = String::from_utf8(out.stdout).unwrap();
        assert!(
            list.lines().any(|l| l == "init") && list.lines().any(|l| l == "ptelab/job.json"),
            "{list}"
        );
    }

    /// Not a test on its own: the process [`a_killed_holder_leaves_nothing`]
    /// starts and SIGKILLs while it holds an initramfs.
    #[test]
    #[ignore]
    fn hold_an_initramfs() {
        let Ok(dir) = std::env::var("PTELAB_TEST_INITRAMFS_DIR") else {
            return;
        };
        let bin = Path::new(&dir).join("..").join("ptelab");
        let initrd = Initramfs::for_job(&bin, &job(), &[])
            .unwrap()
            .write_temp_in(Path::new(&dir))
            .unwrap();
        assert!(initrd.bytes().unwrap() > 10_000);
        println!("holding {}", initrd.path().display());
        std::thread::sleep(std::time::Duration::from_secs(60));
    }

    #[test]
    fn a_killed_holder_leaves_nothing() {
        use std::io::BufRead;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("tmp");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(root.path().join("ptelab"), vec![7u8; 20_000]).unwrap();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                // libtest names a test by its path below the crate.
                &format!(
                    "{}::hold_an_initramfs",
                    module_path!().split_once("::").unwrap().1
                ),
            ])
            .args(["--ignored", "--nocapture", "--test-threads", "1"])
            .env("PTELAB_TEST_INITRAMFS_DIR", &dir)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let held = out
            .lines()
            .map_while(Result::ok)
            // libtest may print the test's name on the same line first.
            .find_map(|l| {
                l.split_once("holding ")
                    .map(|(_, p)| PathBuf::from(p.trim()))
            })
            .expect("the child holds an initramfs");
        // Readable by path while held, as QEMU reads it.
        assert!(std::fs::metadata(&held).unwrap().len() > 10_000);
        // SIGKILL: no handler runs, no destructor.
        child.kill().unwrap();
        child.wait().unwrap();
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    #[test]
    fn elf_headers() {
        let me = elf_info(&std::env::current_exe().unwrap()).unwrap();
        assert_eq!(me.arch, Arch::host());
        assert!(me.dynamic, "test binaries are linked against glibc");
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk");
        std::fs::write(&junk, b"#!/bin/sh\n").unwrap();
        assert!(elf_info(&junk).is_err());
        // A static aarch64 header: no PT_INTERP among its program headers.
        let mut h = vec![0u8; 64 + 56];
        h[..7].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1]);
        h[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        h[18..20].copy_from_slice(&183u16.to_le_bytes());
        h[20..24].copy_from_slice(&1u32.to_le_bytes());
        h[32..40].copy_from_slice(&64u64.to_le_bytes());
        h[52..54].copy_from_slice(&64u16.to_le_bytes());
        h[54..56].copy_from_slice(&56u16.to_le_bytes());
        h[56..58].copy_from_slice(&1u16.to_le_bytes());
        h[64..68].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
        assert_eq!(
            parse_elf(&h).unwrap(),
            ElfInfo {
                arch: Some(Arch::Arm64),
                dynamic: false
            }
        );
        h[56..58].copy_from_slice(&2000u16.to_le_bytes());
        assert!(
            parse_elf(&h).is_err(),
            "program headers beyond the file are refused"
        );
    }

    #[test]
    fn ldd_output() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x1)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x2)\n\t/lib64/ld-linux-x86-64.so.2 (0x3)\n\tlibm.so.6 => not found\n";
        assert_eq!(
            parse_ldd(text),
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
            .map(PathBuf::from)
        );
    }
}
