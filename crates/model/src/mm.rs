//! The address space: VMAs and PTE tables.
//!
//! Kernel counterpart: `struct mm_struct`, `struct vm_area_struct`
//! (include/linux/mm_types.h), `vma_wants_writenotify()` and
//! `vma_set_page_prot()` (mm/mmap.c, mm/vma.c), `pmd_addr_end()`
//! (include/linux/pgtable.h). The page tables are modelled at the PTE level
//! only: one flat array of entries over a window of the address space,
//! aligned to PMD boundaries so `pmd_addr_end()` splits walks into
//! `PTRS_PER_PTE`-entry tables as the kernel does. PMD-mapped THPs are not
//! modelled. VMA split and merge follow `mprotect_fixup()`'s effect (a range
//! gets its own VMA; equal neighbours merge back).

use crate::arch::{Arch, PteValue};
use crate::folio::Memmap;
use crate::types::{Pgprot, VmFlags};

/// A flat PTE array over `[base, base + len)` (virtual page numbers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageTable<P> {
    base: u64,
    ptes: Vec<P>,
}

impl<P: PteValue> PageTable<P> {
    /// Empty (all `pte_none`) tables covering `[base, base + len)`.
    pub fn new(base: u64, len: u64) -> Self {
        PageTable {
            base,
            ptes: vec![P::default(); len as usize],
        }
    }

    /// First page covered.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Pages covered.
    pub fn len(&self) -> u64 {
        self.ptes.len() as u64
    }

    /// True when no page is covered.
    pub fn is_empty(&self) -> bool {
        self.ptes.is_empty()
    }

    /// The entry at `addr`.
    ///
    /// # Panics
    /// When `addr` is outside the window (a model bug, not a user error).
    #[inline]
    pub fn get(&self, addr: u64) -> P {
        self.ptes[(addr - self.base) as usize]
    }

    /// Overwrite the entry at `addr`.
    #[inline]
    pub fn set(&mut self, addr: u64, pte: P) {
        self.ptes[(addr - self.base) as usize] = pte;
    }

    /// The entries of `[start, end)`.
    pub fn slice(&self, start: u64, end: u64) -> &[P] {
        &self.ptes[(start - self.base) as usize..(end - self.base) as usize]
    }
}

/// A VMA (`struct vm_area_struct`), in pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vma {
    /// `vm_start >> PAGE_SHIFT`.
    pub start: u64,
    /// `vm_end >> PAGE_SHIFT`.
    pub end: u64,
    /// `vm_flags`.
    pub flags: VmFlags,
    /// `vm_page_prot`.
    pub page_prot: Pgprot,
    /// `vm_ops->page_mkwrite` is set: a file mapping on a file system that
    /// wants to know when a clean page is first written (ext4, xfs, ...;
    /// `vm_ops_needs_writenotify()`). False for anonymous memory and shmem.
    /// Kept by VMA splits; a VMA re-created by mremap starts without it (file
    /// mappings are not moved by the modelled workloads).
    pub page_mkwrite: bool,
}

impl Vma {
    /// `VM_SHARED`.
    pub fn is_shared(&self) -> bool {
        self.flags.contains(VmFlags::SHARED)
    }

    /// `vma_soft_dirty_enabled()`: soft-dirty tracking wants write faults.
    pub fn soft_dirty_enabled<A: Arch>(&self, arch: &A) -> bool {
        arch.has_soft_dirty() && !self.flags.contains(VmFlags::SOFTDIRTY)
    }

    /// `userfaultfd_wp()`.
    pub fn uffd_wp(&self) -> bool {
        self.flags.contains(VmFlags::UFFD_WP)
    }

    /// `vma_wants_writenotify()` (mm/vma.c): a writable shared VMA wants it
    /// when its backer has `page_mkwrite` (a file system with dirty
    /// tracking), else only for soft-dirty or uffd-wp tracking (anonymous
    /// shared memory: no `page_mkwrite`, no writeback accounting). The
    /// `vma_fs_can_writeback()` case (a file system with writeback but no
    /// `page_mkwrite`) is not modelled.
    pub fn wants_writenotify<A: Arch>(&self, arch: &A) -> bool {
        if !self.flags.contains(VmFlags::WRITE | VmFlags::SHARED) {
            return false;
        }
        self.page_mkwrite || self.soft_dirty_enabled(arch) || self.uffd_wp()
    }

