//! Real guests: boot Debian's kernels in QEMU with this build's ptelab as
//! init and check what comes back. They need QEMU (qemu-system-x86,
//! qemu-system-arm), the kernels in the cache (`ptelab kernel fetch
//! debian:6.17.13 --arch x86_64`, and `--arch arm64`) and the ptelab binary
//! built (`cargo build`; `PTELAB_GUEST_BINARY` names another); without them
//! each test prints why it is skipped. Guests run one at a time.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::cache::Cache;
use super::qemu;
use super::run::{choose_accel, run_guest, AccelRequest, GuestJob};
use super::spec::Arch;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
static NEVER: AtomicBool = AtomicBool::new(false);

/// The kernel release the tests prefer, per arch.
const RELEASE: &str = "6.17.13+deb13-cloud";

/// Why a guest test cannot run here, or the kernel and binary it uses.
fn setup(arch: Arch) -> Result<(PathBuf, PathBuf), String> {
    qemu::find_emulator(arch).map_err(|e| e.to_string())?;
    let binary = match std::env::var_os("PTELAB_GUEST_BINARY") {
        Some(p) => PathBuf::from(p),
        // target/debug/deps/ptelab-HASH -> target/debug/ptelab
        None => std::env::current_exe()
            .map_err(|e| e.to_string())?
            .parent()
            .and_then(|d| d.parent())
            .map(|d| d.join("ptelab"))
            .ok_or("no target directory")?,
    };
    if !binary.exists() {
        return Err(format!("{} not built (cargo build)", binary.display()));
    }
    let elf = super::initramfs::elf_info(&binary).map_err(|e| e.to_string())?;
    if elf.arch != Some(arch) {
        return Err(format!(
            "{} is not an {arch} binary (set PTELAB_GUEST_BINARY to a static one)",
            binary.display()
        ));
    }
    let cache = Cache::from_env().map_err(|e| e.to_string())?;
    let release = format!("{RELEASE}-{}", arch.debian());
    let kernel = cache
        .get(&release)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!("{release} not cached (ptelab kernel fetch debian:6.17.13 --arch {arch})")
        })?;
    Ok((kernel.image(), binary))
}

fn job(arch: Arch, args: &[&str], timeout: Duration, log: PathBuf) -> Option<GuestJob> {
    let (kernel, binary) = match setup(arch) {
        Ok(x) => x,
        Err(why) => {
            eprintln!("skipped: {why}");
            return None;
        }
    };
    let (accel, _) = choose_accel(AccelRequest::Auto, arch).unwrap();
    Some(GuestJob {
        arch,
        kernel,
        binary,
        args: args.iter().map(|s| s.to_string()).collect(),
        accel,
        memory_mib: 1024,
        timeout,
        log,
        interrupted: &NEVER,
    })
}

/// Children of this process whose name starts with `qemu-system`.
fn qemu_children() -> Vec<u32> {
    let me = std::process::id();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some((comm, rest)) = stat.split_once(") ") else {
            continue;
        };
        let ppid = rest.split(' ').nth(1).and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(me) && comm.contains("(qemu-system") {
            found.push(pid);
        }
    }
    found
}

fn doc(stdout: &[u8]) -> serde_json::Value {
    serde_json::from_slice(stdout).unwrap_or_else(|e| {
        panic!(
            "guest stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(stdout)
        )
    })
}

fn doctor_and_bench(arch: Arch) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let Some(j) = job(
        arch,
        &["doctor", "--json"],
        Duration::from_secs(240),
        dir.path().join("doctor.log"),
    ) else {
        return;
    };
    let t = Instant::now();
    let out = run_guest(&j).unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!(
        "{arch} doctor: boot to exit {:.2?} (total {:.2?}), accel {}, qemu {}, release {}",
        out.boot_to_exit,
        t.elapsed(),
        out.accel,
        out.qemu_version,
        out.kernel_release
    );
    assert!(
        out.kernel_release.starts_with("6.17.13+deb13-cloud"),
        "{}",
        out.kernel_release
    );
    let d = doc(&out.stdout);
    assert!(
        d.to_string().contains("tlb_flush") || d.to_string().contains("thp"),
        "{d}"
    );
    assert!(qemu_children().is_empty());

    let Some(j) = job(
        arch,
        &[
            "bench",
            "mprotect-toggle",
            "--size",
            "4M",
            "--folio",
            "4K",
            "--no-store",
            "--json",
            "--blocks",
            "2",
        ],
        Duration::from_secs(300),
        dir.path().join("bench.log"),
    ) else {
        return;
    };
    let out = run_guest(&j).unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!("{arch} bench cell: boot to exit {:.2?}", out.boot_to_exit);
    assert_eq!(out.exit_code, 0, "{}", String::from_utf8_lossy(&out.stdout));
    let d = doc(&out.stdout);
    eprintln!(
        "{}",
        serde_json::to_string(&d)
            .unwrap()
            .chars()
            .take(3000)
            .collect::<String>()
    );
}

#[test]
fn x86_64_guest_runs_doctor_and_a_bench_cell() {
    doctor_and_bench(Arch::X86_64);
}
