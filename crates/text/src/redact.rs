//! Secrets out of every text ptelab stores, prints or leaves in a file: a
//! command line (the run's, the lock holder's, a recovery record's) or a
//! database URL. A password is nobody else's business, and these texts are
//! read by other users of a shared database or a shared machine
//! (docs/cluster.md).
//!
//! Masked with [`MASK`]:
//! - the password of a URL's userinfo (`postgres://lab:s3cret@host` →
//!   `postgres://lab:***@host`), whatever the scheme (a `--mirror` URL may
//!   carry one too);
//! - the value of any `KEY=VALUE` whose key ends in `password` or `passwd`,
//!   in any case: a URL's `password=` parameter, libpq's keyword form
//!   (`password=…`), `PGPASSWORD=…`, `--password=…`.
//!
//! Each rule reads to the end of its value (a whitespace, `&`, or the end of
//! the URL's authority), so a whole command line can be given at once.

/// What a secret is replaced by.
pub const MASK: &str = "***";

/// `text` with every secret masked.
pub fn redact(text: &str) -> String {
    mask_assignments(&mask_userinfo(text))
}

/// A command line's words, each redacted, joined by spaces.
pub fn redact_args<S: AsRef<str>>(args: impl IntoIterator<Item = S>) -> String {
    args.into_iter()
        .map(|a| redact(a.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Mask the password of every `scheme://user:password@` in `text`.
fn mask_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let start = i + 3;
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        // The userinfo ends at the last '@' before the query, fragment or
        // a blank. A '/' is looked past: a password may hold one unencoded,
        // and masking too much is better than showing it.
        let end = after
            .find(|c: char| matches!(c, '?' | '#') || c.is_whitespace())
            .unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rfind('@').and_then(|at| {
            authority[..at]
                .split_once(':')
                .filter(|(u, _)| !u.contains('/'))
                .map(|(u, _)| (u, at))
        }) {
            Some((user, at)) => {
                out.push_str(user);
                out.push(':');
                out.push_str(MASK);
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Mask the value of every `KEY=VALUE` whose key names a password.
fn mask_assignments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        let (before, after) = (&rest[..eq], &rest[eq + 1..]);
        out.push_str(before);
        out.push('=');
        // The key: the word before '=' back to a separator of words or of
        // URL parameters.
        let key = before
            .rsplit(|c: char| c.is_whitespace() || matches!(c, '?' | '&' | ';' | '\'' | '"'))
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        let end = after
            .find(|c: char| c.is_whitespace() || c == '&')
            .unwrap_or(after.len());
        if key.ends_with("password") || key.ends_with("passwd") {
            if !after[..end].is_empty() {
                out.push_str(MASK);
            }
            rest = &after[end..];
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_are_masked() {
        assert_eq!(
            redact("postgres://lab:s3cret@db.example:5432/ptelab?x=1"),
            "postgres://lab:***@db.example:5432/ptelab?x=1"
        );
        assert_eq!(redact("postgres://lab@h/db"), "postgres://lab@h/db");
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
        // An '@' after the authority is not userinfo.
        assert_eq!(
            redact("postgres://h/db?user=a@b"),
            "postgres://h/db?user=a@b"
        );
        // A password holding '@' and ':' is masked whole.
        assert_eq!(redact("postgres://u:p@:ss@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("postgres://u:pa/ss@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("postgres://h/db@x"), "postgres://h/db@x");
        assert_eq!(
            redact("https://me:tok@mirror.example/debian"),
            "https://me:***@mirror.example/debian"
        );
    }

    #[test]
    fn password_assignments_are_masked() {
        assert_eq!(
            redact("postgres://h/db?user=a&password=x&sslmode=disable"),
            "postgres://h/db?user=a&password=***&sslmode=disable"
        );
        assert_eq!(
            redact("host=h Password=s3cret dbname=d"),
            "host=h Password=*** dbname=d"
        );
        assert_eq!(
            redact("PGPASSWORD=s3cret ptelab runs"),
            "PGPASSWORD=*** ptelab runs"
        );
        assert_eq!(
            redact("--password=x --passwd=y"),
            "--password=*** --passwd=***"
        );
        assert_eq!(redact("--tag=password"), "--tag=password");
        assert_eq!(redact("password="), "password=");
    }

    #[test]
    fn a_command_line_keeps_everything_else() {
        let line = redact_args([
            "ptelab",
            "sweep",
            "mprotect-toggle",
            "--db",
            "postgres://lab:s3cret@db.example/ptelab?sslmode=require",
            "--sizes=400K,4M",
        ]);
        assert_eq!(
            line,
            "ptelab sweep mprotect-toggle --db postgres://lab:***@db.example/ptelab?sslmode=require \
             --sizes=400K,4M"
        );
        assert!(!redact(&line).contains("s3cret"));
        // Idempotent: a stored line redacted again reads the same.
        assert_eq!(redact(&line), line);
        assert_eq!(
            redact("ptelab runs --db=postgresql://u:pw@h/d"),
            "ptelab runs --db=postgresql://u:***@h/d"
        );
    }
}
