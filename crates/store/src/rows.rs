//! Rows to and from domain types. Every statement of the store lives here or
//! in `mod.rs`; nothing outside `store` sees a row.

use std::collections::BTreeMap;

use super::db::{params, Db, Row, NOW};
use super::{RunId, RunStatus, RunSummary, StoredCell};
use crate::record::{CellResult, FunctionCount, Guest, ModelCellRecord};
use crate::text::redact::redact;
use anyhow::Context;

/// Values of a new `run` row.
pub(super) struct NewRun<'a> {
    pub kind: &'a str,
    pub command: &'a str,
    /// `None`: now.
    pub started_at: Option<&'a str>,
    pub finished_at: Option<&'a str>,
    pub status: RunStatus,
    pub pid: Option<u32>,
    pub boot_id: Option<String>,
    pub host: &'a serde_json::Value,
}

fn host_str(host: &serde_json::Value, key: &str) -> Option<String> {
    host.get(key).and_then(|v| v.as_str()).map(str::to_string)
}

fn i64_of(v: u64) -> anyhow::Result<i64> {
    i64::try_from(v).with_context(|| format!("{v} does not fit a database integer"))
}

/// Schema migration 5 (`migrations/0005_redact_commands.sql`): mask the
/// secrets of the command lines stored before ptelab masked them. In code,
/// since neither backend's SQL can find a password in a URL.
pub(super) fn redact_stored_commands(db: &Db) -> anyhow::Result<()> {
    for row in db.query("SELECT id, command FROM run", &[])? {
        let (id, command) = (row.int(0)?, row.text(1)?);
        let masked = redact(&command);
        if masked != command {
            db.execute(
                "UPDATE run SET command = ?1 WHERE id = ?2",
                params![masked, id],
            )?;
        }
    }
    Ok(())
}

pub(super) fn insert_run(db: &Db, run: &NewRun<'_>, tags: &[String]) -> anyhow::Result<RunId> {
    let unknown = || "unknown".to_string();
    let id = db.insert(
        &format!(
            "INSERT INTO run (kind, command, started_at, finished_at, status, pid, boot_id, \
             host_json, kernel_release, arch, machine_id, tool_version, git_revision) \
             VALUES (?1, ?2, COALESCE(?3, {NOW}), ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) \
             RETURNING id"
        ),
        params![
            run.kind,
            // Whoever wrote the line (a caller, an imported document), no
            // secret reaches the table that `runs` prints.
            redact(run.command),
            run.started_at,
            run.finished_at,
            run.status.as_str(),
            run.pid,
            run.boot_id.as_deref(),
            run.host.to_string(),
            host_str(run.host, "kernel_release").unwrap_or_else(unknown),
            host_str(run.host, "arch").unwrap_or_else(unknown),
            host_str(run.host, "machine_id").unwrap_or_else(unknown),
            host_str(run.host, "tool_version").unwrap_or_else(unknown),
            host_str(run.host, "git_revision"),
        ],
    )?;
    insert_tags(db, id, tags)?;
    Ok(id)
}

pub(super) fn insert_tags(db: &Db, run: RunId, tags: &[String]) -> anyhow::Result<()> {
    for t in tags {
        db.execute(
            "INSERT INTO run_tag (run, tag) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
            params![run, t],
        )?;
    }
    Ok(())
}

