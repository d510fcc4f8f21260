//! x86-64: PTE bit layout and the few hooks x86 overrides.
//!
//! Kernel counterpart: arch/x86/include/asm/pgtable_types.h (bits,
//! `_PAGE_CHG_MASK`, `PAGE_*` protections), arch/x86/include/asm/pgtable.h
//! (`pte_modify`, saved-dirty shifting for shadow stacks, `pte_advance_pfn`),
//! arch/x86/include/asm/pgtable-invert.h (L1TF PFN inversion of PROT_NONE
//! entries), arch/x86/include/asm/tlbflush.h (`pte_needs_flush`) and
//! arch/x86/mm/tlb.c (`flush_tlb_mm_range`, `tlb_single_page_flush_ceiling`
//! = 33), arch/x86/mm/pgtable.c (`ptep_test_and_clear_young`,
//! `ptep_clear_flush_young`: read, `lock btr` only when young, never a flush).
//! Valid for v6.16 … v7.3. The batching API (`ptep_get`, `set_ptes`,
//! `modify_prot_*_ptes`, `test_and_clear_young_ptes`,
//! `clear_flush_young_ptes`) is generic on x86; the paravirt operations of
//! `CONFIG_PARAVIRT_XXL` (Debian's build) under `set_ptes` and
//! `ptep_modify_prot_*` change no primitive and show only as counted
//! out-of-line calls (`native_set_pte`, `__ptep_modify_prot_start`,
//! `__ptep_modify_prot_commit`). Not modelled: Xen PV batching,
//! PCID/INVLPGB, protection keys other than 0, IPIs (single-threaded process).

use bitflags::bitflags;

use super::{atomic_write, Arch, FlushCost, PteValue};
use crate::cx::Cx;
use crate::mm::Vma;
use crate::pgtable;
use crate::strategy::{BuildArch, KFn, Kernel};
use crate::types::{Pfn, Pgprot, VmFlags};

bitflags! {
    /// Bits of an x86-64 4-level PTE (Intel SDM Vol. 3 Table 4-19).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct PteFlags: u64 {
        /// P: present (`_PAGE_BIT_PRESENT` 0).
        const PRESENT = 1 << 0;
        /// R/W: writable (`_PAGE_BIT_RW` 1).
        const RW = 1 << 1;
        /// U/S: user accessible (`_PAGE_BIT_USER` 2).
        const USER = 1 << 2;
        /// PWT: page write-through (`_PAGE_BIT_PWT` 3).
        const PWT = 1 << 3;
        /// PCD: page cache disable (`_PAGE_BIT_PCD` 4).
        const PCD = 1 << 4;
        /// A: accessed, set by hardware (`_PAGE_BIT_ACCESSED` 5).
        const ACCESSED = 1 << 5;
        /// D: dirty, set by hardware (`_PAGE_BIT_DIRTY` 6).
        const DIRTY = 1 << 6;
        /// PAT bit of a 4K PTE (`_PAGE_BIT_PAT` = `_PAGE_BIT_PSE` 7).
        const PAT = 1 << 7;
        /// G: global (`_PAGE_BIT_GLOBAL` 8); doubles as `_PAGE_PROTNONE`
        /// when P is clear.
        const GLOBAL = 1 << 8;
        /// Software bit 1: `_PAGE_SPECIAL` (9).
        const SPECIAL = 1 << 9;
        /// Software bit 2: `_PAGE_UFFD_WP` (10).
        const UFFD_WP = 1 << 10;
        /// Software bit 3: `_PAGE_SOFT_DIRTY` (11).
        const SOFT_DIRTY = 1 << 11;
        /// Software bit 4 (57): formerly `_PAGE_DEVMAP`.
        const SOFTW4 = 1 << 57;
        /// Software bit 5: `_PAGE_SAVED_DIRTY` (58): the dirty state of a
        /// write-protected PTE (Write=0,Dirty=1 would mean shadow stack).
        const SAVED_DIRTY = 1 << 58;
        /// Protection key bit 0 (`_PAGE_BIT_PKEY_BIT0` 59).
        const PKEY0 = 1 << 59;
        /// Protection key bit 1 (60).
        const PKEY1 = 1 << 60;
        /// Protection key bit 2 (61).
        const PKEY2 = 1 << 61;
        /// Protection key bit 3 (62).
        const PKEY3 = 1 << 62;
        /// XD: execute disable (`_PAGE_BIT_NX` 63).
        const NX = 1 << 63;
    }
}

