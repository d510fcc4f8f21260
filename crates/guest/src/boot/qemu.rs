//! QEMU for a guest: which accelerator, which binary, which command line,
//! and a child process that cannot outlive ptelab.
//!
//! Under TCG the guest runs with `-icount shift=0,sleep=off`: its clock
//! advances one nanosecond per guest instruction, so a time difference read
//! in the guest is an instruction count (exact and repeatable, blind to
//! cycles and cache misses). Under KVM the guest reads real time.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::Context;

use crate::arch::facts;
use crate::error::bail_usage;
use crate::workload::Arch;

/// How QEMU runs a guest (the record layer's type: it is stored with the run).
pub use crate::record::Accel;

/// What `--accel` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccelRequest {
    Auto,
    Kvm,
    Tcg,
}

impl AccelRequest {
    /// The word `--accel` takes for it.
    pub fn flag(self) -> &'static str {
        match self {
            AccelRequest::Auto => "auto",
            AccelRequest::Kvm => "kvm",
            AccelRequest::Tcg => "tcg",
        }
    }
}

/// The accelerator a guest of `arch` gets, and why (one line for progress
/// and provenance). `--accel kvm` where KVM cannot run the guest is a usage
/// error that says why and suggests tcg.
pub fn choose_accel(req: AccelRequest, arch: Arch) -> anyhow::Result<(Accel, String)> {
    if req == AccelRequest::Tcg {
        return Ok((
            Accel::Tcg,
            "--accel tcg: QEMU TCG, instruction count (icount)".into(),
        ));
    }
    decide(req, arch, kvm_probe(arch))
}

fn decide(
    req: AccelRequest,
    arch: Arch,
    kvm: Result<String, String>,
) -> anyhow::Result<(Accel, String)> {
    match (req, kvm) {
        (AccelRequest::Tcg, _) => Ok((
            Accel::Tcg,
            "--accel tcg: QEMU TCG, instruction count (icount)".into(),
        )),
        (_, Ok(why)) => Ok((Accel::Kvm, why)),
        (AccelRequest::Kvm, Err(why)) => {
            bail_usage!(
                "--accel kvm: KVM cannot run a {arch} guest here: {why}; use --accel tcg (or auto)"
            )
        }
        (AccelRequest::Auto, Err(why)) => Ok((
            Accel::Tcg,
            format!("no usable KVM ({why}): QEMU TCG, instruction count (icount)"),
        )),
    }
}

