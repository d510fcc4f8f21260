//! Real guests: boot Debian's kernels in QEMU with this build's ptelab as
//! init and check what comes back. They need QEMU (qemu-system-x86,
//! qemu-system-arm), the kernels in the cache (`ptelab kernel fetch
//! debian:6.17.13 --arch x86_64`, and `--arch arm64`) and a ptelab for the
//! guest (see `binary`); without them each test prints why it is skipped.
//! Guests run side by side: each test's QEMU carries a kernel parameter of
//! its own (`ptelab.test=`, its log's path), by which the test finds its
//! own QEMU left behind, and only its own.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::initramfs::JobStep;
use super::qemu;
use super::run::{choose_accel, run_guest, AccelRequest, GuestJob};
use crate::arch::facts;
use crate::source::cache::Cache;
use crate::workload::Arch;

static NEVER: AtomicBool = AtomicBool::new(false);

/// The kernel release the tests prefer, per arch.
const RELEASE: &str = "6.17.13+deb13-cloud";

/// The ptelab a guest of `arch` runs: for x86_64 this build (glibc, with
/// the libraries `ldd` lists) unless `PTELAB_GUEST_BINARY_X86_64` names
/// another; for arm64 what `ptelab vm` uses, `guest::boot::binary::guest_binary`
/// (`PTELAB_GUEST_BINARY_ARM64`, or a static musl build, made if out of date).
fn binary(arch: Arch) -> Result<PathBuf, String> {
    if arch == Arch::X86_64 && std::env::var_os("PTELAB_GUEST_BINARY_X86_64").is_none() {
        // target/debug/deps/ptelab-HASH -> target/debug/ptelab
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let bin = exe
            .parent()
            .and_then(|d| d.parent())
            .ok_or("no target directory")?
            .join("ptelab");
        if !bin.exists() {
            return Err(format!("{} not built (cargo build)", bin.display()));
        }
        return match super::initramfs::elf_info(&bin) {
            Ok(e) if e.arch == Some(arch) => Ok(bin),
            _ => Err(format!("{} is not an {arch} binary", bin.display())),
        };
    }
    let t = Instant::now();
    let bin = super::binary::guest_binary(arch).map_err(|e| format!("{e:#}"))?;
    if t.elapsed() > Duration::from_secs(5) {
        eprintln!("built the {arch} guest binary in {:.0?}", t.elapsed());
    }
    Ok(bin)
}

/// Why a guest test cannot run here, or the kernel and binary it uses.
fn setup(arch: Arch) -> Result<(PathBuf, PathBuf), String> {
    qemu::find_emulator(arch).map_err(|e| e.to_string())?;
    let cache = Cache::from_env().map_err(|e| e.to_string())?;
    let release = format!("{RELEASE}-{}", facts(arch).debian);
    let kernel = cache
        .get(&release)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!("{release} not cached (ptelab kernel fetch debian:6.17.13 --arch {arch})")
        })?;
    Ok((kernel.image(), binary(arch)?))
}

fn job(arch: Arch, args: &[&str], timeout: Duration, log: PathBuf) -> Option<GuestJob> {
    let (kernel, binary) = match setup(arch) {
        Ok(x) => x,
        Err(why) => {
            skipped(&why);
            return None;
        }
    };
    let (accel, why) = choose_accel(AccelRequest::Auto, arch).unwrap();
    eprintln!("{arch}: {why}");
    Some(GuestJob {
        arch,
        kernel,
        binary,
        steps: vec![JobStep::ptelab(
            args.iter().map(|s| s.to_string()).collect(),
        )],
        files: Vec::new(),
        append: vec![tag(&log)],
        accel,
        memory_mib: 1024,
        disk: None,
        timeout,
        log,
        interrupted: &NEVER,
        profile: None,
        setup: Default::default(),
    })
}

/// Say why a guest test does not run here; CI (which installs QEMU and
/// fetches the kernels) must run every one.
fn skipped(why: &str) {
    eprintln!("skipped: {why}");
    if std::env::var_os("CI").is_some() {
        panic!("guest test skipped on CI: {why}");
    }
}

/// The kernel parameter that marks the QEMU of the job logging to `log`.
fn tag(log: &std::path::Path) -> String {
    format!("ptelab.test={}", log.display())
}

