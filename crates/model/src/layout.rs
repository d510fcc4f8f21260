//! Building an address space in a given folio layout, the way faults would
//! have built it.
//!
//! Kernel counterpart: `do_anonymous_page()` / `finish_fault()` (mm/memory.c):
//! a folio is mapped with one `set_ptes()` of `mk_pte(folio, vm_page_prot)`
//! made young, dirty and writable, so arm64 paints CONT exactly where
//! `contpte_set_ptes()` would. Per-page tweaks then reproduce states that
//! other kernel paths leave behind (aging, writeback, clear_refs, uffd-wp,
//! fork-shared pages that are no longer AnonExclusive).
//!
//! [`build_file`] builds a `MAP_SHARED` mapping of a file on a file system
//! with `page_mkwrite` (ext4): the folios are page-cache folios mapped by a
//! read fault (`filemap_map_pages()` → `set_pte_range()`: young, clean,
//! read-only because write-notify leaves `vm_page_prot` read-only), and
//! [`PteTweak::WriteFault`] stands for a later write to a page
//! (`wp_page_shared()` → `page_mkwrite` → `wp_page_reuse()`).

use std::borrow::Cow;

use crate::arch::Arch;
use crate::cx::Cx;
use crate::folio::Memmap;
use crate::mm::Mm;
use crate::strategy::Kernel;
use crate::tlb::TlbModel;
use crate::types::{Pfn, VmFlags};

/// A change applied to one mapped PTE after fault-in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PteTweak {
    /// Aging cleared the accessed bit.
    Old,
    /// Writeback/`MADV_FREE` cleaned it.
    Clean,
    /// `clear_refs` soft-dirty: write-protect and clear soft-dirty.
    ClearSoftDirty,
    /// uffd-wp armed on it (write-protects).
    UffdWp,
    /// Write-protected (e.g. by fork).
    WrProtect,
    /// A write fault that reused the page in place (`wp_page_reuse()`:
    /// young, dirty, writable), e.g. after `page_mkwrite` on a shared file
    /// mapping or on an exclusive page after fork. Inside an arm64 contig
    /// block it unfolds the block first, as the kernel does.
    WriteFault,
    /// Soft-dirty set (`pte_mksoft_dirty()`). Also stands for a kernel built
    /// without `CONFIG_MEM_SOFT_DIRTY`, where the bit does not exist and so
    /// never tells two PTEs apart: setting it on every PTE is equivalent.
    /// Not applied inside an arm64 contig block.
    SoftDirty,
}

/// One folio of a layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FolioPlacement {
    /// Folio order.
    pub order: u8,
    /// Pages `[lo, hi)` of the folio that are mapped (partial coverage).
    pub mapped: (u64, u64),
    /// `PageAnonExclusive` per page (missing entries: exclusive).
    pub exclusive: Vec<bool>,
    /// Tweaks per mapped page index within the folio.
    pub tweaks: Vec<(u64, PteTweak)>,
    /// Map this many pages *before* the natural VA alignment hole is skipped:
    /// `true` places the folio at a VA not congruent with its PA modulo its
    /// size (then arm64 never paints CONT on it).
    pub va_misaligned: bool,
}

impl FolioPlacement {
    /// A fully mapped, exclusive folio of `order` with no tweaks.
    pub fn whole(order: u8) -> Self {
        FolioPlacement {
            order,
            mapped: (0, 1 << order),
            exclusive: Vec::new(),
            tweaks: Vec::new(),
            va_misaligned: false,
        }
    }
}

/// A whole layout: one VMA with folios placed one after another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutSpec {
    /// First page of the VMA.
    pub base: u64,
    /// VMA flags (`VM_READ | VM_WRITE`, maybe `VM_SHARED`, `VM_SOFTDIRTY`, ...).
    pub vma_flags: VmFlags,
    /// Folios in VA order; each is placed at the next VA aligned to its size.
    pub folios: Vec<FolioPlacement>,
    /// Pages of page-table window to keep after the VMA (mremap targets).
    pub extra_window: u64,
}

/// Where the layout put things.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    /// VMA `[start, end)`.
    pub vma: (u64, u64),
    /// Per folio: first page VA (of page 0 of the folio) and head PFN.
    pub folios: Vec<(u64, Pfn)>,
}

/// `x` rounded up to `a`, a power of two (folio sizes, table spans).
fn align_up(x: u64, a: u64) -> u64 {
    debug_assert!(a.is_power_of_two());
    (x + a - 1) & !(a - 1)
}

