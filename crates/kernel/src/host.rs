//! Facts about this machine and kernel, captured with every run and printed by
//! `ptelab doctor`.
//!
//! Everything is read from /proc, /sys and `uname`/`cpuid`; nothing is assumed
//! from the architecture or the kernel version. Fields that cannot be read are
//! reported as `"unknown"` (or 0) rather than failing the run: a missing fact
//! is a finding, not an error.
//!
//! Virtualization is detected without dmesg (see [`detect_virt`]): the
//! cpuinfo `hypervisor` flag, the hypervisor vendor from CPUID leaf
//! 0x4000_0000, `/sys/hypervisor`, and kernel symbols in /proc/kallsyms that
//! exist only with `CONFIG_PARAVIRT_XXL` (page-table writes become pv_ops
//! calls), `CONFIG_PVM_GUEST` and Xen PV.

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{procfs, thp};
pub use crate::record::Host;

/// How ptelab was invoked, as stored with every run: secrets masked
/// (`text::redact`), since `runs` and `show` print it to anyone who reads the
/// database.
pub fn invocation() -> String {
    crate::text::redact::redact_args(std::env::args())
}

const UNKNOWN: &str = "unknown";

/// Capture the host. Fails only when even the kernel release is unreadable
/// (no /proc and no uname).
pub fn capture() -> anyhow::Result<Host> {
    let uts = uname();
    let kernel_release = read_trim("/proc/sys/kernel/osrelease")
        .or_else(|| uts.as_ref().map(|u| u.release.clone()))
        .ok_or_else(|| {
            anyhow::anyhow!("cannot read the kernel release (/proc/sys/kernel/osrelease, uname)")
        })?;
    let meminfo = procfs::meminfo().ok();
    let virt = detect_virt();
    Ok(Host {
        kernel_release,
        kernel_version: read_trim("/proc/sys/kernel/version")
            .or_else(|| uts.as_ref().map(|u| u.version.clone()))
            .unwrap_or_else(|| UNKNOWN.into()),
        kernel_cmdline: read_trim("/proc/cmdline").unwrap_or_else(|| UNKNOWN.into()),
        arch: uts
            .map(|u| u.machine)
            .unwrap_or_else(|| std::env::consts::ARCH.into()),
        page_size: procfs::page_size(),
        cpu_model: cpu_model(),
        cores: procfs::online_cpus(),
        mem_total_bytes: meminfo.as_ref().map_or(0, |m| m.mem_total),
        mem_available_bytes: meminfo.and_then(|m| m.mem_available).unwrap_or(0),
        is_root: procfs::is_root(),
        paravirt: virt.describe(),
        thp_knobs: thp::read_knobs().unwrap_or_default(),
        machine_id: machine_id(),
        tool_version: env!("CARGO_PKG_VERSION").to_owned(),
        git_revision: git_revision(),
        guest: None,
    })
}

/// `option_env!("PTELAB_GIT_REV")`, set by the build script when building
/// from a git checkout.
pub fn git_revision() -> Option<String> {
    option_env!("PTELAB_GIT_REV")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn read_trim(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

struct Uname {
    release: String,
    version: String,
    machine: String,
}

fn uname() -> Option<Uname> {
    // SAFETY: utsname is plain old data; uname fills it with NUL-terminated strings.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    // c_char is i8 on x86-64 and u8 on arm64.
    #[allow(clippy::unnecessary_cast)]
    let s = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Some(Uname {
        release: s(&u.release),
        version: s(&u.version),
        machine: s(&u.machine),
    })
}

/// MemAvailable in bytes (/proc/meminfo; Linux 3.14 and later).
pub fn mem_available_bytes() -> anyhow::Result<u64> {
    procfs::meminfo()?.mem_available.ok_or_else(|| {
        anyhow::anyhow!("/proc/meminfo has no MemAvailable (Linux 3.14 or later needed)")
    })
}

/// SwapTotal in bytes (0 when unknown or none).
pub fn swap_total_bytes() -> u64 {
    procfs::meminfo().map_or(0, |m| m.swap_total)
}

/// The CPU model from /proc/cpuinfo (`model name` on x86; implementer/part
/// on arm64, which has no model name).
pub fn cpu_model() -> String {
    cpu_model_from(&fs::read_to_string("/proc/cpuinfo").unwrap_or_default())
}

fn cpu_model_from(cpuinfo: &str) -> String {
    let field = |name: &str| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_owned())
        })
    };
    if let Some(m) = field("model name").filter(|m| !m.is_empty()) {
        return m;
    }
    match (field("CPU implementer"), field("CPU part")) {
        (Some(i), Some(p)) => format!("implementer {i} part {p}"),
        _ => field("Hardware")
            .or_else(|| field("cpu model"))
            .unwrap_or_else(|| UNKNOWN.into()),
    }
}

