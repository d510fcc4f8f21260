//! `ptelab reproduce [SEED...] [--quick]`: the main job. Measures every seed
//! experiment on this kernel, models it for x86-64 and arm64, prints each
//! claim beside the seed's published figure with a verdict, stores
//! everything as one run, and writes the report.
//!
//! Order matters: the kernel session runs first because it re-executes
//! ptelab on the pinned CPU (see `runner::pin_process`); the model runs
//! after, in the pinned process.

use std::fmt::Write;
use std::process::ExitCode;

use anyhow::Context;
use ptelab_model::Granule;
use serde_json::json;

use crate::cli::flags::{MeasureOpts, ReproduceArgs};
use crate::cli::plan;
use crate::measure::session;
use crate::measure::session::KernelPlan;
use crate::model::{arch_config, model_cells, parse_strategies, ModelPlan};
use crate::record::CellSink;
use crate::report::view::ReportBuilder;
use crate::reproduce::in_guests;
use crate::reproduce::{claims, seeds, Evidence, Seed};
use crate::store::Store;

fn measure_opts(quick: bool) -> MeasureOpts {
    MeasureOpts {
        regions: 1,
        pin: None,
        no_pin: false,
        iters: None,
        time: std::time::Duration::from_secs(if quick { 1 } else { 3 }),
        allow_mismatch: false,
        allow_unverified: false,
        neighbor: false,
        no_flush_count: false,
        windows: false,
        icount: false,
        // --quick must finish in minutes: fewer fresh instances per cell
        // (reproduce compares nothing; blocks only steady its medians).
        blocks: if quick {
            3
        } else {
            crate::measure::runner::DEFAULT_BLOCKS
        },
        swapfile: None,
    }
}

