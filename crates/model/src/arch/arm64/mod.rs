//! arm64: the public page-table API tier and the bit-level operations.
//!
//! Kernel counterpart: arch/arm64/include/asm/pgtable.h (the
//! `CONFIG_ARM64_CONTPTE` public API block and its `#else` branch),
//! arch/arm64/mm/mmu.c (`modify_prot_start_ptes`/`modify_prot_commit_ptes`,
//! 7efa1cd5f89b, v6.17), the young-bit helpers (`ptep_test_and_clear_young`,
//! `ptep_clear_flush_young`, the 2026 `test_and_clear_young_ptes` and
//! `clear_flush_young_ptes` overrides), arch/arm64/include/asm/tlbflush.h
//! (`__flush_tlb_range`, `pte_needs_flush` of c320dbb7c80d, v6.19).
//! Three tiers as in the kernel: [`raw`] (one hardware entry), [`contpte`]
//! (slow paths) and this module (public dispatch with the `nr == 1` /
//! `!pte_valid_cont` fast path first). With `contpte: false` the public tier
//! forwards to [`raw`], as the kernel's `#else` branch does.
//! Not modelled: erratum 2645198, LPA2, KPTI (TLBIs would double), MTE.

pub mod contpte;
pub mod hwdef;
pub mod raw;

use super::{young_ptes_series, Arch, FlushCost, PteValue};
use crate::cx::Cx;
use crate::mm::Vma;
use crate::strategy::{BuildArch, KFn, Kernel};
use crate::types::{Granule, Pfn, Pgprot, VmFlags};

use hwdef::{
    PteBits, PTE_ADDR_TOP, PTE_ATTRINDX_MASK, PTE_PO_IDX_MASK, PTE_PRESENT_INVALID, PTE_WRITE,
};

/// An arm64 PTE (`pte_t`).
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Arm64Pte(pub u64);

impl core::fmt::Debug for Arm64Pte {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let addr = self.0 & ((1u64 << PTE_ADDR_TOP) - 1) & !0xfff;
        let bits = PteBits::from_bits_truncate(self.0 & !addr);
        write!(f, "Arm64Pte({:#x}: pa={:#x} {:?})", self.0, addr, bits)
    }
}

impl PteValue for Arm64Pte {
    fn val(self) -> u64 {
        self.0
    }
    fn from_val(v: u64) -> Self {
        Arm64Pte(v)
    }
}

impl Arm64Pte {
    fn has(self, b: PteBits) -> bool {
        self.0 & b.bits() != 0
    }
    fn set(self, b: PteBits) -> Self {
        Arm64Pte(self.0 | b.bits())
    }
    fn clear(self, b: PteBits) -> Self {
        Arm64Pte(self.0 & !b.bits())
    }
}

/// `MAX_TLBI_RANGE_PAGES` = `__TLBI_RANGE_PAGES(31, 3)`.
pub const MAX_TLBI_RANGE_PAGES: u64 = 32 << 16;

/// The arm64 architecture with its runtime configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arm64 {
    /// Base page size.
    pub granule: Granule,
    /// `CONFIG_ARM64_CONTPTE`.
    pub contpte: bool,
    /// `system_supports_bbml2_noabort()`.
    pub bbml2: bool,
    /// `system_supports_tlb_range()` (FEAT_TLBIRANGE, Armv8.4).
    pub tlbi_range: bool,
    /// `lpa2_is_enabled()`: 52-bit VA with 4K or 16K pages on a CPU with
    /// FEAT_LPA2 (Debian's arm64 builds under QEMU's `-cpu max`). Range
    /// TLBIs then address 64K units, so a flush issues single-page TLBIs
    /// until its start reaches a 64K boundary.
    pub lpa2: bool,
}

impl Arm64 {
    /// The common configuration: contpte on, FEAT_TLBIRANGE, no BBML2, no LPA2.
    pub fn new(granule: Granule) -> Self {
        Arm64 {
            granule,
            contpte: true,
            bbml2: false,
            tlbi_range: true,
            lpa2: false,
        }
    }

    /// `CONT_PTES` for the granule: 16 (4K), 128 (16K), 32 (64K).
    pub fn cont_geometry(&self) -> u64 {
        match self.granule {
            Granule::K4 => 16,
            Granule::K16 => 128,
            Granule::K64 => 32,
        }
    }

