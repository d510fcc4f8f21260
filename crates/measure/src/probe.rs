//! The machine-speed probes measured between the timed batches of every
//! block: kernel speed (nanoseconds per `getppid(2)`) and memory latency
//! (nanoseconds per dependent load through a 64 MiB random cycle).
//!
//! Why: on the VM ptelab was built on, everything the kernel executes slows
//! down and speeds up together, by up to 28% in states lasting seconds to
//! tens of seconds, while user-space code runs at a steady speed. Measured
//! over 150 s in 5 s windows on one pinned CPU (`bench/drift.sh`): mprotect
//! of 4 MiB and 400 KiB order-0 regions varied by 7.2% (coefficient of
//! variation) and 28% (max/min); getppid tracked them with correlation 0.98;
//! mprotect time divided by getppid time varied by 1.9% (max/min 8.5%); a
//! user-space xorshift loop varied by 0.7% and did not track them. No
//! statistic within one run can see a drift that shifts a whole run, so
//! every block records the probe and `ptelab compare` can divide the drift
//! out (docs/statistics.md, "Machine drift").
//!
//! getppid is the cheapest syscall there is: entry, a pointer chase, exit.
//! It touches no page table and takes no lock the workloads take.
//!
//! Large cells also follow the host's memory latency, which getppid (cache
//! resident) does not feel: in a noisy period a 40 MiB order-0 mprotect
//! (80 KiB of page tables and 640 KiB of struct pages per call) varied from
//! 1.31 to 2.11 ms with getppid flat, correlation 0.89 with a pointer chase
//! and 0.39 with getppid. Hence the second probe, [`MemoryProbe`].

use std::cell::RefCell;
use std::time::Instant;

/// Calls per probe round: ~8 µs here, short enough to run after every batch.
const CALLS_PER_ROUND: u32 = 32;
/// Rounds per probe; the probe is their median (a round an interrupt hit
/// is discarded that way).
const ROUNDS: usize = 5;

/// One probe: median over [`ROUNDS`] rounds of the mean ns per getppid call.
pub fn probe_ns() -> f64 {
    let mut rounds = [0f64; ROUNDS];
    for r in &mut rounds {
        let t = Instant::now();
        for _ in 0..CALLS_PER_ROUND {
            // SAFETY: getppid takes no arguments and cannot fail.
            std::hint::black_box(unsafe { libc::getppid() });
        }
        *r = t.elapsed().as_nanos() as f64 / f64::from(CALLS_PER_ROUND);
    }
    ptelab_stats::sample::median_in_place(&mut rounds)
}

/// Bytes the memory probe chases through: far beyond any last-level cache.
const CHASE_BYTES: usize = 64 << 20;
/// Loads per memory probe: ~50 µs here. Few, so that the probe evicts only
/// 16 KiB of the workload's cached page tables and struct pages.
const HOPS: u32 = 256;
/// u64 slots per 64-byte cache line: one slot per line is used.
const SLOTS_PER_LINE: usize = 8;

/// A random cyclic order of the cache lines of a [`CHASE_BYTES`] buffer;
/// each probe continues the cycle where the last stopped, so it always
/// loads lines that are not cached.
pub struct MemoryProbe {
    /// `next[line * SLOTS_PER_LINE]` = slot of the line that follows.
    next: Vec<u64>,
    at: u64,
}

impl Default for MemoryProbe {
    fn default() -> MemoryProbe {
        MemoryProbe::new()
    }
}

impl MemoryProbe {
    /// Build the cycle (a Sattolo shuffle from a fixed seed: one cycle
    /// through every line). About 10 ms; the buffer is touched here.
    pub fn new() -> MemoryProbe {
        let lines = CHASE_BYTES / 64;
        let mut order: Vec<u64> = (0..lines as u64).collect();
        let mut x = 0x7074_656c_6162_0002u64;
        for i in (1..lines).rev() {
            // xorshift64: no statistical quality needed, only a scatter.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % i as u64) as usize);
        }
        let mut next = vec![0u64; lines * SLOTS_PER_LINE];
        for (k, &line) in order.iter().enumerate() {
            next[line as usize * SLOTS_PER_LINE] = order[(k + 1) % lines] * SLOTS_PER_LINE as u64;
        }
        MemoryProbe { next, at: 0 }
    }

    /// The probe's mappings, made as [`MemoryProbe::new`] makes them but
    /// left untouched: no cycle, no probe (see [`reserve_memory_probe`]).
    fn unfilled() -> MemoryProbe {
        let lines = CHASE_BYTES / 64;
        // `new`'s shuffle buffer, mapped before the cycle and unmapped
        // after it, leaves a gap above it: the same gap here.
        let order = std::hint::black_box(vec![0u64; lines]);
        let next = std::hint::black_box(vec![0u64; lines * SLOTS_PER_LINE]);
        drop(order);
        MemoryProbe { next, at: 0 }
    }

    /// One probe: mean ns per load over [`HOPS`] dependent loads.
    pub fn probe_ns(&mut self) -> f64 {
        let mut at = self.at;
        let t = Instant::now();
        for _ in 0..HOPS {
            at = self.next[at as usize];
        }
        let ns = t.elapsed().as_nanos() as f64 / f64::from(HOPS);
        self.at = std::hint::black_box(at);
        ns
    }
}

thread_local! {
    /// One chase buffer per measuring thread, built on first use.
    static MEMORY: RefCell<Option<MemoryProbe>> = const { RefCell::new(None) };
}

/// Make this thread's [`MemoryProbe`] mappings without building its cycle,
/// where the probe is not taken (a TCG guest under icount, where a load is
/// one instruction, and filling the 64 MiB cycle cost an x86-64 guest about
/// a second of emulation). The mappings stay because the mm calls measured
/// walk the process's VMA tree: without them, order-0 mprotect of 4K-40K
/// read up to 5% fewer instructions per call on arm64 guests (docs/guests.md).
pub fn reserve_memory_probe() {
    MEMORY.with(|m| {
        m.borrow_mut().get_or_insert_with(MemoryProbe::unfilled);
    })
}

/// One memory-latency probe on this thread's [`MemoryProbe`].
pub fn memory_probe_ns() -> f64 {
    MEMORY.with(|m| {
        m.borrow_mut()
            .get_or_insert_with(MemoryProbe::new)
            .probe_ns()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chase_is_one_cycle_through_every_line() {
        let p = MemoryProbe::new();
        let lines = CHASE_BYTES / 64;
        let (mut at, mut seen) = (0u64, vec![false; lines]);
        for _ in 0..lines {
            let line = at as usize / SLOTS_PER_LINE;
            assert!(!seen[line], "line {line} visited twice");
            seen[line] = true;
            at = p.next[at as usize];
        }
        assert_eq!(at, 0, "the cycle closes after every line");
    }

    #[test]
    fn memory_probe_is_a_plausible_load_latency() {
        // A cache miss costs tens to hundreds of ns; under 1 ns means the
        // loads were not dependent or were elided.
        let p = memory_probe_ns();
        assert!(p > 1.0 && p < 100_000.0, "memory probe {p} ns");
    }

    #[test]
    fn probe_is_a_plausible_syscall_time() {
        // A syscall costs tens of ns on bare metal and a few hundred in a
        // guest; anything outside 5 ns .. 100 µs means the loop was elided
        // or the clock is broken.
        let p = probe_ns();
        assert!(p > 5.0 && p < 100_000.0, "probe {p} ns");
    }
}
