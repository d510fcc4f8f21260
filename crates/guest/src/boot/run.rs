//! One guest run: build the initramfs, boot the kernel in QEMU, keep the
//! console in the log file as it comes, and bring back the command's stdout
//! verified (`frame`). No QEMU outlives this function: a timeout, a panic, a
//! malformed answer, SIGINT or an error of ours kills and reaps it.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::disk::{self, DiskImage, DiskSpec};
use super::frame::{self, FrameError};
use super::initramfs::{self, Initramfs, JobDisk, JobFile, JobStep, JOB_SCHEMA};
use super::qemu::{self, Machine, Qemu};
use crate::error::bail_usage;
use crate::workload::Arch;

// The accelerator choice is part of this module's interface.
#[cfg_attr(not(test), allow(unused_imports))]
pub use super::qemu::{choose_accel, Accel, AccelRequest};

/// The most stdout a guest may send back.
pub const MAX_OUTPUT: u64 = 64 << 20;
/// Console beyond the answer kept (boot messages, the command's stderr);
/// a guest that prints more is stopped.
const CONSOLE_SLACK: u64 = 16 << 20;
/// Time QEMU gets to exit after the guest finished answering.
const POWER_OFF_GRACE: Duration = Duration::from_secs(10);
/// Console lines quoted in an error.
const TAIL_LINES: usize = 20;

/// One boot to run: data, so that another machine can run it
/// (`fleet::executor`: a cluster task is this, serialized).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct GuestJob {
    pub arch: Arch,
    pub kernel: PathBuf,
    /// ptelab for the guest's arch: static, or (same arch as this machine
    /// only) dynamic, with the shared libraries `ldd` lists copied along.
    pub binary: PathBuf,
    /// The commands, run one after the other in this boot.
    pub steps: Vec<JobStep>,
    /// Static executables for the guest's arch, put in `/files/NAME`.
    pub files: Vec<PathBuf>,
    /// Kernel parameters added to ptelab's (`transparent_hugepage=never`).
    pub append: Vec<String>,
    pub accel: Accel,
    pub memory_mib: u64,
    /// A disk for the commands' files (`disk`): made, formatted and
    /// attached for this run, mounted by the guest's init, gone after.
    pub disk: Option<DiskSpec>,
    /// From QEMU's start to its exit.
    pub timeout: Duration,
    /// The guest's console, written as it comes.
    pub log: PathBuf,
    /// Set on SIGINT/SIGTERM (`kernel::signals::interrupted()`): stop the
    /// guest. Not serialized: the machine that runs the boot sets its own.
    #[serde(skip, default = "never_set")]
    pub interrupted: &'static AtomicBool,
    /// Load ptelab's QEMU plugin (`vm --profile`).
    pub profile: Option<Profiling>,
    /// What this boot varies beside the kernel path (`calibrate --guest`).
    pub setup: qemu::Setup,
}

/// A flag nothing sets: a deserialized job's, until its runner sets its own.
fn never_set() -> &'static AtomicBool {
    static NEVER: AtomicBool = AtomicBool::new(false);
    &NEVER
}

/// What a profiled guest run loads and asks for.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Profiling {
    /// The plugin library (`plugin::library`).
    pub library: PathBuf,
    /// Ask the guest for its kernel's symbols (none cached for it yet).
    pub symbols: bool,
}

/// What one command of a guest run answered, with the boot it ran in.
/// Serialized as a cluster task's answer (`fleet::executor`).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct GuestOutput {
    pub stdout: Vec<u8>,
    /// The command's exit code in the guest: 128+N when killed by signal N
    /// (137: SIGKILL, e.g. the guest's OOM killer; the log has its message);
    /// 125 the guest's init could not read its job, 126 could not start it.
    pub exit_code: i32,
    pub accel: Accel,
    pub qemu_version: String,
    /// `uname -r` in the guest, as the guest reported it.
    pub kernel_release: String,
    /// From QEMU's start to its exit (the whole boot, all its commands).
    pub boot_to_exit: Duration,
    /// What the QEMU plugin counted in this command (a profiled run).
    pub counts: Option<ptelab_counts::record::Output>,
    /// The guest kernel's symbols as it sent them (deflated compact text;
    /// empty when its kallsyms showed no addresses), when asked for: on the
    /// boot's first command only.
    pub symbols: Option<Vec<u8>>,
    /// The symbols that name what the plugin counted, or why there are
    /// none (set by the fleet, from `symbols` or its cache).
    #[serde(skip)]
    pub symbol_table: Option<Result<super::profile::Symbols, String>>,
}