/// Whether KVM here can boot a stock kernel of `arch`: `Ok(what)` or `Err(why not)`.
///
/// /dev/kvm must open, speak API 12 and create a VM; on x86 it must be
/// backed by hardware virtualization (kvm_intel or kvm_amd). A PVM host
/// (the kvm_pvm module: software virtualization for PVM-aware guests) gives
/// a /dev/kvm that creates VMs and even runs real-mode code, yet a stock
/// kernel dies early in its decompressor there, so it counts as unusable.
pub fn kvm_probe(arch: Arch) -> Result<String, String> {
    let host = Arch::host();
    if host != Some(arch) {
        return Err(format!(
            "KVM runs only guests of this machine's arch ({})",
            host.map_or(std::env::consts::ARCH, |a| a.name())
        ));
    }
    let kvm = File::options()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map_err(|e| format!("/dev/kvm: {e}"))?;
    const KVM_GET_API_VERSION: libc::c_ulong = 0xAE00;
    const KVM_CREATE_VM: libc::c_ulong = 0xAE01;
    // SAFETY: both ioctls take an integer argument; `kvm` is open.
    let api = unsafe { libc::ioctl(kvm.as_raw_fd(), KVM_GET_API_VERSION as _, 0) };
    if api != 12 {
        return Err(format!("/dev/kvm API version {api}, not 12"));
    }
    let module = |m: &str| Path::new("/sys/module").join(m).exists();
    if module("kvm_pvm") {
        return Err("/dev/kvm is PVM (module kvm_pvm), which cannot boot stock kernels".into());
    }
    let modules = facts(arch).kvm_modules;
    let vendor = match modules.iter().find(|m| module(m)) {
        Some(m) => *m,
        None if modules.is_empty() => "kvm",
        None => {
            return Err(format!(
                "no hardware virtualization module ({}) is loaded",
                modules.join(" or ")
            ))
        }
    };
    // SAFETY: as above; the returned fd is closed at once.
    let vm = unsafe { libc::ioctl(kvm.as_raw_fd(), KVM_CREATE_VM as _, 0) };
    if vm < 0 {
        return Err(format!(
            "KVM_CREATE_VM: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `vm` is a descriptor this function owns.
    unsafe { libc::close(vm) };
    Ok(format!("/dev/kvm ({vendor}): KVM, time"))
}

/// The emulator's path on `PATH`; missing is a usage error naming the package.
pub fn find_emulator(arch: Arch) -> anyhow::Result<PathBuf> {
    find_in(&std::env::var_os("PATH").unwrap_or_default(), arch)
}

fn find_in(path: &std::ffi::OsStr, arch: Arch) -> anyhow::Result<PathBuf> {
    let (bin, pkg) = (facts(arch).qemu, facts(arch).qemu_package);
    for dir in std::env::split_paths(path) {
        let p = dir.join(bin);
        if let Ok(m) = p.metadata() {
            use std::os::unix::fs::PermissionsExt;
            if m.is_file() && m.permissions().mode() & 0o111 != 0 {
                return Ok(p);
            }
        }
    }
    bail_usage!("{bin} not found on PATH: an {arch} guest needs QEMU; install Debian's {pkg} (apt-get install {pkg})")
}

/// `QEMU emulator version 7.2.15 (Debian 1:7.2+dfsg-7+deb12u13)` → `7.2.15 (Debian 1:7.2+dfsg-7+deb12u13)`.
pub fn version(emulator: &Path) -> anyhow::Result<String> {
    let out = Command::new(emulator)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} --version", emulator.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_version(&text).with_context(|| {
        format!(
            "{} --version printed no version: {}",
            emulator.display(),
            text.trim()
        )
    })
}

fn parse_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.contains("version"))?;
    let v = line.split_once("version ")?.1.trim();
    (!v.is_empty()).then(|| v.to_string())
}

/// The x86-64 CPU every TCG guest sees, whichever QEMU runs it: the `max`
/// CPU of QEMU 7.2 (Debian 12's), on which ptelab's stored x86 figures were
/// measured. Later releases' `max` adds features (FSRM, RDPID, x2APIC,
/// RDSEED, SHA-NI, …) and reports family 6 model 6, and the guest kernel
/// patches itself by them (another `memcpy`, other vulnerability
/// mitigations: `spec_store_bypass` "Vulnerable" instead of "Not
/// affected"). These are the flags QEMU 7.2's `max` has (its
/// `query-cpu-model-expansion`); every other flag a QEMU recognizes is
/// turned off, and family, model and stepping are 7.2's. Measured: Debian
/// 6.17.8's `/proc/cpuinfo` flags, bugs and vulnerabilities are then the same
/// under QEMU 7.2, 10.0 and 11.1 (docs/guests.md, "QEMU versions").
const X86_REFERENCE_FLAGS: &[&str] = &[
    "3dnow",
    "3dnowext",
    "abm",
    "acpi",
    "adx",
    "aes",
    "apic",
    "arat",
    "avx",
    "avx2",
    "bmi1",
    "bmi2",
    "clflush",
    "clflushopt",
    "clwb",
    "cmov",
    "cr8legacy",
    "cx16",
    "cx8",
    "de",
    "erms",
    "f16c",
    "fma",
    "fpu",
    "fsgsbase",
    "fxsr",
    "hypervisor",
    "i64",
    "la57",
    "lahf-lm",
    "lm",
    "mca",
    "mce",
    "mmx",
    "mmxext",
    "monitor",
    "movbe",
    "mpx",
    "msr",
    "mtrr",
    "npt",
    "nx",
    "pae",
    "pat",
    "pclmuldq",
    "pclmulqdq",
    "pcommit",
    "pdpe1gb",
    "pge",
    "pks",
    "pku",
    "pni",
    "popcnt",
    "pse",
    "pse36",
    "rdrand",
    "rdtscp",
    "sep",
    "smap",
    "smep",
    "ss",
    "sse",
    "sse2",
    "sse3",
    "sse4-1",
    "sse4-2",
    "sse4a",
    "ssse3",
    "svm",
    "svme-addr-chk",
    "syscall",
    "tsc",
    "umip",
    "vaes",
    "vgif",
    "xd",
    "xgetbv1",
    "xsave",
    "xsaveopt",
];

