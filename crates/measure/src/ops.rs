//! The syscall sequences each workload times on the running kernel.
//!
//! A [`KernelOp`] owns its regions (already populated and verified by the
//! runner) and runs `iterations` of its operation, returning the nanoseconds
//! spent in the timed part only. Untimed steps that return a region to its
//! start state (mprotect-ro-rw's re-touch) happen inside `run`, outside the
//! clock.

use std::time::Instant;

use super::marker;
use super::runner::CellPlan;
use crate::kernel::region::Region;
use crate::workload::WorkloadKind;

/// One phase's timing from a batch.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchTime {
    /// Nanoseconds spent in the timed calls.
    pub ns: u64,
    /// mm calls made in the timed part.
    pub calls: u64,
}

/// A workload bound to its regions.
pub trait KernelOp {
    /// Names of the phases timed separately (one result per phase); a single
    /// unnamed phase for most workloads.
    fn phases(&self) -> Vec<Option<&'static str>> {
        vec![None]
    }
    /// mm calls per iteration and phase (for batch sizing).
    fn calls_per_iteration(&self) -> u64;
    /// Iterations must be a multiple of this (toggle: 2, so every batch has as
    /// many PROT_NONE as PROT_READ|PROT_WRITE calls).
    fn iteration_multiple(&self) -> u64 {
        1
    }
    /// Run `iterations` iterations; one [`BatchTime`] per phase.
    fn run(&mut self, iterations: u64) -> anyhow::Result<Vec<BatchTime>>;
    /// Untimed step that brings the regions to `phase`'s start state before a
    /// TLB-flush counting invocation.
    fn phase_setup(&mut self, _phase: usize) -> anyhow::Result<()> {
        Ok(())
    }
    /// One counting invocation of `phase`: the smallest whole unit of the
    /// workload (one iteration multiple); returns the mm calls it made.
    fn phase_call(&mut self, _phase: usize) -> anyhow::Result<u64> {
        let n = self.iteration_multiple();
        self.run(n)?;
        Ok(n * self.calls_per_iteration())
    }
    /// The regions (for layout checks and VMA counts).
    fn regions(&self) -> &[Region];
    /// mm calls in the TLB-flush counting pass (at most). A workload whose
    /// every call needs a costly untimed setup asks for fewer.
    fn flush_pass_calls(&self) -> u64 {
        64
    }
    /// The parts of the (one) timed phase marked apart for the QEMU plugin,
    /// by marker phase ([`WorkloadKind::marked_parts`]); each part makes
    /// the same number of the phase's calls.
    fn marked_parts(&self) -> &'static [&'static str] {
        &[]
    }
    /// Pages one mm call covers (for ns/page).
    fn pages_per_call(&self) -> u64 {
        self.regions()
            .first()
            .map_or(1, |r| (r.len() / 4096) as u64)
    }
}

/// Build the op of `plan`'s workload over populated `regions`.
pub fn for_plan(plan: &CellPlan, regions: Vec<Region>) -> anyhow::Result<Box<dyn KernelOp>> {
    Ok(match plan.workload {
        WorkloadKind::MprotectToggle => Box::new(MprotectToggle { regions, flip: 0 }),
        WorkloadKind::MprotectRoRw => Box::new(MprotectRoRw { regions }),
        WorkloadKind::ProtTransition => Box::new(ProtTransition { regions }),
        WorkloadKind::MremapMove => Box::new(super::mremap::MremapMove::new(regions)?),
        WorkloadKind::Reclaim => {
            let opts = plan.reclaim.as_ref().ok_or_else(|| {
                anyhow::anyhow!("a reclaim cell was planned without reclaim options")
            })?;
            Box::new(super::reclaim::Reclaim::new(regions, opts)?)
        }
    })
}

fn mprotect(r: &Region, prot: i32) -> anyhow::Result<()> {
    r.protect(prot)
}

const RW: i32 = libc::PROT_READ | libc::PROT_WRITE;

/// The toggle's marker phases, as [`WorkloadKind::marked_parts`] names them.
const TOGGLE_RW_PART: usize = 0;
const TOGGLE_NONE_PART: usize = 1;

/// Seed 001 (libMicro `mprot_tw4m`): regions touched once; each iteration
/// mprotects every region, alternating PROT_NONE and PROT_READ|PROT_WRITE the
/// way the reproducer does (`(i + j) % 2`).
struct MprotectToggle {
    regions: Vec<Region>,
    flip: u64,
}

