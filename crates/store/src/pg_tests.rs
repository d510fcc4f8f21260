//! The store on a real PostgreSQL server (a throwaway one per test,
//! `testserver`): the round-trip property of `roundtrip.rs`, concurrent
//! writers, and every refusal of a database or server that is not fit.
//! Where PostgreSQL is not installed the tests skip saying why (on CI they
//! fail: `./setup` installs it).

use std::collections::BTreeSet;

use proptest::test_runner::{Config, TestRunner};

use super::roundtrip::{check, run_spec, same, write, CASES};
use super::tests::{cell, host};
use super::testserver::{free_port, TestServer};
use super::*;
use super::{pgtls, postgres};
use crate::workload::FolioSpec;

fn store_at(url: &str) -> Store {
    Store::open(Location::Postgres(url.into())).unwrap()
}

#[test]
fn every_run_reads_back_equal_on_postgres() {
    let Some(server) = TestServer::start_or_skip("every_run_reads_back_equal_on_postgres") else {
        return;
    };
    let store = store_at(&server.create_database("roundtrip"));
    let mut runner = TestRunner::new(Config::with_cases(CASES));
    runner
        .run(&run_spec(), |spec| {
            let id = write(&store, &spec).unwrap();
            let got = store.load(id).unwrap();
            check(&spec, &got)?;
            let text = serde_json::to_string_pretty(&got).unwrap();
            let doc: StoredRun = serde_json::from_str(&text).unwrap();
            proptest::prop_assert!(same(&doc, &got), "document:\n{}", text);
            Ok(())
        })
        .unwrap();
}

#[test]
fn runs_tags_calibrations_and_names_on_postgres() {
    let Some(server) = TestServer::start_or_skip("runs_tags_calibrations_and_names_on_postgres")
    else {
        return;
    };
    let url = server.create_database("names");
    let store = store_at(&url);
    let r1 = store
        .begin_run(
            "bench",
            "1",
            &host(),
            &["base".into(), "a-b".into(), "ab".into()],
        )
        .unwrap();
    store
        .insert_cell(r1, &cell(4, FolioSpec::Base, 100.0))
        .unwrap();
    store.finish_run(r1, RunStatus::Complete).unwrap();
    let r2 = store
        .begin_run("bench", "2", &host(), &["base".into()])
        .unwrap();
    store.add_tags(r2, &["new".into(), "base".into()]).unwrap();
    assert_eq!(store.resolve("latest").unwrap(), r2);
    assert_eq!(store.resolve("latest~1").unwrap(), r1);
    assert_eq!(store.resolve("base").unwrap(), r2);
    assert_eq!(store.resolve_runs("base", true).unwrap(), vec![r1, r2]);
    for bad in ["latest~2", "nope", "99"] {
        assert!(crate::error::is_usage(&store.resolve(bad).unwrap_err()));
    }
    let runs = store.runs().unwrap();
    // Byte order, whatever the server's collation.
    assert_eq!(runs[0].tags, ["a-b", "ab", "base"]);
    assert_eq!(runs[0].status, RunStatus::Complete);
    assert!(runs[0].finished_at.as_deref().unwrap().ends_with('Z'));
    assert_eq!(runs[1].status, RunStatus::Running, "this process owns it");
    assert_eq!(runs[1].tags, ["base", "new"]);
    let cal = Calibration {
        id: None,
        machine_id: "m".into(),
        kernel_release: "6.18".into(),
        measured_at: "2026-05-01T00:00:00Z".into(),
        runs: vec![r1, r2],
        span_s: 1.5,
        adjusted: Repeatability {
            coefficient: 0.048,
            rms: 0.02,
            max: 0.07,
            n: 40,
            coverage: 0.95,
        },
        raw: Repeatability {
            coefficient: 0.083,
            rms: 0.03,
            max: 0.1,
            n: 40,
            coverage: 0.95,
        },
        cells: vec![],
        differences: Differences::default(),
    };
    let id = store.insert_calibration(&cal).unwrap();
    let back = store.calibrations("m").unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].id, Some(id));
    assert_eq!(back[0].runs, cal.runs);
    // A second open finds the schema in place and migrates nothing.
    let again = store_at(&url);
    assert_eq!(again.runs().unwrap().len(), 2);
}

