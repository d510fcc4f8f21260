//! mprotect: `do_mprotect_pkey` → `mprotect_fixup` → `change_protection` →
//! `change_pte_range`, in the v6.16 (per-PTE) and v6.17+ (batched) forms.
//!
//! Kernel counterpart: mm/mprotect.c — v6.16 `change_pte_range` (per PTE,
//! `can_change_pte_writable`), v6.17/v6.18 (cac1db8c3aad + cf1b80dc31a1:
//! `mprotect_folio_pte_batch`, `prot_commit_flush_ptes`,
//! `page_anon_exclusive_sub_batch`, `commit_anon_folio_batch`,
//! `set_write_prot_commit_flush_ptes`), and v7.1 (89e613bc0b2d, Pedro
//! Falcato: `change_present_ptes`, always-inline helpers, same primitives).
//! Out-of-line calls are counted per function ([`Cx::call`]) where the
//! release's Debian build has them (docs/model.md, "Out-of-line calls").
//! Left out: `MM_CP_PROT_NUMA` (NUMA hinting), swap/migration/device entries
//! and uffd-wp markers (non-present entries other than none), PMD-mapped THPs
//! (`change_huge_pmd`), hugetlb, mmu notifiers, `flush_tlb_batched_pending`
//! (no deferred reclaim flush is pending in the modelled workloads).

use bitflags::bitflags;

use crate::arch::{Arch, PteValue};
use crate::cx::{Cx, Delta, Mark};
use crate::folio::{
    count_folio_pte_batch_flags, folio_pte_batch_flags, folio_test_anon, folio_test_large,
    page_anon, page_anon_exclusive, page_folio, vm_normal_page, Folio, FpbFlags, SmallMeta,
    SmallSeq,
};
use crate::mm::{pmd_addr_end, Vma};
use crate::strategy::{KFn, MprotectImpl};
use crate::tlb::MmuGather;
use crate::types::{Pfn, Pgprot, Prot, VmFlags};
use crate::ModelError;

bitflags! {
    /// `cp_flags` of `change_protection()` (include/linux/mm.h `MM_CP_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct CpFlags: u32 {
        /// `MM_CP_TRY_CHANGE_WRITABLE`: upgrade to writable where no write
        /// fault would be needed.
        const TRY_CHANGE_WRITABLE = 1 << 0;
        /// `MM_CP_UFFD_WP`: arm uffd-wp.
        const UFFD_WP = 1 << 2;
        /// `MM_CP_UFFD_WP_RESOLVE`: clear uffd-wp.
        const UFFD_WP_RESOLVE = 1 << 3;
    }
}

/// `pte_needs_flush()` as called by mprotect: counted, with the injected
/// fault of the negative tests.
pub fn pte_needs_flush<A: Arch>(cx: &mut Cx<A>, old: A::Pte, new: A::Pte) -> bool {
    cx.counters.needs_flush_evals += 1;
    cx.call(KFn::PteNeedsFlush);
    if cx.kernel.faults.elide_protnone_flush && cx.arch.pte_protnone(new) {
        return false;
    }
    cx.arch.pte_needs_flush(&cx.kernel, old, new)
}

/// `mprotect(start, len, prot)` on pages `[start, start + len)`.
///
/// # Errors
/// [`ModelError::Enomem`] when the range is not fully mapped by VMAs.
pub fn mprotect<A: Arch>(
    cx: &mut Cx<A>,
    start: u64,
    len: u64,
    prot: Prot,
) -> Result<(), ModelError> {
    let end = start + len;
    // do_mprotect_pkey(): the whole range must be mapped.
    let mut covered = start;
    for v in cx.mm.vmas.iter().filter(|v| v.end > start && v.start < end) {
        if v.start > covered {
            break;
        }
        covered = covered.max(v.end);
    }
    if covered < end {
        return Err(ModelError::Enomem { start, end });
    }
    let arch = cx.arch;
    let mut tlb = MmuGather::tlb_gather_mmu();
    cx.mm.split_at(start);
    cx.mm.split_at(end);
    let pieces: Vec<usize> = (0..cx.mm.vmas.len())
        .filter(|&i| cx.mm.vmas[i].start >= start && cx.mm.vmas[i].end <= end)
        .collect();
    for i in pieces {
        let old = cx.mm.vmas[i];
        let newflags =
            (old.flags - (VmFlags::READ | VmFlags::WRITE | VmFlags::EXEC)) | prot.vm_flags();
        if newflags == old.flags {
            continue; // mprotect_fixup(): nothing to change
        }
        let mut vma = old;
        vma.flags = newflags;
        vma.set_page_prot(&arch);
        cx.mm.vmas[i] = vma;
        let cp_flags = if vma.wants_manual_pte_write_upgrade(&arch) {
            CpFlags::TRY_CHANGE_WRITABLE
        } else {
            CpFlags::empty()
        };
        change_protection(cx, &mut tlb, &vma, vma.start, vma.end, cp_flags);
    }
    cx.mm.merge_vmas();
    tlb.tlb_finish_mmu(cx);
    Ok(())
}

