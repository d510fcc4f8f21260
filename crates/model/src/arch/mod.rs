//! Architecture hooks: the `#ifndef name … #define name name` split of
//! include/linux/pgtable.h, as a trait with default methods.
//!
//! Kernel counterpart: include/linux/pgtable.h (generic fallbacks) and the
//! per-arch headers that override them — arch/x86/include/asm/pgtable.h and
//! arch/arm64/include/asm/pgtable.h (v6.16 … 2026 mm tree). Bit-level
//! operations are required methods; every overridable page-table operation
//! has a default body that calls the generic version in [`crate::pgtable`].
//! `impl Arch for X86` overrides almost nothing; `impl Arch for Arm64`
//! overrides the contpte set (`ptep_get`, `set_ptes`, `pte_batch_hint`,
//! `get_and_clear_full_ptes`, `ptep_get_and_clear`, the `modify_prot_*` pair).
//! Configuration options (`CONFIG_ARM64_CONTPTE`, BBML2, FEAT_TLBIRANGE) are
//! runtime fields, so one binary compares them.

pub mod arm64;
pub mod x86;

use core::fmt::Debug;
use core::hash::Hash;

use crate::cx::Cx;
use crate::mm::Vma;
use crate::pgtable;
use crate::strategy::{BuildArch, KFn, Kernel};
use crate::tlb::FlushSource;
use crate::types::{Pfn, Pgprot, VmFlags};

/// A PTE value of one architecture (`pte_t`): a `repr(transparent)` `u64`.
pub trait PteValue: Copy + Eq + Debug + Default + Hash + Send + Sync + 'static {
    /// `pte_val()`.
    fn val(self) -> u64;
    /// `__pte()`.
    fn from_val(v: u64) -> Self;
    /// `pte_none()`: the all-zero entry.
    fn is_none(self) -> bool {
        self.val() == 0
    }
}

/// What a flush of `pages` pages costs on the hardware.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushCost {
    /// The flush was executed as a whole-mm (x86 `TLB_FLUSH_ALL`, arm64 ASID) flush.
    pub full: bool,
    /// Hardware invalidation instructions issued.
    pub ops: u64,
}

