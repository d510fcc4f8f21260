//! Generic page-table helpers: the bodies of the `#ifndef` fallbacks.
//!
//! Kernel counterpart: include/linux/pgtable.h (v6.17 and the 2026 mm tree:
//! `ptep_get`, `set_ptes`, `get_and_clear_full_ptes`,
//! `modify_prot_start_ptes`, `modify_prot_commit_ptes`). Every function is
//! the default body of the matching [`Arch`] hook; an arch that overrides the
//! hook does not reach it. Page-table lock held by the caller; all entries of
//! a batch lie in one PTE table and map consecutive pages of one folio.

use crate::arch::Arch;
use crate::cx::Cx;
use crate::mm::Vma;

/// `ptep_get()`: one `READ_ONCE` of the entry.
#[inline]
pub fn ptep_get<A: Arch>(cx: &mut Cx<A>, addr: u64) -> A::Pte {
    cx.load(addr)
}

/// `set_ptes()`: store `pte`, `pte + 1 page`, … into `nr` entries.
///
/// Cost: `nr` stores.
#[inline]
pub fn set_ptes<A: Arch>(cx: &mut Cx<A>, addr: u64, pte: A::Pte, nr: u64) {
    let arch = cx.arch;
    let mut pte = pte;
    for i in 0..nr {
        cx.store(addr + i, pte);
        pte = arch.pte_advance_pfn(pte, 1);
    }
}

/// `ptep_get_and_clear()`: atomic exchange with 0 (x86 `xchg`).
#[inline]
pub fn ptep_get_and_clear<A: Arch>(cx: &mut Cx<A>, addr: u64) -> A::Pte {
    cx.xchg0(addr)
}

/// `get_and_clear_full_ptes()`: clear `nr` entries, return the first one's
/// old value with dirty/young OR-ed over all of them.
pub fn get_and_clear_full_ptes<A: Arch>(cx: &mut Cx<A>, addr: u64, nr: u64, _full: bool) -> A::Pte {
    let arch = cx.arch;
    let mut pte = A::ptep_get_and_clear(cx, addr);
    for i in 1..nr {
        let tmp = A::ptep_get_and_clear(cx, addr + i);
        if arch.pte_dirty(tmp) {
            pte = arch.pte_mkdirty(pte);
        }
        if arch.pte_young(tmp) {
            pte = arch.pte_mkyoung(pte);
        }
    }
    pte
}

/// `modify_prot_start_ptes()`: start a protection change on `nr` entries;
/// the returned value may carry young/dirty bits the first entry lacked.
#[inline]
pub fn modify_prot_start_ptes<A: Arch>(cx: &mut Cx<A>, vma: &Vma, addr: u64, nr: u64) -> A::Pte {
    let arch = cx.arch;
    let mut pte = A::ptep_modify_prot_start(cx, vma, addr);
    for i in 1..nr {
        let tmp = A::ptep_modify_prot_start(cx, vma, addr + i);
        if arch.pte_dirty(tmp) {
            pte = arch.pte_mkdirty(pte);
        }
        if arch.pte_young(tmp) {
            pte = arch.pte_mkyoung(pte);
        }
    }
    pte
}

/// `modify_prot_commit_ptes()`: commit `pte`, `pte + 1 page`, … to `nr` entries.
#[inline]
pub fn modify_prot_commit_ptes<A: Arch>(
    cx: &mut Cx<A>,
    vma: &Vma,
    addr: u64,
    old: A::Pte,
    pte: A::Pte,
    nr: u64,
) {
    let arch = cx.arch;
    for i in 0..nr {
        let o = arch.pte_advance_pfn(old, i);
        let p = arch.pte_advance_pfn(pte, i);
        A::ptep_modify_prot_commit(cx, vma, addr + i, o, p);
    }
}