/// `change_protection()` → `change_protection_range()`: walk the VMA piece
/// PMD by PMD, then flush its hull at `tlb_end_vma()`.
pub fn change_protection<A: Arch>(
    cx: &mut Cx<A>,
    tlb: &mut MmuGather,
    vma: &Vma,
    start: u64,
    end: u64,
    cp_flags: CpFlags,
) -> u64 {
    let newprot = vma.page_prot;
    let ptrs = cx.arch.ptrs_per_pte();
    let mut pages = 0;
    tlb.tlb_start_vma();
    let mut addr = start;
    // A step recorded in one PTE table replays in the next: its inputs
    // (VMA, protection, flags, kernel) are the walk's.
    let mut memo = None;
    while addr < end {
        let next = pmd_addr_end(addr, end, ptrs);
        pages += walk_pte_range(cx, tlb, vma, (addr, next), newprot, cp_flags, &mut memo);
        addr = next;
    }
    if let Some((step, k)) = memo {
        cx.add_delta(&step.delta, k);
    }
    tlb.tlb_end_vma(cx);
    pages
}

/// `change_pte_range()` over one PTE table (`[addr, end)` lies within one
/// PMD), with `memo`: the step last recorded, and how many times it was
/// replayed since (counted when it is replaced, and by the caller at the
/// end). Returns the number of present PTEs changed.
fn walk_pte_range<A: Arch>(
    cx: &mut Cx<A>,
    tlb: &mut MmuGather,
    vma: &Vma,
    (addr, end): (u64, u64),
    newprot: Pgprot,
    cp_flags: CpFlags,
    memo: &mut Option<(Step<A::Pte>, u64)>,
) -> u64 {
    let mut pages = 0;
    let mut addr = addr;
    let replay = A::RUN_REPLAY && cx.run_replay;
    while addr < end {
        if let Some((step, k)) = memo {
            let n = step.replay(cx, tlb, addr, end);
            *k += n;
            pages += n;
            addr += n;
            if addr == end {
                break;
            }
        }
        let start = if replay {
            StepStart::at(cx, tlb, addr)
        } else {
            None
        };
        let mut nr_ptes = 1;
        let oldpte = A::ptep_get(cx, addr);
        if cx.arch.pte_present(oldpte) {
            nr_ptes = match cx.kernel.mprotect {
                MprotectImpl::PerPte => {
                    change_present_pte_v6_16(cx, tlb, vma, addr, newprot, cp_flags)
                }
                MprotectImpl::Batched => {
                    change_present_ptes(cx, tlb, vma, addr, end, oldpte, newprot, cp_flags)
                }
            };
            cx.record_batch(nr_ptes);
            cx.counters.ptes_changed += nr_ptes;
            pages += nr_ptes;
        }
        addr += nr_ptes;
        if let Some(step) = start.and_then(|s| s.finish(cx, tlb)) {
            if let Some((old, k)) = memo.replace((step, 0)) {
                cx.add_delta(&old.delta, k);
            }
        }
    }
    pages
}

/// The state before one step of `change_pte_range()` over a present PTE of
/// an order-0 folio (or of no struct page), to record it as a [`Step`].
struct StepStart<P> {
    addr: u64,
    old: P,
    pfn: u64,
    meta: SmallMeta,
    last_page: Option<u64>,
    gather: MmuGather,
    mark: Mark,
}

