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
//! - A server that cannot be reached, refused credentials, a missing
//!   database, a server without TLS under `sslmode=require` and a failed TLS
//!   handshake are bad input (exit 2) with a remedy; none writes anything.
//! - Every wait on the server is bounded: the connect, TLS and login by
//!   `connect_timeout` (10 s), each statement by `answer_timeout` (30 s; a
//!   thread holds the connection, [`Pg`]). A server that stops answering
//!   mid-session (stopped, or the network gone) is bad input too, naming the
//!   server; TCP keepalives keep an idle connection known to the network.
//! - The connection is set up as libpq sets it up, for a server a team
//!   already runs: a URL without a password takes `PGPASSWORD`, then the
//!   password file (`passfile=`, `PGPASSFILE`, `~/.pgpass`; [`pgpass`]);
//!   `sslmode` and `sslrootcert` (or `PGSSLMODE`, `PGSSLROOTCERT`) choose TLS
//!   and what of the server's certificate is checked ([`pgtls`]: rustls, the
//!   system's roots by default). tokio-postgres parses the rest of the URL;
//!   it knows only three of libpq's modes, so [`connect_with`] takes these
//!   parameters off the URL first. The environment comes in as a [`PgEnv`].
//!
//! Left out: client certificates (`sslcert`, `sslkey`), `sslmode=allow`,
//! `~/.postgresql/root.crt` as the default roots, and the service file.

use std::cell::RefCell;
use std::collections::HashMap;
use std::error::Error as StdError;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::Context;
use bytes::BytesMut;
use postgres::config::Host;
use postgres::error::SqlState;
use postgres::types::{IsNull, ToSql, Type};
use postgres::{Client, Config, Statement};

use super::db::{Value, NOW};
use super::location::without_password;
use super::{pgpass, pgtls};
use crate::error::usage;

/// How long to wait for a server that does not answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one statement waits for the server's answer (`answer_timeout=`
/// in the URL). The store's statements take milliseconds; the longest
/// legitimate waits are a first open queueing behind another ptelab's
/// schema migration and a large `runs --import`, both well under this.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// TCP keepalives on an idle connection (`keepalives_idle=` in the URL
/// overrides the first): a measurement leaves the connection idle for
/// minutes between cells, long enough for a firewall or NAT on the way to
/// forget it; probes every 30 s keep it known, and find a peer that went
/// away before the next statement waits its whole answer_timeout.
const KEEPALIVES_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVES_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVES_RETRIES: u32 = 3;

/// PostgreSQL's port, where the URL names none.
const DEFAULT_PORT: u16 = 5432;

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

/// The connection as its thread holds it: the client and its prepared
/// statements, by their text as the store writes it.
struct Session {
    client: Client,
    statements: HashMap<String, Statement>,
}

impl Session {
    fn statement(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(&translate(sql))?;
        self.statements.insert(sql.to_string(), s.clone());
        Ok(s)
    }
}

/// One call for the connection's thread to run.
type Job = Box<dyn FnOnce(&mut Session) + Send>;

/// A connection to the server. The synchronous client blocks for as long
/// as the server keeps silent (a stopped postmaster, a dropped network), so
/// a thread of its own holds it and runs each statement while the caller
/// waits at most `wait` for the answer. A server that misses it has lost
/// the connection: every later call fails at once with the same message,
/// and the thread is left blocked on a socket the exiting process closes.
pub(super) struct Pg {
    jobs: Option<mpsc::Sender<Job>>,
    /// Told when the thread has closed the connection (on drop).
    closed: mpsc::Receiver<()>,
    wait: Duration,
    /// `the server at H port P (database D)`, for messages.
    server: String,
    /// `pg_isready -h H -p P`: how to check the server.
    probe: String,
    /// Set once the connection is lost: why, with the remedy.
    lost: RefCell<Option<String>>,
}

