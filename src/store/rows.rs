//! Rows to and from domain types. Every statement of the store lives here or
//! in `mod.rs`; nothing outside `store` sees a row.

use std::collections::BTreeMap;

use anyhow::Context;
use rusqlite::{params, Connection, OptionalExtension, Row};

use super::{RunId, RunStatus, RunSummary, StoredCell};
use crate::record::{CellResult, FunctionCount, Guest, ModelCellRecord};

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

pub(super) fn insert_run(
    conn: &Connection,
    run: &NewRun<'_>,
    tags: &[String],
) -> anyhow::Result<RunId> {
    let unknown = || "unknown".to_string();
    conn.execute(
        "INSERT INTO run (kind, command, started_at, finished_at, status, pid, boot_id, host_json, \
         kernel_release, arch, machine_id, tool_version, git_revision) \
         VALUES (?1, ?2, COALESCE(?3, strftime('%Y-%m-%dT%H:%M:%SZ', 'now')), ?4, ?5, ?6, ?7, ?8, \
         ?9, ?10, ?11, ?12, ?13)",
        params![
            run.kind,
            run.command,
            run.started_at,
            run.finished_at,
            run.status.as_str(),
            run.pid,
            run.boot_id,
            run.host.to_string(),
            host_str(run.host, "kernel_release").unwrap_or_else(unknown),
            host_str(run.host, "arch").unwrap_or_else(unknown),
            host_str(run.host, "machine_id").unwrap_or_else(unknown),
            host_str(run.host, "tool_version").unwrap_or_else(unknown),
            host_str(run.host, "git_revision"),
        ],
    )?;
    let id = conn.last_insert_rowid();
    insert_tags(conn, id, tags)?;
    Ok(id)
}

pub(super) fn insert_tags(conn: &Connection, run: RunId, tags: &[String]) -> anyhow::Result<()> {
    let mut stmt =
        conn.prepare_cached("INSERT OR IGNORE INTO run_tag (run, tag) VALUES (?1, ?2)")?;
    for t in tags {
        stmt.execute(params![run, t])?;
    }
    Ok(())
}

pub(super) fn insert_kernel_cell(
    conn: &Connection,
    run: RunId,
    cell: &CellResult,
) -> anyhow::Result<i64> {
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
    conn.execute(
        "INSERT INTO cell (run, backend, workload, size_bytes, folio, phase, regions, neighbor, \
         layout_requested, layout_observed, layout_matches, ns_median, ns_ci_low, ns_ci_high, ns_min, \
         ns_mean, ns_per_page, tlb_flushes_per_call, cell_json) \
         VALUES (?1, 'kernel', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
         ?18)",
        params![
            run,
            cell.workload.name(),
            i64_of(cell.size_bytes)?,
            cell.folio.to_string(),
            cell.phase,
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
    let id = conn.last_insert_rowid();
    let mut stmt = conn.prepare_cached("INSERT INTO sample (cell, idx, ns) VALUES (?1, ?2, ?3)")?;
    for (i, ns) in samples.iter().enumerate() {
        stmt.execute(params![id, i as i64, ns])?;
    }
    let mut stmt =
        conn.prepare_cached("INSERT INTO flush (cell, key, events) VALUES (?1, ?2, ?3)")?;
    for (key, events) in &breakdown {
        stmt.execute(params![id, key, i64_of(*events)?])?;
    }
    let mut stmt = conn.prepare_cached(
        "INSERT INTO cell_function (cell, idx, name, entries, instructions) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for (i, f) in functions.iter().enumerate() {
        stmt.execute(params![id, i as i64, f.name, f.entries, f.instructions])?;
    }
    Ok(id)
}

pub(super) fn insert_model_cell(
    conn: &Connection,
    run: RunId,
    cell: &ModelCellRecord,
) -> anyhow::Result<i64> {
    let mut rest = cell.clone();
    let counters = std::mem::take(&mut rest.counters);
    conn.execute(
        "INSERT INTO cell (run, backend, workload, size_bytes, folio, arch, strategy, \
         layout_requested, cell_json) VALUES (?1, 'model', ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            run,
            cell.workload.name(),
            i64_of(cell.size_bytes)?,
            cell.folio.to_string(),
            cell.arch,
            cell.strategy,
            serde_json::json!({ "folio": cell.folio }).to_string(),
            serde_json::to_string(&rest)?,
        ],
    )?;
    let id = conn.last_insert_rowid();
    let mut stmt =
        conn.prepare_cached("INSERT INTO counter (cell, name, value) VALUES (?1, ?2, ?3)")?;
    for (name, value) in &counters {
        stmt.execute(params![id, name, value])?;
    }
    Ok(id)
}

