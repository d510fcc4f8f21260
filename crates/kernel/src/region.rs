//! A timed region: its own VMA with unmapped gaps on both sides, aligned to its
//! folio size, populated so that the requested folio layout arises.
//!
//! Why placement matters (measured on this VM for issue 2): the seed 001
//! reproducer's 4 KiB figure moves 2.8x depending on whether its region merges
//! with a neighbouring anonymous mapping (every mprotect then splits and
//! re-merges a VMA), and an unaligned 40000 KiB region gets 18 or 19 PMD
//! folios, which makes forced-PMD runs bimodal. So by default the region is
//! aligned to its folio size and isolated by unmapped gaps; `neighbor` builds
//! the merging case on purpose.
//!
//! How each layout is obtained (the THP knobs are set by `thp::KnobGuard`
//! before `populate`):
//! - `4K`: MADV_NOHUGEPAGE, then a write to every page.
//! - `16K`..`1M`, `2M`: MADV_HUGEPAGE (that one size is enabled in `madvise`
//!   mode), then a write to every page; the first write to a folio-aligned
//!   chunk allocates the whole folio.
//! - `2M-pte`: as `2M`, then each PMD mapping is split (not the folio) by a
//!   temporary VMA split: MADV_DONTFORK then MADV_DOFORK on the first page of
//!   each 2 MiB chunk (seed 000's `pte_map_thps`); MADV_NOHUGEPAGE, given
//!   before the splits, keeps khugepaged from collapsing the PTE-mapped THPs
//!   back (given after, khugepaged could collapse them in between).
//!
//! Left out: file-backed and shared regions (a later issue), hugetlbfs.

use std::ptr;

use anyhow::{bail, Context};

use crate::workload::folio::PMD_SIZE;
use crate::workload::FolioSpec;

/// Base page size this code assumes for layout decisions (checked against
/// sysconf at map time).
pub const PAGE_SIZE: usize = 4096;

/// Pages in the deliberately merging neighbour mapping (`--neighbor`).
const NEIGHBOR_PAGES: usize = 4;

/// An anonymous private region with a requested folio layout.
pub struct Region {
    addr: *mut u8,
    len: usize,
    spec: FolioSpec,
    /// The neighbour mapping right below `addr`, when asked for.
    neighbor: Option<(*mut u8, usize)>,
}

// SAFETY: the region is plain anonymous memory owned by this value; moving the
// owner to another thread moves the ownership.
unsafe impl Send for Region {}

fn mmap_anon(hint: *mut u8, len: usize, prot: i32, extra: i32) -> anyhow::Result<*mut u8> {
    // SAFETY: anonymous mapping; with MAP_FIXED the caller owns [hint, hint+len).
    let p = unsafe {
        libc::mmap(
            hint.cast(),
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error()).context(format!("mmap of {len} bytes"));
    }
    Ok(p.cast())
}

/// How many times a region is placed again when another thread maps into
/// the free range between [`place`] finding it and the region taking it
/// (ptelab measures from one thread; tests run in many).
const PLACE_ATTEMPTS: usize = 8;

/// Place `reserve` bytes (`below` of them under the start) and map them
/// with `map` from the start found; placed again when `map` fails, as when
/// another thread took the range first, at most [`PLACE_ATTEMPTS`] times.
fn placed<T>(
    reserve: usize,
    below: usize,
    align: usize,
    mut map: impl FnMut(usize) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut last = None;
    for _ in 0..PLACE_ATTEMPTS {
        match map(place(reserve, below, align)?) {
            Ok(t) => return Ok(t),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one attempt").context(format!(
        "other threads mapped into the reserved range {PLACE_ATTEMPTS} times; try again"
    )))
}

fn munmap(addr: *mut u8, len: usize) {
    if len > 0 {
        // SAFETY: callers pass ranges they mapped and no longer reference.
        unsafe { libc::munmap(addr.cast(), len) };
    }
}

/// `mmap` exactly `[addr, addr+len)` read-write, refusing to replace anything
/// there (`MAP_FIXED_NOREPLACE`).
fn mmap_rw_at(addr: *mut u8, len: usize) -> anyhow::Result<*mut u8> {
    mmap_anon(
        addr,
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_FIXED_NOREPLACE,
    )
}

/// `size` as a length in bytes: positive and a whole number of pages.
fn region_len(size: u64) -> anyhow::Result<usize> {
    let len = usize::try_from(size).context("size does not fit the address space")?;
    if len == 0 || len % PAGE_SIZE != 0 {
        bail!("region size {size} is not a positive multiple of the 4096-byte page");
    }
    Ok(len)
}

