//! The results database on a PostgreSQL server (`--db postgres://USER@HOST/DB`),
//! through the `postgres` crate (the synchronous client of rust-postgres).
//! Many ptelab processes on many machines (Slurm tasks, docs/cluster.md)
//! write to it at once.
//!
//! - The schema is the SQLite one: `schema.sql` and `migrations/`, each
//!   rewritten by [`ddl`] (64-bit integers and floats, identity ids). Where
//!   SQLite keeps its version and owner in the file header (`PRAGMA
//!   user_version`, `application_id`), a `ptelab_meta` table keeps them here.
//! - Opening identifies and migrates in one transaction under an advisory
//!   lock, so concurrent first opens migrate once, and a database that is
//!   another application's or of a newer schema is refused with nothing
//!   written to it.
//! - Ids come from identity columns (sequences): concurrent writers never get
//!   the same one, and a rolled-back insert never gives its id out again.
//! - A server that cannot be reached, refused credentials or a missing
//!   database are bad input (exit 2) with a remedy; none writes anything.
//!
//! Left out: TLS (the connection is plain; use a Unix socket, a private
//! network or an SSH tunnel) and `~/.pgpass` (`PGPASSWORD` is read).

use std::cell::RefCell;
use std::collections::HashMap;
use std::error::Error as StdError;
use std::time::Duration;

use anyhow::Context;
use bytes::BytesMut;
use postgres::error::SqlState;
use postgres::types::{IsNull, ToSql, Type};
use postgres::{Client, Config, NoTls, Statement};

use super::db::{Value, NOW};
use super::location::without_password;
use crate::error::usage;

/// How long to wait for a server that does not answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The key of the advisory lock that serializes opening (identify and
/// migrate): "ptlb", the SQLite application id.
const OPEN_LOCK: i64 = super::APPLICATION_ID;

/// The first key of the session-level advisory lock a writer holds on each
/// run it owns (the second is the run id): its session ending, as when its
/// process dies on any machine, releases it. ("ptlb", as [`OPEN_LOCK`].)
const RUN_LOCK: i64 = super::APPLICATION_ID;

/// The table that stands in for SQLite's header fields.
const META: &str = "ptelab_meta";

/// [`NOW`] in PostgreSQL.
const PG_NOW: &str = "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')";

/// A connection and its prepared statements.
pub(super) struct Pg {
    client: RefCell<Client>,
    /// Prepared statements by their text as the store writes it.
    statements: RefCell<HashMap<String, Statement>>,
}

impl Pg {
    fn statement(&self, sql: &str) -> anyhow::Result<Statement> {
        if let Some(s) = self.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.borrow_mut().prepare(&translate(sql))?;
        self.statements
            .borrow_mut()
            .insert(sql.to_string(), s.clone());
        Ok(s)
    }

    pub fn execute(&self, sql: &str, params: &[Value]) -> anyhow::Result<u64> {
        let stmt = self.statement(sql)?;
        let params: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
        Ok(self.client.borrow_mut().execute(&stmt, &params)?)
    }

    pub fn query(&self, sql: &str, params: &[Value]) -> anyhow::Result<Vec<super::db::Row>> {
        let stmt = self.statement(sql)?;
        let params: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
        let rows = self.client.borrow_mut().query(&stmt, &params)?;
        rows.iter().map(row_of).collect()
    }

    pub fn batch(&self, sql: &str) -> anyhow::Result<()> {
        Ok(self.client.borrow_mut().batch_execute(sql)?)
    }
}

/// Hold `run` for as long as this connection lives: the mark of a live
/// owner that every machine sharing the database can see (SQLite's store
/// checks the owner's pid on its own boot instead).
pub(super) fn hold_run(db: &super::db::Db, run: i64) -> anyhow::Result<()> {
    db.execute(
        "SELECT pg_advisory_lock(CAST(?1 AS INTEGER), CAST(?2 AS INTEGER))",
        &[Value::Int(RUN_LOCK), Value::Int(run)],
    )?;
    Ok(())
}

