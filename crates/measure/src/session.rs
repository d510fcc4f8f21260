//! A kernel measurement session: what `bench` and `sweep` share. It pins the
//! thread, takes the THP knob lock, runs the plan's cells in order, stores each
//! finished cell in its own transaction, shows progress on stderr, and stops
//! cleanly on SIGINT/SIGTERM (finished cells kept, run marked interrupted,
//! knobs restored by the guard's Drop).

use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::runner::{self, Backend, CellPlan, CellRun, Interrupted, Reporter, RunEvent};
use crate::kernel::host::{self, Host};
use crate::kernel::thp::KnobGuard;
use crate::record::{CellResult, CellSink};
use crate::workload::size::format_size;

/// What the blocks of a session produced.
pub struct Blocks {
    /// Finished cells (one result per phase), and on interrupt the cells
    /// with at least one finished block.
    pub cells: Vec<CellResult>,
    /// Cells that failed, with the reason.
    pub failed: Vec<(String, String)>,
    pub interrupted: bool,
    /// Why `keep` (the store) refused a cell: measuring stopped there, the
    /// refused cell is in `cells` with the others measured.
    pub store_error: Option<anyhow::Error>,
}

/// Measure `cells` block by block, round-robin: block 1 of every cell, then
/// block 2, ... so that a burst of host noise touches one block of many
/// cells rather than all of one. Each finished cell goes to `keep` (the
/// store) as soon as its last block is done; a failed cell is given up and
/// the others go on. On SIGINT/SIGTERM the cells keep what they measured:
/// a cell with at least one finished block is kept with those blocks and
/// says so. When `keep` fails (a full disk), measuring stops: what was
/// measured is returned, with the error, to be printed all the same.
pub fn run_blocks(
    cells: &[CellPlan],
    backend: &mut dyn Backend,
    reporter: &mut dyn Reporter,
    keep: &mut dyn FnMut(&CellResult) -> anyhow::Result<()>,
) -> anyhow::Result<Blocks> {
    let mut out = Blocks {
        cells: Vec::new(),
        failed: Vec::new(),
        interrupted: false,
        store_error: None,
    };
    let mut runs: Vec<Option<CellRun>> = cells
        .iter()
        .map(|c| Some(CellRun::new(c.clone())))
        .collect();
    let rounds = runs
        .iter()
        .flatten()
        .map(CellRun::blocks_planned)
        .max()
        .unwrap_or(0);
    'rounds: for _ in 0..rounds {
        for slot in runs.iter_mut() {
            let Some(run) = slot.as_mut() else { continue };
            if run.finished() {
                continue;
            }
            if backend.interrupted() {
                out.interrupted = true;
                break 'rounds;
            }
            let cell = run.plan();
            let name = format!(
                "{} {} {}",
                cell.workload,
                format_size(cell.size),
                cell.folio
            );
            reporter.event(RunEvent::Block(&name));
            match run.run_block(backend, reporter) {
                Ok(()) => {}
                Err(e) if e.is::<Interrupted>() => {
                    out.interrupted = true;
                    break 'rounds;
                }
                Err(e) => {
                    let left = (run.blocks_planned() - run.blocks_done()) as u64;
                    out.failed.push((name, format!("{e:#}")));
                    *slot = None;
                    reporter.event(RunEvent::BlocksDone(left));
                    continue;
                }
            }
            reporter.event(RunEvent::BlocksDone(1));
            if run.finished() {
                let run = slot.take().expect("checked above");
                for r in run.finish() {
                    if out.store_error.is_none() {
                        out.store_error = keep(&r).err();
                    }
                    reporter.event(RunEvent::Finished {
                        cell: &name,
                        result: &r,
                    });
                    out.cells.push(r);
                }
                if out.store_error.is_some() {
                    break 'rounds;
                }
            }
        }
    }
    if out.interrupted {
        for run in runs.iter_mut().filter_map(Option::take) {
            if run.blocks_done() == 0 {
                continue;
            }
            let (done, planned) = (run.blocks_done(), run.blocks_planned());
            for mut r in run.finish() {
                r.warnings
                    .push(format!("interrupted: {done} of {planned} blocks measured"));
                if out.store_error.is_none() {
                    out.store_error = keep(&r).err();
                }
                out.cells.push(r);
            }
        }
    }
    Ok(out)
}

/// A validated set of kernel cells.
#[derive(Debug)]
pub struct KernelPlan {
    pub cells: Vec<CellPlan>,
    /// Layout control and verification available.
    pub verified: bool,
    pub pin: Option<usize>,
    /// Cells of the requested grid left out, one note each (a region too
    /// small to hold one folio of its layout).
    pub skipped: Vec<String>,
}

