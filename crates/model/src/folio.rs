//! Folios, struct pages and PTE batch detection.
//!
//! Kernel counterparts: `struct page`/`struct folio` metadata the modelled
//! paths read (include/linux/mm.h, include/linux/page-flags.h:
//! `page_folio`, `folio_test_large`, `folio_test_anon`,
//! `PageAnonExclusive`), `vm_normal_page()` (mm/memory.c), and
//! `folio_pte_batch_flags()` with its `FPB_*` flags (mm/internal.h, v6.17 form
//! from 57fae936b40c and the 2026 tree). Every struct-page access goes through
//! [`Cx::touch_page`] so `page_reads` counts memmap cache lines.

use std::cell::Cell;

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
/// Kept as runs of like folios, not per PFN: the layouts place every folio on
/// its own 2M physical boundary, so a dense array spent 512 entries per
/// order-0 folio (8 GB for a 1G region of 4K folios, four strategies), and
/// `run_model`'s folios, all of one order at one stride, are one run. A page
/// costs its `PageAnonExclusive` bit.
#[derive(Clone, Default)]
pub struct Memmap {
    /// Sorted by head PFN; their folios do not overlap.
    runs: Vec<Run>,
    /// `PG_anon_exclusive`, one bit per page allocated.
    exclusive: Vec<u64>,
    /// Bits used in `exclusive`.
    nbits: u64,
    /// The folio found last, as a [`Hit`] of its head page: mprotect looks
    /// up each page two or three times in a row (`vm_normal_page`,
    /// `page_folio`, `PageAnonExclusive`), a batch every page of one folio.
    /// Cleared when folios are added.
    last: Cell<Option<Hit>>,
}

/// What the memmap holds; the lookup cache is not part of it.
impl PartialEq for Memmap {
    fn eq(&self, other: &Self) -> bool {
        (&self.runs, &self.exclusive, self.nbits) == (&other.runs, &other.exclusive, other.nbits)
    }
}

impl Eq for Memmap {}

impl std::fmt::Debug for Memmap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memmap")
            .field("runs", &self.runs)
            .field("exclusive", &self.exclusive)
            .field("nbits", &self.nbits)
            .finish_non_exhaustive()
    }
}

/// `count` folios of one order and anon-ness, `stride` PFNs apart, whose
/// `PageAnonExclusive` bits follow one another from `excl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    head: u64,
    /// PFNs from one head to the next (0 while `count` is 1).
    stride: u64,
    count: u64,
    excl: u64,
    order: u8,
    anon: bool,
}

impl Run {
    fn nr_pages(&self) -> u64 {
        1 << self.order
    }

    fn end(&self) -> u64 {
        self.head + (self.count - 1) * self.stride + self.nr_pages()
    }

    /// The folio of this run holding `pfn`.
    #[inline]
    fn hit(&self, pfn: u64) -> Option<Hit> {
        let off = pfn.checked_sub(self.head)?;
        let k = match self.stride {
            0 => 0,
            s if s.is_power_of_two() => (off >> s.trailing_zeros()).min(self.count - 1),
            s => (off / s).min(self.count - 1),
        };
        let head = self.head + k * self.stride;
        let i = pfn - head;
        (i < self.nr_pages()).then_some(Hit {
            head,
            bit: self.excl + (k << self.order) + i,
            order: self.order,
            anon: self.anon,
        })
    }

    /// Extend the run by the folio at `head` whose bits start at `excl`, if
    /// it is the run's next one.
    fn extend(&mut self, head: u64, order: u8, anon: bool, excl: u64) -> bool {
        let n = self.nr_pages();
        if order != self.order || anon != self.anon || excl != self.excl + self.count * n {
            return false;
        }
        if self.count == 1 && head >= self.head + n {
            self.stride = head - self.head;
        } else if self.count == 1 || head != self.head + self.count * self.stride {
            return false;
        }
        self.count += 1;
        true
    }
}

/// The folio holding a PFN, and the PFN's `PageAnonExclusive` bit.
#[derive(Clone, Copy, Debug)]
struct Hit {
    head: u64,
    bit: u64,
    order: u8,
    anon: bool,
}