/// Let go of `run` (finished).
pub(super) fn release_run(db: &super::db::Db, run: i64) -> anyhow::Result<()> {
    db.execute(
        "SELECT pg_advisory_unlock(CAST(?1 AS INTEGER), CAST(?2 AS INTEGER))",
        &[Value::Int(RUN_LOCK), Value::Int(run)],
    )?;
    Ok(())
}

/// Whether some session, on whichever machine, holds `run` ([`hold_run`]).
pub(super) fn run_is_held(db: &super::db::Db, run: i64) -> anyhow::Result<bool> {
    Ok(db
        .query_one(
            "SELECT COUNT(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND granted \
             AND classid::bigint = ?1 AND objid::bigint = ?2 AND objsubid = 2",
            &[Value::Int(RUN_LOCK), Value::Int(run)],
        )?
        .int(0)?
        > 0)
}

/// Rewrite a statement in the store's dialect for PostgreSQL: `?N` → `$N`,
/// [`NOW`] → `now()` formatted the same way. (No statement of the store has
/// a `?` inside a string literal.)
pub(super) fn translate(sql: &str) -> String {
    sql.replace(NOW, PG_NOW).replace('?', "$")
}

/// Rewrite a schema script (`schema.sql`, a migration) for PostgreSQL:
/// SQLite's 64-bit INTEGER and REAL become BIGINT and DOUBLE PRECISION, an
/// `INTEGER PRIMARY KEY` (SQLite's rowid) an identity column, and
/// `WITHOUT ROWID` (a storage detail) goes. Comments are left alone.
pub(super) fn ddl(sql: &str) -> String {
    sql.lines()
        .map(|line| {
            let (code, comment) = match line.find("--") {
                Some(i) => line.split_at(i),
                None => (line, ""),
            };
            let code = code
                .replace(
                    "INTEGER PRIMARY KEY",
                    "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
                )
                .replace(" WITHOUT ROWID", "");
            let code = replace_word(&code, "INTEGER", "BIGINT");
            let code = replace_word(&code, "REAL", "DOUBLE PRECISION");
            format!("{code}{comment}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Replace `word` where it stands alone (not inside an identifier).
fn replace_word(s: &str, word: &str, with: &str) -> String {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(word) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + word.len()..].chars().next();
        out.push_str(&rest[..i]);
        if before.is_some_and(ident) || after.is_some_and(ident) {
            out.push_str(word);
        } else {
            out.push_str(with);
        }
        rest = &rest[i + word.len()..];
    }
    out.push_str(rest);
    out
}

fn row_of(r: &postgres::Row) -> anyhow::Result<super::db::Row> {
    let mut out = Vec::with_capacity(r.len());
    for (i, col) in r.columns().iter().enumerate() {
        let ty = col.type_();
        let v = match *ty {
            Type::INT8 => r.try_get::<_, Option<i64>>(i)?.map(Value::Int),
            Type::INT4 => r
                .try_get::<_, Option<i32>>(i)?
                .map(|v| Value::Int(v.into())),
            Type::INT2 => r
                .try_get::<_, Option<i16>>(i)?
                .map(|v| Value::Int(v.into())),
            Type::BOOL => r
                .try_get::<_, Option<bool>>(i)?
                .map(|v| Value::Int(v.into())),
            Type::FLOAT8 => r.try_get::<_, Option<f64>>(i)?.map(Value::Real),
            Type::FLOAT4 => r
                .try_get::<_, Option<f32>>(i)?
                .map(|v| Value::Real(v.into())),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
                r.try_get::<_, Option<String>>(i)?.map(Value::Text)
            }
            _ => anyhow::bail!(
                "column {} has type {ty}, which the store does not read",
                col.name()
            ),
        };
        out.push(v.unwrap_or(Value::Null));
    }
    Ok(super::db::Row(out))
}

/// Each value goes in as the type of its column or parameter.
impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(v) => match *ty {
                Type::INT8 => v.to_sql(ty, out),
                Type::INT4 => i32::try_from(*v)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*v)?.to_sql(ty, out),
                Type::BOOL => (*v != 0).to_sql(ty, out),
                Type::FLOAT8 => (*v as f64).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => v.to_string().to_sql(ty, out),
                _ => Err(format!("an integer cannot go into a {ty} column").into()),
            },
            Value::Real(v) => match *ty {
                Type::FLOAT8 => v.to_sql(ty, out),
                Type::FLOAT4 => (*v as f32).to_sql(ty, out),
                _ => Err(format!("a number cannot go into a {ty} column").into()),
            },
            Value::Text(v) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    v.as_str().to_sql(ty, out)
                }
                _ => Err(format!("text cannot go into a {ty} column").into()),
            },
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

