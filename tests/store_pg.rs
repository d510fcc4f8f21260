//! The command line on a PostgreSQL results database (`--db postgres://…`,
//! `PTELAB_DB`), against a throwaway server (`common::testserver`): every
//! command that reads gives what it gives on SQLite, eight processes storing
//! at once lose nothing, and a server or database that is unfit is bad input
//! (exit 2, one line, nothing written).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::common::testserver::{free_port, TestServer, PASSWORD};
use crate::common::{assert_success, kernel_cell, ptelab, TempDb};

/// A run document of `cells` measured cells on `kernel`, tagged `tag`.
fn run_doc(kernel: &str, day: u32, tag: &str, medians: &[f64]) -> Value {
    let cells: Vec<Value> = medians
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let samples = (0..12)
                .map(|j| m * (1.0 + (j as f64 - 5.5) / 1000.0))
                .collect();
            kernel_cell(4 << (3 * i), "4K", 4096, *m, samples)
        })
        .collect();
    serde_json::json!({
        "schema": "ptelab/run/v1",
        "run": {
            "id": day, "kind": "sweep", "command": "ptelab sweep mprotect-toggle",
            "started_at": format!("2026-05-{day:02}T10:00:00Z"),
            "finished_at": format!("2026-05-{day:02}T10:05:00Z"),
            "status": "complete", "kernel_release": kernel, "arch": "x86_64",
            "machine_id": "0123456789abcdef0123456789abcdef", "tool_version": "0.1.0",
            "git_revision": null, "tags": [tag], "cells": cells.len(),
        },
        "host": {
            "kernel_release": kernel, "arch": "x86_64", "cpu_model": "test", "cores": 2,
            "paravirt": null, "machine_id": "0123456789abcdef0123456789abcdef",
            "tool_version": "0.1.0", "git_revision": null,
        },
        "cells": cells,
    })
}

/// Run ptelab with `args`, the database given by `PTELAB_DB` (no `--db`);
/// returns stdout, asserting success.
fn with_env_db(db: &str, args: &[&str]) -> String {
    let out = ptelab().env("PTELAB_DB", db).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?} on {db}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_reading_command_gives_on_postgres_what_it_gives_on_sqlite() {
    let Some(server) = TestServer::start_or_skip("every_reading_command_on_postgres") else {
        return;
    };
    let pg = server.create_database("cli");
    let file = TempDb::new();
    let docs = [
        run_doc("6.16.0", 1, "base", &[1713.0, 3453.0, 18804.0]),
        run_doc("6.17.0", 2, "cand", &[1720.0, 5993.0, 44116.0]),
    ];
    let mut import = vec!["runs".to_string()];
    for (i, d) in docs.iter().enumerate() {
        let f = file.dir().join(format!("run{i}.json"));
        std::fs::write(&f, d.to_string()).unwrap();
        import.extend(["--import".into(), f.display().to_string()]);
    }
    let import: Vec<&str> = import.iter().map(String::as_str).collect();
    for db in [file.path(), pg.as_str()] {
        ptelab().args(&import).args(["--db", db]).assert().success();
    }
    for args in [
        &["runs", "--json"][..],
        &["runs"],
        &["show", "latest", "--json"],
        &["show", "base"],
        &["compare", "base", "cand", "--json"],
        &["compare", "1", "2"],
    ] {
        let (a, b) = (with_env_db(file.path(), args), with_env_db(&pg, args));
        assert_eq!(a, b, "{args:?} differs between SQLite and PostgreSQL");
    }
    // --db wins over PTELAB_DB.
    let out = ptelab()
        .env("PTELAB_DB", "postgres://nobody@127.0.0.1:1/none")
        .args(["runs", "--json", "--db", &pg])
        .output()
        .unwrap();
    assert_success(&out);
    // A report renders from the server too.
    let html = file.dir().join("r.html");
    ptelab()
        .args(["report", "cand", "--vs", "base", "-o"])
        .arg(&html)
        .args(["--db", &pg])
        .assert()
        .success();
    assert!(std::fs::read_to_string(&html).unwrap().contains("6.17.0"));
}