/// Family, model and stepping of QEMU 7.2's x86-64 `max` CPU.
const X86_REFERENCE_MODEL: &str = "family=15,model=107,stepping=1";

/// `-cpu` for an x86-64 TCG guest of `emulator`: `max` less every flag
/// [`X86_REFERENCE_FLAGS`] lacks, among those this QEMU recognizes (its
/// `-cpu help`), with 7.2's family, model and stepping. Asked once per
/// emulator in a process.
pub fn x86_reference_cpu(emulator: &Path) -> anyhow::Result<String> {
    static SEEN: std::sync::Mutex<Vec<(PathBuf, String)>> = std::sync::Mutex::new(Vec::new());
    if let Some((_, c)) = SEEN.lock().unwrap().iter().find(|(e, _)| e == emulator) {
        return Ok(c.clone());
    }
    let out = Command::new(emulator)
        .args(["-cpu", "help"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .with_context(|| format!("running {} -cpu help", emulator.display()))?;
    let cpu = reference_cpu(&String::from_utf8_lossy(&out.stdout));
    SEEN.lock()
        .unwrap()
        .push((emulator.to_path_buf(), cpu.clone()));
    Ok(cpu)
}

/// [`x86_reference_cpu`] from the text of `-cpu help`.
fn reference_cpu(help: &str) -> String {
    let norm = |f: &str| f.replace(['_', '.'], "-");
    let keep: Vec<String> = X86_REFERENCE_FLAGS.iter().map(|f| norm(f)).collect();
    let recognized = help
        .lines()
        .skip_while(|l| !l.starts_with("Recognized CPUID flags"))
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .flat_map(str::split_whitespace);
    let mut cpu = String::from("max");
    for f in recognized {
        if !keep.contains(&norm(f)) {
            cpu.push_str(",-");
            cpu.push_str(f);
        }
    }
    cpu.push(',');
    cpu.push_str(X86_REFERENCE_MODEL);
    cpu
}

/// What a guest boots with.
pub struct Machine<'a> {
    pub arch: Arch,
    pub accel: Accel,
    pub memory_mib: u64,
    pub kernel: &'a Path,
    pub initrd: &'a Path,
    /// Kernel parameters added after ptelab's own (`--append`).
    pub append: &'a [String],
    /// A disk image for the guest's NVMe controller (`disk`), when the
    /// command needs one.
    pub disk: Option<&'a Path>,
    /// `-plugin` argument: ptelab's QEMU plugin and its output (`vm
    /// --profile`; `plugin::qemu_arg`).
    pub plugin: Option<String>,
    /// What this boot varies beside the kernel path (`calibrate --guest`).
    pub setup: &'a Setup,
    /// x86-64 under TCG: a CPU without fast short `rep movsb`/`stosb`
    /// (ERMS, FSRM), for guests whose untimed work is mostly page clears
    /// and `write()` copies (`run::GuestJob`).
    pub narrow_strings: bool,
    /// x86-64 under TCG: the features to take off this QEMU's `max` CPU
    /// ([`x86_reference_cpu`]); None leaves `max` as this QEMU has it.
    pub x86_cpu: Option<&'a str>,
}

/// Whether a guest of `arch` runs on a CPU without fast short string
/// instructions ([`Machine::narrow_strings`]): an x86-64 guest with a disk,
/// the reclaim workload's, which spends its time refilling the page cache
/// (page clears and `write()` copies, untimed) while its measured call runs
/// no string instruction but a few small memsets (docs/guests.md).
pub fn narrow_strings(arch: Arch, disk: bool) -> bool {
    arch == Arch::X86_64 && disk
}

/// What a boot may vary that the kernel path under test does not depend
/// on: QEMU's random seed, the length of the kernel command line, the size
/// of the measuring process's environment. Each moves the guest's memory
/// layout (setup randomization, docs/guests.md "The bias of a guest
/// figure"); the default is the one setup every other guest boots with.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Setup {
    /// QEMU's `-seed` under TCG (None: [`TCG_SEED`]).
    pub seed: Option<u64>,
    /// Bytes of the value of a kernel parameter [`PAD_PARAM`] that nothing
    /// reads (0: none).
    pub cmdline_pad: usize,
    /// Bytes of the value of [`PAD_ENV`] in the measuring process's
    /// environment (0: none).
    pub env_pad: usize,
}

