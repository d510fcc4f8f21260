//! The context every model function receives (`&mut Cx<A>`): the arch
//! configuration, the kernel version's feature switches, the mm, the
//! counters, the hardware TLB model and the log of flushes.
//!
//! Kernel counterpart: none directly — it plays the role of the state the
//! kernel threads through a walk (`struct mm_struct`, `struct mmu_gather`,
//! the CPU's TLB). Counting happens here, at the primitive that costs
//! (`load`, `store`, `xchg0`, `touch_page`), so no caller can forget it.

use crate::arch::{Arch, PteValue};
use crate::counters::Counters;
use crate::mm::Mm;
use crate::strategy::{KFn, Kernel};
use crate::tlb::{FlushOp, FlushSource, TlbModel};
use crate::types::Pfn;

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct Cx<A: Arch> {
    /// Architecture and its runtime configuration.
    pub arch: A,
    /// Kernel version being modelled.
    pub kernel: Kernel,
    /// The address space.
    pub mm: Mm<A::Pte>,
    /// Counted primitives since the last [`Cx::take_counters`].
    pub counters: Counters,
    /// Hardware TLB model (`None`: not checked, faster).
    pub tlb: Option<TlbModel<A::Pte>>,
    /// Let `change_pte_range()` replay a PTE's step on like PTEs
    /// ([`crate::Arch::RUN_REPLAY`]); on by default, off in the tests that
    /// hold the replay to the step-by-step walk.
    pub run_replay: bool,
    /// Flushes issued since the last [`Cx::take_flushes`].
    pub flushes: Vec<FlushOp>,
    /// The struct page read last (for `page_reads`).
    last_page: Option<u64>,
    /// Batch-size histogram, dense (folded into `counters` when taken).
    batch_hist: Vec<u64>,
    /// Function entries by [`KFn::index`] (folded into `counters` when taken).
    fn_calls: [u64; KFn::ALL.len()],
    /// Bit [`KFn::index`] set when this kernel's build has the function out
    /// of line: [`Cx::calls`] runs several times a PTE, and
    /// [`crate::Strategy::out_of_line`] is a match on release and arch.
    out_of_line: u64,
}

impl<A: Arch> Cx<A> {
    /// A context over `mm`; `check_tlb` enables the hardware TLB model.
    pub fn new(arch: A, kernel: Kernel, mm: Mm<A::Pte>, check_tlb: bool) -> Self {
        let tlb = check_tlb.then(|| TlbModel::new(mm.pt.base(), mm.pt.len()));
        const _: () = assert!(KFn::ALL.len() <= 64);
        let out_of_line = KFn::ALL
            .iter()
            .filter(|f| kernel.release.out_of_line(arch.build_arch(), **f))
            .fold(0u64, |m, f| m | 1 << f.index());
        Cx {
            arch,
            kernel,
            mm,
            counters: Counters::default(),
            tlb,
            run_replay: true,
            flushes: Vec::new(),
            last_page: None,
            batch_hist: Vec::new(),
            fn_calls: [0; KFn::ALL.len()],
            out_of_line,
        }
    }

    /// The entry at `addr`, without counting (for checks and setup).
    #[inline]
    pub fn peek(&self, addr: u64) -> A::Pte {
        self.mm.pt.get(addr)
    }

    /// Write an entry without counting or TLB effects (setup only).
    #[inline]
    pub fn poke(&mut self, addr: u64, pte: A::Pte) {
        self.mm.pt.set(addr, pte)
    }

    /// One load of a PTE word (`READ_ONCE`, `__ptep_get`).
    #[inline]
    pub fn load(&mut self, addr: u64) -> A::Pte {
        self.counters.pte_loads += 1;
        self.mm.pt.get(addr)
    }

    /// One plain store of a PTE word (`WRITE_ONCE`, `__set_pte_nosync`).
    /// Another CPU may walk the new entry at once, so a hardware-valid value
    /// enters the TLB model.
    #[inline]
    pub fn store(&mut self, addr: u64, pte: A::Pte) {
        self.counters.pte_stores += 1;
        self.mm.pt.set(addr, pte);
        if let Some(tlb) = self.tlb.as_mut() {
            if self.arch.pte_hw_valid(pte) {
                tlb.cache(addr, pte);
            }
        }
    }

    /// One atomic exchange of a PTE with 0 (`xchg`, `__ptep_get_and_clear`).
    #[inline]
    pub fn xchg0(&mut self, addr: u64) -> A::Pte {
        self.counters.pte_xchg += 1;
        let old = self.mm.pt.get(addr);
        self.mm.pt.set(addr, A::Pte::from_val(0));
        old
    }

    /// A read of the struct page of `pfn` (one memmap cache line, free when
    /// it is the struct page read just before).
    #[inline]
    pub fn touch_page(&mut self, pfn: Pfn) {
        if self.last_page != Some(pfn.0) {
            self.counters.page_reads += 1;
            self.last_page = Some(pfn.0);
        }
    }

    /// A call of `f`: counted as one function entry when this kernel's
    /// build has `f` out of line on this arch ([`crate::Strategy::out_of_line`]).
    #[inline]
    pub fn call(&mut self, f: KFn) {
        self.calls(f, 1);
    }

    /// `n` calls of `f` (see [`Cx::call`]).
    #[inline]
    pub fn calls(&mut self, f: KFn, n: u64) {
        // `counters.calls` is their sum, added when the counters are taken.
        if self.out_of_line >> f.index() & 1 != 0 {
            self.fn_calls[f.index()] += n;
        }
    }

