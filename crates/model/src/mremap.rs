//! mremap: `move_page_tables()` → `move_ptes()`, per PTE (v6.16) and batched
//! with `mremap_folio_pte_batch()` (v6.17+).
//!
//! Kernel counterpart: mm/mremap.c — v6.16 `move_ptes()` (reconstructed from
//! the v6.17 diff context, docs/kernel.md §7.1), v6.17 f822a9a81a31 with the
//! hotfix 0b5be138ce00 (no folio lookup when `pte_batch_hint() == 1`) and
//! 04d1c9d60c6e (`FPB_RESPECT_WRITE`, v6.18 and 6.17.y; modelled as part of
//! the batched strategy). `move_normal_pmd()` moves a whole PTE table when an
//! extent covers a full PMD at both ends (x86-64 and arm64 select
//! `CONFIG_HAVE_MOVE_PMD`, in v6.16 and later alike). Left out: rmap locks,
//! uffd-wp marker handling, `try_realign_addr()` (it needs the move to start
//! at its VMA's start off a PMD boundary), PUD-level moves, hugetlb,
//! `mmu_notifier`.

use crate::arch::{Arch, PteValue};
use crate::cx::Cx;
use crate::folio::{folio_pte_batch_flags, folio_test_large, page_folio, vm_normal_page, FpbFlags};
use crate::mm::{pmd_addr_end, Vma};
use crate::strategy::{KFn, Strategy};
use crate::workload::{check_invariants, CallRecord};
use crate::ModelError;

/// `mremap_folio_pte_batch()`: 1 unless the entry is part of a hinted batch
/// (arm64 contpte) of a large folio.
pub fn mremap_folio_pte_batch<A: Arch>(
    cx: &mut Cx<A>,
    vma: &Vma,
    addr: u64,
    pte: A::Pte,
    max_nr: u64,
) -> u64 {
    if max_nr == 1 {
        return 1;
    }
    // 0b5be138ce00: avoid the folio lookup when there is no chance of a batch.
    if A::pte_batch_hint(cx, addr, pte) == 1 {
        return 1;
    }
    let Some(page) = vm_normal_page(cx, vma, addr, pte) else {
        return 1;
    };
    let folio = page_folio(cx, page);
    if !folio_test_large(cx, &folio) {
        return 1;
    }
    let mut pte = pte;
    // 6.17.8 calls the out-of-line folio_pte_batch() (mm/util.c) here; from
    // v6.18 (04d1c9d60c6e, FPB_RESPECT_WRITE) folio_pte_batch_flags() is
    // inlined into move_ptes(): no entry.
    if cx.kernel.release == Strategy::V6_17 {
        cx.call(KFn::FolioPteBatch);
    }
    folio_pte_batch_flags(cx, &folio, addr, &mut pte, max_nr, FpbFlags::RESPECT_WRITE)
}

/// `move_soft_dirty_pte()`: a moved present PTE is marked soft-dirty.
fn move_soft_dirty_pte<A: Arch>(arch: &A, pte: A::Pte) -> A::Pte {
    if arch.has_soft_dirty() && arch.pte_present(pte) {
        arch.pte_mksoft_dirty(pte)
    } else {
        pte
    }
}

/// `move_ptes()` for one PMD extent: move `[old_addr, old_end)` to `new_addr`,
/// then one `flush_tlb_range()` of the old extent if anything present moved.
pub fn move_ptes<A: Arch>(cx: &mut Cx<A>, vma: &Vma, old_addr: u64, old_end: u64, new_addr: u64) {
    let arch = cx.arch;
    let len = old_end - old_addr;
    let mut force_flush = false;
    let (mut old_addr, mut new_addr) = (old_addr, new_addr);
    while old_addr < old_end {
        let mut nr_ptes = 1;
        let max_nr_ptes = old_end - old_addr;
        let old_pte = A::ptep_get(cx, old_addr);
        if !old_pte.is_none() {
            if arch.pte_present(old_pte) {
                if cx.kernel.mremap_batched {
                    nr_ptes = mremap_folio_pte_batch(cx, vma, old_addr, old_pte, max_nr_ptes);
                }
                force_flush = true;
            }
            let pte = if cx.kernel.mremap_batched {
                A::get_and_clear_full_ptes(cx, old_addr, nr_ptes, false)
            } else {
                A::ptep_get_and_clear(cx, old_addr)
            };
            let pte = move_soft_dirty_pte(&arch, pte);
            A::set_ptes(cx, new_addr, pte, nr_ptes);
            cx.record_batch(nr_ptes);
            cx.counters.ptes_changed += nr_ptes;
        }
        old_addr += nr_ptes;
        new_addr += nr_ptes;
    }
    if force_flush {
        A::flush_tlb_range(cx, old_end - len, old_end);
    }
}

