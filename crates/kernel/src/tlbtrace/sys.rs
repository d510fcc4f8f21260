//! Every system call of the tracepoint counter, and all of its `unsafe`:
//! perf_event_open and the event's ioctls and reads, the sampling ring
//! buffer (mapped, read between `data_tail` and `data_head`, handed back),
//! and mounting tracefs for a moment.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, Context};
use pe::bindings::{perf_event_attr, perf_event_header, perf_event_mmap_page};
use perf_event_open_sys as pe;

use super::Unavailable;
use crate::procfs;

pub(super) use pe::bindings::{PERF_RECORD_LOST, PERF_RECORD_LOST_SAMPLES, PERF_RECORD_SAMPLE};

/// Data pages of the sampling ring buffer (a power of two); one record is
/// 40 bytes, so 64 pages hold about 6500 records between drains.
const RING_DATA_PAGES: usize = 64;
/// `PERF_IOC_FLAG_GROUP`: apply an ioctl to the whole event group.
const IOC_FLAG_GROUP: u32 = 1;

/// `kernel.perf_event_paranoid`, for the error message.
fn paranoid() -> String {
    fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// Attach a tracepoint filter (the ftrace filter syntax, e.g.
/// `reason != 1`) to one perf event: events it rejects are neither counted
/// nor sampled.
fn set_filter(fd: &OwnedFd, filter: &str) -> anyhow::Result<()> {
    let c = CString::new(filter).context("filter with a NUL byte")?;
    // SAFETY: the fd is our open perf event; the kernel copies the
    // NUL-terminated string and does not keep the pointer.
    let rc = unsafe { pe::ioctls::SET_FILTER(fd.as_raw_fd(), c.as_ptr() as *mut libc::c_char) };
    if rc != 0 {
        return Err(io::Error::last_os_error())
            .with_context(|| format!("perf ioctl SET_FILTER {filter:?}"));
    }
    Ok(())
}

/// `perf_event_open` for this thread on any CPU.
fn open_event(attr: &mut perf_event_attr, group: Option<&OwnedFd>) -> Result<OwnedFd, Unavailable> {
    let group_fd = group.map_or(-1, |g| g.as_raw_fd());
    // SAFETY: `attr` is a fully initialized perf_event_attr with `size` set;
    // pid 0 / cpu -1 counts the calling thread on any CPU.
    let fd = unsafe {
        pe::perf_event_open(
            attr,
            0,
            -1,
            group_fd,
            pe::bindings::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
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
    attr.type_ = pe::bindings::PERF_TYPE_TRACEPOINT;
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
pub(super) unsafe fn drain_ring(
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

/// The sampling event and its mmap'd ring buffer.
pub(super) struct Sampler {
    /// Kept open for the life of the ring; closed after the unmap in `drop`.
    _event: OwnedFd,
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
}

impl Sampler {
    /// Sample every event of tracepoint `id` (raw records) in `group`.
    // The bindings' PERF_SAMPLE_RAW is u32 on x86-64, u64 on arm64.
    #[allow(clippy::unnecessary_cast)]
    pub(super) fn open(id: u64, group: &Event) -> Result<Sampler, Unavailable> {
        let mut attr = base_attr(id);
        attr.__bindgen_anon_1.sample_period = 1;
        attr.sample_type = pe::bindings::PERF_SAMPLE_RAW as u64;
        let fd = open_event(&mut attr, Some(&group.0))?;
        let page = procfs::page_size() as usize;
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

    /// Sample only the events `filter` accepts ([`set_filter`]).
    pub(super) fn set_filter(&self, filter: &str) -> anyhow::Result<()> {
        set_filter(&self._event, filter)
    }

    /// Hand every record written since the last drain to `on(type, body)`.
    pub(super) fn drain(&mut self, on: impl FnMut(u32, &[u8])) -> anyhow::Result<()> {
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
                on,
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

/// A counting perf event of one tracepoint for the calling thread (the group
/// leader when a [`Sampler`] joins it). Opened disabled.
pub(super) struct Event(OwnedFd);

impl Event {
    /// Count tracepoint `id` for this thread on any CPU.
    pub(super) fn open(id: u64) -> Result<Event, Unavailable> {
        open_event(&mut base_attr(id), None).map(Event)
    }

    fn ioctl(
        &self,
        what: &str,
        f: unsafe fn(libc::c_int, libc::c_uint) -> libc::c_int,
    ) -> anyhow::Result<()> {
        // SAFETY: the fd is our open perf event (the group leader); the
        // argument is the documented PERF_IOC_FLAG_GROUP flag.
        let rc = unsafe { f(self.0.as_raw_fd(), IOC_FLAG_GROUP) };
        if rc != 0 {
            return Err(io::Error::last_os_error()).with_context(|| format!("perf ioctl {what}"));
        }
        Ok(())
    }

    /// Count only the events `filter` accepts ([`set_filter`]); the
    /// group's members need their own.
    pub(super) fn set_filter(&self, filter: &str) -> anyhow::Result<()> {
        set_filter(&self.0, filter)
    }

    /// Start the group.
    pub(super) fn enable(&self) -> anyhow::Result<()> {
        self.ioctl("ENABLE", pe::ioctls::ENABLE)
    }

    /// Stop the group.
    pub(super) fn disable(&self) -> anyhow::Result<()> {
        self.ioctl("DISABLE", pe::ioctls::DISABLE)
    }

    /// Zero the group's counts.
    pub(super) fn reset(&self) -> anyhow::Result<()> {
        self.ioctl("RESET", pe::ioctls::RESET)
    }

    /// Events counted since open or the last reset.
    pub(super) fn count(&self) -> anyhow::Result<u64> {
        let mut buf = [0u8; 8];
        // SAFETY: reading at most 8 bytes into an 8-byte buffer from our fd.
        let n = unsafe {
            libc::read(
                self.0.as_raw_fd(),
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
}

/// `mount -t tracefs nodev <dir>`.
pub(super) fn mount_tracefs(dir: &str) -> io::Result<()> {
    let dir = CString::new(dir).map_err(io::Error::other)?;
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
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `umount <dir>`.
pub(super) fn umount(dir: &str) -> io::Result<()> {
    let dir = CString::new(dir).map_err(io::Error::other)?;
    // SAFETY: `dir` is a valid NUL-terminated path.
    if unsafe { libc::umount2(dir.as_ptr(), 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tlbtrace::format::parse_format;
    use crate::tlbtrace::format::tests::{raw_record, FORMAT_6_18};
    use crate::tlbtrace::{account_record, Breakdown};

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
        r.extend_from_slice(&pe::bindings::PERF_RECORD_SAMPLE.to_ne_bytes());
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(&(len as u16).to_ne_bytes());
        r.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
        r.extend_from_slice(raw);
        r.resize(len, 0);
        r
    }

    fn lost_record(n: u64) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&pe::bindings::PERF_RECORD_LOST.to_ne_bytes());
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
}
