//! Small facts about this process and machine, each read in one place:
//! effective uid, base page size, online CPUs, /proc/meminfo, mount points
//! from /proc/self/mountinfo, pagemap entries, and the start time and command
//! line of a process.
//!
//! The `procfs` crate parses where it parses what we need; the few
//! hand-written parts say why next to them.

use std::path::{Path, PathBuf};

use anyhow::Context;
use procfs::process::{MemoryMap, PageInfo, Process};
use procfs::Current;

/// Effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Effective user is root.
pub fn is_root() -> bool {
    euid() == 0
}

/// Base page size in bytes (`sysconf(_SC_PAGESIZE)`).
pub fn page_size() -> u64 {
    procfs::page_size()
}

/// Online CPUs (not the affinity mask: that is a property of this process).
/// procfs has no reader for this short of parsing /proc/cpuinfo.
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(1)
}

/// Let this thread (and what it spawns) run on every online CPU again: a
/// measuring session pins its process to one CPU, and guests started after
/// it must not share that one.
pub fn unpin_thread() -> anyhow::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes in
    // bounds (indices below CPU_SETSIZE).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..online_cpus().min(libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(cpu, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error()).context("allowing every CPU again");
        }
    }
    Ok(())
}

/// Share of MemAvailable a cell may use; the rest is left to the system.
pub const MEM_SHARE: f64 = 0.9;

/// /proc/meminfo, values in bytes.
pub fn meminfo() -> anyhow::Result<procfs::Meminfo> {
    procfs::Meminfo::current().context("reading /proc/meminfo")
}

/// One line of /proc/self/mountinfo, as far as ptelab needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted (escapes undone).
    pub point: PathBuf,
    /// Filesystem type (`tracefs`, `cgroup2`, ...).
    pub fstype: String,
    /// Per-superblock options (`memory` on a cgroup v1 memory hierarchy).
    pub super_options: Vec<String>,
}

/// Mounts of this process's mount namespace; empty when unreadable.
pub fn mounts() -> Vec<Mount> {
    Process::myself()
        .and_then(|p| p.mountinfo())
        .map(|m| m.into_iter().map(Mount::from).collect())
        .unwrap_or_default()
}

/// Mount points of filesystems of type `fstype`.
pub fn mount_points(fstype: &str) -> Vec<PathBuf> {
    mounts()
        .into_iter()
        .filter(|m| m.fstype == fstype)
        .map(|m| m.point)
        .collect()
}

/// Parse mountinfo text.
#[cfg(test)]
pub fn parse_mountinfo(text: &str) -> anyhow::Result<Vec<Mount>> {
    use procfs::FromBufRead;
    let infos =
        procfs::process::MountInfos::from_buf_read(text.as_bytes()).context("parsing mountinfo")?;
    Ok(infos.into_iter().map(Mount::from).collect())
}

impl From<procfs::process::MountInfo> for Mount {
    fn from(m: procfs::process::MountInfo) -> Mount {
        let mut super_options: Vec<String> = m
            .super_options
            .into_iter()
            .map(|(k, v)| match v {
                Some(v) => format!("{k}={v}"),
                None => k,
            })
            .collect();
        super_options.sort();
        Mount {
            point: PathBuf::from(unescape_octal(&m.mount_point.to_string_lossy())),
            fstype: m.fs_type,
            super_options,
        }
    }
}

impl Mount {
    /// Whether the superblock options include `opt` (e.g. `memory`).
    pub fn has_option(&self, opt: &str) -> bool {
        self.super_options.iter().any(|o| o == opt)
    }
}

