//! The model side of a crosscheck: the same syscall sequence on the model's
//! address space (x86-64, or arm64 with 4K pages), keeping the page table so
//! that per-page effects (writable PTEs, pagemap bits) can be read after each
//! call.
//!
//! The standard layout is the one `run_model` builds (one VMA of whole,
//! naturally aligned, exclusive folios starting at a PMD boundary); scenarios
//! bring their own [`LayoutSpec`] (AnonExclusive patterns, offsets).

use ptelab_model::layout::{build, build_file, FolioPlacement, LayoutSpec, PteTweak};
use ptelab_model::workload::{check_invariants, retouch};
use ptelab_model::{Arch, ArchConfig, Arm64, Cx, FlushOp, Prot, Strategy, VmFlags, X86};

/// Per-page state user space can observe, from the model's page table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageState {
    /// pagemap bit 63.
    pub present: Vec<bool>,
    /// pagemap bit 56: mapped by exactly one PTE of one mm (the model has one mm).
    pub exclusive: Vec<bool>,
    /// pagemap bit 55: PTE soft-dirty or the VMA's `VM_SOFTDIRTY`.
    pub soft_dirty: Vec<bool>,
}

/// A model address space of one arch being driven call by call.
pub struct SimOf<A: Arch> {
    cx: Cx<A>,
    /// First page of the region (moves with mremap).
    start: u64,
    /// Pages in the region.
    pages: u64,
}

/// [`SimOf`] for the arch of the kernel being checked.
pub enum Sim {
    X86(SimOf<X86>),
    Arm64(SimOf<Arm64>),
}

/// Run `$body` with `$s` bound to the arch-specific simulation.
macro_rules! each {
    ($sim:expr, $s:ident => $body:expr) => {
        match $sim {
            Sim::X86($s) => $body,
            Sim::Arm64($s) => $body,
        }
    };
}

/// Entries per PTE table of `arch` (512 with 4K pages).
fn ptrs_per_pte(arch: &ArchConfig) -> u64 {
    match arch {
        ArchConfig::X86 => X86.ptrs_per_pte(),
        ArchConfig::Arm64(a) => a.ptrs_per_pte(),
    }
}

/// Layout of `run_model`'s cells: `pages` pages of whole folios of
/// `folio_pages` from a PMD-aligned base, plus room above for mremap.
/// `VM_SOFTDIRTY` (a new VMA's) only where the arch tracks soft-dirty.
pub fn standard_spec(arch: &ArchConfig, pages: u64, folio_pages: u64, room: bool) -> LayoutSpec {
    let ptrs = ptrs_per_pte(arch);
    let base = 4 * ptrs.max(folio_pages);
    let order = folio_pages.trailing_zeros() as u8;
    let nfolios = pages.div_ceil(folio_pages);
    let mut vma_flags = VmFlags::READ | VmFlags::WRITE;
    if matches!(arch, ArchConfig::X86) {
        vma_flags |= VmFlags::SOFTDIRTY;
    }
    LayoutSpec {
        base,
        vma_flags,
        folios: vec![FolioPlacement::whole(order); nfolios as usize],
        extra_window: if room {
            nfolios * folio_pages + ptrs
        } else {
            0
        },
    }
}

/// The standard layout with a per-page `PageAnonExclusive` pattern applied to
/// folio `folio` (pages not exclusive are write-protected, as fork leaves them).
pub fn with_exclusive(mut spec: LayoutSpec, folio: usize, exclusive: Vec<bool>) -> LayoutSpec {
    spec.folios[folio].exclusive = exclusive;
    spec
}

