//! The global allocator: the system allocator, except that once
//! [`enable`]d (by `ptelab model` only) allocations of 2 MiB and more are
//! 2 MiB-aligned anonymous mappings advised `MADV_HUGEPAGE`.
//!
//! Why: a model cell at 1G holds a 2 MB page table and a 4 MB TLB model per
//! strategy. Faulted in 4K at a time that is some 1500 page faults a
//! strategy (6 MB / 4 KiB); with transparent huge pages in `madvise` mode a
//! few. Measured, `--strategy v6.16` at 1G: 10.8 ms of CPU time without,
//! 8.4 ms with (docs/model.md, "Memory and time").
//! The model crate stays pure (no unsafe, no libc): this is the binary's
//! allocator. Off by default so that the measuring commands' own
//! allocations do not move the host's THP counters they read.
//!
//! Unsafe: `GlobalAlloc` is an unsafe trait, and `mmap`/`munmap`/`madvise`
//! are foreign calls. Each mapped block is one mapping this allocator made,
//! handed out once at a time, then kept for reuse or unmapped whole;
//! nothing else touches it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A transparent huge page (x86-64, arm64 4K granule).
const HUGE: usize = 2 << 20;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// The mappings `map` made: those handed out (`live`, by address) and
/// those freed but kept for reuse (`free`, address and length). A block is
/// mapped iff its address is in `live`, so a system block is never taken
/// for one; when `live` is full, allocations go to the system. Freed
/// mappings are kept because `ptelab model --strategy all` runs the cells
/// of one size one after another on each thread: a fresh mapping costs the
/// kernel a 2 MB page clear per huge page, a kept one nothing.
struct Blocks {
    live: [usize; LIVE],
    free: [(usize, usize); FREE],
}

const LIVE: usize = 64;
const FREE: usize = 8;

static BLOCKS: Mutex<Blocks> = Mutex::new(Blocks {
    live: [0; LIVE],
    free: [(0, 0); FREE],
});

fn blocks() -> std::sync::MutexGuard<'static, Blocks> {
    BLOCKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// From now on, map allocations of [`HUGE`] bytes or more as huge-page
/// advised mappings (blocks allocated before stay system blocks).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// See the module documentation.
pub struct Huge;

fn round_up(n: usize) -> usize {
    n.div_ceil(HUGE) * HUGE
}

fn wants_map(layout: Layout) -> bool {
    layout.size() >= HUGE && layout.align() <= HUGE && ENABLED.load(Ordering::Relaxed)
}

/// Whether `ptr` is a block `map` made and handed out.
fn is_mapped(ptr: *mut u8, layout: Layout) -> bool {
    layout.size() >= HUGE
        && (ptr as usize).is_multiple_of(HUGE)
        && blocks().live.contains(&(ptr as usize))
}

/// A mapping of `len` bytes, kept or fresh (`map`), recorded live; null
/// when `live` is full or the kernel refuses. `zeroed`: a kept mapping is
/// cleared first (a fresh one reads as zeros).
fn map_recorded(len: usize, zeroed: bool) -> *mut u8 {
    let kept = {
        let mut b = blocks();
        let Some(slot) = b.live.iter().position(|&a| a == 0) else {
            return std::ptr::null_mut();
        };
        let kept = match b.free.iter().position(|&(_, l)| l == len) {
            Some(i) => std::mem::take(&mut b.free[i]).0,
            None => 0,
        };
        // Taken now, so that no other thread fills the slot meanwhile.
        b.live[slot] = if kept != 0 { kept } else { usize::MAX };
        (slot, kept)
    };
    let (slot, p) = match kept {
        (slot, 0) => (slot, map(len)),
        (slot, a) => {
            let p = a as *mut u8;
            if zeroed {
                // SAFETY: a whole kept mapping of `len` bytes, not live.
                unsafe { std::ptr::write_bytes(p, 0, len) };
            }
            (slot, p)
        }
    };
    blocks().live[slot] = p as usize;
    p
}

