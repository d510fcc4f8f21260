//! `ptelab bench WORKLOAD`: one measurement cell on the running kernel.
//! `ptelab sweep` runs the same code over a grid; see [`run_kernel`].

use std::process::ExitCode;

use serde_json::json;

use crate::cli::flags::{BenchArgs, MeasureOpts, StoreOpts};
use crate::cli::plan;
use crate::measure::session;
use crate::report::cells;
use crate::workload::{FolioSpec, WorkloadKind};

pub fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let size = args.size.unwrap_or_else(|| args.workload.default_size());
    run_kernel(
        "bench",
        args.workload,
        &[size],
        &[args.folio],
        &args.measure,
        &args.out,
    )
}

/// Plan, run, store and print a grid of kernel cells (bench is a 1x1 grid).
pub fn run_kernel(
    kind: &str,
    workload: WorkloadKind,
    sizes: &[u64],
    folios: &[FolioSpec],
    measure: &MeasureOpts,
    out: &StoreOpts,
) -> anyhow::Result<ExitCode> {
    let tags = &out.tags;
    let plan = plan::kernel_plan(workload, sizes, folios, measure)?;
    let store = if out.no_store {
        None
    } else {
        Some(crate::store::Store::open(&out.db)?)
    };
    let outcome = session::run(
        &plan,
        kind,
        store.as_ref().map(|s| s as &dyn crate::record::CellSink),
    )?;
    if let (Some(store), Some(id), false) = (&store, outcome.run_id, tags.is_empty()) {
        store.add_tags(id, tags)?;
    }
    if out.json {
        let env = json!({
            "kernel": outcome.host.kernel_release,
            "cpu": outcome.host.cpu_model,
            "thp_knobs": outcome.thp_knobs,
            "host": outcome.host,
            "run_id": outcome.run_id,
            "interrupted": outcome.interrupted,
            "failed": outcome.failed.iter().map(|(c, e)| json!({"cell": c, "error": e})).collect::<Vec<_>>(),
            "skipped": plan.skipped,
        });
        let doc = if kind == "bench" && outcome.cells.len() == 1 {
            let mut doc = serde_json::to_value(&outcome.cells[0])?;
            merge(&mut doc, env);
            merge(&mut doc, json!({"schema": "ptelab/bench/v1"}));
            doc
        } else {
            let mut doc = json!({ "schema": format!("ptelab/{kind}/v1"), "workload": workload, "cells": outcome.cells });
            merge(&mut doc, env);
            doc
        };
        crate::cmd::print_json(&doc)?;
    } else {
        let mut text = cells::heading(
            workload.name(),
            &outcome.host.kernel_release,
            &outcome.host.cpu_model,
            plan.pin,
        );
        text.push_str("\n\n");
        text.push_str(&cells::render_table(&outcome.cells));
        if let Some(id) = outcome.run_id {
            text.push_str(&format!("stored as run {id} in {}\n", out.db.display()));
        }
        crate::cmd::print_text(&text)?;
    }
    for (cell, err) in &outcome.failed {
        eprintln!("ptelab: cell {cell} failed: {err}");
    }
    Ok(if outcome.interrupted {
        ExitCode::from(130)
    } else if !outcome.failed.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(a), serde_json::Value::Object(b)) = (into.as_object_mut(), from) {
        a.extend(b);
    }
}