/// Find a start address, aligned to `align`, for `len` bytes with `below`
/// bytes free right under it and gaps at least one alignment unit wide (and
/// at least 64 KiB) on both sides, so that small mappings made later rarely
/// land next to it. A `PROT_NONE` reservation is mapped to find the place and
/// released again before returning: the caller maps exactly what it wants
/// inside it and the gaps stay unmapped (a `PROT_NONE` guard would merge with
/// the region whenever the region itself is `PROT_NONE`).
fn place(len: usize, below: usize, align: usize) -> anyhow::Result<usize> {
    let gap = align.max(64 << 10);
    let reserve = len + below + 2 * gap + align;
    let base = mmap_anon(
        ptr::null_mut(),
        reserve,
        libc::PROT_NONE,
        libc::MAP_NORESERVE,
    )?;
    let start = (base as usize + gap + below).next_multiple_of(align);
    munmap(base, reserve);
    Ok(start)
}

/// `mremap(from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to)`, checking the
/// mapping landed at `to`.
#[inline]
pub fn mremap_fixed(from: *mut u8, len: usize, to: *mut u8) -> anyhow::Result<()> {
    // SAFETY: moves a mapping this process owns to a destination the caller
    // checked is free; nothing references the source afterwards.
    let p = unsafe {
        libc::mremap(
            from.cast(),
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            to.cast::<libc::c_void>(),
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error()).context("mremap(MAYMOVE|FIXED)");
    }
    if p.cast::<u8>() != to {
        bail!("mremap returned {p:p}, not {to:p}");
    }
    Ok(())
}

/// `madvise` with the advice's name in the error.
/// Present when the kernel has transparent huge pages.
const THP_SYSFS: &str = "/sys/kernel/mm/transparent_hugepage";

pub fn madvise(addr: *mut u8, len: usize, advice: i32, name: &str) -> anyhow::Result<()> {
    // SAFETY: advice on a range of our own mapping; no memory is reinterpreted.
    let rc = unsafe { libc::madvise(addr.cast(), len, advice) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        // A kernel built without THP (x86_64's defconfig, as `bisect
        // --defconfig` builds) refuses MADV_NOHUGEPAGE with EINVAL: it has
        // no huge pages to refuse, so order-0 pages are all it gives.
        if advice == libc::MADV_NOHUGEPAGE
            && err.raw_os_error() == Some(libc::EINVAL)
            && !std::path::Path::new(THP_SYSFS).exists()
        {
            return Ok(());
        }
        return Err(err).context(format!("madvise({name}) on {len} bytes"));
    }
    Ok(())
}

impl Region {
    /// Map (not populate) a region of `size` bytes starting on a PMD boundary
    /// (and on its folio size, where that is larger), with unmapped gaps on
    /// both sides. With `neighbor`, an anonymous read-write mapping is placed
    /// right below it with identical flags so that the two merge into one VMA.
    ///
    /// The start is fixed rather than wherever mmap puts it so that a cell
    /// executes the same path every run: a region of a given size always
    /// spans the same number of page tables, and arm64 kernels with LPA2
    /// (52-bit VA, as Debian builds them, on a CPU with FEAT_LPA2) issue one
    /// TLBI per page up to the first 64K boundary before their range TLBIs.
    /// The model places its regions on the same boundary.
    pub fn map(size: u64, spec: FolioSpec, neighbor: bool) -> anyhow::Result<Region> {
        let page = super::procfs::page_size() as usize;
        if page != PAGE_SIZE {
            bail!("base page size is {page} bytes; ptelab's layout control assumes 4096");
        }
        let len = region_len(size)?;
        let align = (spec.alignment() as usize).max(PMD_SIZE as usize);
        let below = if neighbor {
            NEIGHBOR_PAGES * PAGE_SIZE
        } else {
            0
        };
        placed(len, below, align, |start| {
            let mut neighbor_map = None;
            if neighbor {
                let nb = (start - below) as *mut u8;
                let p = mmap_rw_at(nb, below).context("mapping the --neighbor mapping")?;
                neighbor_map = Some((p, below));
            }
            let addr = mmap_rw_at(start as *mut u8, len).inspect_err(|_| {
                if let Some((p, l)) = neighbor_map {
                    munmap(p, l);
                }
            })?;
            Ok(Region {
                addr,
                len,
                spec,
                neighbor: neighbor_map,
            })
        })
    }

    /// Like [`Region::map`] without a neighbour, but aligned to at least
    /// `min_align` and with `room` bytes right above the region that were
    /// unmapped when it was placed (mremap-move's destination). Nothing keeps
    /// other threads from mapping into the room later; the caller checks.
    pub fn map_with_room(
        size: u64,
        spec: FolioSpec,
        room: usize,
        min_align: usize,
    ) -> anyhow::Result<Region> {
        let len = region_len(size)?;
        let align = (spec.alignment() as usize).max(PAGE_SIZE).max(min_align);
        // The room above counts in the reservation, not below the start.
        placed(len + room, 0, align, |start| {
            let addr = mmap_rw_at(start as *mut u8, len)?;
            Ok(Region {
                addr,
                len,
                spec,
                neighbor: None,
            })
        })
    }

