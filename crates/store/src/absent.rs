//! The store of a guest build (`--no-default-features`: no `store` feature,
//! no SQLite, no C compiler needed). Inside a QEMU guest ptelab never keeps
//! results: the host does (docs/guests.md, "Guest binary").
//!
//! [`Store`] has the API of the real one so that commands compile unchanged,
//! but no value: every way to open it returns [`unavailable`], so none of its
//! methods can ever run. (Its signatures follow the real ones; the guest
//! build in `tests/guest_binary.rs` fails when they part.)

use super::{Calibration, Location, RunId, RunStatus, RunSummary, StoredRun};
use crate::record::{CellResult, Host, ModelCellRecord};

/// What a guest build says when asked to store or read results.
pub const GUEST_BUILD: &str = "this ptelab was built without the results database (a guest build)";

/// The error for any use of the database in a guest build: bad input (exit
/// 2), a request this binary cannot serve.
pub fn unavailable() -> anyhow::Error {
    crate::error::usage(format!(
        "{GUEST_BUILD}: it measures and prints as with --no-store, but cannot store or read runs"
    ))
}

/// No database: an uninhabited type, so the methods are unreachable.
pub enum Store {}

impl Store {
    pub fn open(_at: impl Into<Location>) -> anyhow::Result<Store> {
        Err(unavailable())
    }
    pub fn open_existing(_at: impl Into<Location>) -> anyhow::Result<Store> {
        Err(unavailable())
    }
    pub fn location(&self) -> &Location {
        match *self {}
    }
    pub fn begin_run(
        &self,
        _kind: &str,
        _command: &str,
        _host: &Host,
        _tags: &[String],
    ) -> anyhow::Result<RunId> {
        match *self {}
    }
    pub fn insert_cell(&self, _run: RunId, _cell: &CellResult) -> anyhow::Result<i64> {
        match *self {}
    }
    pub fn insert_model_cell(&self, _run: RunId, _cell: &ModelCellRecord) -> anyhow::Result<i64> {
        match *self {}
    }
    pub fn finish_run(&self, _run: RunId, _status: RunStatus) -> anyhow::Result<()> {
        match *self {}
    }
    pub fn add_tags(&self, _run: RunId, _tags: &[String]) -> anyhow::Result<()> {
        match *self {}
    }
    pub fn runs(&self) -> anyhow::Result<Vec<RunSummary>> {
        match *self {}
    }
    pub fn load_run(&self, _id: &str) -> anyhow::Result<StoredRun> {
        match *self {}
    }
    pub fn load(&self, _run: RunId) -> anyhow::Result<StoredRun> {
        match *self {}
    }
    pub fn resolve_runs(&self, _spec: &str, _every_tagged: bool) -> anyhow::Result<Vec<RunId>> {
        match *self {}
    }
    pub fn resolve(&self, _spec: &str) -> anyhow::Result<RunId> {
        match *self {}
    }
    pub fn import_run(&self, _doc: &StoredRun) -> anyhow::Result<RunId> {
        match *self {}
    }
    pub fn insert_calibration(&self, _cal: &Calibration) -> anyhow::Result<i64> {
        match *self {}
    }
    pub fn calibrations(&self, _machine_id: &str) -> anyhow::Result<Vec<Calibration>> {
        match *self {}
    }
    pub fn insert_guest_bias(&self, _bias: &super::GuestBias) -> anyhow::Result<i64> {
        match *self {}
    }
    pub fn guest_biases(&self) -> anyhow::Result<Vec<super::GuestBias>> {
        match *self {}
    }
}

impl crate::record::CellSink for Store {
    fn begin(&self, _kind: &str, _command: &str, _host: &Host) -> anyhow::Result<i64> {
        match *self {}
    }
    fn cell(&self, _run: i64, _cell: &CellResult) -> anyhow::Result<()> {
        match *self {}
    }
    fn finish(&self, _run: i64, _interrupted: bool, _failed: bool) -> anyhow::Result<()> {
        match *self {}
    }
}
