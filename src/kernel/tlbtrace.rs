//! Count `tlb:tlb_flush` tracepoint events caused by the calling thread, with
//! `perf_event_open`, and break them down by `reason` and `pages` from sampled
//! raw records.
//!
//! # What is counted
//!
//! Both perf events are per-thread (`pid = 0`, `cpu = -1`, inherit off): they
//! count every `tlb:tlb_flush` event emitted on whatever CPU while *this
//! thread* is the current task, in any context (syscall, fault, interrupt).
//! On x86 (`arch/x86/mm/tlb.c`, docs/kernel.md §5.4–5.5) that means:
//!
//! * seen: `local_mm_shootdown` (this thread's own `flush_tlb_func` for its mm,
//!   e.g. the single flush at the end of `mprotect`), `remote_ipi_send` (emitted
//!   by the initiator in `native_flush_tlb_multi` *before* deciding which CPUs
//!   really get an IPI: lazy-TLB CPUs are skipped but the event is still
//!   emitted), `local_shootdown` (kernel-address flushes this thread does);
//! * seen only by accident: `remote_shootdown` / `remote_wrong_cpu` events
//!   handled in IRQ context on this thread's CPU while it runs (caused by
//!   someone else's flush);
//! * not seen: the `remote_shootdown` handlers that *our* flush runs on other
//!   CPUs (other contexts), and `flush_on_task_switch` at context switches
//!   (emitted inside `switch_mm`, after perf has switched the old task's
//!   events off and before it switches the new one's on); it is seen only
//!   when the thread switches mm itself (`exec`).
//!
//! Measured on this 6.18 x86-64 guest (perf record, pinned, 100 calls each):
//! `mprotect` RW→RO, RO→RW and RW→NONE of a touched private anonymous VMA give
//! exactly one `local_mm_shootdown` per call with `pages` = VMA pages when
//! ≤ 33 and `all` above (4 MiB with 4K, 64K or PTE-mapped 2M folios: `all`;
//! PMD-mapped 2M: `pages = 2`, the PMD-stride count); NONE→RW gives none.
//! When the process has ever run on another CPU (or other threads of it run
//! there), that CPU stays in `mm_cpumask` and each flush additionally emits one
//! `remote_ipi_send` with the same `pages` (pinning did not remove it here:
//! an idle CPU keeps the mm in lazy-TLB mode), so read the breakdown, not only
//! the total. Under the multi-threaded test harness every flush had one; a
//! single-threaded process that only ever ran on one CPU had none.
//!
//! # tracefs
//!
//! The tracepoint id and format are read from a mounted tracefs. When none is
//! mounted, tracefs is mounted at `/sys/kernel/tracing` just long enough to
//! read the two files and unmounted right away (left alone when the unmount
//! reports `EBUSY`, i.e. someone else started using it), so the machine is left
//! as found even if the process dies later. The parsed result is cached for
//! the life of the process; the perf events themselves do not need tracefs.

// The runner (issue 4) is the first caller; until it lands nothing in the
// binary uses this module outside tests.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fmt;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context};
use perf_event_open_sys as sys;
use sys::bindings::{perf_event_attr, perf_event_header, perf_event_mmap_page};

use crate::record::TlbFlushes;

/// Where tracefs is mounted on current kernels, and where we mount it.
const TRACEFS_DIR: &str = "/sys/kernel/tracing";
/// The tracepoint's directory below a tracefs mount point.
const EVENT_DIR: &str = "events/tlb/tlb_flush";
/// Data pages of the sampling ring buffer (a power of two); one record is
/// 40 bytes, so 64 pages hold about 6500 records between drains.
const RING_DATA_PAGES: usize = 64;
/// `PERF_IOC_FLAG_GROUP`: apply an ioctl to the whole event group.
const IOC_FLAG_GROUP: u32 = 1;

/// `enum tlb_flush_reason` (include/linux/mm_types.h) in the names used as
/// breakdown keys: the tracepoint's `__print_symbolic` strings, lower-cased,
/// with every run of non-alphanumerics replaced by `_`.
const KNOWN_REASONS: [(i64, &str); 6] = [
    (0, "flush_on_task_switch"),
    (1, "remote_shootdown"),
    (2, "local_shootdown"),
    (3, "local_mm_shootdown"),
    (4, "remote_ipi_send"),
    (5, "remote_wrong_cpu"),
];

/// Why the tracepoint cannot be counted here. `Display` says why in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unavailable {
    pub reason: String,
}

impl Unavailable {
    fn new(reason: impl Into<String>) -> Unavailable {
        Unavailable {
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tlb:tlb_flush cannot be counted: {}", self.reason)
    }
}

impl std::error::Error for Unavailable {}

/// Events by reason and pages from sampled raw records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Breakdown {
    /// `"reason/pages"` -> sampled events, e.g. `"local_mm_shootdown/4"`;
    /// pages is `all` for `TLB_FLUSH_ALL`.
    pub events: BTreeMap<String, u64>,
    /// Records the kernel dropped because the ring buffer was full
    /// (`PERF_RECORD_LOST` and `PERF_RECORD_LOST_SAMPLES`).
    pub lost: u64,
    /// Sample records whose raw data was too short to decode.
    pub undecoded: u64,
}

impl Breakdown {
    /// Samples decoded into `events`.
    pub fn sampled(&self) -> u64 {
        self.events.values().sum()
    }

    /// Sampled events of one key (0 when absent).
    #[cfg(test)]
    pub fn get(&self, key: &str) -> u64 {
        self.events.get(key).copied().unwrap_or(0)
    }
}

/// A field of the tracepoint's raw record, from its format file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Field {
    offset: usize,
    size: usize,
    signed: bool,
}

