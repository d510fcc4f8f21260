//! Where the results database is: an SQLite file (the embedded default, one
//! machine) or a PostgreSQL server that many machines share
//! (`postgres://USER@HOST/DB`, docs/cluster.md). `--db` and `PTELAB_DB` take
//! either; this type is what they parse to.
//!
//! It needs no database code, so a guest build (no `store` feature) parses
//! `--db` the same way and refuses to open it later.

use std::fmt;
use std::path::{Path, PathBuf};

/// A results database as named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// An SQLite file (created when missing).
    File(PathBuf),
    /// A PostgreSQL database, as a `postgres://` or `postgresql://` URL.
    Postgres(String),
}

/// The URL schemes that name a PostgreSQL server (libpq's).
const POSTGRES_SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];

impl Location {
    /// Parse `--db`'s value: a URL with a PostgreSQL scheme is a server,
    /// anything else a file path.
    pub fn parse(s: &str) -> Result<Location, String> {
        if s.is_empty() {
            return Err(
                "an empty database name: give a file path or postgres://USER@HOST/DB".into(),
            );
        }
        if POSTGRES_SCHEMES
            .iter()
            .any(|p| starts_with_ignore_case(s, p))
        {
            return Ok(Location::Postgres(s.to_string()));
        }
        if let Some((scheme, _)) = s.split_once("://") {
            if !scheme.contains('/') {
                return Err(format!(
                    "unknown database URL scheme '{scheme}://': give a file path (SQLite) or \
                     postgres://USER@HOST/DB"
                ));
            }
        }
        Ok(Location::File(PathBuf::from(s)))
    }

    /// For messages, as `Path::display`: the URL without its password.
    pub fn display(&self) -> &Location {
        self
    }

    /// The file, when this is an SQLite database.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Location::File(p) => Some(p),
            Location::Postgres(_) => None,
        }
    }
}

fn starts_with_ignore_case(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len()
        && s.is_char_boundary(prefix.len())
        && s[..prefix.len()].eq_ignore_ascii_case(prefix)
}

impl std::str::FromStr for Location {
    type Err = String;
    fn from_str(s: &str) -> Result<Location, String> {
        Location::parse(s)
    }
}

/// A file prints as its path; a URL prints without its password, so that
/// messages and stored command lines never show it.
impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File(p) => write!(f, "{}", p.display()),
            Location::Postgres(url) => f.write_str(&without_password(url)),
        }
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`; a
/// `password=` parameter is masked the same way.
pub fn without_password(url: &str) -> String {
    crate::text::redact::redact(url)
}

impl From<&Path> for Location {
    fn from(p: &Path) -> Location {
        Location::File(p.to_path_buf())
    }
}

impl From<&PathBuf> for Location {
    fn from(p: &PathBuf) -> Location {
        Location::File(p.clone())
    }
}

impl From<PathBuf> for Location {
    fn from(p: PathBuf) -> Location {
        Location::File(p)
    }
}

impl From<&Location> for Location {
    fn from(l: &Location) -> Location {
        l.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_files_and_servers() {
        assert_eq!(
            Location::parse("ptelab.db").unwrap(),
            Location::File("ptelab.db".into())
        );
        assert_eq!(
            Location::parse("/srv/a://b").unwrap(),
            Location::File("/srv/a://b".into())
        );
        for url in [
            "postgres://u@h/db",
            "postgresql://u@h:5433/db",
            "POSTGRES://u@h/db",
        ] {
            assert_eq!(
                Location::parse(url).unwrap(),
                Location::Postgres(url.into())
            );
        }
        let e = Location::parse("mysql://u@h/db").unwrap_err();
        assert!(e.contains("'mysql://'") && e.contains("postgres://"), "{e}");
        assert!(Location::parse("").is_err());
    }

    #[test]
    fn a_password_never_prints() {
        let l = Location::parse("postgres://lab:s3cret@db.example:5432/ptelab?x=1").unwrap();
        assert_eq!(
            l.to_string(),
            "postgres://lab:***@db.example:5432/ptelab?x=1"
        );
        assert_eq!(
            without_password("postgres://lab@h/db"),
            "postgres://lab@h/db"
        );
        assert_eq!(without_password("postgres://h/db"), "postgres://h/db");
        assert_eq!(
            without_password("postgres://h/db?user=a&password=x&sslmode=disable"),
            "postgres://h/db?user=a&password=***&sslmode=disable"
        );
        // An '@' in the path is not userinfo.
        assert_eq!(
            without_password("postgres://h/db?user=a@b"),
            "postgres://h/db?user=a@b"
        );
    }
}
