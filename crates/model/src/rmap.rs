//! Reverse-map young-bit checks: `folio_referenced()` and
//! `folio_referenced_one()`, the classic-LRU and MGLRU variants, before and
//! after Baolin Wang's 2026 batching.
//!
//! Kernel counterpart: mm/rmap.c (`folio_referenced`,
//! `folio_referenced_one`, `page_vma_mapped_walk` as seen from its callback),
//! mm/vmscan.c (`lru_gen_look_around`: only its first step, the young test of
//! the target PTEs, is modelled), include/linux/mmu_notifier.h (the `_notify`
//! wrappers: no notifier is registered, so they add nothing). docs/kernel.md
//! §8.1–8.2.
//!
//! * v6.16 … v6.19 ([`RmapImpl::PerPte`]): one `ptep_clear_flush_young_notify()`
//!   (classic) or `ptep_test_and_clear_young()` (MGLRU) per mapped PTE. On
//!   arm64 a contig entry clears the whole block each time (C² CAS per block).
//! * 2026 ([`RmapImpl::Batched`]): `folio_pte_batch()` over the folio within
//!   `pmd_addr_end()`, then one `clear_flush_young_ptes(nr)` (classic) or
//!   `test_and_clear_young_ptes(nr)` (MGLRU) per batch.
//!
//! The walk loads each PTE of the folio's range once (`check_pte()`'s
//! `ptep_get()`, a contpte gather on arm64); `map_pte()`'s lockless load is
//! not counted.

use serde::{Deserialize, Serialize};

use crate::arch::{young_ptes_series, Arch};
use crate::cx::Cx;
use crate::folio::{folio_pte_batch_flags, folio_test_large, Folio, FpbFlags};
use crate::mm::{pmd_addr_end, Vma};
use crate::strategy::{KFn, Kernel, Strategy};
use crate::types::Pfn;

/// Which `folio_referenced_one()` the kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RmapImpl {
    /// v6.16 … v6.19: one young-bit helper call per mapped PTE.
    PerPte,
    /// v7.0+ (Baolin Wang, "support batched checks of the references for
    /// large folios"; the arm64 `test_and_clear_young_ptes` of v7.1): one
    /// call per `folio_pte_batch()` batch.
    Batched,
}

impl RmapImpl {
    /// The rmap behaviour of a kernel (see [`young_ptes_series`]).
    pub fn of(kernel: &Kernel) -> Self {
        if young_ptes_series(kernel) {
            RmapImpl::Batched
        } else {
            RmapImpl::PerPte
        }
    }

    /// The rmap behaviour of a strategy: v6.16 … v6.19 per PTE, v7.0 on
    /// batched.
    pub fn of_strategy(strategy: Strategy) -> Self {
        Self::of(&strategy.kernel_features())
    }

    /// One line for `--list-strategies`.
    pub fn summary(self) -> &'static str {
        match self {
            RmapImpl::PerPte => {
                "reclaim: per-PTE ptep_clear_flush_young (arm64 contig: whole block per PTE, C^2 CAS)"
            }
            RmapImpl::Batched => {
                "reclaim: folio_pte_batch + clear_flush_young_ptes / test_and_clear_young_ptes (Baolin Wang, v7.0/v7.1)"
            }
        }
    }
}

/// Which LRU implementation asks (`lru_gen_enabled()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Lru {
    /// Classic active/inactive lists: `clear_flush_young` (flushes where the
    /// arch does).
    Classic,
    /// MGLRU: `lru_gen_look_around()` → test-and-clear young, never a flush.
    Mglru,
}

/// `struct folio_referenced_arg` (the part the model needs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FolioReferencedArg {
    /// PTEs still to find (`folio_mapcount()` at the start).
    pub mapcount: u64,
    /// VMAs in which the folio was referenced (the return value).
    pub referenced: u64,
}

/// `folio_referenced()`: how many mappings (VMAs) of `folio` referenced it,
/// clearing the young bits it finds. `va` is the virtual page of the folio's
/// page 0 in `vma` (the only mapping modelled: `rmap_walk()` over one
/// anon_vma / i_mmap entry).
pub fn folio_referenced<A: Arch>(cx: &mut Cx<A>, vma: &Vma, va: u64, head: Pfn, lru: Lru) -> u64 {
    cx.counters.folios_scanned += 1;
    let folio = cx
        .mm
        .memmap
        .folio_of(head)
        .expect("folio_referenced on a PFN without struct page");
    // folio_mapcount(): the folio's (large) mapcount field.
    cx.touch_page(folio.head);
    let mapcount = mapped_ptes(cx, vma, va, &folio);
    if mapcount == 0 {
        return 0;
    }
    let mut arg = FolioReferencedArg {
        mapcount,
        referenced: 0,
    };
    folio_referenced_one(cx, vma, va, &folio, &mut arg, lru);
    arg.referenced
}

