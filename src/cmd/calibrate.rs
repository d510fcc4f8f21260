//! `ptelab calibrate`: measure how far two runs of the same cells land apart
//! on this machine when nothing changed, and store it as the machine's
//! between-run repeatability (docs/statistics.md, "Calibrating the noise
//! threshold").
//!
//! Why: on a shared VM the whole machine drifts by several percent between
//! runs in ways that the per-block probes only partly see, so a fixed 2%
//! noise threshold flags A/A pairs as regressions. The calibration measures
//! the machine's own A/A spread, and `ptelab compare` takes it as its noise
//! threshold for runs of this machine when it exceeds the default.
//!
//! Method: R runs of a grid of `mprotect-toggle` cells, their starts spread
//! evenly over `--span` (3 minutes by default), each stored as a normal run
//! (kind `calibrate`, tag `calibrate`). The spread matters: this VM's noise
//! changes over minutes, and 8 runs back to back once landed in a quiet
//! minute (3.8% raw) just before a noisy period (A/A differences up to
//! 7.7%); 8 runs of that period taken 15 s apart gave 8.3% raw. Every pair of
//! runs is compared exactly as `ptelab compare` would (drift-corrected, and
//! raw), and the repeatability coefficient is the 95% quantile of |ln ratio|
//! over all pairs and cells (`ptelab_stats::repeatability`).

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

use ptelab_stats::compare::CompareOpts;
use ptelab_stats::repeatability::{repeatability, COVERAGE, MIN_DIFFERENCES};
use serde_json::json;

use crate::analysis::{
    calibrated_noise, compare_runs_paired, pooled, NoiseRule, Normalize, Rules, VerdictKind,
};
use crate::cli::flags::{CalibrateArgs, MeasureOpts};
use crate::cli::plan;
use crate::error::bail_usage;
use crate::kernel::signals;
use crate::measure::session;
use crate::record::CellResult;
use crate::report::compare::noise_pct;
use crate::store::{Calibration, CellCoefficient, Differences, Store, StoredRun};
use crate::text::table::Table;
use crate::workload::size::format_size;
use crate::workload::WorkloadKind;

/// The workload calibrated: the seeds' region-size sweep, whose cells span
/// cache-resident to memory-bound page-table walks.
const WORKLOAD: WorkloadKind = WorkloadKind::MprotectToggle;

pub mod guest;

