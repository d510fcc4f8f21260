//! The PostgreSQL password file (`~/.pgpass`, or the file `PGPASSFILE`
//! names), read as libpq reads it (`passwordFromFile` in libpq's
//! `fe-connect.c`; the format is in PostgreSQL's manual, "The Password
//! File"):
//!
//! - each line is `hostname:port:database:username:password`; `#` starts a
//!   comment line; blank lines are skipped;
//! - a field of only `*` matches anything; `\:` and `\\` stand for `:` and
//!   `\` (a backslash escapes the next character);
//! - the first line whose four fields match gives the password, which ends
//!   at the first unescaped `:` and is de-escaped;
//! - a Unix socket in the default socket directory matches as `localhost`
//!   (another socket directory matches as its path);
//! - a file that is not a plain file, or that its group or others may read,
//!   write or run, is ignored with a warning.
//!
//! No crate reads it this way (a crate named for it exists for neither
//! crates.io nor the `postgres` crate), so this is the small parser.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// libpq's default socket directories: upstream's and Debian's (where
/// Debian's libpq looks). A socket there is `localhost` in the file.
const DEFAULT_SOCKET_DIRS: [&str; 3] = ["/tmp", "/var/run/postgresql", "/run/postgresql"];

/// What a line must match: the connection's host, port, database and user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    pub host: String,
    pub port: String,
    pub dbname: String,
    pub user: String,
}

impl Key {
    /// The key of a connection to `host` (a name, an address, or a Unix
    /// socket's directory, which starts with `/`).
    pub fn new(host: &str, port: u16, dbname: &str, user: &str) -> Key {
        let dir = host.trim_end_matches('/');
        let host = if host.is_empty() || DEFAULT_SOCKET_DIRS.contains(&dir) {
            "localhost"
        } else {
            host
        };
        Key {
            host: host.to_string(),
            port: port.to_string(),
            dbname: dbname.to_string(),
            user: user.to_string(),
        }
    }
}

/// The password the file at `path` gives for `key`: `Ok(None)` when the file
/// does not exist or no line matches, `Err(warning)` when the file is
/// ignored (not a plain file, readable by others, unreadable).
pub fn lookup(path: &Path, key: &Key) -> Result<Option<String>, String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("password file \"{}\": {e}", path.display())),
    };
    if !meta.is_file() {
        return Err(format!(
            "password file \"{}\" is not a plain file",
            path.display()
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "password file \"{}\" has group or world access; permissions should be u=rw \
             (0600) or less",
            path.display()
        ));
    }
    let text =
        std::fs::read(path).map_err(|e| format!("password file \"{}\": {e}", path.display()))?;
    Ok(find(&String::from_utf8_lossy(&text), key))
}

/// The password of the first line of `text` that matches `key`.
pub fn find(text: &str, key: &Key) -> Option<String> {
    text.lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .find_map(|line| {
            let rest = field_matches(line, &key.host)?;
            let rest = field_matches(rest, &key.port)?;
            let rest = field_matches(rest, &key.dbname)?;
            let rest = field_matches(rest, &key.user)?;
            Some(unescape_password(rest))
        })
        // libpq takes an empty password as none.
        .filter(|pw| !pw.is_empty())
}

/// When the line's first field matches `token` (`*`, or the token with
/// escapes undone), the rest of the line after that field's `:`.
fn field_matches<'a>(line: &'a str, token: &str) -> Option<&'a str> {
    if let Some(rest) = line.strip_prefix("*:") {
        return Some(rest);
    }
    let mut token = token.chars();
    let mut chars = line.char_indices();
    while let Some((i, c)) = chars.next() {
        let c = match c {
            '\\' => match chars.next() {
                Some((_, escaped)) => escaped,
                None => return None,
            },
            ':' => return token.next().is_none().then(|| &line[i + 1..]),
            c => c,
        };
        if token.next() != Some(c) {
            return None;
        }
    }
    None
}