/// PTEs of `vma` mapping pages of `folio` (setup knowledge, not counted).
fn mapped_ptes<A: Arch>(cx: &Cx<A>, vma: &Vma, va: u64, folio: &Folio) -> u64 {
    let (lo, hi) = walk_range(vma, va, folio);
    (lo..hi)
        .filter(|&a| maps_folio(cx, a, va, folio, cx.peek(a)))
        .count() as u64
}

fn walk_range(vma: &Vma, va: u64, folio: &Folio) -> (u64, u64) {
    (va.max(vma.start), (va + folio.nr_pages()).min(vma.end))
}

/// `check_pte()`: present and mapping the expected page of the folio.
fn maps_folio<A: Arch>(cx: &Cx<A>, addr: u64, va: u64, folio: &Folio, pte: A::Pte) -> bool {
    cx.arch.pte_present(pte) && cx.arch.pte_pfn(pte).0 == folio.head.0 + (addr - va)
}

/// `folio_referenced_one()` for the one VMA mapping `folio` at `va`.
pub fn folio_referenced_one<A: Arch>(
    cx: &mut Cx<A>,
    vma: &Vma,
    va: u64,
    folio: &Folio,
    arg: &mut FolioReferencedArg,
    lru: Lru,
) -> bool {
    let imp = RmapImpl::of(&cx.kernel);
    let ptrs = cx.arch.ptrs_per_pte();
    let (lo, hi) = walk_range(vma, va, folio);
    let mut referenced = 0u64;
    let mut ptes = 0u64;
    let mut addr = lo;
    // page_vma_mapped_walk()
    while addr < hi {
        let pte = A::ptep_get(cx, addr);
        if !maps_folio(cx, addr, va, folio, pte) {
            addr += 1;
            continue;
        }
        let mut nr = 1;
        if imp == RmapImpl::Batched && folio_test_large(cx, folio) {
            let max_nr = pmd_addr_end(addr, vma.end, ptrs) - addr;
            let mut pteval = A::ptep_get(cx, addr);
            cx.call(KFn::FolioPteBatch); // mm/util.c, out of line
            nr = folio_pte_batch_flags(cx, folio, addr, &mut pteval, max_nr, FpbFlags::empty());
        }
        cx.record_batch(nr);
        let young = match (lru, imp) {
            // ptep_clear_flush_young_notify()
            (Lru::Classic, RmapImpl::PerPte) => A::ptep_clear_flush_young(cx, addr),
            // clear_flush_young_ptes_notify()
            (Lru::Classic, RmapImpl::Batched) => A::clear_flush_young_ptes(cx, addr, nr),
            (Lru::Mglru, _) => lru_gen_look_around(cx, addr, nr),
        };
        if young {
            referenced += 1;
        }
        ptes += nr;
        arg.mapcount = arg.mapcount.saturating_sub(nr);
        if imp == RmapImpl::Batched && ptes == folio.nr_pages() {
            break; // the whole folio was batched
        }
        addr += nr;
    }
    if referenced > 0 {
        arg.referenced += 1;
    }
    arg.mapcount != 0
}

/// `lru_gen_look_around()`, first step only: test-and-clear the young bits
/// of the `nr` target PTEs (2026: `test_and_clear_young_ptes_notify()`;
/// before: `ptep_test_and_clear_young_notify()` with `nr == 1`); no flush.
/// The scan of the surrounding PTEs and the generation updates are not
/// modelled.
pub fn lru_gen_look_around<A: Arch>(cx: &mut Cx<A>, addr: u64, nr: u64) -> bool {
    if nr == 1 {
        A::ptep_test_and_clear_young(cx, addr)
    } else {
        A::test_and_clear_young_ptes(cx, addr, nr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn young_series_from_v7_0() {
        for s in Strategy::ALL {
            let want = if s >= Strategy::V7_0 {
                RmapImpl::Batched
            } else {
                RmapImpl::PerPte
            };
            assert_eq!(RmapImpl::of_strategy(s), want, "{s}");
        }
    }
}