/// One run of the memmap and the PFNs whose lookup ends in it
/// ([`Memmap::run_view`]).
#[derive(Clone, Copy, Debug)]
struct RunView {
    lo: u64,
    hi: u64,
    run: Run,
}

impl RunView {
    /// Whether the view answers for `pfn`.
    #[inline]
    fn covers(&self, pfn: Pfn) -> bool {
        self.lo <= pfn.0 && pfn.0 < self.hi
    }
}

/// Where [`Memmap::small_meta_seq`] found the last order-0 folio: its run,
/// PFN and index in the run.
#[derive(Clone, Copy, Debug)]
pub struct SmallSeq {
    view: RunView,
    pfn: u64,
    k: u64,
}

/// See [`Memmap::small_meta`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmallMeta {
    /// No struct page (the model allocated none there).
    NoPage,
    /// A page of a folio of order 1 or more.
    Large,
    /// An order-0 folio.
    Small {
        /// `folio_test_anon()`.
        anon: bool,
        /// `PageAnonExclusive()`.
        exclusive: bool,
    },
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
    /// `exclusive[i]` gives `PageAnonExclusive` of page `i`, pages past its
    /// end are exclusive. A folio overlapping ones allocated before replaces
    /// them.
    #[inline]
    pub fn add_folio(&mut self, head: u64, order: u8, anon: bool, exclusive: &[bool]) {
        self.last.set(None);
        let n = 1u64 << order;
        let excl = self.nbits;
        self.nbits += n;
        self.exclusive.resize(self.nbits.div_ceil(64) as usize, 0);
        if anon {
            let listed = (exclusive.len() as u64).min(n);
            for (i, _) in exclusive[..listed as usize]
                .iter()
                .enumerate()
                .filter(|(_, &e)| e)
            {
                let bit = excl + i as u64;
                self.exclusive[(bit / 64) as usize] |= 1 << (bit % 64);
            }
            self.set_bits(excl + listed, excl + n);
        }
        if self.runs.last().is_none_or(|r| r.end() <= head) {
            self.push(head, order, anon, excl);
            return;
        }
        // Out of PFN order (never in the layouts): split into folios, drop
        // the overlapped ones, insert, and join again.
        let mut folios: Vec<(u64, u8, bool, u64)> = Vec::new();
        for r in self.runs.drain(..) {
            for k in 0..r.count {
                let h = r.head + k * r.stride;
                if h + r.nr_pages() <= head || h >= head + n {
                    folios.push((h, r.order, r.anon, r.excl + k * r.nr_pages()));
                }
            }
        }
        let at = folios.partition_point(|f| f.0 < head);
        folios.insert(at, (head, order, anon, excl));
        for (h, o, a, e) in folios {
            self.push(h, o, a, e);
        }
    }

    /// [`Memmap::add_folio`] of `count` folios of `order` with every page
    /// exclusive (`exclusive` empty), heads `stride` PFNs apart from `head`:
    /// the same memmap, without the per-folio work when they follow every
    /// folio added before (the layouts' case; `run_model` adds 262144 at 1G).
    pub fn add_folios(&mut self, head: u64, stride: u64, count: u64, order: u8, anon: bool) {
        let n = 1u64 << order;
        let ascending = self.runs.last().is_none_or(|r| r.end() <= head);
        if count < 3 || stride < n || !ascending {
            for k in 0..count {
                self.add_folio(head + k * stride, order, anon, &[]);
            }
            return;
        }
        self.last.set(None);
        let excl = self.nbits;
        self.nbits += count * n;
        self.exclusive.resize(self.nbits.div_ceil(64) as usize, 0);
        if anon {
            self.set_bits(excl, self.nbits);
        }
        // The first two as `add_folio` would push them; every later one
        // then extends the last run (same order, anon-ness and stride, bits
        // next in line), as `Run::extend` would accept it.
        self.push(head, order, anon, excl);
        self.push(head + stride, order, anon, excl + n);
        let r = self.runs.last_mut().expect("pushed");
        if r.count >= 2 && r.stride == stride && r.head + (r.count - 1) * stride == head + stride {
            r.count += count - 2;
        } else {
            for k in 2..count {
                self.push(head + k * stride, order, anon, excl + k * n);
            }
        }
    }

    /// Set the `exclusive` bits `[lo, hi)`, a word at a time.
    fn set_bits(&mut self, lo: u64, hi: u64) {
        let mut bit = lo;
        while bit < hi {
            let (w, b) = ((bit / 64) as usize, bit % 64);
            let n = (64 - b).min(hi - bit);
            self.exclusive[w] |= (u64::MAX >> (64 - n)) << b;
            bit += n;
        }
    }

    /// Append a folio after every other.
    fn push(&mut self, head: u64, order: u8, anon: bool, excl: u64) {
        if let Some(r) = self.runs.last_mut() {
            if r.extend(head, order, anon, excl) {
                return;
            }
        }
        self.runs.push(Run {
            head,
            stride: 0,
            count: 1,
            excl,
            order,
            anon,
        });
    }

    /// The folio holding `pfn`.
    #[inline]
    fn hit(&self, pfn: u64) -> Option<Hit> {
        if let Some(h) = self.last.get() {
            let i = pfn.wrapping_sub(h.head);
            if i < 1 << h.order {
                return Some(Hit {
                    bit: h.bit + i,
                    ..h
                });
            }
        }
        let h = self.hit_uncached(pfn)?;
        let i = pfn - h.head;
        self.last.set(Some(Hit {
            bit: h.bit - i,
            ..h
        }));
        Some(h)
    }

    /// [`Memmap::hit`] from the runs.
    #[inline]
    fn hit_uncached(&self, pfn: u64) -> Option<Hit> {
        let r = match self.runs.as_slice() {
            [r] => r,
            runs => &runs[runs.partition_point(|r| r.head <= pfn).checked_sub(1)?],
        };
        r.hit(pfn)
    }

    /// The run [`Memmap::small_meta`] searches for `pfn`, with the PFNs it
    /// searches that run for.
    fn run_view(&self, pfn: Pfn) -> Option<RunView> {
        let i = match self.runs.len() {
            1 => 0,
            _ => self
                .runs
                .partition_point(|r| r.head <= pfn.0)
                .checked_sub(1)?,
        };
        Some(RunView {
            lo: if i == 0 { 0 } else { self.runs[i].head },
            hi: self.runs.get(i + 1).map_or(u64::MAX, |r| r.head),
            run: self.runs[i],
        })
    }

    /// [`Memmap::small_meta`] of `pfn`, looked up after `seq`'s (a run of
    /// PTEs maps one run's folios in turn): when `pfn` is the order-0 folio
    /// after the one `seq` found, in the same run, no search or division.
    #[inline]
    pub fn small_meta_seq(&self, seq: &mut Option<SmallSeq>, pfn: Pfn) -> SmallMeta {
        if let Some(c) = seq {
            let r = &c.view.run;
            // Folio k + 1 of an order-0 run: off = (k + 1) * stride, so
            // `Run::hit` finds k + 1 and bit excl + k + 1.
            if r.stride > 0 && pfn.0 == c.pfn + r.stride && c.k + 1 < r.count && pfn.0 < c.view.hi {
                c.pfn = pfn.0;
                c.k += 1;
                return SmallMeta::Small {
                    anon: r.anon,
                    exclusive: self.bit(r.excl + c.k),
                };
            }
        }
        let hit = match self.run_view(pfn) {
            Some(view) if view.covers(pfn) => {
                let hit = view.run.hit(pfn.0);
                *seq = hit.filter(|h| h.order == 0).map(|h| SmallSeq {
                    view,
                    pfn: pfn.0,
                    k: h.bit - view.run.excl,
                });
                hit
            }
            _ => {
                *seq = None;
                self.hit_uncached(pfn.0)
            }
        };
        self.meta_of(hit)
    }

    #[inline]
    fn bit(&self, bit: u64) -> bool {
        self.exclusive[(bit / 64) as usize] >> (bit % 64) & 1 != 0
    }

    /// The struct page of `pfn`, if the model allocated one.
    #[inline]
    pub fn page(&self, pfn: Pfn) -> Option<PageMeta> {
        self.hit(pfn.0).map(|h| PageMeta {
            head: h.head,
            order: h.order,
            anon: h.anon,
            anon_exclusive: self.bit(h.bit),
        })
    }

    /// Whether `pfn` is an anon page without `PageAnonExclusive`, without
    /// the lookup cache: the syscall-return check scans the whole table,
    /// where each page of a small folio misses it.
    #[inline]
    pub fn anon_not_exclusive(&self, pfn: Pfn) -> bool {
        self.hit_uncached(pfn.0)
            .is_some_and(|h| h.anon && !self.bit(h.bit))
    }

    /// What `pfn` is for the run replay of `change_pte_range()`: no struct
    /// page, a page of a large folio, or an order-0 folio with its anon and
    /// `PageAnonExclusive` flags.
    #[inline]
    pub fn small_meta(&self, pfn: Pfn) -> SmallMeta {
        self.meta_of(self.hit_uncached(pfn.0))
    }

    #[inline]
    fn meta_of(&self, hit: Option<Hit>) -> SmallMeta {
        match hit {
            None => SmallMeta::NoPage,
            Some(h) if h.order > 0 => SmallMeta::Large,
            Some(h) => SmallMeta::Small {
                anon: h.anon,
                exclusive: self.bit(h.bit),
            },
        }
    }

    /// Whether every anon page has `PageAnonExclusive` (then no PTE can map
    /// a non-exclusive one): a word at a time over the runs' bits.
    pub fn every_anon_page_exclusive(&self) -> bool {
        self.runs.iter().filter(|r| r.anon).all(|r| {
            let (lo, hi) = (r.excl, r.excl + (r.count << r.order));
            let mut bit = lo;
            while bit < hi {
                let (w, b) = ((bit / 64) as usize, bit % 64);
                let n = (64 - b).min(hi - bit);
                let want = (u64::MAX >> (64 - n)) << b;
                if self.exclusive[w] & want != want {
                    return false;
                }
                bit += n;
            }
            true
        })
    }

    /// Set or clear `PG_anon_exclusive` of `pfn` (an anon page); false when
    /// the model allocated no struct page there.
    pub fn set_anon_exclusive(&mut self, pfn: Pfn, exclusive: bool) -> bool {
        let Some(h) = self.hit(pfn.0) else {
            return false;
        };
        let word = &mut self.exclusive[(h.bit / 64) as usize];
        if exclusive && h.anon {
            *word |= 1 << (h.bit % 64);
        } else {
            *word &= !(1 << (h.bit % 64));
        }
        true
    }

    /// The folio of `pfn` without counting (checks and setup).
    #[inline]
    pub fn folio_of(&self, pfn: Pfn) -> Option<Folio> {
        self.hit(pfn.0).map(|h| Folio {
            head: Pfn(h.head),
            order: h.order,
            anon: h.anon,
        })
    }
}