/// Build the mm of `spec` by faulting its folios in under `kernel` on `arch`.
/// Counters are reset afterwards.
pub fn build<A: Arch>(
    arch: A,
    kernel: Kernel,
    spec: &LayoutSpec,
    check_tlb: bool,
) -> (Cx<A>, Placed) {
    build_backed(arch, kernel, spec, check_tlb, false)
}

/// Build the mm of `spec` as a shared mapping of a file whose file system
/// has `page_mkwrite` (`spec.vma_flags` must contain `VM_SHARED`): every
/// folio is read-faulted (clean, read-only under write-notify), then the
/// tweaks apply ([`PteTweak::WriteFault`] for pages written since).
pub fn build_file<A: Arch>(
    arch: A,
    kernel: Kernel,
    spec: &LayoutSpec,
    check_tlb: bool,
) -> (Cx<A>, Placed) {
    assert!(
        spec.vma_flags.contains(VmFlags::SHARED),
        "a page_mkwrite file mapping is MAP_SHARED"
    );
    build_backed(arch, kernel, spec, check_tlb, true)
}

fn build_backed<A: Arch>(
    arch: A,
    kernel: Kernel,
    spec: &LayoutSpec,
    check_tlb: bool,
    page_mkwrite: bool,
) -> (Cx<A>, Placed) {
    let n = spec.folios.len();
    let folio = |i: usize| Cow::Borrowed(&spec.folios[i]);
    build_core(
        arch,
        kernel,
        spec,
        (n, folio),
        (check_tlb, page_mkwrite, true),
    )
}

/// [`build`] of `n` folios that `folio(i)` makes one at a time; the folios
/// of `spec` are ignored. A region of 262144 folios then needs no
/// `LayoutSpec` of 72 bytes a folio (`run_model` at 1G). `Placed::folios`
/// (16 bytes a folio) is left empty unless `keep_folios`.
pub fn build_generated<A: Arch>(
    arch: A,
    kernel: Kernel,
    spec: &LayoutSpec,
    n: usize,
    folio: impl Fn(usize) -> FolioPlacement,
    (check_tlb, keep_folios): (bool, bool),
) -> (Cx<A>, Placed) {
    let folio = |i| Cow::Owned(folio(i));
    build_core(
        arch,
        kernel,
        spec,
        (n, folio),
        (check_tlb, false, keep_folios),
    )
}

/// Where the folios of a layout go, one after another: each at the next VA
/// aligned to its size, and at the next PFN aligned to its size and to 2M.
struct Cursor {
    va: u64,
    pfn: u64,
}

impl Cursor {
    fn new(spec: &LayoutSpec) -> Self {
        Cursor {
            va: spec.base,
            pfn: 1 << 20,
        }
    }

    /// [`Cursor::place`] of `count` plain folios of `order` (`count` >= 1):
    /// the first's VA and head PFN, and the PFN stride. After the first,
    /// each folio's VA and PFN are already aligned, so each next one lies
    /// `n` pages and `max(n, 512)` PFNs further.
    fn place_run(&mut self, order: u8, count: usize) -> (u64, Pfn, u64) {
        let n = 1u64 << order;
        let stride = n.max(512);
        let (va, head) = self.place(&FolioPlacement::whole(order));
        self.va = va + count as u64 * n;
        self.pfn = head.0 + (count as u64 - 1) * stride + n;
        (va, head, stride)
    }

    /// VA of page 0 and head PFN of `f`.
    fn place(&mut self, f: &FolioPlacement) -> (u64, Pfn) {
        let n = 1u64 << f.order;
        self.va = align_up(self.va, n);
        if f.va_misaligned && n > 1 {
            self.va += n / 2;
        }
        self.pfn = align_up(self.pfn, n.max(512));
        let at = (self.va, Pfn(self.pfn));
        self.va += n;
        self.pfn += n;
        at
    }
}