/// What a session produced.
pub struct SessionOutcome {
    pub host: Host,
    /// THP knobs as found before the session changed any.
    pub thp_knobs: std::collections::BTreeMap<String, String>,
    pub run_id: Option<i64>,
    pub cells: Vec<CellResult>,
    /// Cells that failed, with the reason.
    pub failed: Vec<(String, String)>,
    pub interrupted: bool,
    /// The store's refusal of a cell (a full disk): the run was stopped
    /// there and marked failed; `cells` still holds every figure measured.
    pub store_error: Option<anyhow::Error>,
}

struct Progress {
    bar: ProgressBar,
    cell: String,
}

impl Reporter for Progress {
    fn event(&mut self, event: RunEvent<'_>) {
        match event {
            RunEvent::Block(cell) => self.cell = cell.to_string(),
            RunEvent::Phase(p) => self.bar.set_message(format!("{} {p}", self.cell)),
            RunEvent::Sample { done, rel_ci } => {
                if rel_ci.is_finite() {
                    self.bar.set_message(format!(
                        "{} sample {done}, CI ±{:.1}%",
                        self.cell,
                        rel_ci * 100.0
                    ));
                }
            }
            RunEvent::BlocksDone(n) => self.bar.inc(n),
            RunEvent::Finished { cell, result } => self.bar.println(format!(
                "{cell}{}: {:.0} ns/call",
                result
                    .phase
                    .as_deref()
                    .map(|p| format!(" {p}"))
                    .unwrap_or_default(),
                result.ns_per_call.median
            )),
        }
    }
}

