//! `ptelab runs`: the runs in the results database, oldest first.
//!
//! A run left `running` by a process that is gone (killed, crashed) is listed
//! as `interrupted`; its finished cells are all there.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use crate::cli::flags::RunsArgs;
use crate::store::{RunSummary, Store, StoredRun};
use crate::text::table::Table;

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
    // id and cells are numbers: right-aligned; the command is last, unpadded.
    let mut t = Table::new()
        .right("id")
        .left("kind")
        .left("started (UTC)")
        .left("status")
        .right("cells")
        .left("kernel")
        .left("tags")
        .left("command");
    for r in runs {
        t.row([
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
        ]);
    }
    t.text(" | ")
}
