//! TLB flushing: the mmu_gather that accumulates ranges, the log of flushes
//! issued, and a hardware TLB model that checks the result.
//!
//! Kernel counterpart: include/asm-generic/tlb.h (`struct mmu_gather`,
//! `tlb_gather_mmu`, `tlb_flush_pte_range`, `tlb_end_vma`,
//! `tlb_flush_mmu_tlbonly`, `tlb_finish_mmu`), as used by mprotect since
//! v6.2. The arch flush itself is [`crate::arch::Arch::tlb_flush`]. The TLB
//! model has no kernel counterpart: it is the oracle for invariant 10.2 of
//! docs/kernel.md (no stale permission when the syscall returns).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::arch::{Arch, PteValue};
use crate::cx::Cx;
use crate::mm::PageTable;

/// Who issued a flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlushSource {
    /// `tlb_flush()` from an mmu_gather (mprotect's per-VMA flush).
    MmuGather,
    /// `flush_tlb_range()` (mremap's per-PMD-extent flush).
    FlushTlbRange,
    /// The synchronous TLBI of arm64 `contpte_convert()` (break-before-make).
    ContpteConvert,
}

/// One flush operation as issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushOp {
    /// First page (virtual page number).
    pub start: u64,
    /// Pages requested.
    pub pages: u64,
    /// Executed as a whole-mm flush (x86 `TLB_FLUSH_ALL`, arm64 ASID flush).
    pub full: bool,
    /// Hardware invalidation instructions.
    pub ops: u64,
    /// Issuer.
    pub source: FlushSource,
}

impl FlushOp {
    /// The `pages` field of the x86 `tlb:tlb_flush` tracepoint record this
    /// flush produces: the page count, or -1 (`TLB_FLUSH_ALL`) for a full flush.
    pub fn trace_pages(&self) -> i64 {
        if self.full {
            -1
        } else {
            self.pages as i64
        }
    }
}

/// `struct mmu_gather` for a PTE-level walk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MmuGather {
    start: u64,
    end: u64,
    cleared_ptes: bool,
}

impl MmuGather {
    /// `tlb_gather_mmu()`.
    pub fn tlb_gather_mmu() -> Self {
        MmuGather {
            start: u64::MAX,
            end: 0,
            cleared_ptes: false,
        }
    }

    /// `tlb_flush_pte_range()`: widen the pending range to cover `nr` pages at
    /// `addr`. Bookkeeping only, no hardware operation.
    pub fn tlb_flush_pte_range<A: Arch>(&mut self, cx: &mut Cx<A>, addr: u64, nr: u64) {
        cx.counters.tlb_gather_ranges += 1;
        self.widen(addr, nr);
    }

    /// [`MmuGather::tlb_flush_pte_range`] without counting (a replayed step
    /// is counted in bulk).
    #[inline]
    pub(crate) fn widen(&mut self, addr: u64, nr: u64) {
        self.start = self.start.min(addr);
        self.end = self.end.max(addr + nr);
        self.cleared_ptes = true;
    }

    /// `tlb_start_vma()`: nothing to do for x86/arm64 user VMAs.
    pub fn tlb_start_vma(&mut self) {}

    /// `tlb_end_vma()`: flush and reset the range at each VMA boundary.
    pub fn tlb_end_vma<A: Arch>(&mut self, cx: &mut Cx<A>) {
        self.tlb_flush_mmu_tlbonly(cx);
    }

    /// `tlb_flush_mmu_tlbonly()`: one arch flush over the hull, if any PTE
    /// needed one.
    pub fn tlb_flush_mmu_tlbonly<A: Arch>(&mut self, cx: &mut Cx<A>) {
        if self.cleared_ptes {
            A::tlb_flush(cx, self.start, self.end);
        }
        *self = MmuGather::tlb_gather_mmu();
    }

