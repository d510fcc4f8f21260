//! `ptelab report RUN [--vs RUN] [--model RUN] -o FILE`: one self-contained
//! HTML file with SVG plots, or Markdown for a mailing-list reply (the format
//! follows the extension: `.html`/`.htm` or `.md`/`.markdown`). `--json`
//! also prints the report's view model (`"schema": "ptelab/report/v1"`) on
//! stdout, criterion's `--debug-report`.
//!
//! The comparison with `--vs` is `ptelab compare BASELINE RUN` with its
//! default options (ratio RUN / BASELINE, bootstrap CI, Holm, and the noise
//! threshold compare would take: 2%, or the machine's calibrated one).

use std::process::ExitCode;

use anyhow::Context;
use ptelab_stats::compare::CompareOpts;

use crate::analysis::functions::compare_functions;
use crate::analysis::{compare_runs, NoiseRule};
use crate::cli::flags::ReportArgs;
use crate::cmd::ReportFormat;
use crate::error::bail_usage;
use crate::report::view::ReportBuilder;
use crate::store::{Store, StoredRun};

pub fn run(args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let format = ReportFormat::from_path(&args.output)?;
    let store = Store::open_existing(&args.out.db)?;
    let run = super::load_named(&store, &args.run)?;
    let base = args
        .vs
        .as_deref()
        .map(|v| super::load_named(&store, v))
        .transpose()?;
    let model_run = args
        .model
        .as_deref()
        .map(|m| super::load_named(&store, m))
        .transpose()?;
    if run.cells.is_empty() {
        bail_usage!(
            "run {} ('{}') has no cells to report: report a run made by `ptelab bench`, `ptelab \
             sweep` or `ptelab model`",
            run.run.id,
            args.run
        );
    }
    if let (Some(m), Some(name)) = (&model_run, &args.model) {
        if m.kernel_cells().count() == m.cells.len() {
            bail_usage!(
                "--model run {} ('{name}') has no model cells: give a run made by `ptelab model` \
                 or `ptelab crosscheck`",
                m.run.id
            );
        }
    }
    let cmp = match (&base, &args.vs) {
        (Some(b), Some(name)) => Some(compare_runs(
            name,
            b,
            &args.run,
            &run,
            &CompareOpts::default(),
            &NoiseRule::Calibrated(store.calibrations(&run.run.machine_id)?),
        )?),
        _ => None,
    };

    let mut builder = ReportBuilder::new(title(&run, base.as_ref())).run(&args.run, &run);
    if let (Some(b), Some(name), Some(c)) = (&base, &args.vs, &cmp) {
        builder = builder.baseline(name, b, c);
        // Runs without mechanism counters simply have no such section.
        if let Ok(view) = compare_functions((name, b), (&args.run, &run)) {
            builder = builder.functions(view);
        }
    }
    if let (Some(m), Some(name)) = (&model_run, &args.model) {
        builder = builder.model_run(name, m);
    }
    let model = builder.build();

    let bytes = format.render(&model)?;
    std::fs::write(&args.output, bytes)
        .with_context(|| format!("cannot write the report to {}", args.output.display()))?;
    if args.out.json {
        super::print_json(&model)?;
    }
    eprintln!("ptelab: wrote {}", args.output.display());
    Ok(ExitCode::SUCCESS)
}

/// `run 3: mprotect-toggle on Linux 6.18 (vs run 2, Linux 6.16)`.
fn title(run: &StoredRun, base: Option<&StoredRun>) -> String {
    let mut workloads: Vec<&str> = Vec::new();
    for c in run.kernel_cells() {
        if !workloads.contains(&c.workload.name()) {
            workloads.push(c.workload.name());
        }
    }
    let what = if workloads.is_empty() {
        run.run.kind.clone()
    } else {
        workloads.join(", ")
    };
    let mut t = format!(
        "ptelab report: run {}, {what} on Linux {}",
        run.run.id, run.run.kernel_release
    );
    if let Some(b) = base {
        t.push_str(&format!(
            " vs run {} (Linux {})",
            b.run.id, b.run.kernel_release
        ));
    }
    t
}