    /// Fault in every page with a write so that the kernel allocates the
    /// requested layout (knobs must already be configured), and for `2M-pte`
    /// split every PMD mapping into PTEs.
    pub fn populate(&mut self) -> anyhow::Result<()> {
        let hugepage = !matches!(self.spec, FolioSpec::Base);
        let (advice, name) = if hugepage {
            (libc::MADV_HUGEPAGE, "MADV_HUGEPAGE")
        } else {
            (libc::MADV_NOHUGEPAGE, "MADV_NOHUGEPAGE")
        };
        // The neighbour must carry the same VMA flags or it will not merge.
        if let Some((p, l)) = self.neighbor {
            madvise(p, l, advice, name)?;
            touch(p, l);
        }
        madvise(self.addr, self.len, advice, name)?;
        touch(self.addr, self.len);
        if self.spec == FolioSpec::PmdPte {
            self.pte_map_thps()?;
        }
        Ok(())
    }

    /// PTE-map every PMD-mapped THP by temporarily splitting the VMA at the
    /// first page of each PMD (seed 000's trick), collapse forbidden first.
    fn pte_map_thps(&mut self) -> anyhow::Result<()> {
        self.pte_map_thps_then(|_| {})
    }

    /// [`Region::pte_map_thps`], with `after_split` run after each PMD is
    /// split: where khugepaged may strike (tests collapse there).
    ///
    /// MADV_NOHUGEPAGE comes before the splits, not after: until the VMA
    /// carries it, khugepaged may collapse a PTE-mapped THP back into a PMD
    /// mapping. One khugepaged pass scans 4096 pages, 16 MiB: under load, a
    /// region preempted between its splits and the advice was found 16 MiB
    /// PMD-mapped after them. The advice leaves existing PMD mappings alone,
    /// and the temporary VMAs carry it, so they merge back.
    fn pte_map_thps_then(&mut self, mut after_split: impl FnMut(*mut u8)) -> anyhow::Result<()> {
        if let Some((p, l)) = self.neighbor {
            madvise(p, l, libc::MADV_NOHUGEPAGE, "MADV_NOHUGEPAGE")?;
        }
        madvise(
            self.addr,
            self.len,
            libc::MADV_NOHUGEPAGE,
            "MADV_NOHUGEPAGE",
        )?;
        let pmd = PMD_SIZE as usize;
        let mut off = 0;
        while off + pmd <= self.len {
            // SAFETY: in bounds of our mapping.
            let p = unsafe { self.addr.add(off) };
            madvise(p, PAGE_SIZE, libc::MADV_DONTFORK, "MADV_DONTFORK")?;
            madvise(p, PAGE_SIZE, libc::MADV_DOFORK, "MADV_DOFORK")?;
            after_split(p);
            off += pmd;
        }
        Ok(())
    }

    /// Replace the region's anonymous memory by a `MAP_SHARED` mapping of
    /// `file` from byte `offset` (page-aligned; same length, read-write). The
    /// region still unmaps the range on drop.
    pub fn map_shared_file(&self, file: &std::fs::File, offset: u64) -> anyhow::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: MAP_FIXED over the range this region owns; nothing
        // references the anonymous memory it replaces.
        let p = unsafe {
            libc::mmap(
                self.addr.cast(),
                self.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                file.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error())
                .context("mmap(MAP_SHARED | MAP_FIXED) of a file over a region");
        }
        Ok(())
    }

    // The measuring loops (another crate) call these between the window
    // markers: inlined there, as when they were one crate, the guest's
    // instruction counts per call are those of the calls alone.
    /// First byte of the region.
    #[inline]
    pub fn addr(&self) -> *mut u8 {
        self.addr
    }

    /// Length in bytes.
    #[allow(clippy::len_without_is_empty)] // never empty: mmap refuses 0
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The layout that was requested.
    pub fn spec(&self) -> FolioSpec {
        self.spec
    }

    /// `mprotect(2)` of the whole region (seed 001's call).
    #[inline]
    pub fn protect(&self, prot: i32) -> anyhow::Result<()> {
        // SAFETY: changes the protection of the mapping this region owns;
        // its memory is only touched (through `touch` and the workloads)
        // while it is readable and writable.
        let rc = unsafe { libc::mprotect(self.addr.cast(), self.len, prot) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()).context("mprotect");
        }
        Ok(())
    }

    /// Write one byte to every page again (seed 000's re-touch after its
    /// mprotect calls). The region must be writable.
    pub fn retouch(&self) {
        touch(self.addr, self.len);
    }

    /// VMAs in /proc/self/maps that overlap the region.
    pub fn vma_count(&self) -> anyhow::Result<u64> {
        vmas_overlapping(self.addr as usize, self.len)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        munmap(self.addr, self.len);
        if let Some((p, l)) = self.neighbor.take() {
            munmap(p, l);
        }
    }
}

