//! A temporary swapfile, so that anonymous memory can be reclaimed on a
//! machine without swap (`ptelab bench reclaim --swapfile SIZE`).
//!
//! [`SwapFile::create`] makes `<dir>/ptelab-swap-<pid>-<n>` (mode 0600,
//! `fallocate`d, or written with zeros where that is unsupported), writes the
//! swap header itself (no `mkswap` needed, see [`header`]), `fsync`s it and
//! activates it with `swapon(2)` without `SWAP_FLAG_PREFER`, so the kernel
//! gives it the lowest priority of all swap areas. `Drop` swaps it off and
//! removes it (success, `?` errors, panics; the runner turns SIGINT/SIGTERM
//! into an error, so those unwind to the same `Drop`).
//!
//! Refused up front ([`check_dir`]): directories on tmpfs/ramfs (memory
//! backed), btrfs (swapfiles need NOCOW files on a single device),
//! overlayfs and NFS; and a size that would leave less than
//! min(1 GiB, 5% of the filesystem) free (statvfs), with the numbers.
//!
//! # Recovery after SIGKILL
//!
//! A process that dies without unwinding (SIGKILL, OOM kill, a second
//! SIGINT that makes the signal thread exit at once) would leave an active
//! swapfile behind. So before the file is created, a record
//! `/run/lock/ptelab.swap.<pid>-<n>.json` names it (pid, process start time,
//! command line, path); `Drop` deletes the record last. [`recover_stale`]
//! (called by every kernel-cell plan and before every new swapfile) finds the
//! records whose writer is gone, swaps the file off if `/proc/swaps` lists
//! it, removes it and the record, and returns a message for stderr. As with
//! the THP knob recovery file, `/run/lock` is world-writable: records not
//! owned by the current user are ignored, and only regular files named
//! `ptelab-swap-*` at absolute paths are ever swapped off or removed.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::procfs::{self, start_time};

/// Directory of the recovery records (the THP knob lock lives there too).
pub const RECORD_DIR: &str = "/run/lock";
/// File name prefix of every swapfile ptelab creates.
pub const FILE_PREFIX: &str = "ptelab-swap-";
/// File name prefix of the recovery records.
const RECORD_PREFIX: &str = "ptelab.swap.";
const RECORD_SCHEMA: &str = "ptelab/swap-recovery/v1";
/// Swap header page size (the base page size; checked at create).
const PAGE: usize = 4096;
/// Smallest swapfile accepted.
const MIN_BYTES: u64 = 1 << 20;

/// Swapfiles made by this process so far (names are `<pid>-<n>`).
static SEQ: AtomicU32 = AtomicU32::new(0);

/// The first page of a swap area of `pages` pages (`struct swap_header`,
/// version 1, native endian): boot block, `version` = 1 at 1024,
/// `last_page` = pages - 1, `nr_badpages` = 0, `uuid`, `volume_name`, and
/// "SWAPSPACE2" in the last 10 bytes of the page. What `mkswap` writes.
pub fn header(pages: u64, uuid: [u8; 16]) -> anyhow::Result<Vec<u8>> {
    if pages < 10 {
        bail!("a swap area needs at least 10 pages, not {pages}");
    }
    let last = u32::try_from(pages - 1).context("swap area too large for a v1 header")?;
    let mut h = vec![0u8; PAGE];
    h[1024..1028].copy_from_slice(&1u32.to_ne_bytes());
    h[1028..1032].copy_from_slice(&last.to_ne_bytes());
    h[1032..1036].copy_from_slice(&0u32.to_ne_bytes());
    h[1036..1052].copy_from_slice(&uuid);
    h[1052..1058].copy_from_slice(b"ptelab");
    h[PAGE - 10..].copy_from_slice(b"SWAPSPACE2");
    Ok(h)
}

/// A fresh random UUID (version 4 from the kernel), zeros if unavailable.
fn uuid() -> [u8; 16] {
    let mut out = [0u8; 16];
    if let Ok(t) = fs::read_to_string("/proc/sys/kernel/random/uuid") {
        let hex: String = t.chars().filter(char::is_ascii_hexdigit).collect();
        if hex.len() == 32 {
            for (i, b) in out.iter_mut().enumerate() {
                *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0);
            }
        }
    }
    out
}

/// Bytes for messages (`1.5G`, `256M`).
fn fmt(b: u64) -> String {
    crate::text::format::bytes(b as f64)
}

