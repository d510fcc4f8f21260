//! One connection to either backend, so that every statement of the store is
//! written once (`rows.rs`, `mod.rs`) and runs on SQLite and PostgreSQL alike.
//!
//! Statements are written in the dialect both accept: `?N` parameters (the
//! PostgreSQL side rewrites them to `$N`), `INSERT … RETURNING id`,
//! `ON CONFLICT DO NOTHING`, and [`NOW`] for the current UTC time. Values
//! cross as [`Value`], one of SQLite's four storage classes; the PostgreSQL
//! side converts each to the column type the server asks for.
//!
//! What differs between the backends (opening, identifying and migrating a
//! database, locking) lives in `sqlite.rs` and `postgres.rs`.

use std::ops::Deref;

use anyhow::Context;

/// The current UTC time as ISO 8601 text, in SQL: the SQLite spelling,
/// rewritten for PostgreSQL (`postgres::translate`).
pub(super) const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%SZ', 'now')";

/// A parameter or a column value.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(v.into())
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Int(v.into())
    }
}

/// NaN (an undefined figure) is stored as NULL, as SQLite itself does, so
/// that both backends read it back the same way.
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        if v.is_nan() {
            Value::Null
        } else {
            Value::Real(v)
        }
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_string())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}

impl From<&String> for Value {
    fn from(v: &String) -> Value {
        Value::Text(v.clone())
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// Statement parameters: `params![a, b]` is `&[Value::from(a), Value::from(b)]`.
macro_rules! params {
    ($($v:expr),* $(,)?) => {
        &[$($crate::db::Value::from($v)),*][..]
    };
}
pub(super) use params;

/// One result row, read by column index.
#[derive(Debug)]
pub(super) struct Row(pub(super) Vec<Value>);

impl Row {
    fn at(&self, i: usize) -> anyhow::Result<&Value> {
        self.0
            .get(i)
            .with_context(|| format!("no column {i} in a row of {}", self.0.len()))
    }

    fn wrong(&self, i: usize, want: &str) -> anyhow::Error {
        anyhow::anyhow!("column {i}: expected {want}, found {:?}", self.0[i])
    }

    pub fn opt_int(&self, i: usize) -> anyhow::Result<Option<i64>> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Int(v) => Ok(Some(*v)),
            _ => Err(self.wrong(i, "an integer")),
        }
    }

    pub fn int(&self, i: usize) -> anyhow::Result<i64> {
        self.opt_int(i)?.ok_or_else(|| self.wrong(i, "an integer"))
    }

    /// A REAL column (an integer stored in one reads as its value).
    pub fn opt_real(&self, i: usize) -> anyhow::Result<Option<f64>> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Real(v) => Ok(Some(*v)),
            Value::Int(v) => Ok(Some(*v as f64)),
            _ => Err(self.wrong(i, "a number")),
        }
    }

    pub fn real(&self, i: usize) -> anyhow::Result<f64> {
        self.opt_real(i)?.ok_or_else(|| self.wrong(i, "a number"))
    }

    pub fn opt_text(&self, i: usize) -> anyhow::Result<Option<String>> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Text(v) => Ok(Some(v.clone())),
            _ => Err(self.wrong(i, "text")),
        }
    }

    pub fn text(&self, i: usize) -> anyhow::Result<String> {
        self.opt_text(i)?.ok_or_else(|| self.wrong(i, "text"))
    }
}

/// An open database of either kind.
pub(super) enum Db {
    Sqlite(rusqlite::Connection),
    Postgres(Box<super::postgres::Pg>),
}

impl Db {
    /// Run a statement; returns the rows it changed.
    pub fn execute(&self, sql: &str, params: &[Value]) -> anyhow::Result<u64> {
        match self {
            Db::Sqlite(c) => {
                let run = || -> rusqlite::Result<u64> {
                    let mut stmt = c.prepare_cached(sql)?;
                    Ok(stmt.execute(rusqlite::params_from_iter(params))? as u64)
                };
                run().map_err(|e| sqlite_fault(c, e))
            }
            Db::Postgres(pg) => pg.execute(sql, params),
        }
    }