impl Field {
    /// The field's bits, zero-extended to 64 (`None` when `raw` is too short
    /// or the size is not 1, 2, 4 or 8).
    fn bits(&self, raw: &[u8]) -> Option<u64> {
        if !matches!(self.size, 1 | 2 | 4 | 8) {
            return None;
        }
        let bytes = raw.get(self.offset..self.offset.checked_add(self.size)?)?;
        let mut buf = [0u8; 8];
        buf[..self.size].copy_from_slice(bytes);
        let v = u64::from_ne_bytes(buf);
        #[cfg(target_endian = "big")]
        let v = v >> (64 - 8 * self.size);
        Some(v)
    }

    /// The value sign-extended per the format's `signed:` flag.
    fn signed_value(&self, raw: &[u8]) -> Option<i64> {
        let v = self.bits(raw)?;
        let shift = 64 - 8 * self.size as u32;
        Some(if self.signed {
            ((v << shift) as i64) >> shift
        } else {
            v as i64
        })
    }

    /// All bits of the field set (`TLB_FLUSH_ALL` = -1 stored in it).
    fn all_ones(&self) -> u64 {
        u64::MAX >> (64 - 8 * self.size as u32)
    }
}

/// What the format file says about `tlb:tlb_flush`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TlbFormat {
    reason: Field,
    pages: Field,
    /// Reason number -> key name; from `__print_symbolic` when present,
    /// else [`KNOWN_REASONS`].
    reasons: BTreeMap<i64, String>,
}

impl TlbFormat {
    /// `"reason/pages"` for one raw record.
    fn key(&self, raw: &[u8]) -> Option<String> {
        let reason = self.reason.signed_value(raw)?;
        let pages = self.pages.bits(raw)?;
        let name = match self.reasons.get(&reason) {
            Some(n) => n.clone(),
            None => format!("reason_{reason}"),
        };
        Some(if pages == self.pages.all_ones() {
            format!("{name}/all")
        } else {
            format!("{name}/{pages}")
        })
    }
}

/// Parse a tracepoint format file: the `reason` and `pages` fields and the
/// reason names.
fn parse_format(text: &str) -> Result<TlbFormat, String> {
    let mut fields: BTreeMap<String, Field> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let mut parts = rest.split(';').map(str::trim);
        let decl = parts.next().unwrap_or("");
        let mut offset = None;
        let mut size = None;
        let mut signed = false;
        for p in parts {
            if let Some(v) = p.strip_prefix("offset:") {
                offset = v.trim().parse::<usize>().ok();
            } else if let Some(v) = p.strip_prefix("size:") {
                size = v.trim().parse::<usize>().ok();
            } else if let Some(v) = p.strip_prefix("signed:") {
                signed = v.trim() == "1";
            }
        }
        // The name is the declaration's last identifier (`unsigned long pages`,
        // `char comm[16]`).
        let decl = decl.split('[').next().unwrap_or(decl);
        let Some(name) = decl.split_whitespace().last() else {
            continue;
        };
        if let (Some(offset), Some(size)) = (offset, size) {
            fields.insert(
                name.trim_start_matches('*').to_string(),
                Field {
                    offset,
                    size,
                    signed,
                },
            );
        }
    }
    let field = |name: &str| -> Result<Field, String> {
        let f = *fields
            .get(name)
            .ok_or_else(|| format!("format has no field `{name}`"))?;
        if !matches!(f.size, 1 | 2 | 4 | 8) {
            return Err(format!("field `{name}` has unsupported size {}", f.size));
        }
        Ok(f)
    };
    let reason = field("reason")?;
    let pages = field("pages")?;
    let reasons = parse_print_symbolic(text, "REC->reason").unwrap_or_else(|| {
        KNOWN_REASONS
            .iter()
            .map(|&(n, s)| (n, s.to_string()))
            .collect()
    });
    Ok(TlbFormat {
        reason,
        pages,
        reasons,
    })
}

/// Lower-case, runs of non-alphanumerics to one `_`, no `_` at either end:
/// "local MM shootdown" -> "local_mm_shootdown".
fn normalize_name(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    out
}

/// The `{ value, "name" }` table of `__print_symbolic(<arg>, ...)` in the
/// print fmt, names normalized. `None` when absent or unparsable.
fn parse_print_symbolic(text: &str, arg: &str) -> Option<BTreeMap<i64, String>> {
    let start = text.find("__print_symbolic(")? + "__print_symbolic(".len();
    let rest = text[start..].trim_start();
    let rest = rest.strip_prefix(arg)?.trim_start().strip_prefix(',')?;
    let mut map = BTreeMap::new();
    let mut s = rest.trim_start();
    while let Some(body) = s.strip_prefix('{') {
        let (num, after) = body.split_once(',')?;
        let num = num.trim();
        let value = if let Some(hex) = num.strip_prefix("0x") {
            i64::from_str_radix(hex, 16).ok()?
        } else {
            num.parse::<i64>().ok()?
        };
        let after = after.trim_start().strip_prefix('"')?;
        let (name, after) = after.split_once('"')?;
        let after = after.trim_start().strip_prefix('}')?;
        map.insert(value, normalize_name(name));
        s = after.trim_start();
        match s.strip_prefix(',') {
            Some(next) => s = next.trim_start(),
            None => break,
        }
    }
    if map.is_empty() {
        None
    } else {
        Some(map)
    }
}

/// Tracepoint id and format, read once per process.
#[derive(Clone, Debug)]
struct TracepointInfo {
    id: u64,
    format: TlbFormat,
}

fn tracepoint_info() -> Result<TracepointInfo, Unavailable> {
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

/// Undo `\040`-style escapes of /proc/self/mounts.
fn unescape_mount_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let digits = &b[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let v = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                out.push(v as u8);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Mount points of tracefs instances, from /proc/self/mounts.
fn tracefs_mounts() -> Vec<PathBuf> {
    let Ok(text) = fs::read_to_string("/proc/self/mounts") else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let _dev = it.next()?;
            let dir = it.next()?;
            let fstype = it.next()?;
            (fstype == "tracefs").then(|| PathBuf::from(unescape_mount_path(dir)))
        })
        .collect();
    // Prefer the canonical place.
    out.sort_by_key(|p| p != Path::new(TRACEFS_DIR));
    out.dedup();
    out
}

