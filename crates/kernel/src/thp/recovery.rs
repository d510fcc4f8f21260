//! The recovery file: the originals of the knobs the lock holder changed,
//! written before the first change and deleted by a clean restore, so that
//! the next guard (or the signal thread) can put them back.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::knobs::{is_known_knob, is_plausible_value, knob_write_lock, write_knob};
use super::KnobPaths;
use crate::procfs;

/// Schema tag of the recovery file.
const RECOVERY_SCHEMA: &str = "ptelab/knob-recovery/v1";

/// What the recovery file holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovery {
    pub schema: String,
    pub pid: u32,
    /// Process start time (clock ticks since boot, /proc/PID/stat field 22):
    /// tells a live process from a reused pid.
    pub start_time: u64,
    pub cmdline: String,
    pub sysfs: PathBuf,
    /// Knob → value before the writer changed it.
    pub original: BTreeMap<String, String>,
}

impl Recovery {
    pub(super) fn new(paths: &KnobPaths) -> Recovery {
        let pid = std::process::id();
        Recovery {
            schema: RECOVERY_SCHEMA.to_owned(),
            pid,
            start_time: procfs::start_time(pid).unwrap_or(0),
            cmdline: procfs::own_cmdline(),
            sysfs: paths.sysfs.clone(),
            original: BTreeMap::new(),
        }
    }

    /// Whether the writing process is still running (same pid, same start time).
    pub fn writer_alive(&self) -> bool {
        if !procfs::pid_alive(self.pid) {
            return false;
        }
        match procfs::start_time(self.pid) {
            Some(t) => self.start_time == 0 || t == self.start_time,
            None => true,
        }
    }
}

pub(super) fn write_recovery(path: &Path, rec: &Recovery) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let json = serde_json::to_vec_pretty(rec)?;
    let write = || -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        // Private even when a temporary of an older ptelab was left.
        f.set_permissions(fs::Permissions::from_mode(0o600))?;
        f.write_all(&json)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    };
    write().with_context(|| format!("writing THP knob recovery file {}", path.display()))
}

/// Read the recovery file: `None` when absent; an error when unreadable,
/// malformed, not ours, or naming things that are not THP knobs.
pub fn read_recovery(path: &Path) -> anyhow::Result<Option<Recovery>> {
    let mut f = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(e)
                .with_context(|| format!("opening THP knob recovery file {}", path.display()))
        }
    };
    let euid = procfs::euid();
    let meta = f.metadata()?;
    if meta.uid() != euid {
        bail!(
            "ignoring THP knob recovery file {}: owned by uid {}, not by us (uid {euid})",
            path.display(),
            meta.uid()
        );
    }
    let mut text = String::new();
    f.read_to_string(&mut text)
        .with_context(|| format!("reading {}", path.display()))?;
    let rec: Recovery = serde_json::from_str(&text)
        .with_context(|| format!("parsing THP knob recovery file {}", path.display()))?;
    if rec.schema != RECOVERY_SCHEMA {
        bail!(
            "THP knob recovery file {} has schema '{}', expected '{RECOVERY_SCHEMA}'",
            path.display(),
            rec.schema
        );
    }
    if let Some((k, v)) = rec
        .original
        .iter()
        .find(|(k, v)| !is_known_knob(k) || !is_plausible_value(v))
    {
        bail!(
            "THP knob recovery file {} names '{k}' = '{v}', which is not a THP knob value",
            path.display()
        );
    }
    Ok(Some(rec))
}

/// Write back every original in `rec` under `root` (those that differ), then
/// delete the recovery file. Returns the knobs written. Callers hold
/// [`knob_write_lock`]. On error the file stays for the next attempt.
pub(super) fn restore_recorded(
    root: &Path,
    recovery: &Path,
    original: &BTreeMap<String, String>,
) -> anyhow::Result<Vec<String>> {
    let mut written = Vec::new();
    let mut errors = Vec::new();
    for (name, value) in original {
        match write_knob(root, name, value) {
            Ok(true) => written.push(format!("{name}={value}")),
            Ok(false) => {}
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    if !errors.is_empty() {
        bail!(
            "could not restore THP knobs ({}); the originals stay in {} and the next ptelab run retries",
            errors.join("; "),
            recovery.display()
        );
    }
    match fs::remove_file(recovery) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", recovery.display())),
    }
    Ok(written)
}

/// Remove `<recovery stem>.tmp.<pid>` files left by a writer killed between
/// write and rename (only the lock holder writes them, and that is us now).
fn remove_stale_temporaries(recovery: &Path) {
    let (Some(dir), Some(stem)) = (recovery.parent(), recovery.file_stem()) else {
        return;
    };
    let prefix = format!("{}.tmp.", stem.to_string_lossy());
    let me = std::process::id().to_string();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name
            .strip_prefix(&prefix)
            .is_some_and(|pid| pid != me && pid.bytes().all(|b| b.is_ascii_digit()))
        {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Forced restore of this process's own recovery file (the signal thread,
/// which already holds [`knob_write_lock`]).
pub(crate) fn restore_from(rec: &Recovery, recovery: &Path) -> anyhow::Result<Vec<String>> {
    restore_recorded(&rec.sysfs, recovery, &rec.original)
}

/// Restore knobs from the recovery file at `paths.recovery`, if there is one.
/// Callers own the lock. Returns a message for stderr when something was left.
pub fn recover(paths: &KnobPaths) -> anyhow::Result<Option<String>> {
    let _w = knob_write_lock();
    remove_stale_temporaries(&paths.recovery);
    let Some(rec) = read_recovery(&paths.recovery)? else {
        return Ok(None);
    };
    let who = format!("pid {} ({})", rec.pid, rec.cmdline);
    let state = if rec.pid == std::process::id() {
        "an earlier guard of this process"
    } else if rec.writer_alive() {
        "still running but no longer holding the lock"
    } else {
        "no longer running"
    };
    let written = restore_recorded(&paths.sysfs, &paths.recovery, &rec.original)?;
    Ok(Some(if written.is_empty() {
        format!(
            "ptelab: THP knobs left recorded by {who}, {state}, already read as before; removed {}",
            paths.recovery.display()
        )
    } else {
        format!(
            "ptelab: restored THP knobs changed by {who}, {state}: {}",
            written.join(", ")
        )
    }))
}