    fn addr_mask(&self) -> u64 {
        ((1u64 << PTE_ADDR_TOP) - 1) & !((1u64 << self.granule.page_shift()) - 1)
    }

    /// `pte_valid_cont()`.
    pub fn pte_valid_cont(&self, pte: Arm64Pte) -> bool {
        pte.has(PteBits::VALID) && pte.has(PteBits::CONT)
    }

    /// `pte_hw_dirty()`: writable and not read-only (DBM has set it dirty).
    pub fn pte_hw_dirty(&self, pte: Arm64Pte) -> bool {
        pte.has(PTE_WRITE) && !pte.has(PteBits::RDONLY)
    }

    /// `pte_cont(__ptep_get(ptep))`: one load (the 2026 young helpers rely on
    /// their callers for `pte_present`, so they test `pte_cont`, not
    /// `pte_valid_cont`).
    fn first_cont(cx: &mut Cx<Self>, addr: u64) -> bool {
        let pte = raw::ptep_get(cx, addr);
        cx.arch.pte_cont(pte)
    }

    /// `pte_mkcont()`.
    pub fn pte_mkcont(&self, pte: Arm64Pte) -> Arm64Pte {
        pte.set(PteBits::CONT)
    }

    /// `__flush_tlb_range_op()` instruction count for `pages` pages from
    /// page `start` (stride one page).
    fn range_ops(&self, mut start: u64, mut pages: u64) -> u64 {
        if !self.tlbi_range {
            return pages;
        }
        let unit = (64 << 10) >> self.granule.page_shift();
        let mut ops = 0;
        let mut scale: i32 = 3;
        while pages > 0 {
            if scale < 0 {
                ops += pages;
                break;
            }
            if pages == 1 || (self.lpa2 && !start.is_multiple_of(unit)) {
                ops += 1;
                pages -= 1;
                start += 1;
                continue;
            }
            let shift = 5 * scale as u32 + 1;
            let num = (pages.min(32 << shift) >> shift) as i64 - 1;
            if num >= 0 {
                let done = ((num + 1) as u64) << shift;
                ops += 1;
                pages -= done;
                start += done;
            }
            scale -= 1;
        }
        ops
    }
}

impl Arch for Arm64 {
    type Pte = Arm64Pte;