fn load_tracepoint_info() -> Result<TracepointInfo, Unavailable> {
    let mounts = tracefs_mounts();
    if let Some(root) = mounts.first() {
        return read_tracepoint(root);
    }
    // Not mounted anywhere: mount it for the duration of the read.
    let dir = CString::new(TRACEFS_DIR).expect("no NUL in a constant");
    // SAFETY: all pointers are valid NUL-terminated strings that outlive the
    // call; `data` may be null for tracefs.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            dir.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
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
    let result = read_tracepoint(Path::new(TRACEFS_DIR));
    // A failure (EBUSY: someone else started using it meanwhile) leaves it
    // mounted for them; there is nothing else to do about it.
    // SAFETY: `dir` is a valid NUL-terminated path.
    let _ = unsafe { libc::umount2(dir.as_ptr(), 0) };
    result
}

fn read_tracepoint(root: &Path) -> Result<TracepointInfo, Unavailable> {
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
    Ok(TracepointInfo { id, format })
}

fn paranoid() -> String {
    fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// `perf_event_open` for this thread on any CPU.
fn open_event(attr: &mut perf_event_attr, group: Option<&OwnedFd>) -> Result<OwnedFd, Unavailable> {
    let group_fd = group.map_or(-1, |g| g.as_raw_fd());
    // SAFETY: `attr` is a fully initialized perf_event_attr with `size` set;
    // pid 0 / cpu -1 counts the calling thread on any CPU.
    let fd = unsafe {
        sys::perf_event_open(
            attr,
            0,
            -1,
            group_fd,
            sys::bindings::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        let err = io::Error::last_os_error();
        let why = match err.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => format!(
                "not permitted: tracepoint events need root or CAP_PERFMON \
                 (kernel.perf_event_paranoid = {})",
                paranoid()
            ),
            Some(libc::ENOSYS) => "the kernel has no perf events (CONFIG_PERF_EVENTS off)".into(),
            Some(libc::ENOENT) | Some(libc::EINVAL) => format!(
                "the kernel rejected tracepoint id {} (CONFIG_EVENT_TRACING off?)",
                attr.config
            ),
            _ => "unexpected error".into(),
        };
        return Err(Unavailable::new(format!("perf_event_open: {err}: {why}")));
    }
    // SAFETY: `fd` is a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn base_attr(id: u64) -> perf_event_attr {
    // SAFETY: perf_event_attr is plain old data; all-zero is its documented
    // "nothing requested" value.
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = sys::bindings::PERF_TYPE_TRACEPOINT;
    attr.size = std::mem::size_of::<perf_event_attr>() as u32;
    attr.config = id;
    attr.set_disabled(1);
    attr.set_inherit(0);
    attr
}

/// Copy `out.len()` bytes starting at ring position `pos` (wrapping).
///
/// # Safety
/// `data` must point to `size` readable bytes; `size` must be > 0.
unsafe fn ring_copy(data: *const u8, size: usize, pos: u64, out: &mut [u8]) {
    let start = (pos % size as u64) as usize;
    let first = out.len().min(size - start);
    // SAFETY: start + first <= size and the rest (< size) starts at 0: both
    // ranges lie inside the `size` readable bytes; `out` is a distinct buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(data.add(start), out.as_mut_ptr(), first);
        std::ptr::copy_nonoverlapping(data, out.as_mut_ptr().add(first), out.len() - first);
    }
}

/// Walk the records between `tail` and `head` of a perf ring's data area,
/// calling `on(type, body)` with each record's bytes after its header.
/// Returns the new tail (= head), or an error on a malformed record.
///
/// # Safety
/// `data` must point to `size` readable bytes (`size` > 0) holding records
/// written up to `head`.
unsafe fn drain_ring(
    data: *const u8,
    size: usize,
    mut tail: u64,
    head: u64,
    mut on: impl FnMut(u32, &[u8]),
) -> anyhow::Result<u64> {
    let hdr_len = std::mem::size_of::<perf_event_header>();
    let mut buf = Vec::new();
    while tail < head {
        let mut hdr = [0u8; 8];
        // SAFETY: forwarded from the caller's contract.
        unsafe { ring_copy(data, size, tail, &mut hdr) };
        let ty = u32::from_ne_bytes(hdr[0..4].try_into().expect("4 bytes"));
        let len = u16::from_ne_bytes(hdr[6..8].try_into().expect("2 bytes")) as u64;
        if len < hdr_len as u64 || len > head - tail || len as usize > size {
            bail!(
                "malformed perf record at {tail}: size {len}, {} bytes left",
                head - tail
            );
        }
        buf.resize(len as usize - hdr_len, 0);
        // SAFETY: forwarded from the caller's contract.
        unsafe { ring_copy(data, size, tail + hdr_len as u64, &mut buf) };
        on(ty, &buf);
        tail += len;
    }
    Ok(tail)
}

