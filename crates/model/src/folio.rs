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
///
/// Kept per folio, not per PFN: the layouts place every folio on its own 2M
/// physical boundary, so a dense array spent 512 entries per order-0 folio
/// (8 GB for a 1G region of 4K folios, four strategies). A folio costs 16
/// bytes, a page one `PageAnonExclusive` bit and a 512-PFN chunk of the
/// placed range 4 bytes of index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memmap {
    /// Folios sorted by head PFN, non-overlapping.
    folios: Vec<FolioRec>,
    /// `PG_anon_exclusive`, one bit per page, each folio's run at its `excl`.
    exclusive: Vec<u64>,
    /// Bits used in `exclusive`.
    nbits: u64,
    /// First PFN of chunk 0 (chunk-aligned).
    base: u64,
    /// Per chunk of `1 << CHUNK_SHIFT` PFNs from `base`: the index of the
    /// first folio ending after the chunk's start. The folio holding a PFN
    /// of chunk `c` lies in `folios[chunks[c] ..= chunks[c + 1]]`.
    chunks: Vec<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FolioRec {
    head: u64,
    /// First bit of the folio's pages in `Memmap::exclusive`.
    excl: u32,
    order: u8,
    anon: bool,
}

impl FolioRec {
    fn end(&self) -> u64 {
        self.head + (1 << self.order)
    }
}

