//! The runner's [`Backend`] on the running kernel: fresh regions per block
//! (THP knobs configured for the folio spec when layout control is
//! available), pagemap layout checks, tracepoint flush counts, the
//! kernel-speed probes, the wall clock and the SIGINT/SIGTERM flag.

use std::time::{Duration, Instant};

use super::{Backend, CellPlan, Instance};
use crate::kernel::region::Region;
use crate::kernel::thp::KnobGuard;
use crate::kernel::{layout, tlbtrace};
use crate::ops::{self, KernelOp};
use crate::probe;
use crate::record::{Layout, TlbFlushes};

/// The running kernel, for the blocks of one session.
pub struct KernelBackend<'a> {
    /// The THP knob guard (layout control), or `None` without root.
    knobs: Option<&'a mut KnobGuard>,
    epoch: Instant,
}

impl<'a> KernelBackend<'a> {
    /// Blocks run on this kernel, with the knobs set through `knobs`.
    pub fn new(knobs: Option<&'a mut KnobGuard>) -> KernelBackend<'a> {
        KernelBackend {
            knobs,
            epoch: Instant::now(),
        }
    }
}

/// Populated regions of one block, with the plan they were made for.
struct Regions {
    plan: CellPlan,
    regions: Vec<Region>,
}

impl Instance for Regions {
    fn layout(&self) -> anyhow::Result<Layout> {
        observe_all(&self.regions, &self.plan)
    }
    fn vmas(&self) -> anyhow::Result<u64> {
        vma_total(&self.regions)
    }
    fn bind(self: Box<Self>) -> anyhow::Result<Box<dyn KernelOp>> {
        ops::for_plan(&self.plan, self.regions)
    }
}

impl Backend for KernelBackend<'_> {
    fn prepare(&mut self, plan: &CellPlan) -> anyhow::Result<Box<dyn Instance>> {
        if let Some(k) = self.knobs.as_deref_mut() {
            k.configure_for(plan.folio)?;
        }
        let mut regions = Vec::with_capacity(plan.regions as usize);
        for _ in 0..plan.regions {
            let mut r = Region::map(plan.size, plan.folio, plan.neighbor)?;
            r.populate()?;
            regions.push(r);
        }
        Ok(Box::new(Regions {
            plan: plan.clone(),
            regions,
        }))
    }

    fn observe(&mut self, plan: &CellPlan, op: &dyn KernelOp) -> anyhow::Result<(Layout, u64)> {
        Ok((observe_all(op.regions(), plan)?, vma_total(op.regions())?))
    }

    fn count_flushes(
        &mut self,
        op: &mut dyn KernelOp,
        phases: usize,
    ) -> anyhow::Result<Vec<TlbFlushes>> {
        count_flushes(op, phases)
    }

    fn probes(&mut self, memory: bool) -> (f64, Option<f64>) {
        if !memory {
            probe::reserve_memory_probe();
        }
        (probe::probe_ns(), memory.then(probe::memory_probe_ns))
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn interrupted(&self) -> bool {
        crate::kernel::thp::interrupted().load(std::sync::atomic::Ordering::Relaxed)
    }
}

fn vma_total(regions: &[Region]) -> anyhow::Result<u64> {
    regions.iter().map(Region::vma_count).sum()
}

/// Observe every region and merge into one layout (histograms added).
fn observe_all(regions: &[Region], plan: &CellPlan) -> anyhow::Result<Layout> {
    if !plan.verified {
        return Ok(Layout {
            mismatch: Some("layout not verified (no root)".into()),
            ..Layout::default()
        });
    }
    let mut total = Layout {
        matches: true,
        ..Layout::default()
    };
    for r in regions {
        let l = layout::observe(r.addr(), r.len(), plan.folio)?;
        for (b, n) in &l.histogram {
            *total.histogram.entry(*b).or_insert(0) += n;
        }
        total.pages_present += l.pages_present;
        total.pages_total += l.pages_total;
        total.pmd_mapped_bytes += l.pmd_mapped_bytes;
        total.misaligned_folios += l.misaligned_folios;
        if !l.matches && total.matches {
            total.matches = false;
            total.mismatch = l.mismatch;
        }
    }
    Ok(total)
}

/// Count tracepoint events per call, per phase, outside the timed samples.
fn count_flushes(op: &mut dyn KernelOp, nphases: usize) -> anyhow::Result<Vec<TlbFlushes>> {
    let mut out = Vec::with_capacity(nphases);
    for phase in 0..nphases {
        // Calls per invocation are fixed by the workload; learn them once.
        op.phase_setup(phase)?;
        let per = op.phase_call(phase)?.max(1);
        let invocations = (op.flush_pass_calls() / per).max(1);
        // Both closures drive the same op; a RefCell lets them take turns.
        let state = std::cell::RefCell::new((&mut *op, None::<anyhow::Error>));
        let step = |setup: bool| {
            let (op, err) = &mut *state.borrow_mut();
            let r = if setup {
                op.phase_setup(phase)
            } else {
                op.phase_call(phase).map(drop)
            };
            if let Err(e) = r {
                err.get_or_insert(e);
            }
        };
        let t = tlbtrace::count_flushes_with(invocations, per, || step(true), || step(false));
        if let Some(e) = state.into_inner().1 {
            return Err(e);
        }
        out.push(t);
    }
    // Leave the regions read-write, as populated.
    op.phase_setup(nphases.saturating_sub(1))?;
    Ok(out)
}
