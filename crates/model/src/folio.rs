//! Folios, struct pages and PTE batch detection.
//!
//! Kernel counterparts: `struct page`/`struct folio` metadata the modelled
//! paths read (include/linux/mm.h, include/linux/page-flags.h:
//! `page_folio`, `folio_test_large`, `folio_test_anon`,
//! `PageAnonExclusive`), `vm_normal_page()` (mm/memory.c), and
//! `folio_pte_batch_flags()` with its `FPB_*` flags (mm/internal.h, v6.17 form
//! from 57fae936b40c and the 2026 tree). Every struct-page access goes through
//! [`Cx::touch_page`] so `page_reads` counts memmap cache lines.

use bitflags::bitflags;

use crate::arch::Arch;
use crate::cx::Cx;
use crate::mm::Vma;
use crate::strategy::KFn;
use crate::types::Pfn;

/// Metadata of one `struct page`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageMeta {
    /// PFN of the folio's head page.
    pub head: u64,
    /// Folio order.
    pub order: u8,
    /// `folio_test_anon()`.
    pub anon: bool,
    /// `PageAnonExclusive()` (per page).
    pub anon_exclusive: bool,
}

/// The `struct page` array (memmap), for the PFNs the model allocated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memmap {
    base: u64,
    pages: Vec<Option<PageMeta>>,
}

/// A folio: its head PFN, order and anon flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Folio {
    /// `folio_pfn()`.
    pub head: Pfn,
    /// `folio_order()`.
    pub order: u8,
    /// `folio_test_anon()`.
    pub anon: bool,
}

impl Folio {
    /// `folio_nr_pages()`.
    pub fn nr_pages(&self) -> u64 {
        1 << self.order
    }

    /// `folio_test_large()`.
    pub fn is_large(&self) -> bool {
        self.order > 0
    }
}

impl Memmap {
    /// Allocate the struct pages of a folio at `head` (naturally aligned);
    /// `exclusive(i)` gives `PageAnonExclusive` of page `i`.
    pub fn add_folio(&mut self, head: u64, order: u8, anon: bool, exclusive: impl Fn(u64) -> bool) {
        let n = 1u64 << order;
        if self.pages.is_empty() {
            self.base = head;
        }
        if head < self.base {
            let shift = (self.base - head) as usize;
            let mut v = vec![None; shift];
            v.append(&mut self.pages);
            self.pages = v;
            self.base = head;
        }
        let end = (head + n - self.base) as usize;
        if self.pages.len() < end {
            self.pages.resize(end, None);
        }
        for i in 0..n {
            self.pages[(head + i - self.base) as usize] = Some(PageMeta {
                head,
                order,
                anon,
                anon_exclusive: anon && exclusive(i),
            });
        }
    }

    /// The struct page of `pfn`, if the model allocated one.
    #[inline]
    pub fn page(&self, pfn: Pfn) -> Option<&PageMeta> {
        pfn.0
            .checked_sub(self.base)
            .and_then(|i| self.pages.get(i as usize))
            .and_then(|p| p.as_ref())
    }

    /// Mutable access to the struct page of `pfn`.
    pub fn page_mut(&mut self, pfn: Pfn) -> Option<&mut PageMeta> {
        pfn.0
            .checked_sub(self.base)
            .and_then(|i| self.pages.get_mut(i as usize))
            .and_then(|p| p.as_mut())
    }

    /// The folio of `pfn` without counting (checks and setup).
    pub fn folio_of(&self, pfn: Pfn) -> Option<Folio> {
        self.page(pfn).map(|p| Folio {
            head: Pfn(p.head),
            order: p.order,
            anon: p.anon,
        })
    }
}

/// `vm_normal_page()`: the page mapped by a present `pte`, or `None` for
/// special mappings and PFNs without a struct page. Out of line (mm/memory.c).
pub fn vm_normal_page<A: Arch>(cx: &mut Cx<A>, _vma: &Vma, _addr: u64, pte: A::Pte) -> Option<Pfn> {
    cx.counters.folio_lookups += 1;
    cx.call(KFn::VmNormalPage);
    // x86: the out-of-line paravirt pte_val() copy of mm/memory.c.
    let pte_vals = cx.kernel.release.vm_normal_page_pte_vals();
    cx.calls(KFn::PteVal, pte_vals);
    if cx.arch.pte_special(pte) {
        return None;
    }
    let pfn = cx.arch.pte_pfn(pte);
    cx.mm.memmap.page(pfn).map(|_| pfn)
}

/// `page_folio()`: reads `page->compound_head`.
pub fn page_folio<A: Arch>(cx: &mut Cx<A>, page: Pfn) -> Folio {
    cx.touch_page(page);
    cx.mm
        .memmap
        .folio_of(page)
        .expect("page_folio on a page without struct page")
}

/// `folio_test_large()`: reads the head page's flags.
pub fn folio_test_large<A: Arch>(cx: &mut Cx<A>, folio: &Folio) -> bool {
    cx.touch_page(folio.head);
    folio.is_large()
}

/// `folio_test_anon()`: reads `folio->mapping`.
pub fn folio_test_anon<A: Arch>(cx: &mut Cx<A>, folio: &Folio) -> bool {
    cx.touch_page(folio.head);
    folio.anon
}