/// Children of this process whose name starts with `qemu-system` and whose
/// command line holds `j`'s tag: the QEMU that `j` started, if still there.
fn qemu_children(j: &GuestJob) -> Vec<u32> {
    let tag = tag(&j.log);
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
        if ppid != Some(me) || !comm.contains("(qemu-system") {
            continue;
        }
        // Several tests boot at once: this job's QEMU carries its tag.
        if std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&tag))
        {
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

/// The doctor check named `name`: (status, value).
fn check<'a>(doctor: &'a serde_json::Value, name: &str) -> (&'a str, &'a str) {
    let c = doctor["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("doctor has no {name} check: {doctor}"));
    (
        c["status"].as_str().unwrap_or(""),
        c["value"].as_str().unwrap_or(""),
    )
}

const BENCH: &[&str] = &[
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
];

/// Doctor, then a bench cell, in one boot (two steps of one job).
fn doctor_and_bench(arch: Arch) {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut j) = job(
        arch,
        &["doctor", "--json"],
        Duration::from_secs(300),
        dir.path().join("guest.log"),
    ) else {
        return;
    };
    j.steps.push(JobStep::ptelab(
        BENCH.iter().map(|s| s.to_string()).collect(),
    ));
    let outs = super::run::run_boot(&j).unwrap_or_else(|e| panic!("{e:#}"));
    let [doctor, bench] = &outs[..] else {
        panic!("two steps, {} answers", outs.len())
    };
    eprintln!(
        "{arch} doctor: boot to exit {:.2?}, accel {}, QEMU {}, guest kernel {}",
        doctor.boot_to_exit, doctor.accel, doctor.qemu_version, doctor.kernel_release
    );
    assert!(
        doctor.kernel_release.starts_with(RELEASE),
        "{}",
        doctor.kernel_release
    );
    let d = doc(&doctor.stdout);
    assert_eq!(d["schema"], "ptelab/doctor/v1");
    assert_eq!(
        check(&d, "kernel").1.split(' ').next(),
        Some(doctor.kernel_release.as_str())
    );
    assert_eq!(Arch::parse(check(&d, "arch").1), Some(arch));
    // What the init mounted: pagemap needs /proc, the mTHP sizes /sys.
    assert_eq!(check(&d, "page_size"), ("ok", "4096"));
    assert_eq!(check(&d, "mthp_sizes").0, "ok");
    let log = std::fs::read_to_string(&j.log).unwrap();
    assert!(
        log.starts_with("ptelab: ") && log.contains(" -kernel "),
        "the log starts with QEMU's command line"
    );
    assert!(
        log.contains("PTELAB-ANSWER-END"),
        "the console, answers included, is in the log"
    );
    assert!(qemu_children(&j).is_empty());

    assert_eq!(
        bench.exit_code,
        0,
        "{}",
        String::from_utf8_lossy(&bench.stdout)
    );
    let d = doc(&bench.stdout);
    let cell = if d["schema"] == "ptelab/bench/v1" {
        &d
    } else {
        &d["cells"][0]
    };
    assert_eq!(
        cell["layout"]["matches"], true,
        "layout verified in the guest: {cell}"
    );
    assert_eq!(cell["layout"]["histogram"]["4096"], 1024);
    let median = cell["ns_per_call"]["median"].as_f64().unwrap();
    assert!(median > 0.0);
    eprintln!(
        "{arch} bench mprotect-toggle 4M 4K: boot to exit {:.2?}, median {median} ({})",
        bench.boot_to_exit,
        if bench.accel == qemu::Accel::Tcg {
            "instructions per call"
        } else {
            "ns per call"
        }
    );
}

#[test]
fn x86_64_guest_runs_doctor_and_a_bench_cell() {
    doctor_and_bench(Arch::X86_64);
}

#[test]
fn arm64_guest_runs_doctor_and_a_bench_cell() {
    doctor_and_bench(Arch::Arm64);
}