fn build_core<'s, A: Arch>(
    arch: A,
    kernel: Kernel,
    spec: &LayoutSpec,
    (nfolios, folio): (usize, impl Fn(usize) -> Cow<'s, FolioPlacement>),
    (check_tlb, page_mkwrite, keep_folios): (bool, bool, bool),
) -> (Cx<A>, Placed) {
    let ptrs = arch.ptrs_per_pte();
    let shared = spec.vma_flags.contains(VmFlags::SHARED);
    // Place every folio first to size the window. Each pass below places
    // them again rather than keep 16 bytes a folio.
    let mut memmap = Memmap::default();
    let mut cursor = Cursor::new(spec);
    // Folios of one order with every page exclusive at one stride go to
    // the memmap together: (head, stride, count, order).
    let mut group: Option<(u64, u64, u64, u8)> = None;
    let flush = |memmap: &mut Memmap, g: Option<(u64, u64, u64, u8)>| {
        if let Some((head, stride, count, order)) = g {
            memmap.add_folios(head, stride, count, order, !shared);
        }
    };
    // Runs of plain folios (whole, exclusive, untweaked, aligned) of one
    // order: (first, count, order). The passes below place them in one
    // step and skip what they do not need.
    let mut plain: Vec<(usize, usize, u8)> = Vec::new();
    for i in 0..nfolios {
        let f = folio(i);
        let (_, head) = cursor.place(&f);
        if is_plain(&f) {
            match plain.last_mut() {
                Some((first, count, order)) if *first + *count == i && *order == f.order => {
                    *count += 1
                }
                _ => plain.push((i, 1, f.order)),
            }
        }
        if f.exclusive.is_empty() {
            if let Some((h0, stride, count, order)) = &mut group {
                if *order == f.order && (*count == 1 || head.0 == *h0 + *count * *stride) {
                    if *count == 1 {
                        *stride = head.0 - *h0;
                    }
                    *count += 1;
                    continue;
                }
            }
            flush(&mut memmap, group.take());
            group = Some((head.0, 0, 1, f.order));
        } else {
            flush(&mut memmap, group.take());
            memmap.add_folio(head.0, f.order, !shared, &f.exclusive);
        }
    }
    flush(&mut memmap, group);
    let va = cursor.va;
    let vma_end = va.max(spec.base + 1);
    let wbase = spec.base / ptrs * ptrs;
    let wend = align_up(vma_end + spec.extra_window, ptrs);
    let mut mm: Mm<A::Pte> = Mm::new(wbase, wend - wbase);
    mm.memmap = memmap;
    mm.add_vma_backed(&arch, spec.base, vma_end, spec.vma_flags, page_mkwrite);
    // The TLB model starts empty after the build (below): faulting in does
    // not need it.
    let mut cx = Cx::new(arch, kernel, mm, false);
    let vma = cx.mm.vmas[0];
    let fault_pte = |pfn: u64| {
        let mut pte = arch.pfn_pte(Pfn(pfn), vma.page_prot);
        pte = arch.pte_mkyoung(pte);
        // Anonymous memory: a write fault. A page_mkwrite file: a read fault.
        if vma.flags.contains(VmFlags::WRITE) && !page_mkwrite {
            pte = arch.pte_mkwrite(arch.pte_mkdirty(pte));
        }
        pte
    };
    let mut cursor = Cursor::new(spec);
    let mut runs = plain.iter().peekable();
    let mut i = 0;
    while i < nfolios {
        if let Some(&(_, count, order)) = runs.next_if(|r| r.0 == i) {
            let (va, head, stride) = cursor.place_run(order, count);
            let n = 1u64 << order;
            for k in 0..count as u64 {
                A::set_ptes(&mut cx, va + k * n, fault_pte(head.0 + k * stride), n);
            }
            i += count;
            continue;
        }
        let f = folio(i);
        i += 1;
        let (va, head) = cursor.place(&f);
        let (lo, hi) = f.mapped;
        if lo >= hi {
            continue;
        }
        A::set_ptes(&mut cx, va + lo, fault_pte(head.0 + lo), hi - lo);
    }
    // A writable PTE of a private anon page implies PageAnonExclusive:
    // write-protect the others (whole contig blocks on arm64, to stay uniform).
    let mut cursor = Cursor::new(spec);
    let mut placed = Vec::with_capacity(if keep_folios { nfolios } else { 0 });
    let mut runs = plain.iter().peekable();
    let mut i = 0;
    while i < nfolios {
        if let Some(&(_, count, order)) = runs.next_if(|r| r.0 == i) {
            // Every page exclusive, no tweak: nothing to do but place them.
            let (va, head, stride) = cursor.place_run(order, count);
            if keep_folios {
                let n = 1u64 << order;
                placed.extend((0..count as u64).map(|k| (va + k * n, Pfn(head.0 + k * stride))));
            }
            i += count;
            continue;
        }
        let f = folio(i);
        i += 1;
        let (va, head) = cursor.place(&f);
        if keep_folios {
            placed.push((va, head));
        }
        // No page to write-protect when every page is exclusive (the default).
        let all_exclusive = f.exclusive.iter().all(|&e| e);
        for k in (f.mapped.0..f.mapped.1).filter(|_| !all_exclusive) {
            let excl = cx
                .mm
                .memmap
                .page(Pfn(head.0 + k))
                .is_some_and(|p| p.anon_exclusive);
            if !shared && !excl {
                wrprotect_at(&mut cx, va + k);
            }
        }
        for &(k, tweak) in &f.tweaks {
            if k < f.mapped.0 || k >= f.mapped.1 {
                continue;
            }
            apply_tweak(&mut cx, va + k, tweak);
        }
    }
    // The tweaks stand for past kernel paths that flushed as they went: the
    // TLB model starts empty.
    if check_tlb {
        cx.tlb = Some(TlbModel::new(cx.mm.pt.base(), cx.mm.pt.len()));
    }
    cx.take_counters();
    cx.take_flushes();
    (
        cx,
        Placed {
            vma: (spec.base, vma_end),
            folios: placed,
        },
    )
}

