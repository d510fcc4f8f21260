//! The kernel-speed probe: nanoseconds per `getppid(2)`, measured between the
//! timed batches of every block.
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

use std::time::Instant;

use super::result::CellResult;

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

/// Median probe of every block of `cells` that has one (None when none has).
pub fn run_probe_ns<'a>(cells: impl IntoIterator<Item = &'a CellResult>) -> Option<f64> {
    let mut all: Vec<f64> = cells
        .into_iter()
        .flat_map(|c| c.probe_ns.iter().copied())
        .filter(|p| p.is_finite() && *p > 0.0)
        .collect();
    (!all.is_empty()).then(|| ptelab_stats::sample::median_in_place(&mut all))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::cells::tests::fixture;
    use crate::workload::FolioSpec;

    #[test]
    fn run_probe_is_the_median_over_every_block() {
        let mut c = fixture(4096, 100.0, FolioSpec::Base);
        let mut d = c.clone();
        c.probe_ns = vec![250.0, 500.0, 225.0];
        d.probe_ns = vec![186.0, f64::NAN];
        assert_eq!(run_probe_ns([&c, &d]), Some(237.5));
        assert_eq!(run_probe_ns([&fixture(4, 1.0, FolioSpec::Base)]), None);
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
