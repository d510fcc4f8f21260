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

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Condvar, Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::signals;
use crate::error::usage;
use crate::workload::folio::{FolioSpec, PMD_SIZE};

/// The THP sysfs directory.
pub const THP_ROOT: &str = "/sys/kernel/mm/transparent_hugepage";
/// The system-wide lock every ptelab process that changes knobs takes.
pub const LOCK_PATH: &str = "/run/lock/ptelab.lock";
/// Originals of the knobs changed by the lock holder, for crash recovery.
pub const RECOVERY_PATH: &str = "/run/lock/ptelab.knobs.json";

/// Schema tag of the recovery file.
const RECOVERY_SCHEMA: &str = "ptelab/knob-recovery/v1";

/// Top-level knobs (files directly under the THP directory).
const TOP_KNOBS: [&str; 5] = [
    "enabled",
    "defrag",
    "shmem_enabled",
    "use_zero_page",
    "shrink_underused",
];

/// khugepaged tunables (its counters `pages_collapsed`, `full_scans` are not knobs).
const KHUGEPAGED_KNOBS: [&str; 7] = [
    "defrag",
    "max_ptes_none",
    "max_ptes_swap",
    "max_ptes_shared",
    "pages_to_scan",
    "scan_sleep_millisecs",
    "alloc_sleep_millisecs",
];

/// `defrag` values under which a MADV_HUGEPAGE fault direct-reclaims/compacts.
const DEFRAG_OK_FOR_MADVISE: [&str; 3] = ["always", "defer+madvise", "madvise"];

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

// ---------------------------------------------------------------------------
// Reading knobs

/// The selected value of a knob file: the `[bracketed]` word of a choice list
/// (`"always [madvise] never"` → `"madvise"`), else the trimmed text (`"511"`).
pub fn selected_value(text: &str) -> String {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
        .map(str::to_owned)
        .unwrap_or_else(|| text.trim().to_owned())
}

/// The values a choice-list knob accepts (`"always [madvise] never"` →
/// `["always", "madvise", "never"]`); empty for scalar knobs.
pub fn choices(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() < 2 && !text.contains('[') {
        return Vec::new();
    }
    words
        .iter()
        .map(|w| w.trim_start_matches('[').trim_end_matches(']').to_owned())
        .collect()
}

/// Every knob: `"enabled"`, `"defrag"`, `"shmem_enabled"`, `"khugepaged/defrag"`,
/// `"hugepages-64kB/enabled"`, ... → the selected value (`"madvise"`). Empty
/// when the kernel has no THP at all.
pub fn read_knobs() -> anyhow::Result<BTreeMap<String, String>> {
    read_knobs_at(Path::new(THP_ROOT))
}

/// [`read_knobs`] under another THP directory.
pub fn read_knobs_at(root: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut knobs = BTreeMap::new();
    if !root.is_dir() {
        return Ok(knobs);
    }
    let mut names: Vec<String> = TOP_KNOBS.iter().map(|k| k.to_string()).collect();
    names.extend(KHUGEPAGED_KNOBS.iter().map(|k| format!("khugepaged/{k}")));
    for (dir, _) in size_dirs(root)? {
        names.push(format!("{dir}/enabled"));
        names.push(format!("{dir}/shmem_enabled"));
    }
    for name in names {
        let path = root.join(&name);
        match fs::read_to_string(&path) {
            Ok(text) => {
                knobs.insert(name, selected_value(&text));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("reading THP knob {}", path.display()))
            }
        }
    }
    Ok(knobs)
}

/// `hugepages-<N>kB` directories under `root` with their size in bytes, by size.
fn size_dirs(root: &Path) -> anyhow::Result<Vec<(String, u64)>> {
    let mut dirs = Vec::new();
    let entries = match fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(dirs),
        Err(e) => return Err(e).with_context(|| format!("listing {}", root.display())),
    };
    for entry in entries {
        let name = entry
            .with_context(|| format!("listing {}", root.display()))?
            .file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(kib) = size_dir_kib(name) {
            dirs.push((name.to_owned(), kib << 10));
        }
    }
    dirs.sort_by_key(|&(_, bytes)| bytes);
    Ok(dirs)
}

/// `"hugepages-64kB"` → `Some(64)`.
fn size_dir_kib(name: &str) -> Option<u64> {
    name.strip_prefix("hugepages-")?
        .strip_suffix("kB")?
        .parse()
        .ok()
}

/// Name of the per-size `enabled` knob for folios of `bytes`.
pub fn size_knob(bytes: u64) -> String {
    format!("hugepages-{}kB/enabled", bytes >> 10)
}