/// The padding kernel parameter. No dot, so the kernel hands it to init's
/// environment rather than to a module, and it moves that too.
pub const PAD_PARAM: &str = "ptelab_pad";
/// The padding variable of the measuring process's environment.
pub const PAD_ENV: &str = "PTELAB_PAD";

impl Setup {
    /// The padding parameter, when there is one.
    pub fn cmdline_param(&self) -> Option<String> {
        (self.cmdline_pad > 0).then(|| format!("{PAD_PARAM}={}", "x".repeat(self.cmdline_pad)))
    }

    /// The padding variable's value, when there is one.
    pub fn env_value(&self) -> Option<String> {
        (self.env_pad > 0).then(|| "x".repeat(self.env_pad))
    }
}

/// The kernel command line: the console, kernel errors and worse only (an
/// OOM kill shows in the log; the guest's init lowers the console level to
/// emergencies before it writes the answer), a panic or oops ends the
/// guest at once (`panic=-1` reboots, which `-no-reboot` turns into QEMU
/// exiting), and the kernel at a fixed address (`nokaslr`, see [`TCG_SEED`]).
pub fn kernel_cmdline(arch: Arch) -> String {
    let console = facts(arch).console;
    format!("console={console} quiet loglevel=4 panic=-1 oops=panic nokaslr")
}

/// Under TCG a guest is deterministic: icount makes its clock and timer
/// interrupts a function of the instructions executed, and these fix what
/// else would vary between boots (with `nokaslr` on the kernel command
/// line): the seed of QEMU's random number generator (RDRAND/RNDR, hence
/// the kernel's entropy pool and every address it randomizes) and the
/// real-time clock's start. Two runs of one cell then give the same
/// instruction counts to the last digit; without them they differed by
/// about 0.15% (mprotect-toggle 4M 4K on Debian 6.17.13, x86_64 and arm64).
/// The price: a guest always sees the same layout, and anything that moves
/// it (another kernel, guest binary, memory size or command line) shifts
/// such a figure by a few tenths of a percent (0.4% seen) besides its own
/// effect.
pub const TCG_SEED: &str = "1";
/// The guest's wall clock at boot under TCG (it then advances with the
/// guest's own clock); guests do no networking, so nothing expires.
pub const TCG_RTC: &str = "base=2025-01-01T00:00:00,clock=vm";

