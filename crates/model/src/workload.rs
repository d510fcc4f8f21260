//! The workloads `ptelab model` runs, and the public entry point
//! [`run_model`].
//!
//! Kernel counterpart: none — these are the user-space programs of the seeds
//! (libMicro-style `mprotect` toggling, seed 001; the RO/RW/re-touch loop of
//! seed 000; the mremap move of seed 002), replayed against the model. Each
//! workload faults its region in, runs one warm-up iteration so that state
//! such as arm64 contpte folding reaches its steady state, then counts one
//! iteration, call by call.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::arch::arm64::Arm64;
use crate::arch::x86::X86;
use crate::arch::Arch;
use crate::counters::Counters;
use crate::cx::Cx;
use crate::layout::{build_generated, FolioPlacement, LayoutSpec};
use crate::mprotect::mprotect;
use crate::mremap;
use crate::rmap::{folio_referenced, Lru, RmapImpl};
use crate::strategy::{Faults, Strategy};
use crate::tlb::FlushOp;
use crate::types::{Granule, Prot, VmFlags};
use crate::ModelError;

/// The workloads the model can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Seed 001: touch once, then mprotect PROT_NONE / PROT_READ|PROT_WRITE alternately.
    MprotectToggle,
    /// Seed 000: mprotect PROT_READ, PROT_READ|PROT_WRITE, re-touch every page.
    MprotectRoRw,
    /// Seed 003: NONE→RW and RW→NONE reported separately (same calls as the toggle).
    ProtTransition,
    /// Seed 002: fill, mremap MAYMOVE|FIXED to addr+len, (munmap).
    MremapMove,
    /// Seed 004, classic LRU: every folio mapped and young (touched), then
    /// one reclaim pass calls `folio_referenced()` on each folio.
    Reclaim,
    /// Seed 004, MGLRU: the same pass through `lru_gen_look_around()` (no
    /// flush; the look-around window is not modelled).
    ReclaimMglru,
}

impl Workload {
    /// Command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::MprotectToggle => "mprotect-toggle",
            Workload::MprotectRoRw => "mprotect-ro-rw",
            Workload::ProtTransition => "prot-transition",
            Workload::MremapMove => "mremap-move",
            Workload::Reclaim => "reclaim",
            Workload::ReclaimMglru => "reclaim-mglru",
        }
    }

    /// The reclaim workloads' LRU, `None` for the others.
    pub fn lru(self) -> Option<Lru> {
        match self {
            Workload::Reclaim => Some(Lru::Classic),
            Workload::ReclaimMglru => Some(Lru::Mglru),
            _ => None,
        }
    }
}

/// Which architecture, configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchConfig {
    /// x86-64, 4K pages.
    X86,
    /// arm64 with its granule and features.
    Arm64(Arm64),
}

impl ArchConfig {
    /// arm64 with the common defaults (contpte on, FEAT_TLBIRANGE, no BBML2).
    pub fn arm64(granule: Granule) -> Self {
        ArchConfig::Arm64(Arm64::new(granule))
    }

    /// "x86_64" or "arm64".
    pub fn name(&self) -> &'static str {
        match self {
            ArchConfig::X86 => "x86_64",
            ArchConfig::Arm64(_) => "arm64",
        }
    }

    /// Base page size.
    pub fn granule(&self) -> Granule {
        match self {
            ArchConfig::X86 => Granule::K4,
            ArchConfig::Arm64(a) => a.granule,
        }
    }
}

/// Everything that selects one model cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelConfig {
    /// Workload.
    pub workload: Workload,
    /// Architecture.
    pub arch: ArchConfig,
    /// Kernel behaviour.
    pub strategy: Strategy,
    /// Region size in bytes (a multiple of the base page).
    pub size_bytes: u64,
    /// Folio size in bytes (a power-of-two multiple of the base page),
    /// PTE-mapped.
    pub folio_bytes: u64,
    /// The region starts this many base pages into its first folio.
    pub offset_pages: u64,
    /// Run the hardware TLB model and check it at every syscall return.
    pub check_tlb: bool,
    /// Injected bugs (tests only).
    pub faults: Faults,
}