/// PMD size the kernel reports (`hpage_pmd_size`), else 2 MiB.
fn pmd_size_at(root: &Path) -> u64 {
    fs::read_to_string(root.join("hpage_pmd_size"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(PMD_SIZE)
}

/// Anonymous mTHP sizes in bytes the kernel offers (order >= 2, below PMD).
pub fn offered_mthp_sizes() -> Vec<u64> {
    offered_mthp_sizes_at(Path::new(THP_ROOT))
}

/// [`offered_mthp_sizes`] under another THP directory.
pub fn offered_mthp_sizes_at(root: &Path) -> Vec<u64> {
    let pmd = pmd_size_at(root);
    let page = page_size();
    size_dirs(root)
        .unwrap_or_default()
        .into_iter()
        // Order 1 has only shmem_enabled: anonymous memory never uses it.
        .filter(|(dir, bytes)| {
            *bytes >= 4 * page && *bytes < pmd && root.join(dir).join("enabled").exists()
        })
        .map(|(_, bytes)| bytes)
        .collect()
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as u64
    } else {
        4096
    }
}

/// Refuse (usage error, listing what is offered) a spec this kernel cannot give.
pub fn check_offered(spec: FolioSpec) -> anyhow::Result<()> {
    check_offered_at(Path::new(THP_ROOT), spec)
}

/// [`check_offered`] under another THP directory.
pub fn check_offered_at(root: &Path, spec: FolioSpec) -> anyhow::Result<()> {
    let offered = offered_mthp_sizes_at(root);
    let thp = root.join("enabled").exists();
    let mut accepted = vec!["4K".to_owned()];
    accepted.extend(offered.iter().map(|&b| FolioSpec::Mthp(b).to_string()));
    if thp {
        accepted.extend(["2M".to_owned(), "2M-pte".to_owned()]);
    }
    let accepted = accepted.join(", ");
    match spec {
        FolioSpec::Base => Ok(()),
        FolioSpec::Mthp(bytes) if offered.contains(&bytes) => Ok(()),
        FolioSpec::Mthp(_) if offered.is_empty() => Err(usage(format!(
            "folio spec {spec} needs anonymous mTHP, which this kernel does not offer \
             (no {}/hugepages-*kB/enabled; mTHP needs Linux 6.8 or later): \
             folio specs available here are {accepted}",
            root.display()
        ))),
        FolioSpec::Mthp(bytes) => Err(usage(format!(
            "folio spec {spec} is not offered by this kernel (no {}): \
             folio specs available here are {accepted}",
            root.join(size_knob(bytes)).display()
        ))),
        FolioSpec::Pmd | FolioSpec::PmdPte if thp && pmd_size_at(root) == PMD_SIZE => Ok(()),
        FolioSpec::Pmd | FolioSpec::PmdPte => Err(usage(format!(
            "folio spec {spec} needs 2 MiB PMD THP, which this kernel does not offer \
             (no {}/enabled, or hpage_pmd_size is not 2 MiB): folio specs available here are {accepted}",
            root.display()
        ))),
    }
}

// ---------------------------------------------------------------------------
// What a spec needs

/// The knob writes that make `knobs` (current values) give `spec`, in write
/// order; only knobs whose value differs. Pure: the policy in one place.
///
/// - `4K`: every `hugepages-*kB/enabled` (PMD size included) `never`.
/// - `16K`..`1M`: that size allowed for MADV_HUGEPAGE regions (left alone when
///   already `always`, `madvise`, or `inherit` with top-level `enabled` not
///   `never`; else set to `madvise`, so processes that did not madvise are
///   unaffected), every other size `never`.
/// - `2M`, `2M-pte`: the PMD size allowed the same way (or, on kernels without
///   per-size knobs, top-level `enabled` `madvise` unless `always`), every
///   other size `never` (a failed PMD fault then falls back to 4K, which
///   verification sees, not to a smaller mTHP).
/// - `defrag` is made `madvise` for large specs only if it would not let a
///   MADV_HUGEPAGE fault compact (`defer`, `never`).
pub fn plan_for(
    spec: FolioSpec,
    knobs: &BTreeMap<String, String>,
    pmd_size: u64,
) -> anyhow::Result<Vec<(String, String)>> {
    let top_allows = matches!(
        knobs.get("enabled").map(String::as_str),
        Some("always" | "madvise")
    );
    let allows = |v: &str| matches!(v, "always" | "madvise") || (v == "inherit" && top_allows);
    let size_knobs: Vec<&String> = knobs
        .keys()
        .filter(|k| k.starts_with("hugepages-") && k.ends_with("/enabled"))
        .collect();
    let wanted: Option<String> = match spec {
        FolioSpec::Base => None,
        FolioSpec::Mthp(bytes) => Some(size_knob(bytes)),
        FolioSpec::Pmd | FolioSpec::PmdPte => Some(size_knob(pmd_size)),
    };
    let mut plan = Vec::new();
    let mut set = |name: &str, value: &str| {
        if knobs.get(name).map(String::as_str) != Some(value) {
            plan.push((name.to_owned(), value.to_owned()));
        }
    };
    if let Some(w) = &wanted {
        match knobs.get(w) {
            Some(v) if allows(v) => {}
            Some(_) => set(w, "madvise"),
            None if matches!(spec, FolioSpec::Pmd | FolioSpec::PmdPte) => {
                // Before Linux 6.8 (no per-size knobs): the top-level knob rules.
                if !knobs.contains_key("enabled") {
                    bail!(
                        "this kernel has no transparent hugepages ({THP_ROOT}/enabled is missing)"
                    );
                }
                if !top_allows {
                    set("enabled", "madvise");
                }
            }
            None => bail!(
                "this kernel has no mTHP knob {w}: check the folio spec with check_offered first"
            ),
        }
    }
    for k in &size_knobs {
        if Some(k.as_str()) != wanted.as_deref() {
            set(k, "never");
        }
    }
    if wanted.is_some() {
        if let Some(d) = knobs.get("defrag") {
            if !DEFRAG_OK_FOR_MADVISE.contains(&d.as_str()) {
                set("defrag", "madvise");
            }
        }
    }
    Ok(plan)
}

/// A knob name this module may write (guards the recovery file against
/// tampering: `/run/lock` is world-writable).
fn is_known_knob(name: &str) -> bool {
    if TOP_KNOBS.contains(&name) {
        return true;
    }
    if let Some(k) = name.strip_prefix("khugepaged/") {
        return KHUGEPAGED_KNOBS.contains(&k);
    }
    match name.split_once('/') {
        Some((dir, file)) => {
            size_dir_kib(dir).is_some() && matches!(file, "enabled" | "shmem_enabled")
        }
        None => false,
    }
}

fn is_plausible_value(value: &str) -> bool {
    !value.is_empty()
        && value.len() < 32
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+_-".contains(&b))
}

// ---------------------------------------------------------------------------
// Writing knobs (always under the process-wide write mutex)

/// Serializes every knob write in this process with the forced restore of the
/// signal thread (which takes it and never gives it back).
pub(crate) fn knob_write_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Write `value` to knob `name` if it differs; read back to confirm.
fn write_knob(root: &Path, name: &str, value: &str) -> anyhow::Result<bool> {
    let path = root.join(name);
    let now = fs::read_to_string(&path)
        .with_context(|| format!("reading THP knob {}", path.display()))?;
    if selected_value(&now) == value {
        return Ok(false);
    }
    let offered = choices(&now);
    if !offered.is_empty() && !offered.iter().any(|c| c == value) {
        bail!(
            "THP knob {} does not accept '{value}' (accepts: {})",
            path.display(),
            offered.join(", ")
        );
    }
    let mut f = OpenOptions::new().write(true).truncate(true).open(&path).with_context(|| {
        format!(
            "opening THP knob {} for writing{}",
            path.display(),
            if is_root() { "" } else { ": setting THP knobs needs root (run ptelab as root, or pass --allow-unverified to measure without layout control)" }
        )
    })?;
    f.write_all(format!("{value}\n").as_bytes())
        .with_context(|| format!("writing '{value}' to THP knob {}", path.display()))?;
    drop(f);
    let after = selected_value(
        &fs::read_to_string(&path)
            .with_context(|| format!("reading THP knob {}", path.display()))?,
    );
    if after != value {
        bail!(
            "THP knob {} reads '{after}' after writing '{value}'",
            path.display()
        );
    }
    Ok(true)
}

pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

// ---------------------------------------------------------------------------
// Recovery file

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
    fn new(paths: &KnobPaths) -> Recovery {
        let pid = std::process::id();
        Recovery {
            schema: RECOVERY_SCHEMA.to_owned(),
            pid,
            start_time: process_start_time(pid).unwrap_or(0),
            cmdline: own_cmdline(),
            sysfs: paths.sysfs.clone(),
            original: BTreeMap::new(),
        }
    }

    /// Whether the writing process is still running (same pid, same start time).
    pub fn writer_alive(&self) -> bool {
        if !pid_alive(self.pid) {
            return false;
        }
        match process_start_time(self.pid) {
            Some(t) => self.start_time == 0 || t == self.start_time,
            None => true,
        }
    }
}