/// One step of `change_pte_range()` over one PTE, as a function of what it
/// read: the PTE's bits outside its PFN, its page's [`SmallMeta`], and that
/// the struct page read last was another. A like PTE later in the same PTE
/// table takes the same path through the same code — every input of the
/// step but the PFN is the same (the VMA, the new protection, the kernel,
/// the flags), the arch touches that one entry only
/// ([`Arch::RUN_REPLAY`]), and the PFN only selects which struct page is
/// read — so it writes the same bits over its own PFN field (kept or
/// inverted whole), caches that value in the TLB model if the recorded
/// one was, widens the mmu_gather by its page if the recorded one did,
/// reads its own struct page last if the recorded one read one, and
/// counts the same. [`Step::replay`] does exactly that;
/// `tests/replay.rs` holds it to the step-by-step walk on random
/// layouts.
struct Step<P> {
    old_bits: u64,
    meta: SmallMeta,
    /// XOR applied to the PFN field: 0 or all of it.
    flip: u64,
    new_bits: u64,
    new_hw_valid: bool,
    gathers: bool,
    reads_page: bool,
    delta: Delta,
    _pte: std::marker::PhantomData<P>,
}

impl<P: PteValue> StepStart<P> {
    /// `None` when the PTE at `addr` is not one a [`Step`] describes.
    fn at<A: Arch<Pte = P>>(cx: &Cx<A>, tlb: &MmuGather, addr: u64) -> Option<Self> {
        let old = cx.peek(addr);
        if !cx.arch.pte_present(old) || old.val() & !A::PFN_FIELD == 0 {
            return None;
        }
        let pfn = cx.arch.pte_pfn(old);
        let meta = cx.mm.memmap.small_meta(pfn);
        if meta == SmallMeta::Large || cx.last_page() == Some(pfn.0) {
            return None;
        }
        Some(StepStart {
            addr,
            old,
            pfn: pfn.0,
            meta,
            last_page: cx.last_page(),
            gather: tlb.clone(),
            mark: cx.mark(),
        })
    }

    /// The step just taken from `self`, if it did only what a [`Step`]
    /// can replay: one batch of one PTE, one load, one exchange and one
    /// store of that entry, no flush, at most one struct page read (its
    /// own), the gather unchanged or widened by that page.
    fn finish<A: Arch<Pte = P>>(self, cx: &Cx<A>, tlb: &MmuGather) -> Option<Step<P>> {
        let delta = cx.since(&self.mark)?;
        let one = |name| delta.scalar(name) == 1;
        if delta.batch != Some(1) || !one("pte_loads") || !one("pte_xchg") || !one("pte_stores") {
            return None;
        }
        let mask = A::PFN_FIELD;
        let new = cx.peek(self.addr);
        let flip = (new.val() ^ self.old.val()) & mask;
        if (flip != 0 && flip != mask) || new.val() & !mask == 0 {
            return None;
        }
        let gathers = if *tlb == self.gather {
            false
        } else {
            let mut g = self.gather.clone();
            g.widen(self.addr, 1);
            if g != *tlb {
                return None;
            }
            true
        };
        let reads_page = match cx.last_page() {
            p if p == self.last_page => false,
            p if p == Some(self.pfn) => true,
            _ => return None,
        };
        if delta.scalar("page_reads") != u64::from(reads_page) {
            return None;
        }
        Some(Step {
            old_bits: self.old.val() & !mask,
            meta: self.meta,
            flip,
            new_bits: new.val() & !mask,
            new_hw_valid: cx.arch.pte_hw_valid(new),
            gathers,
            reads_page,
            delta,
            _pte: std::marker::PhantomData,
        })
    }
}

impl<P: PteValue> Step<P> {
    /// Take the step on each PTE from `addr` on that is alike, up to
    /// `end`, and return how many (counted later by the caller,
    /// [`Cx::add_delta`]).
    #[inline]
    fn replay<A: Arch<Pte = P>>(
        &self,
        cx: &mut Cx<A>,
        tlb: &mut MmuGather,
        addr: u64,
        end: u64,
    ) -> u64 {
        let mask = A::PFN_FIELD;
        let arch = cx.arch;
        let mut last = cx.last_page();
        let mut seq: Option<SmallSeq> = None;
        let mut a = addr;
        while a < end {
            let old = cx.mm.pt.get(a).val();
            if old & !mask != self.old_bits {
                break;
            }
            let pfn = arch.pte_pfn(P::from_val(old));
            if last == Some(pfn.0) {
                break;
            }
            if cx.mm.memmap.small_meta_seq(&mut seq, pfn) != self.meta {
                break;
            }
            let new = P::from_val(((old & mask) ^ self.flip) | self.new_bits);
            cx.mm.pt.set(a, new);
            if self.new_hw_valid {
                if let Some(t) = cx.tlb.as_mut() {
                    t.cache(a, new);
                }
            }
            if self.reads_page {
                last = Some(pfn.0);
            }
            a += 1;
        }
        if a > addr {
            // One widening by the pages replayed is the widenings by each.
            if self.gathers {
                tlb.widen(addr, a - addr);
            }
            if let Some(p) = last {
                if self.reads_page {
                    cx.set_last_page(p);
                }
            }
        }
        a - addr
    }
}

