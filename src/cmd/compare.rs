//! `ptelab compare A B`: resolve the runs named, compare them with
//! `crate::analysis` (pairwise, or replicated when a side is several runs),
//! and print the verdicts. The method is described in docs/statistics.md.

use std::io::Write;
use std::process::ExitCode;

use ptelab_stats::compare::{CompareOpts, DEFAULT_SEED};

use crate::analysis::functions::compare_functions;
use crate::analysis::{compare_replicated, compare_runs_paired, CompareView, NoiseRule, Rules};
use crate::cli::flags::CompareArgs;
use crate::cli::values::TextFormat;
use crate::error::bail_usage;
use crate::error::usage;
use crate::record::Metric;
use crate::report::compare::{render, Format};
use crate::report::mechanism::render_functions;
use crate::store::{Store, StoredRun};

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
    if args.functions {
        if ids_a.len() > 1 || ids_b.len() > 1 {
            bail_usage!("--functions compares one run with one run");
        }
        let (a, b) = (store.load(ids_a[0])?, store.load(ids_b[0])?);
        let mut view = compare_functions((&args.a, &a), (&args.b, &b))?;
        if let Some(name) = &args.function {
            view.only(name)?;
        }
        let mut out = std::io::stdout().lock();
        out.write_all(render_functions(&view, format, args.top).as_bytes())?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
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
    // Guest figures: each cell's guest bias is its noise threshold, unless
    // --noise sets one.
    let guest =
        |r: &StoredRun| r.run.guest.as_ref().map(|g| g.metric) == Some(Metric::Instructions);
    let guest_biases = match args.noise {
        None if guest(&a) && guest(&b) => Some(store.guest_biases()?),
        _ => None,
    };
    let rules = Rules {
        across_folios: args.across_folios,
        normalize: args.normalize,
        noise,
        guest_biases,
    };
    compare_runs_paired(&args.a, &a, &args.b, &b, opts, &rules)
}
