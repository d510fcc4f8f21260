//! Kernel and model in lockstep: every syscall made on the running kernel is
//! made on the model ([`Sim`]) from the same state, and each observable is
//! read on both sides right after it.

use anyhow::Context;
use ptelab_model::layout::PteTweak;
use ptelab_model::{run_model, ArchConfig, FlushOp, ModelConfig, Prot, Strategy};

use super::file::{self, SharedFile};
use super::model::{shared_file_spec, standard_spec, with_exclusive, Sim};
use super::probe::{self, FlushProbe, Hold, PM_MMAP_EXCLUSIVE, PM_PRESENT, PM_SOFT_DIRTY};
use super::{
    add_note, flush_row, model_flush_set, page_row, render_flushes, render_pages, KernelFlushes,
    Row, RowKey,
};
use crate::kernel::layout;
use crate::kernel::region::{self, Region, PAGE_SIZE};
use crate::kernel::thp::KnobGuard;
use crate::measure::marker;
use crate::record::ModelCellRecord;
use crate::workload::folio::PMD_SIZE;
use crate::workload::size::format_size;
use crate::workload::{FolioSpec, WorkloadKind};

const RW: i32 = libc::PROT_READ | libc::PROT_WRITE;

/// What to check.
#[derive(Clone, Debug)]
pub struct Plan {
    pub workloads: Vec<WorkloadKind>,
    pub sizes: Vec<u64>,
    pub folios: Vec<FolioSpec>,
    pub strategy: Strategy,
    /// The model's arch: this kernel's (x86-64, or arm64 with 4K pages).
    pub arch: ArchConfig,
    /// Run the batching scenarios (mixed AnonExclusive, mid-folio range).
    pub scenarios: bool,
    /// The kernel tracks soft-dirty (`CONFIG_MEM_SOFT_DIRTY`): compare
    /// pagemap bit 55 and run the `clear_refs` steps.
    pub soft_dirty: bool,
    /// Mark each flush-counted call as a window for ptelab's QEMU plugin
    /// where the kernel has no `tlb:tlb_flush` tracepoint (`ptelab vm`).
    pub windows: bool,
}

/// Rows, skipped cells (with why) and the model cells behind the grid.
#[derive(Default)]
pub struct Outcome {
    pub rows: Vec<Row>,
    pub skipped: Vec<String>,
    pub model_cells: Vec<ModelCellRecord>,
}

/// Everything one lockstep step needs.
struct Ctx<'a> {
    /// `None` where the kernel has no `tlb:tlb_flush` tracepoint (arm64).
    probe: Option<&'a mut FlushProbe>,
    /// Without the probe, mark each counted call as a plugin window.
    windows: bool,
    rows: &'a mut Vec<Row>,
    soft_dirty: bool,
    arch: ArchConfig,
    strategy: Strategy,
}

fn prot_of(p: i32) -> Prot {
    match p {
        libc::PROT_NONE => Prot::None,
        libc::PROT_READ => Prot::Read,
        _ => Prot::ReadWrite,
    }
}