fn summary_of(row: &Row<'_>) -> rusqlite::Result<(RunSummary, String, String)> {
    let status: String = row.get("status")?;
    let host: String = row.get("host_json")?;
    Ok((
        RunSummary {
            id: row.get("id")?,
            kind: row.get("kind")?,
            command: row.get("command")?,
            started_at: row.get("started_at")?,
            finished_at: row.get("finished_at")?,
            status: RunStatus::Running,
            kernel_release: row.get("kernel_release")?,
            arch: row.get("arch")?,
            machine_id: row.get("machine_id")?,
            tool_version: row.get("tool_version")?,
            git_revision: row.get("git_revision")?,
            tags: Vec::new(),
            cells: row.get::<_, i64>("cells")? as u64,
            guest: None,
        },
        status,
        host,
    ))
}

/// Runs (all, or one), oldest first, with their stored status and tags.
pub(super) fn select_runs(
    conn: &Connection,
    only: Option<RunId>,
) -> anyhow::Result<Vec<RunSummary>> {
    let mut stmt = conn.prepare_cached(
        "SELECT r.*, (SELECT COUNT(*) FROM cell c WHERE c.run = r.id) AS cells \
         FROM run r WHERE ?1 IS NULL OR r.id = ?1 ORDER BY r.id",
    )?;
    let rows = stmt
        .query_map([only], summary_of)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut tags: BTreeMap<RunId, Vec<String>> = BTreeMap::new();
    let mut stmt = conn.prepare_cached(
        "SELECT run, tag FROM run_tag WHERE ?1 IS NULL OR run = ?1 ORDER BY run, tag",
    )?;
    for row in stmt.query_map([only], |r| {
        Ok((r.get::<_, RunId>(0)?, r.get::<_, String>(1)?))
    })? {
        let (run, tag) = row?;
        tags.entry(run).or_default().push(tag);
    }
    rows.into_iter()
        .map(|(mut s, status, host)| {
            s.status = RunStatus::parse(&status)?;
            s.guest = guest_of(&host).with_context(|| format!("run {}", s.id))?;
            s.tags = tags.remove(&s.id).unwrap_or_default();
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

pub(super) fn select_host(conn: &Connection, run: RunId) -> anyhow::Result<serde_json::Value> {
    let text: Option<String> = conn
        .query_row("SELECT host_json FROM run WHERE id = ?1", [run], |r| {
            r.get(0)
        })
        .optional()?;
    let text = text.with_context(|| format!("no run {run}"))?;
    serde_json::from_str(&text).with_context(|| format!("run {run} has a malformed host record"))
}

/// Every cell of a run, in the order they were stored.
pub(super) fn select_cells(conn: &Connection, run: RunId) -> anyhow::Result<Vec<StoredCell>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, backend, cell_json, ns_median, ns_ci_low, ns_ci_high, ns_min, ns_mean, \
         ns_per_page, tlb_flushes_per_call FROM cell WHERE run = ?1 ORDER BY id",
    )?;
    type Exact = [Option<f64>; 7];
    let rows = stmt
        .query_map([run], |r| {
            let exact: Exact = [
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
            ];
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                exact,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut samples = conn.prepare_cached("SELECT ns FROM sample WHERE cell = ?1 ORDER BY idx")?;
    let mut flushes = conn.prepare_cached("SELECT key, events FROM flush WHERE cell = ?1")?;
    let mut counters = conn.prepare_cached("SELECT name, value FROM counter WHERE cell = ?1")?;
    let mut functions = conn.prepare_cached(
        "SELECT name, entries, instructions FROM cell_function WHERE cell = ?1 ORDER BY idx",
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for (id, backend, json, exact) in rows {
        let bad = || format!("cell {id} of run {run} has a malformed record");
        let cell = match backend.as_str() {
            "kernel" => {
                let mut c: CellResult = serde_json::from_str(&json).with_context(bad)?;
                restore_exact(&mut c, exact);
                c.ns_per_call.samples = samples
                    .query_map([id], |r| r.get::<_, f64>(0))?
                    .collect::<rusqlite::Result<_>>()?;
                c.tlb_flushes.breakdown = flushes
                    .query_map([id], |r| {
                        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
                    })?
                    .collect::<rusqlite::Result<_>>()?;
                if let Some(p) = c.profile.as_mut() {
                    p.functions = functions
                        .query_map([id], |r| {
                            Ok(FunctionCount {
                                name: r.get(0)?,
                                entries: r.get(1)?,
                                instructions: r.get(2)?,
                            })
                        })?
                        .collect::<rusqlite::Result<_>>()?;
                }
                StoredCell::Kernel(c)
            }
            "model" => {
                let mut m: ModelCellRecord = serde_json::from_str(&json).with_context(bad)?;
                m.counters = counters
                    .query_map([id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, f64>(1)?)))?
                    .collect::<rusqlite::Result<_>>()?;
                StoredCell::Model(m)
            }
            other => anyhow::bail!("cell {id} of run {run} has unknown backend '{other}'"),
        };
        out.push(cell);
    }
    Ok(out)
}

/// Put back the numbers that have their own REAL column: SQLite keeps an f64
/// bit for bit (serde_json's text is exact only with its `float_roundtrip`
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