impl Pg {
    /// Run `job` on the connection's thread and wait for its answer.
    fn call<T: Send + 'static>(
        &self,
        sql: &str,
        job: impl FnOnce(&mut Session) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        if let Some(why) = self.lost.borrow().as_ref() {
            return Err(usage(why.clone()));
        }
        let (answer, answered) = mpsc::sync_channel(1);
        let sent = self.jobs.as_ref().map(|jobs| {
            jobs.send(Box::new(move |s: &mut Session| {
                let _ = answer.send(job(s));
            }))
        });
        if !matches!(sent, Some(Ok(()))) {
            return Err(self.ended());
        }
        match answered.recv_timeout(self.wait) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => match e.downcast_ref::<postgres::Error>().and_then(broken) {
                Some(cause) => Err(self.lose(format!(
                    "the connection to {} was lost ({cause}): check that PostgreSQL runs there \
                     (`{}`) and that the network reaches it, then run the command again",
                    self.server, self.probe
                ))),
                None => Err(e),
            },
            Err(mpsc::RecvTimeoutError::Timeout) => Err(self.lose(format!(
                "{} did not answer within {} s ({}): check that PostgreSQL runs there and \
                 answers (`{}`), and that the network reaches it; a statement that needs longer \
                 may be given it with answer_timeout=SECONDS in the URL",
                self.server,
                self.wait.as_secs_f64(),
                first_words(sql),
                self.probe
            ))),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(self.ended()),
        }
    }

    /// Mark the connection lost for `why`; the error to return.
    fn lose(&self, why: String) -> anyhow::Error {
        *self.lost.borrow_mut() = Some(why.clone());
        usage(why)
    }

    /// The connection's thread is gone (it panicked).
    fn ended(&self) -> anyhow::Error {
        self.lose(format!(
            "the connection to {} ended unexpectedly: run the command again",
            self.server
        ))
    }

    pub fn execute(&self, sql: &str, params: &[Value]) -> anyhow::Result<u64> {
        let (text, params) = (sql.to_string(), params.to_vec());
        self.call(sql, move |s| {
            let stmt = s.statement(&text)?;
            let params: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
            Ok(s.client.execute(&stmt, &params)?)
        })
    }

    pub fn query(&self, sql: &str, params: &[Value]) -> anyhow::Result<Vec<super::db::Row>> {
        let (text, params) = (sql.to_string(), params.to_vec());
        self.call(sql, move |s| {
            let stmt = s.statement(&text)?;
            let params: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
            let rows = s.client.query(&stmt, &params)?;
            rows.iter().map(row_of).collect()
        })
    }

    pub fn batch(&self, sql: &str) -> anyhow::Result<()> {
        let text = sql.to_string();
        self.call(sql, move |s| Ok(s.client.batch_execute(&text)?))
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        // Let the thread close the connection (the server then ends the
        // session cleanly), unless it is stuck on a silent server.
        drop(self.jobs.take());
        if self.lost.borrow().is_none() {
            let _ = self.closed.recv_timeout(self.wait);
        }
    }
}

/// Why `e` means the connection is gone (closed, or its socket failed),
/// rather than a statement the server refused.
fn broken(e: &postgres::Error) -> Option<String> {
    if e.as_db_error().is_some() {
        return None;
    }
    if e.is_closed() {
        return Some("the server closed it".into());
    }
    let mut source = e.source();
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return Some(io.to_string());
        }
        source = s.source();
    }
    None
}

