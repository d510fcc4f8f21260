//! Equivalence of final page-table states between kernel behaviours.
//!
//! Kernel counterpart: none — this is docs/kernel.md §4.6 and §10.1 turned
//! into a comparison. Batched mprotect must end in the per-PTE state except
//! for what the kernel deliberately does at batch granularity: young/dirty
//! are OR-merged over a batch (x86 `pte_mkdirty` then also sets soft-dirty),
//! a shared writenotify VMA may upgrade a clean PTE whose batch sibling was
//! dirty, and the arm64 CONT bit may differ.

use crate::arch::Arch;
use crate::mm::PageTable;

/// Compare `batched` with `per_pte` entry by entry over `[start, end)`.
///
/// # Errors
/// The first entry that differs beyond the documented merge.
pub fn equivalent<A: Arch>(
    arch: &A,
    batched: &PageTable<A::Pte>,
    per_pte: &PageTable<A::Pte>,
    start: u64,
    end: u64,
    shared_upgrade_allowed: bool,
) -> Result<(), String> {
    for addr in start..end {
        let (a, b) = (batched.get(addr), per_pte.get(addr));
        if a == b {
            continue;
        }
        if arch.pte_present(a) != arch.pte_present(b) {
            return Err(format!(
                "page {addr:#x}: batched {a:?} vs per-PTE {b:?} (presence)"
            ));
        }
        // Merges only ever add young/dirty.
        if (arch.pte_young(b) && !arch.pte_young(a)) || (arch.pte_dirty(b) && !arch.pte_dirty(a)) {
            return Err(format!(
                "page {addr:#x}: batched {a:?} lost young/dirty of per-PTE {b:?}"
            ));
        }
        let norm = |p: A::Pte, drop_sd: bool, drop_w: bool| {
            let mut p = arch.pte_mknoncont(arch.pte_mkold(arch.pte_mkclean(p)));
            if drop_sd {
                p = arch.pte_clear_soft_dirty(p);
            }
            if drop_w {
                p = arch.pte_wrprotect(p);
                p = arch.pte_mkclean(p);
            }
            p
        };
        let drop_sd = arch.pte_soft_dirty(a) && !arch.pte_soft_dirty(b);
        // A write upgrade the per-PTE kernel refused may follow from a merged
        // dirty bit (shared writenotify) or from a merged soft-dirty bit
        // (`pte_needs_soft_dirty_wp()` then no longer asks for a fault).
        let sd_merged = arch.pte_soft_dirty(a) && !arch.pte_soft_dirty(b);
        let drop_w =
            (shared_upgrade_allowed || sd_merged) && arch.pte_write(a) && !arch.pte_write(b);
        if norm(a, drop_sd, drop_w) != norm(b, drop_sd, drop_w) {
            return Err(format!("page {addr:#x}: batched {a:?} vs per-PTE {b:?}"));
        }
    }
    Ok(())
}
