//! The results database: an SQLite file (rusqlite, bundled; the default, one
//! machine) or a PostgreSQL server that many machines share
//! (`--db postgres://USER@HOST/DB`, docs/cluster.md). This module owns every
//! SQL statement in ptelab; callers see domain types ([`CellResult`],
//! [`ModelCellRecord`], [`Host`]) and never rows.
//!
//! - The schema is `schema.sql` (version 1) plus numbered files under
//!   `migrations/`, embedded with `include_str!` and applied in one
//!   transaction: through `PRAGMA user_version` in SQLite (`sqlite.rs`), a
//!   `ptelab_meta` table in PostgreSQL (`postgres.rs`, which rewrites the
//!   column types). Every statement is written once (`db.rs` runs it on
//!   either).
//! - Many ptelab processes write one database at once: SQLite through WAL, a
//!   busy timeout and `BEGIN IMMEDIATE`; PostgreSQL through its own
//!   concurrency, ids from sequences.
//! - One transaction per finished cell: a sweep killed halfway (even by
//!   SIGKILL) keeps every cell it finished. Its run stays `running` in the
//!   table; readers report it as [`RunStatus::Interrupted`] once the process
//!   that owned it is gone.
//! - Every error names the database ([`Location`], without a password) and
//!   the operation. A database that is not ptelab's (not SQLite, or another
//!   application's: the header or `ptelab_meta`, and the tables tell), of a
//!   newer schema, or a server that cannot be reached or refuses the
//!   credentials, is refused as bad input before anything is written.
//!
//! Runs are named on the command line by id, `latest`, `latest~N` or a tag
//! (the newest run carrying it), see [`Store::resolve`].
//!
//! Without the `store` feature (a guest build, docs/guests.md) `Store` is
//! `absent::Store`, which cannot be opened; the record types stay.

// In a guest build the SQL side's helpers are unused.
#![cfg_attr(not(feature = "store"), allow(dead_code, unused_imports))]

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_error as error;
use ptelab_record as record;
use ptelab_text as text;
use ptelab_workload as workload;

#[cfg(not(feature = "store"))]
mod absent;
mod bias;
#[cfg(feature = "store")]
mod db;
mod location;
#[cfg(feature = "store")]
mod pgpass;
#[cfg(feature = "store")]
mod pgtls;
#[cfg(feature = "store")]
mod postgres;
#[cfg(feature = "store")]
mod rows;
#[cfg(feature = "store")]
mod sqlite;

pub use bias::{BiasBoot, GuestBias};
pub use location::Location;

#[cfg(not(feature = "store"))]
pub use absent::{unavailable, Store};

use anyhow::Context;
#[cfg(feature = "store")]
use db::{params, NOW};
use ptelab_stats::repeatability::Repeatability;
use serde::{Deserialize, Serialize};

use crate::error::usage;
use crate::record::{CellResult, ModelCellRecord};
use crate::record::{Guest, Host};

/// Row id of a run.
pub type RunId = i64;

/// Schema steps: index i takes the database from version i to i + 1.
const MIGRATIONS: &[&str] = &[
    include_str!("schema.sql"),
    include_str!("migrations/0002_calibration.sql"),
    include_str!("migrations/0003_profile.sql"),
    include_str!("migrations/0004_guest_bias.sql"),
    include_str!("migrations/0005_redact_commands.sql"),
];

/// The part of a migration that SQL cannot say, run after the script that
/// takes the database to `version`, in the same transaction, on either
/// backend.
#[cfg(feature = "store")]
fn migrate_data(db: &db::Db, version: usize) -> anyhow::Result<()> {
    match version {
        5 => rows::redact_stored_commands(db),
        _ => Ok(()),
    }
}

/// The `schema` value of a run document ([`StoredRun`] as JSON): what
/// `ptelab show RUN --json` prints and what the store can import back.
pub const RUN_SCHEMA: &str = "ptelab/run/v1";