/// The password field: up to the first unescaped `:`, escapes undone.
fn unescape_password(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        match c {
            ':' => break,
            '\\' => match chars.next() {
                Some(escaped) => out.push(escaped),
                None => out.push('\\'),
            },
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(host: &str, port: u16, db: &str, user: &str) -> Key {
        Key::new(host, port, db, user)
    }

    #[test]
    fn the_first_matching_line_wins_and_stars_match_anything() {
        let text = "\
# comment: lab:5432:*:*:not-this
db.example:5432:ptelab:lab:first
db.example:5432:ptelab:lab:second
*:5433:*:lab:any-host-5433

*:*:*:*:fallback
";
        assert_eq!(
            find(text, &key("db.example", 5432, "ptelab", "lab")).as_deref(),
            Some("first")
        );
        assert_eq!(
            find(text, &key("other", 5433, "x", "lab")).as_deref(),
            Some("any-host-5433")
        );
        assert_eq!(
            find(text, &key("db.example", 5432, "ptelab", "else")).as_deref(),
            Some("fallback")
        );
        // A field must match whole, not as a prefix.
        assert_eq!(
            find(
                "db.example:5432:pte:lab:short\n",
                &key("db.example", 5432, "ptelab", "lab")
            ),
            None
        );
        assert_eq!(
            find(
                "db.example:5432:ptelab:lab:x\n",
                &key("db.example", 5432, "pte", "lab")
            ),
            None
        );
        // `*` is a wildcard only as a whole field.
        assert_eq!(
            find("db*:5432:*:*:x\n", &key("db.example", 5432, "d", "u")),
            None
        );
        assert_eq!(find("", &key("h", 1, "d", "u")), None);
        // Windows line ends.
        assert_eq!(
            find("h:1:d:u:pw\r\n", &key("h", 1, "d", "u")).as_deref(),
            Some("pw")
        );
    }

    #[test]
    fn escapes_are_undone_in_fields_and_password() {
        // A database named `a:b` and a user `c\d`; the password `p:w\x`.
        let text = r"h:5432:a\:b:c\\d:p\:w\\x";
        assert_eq!(
            find(text, &key("h", 5432, "a:b", r"c\d")).as_deref(),
            Some(r"p:w\x")
        );
        assert_eq!(find(text, &key("h", 5432, "a", r"c\d")), None);
        // The password ends at an unescaped colon; an escaped letter is the
        // letter.
        assert_eq!(
            find(r"h:5432:d:u:se\cret:ignored", &key("h", 5432, "d", "u")).as_deref(),
            Some("secret")
        );
        // An unescaped `*:` after text is no wildcard: the field is literal.
        assert_eq!(
            find(r"\*:5432:d:u:star", &key("*", 5432, "d", "u")).as_deref(),
            Some("star")
        );
        // An empty password is none, and stops the search as libpq does.
        assert_eq!(find("h:1:d:u:\n*:*:*:*:x", &key("h", 1, "d", "u")), None);
        // A line with too few fields matches nothing.
        assert_eq!(find("h:1:d", &key("h", 1, "d", "u")), None);
    }

    #[test]
    fn a_default_socket_directory_is_localhost() {
        for dir in ["/var/run/postgresql", "/run/postgresql/", "/tmp"] {
            assert_eq!(key(dir, 5432, "d", "u").host, "localhost");
        }
        let text = "localhost:5432:d:u:local\n/srv/pg:5432:d:u:srv\n";
        assert_eq!(
            find(text, &key("/run/postgresql", 5432, "d", "u")).as_deref(),
            Some("local")
        );
        assert_eq!(
            find(text, &key("/srv/pg", 5432, "d", "u")).as_deref(),
            Some("srv")
        );
        assert_eq!(key("db.example", 5432, "d", "u").host, "db.example");
    }

    #[test]
    fn a_file_others_may_read_is_ignored_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgpass");
        let k = key("h", 5432, "d", "u");
        assert_eq!(lookup(&path, &k), Ok(None), "a missing file is no error");
        std::fs::write(&path, "h:5432:d:u:pw\n").unwrap();
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(lookup(&path, &k), Ok(Some("pw".into())), "{mode:o}");
        }
        for mode in [0o640, 0o604, 0o610, 0o660, 0o644] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let warning = lookup(&path, &k).unwrap_err();
            assert!(
                warning.contains("group or world access") && warning.contains("0600"),
                "{mode:o}: {warning}"
            );
            assert!(!warning.contains("pw\n"), "{warning}");
        }
        let warning = lookup(dir.path(), &k).unwrap_err();
        assert!(warning.contains("not a plain file"), "{warning}");
    }
}