fn write_recovery(path: &Path, rec: &Recovery) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let json = serde_json::to_vec_pretty(rec)?;
    let write = || -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
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
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
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
fn restore_recorded(
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

// ---------------------------------------------------------------------------
// Processes

fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Field 22 of /proc/PID/stat (after the parenthesized comm, which may contain spaces).
fn process_start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// `"ptelab sweep mprotect-toggle --sizes 4K,40K"` (argv[0] by file name), at most 200 chars.
fn own_cmdline() -> String {
    let raw = fs::read("/proc/self/cmdline").unwrap_or_default();
    let mut args: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    if let Some(first) = args.first_mut() {
        if let Some(base) = Path::new(first.as_str()).file_name() {
            *first = base.to_string_lossy().into_owned();
        }
    }
    let mut s = args.join(" ");
    if s.chars().count() > 200 {
        s = s.chars().take(197).collect::<String>() + "...";
    }
    s
}

// ---------------------------------------------------------------------------
// The guard

/// In-process queue in front of flock(2), per lock path: flock locks belong
/// to open file descriptions, so two guards of one process would deadlock
/// (same thread) or need this to queue (different threads).
fn holders() -> &'static (Mutex<HashMap<PathBuf, ThreadId>>, Condvar) {
    static H: OnceLock<(Mutex<HashMap<PathBuf, ThreadId>>, Condvar)> = OnceLock::new();
    H.get_or_init(|| (Mutex::new(HashMap::new()), Condvar::new()))
}

fn release_holder(lock: &Path) {
    let (m, cv) = holders();
    m.lock().unwrap_or_else(|e| e.into_inner()).remove(lock);
    cv.notify_all();
}

/// Holds the system-wide knob lock; restores every knob it changed on drop.
#[derive(Debug)]
pub struct KnobGuard {
    paths: KnobPaths,
    /// The flock is held while this file is open.
    lock_file: Option<File>,
    /// All knobs as found at acquire (after recovery).
    original: BTreeMap<String, String>,
    /// What is recorded in the recovery file: knobs changed and their originals.
    recovery: Recovery,
}

impl KnobGuard {
    /// Take the lock (calling `on_wait` with who holds it while waiting),
    /// recover knobs left changed by a killed ptelab, snapshot the knobs.
    pub fn acquire(on_wait: &mut dyn FnMut(&str)) -> anyhow::Result<KnobGuard> {
        KnobGuard::acquire_at(KnobPaths::system(), on_wait)
    }