/// The first words of a statement, to say which one went unanswered.
fn first_words(sql: &str) -> String {
    let words: Vec<&str> = sql.split_whitespace().take(3).collect();
    words.join(" ")
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

/// What a connection reads of the environment, as libpq reads it; passed in
/// so that tests give their own instead of changing the process's.
#[derive(Clone, Debug, Default)]
pub(super) struct PgEnv {
    /// `PGPASSWORD`.
    pub password: Option<OsString>,
    /// `PGPASSFILE`: the password file instead of `~/.pgpass`.
    pub passfile: Option<PathBuf>,
    /// `HOME`, where `.pgpass` is.
    pub home: Option<PathBuf>,
    /// `USER`: the user when the URL names none (libpq's login name).
    pub user: Option<String>,
    /// `PGSSLMODE`.
    pub sslmode: Option<String>,
    /// `PGSSLROOTCERT`.
    pub sslrootcert: Option<String>,
}

impl PgEnv {
    pub fn from_process() -> PgEnv {
        let var = |name| std::env::var(name).ok();
        PgEnv {
            password: std::env::var_os("PGPASSWORD"),
            passfile: std::env::var_os("PGPASSFILE").map(PathBuf::from),
            home: std::env::var_os("HOME").map(PathBuf::from),
            user: var("USER"),
            sslmode: var("PGSSLMODE"),
            sslrootcert: var("PGSSLROOTCERT"),
        }
    }

    /// The password file: `PGPASSFILE`, else `~/.pgpass`.
    fn passfile(&self) -> Option<PathBuf> {
        match &self.passfile {
            Some(f) if !f.as_os_str().is_empty() => Some(f.clone()),
            _ => self.home.as_ref().map(|h| h.join(".pgpass")),
        }
    }
}

/// The URL parameters of libpq that tokio-postgres does not take (it refuses
/// `sslmode=verify-*` and any key it does not know): read here and removed
/// from the URL it parses.
const OWN_PARAMETERS: [&str; 4] = ["sslmode", "sslrootcert", "passfile", "answer_timeout"];

/// Where the password came from, for the message when the server refuses it.
enum PasswordFrom {
    /// The URL or `PGPASSWORD`.
    Given,
    File(PathBuf),
    Nowhere,
}

/// Connect to the server `url` names. Every way this fails is bad input
/// (exit 2): the message names the server without its password and says
/// what to check.
pub(super) fn connect(url: &str) -> anyhow::Result<Pg> {
    connect_with(url, &PgEnv::from_process())
}

/// [`connect`] with the environment `env`.
pub(super) fn connect_with(url: &str, env: &PgEnv) -> anyhow::Result<Pg> {
    let shown = without_password(url);
    let bad_url = |e: &dyn std::fmt::Display| {
        usage(format!(
            "--db {shown} is not a PostgreSQL URL ({e}): give \
             postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?sslmode=MODE&sslrootcert=FILE]"
        ))
    };
    let (rest, own) = take_parameters(url, &OWN_PARAMETERS).map_err(|e| bad_url(&e))?;
    let param = |key| {
        own.iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let mut config: Config = rest.parse().map_err(|e| bad_url(&e))?;
    let mut tls = pgtls::Tls::resolve(
        param("sslmode"),
        param("sslrootcert"),
        env.sslmode.as_deref(),
        env.sslrootcert.as_deref(),
    )
    .map_err(|e| usage(format!("--db {shown}: {e}")))?;
    if config.get_user().is_none() {
        if let Some(user) = &env.user {
            config.user(user);
        }
    }
    let from = password(&mut config, env, param("passfile").map(PathBuf::from));
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    let answer = match param("answer_timeout") {
        None => ANSWER_TIMEOUT,
        Some(v) => seconds(v).ok_or_else(|| {
            usage(format!(
                "--db {shown}: answer_timeout={v} is not a number of seconds: give \
                 answer_timeout=SECONDS, above 0"
            ))
        })?,
    };
    if !has_parameter(&rest, "keepalives_idle") {
        config.keepalives_idle(KEEPALIVES_IDLE);
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(KEEPALIVES_INTERVAL);
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(KEEPALIVES_RETRIES);
    }
    config.application_name("ptelab");
    let all_sockets = !config.get_hosts().is_empty()
        && config
            .get_hosts()
            .iter()
            .all(|h| !matches!(h, Host::Tcp(_)));
    if all_sockets {
        // libpq never asks for TLS on a Unix socket (the server would refuse).
        tls.mode = pgtls::SslMode::Disable;
    }
    let connector = tls
        .connector()
        .map_err(|e| usage(format!("results database {shown}: {e}")))?;
    config.ssl_mode(tls.mode.wire());
    // The client's connect_timeout bounds the TCP connect alone; a server
    // that accepts and then never answers (a stopped postmaster, another
    // program on the port) would hold the TLS handshake or the login for
    // ever. So the whole of it runs on the connection's thread (see
    // [`Pg`]), waited for as long as connect_timeout.
    let wait = config
        .get_connect_timeout()
        .copied()
        .unwrap_or(CONNECT_TIMEOUT);
    let (tx, rx) = mpsc::channel();
    let (jobs, queue) = mpsc::channel::<Job>();
    let (closed_tx, closed) = mpsc::channel();
    let attempt = {
        let (mut config, prefer) = (config.clone(), tls.mode == pgtls::SslMode::Prefer);
        move || {
            let mut tried = config.connect(connector.clone());
            // libpq's prefer: a handshake that fails is tried again in the clear.
            if prefer {
                if let Err(e) = &tried {
                    if matches!(pgtls::failure(e), Some(pgtls::Failure::Handshake(..))) {
                        config.ssl_mode(pgtls::SslMode::Disable.wire());
                        tried = config.connect(connector);
                    }
                }
            }
            let client = match tried {
                Ok(client) => {
                    let _ = tx.send(Ok(()));
                    client
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let mut session = Session {
                client,
                statements: HashMap::new(),
            };
            for job in queue {
                job(&mut session);
            }
            drop(session);
            let _ = closed_tx.send(());
        }
    };
    std::thread::Builder::new()
        .name("ptelab-pg".into())
        .spawn(attempt)
        .context("start the thread that connects to the results database")?;
    let tried = rx
        .recv_timeout(wait)
        .map_err(|_| silent_server(&shown, &config, wait))?;
    tried.map_err(|e| connect_error(&shown, &config, &tls, &from, &e))?;
    Ok(Pg {
        jobs: Some(jobs),
        closed,
        wait: answer,
        server: server_of(&config),
        probe: {
            let (host, port) = host_port(&config);
            format!("pg_isready -h {host} -p {port}")
        },
        lost: RefCell::new(None),
    })
}

/// A positive, finite number of seconds.
fn seconds(v: &str) -> Option<Duration> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
}

/// Whether `url`'s query has the parameter `key`.
fn has_parameter(url: &str, key: &str) -> bool {
    url.split_once('?').is_some_and(|(_, q)| {
        q.split('&')
            .any(|kv| kv.split_once('=').map_or(kv, |(k, _)| k) == key)
    })
}

/// `the server at H port P (database D)`: where the connection goes,
/// without the password.
fn server_of(config: &Config) -> String {
    let (host, port) = host_port(config);
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or_default();
    format!("the server at {host} port {port} (database {db})")
}

/// The first host and port of `config`, as messages name them.
fn host_port(config: &Config) -> (String, u16) {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    (
        host,
        config.get_ports().first().copied().unwrap_or(DEFAULT_PORT),
    )
}

/// Give `config` a password when its URL has none, the way libpq looks:
/// `PGPASSWORD`, then the password file (`passfile=` in the URL,
/// `PGPASSFILE`, `~/.pgpass`). A password file that is ignored gets a
/// warning, as libpq gives.
fn password(config: &mut Config, env: &PgEnv, url_passfile: Option<PathBuf>) -> PasswordFrom {
    if config.get_password().is_some() {
        return PasswordFrom::Given;
    }
    if let Some(pw) = env.password.as_ref().filter(|pw| !pw.is_empty()) {
        config.password(pw.as_encoded_bytes());
        return PasswordFrom::Given;
    }
    let Some(file) = url_passfile.or_else(|| env.passfile()) else {
        return PasswordFrom::Nowhere;
    };
    let host = match (config.get_hosts().first(), config.get_hostaddrs().first()) {
        (Some(Host::Tcp(name)), _) => name.clone(),
        (Some(Host::Unix(dir)), _) => dir.display().to_string(),
        (None, Some(addr)) => addr.to_string(),
        (None, None) => String::new(),
    };
    let user = config.get_user().unwrap_or_default();
    let key = pgpass::Key::new(
        &host,
        config.get_ports().first().copied().unwrap_or(DEFAULT_PORT),
        config.get_dbname().unwrap_or(user),
        user,
    );
    match pgpass::lookup(&file, &key) {
        Ok(Some(pw)) => {
            config.password(pw);
            PasswordFrom::File(file)
        }
        Ok(None) => PasswordFrom::Nowhere,
        Err(warning) => {
            eprintln!("ptelab: warning: {warning}; it is ignored");
            PasswordFrom::Nowhere
        }
    }
}

/// Split the parameters `keys` off `url`'s query: the URL without them, and
/// each one's (key, percent-decoded value) in order.
fn take_parameters(url: &str, keys: &[&str]) -> Result<(String, Vec<(String, String)>), String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), vec![]));
    };
    let mut kept = vec![];
    let mut taken = vec![];
    for kv in query.split('&') {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        if keys.contains(&k) {
            let v = percent_encoding::percent_decode_str(v)
                .decode_utf8()
                .map_err(|_| format!("{k} is not UTF-8"))?;
            taken.push((k.to_string(), v.into_owned()));
        } else {
            kept.push(kv);
        }
    }
    let rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, taken))
}