impl Ctx<'_> {
    /// One mm call on the kernel with its `tlb:tlb_flush` records; without
    /// the tracepoint, in a plugin window of its own when asked for.
    fn kernel_call(
        &mut self,
        f: impl FnOnce() -> anyhow::Result<()>,
    ) -> anyhow::Result<KernelFlushes> {
        if let Some(p) = self.probe.as_deref_mut() {
            return p.call(f).map(KernelFlushes::Traced);
        }
        if !self.windows {
            return f().map(|()| KernelFlushes::Unobservable);
        }
        marker::reset();
        marker::begin(0);
        let r = f();
        marker::end(0);
        let seq = marker::commit();
        r.map(|()| KernelFlushes::Window(seq))
    }

    /// A new simulation of the standard layout.
    fn standard(&self, pages: u64, folio_pages: u64, room: bool) -> Sim {
        Sim::standard(&self.arch, self.strategy, pages, folio_pages, room)
    }

    /// mprotect `[off, off+len)` pages on both sides, uncounted.
    fn mprotect_quiet(
        &mut self,
        r: &Region,
        sim: &mut Sim,
        off: u64,
        len: u64,
        prot: i32,
    ) -> anyhow::Result<()> {
        // SAFETY: offset within the region (callers pass page ranges inside it).
        let a = unsafe { r.addr().add(off as usize * PAGE_SIZE) };
        probe::mprotect(a, len as usize * PAGE_SIZE, prot)?;
        sim.mprotect(off, len, prot_of(prot))?;
        Ok(())
    }

    /// mprotect on both sides with the flushes compared.
    #[allow(clippy::too_many_arguments)]
    fn mprotect_counted(
        &mut self,
        key: &RowKey,
        r: &Region,
        sim: &mut Sim,
        off: u64,
        len: u64,
        prot: i32,
        reference: Option<&[FlushOp]>,
    ) -> anyhow::Result<()> {
        // SAFETY: offset within the region.
        let a = unsafe { r.addr().add(off as usize * PAGE_SIZE) };
        let b = self.kernel_call(|| probe::mprotect(a, len as usize * PAGE_SIZE, prot))?;
        let m = sim.mprotect(off, len, prot_of(prot))?;
        let mut row = flush_row(key, &b, &m);
        if let Some(reference) = reference {
            if super::model_flush_set(reference) != super::model_flush_set(&m) {
                row.note = Some(format!(
                    "model self-check: run_model gives {}",
                    super::render_flushes(&super::model_flush_set(reference))
                ));
                row.matches = false;
                row.unobservable = false;
            }
        }
        self.rows.push(row);
        Ok(())
    }

    /// Write every page on both sides; compare which pages faulted.
    fn retouch(&mut self, key: &RowKey, addr: *mut u8, sim: &mut Sim) {
        let k = probe::write_faults(addr, sim.pages() as usize);
        let m = sim.retouch();
        self.rows.push(page_row(key, "write faults", &k, &m));
    }

    /// pagemap bits after the call.
    fn pagemap(&mut self, key: &RowKey, addr: *const u8, sim: &Sim) -> anyhow::Result<()> {
        let e = probe::pagemap(addr, sim.pages() as usize)?;
        let s = sim.state();
        self.rows.push(page_row(
            key,
            "pagemap present",
            &probe::bits(&e, PM_PRESENT),
            &s.present,
        ));
        self.rows.push(page_row(
            key,
            "pagemap exclusive",
            &probe::bits(&e, PM_MMAP_EXCLUSIVE),
            &s.exclusive,
        ));
        if self.soft_dirty {
            self.rows.push(page_row(
                key,
                "pagemap soft-dirty",
                &probe::bits(&e, PM_SOFT_DIRTY),
                &s.soft_dirty,
            ));
        }
        Ok(())
    }
}

/// Populate a region of `size` bytes in `folio` (knobs configured by the
/// guard) and check its layout; `Err(row)` when the layout is not the one
/// asked for. With `room`, the `size` bytes above the region are held free
/// (the mremap destination) from the moment it is mapped.
fn populated(
    guard: &mut KnobGuard,
    key: &RowKey,
    size: u64,
    folio: FolioSpec,
    room: bool,
) -> anyhow::Result<Result<(Region, Option<Hold>), Row>> {
    guard.configure_for(folio)?;
    let (mut r, hold) = if room {
        let r = Region::map_with_room(size, folio, size as usize, PMD_SIZE as usize)?;
        // SAFETY: the end of the region, the start of its free room.
        let hold = Hold::new(unsafe { r.addr().add(r.len()) }, r.len())
            .context("the mremap destination above the region")?;
        (r, Some(hold))
    } else {
        (Region::map(size, folio, false)?, None)
    };
    r.populate()?;
    let l = layout::observe(r.addr(), r.len(), folio)?;
    if !l.matches {
        let mut row = key.text_row(
            "layout",
            l.summary(),
            format!("{} x{}", folio, size / folio.folio_bytes()),
        );
        row.matches = false;
        row.note = l.mismatch.clone();
        return Ok(Err(row));
    }
    Ok(Ok((r, hold)))
}