    /// `tlb_finish_mmu()`: flush whatever is left.
    pub fn tlb_finish_mmu<A: Arch>(mut self, cx: &mut Cx<A>) {
        self.tlb_flush_mmu_tlbonly(cx);
    }
}

/// Ways held in line per page. Between two invalidations the modelled
/// workloads cache one value per page (syscall entry) or two (plus the one
/// mprotect stores); only arm64 contpte repaints of odd layouts use more.
const INLINE: usize = 2;

/// A worst-case TLB: for each page, every hardware-valid value any CPU may
/// have cached since the last invalidation covering it.
///
/// Four ways per page, then a list: ways 0-1 in line (16 bytes a page),
/// ways 2-3 in `spill` for the pages that use them, so a 1G region costs
/// 4 MB, not the 8 MB of four ways in line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlbModel<P> {
    base: u64,
    slots: Vec<[P; INLINE]>,
    /// One bit per 64 slots, set when one of them caches a value (a slot
    /// or a spilled way): a full flush clears those only (mremap flushes
    /// all once per PMD moved, which cleared the whole window each time:
    /// 512 x 8 MB at 1G), and the syscall-return check reads those only
    /// (after mprotect's full flush, none).
    live: Vec<u64>,
    /// Ways 2-3 by page; never both empty.
    spill: BTreeMap<u64, [P; 2]>,
    overflow: Vec<(u64, P)>,
}

/// Put `pte` in the first free way unless a way holds it; false when every
/// way holds another value.
fn fill<P: PteValue>(ways: &mut [P], pte: P) -> bool {
    for way in ways.iter_mut() {
        if *way == pte {
            return true;
        }
        if way.is_none() {
            *way = pte;
            return true;
        }
    }
    false
}

impl<P: PteValue> TlbModel<P> {
    /// An empty TLB for pages `[base, base + len)`.
    pub fn new(base: u64, len: u64) -> Self {
        TlbModel {
            base,
            slots: vec![[P::default(); INLINE]; len as usize],
            live: vec![0; (len as usize).div_ceil(64 * 64)],
            spill: BTreeMap::new(),
            overflow: Vec::new(),
        }
    }

    /// A CPU walked `addr` and cached `pte`.
    #[inline]
    pub fn cache(&mut self, addr: u64, pte: P) {
        let i = (addr - self.base) as usize;
        self.live[i / 4096] |= 1 << (i / 64 % 64);
        if !fill(&mut self.slots[i], pte) {
            self.cache_beyond_line(addr, pte);
        }
    }

    /// Ways 2-3, then the overflow list (out of line: the workloads' hot
    /// paths never get here).
    #[inline(never)]
    fn cache_beyond_line(&mut self, addr: u64, pte: P) {
        let spill = self.spill.entry(addr).or_default();
        if fill(spill, pte) {
            return;
        }
        if !self.overflow.contains(&(addr, pte)) {
            self.overflow.push((addr, pte));
        }
    }

    /// [`TlbModel::cache`] of every entry of `ptes` (the table from page
    /// `start` on) that `valid` accepts, in page order: a CPU walked them
    /// all (the syscall-entry fill). One pass over the slots, no per-page
    /// index arithmetic.
    pub fn cache_all(&mut self, start: u64, ptes: &[P], valid: impl Fn(P) -> bool) {
        let first = (start - self.base) as usize;
        let end = first + ptes.len();
        let mut beyond = Vec::new();
        let mut i = first;
        while i < end {
            let chunk = i / 64;
            let hi = ((chunk + 1) * 64).min(end);
            let (w, bit) = (chunk / 64, 1u64 << (chunk % 64));
            let ptes = &ptes[i - first..hi - first];
            let slots = &mut self.slots[i..hi];
            if self.live[w] & bit == 0 {
                // A chunk not marked live holds nothing (only a full flush
                // clears the mark, and it empties the chunk): every valid
                // entry goes to way 0, as `fill` would put it.
                let mut any = false;
                for (&pte, slot) in ptes.iter().zip(slots.iter_mut()) {
                    if valid(pte) {
                        slot[0] = pte;
                        any = true;
                    }
                }
                if any {
                    self.live[w] |= bit;
                }
            } else {
                for (k, (&pte, slot)) in ptes.iter().zip(slots.iter_mut()).enumerate() {
                    if valid(pte) {
                        self.live[w] |= bit;
                        if !fill(slot, pte) {
                            beyond.push((start + (i - first + k) as u64, pte));
                        }
                    }
                }
            }
            i = hi;
        }
        // Page order within ways 2-3 and the overflow list is kept: they are
        // filled here in the order `cache` would have.
        for (addr, pte) in beyond {
            self.cache_beyond_line(addr, pte);
        }
    }