/// The refusal of a server that took the connection but did not answer
/// within `wait`.
fn silent_server(shown: &str, config: &Config, wait: Duration) -> anyhow::Error {
    let (host, port) = host_port(config);
    usage(format!(
        "results database {shown}: the server at {host} port {port} did not answer within {} s \
         (TLS handshake and login): check that PostgreSQL runs there and answers (`pg_isready -h \
         {host} -p {port}`) and that no other program listens on that port; a slow server may \
         get longer with connect_timeout=SECONDS in the URL",
        wait.as_secs_f64()
    ))
}

fn connect_error(
    shown: &str,
    config: &Config,
    tls: &pgtls::Tls,
    from: &PasswordFrom,
    e: &postgres::Error,
) -> anyhow::Error {
    let user = config.get_user().unwrap_or("?");
    let db = config.get_dbname().unwrap_or(user);
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "?".into(),
    };
    let why = match e.code() {
        Some(c) if *c == SqlState::INVALID_PASSWORD => match from {
            PasswordFrom::File(file) => format!(
                "the server refused user '{user}''s password, which came from the password \
                 file {}: correct its line for this server, or give the password in the URL \
                 or in PGPASSWORD",
                file.display()
            ),
            _ => format!(
                "the server refused user '{user}''s password: give the right one in the URL \
                 (postgres://{user}:PASSWORD@...), in PGPASSWORD or in the password file \
                 (PGPASSFILE, else ~/.pgpass)"
            ),
        },
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
        _ => match pgtls::failure(e) {
            Some(pgtls::Failure::Refused) => format!(
                "the server does not accept TLS, which sslmode={} asks for: turn ssl on in \
                 its postgresql.conf, or give sslmode=prefer or disable",
                tls.mode.name()
            ),
            Some(pgtls::Failure::Handshake(rustls_error, text)) => {
                tls_error(tls, &host, rustls_error.as_ref(), &text)
            }
            None => {
                let cause = e.source().map_or_else(|| e.to_string(), |s| s.to_string());
                if cause == "password missing" {
                    format!(
                        "the server asks for user '{user}''s password: give it in the URL, \
                         in PGPASSWORD or in the password file (PGPASSFILE, else ~/.pgpass)"
                    )
                } else {
                    format!(
                        "cannot reach the server ({cause}): check the host and port, that \
                         PostgreSQL runs there and that it listens on that address"
                    )
                }
            }
        },
    };
    usage(format!("results database {shown}: {why}"))
}

