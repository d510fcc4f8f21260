//! ptelab as a guest's init (PID 1): mount what the kernel layer reads, run
//! the job's commands one after the other, each as an ordinary child process
//! (`/init ARGS…`, not PID 1, so it is the normal CLI), send their stdout
//! back framed on the console (`frame`), reset (which ends QEMU). Several commands share
//! one boot so that a kernel's workloads do not each pay for booting it.
//!
//! The child's stderr goes to the console through a pipe: it is the progress
//! and log the host keeps in the guest's log file, and a pipe (not a tty)
//! keeps progress bars out of it.

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

use super::frame;
use super::initramfs::{JobDisk, JobFile, JobStep, JOB_PATH, JOB_SCHEMA};

/// The largest job file read.
const MAX_JOB: u64 = 1 << 20;

/// True when this process is a ptelab guest's init: PID 1 with the job file
/// in place (PID 1 alone could be a container's entry point).
pub fn is_guest_init() -> bool {
    std::process::id() == 1 && Path::new(JOB_PATH).exists()
}

/// Run the guest's job and reset the machine. Never returns. `step_marker` tells the
/// QEMU plugin that the next command starts (the measurement layer's
/// marker, handed in by `main.rs` so that this layer does not import it).
pub fn main(step_marker: fn()) -> ! {
    let problems = mount_all();
    ensure_stdio();
    for p in &problems {
        eprintln!("ptelab-init: {p}");
    }
    fixed_layout();
    let (frame, symbols) = match read_job() {
        Ok(job) => (run_job(&job, step_marker), job.symbols.then(symbols_frame)),
        Err(e) => {
            eprintln!("ptelab-init: cannot read {JOB_PATH}: {e}");
            (frame::encode(b"", 125, &release()), None)
        }
    };
    // Kernel messages from here on would only get in the frame's way.
    // SAFETY: SYSLOG_ACTION_CONSOLE_LEVEL takes no buffer.
    unsafe { libc::klogctl(8, std::ptr::null_mut(), 1) };
    let mut out = std::io::stdout().lock();
    if let Some(symbols) = symbols {
        if let Err(e) = out.write_all(&symbols) {
            eprintln!("ptelab-init: cannot write the symbols to the console: {e}");
        }
    }
    if let Err(e) = out.write_all(&frame).and_then(|_| out.flush()) {
        eprintln!("ptelab-init: cannot write the answer to the console: {e}");
    }
    // Reset rather than power off: QEMU runs with -no-reboot, so a reset
    // ends it just as power-off would, and every kernel can reset, while an
    // x86-64 kernel without ACPI cannot power off (it halts, QEMU must be
    // killed, and the plugin's counts are lost).
    // SAFETY: plain syscalls; tcdrain waits until the serial line has sent
    // the frame, which the reset would otherwise cut short.
    unsafe {
        libc::tcdrain(1);
        libc::sync();
        libc::reboot(libc::RB_AUTOBOOT);
    }
    // The reset failed: PID 1 must not exit (that panics); the host times out.
    eprintln!(
        "ptelab-init: reset failed: {}",
        std::io::Error::last_os_error()
    );
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

/// (source, target, fstype) in mount order; `None` fstype makes a directory only.
const MOUNTS: &[(&str, &str, Option<&str>)] = &[
    ("proc", "/proc", Some("proc")),
    ("sysfs", "/sys", Some("sysfs")),
    ("devtmpfs", "/dev", Some("devtmpfs")),
    ("tmpfs", "/dev/shm", Some("tmpfs")),
    ("tmpfs", "/tmp", Some("tmpfs")),
    ("tmpfs", "/run", Some("tmpfs")),
    ("", "/run/lock", None),
    ("tracefs", "/sys/kernel/tracing", Some("tracefs")),
    ("cgroup2", "/sys/fs/cgroup", Some("cgroup2")),
];

/// Mount everything; failures are returned to be reported, not fatal (a
/// kernel without tracefs still runs the rest, and doctor says what is missing).
fn mount_all() -> Vec<String> {
    let mut problems = Vec::new();
    for &(source, target, fstype) in MOUNTS {
        if let Err(e) = std::fs::create_dir_all(target) {
            problems.push(format!("cannot create {target}: {e}"));
            continue;
        }
        let Some(fstype) = fstype else { continue };
        let c = |s: &str| std::ffi::CString::new(s).expect("static string");
        let (src, tgt, fs) = (c(source), c(target), c(fstype));
        // SAFETY: NUL-terminated strings that outlive the call; no data.
        let rc =
            unsafe { libc::mount(src.as_ptr(), tgt.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) };
        if rc != 0 {
            problems.push(format!(
                "cannot mount {fstype} on {target}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    problems
}

/// MGLRU's switch.
const LRU_GEN: &str = "/sys/kernel/mm/lru_gen/enabled";

/// Place the commands' mappings without randomization (inherited by every
/// child). The measured calls walk the process's VMA tree, and with
/// randomized placement its shape follows the kernel's random state, which
/// a guest's disk interrupts move (they arrive when the host's I/O
/// completes): the figures of a guest then repeat exactly, disk or not.
fn fixed_layout() {
    // SAFETY: personality(2) takes a flag word and touches no memory.
    if unsafe { libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong) } == -1 {
        eprintln!(
            "ptelab-init: cannot turn address randomization off: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Mount the job's disk, for the first command that needs it (not before:
/// a mounted ext4 works in the background).
fn mount_for(job: &JobFile) -> Result<(), String> {
    let d = job
        .disk
        .as_ref()
        .ok_or("the command needs a disk and the job has none")?;
    let waited = wait_for(Path::new(&d.device))?;
    mount_disk(d)?;
    eprintln!(
        "ptelab-init: {} ({}) mounted on {} ({waited} ms after init started)",
        d.device, d.fstype, d.mount
    );
    Ok(())
}

/// MGLRU's `enabled` mask read as a number: on when not 0.
fn lru_gen_on(text: &str) -> Option<bool> {
    u64::from_str_radix(text.trim().trim_start_matches("0x"), 16)
        .ok()
        .map(|n| n != 0)
}

/// Turn MGLRU on (every feature: `y`) when the kernel has it and it is
/// off; say what was found and done. It is not turned back off: the guest
/// ends after its command.
fn ensure_mglru(path: &Path) -> String {
    let Ok(was) = std::fs::read_to_string(path) else {
        return format!(
            "MGLRU is not built into this kernel (no {}): reclaim uses the classic LRU",
            path.display()
        );
    };
    let was = was.trim().to_string();
    if lru_gen_on(&was) == Some(true) {
        return format!("MGLRU is on ({was})");
    }
    if let Err(e) = std::fs::write(path, "y") {
        return format!("MGLRU is off ({was}) and could not be turned on: {e}");
    }
    let now = std::fs::read_to_string(path).unwrap_or_default();
    format!(
        "MGLRU was off ({was}); turned it on ({}), not restored: the guest ends after its command",
        now.trim()
    )
}

/// Wait for a device node the kernel adds when its driver has probed (NVMe
/// scans its namespaces after init may have started); the milliseconds
/// waited, in the guest's clock.
fn wait_for(device: &Path) -> Result<u128, String> {
    let start = std::time::Instant::now();
    // Under icount an idle guest's clock runs ahead of the host's: count
    // polls, not only guest time, so that a slow host still gets its turn.
    for _ in 0..20_000 {
        if device.exists() {
            return Ok(start.elapsed().as_millis());
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Err(format!(
        "{} did not appear within {} s of guest time (no NVMe controller, or its driver is not built in)",
        device.display(),
        start.elapsed().as_secs()
    ))
}

fn mount_disk(d: &JobDisk) -> Result<(), String> {
    std::fs::create_dir_all(&d.mount).map_err(|e| format!("cannot create {}: {e}", d.mount))?;
    let c = |s: &str| std::ffi::CString::new(s).map_err(|e| e.to_string());
    let (src, tgt, fs) = (c(&d.device)?, c(&d.mount)?, c(&d.fstype)?);
    // SAFETY: NUL-terminated strings that outlive the call; no data.
    let rc = unsafe { libc::mount(src.as_ptr(), tgt.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) };
    if rc != 0 {
        return Err(format!(
            "cannot mount {} ({}) on {}: {}",
            d.device,
            d.fstype,
            d.mount,
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Give fds 0-2 the console when the kernel could not (no /dev/console then).
fn ensure_stdio() {
    // SAFETY: F_GETFD only queries; open/dup2 on a valid path.
    unsafe {
        if libc::fcntl(1, libc::F_GETFD) != -1 {
            return;
        }
        let fd = libc::open(c"/dev/console".as_ptr(), libc::O_RDWR);
        if fd >= 0 {
            for target in 0..3 {
                if libc::fcntl(target, libc::F_GETFD) == -1 {
                    libc::dup2(fd, target);
                }
            }
        }
    }
}

fn read_job() -> anyhow::Result<JobFile> {
    let mut text = Vec::new();
    std::fs::File::open(JOB_PATH)?
        .take(MAX_JOB)
        .read_to_end(&mut text)?;
    let job: JobFile = serde_json::from_slice(&text)?;
    anyhow::ensure!(
        job.schema == JOB_SCHEMA,
        "schema {} (expected {JOB_SCHEMA})",
        job.schema
    );
    Ok(job)
}

/// Run the job's commands one after the other and frame what they printed:
/// one command's stdout as it is, several as a bundle (`frame::bundle`).
fn run_job(job: &JobFile, step_marker: fn()) -> Vec<u8> {
    let mut answers = Vec::with_capacity(job.steps.len());
    let mut left = job.max_output;
    let mut mounted: Option<Result<(), String>> = None;
    for (k, step) in job.steps.iter().enumerate() {
        if k > 0 {
            // The QEMU plugin numbers this command's windows from 0.
            step_marker();
        }
        if step.disk {
            if let Err(e) = mounted.get_or_insert_with(|| mount_for(job)) {
                eprintln!("ptelab-init: {e}; the command was not run");
                answers.push(frame::StepAnswer {
                    exit_code: 125,
                    stdout: Vec::new(),
                });
                continue;
            }
        }
        if step.mglru {
            eprintln!("ptelab-init: {}", ensure_mglru(Path::new(LRU_GEN)));
        }
        match run_step(job, step, left) {
            Ok(a) => {
                left -= a.stdout.len() as u64;
                answers.push(a);
            }
            Err(Oversized { seen, exit_code }) => {
                eprintln!(
                    "ptelab-init: the commands printed more than {} bytes; stopped",
                    job.max_output
                );
                let before: u64 = answers.iter().map(|a| a.stdout.len() as u64).sum();
                return frame::encode_oversized(before + seen, exit_code, &release());
            }
        }
    }
    match answers.as_slice() {
        [one] => frame::encode(&one.stdout, one.exit_code, &release()),
        _ => frame::encode(&frame::bundle(&answers), 0, &release()),
    }
}

/// A command printed more than the guest may send back.
struct Oversized {
    seen: u64,
    exit_code: i32,
}

/// Run one command, its stderr forwarded to the console, keeping at most
/// `limit` bytes of its stdout.
fn run_step(job: &JobFile, step: &JobStep, limit: u64) -> Result<frame::StepAnswer, Oversized> {
    let program = match &step.program {
        Some(p) => format!("/files/{p}"),
        None => "/init".to_string(),
    };
    let mut child = match Command::new(&program)
        .args(&step.args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("HOME", "/root")
        .env("TERM", "dumb")
        .envs(&job.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ptelab-init: cannot start {program}: {e}");
            return Ok(frame::StepAnswer {
                exit_code: 126,
                stdout: Vec::new(),
            });
        }
    };
    let mut stderr = child.stderr.take().expect("piped");
    let forward = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut console = std::io::stderr();
        while let Ok(n @ 1..) = stderr.read(&mut buf) {
            let _ = console.write_all(&buf[..n]);
        }
    });
    let mut stdout = Vec::new();
    let mut pipe = child.stdout.take().expect("piped").take(limit + 1);
    let read = pipe.read_to_end(&mut stdout);
    let oversized = stdout.len() as u64 > limit;
    if oversized {
        let _ = child.kill();
    }
    let exit_code = match child.wait() {
        Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
        Err(_) => 127,
    };
    let _ = forward.join();
    if let Err(e) = read {
        eprintln!("ptelab-init: reading the command's stdout: {e}");
    }
    if oversized {
        return Err(Oversized {
            seen: stdout.len() as u64,
            exit_code,
        });
    }
    Ok(frame::StepAnswer { exit_code, stdout })
}

/// The kernel's text symbols, compact and deflated, framed on the symbols
/// channel (after the command, so that reading them is not measured). An
/// empty frame when the kernel shows no addresses.
fn symbols_frame() -> Vec<u8> {
    // Root sees addresses unless kptr_restrict is 2; 0 shows them to all.
    let _ = std::fs::write("/proc/sys/kernel/kptr_restrict", "0");
    let table = match std::fs::read_to_string("/proc/kallsyms") {
        Ok(text) => super::profile::Symbols::parse(&text),
        Err(e) => {
            eprintln!("ptelab-init: cannot read /proc/kallsyms: {e}");
            Default::default()
        }
    };
    let bytes = if table.is_empty() {
        Vec::new()
    } else {
        super::profile::deflate(table.compact().as_bytes())
    };
    frame::SYMBOLS.encode(&bytes, 0, &release())
}

/// `uname -r`.
fn release() -> String {
    // SAFETY: uname fills the zeroed struct; its fields are NUL-terminated.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return "unknown".into();
        }
        std::ffi::CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mglru_masks() {
        assert_eq!(lru_gen_on("0x0007\n"), Some(true));
        assert_eq!(lru_gen_on("0x0000"), Some(false));
        assert_eq!(lru_gen_on("y"), None);
    }

    #[test]
    fn mglru_is_turned_on_only_when_off() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("enabled");
        assert!(ensure_mglru(&p).starts_with("MGLRU is not built into this kernel"));
        std::fs::write(&p, "0x0003\n").unwrap();
        assert_eq!(ensure_mglru(&p), "MGLRU is on (0x0003)");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "0x0003\n");
        std::fs::write(&p, "0x0000\n").unwrap();
        let said = ensure_mglru(&p);
        assert!(
            said.starts_with("MGLRU was off (0x0000); turned it on"),
            "{said}"
        );
        assert!(said.contains("not restored"), "{said}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "y");
    }

    #[test]
    fn a_disk_that_cannot_be_mounted_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = JobDisk {
            device: dir.path().join("nvme0n1").display().to_string(),
            fstype: "ext4".into(),
            mount: dir.path().join("mnt").display().to_string(),
        };
        // Not a block device: mount(2) refuses it (or, not root, EPERM).
        std::fs::write(&d.device, "").unwrap();
        let e = mount_disk(&d).unwrap_err();
        assert!(
            e.starts_with(&format!("cannot mount {} (ext4) on ", d.device)),
            "{e}"
        );
    }
}