impl ModelConfig {
    /// A config with the TLB check on and no faults.
    pub fn new(
        workload: Workload,
        arch: ArchConfig,
        strategy: Strategy,
        size_bytes: u64,
        folio_bytes: u64,
    ) -> Self {
        ModelConfig {
            workload,
            arch,
            strategy,
            size_bytes,
            folio_bytes,
            offset_pages: 0,
            check_tlb: true,
            faults: Faults::default(),
        }
    }
}

/// One counted syscall.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// e.g. `mprotect(PROT_NONE)`.
    pub label: String,
    /// Primitives of this call.
    pub counters: Counters,
    /// Flushes it issued, in order (x86: one `tlb:tlb_flush` record each,
    /// except `contpte-convert` ones which only arm64 has).
    pub flushes: Vec<FlushOp>,
}

/// What one model cell produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelOutcome {
    /// Workload name.
    pub workload: String,
    /// Arch name.
    pub arch: String,
    /// Strategy name.
    pub strategy: String,
    /// Kernel version(s) it stands for.
    pub kernel: String,
    /// Base pages in the region.
    pub pages: u64,
    /// Counted calls of the measured iteration.
    pub calls: Vec<CallRecord>,
    /// Work done outside the counted calls (re-touch faults), per iteration.
    pub outside: Counters,
    /// PTE visits simulated in total (warm-up included), for throughput figures.
    pub ptes_simulated: u64,
    /// Remarks (e.g. "same primitive counts as v6.17").
    pub notes: Vec<String>,
}

impl ModelOutcome {
    /// Counters summed over the counted calls.
    pub fn total(&self) -> Counters {
        let mut t = Counters::default();
        for c in &self.calls {
            t.add(&c.counters);
        }
        t
    }

    /// Counters per call, averaged over the counted calls.
    pub fn per_call(&self) -> BTreeMap<String, f64> {
        self.total().per_call(self.calls.len() as u64)
    }
}

/// Validated geometry of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Pages in the region.
    pub pages: u64,
    /// Folio order in this granule.
    pub order: u8,
    /// Offset of the region into its first folio.
    pub offset: u64,
}

/// Check sizes against the granule.
///
/// # Errors
/// Sizes that are not page multiples, folios smaller than a page or not a
/// power-of-two multiple of it, offsets past the folio.
pub fn geometry(cfg: &ModelConfig) -> Result<Geometry, ModelError> {
    let g = cfg.arch.granule();
    let ps = g.page_size();
    if cfg.size_bytes == 0 || !cfg.size_bytes.is_multiple_of(ps) {
        return Err(ModelError::Size {
            size: cfg.size_bytes,
            page_size: ps,
        });
    }
    if cfg.folio_bytes < ps
        || !cfg.folio_bytes.is_multiple_of(ps)
        || !(cfg.folio_bytes / ps).is_power_of_two()
    {
        return Err(ModelError::Folio {
            folio: cfg.folio_bytes,
            page_size: ps,
        });
    }
    let nr = cfg.folio_bytes / ps;
    if nr > g.ptrs_per_pte() {
        return Err(ModelError::Folio {
            folio: cfg.folio_bytes,
            page_size: ps,
        });
    }
    if cfg.offset_pages >= nr {
        return Err(ModelError::Offset {
            offset: cfg.offset_pages,
            folio_pages: nr,
        });
    }
    Ok(Geometry {
        pages: cfg.size_bytes / ps,
        order: nr.trailing_zeros() as u8,
        offset: cfg.offset_pages,
    })
}