/// 32 hex digits derived from /etc/machine-id and a ptelab-specific key
/// (two FNV-1a 64 passes): stable per machine, not the raw id.
pub fn machine_id() -> String {
    match read_trim("/etc/machine-id").filter(|s| !s.is_empty()) {
        Some(id) => app_specific_id(&id),
        None => UNKNOWN.into(),
    }
}

fn app_specific_id(raw: &str) -> String {
    let fnv = |key: &str| {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.bytes().chain(raw.bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    format!(
        "{:016x}{:016x}",
        fnv("ptelab/machine-id/a"),
        fnv("ptelab/machine-id/b")
    )
}

// ---------------------------------------------------------------------------
// Virtualization

/// What can be seen of virtualization from user space.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Virt {
    /// The `hypervisor` CPU flag in /proc/cpuinfo (x86).
    pub hypervisor_flag: bool,
    /// Hypervisor vendor (CPUID 0x4000_0000 signature, or /sys/hypervisor/type).
    pub vendor: Option<String>,
    /// /sys/hypervisor/guest_type (Xen: "PV", "HVM", "PVH").
    pub xen_guest_type: Option<String>,
    /// Kernel built with CONFIG_PARAVIRT_XXL (`pv_native_read_cr2` in kallsyms):
    /// set_pte and friends are pv_ops calls, patched to native code unless a
    /// paravirtual MMU (Xen PV, PVM) took them over.
    pub paravirt_xxl: bool,
    /// Kernel built with PVM guest support (`pvm_guest_late_init` in kallsyms).
    pub pvm_guest_support: bool,
    /// Whether the kernel runs as a PVM guest, when determinable: a PVM guest
    /// kernel is relocated out of the standard kernel text mapping, so the
    /// `_text` address (root only) tells. `None` when addresses are hidden.
    pub pvm_guest_active: Option<bool>,
    /// The kvm-pvm host module is present (this kernel can host PVM guests:
    /// software virtualization behind /dev/kvm).
    pub pvm_host: bool,
}

impl Virt {
    /// Virtualized at all.
    pub fn virtualized(&self) -> bool {
        self.hypervisor_flag || self.vendor.is_some()
    }

    /// Page-table writes trap or call into a hypervisor (Xen PV, active PVM guest).
    pub fn paravirtual_mmu(&self) -> bool {
        self.xen_guest_type.as_deref() == Some("PV") || self.pvm_guest_active == Some(true)
    }

    /// One line for humans, `None` on bare metal.
    pub fn describe(&self) -> Option<String> {
        if !self.virtualized() && !self.paravirtual_mmu() {
            return None;
        }
        let mut parts = Vec::new();
        let vendor = self
            .vendor
            .clone()
            .unwrap_or_else(|| "unknown hypervisor".into());
        parts.push(match (&self.xen_guest_type, self.pvm_guest_active) {
            (Some(t), _) => format!("{vendor} {t} guest"),
            (None, Some(true)) => format!("PVM guest (on {vendor})"),
            _ => format!("{vendor} guest"),
        });
        if self.paravirtual_mmu() {
            parts.push("paravirtual page-table ops (each PTE update is a hypervisor call)".into());
        } else if self.paravirt_xxl {
            parts.push("CONFIG_PARAVIRT_XXL: page-table writes are pv_ops calls".into());
        }
        if self.pvm_guest_support && self.pvm_guest_active == Some(false) {
            parts.push("PVM guest support built in, not active".into());
        } else if self.pvm_guest_support && self.pvm_guest_active.is_none() {
            parts.push("PVM guest support built in (whether active needs root to tell)".into());
        }
        if self.pvm_host {
            parts.push("kvm-pvm host: /dev/kvm is PVM software virtualization".into());
        }
        Some(parts.join("; "))
    }
}

/// The KVM API version `/dev/kvm` reports (`KVM_GET_API_VERSION`, 12 on
/// every kernel since 2.6.22). `Err` says why there is no usable KVM.
pub fn kvm_api_version() -> Result<i32, String> {
    use std::os::unix::io::AsRawFd;
    // The request type is c_ulong in glibc, c_int in musl.
    const KVM_GET_API_VERSION: libc::Ioctl = 0xAE00;
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map_err(|e| format!("/dev/kvm: {e}"))?;
    // SAFETY: KVM_GET_API_VERSION takes no argument; `f` is open.
    let v = unsafe { libc::ioctl(f.as_raw_fd(), KVM_GET_API_VERSION, 0) };
    if v < 0 {
        return Err(format!(
            "/dev/kvm: KVM_GET_API_VERSION: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(v)
}

/// Detect virtualization from user space (no dmesg). Costs one read of
/// /proc/kallsyms (~100k lines, tens of ms).
pub fn detect_virt() -> Virt {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let hypervisor_flag = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .is_some_and(|l| l.split_whitespace().any(|f| f == "hypervisor"));
    let sys_type = read_trim("/sys/hypervisor/type").filter(|s| !s.is_empty());
    let vendor = if hypervisor_flag {
        cpuid_hypervisor_vendor()
    } else {
        None
    }
    .or_else(|| sys_type.clone());
    let xen_guest_type = if sys_type.as_deref() == Some("xen") {
        read_trim("/sys/hypervisor/guest_type").filter(|s| !s.is_empty())
    } else {
        None
    };
    let syms = kallsyms_facts(&fs::read_to_string("/proc/kallsyms").unwrap_or_default());
    let pvm_guest_active = match (syms.pvm_guest_support, syms.text_addr) {
        (false, _) => Some(false),
        (true, Some(addr)) if addr != 0 => Some(addr < 0xffff_ffff_8000_0000),
        (true, _) => None,
    };
    Virt {
        hypervisor_flag,
        vendor,
        xen_guest_type,
        paravirt_xxl: syms.paravirt_xxl,
        pvm_guest_support: syms.pvm_guest_support,
        pvm_guest_active,
        pvm_host: syms.pvm_host || Path::new("/sys/module/kvm_pvm").exists(),
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
struct KallsymsFacts {
    paravirt_xxl: bool,
    pvm_guest_support: bool,
    pvm_host: bool,
    /// Address of `_text` (0 when kptr_restrict hides addresses).
    text_addr: Option<u64>,
}

fn kallsyms_facts(text: &str) -> KallsymsFacts {
    let mut f = KallsymsFacts::default();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(addr), Some(_kind), Some(name)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        match name {
            "pv_native_read_cr2" => f.paravirt_xxl = true,
            "pvm_guest_late_init" | "pvm_init_platform" => f.pvm_guest_support = true,
            "pvm_handle_exit_irqoff" | "pvm_vcpu_after_set_cpuid" => f.pvm_host = true,
            "_text" => f.text_addr = u64::from_str_radix(addr, 16).ok(),
            _ => {}
        }
    }
    f
}

/// The hypervisor vendor from CPUID leaf 0x4000_0000 (only meaningful when
/// the `hypervisor` flag is set).
#[cfg(target_arch = "x86_64")]
fn cpuid_hypervisor_vendor() -> Option<String> {
    // SAFETY: CPUID is available on every x86-64 CPU; leaves in the
    // hypervisor range return zeros or vendor data, never fault.
    #[allow(unused_unsafe)] // safe to call since Rust 1.87; rust-version is 1.80
    let r = unsafe { core::arch::x86_64::__cpuid(0x4000_0000) };
    let mut sig = Vec::with_capacity(12);
    for reg in [r.ebx, r.ecx, r.edx] {
        sig.extend_from_slice(&reg.to_le_bytes());
    }
    vendor_name(&sig)
}

#[cfg(not(target_arch = "x86_64"))]
fn cpuid_hypervisor_vendor() -> Option<String> {
    None
}

/// A CPUID hypervisor signature → a vendor name (CPUID is x86's; the unit
/// test runs everywhere).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn vendor_name(sig: &[u8]) -> Option<String> {
    let s: String = sig
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| b as char)
        .collect();
    let name = match s.as_str() {
        "" => return None,
        "KVMKVMKVM" => "KVM",
        "XenVMMXenVMM" => "Xen",
        "Microsoft Hv" => "Hyper-V",
        "VMwareVMware" => "VMware",
        "TCGTCGTCGTCG" => "QEMU TCG",
        "VBoxVBoxVBox" => "VirtualBox",
        "ACRNACRNACRN" => "ACRN",
        "bhyve bhyve " => "bhyve",
        " lrpepyh  vr" => "Parallels",
        "QNXQVMBSQG" => "QNX",
        other if other.chars().all(|c| c.is_ascii_graphic() || c == ' ') => {
            return Some(other.trim().to_owned())
        }
        _ => return None,
    };
    Some(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_models() {
        assert_eq!(
            cpu_model_from("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t: fpu\n"),
            "AMD EPYC"
        );
        assert_eq!(
            cpu_model_from("processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n"),
            "implementer 0x41 part 0xd0c"
        );
        assert_eq!(cpu_model_from(""), "unknown");
    }

    #[test]
    fn vendors() {
        assert_eq!(vendor_name(b"KVMKVMKVM\0\0\0").as_deref(), Some("KVM"));
        assert_eq!(vendor_name(b"Microsoft Hv").as_deref(), Some("Hyper-V"));
        assert_eq!(vendor_name(b"\0\0\0\0\0\0\0\0\0\0\0\0"), None);
        assert_eq!(vendor_name(&[0xff, 0x01, 0x02]), None);
    }

    #[test]
    fn kallsyms_evidence() {
        let text = "ffffffff81000000 T _text\nffffffff821f2c00 T pv_native_read_cr2\n\
                    ffffffff837a8190 t pvm_guest_late_init\nffffffff812eddd0 t pvm_handle_exit_irqoff\t[kvm_pvm]\n";
        let f = kallsyms_facts(text);
        assert_eq!(
            f,
            KallsymsFacts {
                paravirt_xxl: true,
                pvm_guest_support: true,
                pvm_host: true,
                text_addr: Some(0xffff_ffff_8100_0000)
            }
        );
        assert_eq!(
            kallsyms_facts("0000000000000000 T _text\n").text_addr,
            Some(0)
        );
    }

    #[test]
    fn describes_virtualization() {
        assert_eq!(Virt::default().describe(), None);
        let kvm = Virt {
            hypervisor_flag: true,
            vendor: Some("KVM".into()),
            paravirt_xxl: true,
            pvm_guest_support: true,
            pvm_guest_active: Some(false),
            ..Virt::default()
        };
        let d = kvm.describe().unwrap();
        assert!(d.starts_with("KVM guest; CONFIG_PARAVIRT_XXL"), "{d}");
        assert!(!kvm.paravirtual_mmu());
        let pvm = Virt {
            pvm_guest_active: Some(true),
            ..kvm
        };
        assert!(pvm.paravirtual_mmu());
        assert!(pvm
            .describe()
            .unwrap()
            .starts_with("PVM guest (on KVM); paravirtual page-table ops"));
        let xen = Virt {
            vendor: Some("xen".into()),
            xen_guest_type: Some("PV".into()),
            ..Virt::default()
        };
        assert!(xen
            .describe()
            .unwrap()
            .starts_with("xen PV guest; paravirtual page-table ops"));
    }

    #[test]
    fn machine_id_is_derived_and_stable() {
        let a = app_specific_id("0123456789abcdef0123456789abcdef");
        assert_eq!(a.len(), 32);
        assert_eq!(a, app_specific_id("0123456789abcdef0123456789abcdef"));
        assert_ne!(a, app_specific_id("0123456789abcdef0123456789abcdee"));
        assert!(!a.contains("0123456789abcdef"));
    }

    #[test]
    fn captures_this_host() {
        let h = capture().unwrap();
        assert!(!h.kernel_release.is_empty() && h.kernel_release != "unknown");
        assert!(h.page_size >= 4096 && h.page_size.is_power_of_two());
        assert!(h.cores >= 1);
        assert!(h.mem_total_bytes > 0 && h.mem_available_bytes <= h.mem_total_bytes);
        assert_eq!(h.tool_version, env!("CARGO_PKG_VERSION"));
        let json = serde_json::to_string(&h).unwrap();
        let back: Host = serde_json::from_str(&json).unwrap();
        assert_eq!(back, h);
        if Path::new(thp::THP_ROOT).join("enabled").exists() {
            assert!(h.thp_knobs.contains_key("enabled"));
        }
    }
}