/// SQLite's header field naming the application that owns a file
/// (`PRAGMA application_id`): "ptlb". Databases made before it was set have 0.
const APPLICATION_ID: i64 = 0x7074_6c62;

/// Tables every ptelab database has had since schema version 1.
const OWN_TABLES: [&str; 2] = ["run", "cell"];

/// What an opened SQLite file is.
#[derive(Debug, PartialEq)]
enum Identity {
    /// Empty: ours to create.
    Fresh,
    Ours,
    /// Another application's, and why we think so.
    Foreign(String),
}

/// Tell a ptelab database from another SQLite file by its header
/// (application id, schema version) and table names.
fn identity(app: i64, version: i64, tables: &[String]) -> Identity {
    let has_ours = OWN_TABLES.iter().all(|t| tables.iter().any(|n| n == t));
    match app {
        APPLICATION_ID => Identity::Ours,
        0 if version == 0 && tables.is_empty() => Identity::Fresh,
        // Made by a ptelab from before the application id.
        0 if version > 0 && has_ours => Identity::Ours,
        0 if tables.is_empty() => Identity::Foreign(format!(
            "an SQLite file with schema version {version} and no tables"
        )),
        0 => {
            let mut names = tables
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            if tables.len() > 5 {
                names.push_str(", ...");
            }
            Identity::Foreign(format!("it holds another application's tables: {names}"))
        }
        other => Identity::Foreign(format!(
            "another application's SQLite file, application id {other:#x}"
        )),
    }
}

/// A results database opened when first asked for: a command that may still
/// refuse its input after its first checks (bisect: the endpoints' kernels
/// and builds) creates no database until it has a run to store.
pub struct OnFirstUse {
    at: Location,
    store: std::cell::OnceCell<Store>,
}

impl OnFirstUse {
    pub fn new(at: impl Into<Location>) -> OnFirstUse {
        OnFirstUse {
            at: at.into(),
            store: std::cell::OnceCell::new(),
        }
    }

    /// The database, opened (created) the first time.
    pub fn get(&self) -> anyhow::Result<&Store> {
        if let Some(s) = self.store.get() {
            return Ok(s);
        }
        let opened = Store::open(&self.at)?;
        Ok(self.store.get_or_init(|| opened))
    }
}

/// Where a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Still being written by a live process.
    Running,
    /// Finished normally.
    Complete,
    /// Stopped before its end (SIGINT, or its process vanished).
    Interrupted,
    /// Stopped by an error.
    Failed,
}

