//! The results database in an SQLite file (the default, one machine).
//!
//! - WAL journal, a busy timeout and `BEGIN IMMEDIATE` write transactions let
//!   several ptelab processes write one file at once without corrupting it or
//!   failing with "database is locked".
//! - The schema version is `PRAGMA user_version`; the owner is `PRAGMA
//!   application_id` ("ptlb"). A file that is not a ptelab database (not
//!   SQLite, or another application's: its header and tables tell) is
//!   refused as bad input before anything is written to it.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use rusqlite::Connection;

use super::{identity, Identity, Store, APPLICATION_ID, MIGRATIONS};

/// How long a writer waits for another process's transaction before failing.
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Open (create) the file with the busy timeout set.
pub(super) fn connect(path: &Path) -> anyhow::Result<Connection> {
    check_writable(path)?;
    let conn = Connection::open(path).map_err(|e| fault(path, e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| fault(path, e))
        .with_context(|| format!("configure results database {}", path.display()))?;
    Ok(conn)
}

/// Refuse, before SQLite touches anything, a file or directory ptelab cannot
/// write: SQLite would open a read-only file anyway and leave its `-wal` and
/// `-shm` files beside it before the first write fails.
fn check_writable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let dir = dir_of(path);
    if !dir.is_dir() {
        return Err(fault_of(
            path,
            rusqlite::ErrorCode::CannotOpen,
            "no such directory",
        ));
    }
    // access(2) answers for root too: an immutable file or a read-only
    // file system is EPERM or EROFS whoever asks.
    let writable = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            // SAFETY: a valid NUL-terminated path; access only reads it.
            .is_ok_and(|c| unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0)
    };
    if path.exists() && !writable(path) {
        let e = std::io::Error::last_os_error();
        return Err(fault_of(
            path,
            rusqlite::ErrorCode::ReadOnly,
            &e.to_string(),
        ));
    }
    if !writable(dir) {
        let e = std::io::Error::last_os_error();
        return Err(fault_of(
            path,
            rusqlite::ErrorCode::CannotOpen,
            &format!("its directory: {e}"),
        ));
    }
    Ok(())
}

/// Space kept on the database's file system while a run is written
/// ([`reserve`]): enough WAL frames for the run's final status.
const RESERVE: libc::off_t = 64 << 10;

/// An unnamed file (O_TMPFILE) of [`RESERVE`] bytes, allocated, beside the
/// database at `path`. When the file system fills up under a run, the
/// cells that no longer fit are lost, and so would be the run's final
/// status, leaving it to read "interrupted" ([`super::Store::finish_run`]
/// drops this first, so that the status fits). Unnamed, it is gone with
/// the process whatever kills it. None where it cannot be made (a file
/// system without O_TMPFILE, one already full): the status is then written
/// if it fits.
pub(super) fn reserve(path: &Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir_of(path))
        .ok()?;
    // SAFETY: a valid descriptor; posix_fallocate only allocates its blocks.
    let allocated = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, RESERVE) } == 0;
    allocated.then_some(file)
}

/// The directory of `path` ("." for a bare file name).
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// An SQLite error as the user can act on it: what is wrong with the file
/// or where it is, as bad input (exit 2) naming the path and what to do; any
/// other error as it is. SQLite's own text ("Error code 11") says neither.
pub(super) fn fault(path: &Path, e: rusqlite::Error) -> anyhow::Error {
    match e.sqlite_error_code() {
        Some(code) => {
            let text = e.to_string();
            match known_fault(path, code, &text) {
                Some(msg) => crate::error::usage(msg),
                None => e.into(),
            }
        }
        None => e.into(),
    }
}

/// [`fault`] for a condition found before SQLite was asked.
fn fault_of(path: &Path, code: rusqlite::ErrorCode, why: &str) -> anyhow::Error {
    crate::error::usage(known_fault(path, code, why).expect("a known fault"))
}

/// The message of an SQLite error code the user can act on, with `why`.
fn known_fault(path: &Path, code: rusqlite::ErrorCode, e: &str) -> Option<String> {
    use rusqlite::ErrorCode as C;
    let shown = path.display();
    let dir = dir_of(path);
    Some(match code {
        C::CannotOpen if !dir.is_dir() => format!(
            "no directory {} for results database {shown}: create it (`mkdir -p {}`), or pass \
             --db with a path in a directory that exists",
            dir.display(),
            dir.display()
        ),
        C::CannotOpen | C::PermissionDenied => format!(
            "cannot open or create results database {shown} ({e}): check that you may read and \
             write it and its directory {} (`ls -ld`), or pass --db with another path",
            dir.display()
        ),
        C::ReadOnly => format!(
            "results database {shown} is read-only ({e}): make it and its directory {} \
             writable (a ptelab database is written to even when read: its journal and lock \
             files live beside it), or pass --db with a writable copy",
            dir.display()
        ),
        C::DatabaseCorrupt => format!(
            "results database {shown} is damaged ({e}): move it away and pass --db with a new \
             file, or restore a copy (`sqlite3 {shown} .recover` may save its runs)"
        ),
        C::DiskFull => format!(
            "the file system of results database {shown} is full ({e}): free space there (`df \
             {}`), or pass --db with a file on another file system",
            dir.display()
        ),
        // EIO, a quota (EDQUOT) or a file size limit (EFBIG): SQLite says
        // "disk I/O error" for each.
        C::SystemIoFailure => format!(
            "reading or writing results database {shown} failed ({e}): check the file system \
             of {} (`dmesg` for I/O errors, `df` and `quota` for space), or pass --db with a \
             file on another file system",
            dir.display()
        ),
        _ => return None,
    })
}