/// Scenario (b)'s layout: a `MAP_SHARED` mapping of an ext4 file of
/// `folio_pages` page-cache folios, every page read-faulted (clean,
/// read-only), then the `dirty` pages written (dirty, writable).
/// `soft_dirty`: the kernel tracks soft-dirty, so read-faulted PTEs lack the
/// bit that x86 `pte_mkdirty()` sets on written ones (and
/// `FPB_RESPECT_SOFT_DIRTY` cuts batches there); without tracking the bit
/// does not exist, which the model's x86 expresses by setting it everywhere.
pub fn shared_file_spec(
    arch: &ArchConfig,
    folio_pages: u64,
    dirty: &[bool],
    soft_dirty: bool,
) -> LayoutSpec {
    let mut spec = standard_spec(arch, dirty.len() as u64, folio_pages, false);
    spec.vma_flags |= VmFlags::SHARED;
    for (i, &d) in dirty.iter().enumerate() {
        let (f, k) = (i / folio_pages as usize, i as u64 % folio_pages);
        if !soft_dirty && matches!(arch, ArchConfig::X86) {
            spec.folios[f].tweaks.push((k, PteTweak::SoftDirty));
        }
        if d {
            spec.folios[f].tweaks.push((k, PteTweak::WriteFault));
        }
    }
    spec
}

impl Sim {
    /// Fault `spec` in as a shared mapping of a file with `page_mkwrite`.
    pub fn new_file(
        arch: &ArchConfig,
        strategy: Strategy,
        spec: &LayoutSpec,
        start: u64,
        pages: u64,
    ) -> Sim {
        Sim::faulted(arch, strategy, spec, start, pages, true)
    }

    /// Fault `spec` in under `strategy`; the region is `[start, start+pages)`.
    pub fn new(
        arch: &ArchConfig,
        strategy: Strategy,
        spec: &LayoutSpec,
        start: u64,
        pages: u64,
    ) -> Sim {
        Sim::faulted(arch, strategy, spec, start, pages, false)
    }

    fn faulted(
        arch: &ArchConfig,
        strategy: Strategy,
        spec: &LayoutSpec,
        start: u64,
        pages: u64,
        file: bool,
    ) -> Sim {
        let k = strategy.kernel_features();
        match *arch {
            ArchConfig::X86 => Sim::X86(SimOf {
                cx: if file {
                    build_file(X86, k, spec, true).0
                } else {
                    build(X86, k, spec, true).0
                },
                start,
                pages,
            }),
            ArchConfig::Arm64(a) => Sim::Arm64(SimOf {
                cx: if file {
                    build_file(a, k, spec, true).0
                } else {
                    build(a, k, spec, true).0
                },
                start,
                pages,
            }),
        }
    }

    /// The standard layout of a `pages`-page region of `folio_pages` folios.
    pub fn standard(
        arch: &ArchConfig,
        strategy: Strategy,
        pages: u64,
        folio_pages: u64,
        room: bool,
    ) -> Sim {
        let spec = standard_spec(arch, pages, folio_pages, room);
        let start = spec.base;
        Sim::new(arch, strategy, &spec, start, pages)
    }

    /// Pages in the region.
    pub fn pages(&self) -> u64 {
        each!(self, s => s.pages)
    }

    /// `mprotect` of pages `[start+off, start+off+len)`; its flushes.
    pub fn mprotect(&mut self, off: u64, len: u64, prot: Prot) -> anyhow::Result<Vec<FlushOp>> {
        each!(self, s => s.mprotect(off, len, prot))
    }

    /// `mprotect` of the whole region.
    #[cfg(test)]
    pub fn mprotect_all(&mut self, prot: Prot) -> anyhow::Result<Vec<FlushOp>> {
        let n = self.pages();
        self.mprotect(0, n, prot)
    }

    /// `mremap(MAYMOVE|FIXED)` of the region to `start + pages`; its flushes.
    pub fn mremap_up(&mut self) -> anyhow::Result<Vec<FlushOp>> {
        each!(self, s => s.mremap_up())
    }

    /// Undo [`Sim::mremap_up`] (uncounted).
    pub fn move_back(&mut self) -> anyhow::Result<()> {
        each!(self, s => s.move_back())
    }

    /// Write every page of the region; which pages took a write fault.
    pub fn retouch(&mut self) -> Vec<bool> {
        each!(self, s => s.retouch())
    }