/// Fold one ring record into a breakdown.
fn account_record(format: &TlbFormat, ty: u32, body: &[u8], into: &mut Breakdown) {
    match ty {
        sys::bindings::PERF_RECORD_SAMPLE => {
            // sample_type = RAW only: u32 size, then the raw trace entry.
            let raw = body.get(0..4).and_then(|s| {
                let n = u32::from_ne_bytes(s.try_into().ok()?) as usize;
                body.get(4..4 + n)
            });
            match raw.and_then(|r| format.key(r)) {
                Some(key) => *into.events.entry(key).or_insert(0) += 1,
                None => into.undecoded += 1,
            }
        }
        sys::bindings::PERF_RECORD_LOST => {
            // u64 id, u64 lost.
            if let Some(n) = body.get(8..16) {
                into.lost += u64::from_ne_bytes(n.try_into().expect("8 bytes"));
            }
        }
        sys::bindings::PERF_RECORD_LOST_SAMPLES => {
            if let Some(n) = body.get(0..8) {
                into.lost += u64::from_ne_bytes(n.try_into().expect("8 bytes"));
            }
        }
        _ => {}
    }
}

/// The sampling event and its mmap'd ring buffer.
struct Sampler {
    /// Kept open for the life of the ring; closed after the unmap in `drop`.
    _event: OwnedFd,
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
}

impl Sampler {
    fn open(id: u64, group: &OwnedFd) -> Result<Sampler, Unavailable> {
        let mut attr = base_attr(id);
        attr.__bindgen_anon_1.sample_period = 1;
        attr.sample_type = sys::bindings::PERF_SAMPLE_RAW as u64;
        let fd = open_event(&mut attr, Some(group))?;
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let map_len = page * (1 + RING_DATA_PAGES);
        // SAFETY: mapping a perf fd with the size perf requires (1 + 2^n
        // pages); the result is checked before use.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let err = io::Error::last_os_error();
            return Err(Unavailable::new(format!(
                "cannot mmap the sampling ring buffer ({map_len} bytes): {err} \
                 (kernel.perf_event_mlock_kb too small?)"
            )));
        }
        let meta = base as *const perf_event_mmap_page;
        // SAFETY: `meta` points to the mapped control page; data_offset and
        // data_size are written by the kernel before mmap returns.
        let (off, size) = unsafe { ((*meta).data_offset as usize, (*meta).data_size as usize) };
        let (data_offset, data_size) = if size == 0 {
            (page, page * RING_DATA_PAGES) // kernels before 4.1
        } else {
            (off, size)
        };
        Ok(Sampler {
            _event: fd,
            base: base as *mut u8,
            map_len,
            data_offset,
            data_size,
        })
    }

    fn drain(&mut self, format: &TlbFormat, into: &mut Breakdown) -> anyhow::Result<()> {
        let meta = self.base as *mut perf_event_mmap_page;
        // SAFETY: data_head/data_tail are naturally aligned u64 fields of the
        // mapped control page; the kernel updates data_head concurrently,
        // so both are accessed atomically (acquire head, release tail, as
        // perf_event_open(2) prescribes).
        let (head_a, tail_a) = unsafe {
            (
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_head)),
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_tail)),
            )
        };
        let head = head_a.load(Ordering::Acquire);
        let tail = tail_a.load(Ordering::Relaxed);
        // SAFETY: the data area [data_offset, data_offset + data_size) lies
        // inside the mapping, and records up to `head` are complete (acquire).
        let result = unsafe {
            drain_ring(
                self.base.add(self.data_offset),
                self.data_size,
                tail,
                head,
                |ty, body| account_record(format, ty, body, into),
            )
        };
        // Hand the space back even after a malformed record.
        tail_a.store(head, Ordering::Release);
        result.map(|_| ())
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        // SAFETY: `base`/`map_len` are exactly the mapping made in `open`,
        // unmapped once here.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.map_len) };
    }
}

/// Counts `tlb:tlb_flush` events of the calling thread, and optionally samples
/// every event for a breakdown by reason and pages.
///
/// Bound to the thread that opened it (`pid = 0`): not `Send`.
pub struct FlushCounter {
    counter: OwnedFd,
    sampler: Option<Sampler>,
    format: TlbFormat,
    tally: Breakdown,
}

impl FlushCounter {
    /// Open the counter (and, with `with_breakdown`, the sampler) disabled.
    pub fn open(with_breakdown: bool) -> Result<FlushCounter, Unavailable> {
        let info = tracepoint_info()?;
        let mut attr = base_attr(info.id);
        let counter = open_event(&mut attr, None)?;
        let sampler = if with_breakdown {
            Some(Sampler::open(info.id, &counter)?)
        } else {
            None
        };
        Ok(FlushCounter {
            counter,
            sampler,
            format: info.format,
            tally: Breakdown::default(),
        })
    }

    /// Whether a breakdown is being sampled.
    pub fn has_breakdown(&self) -> bool {
        self.sampler.is_some()
    }

    fn ioctl(
        &self,
        what: &str,
        f: unsafe fn(libc::c_int, libc::c_uint) -> libc::c_int,
    ) -> anyhow::Result<()> {
        // SAFETY: the fd is our open perf event (the group leader); the
        // argument is the documented PERF_IOC_FLAG_GROUP flag.
        let rc = unsafe { f(self.counter.as_raw_fd(), IOC_FLAG_GROUP) };
        if rc != 0 {
            return Err(io::Error::last_os_error()).with_context(|| format!("perf ioctl {what}"));
        }
        Ok(())
    }

    /// Start counting (and sampling).
    pub fn start(&mut self) -> anyhow::Result<()> {
        self.ioctl("ENABLE", sys::ioctls::ENABLE)
    }

    /// Stop counting (and sampling).
    pub fn stop(&mut self) -> anyhow::Result<()> {
        self.ioctl("DISABLE", sys::ioctls::DISABLE)
    }

    /// Zero the count and forget samples taken so far.
    pub fn reset(&mut self) -> anyhow::Result<()> {
        self.ioctl("RESET", sys::ioctls::RESET)?;
        if let Some(s) = self.sampler.as_mut() {
            let mut discard = Breakdown::default();
            s.drain(&self.format, &mut discard)?;
        }
        self.tally = Breakdown::default();
        Ok(())
    }