/// `vm_normal_page()`: the page mapped by a present `pte`, or `None` for
/// special mappings and PFNs without a struct page. Out of line (mm/memory.c).
#[inline]
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
    cx.mm.memmap.folio_of(pfn).map(|_| pfn)
}

/// `page_folio()`: reads `page->compound_head`.
#[inline]
pub fn page_folio<A: Arch>(cx: &mut Cx<A>, page: Pfn) -> Folio {
    cx.touch_page(page);
    cx.mm
        .memmap
        .folio_of(page)
        .expect("page_folio on a page without struct page")
}

/// `folio_test_large()`: reads the head page's flags.
#[inline]
pub fn folio_test_large<A: Arch>(cx: &mut Cx<A>, folio: &Folio) -> bool {
    cx.touch_page(folio.head);
    folio.is_large()
}

/// `folio_test_anon()`: reads `folio->mapping`.
#[inline]
pub fn folio_test_anon<A: Arch>(cx: &mut Cx<A>, folio: &Folio) -> bool {
    cx.touch_page(folio.head);
    folio.anon
}

/// `PageAnon()` on any page: `folio_test_anon(page_folio(page))`.
#[inline]
pub fn page_anon<A: Arch>(cx: &mut Cx<A>, page: Pfn) -> bool {
    let folio = page_folio(cx, page);
    folio_test_anon(cx, &folio)
}