pub(super) fn insert_kernel_cell(db: &Db, run: RunId, cell: &CellResult) -> anyhow::Result<i64> {
    // The samples and the flush breakdown have their own tables; the JSON
    // keeps everything else.
    let mut rest = cell.clone();
    let samples = std::mem::take(&mut rest.ns_per_call.samples);
    let breakdown = std::mem::take(&mut rest.tlb_flushes.breakdown);
    let functions = rest
        .profile
        .as_mut()
        .map(|p| std::mem::take(&mut p.functions))
        .unwrap_or_default();
    // Sample windows are the guest's message to the host, never a result.
    rest.windows.clear();
    let requested = serde_json::json!({
        "folio": cell.folio,
        "regions": cell.regions,
        "neighbor": cell.neighbor,
    });
    let ns = &cell.ns_per_call;
    let id = db.insert(
        "INSERT INTO cell (run, backend, workload, size_bytes, folio, phase, regions, neighbor, \
         layout_requested, layout_observed, layout_matches, ns_median, ns_ci_low, ns_ci_high, ns_min, \
         ns_mean, ns_per_page, tlb_flushes_per_call, cell_json) \
         VALUES (?1, 'kernel', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
         ?18) RETURNING id",
        params![
            run,
            cell.workload.name(),
            i64_of(cell.size_bytes)?,
            cell.folio.to_string(),
            cell.phase.as_deref(),
            cell.regions,
            cell.neighbor,
            requested.to_string(),
            serde_json::to_string(&cell.layout)?,
            cell.layout.matches,
            ns.median,
            ns.ci_low,
            ns.ci_high,
            ns.min,
            ns.mean,
            cell.ns_per_page,
            cell.tlb_flushes.per_call,
            serde_json::to_string(&rest)?,
        ],
    )?;
    for (i, ns) in samples.iter().enumerate() {
        db.execute(
            "INSERT INTO sample (cell, idx, ns) VALUES (?1, ?2, ?3)",
            params![id, i as i64, *ns],
        )?;
    }
    for (key, events) in &breakdown {
        db.execute(
            "INSERT INTO flush (cell, key, events) VALUES (?1, ?2, ?3)",
            params![id, key, i64_of(*events)?],
        )?;
    }
    for (i, f) in functions.iter().enumerate() {
        db.execute(
            "INSERT INTO cell_function (cell, idx, name, entries, instructions) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![id, i as i64, &f.name, f.entries, f.instructions],
        )?;
    }
    Ok(id)
}

pub(super) fn insert_model_cell(
    db: &Db,
    run: RunId,
    cell: &ModelCellRecord,
) -> anyhow::Result<i64> {
    let mut rest = cell.clone();
    let counters = std::mem::take(&mut rest.counters);
    let id = db.insert(
        "INSERT INTO cell (run, backend, workload, size_bytes, folio, arch, strategy, \
         layout_requested, cell_json) VALUES (?1, 'model', ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id",
        params![
            run,
            cell.workload.name(),
            i64_of(cell.size_bytes)?,
            cell.folio.to_string(),
            &cell.arch,
            &cell.strategy,
            serde_json::json!({ "folio": cell.folio }).to_string(),
            serde_json::to_string(&rest)?,
        ],
    )?;
    for (name, value) in &counters {
        db.execute(
            "INSERT INTO counter (cell, name, value) VALUES (?1, ?2, ?3)",
            params![id, name, *value],
        )?;
    }
    Ok(id)
}

/// The columns [`summary_of`] reads, in its order.
const SUMMARY_COLUMNS: &str = "r.id, r.kind, r.command, r.started_at, r.finished_at, r.status, \
     r.host_json, r.kernel_release, r.arch, r.machine_id, r.tool_version, r.git_revision, \
     (SELECT COUNT(*) FROM cell c WHERE c.run = r.id)";

fn summary_of(row: &Row) -> anyhow::Result<(RunSummary, String, String)> {
    Ok((
        RunSummary {
            id: row.int(0)?,
            kind: row.text(1)?,
            command: row.text(2)?,
            started_at: row.text(3)?,
            finished_at: row.opt_text(4)?,
            status: RunStatus::Running,
            kernel_release: row.text(7)?,
            arch: row.text(8)?,
            machine_id: row.text(9)?,
            tool_version: row.text(10)?,
            git_revision: row.opt_text(11)?,
            tags: Vec::new(),
            cells: row.int(12)? as u64,
            guest: None,
        },
        row.text(5)?,
        row.text(6)?,
    ))
}

/// Runs (all, or one), oldest first, with their stored status and tags
/// (sorted by byte, whatever the database's collation).
pub(super) fn select_runs(db: &Db, only: Option<RunId>) -> anyhow::Result<Vec<RunSummary>> {
    let rows = db
        .query(
            &format!(
                "SELECT {SUMMARY_COLUMNS} FROM run r WHERE CAST(?1 AS BIGINT) IS NULL OR r.id = ?1 ORDER BY r.id"
            ),
            params![only],
        )?
        .iter()
        .map(summary_of)
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut tags: BTreeMap<RunId, Vec<String>> = BTreeMap::new();
    for row in db.query(
        "SELECT run, tag FROM run_tag WHERE CAST(?1 AS BIGINT) IS NULL OR run = ?1",
        params![only],
    )? {
        tags.entry(row.int(0)?).or_default().push(row.text(1)?);
    }
    rows.into_iter()
        .map(|(mut s, status, host)| {
            s.status = RunStatus::parse(&status)?;
            s.guest = guest_of(&host).with_context(|| format!("run {}", s.id))?;
            s.tags = tags.remove(&s.id).unwrap_or_default();
            s.tags.sort();
            Ok(s)
        })
        .collect()
}

