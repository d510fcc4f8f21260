//! arm64 contpte slow paths: gathering, folding, unfolding, repainting.
//!
//! Kernel counterpart: arch/arm64/mm/contpte.c and the inline
//! `contpte_try_fold`/`contpte_try_unfold` of arch/arm64/include/asm/pgtable.h.
//! Two kernel versions: v6.16 (full-scan gather, TLBI in every convert) and
//! v6.17+ (093ae7a033cf early-exit gather, 83bbd6be7d17 BBML2 TLBI elision),
//! selected by [`crate::Kernel`]. Only user mms are modelled (`mm_is_user`).

use crate::arch::{young_flush, Arch};
use crate::cx::Cx;
use crate::folio::page_folio;
use crate::strategy::{KFn, Strategy};
use crate::tlb::FlushSource;
use crate::types::Pfn;

use super::{raw, Arm64, Arm64Pte};

fn align_down(addr: u64, n: u64) -> u64 {
    addr & !(n - 1)
}

/// `contpte_convert()`: break-before-make repaint of the whole block
/// containing `addr` with `pte`'s prot (its CONT bit decides fold/unfold).
///
/// Cost: C xchg + (1 TLBI over C pages unless BBML2-noabort, v6.17+) + C stores.
pub fn contpte_convert(cx: &mut Cx<Arm64>, addr: u64, pte: Arm64Pte) {
    cx.call(KFn::ContpteConvert);
    let arch = cx.arch;
    let c = arch.cont_geometry();
    let start = align_down(addr, c);
    let mut pte = arch.pfn_pte(
        Pfn(align_down(arch.pte_pfn(pte).0, c)),
        arch.pte_pgprot(pte),
    );
    for i in 0..c {
        let ptent = raw::ptep_get_and_clear(cx, start + i);
        if arch.pte_dirty(ptent) {
            pte = arch.pte_mkdirty(pte);
        }
        if arch.pte_young(ptent) {
            pte = arch.pte_mkyoung(pte);
        }
    }
    if !(arch.bbml2 && cx.kernel.contpte_bbml2_elision) {
        cx.call(KFn::FlushTlbRangeNosync);
        cx.arch_flush(start, start + c, FlushSource::ContpteConvert);
    }
    raw::set_ptes(cx, start, pte, c);
}

/// `__contpte_try_unfold()`: repaint the block non-contiguous.
pub fn contpte_unfold(cx: &mut Cx<Arm64>, addr: u64, pte: Arm64Pte) {
    cx.call(KFn::ContpteTryUnfold);
    cx.counters.contpte_unfolds += 1;
    let pte = cx.arch.pte_mknoncont(pte);
    contpte_convert(cx, addr, pte);
}

/// `contpte_try_unfold()`: unfold if `pte` (a raw value) is valid and contiguous.
pub fn contpte_try_unfold(cx: &mut Cx<Arm64>, addr: u64, pte: Arm64Pte) {
    if cx.arch.pte_valid_cont(pte) {
        contpte_unfold(cx, addr, pte);
    }
}

/// `contpte_try_fold()`: after a single-entry set, try to fold when `addr` is
/// the last entry of a block and the PFN is aligned the same way.
pub fn contpte_try_fold(cx: &mut Cx<Arm64>, addr: u64, pte: Arm64Pte) {
    let arch = cx.arch;
    let mask = arch.cont_geometry() - 1;
    let valign = addr & mask == mask;
    if valign {
        let palign = arch.pte_pfn(pte).0 & mask == mask;
        if palign && arch.pte_hw_valid(pte) && !arch.pte_cont(pte) && !arch.pte_special(pte) {
            contpte_fold(cx, addr, pte);
        }
    }
}