    /// Run a query; returns every row.
    pub fn query(&self, sql: &str, params: &[Value]) -> anyhow::Result<Vec<Row>> {
        match self {
            Db::Sqlite(c) => {
                let fault = |e| sqlite_fault(c, e);
                let mut stmt = c.prepare_cached(sql).map_err(fault)?;
                let n = stmt.column_count();
                let mut rows = stmt
                    .query(rusqlite::params_from_iter(params))
                    .map_err(fault)?;
                let mut out = Vec::new();
                while let Some(r) = rows.next().map_err(fault)? {
                    let mut row = Vec::with_capacity(n);
                    for i in 0..n {
                        row.push(match r.get_ref(i)? {
                            rusqlite::types::ValueRef::Null => Value::Null,
                            rusqlite::types::ValueRef::Integer(v) => Value::Int(v),
                            rusqlite::types::ValueRef::Real(v) => Value::Real(v),
                            rusqlite::types::ValueRef::Text(t) => {
                                Value::Text(String::from_utf8(t.to_vec())?)
                            }
                            rusqlite::types::ValueRef::Blob(_) => {
                                anyhow::bail!("column {i} holds a blob")
                            }
                        });
                    }
                    out.push(Row(row));
                }
                Ok(out)
            }
            Db::Postgres(pg) => pg.query(sql, params),
        }
    }

    /// The first row of a query, if any.
    pub fn query_opt(&self, sql: &str, params: &[Value]) -> anyhow::Result<Option<Row>> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// The one row a query must return.
    pub fn query_one(&self, sql: &str, params: &[Value]) -> anyhow::Result<Row> {
        self.query_opt(sql, params)?
            .context("the query returned no row")
    }

    /// An `INSERT … RETURNING id`; returns the id.
    pub fn insert(&self, sql: &str, params: &[Value]) -> anyhow::Result<i64> {
        debug_assert!(sql.ends_with("RETURNING id"), "{sql}");
        self.query_one(sql, params)?.int(0)
    }

    /// Start a write transaction. SQLite takes the write lock up front
    /// (`BEGIN IMMEDIATE`), so that two writers queue on the busy timeout
    /// instead of failing on lock upgrade; PostgreSQL's row locks need no
    /// such care. Rolled back on drop unless committed.
    pub fn transaction(&self) -> anyhow::Result<Tx<'_>> {
        self.batch(match self {
            Db::Sqlite(_) => "BEGIN IMMEDIATE",
            Db::Postgres(_) => "BEGIN",
        })?;
        Ok(Tx {
            db: self,
            open: true,
        })
    }

    /// Start a read transaction: one consistent view.
    pub fn read_transaction(&self) -> anyhow::Result<Tx<'_>> {
        self.batch(match self {
            Db::Sqlite(_) => "BEGIN DEFERRED",
            Db::Postgres(_) => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        })?;
        Ok(Tx {
            db: self,
            open: true,
        })
    }

    /// Statements without parameters or results (DDL, transaction control).
    pub fn batch(&self, sql: &str) -> anyhow::Result<()> {
        match self {
            Db::Sqlite(c) => c.execute_batch(sql).map_err(|e| sqlite_fault(c, e))?,
            Db::Postgres(pg) => pg.batch(sql)?,
        }
        Ok(())
    }
}

/// [`super::sqlite::fault`] for an error of connection `c`.
fn sqlite_fault(c: &rusqlite::Connection, e: rusqlite::Error) -> anyhow::Error {
    match c.path() {
        Some(p) if !p.is_empty() => super::sqlite::fault(std::path::Path::new(p), e),
        _ => e.into(),
    }
}

/// A transaction on a [`Db`]: statements run through it (it derefs to the
/// database); dropped without [`Tx::commit`], it rolls back.
pub(super) struct Tx<'a> {
    db: &'a Db,
    open: bool,
}

impl Tx<'_> {
    pub fn commit(mut self) -> anyhow::Result<()> {
        self.open = false;
        self.db.batch("COMMIT")
    }
}

impl Deref for Tx<'_> {
    type Target = Db;
    fn deref(&self) -> &Db {
        self.db
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if self.open {
            // A failed rollback leaves nothing to undo: the connection has
            // already lost the transaction.
            let _ = self.db.batch("ROLLBACK");
        }
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(v) => ValueRef::Integer(*v),
            Value::Real(v) => ValueRef::Real(*v),
            Value::Text(v) => ValueRef::Text(v.as_bytes()),
        }))
    }
}