pub fn run(args: &CalibrateArgs) -> anyhow::Result<ExitCode> {
    if args.guest {
        return guest::run(args);
    }
    if args.exec.slurm() {
        bail_usage!("--executor slurm boots guests: it goes with --guest");
    }
    args.exec.check()?;
    if !args.command.is_empty() {
        bail_usage!(
            "a command after -- is the guest's: calibrate --guest --kernel SPEC -- bench …"
        );
    }
    if args.out.no_store {
        bail_usage!("calibrate stores its runs and its result in the database: drop --no-store");
    }
    let (sizes, folios) = (args.sizes.clone(), args.folios.clone());
    let cells = sizes.len() * folios.len();
    let pairs = args.runs as usize * (args.runs as usize - 1) / 2;
    if cells * pairs < MIN_DIFFERENCES {
        bail_usage!(
            "{} runs of a {cells}-cell grid give {} A/A differences; the {:.0}% quantile needs \
             at least {MIN_DIFFERENCES}: raise --runs or add --sizes/--folios",
            args.runs,
            cells * pairs,
            COVERAGE * 100.0
        );
    }
    let measure = MeasureOpts {
        regions: 1,
        pin: args.pin,
        no_pin: false,
        iters: None,
        time: args.time,
        blocks: args.blocks,
        allow_mismatch: false,
        allow_unverified: false,
        neighbor: false,
        no_flush_count: true,
        windows: false,
        icount: false,
        swapfile: None,
    };
    let span = args.span;
    let plan = plan::kernel_plan(WORKLOAD, &sizes, &folios, &measure)?;
    let store = Store::open(&args.out.db)?;
    let tags: Vec<String> = std::iter::once("calibrate".to_string())
        .chain(args.out.tags.iter().cloned())
        .collect();
    let tty = std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut runs: Vec<StoredRun> = Vec::new();
    let interrupted = |done: usize| {
        eprintln!(
            "ptelab: calibration interrupted after {done} of {} runs; no calibration was \
             stored (the finished runs are in {})",
            args.runs,
            args.out.db.display()
        );
        Ok(ExitCode::from(130))
    };
    // Run i starts at i/(R-1) of the span, or as soon as run i-1 ends.
    let interval = span / (args.runs - 1);
    for i in 0..args.runs {
        let start_at = started + interval * i;
        if tty && start_at > Instant::now() {
            eprintln!(
                "ptelab: idle for {:.0} s: the runs are spread over --span {:?}",
                (start_at - Instant::now()).as_secs_f64(),
                args.span
            );
        }
        if !signals::idle_until(start_at) {
            return interrupted(runs.len());
        }
        if tty {
            eprintln!("ptelab: calibration run {} of {}", i + 1, args.runs);
        }
        // A store that fails (a full disk) stops the calibration; the
        // figures measured so far are printed before its error.
        let outcome = match session::run(&plan, "calibrate", Some(&store)) {
            Ok(o) => o,
            Err(e) if !runs.is_empty() => return stopped(args, &sizes, &folios, &runs, None, e),
            Err(e) => return Err(e),
        };
        let id = outcome.run_id.expect("a stored session has a run id");
        let stored = match outcome.store_error {
            Some(e) => Err(e),
            None => store.add_tags(id, &tags),
        };
        if let Err(e) = stored {
            let partial = Some((id, &outcome.cells[..]));
            return stopped(args, &sizes, &folios, &runs, partial, e);
        }
        if outcome.interrupted {
            return interrupted(runs.len());
        }
        if let Some((cell, err)) = outcome.failed.first() {
            anyhow::bail!("calibration run {id}: cell {cell} failed: {err}");
        }
        runs.push(store.load(id)?);
    }
    let mut cal = estimate(&runs, started.elapsed().as_secs_f64())?;
    let grid = plan_label(&sizes, &folios);
    let stored = match store.insert_calibration(&cal) {
        Ok(id) => {
            cal.id = Some(id);
            let all = store.calibrations(&cal.machine_id)?;
            let all: Vec<&Calibration> = all.iter().collect();
            let floor = CompareOpts::default().noise;
            let threshold = |corrected| calibrated_noise(pooled(&all, corrected).as_ref(), floor);
            Ok((all.len(), (threshold(true), threshold(false))))
        }
        Err(e) => Err(e),
    };
    if args.out.json {
        let (calibrations, thresholds) = match &stored {
            Ok((n, (c, r))) => (Some(*n), Some(json!({"corrected": c, "raw": r}))),
            Err(_) => (None, None),
        };
        super::print_json(&json!({
            "schema": "ptelab/calibrate/v1",
            "workload": WORKLOAD,
            "default_noise": CompareOpts::default().noise,
            "calibration": cal,
            "calibrations_of_machine": calibrations,
            "noise_threshold": thresholds,
            "store_error": stored.as_ref().err().map(|e| format!("{e:#}")),
        }))?;
    } else {
        let pooled = stored.as_ref().ok().copied();
        super::print_text(&render(&cal, &grid, pooled, &args.out.db))?;
    }
    // The figures are out; now the store's error decides the exit code.
    stored.map(|_| ExitCode::SUCCESS)
}

/// A calibration stopped by `error` (the store's, mostly) after the
/// stored `runs` and the cells of a `partial` run (its id and cells, not
/// all stored): print their figures, then return the error.
fn stopped(
    args: &CalibrateArgs,
    sizes: &[u64],
    folios: &[crate::workload::FolioSpec],
    runs: &[StoredRun],
    partial: Option<(i64, &[CellResult])>,
    error: anyhow::Error,
) -> anyhow::Result<ExitCode> {
    let mut measured: Vec<(i64, Vec<CellResult>, &str)> = runs
        .iter()
        .map(|r| (r.run.id, r.kernel_cells().cloned().collect(), ""))
        .collect();
    if let Some((id, cells)) = partial {
        measured.push((id, cells.to_vec(), ", not all stored"));
    }
    if args.out.json {
        super::print_json(&json!({
            "schema": "ptelab/calibrate/v1",
            "workload": WORKLOAD,
            "calibration": null,
            "runs": measured.iter().map(|(id, cells, _)| json!({"run_id": id, "cells": cells})).collect::<Vec<_>>(),
            "error": format!("{error:#}"),
        }))?;
    } else {
        let mut text = format!(
            "Calibration of {} ({}) stopped in run {} of {} (the error follows): no \
             repeatability was estimated. The figures measured:\n",
            WORKLOAD.name(),
            plan_label(sizes, folios),
            runs.len() + 1,
            args.runs,
        );
        for (i, (id, cells, note)) in measured.iter().enumerate() {
            writeln!(
                text,
                "\ncalibration run {} of {} (run {id}{note}):\n",
                i + 1,
                args.runs
            )?;
            text.push_str(&crate::record::cells::render_table(cells));
        }
        super::print_text(&text)?;
    }
    Err(error)
}

