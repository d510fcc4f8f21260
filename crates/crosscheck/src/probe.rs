//! What user space can observe of the kernel's page tables, read on this
//! machine: `tlb:tlb_flush` records of one call, minor faults per page,
//! `/proc/self/pagemap` bits, mTHP split counters.

use std::collections::BTreeMap;

use anyhow::{bail, Context};

use crate::kernel::procfs;
use crate::kernel::region::PAGE_SIZE;
use crate::kernel::tlbtrace::FlushCounter;

/// `/proc/self/pagemap` bit 63: page present.
pub const PM_PRESENT: u64 = 1 << 63;
/// Bit 56: page exclusively mapped.
pub const PM_MMAP_EXCLUSIVE: u64 = 1 << 56;
/// Bit 55: PTE soft-dirty.
pub const PM_SOFT_DIRTY: u64 = 1 << 55;

/// Per-call `tlb:tlb_flush` breakdowns of the calling (pinned) thread.
pub struct FlushProbe {
    counter: FlushCounter,
}

impl FlushProbe {
    /// Open the counter with its raw-record sampler.
    pub fn open() -> anyhow::Result<FlushProbe> {
        let counter = FlushCounter::open(true).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(FlushProbe { counter })
    }

    /// Run `f` (one mm call) with counting on; `"reason/pages"` -> events.
    pub fn call(
        &mut self,
        f: impl FnOnce() -> anyhow::Result<()>,
    ) -> anyhow::Result<BTreeMap<String, u64>> {
        self.counter.reset()?;
        self.counter.start()?;
        let r = f();
        self.counter.stop()?;
        r?;
        let b = self.counter.breakdown()?;
        let total = self.counter.count()?;
        if b.lost > 0 || b.undecoded > 0 || b.sampled() != total {
            bail!(
                "tlb:tlb_flush breakdown incomplete: {} counted, {} decoded, {} lost, {} undecoded",
                total,
                b.sampled(),
                b.lost,
                b.undecoded
            );
        }
        Ok(b.events)
    }
}

/// This process's minor faults so far (`getrusage(RUSAGE_SELF).ru_minflt`).
pub fn minflt() -> u64 {
    // SAFETY: a zeroed rusage is a valid out-parameter; getrusage only writes it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer cannot fail.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_minflt as u64
}

/// Write one byte to each of `npages` pages from `addr`, in order, and say
/// which writes took a (minor) fault. Pages not written yet by this call are
/// untouched, so each fault is attributed to exactly one page.
pub(crate) fn write_faults(addr: *mut u8, npages: usize) -> Vec<bool> {
    let mut out = Vec::with_capacity(npages);
    for i in 0..npages {
        let before = minflt();
        // SAFETY: the caller passes a range it mapped read-write.
        unsafe { std::ptr::write_volatile(addr.add(i * PAGE_SIZE), 0x5a) };
        out.push(minflt() > before);
    }
    out
}

/// The pagemap entries of `npages` pages from `addr`.
pub fn pagemap(addr: *const u8, npages: usize) -> anyhow::Result<Vec<u64>> {
    let entries = procfs::pagemap(addr, npages)?;
    Ok(entries.into_iter().map(procfs::raw_entry).collect())
}

/// One bit of every entry.
pub fn bits(entries: &[u64], bit: u64) -> Vec<bool> {
    entries.iter().map(|&e| e & bit != 0).collect()
}

/// The PFNs (0 when hidden or absent).
pub fn pfns(entries: &[u64]) -> Vec<u64> {
    entries
        .iter()
        .map(|&e| {
            if e & PM_PRESENT != 0 {
                e & ((1 << 55) - 1)
            } else {
                0
            }
        })
        .collect()
}

/// `echo 4 > /proc/self/clear_refs`: clear soft-dirty bits (and
/// write-protect) in the whole process, clear `VM_SOFTDIRTY` on every VMA.
pub fn clear_soft_dirty() -> anyhow::Result<()> {
    std::fs::write("/proc/self/clear_refs", "4").context("writing 4 to /proc/self/clear_refs")
}

/// Whether this kernel tracks soft-dirty (`CONFIG_MEM_SOFT_DIRTY`): a page
/// just written in a new mapping reads soft-dirty in pagemap (its VMA has
/// `VM_SOFTDIRTY` and the write set the PTE bit) exactly when it does.
/// The process may map above 2^48: the kernel runs with 52-bit user VA,
/// which with 4K pages on arm64 means `lpa2_is_enabled()` (range TLBIs in
/// 64K units). Asked with an mmap hint above 48 bits, which the kernel
/// honours only where the VA space is that large.
pub fn va_above_48_bits() -> bool {
    let hint = (1usize << 50) as *mut libc::c_void;
    // SAFETY: a fresh anonymous PROT_NONE mapping without MAP_FIXED, unmapped
    // right away; nothing else refers to it.
    unsafe {
        let p = libc::mmap(
            hint,
            PAGE_SIZE,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return false;
        }
        libc::munmap(p, PAGE_SIZE);
        p as usize >= 1 << 48
    }
}

