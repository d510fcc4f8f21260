//! Several runs against several: the run is the unit
//! (`ptelab_stats::replicated`).

use ptelab_stats::compare::{decide_interval, CompareOpts, NotComparable, Side, Verdict};
use ptelab_stats::holm::holm;
use ptelab_stats::replicated::{self, RunsEstimate};

use super::pair::{
    folio_label, key, keys_in_order, layout_refusal, require_cells, require_comparable, CellKey,
};
use super::rows::{run_ref, verdict_kind};
use super::view::{
    CompareRow, CompareView, Drift, Method, Replicated, RunRef, SideView, Summary, SCHEMA,
};
use crate::record::{run_median, CellResult, Metric};
use crate::store::StoredRun;

/// Several runs against several (`ptelab compare 12,14,16 13,15,17`, or tags
/// with `--replicates`): each cell contributes its median once per run, and
/// the two sets are compared with Student's pooled t on logs
/// (`ptelab_stats::replicated`). The runs' own spread, drift included, is
/// in the interval, so the noise threshold is the floor (`--noise` or 2%),
/// not a calibration, and nothing is drift-corrected.
pub fn compare_replicated(
    (name_a, runs_a): (&str, &[StoredRun]),
    (name_b, runs_b): (&str, &[StoredRun]),
    opts: &CompareOpts,
    across_folios: bool,
    noise_set: bool,
) -> anyhow::Result<CompareView> {
    require_cells(name_a, runs_a)?;
    require_cells(name_b, runs_b)?;
    let metric = require_comparable((name_a, runs_a), (name_b, runs_b))?;
    fn per_run(runs: &[StoredRun]) -> Vec<Vec<&CellResult>> {
        runs.iter().map(|r| r.kernel_cells().collect()).collect()
    }
    let (cells_a, cells_b) = (per_run(runs_a), per_run(runs_b));
    let keys = keys_in_order(
        cells_a.iter().chain(&cells_b).flatten().copied(),
        across_folios,
    );
    // The cell of `k` in every run of a side that has it.
    fn of<'a>(side: &[Vec<&'a CellResult>], k: &CellKey, across: bool) -> Vec<&'a CellResult> {
        side.iter()
            .filter_map(|cells| cells.iter().find(|c| key(c, across) == *k).copied())
            .collect()
    }
    let medians = |cells: &[&CellResult]| -> Vec<f64> {
        cells.iter().map(|c| c.ns_per_call.median).collect()
    };
    // Per cell: its cells in A's runs, in B's, and the estimate or refusal.
    type Judged<'a> = (
        Vec<&'a CellResult>,
        Vec<&'a CellResult>,
        Result<RunsEstimate, NotComparable>,
    );
    let mut cells: Vec<Judged<'_>> = Vec::new();
    for k in &keys {
        let (a, b) = (
            of(&cells_a, k, across_folios),
            of(&cells_b, k, across_folios),
        );
        let judged = match (a.first(), b.first()) {
            (None, _) => Err(NotComparable::Missing {
                absent_from: Side::A,
            }),
            (_, None) => Err(NotComparable::Missing {
                absent_from: Side::B,
            }),
            // Every run must have the layout A's first run has (up to the
            // folio with --across-folios between the sides).
            (Some(first), Some(_)) => match a
                .iter()
                .find_map(|x| layout_refusal(first, x, false))
                .or_else(|| {
                    b.iter()
                        .find_map(|y| layout_refusal(first, y, across_folios))
                }) {
                Some(why) => Err(why),
                None if a.len() + b.len() < replicated::MIN_RUNS => {
                    Err(NotComparable::TooFewRuns {
                        a: a.len(),
                        b: b.len(),
                    })
                }
                None => replicated::compare_runs(&medians(&a), &medians(&b), opts.confidence)
                    .map_err(|e| NotComparable::InvalidSamples(e.to_string())),
            },
        };
        cells.push((a, b, judged));
    }
    let p: Vec<f64> = cells
        .iter()
        .filter_map(|(_, _, e)| e.as_ref().ok().map(|e| e.p_value))
        .collect();
    let mut p_holm = holm(&p).into_iter();
    let rows: Vec<CompareRow> = cells
        .iter()
        .map(|(a, b, judged)| {
            let adjusted = judged.as_ref().ok().and_then(|_| p_holm.next());
            replicated_row(a, b, judged, adjusted, opts)
        })
        .collect();
    let probe = |runs: &[StoredRun], per: fn(&CellResult) -> &[f64]| {
        run_median(runs.iter().flat_map(|r| r.kernel_cells()), per)
    };
    let side_ref = |name: &str, runs: &[StoredRun]| RunRef {
        runs: runs.iter().map(|r| r.run.id).collect(),
        ..run_ref(name, &runs[0])
    };
    Ok(CompareView {
        schema: SCHEMA,
        metric,
        a: side_ref(name_a, runs_a),
        b: side_ref(name_b, runs_b),
        method: Method {
            statistic: format!(
                "geometric mean of run medians of {}",
                metric.per_call_words()
            )
            .replace("nsec", "ns"),
            confidence: opts.confidence,
            resamples: 0,
            seed: "-".into(),
            test: "student-t, pooled variance, on ln run medians".into(),
            correction: "holm".into(),
            family: p.len(),
            alpha: opts.alpha,
            noise: opts.noise,
            noise_source: if noise_set {
                "as set (--noise)".into()
            } else {
                "default; the runs' own spread is in each interval, so no calibration applies"
                    .into()
            },
            guest_bias: None,
            min_samples: opts.min_samples,
            replicated: Some(Replicated {
                runs_a: runs_a.len(),
                runs_b: runs_b.len(),
            }),
        },
        drift: Drift {
            probe_a_ns: probe(runs_a, |c| &c.probe_ns),
            probe_b_ns: probe(runs_b, |c| &c.probe_ns),
            memory_a_ns: probe(runs_a, |c| &c.memory_probe_ns),
            memory_b_ns: probe(runs_b, |c| &c.memory_probe_ns),
            corrected: false,
            why: match metric {
                Metric::Time => "each run's drift is part of the spread each interval measures",
                Metric::Instructions => {
                    "the runs count guest instructions (TCG icount), which machine speed does \
                     not change: there is no drift to correct"
                }
            }
            .into(),
        },
        summary: Summary::of(&rows),
        rows,
    })
}

