//! `ptelab compare A B`: resolve the runs named, compare them with
//! `crate::analysis` (pairwise, or replicated when a side is several runs),
//! and print the verdicts. The method is described in docs/statistics.md.

use std::io::Write;
use std::process::ExitCode;

use ptelab_stats::compare::{CompareOpts, DEFAULT_SEED};

use crate::analysis::functions::compare_functions;
use crate::analysis::{
    compare_replicated, compare_runs_paired, incomparable, CompareRow, CompareView, Measured,
    Normalize, Rules,
};
use crate::cli::flags::CompareArgs;
use crate::cli::values::{NormalizeFlag, TextFormat};
use crate::error::bail_usage;
use crate::error::usage;
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
    let ids_a = super::resolve_runs(&store, &args.a, args.replicates)?;
    let ids_b = super::resolve_runs(&store, &args.b, args.replicates)?;
    if args.functions && (ids_a.len() > 1 || ids_b.len() > 1) {
        bail_usage!("--functions compares one run with one run");
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
    let load = |ids: &[i64]| -> anyhow::Result<Vec<StoredRun>> {
        ids.iter().map(|&id| store.load(id)).collect()
    };
    let (runs_a, runs_b) = (load(&ids_a)?, load(&ids_b)?);
    if let Some(why) = incomparable((&args.a, &runs_a), (&args.b, &runs_b)) {
        bail_usage!("{why}; {}", what_compares(&store, &runs_a, &runs_b)?);
    }
    if args.functions {
        let mut view = compare_functions((&args.a, &runs_a[0]), (&args.b, &runs_b[0]))?;
        if let Some(name) = &args.function {
            view.only(name)?;
        }
        let mut out = std::io::stdout().lock();
        out.write_all(render_functions(&view, format, args.top).as_bytes())?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let view = if !replicated {
        compare_two(&store, args, &opts, &runs_a[0], &runs_b[0])?
    } else {
        compare_replicated(
            (&args.a, &runs_a),
            (&args.b, &runs_b),
            &opts,
            args.across_folios,
            args.noise.is_some(),
        )?
    };
    require_common_cell(args, &view)?;

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
    a: &StoredRun,
    b: &StoredRun,
) -> anyhow::Result<CompareView> {
    let rules = Rules::stored(
        store,
        (a, b),
        args.across_folios,
        normalize(args.normalize),
        args.noise.is_some(),
    )?;
    compare_runs_paired(&args.a, a, &args.b, b, opts, &rules)
}

/// The stored runs that would compare with each run of the sides: measured
/// on its arch, in its metric, on its accelerator. Newest first, a few.
fn what_compares(store: &Store, a: &[StoredRun], b: &[StoredRun]) -> anyhow::Result<String> {
    const SHOWN: usize = 6;
    let mut runs = store.runs()?;
    runs.sort_by_key(|r| std::cmp::Reverse(r.id));
    let mut said: Vec<String> = Vec::new();
    let mut seen: Vec<Measured> = Vec::new();
    for run in a.iter().chain(b) {
        let how = Measured::of(&run.run);
        if seen.contains(&how) {
            continue;
        }
        let like: Vec<String> = runs
            .iter()
            .filter(|r| Measured::of(r).compares_with(&how))
            .map(|r| format!("{} ({})", r.id, super::kernel_label(r)))
            .collect();
        let more = match like.len().saturating_sub(SHOWN) {
            0 => String::new(),
            n => format!(", and {n} more"),
        };
        said.push(format!(
            "runs measured as {how}: {}{more}",
            like[..like.len().min(SHOWN)].join(", ")
        ));
        seen.push(how);
    }
    Ok(format!("stored {}", said.join("; ")))
}

/// A usage error when no cell is on both sides: nothing was compared, and
/// the verdict counts would read as "no change".
fn require_common_cell(args: &CompareArgs, view: &CompareView) -> anyhow::Result<()> {
    if view.rows.iter().any(|r| r.a.is_some() && r.b.is_some()) {
        return Ok(());
    }
    const SHOWN: usize = 4;
    let cells = |side: fn(&CompareRow) -> bool| {
        let all: Vec<String> = view.rows.iter().filter(|r| side(r)).map(cell).collect();
        let more = match all.len().saturating_sub(SHOWN) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        format!("{}{more}", all[..all.len().min(SHOWN)].join(", "))
    };
    bail_usage!(
        "'{}' and '{}' have no cell in common, so nothing would be compared: A holds {}; B \
         holds {}. Compare runs of the same workload, size, folio and phase{}",
        args.a,
        args.b,
        cells(|r| r.a.is_some()),
        cells(|r| r.b.is_some()),
        if args.across_folios {
            ""
        } else {
            " (`--across-folios` pairs cells that differ only in their folio)"
        }
    )
}

/// `mprotect-toggle 400K 4K`, with the phase when there is one.
fn cell(r: &CompareRow) -> String {
    let mut s = format!(
        "{} {} {}",
        r.workload,
        crate::text::format::size(r.size_bytes),
        r.folio
    );
    if let Some(p) = &r.phase {
        s.push_str(&format!(" ({p})"));
    }
    s
}

/// `--normalize` as the analysis layer takes it.
fn normalize(flag: NormalizeFlag) -> Normalize {
    match flag {
        NormalizeFlag::Auto => Normalize::Auto,
        NormalizeFlag::Probe => Normalize::Probe,
        NormalizeFlag::None => Normalize::None,
    }
}