/// The model workload a crosscheck compares `w` with, or None where the
/// model counts nothing a crosscheck probe sees (reclaim's rmap walks).
pub fn compared(w: WorkloadKind) -> Option<ptelab_model::Workload> {
    (w != WorkloadKind::Reclaim).then(|| ptelab_model_run::model_workload(w))
}

/// The workloads a crosscheck compares, in catalogue order.
pub fn compared_workloads() -> Vec<WorkloadKind> {
    WorkloadKind::ALL
        .into_iter()
        .filter(|w| compared(*w).is_some())
        .collect()
}

/// Run the whole plan.
pub fn run_plan(
    plan: &Plan,
    guard: &mut KnobGuard,
    probe: Option<&mut FlushProbe>,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Outcome> {
    let mut out = Outcome::default();
    let mut ctx = Ctx {
        probe,
        windows: plan.windows,
        rows: &mut out.rows,
        soft_dirty: plan.soft_dirty,
        arch: plan.arch,
        strategy: plan.strategy,
    };
    let (contpte, bbml2, lpa2) = match plan.arch {
        ArchConfig::X86 => (false, false, false),
        ArchConfig::Arm64(a) => (a.contpte, a.bbml2, a.lpa2),
    };
    for &w in &plan.workloads {
        let Some(mw) = compared(w) else {
            out.skipped
                .push(format!("{}: not modelled, nothing to compare", w.name()));
            continue;
        };
        for &size in &plan.sizes {
            for &folio in &plan.folios {
                let cell = format!("{} {} {}", w.name(), format_size(size), folio);
                if folio.pmd_mapped() {
                    out.skipped.push(format!(
                        "{cell}: PMD-mapped THP is not modelled at the PTE level (use 2M-pte)"
                    ));
                    continue;
                }
                if size < folio.folio_bytes() || size % folio.folio_bytes() != 0 {
                    out.skipped.push(format!(
                        "{cell}: size is not a whole number of {folio} folios"
                    ));
                    continue;
                }
                progress(&cell);
                let mut cfg =
                    ModelConfig::new(mw, plan.arch, plan.strategy, size, folio.folio_bytes());
                cfg.check_tlb = size <= (64 << 20);
                let reference = run_model(&cfg).with_context(|| format!("model of {cell}"))?;
                out.model_cells.push(ModelCellRecord {
                    workload: w,
                    size_bytes: size,
                    folio,
                    arch: plan.arch.name().into(),
                    strategy: plan.strategy.name().into(),
                    params: serde_json::json!({"granule": "4K", "offset_pages": 0,
                        "contpte": contpte, "bbml2": bbml2, "lpa2": lpa2,
                        "kernel": reference.kernel,
                        "crosscheck": true}),
                    counters: reference.per_call(),
                });
                let key = RowKey {
                    workload: w.name().into(),
                    size_bytes: size,
                    folio: folio.to_string(),
                    scenario: String::new(),
                };
                grid_cell(&mut ctx, guard, &key, w, size, folio, &reference.calls)
                    .with_context(|| format!("crosscheck of {cell}"))?;
            }
        }
    }
    if plan.scenarios {
        progress("scenario fork-mixed-exclusive");
        mixed_exclusive(&mut ctx, guard).context("scenario fork-mixed-exclusive")?;
        progress("scenario mid-folio-range");
        mid_folio(&mut ctx, guard).context("scenario mid-folio-range")?;
        progress("scenario shared-file-writenotify");
        if let Some(why) = shared_file(&mut ctx).context("scenario shared-file-writenotify")? {
            out.skipped.push(format!("shared-file-writenotify: {why}"));
        }
    }
    Ok(out)
}

fn split_row(key: &RowKey, before: &std::collections::BTreeMap<String, u64>) -> Row {
    let after = probe::split_stats();
    key.text_row(
        "folio splits",
        probe::split_delta(before, &after),
        "0".into(),
    )
}

/// One grid cell: the workload's counted calls, then the same calls after
/// `clear_refs` (soft-dirty tracking on).
#[allow(clippy::too_many_arguments)]
fn grid_cell(
    ctx: &mut Ctx<'_>,
    guard: &mut KnobGuard,
    key: &RowKey,
    w: WorkloadKind,
    size: u64,
    folio: FolioSpec,
    reference: &[ptelab_model::CallRecord],
) -> anyhow::Result<()> {
    let room = w == WorkloadKind::MremapMove;
    let (r, hold) = match populated(guard, key, size, folio, room)? {
        Ok(r) => r,
        Err(row) => {
            ctx.rows.push(row);
            return Ok(());
        }
    };
    let pages = size / PAGE_SIZE as u64;
    let fp = folio.folio_bytes() / PAGE_SIZE as u64;
    let mut sim = ctx.standard(pages, fp, room);
    let prefix = if w == WorkloadKind::ProtTransition {
        |p: i32| {
            if p == libc::PROT_NONE {
                "rw-to-none: mprotect(PROT_NONE)"
            } else {
                "none-to-rw: mprotect(PROT_READ|PROT_WRITE)"
            }
        }
    } else {
        |p: i32| match p {
            libc::PROT_NONE => "mprotect(PROT_NONE)",
            libc::PROT_READ => "mprotect(PROT_READ)",
            _ => "mprotect(PROT_READ|PROT_WRITE)",
        }
    };
    let all = pages;
    let splits = probe::split_stats();
    match w {
        WorkloadKind::MprotectToggle | WorkloadKind::ProtTransition => {
            ctx.mprotect_quiet(&r, &mut sim, 0, all, libc::PROT_NONE)?;
            ctx.mprotect_quiet(&r, &mut sim, 0, all, RW)?;
            prot_pair_cell(
                ctx,
                key,
                &r,
                &mut sim,
                reference,
                &splits,
                libc::PROT_NONE,
                prefix,
            )?;
        }
        WorkloadKind::MprotectRoRw => {
            ctx.mprotect_quiet(&r, &mut sim, 0, all, libc::PROT_READ)?;
            ctx.mprotect_quiet(&r, &mut sim, 0, all, RW)?;
            region_touch(&r, &mut sim);
            prot_pair_cell(
                ctx,
                key,
                &r,
                &mut sim,
                reference,
                &splits,
                libc::PROT_READ,
                prefix,
            )?;
        }
        WorkloadKind::MremapMove => {
            let hold = hold.context("no room held for mremap")?;
            mremap_cell(ctx, key, &r, hold, &mut sim, reference, &splits)?;
        }
        WorkloadKind::Reclaim => {}
    }
    Ok(())
}

/// The counted calls of an mprotect workload over the whole (warmed-up)
/// region: `mprotect(first)` then `mprotect(RW)`, the pagemap after them, a
/// re-touch and the folio splits; with soft-dirty tracking on, the same again
/// after `clear_refs`. `prefix` names the scenario of a protection.
#[allow(clippy::too_many_arguments)]
fn prot_pair_cell(
    ctx: &mut Ctx<'_>,
    key: &RowKey,
    r: &Region,
    sim: &mut Sim,
    reference: &[ptelab_model::CallRecord],
    splits: &std::collections::BTreeMap<String, u64>,
    first: i32,
    prefix: fn(i32) -> &'static str,
) -> anyhow::Result<()> {
    let all = sim.pages();
    for (i, p) in [first, RW].into_iter().enumerate() {
        let k = key.with_scenario(prefix(p));
        let refr = reference.get(i).map(|c| c.flushes.as_slice());
        ctx.mprotect_counted(&k, r, sim, 0, all, p, refr)?;
    }
    ctx.pagemap(&key.with_scenario(prefix(RW)), r.addr(), sim)?;
    ctx.retouch(&key.with_scenario("re-touch after RW"), r.addr(), sim);
    ctx.rows
        .push(split_row(&key.with_scenario("all calls"), splits));
    if !ctx.soft_dirty {
        return Ok(());
    }
    // Soft-dirty tracking on: clear_refs, then the same calls.
    probe::clear_soft_dirty()?;
    sim.clear_soft_dirty();
    for p in [first, RW] {
        let k = key.with_scenario(format!("after clear_refs: {}", prefix(p)));
        ctx.mprotect_counted(&k, r, sim, 0, all, p, None)?;
    }
    let k = key.with_scenario(format!("after clear_refs: {}", prefix(RW)));
    ctx.pagemap(&k, r.addr(), sim)?;
    ctx.retouch(
        &key.with_scenario("after clear_refs: re-touch"),
        r.addr(),
        sim,
    );
    Ok(())
}

/// Write every page of the region on both sides, not compared (warm-up).
fn region_touch(r: &Region, sim: &mut Sim) {
    r.retouch();
    sim.retouch();
}

fn mremap_cell(
    ctx: &mut Ctx<'_>,
    key: &RowKey,
    r: &Region,
    hold: Hold,
    sim: &mut Sim,
    reference: &[ptelab_model::CallRecord],
    splits: &std::collections::BTreeMap<String, u64>,
) -> anyhow::Result<()> {
    let len = r.len();
    let from = r.addr();
    // SAFETY: the end of the region, the start of its free room.
    let to = unsafe { from.add(len) };
    // Whichever of source and destination is empty stays held, released
    // just before the mremap that fills it (nothing allocates in between).
    let mut hold = Some(hold);
    let passes: &[bool] = if ctx.soft_dirty {
        &[false, true]
    } else {
        &[false]
    };
    for &clear in passes {
        let pfx = if clear { "after clear_refs: " } else { "" };
        if clear {
            probe::clear_soft_dirty()?;
            sim.clear_soft_dirty();
        }
        let k = key.with_scenario(format!("{pfx}mremap(MREMAP_MAYMOVE|MREMAP_FIXED)"));
        drop(hold.take());
        let b = ctx.kernel_call(|| region::mremap_fixed(from, len, to))?;
        let mut source = Some(Hold::new(from, len).context("the vacated source")?);
        let m = sim.mremap_up()?;
        let mut row = flush_row(&k, &b, &m);
        if !clear {
            if let Some(c) = reference.first() {
                if super::model_flush_set(&c.flushes) != super::model_flush_set(&m) {
                    row.matches = false;
                    row.unobservable = false;
                    row.note = Some("model self-check: run_model differs".into());
                }
            }
        }
        ctx.rows.push(row);
        ctx.pagemap(&k, to, sim)?;
        ctx.retouch(
            &key.with_scenario(format!("{pfx}re-touch after mremap")),
            to,
            sim,
        );
        if !clear {
            ctx.rows
                .push(split_row(&key.with_scenario("all calls"), splits));
        }
        // Move back (uncounted) so the region owns its pages again; the model
        // is rebuilt in the same state (moved twice = same page table).
        drop(source.take());
        region::mremap_fixed(to, len, from)?;
        hold = Some(Hold::new(to, len).context("the mremap destination")?);
        sim.move_back()?;
    }
    Ok(())
}

/// Scenario (a): one 64K folio whose pages are partly AnonExclusive. fork()
/// shares every page (clearing PageAnonExclusive and write-protecting the
/// parent's PTEs); the child exits at once; the parent then writes pages
/// 0-3 and 9, which the write fault reuses in place (the folio is mapped by
/// this mm only), setting PageAnonExclusive on exactly those pages. mprotect
/// RO then RW upgrades only those PTEs (docs/kernel.md §4.3
/// `commit_anon_folio_batch`), so re-touch faults on the others.
fn mixed_exclusive(ctx: &mut Ctx<'_>, guard: &mut KnobGuard) -> anyhow::Result<()> {
    let folio = FolioSpec::Mthp(64 << 10);
    let size = 64u64 << 10;
    let Some((key, r)) = scenario_region(
        ctx,
        guard,
        "mprotect-ro-rw",
        "fork-mixed-exclusive",
        size,
        folio,
    )?
    else {
        return Ok(());
    };
    let pfn_before = probe::pfns(&probe::pagemap(r.addr(), 16)?);
    probe::fork_and_reap()?;
    let exclusive: Vec<bool> = (0..16).map(|i| i < 4 || i == 9).collect();
    for (i, &e) in exclusive.iter().enumerate() {
        if e {
            // SAFETY: page i of our read-write region.
            unsafe { std::ptr::write_volatile(r.addr().add(i * PAGE_SIZE), 7) };
        }
    }
    let pfn_after = probe::pfns(&probe::pagemap(r.addr(), 16)?);
    let reused = pfn_before == pfn_after;
    let mut row = key
        .with_scenario("fork-mixed-exclusive: write after fork")
        .text_row(
            "folio kept (reuse, no COW copy)",
            reused.to_string(),
            "true".into(),
        );
    if !reused {
        row.note = Some("the write fault copied instead of reusing the folio's pages".into());
    }
    ctx.rows.push(row);
    // Fork write-protected the folio; the writes reused the exclusive pages
    // in place (on arm64 unfolding the contig block).
    let mut spec = with_exclusive(
        standard_spec(&ctx.arch, 16, 16, false),
        0,
        exclusive.clone(),
    );
    for (i, _) in exclusive.iter().enumerate().filter(|(_, &e)| e) {
        spec.folios[0].tweaks.push((i as u64, PteTweak::WriteFault));
    }
    let start = spec.base;
    let mut sim = Sim::new(&ctx.arch, ctx.strategy, &spec, start, 16);
    let splits = probe::split_stats();
    ctx.mprotect_counted(
        &key.with_scenario("fork-mixed-exclusive: mprotect(PROT_READ)"),
        &r,
        &mut sim,
        0,
        16,
        libc::PROT_READ,
        None,
    )?;
    let k = key.with_scenario("fork-mixed-exclusive: mprotect(PROT_READ|PROT_WRITE)");
    ctx.mprotect_counted(&k, &r, &mut sim, 0, 16, RW, None)?;
    ctx.pagemap(&k, r.addr(), &sim)?;
    ctx.retouch(
        &key.with_scenario("fork-mixed-exclusive: re-touch after RW"),
        r.addr(),
        &mut sim,
    );
    ctx.rows.push(split_row(
        &key.with_scenario("fork-mixed-exclusive: all calls"),
        &splits,
    ));
    Ok(())
}

/// The key of a scenario and its populated region; `None` (with the row
/// saying why pushed) when the layout could not be obtained.
fn scenario_region(
    ctx: &mut Ctx<'_>,
    guard: &mut KnobGuard,
    workload: &str,
    scenario: &str,
    size: u64,
    folio: FolioSpec,
) -> anyhow::Result<Option<(RowKey, Region)>> {
    let key = RowKey {
        workload: workload.into(),
        size_bytes: size,
        folio: folio.to_string(),
        scenario: scenario.into(),
    };
    Ok(match populated(guard, &key, size, folio, false)? {
        Ok((r, _)) => Some((key, r)),
        Err(row) => {
            ctx.rows.push(row);
            None
        }
    })
}

/// Scenario (c): mprotect of `[4 pages, len - 4 pages)` of a region of four
/// 64K folios: batches start and end mid-folio, the VMA splits in three.
fn mid_folio(ctx: &mut Ctx<'_>, guard: &mut KnobGuard) -> anyhow::Result<()> {
    let folio = FolioSpec::Mthp(64 << 10);
    let size = 256u64 << 10;
    let pages = 64;
    let Some((key, r)) = scenario_region(ctx, guard, "mprotect", "mid-folio-range", size, folio)?
    else {
        return Ok(());
    };
    let mut sim = ctx.standard(pages, 16, false);
    let splits = probe::split_stats();
    let (off, len) = (4, pages - 8);
    for (name, p) in [
        ("PROT_NONE", libc::PROT_NONE),
        ("PROT_READ|PROT_WRITE", RW),
        ("PROT_READ", libc::PROT_READ),
        ("PROT_READ|PROT_WRITE", RW),
    ] {
        let k = key.with_scenario(format!("mid-folio-range: mprotect([4, 60), {name})"));
        ctx.mprotect_counted(&k, &r, &mut sim, off, len, p, None)?;
        if p == RW {
            ctx.pagemap(&k, r.addr(), &sim)?;
        }
    }
    ctx.retouch(
        &key.with_scenario("mid-folio-range: re-touch after RW"),
        r.addr(),
        &mut sim,
    );
    ctx.rows.push(split_row(
        &key.with_scenario("mid-folio-range: all calls"),
        &splits,
    ));
    Ok(())
}

/// File systems whose shared mappings have `page_mkwrite` (write-notify).
const PAGE_MKWRITE_FS: [&str; 4] = ["ext4", "xfs", "btrfs", "f2fs"];

/// Scenario (b): a `MAP_SHARED` mapping of an ext4 file (see
/// [`file`]): every page read-faulted (clean, read-only), pages 21 and
/// 32-35 written (dirty, writable), mprotect RO then RW, re-touch. v6.17+
/// makes a clean PTE writable when its batch's merged dirty bit is set;
/// the rows' notes give v6.16's per-PTE answer. `Some(why)` when skipped.
fn shared_file(ctx: &mut Ctx<'_>) -> anyhow::Result<Option<String>> {
    let dir = file::dir();
    let fs = file::fs_type(&dir)?;
    if !PAGE_MKWRITE_FS.contains(&fs) {
        return Ok(Some(format!(
            "{} is on {fs}, not a file system with page_mkwrite and large folios \
             (set {} to a directory on ext4 or xfs)",
            dir.display(),
            file::DIR_ENV
        )));
    }
    let f = SharedFile::create(&dir)
        .with_context(|| format!("a shared file mapping in {}", dir.display()))?;
    f.read_all();
    let pages = file::PAGES as u64;
    let asked = FolioSpec::Mthp(file::CHUNK as u64);
    let l = layout::observe(f.addr(), f.region().len(), asked)?;
    let mut key = RowKey {
        workload: "mprotect-ro-rw".into(),
        size_bytes: file::SIZE,
        folio: asked.to_string(),
        scenario: "shared-file-writenotify: read faults".into(),
    };
    let fp = match file::model_folio_pages(&l) {
        Ok(fp) => fp,
        Err(why) => {
            let mut row = key.text_row(
                "page-cache folios",
                l.summary(),
                "whole aligned folios of one size".into(),
            );
            row.matches = false;
            row.note = Some(format!("{why} ({})", f.fs));
            ctx.rows.push(row);
            return Ok(None);
        }
    };
    let size = format_size(fp * PAGE_SIZE as u64);
    key.folio = size.clone();
    let mut row = key.text_row("page-cache folios", l.summary(), format!("100% {size}"));
    row.note = Some(format!(
        "{} of {} written in {} chunks; the model uses the observed size",
        format_size(file::SIZE),
        f.fs,
        format_size(file::CHUNK as u64)
    ));
    ctx.rows.push(row);
    let dirty = file::dirty_pages();
    f.write(&dirty);
    let spec = shared_file_spec(&ctx.arch, fp, &dirty, ctx.soft_dirty);
    let mut sim = Sim::new_file(&ctx.arch, ctx.strategy, &spec, spec.base, pages);
    let mut v616 = Sim::new_file(&ctx.arch, Strategy::V6_16, &spec, spec.base, pages);
    let splits = probe::split_stats();
    let mut k = key.clone();
    for (name, p) in [("PROT_READ", libc::PROT_READ), ("PROT_READ|PROT_WRITE", RW)] {
        k = key.with_scenario(format!("shared-file-writenotify: mprotect({name})"));
        ctx.mprotect_counted(&k, f.region(), &mut sim, 0, pages, p, None)?;
        let old = v616.mprotect(0, pages, prot_of(p))?;
        if let Some(row) = ctx.rows.last_mut() {
            add_note(
                row,
                format!("v6.16 per-PTE: {}", render_flushes(&model_flush_set(&old))),
            );
        }
    }
    ctx.pagemap(&k, f.addr(), &sim)?;
    ctx.retouch(
        &key.with_scenario("shared-file-writenotify: re-touch after RW"),
        f.addr(),
        &mut sim,
    );
    let old = v616.retouch();
    if let Some(row) = ctx.rows.last_mut() {
        add_note(
            row,
            format!(
                "dirty before mprotect: {}; v6.16 per-PTE faults: {}",
                render_pages(&dirty),
                render_pages(&old)
            ),
        );
    }
    ctx.rows.push(split_row(
        &key.with_scenario("shared-file-writenotify: all calls"),
        &splits,
    ));
    Ok(None)
}