/// Two commands in one profiled boot: each answers, and the plugin's
/// windows come back split per command, each numbered from 0 as the
/// command numbered them. arm64: the quicker TCG boot (docs/guests.md,
/// "One boot per kernel").
#[test]
fn two_commands_share_one_boot_and_each_gets_its_windows() {
    let dir = tempfile::tempdir().unwrap();
    let bench = |workload: &str, iters: &str| -> Vec<String> {
        [
            "bench",
            "--windows",
            "--icount",
            workload,
            "--size",
            "16K",
            "--folio",
            "4K",
            "--iters",
            iters,
            "--no-store",
            "--json",
        ]
        .map(String::from)
        .to_vec()
    };
    let Some(mut j) = job(
        Arch::Arm64,
        &[],
        Duration::from_secs(300),
        dir.path().join("two.log"),
    ) else {
        return;
    };
    let library = match super::plugin::library() {
        Ok(l) => l,
        Err(e) => return skipped(&format!("no QEMU plugin: {e:#}")),
    };
    j.profile = Some(super::run::Profiling {
        library,
        symbols: false,
    });
    j.steps = vec![
        JobStep::ptelab(bench("mprotect-toggle", "64")),
        JobStep::ptelab(bench("prot-transition", "32")),
    ];
    let outs = super::run::run_boot(&j).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(outs.len(), 2);
    for (out, workload) in outs.iter().zip(["mprotect-toggle", "prot-transition"]) {
        assert_eq!(out.exit_code, 0, "{}", String::from_utf8_lossy(&out.stdout));
        let d = doc(&out.stdout);
        // A workload of two phases answers one cell per phase.
        let d = if d["cells"].is_array() {
            &d["cells"][0]
        } else {
            &d
        };
        assert_eq!(d["workload"], workload, "{d}");
        let counts = out.counts.as_ref().expect("profiled");
        assert!(!counts.windows.is_empty(), "{workload}: no windows");
        let mut seqs: Vec<u64> = counts.windows.iter().map(|w| w.seq).collect();
        seqs.dedup();
        let reported: Vec<u64> = d["windows"]
            .as_array()
            .expect("the command reports its windows")
            .iter()
            .map(|w| w["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs.first(), Some(&0), "{workload}: {seqs:?}");
        for seq in reported {
            assert!(seqs.contains(&seq), "{workload}: window {seq} not counted");
        }
    }
    assert_eq!(outs[0].boot_to_exit, outs[1].boot_to_exit, "one boot");
    let log = std::fs::read_to_string(&j.log).unwrap();
    assert_eq!(log.matches("ptelab: guest runs: ptelab bench").count(), 2);
    assert!(qemu_children(&j).is_empty());
}

/// A guest that does not finish in time is killed, reaped, and reported
/// with its console and log.
#[test]
fn hung_guest_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("hung.log");
    let Some(j) = job(Arch::X86_64, BENCH, Duration::from_secs(2), log.clone()) else {
        return;
    };
    let t = Instant::now();
    let e = format!("{:#}", run_guest(&j).unwrap_err());
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(
        e.starts_with("the guest did not finish within 2 s (QEMU killed)"),
        "{e}"
    );
    assert!(
        e.ends_with(&format!("console log: {}", log.display())),
        "{e}"
    );
    assert!(
        qemu_children(&j).is_empty(),
        "QEMU survived: {:?}",
        qemu_children(&j)
    );
}

static STOP: AtomicBool = AtomicBool::new(false);

/// SIGINT (the flag it sets) stops the guest at once.
#[test]
fn interrupted_guest_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut j) = job(
        Arch::X86_64,
        BENCH,
        Duration::from_secs(120),
        dir.path().join("int.log"),
    ) else {
        return;
    };
    j.interrupted = &STOP;
    let setter = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(2));
        STOP.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let t = Instant::now();
    let e = format!("{:#}", run_guest(&j).unwrap_err());
    setter.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(
        e.starts_with("interrupted: stopped the guest (QEMU killed)"),
        "{e}"
    );
    assert!(
        qemu_children(&j).is_empty(),
        "QEMU survived: {:?}",
        qemu_children(&j)
    );
}

/// An init that exits panics the kernel; the error quotes the panic.
#[test]
fn guest_kernel_panic_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut j) = job(
        Arch::X86_64,
        &[],
        Duration::from_secs(120),
        dir.path().join("panic.log"),
    ) else {
        return;
    };
    // /bin/true as init: it exits at once, and init must not.
    j.binary = PathBuf::from("/bin/true");
    if super::initramfs::elf_info(&j.binary)
        .ok()
        .and_then(|e| e.arch)
        != Some(Arch::X86_64)
    {
        eprintln!("skipped: /bin/true is not an x86_64 binary");
        return;
    }
    let e = format!("{:#}", run_guest(&j).unwrap_err());
    assert!(
        e.starts_with(
            "the guest kernel panicked: Kernel panic - not syncing: Attempted to kill init!"
        ),
        "{e}"
    );
    assert!(
        e.contains("  | "),
        "the console's last lines are quoted: {e}"
    );
    assert!(qemu_children(&j).is_empty());
}