/// QEMU's arguments (after the emulator's name).
pub fn args(m: &Machine) -> Vec<OsString> {
    let x86 = |narrow: bool| {
        let mut cpu = m.x86_cpu.unwrap_or(facts(m.arch).tcg_cpu).to_string();
        // Without ERMS/FSRM the kernel's string copies and clears move 8
        // bytes per `rep` iteration instead of 1; TCG executes (and icount
        // counts) each iteration.
        if narrow {
            cpu.push_str(",-erms,-fsrm");
        }
        cpu
    };
    let f = facts(m.arch);
    let tcg_cpu = match m.arch {
        Arch::X86_64 => x86(m.narrow_strings),
        Arch::Arm64 => f.tcg_cpu.to_string(),
    };
    let mem = m.memory_mib.to_string();
    let seed = m.setup.seed.map_or(TCG_SEED.to_string(), |s| s.to_string());
    let mut a: Vec<&str> = match m.accel {
        Accel::Tcg => vec![
            "-M",
            f.machine,
            "-accel",
            "tcg",
            "-cpu",
            &tcg_cpu,
            "-icount",
            "shift=0,sleep=off",
            "-seed",
            &seed,
            "-rtc",
            TCG_RTC,
        ],
        Accel::Kvm => vec!["-M", f.kvm_machine, "-accel", "kvm", "-cpu", "host"],
    };
    // -nodefaults: no NIC, VGA or option ROMs to set up (about 0.4 s of an
    // x86 boot under TCG, and no firmware noise on the console); the one
    // serial port is the console, on QEMU's stdout.
    a.extend(["-smp", "1", "-m", &mem, "-nodefaults", "-no-user-config"]);
    a.extend(["-display", "none", "-serial", "stdio", "-no-reboot"]);
    let mut a: Vec<OsString> = a.into_iter().map(OsString::from).collect();
    if let Some(image) = m.disk {
        a.extend(super::disk::qemu_args(image));
    }
    if let Some(p) = &m.plugin {
        a.push("-plugin".into());
        a.push(p.into());
    }
    a.push("-kernel".into());
    a.push(m.kernel.into());
    a.push("-initrd".into());
    a.push(m.initrd.into());
    a.push("-append".into());
    let mut cmdline = kernel_cmdline(m.arch);
    for p in m.append.iter().cloned().chain(m.setup.cmdline_param()) {
        cmdline.push(' ');
        cmdline.push_str(&p);
    }
    a.push(cmdline.into());
    a
}

/// A running QEMU. It dies with ptelab (PR_SET_PDEATHSIG, for the thread
/// that spawned it, which waits for it), runs in its own process group (a
/// Ctrl-C at the terminal reaches ptelab, which stops it, not QEMU
/// directly), and is killed and reaped when dropped.
pub struct Qemu {
    child: Child,
    reaped: bool,
}

impl Qemu {
    /// `env` is added to QEMU's environment (the level ptelab's plugin
    /// declares, `plugin::Loads::env`).
    pub fn spawn(
        emulator: &Path,
        args: &[OsString],
        env: &[(&str, String)],
    ) -> anyhow::Result<Qemu> {
        let parent = std::process::id() as libc::pid_t;
        let mut cmd = Command::new(emulator);
        cmd.args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                // ptelab died before the prctl: nobody would kill us.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", emulator.display()))?;
        Ok(Qemu {
            child,
            reaped: false,
        })
    }

    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Kill (if still running) and reap.
    pub fn kill(&mut self) -> std::io::Result<std::process::ExitStatus> {
        let _ = self.child.kill();
        let s = self.child.wait();
        self.reaped = true;
        s
    }