fn path(store: &Store) -> &Path {
    store.location.file().expect("an SQLite store")
}

fn conn(store: &Store) -> &Connection {
    match &store.db {
        super::db::Db::Sqlite(c) => c,
        super::db::Db::Postgres(_) => unreachable!("an SQLite store"),
    }
}

/// Refuse a file that is not ptelab's, switch it to WAL, and migrate it.
pub(super) fn identify_and_migrate(store: &Store) -> anyhow::Result<()> {
    identify(store)?;
    configure(conn(store))
        .map_err(|e| fault(path(store), e))
        .with_context(|| store.what("configure"))?;
    migrate(store)
}

/// Refuse a file that is not a ptelab database: exit 2, saying what to do.
fn identify(store: &Store) -> anyhow::Result<()> {
    let conn = conn(store);
    let read = || -> rusqlite::Result<(i64, i64, Vec<String>)> {
        // One read transaction: a consistent view while another ptelab
        // may be creating the database.
        let tx = conn.unchecked_transaction()?;
        let app = tx.query_row("PRAGMA application_id", [], |r| r.get(0))?;
        let version = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let tables = tx
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'table' \
                 AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
            )?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<String>>>()?;
        Ok((app, version, tables))
    };
    let (app, version, tables) = match read() {
        Ok(found) => found,
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::NotADatabase =>
        {
            return Err(store.not_ours("SQLite cannot read it as a database"));
        }
        Err(e) => {
            return Err(fault(path(store), e))
                .with_context(|| store.what("read the database header"))
        }
    };
    match identity(app, version, &tables) {
        Identity::Fresh | Identity::Ours => Ok(()),
        Identity::Foreign(why) => Err(store.not_ours(&why)),
    }
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    // journal_mode answers with a row; WAL persists in the file. Switching
    // to WAL needs an exclusive lock and SQLite answers BUSY at once
    // (without the busy handler) while another connection switches it
    // too, as happens when several ptelab processes create one database:
    // skip it when already WAL, retry it otherwise.
    let started = std::time::Instant::now();
    loop {
        let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
        if mode.eq_ignore_ascii_case("wal") {
            break;
        }
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
            Ok(_) => break,
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && started.elapsed() < BUSY_TIMEOUT =>
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => return Err(e),
        }
    }
    // NORMAL is safe in WAL mode: a crashed process loses nothing
    // committed; only a power cut may lose the last transactions.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", true)?;
    Ok(())
}

fn migrate(store: &Store) -> anyhow::Result<()> {
    let tx = store
        .db
        .transaction()
        .with_context(|| store.what("migrate schema"))?;
    let conn = conn(store);
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| fault(path(store), e))
        .with_context(|| store.what("read schema version"))?;
    store.check_version(version)?;
    let known = MIGRATIONS.len() as i64;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        conn.execute_batch(sql)
            .map_err(|e| fault(path(store), e))
            .and_then(|()| super::migrate_data(&store.db, i + 1))
            .with_context(|| store.what(&format!("apply schema migration {}", i + 1)))?;
    }
    if version < known {
        conn.pragma_update(None, "user_version", known)
            .map_err(|e| fault(path(store), e))
            .with_context(|| store.what("set schema version"))?;
    }
    // Stamped outside the numbered migrations: a header field, not a
    // schema change, so older ptelab builds still open the file.
    let app: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .with_context(|| store.what("read application id"))?;
    if app != APPLICATION_ID {
        conn.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(|e| fault(path(store), e))
            .with_context(|| store.what("set application id"))?;
    }
    tx.commit()
        .with_context(|| store.what("commit schema migration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// See: #30. SQLite's "disk I/O error" (EIO, a quota, a file size
    /// limit) is bad input naming the file and what to check, not SQLite's
    /// words alone.
    #[test]
    fn an_io_error_names_the_file_and_what_to_check() {
        let e = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR_WRITE),
            None,
        );
        let err = fault(Path::new("/data/lab/ptelab.db"), e);
        assert!(crate::error::is_usage(&err), "{err:#}");
        let msg = err.to_string();
        for says in [
            "/data/lab/ptelab.db",
            "disk I/O error",
            "of /data/lab",
            "df",
        ] {
            assert!(msg.contains(says), "{says:?} not in {msg}");
        }
    }

    /// The space kept for a run's status is allocated, and nothing named
    /// is left beside the database.
    #[test]
    fn the_reserve_is_allocated_and_unnamed() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let file = reserve(&dir.path().join("ptelab.db")).expect("O_TMPFILE in /tmp");
        assert!(file.metadata().unwrap().blocks() * 512 >= RESERVE as u64);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