/// `PageAnon()` on any page: `folio_test_anon(page_folio(page))`.
pub fn page_anon<A: Arch>(cx: &mut Cx<A>, page: Pfn) -> bool {
    let folio = page_folio(cx, page);
    folio_test_anon(cx, &folio)
}

/// `PageAnonExclusive()`: `PG_anon_exclusive` of this very page.
pub fn page_anon_exclusive<A: Arch>(cx: &mut Cx<A>, page: Pfn) -> bool {
    cx.counters.anon_exclusive_tests += 1;
    cx.touch_page(page);
    cx.mm.memmap.page(page).is_some_and(|p| p.anon_exclusive)
}

bitflags! {
    /// `fpb_t` flags of `folio_pte_batch_flags()` (v6.17+: default ignores).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct FpbFlags: u32 {
        /// `FPB_RESPECT_DIRTY`: compare the dirty bit.
        const RESPECT_DIRTY = 1 << 0;
        /// `FPB_RESPECT_SOFT_DIRTY`: compare the soft-dirty bit.
        const RESPECT_SOFT_DIRTY = 1 << 1;
        /// `FPB_RESPECT_WRITE`: compare the write bit.
        const RESPECT_WRITE = 1 << 2;
        /// `FPB_MERGE_WRITE`: make `*ptentp` writable if any batched PTE is.
        const MERGE_WRITE = 1 << 3;
        /// `FPB_MERGE_YOUNG_DIRTY`: OR young/dirty into `*ptentp`.
        const MERGE_YOUNG_DIRTY = 1 << 4;
    }
}

/// The out-of-line entries of one `folio_pte_batch_flags()` that returned
/// `nr`, as mprotect and mremap call it: arm64 calls a `.constprop.0` clone;
/// x86 inlines it and calls `pte_advance_pfn()` out of line (the first only
/// up to v7.0, every one from v7.1). Counted by the caller, since the 2026
/// rmap reaches the same code inside the out-of-line `folio_pte_batch()`.
pub fn count_folio_pte_batch_flags<A: Arch>(cx: &mut Cx<A>, nr: u64) {
    cx.call(KFn::FolioPteBatchFlags);
    let advances = cx.kernel.release.folio_pte_batch_advances(nr);
    cx.calls(KFn::PteAdvancePfn, advances);
}

/// `__pte_batch_clear_ignored()`: mask the bits a batch may differ in.
pub fn pte_batch_clear_ignored<A: Arch>(arch: &A, mut pte: A::Pte, flags: FpbFlags) -> A::Pte {
    if !flags.contains(FpbFlags::RESPECT_DIRTY) {
        pte = arch.pte_mkclean(pte);
    }
    if !flags.contains(FpbFlags::RESPECT_SOFT_DIRTY) {
        pte = arch.pte_clear_soft_dirty(pte);
    }
    if !flags.contains(FpbFlags::RESPECT_WRITE) {
        pte = arch.pte_wrprotect(pte);
    }
    arch.pte_mkold(pte)
}

/// `folio_pte_batch_flags()`: how many PTEs from `addr` map consecutive pages
/// of `folio` with the same bits (after masking), at most `max_nr`.
/// `*ptentp` gets the merges `flags` ask for.
///
/// Cost: one `ptep_get()` per `pte_batch_hint()` step after the first, plus
/// one for the entry that ended the batch on a mismatch; none when the folio
/// end or `max_nr` stops it.
///
/// # Context
/// `*ptentp` is a present PTE mapping a page of `folio`; `folio` is large;
/// the range lies in one PTE table and one VMA.
pub fn folio_pte_batch_flags<A: Arch>(
    cx: &mut Cx<A>,
    folio: &Folio,
    addr: u64,
    ptentp: &mut A::Pte,
    max_nr: u64,
    flags: FpbFlags,
) -> u64 {
    let arch = cx.arch;
    let first = *ptentp;
    debug_assert!(arch.pte_present(first) && folio.is_large() && max_nr >= 1); // VM_WARN_ON_FOLIO
                                                                               // folio_nr_pages() reads the folio's metadata.
    cx.touch_page(folio.head);
    let max_nr = max_nr.min(folio.head.0 + folio.nr_pages() - arch.pte_pfn(first).0);
    let (mut any_writable, mut any_young, mut any_dirty) = (false, false, false);

    let mut nr = A::pte_batch_hint(cx, addr, first);
    let mut expected = pte_batch_clear_ignored(&arch, arch.pte_advance_pfn(first, nr), flags);
    let mut ptep = addr + nr;
    while nr < max_nr {
        let pte = A::ptep_get(cx, ptep);
        if pte_batch_clear_ignored(&arch, pte, flags) != expected {
            break;
        }
        any_writable |= arch.pte_write(pte);
        any_young |= arch.pte_young(pte);
        any_dirty |= arch.pte_dirty(pte);
        let cur_nr = A::pte_batch_hint(cx, ptep, pte);
        expected = arch.pte_advance_pfn(expected, cur_nr);
        ptep += cur_nr;
        nr += cur_nr;
    }
    if flags.contains(FpbFlags::MERGE_WRITE) && any_writable {
        *ptentp = arch.pte_mkwrite(*ptentp);
    }
    if flags.contains(FpbFlags::MERGE_YOUNG_DIRTY) {
        if any_young {
            *ptentp = arch.pte_mkyoung(*ptentp);
        }
        if any_dirty {
            *ptentp = arch.pte_mkdirty(*ptentp);
        }
    }
    nr.min(max_nr)
}