/// The full QEMU command line a job boots with (for the log and reports).
pub fn command_line(emulator: &Path, machine: &Machine) -> String {
    std::iter::once(emulator.as_os_str().to_owned())
        .chain(qemu::args(machine))
        .map(|a| {
            let s = a.to_string_lossy().into_owned();
            if s.contains(' ') {
                format!("\"{s}\"")
            } else {
                s
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Run a job of one command.
#[cfg(test)]
pub fn run_guest(job: &GuestJob) -> anyhow::Result<GuestOutput> {
    anyhow::ensure!(job.steps.len() == 1, "run_guest runs one command");
    Ok(run_boot(job)?.pop().expect("one answer per command"))
}

/// Boot once and run every command of `job`; one answer per command, in order.
pub fn run_boot(job: &GuestJob) -> anyhow::Result<Vec<GuestOutput>> {
    anyhow::ensure!(!job.steps.is_empty(), "a guest run needs a command");
    let emulator = qemu::find_emulator(job.arch)?;
    let qemu_version = qemu::version(&emulator)?;
    let libs = libraries(job)?;
    let mkfs = job.disk.as_ref().map(|_| disk::find_mkfs()).transpose()?;
    let mut jobfile = JobFile {
        schema: JOB_SCHEMA.into(),
        steps: job.steps.clone(),
        max_output: MAX_OUTPUT,
        disk: None,
        env: Default::default(),
        symbols: job.profile.as_ref().is_some_and(|p| p.symbols),
    };
    let x86_cpu = match (job.arch, job.accel) {
        (Arch::X86_64, Accel::Tcg) => Some(qemu::x86_reference_cpu(&emulator)?),
        _ => None,
    };
    let loads = match &job.profile {
        Some(p) => Some(super::plugin::probe(&emulator, &qemu_version, &p.library)?),
        None => None,
    };
    // The plugin writes into an unnamed file QEMU opens through /proc (gone
    // with ptelab, whatever happens).
    let counts_file = match &job.profile {
        Some(_) => Some(tempfile::tempfile().context("creating the plugin's output file")?),
        None => None,
    };
    let plugin_arg = match (&job.profile, &counts_file, &loads) {
        (Some(p), Some(f), Some(l)) => Some(super::plugin::qemu_arg(&p.library, &proc_path(f), l)),
        _ => None,
    };
    if job.disk.is_some() {
        jobfile.disk = Some(JobDisk {
            device: disk::GUEST_DEVICE.into(),
            fstype: disk::FSTYPE.into(),
            mount: disk::GUEST_MOUNT.into(),
        });
        jobfile
            .env
            .insert(disk::GUEST_ENV.into(), disk::GUEST_MOUNT.into());
        // How the reclaim workload refills its page cache, chosen here for
        // the guest too (a paired comparison of the two ways in guests).
        if let Some(refill) = std::env::var(disk::REFILL_ENV)
            .ok()
            .filter(|v| !v.is_empty())
        {
            jobfile.env.insert(disk::REFILL_ENV.into(), refill);
        }
    }
    if let Some(pad) = job.setup.env_value() {
        jobfile.env.insert(qemu::PAD_ENV.into(), pad);
    }
    for f in &job.files {
        check_static(f, job.arch)?;
    }
    let initrd = Initramfs::for_job(&job.binary, &jobfile, &libs)?
        .with_files(&job.files)?
        .write_temp()?;
    let (initrd_path, initrd_len) = (initrd.path(), initrd.bytes()?);
    let least = min_memory_mib(initrd_len);
    if job.memory_mib < least {
        bail_usage!(
            "--memory {} MiB cannot boot this guest: its initramfs is {} MiB; give it at least {least} MiB",
            job.memory_mib,
            initrd_len.div_ceil(1 << 20)
        );
    }
    // Held until QEMU has exited; dropping it removes it (it has no name).
    let image = match (&job.disk, &mkfs) {
        (Some(spec), Some(mkfs)) => Some(DiskImage::create(spec, mkfs)?),
        _ => None,
    };
    let image_path = image.as_ref().map(DiskImage::path);
    let machine = Machine {
        arch: job.arch,
        accel: job.accel,
        memory_mib: job.memory_mib,
        kernel: &job.kernel,
        initrd: &initrd_path,
        append: &job.append,
        disk: image_path.as_deref(),
        plugin: plugin_arg,
        setup: &job.setup,
        narrow_strings: qemu::narrow_strings(job.arch, job.disk.is_some()),
        x86_cpu: x86_cpu.as_deref(),
    };
    if let Some(dir) = job.log.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut log =
        File::create(&job.log).with_context(|| format!("creating {}", job.log.display()))?;
    writeln!(log, "ptelab: {}", command_line(&emulator, &machine))?;
    for step in &job.steps {
        match &step.program {
            Some(p) => writeln!(
                log,
                "ptelab: guest runs: /files/{p} {}",
                step.args.join(" ")
            )?,
            None => writeln!(log, "ptelab: guest runs: ptelab {}", step.args.join(" "))?,
        }
    }
    if let (Some(img), Some(spec)) = (&image, &job.disk) {
        writeln!(
            log,
            "ptelab: guest disk: {} MiB sparse image, {} on {} mounted at {} ({}={}), \
             an unnamed temporary file in {}",
            img.bytes >> 20,
            disk::FSTYPE,
            disk::GUEST_DEVICE,
            disk::GUEST_MOUNT,
            disk::GUEST_ENV,
            disk::GUEST_MOUNT,
            spec.dir.display()
        )?;
    }

    let started = Instant::now();
    let env = loads.as_ref().map(|l| l.env());
    let mut q = Qemu::spawn(
        &emulator,
        &qemu::args(&machine),
        env.as_ref().map_or(&[][..], |e| &e[..]),
    )?;
    let stderr = drain_stderr(&mut q)?;
    let console = pump(job, &mut q, &mut log, started)?;
    let status = q.wait().context("waiting for QEMU")?;
    let boot_to_exit = started.elapsed();
    let qemu_err = stderr.join().unwrap_or_default();
    if !qemu_err.is_empty() {
        let _ = writeln!(log, "\nptelab: QEMU stderr:\n{qemu_err}");
    }
    let _ = writeln!(
        log,
        "\nptelab: QEMU {status} after {:.2} s",
        boot_to_exit.as_secs_f64()
    );
    match frame::decode(&console, MAX_OUTPUT) {
        Ok(a) => {
            let parts = split_answer(a.stdout, a.exit_code, job.steps.len())
                .with_context(|| format!("console log: {}", job.log.display()))?;
            let counts = counts_file.map(read_counts).transpose()?;
            let mut symbols = match job.profile.as_ref().is_some_and(|p| p.symbols) {
                true => Some(
                    frame::SYMBOLS
                        .decode(&console, MAX_OUTPUT)
                        .map_err(|e| anyhow::anyhow!("the guest's symbols: {e}"))?
                        .stdout,
                ),
                false => None,
            };
            Ok(parts
                .into_iter()
                .enumerate()
                .map(|(k, part)| GuestOutput {
                    stdout: part.stdout,
                    exit_code: part.exit_code,
                    accel: job.accel,
                    qemu_version: qemu_version.clone(),
                    kernel_release: a.release.clone(),
                    boot_to_exit,
                    counts: counts.as_ref().map(|c| c.step(k as u32)),
                    symbols: symbols.take(),
                    symbol_table: None,
                })
                .collect())
        }
        Err(e) => {
            let mut why = match (&e, panic_line(&console)) {
                (FrameError::Missing, Some(p)) => format!("the guest kernel panicked: {p}"),
                (FrameError::Missing, None) => {
                    format!("the guest stopped without an answer (QEMU {status})")
                }
                _ => e.to_string(),
            };
            if !qemu_err.is_empty() {
                why.push_str(&format!(
                    "; QEMU: {}",
                    qemu_err.lines().last().unwrap_or("").trim()
                ));
            }
            bail!(
                "{why}\n{}console log: {}",
                tail(&console),
                job.log.display()
            )
        }
    }
}

/// The answer of a boot of `steps` commands, per command: one command's
/// stdout as it is, several bundled. An init that could run none (exit code
/// 125, nothing printed) answers that for every command.
fn split_answer(
    stdout: Vec<u8>,
    exit_code: i32,
    steps: usize,
) -> anyhow::Result<Vec<frame::StepAnswer>> {
    if steps == 1 {
        return Ok(vec![frame::StepAnswer { exit_code, stdout }]);
    }
    if exit_code != 0 && stdout.is_empty() {
        let none = frame::StepAnswer {
            exit_code,
            stdout: Vec::new(),
        };
        return Ok(vec![none; steps]);
    }
    Ok(frame::unbundle(&stdout, steps)?)
}

/// A path QEMU can open an unnamed file of ours by.
fn proc_path(f: &File) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), f.as_raw_fd()))
}