/// `__contpte_try_fold()`: fold the block if one folio covers it and all C
/// entries are valid with consecutive PFNs and equal prot (ignoring A/D).
///
/// Cost: 2 struct-page reads, C loads, and a convert if it folds.
pub fn contpte_fold(cx: &mut Cx<Arm64>, addr: u64, pte: Arm64Pte) {
    cx.call(KFn::ContpteTryFold);
    let arch = cx.arch;
    let c = arch.cont_geometry();
    let page = arch.pte_pfn(pte);
    let Some(_) = cx.mm.memmap.page(page) else {
        return;
    };
    let folio = page_folio(cx, page);
    cx.touch_page(folio.head); // folio_nr_pages()
    let folio_start = addr - (page.0 - folio.head.0);
    let folio_end = folio_start + folio.nr_pages();
    let cont_start = align_down(addr, c);
    if folio_start > cont_start || folio_end < cont_start + c {
        return;
    }
    let prot = arch.pte_pgprot(arch.pte_mkold(arch.pte_mkclean(pte)));
    let mut expected = arch.pfn_pte(Pfn(align_down(page.0, c)), prot);
    for i in 0..c {
        let sub = raw::ptep_get(cx, cont_start + i);
        if arch.pte_mkold(arch.pte_mkclean(sub)) != expected {
            return;
        }
        expected = arch.pte_advance_pfn(expected, 1);
    }
    cx.counters.contpte_folds += 1;
    contpte_convert(cx, addr, arch.pte_mkcont(pte));
}

/// `contpte_ptep_get()`: OR the access/dirty bits of the whole block into
/// `orig`. v6.16 scans all C entries; v6.17+ stops once it saw both.
pub fn contpte_ptep_get(cx: &mut Cx<Arm64>, addr: u64, orig: Arm64Pte) -> Arm64Pte {
    cx.call(KFn::ContptePtepGet);
    cx.counters.contpte_gathers += 1;
    let arch = cx.arch;
    let c = arch.cont_geometry();
    let start = align_down(addr, c);
    let mut orig = orig;
    if !cx.kernel.contpte_gather_early_exit {
        for i in 0..c {
            let pte = raw::ptep_get(cx, start + i);
            if arch.pte_dirty(pte) {
                orig = arch.pte_mkdirty(orig);
            }
            if arch.pte_young(pte) {
                orig = arch.pte_mkyoung(orig);
            }
        }
        return orig;
    }
    let mut i = 0;
    while i < c {
        let pte = raw::ptep_get(cx, start + i);
        if arch.pte_dirty(pte) {
            orig = arch.pte_mkdirty(orig);
            while i < c {
                let pte = raw::ptep_get(cx, start + i);
                if arch.pte_young(pte) {
                    orig = arch.pte_mkyoung(orig);
                    break;
                }
                i += 1;
            }
            break;
        }
        if arch.pte_young(pte) {
            orig = arch.pte_mkyoung(orig);
            i += 1;
            while i < c {
                let pte = raw::ptep_get(cx, start + i);
                if arch.pte_dirty(pte) {
                    orig = arch.pte_mkdirty(orig);
                    break;
                }
                i += 1;
            }
            break;
        }
        i += 1;
    }
    orig
}

/// `contpte_set_ptes()`: set `nr ≥ 2` not-present entries, painting CONT on
/// every chunk that is a whole block with aligned VA and PA.
pub fn contpte_set_ptes(cx: &mut Cx<Arm64>, addr: u64, pte: Arm64Pte, nr: u64) {
    cx.call(KFn::ContpteSetPtes);
    let arch = cx.arch;
    // The 7.3.4 build enters `__set_ptes_anysz()` once per call when the
    // entries are not valid (PROT_NONE), once per block otherwise (counted
    // in guests; the source of the change was not read, so the stores are
    // modelled as before).
    let one_set_ptes = cx.kernel.release >= Strategy::V7_3 && !arch.pte_hw_valid(pte);
    if one_set_ptes {
        cx.call(KFn::SetPtesAnysz);
    }
    let c = arch.cont_geometry();
    let end = addr + nr;
    let mut pfn = arch.pte_pfn(pte).0;
    let prot = arch.pte_pgprot(pte);
    let mut addr = addr;
    while addr != end {
        let next = (align_down(addr, c) + c).min(end);
        let n = next - addr;
        let mut p = arch.pfn_pte(Pfn(pfn), prot);
        p = if (addr | next | pfn) & (c - 1) == 0 {
            arch.pte_mkcont(p)
        } else {
            arch.pte_mknoncont(p)
        };
        if !one_set_ptes {
            cx.call(KFn::SetPtesAnysz);
        }
        raw::set_ptes(cx, addr, p, n);
        addr = next;
        pfn += n;
    }
}