    /// Which pages of the region have a writable PTE.
    #[cfg(test)]
    pub fn writable(&self) -> Vec<bool> {
        each!(self, s => s.writable())
    }

    /// `echo 4 > /proc/self/clear_refs`.
    pub fn clear_soft_dirty(&mut self) {
        each!(self, s => s.clear_soft_dirty())
    }

    /// pagemap bits of the region's pages.
    pub fn state(&self) -> PageState {
        each!(self, s => s.state())
    }
}

impl<A: Arch> SimOf<A> {
    fn syscall_entry(&mut self) {
        let (b, n) = (self.cx.mm.pt.base(), self.cx.mm.pt.len());
        self.cx.tlb_fill(b, b + n);
        self.cx.take_counters();
        self.cx.take_flushes();
    }

    fn syscall_exit(&mut self) -> anyhow::Result<Vec<FlushOp>> {
        check_invariants(&self.cx).map_err(|e| anyhow::anyhow!("model: {e}"))?;
        self.cx.take_counters();
        Ok(self.cx.take_flushes())
    }

    fn mprotect(&mut self, off: u64, len: u64, prot: Prot) -> anyhow::Result<Vec<FlushOp>> {
        self.syscall_entry();
        ptelab_model::mprotect::mprotect(&mut self.cx, self.start + off, len, prot)
            .map_err(|e| anyhow::anyhow!("model mprotect: {e}"))?;
        self.syscall_exit()
    }

    fn mremap_up(&mut self) -> anyhow::Result<Vec<FlushOp>> {
        self.syscall_entry();
        let to = self.start + self.pages;
        ptelab_model::mremap::mremap(&mut self.cx, self.start, self.pages, to)
            .map_err(|e| anyhow::anyhow!("model mremap: {e}"))?;
        self.start = to;
        self.syscall_exit()
    }

    fn move_back(&mut self) -> anyhow::Result<()> {
        self.syscall_entry();
        let to = self.start - self.pages;
        ptelab_model::mremap::mremap(&mut self.cx, self.start, self.pages, to)
            .map_err(|e| anyhow::anyhow!("model mremap: {e}"))?;
        self.start = to;
        self.syscall_exit().map(|_| ())
    }

    /// A write faults where the PTE is present but not writable or not
    /// hardware-valid (arm64 hardware dirty management sets dirty on a
    /// writable clean PTE without a fault).
    fn retouch(&mut self) -> Vec<bool> {
        let arch = self.cx.arch;
        let faults = (self.start..self.start + self.pages)
            .map(|a| {
                let p = self.cx.peek(a);
                arch.pte_present(p) && !(arch.pte_hw_valid(p) && arch.pte_write(p))
            })
            .collect();
        retouch(&mut self.cx, self.start, self.start + self.pages);
        self.cx.take_counters();
        self.cx.take_flushes();
        faults
    }

    #[cfg(test)]
    fn writable(&self) -> Vec<bool> {
        let arch = self.cx.arch;
        (self.start..self.start + self.pages)
            .map(|a| {
                let p = self.cx.peek(a);
                arch.pte_present(p) && arch.pte_write(p)
            })
            .collect()
    }

    /// fs/proc/task_mmu.c `clear_refs_pte_range` with CLEAR_REFS_SOFT_DIRTY:
    /// every present PTE write-protected with soft-dirty cleared;
    /// `VM_SOFTDIRTY` cleared on every VMA (their `vm_page_prot`
    /// recomputed); the TLB flushed. Without soft-dirty tracking
    /// (`CONFIG_MEM_SOFT_DIRTY`, arm64) the kernel does nothing.
    fn clear_soft_dirty(&mut self) {
        let arch = self.cx.arch;
        if !arch.has_soft_dirty() {
            return;
        }
        for v in self.cx.mm.vmas.iter_mut() {
            v.flags.remove(VmFlags::SOFTDIRTY);
            v.set_page_prot(&arch);
        }
        let (b, n) = (self.cx.mm.pt.base(), self.cx.mm.pt.len());
        for a in b..b + n {
            let p = self.cx.peek(a);
            if arch.pte_present(p) {
                let q = arch.pte_clear_soft_dirty(arch.pte_wrprotect(p));
                self.cx.poke(a, q);
            }
        }
        if let Some(t) = self.cx.tlb.as_mut() {
            t.invalidate_all();
        }
    }