/// Drop `ptr` (a live mapping of `len` bytes) from `live`; keep it for
/// reuse when there is room, else unmap it.
fn unmap_recorded(ptr: *mut u8, len: usize) {
    let p = ptr as usize;
    let keep = {
        let mut b = blocks();
        if let Some(i) = b.live.iter().position(|&a| a == p) {
            b.live[i] = 0;
        }
        match b.free.iter().position(|&(a, _)| a == 0) {
            Some(i) => {
                b.free[i] = (p, len);
                true
            }
            None => false,
        }
    };
    if !keep {
        // SAFETY: a whole mapping made by `map`, no longer handed out.
        unsafe { libc::munmap(ptr.cast(), len) };
    }
}

/// A fresh 2 MiB-aligned mapping of `len` bytes (a multiple of [`HUGE`]),
/// advised huge; null when the kernel refuses.
fn map(len: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping at an address the kernel picks;
    // the 2 MiB of slack around it is unmapped again below, and nothing
    // else refers to it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len + HUGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        let start = p as usize;
        let aligned = start.next_multiple_of(HUGE);
        if aligned > start {
            libc::munmap(p, aligned - start);
        }
        let tail = start + len + HUGE - (aligned + len);
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
        // Advice only: without huge pages the block works as 4K pages.
        libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        aligned as *mut u8
    }
}

/// A huge-page mapping for `layout`, when it wants one and one is made.
fn try_map(layout: Layout, zeroed: bool) -> Option<*mut u8> {
    wants_map(layout)
        .then(|| map_recorded(round_up(layout.size()), zeroed))
        .filter(|p| !p.is_null())
}

// SAFETY: every block is either a system block (alloc and dealloc by
// `System` with the caller's layout) or a mapping of `round_up(size)` bytes
// made by `map`, recorded in `BLOCKS.live` while handed out; `dealloc`
// keeps it whole in `BLOCKS.free` or unmaps it whole.
unsafe impl GlobalAlloc for Huge {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, passed through.
        try_map(layout, false).unwrap_or_else(|| unsafe { System.alloc(layout) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        try_map(layout, true).unwrap_or_else(|| unsafe { System.alloc_zeroed(layout) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_mapped(ptr, layout) {
            unmap_recorded(ptr, round_up(layout.size()));
        } else {
            // SAFETY: a system block of this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` and `layout.align()` form
        // a valid layout.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let mapped = is_mapped(ptr, layout);
        if !mapped && !wants_map(new) {
            // SAFETY: a system block, resized by the system.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        if mapped && round_up(new_size) == round_up(layout.size()) {
            return ptr;
        }
        // SAFETY: a block of `new`, filled from the old one, which is freed.
        unsafe {
            let p = self.alloc(new);
            if !p.is_null() {
                std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            p
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_blocks_are_told_from_system_blocks_and_reused() {
        let layout = Layout::from_size_align(3 << 20, 8).unwrap();
        let len = round_up(layout.size());
        assert_eq!(len, 4 << 20);
        let p = map_recorded(len, true);
        assert!(!p.is_null() && (p as usize).is_multiple_of(HUGE));
        assert!(is_mapped(p, layout));
        // SAFETY: a live mapping of `len` bytes.
        let s = unsafe { std::slice::from_raw_parts_mut(p, len) };
        assert!(s.iter().all(|&b| b == 0));
        s[len - 1] = 7;
        unmap_recorded(p, len);
        assert!(!is_mapped(p, layout));
        // Kept, and cleared when asked for zeroed.
        let q = map_recorded(len, true);
        // SAFETY: as above.
        let s = unsafe { std::slice::from_raw_parts_mut(q, len) };
        assert!(s.iter().all(|&b| b == 0));
        unmap_recorded(q, len);
        // A system block of that size is not a mapped one.
        // SAFETY: a valid layout, freed below.
        let sys = unsafe { System.alloc(layout) };
        assert!(!is_mapped(sys, layout));
        // SAFETY: allocated above with this layout.
        unsafe { System.dealloc(sys, layout) };
    }
}