/// Run one model cell.
///
/// # Errors
/// Invalid geometry ([`geometry`]) or a broken invariant
/// ([`ModelError::Invariant`]: a TLB entry granting more than its PTE, a
/// mixed arm64 contig block).
pub fn run_model(cfg: &ModelConfig) -> Result<ModelOutcome, ModelError> {
    let geo = geometry(cfg)?;
    match cfg.arch {
        ArchConfig::X86 => run_on(X86, cfg, geo),
        ArchConfig::Arm64(a) => run_on(a, cfg, geo),
    }
}

/// Syscall-return invariants: TLB model and arm64 contig consistency.
pub fn check_invariants<A: Arch>(cx: &Cx<A>) -> Result<(), ModelError> {
    let (b, n) = (cx.mm.pt.base(), cx.mm.pt.len());
    A::check_contig(cx, b, b + n).map_err(ModelError::Invariant)?;
    check_anon_exclusive(cx, b, b + n).map_err(ModelError::Invariant)?;
    cx.tlb_check().map_err(ModelError::Invariant)
}

/// docs/kernel.md §10.6: in a private VMA, a writable PTE maps an
/// AnonExclusive page (else a COW would be skipped).
pub fn check_anon_exclusive<A: Arch>(cx: &Cx<A>, start: u64, end: u64) -> Result<(), String> {
    if cx.mm.memmap.every_anon_page_exclusive() {
        // No page a writable PTE could wrongly map: nothing to scan for.
        return Ok(());
    }
    let arch = cx.arch;
    for vma in cx.mm.vmas.iter().filter(|v| !v.is_shared()) {
        let (lo, hi) = (vma.start.max(start), vma.end.min(end));
        if lo >= hi {
            continue;
        }
        for (addr, &pte) in (lo..).zip(cx.mm.pt.slice(lo, hi)) {
            if !arch.pte_present(pte) || !arch.pte_write(pte) {
                continue;
            }
            if cx.mm.memmap.anon_not_exclusive(arch.pte_pfn(pte)) {
                return Err(format!(
                    "page {addr:#x}: writable PTE {pte:?} maps a non-exclusive anon page"
                ));
            }
        }
    }
    Ok(())
}