#[test]
fn eight_processes_storing_at_once_lose_no_run() {
    let Some(server) = TestServer::start_or_skip("eight_processes_storing_at_once") else {
        return;
    };
    // A fresh database: the eight first opens also race to create the schema.
    let pg = server.create_database("eight");
    let children: Vec<_> = (0..8)
        .map(|i| {
            crate::common::ptelab_std()
                .args(["model", "mprotect-toggle", "--size", "64K", "--tag"])
                .arg(format!("writer-{i}"))
                .args(["--db", &pg])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        crate::common::assert_success(&c.wait_with_output().unwrap());
    }
    let runs: Value = serde_json::from_str(&with_env_db(&pg, &["runs", "--json"])).unwrap();
    let runs = runs["runs"].as_array().unwrap_or_else(|| panic!("{runs}"));
    assert_eq!(runs.len(), 8, "a run was lost");
    let ids: BTreeSet<i64> = runs.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), 8, "an id was given twice");
    let tags: BTreeSet<&str> = runs
        .iter()
        .map(|r| r["tags"][0].as_str().unwrap())
        .collect();
    assert_eq!(tags.len(), 8);
    for r in runs {
        assert_eq!(r["status"], "complete", "{r}");
        assert!(r["cells"].as_u64().unwrap() > 0, "{r}");
    }
}