    /// Invalidate `[start, end)`; entries spanning a block (arm64 contiguous)
    /// that overlaps the range are invalidated too, as a TLBI by VA would.
    pub fn invalidate(&mut self, start: u64, end: u64, max_span: u64, span: impl Fn(P) -> u64) {
        let top = self.base + self.slots.len() as u64;
        let lo = start.max(self.base);
        let hi = end.min(top);
        if lo >= hi {
            return;
        }
        for s in &mut self.slots[(lo - self.base) as usize..(hi - self.base) as usize] {
            *s = [P::default(); INLINE];
        }
        if !self.spill.is_empty() {
            let gone: Vec<u64> = self.spill.range(lo..hi).map(|(&a, _)| a).collect();
            for a in gone {
                self.spill.remove(&a);
            }
        }
        self.overflow.retain(|(a, _)| *a < lo || *a >= hi);
        if max_span <= 1 {
            return;
        }
        // Entries just outside the range whose block overlaps it.
        let scan_lo = (lo & !(max_span - 1)).max(self.base);
        let scan_hi = ((hi + max_span - 1) & !(max_span - 1)).min(top);
        let drop_overlapping = |addr: u64, ways: &mut [P]| {
            for way in ways.iter_mut() {
                if way.is_none() {
                    continue;
                }
                let n = span(*way);
                if n > 1 {
                    let bstart = addr & !(n - 1);
                    if bstart < hi && bstart + n > lo {
                        *way = P::default();
                    }
                }
            }
        };
        for addr in (scan_lo..lo).chain(hi..scan_hi) {
            drop_overlapping(addr, &mut self.slots[(addr - self.base) as usize]);
            if let Some(ways) = self.spill.get_mut(&addr) {
                drop_overlapping(addr, ways);
                if ways.iter().all(|w| w.is_none()) {
                    self.spill.remove(&addr);
                }
            }
        }
    }

    /// Invalidate everything.
    pub fn invalidate_all(&mut self) {
        for (w, word) in self.live.iter_mut().enumerate() {
            while *word != 0 {
                let chunk = w * 64 + word.trailing_zeros() as usize;
                let end = (chunk * 64 + 64).min(self.slots.len());
                self.slots[chunk * 64..end].fill([P::default(); INLINE]);
                *word &= *word - 1;
            }
        }
        self.spill.clear();
        self.overflow.clear();
    }

    /// Check every cached entry against the page table: none may grant more
    /// than the PTE it translates now. A contiguous entry is checked against
    /// every page of its block.
    pub fn check<A: Arch<Pte = P>>(&self, arch: &A, pt: &PageTable<P>) -> Result<(), String> {
        // Contiguous entries cached from one block are the same translation
        // rebased; check each distinct one once against the whole block.
        let mut block_start = u64::MAX;
        let mut seen: Vec<P> = Vec::new();
        let one = |addr: u64, cached: P| -> Result<(), String> {
            let span = arch.tlb_entry_span(cached);
            if span <= 1 {
                let cur = pt.get(addr);
                if arch.tlb_entry_grants_more(cached, cur) {
                    return Err(format!(
                        "stale TLB entry at page {addr:#x}: cached {cached:?} grants more than {cur:?}"
                    ));
                }
                return Ok(());
            }
            let bstart = addr & !(span - 1);
            let key_pfn = arch.pte_pfn(cached).0.wrapping_sub(addr - bstart);
            let key = arch.pfn_pte(crate::types::Pfn(key_pfn), arch.pte_pgprot(cached));
            if bstart != block_start {
                block_start = bstart;
                seen.clear();
            }
            if seen.contains(&key) {
                return Ok(());
            }
            seen.push(key);
            self.check_block(arch, pt, addr, bstart, span, key)
        };
        self.try_for_each(one)
    }