/// Undo the kernel's `\ooo` escapes of space, tab, newline, backslash and `#`
/// in mountinfo, /proc/mounts and /proc/swaps paths. Hand-written because
/// procfs leaves mountinfo paths escaped, and its /proc/mounts reader does not
/// undo `\040` (space).
pub fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let digits = &b[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let v = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The pagemap entries of `npages` pages from `addr` (page-aligned).
pub fn pagemap(addr: *const u8, npages: usize) -> anyhow::Result<Vec<PageInfo>> {
    let first = addr as usize / page_size() as usize;
    Process::myself()
        .and_then(|p| p.pagemap())
        .and_then(|mut pm| pm.get_range_info(first..first + npages))
        .context("reading /proc/self/pagemap")
}

/// The raw 64-bit pagemap entry behind `info` (bit 63 present, 62 swapped,
/// 56 exclusive, 55 soft-dirty, PFN below).
pub fn raw_entry(info: PageInfo) -> u64 {
    match info {
        PageInfo::MemoryPage(f) => f.bits(),
        PageInfo::SwapPage(f) => f.bits(),
    }
}

/// VMAs of this process overlapping `[start, start+len)`: from
/// /proc/self/maps, or with `stats` from /proc/self/smaps (per-VMA figures
/// such as `AnonHugePages` in `extension.map`, in bytes).
pub fn vmas_overlapping(start: usize, len: usize, stats: bool) -> anyhow::Result<Vec<MemoryMap>> {
    let (lo, hi) = (start as u64, (start + len) as u64);
    let me = Process::myself().context("opening /proc/self")?;
    let maps = if stats {
        me.smaps().context("reading /proc/self/smaps")?
    } else {
        me.maps().context("reading /proc/self/maps")?
    };
    Ok(maps
        .into_iter()
        .filter(|m| m.address.0 < hi && m.address.1 > lo)
        .collect())
}

/// Start time of process `pid` (clock ticks since boot, /proc/PID/stat field
/// 22): tells a live process from a reused pid. `None` when it is gone.
pub fn start_time(pid: u32) -> Option<u64> {
    let pid = i32::try_from(pid).ok()?;
    Process::new(pid)
        .and_then(|p| p.stat())
        .ok()
        .map(|s| s.starttime)
}

/// Whether a process `pid` exists (also one we may not signal).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// This process's command line, argv[0] by file name, at most 200 chars
/// (`"ptelab sweep mprotect-toggle --sizes 4K,40K"`).
pub fn own_cmdline() -> String {
    let mut args = Process::myself()
        .and_then(|p| p.cmdline())
        .unwrap_or_default();
    if let Some(first) = args.first_mut() {
        if let Some(base) = Path::new(first.as_str()).file_name() {
            *first = base.to_string_lossy().into_owned();
        }
    }
    // The lock and recovery files outlive the run: no secret goes in them.
    let mut s = crate::text::redact::redact_args(&args);
    if s.chars().count() > 200 {
        s = s.chars().take(197).collect::<String>() + "...";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_octal() {
        assert_eq!(unescape_octal("/a\\040b"), "/a b");
        assert_eq!(unescape_octal("/t\\011x\\134y"), "/t\tx\\y");
        assert_eq!(unescape_octal("/sys/kernel/tracing"), "/sys/kernel/tracing");
        assert_eq!(unescape_octal("/x\\"), "/x\\");
        assert_eq!(unescape_octal("/x\\09"), "/x\\09");
        assert_eq!(unescape_octal("/x\\777"), "/x\\777");
    }

    #[test]
    fn mountinfo_parsing() {
        let text = "36 25 0:31 / /sys/kernel/tracing rw,relatime shared:12 - tracefs nodev rw\n\
                    40 30 0:35 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                    41 30 0:36 / /mnt/with\\040space rw - ext4 /dev/sda1 rw\n";
        let m = parse_mountinfo(text).unwrap();
        assert_eq!(m[0].point, PathBuf::from("/sys/kernel/tracing"));
        assert_eq!(m[0].fstype, "tracefs");
        assert!(m[1].has_option("memory") && m[1].has_option("rw"));
        assert!(!m[0].has_option("memory"));
        assert_eq!(m[2].point, PathBuf::from("/mnt/with space"));
    }

    #[test]
    fn this_process() {
        assert!(page_size() >= 4096 && page_size().is_power_of_two());
        assert!(online_cpus() >= 1);
        let mi = meminfo().unwrap();
        assert!(mi.mem_total > 0 && mi.mem_available.is_some());
        assert!(mounts().iter().any(|m| m.point == Path::new("/")));
        let me = std::process::id();
        assert!(pid_alive(me));
        assert!(start_time(me).unwrap() > 0);
        assert!(!own_cmdline().is_empty());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!pid_alive(pid) && start_time(pid).is_none());
    }

    #[test]
    fn pagemap_of_touched_memory() {
        let page = page_size() as usize;
        let mut buf = vec![1u8; 4 * page];
        let off = buf.as_ptr().align_offset(page);
        let p = buf[off..].as_mut_ptr();
        // SAFETY: writing inside `buf`.
        unsafe { std::ptr::write_volatile(p, 2) };
        let e = pagemap(p, 1).unwrap();
        assert!(raw_entry(e[0]) >> 63 == 1, "{e:?}");
    }
}
