//! The results database (SQLite via rusqlite, bundled). One module owns SQL.
//!
//! CONTRACT (implemented by the store helper; keep these signatures):
//!
//! ```ignore
//! pub type RunId = i64;
//! pub enum RunStatus { Running, Complete, Interrupted, Failed }
//! pub struct Store { .. }
//! impl Store {
//!     /// Open or create; apply migrations (PRAGMA user_version); WAL; busy timeout.
//!     pub fn open(path: &Path) -> anyhow::Result<Store>;
//!     /// kind: "bench" | "sweep" | "model" | "crosscheck" | "reproduce".
//!     pub fn begin_run(&self, kind: &str, command: &str, host: &Host, tags: &[String]) -> anyhow::Result<RunId>;
//!     /// One transaction per finished cell.
//!     pub fn insert_cell(&self, run: RunId, cell: &CellResult) -> anyhow::Result<i64>;
//!     pub fn insert_model_cell(&self, run: RunId, cell: &ModelCellRecord) -> anyhow::Result<i64>;
//!     pub fn finish_run(&self, run: RunId, status: RunStatus) -> anyhow::Result<()>;
//!     pub fn runs(&self) -> anyhow::Result<Vec<RunSummary>>;
//!     pub fn load_run(&self, id: &str) -> anyhow::Result<StoredRun>;
//! }
//! ```