fn run_on<A: Arch>(arch: A, cfg: &ModelConfig, geo: Geometry) -> Result<ModelOutcome, ModelError> {
    let mut kernel = cfg.strategy.kernel_features();
    kernel.faults = cfg.faults;
    let nr = 1u64 << geo.order;
    let ptrs = arch.ptrs_per_pte();
    let base = 4 * ptrs.max(nr);
    let start = base + geo.offset;
    let end = start + geo.pages;
    let nfolios = (end - base).div_ceil(nr);
    let folio = |i: usize| {
        let mut f = FolioPlacement::whole(geo.order);
        if cfg.workload.lru().is_some() {
            // Reclaim maps exactly [start, end): the first and last folios may be
            // partially mapped (arm64 paints CONT on whole aligned blocks only).
            if i == 0 {
                f.mapped.0 = geo.offset;
            }
            if i as u64 == nfolios - 1 {
                f.mapped.1 = end - (base + i as u64 * nr);
            }
        }
        f
    };
    let spec = LayoutSpec {
        base,
        vma_flags: VmFlags::READ | VmFlags::WRITE | VmFlags::SOFTDIRTY,
        folios: Vec::new(),
        extra_window: if cfg.workload == Workload::MremapMove {
            nfolios * nr + ptrs
        } else {
            0
        },
    };
    // Only reclaim walks the placed folios.
    let keep = (cfg.check_tlb, cfg.workload.lru().is_some());
    let (mut cx, placed) = build_generated(arch, kernel, &spec, nfolios as usize, folio, keep);
    let len = geo.pages;
    let mut outcome = ModelOutcome {
        workload: cfg.workload.name().to_string(),
        arch: arch.name().to_string(),
        strategy: cfg.strategy.name().to_string(),
        kernel: cfg.strategy.kernel().to_string(),
        pages: len,
        calls: Vec::new(),
        outside: Counters::default(),
        ptes_simulated: 0,
        notes: Vec::new(),
    };
    let syscall = |cx: &mut Cx<A>,
                   prot: Prot,
                   record: Option<&mut Vec<CallRecord>>|
     -> Result<(), ModelError> {
        let (wb, wn) = (cx.mm.pt.base(), cx.mm.pt.len());
        cx.tlb_fill(wb, wb + wn);
        mprotect(cx, start, len, prot)?;
        check_invariants(cx)?;
        let counters = cx.take_counters();
        let flushes = cx.take_flushes();
        if let Some(r) = record {
            r.push(CallRecord {
                label: format!("mprotect({prot})"),
                counters,
                flushes,
            });
        }
        Ok(())
    };
    let mut calls = Vec::new();
    match cfg.workload {
        Workload::MprotectToggle | Workload::ProtTransition => {
            for prot in [Prot::None, Prot::ReadWrite] {
                syscall(&mut cx, prot, None)?;
            }
            for prot in [Prot::None, Prot::ReadWrite] {
                syscall(&mut cx, prot, Some(&mut calls))?;
            }
            outcome.ptes_simulated = 4 * len;
        }
        Workload::MprotectRoRw => {
            for prot in [Prot::Read, Prot::ReadWrite] {
                syscall(&mut cx, prot, None)?;
            }
            retouch(&mut cx, start, end);
            cx.take_counters();
            for prot in [Prot::Read, Prot::ReadWrite] {
                syscall(&mut cx, prot, Some(&mut calls))?;
            }
            retouch(&mut cx, start, end);
            outcome.outside = cx.take_counters();
            cx.take_flushes();
            outcome.ptes_simulated = 6 * len;
            if outcome.outside.write_faults == 0 {
                outcome.notes.push(
                    "re-touch took no write faults: the RO->RW mprotect made the AnonExclusive PTEs writable"
                        .to_string(),
                );
            }
        }
        Workload::MremapMove => {
            let rec = mremap::mremap_workload(&mut cx, base, start, end, nfolios * nr)?;
            calls.push(rec);
            outcome.ptes_simulated = 2 * len;
        }
        Workload::Reclaim | Workload::ReclaimMglru => {
            let lru = cfg.workload.lru().unwrap_or(Lru::Classic);
            let rec = reclaim_scan(&mut cx, &placed.folios, lru)?;
            calls.push(rec);
            outcome.ptes_simulated = len;
            outcome.notes.push(format!(
                "{} ({}); counters are for the whole pass: divide by folios_scanned for per-folio figures",
                RmapImpl::of(&kernel).summary(),
                if lru == Lru::Classic { "classic LRU" } else { "MGLRU, look-around window not modelled" }
            ));
        }
    }
    outcome.calls = calls;
    if cfg.strategy.kernel_features().always_inline_commit
        && matches!(
            cfg.workload,
            Workload::MprotectToggle | Workload::MprotectRoRw | Workload::ProtTransition
        )
    {
        outcome.notes.push(
            "v7.1's small-folio change (89e613bc0b2d) performs the same page-table primitives as \
             v6.17 … v7.0; it changes which functions are out of line (see `calls` and `functions`)"
                .to_string(),
        );
    }
    Ok(outcome)
}

/// User space writes every page of `[start, end)`: hardware sets
/// accessed/dirty on writable entries; other pages take a write fault that
/// reuses the exclusive anon page (counted as `write_faults`, not as mprotect
/// primitives).
pub fn retouch<A: Arch>(cx: &mut Cx<A>, start: u64, end: u64) {
    let arch = cx.arch;
    for addr in start..end {
        let pte = cx.peek(addr);
        if !arch.pte_present(pte) {
            continue;
        }
        if arch.pte_hw_valid(pte) && arch.pte_write(pte) {
            let hw = arch.pte_mkyoung(arch.pte_mkdirty(pte));
            cx.poke(addr, hw);
            continue;
        }
        cx.counters.write_faults += 1;
        let exclusive = cx
            .mm
            .memmap
            .page(arch.pte_pfn(pte))
            .is_some_and(|p| p.anon_exclusive);
        if exclusive && !arch.pte_protnone(pte) {
            // wp_page_reuse(): young, dirty, writable.
            let new = arch.pte_mkwrite(arch.pte_mkdirty(arch.pte_mkyoung(pte)));
            A::set_ptes(cx, addr, new, 1);
        }
    }
}