fn plan_label(sizes: &[u64], folios: &[crate::workload::FolioSpec]) -> String {
    let s: Vec<String> = sizes.iter().map(|&b| format_size(b)).collect();
    let f: Vec<String> = folios.iter().map(|f| f.to_string()).collect();
    format!("{} x {}", s.join(" "), f.join(" "))
}

/// The ln ratios of every pair of `runs` and every comparable cell, as
/// `ptelab compare` computes the ratio with `normalize`, each with its
/// cell's label.
fn differences(runs: &[StoredRun], normalize: Normalize) -> anyhow::Result<Vec<(String, f64)>> {
    // Only the point ratio is used: a token bootstrap keeps this fast.
    let opts = CompareOpts {
        resamples: 100,
        ..CompareOpts::default()
    };
    let rules = Rules {
        normalize,
        noise: NoiseRule::Fixed,
        ..Rules::default()
    };
    let mut out = Vec::new();
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            let v = compare_runs_paired("A", a, "B", b, &opts, &rules)?;
            let comparable = v
                .rows
                .iter()
                .filter(|r| r.verdict != VerdictKind::NotComparable);
            for r in comparable {
                if let Some(ratio) = r.ratio {
                    out.push((
                        format!("{} {}", format_size(r.size_bytes), r.folio),
                        ratio.ln(),
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// The calibration of `runs` (measured over `span_s` seconds).
pub fn estimate(runs: &[StoredRun], span_s: f64) -> anyhow::Result<Calibration> {
    let first = &runs.first().expect("at least one run").run;
    let last = &runs.last().expect("at least one run").run;
    let adjusted = differences(runs, Normalize::Auto)?;
    let raw = differences(runs, Normalize::None)?;
    let values = |d: &[(String, f64)], cell: Option<&str>| -> Vec<f64> {
        d.iter()
            .filter(|(l, _)| cell.is_none_or(|c| c == l))
            .map(|(_, x)| *x)
            .collect()
    };
    let whole = |d: &[(String, f64)]| {
        repeatability(&values(d, None), COVERAGE)
            .map_err(|e| anyhow::anyhow!("cannot estimate repeatability: {e}"))
    };
    let of_cell = |d: &[(String, f64)], cell: &str| {
        repeatability(&values(d, Some(cell)), COVERAGE)
            .ok()
            .map(|r| r.coefficient)
    };
    let mut labels: Vec<&str> = Vec::new();
    for (l, _) in &adjusted {
        if !labels.contains(&l.as_str()) {
            labels.push(l);
        }
    }
    let cells = labels
        .iter()
        .map(|&l| CellCoefficient {
            cell: l.to_string(),
            adjusted: of_cell(&adjusted, l),
            raw: of_cell(&raw, l),
        })
        .collect();
    Ok(Calibration {
        id: None,
        machine_id: first.machine_id.clone(),
        kernel_release: first.kernel_release.clone(),
        measured_at: last.finished_at.clone().unwrap_or(last.started_at.clone()),
        runs: runs.iter().map(|r| r.run.id).collect(),
        span_s,
        adjusted: whole(&adjusted)?,
        raw: whole(&raw)?,
        cells,
        differences: Differences {
            adjusted: values(&adjusted, None),
            raw: values(&raw, None),
        },
    })
}

/// The calibration as text. `pooled`: once stored, the machine's number of
/// calibrations and compare's thresholds (drift-corrected, raw) from them;
/// None when the store refused it.
fn render(
    cal: &Calibration,
    grid: &str,
    pooled: Option<(usize, (f64, f64))>,
    db: &crate::store::Location,
) -> String {
    let pct = |x: f64| format!("{:.1}%", x * 100.0);
    let opt = |x: Option<f64>| x.map_or_else(|| "-".to_string(), pct);
    let n = cal.runs.len();
    let mut out = String::new();
    writeln!(
        out,
        "Between-run repeatability of this machine (Linux {}, machine {}):\n\
         {n} runs of {} ({grid}) over {:.0} s, runs {}..{}: {} pairs of runs, {} differences.\n",
        cal.kernel_release,
        cal.machine_id,
        WORKLOAD.name(),
        cal.span_s,
        cal.runs[0],
        cal.runs[n - 1],
        n * (n - 1) / 2,
        cal.adjusted.n,
    )
    .unwrap();
    let under = format!("{:.0}% under", cal.adjusted.coverage * 100.0);
    let mut table = Table::new()
        .left("A/A difference")
        .min_width(38)
        .right(under)
        .min_width(9)
        .right("rms")
        .min_width(7)
        .right("max")
        .min_width(7);
    for (what, c) in [
        ("drift-corrected (one kernel)", &cal.adjusted),
        ("raw (across kernels, --normalize none)", &cal.raw),
    ] {
        table.row([what.to_string(), pct(c.coefficient), pct(c.rms), pct(c.max)]);
    }
    out.push_str(&table.text(" "));
    let mut table = Table::new()
        .left("cell")
        .min_width(12)
        .right("drift-corrected")
        .right("raw")
        .min_width(9);
    for c in &cal.cells {
        table.row([c.cell.clone(), opt(c.adjusted), opt(c.raw)]);
    }
    out.push('\n');
    out.push_str(&table.text(" "));
    match pooled {
        Some((calibrations, (corrected, raw))) => writeln!(
            out,
            "\nptelab compare now takes {}% (drift-corrected) or {}% (raw) as the noise \
             threshold for runs of this machine: the larger of the {}% default and the {:.0}% \
             quantile pooled over the {calibrations} calibration(s) of this machine in {} (this \
             one is {}; --noise overrides).",
            noise_pct(corrected),
            noise_pct(raw),
            noise_pct(CompareOpts::default().noise),
            COVERAGE * 100.0,
            db.display(),
            cal.id.unwrap_or_default(),
        ),
        None => writeln!(
            out,
            "\nThis calibration was not stored: the results database {} failed (the error \
             follows), and ptelab compare keeps the noise threshold it had.",
            db.display(),
        ),
    }
    .unwrap();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::FolioSpec;

    /// A run of two cells whose medians are `level` times a base, with a
    /// ±0.5% spread, and a probe that does not vary (no drift correction).
    fn run(id: i64, level: f64) -> StoredRun {
        let cells = [(4, 1000.0), (64, 9000.0)]
            .into_iter()
            .map(|(kib, ns)| {
                let mut c = crate::store::tests::cell(kib, FolioSpec::Base, ns * level);
                c.ns_per_call.samples = (0..20)
                    .map(|i| ns * level * (1.0 + ((i * 7) % 11) as f64 / 1000.0 - 0.005))
                    .collect();
                c.blocks = vec![];
                c
            })
            .collect();
        let mut r = crate::analysis::tests::stored(id, cells);
        r.run.started_at = format!("2026-11-23T09:00:0{id}Z");
        r
    }

    #[test]
    fn estimate_reads_the_spread_of_run_levels() {
        // Run levels 1.00, 1.02, 0.99, 1.05, 1.01: 10 pairs x 2 cells; the
        // largest difference is 1.05 / 0.99.
        let levels = [1.0, 1.02, 0.99, 1.05, 1.01];
        let runs: Vec<StoredRun> = (1..).zip(levels).map(|(id, l)| run(id, l)).collect();
        let cal = estimate(&runs, 12.0).unwrap();
        assert_eq!(cal.runs, vec![1, 2, 3, 4, 5]);
        assert_eq!(cal.adjusted.n, 20);
        assert!((cal.adjusted.max - (1.05f64 / 0.99 - 1.0)).abs() < 1e-9);
        // The 95% quantile of 20 |differences| interpolates between the two
        // largest (both 1.05 / 0.99 and 1.05 / 1.0 are near the top).
        assert!(cal.adjusted.coefficient > 0.045 && cal.adjusted.coefficient <= cal.adjusted.max);
        // Without probes the corrected and raw figures are the same.
        assert_eq!(cal.adjusted, cal.raw);
        assert_eq!(cal.cells.len(), 2);
        // 10 pairs per cell are too few for a cell's own 95% quantile.
        assert!(cal
            .cells
            .iter()
            .all(|c| c.adjusted.is_none() && c.raw.is_none()));
        assert_eq!(cal.machine_id, "m");
        assert_eq!(cal.measured_at, "2026-11-23T09:00:05Z");
    }

    #[test]
    fn the_report_reads_well() {
        let rep = |coefficient: f64| ptelab_stats::repeatability::Repeatability {
            coefficient,
            rms: coefficient / 2.0,
            max: coefficient * 1.5,
            n: 56,
            coverage: COVERAGE,
        };
        let cal = Calibration {
            id: Some(3),
            machine_id: "0123456789abcdef".into(),
            kernel_release: "6.18.44".into(),
            measured_at: "2026-11-23T13:00:00Z".into(),
            runs: (10..18).collect(),
            span_s: 182.4,
            adjusted: rep(0.048),
            raw: rep(0.083),
            cells: vec![
                CellCoefficient {
                    cell: "400K 4K".into(),
                    adjusted: Some(0.031),
                    raw: Some(0.052),
                },
                CellCoefficient {
                    cell: "40M 64K".into(),
                    adjusted: None,
                    raw: Some(0.12),
                },
            ],
            differences: Differences::default(),
        };
        insta::assert_snapshot!(render(
            &cal,
            "400K, 40M x 4K, 64K",
            Some((2, (0.048, 0.083))),
            &crate::store::Location::File("ptelab.db".into())
        ));
    }
}