/// Free space needed besides the swapfile: min(1 GiB, 5% of the filesystem).
fn reserve(fs_bytes: u64) -> u64 {
    (fs_bytes / 20).min(1 << 30)
}

/// Check that `dir` can hold an active swapfile of `bytes`; returns the
/// filesystem name.
pub fn check_dir(dir: &Path, bytes: u64) -> anyhow::Result<&'static str> {
    use crate::files::{fs_name, statfs_magic};
    if bytes < MIN_BYTES {
        bail!("--swapfile {bytes} bytes is too small: at least 1M");
    }
    let fs = fs_name(statfs_magic(dir)?);
    let why = match fs {
        "tmpfs" | "ramfs" => Some("is memory-backed: swapping to it frees nothing"),
        "btrfs" => Some(
            "is btrfs, where a swapfile must be a NOCOW file on a single-device, \
             unsnapshotted subvolume",
        ),
        "overlayfs" => Some("is overlayfs, which cannot hold an active swapfile"),
        "nfs" => Some("is NFS (swap over NFS is not supported here)"),
        _ => None,
    };
    if let Some(why) = why {
        bail!(
            "the swapfile directory {} {why}; set PTELAB_RECLAIM_DIR to a directory on ext4 or xfs",
            dir.display()
        );
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())?;
    // SAFETY: a zeroed statvfs is a valid out-parameter; c is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", dir.display()));
    }
    #[allow(clippy::unnecessary_cast)]
    let (frsize, avail, total) = (st.f_frsize as u64, st.f_bavail as u64, st.f_blocks as u64);
    let avail = avail.saturating_mul(frsize);
    let keep = reserve(total.saturating_mul(frsize));
    if avail < bytes.saturating_add(keep) {
        bail!(
            "a swapfile of {} in {} ({fs}) needs {} available ({} for the file, {} left free), \
             but only {} is; pass a smaller --swapfile or set PTELAB_RECLAIM_DIR",
            fmt(bytes),
            dir.display(),
            fmt(bytes + keep),
            fmt(bytes),
            fmt(keep),
            fmt(avail)
        );
    }
    Ok(fs)
}

/// What a recovery record holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub schema: String,
    pub pid: u32,
    /// Field 22 of /proc/PID/stat, to tell the writer from a reused pid.
    pub start_time: u64,
    pub cmdline: String,
    /// The swapfile (absolute).
    pub path: PathBuf,
}

impl Record {
    fn new(path: &Path) -> Record {
        let pid = std::process::id();
        Record {
            schema: RECORD_SCHEMA.into(),
            pid,
            start_time: start_time(pid).unwrap_or(0),
            cmdline: procfs::own_cmdline(),
            path: path.to_owned(),
        }
    }

    /// Whether the writer still runs (same pid and start time).
    fn writer_alive(&self) -> bool {
        match start_time(self.pid) {
            Some(t) => self.start_time == 0 || t == self.start_time,
            None => false,
        }
    }

    /// Whether the path is one ptelab may swap off and delete.
    fn path_plausible(&self) -> bool {
        self.path.is_absolute()
            && self
                .path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(FILE_PREFIX))
            && !self
                .path
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
    }
}

fn write_record(path: &Path, rec: &Record) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    let json = serde_json::to_vec_pretty(rec)?;
    let write = || -> std::io::Result<()> {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        // Its command line is nobody else's business (`/run/lock` is
        // world-readable), even when an older temporary was left.
        f.set_permissions(fs::Permissions::from_mode(0o600))?;
        f.write_all_at(&json, 0)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    };
    write().with_context(|| format!("writing swapfile recovery record {}", path.display()))
}

/// Read a record; an error when it is not ours or malformed.
fn read_record(path: &Path) -> anyhow::Result<Record> {
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let euid = procfs::euid();
    let uid = f.metadata()?.uid();
    if uid != euid {
        bail!(
            "ignoring swapfile recovery record {}: owned by uid {uid}, not by us (uid {euid})",
            path.display()
        );
    }
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    let rec: Record = serde_json::from_str(&text)
        .with_context(|| format!("parsing swapfile recovery record {}", path.display()))?;
    if rec.schema != RECORD_SCHEMA || !rec.path_plausible() {
        bail!(
            "ignoring swapfile recovery record {}: schema '{}', path {} is not a ptelab swapfile",
            path.display(),
            rec.schema,
            rec.path.display()
        );
    }
    Ok(rec)
}

