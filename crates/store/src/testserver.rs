//! A throwaway PostgreSQL server for tests: `initdb` into a temporary
//! directory, `pg_ctl start` on a free port of 127.0.0.1 (and a Unix socket in
//! that directory), a superuser `ptelab` with a password (scram-sha-256 over
//! TCP; a socket trusts), optionally with TLS on ([`TestServer::start_with`],
//! certificates from [`Certs`]). Dropping it stops the server and removes its
//! files, also when the test panics.
//!
//! As root (CI), the server runs as the `postgres` user, since PostgreSQL
//! refuses to run as root. Where PostgreSQL is not installed the test skips,
//! saying why; on CI (`CI` set) it fails instead, since `./setup` installs it.
//!
//! Shared by the store's unit tests and the integration tests (`tests/`
//! includes this file by path), so it uses nothing of ptelab.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The superuser's password.
pub const PASSWORD: &str = "ptelab-test-secret";

/// A running server; stopped and removed on drop.
pub struct TestServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// The `postgres` user's uid and gid when running as root.
    owner: Option<(u32, u32)>,
    pub port: u16,
}

/// A throwaway CA and a server certificate it signed.
pub struct Certs {
    /// The CA's certificate (PEM): what a client trusts.
    pub ca_pem: String,
    /// The server's certificate (PEM) and its key.
    pub cert_pem: String,
    pub key_pem: String,
}