pub fn soft_dirty_supported() -> anyhow::Result<bool> {
    // SAFETY: a fresh private anonymous page, unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error()).context("mmap of a probe page");
    }
    let p = p.cast::<u8>();
    // SAFETY: the page just mapped read-write.
    unsafe { std::ptr::write_volatile(p, 1) };
    let e = pagemap(p, 1);
    // SAFETY: our probe page, no longer referenced.
    unsafe { libc::munmap(p.cast(), PAGE_SIZE) };
    Ok(e?[0] & PM_SOFT_DIRTY != 0)
}

/// Sum of every `hugepages-*/stats/split*` counter, per counter name.
pub fn split_stats() -> BTreeMap<String, u64> {
    let root = std::path::Path::new("/sys/kernel/mm/transparent_hugepage");
    let mut m = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(root) else {
        return m;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.starts_with("hugepages-") {
            continue;
        }
        let Ok(stats) = std::fs::read_dir(e.path().join("stats")) else {
            continue;
        };
        for s in stats.flatten() {
            let stat = s.file_name().to_string_lossy().to_string();
            if !stat.starts_with("split") {
                continue;
            }
            if let Some(v) = std::fs::read_to_string(s.path())
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
            {
                *m.entry(format!("{}/{stat}", name.trim_start_matches("hugepages-")))
                    .or_default() += v;
            }
        }
    }
    m
}

/// Counters that grew between two [`split_stats`] snapshots: `0` or e.g.
/// `64kB/split +1`.
pub fn split_delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> String {
    let d: Vec<String> = after
        .iter()
        .filter_map(|(k, &v)| {
            let b = before.get(k).copied().unwrap_or(0);
            (v > b).then(|| format!("{k} +{}", v - b))
        })
        .collect();
    if d.is_empty() {
        "0".to_string()
    } else {
        d.join(", ")
    }
}

/// A `PROT_NONE` mapping that keeps `[addr, addr+len)` out of reach of
/// the allocator (musl's malloc maps large blocks with `mmap`, which lands
/// in the first free gap, often the room an mremap destination needs)
/// until it is dropped (unmapped). It never has pages or page tables.
pub struct Hold {
    addr: *mut u8,
    len: usize,
}

impl Hold {
    /// Map the hold; an error when anything is mapped there already.
    pub fn new(addr: *mut u8, len: usize) -> anyhow::Result<Hold> {
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
        let p = unsafe {
            libc::mmap(
                addr.cast(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_NORESERVE
                    | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("holding {len} bytes free at {addr:p}"));
        }
        if p.cast::<u8>() != addr {
            // Kernels before 4.17 take MAP_FIXED_NOREPLACE as a hint.
            // SAFETY: the mapping just made, unused.
            unsafe { libc::munmap(p, len) };
            bail!("holding {len} bytes free at {addr:p}: the range is taken");
        }
        Ok(Hold { addr, len })
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        // SAFETY: our own PROT_NONE mapping, never referenced.
        unsafe { libc::munmap(self.addr.cast(), self.len) };
    }
}

/// `mprotect(addr, len, prot)`.
pub fn mprotect(addr: *mut u8, len: usize, prot: i32) -> anyhow::Result<()> {
    // SAFETY: mprotect of a range this process mapped; the callers do not
    // hold references into it across the call.
    let rc = unsafe { libc::mprotect(addr.cast(), len, prot) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("mprotect");
    }
    Ok(())
}

/// fork(); the child exits at once without touching memory; wait for it.
/// Afterwards every private anonymous page the parent had mapped has lost
/// `PageAnonExclusive` (fork shared it) and its PTE is write-protected.
pub fn fork_and_reap() -> anyhow::Result<()> {
    // SAFETY: the child calls only _exit (async-signal-safe).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("fork");
    }
    if pid == 0 {
        // SAFETY: terminate the child at once.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child with a valid status pointer.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    if rc != pid {
        return Err(std::io::Error::last_os_error()).context("waitpid");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_delta_names_what_grew() {
        let a: BTreeMap<String, u64> = [("64kB/split".to_string(), 3)].into_iter().collect();
        let mut b = a.clone();
        assert_eq!(split_delta(&a, &b), "0");
        b.insert("64kB/split".into(), 5);
        b.insert("2048kB/split_failed".into(), 1);
        assert_eq!(split_delta(&a, &b), "2048kB/split_failed +1, 64kB/split +2");
    }

    #[test]
    fn pagemap_bits_and_pfns() {
        let e = [PM_PRESENT | PM_MMAP_EXCLUSIVE | 0x1234, PM_SOFT_DIRTY];
        assert_eq!(bits(&e, PM_PRESENT), vec![true, false]);
        assert_eq!(bits(&e, PM_SOFT_DIRTY), vec![false, true]);
        assert_eq!(pfns(&e), vec![0x1234, 0]);
    }
}