/// The row of one cell of a replicated comparison.
fn replicated_row(
    a: &[&CellResult],
    b: &[&CellResult],
    judged: &Result<RunsEstimate, NotComparable>,
    p_holm: Option<f64>,
    opts: &CompareOpts,
) -> CompareRow {
    let (verdict, reason) = match (judged, p_holm) {
        (Ok(e), Some(p)) => (
            decide_interval((e.ci_low, e.ci_high), p, opts.noise, opts.alpha),
            None,
        ),
        (Err(why), _) => (Verdict::NotComparable(why.clone()), Some(why.to_string())),
        (Ok(_), None) => unreachable!("every estimate is in the Holm family"),
    };
    let est = judged.as_ref().ok();
    let side = |cells: &[&CellResult], mean: Option<f64>| {
        cells.first().map(|c| SideView {
            median_ns: mean.unwrap_or(c.ns_per_call.median),
            samples: cells.iter().map(|c| c.ns_per_call.samples.len()).sum(),
            layout: c.layout.summary(),
            runs: Some(cells.len()),
        })
    };
    let x = a.first().or(b.first()).expect("a cell is in some run");
    CompareRow {
        workload: x.workload.name().to_string(),
        size_bytes: x.size_bytes,
        folio: folio_label(a.first().copied(), b.first().copied()),
        phase: x.phase.clone(),
        regions: x.regions,
        neighbor: x.neighbor,
        a: side(a, est.map(|e| e.mean_a)),
        b: side(b, est.map(|e| e.mean_b)),
        ratio: est.map(|e| e.ratio),
        ratio_raw: None,
        drift_slope: None,
        memory_slope: None,
        ci_low: est.map(|e| e.ci_low),
        ci_high: est.map(|e| e.ci_high),
        p_value: est.map(|e| e.p_value),
        p_holm,
        seed: None,
        verdict: verdict_kind(&verdict),
        reason,
        guest_bias: None,
        run_sd: est.map(|e| e.sd),
    }
}