/// One reclaim pass over `folios` (`(va of page 0, head pfn)`, one VMA):
/// `shrink_folio_list()` → `folio_check_references()` → [`folio_referenced`]
/// per folio (classic LRU; `shrink_active_list()` makes the same calls), or
/// the MGLRU eviction's `folio_referenced()` → `lru_gen_look_around()`.
/// The user touched every page just before (worst-case TLB filled).
///
/// Checks afterwards: no present PTE of the pass is young; each folio's
/// result equals the OR of its PTEs' young bits before the pass; arm64
/// contig blocks are consistent; the TLB model holds no entry granting more
/// than its PTE — where no flush follows the young clear (MGLRU; x86) a stale
/// accessed bit is legal (it only makes aging less precise) and is ignored.
///
/// # Errors
/// [`ModelError::Invariant`] when one of those checks fails.
pub fn reclaim_scan<A: Arch>(
    cx: &mut Cx<A>,
    folios: &[(u64, crate::types::Pfn)],
    lru: Lru,
) -> Result<CallRecord, ModelError> {
    let arch = cx.arch;
    let vma = cx.mm.vmas[0];
    let (wb, wn) = (cx.mm.pt.base(), cx.mm.pt.len());
    cx.tlb_fill(wb, wb + wn);
    let mut want = Vec::with_capacity(folios.len());
    for &(va, head) in folios {
        let n = cx.mm.memmap.folio_of(head).map_or(0, |f| f.nr_pages());
        let young = (va.max(vma.start)..(va + n).min(vma.end)).any(|a| {
            let p = cx.peek(a);
            arch.pte_present(p) && arch.pte_young(p)
        });
        want.push(young);
    }
    let mut referenced = 0;
    for (&(va, head), &young) in folios.iter().zip(&want) {
        let got = folio_referenced(cx, &vma, va, head, lru);
        if (got > 0) != young {
            return Err(ModelError::Invariant(format!(
                "folio at page {va:#x}: folio_referenced() = {got}, but its PTEs were {}young",
                if young { "" } else { "not " }
            )));
        }
        referenced += got;
    }
    for a in vma.start..vma.end {
        let p = cx.peek(a);
        if arch.pte_present(p) && arch.pte_young(p) {
            return Err(ModelError::Invariant(format!(
                "page {a:#x} is still young after the reclaim pass: {p:?}"
            )));
        }
    }
    A::check_contig(cx, wb, wb + wn).map_err(ModelError::Invariant)?;
    if let Some(tlb) = &cx.tlb {
        // A stale young TLB entry is legal: compare against the table with
        // the accessed bit set wherever the entry is present.
        let mut pt = cx.mm.pt.clone();
        for a in wb..wb + wn {
            let p = pt.get(a);
            if arch.pte_present(p) {
                pt.set(a, arch.pte_mkyoung(p));
            }
        }
        tlb.check(&arch, &pt).map_err(ModelError::Invariant)?;
        if lru == Lru::Classic && arch.name() == "arm64" {
            cx.tlb_check().map_err(ModelError::Invariant)?;
        }
    }
    let counters = cx.take_counters();
    let flushes = cx.take_flushes();
    Ok(CallRecord {
        label: format!(
            "reclaim pass: folio_referenced() x {} ({}; {referenced} referenced)",
            folios.len(),
            if lru == Lru::Classic {
                "classic LRU"
            } else {
                "MGLRU"
            }
        ),
        counters,
        flushes,
    })
}
