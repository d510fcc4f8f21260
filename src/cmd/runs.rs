//! `ptelab runs`: the runs in the results database, oldest first.
//!
//! A run left `running` by a process that is gone (killed, crashed) is listed
//! as `interrupted`; its finished cells are all there.

use std::fmt::Write as _;
use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use crate::cli::flags::RunsArgs;
use crate::store::{RunSummary, Store, StoredRun};

/// `schema` of `ptelab runs --json`.
pub const SCHEMA: &str = "ptelab/runs/v1";

#[derive(Serialize)]
struct RunsDoc<'a> {
    schema: &'static str,
    runs: &'a [RunSummary],
}

pub fn run(args: &RunsArgs) -> anyhow::Result<ExitCode> {
    let store = if args.import.is_empty() {
        Store::open_existing(&args.out.db)?
    } else {
        Store::open(&args.out.db)?
    };
    for file in &args.import {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let doc: StoredRun = serde_json::from_str(&text).map_err(|e| {
            crate::error::usage(format!(
                "{} is not a run document (the output of `ptelab show RUN --json`): {e}",
                file.display()
            ))
        })?;
        let id = store
            .import_run(&doc)
            .with_context(|| format!("import {}", file.display()))?;
        eprintln!("ptelab: imported {} as run {id}", file.display());
    }
    let runs = store.runs()?;
    let text = if args.out.json {
        let mut s = serde_json::to_string_pretty(&RunsDoc {
            schema: SCHEMA,
            runs: &runs,
        })?;
        s.push('\n');
        s
    } else {
        render_text(&runs)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// One line per run: id, kind, start, status, cells, kernel, tags, command.
pub fn render_text(runs: &[RunSummary]) -> String {
    if runs.is_empty() {
        return "no runs yet: `ptelab bench` and `ptelab sweep` store their results here\n".into();
    }
    let header = [
        "id",
        "kind",
        "started (UTC)",
        "status",
        "cells",
        "kernel",
        "tags",
        "command",
    ];
    let rows: Vec<[String; 8]> = runs
        .iter()
        .map(|r| {
            [
                r.id.to_string(),
                r.kind.clone(),
                r.started_at.clone(),
                r.status.to_string(),
                r.cells.to_string(),
                r.kernel_release.clone(),
                if r.tags.is_empty() {
                    "-".into()
                } else {
                    r.tags.join(",")
                },
                r.command.clone(),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for row in &rows {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: [&str; 8]| {
        // id and cells are numbers: right-aligned; the command is last, unpadded.
        let s = format!(
            "{:>w0$} | {:<w1$} | {:<w2$} | {:<w3$} | {:>w4$} | {:<w5$} | {:<w6$} | {}",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            cells[5],
            cells[6],
            cells[7],
            w0 = width[0],
            w1 = width[1],
            w2 = width[2],
            w3 = width[3],
            w4 = width[4],
            w5 = width[5],
            w6 = width[6],
        );
        writeln!(out, "{}", s.trim_end()).unwrap();
    };
    line(&mut out, header);
    for row in &rows {
        line(&mut out, std::array::from_fn(|i| row[i].as_str()));
    }
    out
}