/// What the plugin wrote, parsed.
fn read_counts(mut f: File) -> anyhow::Result<ptelab_counts::record::Output> {
    use std::io::Seek;
    let mut text = String::new();
    f.rewind()
        .and_then(|_| f.read_to_string(&mut text))
        .context("reading the QEMU plugin's output")?;
    ptelab_counts::record::parse(&text).context("the QEMU plugin's output does not parse")
}

/// The least guest memory worth booting with: the kernel keeps the
/// initramfs image while it unpacks it into the root file system (twice its
/// size), and a Debian cloud kernel needs about 128 MiB beside it.
pub fn min_memory_mib(initrd_bytes: u64) -> u64 {
    (2 * initrd_bytes).div_ceil(1 << 20) + 128
}

/// A file a guest is to execute besides ptelab: a static ELF for its arch.
fn check_static(path: &std::path::Path, arch: Arch) -> anyhow::Result<()> {
    let info = initramfs::elf_info(path).map_err(|e| {
        crate::error::usage(format!("{}: not an executable ({e:#})", path.display()))
    })?;
    if info.arch != Some(arch) || info.dynamic {
        bail_usage!(
            "{} must be a static executable for {arch} to run in the guest (e.g. gcc -static)",
            path.display()
        );
    }
    Ok(())
}