/// The architecture hooks. See the module documentation.
pub trait Arch: Copy + Debug + Send + Sync + 'static {
    /// The arch's PTE type.
    type Pte: PteValue;

    /// `change_pte_range()` may replay one PTE's step on the next PTEs
    /// that look alike (`mprotect::change_pte_range`): every page-table
    /// operation of the arch touches only its own entry (no contiguous
    /// blocks, `pte_batch_hint()` 1), and the PFN lies in [`Arch::PFN_FIELD`]
    /// (kept or inverted whole by every bit operation mprotect applies).
    const RUN_REPLAY: bool = false;
    /// The PFN bits of a PTE value (see [`Arch::RUN_REPLAY`]).
    const PFN_FIELD: u64 = 0;

    /// "x86_64" or "arm64".
    fn name(&self) -> &'static str;
    /// The arch of the Debian build whose out-of-line functions are counted.
    fn build_arch(&self) -> BuildArch;
    /// `PAGE_SHIFT`.
    fn page_shift(&self) -> u32;
    /// `PTRS_PER_PTE`.
    fn ptrs_per_pte(&self) -> u64 {
        1 << (self.page_shift() - 3)
    }
    /// `CONT_PTES` when contpte is in use, else 1.
    fn cont_ptes(&self) -> u64 {
        1
    }

    // ---- bit-level primitives (asm/pgtable.h, asm/pgtable_types.h) ----

    /// `pte_present()`: valid, or PROT_NONE/NUMA-hint (present to software).
    fn pte_present(&self, pte: Self::Pte) -> bool;
    /// The hardware may walk and cache this entry (x86 `_PAGE_PRESENT`,
    /// arm64 `PTE_VALID`).
    fn pte_hw_valid(&self, pte: Self::Pte) -> bool;
    /// `pte_protnone()`.
    fn pte_protnone(&self, pte: Self::Pte) -> bool;
    /// `pte_write()`.
    fn pte_write(&self, pte: Self::Pte) -> bool;
    /// `pte_dirty()`.
    fn pte_dirty(&self, pte: Self::Pte) -> bool;
    /// `pte_young()`.
    fn pte_young(&self, pte: Self::Pte) -> bool;
    /// `pte_special()`.
    fn pte_special(&self, pte: Self::Pte) -> bool;
    /// `pte_soft_dirty()` (false where the arch has no soft-dirty bit).
    fn pte_soft_dirty(&self, pte: Self::Pte) -> bool;
    /// `pte_uffd_wp()`.
    fn pte_uffd_wp(&self, pte: Self::Pte) -> bool;
    /// `pte_cont()`: arm64 contiguous hint; generic false.
    fn pte_cont(&self, _pte: Self::Pte) -> bool {
        false
    }
    /// `pte_pfn()`.
    fn pte_pfn(&self, pte: Self::Pte) -> Pfn;
    /// `pfn_pte()`.
    fn pfn_pte(&self, pfn: Pfn, prot: Pgprot) -> Self::Pte;
    /// `pte_pgprot()`: every bit but the PFN.
    fn pte_pgprot(&self, pte: Self::Pte) -> Pgprot;
    /// `pte_advance_pfn()`: the same PTE mapping `nr` pages further.
    fn pte_advance_pfn(&self, pte: Self::Pte, nr: u64) -> Self::Pte {
        self.pfn_pte(Pfn(self.pte_pfn(pte).0 + nr), self.pte_pgprot(pte))
    }
    /// `pte_modify()`.
    fn pte_modify(&self, pte: Self::Pte, prot: Pgprot) -> Self::Pte;
    /// `pte_mkwrite(pte, vma)` (`pte_mkwrite_novma` for normal VMAs).
    fn pte_mkwrite(&self, pte: Self::Pte) -> Self::Pte;
    /// `pte_wrprotect()`.
    fn pte_wrprotect(&self, pte: Self::Pte) -> Self::Pte;
    /// `pte_mkclean()`.
    fn pte_mkclean(&self, pte: Self::Pte) -> Self::Pte;
    /// `pte_mkdirty()`.
    fn pte_mkdirty(&self, pte: Self::Pte) -> Self::Pte;
    /// `pte_mkold()`.
    fn pte_mkold(&self, pte: Self::Pte) -> Self::Pte;
    /// `pte_mkyoung()`.
    fn pte_mkyoung(&self, pte: Self::Pte) -> Self::Pte;
    /// `pte_mkuffd_wp()`.
    fn pte_mkuffd_wp(&self, pte: Self::Pte) -> Self::Pte;
    /// `pte_clear_uffd_wp()`.
    fn pte_clear_uffd_wp(&self, pte: Self::Pte) -> Self::Pte;
    /// `pte_mksoft_dirty()` (identity where unsupported).
    fn pte_mksoft_dirty(&self, pte: Self::Pte) -> Self::Pte;
    /// `pte_clear_soft_dirty()` (identity where unsupported).
    fn pte_clear_soft_dirty(&self, pte: Self::Pte) -> Self::Pte;
    /// `pte_mknoncont()`: arm64 only; generic identity.
    fn pte_mknoncont(&self, pte: Self::Pte) -> Self::Pte {
        pte
    }
    /// `CONFIG_MEM_SOFT_DIRTY` (and `pgtable_supports_soft_dirty()`).
    fn has_soft_dirty(&self) -> bool;
    /// `vm_get_page_prot()`: `protection_map[]` for these flags.
    fn vm_get_page_prot(&self, flags: VmFlags) -> Pgprot;

    // ---- TLB ----

    /// `pte_needs_flush(old, new)` (pure). Generic: always true
    /// (include/linux/pgtable.h); x86 and arm64 ≥ v6.19 override.
    fn pte_needs_flush(&self, _kernel: &Kernel, _old: Self::Pte, _new: Self::Pte) -> bool {
        true
    }
    /// Invariant oracle: a TLB entry caching `cached` would let user space do
    /// something that `cur` forbids (or hide an access/dirty update).
    fn tlb_entry_grants_more(&self, cached: Self::Pte, cur: Self::Pte) -> bool;
    /// Pages one cached TLB entry made from `pte` translates (arm64 contiguous
    /// entries cover their whole block).
    fn tlb_entry_span(&self, pte: Self::Pte) -> u64 {
        let _ = pte;
        1
    }
    /// The largest [`Arch::tlb_entry_span`] this configuration can produce.
    fn max_tlb_span(&self) -> u64 {
        1
    }
    /// Hardware cost of an arch range flush of `pages` pages from page `start`.
    fn flush_cost(&self, start: u64, pages: u64) -> FlushCost;

    /// `tlb_flush(tlb)` for an mmu_gather whose hull is `[start, end)`:
    /// arch/x86/include/asm/tlb.h → `flush_tlb_mm_range()`;
    /// arch/arm64/include/asm/tlb.h → `__flush_tlb_range()`.
    fn tlb_flush(cx: &mut Cx<Self>, start: u64, end: u64) {
        cx.arch_flush(start, end, FlushSource::MmuGather);
    }

    /// `flush_tlb_range(vma, start, end)` (used by mremap).
    fn flush_tlb_range(cx: &mut Cx<Self>, start: u64, end: u64) {
        cx.arch_flush(start, end, FlushSource::FlushTlbRange);
    }

    // ---- overridable page-table operations (generic defaults) ----

    /// `ptep_get()`: generic is one `READ_ONCE`.
    fn ptep_get(cx: &mut Cx<Self>, addr: u64) -> Self::Pte {
        pgtable::ptep_get(cx, addr)
    }

    /// `pte_batch_hint()`: generic answer is 1 (no free knowledge).
    fn pte_batch_hint(_cx: &Cx<Self>, _addr: u64, _pte: Self::Pte) -> u64 {
        1
    }

    /// `set_ptes()` (and `set_pte_at()` for `nr == 1`): generic loop of stores.
    fn set_ptes(cx: &mut Cx<Self>, addr: u64, pte: Self::Pte, nr: u64) {
        pgtable::set_ptes(cx, addr, pte, nr)
    }

    /// `ptep_get_and_clear()`: generic atomic exchange with 0.
    fn ptep_get_and_clear(cx: &mut Cx<Self>, addr: u64) -> Self::Pte {
        pgtable::ptep_get_and_clear(cx, addr)
    }

    /// `get_and_clear_full_ptes()`: generic loop merging young/dirty.
    fn get_and_clear_full_ptes(cx: &mut Cx<Self>, addr: u64, nr: u64, full: bool) -> Self::Pte {
        pgtable::get_and_clear_full_ptes(cx, addr, nr, full)
    }

    /// `ptep_modify_prot_start()`: generic `ptep_get_and_clear()`.
    fn ptep_modify_prot_start(cx: &mut Cx<Self>, vma: &Vma, addr: u64) -> Self::Pte {
        let _ = vma;
        Self::ptep_get_and_clear(cx, addr)
    }

    /// `ptep_modify_prot_commit()`: generic `set_pte_at()`.
    fn ptep_modify_prot_commit(
        cx: &mut Cx<Self>,
        vma: &Vma,
        addr: u64,
        old: Self::Pte,
        pte: Self::Pte,
    ) {
        let _ = (vma, old);
        Self::set_ptes(cx, addr, pte, 1)
    }

    /// `modify_prot_start_ptes()` (v6.17): generic loop over
    /// `ptep_modify_prot_start()` merging young/dirty into the first PTE.
    fn modify_prot_start_ptes(cx: &mut Cx<Self>, vma: &Vma, addr: u64, nr: u64) -> Self::Pte {
        pgtable::modify_prot_start_ptes(cx, vma, addr, nr)
    }

    /// `modify_prot_commit_ptes()` (v6.17): generic loop over
    /// `ptep_modify_prot_commit()` (a static inline that x86 GCC builds call
    /// out of line from v7.1).
    fn modify_prot_commit_ptes(
        cx: &mut Cx<Self>,
        vma: &Vma,
        addr: u64,
        old: Self::Pte,
        pte: Self::Pte,
        nr: u64,
    ) {
        cx.call(KFn::ModifyProtCommitPtes);
        pgtable::modify_prot_commit_ptes(cx, vma, addr, old, pte, nr)
    }

    // ---- young-bit helpers (rmap, vmscan; see [`crate::rmap`]) ----

    /// `ptep_test_and_clear_young()`: generic (include/linux/pgtable.h,
    /// `!__HAVE_ARCH_PTEP_TEST_AND_CLEAR_YOUNG`): `ptep_get()`, and when young
    /// `set_pte_at(pte_mkold(pte))`. x86 and arm64 override it.
    fn ptep_test_and_clear_young(cx: &mut Cx<Self>, addr: u64) -> bool {
        cx.counters.young_tests += 1;
        let pte = Self::ptep_get(cx, addr);
        if !cx.arch.pte_young(pte) {
            return false;
        }
        cx.counters.young_clears += 1;
        let old = cx.arch.pte_mkold(pte);
        cx.store(addr, old);
        true
    }

    /// `ptep_clear_flush_young()`: generic (mm/pgtable-generic.c):
    /// test-and-clear, then `flush_tlb_page()` when it was young.
    fn ptep_clear_flush_young(cx: &mut Cx<Self>, addr: u64) -> bool {
        let young = Self::ptep_test_and_clear_young(cx, addr);
        if young {
            young_flush(cx, addr, addr + 1);
        }
        young
    }

    /// `test_and_clear_young_ptes()` (2026, include/linux/pgtable.h): the
    /// generic loop of `ptep_test_and_clear_young()` over `nr` PTEs of one
    /// folio, OR of the results; never flushes.
    fn test_and_clear_young_ptes(cx: &mut Cx<Self>, addr: u64, nr: u64) -> bool {
        let mut young = false;
        for i in 0..nr {
            young |= Self::ptep_test_and_clear_young(cx, addr + i);
        }
        young
    }

    /// `clear_flush_young_ptes()` (2026, include/linux/pgtable.h): the
    /// generic loop of `ptep_clear_flush_young()`, OR of the results.
    fn clear_flush_young_ptes(cx: &mut Cx<Self>, addr: u64, nr: u64) -> bool {
        let mut young = false;
        for i in 0..nr {
            young |= Self::ptep_clear_flush_young(cx, addr + i);
        }
        young
    }

    /// Invariant check after a syscall: arm64 contiguous blocks are
    /// consistent. Generic: nothing to check.
    fn check_contig(_cx: &Cx<Self>, _start: u64, _end: u64) -> Result<(), String> {
        Ok(())
    }
}