    fn state(&self) -> PageState {
        let arch = self.cx.arch;
        let mut s = PageState::default();
        for a in self.start..self.start + self.pages {
            let p = self.cx.peek(a);
            let present = arch.pte_present(p);
            let vma_sd = self
                .cx
                .mm
                .find_vma(a)
                .is_some_and(|v| v.flags.contains(VmFlags::SOFTDIRTY));
            let mapped_page = present && self.cx.mm.memmap.page(arch.pte_pfn(p)).is_some();
            s.present.push(present);
            s.exclusive.push(mapped_page);
            s.soft_dirty
                .push(vma_sd || (present && arch.pte_soft_dirty(p)));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86A: ArchConfig = ArchConfig::X86;

    #[test]
    fn toggle_64k_flushes_once_on_none_and_not_on_rw() {
        let mut s = Sim::standard(&X86A, Strategy::V6_17, 16, 16, false);
        let f = s.mprotect_all(Prot::None).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].trace_pages(), 16);
        assert!(s.mprotect_all(Prot::ReadWrite).unwrap().is_empty());
        assert_eq!(s.writable(), vec![true; 16]);
        let st = s.state();
        assert_eq!(st.present, vec![true; 16]);
        assert_eq!(st.soft_dirty, vec![true; 16]);
    }

    #[test]
    fn mixed_anon_exclusive_upgrades_only_exclusive_pages() {
        let ex: Vec<bool> = (0..16).map(|i| i < 4 || i == 9).collect();
        let spec = with_exclusive(standard_spec(&X86A, 16, 16, false), 0, ex.clone());
        let start = spec.base;
        let mut s = Sim::new(&X86A, Strategy::V6_17, &spec, start, 16);
        s.mprotect_all(Prot::Read).unwrap();
        s.mprotect_all(Prot::ReadWrite).unwrap();
        assert_eq!(s.writable(), ex);
        let faults = s.retouch();
        assert_eq!(faults, ex.iter().map(|e| !e).collect::<Vec<_>>());
    }

    #[test]
    fn clear_refs_stops_the_write_upgrade_of_small_folios_only() {
        // Order-0: soft-dirty tracking wants a write fault per page.
        let mut s = Sim::standard(&X86A, Strategy::V6_17, 16, 1, false);
        s.clear_soft_dirty();
        s.mprotect_all(Prot::Read).unwrap();
        s.mprotect_all(Prot::ReadWrite).unwrap();
        assert_eq!(s.writable(), vec![false; 16]);
        assert_eq!(s.state().soft_dirty, vec![false; 16]);
        // 64K folios: the batch merges dirty with x86 pte_mkdirty(), which
        // also sets soft-dirty (docs/kernel.md §4.6), so the upgrade happens.
        let mut s = Sim::standard(&X86A, Strategy::V6_17, 16, 16, false);
        s.clear_soft_dirty();
        s.mprotect_all(Prot::Read).unwrap();
        s.mprotect_all(Prot::ReadWrite).unwrap();
        assert_eq!(s.writable(), vec![true; 16]);
        assert_eq!(s.state().soft_dirty, vec![true; 16]);
    }

    /// Scenario (b) on the model: RO then RW of the shared file mapping;
    /// flushes of both calls and the pages that fault on re-touch.
    fn shared_file(strategy: Strategy, fp: u64, soft_dirty: bool) -> (u64, u64, Vec<bool>) {
        let dirty = crate::file::dirty_pages();
        let spec = shared_file_spec(&X86A, fp, &dirty, soft_dirty);
        let mut s = Sim::new_file(&X86A, strategy, &spec, spec.base, 64);
        let ro = s.mprotect_all(Prot::Read).unwrap();
        let rw = s.mprotect_all(Prot::ReadWrite).unwrap();
        assert_eq!(s.state().present, vec![true; 64]);
        let pages = |f: &[FlushOp]| {
            assert_eq!(f.len(), 1);
            f[0].trace_pages() as u64
        };
        (pages(&ro), pages(&rw), s.retouch())
    }