    fn name(&self) -> &'static str {
        "arm64"
    }
    fn build_arch(&self) -> BuildArch {
        BuildArch::Arm64
    }
    fn page_shift(&self) -> u32 {
        self.granule.page_shift()
    }
    fn cont_ptes(&self) -> u64 {
        if self.contpte {
            self.cont_geometry()
        } else {
            1
        }
    }

    fn pte_present(&self, pte: Arm64Pte) -> bool {
        pte.has(PteBits::VALID)
            || (pte.0 & (PteBits::VALID | PTE_PRESENT_INVALID).bits()) == PTE_PRESENT_INVALID.bits()
    }
    fn pte_hw_valid(&self, pte: Arm64Pte) -> bool {
        pte.has(PteBits::VALID)
    }
    fn pte_protnone(&self, pte: Arm64Pte) -> bool {
        let present_invalid = !pte.has(PteBits::VALID) && pte.has(PTE_PRESENT_INVALID);
        present_invalid && !pte.has(PteBits::USER) && pte.has(PteBits::UXN)
    }
    fn pte_write(&self, pte: Arm64Pte) -> bool {
        pte.has(PTE_WRITE)
    }
    fn pte_dirty(&self, pte: Arm64Pte) -> bool {
        pte.has(PteBits::DIRTY) || self.pte_hw_dirty(pte)
    }
    fn pte_young(&self, pte: Arm64Pte) -> bool {
        pte.has(PteBits::AF)
    }
    fn pte_special(&self, pte: Arm64Pte) -> bool {
        pte.has(PteBits::SPECIAL)
    }
    fn pte_soft_dirty(&self, _pte: Arm64Pte) -> bool {
        false
    }
    fn pte_uffd_wp(&self, pte: Arm64Pte) -> bool {
        pte.has(PteBits::UFFD_WP)
    }
    fn pte_cont(&self, pte: Arm64Pte) -> bool {
        pte.has(PteBits::CONT)
    }
    fn pte_pfn(&self, pte: Arm64Pte) -> Pfn {
        Pfn((pte.0 & self.addr_mask()) >> self.granule.page_shift())
    }
    fn pfn_pte(&self, pfn: Pfn, prot: Pgprot) -> Arm64Pte {
        Arm64Pte((pfn.0 << self.granule.page_shift()) | prot.0)
    }
    fn pte_pgprot(&self, pte: Arm64Pte) -> Pgprot {
        Pgprot(pte.0 & !self.addr_mask())
    }
    fn pte_modify(&self, pte: Arm64Pte, prot: Pgprot) -> Arm64Pte {
        let mask = (PteBits::USER
            | PteBits::PXN
            | PteBits::UXN
            | PteBits::RDONLY
            | PTE_PRESENT_INVALID
            | PteBits::VALID
            | PTE_WRITE
            | PteBits::GP
            | PTE_ATTRINDX_MASK
            | PTE_PO_IDX_MASK)
            .bits();
        let mut pte = pte;
        if self.pte_hw_dirty(pte) {
            pte = pte.set(PteBits::DIRTY);
        }
        pte = Arm64Pte((pte.0 & !mask) | (prot.0 & mask));
        if pte.has(PteBits::DIRTY) {
            pte = self.pte_mkdirty(pte);
        }
        pte
    }
    fn pte_mkwrite(&self, pte: Arm64Pte) -> Arm64Pte {
        let pte = pte.set(PTE_WRITE);
        if pte.has(PteBits::DIRTY) {
            pte.clear(PteBits::RDONLY)
        } else {
            pte
        }
    }
    fn pte_wrprotect(&self, pte: Arm64Pte) -> Arm64Pte {
        let mut pte = pte;
        if self.pte_hw_dirty(pte) {
            pte = pte.set(PteBits::DIRTY);
        }
        pte.clear(PTE_WRITE).set(PteBits::RDONLY)
    }
    fn pte_mkclean(&self, pte: Arm64Pte) -> Arm64Pte {
        pte.clear(PteBits::DIRTY).set(PteBits::RDONLY)
    }
    fn pte_mkdirty(&self, pte: Arm64Pte) -> Arm64Pte {
        let pte = pte.set(PteBits::DIRTY);
        if pte.has(PTE_WRITE) {
            pte.clear(PteBits::RDONLY)
        } else {
            pte
        }
    }
    fn pte_mkold(&self, pte: Arm64Pte) -> Arm64Pte {
        pte.clear(PteBits::AF)
    }
    fn pte_mkyoung(&self, pte: Arm64Pte) -> Arm64Pte {
        pte.set(PteBits::AF)
    }
    fn pte_mkuffd_wp(&self, pte: Arm64Pte) -> Arm64Pte {
        self.pte_wrprotect(pte.set(PteBits::UFFD_WP))
    }
    fn pte_clear_uffd_wp(&self, pte: Arm64Pte) -> Arm64Pte {
        pte.clear(PteBits::UFFD_WP)
    }
    fn pte_mksoft_dirty(&self, pte: Arm64Pte) -> Arm64Pte {
        pte
    }
    fn pte_clear_soft_dirty(&self, pte: Arm64Pte) -> Arm64Pte {
        pte
    }
    fn pte_mknoncont(&self, pte: Arm64Pte) -> Arm64Pte {
        pte.clear(PteBits::CONT)
    }
    fn has_soft_dirty(&self) -> bool {
        false
    }

    /// `protection_map[]` (arch/arm64/mm/mmap.c): private writable mappings
    /// get `PAGE_READONLY`; shared writable `PAGE_SHARED`.
    fn vm_get_page_prot(&self, flags: VmFlags) -> Pgprot {
        let p = if !flags.intersects(VmFlags::READ | VmFlags::WRITE | VmFlags::EXEC) {
            hwdef::PAGE_NONE
        } else if flags.contains(VmFlags::WRITE | VmFlags::SHARED) {
            hwdef::PAGE_SHARED
        } else {
            hwdef::PAGE_READONLY
        };
        let p = if flags.contains(VmFlags::EXEC) {
            p.difference(PteBits::UXN)
        } else {
            p
        };
        Pgprot(p.bits())
    }

    /// v6.19 (c320dbb7c80d) `__pte_flags_need_flush()`; before: generic true.
    fn pte_needs_flush(&self, kernel: &Kernel, old: Arm64Pte, new: Arm64Pte) -> bool {
        if !kernel.arm64_pte_needs_flush {
            return true;
        }
        if !old.has(PteBits::VALID) {
            return false;
        }
        (old.0 ^ new.0) & !hwdef::PTE_SWBITS_MASK != 0
    }

    fn tlb_entry_grants_more(&self, cached: Arm64Pte, cur: Arm64Pte) -> bool {
        if !cached.has(PteBits::VALID) {
            return false;
        }
        if !cur.has(PteBits::VALID) || self.pte_pfn(cached) != self.pte_pfn(cur) {
            return true;
        }
        // With hardware DBM a DBM=1 entry is writable even while RDONLY is set.
        let writable = |p: Arm64Pte| !p.has(PteBits::RDONLY) || p.has(PTE_WRITE);
        (writable(cached) && !writable(cur))
            || (cached.has(PteBits::USER) && !cur.has(PteBits::USER))
            || (!cached.has(PteBits::UXN) && cur.has(PteBits::UXN))
            || (cached.has(PteBits::AF) && !cur.has(PteBits::AF))
            || (self.pte_hw_dirty(cached) && !self.pte_dirty(cur))
            || ((cached.0 ^ cur.0) & (PTE_ATTRINDX_MASK | PTE_PO_IDX_MASK).bits()) != 0
    }

    fn tlb_entry_span(&self, pte: Arm64Pte) -> u64 {
        if pte.has(PteBits::CONT) {
            self.cont_geometry()
        } else {
            1
        }
    }

    fn max_tlb_span(&self) -> u64 {
        self.cont_geometry()
    }

    /// `__flush_tlb_range()`: ASID-wide above the limit, else range/single TLBIs.
    fn flush_cost(&self, start: u64, pages: u64) -> FlushCost {
        let over =
            (!self.tlbi_range && pages >= self.ptrs_per_pte()) || pages > MAX_TLBI_RANGE_PAGES;
        if over {
            FlushCost { full: true, ops: 1 }
        } else {
            FlushCost {
                full: false,
                ops: self.range_ops(start, pages),
            }
        }
    }

    /// `flush_tlb_range()` → `__flush_tlb_range()`, whose
    /// `__flush_tlb_range_nosync()` the builds up to v7.0 call out of line.
    fn flush_tlb_range(cx: &mut Cx<Self>, start: u64, end: u64) {
        cx.call(KFn::FlushTlbRangeNosync);
        cx.arch_flush(start, end, crate::tlb::FlushSource::FlushTlbRange);
    }

    fn ptep_get(cx: &mut Cx<Self>, addr: u64) -> Arm64Pte {
        let pte = raw::ptep_get(cx, addr);
        if !cx.arch.contpte || !cx.arch.pte_valid_cont(pte) {
            return pte;
        }
        contpte::contpte_ptep_get(cx, addr, pte)
    }

    fn pte_batch_hint(cx: &Cx<Self>, addr: u64, pte: Arm64Pte) -> u64 {
        if !cx.arch.contpte || !cx.arch.pte_valid_cont(pte) {
            return 1;
        }
        let c = cx.arch.cont_geometry();
        c - (addr & (c - 1))
    }

    fn set_ptes(cx: &mut Cx<Self>, addr: u64, pte: Arm64Pte, nr: u64) {
        if !cx.arch.contpte {
            return raw::set_ptes(cx, addr, pte, nr);
        }
        let pte = cx.arch.pte_mknoncont(pte);
        if nr == 1 {
            let cur = raw::ptep_get(cx, addr);
            contpte::contpte_try_unfold(cx, addr, cur);
            raw::set_ptes(cx, addr, pte, 1);
            contpte::contpte_try_fold(cx, addr, pte);
        } else {
            contpte::contpte_set_ptes(cx, addr, pte, nr);
        }
    }

    fn ptep_get_and_clear(cx: &mut Cx<Self>, addr: u64) -> Arm64Pte {
        if cx.arch.contpte {
            let cur = raw::ptep_get(cx, addr);
            contpte::contpte_try_unfold(cx, addr, cur);
        }
        raw::ptep_get_and_clear(cx, addr)
    }

    fn get_and_clear_full_ptes(cx: &mut Cx<Self>, addr: u64, nr: u64, _full: bool) -> Arm64Pte {
        if !cx.arch.contpte {
            return raw::get_and_clear_full_ptes(cx, addr, nr);
        }
        if nr == 1 {
            let cur = raw::ptep_get(cx, addr);
            contpte::contpte_try_unfold(cx, addr, cur);
            raw::ptep_get_and_clear(cx, addr)
        } else {
            contpte::contpte_get_and_clear_full_ptes(cx, addr, nr)
        }
    }

    /// arch/arm64/mm/mmu.c: v6.17+ `modify_prot_start_ptes(…, 1)`; v6.16
    /// `ptep_get_and_clear()` itself (same primitives; the inner
    /// `modify_prot_start_ptes` entry counts from v6.17 only).
    fn ptep_modify_prot_start(cx: &mut Cx<Self>, vma: &Vma, addr: u64) -> Arm64Pte {
        cx.call(KFn::PtepModifyProtStart);
        Self::modify_prot_start_ptes(cx, vma, addr, 1)
    }

    /// arch/arm64/mm/mmu.c: `modify_prot_commit_ptes(…, 1)` = `set_pte_at()`
    /// (v6.16: `set_pte_at()` itself).
    fn ptep_modify_prot_commit(
        cx: &mut Cx<Self>,
        vma: &Vma,
        addr: u64,
        old: Arm64Pte,
        pte: Arm64Pte,
    ) {
        cx.call(KFn::PtepModifyProtCommit);
        Self::modify_prot_commit_ptes(cx, vma, addr, old, pte, 1)
    }

    /// arch/arm64/mm/mmu.c (7efa1cd5f89b): `get_and_clear_ptes()`, so only
    /// partially covered contpte blocks are unfolded.
    fn modify_prot_start_ptes(cx: &mut Cx<Self>, _vma: &Vma, addr: u64, nr: u64) -> Arm64Pte {
        cx.call(KFn::ModifyProtStartPtes);
        Self::get_and_clear_full_ptes(cx, addr, nr, false)
    }

    /// arch/arm64/mm/mmu.c: `set_ptes()` (repaints CONT on whole blocks).
    fn modify_prot_commit_ptes(
        cx: &mut Cx<Self>,
        _vma: &Vma,
        addr: u64,
        _old: Arm64Pte,
        pte: Arm64Pte,
        nr: u64,
    ) {
        cx.call(KFn::ModifyProtCommitPtes);
        Self::set_ptes(cx, addr, pte, nr)
    }

    /// `ptep_test_and_clear_young()`. 2026: `test_and_clear_young_ptes(…, 1)`
    /// (seed 004). v6.16 … v6.19: `__ptep_get()`, then the single-entry
    /// helper or, on a valid contig entry, `contpte_ptep_test_and_clear_young()`.
    fn ptep_test_and_clear_young(cx: &mut Cx<Self>, addr: u64) -> bool {
        if !cx.arch.contpte {
            return raw::ptep_test_and_clear_young(cx, addr);
        }
        if young_ptes_series(&cx.kernel) {
            return Self::test_and_clear_young_ptes(cx, addr, 1);
        }
        let orig = raw::ptep_get(cx, addr);
        if !cx.arch.pte_valid_cont(orig) {
            return raw::ptep_test_and_clear_young(cx, addr);
        }
        contpte::contpte_ptep_test_and_clear_young(cx, addr)
    }

    /// `ptep_clear_flush_young()`: `__ptep_get()`, then the single-entry
    /// helper, or on a valid contig entry the block version: 2026
    /// `contpte_clear_flush_young_ptes(…, 1)`, before
    /// `contpte_ptep_clear_flush_young()`.
    fn ptep_clear_flush_young(cx: &mut Cx<Self>, addr: u64) -> bool {
        if !cx.arch.contpte {
            return raw::ptep_clear_flush_young(cx, addr);
        }
        let orig = raw::ptep_get(cx, addr);
        if !cx.arch.pte_valid_cont(orig) {
            return raw::ptep_clear_flush_young(cx, addr);
        }
        if young_ptes_series(&cx.kernel) {
            contpte::contpte_clear_flush_young_ptes(cx, addr, 1)
        } else {
            contpte::contpte_ptep_clear_flush_young(cx, addr)
        }
    }

    /// `test_and_clear_young_ptes()` (2026 override, seed 004): `nr == 1` and
    /// not contig → the single-entry helper; else
    /// `contpte_test_and_clear_young_ptes()`. Without the series (or without
    /// contpte) the generic loop.
    fn test_and_clear_young_ptes(cx: &mut Cx<Self>, addr: u64, nr: u64) -> bool {
        if !cx.arch.contpte || !young_ptes_series(&cx.kernel) {
            let mut young = false;
            for i in 0..nr {
                young |= Self::ptep_test_and_clear_young(cx, addr + i);
            }
            return young;
        }
        if nr == 1 && !Self::first_cont(cx, addr) {
            return raw::ptep_test_and_clear_young(cx, addr);
        }
        contpte::contpte_test_and_clear_young_ptes(cx, addr, nr)
    }

    /// `clear_flush_young_ptes()` (2026 override): `nr == 1` and not contig →
    /// `__ptep_clear_flush_young()`; else `contpte_clear_flush_young_ptes()`.
    /// Without the series (or without contpte) the generic loop.
    fn clear_flush_young_ptes(cx: &mut Cx<Self>, addr: u64, nr: u64) -> bool {
        if !cx.arch.contpte || !young_ptes_series(&cx.kernel) {
            let mut young = false;
            for i in 0..nr {
                young |= Self::ptep_clear_flush_young(cx, addr + i);
            }
            return young;
        }
        if nr == 1 && !Self::first_cont(cx, addr) {
            return raw::ptep_clear_flush_young(cx, addr);
        }
        contpte::contpte_clear_flush_young_ptes(cx, addr, nr)
    }

    fn check_contig(cx: &Cx<Self>, start: u64, end: u64) -> Result<(), String> {
        let arch = cx.arch;
        let c = arch.cont_geometry();
        let mut b = start & !(c - 1);
        while b < end {
            if b < cx.mm.pt.base() || b + c > cx.mm.pt.base() + cx.mm.pt.len() {
                b += c;
                continue;
            }
            let block = cx.mm.pt.slice(b, b + c);
            if block.iter().any(|p| arch.pte_valid_cont(*p)) {
                let first = block[0];
                if !arch.pte_valid_cont(first) {
                    return Err(format!(
                        "mixed contig block at page {b:#x}: first entry {first:?}"
                    ));
                }
                let pfn0 = arch.pte_pfn(first).0;
                if pfn0 & (c - 1) != 0 || b & (c - 1) != 0 {
                    return Err(format!("misaligned contig block at page {b:#x}"));
                }
                let prot = arch.pte_pgprot(arch.pte_mkold(arch.pte_mkclean(first)));
                let folio = cx.mm.memmap.folio_of(Pfn(pfn0));
                for (i, p) in block.iter().enumerate() {
                    let ok = arch.pte_valid_cont(*p)
                        && arch.pte_pfn(*p).0 == pfn0 + i as u64
                        && arch.pte_pgprot(arch.pte_mkold(arch.pte_mkclean(*p))) == prot
                        && cx.mm.memmap.folio_of(arch.pte_pfn(*p)) == folio;
                    if !ok {
                        return Err(format!("inconsistent contig block at page {b:#x}, entry {i}: {p:?} vs {first:?}"));
                    }
                }
            }
            b += c;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(lpa2: bool) -> Arm64 {
        Arm64 {
            granule: Granule::K4,
            contpte: true,
            bbml2: false,
            tlbi_range: true,
            lpa2,
        }
    }

    #[test]
    fn range_tlbis_decompose_by_scale() {
        let a = arm(false);
        for (pages, ops) in [(1, 1), (16, 1), (17, 2), (100, 2), (512, 1), (513, 2)] {
            assert_eq!(a.range_ops(0, pages), ops, "{pages} pages");
            // Without LPA2 the start does not matter.
            assert_eq!(a.range_ops(5, pages), ops, "{pages} pages from 5");
        }
        let no_range = Arm64 {
            tlbi_range: false,
            ..a
        };
        assert_eq!(no_range.range_ops(3, 100), 100);
    }

    /// Debian's arm64 6.16.12 guest (ptelab's QEMU plugin) issued 12
    /// single-page TLBIs and one range for mprotect of pages [4, 60), and 2
    /// and 2 for a 400K region at a random address (here taken to start 2
    /// pages before a 64K boundary).
    #[test]
    fn lpa2_flushes_single_pages_up_to_a_64k_boundary() {
        let a = arm(true);
        assert_eq!(a.range_ops(4, 56), 12 + 1);
        assert_eq!(a.range_ops(14, 100), 2 + 2);
        assert_eq!(a.range_ops(0, 100), 2);
        assert_eq!(a.range_ops(3, 10), 10);
        assert_eq!(a.flush_cost(16, 10).ops, 1);
    }
}
