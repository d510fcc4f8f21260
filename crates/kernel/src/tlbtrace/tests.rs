//! Against the running kernel (root and the tracepoint needed; skipped with
//! a reason otherwise).

use std::fs;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Mutex;

use super::tracefs::{load_tracepoint_info, tracefs_mounts};
use super::*;

// ---- Against the running kernel (need root and the tracepoint) ----

/// Serializes the kernel tests: they pin their thread, and tracefs may be
/// mounted and unmounted underneath.
static KERNEL_TESTS: Mutex<()> = Mutex::new(());

/// Why the kernel tests cannot run here, if they cannot.
fn skip_reason() -> Option<String> {
    if !crate::procfs::is_root() {
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
        .filter(|k| !k.starts_with("local_mm_shootdown/4=") && !k.starts_with("remote_shootdown/"))
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

#[test]
fn the_count_is_unobservable_where_the_arch_never_emits_the_tracepoint() {
    // arm64 defines tlb:tlb_flush but never emits it: a count there would
    // read 0 flushes per call, so it is refused with the reason instead.
    for arch in ["aarch64", "riscv64", "s390x"] {
        let why = arch_unobservable(arch).unwrap().to_string();
        assert!(why.contains("not observable on this arch"), "{why}");
        assert!(why.contains(arch), "{why}");
    }
    assert_eq!(arch_unobservable("x86_64"), None);
    if std::env::consts::ARCH != "x86_64" {
        let t = count_flushes(3, || {});
        assert_eq!(t.per_call, None);
        assert!(t
            .unavailable
            .unwrap()
            .contains("not observable on this arch"));
    }
}

/// Another process that once ran on this thread's CPU stays in its
/// `mm_cpumask` (x86 trims it lazily), so its page-table-freeing munmap on
/// another CPU IPIs this one, and the handler's `remote_wrong_cpu` event
/// fires while this thread is current. Under load that is how a measured
/// call counted 65 flushes in 64: none of these may be counted.
#[test]
fn another_process_flushing_elsewhere_is_not_counted() {
    need_kernel!();
    let _pin = Pin::here();
    // SAFETY: sched_getcpu has no preconditions.
    let here = unsafe { libc::sched_getcpu() } as usize;
    let Some(there) = (0..crate::procfs::online_cpus()).find(|&c| c != here) else {
        eprintln!("skipping: one CPU");
        return;
    };
    let mut c = FlushCounter::open(true).unwrap();
    let mut go = [0; 2];
    // SAFETY: `go` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(go.as_mut_ptr()) }, 0);
    // SAFETY: the child makes system calls only (no allocation, no locks)
    // and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: plain system calls on the child's own memory and affinity.
        unsafe {
            let mut byte = 0u8;
            libc::read(go[0], (&mut byte as *mut u8).cast(), 1);
            let on = |cpu: usize| {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
            };
            for _ in 0..200 {
                on(here);
                on(there);
                // A fresh page table of its own, freed by the munmap: a
                // flush with freed_tables IPIs every CPU in mm_cpumask.
                let len = 4 << 20;
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    RW,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                if p != libc::MAP_FAILED {
                    let aligned = ((p as usize + (2 << 20) - 1) & !((2 << 20) - 1)) as *mut u8;
                    aligned.write_volatile(1);
                    libc::munmap(p, len);
                }
            }
            libc::_exit(0);
        }
    }
    let mut status = 0;
    // Stay current on this CPU until the child is done. The loop runs
    // once before counting: its first writes after fork() copy pages
    // shared with the child, flushes of this thread's own.
    let mut wait = || {
        // SAFETY: polling our own child; getppid has no preconditions.
        unsafe { libc::getppid() };
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == 0 }
    };
    for _ in 0..100 {
        wait();
    }
    c.reset().unwrap();
    c.start().unwrap();
    // SAFETY: one byte from our buffer to the child's pipe.
    unsafe { libc::write(go[1], b"g".as_ptr().cast(), 1) };
    while wait() {}
    c.stop().unwrap();
    // SAFETY: closing our pipe ends.
    unsafe { libc::close(go[0]) };
    unsafe { libc::close(go[1]) };
    let n = c.count().unwrap();
    let b = c.breakdown().unwrap();
    eprintln!("{n} events, {b:?}");
    assert_eq!(n, 0, "{b:?}");
    assert!(b.events.is_empty(), "{b:?}");
}