/// The message of a failed TLS handshake, with what to change.
fn tls_error(tls: &pgtls::Tls, host: &str, e: Option<&rustls::Error>, text: &str) -> String {
    use rustls::CertificateError as C;
    let mode = tls.mode.name();
    let remedy = match e {
        Some(rustls::Error::InvalidCertificate(
            C::NotValidForName | C::NotValidForNameContext { .. },
        )) => {
            format!(
                "the server's certificate does not name '{host}': connect by a name it holds, \
                 or give sslmode=verify-ca to check only who signed it"
            )
        }
        Some(rustls::Error::InvalidCertificate(C::UnknownIssuer | C::BadSignature)) => format!(
            "the server's certificate is not signed by a CA of {}: give sslrootcert=FILE \
             with the CA that signed it",
            tls.roots
        ),
        Some(rustls::Error::InvalidCertificate(_)) => {
            "the server's certificate is not acceptable (expired, not yet valid, or of a \
             kind rustls refuses): replace it on the server"
                .to_string()
        }
        _ => "check the server's TLS settings: this client speaks TLS 1.2 and 1.3 \
             (ssl_min_protocol_version, ssl_max_protocol_version)"
            .to_string(),
    };
    format!("the TLS handshake failed under sslmode={mode} ({text}): {remedy}")
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
            .and_then(|()| super::migrate_data(&tx, i + 1))
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
    fn libpq_parameters_come_off_the_url_decoded() {
        let (rest, own) = take_parameters(
            "postgres://u@h/db?options=-csearch_path%3Dlab&sslmode=verify-full\
             &sslrootcert=%2Fetc%2Fca%20x.pem&passfile=/p",
            &OWN_PARAMETERS,
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@h/db?options=-csearch_path%3Dlab");
        assert_eq!(
            own,
            [
                ("sslmode".to_string(), "verify-full".to_string()),
                ("sslrootcert".into(), "/etc/ca x.pem".into()),
                ("passfile".into(), "/p".into()),
            ]
        );
        let (rest, own) =
            take_parameters("postgres://u@h/db?sslmode=disable", &OWN_PARAMETERS).unwrap();
        assert_eq!((rest.as_str(), own.len()), ("postgres://u@h/db", 1));
        let (rest, own) = take_parameters("postgres://u@h/db", &OWN_PARAMETERS).unwrap();
        assert_eq!((rest.as_str(), own.len()), ("postgres://u@h/db", 0));
        assert!(take_parameters("postgres://h/d?sslrootcert=%FF", &OWN_PARAMETERS).is_err());
    }

    #[test]
    fn the_password_file_is_pgpassfile_else_the_homes() {
        let env = |passfile: Option<&str>, home: Option<&str>| PgEnv {
            passfile: passfile.map(PathBuf::from),
            home: home.map(PathBuf::from),
            ..Default::default()
        };
        assert_eq!(
            env(Some("/f"), Some("/home/u")).passfile(),
            Some(PathBuf::from("/f"))
        );
        assert_eq!(
            env(Some(""), Some("/home/u")).passfile(),
            Some(PathBuf::from("/home/u/.pgpass"))
        );
        assert_eq!(env(None, None).passfile(), None);
    }

    #[test]
    fn whole_words_only() {
        assert_eq!(
            replace_word("REAL REALM x_REAL (REAL)", "REAL", "R"),
            "R REALM x_REAL (R)"
        );
    }
}