/// `move_normal_pmd()`: the PTE table of the PMD extent at `old` is hung
/// under the PMD of `new` as it is (no PTE is read or written, so no
/// `move_soft_dirty_pte()` and no batching), then one `flush_tlb_range()` of
/// the old PMD. Refused when the destination has a table already (the model
/// has no tables: any entry there stands for one). The entries become
/// walkable at `new` at once, so valid ones enter the TLB model.
fn move_normal_pmd<A: Arch>(cx: &mut Cx<A>, old: u64, new: u64, ptrs: u64) -> bool {
    if (new..new + ptrs).any(|a| !cx.peek(a).is_none()) {
        return false;
    }
    let arch = cx.arch;
    for i in 0..ptrs {
        let pte = cx.peek(old + i);
        cx.poke(old + i, A::Pte::from_val(0));
        cx.poke(new + i, pte);
        if let Some(tlb) = cx.tlb.as_mut() {
            if arch.pte_hw_valid(pte) {
                tlb.cache(new + i, pte);
            }
        }
    }
    cx.counters.pmd_moves += 1;
    A::flush_tlb_range(cx, old, old + ptrs);
    true
}

/// `mremap(old, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, new)`: move the page
/// tables PMD extent by PMD extent (`move_page_tables()`) and the VMA with
/// them.
///
/// # Errors
/// [`ModelError::Enomem`] when the old range is not inside one VMA.
pub fn mremap<A: Arch>(cx: &mut Cx<A>, old: u64, len: u64, new: u64) -> Result<(), ModelError> {
    let old_end = old + len;
    let Some(vma) = cx.mm.find_vma(old).copied().filter(|v| v.end >= old_end) else {
        return Err(ModelError::Enomem {
            start: old,
            end: old_end,
        });
    };
    let ptrs = cx.arch.ptrs_per_pte();
    let (mut o, mut n) = (old, new);
    while o < old_end {
        // get_extent(): up to the next PMD boundary of either address.
        let extent =
            (pmd_addr_end(o, old_end, ptrs) - o).min(pmd_addr_end(n, n + (old_end - o), ptrs) - n);
        // The model has no tables: a full extent with an entry stands for a
        // table to move; one of none entries is left to move_ptes(), which
        // finds nothing present and flushes nothing.
        let table = (o..o + extent).any(|a| !cx.peek(a).is_none());
        if !(extent == ptrs && table && move_normal_pmd(cx, o, n, ptrs)) {
            move_ptes(cx, &vma, o, o + extent, n);
        }
        o += extent;
        n += extent;
    }
    let arch = cx.arch;
    cx.mm.split_at(old);
    cx.mm.split_at(old_end);
    cx.mm.vmas.retain(|v| !(v.start >= old && v.end <= old_end));
    cx.mm.add_vma(&arch, new, new + len, vma.flags);
    Ok(())
}

/// The mremap-move workload (seed 002): one counted
/// `mremap(MAYMOVE|FIXED)` of `[start, end)` to the next free, equally
/// aligned address.
///
/// # Errors
/// A broken invariant.
pub fn mremap_workload<A: Arch>(
    cx: &mut Cx<A>,
    base: u64,
    start: u64,
    end: u64,
    mapped: u64,
) -> Result<CallRecord, ModelError> {
    let len = end - start;
    let new = base + mapped + (start - base);
    let (wb, wn) = (cx.mm.pt.base(), cx.mm.pt.len());
    cx.tlb_fill(wb, wb + wn);
    mremap(cx, start, len, new)?;
    check_invariants(cx)?;
    Ok(CallRecord {
        label: "mremap(MREMAP_MAYMOVE|MREMAP_FIXED)".to_string(),
        counters: cx.take_counters(),
        flushes: cx.take_flushes(),
    })
}