/// A folio the passes of [`build_core`] may place in runs: whole, every
/// page exclusive, no tweak, at its natural VA alignment.
fn is_plain(f: &FolioPlacement) -> bool {
    f.mapped == (0, 1 << f.order)
        && f.exclusive.is_empty()
        && f.tweaks.is_empty()
        && !f.va_misaligned
}

fn block_of<A: Arch>(cx: &Cx<A>, addr: u64) -> (u64, u64) {
    let pte = cx.peek(addr);
    if cx.arch.pte_cont(pte) {
        let c = cx.arch.tlb_entry_span(pte).max(1);
        (addr & !(c - 1), c)
    } else {
        (addr, 1)
    }
}

fn wrprotect_at<A: Arch>(cx: &mut Cx<A>, addr: u64) {
    let (b, n) = block_of(cx, addr);
    for a in b..b + n {
        let p = cx.peek(a);
        if cx.arch.pte_present(p) {
            let w = cx.arch.pte_wrprotect(p);
            cx.poke(a, w);
        }
    }
}

fn apply_tweak<A: Arch>(cx: &mut Cx<A>, addr: u64, tweak: PteTweak) {
    let arch = cx.arch;
    let p = cx.peek(addr);
    if !arch.pte_present(p) {
        return;
    }
    let cont = arch.pte_cont(p);
    match tweak {
        // Hardware and aging change A/D per entry, even inside a contig block.
        PteTweak::Old => cx.poke(addr, arch.pte_mkold(p)),
        PteTweak::Clean => cx.poke(addr, arch.pte_mkclean(p)),
        PteTweak::ClearSoftDirty if !cont => {
            cx.poke(addr, arch.pte_clear_soft_dirty(arch.pte_wrprotect(p)))
        }
        PteTweak::UffdWp if !cont => cx.poke(addr, arch.pte_mkuffd_wp(p)),
        PteTweak::WrProtect => wrprotect_at(cx, addr),
        PteTweak::WriteFault => {
            // A write fault changes the write bit, which arm64's
            // contpte_ptep_set_access_flags() cannot do across a contig
            // block: it unfolds the block first.
            if cont {
                let (b, n) = block_of(cx, addr);
                for a in b..b + n {
                    let q = cx.peek(a);
                    cx.poke(a, arch.pte_mknoncont(q));
                }
            }
            let p = cx.peek(addr);
            cx.poke(
                addr,
                arch.pte_mkwrite(arch.pte_mkdirty(arch.pte_mkyoung(p))),
            );
        }
        PteTweak::SoftDirty if !cont => cx.poke(addr, arch.pte_mksoft_dirty(p)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_plain_folios_is_placed_as_one_by_one() {
        for order in [0u8, 1, 4, 9] {
            for count in [1usize, 2, 7] {
                for (va, pfn) in [(4096, 1 << 20), (4099, (1 << 20) + 3), (7, 513)] {
                    let mut one = Cursor { va, pfn };
                    let mut run = Cursor { va, pfn };
                    let f = FolioPlacement::whole(order);
                    let at: Vec<(u64, Pfn)> = (0..count).map(|_| one.place(&f)).collect();
                    let (va0, head, stride) = run.place_run(order, count);
                    let n = 1u64 << order;
                    let want: Vec<(u64, Pfn)> = (0..count as u64)
                        .map(|k| (va0 + k * n, Pfn(head.0 + k * stride)))
                        .collect();
                    assert_eq!(at, want, "order {order} count {count}");
                    assert_eq!((one.va, one.pfn), (run.va, run.pfn));
                }
            }
        }
    }
}