/// The TLB flush of a clear-flush-young helper (`flush_tlb_page()`, arm64
/// `__flush_tlb_page_nosync()` / `__flush_tlb_range(…, TLBF_NOSYNC)`): an
/// arch range flush of `[start, end)` counted in `young_flushes` too.
pub fn young_flush<A: Arch>(cx: &mut Cx<A>, start: u64, end: u64) {
    cx.counters.young_flushes += 1;
    cx.arch_flush(start, end, FlushSource::FlushTlbRange);
}

/// The write half of an atomic read-modify-write of one PTE (x86 `lock btr`,
/// arm64 `cmpxchg_relaxed`): the caller counts it. Another CPU may walk the
/// new value at once, so a hardware-valid value enters the TLB model.
pub fn atomic_write<A: Arch>(cx: &mut Cx<A>, addr: u64, pte: A::Pte) {
    cx.mm.pt.set(addr, pte);
    let valid = cx.arch.pte_hw_valid(pte);
    if let Some(tlb) = cx.tlb.as_mut() {
        if valid {
            tlb.cache(addr, pte);
        }
    }
}

/// Whether `kernel` carries Baolin Wang's young-bit batching
/// (`clear_flush_young_ptes()`, batched `folio_referenced_one()`, arm64
/// `contpte_{test_and_clear,clear_flush}_young_ptes()`, v7.0; and the
/// `test_and_clear_young_ptes()` override of seed 004, 9970a9a27ffc, v7.1):
/// [`Kernel::young_ptes_batched`], from v7.0 on (test:
/// `rmap::tests::young_series_from_v7_0`).
pub fn young_ptes_series(kernel: &Kernel) -> bool {
    kernel.young_ptes_batched
}