    #[test]
    fn shared_file_batched_upgrades_clean_pages_of_dirty_batches() {
        let (ro, rw, faults) = shared_file(Strategy::V6_17, 16, false);
        // Write removed from 21..36; added back to folios 1 and 2 (16..48).
        assert_eq!((ro, rw), (15, 32));
        let want: Vec<bool> = (0..64).map(|i| !(16..48).contains(&i)).collect();
        assert_eq!(faults, want);
        // v6.16: only the dirty pages are upgraded.
        let (ro, rw, faults) = shared_file(Strategy::V6_16, 16, false);
        assert_eq!((ro, rw), (15, 15));
        let dirty = crate::file::dirty_pages();
        assert_eq!(faults, dirty.iter().map(|d| !d).collect::<Vec<_>>());
        // Order-0 page cache: batches of one, the same as v6.16.
        let (_, rw, faults) = shared_file(Strategy::V6_17, 1, false);
        assert_eq!(rw, 15);
        assert_eq!(faults, dirty.iter().map(|d| !d).collect::<Vec<_>>());
    }

    #[test]
    fn shared_file_with_soft_dirty_tracking_cuts_batches_at_written_pages() {
        // Read-faulted PTEs are not soft-dirty, written ones are: the batch
        // stops at the boundary, so the clean pages fault as in v6.16.
        let (_, _, faults) = shared_file(Strategy::V6_17, 16, true);
        let dirty = crate::file::dirty_pages();
        assert_eq!(faults, dirty.iter().map(|d| !d).collect::<Vec<_>>());
    }

    #[test]
    fn clear_refs_retouch_tells_per_pte_from_batched_kernels() {
        // The guests' discriminating row: per-PTE keeps each PTE's own
        // (cleared) soft-dirty bit, so nothing is upgraded and every page
        // faults; batched merges dirty with pte_mkdirty(), which sets it.
        let run = |s| {
            let mut sim = Sim::standard(&X86A, s, 16, 16, false);
            sim.clear_soft_dirty();
            sim.mprotect_all(Prot::Read).unwrap();
            sim.mprotect_all(Prot::ReadWrite).unwrap();
            sim.retouch()
        };
        assert_eq!(run(Strategy::V6_16), vec![true; 16]);
        assert_eq!(run(Strategy::V6_17), vec![false; 16]);
    }

    #[test]
    fn arm64_sim_has_no_soft_dirty_and_upgrades_on_rw() {
        let arm = ArchConfig::arm64(ptelab_model::Granule::K4);
        for s in [Strategy::V6_16, Strategy::V6_17] {
            let mut sim = Sim::standard(&arm, s, 16, 16, false);
            assert!(matches!(sim, Sim::Arm64(_)));
            // NONE flushes the 64K block (and v6.16 repaints it).
            assert!(!sim.mprotect_all(Prot::None).unwrap().is_empty());
            sim.mprotect_all(Prot::ReadWrite).unwrap();
            sim.clear_soft_dirty(); // nothing on arm64
            sim.mprotect_all(Prot::Read).unwrap();
            sim.mprotect_all(Prot::ReadWrite).unwrap();
            let st = sim.state();
            assert_eq!(st.present, vec![true; 16]);
            assert_eq!(st.soft_dirty, vec![false; 16], "{s}");
            assert_eq!(sim.retouch(), vec![false; 16], "{s}");
        }
    }

    #[test]
    fn mremap_moves_the_region_up() {
        let mut s = Sim::standard(&X86A, Strategy::V6_17, 16, 16, true);
        let f = s.mremap_up().unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(s.state().present, vec![true; 16]);
    }
}
