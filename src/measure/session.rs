//! A kernel measurement session: what `bench` and `sweep` share. It pins the
//! thread, takes the THP knob lock, runs the plan's cells in order, stores each
//! finished cell in its own transaction, shows progress on stderr, and stops
//! cleanly on SIGINT/SIGTERM (finished cells kept, run marked interrupted,
//! knobs restored by the guard's Drop).

use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::runner::{self, Interrupted, Reporter, RunEvent};
use crate::kernel::host::{self, Host};
use crate::kernel::thp::{self, KnobGuard};
use crate::record::{CellResult, CellSink};
use crate::workload::size::format_size;

/// A validated set of kernel cells.
#[derive(Debug)]
pub struct KernelPlan {
    pub cells: Vec<super::runner::CellPlan>,
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
}

struct Progress {
    bar: ProgressBar,
    cell: String,
}

impl Reporter for Progress {
    fn event(&mut self, event: RunEvent<'_>) {
        match event {
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
        }
    }
}

/// Run every cell of `plan`. `kind` is "bench" or "sweep".
pub fn run(
    plan: &KernelPlan,
    kind: &str,
    store: Option<&dyn CellSink>,
) -> anyhow::Result<SessionOutcome> {
    let interrupted_flag = thp::interrupted();
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
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let run_id = match store {
        Some(s) => Some(s.begin(kind, &command, &host)?),
        None => None,
    };

    let bar =
        ProgressBar::with_draw_target(Some(plan.cells.len() as u64), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} blocks, ETA {eta} {wide_msg}")
            .expect("static template"),
    );
    let mut progress = Progress {
        bar,
        cell: String::new(),
    };
    let mut cells = Vec::new();
    let mut failed = Vec::new();
    let mut interrupted = false;
    let started = Instant::now();
    // Blocks run round-robin over the cells: block 1 of every cell, then
    // block 2, ... A cell is stored as soon as its last block is done.
    let mut runs: Vec<Option<runner::CellRun>> = plan
        .cells
        .iter()
        .map(|c| Some(runner::CellRun::new(c.clone())))
        .collect();
    let rounds = runs
        .iter()
        .flatten()
        .map(|r| r.blocks_planned())
        .max()
        .unwrap_or(0);
    let total_blocks: u64 = runs
        .iter()
        .flatten()
        .map(|r| r.blocks_planned() as u64)
        .sum();
    progress.bar.set_length(total_blocks);
    'rounds: for _ in 0..rounds {
        for slot in runs.iter_mut() {
            let Some(run) = slot.as_mut() else { continue };
            if run.finished() {
                continue;
            }
            if interrupted_flag.load(std::sync::atomic::Ordering::Relaxed) {
                interrupted = true;
                break 'rounds;
            }
            let cell = run.plan();
            let name = format!(
                "{} {} {}",
                cell.workload,
                format_size(cell.size),
                cell.folio
            );
            progress.cell = name.clone();
            match run.run_block(guard.as_mut(), &mut progress) {
                Ok(()) => {}
                Err(e) if e.is::<Interrupted>() => {
                    interrupted = true;
                    break 'rounds;
                }
                Err(e) => {
                    let left = run.blocks_planned() as u64 - 1;
                    failed.push((name, format!("{e:#}")));
                    *slot = None;
                    progress.bar.inc(1 + left);
                    continue;
                }
            }
            progress.bar.inc(1);
            if run.finished() {
                let run = slot.take().expect("checked above");
                for r in run.finish() {
                    if let (Some(s), Some(id)) = (store, run_id) {
                        s.cell(id, &r)?;
                    }
                    progress.bar.println(format!(
                        "{name}{}: {:.0} ns/call",
                        r.phase
                            .as_deref()
                            .map(|p| format!(" {p}"))
                            .unwrap_or_default(),
                        r.ns_per_call.median
                    ));
                    cells.push(r);
                }
            }
        }
    }
    // An interrupted sweep keeps what it measured: cells with at least one
    // block are stored with the blocks they have, and say so.
    if interrupted {
        for run in runs.iter_mut().filter_map(Option::take) {
            if run.blocks_done() == 0 {
                continue;
            }
            let (done, planned) = (run.blocks_done(), run.blocks_planned());
            for mut r in run.finish() {
                r.warnings
                    .push(format!("interrupted: {done} of {planned} blocks measured"));
                if let (Some(s), Some(id)) = (store, run_id) {
                    s.cell(id, &r)?;
                }
                cells.push(r);
            }
        }
    }
    progress.bar.finish_and_clear();
    if let Some(g) = guard.as_mut() {
        g.restore()?;
    }
    drop(guard);
    if let (Some(s), Some(id)) = (store, run_id) {
        s.finish(id, interrupted, !failed.is_empty() && cells.is_empty())?;
    }
    if interrupted {
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
    })
}