/// The shared libraries to copy for a dynamic binary, after checking the
/// binary is an ELF executable for the guest's arch.
fn libraries(job: &GuestJob) -> anyhow::Result<Vec<PathBuf>> {
    let info = initramfs::elf_info(&job.binary)?;
    match info.arch {
        Some(a) if a == job.arch => {}
        Some(a) => bail_usage!(
            "{} is a ptelab for {a}; an {} guest needs one for {}",
            job.binary.display(),
            job.arch,
            job.arch
        ),
        None => bail_usage!(
            "{} is an ELF binary for neither x86_64 nor arm64",
            job.binary.display()
        ),
    }
    if !info.dynamic {
        return Ok(Vec::new());
    }
    if Arch::host() != Some(job.arch) {
        bail_usage!(
            "{} is dynamically linked; an {} guest on this machine needs a static ptelab",
            job.binary.display(),
            job.arch
        );
    }
    initramfs::shared_libs(&job.binary)
}

/// Read the console until QEMU closes it, writing it to the log as it comes;
/// stop QEMU on timeout, SIGINT, or a console larger than any answer.
fn pump(job: &GuestJob, q: &mut Qemu, log: &mut File, started: Instant) -> anyhow::Result<Vec<u8>> {
    let mut out = q.child().stdout.take().context("QEMU's stdout")?;
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n @ 1..) = out.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let cap = frame::encoded_len(MAX_OUTPUT) + CONSOLE_SLACK;
    let mut console = Vec::new();
    let mut deadline = started + job.timeout;
    let mut answered = false;
    let result = loop {
        if job.interrupted.load(Ordering::SeqCst) {
            let _ = q.kill();
            break Err(anyhow::anyhow!(
                "interrupted: stopped the guest (QEMU killed)\n{}console log: {}",
                tail(&console),
                job.log.display()
            ));
        }
        let now = Instant::now();
        if now >= deadline {
            let _ = q.kill();
            if answered {
                // The answer is in; only the reset hung.
                break Ok(());
            }
            break Err(anyhow::anyhow!(
                "the guest did not finish within {} s (QEMU killed); last console lines:\n{}console log: {}",
                job.timeout.as_secs(),
                tail(&console),
                job.log.display()
            ));
        }
        match rx.recv_timeout((deadline - now).min(Duration::from_millis(100))) {
            Ok(chunk) => {
                if console.len() as u64 + chunk.len() as u64 > cap {
                    let _ = q.kill();
                    break Err(anyhow::anyhow!(
                        "the guest's console exceeded {} MiB (QEMU killed)\n{}console log: {}",
                        cap >> 20,
                        tail(&console),
                        job.log.display()
                    ));
                }
                log.write_all(&chunk)
                    .with_context(|| format!("writing {}", job.log.display()))?;
                // Look for the end line where this chunk could complete it.
                let from = console.len().saturating_sub(64);
                console.extend_from_slice(&chunk);
                if !answered && frame::has_end(&console[from..]) {
                    answered = true;
                    deadline = deadline.min(Instant::now() + POWER_OFF_GRACE);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break Ok(()),
        }
    };
    let _ = log.flush();
    if result.is_err() {
        let _ = q.kill();
    }
    let _ = reader.join();
    result.map(|_| console)
}

/// QEMU's stderr, read on a thread (a full pipe would stall QEMU); the first
/// 64 KiB are kept.
fn drain_stderr(q: &mut Qemu) -> anyhow::Result<std::thread::JoinHandle<String>> {
    let mut err = q.child().stderr.take().context("QEMU's stderr")?;
    Ok(std::thread::spawn(move || {
        let mut kept = Vec::new();
        let _ = (&mut err).take(64 << 10).read_to_end(&mut kept);
        let _ = std::io::copy(&mut err, &mut std::io::sink());
        String::from_utf8_lossy(&kept).trim().to_string()
    }))
}

/// The console's last lines, printable, each indented; empty when there are none.
fn tail(console: &[u8]) -> String {
    let text = String::from_utf8_lossy(console);
    let lines: Vec<String> = text
        .split('\n')
        .map(|l| {
            l.chars()
                .filter(|c| !c.is_control() || *c == '\t')
                .collect::<String>()
        })
        .filter(|l| !l.trim().is_empty())
        .collect();
    let from = lines.len().saturating_sub(TAIL_LINES);
    lines[from..].iter().map(|l| format!("  | {l}\n")).collect()
}

/// The kernel's panic line, when it panicked.
fn panic_line(console: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(console);
    text.lines().find_map(|l| {
        l.find("Kernel panic - ")
            .map(|p| l[p..].trim().chars().take(200).collect())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_floor() {
        assert_eq!(min_memory_mib(0), 128);
        assert_eq!(min_memory_mib(4 << 20), 136);
        assert_eq!(min_memory_mib((80 << 20) + 1), 289);
    }

    #[test]
    fn console_tail_and_panic() {
        let c = b"\x1b[0mboot\r\nline 2\r\n[    1.2] Kernel panic - not syncing: VFS: Unable to mount root fs\r\n\r\n";
        assert_eq!(
            tail(c),
            "  | [0mboot\n  | line 2\n  | [    1.2] Kernel panic - not syncing: VFS: Unable to mount root fs\n"
        );
        assert_eq!(
            panic_line(c).as_deref(),
            Some("Kernel panic - not syncing: VFS: Unable to mount root fs")
        );
        assert_eq!(panic_line(b"fine\n"), None);
        let many: String = (0..100).map(|i| format!("l{i}\n")).collect();
        assert_eq!(tail(many.as_bytes()).lines().count(), TAIL_LINES);
        assert!(tail(many.as_bytes()).ends_with("  | l99\n"));
    }
}