fn apply_uffd<A: Arch>(arch: &A, ptent: A::Pte, cp_flags: CpFlags) -> A::Pte {
    if cp_flags.contains(CpFlags::UFFD_WP) {
        arch.pte_mkuffd_wp(ptent)
    } else if cp_flags.contains(CpFlags::UFFD_WP_RESOLVE) {
        arch.pte_clear_uffd_wp(ptent)
    } else {
        ptent
    }
}

/// v6.16 loop body for one present PTE.
fn change_present_pte_v6_16<A: Arch>(
    cx: &mut Cx<A>,
    tlb: &mut MmuGather,
    vma: &Vma,
    addr: u64,
    newprot: Pgprot,
    cp_flags: CpFlags,
) -> u64 {
    let arch = cx.arch;
    let oldpte = A::ptep_modify_prot_start(cx, vma, addr);
    let mut ptent = apply_uffd(&arch, arch.pte_modify(oldpte, newprot), cp_flags);
    if cp_flags.contains(CpFlags::TRY_CHANGE_WRITABLE)
        && !arch.pte_write(ptent)
        && can_change_pte_writable(cx, vma, addr, ptent)
    {
        ptent = pte_mkwrite(cx, ptent);
    }
    A::ptep_modify_prot_commit(cx, vma, addr, oldpte, ptent);
    if pte_needs_flush(cx, oldpte, ptent) {
        tlb.tlb_flush_pte_range(cx, addr, 1);
    }
    1
}

/// `pte_mkwrite(pte, vma)`: x86 has it out of line (arch/x86/mm/pgtable.c).
fn pte_mkwrite<A: Arch>(cx: &mut Cx<A>, pte: A::Pte) -> A::Pte {
    cx.call(KFn::PteMkwrite);
    cx.arch.pte_mkwrite(pte)
}

/// `pte_modify()`: out of line in the v7.3 builds.
fn pte_modify<A: Arch>(cx: &mut Cx<A>, pte: A::Pte, newprot: Pgprot) -> A::Pte {
    cx.call(KFn::PteModify);
    cx.arch.pte_modify(pte, newprot)
}

/// The out-of-line (`.isra.0`) `maybe_change_pte_writable()` of v6.17+, as
/// its callers there reach it.
fn maybe_change_pte_writable_call<A: Arch>(cx: &mut Cx<A>, vma: &Vma, pte: A::Pte) -> bool {
    cx.call(KFn::MaybeChangePteWritable);
    maybe_change_pte_writable(cx, vma, pte)
}

/// `maybe_change_pte_writable()` (v6.17): the VMA/PTE-only part of the check.
pub fn maybe_change_pte_writable<A: Arch>(cx: &Cx<A>, vma: &Vma, pte: A::Pte) -> bool {
    let arch = &cx.arch;
    debug_assert!(vma.flags.contains(VmFlags::WRITE)); // WARN_ON_ONCE(!(vm_flags & VM_WRITE))
    if !vma.flags.contains(VmFlags::WRITE) || arch.pte_protnone(pte) {
        return false;
    }
    // pte_needs_soft_dirty_wp()
    if vma.soft_dirty_enabled(arch) && !arch.pte_soft_dirty(pte) {
        return false;
    }
    // userfaultfd_pte_wp()
    !(vma.uffd_wp() && arch.pte_uffd_wp(pte))
}

/// `can_change_pte_writable()` (v6.16 single function; exported, out of line).
pub fn can_change_pte_writable<A: Arch>(cx: &mut Cx<A>, vma: &Vma, addr: u64, pte: A::Pte) -> bool {
    cx.call(KFn::CanChangePteWritable);
    if !maybe_change_pte_writable(cx, vma, pte) {
        return false;
    }
    if !vma.is_shared() {
        let Some(page) = vm_normal_page(cx, vma, addr, pte) else {
            return false;
        };
        return page_anon(cx, page) && page_anon_exclusive(cx, page);
    }
    cx.arch.pte_dirty(pte)
}