    /// [`KnobGuard::acquire`] with other paths (tests).
    pub fn acquire_at(
        paths: KnobPaths,
        on_wait: &mut dyn FnMut(&str),
    ) -> anyhow::Result<KnobGuard> {
        let flag = signals::interrupted();
        // 1. In-process queue.
        {
            let (m, cv) = holders();
            let me = std::thread::current().id();
            let mut held = m.lock().unwrap_or_else(|e| e.into_inner());
            let mut told = false;
            loop {
                match held.get(&paths.lock) {
                    None => break,
                    Some(&t) if t == me => bail!(
                        "this thread already holds the THP knob lock {} (a KnobGuard is alive): \
                         reuse it instead of acquiring a second one",
                        paths.lock.display()
                    ),
                    Some(_) => {
                        if !told {
                            on_wait("waiting for the THP knob lock held by another thread of this process");
                            told = true;
                        }
                        held = cv
                            .wait_timeout(held, Duration::from_millis(100))
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                        if flag.load(std::sync::atomic::Ordering::Relaxed) {
                            bail!("interrupted while waiting for the THP knob lock");
                        }
                    }
                }
            }
            held.insert(paths.lock.clone(), me);
        }
        let mut guard = KnobGuard {
            recovery: Recovery::new(&paths),
            paths,
            lock_file: None,
            original: BTreeMap::new(),
        };
        // From here on, Drop releases the in-process slot (and the flock).
        guard.lock_file = Some(take_flock(&guard.paths.lock, on_wait, flag)?);
        if let Some(msg) = recover(&guard.paths)? {
            eprintln!("{msg}");
        }
        guard.original = read_knobs_at(&guard.paths.sysfs)?;
        Ok(guard)
    }

    /// Set exactly the knobs `spec` needs (others unchanged).
    pub fn configure_for(&mut self, spec: FolioSpec) -> anyhow::Result<()> {
        check_offered_at(&self.paths.sysfs, spec)?;
        let _w = knob_write_lock();
        let now = read_knobs_at(&self.paths.sysfs)?;
        let plan = plan_for(spec, &now, pmd_size_at(&self.paths.sysfs))?;
        for (name, value) in plan {
            if !self.recovery.original.contains_key(&name) {
                let before = now.get(&name).cloned().unwrap_or_default();
                self.recovery.original.insert(name.clone(), before);
                if self.recovery.original.len() == 1 {
                    signals::register_active(&self.paths.recovery);
                }
                // Record first, then change: a kill between the two is harmless.
                write_recovery(&self.paths.recovery, &self.recovery)?;
            }
            write_knob(&self.paths.sysfs, &name, &value)
                .with_context(|| format!("configuring THP knobs for folio spec {spec}"))?;
        }
        Ok(())
    }

    /// Knobs as found before this guard changed anything.
    pub fn original(&self) -> &BTreeMap<String, String> {
        &self.original
    }

    /// Knobs this guard changed so far, with their original values.
    #[allow(dead_code)] // API for callers that record what a run changed
    pub fn changed(&self) -> &BTreeMap<String, String> {
        &self.recovery.original
    }

    /// Write back every knob this guard changed (the guard stays usable).
    pub fn restore(&mut self) -> anyhow::Result<()> {
        if self.recovery.original.is_empty() {
            return Ok(());
        }
        let _w = knob_write_lock();
        restore_recorded(
            &self.paths.sysfs,
            &self.paths.recovery,
            &self.recovery.original,
        )?;
        self.recovery.original.clear();
        signals::unregister_active(&self.paths.recovery);
        Ok(())
    }
}

impl Drop for KnobGuard {
    fn drop(&mut self) {
        if self.lock_file.is_some() {
            if let Err(e) = self.restore() {
                eprintln!("ptelab: error: {e:#}");
            }
        }
        // Closing the file drops the flock.
        self.lock_file = None;
        release_holder(&self.paths.lock);
    }
}