    /// Events counted since open or the last reset.
    pub fn count(&self) -> anyhow::Result<u64> {
        let mut buf = [0u8; 8];
        // SAFETY: reading at most 8 bytes into an 8-byte buffer from our fd.
        let n = unsafe {
            libc::read(
                self.counter.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error()).context("read perf counter");
        }
        if n as usize != buf.len() {
            bail!("short read of perf counter: {n} bytes");
        }
        Ok(u64::from_ne_bytes(buf))
    }

    /// Move records out of the ring buffer into the running tally. Cheap when
    /// the ring is empty; call it between measured calls when many events are
    /// expected, so the ring does not overflow.
    pub fn drain(&mut self) -> anyhow::Result<()> {
        match self.sampler.as_mut() {
            Some(s) => s.drain(&self.format, &mut self.tally),
            None => Ok(()),
        }
    }

    /// Breakdown of the events sampled since open or the last reset (drains
    /// the ring first). Errors when opened without breakdown.
    pub fn breakdown(&mut self) -> anyhow::Result<Breakdown> {
        if self.sampler.is_none() {
            bail!("FlushCounter opened without breakdown");
        }
        self.drain()?;
        Ok(self.tally.clone())
    }
}

/// Count flushes over `calls` invocations of `f` (a separate, untimed pass).
///
/// Counts in the calling thread; pin it first (the caller's job) so the
/// numbers do not include migration effects. The breakdown is drained after
/// every call. When the tracepoint cannot be used, `unavailable` says why and
/// `per_call` is `None`; when only the breakdown cannot be sampled, the count
/// is given with an empty breakdown. Records lost to a full ring buffer are
/// reported under the breakdown key `"lost"` (absent when none).
#[cfg(test)]
pub fn count_flushes(calls: u64, f: impl FnMut()) -> TlbFlushes {
    count_flushes_with(calls, 1, || {}, f)
}