/// `PMD_ORDER` on 4K pages: the layouts' physical alignment.
const CHUNK_SHIFT: u32 = 9;

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
    /// `exclusive(i)` gives `PageAnonExclusive` of page `i`. A folio
    /// overlapping one allocated before replaces it.
    pub fn add_folio(&mut self, head: u64, order: u8, anon: bool, exclusive: impl Fn(u64) -> bool) {
        let n = 1u64 << order;
        let excl = u32::try_from(self.nbits).expect("fewer than 2^32 modelled pages");
        self.nbits += n;
        self.exclusive.resize(self.nbits.div_ceil(64) as usize, 0);
        for i in 0..n {
            if anon && exclusive(i) {
                let bit = u64::from(excl) + i;
                self.exclusive[(bit / 64) as usize] |= 1 << (bit % 64);
            }
        }
        let rec = FolioRec {
            head,
            excl,
            order,
            anon,
        };
        let appended = match self.folios.last() {
            None => true,
            Some(last) => last.end() <= head,
        };
        if appended {
            if self.folios.is_empty() {
                self.base = head >> CHUNK_SHIFT << CHUNK_SHIFT;
            }
            self.folios.push(rec);
            self.index_folio(self.folios.len() - 1);
        } else {
            // Out of PFN order (never in the layouts): insert and re-index.
            self.folios
                .retain(|f| f.end() <= head || f.head >= head + n);
            let at = self.folios.partition_point(|f| f.head < head);
            self.folios.insert(at, rec);
            self.base = self.folios[0].head >> CHUNK_SHIFT << CHUNK_SHIFT;
            self.chunks.clear();
            for k in 0..self.folios.len() {
                self.index_folio(k);
            }
        }
    }

    /// Extend `chunks` over folio `k`, all folios before it indexed: every
    /// chunk not yet indexed up to the folio's last one starts at or after
    /// the end of folio `k - 1`, so its first folio is `k`.
    fn index_folio(&mut self, k: usize) {
        let last = (self.folios[k].end() - 1 - self.base) >> CHUNK_SHIFT;
        let idx = u32::try_from(k).expect("fewer than 2^32 folios");
        if self.chunks.len() as u64 <= last {
            self.chunks.resize(last as usize + 1, idx);
        }
    }

    /// The folio record holding `pfn`.
    #[inline]
    fn rec(&self, pfn: u64) -> Option<&FolioRec> {
        let c = (pfn.checked_sub(self.base)? >> CHUNK_SHIFT) as usize;
        let lo = *self.chunks.get(c)? as usize;
        let hi = self
            .chunks
            .get(c + 1)
            .map_or(self.folios.len(), |&x| x as usize + 1)
            .min(self.folios.len());
        let cands = &self.folios[lo..hi];
        // Usually one candidate: each layout folio has a chunk of its own.
        let f = match cands {
            [f] => f,
            _ => &cands[cands.partition_point(|f| f.head <= pfn).checked_sub(1)?],
        };
        (f.head <= pfn && pfn < f.end()).then_some(f)
    }

    /// The struct page of `pfn`, if the model allocated one.
    #[inline]
    pub fn page(&self, pfn: Pfn) -> Option<PageMeta> {
        self.rec(pfn.0).map(|f| {
            let bit = u64::from(f.excl) + (pfn.0 - f.head);
            PageMeta {
                head: f.head,
                order: f.order,
                anon: f.anon,
                anon_exclusive: self.exclusive[(bit / 64) as usize] >> (bit % 64) & 1 != 0,
            }
        })
    }

    /// Set or clear `PG_anon_exclusive` of `pfn` (an anon page); false when
    /// the model allocated no struct page there.
    pub fn set_anon_exclusive(&mut self, pfn: Pfn, exclusive: bool) -> bool {
        let Some(f) = self.rec(pfn.0).copied() else {
            return false;
        };
        let bit = u64::from(f.excl) + (pfn.0 - f.head);
        let word = &mut self.exclusive[(bit / 64) as usize];
        if exclusive && f.anon {
            *word |= 1 << (bit % 64);
        } else {
            *word &= !(1 << (bit % 64));
        }
        true
    }

    /// The folio of `pfn` without counting (checks and setup).
    #[inline]
    pub fn folio_of(&self, pfn: Pfn) -> Option<Folio> {
        self.rec(pfn.0).map(|f| Folio {
            head: Pfn(f.head),
            order: f.order,
            anon: f.anon,
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// The dense memmap this one replaced, per PFN; a folio added over
    /// others replaces them whole.
    #[derive(Default)]
    struct Reference(BTreeMap<u64, PageMeta>);

    impl Reference {
        fn add_folio(&mut self, head: u64, order: u8, anon: bool, excl: &[bool]) {
            let n = 1u64 << order;
            let hit: Vec<u64> = self.0.range(head..head + n).map(|(_, p)| p.head).collect();
            self.0.retain(|_, p| !hit.contains(&p.head));
            for i in 0..n {
                self.0.insert(
                    head + i,
                    PageMeta {
                        head,
                        order,
                        anon,
                        anon_exclusive: anon && excl[i as usize],
                    },
                );
            }
        }
    }

    fn folios() -> impl Strategy<Value = Vec<(u64, u8, bool, Vec<bool>)>> {
        proptest::collection::vec(
            (0u64..4096, 0u8..=10, any::<bool>()).prop_flat_map(|(slot, order, anon)| {
                (
                    Just(slot),
                    Just(order),
                    Just(anon),
                    proptest::collection::vec(any::<bool>(), 1usize << order),
                )
            }),
            1..40,
        )
    }

    proptest! {
        #[test]
        fn compact_memmap_answers_as_the_dense_one(
            fs in folios(),
            ascending in any::<bool>(),
            spread in 0u32..12,
            flips in proptest::collection::vec((0u64..1 << 16, any::<bool>()), 0..20),
            probes in proptest::collection::vec(any::<u64>(), 200),
        ) {
            let (mut m, mut r) = (Memmap::default(), Reference::default());
            let mut fs = fs;
            if ascending {
                fs.sort_by_key(|f| f.0);
            }
            let mut next = 1u64 << 20;
            for (slot, order, anon, excl) in &fs {
                let n = 1u64 << order;
                // Ascending: packed or spread out as the layouts place them;
                // else anywhere (overlaps included), naturally aligned.
                let head = if ascending {
                    let h = (next + (*slot << spread)).div_ceil(n) * n;
                    next = h + n;
                    h
                } else {
                    ((1 << 20) + (*slot << spread)) / n * n
                };
                m.add_folio(head, *order, *anon, |i| excl[i as usize]);
                r.add_folio(head, *order, *anon, excl);
            }
            for (off, on) in flips {
                let pfn = (1 << 20) + off;
                let want = match r.0.get_mut(&pfn) {
                    Some(p) => {
                        p.anon_exclusive = on && p.anon;
                        true
                    }
                    None => false,
                };
                prop_assert_eq!(m.set_anon_exclusive(Pfn(pfn), on), want);
            }
            // Every page and its neighbours, and PFNs anywhere around.
            let lo = r.0.keys().next().copied().unwrap_or(0).saturating_sub(600);
            let hi = r.0.keys().last().copied().unwrap_or(0) + 600;
            let near = r.0.keys().flat_map(|&p| [p.saturating_sub(1), p, p + 1]);
            let far = probes.iter().map(|x| lo + x % (hi - lo));
            for pfn in near.chain(far).chain([0, 1 << 19, u64::MAX]) {
                let want = r.0.get(&pfn).copied();
                prop_assert_eq!(m.page(Pfn(pfn)), want, "pfn {:#x}", pfn);
                prop_assert_eq!(
                    m.folio_of(Pfn(pfn)),
                    want.map(|p| Folio { head: Pfn(p.head), order: p.order, anon: p.anon })
                );
            }
        }
    }
}
