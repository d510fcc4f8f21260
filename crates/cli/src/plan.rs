//! Second stage of argument handling: raw flags become a validated plan of
//! kernel cells, checked against this machine before anything is mapped
//! (unknown sizes and specs, sizes above available memory, no root, folio
//! sizes the kernel does not offer).

use crate::error::bail_usage;
use crate::error::usage;
use crate::flags::MeasureOpts;
use crate::kernel::procfs::{is_root, online_cpus};
use crate::kernel::{host, layout, thp};
use crate::measure::reclaim::ReclaimOptions;
use crate::measure::runner::{Budget, CellPlan};
use crate::measure::session::KernelPlan;
use crate::workload::size::format_size;
use crate::workload::{FolioSpec, WorkloadKind};

/// An amount of memory (not a size to type back), e.g. `21.9G`.
fn mem(b: u64) -> String {
    crate::text::format::bytes(b as f64)
}

/// Validate flags for a grid of `sizes` x `folios` of `workload`.
pub fn kernel_plan(
    workload: WorkloadKind,
    sizes: &[u64],
    folios: &[FolioSpec],
    opts: &MeasureOpts,
) -> anyhow::Result<KernelPlan> {
    if opts.regions == 0 {
        bail_usage!("--regions must be at least 1");
    }
    for &s in sizes {
        if s % 4096 != 0 {
            bail_usage!("size {s} bytes is not a multiple of the 4K base page");
        }
    }
    // A cell is labelled by what it holds: a region smaller than one folio
    // of the request holds only order-0 pages (and its expected layout,
    // "all order-0", would pass verification), so it is never measured
    // under the large-folio label.
    let (grid, skipped) = fitting_cells(sizes, folios);
    if grid.is_empty() {
        if let (&[size], &[folio]) = (sizes, folios) {
            bail_usage!(
                "size {} cannot hold one {folio} folio: the smallest size for --folio {folio} is {} \
                 (or ask for a smaller folio)",
                format_size(size),
                format_size(folio.folio_bytes())
            );
        }
        if skipped.is_empty() {
            bail_usage!("no cells to measure: give at least one size and one folio spec");
        }
        let smallest: Vec<String> = folios
            .iter()
            .map(|f| format!("{} for {f}", format_size(f.folio_bytes())))
            .collect();
        bail_usage!(
            "no size of the grid can hold one folio of its layout, so every cell would hold only \
             4K pages; the smallest sizes are {}",
            smallest.join(", ")
        );
    }
    let budget = match opts.iters {
        Some(0) => bail_usage!("--iters must be at least 1"),
        Some(n) => Budget::Iters(n),
        None => Budget::Time(opts.time),
    };
    // Memory first: refuse before anything is mapped.
    let avail = host::mem_available_bytes()?;
    let limit = (avail as f64 * crate::kernel::procfs::MEM_SHARE) as u64;
    let max_size = sizes.iter().copied().max().unwrap_or(0);
    let need = max_size.saturating_mul(opts.regions as u64);
    if need > limit {
        bail_usage!(
            "size {} x {} region(s) needs {} but only {} may be used here (90% of MemAvailable {}); \
             the largest size accepted now is {}",
            format_size(max_size),
            opts.regions,
            mem(need),
            mem(limit),
            mem(avail),
            format_size(limit / opts.regions as u64 / 4096 * 4096)
        );
    }
    let reclaim = reclaim_plan(workload, max_size.saturating_mul(opts.regions as u64), opts)?;
    let verified = match layout::verification_available() {
        Ok(()) if is_root() => true,
        Ok(()) => false,
        Err(why) => {
            if !opts.allow_unverified {
                bail_usage!(
                    "layout control and verification are unavailable ({why}); run as root, \
                     or pass --allow-unverified to measure with the layout unverified"
                );
            }
            false
        }
    };
    if !verified && !is_root() && !opts.allow_unverified {
        bail_usage!(
            "setting THP knobs needs root; run as root, or pass --allow-unverified to measure \
             with the layout unverified"
        );
    }
    if verified {
        for &f in folios {
            if grid.iter().any(|&(g, _)| g == f) {
                thp::check_offered(f)?;
            }
        }
    }
    let ncpu = online_cpus();
    let pin = match (opts.no_pin, opts.pin) {
        (true, _) => None,
        (false, Some(c)) if c >= ncpu => {
            bail_usage!("--pin {c}: this machine has CPUs 0..{} online", ncpu - 1)
        }
        (false, Some(c)) => Some(c),
        (false, None) => Some(ncpu - 1),
    };
    let cells = grid
        .into_iter()
        .map(|(folio, size)| CellPlan {
            workload,
            size,
            folio,
            regions: opts.regions,
            neighbor: opts.neighbor,
            budget,
            allow_mismatch: opts.allow_mismatch,
            verified,
            count_flushes: !opts.no_flush_count,
            blocks: opts.blocks,
            pinned_cpu: pin,
            reclaim: reclaim.clone(),
            windows: opts.windows,
            memory_probe: !opts.icount,
            sample_target: match opts.icount {
                true => crate::measure::runner::ICOUNT_SAMPLE_TARGET,
                false => crate::measure::runner::SAMPLE_TARGET,
            },
        })
        .collect();
    Ok(KernelPlan {
        cells,
        verified,
        pin,
        skipped,
    })
}