impl Certs {
    /// A new CA, and a certificate for `names` (host names or IP
    /// addresses) signed by it.
    pub fn new(names: &[&str]) -> Certs {
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "ptelab test CA");
        ca.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let ca =
            rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().unwrap()).unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut server = rcgen::CertificateParams::new(names).unwrap();
        server
            .distinguished_name
            .push(rcgen::DnType::CommonName, "ptelab test server");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = server.signed_by(&key, &ca).unwrap();
        Certs {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

impl TestServer {
    /// Start a server, or say why one cannot be started here.
    pub fn start() -> Result<TestServer, String> {
        TestServer::start_with(None)
    }

    /// Start a server, with TLS on (`ssl = on`) presenting the server
    /// certificate of `tls` when given.
    pub fn start_with(tls: Option<&Certs>) -> Result<TestServer, String> {
        let bin = bindir().ok_or(
            "PostgreSQL's initdb and pg_ctl are not installed (./setup installs Debian's \
             postgresql)",
        )?;
        // SAFETY: getuid has no preconditions.
        let owner =
            if unsafe { libc::getuid() } == 0 {
                Some(user_ids("postgres").ok_or(
                    "running as root and there is no `postgres` user to run the server as",
                )?)
            } else {
                None
            };
        let dir = tempfile::Builder::new()
            .prefix("ptelab-pg-")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        let mut server = TestServer {
            dir,
            bin,
            owner,
            port: 0,
        };
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(server.dir.path(), Some(uid), Some(gid))
                .map_err(|e| format!("chown the server's directory: {e}"))?;
        }
        std::fs::set_permissions(server.dir.path(), std::fs::Permissions::from_mode(0o700))
            .map_err(|e| e.to_string())?;
        let pwfile = server.dir.path().join("pw");
        std::fs::write(&pwfile, PASSWORD).map_err(|e| e.to_string())?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&pwfile, Some(uid), Some(gid)).map_err(|e| e.to_string())?;
        }
        let mut ssl = String::new();
        if let Some(certs) = tls {
            for (name, pem) in [
                ("server.crt", &certs.cert_pem),
                ("server.key", &certs.key_pem),
            ] {
                let path = server.dir.path().join(name);
                std::fs::write(&path, pem).map_err(|e| e.to_string())?;
                // The server refuses a key others may read.
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| e.to_string())?;
                if let Some((uid, gid)) = owner {
                    std::os::unix::fs::chown(&path, Some(uid), Some(gid))
                        .map_err(|e| e.to_string())?;
                }
            }
            ssl = format!(
                " -c ssl=on -c ssl_cert_file={0}/server.crt -c ssl_key_file={0}/server.key",
                path_str(server.dir.path())
            );
        }
        let data = server.data();
        server.run(
            "initdb",
            &[
                "-D",
                path_str(&data),
                "-U",
                "ptelab",
                "--pwfile",
                path_str(&pwfile),
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )?;
        // A port found free may be taken before the server binds it: retry.
        let mut last = String::new();
        for _ in 0..5 {
            server.port = free_port()?;
            let opts = format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c \
                 synchronous_commit=off -c full_page_writes=off -c max_connections=60{ssl}",
                server.port,
                path_str(server.dir.path())
            );
            let log = server.dir.path().join("log");
            match server.run(
                "pg_ctl",
                &[
                    "-D",
                    path_str(&data),
                    "-l",
                    path_str(&log),
                    "-o",
                    &opts,
                    "-w",
                    "start",
                ],
            ) {
                Ok(()) => return Ok(server),
                Err(e) => {
                    last = format!("{e}\n{}", std::fs::read_to_string(&log).unwrap_or_default())
                }
            }
        }
        Err(format!("the server did not start: {last}"))
    }

    /// Start a server, or skip the test (None) saying why: on CI, where
    /// `./setup` installs PostgreSQL, failing instead.
    pub fn start_or_skip(test: &str) -> Option<TestServer> {
        TestServer::start_or_skip_with(test, None)
    }

    /// [`TestServer::start_with`], or skip the test as
    /// [`TestServer::start_or_skip`] does.
    pub fn start_or_skip_with(test: &str, tls: Option<&Certs>) -> Option<TestServer> {
        match TestServer::start_with(tls) {
            Ok(s) => Some(s),
            Err(why) if std::env::var_os("CI").is_some() => {
                panic!("{test}: no PostgreSQL server on CI: {why}")
            }
            Err(why) => {
                eprintln!("skipping {test}: {why}");
                None
            }
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The server's directory (its Unix socket is there).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn run(&self, tool: &str, args: &[&str]) -> Result<(), String> {
        let mut cmd = Command::new(self.bin.join(tool));
        cmd.args(args).current_dir(self.dir.path());
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid).gid(gid);
        }
        let out: Output = cmd.output().map_err(|e| format!("{tool}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{tool} {}: {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// The URL of database `db` for the superuser, with the password.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://ptelab:{PASSWORD}@127.0.0.1:{}/{db}", self.port)
    }

    /// Create an empty database; returns its URL.
    pub fn create_database(&self, db: &str) -> String {
        let mut c = postgres::Client::connect(&self.url("postgres"), postgres::NoTls)
            .expect("connect to the test server");
        c.batch_execute(&format!("CREATE DATABASE \"{db}\""))
            .expect("create a database");
        self.url(db)
    }

    /// A client on database `db`, to look under the store.
    pub fn client(&self, db: &str) -> postgres::Client {
        postgres::Client::connect(&self.url(db), postgres::NoTls).expect("connect")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let data = self.data();
        if let Err(e) = self.run(
            "pg_ctl",
            &["-D", path_str(&data), "-m", "immediate", "-w", "stop"],
        ) {
            // Nothing was started (initdb failed), or it is already gone.
            if data.join("postmaster.pid").exists() {
                eprintln!("test PostgreSQL server: stop failed: {e}");
            }
        }
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("temporary paths are UTF-8")
}

/// Where initdb and pg_ctl are: Debian keeps them out of PATH, in
/// /usr/lib/postgresql/VERSION/bin (the newest wins).
fn bindir() -> Option<PathBuf> {
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    debian.sort();
    if let Some((_, bin)) = debian.pop() {
        return Some(bin);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .find(|p| p.join("initdb").exists() && p.join("pg_ctl").exists())
    })
}

/// uid and gid of a user, from /etc/passwd.
fn user_ids(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 3 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

/// A TCP port of 127.0.0.1 that is free now.
pub fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("find a free port: {e}"))
}