/// Active swap areas by path, from a /proc/swaps table (octal escapes undone,
/// a " (deleted)" suffix dropped).
pub fn active_paths(table: &str) -> Vec<PathBuf> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .map(|p| {
            let s = procfs::unescape_octal(p);
            PathBuf::from(s.strip_suffix(" (deleted)").unwrap_or(&s))
        })
        .collect()
}

/// swapoff(2).
fn swapoff(path: &Path) -> std::io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    // swapoff returns EINTR when a signal is pending while it swaps pages in;
    // the signal thread has already recorded the signal, so try again.
    for _ in 0..20 {
        // SAFETY: c is a NUL-terminated path.
        if unsafe { libc::swapoff(c.as_ptr()) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
    Err(std::io::Error::from_raw_os_error(libc::EINTR))
}

/// Remove `path` if it is a regular file of ours (never follows a symlink).
fn remove_swapfile(path: &Path) -> std::io::Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(m) => {
            let euid = procfs::euid();
            if !m.file_type().is_file() || m.uid() != euid {
                return Err(std::io::Error::other(format!(
                    "{} is not a regular file owned by uid {euid}",
                    path.display()
                )));
            }
            fs::remove_file(path)?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Recover the records in `dir` whose writer is gone: swapoff (through
/// `off`) when `swaps` lists the file, remove it and the record. Returns one
/// message per record handled or ignored.
pub fn recover_in(
    dir: &Path,
    swaps: &str,
    mut off: impl FnMut(&Path) -> std::io::Result<()>,
) -> Vec<String> {
    let mut msgs = Vec::new();
    let Ok(rd) = fs::read_dir(dir) else {
        return msgs;
    };
    let active = active_paths(swaps);
    let mut records: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with(RECORD_PREFIX) && n.ends_with(".json")
            })
        })
        .collect();
    records.sort();
    for rpath in records {
        let rec = match read_record(&rpath) {
            Ok(r) => r,
            Err(e) => {
                msgs.push(format!("ptelab: warning: {e:#}"));
                continue;
            }
        };
        if rec.writer_alive() {
            continue;
        }
        let who = format!("pid {} ({}), no longer running", rec.pid, rec.cmdline);
        let mut done = Vec::new();
        if active.contains(&rec.path) {
            if let Err(e) = off(&rec.path) {
                msgs.push(format!(
                    "ptelab: error: swapfile {} left active by {who}: swapoff failed ({e}); \
                     run `swapoff {0} && rm {0}`",
                    rec.path.display()
                ));
                continue;
            }
            done.push("swapped off");
        }
        match remove_swapfile(&rec.path) {
            Ok(true) => done.push("removed"),
            Ok(false) => {}
            Err(e) => {
                msgs.push(format!(
                    "ptelab: error: swapfile {} left by {who}: {e}",
                    rec.path.display()
                ));
                continue;
            }
        }
        let _ = fs::remove_file(&rpath);
        msgs.push(if done.is_empty() {
            format!(
                "ptelab: swapfile record {} left by {who}: the file was already gone; record removed",
                rpath.display()
            )
        } else {
            format!(
                "ptelab: {} swapfile {} left by {who}",
                done.join(" and "),
                rec.path.display()
            )
        });
    }
    msgs
}

/// [`recover_in`] on the system: `/run/lock`, `/proc/swaps`, swapoff(2).
pub fn recover_stale() -> Vec<String> {
    let swaps = fs::read_to_string("/proc/swaps").unwrap_or_default();
    recover_in(Path::new(RECORD_DIR), &swaps, swapoff)
}

/// An active temporary swapfile; swapped off and removed on drop.
pub struct SwapFile {
    path: PathBuf,
    record: PathBuf,
    created: bool,
    active: bool,
}

impl SwapFile {
    /// Create, format and swapon a swapfile of `bytes` (rounded down to
    /// whole pages) in `dir`.
    pub fn create(dir: &Path, bytes: u64) -> anyhow::Result<SwapFile> {
        Self::create_with(dir, Path::new(RECORD_DIR), bytes, true)
    }