/// `PageAnonExclusive()`: `PG_anon_exclusive` of this very page.
#[inline]
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
/// `nr`, as mprotect calls it: arm64 calls a `.constprop.0` clone;
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
        fn add_folios_is_add_folio_repeated(
            before in proptest::collection::vec((0u64..3, 0u8..=4, any::<bool>()), 0..4),
            groups in proptest::collection::vec((0u64..3, 0u8..=4, any::<bool>(), 0u64..3, 0u64..6), 1..4),
        ) {
            // Folios placed one after another, some singly, then groups of
            // folios `gap` pages apart, some sharing the last one's order.
            let (mut one, mut bulk) = (Memmap::default(), Memmap::default());
            let mut next = 1u64 << 20;
            for (gap, order, anon) in before {
                let n = 1u64 << order;
                let head = (next + gap * n).div_ceil(n) * n;
                next = head + n;
                one.add_folio(head, order, anon, &[]);
                bulk.add_folio(head, order, anon, &[]);
            }
            for (gap, order, anon, extra, count) in groups {
                let n = 1u64 << order;
                let head = (next + gap * n).div_ceil(n) * n;
                let stride = n + extra * n;
                for k in 0..count {
                    one.add_folio(head + k * stride, order, anon, &[]);
                }
                bulk.add_folios(head, stride, count, order, anon);
                next = head + count * stride;
                prop_assert_eq!(&one.runs, &bulk.runs);
                prop_assert_eq!(&one, &bulk);
            }
        }

        #[test]
        fn compact_memmap_answers_as_the_dense_one(
            fs in folios(),
            ascending in any::<bool>(),
            uniform in any::<bool>(),
            spread in 0u32..12,
            cut in 0usize..1100,
            flips in proptest::collection::vec((0u64..1 << 16, any::<bool>()), 0..20),
            probes in proptest::collection::vec(any::<u64>(), 200),
        ) {
            let (mut m, mut r) = (Memmap::default(), Reference::default());
            let mut fs = fs;
            if ascending {
                fs.sort_by_key(|f| f.0);
            }
            if uniform {
                // One order at one stride, as run_model places them: a run,
                // broken where the anon flag changes.
                let (slot, order) = (fs[0].0, fs[0].1);
                for f in &mut fs {
                    (f.0, f.1) = (slot, order);
                    f.3.resize(1 << order, true);
                }
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
                // Pages past the listed ones are exclusive.
                let listed = excl.len().min(cut);
                let full: Vec<bool> =
                    (0..excl.len()).map(|i| i >= listed || excl[i]).collect();
                m.add_folio(head, *order, *anon, &excl[..listed]);
                r.add_folio(head, *order, *anon, &full);
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
            prop_assert_eq!(
                m.every_anon_page_exclusive(),
                r.0.values().all(|p| !p.anon || p.anon_exclusive)
            );
            // Every page and its neighbours, and PFNs anywhere around.
            let lo = r.0.keys().next().copied().unwrap_or(0).saturating_sub(600);
            let hi = r.0.keys().last().copied().unwrap_or(0) + 600;
            let near = r.0.keys().flat_map(|&p| [p.saturating_sub(1), p, p + 1]);
            let far = probes.iter().map(|x| lo + x % (hi - lo));
            for pfn in near.chain(far).chain([0, 1 << 19, u64::MAX]) {
                let want = r.0.get(&pfn).copied();
                prop_assert_eq!(m.page(Pfn(pfn)), want, "pfn {:#x}", pfn);
                prop_assert!(!m.every_anon_page_exclusive() || !m.anon_not_exclusive(Pfn(pfn)));
                // Lookups in sequence: the next folios of a run, and
                // anything between.
                let mut seq = None;
                for q in (0..6).map(|j| pfn + j * 512).chain([pfn + 1, pfn, pfn + 512]) {
                    prop_assert_eq!(m.small_meta_seq(&mut seq, Pfn(q)), m.small_meta(Pfn(q)));
                }
                prop_assert_eq!(
                    m.anon_not_exclusive(Pfn(pfn)),
                    want.is_some_and(|p| p.anon && !p.anon_exclusive)
                );
                prop_assert_eq!(
                    m.folio_of(Pfn(pfn)),
                    want.map(|p| Folio { head: Pfn(p.head), order: p.order, anon: p.anon })
                );
            }
        }
    }
}