/// `contpte_try_unfold_partial()`: unfold the partially covered first and
/// last blocks of `[addr, addr + nr)`.
pub fn contpte_try_unfold_partial(cx: &mut Cx<Arm64>, addr: u64, nr: u64) {
    cx.call(KFn::ContpteTryUnfoldPartial);
    let c = cx.arch.cont_geometry();
    if addr != align_down(addr, c) || nr < c {
        let pte = raw::ptep_get(cx, addr);
        contpte_try_unfold(cx, addr, pte);
    }
    if addr + nr != align_down(addr + nr, c) {
        let last = addr + nr - 1;
        let pte = raw::ptep_get(cx, last);
        contpte_try_unfold(cx, last, pte);
    }
}

/// `contpte_get_and_clear_full_ptes()`.
pub fn contpte_get_and_clear_full_ptes(cx: &mut Cx<Arm64>, addr: u64, nr: u64) -> Arm64Pte {
    cx.call(KFn::ContpteGetAndClearFullPtes);
    contpte_try_unfold_partial(cx, addr, nr);
    raw::get_and_clear_full_ptes(cx, addr, nr)
}

/// `contpte_align_addr_ptep()` (2026): widen `[addr, addr + nr)` to whole
/// blocks at each end whose entry is contiguous. Returns `(start, end)`.
///
/// Cost: 2 loads (`__ptep_get` of the last and of the first entry).
///
/// # Context
/// The `nr` entries are present, map consecutive pages of one large folio,
/// in one VMA and one PTE table.
pub fn contpte_align_addr_ptep(cx: &mut Cx<Arm64>, addr: u64, nr: u64) -> (u64, u64) {
    let arch = cx.arch;
    let c = arch.cont_geometry();
    let (mut start, mut end) = (addr, addr + nr);
    if arch.pte_cont(raw::ptep_get(cx, addr + nr - 1)) {
        end = end.div_ceil(c) * c;
    }
    if arch.pte_cont(raw::ptep_get(cx, addr)) {
        start = align_down(start, c);
    }
    (start, end)
}

/// `contpte_test_and_clear_young_ptes()` (2026): clear `PTE_AF` on every
/// entry of the block-expanded range (no unfold: core mm tracks access per
/// folio and a block never spans two folios); OR of the results.
///
/// Cost: 2 loads + per entry of the expanded range 1 load + 1 CAS.
pub fn contpte_test_and_clear_young_ptes(cx: &mut Cx<Arm64>, addr: u64, nr: u64) -> bool {
    cx.call(KFn::ContpteTestAndClearYoungPtes);
    let (start, end) = contpte_align_addr_ptep(cx, addr, nr);
    let mut young = false;
    for a in start..end {
        young |= raw::ptep_test_and_clear_young(cx, a);
    }
    young
}

/// `contpte_clear_flush_young_ptes()` (2026): the test-and-clear above, then
/// when any entry was young one `__flush_tlb_range(…, TLBF_NOSYNC)` over the
/// block-expanded range (aligned again: 2 more loads).
pub fn contpte_clear_flush_young_ptes(cx: &mut Cx<Arm64>, addr: u64, nr: u64) -> bool {
    cx.call(KFn::ContpteClearFlushYoungPtes);
    let young = contpte_test_and_clear_young_ptes(cx, addr, nr);
    if young {
        let (start, end) = contpte_align_addr_ptep(cx, addr, nr);
        young_flush(cx, start, end);
    }
    young
}

/// `contpte_ptep_test_and_clear_young()` (v6.16 … v6.19): clear `PTE_AF` on
/// all C entries of the block of `addr` (aligned down unconditionally, no
/// extra loads); OR of the results.
pub fn contpte_ptep_test_and_clear_young(cx: &mut Cx<Arm64>, addr: u64) -> bool {
    cx.call(KFn::ContptePtepTestAndClearYoung);
    let c = cx.arch.cont_geometry();
    let start = align_down(addr, c);
    let mut young = false;
    for a in start..start + c {
        young |= raw::ptep_test_and_clear_young(cx, a);
    }
    young
}

/// `contpte_ptep_clear_flush_young()` (v6.16 … v6.19): the block
/// test-and-clear, then when young `__flush_tlb_range_nosync()` over the block.
pub fn contpte_ptep_clear_flush_young(cx: &mut Cx<Arm64>, addr: u64) -> bool {
    cx.call(KFn::ContptePtepClearFlushYoung);
    let young = contpte_ptep_test_and_clear_young(cx, addr);
    if young {
        let c = cx.arch.cont_geometry();
        let start = align_down(addr, c);
        young_flush(cx, start, start + c);
    }
    young
}