    fn create_with(
        dir: &Path,
        record_dir: &Path,
        bytes: u64,
        activate: bool,
    ) -> anyhow::Result<SwapFile> {
        let page = procfs::page_size() as usize;
        if page != PAGE {
            bail!("base page size is {page} bytes; the swap header writer assumes {PAGE}");
        }
        let bytes = bytes / PAGE as u64 * PAGE as u64;
        check_dir(dir, bytes)?;
        if activate {
            for m in recover_stale() {
                eprintln!("{m}");
            }
        }
        let dir = fs::canonicalize(dir).with_context(|| format!("resolving {}", dir.display()))?;
        let name = format!(
            "{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(format!("{FILE_PREFIX}{name}"));
        let record = record_dir.join(format!("{RECORD_PREFIX}{name}.json"));
        // The record first: a kill between any two later steps is recovered.
        write_record(&record, &Record::new(&path))?;
        let mut sf = SwapFile {
            path,
            record,
            created: false,
            active: false,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&sf.path)
            .with_context(|| format!("creating swapfile {}", sf.path.display()))?;
        sf.created = true;
        // The umask cannot widen 0600, but be explicit: swap holds memory.
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
        allocate(&file, bytes).with_context(|| format!("allocating {}", sf.path.display()))?;
        file.write_all_at(&header(bytes / PAGE as u64, uuid())?, 0)
            .context("writing the swap header")?;
        // iomap refuses to activate a file with dirty metadata.
        file.sync_all().context("fsync of the swapfile")?;
        drop(file);
        if activate {
            let c = std::ffi::CString::new(sf.path.as_os_str().as_encoded_bytes())?;
            // No SWAP_FLAG_PREFER: the kernel assigns the lowest priority yet.
            // SAFETY: c is a NUL-terminated path to the file just formatted.
            if unsafe { libc::swapon(c.as_ptr(), 0) } != 0 {
                let e = std::io::Error::last_os_error();
                let hint = match e.raw_os_error() {
                    Some(libc::EPERM) => " (needs root)",
                    Some(libc::EINVAL) => {
                        " (the filesystem cannot hold an active swapfile, see dmesg)"
                    }
                    _ => "",
                };
                return Err(e).with_context(|| format!("swapon {}{hint}", sf.path.display()));
            }
            sf.active = true;
        }
        Ok(sf)
    }

    /// The swapfile.
    #[cfg(test)]
    fn path(&self) -> &Path {
        &self.path
    }

    /// swapoff, remove the file, remove the record. Idempotent; on a swapoff
    /// failure file and record stay for the next run.
    pub fn remove(&mut self) -> anyhow::Result<()> {
        if self.active {
            swapoff(&self.path).with_context(|| {
                format!(
                    "swapoff {} (left active and recorded in {}; the next ptelab run retries)",
                    self.path.display(),
                    self.record.display()
                )
            })?;
            self.active = false;
        }
        if self.created {
            remove_swapfile(&self.path)
                .with_context(|| format!("removing {}", self.path.display()))?;
            self.created = false;
        }
        match fs::remove_file(&self.record) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("removing {}", self.record.display())),
        }
    }
}

impl Drop for SwapFile {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("ptelab: warning: swapfile cleanup: {e:#}");
        }
    }
}

/// `fallocate`, or zeros where the filesystem does not support it.
fn allocate(file: &File, bytes: u64) -> anyhow::Result<()> {
    let len = libc::off_t::try_from(bytes).context("swapfile size")?;
    // SAFETY: fallocate on our own open file descriptor.
    let rc = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(file), 0, 0, len) };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
        return Err(e).context("fallocate");
    }
    let zeros = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < bytes {
        let n = (bytes - off).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], off)
            .context("writing zeros")?;
        off += n as u64;
    }
    Ok(())
}

/// Counters of one folio size under
/// `/sys/kernel/mm/transparent_hugepage/hugepages-<N>kB/stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwapoutStats {
    /// Folios swapped out whole.
    pub swpout: u64,
    /// Folios split before swap-out (no contiguous swap slots, or no
    /// large-folio swap support).
    pub swpout_fallback: u64,
    /// Folios of this size split, for any reason.
    pub split: u64,
}

impl SwapoutStats {
    /// The counters for folios of `folio_bytes`; `None` when the kernel has no
    /// such stats (order 0, or a kernel before per-size mTHP stats).
    pub fn read(folio_bytes: u64) -> Option<SwapoutStats> {
        let dir = PathBuf::from(format!(
            "/sys/kernel/mm/transparent_hugepage/hugepages-{}kB/stats",
            folio_bytes >> 10
        ));
        let get = |n: &str| -> Option<u64> {
            fs::read_to_string(dir.join(n))
                .ok()
                .and_then(|t| t.trim().parse().ok())
        };
        Some(SwapoutStats {
            swpout: get("swpout")?,
            swpout_fallback: get("swpout_fallback")?,
            split: get("split").unwrap_or(0),
        })
    }