/// Write one byte to every page of `[addr, addr+len)`.
fn touch(addr: *mut u8, len: usize) {
    let mut off = 0;
    while off < len {
        // SAFETY: the caller passes a range it mapped read-write.
        unsafe { ptr::write_volatile(addr.add(off), 1) };
        off += PAGE_SIZE;
    }
}

/// Count VMAs in /proc/self/maps that overlap `[start, start+len)`.
pub fn vmas_overlapping(start: usize, len: usize) -> anyhow::Result<u64> {
    Ok(super::procfs::vmas_overlapping(start, len, false)?.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_is_aligned_and_its_own_vma() {
        let mut r = Region::map(400 << 10, FolioSpec::Mthp(64 << 10), false).unwrap();
        assert_eq!(r.addr() as usize % PMD_SIZE as usize, 0);
        r.populate().unwrap();
        // Its own VMA. (Whether the gaps stay empty cannot be asserted here:
        // other test threads map memory concurrently.)
        assert_eq!(r.vma_count().unwrap(), 1);
    }

    #[test]
    fn neighbor_merges_into_one_vma() {
        let mut r = Region::map(40 << 10, FolioSpec::Base, true).unwrap();
        r.populate().unwrap();
        let start = r.addr() as usize - NEIGHBOR_PAGES * PAGE_SIZE;
        // One VMA spans the neighbour and the region.
        assert_eq!(
            vmas_overlapping(start, r.len() + NEIGHBOR_PAGES * PAGE_SIZE).unwrap(),
            1
        );
        // mprotect of the region alone splits it off.
        r.protect(libc::PROT_NONE).unwrap();
        assert_eq!(
            vmas_overlapping(start, r.len() + NEIGHBOR_PAGES * PAGE_SIZE).unwrap(),
            2
        );
    }

    #[test]
    fn order0_regions_start_on_a_pmd_boundary_too() {
        for size in [4 << 10, 40 << 10, 400 << 10] {
            let r = Region::map(size, FolioSpec::Base, false).unwrap();
            assert_eq!(r.addr() as usize % PMD_SIZE as usize, 0, "{size}");
        }
    }

    /// khugepaged collapsing a split PMD back, at the worst moment
    /// (MADV_COLLAPSE is its synchronous form): the region stays PTE-mapped.
    #[test]
    fn a_collapse_after_the_split_leaves_2m_pte_pte_mapped() {
        if !crate::procfs::is_root() {
            return eprintln!("skipping: THP knobs need root");
        }
        let Ok(mut knobs) = crate::thp::KnobGuard::acquire(&mut |_| {}) else {
            return eprintln!("skipping: no THP knobs");
        };
        if let Err(e) = knobs.configure_for(FolioSpec::PmdPte) {
            return eprintln!("skipping: {e:#}");
        }
        let len: usize = 4 << 20;
        let mut r = Region::map(len as u64, FolioSpec::PmdPte, false).unwrap();
        madvise(r.addr, len, libc::MADV_HUGEPAGE, "MADV_HUGEPAGE").unwrap();
        touch(r.addr, len);
        let pmd_mapped = |r: &Region| {
            crate::layout::observe(r.addr(), len, FolioSpec::PmdPte).map(|l| l.pmd_mapped_bytes)
        };
        match pmd_mapped(&r) {
            Ok(b) if b == len as u64 => {}
            other => return eprintln!("skipping: no PMD THPs here ({other:?})"),
        }
        let mut collapsed = 0;
        r.pte_map_thps_then(|p| {
            // SAFETY: advice on a PMD-sized range of the region.
            let rc = unsafe { libc::madvise(p.cast(), PMD_SIZE as usize, libc::MADV_COLLAPSE) };
            collapsed += (rc == 0) as u32;
        })
        .unwrap();
        assert_eq!(collapsed, 0, "MADV_COLLAPSE succeeded on a split PMD");
        assert_eq!(pmd_mapped(&r).unwrap(), 0);
        assert_eq!(r.vma_count().unwrap(), 1);
    }

    #[test]
    fn unmaps_on_drop() {
        let r = Region::map(64 << 10, FolioSpec::Base, false).unwrap();
        let (a, l) = (r.addr() as usize, r.len());
        drop(r);
        assert_eq!(vmas_overlapping(a, l).unwrap(), 0);
    }
}
