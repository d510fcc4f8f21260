//! The system-wide knob lock: flock(2) on the lock file, with an in-process
//! queue in front (flock locks belong to open file descriptions, so threads
//! of one process must queue before it).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Condvar, Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::procfs;

/// In-process queue in front of flock(2), per lock path: flock locks belong
/// to open file descriptions, so two guards of one process would deadlock
/// (same thread) or need this to queue (different threads).
pub(super) fn holders() -> &'static (Mutex<HashMap<PathBuf, ThreadId>>, Condvar) {
    static H: OnceLock<(Mutex<HashMap<PathBuf, ThreadId>>, Condvar)> = OnceLock::new();
    H.get_or_init(|| (Mutex::new(HashMap::new()), Condvar::new()))
}

pub(super) fn release_holder(lock: &Path) {
    let (m, cv) = holders();
    m.lock().unwrap_or_else(|e| e.into_inner()).remove(lock);
    cv.notify_all();
}

/// Open the lock file and take flock(LOCK_EX), polling so that SIGINT can
/// stop the wait; then write our pid and command line (secrets masked) into
/// it, the file readable by its owner only.
pub(super) fn take_flock(
    path: &Path,
    on_wait: &mut dyn FnMut(&str),
    flag: &AtomicBool,
) -> anyhow::Result<File> {
    let open = |write: bool| {
        OpenOptions::new()
            .read(true)
            .write(write)
            .create(write)
            .truncate(false)
            // Only its owner reads who holds it (root: knobs need root).
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    };
    let (mut file, writable) = match open(true) {
        Ok(f) => (f, true),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => (
            open(false).with_context(|| format!("opening THP knob lock {}", path.display()))?,
            false,
        ),
        Err(e) => {
            return Err(e).with_context(|| format!("opening THP knob lock {}", path.display()))
        }
    };
    let mut told = false;
    loop {
        // SAFETY: flock on a valid open descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            break;
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EWOULDBLOCK) | Some(libc::EINTR) => {}
            _ => return Err(err).with_context(|| format!("locking {}", path.display())),
        }
        if !told {
            let mut holder = String::new();
            let _ = fs::read_to_string(path).map(|s| holder = s);
            on_wait(&wait_message(&holder));
            told = true;
        }
        if flag.load(std::sync::atomic::Ordering::Relaxed) {
            bail!(
                "interrupted while waiting for the THP knob lock {}",
                path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // A lock file made by an older ptelab was world-readable: make it
    // private before writing into it, or write nothing.
    let private = writable
        && file
            .set_permissions(fs::Permissions::from_mode(0o600))
            .is_ok();
    if private {
        let line = format!("{} {}\n", std::process::id(), procfs::own_cmdline());
        // Overwrite, then cut: a waiter never reads an empty file.
        let w = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(line.as_bytes()))
            .and_then(|_| file.set_len(line.len() as u64));
        w.with_context(|| format!("writing holder into {}", path.display()))?;
    }
    Ok(file)
}

/// `"1234 ptelab sweep ..."` → `"waiting for the THP knob lock held by pid 1234 (ptelab sweep ...)"`.
pub fn wait_message(holder: &str) -> String {
    let holder = holder.trim();
    match holder.split_once(' ').map(|(p, c)| (p.parse::<u32>(), c)) {
        Some((Ok(pid), cmd)) => format!("waiting for the THP knob lock held by pid {pid} ({cmd})"),
        _ => match holder.parse::<u32>() {
            Ok(pid) => format!("waiting for the THP knob lock held by pid {pid}"),
            Err(_) => "waiting for the THP knob lock held by another process".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_messages() {
        assert_eq!(
            wait_message("1234 ptelab sweep mprotect-toggle\n"),
            "waiting for the THP knob lock held by pid 1234 (ptelab sweep mprotect-toggle)"
        );
        assert_eq!(
            wait_message("77\n"),
            "waiting for the THP knob lock held by pid 77"
        );
        assert_eq!(
            wait_message(""),
            "waiting for the THP knob lock held by another process"
        );
    }
}