    /// Counts since `earlier`.
    pub fn since(self, earlier: SwapoutStats) -> SwapoutStats {
        SwapoutStats {
            swpout: self.swpout.saturating_sub(earlier.swpout),
            swpout_fallback: self.swpout_fallback.saturating_sub(earlier.swpout_fallback),
            split: self.split.saturating_sub(earlier.split),
        }
    }

    /// `swpout-whole` (no folio split), `swpout-split` (every folio split
    /// first), `swpout-mixed`, or `swpout-unseen` (nothing counted).
    pub fn verdict(self) -> &'static str {
        match (self.swpout > 0, self.swpout_fallback > 0) {
            (true, false) => "swpout-whole",
            (false, true) => "swpout-split",
            (true, true) => "swpout-mixed",
            (false, false) => "swpout-unseen",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout() {
        let u = [7u8; 16];
        let h = header(65536, u).unwrap();
        assert_eq!(h.len(), 4096);
        assert_eq!(&h[4086..], b"SWAPSPACE2");
        assert_eq!(u32::from_ne_bytes(h[1024..1028].try_into().unwrap()), 1);
        assert_eq!(u32::from_ne_bytes(h[1028..1032].try_into().unwrap()), 65535);
        assert_eq!(u32::from_ne_bytes(h[1032..1036].try_into().unwrap()), 0);
        assert_eq!(&h[1036..1052], &u);
        assert!(h[..1024].iter().all(|&b| b == 0));
        assert!(header(9, u).is_err());
        assert!(header(1 << 33, u).is_err());
    }

    #[test]
    fn header_matches_mkswap() {
        // Compare with util-linux's mkswap where it is installed.
        let Ok(dir) = tempfile::tempdir() else { return };
        let p = dir.path().join("s");
        fs::write(&p, vec![0u8; 1 << 20]).unwrap();
        let ok = std::process::Command::new("mkswap")
            .args(["-U", "00000000-0000-0000-0000-000000000000", "-L", "ptelab"])
            .arg(&p)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            eprintln!("SKIPPED: mkswap unavailable");
            return;
        }
        let theirs = fs::read(&p).unwrap();
        let ours = header(256, [0; 16]).unwrap();
        assert_eq!(&theirs[1024..1068], &ours[1024..1068]);
        assert_eq!(&theirs[4086..4096], &ours[4086..4096]);
    }

    #[test]
    fn proc_swaps_paths() {
        let t = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                 /var/tmp/ptelab-swap-1-0                 file\t\t262140\t\t0\t\t-2\n\
                 /dev/zram0                              partition\t1024\t0\t100\n\
                 /a\\040b/ptelab-swap-2-0\\040(deleted) file 4 0 -3\n";
        assert_eq!(
            active_paths(t),
            vec![
                PathBuf::from("/var/tmp/ptelab-swap-1-0"),
                PathBuf::from("/dev/zram0"),
                PathBuf::from("/a b/ptelab-swap-2-0"),
            ]
        );
    }

    fn dead_record(path: &Path) -> Record {
        Record {
            schema: RECORD_SCHEMA.into(),
            // Above pid_max (4194304): never a live process.
            pid: 4_194_305,
            start_time: 1,
            cmdline: "ptelab bench reclaim --swapfile 1M".into(),
            path: path.to_owned(),
        }
    }

