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

/// One line per run: id, kind, start, status, cells, kernel, tags, command;
/// when some run ran in a QEMU guest, also where each ran (`host`,
/// `tcg 6.17.13 arm64`) and its metric (`time`, `instructions`).
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
        .left("kernel");
    let guests = runs.iter().any(|r| r.guest.is_some());
    if guests {
        t = t.left("where").left("metric");
    }
    t = t.left("tags").left("command");
    for r in runs {
        let mut row = vec![
            r.id.to_string(),
            r.kind.clone(),
            r.started_at.clone(),
            r.status.to_string(),
            r.cells.to_string(),
            r.kernel_release.clone(),
        ];
        if guests {
            row.push(r.place());
            row.push(r.metric().to_string());
        }
        row.push(if r.tags.is_empty() {
            "-".into()
        } else {
            r.tags.join(",")
        });
        row.push(r.command.clone());
        t.row(row);
    }
    t.text(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Accel, Guest};
    use crate::store::RunStatus;

    fn summary(id: i64, kernel: &str, arch: &str, guest: Option<Guest>) -> RunSummary {
        RunSummary {
            id,
            kind: "bench".into(),
            command: "ptelab bench mprotect-toggle --size 4M".into(),
            started_at: format!("2026-05-0{id}T10:00:00Z"),
            finished_at: None,
            status: RunStatus::Complete,
            kernel_release: kernel.into(),
            arch: arch.into(),
            machine_id: "m".into(),
            tool_version: "0.1.0".into(),
            git_revision: None,
            tags: vec![],
            cells: 1,
            guest,
        }
    }

    #[test]
    fn guest_runs_say_where_they_ran_and_in_what_unit() {
        let host = summary(1, "6.12.48", "x86_64", None);
        // Host runs only: the table keeps its columns.
        assert!(!render_text(std::slice::from_ref(&host)).contains("where"));
        let tcg = Guest::new(
            Accel::Tcg,
            "QEMU emulator version 10.0.2",
            "debian:6.17.13",
            "ab",
        );
        let kvm = Guest::new(Accel::Kvm, "QEMU emulator version 10.0.2", "bzImage", "cd");
        let runs = [
            host,
            summary(2, "6.17.13+deb13-cloud-arm64", "aarch64", Some(tcg)),
            summary(3, "6.16.12+deb13-cloud-amd64", "x86_64", Some(kvm)),
        ];
        insta::assert_snapshot!(render_text(&runs));
    }
}