/// `can_change_shared_pte_writable()` (v6.17).
fn can_change_shared_pte_writable<A: Arch>(cx: &mut Cx<A>, vma: &Vma, pte: A::Pte) -> bool {
    maybe_change_pte_writable_call(cx, vma, pte) && cx.arch.pte_dirty(pte)
}

/// `mprotect_folio_pte_batch()`: 1 for no folio or a small folio.
pub fn mprotect_folio_pte_batch<A: Arch>(
    cx: &mut Cx<A>,
    folio: Option<&Folio>,
    addr: u64,
    pte: A::Pte,
    max_nr_ptes: u64,
    flags: FpbFlags,
) -> u64 {
    let Some(folio) = folio else { return 1 };
    if !folio_test_large(cx, folio) {
        return 1;
    }
    let mut pte = pte;
    let nr = folio_pte_batch_flags(cx, folio, addr, &mut pte, max_nr_ptes, flags);
    count_folio_pte_batch_flags(cx, nr);
    nr
}

/// v6.17+ loop body for a present PTE (Pedro Falcato's v3 calls the same
/// steps `change_present_ptes()`): batch, start, modify, commit + flush.
#[allow(clippy::too_many_arguments)]
fn change_present_ptes<A: Arch>(
    cx: &mut Cx<A>,
    tlb: &mut MmuGather,
    vma: &Vma,
    addr: u64,
    end: u64,
    oldpte: A::Pte,
    newprot: Pgprot,
    cp_flags: CpFlags,
) -> u64 {
    let arch = cx.arch;
    let flags = FpbFlags::RESPECT_SOFT_DIRTY | FpbFlags::RESPECT_WRITE;
    let max_nr_ptes = end - addr;
    let page = vm_normal_page(cx, vma, addr, oldpte);
    let folio = page.map(|p| page_folio(cx, p));
    let nr_ptes = mprotect_folio_pte_batch(cx, folio.as_ref(), addr, oldpte, max_nr_ptes, flags);

    let oldpte = A::modify_prot_start_ptes(cx, vma, addr, nr_ptes);
    let ptent = pte_modify(cx, oldpte, newprot);
    let ptent = apply_uffd(&arch, ptent, cp_flags);
    if cp_flags.contains(CpFlags::TRY_CHANGE_WRITABLE) && !arch.pte_write(ptent) {
        set_write_prot_commit_flush_ptes(
            cx,
            tlb,
            vma,
            folio.as_ref(),
            page,
            addr,
            oldpte,
            ptent,
            nr_ptes,
        );
    } else {
        prot_commit_flush_ptes(cx, tlb, vma, addr, oldpte, ptent, nr_ptes, 0, false);
    }
    nr_ptes
}

/// `prot_commit_flush_ptes()`: commit `nr_ptes` entries starting `idx` into
/// the batch, with one `pte_needs_flush()` and at most one
/// `tlb_flush_pte_range()` for all of them.
#[allow(clippy::too_many_arguments)]
pub fn prot_commit_flush_ptes<A: Arch>(
    cx: &mut Cx<A>,
    tlb: &mut MmuGather,
    vma: &Vma,
    addr: u64,
    oldpte: A::Pte,
    ptent: A::Pte,
    nr_ptes: u64,
    idx: u64,
    set_write: bool,
) {
    cx.call(KFn::ProtCommitFlushPtes);
    let arch = cx.arch;
    let addr = addr + idx;
    // Inlined into its callers from v7.1, x86 GCC builds call
    // pte_advance_pfn(), modify_prot_commit_ptes() and pte_needs_flush()
    // out of line (the v6.17 function had them inlined).
    if cx.kernel.always_inline_commit {
        cx.calls(KFn::PteAdvancePfn, 2);
    }
    let oldpte = arch.pte_advance_pfn(oldpte, idx);
    let mut ptent = arch.pte_advance_pfn(ptent, idx);
    if set_write {
        ptent = pte_mkwrite(cx, ptent);
    }
    A::modify_prot_commit_ptes(cx, vma, addr, oldpte, ptent, nr_ptes);
    if pte_needs_flush(cx, oldpte, ptent) {
        tlb.tlb_flush_pte_range(cx, addr, nr_ptes);
    }
}