/// Like [`count_flushes`], but `setup` runs before each invocation of `f`
/// with the counter stopped (e.g. to bring a region to a phase's start state),
/// and each invocation of `f` makes `calls_per_invocation` mm calls.
pub fn count_flushes_with(
    invocations: u64,
    calls_per_invocation: u64,
    mut setup: impl FnMut(),
    mut f: impl FnMut(),
) -> TlbFlushes {
    let calls = invocations * calls_per_invocation;
    let unavailable = |why: String| TlbFlushes {
        calls,
        unavailable: Some(why),
        ..TlbFlushes::default()
    };
    let mut counter = match FlushCounter::open(true) {
        Ok(c) => c,
        Err(_) => match FlushCounter::open(false) {
            Ok(c) => c,
            Err(e) => return unavailable(e.to_string()),
        },
    };
    let mut run = || -> anyhow::Result<TlbFlushes> {
        counter.reset()?;
        for _ in 0..invocations {
            setup();
            counter.start()?;
            f();
            counter.stop()?;
            counter.drain()?;
        }
        let events = counter.count()?;
        let mut breakdown = BTreeMap::new();
        if counter.has_breakdown() {
            let b = counter.breakdown()?;
            breakdown = b.events;
            if b.lost > 0 {
                breakdown.insert("lost".to_string(), b.lost);
            }
        }
        Ok(TlbFlushes {
            per_call: (calls > 0).then(|| events as f64 / calls as f64),
            events,
            calls,
            breakdown,
            unavailable: None,
        })
    };
    match run() {
        Ok(t) => t,
        Err(e) => unavailable(format!("counting tlb:tlb_flush failed: {e:#}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The format file of this 6.18 kernel, verbatim.
    const FORMAT_6_18: &str = "name: tlb_flush
ID: 188
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:int reason;\toffset:8;\tsize:4;\tsigned:1;
\tfield:unsigned long pages;\toffset:16;\tsize:8;\tsigned:0;

print fmt: \"pages:%ld reason:%s (%d)\", REC->pages, __print_symbolic(REC->reason, { 0, \"flush on task switch\" }, { 1, \"remote shootdown\" }, { 2, \"local shootdown\" }, { 3, \"local MM shootdown\" }, { 4, \"remote IPI send\" }, { 5, \"remote wrong CPU\" }), REC->reason
";

    fn raw_record(fmt: &TlbFormat, reason: i32, pages: u64) -> Vec<u8> {
        let mut raw = vec![0u8; 28];
        raw[0..2].copy_from_slice(&188u16.to_ne_bytes());
        raw[fmt.reason.offset..fmt.reason.offset + 4].copy_from_slice(&reason.to_ne_bytes());
        raw[fmt.pages.offset..fmt.pages.offset + 8].copy_from_slice(&pages.to_ne_bytes());
        raw
    }

    #[test]
    fn parses_the_6_18_format() {
        let f = parse_format(FORMAT_6_18).unwrap();
        assert_eq!(
            f.reason,
            Field {
                offset: 8,
                size: 4,
                signed: true
            }
        );
        assert_eq!(
            f.pages,
            Field {
                offset: 16,
                size: 8,
                signed: false
            }
        );
        let names: Vec<&str> = f.reasons.values().map(String::as_str).collect();
        assert_eq!(
            names,
            KNOWN_REASONS.iter().map(|&(_, s)| s).collect::<Vec<_>>(),
            "the symbolic names normalize to the fallback names"
        );
    }

    #[test]
    fn falls_back_to_the_enum_without_print_symbolic() {
        let text = FORMAT_6_18.split("print fmt").next().unwrap().to_string()
            + "print fmt: \"pages:%ld reason:%d\", REC->pages, REC->reason\n";
        let f = parse_format(&text).unwrap();
        assert_eq!(
            f.reasons.get(&3).map(String::as_str),
            Some("local_mm_shootdown")
        );
        assert_eq!(f.reasons.len(), KNOWN_REASONS.len());
    }

    #[test]
    fn parses_older_names_and_other_offsets() {
        let text = "format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned long pages;\toffset:8;\tsize:8;\tsigned:0;
\tfield:int reason;\toffset:16;\tsize:4;\tsigned:1;

print fmt: \"pages:%ld reason:%s (%d)\", REC->pages, __print_symbolic(REC->reason, { 0, \"flush on task switch\" }, { 1, \"remote shootdown\" }, { 2, \"local shootdown\" }, { 3, \"local mm shootdown\" }, { 4, \"remote ipi send\" }), REC->reason
";
        let f = parse_format(text).unwrap();
        assert_eq!(f.pages.offset, 8);
        assert_eq!(f.reason.offset, 16);
        assert_eq!(f.reasons.len(), 5);
        assert_eq!(f.reasons[&4], "remote_ipi_send");
        let raw = raw_record(&f, 3, 7);
        assert_eq!(f.key(&raw).unwrap(), "local_mm_shootdown/7");
    }

    #[test]
    fn rejects_a_format_without_the_fields() {
        let err = parse_format("format:\n\tfield:int reason;\toffset:8;\tsize:4;\tsigned:1;\n")
            .unwrap_err();
        assert!(err.contains("pages"), "{err}");
    }

    #[test]
    fn keys_name_reason_and_pages() {
        let f = parse_format(FORMAT_6_18).unwrap();
        assert_eq!(
            f.key(&raw_record(&f, 3, 4)).unwrap(),
            "local_mm_shootdown/4"
        );
        assert_eq!(
            f.key(&raw_record(&f, 4, u64::MAX)).unwrap(),
            "remote_ipi_send/all"
        );
        assert_eq!(f.key(&raw_record(&f, 5, 0)).unwrap(), "remote_wrong_cpu/0");
        assert_eq!(f.key(&raw_record(&f, 9, 1)).unwrap(), "reason_9/1");
        assert_eq!(
            f.key(&raw_record(&f, 3, 4)[..20]),
            None,
            "truncated raw data"
        );
    }

    #[test]
    fn normalizes_names() {
        assert_eq!(normalize_name("local MM shootdown"), "local_mm_shootdown");
        assert_eq!(normalize_name(" remote IPI send "), "remote_ipi_send");
        assert_eq!(normalize_name("a--b"), "a_b");
    }

    #[test]
    fn unescapes_mount_paths() {
        assert_eq!(unescape_mount_path("/a\\040b"), "/a b");
        assert_eq!(
            unescape_mount_path("/sys/kernel/tracing"),
            "/sys/kernel/tracing"
        );
        assert_eq!(unescape_mount_path("/x\\"), "/x\\");
    }

    /// A ring of `size` bytes with `records` written from position `start`.
    fn ring_with(size: usize, start: u64, records: &[Vec<u8>]) -> (Vec<u8>, u64) {
        let mut ring = vec![0xAAu8; size];
        let mut pos = start;
        for r in records {
            for &b in r {
                ring[(pos % size as u64) as usize] = b;
                pos += 1;
            }
        }
        (ring, pos)
    }

    fn sample_record(raw: &[u8]) -> Vec<u8> {
        let body_len = 4 + raw.len();
        let len = (8 + body_len).next_multiple_of(8);
        let mut r = Vec::with_capacity(len);
        r.extend_from_slice(&sys::bindings::PERF_RECORD_SAMPLE.to_ne_bytes());
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(&(len as u16).to_ne_bytes());
        r.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
        r.extend_from_slice(raw);
        r.resize(len, 0);
        r
    }

    fn lost_record(n: u64) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&sys::bindings::PERF_RECORD_LOST.to_ne_bytes());
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(&24u16.to_ne_bytes());
        r.extend_from_slice(&1u64.to_ne_bytes());
        r.extend_from_slice(&n.to_ne_bytes());
        r
    }

    #[test]
    fn drains_records_across_the_ring_end() {
        let f = parse_format(FORMAT_6_18).unwrap();
        let recs = vec![
            sample_record(&raw_record(&f, 3, 4)),
            sample_record(&raw_record(&f, 3, u64::MAX)),
            lost_record(5),
            sample_record(&raw_record(&f, 4, 4)),
        ];
        // 160-byte ring (the records take 144), starting 4 bytes before its
        // end: even the first header wraps (the kernel keeps headers 8-byte
        // aligned, but the reader must not care).
        let start = 10 * 160 + 156;
        let (ring, head) = ring_with(160, start, &recs);
        let mut b = Breakdown::default();
        // SAFETY: `ring` is a live 160-byte buffer.
        let tail = unsafe {
            drain_ring(ring.as_ptr(), ring.len(), start, head, |ty, body| {
                account_record(&f, ty, body, &mut b)
            })
        }
        .unwrap();
        assert_eq!(tail, head);
        assert_eq!(b.get("local_mm_shootdown/4"), 1);
        assert_eq!(b.get("local_mm_shootdown/all"), 1);
        assert_eq!(b.get("remote_ipi_send/4"), 1);
        assert_eq!(b.lost, 5);
        assert_eq!(b.sampled(), 3);
        assert_eq!(b.undecoded, 0);
    }

    #[test]
    fn rejects_a_malformed_record() {
        let mut bad = lost_record(1);
        bad[6..8].copy_from_slice(&4u16.to_ne_bytes()); // size < header
        let (ring, head) = ring_with(64, 0, &[bad]);
        // SAFETY: `ring` is a live 64-byte buffer.
        let r = unsafe { drain_ring(ring.as_ptr(), ring.len(), 0, head, |_, _| {}) };
        assert!(r.is_err());
    }

    // ---- Against the running kernel (need root and the tracepoint) ----

    /// Serializes the kernel tests: they pin their thread, and tracefs may be
    /// mounted and unmounted underneath.
    static KERNEL_TESTS: Mutex<()> = Mutex::new(());

    /// Why the kernel tests cannot run here, if they cannot.
    fn skip_reason() -> Option<String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Some("not root".into());
        }
        FlushCounter::open(true).err().map(|e| e.to_string())
    }

    macro_rules! need_kernel {
        () => {
            let _guard = KERNEL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(why) = skip_reason() {
                eprintln!("skipping: {why}");
                return;
            }
        };
    }

    /// Pins the calling thread to the CPU it is on; restores on drop.
    struct Pin(libc::cpu_set_t);

    impl Pin {
        fn here() -> Pin {
            // SAFETY: cpu_set_t is plain data; the sched_* calls get valid
            // pointers and sizes and act on the calling thread (pid 0).
            unsafe {
                let mut old: libc::cpu_set_t = std::mem::zeroed();
                assert_eq!(
                    libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut old),
                    0
                );
                let cpu = libc::sched_getcpu();
                assert!(cpu >= 0);
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu as usize, &mut set);
                assert_eq!(
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
                    0
                );
                Pin(old)
            }
        }
    }

    impl Drop for Pin {
        fn drop(&mut self) {
            // SAFETY: restores the affinity saved in `here`.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.0) };
        }
    }

    /// A private anonymous mapping of `pages` 4K pages, its own VMA (unmapped
    /// gaps on both sides, no THP), every page written.
    struct Area {
        addr: *mut libc::c_void,
        len: usize,
    }

    const PAGE: usize = 4096;
    const RW: libc::c_int = libc::PROT_READ | libc::PROT_WRITE;

    impl Area {
        fn new(pages: usize) -> Area {
            let len = pages * PAGE;
            // SAFETY: fresh anonymous mappings at kernel-chosen or
            // just-reserved addresses; nothing else refers to them.
            unsafe {
                let res = libc::mmap(
                    std::ptr::null_mut(),
                    len + 2 * PAGE,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(res, libc::MAP_FAILED);
                let addr = (res as *mut u8).add(PAGE) as *mut libc::c_void;
                let p = libc::mmap(
                    addr,
                    len,
                    RW,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                );
                assert_eq!(p, addr);
                libc::munmap(res, PAGE);
                libc::munmap((addr as *mut u8).add(len) as *mut libc::c_void, PAGE);
                libc::madvise(addr, len, libc::MADV_NOHUGEPAGE);
                std::ptr::write_bytes(addr as *mut u8, 1, len);
                Area { addr, len }
            }
        }

        fn protect(&self, prot: libc::c_int) {
            // SAFETY: changes protection of our own mapping only; no Rust
            // references into it exist.
            let rc = unsafe { libc::mprotect(self.addr, self.len, prot) };
            assert_eq!(rc, 0, "mprotect: {}", io::Error::last_os_error());
        }
    }

    impl Drop for Area {
        fn drop(&mut self) {
            // SAFETY: unmaps exactly the mapping made in `new`.
            unsafe { libc::munmap(self.addr, self.len) };
        }
    }

    /// Count `calls` transitions `from` -> `to` (only the second mprotect is
    /// counted), after a warm-up.
    fn count_transition(
        pages: usize,
        from: libc::c_int,
        to: libc::c_int,
        calls: u64,
    ) -> (u64, Breakdown) {
        let _pin = Pin::here();
        let area = Area::new(pages);
        let mut c = FlushCounter::open(true).unwrap();
        for _ in 0..3 {
            area.protect(from);
            area.protect(to);
        }
        c.reset().unwrap();
        for _ in 0..calls {
            area.protect(from);
            c.start().unwrap();
            area.protect(to);
            c.stop().unwrap();
        }
        let n = c.count().unwrap();
        let b = c.breakdown().unwrap();
        eprintln!("{pages} pages, {from}->{to}, {calls} calls: {n} events, {b:?}");
        assert_eq!(b.lost, 0);
        assert_eq!(b.undecoded, 0);
        assert_eq!(b.sampled(), n, "every counted event was sampled");
        (n, b)
    }

    /// Events that other CPUs in `mm_cpumask` (this process is multi-threaded
    /// under the test harness) or IPIs arriving from elsewhere may add.
    fn only_environmental(b: &Breakdown, expected: &str) -> bool {
        b.events.keys().all(|k| {
            k == expected
                || k.starts_with("remote_ipi_send/")
                || k.starts_with("remote_shootdown/")
                || k.starts_with("remote_wrong_cpu/")
        })
    }

    #[test]
    fn count_flushes_degrades_with_a_reason() {
        let _guard = KERNEL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let Some(why) = skip_reason() else {
            eprintln!("skipping: the tracepoint is usable here");
            return;
        };
        if why == "not root" && FlushCounter::open(false).is_ok() {
            eprintln!("skipping: not root, but counting is permitted");
            return;
        }
        let mut calls = 0;
        let t = count_flushes(3, || calls += 1);
        eprintln!("unavailable: {:?}", t.unavailable);
        assert!(t
            .unavailable
            .as_deref()
            .is_some_and(|u| u.contains("tlb:tlb_flush")));
        assert_eq!((t.per_call, t.events, t.calls), (None, 0, 3));
        assert!(t.breakdown.is_empty());
    }

    #[test]
    fn rw_to_ro_of_4_pages_is_one_local_mm_flush_of_4_pages() {
        need_kernel!();
        let (_, b) = count_transition(4, RW, libc::PROT_READ, 100);
        assert_eq!(b.get("local_mm_shootdown/4"), 100, "{b:?}");
        assert!(only_environmental(&b, "local_mm_shootdown/4"), "{b:?}");
    }

    #[test]
    fn rw_to_ro_of_64_pages_is_a_full_flush() {
        need_kernel!();
        let (_, b) = count_transition(64, RW, libc::PROT_READ, 100);
        assert_eq!(b.get("local_mm_shootdown/all"), 100, "{b:?}");
        assert!(only_environmental(&b, "local_mm_shootdown/all"), "{b:?}");
    }

    #[test]
    fn flush_ceiling_is_33_pages() {
        need_kernel!();
        let (_, b) = count_transition(33, RW, libc::PROT_READ, 20);
        assert_eq!(b.get("local_mm_shootdown/33"), 20, "{b:?}");
        let (_, b) = count_transition(34, RW, libc::PROT_READ, 20);
        assert_eq!(b.get("local_mm_shootdown/all"), 20, "{b:?}");
    }

    #[test]
    fn none_to_rw_needs_no_flush() {
        need_kernel!();
        let (_, b) = count_transition(4, libc::PROT_NONE, RW, 100);
        assert_eq!(b.get("local_mm_shootdown/4"), 0, "{b:?}");
        assert!(
            b.events
                .keys()
                .all(|k| k.starts_with("remote_shootdown/") || k.starts_with("remote_wrong_cpu/")),
            "{b:?}"
        );
    }

    #[test]
    fn ro_to_rw_flushes() {
        need_kernel!();
        let (_, b) = count_transition(4, libc::PROT_READ, RW, 100);
        assert_eq!(b.get("local_mm_shootdown/4"), 100, "{b:?}");
        assert!(only_environmental(&b, "local_mm_shootdown/4"), "{b:?}");
    }

    #[test]
    fn rw_to_none_flushes() {
        need_kernel!();
        let (_, b) = count_transition(4, RW, libc::PROT_NONE, 100);
        assert_eq!(b.get("local_mm_shootdown/4"), 100, "{b:?}");
        assert!(only_environmental(&b, "local_mm_shootdown/4"), "{b:?}");
    }

    #[test]
    fn stopped_counter_counts_nothing() {
        need_kernel!();
        let _pin = Pin::here();
        let area = Area::new(4);
        let mut c = FlushCounter::open(true).unwrap();
        for _ in 0..10 {
            area.protect(libc::PROT_READ);
            area.protect(RW);
        }
        assert_eq!(c.count().unwrap(), 0);
        assert_eq!(c.breakdown().unwrap(), Breakdown::default());
        c.start().unwrap();
        area.protect(libc::PROT_READ);
        c.stop().unwrap();
        assert!(c.count().unwrap() >= 1);
        c.reset().unwrap();
        assert_eq!(c.count().unwrap(), 0);
        assert_eq!(c.breakdown().unwrap(), Breakdown::default());
    }

    #[test]
    fn count_flushes_fills_tlb_flushes() {
        need_kernel!();
        let _pin = Pin::here();
        let area = Area::new(4);
        let mut ro = false;
        let t = count_flushes(100, || {
            ro = !ro;
            area.protect(if ro { libc::PROT_READ } else { RW });
        });
        assert_eq!(t.unavailable, None);
        assert_eq!(t.calls, 100);
        assert_eq!(t.breakdown.get("local_mm_shootdown/4"), Some(&100), "{t:?}");
        assert_eq!(t.breakdown.values().sum::<u64>(), t.events);
        assert_eq!(t.per_call, Some(t.events as f64 / 100.0));
        assert!(t.per_call.unwrap() >= 1.0);
    }

    /// In a forked, single-threaded child that has only ever run on one CPU,
    /// `mm_cpumask` holds that CPU alone: exactly one event per call, no
    /// `remote_ipi_send`.
    #[test]
    fn single_cpu_process_sees_exactly_one_event_per_call() {
        need_kernel!();
        let _pin = Pin::here();
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only runs this module's code (allocation is
        // fork-safe with glibc; the tracepoint info is cached already, and
        // KERNEL_TESTS keeps other users of its lock away) and leaves with
        // _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let out = std::panic::catch_unwind(|| {
                let (n, b) = count_transition(4, RW, libc::PROT_READ, 100);
                format!(
                    "{n} {}",
                    b.events
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(",")
                )
            })
            .unwrap_or_else(|_| "panic".to_string());
            // SAFETY: writing our own buffer to our pipe end, then leaving
            // without running the harness's atexit handlers.
            unsafe {
                libc::write(fds[1], out.as_ptr() as *const libc::c_void, out.len());
                libc::_exit(0);
            }
        }
        // SAFETY: closing our copy of the write end.
        unsafe { libc::close(fds[1]) };
        // SAFETY: fds[0] is our read end, owned from here on.
        let mut read_end = fs::File::from(unsafe { OwnedFd::from_raw_fd(fds[0]) });
        let mut out = String::new();
        io::Read::read_to_string(&mut read_end, &mut out).unwrap();
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        eprintln!("child: {out}");
        let (n, keys) = out.split_once(' ').expect("child result");
        // A kernel-address flush IPI from another CPU could land while the
        // child runs; anything else is a failure.
        let extra: Vec<&str> = keys
            .split(',')
            .filter(|k| {
                !k.starts_with("local_mm_shootdown/4=") && !k.starts_with("remote_shootdown/")
            })
            .collect();
        assert!(keys.contains("local_mm_shootdown/4=100"), "{out}");
        assert!(extra.is_empty(), "{out}");
        let n: u64 = n.parse().unwrap();
        assert!(
            n >= 100 && (n == 100 || keys.contains("remote_shootdown/")),
            "{out}"
        );
    }

    #[test]
    fn leaves_tracefs_as_found() {
        need_kernel!();
        // The first open in this process may have mounted and unmounted it;
        // either way, what is mounted now must match what was mounted before
        // (the opens above ran under the same lock, so compare around a fresh
        // load, bypassing the cache).
        let before = tracefs_mounts();
        let info = load_tracepoint_info().unwrap();
        assert!(info.id > 0);
        assert_eq!(tracefs_mounts(), before);
    }
}