impl KernelOp for MprotectToggle {
    fn calls_per_iteration(&self) -> u64 {
        self.regions.len() as u64
    }
    fn iteration_multiple(&self) -> u64 {
        2
    }
    fn marked_parts(&self) -> &'static [&'static str] {
        WorkloadKind::MprotectToggle.marked_parts()
    }
    fn run(&mut self, iterations: u64) -> anyhow::Result<Vec<BatchTime>> {
        let t0 = Instant::now();
        for j in 0..iterations {
            for (i, r) in self.regions.iter().enumerate() {
                // Each call is marked as its direction's part: PROT_NONE is
                // rw-to-none (marker phase 1), the other none-to-rw (0).
                let (prot, part) = if (i as u64 + j + self.flip).is_multiple_of(2) {
                    (libc::PROT_NONE, TOGGLE_NONE_PART)
                } else {
                    (RW, TOGGLE_RW_PART)
                };
                marker::begin(part);
                let done = mprotect(r, prot);
                marker::end(part);
                done?;
            }
        }
        let ns = t0.elapsed().as_nanos() as u64;
        self.flip = (self.flip + iterations) % 2;
        Ok(vec![BatchTime {
            ns,
            calls: iterations * self.regions.len() as u64,
        }])
    }
    fn regions(&self) -> &[Region] {
        &self.regions
    }
}

/// Seed 000: PROT_READ, then PROT_READ|PROT_WRITE (timed), then re-touch
/// every page (not timed: it is what makes the next PROT_READ do work).
struct MprotectRoRw {
    regions: Vec<Region>,
}

impl KernelOp for MprotectRoRw {
    fn calls_per_iteration(&self) -> u64 {
        2 * self.regions.len() as u64
    }
    fn run(&mut self, iterations: u64) -> anyhow::Result<Vec<BatchTime>> {
        let mut ns = 0;
        for _ in 0..iterations {
            let t0 = Instant::now();
            marker::begin(0);
            for r in &self.regions {
                mprotect(r, libc::PROT_READ)?;
                mprotect(r, RW)?;
            }
            marker::end(0);
            ns += t0.elapsed().as_nanos() as u64;
            for r in &self.regions {
                r.retouch();
            }
        }
        Ok(vec![BatchTime {
            ns,
            calls: iterations * self.calls_per_iteration(),
        }])
    }
    fn regions(&self) -> &[Region] {
        &self.regions
    }
}

/// Seed 003: NONE->RW and RW->NONE timed separately. On x86 the first needs
/// no TLB flush (old PTE not present), the second does.
struct ProtTransition {
    regions: Vec<Region>,
}

impl KernelOp for ProtTransition {
    fn phases(&self) -> Vec<Option<&'static str>> {
        crate::workload::PROT_TRANSITION_PHASES.map(Some).to_vec()
    }
    fn calls_per_iteration(&self) -> u64 {
        self.regions.len() as u64
    }
    fn run(&mut self, iterations: u64) -> anyhow::Result<Vec<BatchTime>> {
        let (mut up, mut down) = (0u64, 0u64);
        for _ in 0..iterations {
            // Regions start each iteration RW (the runner populates them RW).
            let t0 = Instant::now();
            marker::begin(1);
            for r in &self.regions {
                mprotect(r, libc::PROT_NONE)?;
            }
            marker::end(1);
            let t1 = Instant::now();
            marker::begin(0);
            for r in &self.regions {
                mprotect(r, RW)?;
            }
            marker::end(0);
            let t2 = Instant::now();
            down += (t1 - t0).as_nanos() as u64;
            up += (t2 - t1).as_nanos() as u64;
        }
        let calls = iterations * self.regions.len() as u64;
        Ok(vec![
            BatchTime { ns: up, calls },
            BatchTime { ns: down, calls },
        ])
    }
    fn phase_setup(&mut self, phase: usize) -> anyhow::Result<()> {
        let start = if phase == 0 { libc::PROT_NONE } else { RW };
        self.regions.iter().try_for_each(|r| mprotect(r, start))
    }
    fn phase_call(&mut self, phase: usize) -> anyhow::Result<u64> {
        let to = if phase == 0 { RW } else { libc::PROT_NONE };
        self.regions.iter().try_for_each(|r| mprotect(r, to))?;
        Ok(self.regions.len() as u64)
    }
    fn regions(&self) -> &[Region] {
        &self.regions
    }
}