/// The (folio, size) cells of the grid whose region can hold at least one
/// folio of its layout, in grid order, and a note for each cell that cannot.
fn fitting_cells(sizes: &[u64], folios: &[FolioSpec]) -> (Vec<(FolioSpec, u64)>, Vec<String>) {
    let mut grid = Vec::new();
    let mut skipped = Vec::new();
    for &folio in folios {
        for &size in sizes {
            if size >= folio.folio_bytes() {
                grid.push((folio, size));
            } else {
                skipped.push(format!(
                    "skipped cell {} {folio}: a {} region cannot hold one {folio} folio (the \
                     smallest size for {folio} is {})",
                    format_size(size),
                    format_size(size),
                    format_size(folio.folio_bytes())
                ));
            }
        }
    }
    (grid, skipped)
}

/// The reclaim workload's options: `--swapfile` checked against the
/// workload, the memory kind (`PTELAB_RECLAIM_MEMORY`), the bytes the cells
/// may swap out (`need`) and the disk; swapfiles left by killed runs are
/// recovered first. `None` for every other workload.
fn reclaim_plan(
    workload: WorkloadKind,
    need: u64,
    opts: &MeasureOpts,
) -> anyhow::Result<Option<ReclaimOptions>> {
    use crate::measure::reclaim::Memory;
    if is_root() {
        for m in crate::kernel::swap::recover_stale() {
            eprintln!("{m}");
        }
    }
    let bytes = opts.swapfile;
    if workload != WorkloadKind::Reclaim {
        if bytes.is_some() {
            bail_usage!("--swapfile is only used by the reclaim workload (anonymous reclaim)");
        }
        return Ok(None);
    }
    let reclaim = ReclaimOptions::from_env(bytes).map_err(|e| usage(format!("{e:#}")))?;
    let (Memory::Anon, Some(b)) = (reclaim.memory, bytes) else {
        return Ok(Some(reclaim));
    };
    if b < need {
        bail_usage!(
            "--swapfile {} cannot hold the {} of anonymous memory a cell may swap out \
             (largest size x {} region(s)); pass --swapfile {} or more",
            format_size(b),
            format_size(need),
            opts.regions,
            format_size(need.next_multiple_of(1 << 20))
        );
    }
    crate::kernel::swap::check_dir(&reclaim.dir, b).map_err(|e| usage(format!("{e:#}")))?;
    Ok(Some(reclaim))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_too_small_for_one_folio_are_skipped_with_a_note() {
        let k = 1024;
        let (grid, skipped) = fitting_cells(
            &[4 * k, 64 * k, 2048 * k],
            &[FolioSpec::Base, FolioSpec::Mthp(64 * k), FolioSpec::PmdPte],
        );
        assert_eq!(
            grid,
            vec![
                (FolioSpec::Base, 4 * k),
                (FolioSpec::Base, 64 * k),
                (FolioSpec::Base, 2048 * k),
                (FolioSpec::Mthp(64 * k), 64 * k),
                (FolioSpec::Mthp(64 * k), 2048 * k),
                (FolioSpec::PmdPte, 2048 * k),
            ]
        );
        assert_eq!(skipped.len(), 3);
        assert!(
            skipped[0].contains("4K 64K") && skipped[0].contains("smallest size for 64K is 64K"),
            "{skipped:?}"
        );
        assert!(skipped[2].contains("64K 2M-pte"), "{skipped:?}");
    }
}
