//! One module per subcommand: plan (validate flags against the machine), run,
//! render. Each returns the process exit code. No command uses another: what
//! two share is here (printing, running a grid of kernel cells) and, for the
//! host's commands, in `host.rs` (Slurm and guest settings, named and stored
//! runs, the report file's format).

// The commands a guest runs too.
pub mod bench;
pub mod crosscheck;
pub mod doctor;
pub mod model;
pub mod sweep;

// The commands only the host runs, and their glue.
#[cfg(feature = "host")]
mod host;
#[cfg(feature = "host")]
pub use host::*;
#[cfg(feature = "host")]
pub mod bisect;
#[cfg(feature = "host")]
pub mod calibrate;
#[cfg(feature = "host")]
pub mod compare;
#[cfg(feature = "host")]
pub mod kernel;
#[cfg(feature = "host")]
pub mod patch;
#[cfg(feature = "host")]
pub mod report;
#[cfg(feature = "host")]
pub mod reproduce;
#[cfg(feature = "host")]
pub mod runs;
#[cfg(feature = "host")]
pub mod show;
#[cfg(feature = "host")]
pub mod task;
#[cfg(feature = "host")]
pub mod vm;

use std::io::Write;
use std::process::ExitCode;

use serde_json::json;

use crate::cli::flags::{MeasureOpts, StoreOpts};
use crate::cli::plan;
use crate::measure::session;
use crate::record::cells;
use crate::store::{Location, Store};
use crate::workload::{FolioSpec, WorkloadKind};

/// Print a JSON document on stdout (pretty, newline-terminated).
pub fn print_json(doc: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, doc)?;
    writeln!(out)?;
    Ok(())
}

/// Print text on stdout.
pub fn print_text(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// The database a measuring command writes its run to, None with
/// `--no-store`. A guest build (no `host` feature) has none: it runs as with
/// `--no-store` unless asked to store (`--tag`, `--db`), and then its store
/// refuses to open (`store::absent`).
pub fn open_store(out: &StoreOpts) -> anyhow::Result<Option<Store>> {
    let asked = !out.tags.is_empty() || out.db != Location::File(DEFAULT_DB.into());
    if out.no_store || (cfg!(not(feature = "host")) && !asked) {
        return Ok(None);
    }
    Store::open(&out.db).map(Some)
}

/// `--db`'s default (cli::flags).
const DEFAULT_DB: &str = "ptelab.db";

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
    let store = open_store(out)?;
    let mut outcome = session::run(
        &plan,
        kind,
        store.as_ref().map(|s| s as &dyn crate::record::CellSink),
    )?;
    if let (Some(store), Some(id), false, None) = (
        &store,
        outcome.run_id,
        tags.is_empty(),
        &outcome.store_error,
    ) {
        outcome.store_error = store.add_tags(id, tags).err();
    }
    if out.json {
        let env = json!({
            "kernel": outcome.host.kernel_release,
            "cpu": outcome.host.cpu_model,
            "thp_knobs": outcome.thp_knobs,
            "host": outcome.host,
            "run_id": outcome.run_id,
            "interrupted": outcome.interrupted,
            "store_error": outcome.store_error.as_ref().map(|e| format!("{e:#}")),
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
        print_json(&doc)?;
    } else {
        let mut text = cells::heading(
            workload.name(),
            &outcome.host.kernel_release,
            &outcome.host.cpu_model,
            plan.pin,
        );
        text.push_str("\n\n");
        text.push_str(&cells::render_table(&outcome.cells));
        match (outcome.run_id, &outcome.store_error) {
            (Some(id), None) => {
                text.push_str(&format!("stored as run {id} in {}\n", out.db.display()))
            }
            (Some(id), Some(_)) => text.push_str(&format!(
                "not all stored: run {id} in {} holds the cells stored before the store failed\n",
                out.db.display()
            )),
            (None, _) => {}
        }
        print_text(&text)?;
    }
    for (cell, err) in &outcome.failed {
        eprintln!("ptelab: cell {cell} failed: {err}");
    }
    // The figures are out; now the store's error decides the exit code.
    if let Some(e) = outcome.store_error {
        return Err(e);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_db_is_the_flags_default() {
        use clap::Parser;
        let cli =
            crate::cli::flags::Cli::try_parse_from(["ptelab", "bench", "mprotect-toggle"]).unwrap();
        let crate::cli::flags::Command::Bench(args) = cli.command else {
            panic!("not bench")
        };
        assert_eq!(args.out.db, Location::File(DEFAULT_DB.into()));
    }
}