/// Connect to the server `url` names. Every way this fails is bad input
/// (exit 2): the message names the server without its password and says
/// what to check.
pub(super) fn connect(url: &str) -> anyhow::Result<Pg> {
    let shown = without_password(url);
    let mut config: Config = url.parse().map_err(|e| {
        usage(format!(
            "--db {shown} is not a PostgreSQL URL ({e}): give postgres://USER[:PASSWORD]@HOST[:PORT]/DB"
        ))
    })?;
    if config.get_password().is_none() {
        if let Some(pw) = std::env::var_os("PGPASSWORD") {
            config.password(pw.as_encoded_bytes());
        }
    }
    if config.get_user().is_none() {
        // libpq's default: the login name.
        if let Ok(user) = std::env::var("USER") {
            config.user(&user);
        }
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    config.application_name("ptelab");
    let client = config
        .connect(NoTls)
        .map_err(|e| connect_error(&shown, &config, &e))?;
    Ok(Pg {
        client: RefCell::new(client),
        statements: RefCell::new(HashMap::new()),
    })
}

fn connect_error(shown: &str, config: &Config, e: &postgres::Error) -> anyhow::Error {
    let user = config.get_user().unwrap_or("?");
    let db = config.get_dbname().unwrap_or(user);
    let why = match e.code() {
        Some(c) if *c == SqlState::INVALID_PASSWORD => format!(
            "the server refused user '{user}''s password: give the right one in the URL \
             (postgres://{user}:PASSWORD@...) or in PGPASSWORD"
        ),
        Some(c) if *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => format!(
            "the server refused user '{user}' ({}): check the user name, and that the \
             server's pg_hba.conf lets it in from this machine",
            e.as_db_error().map_or("", |d| d.message())
        ),
        Some(c) if *c == SqlState::UNDEFINED_DATABASE => format!(
            "the server has no database '{db}': create it (`createdb -O {user} {db}`) or \
             name another"
        ),
        Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => format!(
            "user '{user}' may not connect to '{db}' ({}): ask for CONNECT on it",
            e.as_db_error().map_or("", |d| d.message())
        ),
        _ if e.as_db_error().is_some() => format!("the server refused the connection: {e}"),
        _ if e.to_string().contains("password missing") => format!(
            "the server asks for user '{user}''s password: give it in the URL or in PGPASSWORD"
        ),
        _ => {
            let cause = e.source().map_or_else(|| e.to_string(), |s| s.to_string());
            format!(
                "cannot reach the server ({cause}): check the host and port, that PostgreSQL \
                 runs there and that it listens on that address"
            )
        }
    };
    usage(format!("results database {shown}: {why}"))
}

/// The owner and schema version of the database, from `ptelab_meta`, and the
/// other tables of the current schema: the arguments of `super::identity`.
fn header(tx: &super::db::Db) -> anyhow::Result<(i64, i64, Vec<String>)> {
    let has_meta = tx
        .query_one(&format!("SELECT to_regclass('{META}') IS NOT NULL"), &[])?
        .int(0)?
        != 0;
    let (mut app, mut version) = (0, 0);
    if has_meta {
        for row in tx.query(&format!("SELECT key, value FROM {META}"), &[])? {
            let value = row.text(1)?;
            match row.text(0)?.as_str() {
                "application_id" => app = value.parse().unwrap_or(-1),
                "user_version" => version = value.parse().unwrap_or(i64::MAX),
                _ => {}
            }
        }
    }
    let tables = tx
        .query(
            "SELECT tablename::text FROM pg_catalog.pg_tables \
             WHERE schemaname = current_schema() AND tablename <> ?1 ORDER BY tablename",
            &[Value::from(META)],
        )?
        .iter()
        .map(|r| r.text(0))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((app, version, tables))
}

/// Refuse a database that is not ptelab's or that is newer than this ptelab,
/// and bring an older one up to date: one transaction under an advisory lock
/// (concurrent first opens wait, and the later ones find it done). Nothing is
/// written when the database is refused.
pub(super) fn identify_and_migrate(store: &super::Store) -> anyhow::Result<()> {
    let db = &store.db;
    let tx = db
        .transaction()
        .with_context(|| store.what("open a transaction"))?;
    tx.execute("SELECT pg_advisory_xact_lock(?1)", &[Value::Int(OPEN_LOCK)])
        .with_context(|| store.what("lock the schema"))?;
    let (app, version, tables) = header(&tx).with_context(|| store.what("read the schema"))?;
    if let super::Identity::Foreign(why) = super::identity(app, version, &tables) {
        return Err(store.not_ours(&why));
    }
    let known = super::MIGRATIONS.len() as i64;
    store.check_version(version)?;
    if version == known && app == super::APPLICATION_ID {
        return tx.commit().with_context(|| store.what("read the schema"));
    }
    for (i, sql) in super::MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.batch(&ddl(sql))
            .with_context(|| store.what(&format!("apply schema migration {}", i + 1)))?;
    }
    tx.batch(&format!(
        "CREATE TABLE IF NOT EXISTS {META} (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
    ))
    .with_context(|| store.what("create the schema record"))?;
    for (key, value) in [
        ("application_id", super::APPLICATION_ID),
        ("user_version", known),
    ] {
        tx.execute(
            &format!(
                "INSERT INTO {META} (key, value) VALUES (?1, ?2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            ),
            &[Value::from(key), Value::from(value.to_string())],
        )
        .with_context(|| store.what("set the schema version"))?;
    }
    tx.commit()
        .with_context(|| store.what("commit schema migration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_translate() {
        assert_eq!(
            translate("SELECT x FROM t WHERE ?1 IS NULL OR id = ?1 AND y = ?12"),
            "SELECT x FROM t WHERE $1 IS NULL OR id = $1 AND y = $12"
        );
        assert!(translate(&format!("UPDATE run SET finished_at = {NOW}")).contains("now()"));
    }

    #[test]
    fn every_schema_script_translates_to_postgres_types() {
        for sql in super::super::MIGRATIONS {
            let pg = ddl(sql);
            let code: String = pg
                .lines()
                .map(|l| l.split("--").next().unwrap())
                .collect::<Vec<_>>()
                .join("\n");
            for sqlite_only in [" INTEGER", " REAL", "WITHOUT ROWID"] {
                assert!(!code.contains(sqlite_only), "{sqlite_only} in\n{code}");
            }
            // Comments stay as written.
            assert_eq!(pg.matches("--").count(), sql.matches("--").count());
        }
        let run = ddl(super::super::MIGRATIONS[0]);
        assert!(run.contains("id             BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"));
        assert!(run.contains("ns_median            DOUBLE PRECISION,"));
        assert!(run.contains("size_bytes           BIGINT NOT NULL"));
    }

    #[test]
    fn whole_words_only() {
        assert_eq!(
            replace_word("REAL REALM x_REAL (REAL)", "REAL", "R"),
            "R REALM x_REAL (R)"
        );
    }
}
