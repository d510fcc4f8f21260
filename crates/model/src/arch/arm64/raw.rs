//! arm64 raw page-table accessors: the `__`-prefixed helpers that touch one
//! hardware entry each, below the contpte layer.
//!
//! Kernel counterpart: arch/arm64/include/asm/pgtable.h (`__ptep_get`,
//! `__set_ptes`, `__ptep_get_and_clear`, `__get_and_clear_full_ptes`,
//! `__ptep_test_and_clear_young`, `__ptep_clear_flush_young`), 2026 mm tree.
//! `__set_ptes` on user entries issues no barrier.

use crate::arch::{atomic_write, young_flush, Arch};
use crate::cx::Cx;

use super::Arm64;

/// `__ptep_get()`: one `READ_ONCE`.
#[doc(alias = "__ptep_get")]
pub fn ptep_get(cx: &mut Cx<Arm64>, addr: u64) -> <Arm64 as Arch>::Pte {
    cx.load(addr)
}

/// `__set_ptes()`: `nr` stores, PFN advancing.
#[doc(alias = "__set_ptes")]
pub fn set_ptes(cx: &mut Cx<Arm64>, addr: u64, pte: <Arm64 as Arch>::Pte, nr: u64) {
    let arch = cx.arch;
    let mut pte = pte;
    for i in 0..nr {
        cx.store(addr + i, pte);
        pte = arch.pte_advance_pfn(pte, 1);
    }
}

/// `__ptep_get_and_clear()`: `xchg_relaxed(ptep, 0)`.
#[doc(alias = "__ptep_get_and_clear")]
pub fn ptep_get_and_clear(cx: &mut Cx<Arm64>, addr: u64) -> <Arm64 as Arch>::Pte {
    cx.xchg0(addr)
}

/// `__get_and_clear_full_ptes()`: clear `nr` entries, OR young/dirty.
#[doc(alias = "__get_and_clear_full_ptes")]
pub fn get_and_clear_full_ptes(cx: &mut Cx<Arm64>, addr: u64, nr: u64) -> <Arm64 as Arch>::Pte {
    let arch = cx.arch;
    let mut pte = ptep_get_and_clear(cx, addr);
    for i in 1..nr {
        let tmp = ptep_get_and_clear(cx, addr + i);
        if arch.pte_dirty(tmp) {
            pte = arch.pte_mkdirty(pte);
        }
        if arch.pte_young(tmp) {
            pte = arch.pte_mkyoung(pte);
        }
    }
    pte
}

/// `__ptep_test_and_clear_young()`: one `__ptep_get()`, then a
/// `cmpxchg_relaxed()` loop clearing `PTE_AF` — one CAS even when the entry
/// is already old (no contention is modelled, so the loop runs once).
#[doc(alias = "__ptep_test_and_clear_young")]
pub fn ptep_test_and_clear_young(cx: &mut Cx<Arm64>, addr: u64) -> bool {
    cx.counters.young_tests += 1;
    let pte = ptep_get(cx, addr);
    cx.counters.young_clears += 1;
    let arch = cx.arch;
    atomic_write(cx, addr, arch.pte_mkold(pte));
    arch.pte_young(pte)
}

/// `__ptep_clear_flush_young()`: test-and-clear, then when it was young
/// `__flush_tlb_page_nosync()` (one TLBI, no trailing DSB).
#[doc(alias = "__ptep_clear_flush_young")]
pub fn ptep_clear_flush_young(cx: &mut Cx<Arm64>, addr: u64) -> bool {
    let young = ptep_test_and_clear_young(cx, addr);
    if young {
        young_flush(cx, addr, addr + 1);
    }
    young
}