/// Files of this process open in `dir` (a guest's disk image is one while
/// the guest runs, and must be none after).
fn open_in(dir: &std::path::Path) -> Vec<PathBuf> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|t| t.starts_with(dir))
        .collect()
}

/// A reclaim job on a guest disk whose image is made in `disks`.
fn reclaim_job(args: &[&str], timeout: Duration, dir: &std::path::Path) -> Option<GuestJob> {
    let mut j = job(Arch::X86_64, args, timeout, dir.join("reclaim.log"))?;
    if let Err(e) = super::disk::find_mkfs() {
        skipped(&e.to_string());
        return None;
    }
    j.disk = Some(super::disk::DiskSpec::for_data(8 << 20, dir.join("disks")));
    j.steps[0].mglru = true;
    j.steps[0].disk = true;
    Some(j)
}

/// Seed 004 in a guest: clean file-backed 64K folios on the guest's ext4
/// disk (NVMe), in a cgroup v2 memory cgroup, reclaimed by memory.reclaim
/// with MGLRU on; the page-cache layout is verified in the guest and the
/// disk image is gone afterwards.
#[test]
fn x86_64_guest_reclaims_large_file_folios_on_its_disk() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let args = [
        "bench",
        "reclaim",
        "--size",
        "8M",
        "--folio",
        "64K",
        "--blocks",
        "1",
        "--time",
        "200ms",
        "--no-store",
        "--json",
    ];
    let Some(j) = reclaim_job(&args, Duration::from_secs(600), dir.path()) else {
        return;
    };
    let out = run_guest(&j).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(out.exit_code, 0, "{}", String::from_utf8_lossy(&out.stdout));
    let d = doc(&out.stdout);
    assert_eq!(d["schema"], "ptelab/bench/v1", "{d}");
    assert_eq!(
        d["phase"], "memcg-v2-reclaim ext4 mglru",
        "the seed's method, filesystem and LRU: {d}"
    );
    assert_eq!(d["layout"]["matches"], true, "layout verified: {d}");
    assert_eq!(d["layout"]["histogram"]["65536"], 128, "{d}");
    let median = d["ns_per_call"]["median"].as_f64().unwrap();
    assert!(median > 0.0);
    let log = std::fs::read_to_string(&j.log).unwrap();
    assert!(
        log.contains(" -device nvme,drive=ptelab-disk"),
        "the disk was attached"
    );
    assert!(log.contains("ptelab-init: /dev/nvme0n1 (ext4) mounted on /mnt/ptelab"));
    assert!(open_in(dir.path()).is_empty(), "{:?}", open_in(dir.path()));
    let left: Vec<_> = std::fs::read_dir(dir.path().join("disks"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
    eprintln!(
        "x86_64 bench reclaim 8M 64K: boot to exit {:.2?}, median {median}",
        out.boot_to_exit
    );
}

static STOP_DISK: AtomicBool = AtomicBool::new(false);

/// SIGINT (the flag it sets) while a guest runs on its disk: the guest is
/// stopped and the image is gone.
#[test]
fn interrupted_guest_leaves_no_disk_image() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let args = [
        "bench",
        "reclaim",
        "--size",
        "8M",
        "--folio",
        "64K",
        "--no-store",
        "--json",
    ];
    let Some(mut j) = reclaim_job(&args, Duration::from_secs(120), dir.path()) else {
        return;
    };
    j.interrupted = &STOP_DISK;
    let watched = dir.path().to_path_buf();
    let setter = std::thread::spawn(move || {
        // Stop once the image is open (QEMU is running on it).
        for _ in 0..200 {
            if !open_in(&watched).is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let seen = !open_in(&watched).is_empty();
        std::thread::sleep(Duration::from_secs(1));
        STOP_DISK.store(true, std::sync::atomic::Ordering::SeqCst);
        seen
    });
    let e = format!("{:#}", run_guest(&j).unwrap_err());
    assert!(setter.join().unwrap(), "the image was never open");
    assert!(
        e.starts_with("interrupted: stopped the guest (QEMU killed)"),
        "{e}"
    );
    assert!(qemu_children(&j).is_empty());
    assert!(open_in(dir.path()).is_empty(), "{:?}", open_in(dir.path()));
    assert_eq!(
        std::fs::read_dir(dir.path().join("disks")).unwrap().count(),
        0
    );
}