    /// `vma_wants_manual_pte_write_upgrade()`: mprotect sets
    /// `MM_CP_TRY_CHANGE_WRITABLE`.
    pub fn wants_manual_pte_write_upgrade<A: Arch>(&self, arch: &A) -> bool {
        if self.is_shared() {
            self.wants_writenotify(arch)
        } else {
            self.flags.contains(VmFlags::WRITE)
        }
    }

    /// `vma_set_page_prot()`: `vm_get_page_prot()`, write-protected (as a
    /// private mapping) when write notification is wanted.
    pub fn set_page_prot<A: Arch>(&mut self, arch: &A) {
        let mut flags = self.flags;
        if self.wants_writenotify(arch) {
            flags.remove(VmFlags::SHARED);
        }
        self.page_prot = arch.vm_get_page_prot(flags);
    }
}

/// The address space of one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mm<P> {
    /// PTE tables.
    pub pt: PageTable<P>,
    /// VMAs, sorted and non-overlapping.
    pub vmas: Vec<Vma>,
    /// `struct page` array.
    pub memmap: Memmap,
}

impl<P: PteValue> Mm<P> {
    /// An empty mm whose tables cover `[base, base + len)`.
    pub fn new(base: u64, len: u64) -> Self {
        Mm {
            pt: PageTable::new(base, len),
            vmas: Vec::new(),
            memmap: Memmap::default(),
        }
    }

    /// Add a VMA (`mmap()`) of anonymous memory; its `vm_page_prot` is
    /// derived from `flags`.
    pub fn add_vma<A: Arch>(&mut self, arch: &A, start: u64, end: u64, flags: VmFlags) {
        self.add_vma_backed(arch, start, end, flags, false);
    }

    /// Add a VMA whose backer has `page_mkwrite` or not (`mmap()` of a file
    /// on ext4 with `page_mkwrite`).
    pub fn add_vma_backed<A: Arch>(
        &mut self,
        arch: &A,
        start: u64,
        end: u64,
        flags: VmFlags,
        page_mkwrite: bool,
    ) {
        let mut vma = Vma {
            start,
            end,
            flags,
            page_prot: Pgprot(0),
            page_mkwrite,
        };
        vma.set_page_prot(arch);
        self.vmas.push(vma);
        self.vmas.sort_by_key(|v| v.start);
    }

    /// The VMA containing `addr`.
    pub fn find_vma(&self, addr: u64) -> Option<&Vma> {
        self.vmas.iter().find(|v| v.start <= addr && addr < v.end)
    }

    /// Split VMAs so that `addr` is a VMA boundary (`split_vma()`).
    pub fn split_at(&mut self, addr: u64) {
        if let Some(i) = self
            .vmas
            .iter()
            .position(|v| v.start < addr && addr < v.end)
        {
            let mut tail = self.vmas[i];
            self.vmas[i].end = addr;
            tail.start = addr;
            self.vmas.insert(i + 1, tail);
        }
    }

    /// Merge adjacent VMAs with identical flags (`vma_merge`).
    pub fn merge_vmas(&mut self) {
        let mut out: Vec<Vma> = Vec::with_capacity(self.vmas.len());
        for v in self.vmas.drain(..) {
            match out.last_mut() {
                Some(prev)
                    if prev.end == v.start
                        && prev.flags == v.flags
                        && prev.page_prot == v.page_prot
                        && prev.page_mkwrite == v.page_mkwrite =>
                {
                    prev.end = v.end;
                }
                _ => out.push(v),
            }
        }
        self.vmas = out;
    }
}

/// `pmd_addr_end(addr, end)`: the end of the PTE table containing `addr`,
/// clamped to `end`.
pub fn pmd_addr_end(addr: u64, end: u64, ptrs_per_pte: u64) -> u64 {
    let boundary = (addr + ptrs_per_pte) & !(ptrs_per_pte - 1);
    boundary.min(end)
}