/// Run every cell of `plan`. `kind` is "bench" or "sweep".
pub fn run(
    plan: &KernelPlan,
    kind: &str,
    store: Option<&dyn CellSink>,
) -> anyhow::Result<SessionOutcome> {
    if let Some(cpu) = plan.pin {
        runner::pin_process(cpu)?;
    }
    // After the re-exec, so that each note is printed once.
    for note in &plan.skipped {
        eprintln!("ptelab: {note}");
    }
    let mut guard = if plan.verified {
        Some(KnobGuard::acquire(&mut |msg: &str| {
            eprintln!("ptelab: {msg}")
        })?)
    } else {
        None
    };
    let host = host::capture()?;
    let thp_knobs = guard
        .as_ref()
        .map_or_else(|| host.thp_knobs.clone(), |g| g.original().clone());
    let command = crate::kernel::host::invocation();
    let run_id = match store {
        Some(s) => Some(s.begin(kind, &command, &host)?),
        None => None,
    };

    let total_blocks: u64 = plan.cells.iter().map(|c| c.blocks_planned() as u64).sum();
    let bar = ProgressBar::with_draw_target(Some(total_blocks), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} blocks, ETA {eta} {wide_msg}")
            .expect("static template"),
    );
    let mut progress = Progress {
        bar,
        cell: String::new(),
    };
    let started = Instant::now();
    let mut backend = runner::KernelBackend::new(guard.as_mut());
    let Blocks {
        cells,
        failed,
        interrupted,
        store_error,
    } = run_blocks(
        &plan.cells,
        &mut backend,
        &mut progress,
        &mut |r| match (store, run_id) {
            (Some(s), Some(id)) => s.cell(id, r),
            _ => Ok(()),
        },
    )?;
    progress.bar.finish_and_clear();
    if let Some(g) = guard.as_mut() {
        g.restore()?;
    }
    drop(guard);
    if let (Some(s), Some(id)) = (store, run_id) {
        // Labelled by what stopped it: a store that refused a cell makes a
        // failed run, not an interrupted one. The label may not fit on a
        // full disk either; then say so rather than fail without figures.
        let failed_run = store_error.is_some() || (!failed.is_empty() && cells.is_empty());
        let marked = s.finish(id, interrupted && store_error.is_none(), failed_run);
        match (marked, &store_error) {
            (Ok(()), _) => {}
            (Err(e), None) => return Err(e),
            (Err(e), Some(_)) => eprintln!(
                "ptelab: run {id} could not be marked failed either ({e:#}): it reads \
                 interrupted"
            ),
        }
    }
    if interrupted && store_error.is_none() {
        eprintln!(
            "ptelab: interrupted after {:.1}s: {} finished cell(s) kept{}; THP knobs restored",
            started.elapsed().as_secs_f64(),
            cells.len(),
            run_id.map(|id| format!(" in run {id}")).unwrap_or_default()
        );
    }
    Ok(SessionOutcome {
        host,
        thp_knobs,
        run_id,
        cells,
        failed,
        interrupted,
        store_error,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::runner::fake::{self, Ev, FakeBackend};
    use crate::runner::Budget;

    struct Quiet;
    impl Reporter for Quiet {}

    const K: u64 = 1024;

    fn time(ms: u64) -> Budget {
        Budget::Time(Duration::from_millis(ms))
    }

    /// Sizes of the cells whose instances were prepared, in order.
    fn prepared(b: &FakeBackend) -> Vec<u64> {
        b.log()
            .iter()
            .filter_map(|e| match e {
                Ev::Prepare { size } => Some(size / K),
                _ => None,
            })
            .collect()
    }

    /// Run `plans` on `b`; the sizes (K) of the cells kept, in keep order.
    fn schedule(plans: &[CellPlan], b: &mut FakeBackend) -> (Blocks, Vec<u64>) {
        let mut kept = Vec::new();
        let out = run_blocks(plans, b, &mut Quiet, &mut |r| {
            kept.push(r.size_bytes / K);
            Ok(())
        })
        .unwrap();
        (out, kept)
    }

    #[test]
    fn blocks_are_interleaved_round_robin_across_cells() {
        let mut b = FakeBackend::new(10_000.0);
        b.jitter = 0.3;
        let plans = [
            fake::plan(4 * K, time(100), 2),
            fake::plan(8 * K, Budget::Iters(50), 5),
            fake::plan(12 * K, time(150), 3),
        ];
        let (out, kept) = schedule(&plans, &mut b);
        assert_eq!(prepared(&b), [4, 8, 12, 4, 12, 12]);
        // Each cell is kept as soon as its last block is done.
        assert_eq!(kept, [8, 4, 12]);
        assert!(!out.interrupted && out.failed.is_empty());
        let blocks: Vec<usize> = out.cells.iter().map(|c| c.blocks.len()).collect();
        assert_eq!(blocks, [1, 2, 3]);
    }

    /// See: #30. A store that refuses a cell (a full disk) stops the
    /// measuring, and every figure measured, the refused cell's included,
    /// comes back with the error to be printed.
    #[test]
    fn a_store_that_refuses_a_cell_stops_and_keeps_the_figures() {
        let mut b = FakeBackend::new(10_000.0);
        let plans = [
            fake::plan(4 * K, Budget::Iters(50), 1),
            fake::plan(8 * K, Budget::Iters(50), 1),
            fake::plan(12 * K, Budget::Iters(50), 1),
        ];
        let mut stored = Vec::new();
        let out = run_blocks(&plans, &mut b, &mut Quiet, &mut |r| {
            if r.size_bytes == 8 * K {
                anyhow::bail!("database or disk is full");
            }
            stored.push(r.size_bytes / K);
            Ok(())
        })
        .unwrap();
        assert_eq!(stored, [4]);
        let measured: Vec<u64> = out.cells.iter().map(|c| c.size_bytes / K).collect();
        assert_eq!(measured, [4, 8]);
        assert_eq!(prepared(&b), [4, 8], "measured on after the store failed");
        let e = out.store_error.expect("the store's error");
        assert!(format!("{e:#}").contains("disk is full"));
        assert!(!out.interrupted);
    }

    #[test]
    fn a_failed_cell_is_given_up_and_the_others_go_on() {
        let mut b = FakeBackend::new(10_000.0);
        b.fail_size = Some(8 * K);
        let plans = [
            fake::plan(4 * K, time(60), 2),
            fake::plan(8 * K, time(60), 2),
        ];
        let (out, kept) = schedule(&plans, &mut b);
        assert_eq!(prepared(&b), [4, 8, 4]);
        assert_eq!(kept, [4]);
        assert_eq!(out.failed.len(), 1);
        assert!(out.failed[0].0.contains("8K"), "{:?}", out.failed);
        assert!(out.failed[0].1.contains("cannot map"), "{:?}", out.failed);
    }

    #[test]
    fn an_interrupted_cell_keeps_its_finished_blocks_only() {
        let mut b = FakeBackend::new(100_000.0);
        b.jitter = 0.3;
        // Blocks: 4K #1, 8K #1, then 4K #2 is interrupted after two samples.
        b.interrupt_in_block = Some(3);
        let plans = [
            fake::plan(4 * K, time(300), 3),
            fake::plan(8 * K, time(300), 3),
        ];
        let (out, kept) = schedule(&plans, &mut b);
        assert!(out.interrupted);
        assert_eq!(prepared(&b), [4, 8, 4]);
        assert_eq!(kept, [4, 8]);
        for c in &out.cells {
            assert_eq!(c.blocks.len(), 1);
            // The interrupted block's samples are not the cell's.
            assert_eq!(c.ns_per_call.samples.len() as u64, c.blocks[0]);
            assert_eq!(c.probe_ns.len(), 1);
            assert!(
                c.warnings
                    .contains(&"interrupted: 1 of 3 blocks measured".to_string()),
                "{:?}",
                c.warnings
            );
        }
    }
}