/// `_PAGE_PROTNONE`: the GLOBAL bit, meaningful only when P is clear.
pub const PROTNONE: PteFlags = PteFlags::GLOBAL;
/// `PTE_PFN_MASK`: physical address bits 12..51.
pub const PTE_PFN_MASK: u64 = ((1u64 << 52) - 1) & !0xfff;
/// `_PAGE_DIRTY_BITS`: hardware dirty or saved dirty.
pub const PAGE_DIRTY_BITS: PteFlags = PteFlags::DIRTY.union(PteFlags::SAVED_DIRTY);
/// `_PAGE_CHG_MASK`: bits `pte_modify()` keeps from the old PTE (PFN, caching,
/// special, accessed, dirty bits, soft-dirty, uffd-wp, PAT).
pub const PAGE_CHG_MASK: u64 = PTE_PFN_MASK
    | PteFlags::PCD.bits()
    | PteFlags::PWT.bits()
    | PteFlags::SPECIAL.bits()
    | PteFlags::ACCESSED.bits()
    | PAGE_DIRTY_BITS.bits()
    | PteFlags::SOFT_DIRTY.bits()
    | PteFlags::SOFTW4.bits()
    | PteFlags::UFFD_WP.bits()
    | PteFlags::PAT.bits();
/// `tlb_single_page_flush_ceiling`: above this many pages a range flush
/// becomes a full flush.
pub const TLB_SINGLE_PAGE_FLUSH_CEILING: u64 = 33;

/// An x86-64 PTE (`pte_t`).
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct X86Pte(pub u64);

impl core::fmt::Debug for X86Pte {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let flags = PteFlags::from_bits_truncate(self.0 & !PTE_PFN_MASK);
        write!(
            f,
            "X86Pte({:#x}: pfn_bits={:#x} {:?})",
            self.0,
            (self.0 & PTE_PFN_MASK) >> 12,
            flags
        )
    }
}

impl PteValue for X86Pte {
    fn val(self) -> u64 {
        self.0
    }
    fn from_val(v: u64) -> Self {
        X86Pte(v)
    }
}

impl X86Pte {
    fn flags(self) -> PteFlags {
        PteFlags::from_bits_retain(self.0 & !PTE_PFN_MASK)
    }
    fn has(self, f: PteFlags) -> bool {
        self.0 & f.bits() != 0
    }
    fn set(self, f: PteFlags) -> Self {
        X86Pte(self.0 | f.bits())
    }
    fn clear(self, f: PteFlags) -> Self {
        X86Pte(self.0 & !f.bits())
    }
}

/// `__pte_needs_invert()`: non-zero and not present (L1TF mitigation).
fn pte_needs_invert(v: u64) -> bool {
    v != 0 && v & PteFlags::PRESENT.bits() == 0
}

/// `protnone_mask()`.
fn protnone_mask(v: u64) -> u64 {
    if pte_needs_invert(v) {
        !0
    } else {
        0
    }
}

/// `mksaveddirty_shift()`: Write=0 ⇒ move Dirty to SavedDirty.
fn mksaveddirty(p: X86Pte) -> X86Pte {
    if !p.has(PteFlags::RW) && p.has(PteFlags::DIRTY) {
        p.clear(PteFlags::DIRTY).set(PteFlags::SAVED_DIRTY)
    } else {
        p
    }
}

/// `clear_saveddirty_shift()`: Write=1 ⇒ move SavedDirty back to Dirty.
fn clear_saveddirty(p: X86Pte) -> X86Pte {
    if p.has(PteFlags::RW) && p.has(PteFlags::SAVED_DIRTY) {
        p.clear(PteFlags::SAVED_DIRTY).set(PteFlags::DIRTY)
    } else {
        p
    }
}

/// The x86-64 architecture (4K pages only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct X86;

impl Arch for X86 {
    type Pte = X86Pte;
    const RUN_REPLAY: bool = true;
    const PFN_FIELD: u64 = PTE_PFN_MASK;

