//! arm64 raw page-table accessors: the `__`-prefixed helpers that touch one
//! hardware entry each, below the contpte layer.
//!
//! Kernel counterpart: arch/arm64/include/asm/pgtable.h (`__ptep_get`,
//! `__set_ptes`, `__ptep_get_and_clear`, `__get_and_clear_full_ptes`), 2026
//! mm tree. `__set_ptes` on user entries issues no barrier.

use crate::arch::Arch;
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
