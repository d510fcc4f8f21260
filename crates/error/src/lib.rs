//! Error kinds that decide the exit code.
//!
//! Exit codes (docs/architecture.md): 0 success, 1 runtime failure, 2 bad usage or
//! input. Anything a user typed wrong is a [`UsageError`]; everything else is an
//! `anyhow::Error` with context and maps to 1.

use std::fmt;

/// Bad usage or input: the message says what was wrong and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Build an `anyhow::Error` carrying a [`UsageError`] (exit code 2).
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// Return early with a [`UsageError`].
#[macro_export]
macro_rules! bail_usage {
    ($($arg:tt)*) => { return Err($crate::usage(format!($($arg)*))) };
}

/// True when `err` (or anything in its chain) is a [`UsageError`].
pub fn is_usage(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|e| e.downcast_ref::<UsageError>().is_some())
}