    #[test]
    fn recovery_swaps_off_and_removes_a_dead_writers_file() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("ptelab-swap-4194305-0");
        fs::write(&file, b"x").unwrap();
        let rec = d.path().join("ptelab.swap.4194305-0.json");
        write_record(&rec, &dead_record(&file)).unwrap();
        let swaps = format!(
            "Filename Type Size Used Priority\n{} file 4 0 -2\n",
            file.display()
        );
        let mut offs = Vec::new();
        let msgs = recover_in(d.path(), &swaps, |p| {
            offs.push(p.to_owned());
            Ok(())
        });
        assert_eq!(offs, vec![file.clone()]);
        assert!(!file.exists() && !rec.exists(), "{msgs:?}");
        assert_eq!(msgs.len(), 1);
        assert!(msgs[0].contains("swapped off and removed"), "{msgs:?}");
        assert!(msgs[0].contains("4194305"), "{msgs:?}");
        // Nothing left: a second pass says nothing.
        assert!(recover_in(d.path(), &swaps, |_| Ok(())).is_empty());
    }

    #[test]
    fn recovery_keeps_live_writers_and_failed_swapoffs() {
        let d = tempfile::tempdir().unwrap();
        // Ours, alive: untouched.
        let mine = d.path().join("ptelab-swap-live");
        fs::write(&mine, b"x").unwrap();
        let mut live = Record::new(&mine);
        live.start_time = start_time(std::process::id()).unwrap();
        let live_rec = d.path().join("ptelab.swap.live.json");
        write_record(&live_rec, &live).unwrap();
        // Dead, but swapoff fails: file and record stay for the next run.
        let stuck = d.path().join("ptelab-swap-stuck");
        fs::write(&stuck, b"x").unwrap();
        let stuck_rec = d.path().join("ptelab.swap.stuck.json");
        write_record(&stuck_rec, &dead_record(&stuck)).unwrap();
        let swaps = format!("Filename\n{} file 4 0 -2\n", stuck.display());
        let msgs = recover_in(d.path(), &swaps, |_| {
            Err(std::io::Error::from_raw_os_error(libc::ENOMEM))
        });
        assert!(mine.exists() && live_rec.exists());
        assert!(stuck.exists() && stuck_rec.exists());
        assert_eq!(msgs.len(), 1, "{msgs:?}");
        assert!(msgs[0].contains("swapoff failed"), "{msgs:?}");
    }

    #[test]
    fn recovery_refuses_foreign_paths() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("precious");
        fs::write(&victim, b"keep").unwrap();
        let rec = d.path().join("ptelab.swap.evil.json");
        write_record(&rec, &dead_record(&victim)).unwrap();
        let dotdot = d.path().join("ptelab-swap-x/../precious");
        let rec2 = d.path().join("ptelab.swap.evil2.json");
        write_record(&rec2, &dead_record(&dotdot)).unwrap();
        let msgs = recover_in(d.path(), "", |_| panic!("no swapoff"));
        assert!(victim.exists());
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert!(msgs.iter().all(|m| m.contains("not a ptelab swapfile")));
    }

    #[test]
    fn created_file_is_formatted_and_removed_with_its_record() {
        let base = PathBuf::from("/var/tmp");
        if check_dir(&base, 4 << 20).is_err() {
            eprintln!("SKIPPED: /var/tmp cannot hold a swapfile");
            return;
        }
        let dir = tempfile::tempdir_in(&base).unwrap();
        let recs = tempfile::tempdir().unwrap();
        let mut sf = SwapFile::create_with(dir.path(), recs.path(), 4 << 20, false).unwrap();
        let meta = fs::metadata(sf.path()).unwrap();
        assert_eq!(meta.len(), 4 << 20);
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let mut head = vec![0u8; 4096];
        File::open(sf.path())
            .unwrap()
            .read_exact(&mut head)
            .unwrap();
        assert_eq!(&head[4086..], b"SWAPSPACE2");
        assert_eq!(fs::read_dir(recs.path()).unwrap().count(), 1);
        sf.remove().unwrap();
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(fs::read_dir(recs.path()).unwrap().count(), 0);
    }

    #[test]
    fn tmpfs_and_huge_sizes_are_refused_with_numbers() {
        if let Ok(m) = crate::files::statfs_magic(Path::new("/dev/shm")) {
            if crate::files::fs_name(m) == "tmpfs" {
                let e = check_dir(Path::new("/dev/shm"), 1 << 20).unwrap_err();
                assert!(format!("{e:#}").contains("memory-backed"), "{e:#}");
            }
        }
        let e = check_dir(&std::env::temp_dir(), 1 << 60).unwrap_err();
        let m = format!("{e:#}");
        assert!(
            m.contains("available") || m.contains("memory-backed"),
            "{m}"
        );
        assert!(check_dir(&std::env::temp_dir(), 4096).is_err());
    }

    #[test]
    fn verdicts() {
        let s = |a, b| SwapoutStats {
            swpout: a,
            swpout_fallback: b,
            split: 0,
        };
        assert_eq!(s(3, 0).verdict(), "swpout-whole");
        assert_eq!(s(0, 3).verdict(), "swpout-split");
        assert_eq!(s(1, 3).verdict(), "swpout-mixed");
        assert_eq!(s(0, 0).verdict(), "swpout-unseen");
        assert_eq!(s(5, 7).since(s(2, 7)), s(3, 0));
    }
}