/// Open the lock file and take flock(LOCK_EX), polling so that SIGINT can
/// stop the wait; then write our pid and command line into it.
fn take_flock(
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
            .mode(0o644)
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
    if writable {
        let line = format!("{} {}\n", std::process::id(), own_cmdline());
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

/// Install SIGINT/SIGTERM handling once; returns the flag long loops poll.
pub fn interrupted() -> &'static AtomicBool {
    signals::interrupted()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    const MTHP_KB: [u64; 8] = [8, 16, 32, 64, 128, 256, 512, 1024];

    /// A fake THP tree shaped like this machine's (6.18, x86-64).
    fn fake_sysfs(dir: &Path) -> KnobPaths {
        let paths = KnobPaths::under(dir);
        let t = &paths.sysfs;
        let put = |rel: &str, text: &str| {
            let p = t.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        };
        put("enabled", "always [madvise] never\n");
        put("defrag", "always defer defer+madvise [madvise] never\n");
        put(
            "shmem_enabled",
            "always within_size advise [never] deny force\n",
        );
        put("use_zero_page", "1\n");
        put("hpage_pmd_size", "2097152\n");
        put("khugepaged/defrag", "1\n");
        put("khugepaged/max_ptes_none", "511\n");
        put("khugepaged/pages_collapsed", "0\n");
        for kb in MTHP_KB {
            if kb != 8 {
                put(
                    &format!("hugepages-{kb}kB/enabled"),
                    "always inherit madvise [never]\n",
                );
            }
            put(
                &format!("hugepages-{kb}kB/shmem_enabled"),
                "always inherit within_size advise [never]\n",
            );
        }
        put(
            "hugepages-2048kB/enabled",
            "always [inherit] madvise never\n",
        );
        put(
            "hugepages-2048kB/shmem_enabled",
            "always [inherit] within_size advise never\n",
        );
        paths
    }

    fn knob(paths: &KnobPaths, name: &str) -> String {
        selected_value(&fs::read_to_string(paths.sysfs.join(name)).unwrap())
    }

    fn no_wait() -> impl FnMut(&str) {
        |m: &str| panic!("unexpected wait: {m}")
    }

    #[test]
    fn bracket_parsing() {
        assert_eq!(selected_value("always [madvise] never\n"), "madvise");
        assert_eq!(selected_value("[always] inherit madvise never"), "always");
        assert_eq!(
            selected_value("always defer defer+madvise [madvise] never"),
            "madvise"
        );
        assert_eq!(selected_value("511\n"), "511");
        assert_eq!(selected_value("madvise\n"), "madvise");
        assert_eq!(
            choices("always [madvise] never"),
            ["always", "madvise", "never"]
        );
        assert!(choices("511\n").is_empty());
        assert!(choices("madvise\n").is_empty());
    }

    #[test]
    fn reads_every_knob_of_a_fake_tree() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let k = read_knobs_at(&paths.sysfs).unwrap();
        assert_eq!(k["enabled"], "madvise");
        assert_eq!(k["defrag"], "madvise");
        assert_eq!(k["shmem_enabled"], "never");
        assert_eq!(k["use_zero_page"], "1");
        assert_eq!(k["khugepaged/max_ptes_none"], "511");
        assert_eq!(k["hugepages-2048kB/enabled"], "inherit");
        assert_eq!(k["hugepages-64kB/enabled"], "never");
        assert_eq!(k["hugepages-8kB/shmem_enabled"], "never");
        assert!(!k.contains_key("hugepages-8kB/enabled"));
        assert!(
            !k.contains_key("khugepaged/pages_collapsed"),
            "counters are not knobs"
        );
        assert!(!k.contains_key("hpage_pmd_size"));
        assert!(read_knobs_at(&dir.path().join("absent"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn offered_sizes_skip_order_1_and_pmd() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let kib: Vec<u64> = offered_mthp_sizes_at(&paths.sysfs)
            .iter()
            .map(|b| b >> 10)
            .collect();
        assert_eq!(kib, [16, 32, 64, 128, 256, 512, 1024]);
        for spec in FolioSpec::all() {
            check_offered_at(&paths.sysfs, spec).unwrap();
        }
    }

    #[test]
    fn spec_not_offered_is_a_usage_error_listing_offered() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        fs::remove_dir_all(paths.sysfs.join("hugepages-128kB")).unwrap();
        let err = check_offered_at(&paths.sysfs, FolioSpec::Mthp(128 << 10)).unwrap_err();
        assert!(crate::error::is_usage(&err));
        let msg = err.to_string();
        assert!(
            msg.contains("4K, 16K, 32K, 64K, 256K, 512K, 1M, 2M, 2M-pte"),
            "{msg}"
        );
        assert!(msg.contains("hugepages-128kB/enabled"), "{msg}");

        // A kernel before mTHP (6.7): no per-size directories at all.
        for kb in MTHP_KB.iter().chain(&[2048]) {
            fs::remove_dir_all(paths.sysfs.join(format!("hugepages-{kb}kB"))).ok();
        }
        let err = check_offered_at(&paths.sysfs, FolioSpec::Mthp(64 << 10)).unwrap_err();
        assert!(crate::error::is_usage(&err));
        assert!(err.to_string().contains("mTHP needs Linux 6.8"), "{err}");
        assert!(err.to_string().contains("are 4K, 2M, 2M-pte"), "{err}");
        check_offered_at(&paths.sysfs, FolioSpec::Pmd).unwrap();

        // No THP at all.
        let err = check_offered_at(&dir.path().join("none"), FolioSpec::PmdPte).unwrap_err();
        assert!(
            crate::error::is_usage(&err) && err.to_string().contains("are 4K"),
            "{err}"
        );
    }

    fn machine_knobs() -> BTreeMap<String, String> {
        let mut k = BTreeMap::new();
        k.insert("enabled".into(), "madvise".into());
        k.insert("defrag".into(), "madvise".into());
        for kb in [16, 32, 64, 128, 256, 512, 1024] {
            k.insert(format!("hugepages-{kb}kB/enabled"), "never".into());
        }
        k.insert("hugepages-2048kB/enabled".into(), "inherit".into());
        k
    }

    fn plan(spec: &str, k: &BTreeMap<String, String>) -> Vec<(String, String)> {
        plan_for(spec.parse().unwrap(), k, PMD_SIZE).unwrap()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|&(a, b)| (a.to_owned(), b.to_owned()))
            .collect()
    }

    #[test]
    fn plan_sets_only_what_differs() {
        let k = machine_knobs();
        assert_eq!(
            plan("4K", &k),
            pairs(&[("hugepages-2048kB/enabled", "never")])
        );
        assert_eq!(
            plan("64K", &k),
            pairs(&[
                ("hugepages-64kB/enabled", "madvise"),
                ("hugepages-2048kB/enabled", "never")
            ])
        );
        // inherit + top-level madvise already gives PMD THP to MADV_HUGEPAGE regions.
        assert!(plan("2M", &k).is_empty());
        assert!(plan("2M-pte", &k).is_empty());

        let mut k2 = k.clone();
        k2.insert("enabled".into(), "never".into());
        k2.insert("defrag".into(), "never".into());
        k2.insert("hugepages-16kB/enabled".into(), "always".into());
        assert_eq!(
            plan("2M", &k2),
            pairs(&[
                ("hugepages-2048kB/enabled", "madvise"),
                ("hugepages-16kB/enabled", "never"),
                ("defrag", "madvise")
            ])
        );
        // Already-permissive settings of the wanted size are left alone.
        assert_eq!(
            plan("16K", &k2),
            pairs(&[("hugepages-2048kB/enabled", "never"), ("defrag", "madvise")])
        );
        assert_eq!(
            plan("4K", &k2),
            pairs(&[
                ("hugepages-16kB/enabled", "never"),
                ("hugepages-2048kB/enabled", "never")
            ])
        );
    }

    #[test]
    fn plan_on_a_kernel_without_mthp_uses_the_top_level_knob() {
        let mut k = BTreeMap::new();
        k.insert("enabled".to_owned(), "never".to_owned());
        k.insert("defrag".to_owned(), "madvise".to_owned());
        assert_eq!(plan("2M", &k), pairs(&[("enabled", "madvise")]));
        assert!(plan("4K", &k).is_empty());
        assert!(plan_for(FolioSpec::Mthp(65536), &k, PMD_SIZE).is_err());
        assert!(plan_for(FolioSpec::Pmd, &BTreeMap::new(), PMD_SIZE).is_err());
    }

    #[test]
    fn known_knob_names() {
        for k in [
            "enabled",
            "defrag",
            "khugepaged/defrag",
            "hugepages-64kB/enabled",
            "hugepages-8kB/shmem_enabled",
        ] {
            assert!(is_known_knob(k), "{k}");
        }
        for k in [
            "../enabled",
            "hpage_pmd_size",
            "khugepaged/full_scans",
            "hugepages-64kB/stats/split",
            "hugepages-x/enabled",
            "/etc/passwd",
        ] {
            assert!(!is_known_knob(k), "{k}");
        }
        assert!(is_plausible_value("defer+madvise") && is_plausible_value("511"));
        assert!(
            !is_plausible_value("") && !is_plausible_value("a b") && !is_plausible_value("x\n")
        );
    }

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

    #[test]
    fn process_facts() {
        let me = std::process::id();
        assert!(pid_alive(me));
        assert!(process_start_time(me).unwrap() > 0);
        assert!(!own_cmdline().is_empty());
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!pid_alive(pid));
    }

    #[test]
    fn guard_on_fake_tree_configures_records_and_restores() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let before = read_knobs_at(&paths.sysfs).unwrap();
        {
            let mut g = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap();
            assert_eq!(g.original(), &before);
            let holder = fs::read_to_string(&paths.lock).unwrap();
            assert!(
                holder.starts_with(&format!("{} ", std::process::id())),
                "{holder}"
            );

            g.configure_for(FolioSpec::Mthp(64 << 10)).unwrap();
            assert_eq!(knob(&paths, "hugepages-64kB/enabled"), "madvise");
            assert_eq!(knob(&paths, "hugepages-2048kB/enabled"), "never");
            assert_eq!(knob(&paths, "enabled"), "madvise");
            let changed: Vec<&str> = g.changed().keys().map(String::as_str).collect();
            assert_eq!(
                changed,
                ["hugepages-2048kB/enabled", "hugepages-64kB/enabled"]
            );
            let rec = read_recovery(&paths.recovery).unwrap().unwrap();
            assert_eq!(rec.pid, std::process::id());
            assert_eq!(rec.original["hugepages-2048kB/enabled"], "inherit");
            assert_eq!(rec.original["hugepages-64kB/enabled"], "never");

            // A second spec: originals stay the first-seen values.
            g.configure_for(FolioSpec::Mthp(16 << 10)).unwrap();
            assert_eq!(knob(&paths, "hugepages-64kB/enabled"), "never");
            assert_eq!(knob(&paths, "hugepages-16kB/enabled"), "madvise");
            let rec = read_recovery(&paths.recovery).unwrap().unwrap();
            assert_eq!(rec.original.len(), 3);
            assert_eq!(rec.original["hugepages-64kB/enabled"], "never");

            g.restore().unwrap();
            assert_eq!(read_knobs_at(&paths.sysfs).unwrap(), before);
            assert!(!paths.recovery.exists());
            g.configure_for(FolioSpec::Base).unwrap();
            assert_eq!(knob(&paths, "hugepages-2048kB/enabled"), "never");
        }
        assert_eq!(read_knobs_at(&paths.sysfs).unwrap(), before);
        assert!(!paths.recovery.exists());
    }

    #[test]
    fn guard_restores_on_error_and_panic() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let before = read_knobs_at(&paths.sysfs).unwrap();
        let r = std::panic::catch_unwind(|| {
            let mut g = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap();
            g.configure_for(FolioSpec::Pmd).unwrap();
            g.configure_for(FolioSpec::Mthp(256 << 10)).unwrap();
            panic!("boom in the middle of a cell");
        });
        assert!(r.is_err());
        assert_eq!(read_knobs_at(&paths.sysfs).unwrap(), before);
        assert!(!paths.recovery.exists());

        let run = || -> anyhow::Result<()> {
            let mut g = KnobGuard::acquire_at(paths.clone(), &mut no_wait())?;
            g.configure_for(FolioSpec::Base)?;
            bail!("a cell failed");
        };
        assert!(run().is_err());
        assert_eq!(read_knobs_at(&paths.sysfs).unwrap(), before);
        // The lock is free again.
        drop(KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap());
    }

    #[test]
    fn nested_acquire_on_one_thread_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let _g = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap();
        let err = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap_err();
        assert!(err.to_string().contains("already holds"), "{err}");
    }

    #[test]
    fn threads_queue_for_the_guard() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let g = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap();
        let p2 = paths.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let mut waits = Vec::new();
            let g2 = KnobGuard::acquire_at(p2, &mut |m: &str| {
                waits.push(m.to_owned());
                tx.send(()).unwrap();
            });
            (g2.is_ok(), waits)
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("second thread waits");
        drop(g);
        let (ok, waits) = t.join().unwrap();
        assert!(ok);
        assert_eq!(waits.len(), 1, "{waits:?}");
    }

    #[test]
    fn waiting_for_another_process_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        // Another open file description stands in for another process.
        let other = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&paths.lock)
            .unwrap();
        fs::write(
            &paths.lock,
            "4242 ptelab sweep mprotect-toggle --folios 64K\n",
        )
        .unwrap();
        // SAFETY: flock on a valid descriptor.
        assert_eq!(unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let p2 = paths.clone();
        let t = std::thread::spawn(move || {
            KnobGuard::acquire_at(p2, &mut |m: &str| tx.send(m.to_owned()).unwrap()).map(|_| ())
        });
        let msg = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(msg, "waiting for the THP knob lock held by pid 4242 (ptelab sweep mprotect-toggle --folios 64K)");
        drop(other);
        t.join().unwrap().unwrap();
        let holder = fs::read_to_string(&paths.lock).unwrap();
        assert!(
            holder.starts_with(&format!("{} ", std::process::id())),
            "{holder}"
        );
    }

    fn dead_pid() -> u32 {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn acquire_recovers_knobs_left_by_a_killed_run() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let before = read_knobs_at(&paths.sysfs).unwrap();
        // What a ptelab killed after configuring 64K leaves behind.
        let mut rec = Recovery::new(&paths);
        rec.pid = dead_pid();
        rec.cmdline = "ptelab bench mprotect-toggle --folio 64K".into();
        rec.original
            .insert("hugepages-64kB/enabled".into(), "never".into());
        rec.original
            .insert("hugepages-2048kB/enabled".into(), "inherit".into());
        write_recovery(&paths.recovery, &rec).unwrap();
        fs::write(paths.sysfs.join("hugepages-64kB/enabled"), "madvise\n").unwrap();
        fs::write(paths.sysfs.join("hugepages-2048kB/enabled"), "never\n").unwrap();
        assert!(!rec.writer_alive());

        let g = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap();
        assert_eq!(g.original(), &before);
        assert_eq!(read_knobs_at(&paths.sysfs).unwrap(), before);
        assert!(!paths.recovery.exists());
        drop(g);

        // recover() reports who left them.
        write_recovery(&paths.recovery, &rec).unwrap();
        fs::write(paths.sysfs.join("hugepages-64kB/enabled"), "always\n").unwrap();
        let msg = recover(&paths).unwrap().unwrap();
        assert!(
            msg.contains(&format!(
                "pid {} (ptelab bench mprotect-toggle --folio 64K), no longer running",
                rec.pid
            )),
            "{msg}"
        );
        assert!(msg.contains("hugepages-64kB/enabled=never"), "{msg}");
        assert!(recover(&paths).unwrap().is_none());
    }

    #[test]
    fn stale_temporaries_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let stale = dir.path().join(format!("ptelab.knobs.tmp.{}", dead_pid()));
        let unrelated = dir.path().join("ptelab.knobs.tmp.x1");
        fs::write(&stale, "{}").unwrap();
        fs::write(&unrelated, "{}").unwrap();
        drop(KnobGuard::acquire_at(paths, &mut no_wait()).unwrap());
        assert!(!stale.exists());
        assert!(unrelated.exists());
    }

    #[test]
    fn tampered_recovery_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let mut rec = Recovery::new(&paths);
        rec.pid = dead_pid();
        rec.original
            .insert("../../../../etc/motd".into(), "never".into());
        write_recovery(&paths.recovery, &rec).unwrap();
        let err = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap_err();
        assert!(format!("{err:#}").contains("not a THP knob"), "{err:#}");
        fs::write(&paths.recovery, "{not json").unwrap();
        assert!(read_recovery(&paths.recovery).is_err());
        // The failed acquire released the lock.
        fs::remove_file(&paths.recovery).unwrap();
        drop(KnobGuard::acquire_at(paths, &mut no_wait()).unwrap());
    }

    #[test]
    fn failed_restore_keeps_the_recovery_file() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let mut g = KnobGuard::acquire_at(paths.clone(), &mut no_wait()).unwrap();
        g.configure_for(FolioSpec::Mthp(32 << 10)).unwrap();
        // The knob vanished (e.g. sysfs changed under us): restore must say so.
        fs::remove_dir_all(paths.sysfs.join("hugepages-32kB")).unwrap();
        let err = g.restore().unwrap_err();
        assert!(err.to_string().contains("next ptelab run retries"), "{err}");
        assert!(paths.recovery.exists());
        // Put it back: the next attempt (here: drop) succeeds and removes the file.
        fs::create_dir_all(paths.sysfs.join("hugepages-32kB")).unwrap();
        fs::write(paths.sysfs.join("hugepages-32kB/enabled"), "madvise\n").unwrap();
        drop(g);
        assert_eq!(knob(&paths, "hugepages-32kB/enabled"), "never");
        assert!(!paths.recovery.exists());
    }

    // -----------------------------------------------------------------------
    // The real machine (root, mTHP 64K offered). Every change goes through a
    // KnobGuard, so these serialize with any other ptelab on the machine.

    fn real_ready(test: &str) -> bool {
        if !is_root() {
            eprintln!("skipping {test}: needs root to change THP knobs");
            return false;
        }
        if !offered_mthp_sizes().contains(&(64 << 10)) {
            eprintln!("skipping {test}: this kernel offers no 64K mTHP");
            return false;
        }
        true
    }

    /// All knobs as they are when nobody holds the lock.
    fn real_snapshot() -> BTreeMap<String, String> {
        KnobGuard::acquire(&mut |_| {}).unwrap().original().clone()
    }

    fn assert_64k_configured() {
        let k = read_knobs().unwrap();
        assert_eq!(k["hugepages-64kB/enabled"], "madvise");
        for (name, v) in &k {
            if name.ends_with("/enabled") && name != "hugepages-64kB/enabled" {
                assert_eq!(v, "never", "{name}");
            }
        }
    }

    #[test]
    fn real_guard_configures_and_restores() {
        if !real_ready("real_guard_configures_and_restores") {
            return;
        }
        let before;
        {
            let mut g = KnobGuard::acquire(&mut |m| eprintln!("{m}")).unwrap();
            before = g.original().clone();
            for spec in FolioSpec::all() {
                g.configure_for(spec).unwrap();
            }
            g.configure_for(FolioSpec::Mthp(64 << 10)).unwrap();
            assert_64k_configured();
            assert!(Path::new(RECOVERY_PATH).exists());
        }
        assert_eq!(real_snapshot(), before);
    }

    #[test]
    fn real_guard_restores_on_panic() {
        if !real_ready("real_guard_restores_on_panic") {
            return;
        }
        let before = real_snapshot();
        let r = std::panic::catch_unwind(|| {
            let mut g = KnobGuard::acquire(&mut |m| eprintln!("{m}")).unwrap();
            g.configure_for(FolioSpec::Mthp(64 << 10)).unwrap();
            assert_64k_configured();
            panic!("boom with 64K configured");
        });
        assert!(r.is_err());
        assert_eq!(real_snapshot(), before);
    }

    /// Entry point of the child processes of the tests below (does nothing
    /// unless PTELAB_THP_CHILD is set): acquire, configure 64K, say READY,
    /// then poll the interrupt flag (`poll`) or hang (`stuck`).
    #[test]
    fn child_entry() {
        let Ok(mode) = std::env::var("PTELAB_THP_CHILD") else {
            return;
        };
        let flag = interrupted();
        let mut g = KnobGuard::acquire(&mut |m| eprintln!("{m}")).unwrap();
        g.configure_for(FolioSpec::Mthp(64 << 10)).unwrap();
        println!("READY");
        std::io::stdout().flush().unwrap();
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            if mode == "poll" && flag.load(std::sync::atomic::Ordering::Relaxed) {
                println!("INTERRUPTED");
                return; // the guard restores on drop
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("child was not stopped within 60 s");
    }

    struct Child(std::process::Child);

    impl Child {
        fn spawn(mode: &str) -> Child {
            let exe = std::env::current_exe().unwrap();
            let mut child = Command::new(exe)
                .args([
                    "--exact",
                    "kernel::thp::tests::child_entry",
                    "--nocapture",
                    "--test-threads=1",
                    "-q",
                ])
                .env("PTELAB_THP_CHILD", mode)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let out = child.stdout.take().unwrap();
            let mut lines = std::io::BufReader::new(out).lines();
            loop {
                match lines.next() {
                    Some(Ok(l)) if l.trim() == "READY" => break,
                    Some(Ok(_)) => {}
                    other => panic!("child ended before READY: {other:?} {:?}", child.wait()),
                }
            }
            std::thread::spawn(move || for _ in lines {});
            Child(child)
        }

        fn signal(&self, sig: i32) {
            // SAFETY: kill on our own child's pid.
            assert_eq!(unsafe { libc::kill(self.0.id() as libc::pid_t, sig) }, 0);
        }

        fn wait(mut self, within: Duration) -> std::process::ExitStatus {
            let start = std::time::Instant::now();
            loop {
                if let Some(st) = self.0.try_wait().unwrap() {
                    return st;
                }
                if start.elapsed() > within {
                    self.0.kill().ok();
                    panic!("child did not exit within {within:?}");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    #[test]
    fn real_sigint_in_a_polling_loop_restores() {
        if !real_ready("real_sigint_in_a_polling_loop_restores") {
            return;
        }
        let before = real_snapshot();
        let child = Child::spawn("poll");
        let pid = child.0.id();
        assert_64k_configured();
        child.signal(libc::SIGINT);
        let st = child.wait(Duration::from_secs(20));
        assert!(st.success(), "{st:?}");
        assert_eq!(real_snapshot(), before);
        let left = read_recovery(Path::new(RECOVERY_PATH)).unwrap();
        assert!(!matches!(left, Some(r) if r.pid == pid));
    }

    #[test]
    fn real_second_sigint_restores_a_stuck_run() {
        if !real_ready("real_second_sigint_restores_a_stuck_run") {
            return;
        }
        let before = real_snapshot();
        let child = Child::spawn("stuck");
        child.signal(libc::SIGINT);
        std::thread::sleep(Duration::from_millis(300));
        assert_64k_configured();
        child.signal(libc::SIGINT);
        let st = child.wait(Duration::from_secs(20));
        assert_eq!(st.code(), Some(130), "{st:?}");
        assert_eq!(real_snapshot(), before);
    }

    #[test]
    fn real_stuck_run_is_restored_after_the_grace_period() {
        if !real_ready("real_stuck_run_is_restored_after_the_grace_period") {
            return;
        }
        let before = real_snapshot();
        let child = Child::spawn("stuck");
        child.signal(libc::SIGTERM);
        let st = child.wait(signals::GRACE + Duration::from_secs(20));
        assert_eq!(st.code(), Some(128 + libc::SIGTERM), "{st:?}");
        assert_eq!(real_snapshot(), before);
    }

    #[test]
    fn real_sigkill_is_repaired_by_the_next_guard() {
        if !real_ready("real_sigkill_is_repaired_by_the_next_guard") {
            return;
        }
        let before = real_snapshot();
        let child = Child::spawn("stuck");
        child.signal(libc::SIGKILL);
        let st = child.wait(Duration::from_secs(20));
        assert_eq!(st.code(), None, "{st:?}");
        // Left as the killed run had them, with the originals on record
        // (unless a concurrent guard already recovered them).
        if let Some(rec) = read_recovery(Path::new(RECOVERY_PATH)).unwrap() {
            assert!(!rec.writer_alive());
            assert_eq!(
                rec.original.get("hugepages-64kB/enabled"),
                before.get("hugepages-64kB/enabled")
            );
        }
        let g = KnobGuard::acquire(&mut |m| eprintln!("{m}")).unwrap();
        assert_eq!(g.original(), &before);
        assert!(!Path::new(RECOVERY_PATH).exists());
        drop(g);
        assert_eq!(real_snapshot(), before);
    }
}
