//! Finding the tracepoint: its id and format from a mounted tracefs, or from
//! one mounted just long enough to read them.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::format::{parse_format, TlbFormat};
use super::{sys, Unavailable};
use crate::procfs;

/// Where tracefs is mounted on current kernels, and where we mount it.
const TRACEFS_DIR: &str = "/sys/kernel/tracing";
/// The tracepoint's directory below a tracefs mount point.
const EVENT_DIR: &str = "events/tlb/tlb_flush";

/// Tracepoint id and format, read once per process.
#[derive(Clone, Debug)]
pub(super) struct TracepointInfo {
    pub(super) id: u64,
    pub(super) format: TlbFormat,
    /// Whether tracefs had to be mounted (and was unmounted) to read them.
    pub(super) mounted_for_read: bool,
}

/// The tracepoint's id and format, loaded once per process.
pub(super) fn tracepoint_info() -> Result<TracepointInfo, Unavailable> {
    // Also serializes our own mount/unmount of tracefs between threads.
    static CACHE: Mutex<Option<TracepointInfo>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(info) = cache.as_ref() {
        return Ok(info.clone());
    }
    let info = load_tracepoint_info()?;
    *cache = Some(info.clone());
    Ok(info)
}

/// Mount points of tracefs instances, the canonical place first.
pub(super) fn tracefs_mounts() -> Vec<PathBuf> {
    let mut out = procfs::mount_points("tracefs");
    out.sort_by_key(|p| p != Path::new(TRACEFS_DIR));
    out.dedup();
    out
}

/// Read the id and format from a mounted tracefs, else mount one at
/// [`TRACEFS_DIR`] for the read and unmount it again.
pub(super) fn load_tracepoint_info() -> Result<TracepointInfo, Unavailable> {
    let mounts = tracefs_mounts();
    if let Some(root) = mounts.first() {
        return read_tracepoint(root, false);
    }
    // Not mounted anywhere: mount it for the duration of the read.
    if let Err(err) = sys::mount_tracefs(TRACEFS_DIR) {
        let why = match err.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => "needs root (CAP_SYS_ADMIN)",
            Some(libc::ENODEV) => "the kernel has no tracefs (CONFIG_TRACING off)",
            Some(libc::ENOENT) => "the mount point does not exist",
            _ => "unexpected error",
        };
        return Err(Unavailable::new(format!(
            "tracefs is not mounted and mounting it at {TRACEFS_DIR} failed: {err} ({why})"
        )));
    }
    let result = read_tracepoint(Path::new(TRACEFS_DIR), true);
    // A failure (EBUSY: someone else started using it meanwhile) leaves it
    // mounted for them; there is nothing else to do about it.
    let _ = sys::umount(TRACEFS_DIR);
    result
}

fn read_tracepoint(root: &Path, mounted_for_read: bool) -> Result<TracepointInfo, Unavailable> {
    let dir = root.join(EVENT_DIR);
    let id_path = dir.join("id");
    let id_text = match fs::read_to_string(&id_path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Unavailable::new(format!(
                "no tlb:tlb_flush tracepoint ({} missing; it exists on x86 kernels with tracing)",
                id_path.display()
            )))
        }
        Err(e) => {
            let hint = if e.kind() == io::ErrorKind::PermissionDenied {
                " (tracefs is readable by root only)"
            } else {
                ""
            };
            return Err(Unavailable::new(format!(
                "cannot read {}: {e}{hint}",
                id_path.display()
            )));
        }
    };
    let id = id_text.trim().parse::<u64>().map_err(|e| {
        Unavailable::new(format!(
            "{} holds {:?}, not an id: {e}",
            id_path.display(),
            id_text.trim()
        ))
    })?;
    let fmt_path = dir.join("format");
    let text = fs::read_to_string(&fmt_path)
        .map_err(|e| Unavailable::new(format!("cannot read {}: {e}", fmt_path.display())))?;
    let format = parse_format(&text)
        .map_err(|e| Unavailable::new(format!("unexpected {}: {e}", fmt_path.display())))?;
    Ok(TracepointInfo {
        id,
        format,
        mounted_for_read,
    })
}