    /// Wait for QEMU to exit by itself.
    pub fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        let s = self.child.wait();
        self.reaped = s.is_ok();
        s
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(arch: Arch, accel: Accel) -> String {
        let m = Machine {
            arch,
            accel,
            memory_mib: 1024,
            kernel: Path::new("/k/vmlinuz"),
            initrd: Path::new("/t/i.cpio"),
            append: &[],
            disk: None,
            plugin: None,
            setup: &Setup::default(),
            narrow_strings: false,
            x86_cpu: None,
        };
        args(&m)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn command_lines() {
        let tail = "-smp 1 -m 1024 -nodefaults -no-user-config -display none -serial stdio -no-reboot -kernel /k/vmlinuz -initrd /t/i.cpio -append";
        assert_eq!(
            line(Arch::X86_64, Accel::Tcg),
            format!("-M pc -accel tcg -cpu max -icount shift=0,sleep=off -seed 1 -rtc base=2025-01-01T00:00:00,clock=vm {tail} console=ttyS0 quiet loglevel=4 panic=-1 oops=panic nokaslr")
        );
        assert_eq!(
            line(Arch::Arm64, Accel::Tcg),
            format!("-M virt -accel tcg -cpu max,pauth-impdef=on -icount shift=0,sleep=off -seed 1 -rtc base=2025-01-01T00:00:00,clock=vm {tail} console=ttyAMA0 quiet loglevel=4 panic=-1 oops=panic nokaslr")
        );
        assert_eq!(
            line(Arch::X86_64, Accel::Kvm),
            format!("-M pc -accel kvm -cpu host {tail} console=ttyS0 quiet loglevel=4 panic=-1 oops=panic nokaslr")
        );
        assert_eq!(
            line(Arch::Arm64, Accel::Kvm),
            format!("-M virt,gic-version=max -accel kvm -cpu host {tail} console=ttyAMA0 quiet loglevel=4 panic=-1 oops=panic nokaslr")
        );
        // The command line is one argument, however many words it has.
        let m = Machine {
            arch: Arch::X86_64,
            accel: Accel::Tcg,
            memory_mib: 512,
            kernel: Path::new("/a b/k"),
            initrd: Path::new("/i"),
            append: &[],
            disk: None,
            plugin: None,
            setup: &Setup::default(),
            narrow_strings: false,
            x86_cpu: None,
        };
        let a = args(&m);
        assert_eq!(a[a.len() - 1], OsString::from(kernel_cmdline(Arch::X86_64)));
        let extra = ["transparent_hugepage=never".to_string()];
        let m = Machine {
            append: &extra,
            ..m
        };
        let a = args(&m);
        assert_eq!(
            a[a.len() - 1],
            OsString::from(format!(
                "{} transparent_hugepage=never",
                kernel_cmdline(Arch::X86_64)
            ))
        );
        assert_eq!(a[a.len() - 5], OsString::from("/a b/k"));
        // Another setup: its seed, and the padding after every parameter.
        let setup = Setup {
            seed: Some(7),
            cmdline_pad: 3,
            env_pad: 5,
        };
        let padded = args(&Machine {
            arch: Arch::X86_64,
            accel: Accel::Tcg,
            memory_mib: 512,
            kernel: Path::new("/k"),
            initrd: Path::new("/i"),
            append: &extra,
            disk: None,
            plugin: None,
            setup: &setup,
            narrow_strings: false,
            x86_cpu: None,
        });
        let at = padded.iter().position(|x| x == "-seed").unwrap();
        assert_eq!(padded[at + 1], OsString::from("7"));
        assert_eq!(
            padded[padded.len() - 1],
            OsString::from(format!(
                "{} transparent_hugepage=never ptelab_pad=xxx",
                kernel_cmdline(Arch::X86_64)
            ))
        );
        assert_eq!(setup.env_value().as_deref(), Some("xxxxx"));
        assert_eq!(Setup::default().cmdline_param(), None);
        assert!(
            !a.iter().any(|x| x == "-drive" || x == "-device"),
            "no disk unless asked"
        );
        // A disk: one NVMe controller with the image as its namespace.
        let m = Machine {
            disk: Some(Path::new("/proc/9/fd/5")),
            ..m
        };
        let a: Vec<String> = args(&m)
            .iter()
            .map(|x| x.to_string_lossy().into_owned())
            .collect();
        let at = a.iter().position(|x| x == "-drive").expect("-drive");
        assert_eq!(
            a[at..at + 4],
            [
                "-drive",
                "file=/proc/9/fd/5,format=raw,if=none,id=ptelab-disk,cache=unsafe",
                "-device",
                "nvme,drive=ptelab-disk,serial=ptelab"
            ]
        );
        assert_eq!(a.iter().filter(|x| *x == "-device").count(), 1);
        assert_eq!(a[a.len() - 5], "/a b/k");
    }

    #[test]
    fn accel_decisions() {
        let ok = || Ok("/dev/kvm (kvm_intel): KVM, time".to_string());
        let no =
            || Err("/dev/kvm is PVM (module kvm_pvm), which cannot boot stock kernels".to_string());
        assert_eq!(
            decide(AccelRequest::Auto, Arch::X86_64, ok()).unwrap().0,
            Accel::Kvm
        );
        let (a, why) = decide(AccelRequest::Auto, Arch::X86_64, no()).unwrap();
        assert_eq!(a, Accel::Tcg);
        assert!(why.contains("PVM") && why.contains("icount"), "{why}");
        assert_eq!(
            decide(AccelRequest::Tcg, Arch::X86_64, ok()).unwrap().0,
            Accel::Tcg
        );
        let e = decide(AccelRequest::Kvm, Arch::Arm64, no()).unwrap_err();
        assert!(crate::error::is_usage(&e));
        assert!(e.to_string().contains("use --accel tcg"), "{e}");
    }

    #[test]
    fn kvm_never_for_another_arch() {
        let other = if Arch::host() == Some(Arch::X86_64) {
            Arch::Arm64
        } else {
            Arch::X86_64
        };
        let why = kvm_probe(other).unwrap_err();
        assert!(why.contains("this machine's arch"), "{why}");
        // Auto never fails, whatever this machine's KVM is.
        assert!(choose_accel(AccelRequest::Auto, Arch::host().unwrap()).is_ok());
    }

    /// The process state letter of `pid` (`Z` zombie), None when it is gone.
    fn state(pid: u32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(") ")?.1.chars().next()
    }

    fn wait_dead(pid: u32) -> bool {
        for _ in 0..100 {
            if matches!(state(pid), None | Some('Z')) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn dropped_process_is_killed_and_reaped() {
        let mut q = Qemu::spawn(Path::new("/bin/sleep"), &["60".into()], &[]).unwrap();
        let pid = q.child().id();
        assert_eq!(state(pid).map(|s| s != 'Z'), Some(true));
        drop(q);
        assert_eq!(state(pid), None, "killed and reaped: no zombie left");
    }

    #[test]
    fn process_dies_with_the_thread_that_spawned_it() {
        // As if ptelab died without running Drop (SIGKILL): PR_SET_PDEATHSIG
        // kills the child when the spawning thread ends.
        let (pid, q) = std::thread::spawn(|| {
            let mut q = Qemu::spawn(Path::new("/bin/sleep"), &["60".into()], &[]).unwrap();
            let pid = q.child().id();
            // Skip Drop's kill, keep the handle to reap the zombie later.
            q.reaped = true;
            (pid, q)
        })
        .join()
        .unwrap();
        assert!(wait_dead(pid), "the child outlived its parent thread");
        let mut q = q;
        q.reaped = false;
        drop(q);
        assert_eq!(state(pid), None);
    }

    #[test]
    fn own_process_group() {
        let mut q = Qemu::spawn(Path::new("/bin/sleep"), &["60".into()], &[]).unwrap();
        let pid = q.child().id() as libc::pid_t;
        // SAFETY: getpgid only queries.
        assert_eq!(
            unsafe { libc::getpgid(pid) },
            pid,
            "a terminal's Ctrl-C must not reach QEMU"
        );
        assert!(q.kill().is_ok());
    }

    #[test]
    fn versions() {
        assert_eq!(
            parse_version("QEMU emulator version 7.2.15 (Debian 1:7.2+dfsg-7+deb12u13)\nCopyright (c) 2003-2022 Fabrice Bellard\n").as_deref(),
            Some("7.2.15 (Debian 1:7.2+dfsg-7+deb12u13)")
        );
        assert_eq!(parse_version("garbage"), None);
    }

    #[test]
    fn missing_emulator_names_the_package() {
        let empty = tempfile::tempdir().unwrap();
        let e = find_in(empty.path().as_os_str(), Arch::Arm64).unwrap_err();
        assert!(crate::error::is_usage(&e));
        assert_eq!(
            e.to_string(),
            "qemu-system-aarch64 not found on PATH: an arm64 guest needs QEMU; install Debian's qemu-system-arm (apt-get install qemu-system-arm)"
        );
    }
}