#[test]
fn eight_concurrent_writers_lose_no_run_and_reuse_no_id() {
    let Some(server) = TestServer::start_or_skip("eight_concurrent_writers") else {
        return;
    };
    // A fresh database: the eight first opens race to create the schema too.
    let url = server.create_database("writers");
    const WRITERS: usize = 8;
    const RUNS: usize = 5;
    const CELLS: u64 = 6;
    let barrier = std::sync::Barrier::new(WRITERS);
    let written: Vec<Vec<(RunId, Vec<i64>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (url, barrier) = (&url, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let store = store_at(url);
                    (0..RUNS)
                        .map(|r| {
                            let run = store
                                .begin_run("sweep", &format!("writer {w} run {r}"), &host(), &[])
                                .unwrap();
                            let cells = (0..CELLS)
                                .map(|i| {
                                    store
                                        .insert_cell(run, &cell(4 * (i + 1), FolioSpec::Base, 1.0))
                                        .unwrap()
                                })
                                .collect();
                            store.finish_run(run, RunStatus::Complete).unwrap();
                            (run, cells)
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let runs: BTreeSet<RunId> = written.iter().flatten().map(|(r, _)| *r).collect();
    assert_eq!(runs.len(), WRITERS * RUNS, "a run id was given twice");
    let cells: BTreeSet<i64> = written
        .iter()
        .flatten()
        .flat_map(|(_, c)| c.clone())
        .collect();
    assert_eq!(
        cells.len(),
        WRITERS * RUNS * CELLS as usize,
        "a cell id was given twice"
    );
    let store = store_at(&url);
    let stored = store.runs().unwrap();
    assert_eq!(stored.len(), WRITERS * RUNS, "a run was lost");
    for r in &stored {
        assert_eq!(
            (r.cells, r.status),
            (CELLS, RunStatus::Complete),
            "{}",
            r.command
        );
    }
    let commands: BTreeSet<&str> = stored.iter().map(|r| r.command.as_str()).collect();
    assert_eq!(commands.len(), WRITERS * RUNS);
    let mut c = server.client("writers");
    let version: String = c
        .query_one(
            "SELECT value FROM ptelab_meta WHERE key = 'user_version'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        version,
        MIGRATIONS.len().to_string(),
        "migrated once, to the end"
    );
}

/// `Store::open` refuses `url` as bad input, with a message holding each of
/// `says` and never the password.
fn refused(url: &str, says: &[&str]) {
    let err = Store::open(Location::Postgres(url.into())).err().unwrap();
    let msg = format!("{err:#}");
    assert!(crate::error::is_usage(&err), "not a usage error: {msg}");
    for part in says {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
    assert!(!msg.contains(super::testserver::PASSWORD), "{msg}");
}

#[test]
fn refuses_unfit_servers_and_databases_writing_nothing() {
    let Some(server) = TestServer::start_or_skip("refuses_unfit_servers_and_databases") else {
        return;
    };
    let port = server.port;
    let pw = super::testserver::PASSWORD;
    // No server on that port.
    let closed = free_port().unwrap();
    refused(
        &format!("postgres://ptelab:{pw}@127.0.0.1:{closed}/x"),
        &[
            "cannot reach the server",
            &format!("127.0.0.1:{closed}"),
            "ptelab:***@",
        ],
    );
    // Bad credentials.
    refused(
        &format!("postgres://ptelab:wrong@127.0.0.1:{port}/postgres"),
        &["refused user 'ptelab''s password", "PGPASSWORD"],
    );
    refused(
        &format!("postgres://nobody:{pw}@127.0.0.1:{port}/postgres"),
        &["nobody"],
    );
    // No such database.
    refused(
        &format!("postgres://ptelab:{pw}@127.0.0.1:{port}/absent"),
        &["no database 'absent'", "createdb"],
    );
    // Another application's database: refused, and left as it was.
    let other = server.create_database("other");
    let mut c = server.client("other");
    c.batch_execute("CREATE TABLE notes (id BIGINT PRIMARY KEY, body TEXT)")
        .unwrap();
    refused(
        &other,
        &[
            "is not a ptelab results database",
            "another application's tables: notes",
            "--db",
        ],
    );
    let tables: Vec<String> = c
        .query(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(tables, ["notes"], "something was written");
    // A newer schema: refused, nothing written.
    let newer = server.create_database("newer");
    let run = {
        let store = store_at(&newer);
        store.begin_run("bench", "old", &host(), &[]).unwrap()
    };
    let mut c = server.client("newer");
    c.batch_execute("UPDATE ptelab_meta SET value = '99' WHERE key = 'user_version'")
        .unwrap();
    refused(
        &newer,
        &["schema version 99", "newer than this ptelab", "newer"],
    );
    let n: i64 = c.query_one("SELECT COUNT(*) FROM run", &[]).unwrap().get(0);
    assert_eq!((n, run), (1, 1));
    let v: String = c
        .query_one(
            "SELECT value FROM ptelab_meta WHERE key = 'user_version'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(v, "99");
}

#[test]
fn a_failed_cell_leaves_nothing_and_its_id_is_never_given_again() {
    let Some(server) = TestServer::start_or_skip("a_failed_cell_leaves_nothing") else {
        return;
    };
    let store = store_at(&server.create_database("failed"));
    let run = store.begin_run("sweep", "s", &host(), &[]).unwrap();
    let first = store
        .insert_cell(run, &cell(4, FolioSpec::Base, 1.0))
        .unwrap();
    // Fails inside the transaction, after the cell row went in: a flush
    // count no database integer holds.
    let mut bad = cell(8, FolioSpec::Base, 1.0);
    bad.tlb_flushes.breakdown.insert("x".into(), u64::MAX);
    let err = store.insert_cell(run, &bad).unwrap_err();
    assert!(
        format!("{err:#}").contains("postgres://ptelab:***@"),
        "{err:#}"
    );
    let next = store
        .insert_cell(run, &cell(12, FolioSpec::Base, 1.0))
        .unwrap();
    assert!(
        next > first + 1,
        "the rolled-back cell's id {} came back",
        first + 1
    );
    let got = store.load(run).unwrap();
    assert_eq!(got.cells.len(), 2);
    assert_eq!(
        got.kernel_cells()
            .map(|c| c.size_bytes >> 10)
            .collect::<Vec<_>>(),
        [4, 12]
    );
}

#[test]
fn a_run_reads_running_while_its_owner_lives_on_any_machine() {
    let Some(server) = TestServer::start_or_skip("a_run_reads_running_while_its_owner_lives")
    else {
        return;
    };
    let url = server.create_database("owners");
    let reader = store_at(&url);
    let writer = store_at(&url);
    let run = writer.begin_run("sweep", "s", &host(), &[]).unwrap();
    // Another connection (as from another machine, whose pid and boot this
    // one cannot see) sees the owner's session.
    assert_eq!(reader.load(run).unwrap().run.status, RunStatus::Running);
    let done = writer.begin_run("sweep", "t", &host(), &[]).unwrap();
    writer.finish_run(done, RunStatus::Complete).unwrap();
    assert_eq!(reader.load(done).unwrap().run.status, RunStatus::Complete);
    // The owner's process is gone: its session, and the run's lock, with it.
    drop(writer);
    let start = std::time::Instant::now();
    while reader.load(run).unwrap().run.status == RunStatus::Running {
        assert!(
            start.elapsed().as_secs() < 10,
            "the lock outlived its session"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(reader.runs().unwrap()[0].status, RunStatus::Interrupted);
}

/// Connect with `env` as the whole environment; whether the connection is
/// encrypted, or the error's message (a usage error, without the password).
fn tls_of(url: &str, env: &postgres::PgEnv) -> Result<bool, String> {
    match postgres::connect_with(url, env) {
        Ok(pg) => {
            let rows = pg
                .query(
                    "SELECT ssl FROM pg_catalog.pg_stat_ssl WHERE pid = pg_backend_pid()",
                    &[],
                )
                .unwrap();
            Ok(rows[0].int(0).unwrap() != 0)
        }
        Err(e) => {
            let msg = format!("{e:#}");
            assert!(crate::error::is_usage(&e), "not a usage error: {msg}");
            assert!(!msg.contains(super::testserver::PASSWORD), "{msg}");
            Err(msg)
        }
    }
}

#[track_caller]
fn refused_with(got: Result<bool, String>, says: &[&str]) {
    let msg = got.expect_err("connected");
    for part in says {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
}

#[test]
fn tls_modes_on_a_server_with_tls() {
    // The certificate names localhost only: 127.0.0.1 passes verify-ca, not
    // verify-full.
    let certs = super::testserver::Certs::new(&["localhost"]);
    let Some(server) = TestServer::start_or_skip_with("tls_modes", Some(&certs)) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &certs.ca_pem).unwrap();
    let wrong = dir.path().join("wrong.pem");
    std::fs::write(&wrong, super::testserver::Certs::new(&["localhost"]).ca_pem).unwrap();
    let (ca, wrong) = (ca.display().to_string(), wrong.display().to_string());
    let pw = super::testserver::PASSWORD;
    let at = |host: &str, query: &str| {
        format!(
            "postgres://ptelab:{pw}@{host}:{}/postgres{query}",
            server.port
        )
    };
    let none = postgres::PgEnv::default();
    let ip = "127.0.0.1";
    assert_eq!(
        tls_of(&at(ip, ""), &none),
        Ok(true),
        "prefer is the default"
    );
    assert_eq!(tls_of(&at(ip, "?sslmode=prefer"), &none), Ok(true));
    assert_eq!(tls_of(&at(ip, "?sslmode=disable"), &none), Ok(false));
    assert_eq!(tls_of(&at(ip, "?sslmode=require"), &none), Ok(true));
    let verify = |mode: &str, root: &str| format!("?sslmode={mode}&sslrootcert={root}");
    assert_eq!(
        tls_of(&at("localhost", &verify("verify-full", &ca)), &none),
        Ok(true)
    );
    assert_eq!(tls_of(&at(ip, &verify("verify-ca", &ca)), &none), Ok(true));
    refused_with(
        tls_of(&at(ip, &verify("verify-full", &ca)), &none),
        &[
            "TLS handshake failed under sslmode=verify-full",
            "does not name '127.0.0.1'",
            "sslmode=verify-ca",
            "ptelab:***@",
        ],
    );
    for mode in ["verify-full", "verify-ca", "require"] {
        refused_with(
            tls_of(&at("localhost", &verify(mode, &wrong)), &none),
            &[
                "TLS handshake failed",
                "not signed by a CA of sslrootcert",
                &wrong,
            ],
        );
    }
    // The environment's, when the URL has none; the URL's win.
    let env = postgres::PgEnv {
        sslmode: Some("verify-full".into()),
        sslrootcert: Some(ca.clone()),
        ..Default::default()
    };
    assert_eq!(tls_of(&at("localhost", ""), &env), Ok(true));
    assert_eq!(tls_of(&at(ip, "?sslmode=disable"), &env), Ok(false));
    refused_with(
        tls_of(&at("localhost", &format!("?sslrootcert={wrong}")), &env),
        &["not signed by a CA"],
    );
    refused_with(
        tls_of(&at(ip, "?sslmode=allow"), &none),
        &["sslmode=allow is not accepted", pgtls::ACCEPTED],
    );
    // The socket has no TLS and asks for none, whatever the mode (libpq's
    // way), and trusts the user.
    let socket = format!(
        "postgres://ptelab@{}:{}/postgres?sslmode=verify-full",
        server.dir().display().to_string().replace('/', "%2F"),
        server.port
    );
    assert_eq!(tls_of(&socket, &none), Ok(false));
    // A server whose TLS versions rustls does not speak: prefer goes on in
    // the clear (libpq's way), require says what failed.
    let mut c = server.client("postgres");
    for sql in [
        "ALTER SYSTEM SET ssl_min_protocol_version = 'TLSv1'",
        "ALTER SYSTEM SET ssl_max_protocol_version = 'TLSv1.1'",
        "SELECT pg_reload_conf()",
    ] {
        c.batch_execute(sql).unwrap();
    }
    let start = std::time::Instant::now();
    while tls_of(&at(ip, ""), &none) != Ok(false) {
        assert!(start.elapsed().as_secs() < 10, "the server kept TLS 1.2");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    refused_with(
        tls_of(&at(ip, "?sslmode=require"), &none),
        &[
            "TLS handshake failed under sslmode=require",
            "check the server's TLS settings",
        ],
    );
}

#[test]
fn require_is_refused_by_a_server_without_tls_and_prefer_goes_plain() {
    let Some(server) = TestServer::start_or_skip("require_without_tls") else {
        return;
    };
    let url = |mode: &str| format!("{}?sslmode={mode}", server.url("postgres"));
    let none = postgres::PgEnv::default();
    assert_eq!(tls_of(&url("prefer"), &none), Ok(false));
    for mode in ["require", "verify-ca", "verify-full"] {
        refused_with(
            tls_of(&url(mode), &none),
            &[
                &format!("the server does not accept TLS, which sslmode={mode} asks for"),
                "ssl on",
            ],
        );
    }
}

#[test]
fn the_password_comes_from_pgpassword_then_the_password_file() {
    let Some(server) = TestServer::start_or_skip("password_file") else {
        return;
    };
    let port = server.port;
    let pw = super::testserver::PASSWORD;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pgpass");
    let write = |text: &str, mode: u32| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&file, text).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let url = format!("postgres://ptelab@127.0.0.1:{port}/postgres?sslmode=disable");
    let env = postgres::PgEnv {
        passfile: Some(file.clone()),
        ..Default::default()
    };
    // A line for another port comes first; the first line that matches wins.
    write(
        &format!("127.0.0.1:1:*:ptelab:nope\n# x\n127.0.0.1:{port}:*:ptelab:{pw}\n*:*:*:*:wrong\n"),
        0o600,
    );
    assert_eq!(tls_of(&url, &env), Ok(false));
    // ~/.pgpass when PGPASSFILE is not set.
    std::fs::copy(&file, dir.path().join(".pgpass")).unwrap();
    let home = postgres::PgEnv {
        home: Some(dir.path().into()),
        ..Default::default()
    };
    assert_eq!(tls_of(&url, &home), Ok(false));
    // A wrong one: the bad-credentials error, naming the file.
    write(&format!("*:{port}:postgres:ptelab:wrong\n"), 0o600);
    refused_with(
        tls_of(&url, &env),
        &[
            "refused user 'ptelab''s password",
            "came from the password file",
            &file.display().to_string(),
        ],
    );
    // PGPASSWORD comes before the file.
    let both = postgres::PgEnv {
        password: Some(pw.into()),
        ..env.clone()
    };
    assert_eq!(tls_of(&url, &both), Ok(false));
    // A file others may read is ignored (with a warning): no password.
    write(&format!("*:*:*:*:{pw}\n"), 0o644);
    refused_with(
        tls_of(&url, &env),
        &["the server asks for user 'ptelab''s password", "~/.pgpass"],
    );
    write(&format!("*:*:*:*:{pw}\n"), 0o600);
    assert_eq!(tls_of(&url, &env), Ok(false));
    // The URL's passfile= wins over PGPASSFILE.
    let other = dir.path().join("other");
    std::fs::copy(&file, &other).unwrap();
    write("*:*:*:*:wrong\n", 0o600);
    assert_eq!(
        tls_of(&format!("{url}&passfile={}", other.display()), &env),
        Ok(false)
    );
}

#[test]
fn stored_command_lines_never_hold_a_password_on_postgres() {
    let Some(server) = TestServer::start_or_skip("stored_command_lines_never_hold_a_password")
    else {
        return;
    };
    let url = server.create_database("secrets");
    let secret = "ptelab sweep x --db postgres://lab:s3cret@db.example/p";
    let masked = "ptelab sweep x --db postgres://lab:***@db.example/p";
    drop(store_at(&url));
    // A run stored in plain text by a ptelab of schema version 4.
    let mut c = server.client("secrets");
    c.execute(
        "INSERT INTO run (kind, command, started_at, status, host_json, kernel_release, arch, \
         machine_id, tool_version) VALUES ('sweep', $1, 'T', 'complete', '{}', 'r', 'a', 'm', '0')",
        &[&secret],
    )
    .unwrap();
    c.batch_execute("UPDATE ptelab_meta SET value = '4' WHERE key = 'user_version'")
        .unwrap();
    let store = store_at(&url);
    store.begin_run("bench", secret, &host(), &[]).unwrap();
    let commands: Vec<String> = store
        .runs()
        .unwrap()
        .into_iter()
        .map(|r| r.command)
        .collect();
    assert_eq!(commands, [masked, masked]);
}

/// See: #30. A server that takes the connection and never answers (here a
/// listener on loopback that accepts and stays silent) is refused within
/// connect_timeout, naming the server and the remedy, in the TLS request
/// (sslmode=prefer) and in the login (sslmode=disable) alike.
#[test]
fn a_silent_server_is_refused_within_the_timeout() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        // Accept and hold every connection, answering nothing.
        listener.incoming().take(2).collect::<Vec<_>>()
    });
    for mode in ["prefer", "disable"] {
        let url = format!("postgres://lab:pw@127.0.0.1:{port}/x?connect_timeout=1&sslmode={mode}");
        let started = std::time::Instant::now();
        refused(
            &url,
            &[
                "lab:***@127.0.0.1",
                &format!("the server at 127.0.0.1 port {port} did not answer within 1 s"),
                "pg_isready",
            ],
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{mode}"
        );
    }
    drop(held);
}

/// Stops a process (SIGSTOP) for as long as it lives; SIGCONT on drop,
/// whatever the test did.
struct Stopped(i32);

impl Stopped {
    fn new(pid: i64) -> Stopped {
        let pid = i32::try_from(pid).unwrap();
        // SAFETY: kill has no memory effects.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0, "stop {pid}");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// See: #30. A server that stops answering after the login (here the
/// session's backend stopped, as a stopped postmaster or a dropped network
/// leaves it) is bad input within answer_timeout, naming the server and the
/// remedy; every later statement fails at once with the same message.
#[test]
fn a_server_that_stops_answering_mid_session_is_an_error_within_the_bound() {
    let Some(server) = TestServer::start_or_skip("a_server_that_stops_answering_mid_session")
    else {
        return;
    };
    let store = store_at(&format!(
        "{}?answer_timeout=2",
        server.create_database("stops")
    ));
    let run = store.begin_run("sweep", "s", &host(), &[]).unwrap();
    let backend = store
        .db
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .int(0)
        .unwrap();
    let stopped = Stopped::new(backend);
    // On a thread of its own, so that a store that hangs fails the test
    // instead of holding it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let timed = |f: &dyn Fn() -> anyhow::Error| {
            let start = std::time::Instant::now();
            let e = f();
            (
                start.elapsed(),
                crate::error::is_usage(&e),
                format!("{e:#}"),
            )
        };
        let first = timed(&|| {
            store
                .insert_cell(run, &cell(4, FolioSpec::Base, 1.0))
                .unwrap_err()
        });
        let again = timed(&|| store.finish_run(run, RunStatus::Failed).unwrap_err());
        let _ = tx.send((first, again));
    });
    let (first, again) = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the store still waits for a stopped server after 30 s");
    let said = format!(
        "the server at 127.0.0.1 port {} (database stops) did not answer within 2 s",
        server.port
    );
    for (elapsed, is_usage, msg) in [&first, &again] {
        assert!(is_usage, "not a usage error: {msg}");
        assert!(msg.contains(&said), "{said:?} not in {msg}");
        assert!(msg.contains("answer_timeout=SECONDS"), "{msg}");
        assert!(!msg.contains(super::testserver::PASSWORD), "{msg}");
        assert!(
            *elapsed < std::time::Duration::from_secs(6),
            "{elapsed:?}: {msg}"
        );
    }
    assert!(first.0 >= std::time::Duration::from_secs(2), "{first:?}");
    assert!(
        again.0 < std::time::Duration::from_millis(500),
        "a lost connection was waited for again: {again:?}"
    );
    drop(stopped);
}

#[test]
fn answer_timeout_is_a_positive_number_of_seconds() {
    for bad in ["0", "-1", "x", "inf", ""] {
        refused(
            &format!("postgres://lab:pw@127.0.0.1:1/x?answer_timeout={bad}"),
            &[&format!("answer_timeout={bad} is not a number of seconds")],
        );
    }
}