impl RunStatus {
    /// The name stored in the `run.status` column and printed by `ptelab runs`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Complete => "complete",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Failed => "failed",
        }
    }

    fn parse(s: &str) -> anyhow::Result<RunStatus> {
        Ok(match s {
            "running" => RunStatus::Running,
            "complete" => RunStatus::Complete,
            "interrupted" => RunStatus::Interrupted,
            "failed" => RunStatus::Failed,
            other => anyhow::bail!("unknown run status '{other}'"),
        })
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line of `ptelab runs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: RunId,
    /// "bench", "sweep", "model", "crosscheck", "reproduce".
    pub kind: String,
    /// The command line that made the run.
    pub command: String,
    /// UTC, ISO 8601.
    pub started_at: String,
    pub finished_at: Option<String>,
    /// Effective status: a run left `running` by a process that is gone reads
    /// [`RunStatus::Interrupted`].
    pub status: RunStatus,
    pub kernel_release: String,
    pub arch: String,
    pub machine_id: String,
    pub tool_version: String,
    pub git_revision: Option<String>,
    pub tags: Vec<String>,
    /// Cells stored so far.
    pub cells: u64,
    /// The run's guest provenance (`Host::guest`, read from the stored host
    /// record): None for a run made on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<Guest>,
}

impl RunSummary {
    /// The unit of the run's per-call figures.
    pub fn metric(&self) -> crate::record::Metric {
        crate::record::metric_of(self.guest.as_ref())
    }

    /// Where the run ran: `host`, or `tcg guest aarch64`.
    pub fn place(&self) -> String {
        crate::record::place(self.guest.as_ref(), &self.arch)
    }
}

/// One stored cell, measured on the kernel or computed by the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "backend", content = "cell", rename_all = "lowercase")]
// A run's cells are loaded once into one Vec; boxing would only add
// indirection to every access.
#[allow(clippy::large_enum_variant)]
pub enum StoredCell {
    Kernel(CellResult),
    Model(ModelCellRecord),
}

impl StoredCell {
    /// The measured cell, when this is one.
    pub fn kernel(&self) -> Option<&CellResult> {
        match self {
            StoredCell::Kernel(c) => Some(c),
            StoredCell::Model(_) => None,
        }
    }

    /// The model cell, when this is one.
    pub fn model(&self) -> Option<&ModelCellRecord> {
        match self {
            StoredCell::Model(m) => Some(m),
            StoredCell::Kernel(_) => None,
        }
    }
}

/// A whole run: summary, host and every cell in the order they finished.
/// Serialized with `"schema": "ptelab/run/v1"` ([`RUN_SCHEMA`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredRun {
    pub schema: String,
    pub run: RunSummary,
    /// The [`Host`] captured with the run, as stored (kept as JSON so that a
    /// database written by another ptelab version still loads).
    pub host: serde_json::Value,
    pub cells: Vec<StoredCell>,
}

impl StoredRun {
    /// The host as a typed [`Host`], when its JSON has this version's shape.
    #[allow(dead_code)]
    pub fn host(&self) -> anyhow::Result<Host> {
        serde_json::from_value(self.host.clone())
            .context("the run's host record has an unknown shape")
    }

    /// The measured (kernel) cells.
    pub fn kernel_cells(&self) -> impl Iterator<Item = &CellResult> {
        self.cells.iter().filter_map(StoredCell::kernel)
    }

    /// The model cells.
    pub fn model_cells(&self) -> impl Iterator<Item = &ModelCellRecord> {
        self.cells.iter().filter_map(StoredCell::model)
    }
}

/// Whether `name` reads as a tag wherever runs are named: not empty, not a
/// run id, not `latest…`, no comma (which separates the runs of a set).
pub fn is_tag_name(name: &str) -> bool {
    !name.is_empty()
        && !name.contains(',')
        && !name.starts_with("latest")
        && name.parse::<RunId>().is_err()
}

/// A machine's between-run repeatability, as `ptelab calibrate` measured it
/// (`ptelab_stats::repeatability`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Row id, once stored.
    pub id: Option<i64>,
    pub machine_id: String,
    pub kernel_release: String,
    /// UTC, ISO 8601.
    pub measured_at: String,
    /// The calibration runs, in order.
    pub runs: Vec<RunId>,
    /// Seconds from the first run's start to the last run's end.
    pub span_s: f64,
    /// With compare's drift correction (same kernel, same machine).
    pub adjusted: Repeatability,
    /// Raw medians (`--normalize none`, and compare across kernels).
    pub raw: Repeatability,
    /// Per cell of the grid: label (`400K 4K`) and its adjusted and raw
    /// coefficients.
    pub cells: Vec<CellCoefficient>,
    /// Every A/A difference (ln ratio, one per cell and pair of runs), so
    /// that `compare` can pool the machine's calibrations.
    #[serde(default)]
    pub differences: Differences,
}

/// The A/A differences of a [`Calibration`], as ln(median B / median A).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Differences {
    /// With compare's drift correction.
    pub adjusted: Vec<f64>,
    /// Raw.
    pub raw: Vec<f64>,
}

/// One cell's coefficients in a [`Calibration`] (None: too few pairs of
/// runs for a 95% quantile of that cell alone).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellCoefficient {
    pub cell: String,
    pub adjusted: Option<f64>,
    pub raw: Option<f64>,
}

/// An open results database.
#[cfg(feature = "store")]
pub struct Store {
    db: db::Db,
    location: Location,
    /// Space held beside an SQLite file while a run is written, for its
    /// final status ([`sqlite::reserve`]).
    reserve: std::cell::RefCell<Option<std::fs::File>>,
}

#[cfg(feature = "store")]
impl Store {
    /// Open or create the database `at` names (a file, or a PostgreSQL
    /// server); refuse one that is not ptelab's or is of a newer schema, and
    /// migrate an older one. Refusals are bad input (exit 2) and write
    /// nothing.
    pub fn open(at: impl Into<Location>) -> anyhow::Result<Store> {
        let location = at.into();
        let db = match &location {
            Location::File(path) => db::Db::Sqlite(sqlite::connect(path)?),
            Location::Postgres(url) => db::Db::Postgres(Box::new(postgres::connect(url)?)),
        };
        let store = Store {
            db,
            location,
            reserve: Default::default(),
        };
        match store.location {
            Location::File(_) => sqlite::identify_and_migrate(&store)?,
            Location::Postgres(_) => postgres::identify_and_migrate(&store)?,
        }
        Ok(store)
    }

    /// Open a database that must already exist (commands that only read). A
    /// server's database always exists once the server lets us in.
    pub fn open_existing(at: impl Into<Location>) -> anyhow::Result<Store> {
        let location = at.into();
        if let Some(path) = location.file() {
            if !path.exists() {
                return Err(usage(format!(
                    "no results database at {}: run `ptelab bench` or `ptelab sweep` first, or \
                     pass --db PATH (or postgres://USER@HOST/DB)",
                    path.display()
                )));
            }
        }
        Store::open(location)
    }

    /// The SQLite connection, for tests that look under the store.
    #[cfg(test)]
    pub(crate) fn conn(&self) -> &rusqlite::Connection {
        match &self.db {
            db::Db::Sqlite(c) => c,
            db::Db::Postgres(_) => panic!("not an SQLite store"),
        }
    }

    /// Where the database is.
    #[allow(dead_code)]
    pub fn location(&self) -> &Location {
        &self.location
    }

    fn what(&self, op: &str) -> String {
        format!("{op} in results database {}", self.location)
    }

    fn not_ours(&self, why: &str) -> anyhow::Error {
        let remedy = match self.location {
            Location::File(_) => "pass --db with a ptelab database or a new file name, or move this file away",
            Location::Postgres(_) => "pass --db with a ptelab database or an empty one (`createdb`), or a schema of its own (`?options=-csearch_path%3DNAME`)",
        };
        usage(format!(
            "{} is not a ptelab results database ({why}): {remedy}",
            self.location
        ))
    }

    /// Refuse a database of a newer schema than this ptelab knows.
    fn check_version(&self, version: i64) -> anyhow::Result<()> {
        let known = MIGRATIONS.len() as i64;
        if version > known {
            return Err(usage(format!(
                "results database {} has schema version {version}, newer than this ptelab knows \
                 ({known}): use a newer ptelab or another --db",
                self.location
            )));
        }
        Ok(())
    }

    /// kind: "bench" | "sweep" | "model" | "crosscheck" | "reproduce".
    pub fn begin_run(
        &self,
        kind: &str,
        command: &str,
        host: &Host,
        tags: &[String],
    ) -> anyhow::Result<RunId> {
        let host_json = serde_json::to_value(host).context("serialize host")?;
        let tx = self
            .db
            .transaction()
            .with_context(|| self.what("begin run"))?;
        let id = rows::insert_run(
            &tx,
            &rows::NewRun {
                kind,
                command,
                started_at: None,
                finished_at: None,
                status: RunStatus::Running,
                pid: Some(std::process::id()),
                boot_id: boot_id(),
                host: &host_json,
            },
            tags,
        )
        .with_context(|| self.what("begin run"))?;
        tx.commit().with_context(|| self.what("begin run"))?;
        match &self.location {
            Location::Postgres(_) => {
                postgres::hold_run(&self.db, id).with_context(|| self.what("hold run"))?
            }
            Location::File(path) => {
                let mut reserve = self.reserve.borrow_mut();
                if reserve.is_none() {
                    *reserve = sqlite::reserve(path);
                }
            }
        }
        Ok(id)
    }

    /// One transaction per finished cell.
    pub fn insert_cell(&self, run: RunId, cell: &CellResult) -> anyhow::Result<i64> {
        let op = || {
            self.what(&format!(
                "store cell {} {}K of run {run}",
                cell.folio,
                cell.size_bytes >> 10
            ))
        };
        let tx = self.db.transaction().with_context(op)?;
        let id = rows::insert_kernel_cell(&tx, run, cell).with_context(op)?;
        tx.commit().with_context(op)?;
        Ok(id)
    }

    /// One transaction per model cell.
    pub fn insert_model_cell(&self, run: RunId, cell: &ModelCellRecord) -> anyhow::Result<i64> {
        let op = || {
            self.what(&format!(
                "store model cell {} {} of run {run}",
                cell.arch, cell.strategy
            ))
        };
        let tx = self.db.transaction().with_context(op)?;
        let id = rows::insert_model_cell(&tx, run, cell).with_context(op)?;
        tx.commit().with_context(op)?;
        Ok(id)
    }

    /// Set the final status and the finish time.
    pub fn finish_run(&self, run: RunId, status: RunStatus) -> anyhow::Result<()> {
        // The space kept for this (on a file system that filled up).
        drop(self.reserve.take());
        let n = self
            .db
            .execute(
                &format!("UPDATE run SET status = ?1, finished_at = {NOW} WHERE id = ?2"),
                params![status.as_str(), run],
            )
            .with_context(|| self.what(&format!("finish run {run}")))?;
        anyhow::ensure!(n == 1, "{}: no run {run}", self.what("finish run"));
        if matches!(self.db, db::Db::Postgres(_)) && status != RunStatus::Running {
            postgres::release_run(&self.db, run).with_context(|| self.what("release run"))?;
        }
        Ok(())
    }

    /// Add tags to a run (existing tags are kept).
    pub fn add_tags(&self, run: RunId, tags: &[String]) -> anyhow::Result<()> {
        let tx = self
            .db
            .transaction()
            .with_context(|| self.what("tag run"))?;
        rows::insert_tags(&tx, run, tags).with_context(|| self.what(&format!("tag run {run}")))?;
        tx.commit().with_context(|| self.what("tag run"))
    }

    /// Every run, oldest first, with its effective status.
    pub fn runs(&self) -> anyhow::Result<Vec<RunSummary>> {
        let mut runs = rows::select_runs(&self.db, None).with_context(|| self.what("list runs"))?;
        for r in &mut runs {
            r.status = self.effective_status(r.id, r.status)?;
        }
        Ok(runs)
    }

    /// Load a run named by id, `latest`, `latest~N` or tag.
    pub fn load_run(&self, id: &str) -> anyhow::Result<StoredRun> {
        let run = self.resolve(id)?;
        self.load(run)
    }

    /// Load a run by id. One read transaction: a run another process is
    /// still writing reads as it stood at one moment.
    pub fn load(&self, run: RunId) -> anyhow::Result<StoredRun> {
        let op = || self.what(&format!("load run {run}"));
        let tx = self.db.read_transaction().with_context(op)?;
        let mut summary = rows::select_runs(&tx, Some(run))
            .with_context(op)?
            .pop()
            .ok_or_else(|| usage(format!("no run {run} in {}", self.location)))?;
        summary.status = self.effective_status(run, summary.status)?;
        let host = rows::select_host(&tx, run).with_context(op)?;
        let cells = rows::select_cells(&tx, run).with_context(op)?;
        tx.commit().with_context(op)?;
        Ok(StoredRun {
            schema: RUN_SCHEMA.into(),
            run: summary,
            host,
            cells,
        })
    }

    /// Resolve one side of a comparison: a run name ([`Store::resolve`]) or
    /// several separated by commas; with `every_tagged`, a tag names every
    /// run carrying it (oldest first) instead of the newest. Each run once,
    /// in the order given.
    pub fn resolve_runs(&self, spec: &str, every_tagged: bool) -> anyhow::Result<Vec<RunId>> {
        let mut ids: Vec<RunId> = Vec::new();
        for part in spec.split(',') {
            let part = part.trim();
            let found = if every_tagged && is_tag_name(part) {
                let tagged = self
                    .db
                    .query(
                        "SELECT run FROM run_tag WHERE tag = ?1 ORDER BY run",
                        params![part],
                    )
                    .and_then(|rows| rows.iter().map(|r| r.int(0)).collect())
                    .with_context(|| self.what(&format!("find runs tagged '{part}'")))?;
                let tagged: Vec<RunId> = tagged;
                if tagged.is_empty() {
                    return Err(usage(format!(
                        "no run tagged '{part}' in {}",
                        self.location
                    )));
                }
                tagged
            } else {
                vec![self.resolve(part)?]
            };
            for id in found {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        Ok(ids)
    }

    /// Resolve a run name: a number is an id; `latest` is the newest run and
    /// `latest~N` the one N before it; anything else is a tag, naming the
    /// newest run that carries it.
    pub fn resolve(&self, spec: &str) -> anyhow::Result<RunId> {
        let spec = spec.trim();
        let accepted = "give a run id (see `ptelab runs`), `latest`, `latest~N`, or a tag";
        let found = if let Ok(id) = spec.parse::<RunId>() {
            self.db
                .query_opt("SELECT id FROM run WHERE id = ?1", params![id])
        } else if let Some(back) = spec.strip_prefix("latest") {
            let back: i64 = match back {
                "" => 0,
                n => match n.strip_prefix('~').and_then(|n| n.parse().ok()) {
                    Some(n) if n >= 0 => n,
                    _ => return Err(usage(format!("bad run name '{spec}': {accepted}"))),
                },
            };
            self.db.query_opt(
                "SELECT id FROM run ORDER BY id DESC LIMIT 1 OFFSET ?1",
                params![back],
            )
        } else {
            self.db
                .query_opt("SELECT MAX(run) FROM run_tag WHERE tag = ?1", params![spec])
        };
        found
            .and_then(|row| row.map(|r| r.opt_int(0)).transpose())
            .with_context(|| self.what(&format!("find run '{spec}'")))?
            .flatten()
            .ok_or_else(|| usage(format!("no run '{spec}' in {}: {accepted}", self.location)))
    }

    /// Store a run document (as printed by `ptelab show RUN --json`) as a new
    /// run, keeping its times, status and tags, in one transaction. Returns
    /// the new id.
    pub fn import_run(&self, doc: &StoredRun) -> anyhow::Result<RunId> {
        anyhow::ensure!(
            doc.schema == RUN_SCHEMA,
            "cannot import a '{}' document: expected schema '{RUN_SCHEMA}'",
            doc.schema
        );
        // The unit of every figure hangs on the guest record: refuse one
        // that cannot be read rather than store a run that reads as time.
        let guest = rows::guest_of(&doc.host.to_string())?;
        anyhow::ensure!(
            guest == doc.run.guest,
            "the run document's summary and host disagree on where it ran"
        );
        let op = || self.what(&format!("import run {}", doc.run.id));
        let tx = self.db.transaction().with_context(op)?;
        let r = &doc.run;
        let id = rows::insert_run(
            &tx,
            &rows::NewRun {
                kind: &r.kind,
                command: &r.command,
                started_at: Some(&r.started_at),
                finished_at: r.finished_at.as_deref(),
                status: r.status,
                pid: None,
                boot_id: None,
                host: &doc.host,
            },
            &r.tags,
        )
        .with_context(op)?;
        for c in &doc.cells {
            match c {
                StoredCell::Kernel(k) => rows::insert_kernel_cell(&tx, id, k).map(drop),
                StoredCell::Model(m) => rows::insert_model_cell(&tx, id, m).map(drop),
            }
            .with_context(op)?;
        }
        tx.commit().with_context(op)?;
        Ok(id)
    }

    /// Store a machine calibration; returns its id.
    pub fn insert_calibration(&self, cal: &Calibration) -> anyhow::Result<i64> {
        let json = serde_json::to_string(cal).context("serialize calibration")?;
        let op = || self.what("store calibration");
        let tx = self.db.transaction().with_context(op)?;
        let id = tx
            .insert(
                "INSERT INTO calibration (machine_id, kernel_release, measured_at, adjusted, raw, \
                 calibration_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
                params![
                    &cal.machine_id,
                    &cal.kernel_release,
                    &cal.measured_at,
                    cal.adjusted.coefficient,
                    cal.raw.coefficient,
                    json
                ],
            )
            .with_context(op)?;
        tx.commit().with_context(op)?;
        Ok(id)
    }

    /// Every calibration of `machine_id`, oldest first, each with its id.
    pub fn calibrations(&self, machine_id: &str) -> anyhow::Result<Vec<Calibration>> {
        let op = || self.what("read calibrations");
        let rows = self
            .db
            .query(
                "SELECT id, calibration_json FROM calibration WHERE machine_id = ?1 ORDER BY id",
                params![machine_id],
            )
            .with_context(op)?;
        let mut out = Vec::new();
        for row in rows {
            let (id, json) = (row.int(0).with_context(op)?, row.text(1).with_context(op)?);
            let mut cal: Calibration = serde_json::from_str(&json).with_context(op)?;
            cal.id = Some(id);
            out.push(cal);
        }
        Ok(out)
    }

    /// A run marked `running` whose process is gone (killed, crashed, another
    /// boot) is reported as interrupted. On PostgreSQL the owner may be on
    /// another machine: its session's lock on the run says it lives.
    fn effective_status(&self, run: RunId, stored: RunStatus) -> anyhow::Result<RunStatus> {
        if stored != RunStatus::Running {
            return Ok(stored);
        }
        if matches!(self.db, db::Db::Postgres(_)) {
            let held = postgres::run_is_held(&self.db, run)
                .with_context(|| self.what(&format!("read owner of run {run}")))?;
            return Ok(if held {
                RunStatus::Running
            } else {
                RunStatus::Interrupted
            });
        }
        let row = self
            .db
            .query_one("SELECT pid, boot_id FROM run WHERE id = ?1", params![run])
            .with_context(|| self.what(&format!("read owner of run {run}")))?;
        let (pid, boot) = (row.opt_int(0)?, row.opt_text(1)?);
        let alive = match (pid, boot) {
            (Some(pid), Some(boot)) => Some(boot) == boot_id() && process_is_ptelab(pid),
            _ => false,
        };
        Ok(if alive {
            RunStatus::Running
        } else {
            RunStatus::Interrupted
        })
    }
}

/// This boot's id, to tell a live owner from a pid reused after a reboot.
fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
}

/// Whether `pid` is a live process whose command name starts with "ptelab"
/// (the binary, or its unit-test harness).
fn process_is_ptelab(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.starts_with("ptelab"))
}

#[cfg(all(test, feature = "store"))]
mod pg_tests;
#[cfg(any(test, feature = "testing"))]
pub mod roundtrip;
#[cfg(any(test, feature = "testing"))]
pub mod tests;
#[cfg(all(test, feature = "store"))]
pub(crate) mod testserver;

/// The database as the sink of a kernel measurement session.
#[cfg(feature = "store")]
impl crate::record::CellSink for Store {
    fn begin(&self, kind: &str, command: &str, host: &Host) -> anyhow::Result<i64> {
        self.begin_run(kind, command, host, &[])
    }
    fn cell(&self, run: i64, cell: &CellResult) -> anyhow::Result<()> {
        self.insert_cell(run, cell).map(drop)
    }
    fn finish(&self, run: i64, interrupted: bool, failed: bool) -> anyhow::Result<()> {
        let status = match (interrupted, failed) {
            (true, _) => RunStatus::Interrupted,
            (false, true) => RunStatus::Failed,
            (false, false) => RunStatus::Complete,
        };
        self.finish_run(run, status)
    }
}