/// `page_anon_exclusive_sub_batch()`: length of the run of pages from
/// `start_idx` whose `PageAnonExclusive` equals `expected`.
pub fn page_anon_exclusive_sub_batch<A: Arch>(
    cx: &mut Cx<A>,
    start_idx: u64,
    max_len: u64,
    first_page: Pfn,
    expected: bool,
) -> u64 {
    cx.call(KFn::PageAnonExclusiveSubBatch);
    let mut idx = start_idx + 1;
    while idx < start_idx + max_len {
        if expected != page_anon_exclusive(cx, Pfn(first_page.0 + idx)) {
            break;
        }
        idx += 1;
    }
    idx - start_idx
}

/// `commit_anon_folio_batch()`: split the batch into runs of equal
/// AnonExclusive-ness, because exclusivity is per page, and commit each run
/// writable iff its pages are exclusive.
#[allow(clippy::too_many_arguments)]
pub fn commit_anon_folio_batch<A: Arch>(
    cx: &mut Cx<A>,
    tlb: &mut MmuGather,
    vma: &Vma,
    first_page: Pfn,
    addr: u64,
    oldpte: A::Pte,
    ptent: A::Pte,
    nr_ptes: u64,
) {
    cx.call(KFn::CommitAnonFolioBatch);
    let mut sub_batch_idx = 0;
    let mut nr_ptes = nr_ptes;
    while nr_ptes > 0 {
        let expected = page_anon_exclusive(cx, Pfn(first_page.0 + sub_batch_idx));
        let len = page_anon_exclusive_sub_batch(cx, sub_batch_idx, nr_ptes, first_page, expected);
        prot_commit_flush_ptes(
            cx,
            tlb,
            vma,
            addr,
            oldpte,
            ptent,
            len,
            sub_batch_idx,
            expected,
        );
        sub_batch_idx += len;
        nr_ptes -= len;
    }
}