pub fn run(args: &ReproduceArgs) -> anyhow::Result<ExitCode> {
    let catalogue = seeds(args.quick);
    let ids: Vec<&str> = catalogue.iter().map(|s| s.id).collect();
    for s in &args.seeds {
        if !ids.contains(&s.as_str()) {
            crate::error::bail_usage!("unknown seed '{s}': accepted seeds are {}", ids.join(", "));
        }
    }
    let chosen: Vec<&Seed> = catalogue
        .iter()
        .filter(|s| args.seeds.is_empty() || args.seeds.iter().any(|a| a == s.id))
        .collect();
    // Guest flags are checked before anything is measured.
    args.guest.build_config(false)?;
    let mut guests = args
        .guest_kernels()?
        .map(|(choice, arches)| in_guests::Request {
            choice,
            arches,
            mirror: args.guest.mirror.clone(),
            quick: args.quick,
            cache: None,
        });
    args.cluster.check()?;
    if args.cluster.slurm() {
        let Some(req) = guests.as_mut() else {
            crate::error::bail_usage!(
                "--executor slurm runs the guests of --kernels as Slurm tasks: give --kernels too"
            );
        };
        req.cache = Some(super::guest_cache(&args.cluster.exec)?.root);
    }

    // Kernel cells: one plan over every seed; workloads the kernel backend
    // cannot run (yet, or on this machine) are recorded, not fatal.
    let mut ev = Evidence::default();
    let opts = measure_opts(args.quick);
    let mut kplan = KernelPlan {
        cells: Vec::new(),
        verified: true,
        pin: None,
        skipped: Vec::new(),
    };
    for seed in &chosen {
        for k in &seed.kernel {
            match plan::kernel_plan(k.workload, &k.sizes, &k.folios, &opts) {
                Ok(p) => {
                    kplan.verified &= p.verified;
                    kplan.pin = p.pin;
                    kplan.cells.extend(p.cells);
                    kplan.skipped.extend(p.skipped);
                }
                Err(e) => ev.unavailable.push((k.workload, format!("{e:#}"))),
            }
        }
    }
    let store = super::open_store(&args.out)?;
    let sink: Option<&dyn CellSink> = store.as_ref().map(|s| s as &dyn CellSink);
    let mut outcome = session::run(&kplan, "reproduce", sink)?;
    // A store that fails (a full disk, a server gone) stops the measuring,
    // as in bench and sweep: nothing more is stored or measured, what was
    // measured is judged and printed, and then the store's error decides
    // the exit code. The session marked the run failed.
    let mut store_error = outcome.store_error.take();
    if let (Some(s), Some(id), false, None) = (
        &store,
        outcome.run_id,
        args.out.tags.is_empty(),
        &store_error,
    ) {
        store_error = s.add_tags(id, &args.out.tags).err();
    }
    if outcome.interrupted {
        return Ok(ExitCode::from(130));
    }
    for (cell, err) in &outcome.failed {
        eprintln!("ptelab: cell {cell} failed: {err}");
        if let Some(w) = crate::workload::WorkloadKind::ALL
            .iter()
            .find(|w| cell.starts_with(w.name()))
        {
            ev.unavailable.push((*w, err.clone()));
        }
    }
    if store_error.is_some() {
        let mut cut: Vec<crate::workload::WorkloadKind> = Vec::new();
        for c in &kplan.cells {
            let measured = outcome
                .cells
                .iter()
                .any(|m| m.workload == c.workload && m.size_bytes == c.size && m.folio == c.folio);
            if !measured && !cut.contains(&c.workload) {
                cut.push(c.workload);
            }
        }
        for w in cut {
            ev.unavailable.push((
                w,
                "not all cells measured: measuring stopped when the results database failed".into(),
            ));
        }
    }
    ev.cells = std::mem::take(&mut outcome.cells);

    // Model cells, stored with the same run.
    for seed in &chosen {
        for m in &seed.model {
            let plan = ModelPlan {
                workload: m.workload,
                arch: arch_config(m.arch, Granule::K4, false, false)?,
                strategies: parse_strategies(m.strategies)?,
                size_bytes: m.size,
                folio: m.folio,
                offset_pages: 0,
            };
            let cells = model_cells(&plan)?;
            if let (Some(s), Some(id), None) = (&store, outcome.run_id, &store_error) {
                store_error = cells
                    .iter()
                    .try_for_each(|(_, rec)| s.insert_model_cell(id, rec).map(drop))
                    .err();
            }
            ev.model.push((
                (m.arch, m.workload, m.size, m.folio),
                cells.into_iter().map(|(o, _)| o).collect(),
            ));
        }
    }

    // Guests last: the session above pinned this process to one CPU, and
    // the fleet lets its guests use every CPU again. Not after the store
    // failed: each guest's run would be lost.
    let guests_skipped = guests.is_some() && store_error.is_some();
    if let (Some(req), None) = (&guests, &store_error) {
        let mut settings = super::fleet_settings(
            &args.guest,
            1 << 30,
            crate::kernel::procfs::online_cpus() as u32,
            Vec::new(),
            Vec::new(),
        );
        settings.executing = super::executing(&args.cluster);
        // Each seed's mechanism is stated from the counts of TCG guests.
        if settings.profile == crate::fleet::ProfileRequest::Off {
            settings.profile = crate::fleet::ProfileRequest::WhereTcg;
        }
        let mut tags = args.out.tags.clone();
        tags.push("reproduce".into());
        ev.guests = in_guests::measure(
            &chosen,
            req,
            settings,
            store.as_ref(),
            &tags,
            &mut store_error,
        )?;
        // Each guest cell's bias (`calibrate --guest`) is the noise of its
        // change; read also under --no-store, from the database that exists.
        ev.guests.biases = match (&store, &store_error) {
            (Some(s), None) => s.guest_biases()?,
            // A store that failed to write may still read (a full disk).
            (Some(s), Some(_)) => s.guest_biases().unwrap_or_default(),
            (None, _) => Store::open_existing(&args.out.db)
                .and_then(|s| s.guest_biases())
                .unwrap_or_default(),
        };
        ev.predicted = crate::reproduce::predicted::Predicted::of(&ev.guests);
    }

    let chosen_ids: Vec<&str> = chosen.iter().map(|s| s.id).collect();
    let rows = claims::judge_all(&chosen_ids, &ev, args.quick);
    // The report is written whichever way the result is printed, from the
    // stored run: not when the store failed.
    let report = match (&store, outcome.run_id, &store_error) {
        (Some(s), Some(id), None) => {
            write_report(s, id, &rows, &chosen, &ev, args)?;
            Some(&args.output)
        }
        _ => None,
    };
    // Guests asked for must have measured something: a run whose every
    // guest failed or was refused is not a success, whatever this kernel did.
    let guests_measured =
        ev.guests.asked.is_empty() || ev.guests.runs.iter().any(|r| !r.cells.is_empty());
    if args.out.json {
        crate::cmd::print_json(&json!({
            "report": report,
            "schema": "ptelab/reproduce/v1",
            "run_id": outcome.run_id,
            "kernel": outcome.host.kernel_release,
            "cpu": outcome.host.cpu_model,
            "quick": args.quick,
            "claims": rows,
            "cells": crate::report::json::cells(&ev.cells, outcome.host.metric()),
            "unavailable": ev.unavailable.iter().map(|(w, why)| json!({"workload": w, "why": why})).collect::<Vec<_>>(),
            "guests": ev.guests.runs,
            "cost_model": ev.predicted,
            "guest_notes": ev.guests.notes.iter().map(|(s, why)| json!({"seeds": s, "why": why})).collect::<Vec<_>>(),
            "guest_arches_missing": ev.guests.missing.iter().map(|(a, why)| json!({"arch": a.name(), "why": why})).collect::<Vec<_>>(),
            "guest_arches_uncounted": ev.guests.uncounted.iter().map(|(a, why)| json!({"arch": a.name(), "why": why})).collect::<Vec<_>>(),
            "guests_measured": guests_measured,
            "guests_skipped": guests_skipped,
            "store_error": store_error.as_ref().map(|e| format!("{e:#}")),
        }))?;
    } else {
        let mut text = format!(
            "ptelab reproduce{} on Linux {} ({})\n",
            if args.quick { " --quick" } else { "" },
            outcome.host.kernel_release,
            outcome.host.cpu_model
        );
        for seed in &chosen {
            writeln!(text, "\n== seed {}: {}", seed.id, seed.title)?;
            for p in &seed.published {
                writeln!(text, "  published ({}): {}: {}", p.on, p.what, p.figure)?;
            }
            let cells: Vec<_> = ev
                .cells
                .iter()
                .filter(|c| seed.kernel.iter().any(|k| k.workload == c.workload))
                .cloned()
                .collect();
            if !cells.is_empty() {
                writeln!(text, "  measured here:")?;
                for line in crate::record::cells::render_table(&cells).lines() {
                    writeln!(text, "    {line}")?;
                }
            }
            for k in &seed.guest {
                for arch in crate::workload::Arch::ALL {
                    if let Some(g) = ev.guests.grid(arch, k) {
                        writeln!(text, "  measured in {}, one column per kernel:", g.heading)?;
                        let section = g.section(seed.id);
                        if let Some(b) = &section.baseline {
                            writeln!(text, "    ratios to {b}")?;
                        }
                        for line in section.table().text(" | ").lines() {
                            writeln!(text, "    {line}")?;
                        }
                    }
                }
            }
            for (_, why) in ev
                .guests
                .notes
                .iter()
                .filter(|(s, _)| s.split(',').any(|s| s == seed.id))
            {
                writeln!(text, "  not measured in a guest: {why}")?;
            }
            for (w, why) in ev
                .unavailable
                .iter()
                .filter(|(w, _)| seed.kernel.iter().any(|k| k.workload == *w))
            {
                writeln!(text, "  not measured ({w}): {why}")?;
            }
            for r in rows.iter().filter(|r| r.seed == seed.id) {
                text.push_str(&crate::reproduce::claim_text(r));
            }
        }
        let cost_model = crate::reproduce::cost_model_text(&ev.predicted);
        if !cost_model.is_empty() {
            writeln!(text, "\n{}", cost_model.trim_end())?;
        }
        for (arch, why) in &ev.guests.missing {
            writeln!(text, "\nno {} guests: {why}", arch.name())?;
        }
        for (arch, why) in &ev.guests.uncounted {
            writeln!(
                text,
                "\n{} guests measured plain, their mechanism not counted: {why}",
                arch.name()
            )?;
        }
        if !guests_measured {
            writeln!(
                text,
                "\nno guest measured anything, though guests were asked for (--kernels): the \
                 reasons are above"
            )?;
        }
        let bias = crate::reproduce::bias_note(&rows);
        if !bias.is_empty() {
            writeln!(text, "\n{}", bias.trim_end())?;
        }
        if guests_skipped {
            writeln!(
                text,
                "\nno guest booted: measuring stopped when the results database failed"
            )?;
        }
        match (outcome.run_id, &store_error) {
            (Some(id), None) => {
                writeln!(text, "\nstored as run {id} in {}", args.out.db.display())?
            }
            (Some(id), Some(_)) => writeln!(
                text,
                "\nnot all stored: run {id} in {} holds the cells stored before the store failed",
                args.out.db.display()
            )?,
            (None, _) => {}
        }
        // The verdicts are the last thing read, before where the report is.
        let closing = crate::reproduce::closing_text(&rows);
        if !closing.is_empty() {
            writeln!(text, "\n{}", closing.trim_end())?;
        }
        match (report, &store_error) {
            (Some(path), _) => writeln!(text, "report: {}", path.display())?,
            (None, Some(_)) => writeln!(
                text,
                "no report written: it is built from the database, which failed (the error \
                 follows)"
            )?,
            (None, None) => writeln!(
                text,
                "no report written: it is built from the database (--no-store given)"
            )?,
        }
        crate::cmd::print_text(&text)?;
    }
    // The figures and verdicts are out; now the store's error decides the
    // exit code.
    if let Some(e) = store_error {
        return Err(e);
    }
    Ok(if outcome.failed.is_empty() && guests_measured {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Build the report of the stored run, with the claim rows, and write it.
fn write_report(
    store: &Store,
    run_id: i64,
    rows: &[crate::reproduce::ClaimRow],
    chosen: &[&Seed],
    ev: &Evidence,
    args: &ReproduceArgs,
) -> anyhow::Result<()> {
    let format = super::ReportFormat::from_path(&args.output)?;
    let run = store.load(run_id)?;
    let name = run_id.to_string();
    let mut builder =
        ReportBuilder::new("ptelab reproduce: the seeds' experiments, measured and modelled")
            .run(&name, &run)
            .model_run(&name, &run);
    for r in rows {
        builder = builder.claim(r.clone());
    }
    for seed in chosen {
        for k in &seed.guest {
            for arch in crate::workload::Arch::ALL {
                if let Some(g) = ev.guests.grid(arch, k) {
                    builder = builder.kernel_section(g.section(seed.id));
                }
            }
        }
    }
    let bytes = format.render(&builder.build())?;
    std::fs::write(&args.output, bytes)
        .with_context(|| format!("writing {}", args.output.display()))
}