    /// `f` on every cached `(page, value)`, by page, ways in order, then
    /// the overflow list in the order it filled; stops at the first error.
    pub fn try_for_each<E>(&self, mut f: impl FnMut(u64, P) -> Result<(), E>) -> Result<(), E> {
        let mut spill = self.spill.iter().peekable();
        // Only the chunks marked live can hold anything (spilled ways too):
        // after a full flush the check costs nothing per page.
        for (w, &word) in self.live.iter().enumerate() {
            let mut word = word;
            while word != 0 {
                let chunk = w * 64 + word.trailing_zeros() as usize;
                word &= word - 1;
                let lo = chunk * 64;
                let hi = (lo + 64).min(self.slots.len());
                for (i, slot) in self.slots[lo..hi].iter().enumerate() {
                    let addr = self.base + (lo + i) as u64;
                    for &p in slot {
                        if !p.is_none() {
                            f(addr, p)?;
                        }
                    }
                    if let Some((_, ways)) = spill.next_if(|(&a, _)| a == addr) {
                        for &p in ways {
                            if !p.is_none() {
                                f(addr, p)?;
                            }
                        }
                    }
                }
            }
        }
        for &(addr, p) in &self.overflow {
            f(addr, p)?;
        }
        Ok(())
    }

    fn check_block<A: Arch<Pte = P>>(
        &self,
        arch: &A,
        pt: &PageTable<P>,
        addr: u64,
        bstart: u64,
        span: u64,
        key: P,
    ) -> Result<(), String> {
        if bstart < pt.base() || bstart + span > pt.base() + pt.len() {
            return Ok(());
        }
        // Access/dirty of a contiguous block are block-granular: the
        // hardware may update any entry (what `contpte_ptep_get()` ORs).
        let block = pt.slice(bstart, bstart + span);
        let young = block.iter().any(|p| arch.pte_young(*p));
        let dirty = block.iter().any(|p| arch.pte_dirty(*p));
        for q in bstart..bstart + span {
            let expect = arch.pte_advance_pfn(key, q - bstart);
            let mut cur = pt.get(q);
            if arch.pte_present(cur) && young {
                cur = arch.pte_mkyoung(cur);
            }
            if arch.pte_present(cur) && dirty {
                cur = arch.pte_mkdirty(cur);
            }
            if arch.tlb_entry_grants_more(expect, cur) {
                return Err(format!(
                    "stale contiguous TLB entry cached at page {addr:#x} covers page {q:#x}: {expect:?} grants more than {cur:?}"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::arch::x86::X86Pte;

    /// The TLB model as it was: four ways in line per page, then a list.
    struct Reference {
        base: u64,
        slots: Vec<[X86Pte; 4]>,
        overflow: Vec<(u64, X86Pte)>,
    }

    impl Reference {
        fn cache(&mut self, addr: u64, pte: X86Pte) {
            if !fill(&mut self.slots[(addr - self.base) as usize], pte)
                && !self.overflow.contains(&(addr, pte))
            {
                self.overflow.push((addr, pte));
            }
        }

        fn invalidate(&mut self, lo: u64, hi: u64, max_span: u64) {
            let top = self.base + self.slots.len() as u64;
            let (lo, hi) = (lo.max(self.base), hi.min(top));
            if lo >= hi {
                return;
            }
            for a in lo..hi {
                self.slots[(a - self.base) as usize] = [X86Pte::default(); 4];
            }
            self.overflow.retain(|(a, _)| *a < lo || *a >= hi);
            if max_span <= 1 {
                return;
            }
            let scan_lo = (lo & !(max_span - 1)).max(self.base);
            let scan_hi = ((hi + max_span - 1) & !(max_span - 1)).min(top);
            for addr in (scan_lo..lo).chain(hi..scan_hi) {
                for way in &mut self.slots[(addr - self.base) as usize] {
                    let n = span(*way);
                    if !way.is_none() && n > 1 {
                        let bstart = addr & !(n - 1);
                        if bstart < hi && bstart + n > lo {
                            *way = X86Pte::default();
                        }
                    }
                }
            }
        }

        fn entries(&self) -> Vec<(u64, X86Pte)> {
            let mut v = Vec::new();
            for (i, slot) in self.slots.iter().enumerate() {
                for &p in slot.iter().filter(|p| !p.is_none()) {
                    v.push((self.base + i as u64, p));
                }
            }
            v.extend(&self.overflow);
            v
        }
    }

    /// Values with bit 1 set stand for 16-page contiguous entries.
    fn span(p: X86Pte) -> u64 {
        if p.0 & 2 != 0 {
            16
        } else {
            1
        }
    }

    /// Pages of the window: several 64-slot chunks and 16-page blocks.
    const LEN: u64 = 4200;

    #[derive(Clone, Debug)]
    enum Op {
        Cache(u64, u64),
        /// `cache_all` of `len` pages from the first, values `v + k % 3`
        /// where that is odd (the others stand for invalid entries).
        CacheAll(u64, u64, u64),
        Invalidate(u64, u64, bool),
        All,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0u64..LEN, 1u64..8).prop_map(|(a, v)| Op::Cache(a, v)),
            2 => (0u64..LEN, 0u64..200, 1u64..8).prop_map(|(a, n, v)| Op::CacheAll(a, n.min(LEN - a), v)),
            3 => (0u64..LEN + 40, 0u64..40, any::<bool>()).prop_map(|(a, n, b)| Op::Invalidate(a, a + n, b)),
            1 => Just(Op::All),
        ]
    }

    proptest! {
        #[test]
        fn two_ways_in_line_hold_what_four_did(ops in proptest::collection::vec(op(), 0..300)) {
            let base = 32;
            let mut m = TlbModel::<X86Pte>::new(base, LEN);
            let mut r = Reference { base, slots: vec![[X86Pte::default(); 4]; LEN as usize], overflow: Vec::new() };
            for op in ops {
                match op {
                    Op::Cache(a, v) => {
                        let a = base + a;
                        m.cache(a, X86Pte(v));
                        r.cache(a, X86Pte(v));
                    }
                    Op::CacheAll(a, n, v) => {
                        let a = base + a;
                        let ptes: Vec<X86Pte> = (0..n).map(|k| X86Pte(v + k % 3)).collect();
                        m.cache_all(a, &ptes, |p| p.0 % 2 == 1);
                        for (k, &p) in ptes.iter().enumerate() {
                            if p.0 % 2 == 1 {
                                r.cache(a + k as u64, p);
                            }
                        }
                    }
                    Op::Invalidate(lo, hi, block) => {
                        let max = if block { 16 } else { 1 };
                        m.invalidate(lo, hi, max, span);
                        r.invalidate(lo, hi, max);
                    }
                    Op::All => {
                        m.invalidate_all();
                        r.slots.iter_mut().for_each(|s| *s = [X86Pte::default(); 4]);
                        r.overflow.clear();
                    }
                }
                let mut got = Vec::new();
                m.try_for_each(|a, p| {
                    got.push((a, p));
                    Ok::<(), ()>(())
                })
                .unwrap();
                prop_assert_eq!(got, r.entries());
            }
        }
    }
}