    /// Issue an arch range flush of `[start, end)` (pages), count it, log it
    /// and apply it to the TLB model.
    pub fn arch_flush(&mut self, start: u64, end: u64, source: FlushSource) {
        let pages = end.saturating_sub(start);
        let cost = self.arch.flush_cost(start, pages);
        match source {
            FlushSource::ContpteConvert => self.counters.tlbi_sync += 1,
            FlushSource::MmuGather | FlushSource::FlushTlbRange => {
                self.counters.tlb_flush_calls += 1;
                self.counters.tlb_flush_pages += pages;
                self.counters.full_flushes += u64::from(cost.full);
            }
        }
        self.counters.tlbi_ops += cost.ops;
        self.flushes.push(FlushOp {
            start,
            pages,
            full: cost.full,
            ops: cost.ops,
            source,
        });
        let arch = self.arch;
        if let Some(tlb) = self.tlb.as_mut() {
            if cost.full {
                tlb.invalidate_all();
            } else {
                tlb.invalidate(start, end, arch.max_tlb_span(), |p| arch.tlb_entry_span(p));
            }
        }
    }

    /// Record one loop iteration that handled `nr` present PTEs.
    #[inline]
    pub fn record_batch(&mut self, nr: u64) {
        self.counters.batches += 1;
        let i = nr as usize;
        if i >= self.batch_hist.len() {
            self.batch_hist.resize(i + 1, 0);
        }
        self.batch_hist[i] += 1;
    }

    /// The struct page read last (`page_reads` does not count it again).
    #[inline]
    pub(crate) fn last_page(&self) -> Option<u64> {
        self.last_page
    }

    /// [`Cx::last_page`] after a replayed step.
    #[inline]
    pub(crate) fn set_last_page(&mut self, pfn: u64) {
        self.last_page = Some(pfn);
    }

    /// The counts so far, for [`Cx::since`].
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            scalars: self.counters.scalar_array(),
            fn_calls: self.fn_calls,
            batches: self.batch_hist.clone(),
            flushes: self.flushes.len(),
        }
    }

    /// What was counted since `m`, if it is what a step of one PTE can
    /// count: no flush issued, at most one batch recorded.
    pub(crate) fn since(&self, m: &Mark) -> Option<Delta> {
        if self.flushes.len() != m.flushes {
            return None;
        }
        let mut scalars = self.counters.scalar_array();
        for (d, b) in scalars.iter_mut().zip(m.scalars) {
            *d = d.checked_sub(b)?;
        }
        let mut fn_calls = self.fn_calls;
        for (d, b) in fn_calls.iter_mut().zip(m.fn_calls) {
            *d = d.checked_sub(b)?;
        }
        let mut batch = None;
        for (nr, &n) in self.batch_hist.iter().enumerate() {
            match n.checked_sub(m.batches.get(nr).copied().unwrap_or(0))? {
                0 => {}
                1 if batch.is_none() => batch = Some(nr),
                _ => return None,
            }
        }
        Some(Delta {
            scalars,
            fn_calls,
            batch,
        })
    }

    /// Count `d` again `k` times (`k` replayed steps).
    pub(crate) fn add_delta(&mut self, d: &Delta, k: u64) {
        if k == 0 {
            return;
        }
        self.counters.add_scalars(&d.scalars, k);
        for (c, n) in self.fn_calls.iter_mut().zip(d.fn_calls) {
            *c += n * k;
        }
        if let Some(nr) = d.batch {
            self.batch_hist[nr] += k;
        }
    }

    /// Return the counters and start from zero.
    pub fn take_counters(&mut self) -> Counters {
        self.last_page = None;
        for (nr, n) in self.batch_hist.iter_mut().enumerate() {
            if *n > 0 {
                *self.counters.batch_sizes.entry(nr as u64).or_default() += *n;
                *n = 0;
            }
        }
        for (f, n) in KFn::ALL.iter().zip(self.fn_calls.iter_mut()) {
            if *n > 0 {
                self.counters.calls += *n;
                *self
                    .counters
                    .functions
                    .entry(f.name().to_string())
                    .or_default() += *n;
                *n = 0;
            }
        }
        std::mem::take(&mut self.counters)
    }

    /// Return the flush log and start a new one.
    pub fn take_flushes(&mut self) -> Vec<FlushOp> {
        std::mem::take(&mut self.flushes)
    }

    /// Syscall entry: a worst-case TLB holds every hardware-valid entry of
    /// `[start, end)` (user space has touched everything).
    pub fn tlb_fill(&mut self, start: u64, end: u64) {
        let arch = self.arch;
        if let Some(tlb) = self.tlb.as_mut() {
            tlb.cache_all(start, self.mm.pt.slice(start, end), |p| {
                arch.pte_hw_valid(p)
            });
        }
    }

    /// Syscall return: no TLB entry grants more than its PTE.
    pub fn tlb_check(&self) -> Result<(), String> {
        match &self.tlb {
            None => Ok(()),
            Some(tlb) => tlb.check(&self.arch, &self.mm.pt),
        }
    }
}

/// The counts at one point of a walk ([`Cx::mark`]).
#[derive(Clone, Debug)]
pub(crate) struct Mark {
    scalars: [u64; Counters::LEN],
    fn_calls: [u64; KFn::ALL.len()],
    batches: Vec<u64>,
    flushes: usize,
}

/// The counts of one step of a walk ([`Cx::since`]).
#[derive(Clone, Debug)]
pub(crate) struct Delta {
    pub(crate) scalars: [u64; Counters::LEN],
    fn_calls: [u64; KFn::ALL.len()],
    /// The batch size it recorded, if any.
    pub(crate) batch: Option<usize>,
}

impl Delta {
    /// The scalar counter `name` (one of [`Counters::NAMES`]).
    pub(crate) fn scalar(&self, name: &str) -> u64 {
        Counters::NAMES
            .iter()
            .position(|n| *n == name)
            .map_or(0, |i| self.scalars[i])
    }
}