/// `set_write_prot_commit_flush_ptes()`: the write-upgrade dispatch.
#[allow(clippy::too_many_arguments)]
pub fn set_write_prot_commit_flush_ptes<A: Arch>(
    cx: &mut Cx<A>,
    tlb: &mut MmuGather,
    vma: &Vma,
    folio: Option<&Folio>,
    page: Option<Pfn>,
    addr: u64,
    oldpte: A::Pte,
    ptent: A::Pte,
    nr_ptes: u64,
) {
    cx.call(KFn::SetWriteProtCommitFlushPtes);
    if vma.is_shared() {
        let set_write = can_change_shared_pte_writable(cx, vma, ptent);
        prot_commit_flush_ptes(cx, tlb, vma, addr, oldpte, ptent, nr_ptes, 0, set_write);
        return;
    }
    let set_write = maybe_change_pte_writable_call(cx, vma, ptent)
        && folio.is_some_and(|f| folio_test_anon(cx, f));
    if !set_write {
        prot_commit_flush_ptes(cx, tlb, vma, addr, oldpte, ptent, nr_ptes, 0, false);
        return;
    }
    let folio = folio.expect("anon folio");
    let mut first_page = page.expect("page of an anon folio");
    if cx.kernel.faults.anon_exclusive_from_folio_head {
        first_page = folio.head; // v6.17-rc1: folio_page(folio, 0)
    }
    commit_anon_folio_batch(cx, tlb, vma, first_page, addr, oldpte, ptent, nr_ptes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{build, build_file, FolioPlacement, LayoutSpec, PteTweak};
    use crate::strategy::Strategy;
    use crate::X86;

    /// Two 16-page folios of a shared ext4 file, read-faulted; `dirty` pages
    /// (indices in the region) written since. `soft_dirty`: the kernel
    /// tracks soft-dirty (read faults leave the bit clear), else the bit does
    /// not exist (every PTE alike).
    fn file_spec(dirty: &[u64], soft_dirty: bool) -> LayoutSpec {
        let mut folios = vec![FolioPlacement::whole(4); 2];
        if !soft_dirty {
            for f in &mut folios {
                f.tweaks = (0..16).map(|k| (k, PteTweak::SoftDirty)).collect();
            }
        }
        for &p in dirty {
            folios[(p / 16) as usize]
                .tweaks
                .push((p % 16, PteTweak::WriteFault));
        }
        LayoutSpec {
            base: 512,
            vma_flags: VmFlags::READ | VmFlags::WRITE | VmFlags::SHARED | VmFlags::SOFTDIRTY,
            folios,
            extra_window: 0,
        }
    }

    fn writable(cx: &Cx<X86>) -> Vec<bool> {
        (512..544)
            .map(|a| {
                let p = cx.peek(a);
                cx.arch.pte_present(p) && cx.arch.pte_write(p)
            })
            .collect()
    }

    /// mprotect RO then RW of the whole region; which PTEs end writable.
    fn ro_rw(strategy: Strategy, spec: &LayoutSpec) -> Vec<bool> {
        let (mut cx, _) = build_file(X86, strategy.kernel_features(), spec, false);
        mprotect(&mut cx, 512, 32, Prot::Read).unwrap();
        mprotect(&mut cx, 512, 32, Prot::ReadWrite).unwrap();
        writable(&cx)
    }

    #[test]
    fn page_mkwrite_file_mappings_want_writenotify_shmem_does_not() {
        let spec = file_spec(&[3], false);
        let (cx, _) = build_file(X86, Strategy::V6_17.kernel_features(), &spec, false);
        let v = cx.mm.vmas[0];
        assert!(v.page_mkwrite && v.wants_writenotify(&cx.arch));
        assert!(v.wants_manual_pte_write_upgrade(&cx.arch));
        // Read-faulted pages are read-only, the written page writable.
        let w = writable(&cx);
        assert_eq!(w.iter().filter(|&&b| b).count(), 1);
        assert!(w[3]);
        // The same layout as shmem: no write-notify, every PTE writable.
        let (cx, _) = build(X86, Strategy::V6_17.kernel_features(), &spec, false);
        let v = cx.mm.vmas[0];
        assert!(!v.page_mkwrite && !v.wants_writenotify(&cx.arch));
    }

    #[test]
    fn batched_upgrade_follows_the_merged_dirty_bit_per_pte_does_not() {
        // Page 3 dirty in folio 0; folio 1 all clean.
        let spec = file_spec(&[3], false);
        let per_pte = ro_rw(Strategy::V6_16, &spec);
        let batched = ro_rw(Strategy::V6_17, &spec);
        let want_per_pte: Vec<bool> = (0..32).map(|i| i == 3).collect();
        let want_batched: Vec<bool> = (0..32).map(|i| i < 16).collect();
        assert_eq!(per_pte, want_per_pte);
        assert_eq!(batched, want_batched);
        assert_eq!(ro_rw(Strategy::V6_19, &spec), want_batched);
    }

    #[test]
    fn soft_dirty_splits_never_written_pages_from_dirty_ones() {
        // A read fault leaves soft-dirty clear; x86 pte_mkdirty() sets it, so
        // with soft-dirty tracking compiled in FPB_RESPECT_SOFT_DIRTY cuts the
        // batch between pages 2 and 3 and between 3 and 4: no merged upgrade.
        let mut spec = file_spec(&[3], true);
        // Pages 0-2 were written and cleaned by writeback since
        // (folio_mkclean(): write-protected and clean, soft-dirty kept).
        for k in 0..3 {
            let f = &mut spec.folios[0];
            f.tweaks.push((k, PteTweak::WriteFault));
            f.tweaks.push((k, PteTweak::Clean));
            f.tweaks.push((k, PteTweak::WrProtect));
        }
        let batched = ro_rw(Strategy::V6_17, &spec);
        let want: Vec<bool> = (0..32).map(|i| i < 4).collect();
        assert_eq!(batched, want, "pages 0-3 soft-dirty: one batch; 4-15 not");
    }

    #[test]
    fn ro_and_rw_flush_the_hull_of_the_write_bit_changes() {
        // Soft-dirty tracked: pages 3 and 5 are batches of their own in both
        // calls. x86 flushes when _PAGE_RW changes either way (docs/kernel.md
        // §5.3), so each call flushes the hull [3, 6).
        let spec = file_spec(&[3, 5], true);
        let (mut cx, _) = build_file(X86, Strategy::V6_17.kernel_features(), &spec, false);
        for prot in [Prot::Read, Prot::ReadWrite] {
            mprotect(&mut cx, 512, 32, prot).unwrap();
            let f = cx.take_flushes();
            assert_eq!(f.len(), 1, "{prot:?}");
            assert_eq!((f[0].start, f[0].pages), (515, 3), "{prot:?}");
        }
    }
}