/// `args` on `db` exits 2 with one line on stderr holding each of `says`,
/// never the password.
fn bad_input(db: &str, args: &[&str], says: &[&str]) {
    let out = ptelab().args(args).args(["--db", db]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    for s in says {
        assert!(err.contains(s), "{s:?} not in {err}");
    }
    assert!(!err.contains(PASSWORD) && !err.contains("s3cret"), "{err}");
}

#[test]
fn an_unreachable_server_is_bad_input() {
    // Needs no server: nothing listens on a port just found free.
    let port = free_port().unwrap();
    let db = format!("postgres://lab:s3cret@127.0.0.1:{port}/ptelab");
    for args in [
        &["runs"][..],
        &["show", "latest"],
        &["model", "mprotect-toggle", "--size", "64K"],
    ] {
        bad_input(
            &db,
            args,
            &[
                "postgres://lab:***@127.0.0.1",
                "cannot reach the server",
                "check the host and port",
            ],
        );
    }
}

#[test]
fn bad_credentials_and_foreign_databases_are_bad_input() {
    let Some(server) = TestServer::start_or_skip("bad_credentials_and_foreign_databases") else {
        return;
    };
    let wrong = format!("postgres://ptelab:wrong@127.0.0.1:{}/postgres", server.port);
    for args in [
        &["runs"][..],
        &["model", "mprotect-toggle", "--size", "64K"],
    ] {
        bad_input(&wrong, args, &["refused user 'ptelab''s password"]);
    }
    let other = server.create_database("other");
    server
        .client("other")
        .batch_execute("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
        .unwrap();
    for args in [
        &["runs"][..],
        &["model", "mprotect-toggle", "--size", "64K"],
    ] {
        bad_input(
            &other,
            args,
            &["is not a ptelab results database (it holds another application's tables: orders)"],
        );
    }
    let n: i64 = server
        .client("other")
        .query_one(
            "SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        n, 1,
        "a table was created in another application's database"
    );
}

/// libpq's variables that a test sets itself, removed from what a child
/// inherits.
const PG_VARS: [&str; 5] = [
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PTELAB_DB",
];

/// ptelab with `vars` as its only libpq variables and HOME `home` (so that
/// no real ~/.pgpass is read).
fn with_vars(home: &std::path::Path, vars: &[(&str, &str)]) -> assert_cmd::Command {
    let mut cmd = ptelab();
    for v in PG_VARS {
        cmd.env_remove(v);
    }
    cmd.env("HOME", home).envs(vars.iter().copied());
    cmd
}

#[test]
fn a_password_file_and_tls_from_the_environment() {
    let certs = crate::common::testserver::Certs::new(&["127.0.0.1"]);
    let Some(server) = TestServer::start_or_skip_with("password_file_and_tls", Some(&certs)) else {
        return;
    };
    let db = "tls";
    server.create_database(db);
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let ca = path("ca.pem", &certs.ca_pem);
    let other_ca = crate::common::testserver::Certs::new(&["127.0.0.1"]).ca_pem;
    let wrong_ca = path("wrong.pem", &other_ca);
    let port = server.port;
    let passfile = |name: &str, pw: &str, mode: u32| {
        use std::os::unix::fs::PermissionsExt;
        let p = path(name, &format!("127.0.0.1:{port}:{db}:ptelab:{pw}\n"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    };
    let good = passfile("pgpass", PASSWORD, 0o600);
    let wrong = passfile("wrong", "wrong", 0o600);
    let open = passfile("open", PASSWORD, 0o644);
    let url = format!("postgres://ptelab@127.0.0.1:{port}/{db}");
    let store = ["model", "mprotect-toggle", "--size", "64K", "--db", &url];
    let refused = |vars: &[(&str, &str)], says: &[&str], lines: usize| {
        let out = with_vars(dir.path(), vars).args(store).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{vars:?}: {err}");
        assert_eq!(err.lines().count(), lines, "{err}");
        for s in says {
            assert!(err.contains(s), "{s:?} not in {err}");
        }
        assert!(!err.contains(PASSWORD), "{err}");
    };
    let verify = [("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", ca.as_str())];
    refused(
        &[
            ("PGSSLMODE", "verify-full"),
            ("PGSSLROOTCERT", &wrong_ca),
            ("PGPASSFILE", &good),
        ],
        &["TLS handshake failed", "not signed by a CA of sslrootcert"],
        1,
    );
    refused(
        &[verify[0], verify[1], ("PGPASSFILE", &wrong)],
        &[
            "refused user 'ptelab''s password, which came from the password file",
            &wrong,
        ],
        1,
    );
    refused(
        &[verify[0], verify[1], ("PGPASSFILE", &open)],
        &[
            "warning: password file",
            "has group or world access",
            "asks for user 'ptelab''s password",
        ],
        2,
    );
    refused(
        &[("PGSSLMODE", "allow"), ("PGPASSFILE", &good)],
        &["sslmode=allow is not accepted", "verify-full"],
        1,
    );
    let tables: i64 = server
        .client(db)
        .query_one(
            "SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "a refused connection wrote");
    // The password file and the roots from the environment; the database
    // from PTELAB_DB too.
    let ok = [verify[0], verify[1], ("PGPASSFILE", good.as_str())];
    assert_success(&with_vars(dir.path(), &ok).args(store).output().unwrap());
    let mut env_db = ok.to_vec();
    env_db.push(("PTELAB_DB", &url));
    let out = with_vars(dir.path(), &env_db)
        .args(["runs", "--json"])
        .output()
        .unwrap();
    assert_success(&out);
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(1), "{runs}");
    // ~/.pgpass when PGPASSFILE is not set, and the URL's sslmode.
    std::fs::copy(&good, dir.path().join(".pgpass")).unwrap();
    let out = with_vars(dir.path(), &[])
        .args(["runs", "--db", &format!("{url}?sslmode=require")])
        .output()
        .unwrap();
    assert_success(&out);
}

/// See: #30. A password given in `--db` is never stored or printed.
#[test]
fn a_password_in_the_url_is_never_stored_or_printed() {
    let Some(server) = TestServer::start_or_skip("a_password_in_the_url_is_never_stored") else {
        return;
    };
    let pg = server.create_database("secret");
    assert!(
        pg.contains(PASSWORD),
        "the test needs a password in the URL: {pg}"
    );
    let out = ptelab()
        .args(["model", "mprotect-toggle", "--size", "64K", "--db", &pg])
        .output()
        .unwrap();
    assert_success(&out);
    for args in [
        &["runs"][..],
        &["runs", "--json"],
        &["show", "latest", "--json"],
    ] {
        let out = ptelab().args(args).args(["--db", &pg]).output().unwrap();
        assert_success(&out);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text.contains(PASSWORD),
            "{args:?} shows the password:\n{text}"
        );
        assert!(text.contains(":***@"), "{args:?}:\n{text}");
    }
}

/// See: #30. A server that accepts the connection and never answers: exit 2
/// within seconds, naming the server. Needs no PostgreSQL.
#[test]
fn a_silent_server_is_an_error_within_seconds() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let _held = std::thread::spawn(move || listener.incoming().take(1).collect::<Vec<_>>());
    let started = std::time::Instant::now();
    let out = ptelab()
        .args(["runs", "--db"])
        .arg(format!(
            "postgres://lab@127.0.0.1:{port}/x?connect_timeout=2"
        ))
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("127.0.0.1 port {port} did not answer")),
        "{err}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

/// See: #30. A server that logs ptelab in and then falls silent (a
/// postmaster stopped mid-session, a dropped network): exit 2 within
/// answer_timeout, naming the server and the remedy. Needs no PostgreSQL:
/// a listener that speaks the login.
#[test]
fn a_server_silent_after_the_login_is_an_error_within_the_bound() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        // The startup message: its length, then the rest of it.
        let mut len = [0u8; 4];
        s.read_exact(&mut len).unwrap();
        let mut rest = vec![0u8; u32::from_be_bytes(len) as usize - 4];
        s.read_exact(&mut rest).unwrap();
        // AuthenticationOk, ReadyForQuery (idle); then silence, the
        // connection held until the client closes it.
        s.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 0, b'Z', 0, 0, 0, 5, b'I'])
            .unwrap();
        let _ = s.read_to_end(&mut Vec::new());
    });
    let started = std::time::Instant::now();
    let out = ptelab()
        .args(["runs", "--db"])
        .arg(format!(
            "postgres://lab:s3cret@127.0.0.1:{port}/lab?sslmode=disable&answer_timeout=2"
        ))
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "the server at 127.0.0.1 port {port} (database lab) did not answer within 2 s"
        )),
        "{err}"
    );
    assert!(err.contains("answer_timeout=SECONDS"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
    assert!(
        elapsed >= std::time::Duration::from_secs(2)
            && elapsed < std::time::Duration::from_secs(10),
        "{elapsed:?}"
    );
}

/// Stops a process (SIGSTOP) for as long as it lives; SIGCONT on drop,
/// whatever the test did.
struct Stopped(i32);

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: kill has no memory effects.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// See: #30. A sweep whose server stops answering mid-run (ptelab's
/// session on it stopped once the run began): every figure measured is
/// printed, then exit 2 within answer_timeout naming the server. Needs
/// root (layouts) and PostgreSQL.
#[test]
fn a_sweep_whose_server_stops_answering_prints_its_figures() {
    if !crate::common::is_root() {
        return crate::common::skip("needs root for layout control");
    }
    let Some(server) = TestServer::start_or_skip("a_sweep_whose_server_stops_answering") else {
        return;
    };
    let url = format!("{}?answer_timeout=2", server.create_database("stops"));
    let mut watch = server.client("stops");
    let mut child = crate::common::ptelab_std()
        .args(["sweep", "mprotect-toggle", "--sizes", "16K,64K,256K"])
        .args([
            "--folios", "4K", "--time", "1s", "--blocks", "1", "--db", &url,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // ptelab's session, once it holds the run it began.
    let started = std::time::Instant::now();
    let backend: i32 = loop {
        let held = watch.query_opt(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND granted",
            &[],
        );
        if let Ok(Some(row)) = held {
            break row.get(0);
        }
        assert!(
            started.elapsed().as_secs() < 120,
            "the sweep never began its run"
        );
        assert!(child.try_wait().unwrap().is_none(), "the sweep ended first");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    // SAFETY: as in Stopped::drop.
    assert_eq!(unsafe { libc::kill(backend, libc::SIGSTOP) }, 0);
    let stopped = Stopped(backend);
    let since = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    let waited = since.elapsed();
    drop(stopped);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "the server at 127.0.0.1 port {} (database stops) did not answer within 2 s",
            server.port
        )),
        "{err}"
    );
    assert!(!err.contains(PASSWORD), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("size_kib"), "no figures printed:\n{text}");
    assert!(text.contains("not all stored"), "{text}");
    // Measuring (up to 3 s) and one wait of answer_timeout; then at once.
    assert!(waited < std::time::Duration::from_secs(15), "{waited:?}");
}