/// The guest provenance in a stored host record: None when the record has
/// none (a host run), an error when it has one of an unknown shape (the
/// run's unit would otherwise be guessed).
pub(super) fn guest_of(host_json: &str) -> anyhow::Result<Option<Guest>> {
    #[derive(serde::Deserialize)]
    struct Only {
        #[serde(default)]
        guest: Option<Guest>,
    }
    let only: Only =
        serde_json::from_str(host_json).context("malformed guest record in the run's host")?;
    Ok(only.guest)
}

pub(super) fn select_host(db: &Db, run: RunId) -> anyhow::Result<serde_json::Value> {
    let text = db
        .query_opt("SELECT host_json FROM run WHERE id = ?1", params![run])?
        .map(|r| r.text(0))
        .transpose()?;
    let text = text.with_context(|| format!("no run {run}"))?;
    serde_json::from_str(&text).with_context(|| format!("run {run} has a malformed host record"))
}

/// Every cell of a run, in the order they were stored.
pub(super) fn select_cells(db: &Db, run: RunId) -> anyhow::Result<Vec<StoredCell>> {
    let rows = db.query(
        "SELECT id, backend, cell_json, ns_median, ns_ci_low, ns_ci_high, ns_min, ns_mean, \
         ns_per_page, tlb_flushes_per_call FROM cell WHERE run = ?1 ORDER BY id",
        params![run],
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let (id, backend, json) = (row.int(0)?, row.text(1)?, row.text(2)?);
        let mut exact = [None; 7];
        for (i, slot) in exact.iter_mut().enumerate() {
            *slot = row.opt_real(3 + i)?;
        }
        let bad = || format!("cell {id} of run {run} has a malformed record");
        let cell = match backend.as_str() {
            "kernel" => {
                let mut c: CellResult = serde_json::from_str(&json).with_context(bad)?;
                restore_exact(&mut c, exact);
                c.ns_per_call.samples = db
                    .query(
                        "SELECT ns FROM sample WHERE cell = ?1 ORDER BY idx",
                        params![id],
                    )?
                    .iter()
                    .map(|r| r.real(0))
                    .collect::<anyhow::Result<_>>()?;
                c.tlb_flushes.breakdown = db
                    .query("SELECT key, events FROM flush WHERE cell = ?1", params![id])?
                    .iter()
                    .map(|r| Ok((r.text(0)?, r.int(1)? as u64)))
                    .collect::<anyhow::Result<_>>()?;
                if let Some(p) = c.profile.as_mut() {
                    p.functions = db
                        .query(
                            "SELECT name, entries, instructions FROM cell_function \
                             WHERE cell = ?1 ORDER BY idx",
                            params![id],
                        )?
                        .iter()
                        .map(|r| {
                            Ok(FunctionCount {
                                name: r.text(0)?,
                                entries: r.real(1)?,
                                instructions: r.real(2)?,
                            })
                        })
                        .collect::<anyhow::Result<_>>()?;
                }
                StoredCell::Kernel(c)
            }
            "model" => {
                let mut m: ModelCellRecord = serde_json::from_str(&json).with_context(bad)?;
                m.counters = db
                    .query(
                        "SELECT name, value FROM counter WHERE cell = ?1",
                        params![id],
                    )?
                    .iter()
                    .map(|r| Ok((r.text(0)?, r.real(1)?)))
                    .collect::<anyhow::Result<_>>()?;
                StoredCell::Model(m)
            }
            other => anyhow::bail!("cell {id} of run {run} has unknown backend '{other}'"),
        };
        out.push(cell);
    }
    Ok(out)
}

/// Put back the numbers that have their own REAL column: both backends keep
/// an f64 bit for bit (serde_json's text is exact only with its `float_roundtrip`
/// feature). A NULL column is an undefined figure (NaN), which the JSON holds
/// as null too.
fn restore_exact(c: &mut CellResult, exact: [Option<f64>; 7]) {
    let [median, ci_low, ci_high, min, mean, per_page, flushes] = exact;
    let ns = &mut c.ns_per_call;
    for (slot, v) in [
        (&mut ns.median, median),
        (&mut ns.ci_low, ci_low),
        (&mut ns.ci_high, ci_high),
        (&mut ns.min, min),
        (&mut ns.mean, mean),
        (&mut c.ns_per_page, per_page),
    ] {
        if let Some(v) = v {
            *slot = v;
        }
    }
    if flushes.is_some() {
        c.tlb_flushes.per_call = flushes;
    }
}