    fn name(&self) -> &'static str {
        "x86_64"
    }
    fn build_arch(&self) -> BuildArch {
        BuildArch::X86_64
    }
    fn page_shift(&self) -> u32 {
        12
    }

    fn pte_present(&self, pte: X86Pte) -> bool {
        pte.has(PteFlags::PRESENT | PROTNONE)
    }
    fn pte_hw_valid(&self, pte: X86Pte) -> bool {
        pte.has(PteFlags::PRESENT)
    }
    fn pte_protnone(&self, pte: X86Pte) -> bool {
        pte.flags() & (PROTNONE | PteFlags::PRESENT) == PROTNONE
    }
    fn pte_write(&self, pte: X86Pte) -> bool {
        pte.has(PteFlags::RW)
    }
    fn pte_dirty(&self, pte: X86Pte) -> bool {
        pte.has(PAGE_DIRTY_BITS)
    }
    fn pte_young(&self, pte: X86Pte) -> bool {
        pte.has(PteFlags::ACCESSED)
    }
    fn pte_special(&self, pte: X86Pte) -> bool {
        pte.has(PteFlags::SPECIAL)
    }
    fn pte_soft_dirty(&self, pte: X86Pte) -> bool {
        pte.has(PteFlags::SOFT_DIRTY)
    }
    fn pte_uffd_wp(&self, pte: X86Pte) -> bool {
        pte.has(PteFlags::UFFD_WP)
    }
    fn pte_pfn(&self, pte: X86Pte) -> Pfn {
        let v = pte.0 ^ protnone_mask(pte.0);
        Pfn((v & PTE_PFN_MASK) >> 12)
    }
    fn pfn_pte(&self, pfn: Pfn, prot: Pgprot) -> X86Pte {
        let mut p = pfn.0 << 12;
        p ^= protnone_mask(prot.0);
        p &= PTE_PFN_MASK;
        X86Pte(p | prot.0)
    }
    fn pte_pgprot(&self, pte: X86Pte) -> Pgprot {
        Pgprot(pte.0 & !PTE_PFN_MASK)
    }
    /// x86 overrides it to step the PFN backwards in an inverted entry.
    fn pte_advance_pfn(&self, pte: X86Pte, nr: u64) -> X86Pte {
        if pte_needs_invert(pte.0) {
            X86Pte(pte.0.wrapping_sub(nr << 12))
        } else {
            X86Pte(pte.0.wrapping_add(nr << 12))
        }
    }
    fn pte_modify(&self, pte: X86Pte, prot: Pgprot) -> X86Pte {
        let oldval = pte.0;
        let mut val = oldval & PAGE_CHG_MASK;
        val |= prot.0 & !PAGE_CHG_MASK;
        // flip_protnone_guard()
        if pte_needs_invert(oldval) != pte_needs_invert(val) {
            val = (val & !PTE_PFN_MASK) | (!val & PTE_PFN_MASK);
        }
        let r = X86Pte(val);
        if oldval & PteFlags::RW.bits() != 0 {
            mksaveddirty(r)
        } else {
            // pte_clear_saveddirty(): only shifts when the result is writable.
            clear_saveddirty(r)
        }
    }
    fn pte_mkwrite(&self, pte: X86Pte) -> X86Pte {
        clear_saveddirty(pte.set(PteFlags::RW))
    }
    fn pte_wrprotect(&self, pte: X86Pte) -> X86Pte {
        mksaveddirty(pte.clear(PteFlags::RW))
    }
    fn pte_mkclean(&self, pte: X86Pte) -> X86Pte {
        pte.clear(PAGE_DIRTY_BITS)
    }
    fn pte_mkdirty(&self, pte: X86Pte) -> X86Pte {
        mksaveddirty(pte.set(PteFlags::DIRTY | PteFlags::SOFT_DIRTY))
    }
    fn pte_mkold(&self, pte: X86Pte) -> X86Pte {
        pte.clear(PteFlags::ACCESSED)
    }
    fn pte_mkyoung(&self, pte: X86Pte) -> X86Pte {
        pte.set(PteFlags::ACCESSED)
    }
    fn pte_mkuffd_wp(&self, pte: X86Pte) -> X86Pte {
        self.pte_wrprotect(pte.set(PteFlags::UFFD_WP))
    }
    fn pte_clear_uffd_wp(&self, pte: X86Pte) -> X86Pte {
        pte.clear(PteFlags::UFFD_WP)
    }
    fn pte_mksoft_dirty(&self, pte: X86Pte) -> X86Pte {
        pte.set(PteFlags::SOFT_DIRTY)
    }
    fn pte_clear_soft_dirty(&self, pte: X86Pte) -> X86Pte {
        pte.clear(PteFlags::SOFT_DIRTY)
    }
    fn has_soft_dirty(&self) -> bool {
        true
    }

    /// `protection_map[]` with NX support (arch/x86/mm/pgprot.c).
    fn vm_get_page_prot(&self, flags: VmFlags) -> Pgprot {
        use PteFlags as F;
        let base = F::PRESENT | F::USER | F::ACCESSED;
        let nx = if flags.contains(VmFlags::EXEC) {
            F::empty()
        } else {
            F::NX
        };
        let p = if !flags.intersects(VmFlags::READ | VmFlags::WRITE | VmFlags::EXEC) {
            F::ACCESSED | PROTNONE // PAGE_NONE
        } else if flags.contains(VmFlags::WRITE) && flags.contains(VmFlags::SHARED) {
            base | F::RW | nx // PAGE_SHARED
        } else {
            base | nx // PAGE_COPY / PAGE_READONLY
        };
        Pgprot(p.bits())
    }

    /// arch/x86/include/asm/tlbflush.h `pte_needs_flush()` +
    /// `pte_flags_need_flush(…, ignore_access = true)`.
    fn pte_needs_flush(&self, _kernel: &Kernel, old: X86Pte, new: X86Pte) -> bool {
        use PteFlags as F;
        if !old.has(F::PRESENT) {
            return false;
        }
        if self.pte_pfn(old) != self.pte_pfn(new) {
            return true;
        }
        let flush_on_clear = F::DIRTY | F::PRESENT | F::ACCESSED;
        let software = F::SPECIAL | F::UFFD_WP | F::SOFT_DIRTY | F::SOFTW4 | F::SAVED_DIRTY;
        let flush_on_change = F::RW
            | F::USER
            | F::PWT
            | F::PCD
            | F::PAT
            | F::GLOBAL
            | F::PKEY0
            | F::PKEY1
            | F::PKEY2
            | F::PKEY3
            | F::NX;
        let mut diff = old.flags() ^ new.flags();
        diff &= !software;
        diff &= !F::ACCESSED;
        (diff & old.flags() & flush_on_clear) != F::empty() || diff.intersects(flush_on_change)
    }

    fn tlb_entry_grants_more(&self, cached: X86Pte, cur: X86Pte) -> bool {
        use PteFlags as F;
        if !cached.has(F::PRESENT) {
            return false;
        }
        if !cur.has(F::PRESENT) || self.pte_pfn(cached) != self.pte_pfn(cur) {
            return true;
        }
        let lost = |f: F| cached.has(f) && !cur.has(f);
        let perm = F::PWT | F::PCD | F::PAT | F::PKEY0 | F::PKEY1 | F::PKEY2 | F::PKEY3;
        lost(F::RW)
            || lost(F::USER)
            || (!cached.has(F::NX) && cur.has(F::NX))
            // A stale D=1 entry lets writes skip setting D in the PTE.
            || lost(F::DIRTY)
            || (cached.flags() ^ cur.flags()).intersects(perm)
    }

    /// `flush_tlb_mm_range()`: INVLPG per page up to the ceiling, else a full flush.
    fn flush_cost(&self, _start: u64, pages: u64) -> FlushCost {
        if pages > TLB_SINGLE_PAGE_FLUSH_CEILING {
            FlushCost { full: true, ops: 1 }
        } else {
            FlushCost {
                full: false,
                ops: pages,
            }
        }
    }

    /// Paravirt (`CONFIG_PARAVIRT_XXL`, as Debian builds it): `set_pte()` is
    /// the `mmu.set_pte` op, `native_set_pte()`, out of line; the generic
    /// `set_ptes()` calls it per entry.
    #[inline]
    fn set_ptes(cx: &mut Cx<Self>, addr: u64, pte: X86Pte, nr: u64) {
        cx.calls(KFn::NativeSetPte, nr);
        pgtable::set_ptes(cx, addr, pte, nr)
    }

    /// Paravirt `ptep_modify_prot_start()`: the `mmu.ptep_modify_prot_start`
    /// op, `__ptep_modify_prot_start()` (out of line) = `ptep_get_and_clear()`.
    #[inline]
    fn ptep_modify_prot_start(cx: &mut Cx<Self>, _vma: &Vma, addr: u64) -> X86Pte {
        cx.call(KFn::PvPtepModifyProtStart);
        Self::ptep_get_and_clear(cx, addr)
    }

    /// Paravirt `ptep_modify_prot_commit()`: `__ptep_modify_prot_commit()`
    /// (out of line) = `set_pte_at()`, itself the `native_set_pte()` op.
    #[inline]
    fn ptep_modify_prot_commit(
        cx: &mut Cx<Self>,
        _vma: &Vma,
        addr: u64,
        _old: X86Pte,
        pte: X86Pte,
    ) {
        cx.call(KFn::PvPtepModifyProtCommit);
        Self::set_ptes(cx, addr, pte, 1)
    }

    /// arch/x86/mm/pgtable.c `ptep_test_and_clear_young()`: a plain read of
    /// the entry, then `test_and_clear_bit(_PAGE_BIT_ACCESSED)` (`lock btr`)
    /// only when it is young.
    fn ptep_test_and_clear_young(cx: &mut Cx<Self>, addr: u64) -> bool {
        cx.counters.young_tests += 1;
        let pte = cx.load(addr);
        if !pte.has(PteFlags::ACCESSED) {
            return false;
        }
        cx.counters.young_clears += 1;
        atomic_write(cx, addr, pte.clear(PteFlags::ACCESSED));
        true
    }

    /// arch/x86/mm/pgtable.c `ptep_clear_flush_young()`: the same as
    /// test-and-clear — no TLB flush on x86 (a stale accessed bit only makes
    /// aging less precise; the next context switch or flush drops it).
    fn ptep_clear_flush_young(cx: &mut Cx<Self>, addr: u64) -> bool {
        Self::ptep_test_and_clear_young(cx, addr)
    }
}
