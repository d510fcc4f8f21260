//! THP/mTHP knobs under /sys/kernel/mm/transparent_hugepage: read them, set
//! only what a folio spec needs, and restore every knob touched on success,
//! error, panic, SIGINT and SIGTERM. A system-wide lock serializes ptelab
//! processes that change knobs (they are global).
//!
//! # Design: lock, recovery file, signals
//!
//! The knobs are machine-wide, so every knob ptelab changes is changed under
//! a [`KnobGuard`], and every guard holds one lock:
//!
//! - **Lock.** `flock(2)` exclusive on [`LOCK_PATH`] (`/run/lock/ptelab.lock`,
//!   opened `O_CLOEXEC|O_NOFOLLOW` and never deleted, so the lock is never split
//!   between two inodes). The holder writes `"<pid> <command line>"` into it; a
//!   second ptelab reads that, calls `on_wait("waiting for the THP knob lock
//!   held by pid 1234 (ptelab sweep ...)")` and polls every 100 ms (giving up if
//!   SIGINT arrives). Threads of one process queue on an in-process mutex first
//!   (flock does not nest), and a nested acquire on one thread is an error, not
//!   a deadlock. The kernel drops the flock when the holder dies, however it
//!   dies.
//! - **Recovery file.** Before a guard changes a knob for the first time it
//!   records the knob's original value in [`RECOVERY_PATH`]
//!   (`/run/lock/ptelab.knobs.json`: pid, process start time, command line,
//!   original values; written to a temporary file and renamed). A clean
//!   restore deletes the file. A guard that finds the file at acquire owns the
//!   lock, so the writer is dead (SIGKILL, OOM, power loss of the process) or
//!   failed to restore: the new guard restores from the file and says so on
//!   stderr. Keys and values in the file are validated, and a file not owned
//!   by the current user is ignored (`/run/lock` is world-writable).
//! - **Restore.** [`KnobGuard::restore`] and `Drop` (normal return, `?`
//!   errors, panics with unwinding) write back every recorded original whose
//!   current value differs, then delete the recovery file. A knob is only ever
//!   written when its value differs from the target.
//! - **Signals** (`super::signals`). Acquiring a guard installs (once) a
//!   signal-hook thread for SIGINT, SIGTERM and SIGHUP, which replaces their
//!   default "die now". The first signal sets the flag returned by
//!   [`interrupted`]; long loops poll it, return, and the guard restores on
//!   drop. A second signal, or a guard still held 5 s after the first one
//!   (a stuck program), makes the signal thread restore from the recovery
//!   files of the guards active in this process and exit with 128 + signal.
//!   One process-wide mutex orders every knob write (configure, restore,
//!   forced restore), and the forced path never releases it, so no knob
//!   write of the main thread can land after the forced restore.
//!
//! Every knob therefore reads the same after a run as before it: directly for
//! every exit except SIGKILL-like deaths, and at the next ptelab start for
//! those.
//!
//! Paths are injectable ([`KnobPaths`]) so unit tests run on a fake sysfs tree
//! in a temporary directory; tests against the real sysfs are gated on root.
//!
//! The parts: `knobs` (read, offered sizes, write one knob), `plan` (the pure
//! policy per folio spec), `lock` (flock and the in-process queue),
//! `recovery` (the recovery file), `guard` ([`KnobGuard`]).

mod guard;
mod knobs;
mod lock;
mod plan;
mod recovery;
#[cfg(test)]
mod testing;

#[cfg(test)]
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use super::signals;

pub use guard::KnobGuard;
pub(crate) use knobs::knob_write_lock;
pub use knobs::{check_offered, offered_mthp_sizes, read_knobs, thp_available};
pub use recovery::read_recovery;
pub(crate) use recovery::restore_from;

/// The THP sysfs directory.
pub const THP_ROOT: &str = "/sys/kernel/mm/transparent_hugepage";
/// The system-wide lock every ptelab process that changes knobs takes.
pub const LOCK_PATH: &str = "/run/lock/ptelab.lock";
/// Originals of the knobs changed by the lock holder, for crash recovery.
pub const RECOVERY_PATH: &str = "/run/lock/ptelab.knobs.json";

/// Where the knobs, the lock and the recovery file live. [`KnobPaths::system`]
/// is the real machine; tests point all three into a temporary directory.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KnobPaths {
    /// The THP sysfs directory.
    pub sysfs: PathBuf,
    /// The flock(2) lock file.
    pub lock: PathBuf,
    /// The recovery file.
    pub recovery: PathBuf,
}

impl KnobPaths {
    /// The real machine: [`THP_ROOT`], [`LOCK_PATH`], [`RECOVERY_PATH`].
    pub fn system() -> KnobPaths {
        KnobPaths {
            sysfs: PathBuf::from(THP_ROOT),
            lock: PathBuf::from(LOCK_PATH),
            recovery: PathBuf::from(RECOVERY_PATH),
        }
    }

    #[cfg(test)]
    /// All three under `dir` (`dir/thp`, `dir/ptelab.lock`, `dir/ptelab.knobs.json`).
    pub fn under(dir: &Path) -> KnobPaths {
        KnobPaths {
            sysfs: dir.join("thp"),
            lock: dir.join("ptelab.lock"),
            recovery: dir.join("ptelab.knobs.json"),
        }
    }
}

/// Install SIGINT/SIGTERM handling once; returns the flag long loops poll.
pub fn interrupted() -> &'static AtomicBool {
    signals::interrupted()
}
