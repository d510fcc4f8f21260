//! SIGINT/SIGTERM/SIGHUP for a process that may have changed THP knobs.
//!
//! One signal-hook thread, installed once by [`interrupted`] (and by every
//! `KnobGuard::acquire`). It replaces the default "die now" of the three
//! signals:
//!
//! 1. First signal: set the flag [`interrupted`] returns, tell the user on
//!    stderr. Long loops poll the flag and unwind; the `KnobGuard` restores
//!    the knobs on drop.
//! 2. Second signal, or a knob guard still active [`GRACE`] after the first
//!    (the program is stuck somewhere that does not poll): restore from the
//!    recovery file of every guard active in this process and exit with
//!    128 + signal number (130 for SIGINT).
//!
//! The forced restore takes the process-wide knob write mutex and never
//! releases it, so no knob write of another thread can follow it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use super::thp;

/// How long after the first signal a still-active knob guard is considered stuck.
pub const GRACE: Duration = Duration::from_secs(5);

static FLAG: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();
/// Recovery files of the guards of this process that have changed knobs.
static ACTIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Install SIGINT/SIGTERM/SIGHUP handling once; returns the flag long loops poll.
pub fn interrupted() -> &'static AtomicBool {
    INSTALL.call_once(install);
    &FLAG
}

/// Sleep until `at`, waking every 100 ms to notice SIGINT/SIGTERM/SIGHUP;
/// false when interrupted (then or before).
pub fn idle_until(at: std::time::Instant) -> bool {
    let flag = interrupted();
    loop {
        if flag.load(Ordering::SeqCst) {
            return false;
        }
        let now = std::time::Instant::now();
        if now >= at {
            return true;
        }
        std::thread::sleep((at - now).min(Duration::from_millis(100)));
    }
}

fn install() {
    let mut signals = match Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ptelab: warning: cannot install signal handling ({e}); an interrupted run leaves THP knobs for the next run to restore");
            return;
        }
    };
    let spawned = std::thread::Builder::new().name("ptelab-signals".into()).spawn(move || {
        let mut seen = 0u32;
        for sig in signals.forever() {
            seen += 1;
            if seen == 1 {
                FLAG.store(true, Ordering::SeqCst);
                if any_active() {
                    eprintln!("ptelab: interrupted: finishing the current step and restoring THP knobs (signal again to stop now)");
                    let _ = std::thread::Builder::new().name("ptelab-watchdog".into()).spawn(move || {
                        std::thread::sleep(GRACE);
                        if any_active() {
                            eprintln!("ptelab: still holding THP knobs {}s after the signal: restoring them and exiting", GRACE.as_secs());
                            force_restore_and_exit(sig);
                        }
                    });
                }
            } else {
                force_restore_and_exit(sig);
            }
        }
    });
    if let Err(e) = spawned {
        eprintln!("ptelab: warning: cannot start the signal thread ({e})");
    }
}

fn any_active() -> bool {
    !ACTIVE.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
}

/// A guard recorded its first change in `recovery`.
pub(crate) fn register_active(recovery: &Path) {
    let mut a = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
    if !a.iter().any(|p| p == recovery) {
        a.push(recovery.to_owned());
    }
}

/// The guard using `recovery` restored everything.
pub(crate) fn unregister_active(recovery: &Path) {
    ACTIVE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|p| p != recovery);
}

/// Restore every active guard's knobs from its recovery file, then exit.
fn force_restore_and_exit(sig: i32) -> ! {
    // Held until exit: no knob write of another thread can follow ours.
    let w = thp::knob_write_lock();
    std::mem::forget(w);
    let active = ACTIVE.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for recovery in active {
        match thp::read_recovery(&recovery) {
            Ok(Some(rec)) => match thp::restore_from(&rec, &recovery) {
                Ok(written) if written.is_empty() => {}
                Ok(written) => eprintln!("ptelab: restored THP knobs: {}", written.join(", ")),
                Err(e) => eprintln!("ptelab: error: {e:#}"),
            },
            Ok(None) => {}
            Err(e) => eprintln!("ptelab: error: {e:#}"),
        }
    }
    std::process::exit(128 + sig)
}
