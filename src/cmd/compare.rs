//! `ptelab compare A B`: pair the measured cells of two runs, compare each
//! pair with `ptelab_stats::compare` (ratio of medians, bootstrap CI,
//! Mann-Whitney, Holm across the grid, noise threshold), and print the
//! verdicts. The method is described in docs/statistics.md.

use std::io::Write;
use std::process::ExitCode;

use ptelab_stats::compare::{
    compare_grid, decide_interval, CellInput, CompareOpts, Comparison, NotComparable, Side,
    Verdict, DEFAULT_SEED,
};
use ptelab_stats::holm::holm;
use ptelab_stats::repeatability::{repeatability, Repeatability, COVERAGE};
use ptelab_stats::replicated::{self, RunsEstimate};

use crate::bail_usage;
use crate::cli::flags::{CompareArgs, Normalize};
use crate::cli::values::TextFormat;
use crate::error::usage;
use crate::record::CellResult;
use crate::report::compare::{
    render, CompareRow, CompareView, Drift, Format, Method, Replicated, RunRef, SideView, Summary,
    VerdictKind, SCHEMA,
};
use crate::store::{Calibration, Store, StoredRun};

pub fn run(args: &CompareArgs) -> anyhow::Result<ExitCode> {
    let format = if args.out.json {
        Format::Json
    } else {
        match args.format {
            TextFormat::Text => Format::Text,
            TextFormat::Markdown => Format::Markdown,
        }
    };
    let opts = CompareOpts {
        noise: args.noise.unwrap_or(CompareOpts::default().noise),
        alpha: args.alpha,
        resamples: args.resamples,
        seed: args.seed.unwrap_or(DEFAULT_SEED),
        ..CompareOpts::default()
    };
    opts.validate()
        .map_err(|e| usage(format!("bad comparison option: {e}")))?;

    let store = Store::open_existing(&args.out.db)?;
    let ids_a = store.resolve_runs(&args.a, args.replicates)?;
    let ids_b = store.resolve_runs(&args.b, args.replicates)?;
    let replicated = ids_a.len() > 1 || ids_b.len() > 1;
    // (One run against itself stays allowed: a sanity check with no change.)
    if replicated {
        if let Some(both) = ids_a.iter().find(|id| ids_b.contains(id)) {
            bail_usage!(
                "run {both} is on both sides of a replicated comparison: each run may count once"
            );
        }
    }
    let view = if !replicated {
        compare_two(&store, args, &opts, ids_a[0], ids_b[0])?
    } else {
        let load = |ids: &[i64]| -> anyhow::Result<Vec<StoredRun>> {
            ids.iter().map(|&id| store.load(id)).collect()
        };
        let (runs_a, runs_b) = (load(&ids_a)?, load(&ids_b)?);
        compare_replicated(
            (&args.a, &runs_a),
            (&args.b, &runs_b),
            &opts,
            args.across_folios,
            args.noise.is_some(),
        )?
    };

    let mut out = std::io::stdout().lock();
    out.write_all(render(&view, format).as_bytes())?;
    out.flush()?;
    if args.fail_on_regression && view.summary.regressions > 0 {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// One run against one run: samples, blocks and probes of each.
fn compare_two(
    store: &Store,
    args: &CompareArgs,
    opts: &CompareOpts,
    a: i64,
    b: i64,
) -> anyhow::Result<CompareView> {
    let (a, b) = (store.load(a)?, store.load(b)?);
    let noise = match args.noise {
        Some(_) => NoiseRule::Fixed,
        None => NoiseRule::Calibrated(store.calibrations(&a.run.machine_id)?),
    };
    let rules = Rules {
        across_folios: args.across_folios,
        normalize: args.normalize,
        noise,
    };
    compare_runs_paired(&args.a, &a, &args.b, &b, opts, &rules)
}

/// What pairs two cells: everything but the kernel that ran them (and, with
/// `--across-folios`, but the folio layout).
type CellKey = (String, u64, String, Option<String>, u32, bool);

fn key(c: &CellResult, across_folios: bool) -> CellKey {
    (
        c.workload.name().to_string(),
        c.size_bytes,
        if across_folios {
            String::new()
        } else {
            c.folio.to_string()
        },
        c.phase.clone(),
        c.regions,
        c.neighbor,
    )
}

/// A usage error unless every run of `runs` (named `name`) has measured
/// cells.
fn require_cells(name: &str, runs: &[StoredRun]) -> anyhow::Result<()> {
    if let Some(r) = runs.iter().find(|r| r.kernel_cells().next().is_none()) {
        bail_usage!(
            "run {} ('{name}', {}) has no measured cells to compare: compare runs made by \
             `ptelab bench` or `ptelab sweep`",
            r.run.id,
            r.run.kind
        );
    }
    Ok(())
}

/// The distinct keys of `cells` in first-seen order (A's cells first, then
/// the ones only B has).
fn keys_in_order<'a>(
    cells: impl Iterator<Item = &'a CellResult>,
    across_folios: bool,
) -> Vec<CellKey> {
    let mut keys: Vec<CellKey> = Vec::new();
    for c in cells {
        let k = key(c, across_folios);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

/// The folio column of a row: one folio, or `4K vs 64K` across folios.
fn folio_label(a: Option<&CellResult>, b: Option<&CellResult>) -> String {
    match (a, b) {
        (Some(x), Some(y)) if x.folio != y.folio => format!("{} vs {}", x.folio, y.folio),
        (x, y) => x.or(y).expect("a row has a cell").folio.to_string(),
    }
}

/// Why two cells with one key cannot be compared, as far as layouts go. Each
/// side must have the layout it asked for; unless folios are compared on
/// purpose, both must also have the same layout.
fn layout_refusal(a: &CellResult, b: &CellResult, across_folios: bool) -> Option<NotComparable> {
    let side_mismatch = |name: &str, c: &CellResult| {
        (!c.layout.matches).then(|| {
            let why = c
                .layout
                .mismatch
                .clone()
                .unwrap_or_else(|| c.layout.summary());
            format!("{name} does not have the requested layout ({why})")
        })
    };
    if let Some(why) = side_mismatch("A", a).or_else(|| side_mismatch("B", b)) {
        return Some(NotComparable::LayoutsDiffer(why));
    }
    if !across_folios
        && (a.layout.histogram != b.layout.histogram
            || a.layout.pmd_mapped_bytes != b.layout.pmd_mapped_bytes)
    {
        return Some(NotComparable::LayoutsDiffer(format!(
            "A {}, B {}",
            a.layout.summary(),
            b.layout.summary()
        )));
    }
    None
}

/// Pair the kernel cells of two runs and compare them, correcting for machine
/// drift when `--normalize auto` would. Pure apart from the bootstrap's CPU
/// time.
pub fn compare_runs(
    name_a: &str,
    a: &StoredRun,
    name_b: &str,
    b: &StoredRun,
    opts: &CompareOpts,
    noise: &NoiseRule,
) -> anyhow::Result<CompareView> {
    let rules = Rules {
        noise: noise.clone(),
        ..Rules::default()
    };
    compare_runs_paired(name_a, a, name_b, b, opts, &rules)
}

/// How cells are paired, corrected and judged, beyond the statistics'
/// options.
#[derive(Clone, Debug)]
pub struct Rules {
    /// Pair cells that differ only in their folio layout.
    pub across_folios: bool,
    /// When to correct for machine drift.
    pub normalize: Normalize,
    /// Where the noise threshold comes from.
    pub noise: NoiseRule,
}

impl Default for Rules {
    fn default() -> Rules {
        Rules {
            across_folios: false,
            normalize: Normalize::Auto,
            noise: NoiseRule::Fixed,
        }
    }
}

/// Where the noise threshold comes from.
#[derive(Clone, Debug)]
pub enum NoiseRule {
    /// `opts.noise` as given (`--noise`).
    Fixed,
    /// The machine's between-run repeatability, pooled over its
    /// `ptelab calibrate` runs, when both runs ran on the calibrated machine
    /// and it exceeds `opts.noise`, which is the floor (docs/statistics.md,
    /// "Calibrating the noise threshold").
    Calibrated(Vec<Calibration>),
}

/// The noise threshold for comparing `a` with `b`, and where it came from in
/// words. `floor` is `--noise` or its default; `drift` says whether the
/// cells are corrected for drift, which picks the calibrated coefficient.
fn noise_threshold(
    floor: f64,
    rule: &NoiseRule,
    drift: &Drift,
    a: &StoredRun,
    b: &StoredRun,
) -> (f64, String) {
    let how = "`ptelab calibrate` measures this machine's between-run repeatability";
    let cals = match rule {
        NoiseRule::Fixed => return (floor, "as set (--noise)".into()),
        NoiseRule::Calibrated(cals) => cals,
    };
    let machine = &a.run.machine_id;
    let cals: Vec<&Calibration> = cals.iter().filter(|c| &c.machine_id == machine).collect();
    if cals.is_empty() {
        return (floor, format!("default; {how}"));
    }
    if &b.run.machine_id != machine {
        return (
            floor,
            format!("default; the runs ran on different machines and {how}"),
        );
    }
    let Some(rep) = pooled(&cals, drift.corrected) else {
        return (floor, format!("default; {how}"));
    };
    let which = if drift.corrected {
        "drift-corrected"
    } else {
        "raw"
    };
    let date = |c: &Calibration| {
        c.measured_at
            .get(..10)
            .unwrap_or(&c.measured_at)
            .to_string()
    };
    let (first, last) = (date(cals[0]), date(cals[cals.len() - 1]));
    let when = if first == last {
        first
    } else {
        format!("{first} to {last}")
    };
    let from = format!(
        "{} A/A differences from {} calibration{} of {when}",
        rep.n,
        cals.len(),
        if cals.len() == 1 { "" } else { "s" }
    );
    let noise = calibrated_noise(Some(&rep), floor);
    if noise == MAX_NOISE {
        (
            noise,
            format!(
                "the most the verdict rule accepts: this machine's {which} between-run \
                 repeatability is {:.0}% ({from}), too noisy for any finer verdict; calibrate \
                 again when it is quieter, or compare replicated runs",
                rep.coefficient * 100.0
            ),
        )
    } else if noise > floor {
        (
            noise,
            format!(
                "this machine's {which} between-run repeatability: {:.0}% of {from} were \
                 under it; --noise overrides",
                rep.coverage * 100.0
            ),
        )
    } else {
        (
            noise,
            format!(
                "default; this machine's {which} between-run repeatability is {:.1}% ({from})",
                rep.coefficient * 100.0
            ),
        )
    }
}

/// The largest noise threshold (the verdict band 1 ± noise must keep its
/// lower end above 0). A calibration above it is capped, and says so.
pub const MAX_NOISE: f64 = 0.99;

/// The noise threshold a pooled calibration gives, over `floor`.
pub fn calibrated_noise(rep: Option<&Repeatability>, floor: f64) -> f64 {
    rep.map_or(floor, |r| r.coefficient.clamp(floor, MAX_NOISE))
}

/// The repeatability coefficient of `cals` pooled: the [`COVERAGE`] quantile over
/// all their A/A differences, drift-corrected or raw.
pub fn pooled(cals: &[&Calibration], corrected: bool) -> Option<Repeatability> {
    let diffs: Vec<f64> = cals
        .iter()
        .flat_map(|c| {
            if corrected {
                &c.differences.adjusted
            } else {
                &c.differences.raw
            }
        })
        .copied()
        .collect();
    repeatability(&diffs, COVERAGE).ok()
}

/// Whether to correct for machine drift between `a` and `b`, and why.
fn drift_plan(a: &StoredRun, b: &StoredRun, mode: Normalize) -> Drift {
    let probe_a = crate::record::run_median(a.kernel_cells(), |c| &c.probe_ns);
    let probe_b = crate::record::run_median(b.kernel_cells(), |c| &c.probe_ns);
    let (corrected, why) = match (probe_a, probe_b, mode) {
        (_, _, Normalize::None) => (false, "--normalize none".to_string()),
        (None, _, _) | (_, None, _) => {
            let old = if probe_a.is_none() { a } else { b };
            (
                false,
                format!(
                    "run {} was measured before ptelab recorded the probe",
                    old.run.id
                ),
            )
        }
        (_, _, Normalize::Probe) => (true, "--normalize probe".to_string()),
        (_, _, Normalize::Auto) if a.run.kernel_release != b.run.kernel_release => (
            false,
            "the runs ran different kernels, whose syscall paths may differ; \
             --normalize probe corrects it"
                .to_string(),
        ),
        (_, _, Normalize::Auto) if a.run.machine_id != b.run.machine_id => (
            false,
            "the runs ran on different machines; --normalize probe corrects it".to_string(),
        ),
        (_, _, Normalize::Auto) => (
            true,
            "same kernel, same machine; --normalize none turns it off".to_string(),
        ),
    };
    Drift {
        probe_a_ns: probe_a,
        probe_b_ns: probe_b,
        memory_a_ns: crate::record::run_median(a.kernel_cells(), |c| &c.memory_probe_ns),
        memory_b_ns: crate::record::run_median(b.kernel_cells(), |c| &c.memory_probe_ns),
        corrected,
        why,
    }
}

/// [`compare_runs`], optionally pairing cells that differ only in their folio
/// layout (`--across-folios`: "what does 64K buy over 4K on this kernel?"),
/// with an explicit machine-drift rule.
pub fn compare_runs_paired(
    name_a: &str,
    a: &StoredRun,
    name_b: &str,
    b: &StoredRun,
    opts: &CompareOpts,
    rules: &Rules,
) -> anyhow::Result<CompareView> {
    let across_folios = rules.across_folios;
    require_cells(name_a, std::slice::from_ref(a))?;
    require_cells(name_b, std::slice::from_ref(b))?;
    let cells_a: Vec<&CellResult> = a.kernel_cells().collect();
    let cells_b: Vec<&CellResult> = b.kernel_cells().collect();
    let keys = keys_in_order(cells_a.iter().chain(&cells_b).copied(), across_folios);
    let find = |cells: &[&'_ CellResult], k: &CellKey| -> Option<usize> {
        cells.iter().position(|c| key(c, across_folios) == *k)
    };
    let pairs: Vec<(Option<&CellResult>, Option<&CellResult>)> = keys
        .iter()
        .map(|k| {
            (
                find(&cells_a, k).map(|i| cells_a[i]),
                find(&cells_b, k).map(|i| cells_b[i]),
            )
        })
        .collect();
    let refusals: Vec<Option<NotComparable>> = pairs
        .iter()
        .map(|p| match p {
            (Some(x), Some(y)) => layout_refusal(x, y, across_folios),
            (None, _) => Some(NotComparable::Missing {
                absent_from: Side::A,
            }),
            (_, None) => Some(NotComparable::Missing {
                absent_from: Side::B,
            }),
        })
        .collect();
    // With drift correction, each cell is adjusted by its blocks' probes:
    // kernel speed, and memory latency when both cells recorded it (older
    // results did not). The stats crate checks that every probe fits.
    let drift = drift_plan(a, b, rules.normalize);
    let (noise, noise_source) = noise_threshold(opts.noise, &rules.noise, &drift, a, b);
    let opts = &CompareOpts { noise, ..*opts };
    let covariates: Vec<(Covariates<'_>, Covariates<'_>)> = pairs
        .iter()
        .map(|&(x, y)| match (x, y) {
            (Some(x), Some(y)) if drift.corrected => {
                let memory = !x.memory_probe_ns.is_empty() && !y.memory_probe_ns.is_empty();
                (probe_covariates(x, memory), probe_covariates(y, memory))
            }
            _ => (Vec::new(), Vec::new()),
        })
        .collect();
    fn samples(c: Option<&CellResult>) -> &[f64] {
        c.map_or(&[], |c| &c.ns_per_call.samples)
    }
    // Samples per block: the bootstrap resamples blocks (fresh instances
    // spread over time) before samples, so run-to-run noise widens the CI.
    fn blocks(c: Option<&CellResult>) -> Vec<usize> {
        c.map_or_else(Vec::new, |c| c.blocks.iter().map(|&n| n as usize).collect())
    }
    let block_sizes: Vec<(Vec<usize>, Vec<usize>)> =
        pairs.iter().map(|&(x, y)| (blocks(x), blocks(y))).collect();
    let inputs: Vec<CellInput<'_>> = pairs
        .iter()
        .zip(&refusals)
        .zip(&block_sizes)
        .zip(&covariates)
        .map(|(((&(x, y), refuse), (ba, bb)), (ca, cb))| CellInput {
            a: samples(x),
            b: samples(y),
            refuse: refuse.as_ref(),
            a_blocks: ba,
            b_blocks: bb,
            a_cov: ca,
            b_cov: cb,
        })
        .collect();
    let results =
        compare_grid(&inputs, opts).map_err(|e| usage(format!("bad comparison option: {e}")))?;

    let rows: Vec<CompareRow> = pairs
        .iter()
        .zip(&results)
        .map(|(&(x, y), r)| row(x, y, r))
        .collect();
    let family = results.iter().filter(|r| r.p_adjusted.is_some()).count();
    Ok(CompareView {
        schema: SCHEMA,
        a: run_ref(name_a, a),
        b: run_ref(name_b, b),
        method: Method {
            statistic: "median ns per call".into(),
            confidence: opts.confidence,
            resamples: opts.resamples,
            seed: hex(opts.seed),
            test: "mann-whitney-u on block medians (samples when a side has fewer than 3 blocks); normal approximation, tie and continuity corrected".into(),
            correction: "holm".into(),
            family,
            alpha: opts.alpha,
            noise: opts.noise,
            noise_source,
            min_samples: opts.min_samples,
            replicated: None,
        },
        drift,
        summary: Summary::of(&rows),
        rows,
    })
}

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
        crate::record::run_median(runs.iter().flat_map(|r| r.kernel_cells()), per)
    };
    let side_ref = |name: &str, runs: &[StoredRun]| RunRef {
        runs: runs.iter().map(|r| r.run.id).collect(),
        ..run_ref(name, &runs[0])
    };
    Ok(CompareView {
        schema: SCHEMA,
        a: side_ref(name_a, runs_a),
        b: side_ref(name_b, runs_b),
        method: Method {
            statistic: "geometric mean of run medians of ns per call".into(),
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
            why: "each run's drift is part of the spread each interval measures".into(),
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
        run_sd: est.map(|e| e.sd),
    }
}

/// One side's drift covariates, each one value per block.
type Covariates<'a> = Vec<&'a [f64]>;

/// A cell's drift covariates: kernel speed, and memory latency if `memory`.
fn probe_covariates(c: &CellResult, memory: bool) -> Covariates<'_> {
    let mut v: Vec<&[f64]> = vec![&c.probe_ns];
    if memory {
        v.push(&c.memory_probe_ns);
    }
    v
}

fn hex(seed: u64) -> String {
    format!("{seed:#018x}")
}

fn run_ref(name: &str, r: &StoredRun) -> RunRef {
    RunRef {
        name: name.to_string(),
        id: r.run.id,
        kind: r.run.kind.clone(),
        kernel_release: r.run.kernel_release.clone(),
        machine_id: r.run.machine_id.clone(),
        started_at: r.run.started_at.clone(),
        tags: r.run.tags.clone(),
        runs: Vec::new(),
    }
}

fn side(c: Option<&CellResult>) -> Option<SideView> {
    c.map(|c| SideView {
        median_ns: c.ns_per_call.median,
        samples: c.ns_per_call.samples.len(),
        layout: c.layout.summary(),
        runs: None,
    })
}

fn row(a: Option<&CellResult>, b: Option<&CellResult>, r: &Comparison) -> CompareRow {
    let any = a.or(b).expect("a pair has at least one cell");
    let verdict = verdict_kind(&r.verdict);
    let reason = match &r.verdict {
        Verdict::NotComparable(why) => Some(why.to_string()),
        _ => None,
    };
    let est = r.estimate.as_ref();
    let slopes: &[f64] = est.map_or(&[], |e| &e.drift_slopes);
    CompareRow {
        workload: any.workload.name().to_string(),
        size_bytes: any.size_bytes,
        folio: folio_label(a, b),
        phase: any.phase.clone(),
        regions: any.regions,
        neighbor: any.neighbor,
        a: side(a),
        b: side(b),
        ratio: est.map(|e| e.ratio),
        ratio_raw: match (a, b, slopes.first()) {
            (Some(x), Some(y), Some(_)) => Some(y.ns_per_call.median / x.ns_per_call.median),
            _ => None,
        },
        // The covariates are [kernel speed, memory latency when recorded].
        drift_slope: slopes.first().copied(),
        memory_slope: slopes.get(1).copied(),
        ci_low: est.map(|e| e.ci_low),
        ci_high: est.map(|e| e.ci_high),
        p_value: est.map(|e| e.p_value),
        p_holm: r.p_adjusted,
        seed: est.map(|e| hex(e.seed)),
        verdict,
        reason,
        run_sd: None,
    }
}

fn verdict_kind(v: &Verdict) -> VerdictKind {
    match v {
        Verdict::Regression => VerdictKind::Regression,
        Verdict::Improvement => VerdictKind::Improvement,
        Verdict::NoChange => VerdictKind::NoChange,
        Verdict::NotComparable(_) => VerdictKind::NotComparable,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::{RunStatus, RunSummary, StoredCell, RUN_SCHEMA};
    use crate::workload::FolioSpec;

    /// A complete sweep run of machine `m`, kernel 6.18, holding `cells`.
    pub(crate) fn stored(id: i64, cells: Vec<CellResult>) -> StoredRun {
        StoredRun {
            schema: RUN_SCHEMA.into(),
            run: RunSummary {
                id,
                kind: "sweep".into(),
                command: "ptelab sweep".into(),
                started_at: "2026-05-01T00:00:00Z".into(),
                finished_at: None,
                status: RunStatus::Complete,
                kernel_release: "6.18".into(),
                arch: "x86_64".into(),
                machine_id: "m".into(),
                tool_version: "0.1.0".into(),
                git_revision: None,
                tags: vec![],
                cells: cells.len() as u64,
            },
            host: serde_json::json!({}),
            cells: cells.into_iter().map(StoredCell::Kernel).collect(),
        }
    }

    fn cell(size_kib: u64, folio: FolioSpec, median: f64, n: usize) -> CellResult {
        let mut c = crate::store::tests::cell(size_kib, folio, median);
        // Deterministic spread of ±0.5% around the median.
        c.ns_per_call.samples = (0..n)
            .map(|i| median * (1.0 + ((i * 7) % 11) as f64 / 1000.0 - 0.005))
            .collect();
        c
    }

    fn opts() -> CompareOpts {
        CompareOpts {
            resamples: 500,
            ..CompareOpts::default()
        }
    }

    fn across() -> Rules {
        Rules {
            across_folios: true,
            ..Rules::default()
        }
    }

    #[test]
    fn across_folios_pairs_4k_with_64k_and_gives_the_sign() {
        let a = stored(1, vec![cell(65536, FolioSpec::Base, 2_700_000.0, 30)]);
        let b = stored(
            2,
            vec![cell(65536, FolioSpec::Mthp(64 << 10), 640_000.0, 30)],
        );
        // By default the two layouts are different cells: nothing to compare.
        let v = compare_runs("1", &a, "2", &b, &opts(), &NoiseRule::Fixed).unwrap();
        assert_eq!(v.summary.not_comparable, 2);
        // Across folios they pair, and 64K is an improvement over 4K.
        let v = compare_runs_paired("1", &a, "2", &b, &opts(), &across()).unwrap();
        assert_eq!(v.summary.improvements, 1, "{v:?}");
        assert_eq!(v.rows[0].folio, "4K vs 64K");
        // Reversed, it is a regression.
        let v = compare_runs_paired("2", &b, "1", &a, &opts(), &across()).unwrap();
        assert_eq!(v.summary.regressions, 1);
    }

    #[test]
    fn pairs_by_key_and_refuses_layouts_and_missing_cells() {
        let mut mixed = cell(400, FolioSpec::Mthp(64 << 10), 3000.0, 30);
        mixed.layout.histogram = [(4096, 36), (65536, 4)].into();
        let mut unmatched = cell(4000, FolioSpec::Base, 9000.0, 30);
        unmatched.layout.matches = false;
        unmatched.layout.mismatch = Some("requested 4K folios: 3 THPs".into());
        let a = stored(
            1,
            vec![
                cell(4, FolioSpec::Base, 1000.0, 30),
                cell(40, FolioSpec::Base, 2000.0, 30),
                cell(400, FolioSpec::Mthp(64 << 10), 3000.0, 30),
                cell(4000, FolioSpec::Base, 9000.0, 30),
                cell(8, FolioSpec::Base, 1000.0, 30),
            ],
        );
        let b = stored(
            2,
            vec![
                cell(40, FolioSpec::Base, 2400.0, 30),
                cell(4, FolioSpec::Base, 1001.0, 30),
                mixed,
                unmatched,
                cell(16, FolioSpec::Base, 1000.0, 30),
            ],
        );
        let v = compare_runs("1", &a, "latest", &b, &opts(), &NoiseRule::Fixed).unwrap();
        let verdicts: Vec<(u64, VerdictKind)> = v
            .rows
            .iter()
            .map(|r| (r.size_bytes >> 10, r.verdict))
            .collect();
        assert_eq!(
            verdicts,
            vec![
                (4, VerdictKind::NoChange),
                (40, VerdictKind::Regression),
                (400, VerdictKind::NotComparable),
                (4000, VerdictKind::NotComparable),
                (8, VerdictKind::NotComparable),
                (16, VerdictKind::NotComparable),
            ]
        );
        let reasons: Vec<&str> = v.rows.iter().filter_map(|r| r.reason.as_deref()).collect();
        assert_eq!(reasons[0], "layouts differ: A 100% 64K, B 64% 64K, 36% 4K");
        assert!(reasons[1]
            .contains("B does not have the requested layout (requested 4K folios: 3 THPs)"));
        assert_eq!(&reasons[2..], ["only in A", "only in B"]);
        assert_eq!(v.method.family, 2);
        assert_eq!(v.summary.regressions, 1);
        assert_eq!(v.a.name, "1");
        assert_eq!(v.b.name, "latest");
        assert!((v.rows[1].ratio.unwrap() - 1.2).abs() < 1e-9);
    }

    #[test]
    fn too_few_samples_and_model_only_runs() {
        let a = stored(1, vec![cell(4, FolioSpec::Base, 1000.0, 4)]);
        let b = stored(2, vec![cell(4, FolioSpec::Base, 2000.0, 30)]);
        let v = compare_runs("1", &a, "2", &b, &opts(), &NoiseRule::Fixed).unwrap();
        assert_eq!(
            v.rows[0].reason.as_deref(),
            Some("too few samples (4 vs 30, need 5 each)")
        );
        let empty = stored(3, vec![]);
        let err = compare_runs("3", &empty, "2", &b, &opts(), &NoiseRule::Fixed).unwrap_err();
        assert!(
            crate::error::is_usage(&err) && err.to_string().contains("no measured cells"),
            "{err}"
        );
    }

    #[test]
    fn the_default_seed_prints_as_hex() {
        assert_eq!(hex(DEFAULT_SEED), "0x7074656c61620001");
    }

    /// A calibration whose 40 A/A differences are spread evenly up to
    /// `adjusted` and `raw` (relative).
    fn calibration(machine: &str, adjusted: f64, raw: f64) -> Calibration {
        let c = |coefficient| Repeatability {
            coefficient,
            rms: coefficient / 2.0,
            max: coefficient,
            n: 40,
            coverage: COVERAGE,
        };
        let spread =
            |top: f64| -> Vec<f64> { (1..=40).map(|i| top.ln_1p() * i as f64 / 40.0).collect() };
        Calibration {
            id: Some(3),
            machine_id: machine.into(),
            kernel_release: "6.18".into(),
            measured_at: "2026-11-23T09:40:00Z".into(),
            runs: (1..=8).collect(),
            span_s: 60.0,
            adjusted: c(adjusted),
            raw: c(raw),
            cells: vec![],
            differences: crate::store::Differences {
                adjusted: spread(adjusted),
                raw: spread(raw),
            },
        }
    }

    #[test]
    fn calibrated_noise_threshold_applies_to_its_machine_only() {
        // B is 5% slower: a regression at the 2% default, not on a machine
        // whose A/A runs differ by up to 7.2%.
        let a = stored(1, vec![cell(4, FolioSpec::Base, 1000.0, 30)]);
        let b = stored(2, vec![cell(4, FolioSpec::Base, 1050.0, 30)]);
        let verdict = |rule: NoiseRule| {
            let rules = Rules {
                noise: rule,
                ..Rules::default()
            };
            let v = compare_runs_paired("1", &a, "2", &b, &opts(), &rules).unwrap();
            (v.rows[0].verdict, v.method.noise, v.method.noise_source)
        };
        let (v, noise, why) = verdict(NoiseRule::Calibrated(vec![]));
        assert_eq!((v, noise), (VerdictKind::Regression, 0.02));
        assert!(why.starts_with("default; `ptelab calibrate`"), "{why}");

        // No probes in these cells: compare does not correct, so the raw
        // differences apply. 40 spread evenly up to 7.2%: the 95% quantile
        // is at rank 37.05 of 40.
        let (v, noise, why) = verdict(NoiseRule::Calibrated(vec![calibration("m", 0.05, 0.072)]));
        let expect = (0.072f64.ln_1p() * 38.05 / 40.0).exp_m1();
        assert_eq!(v, VerdictKind::NoChange);
        assert!((noise - expect).abs() < 1e-12, "{noise} vs {expect}");
        assert!(
            why.contains(
                "raw between-run repeatability: 95% of 40 A/A differences from 1 \
                          calibration of 2026-11-23"
            ),
            "{why}"
        );

        // Calibrations pool: a quiet one and a noisy one.
        let (_, noise, why) = verdict(NoiseRule::Calibrated(vec![
            calibration("m", 0.004, 0.006),
            calibration("m", 0.05, 0.072),
        ]));
        assert!(noise > 0.02 && noise < expect, "{noise}");
        assert!(
            why.contains("80 A/A differences from 2 calibrations"),
            "{why}"
        );

        // Another machine's calibration does not apply.
        let (v, noise, why) = verdict(NoiseRule::Calibrated(vec![calibration(
            "other", 0.05, 0.072,
        )]));
        assert_eq!((v, noise), (VerdictKind::Regression, 0.02));
        assert!(why.starts_with("default; `ptelab calibrate`"), "{why}");

        // A quiet machine keeps the default floor.
        let (v, noise, why) = verdict(NoiseRule::Calibrated(vec![calibration("m", 0.004, 0.006)]));
        assert_eq!((v, noise), (VerdictKind::Regression, 0.02));
        assert!(why.contains("repeatability is 0.6%"), "{why}");

        let (_, noise, why) = verdict(NoiseRule::Fixed);
        assert_eq!((noise, why.as_str()), (0.02, "as set (--noise)"));

        // A machine whose A/A runs differ by up to 3x (seen on CI, with the
        // whole test suite beside the calibration) caps at what the verdict
        // rule accepts, and says so.
        let (v, noise, why) = verdict(NoiseRule::Calibrated(vec![calibration("m", 0.5, 2.0)]));
        assert_eq!((v, noise), (VerdictKind::NoChange, MAX_NOISE));
        assert!(why.contains("too noisy for any finer verdict"), "{why}");
    }
}
