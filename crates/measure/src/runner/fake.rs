//! A fake [`Backend`] for unit tests: an op whose per-call cost is fixed
//! (with an optional deterministic jitter per batch), a clock that only the
//! op moves, and a log of what happened, in order. No kernel, no root, no
//! wall time: the runner's rules are tested exactly.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use super::{Backend, Budget, CellPlan, Instance, Reporter, RunEvent};
use crate::kernel::region::Region;
use crate::ops::{BatchTime, KernelOp};
use crate::record::{Layout, TlbFlushes};
use crate::workload::{FolioSpec, WorkloadKind};

/// What the fake saw, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Ev {
    /// A fresh instance of the cell of this size.
    Prepare { size: u64 },
    /// The runner announced a phase.
    Phase(String),
    /// The op ran `iterations`, taking `took` on the fake clock.
    Run { iterations: u64, took: Duration },
}

/// State the backend, its ops and the reporter share.
#[derive(Clone, Default)]
struct Shared {
    now: Rc<Cell<Duration>>,
    log: Rc<RefCell<Vec<Ev>>>,
    /// xorshift state of the jitter.
    rng: Rc<Cell<u64>>,
    prepares: Rc<Cell<usize>>,
    probes_in_block: Rc<Cell<usize>>,
}

/// The fake machine.
pub struct FakeBackend {
    shared: Shared,
    /// Nanoseconds per call.
    pub cost_ns: f64,
    /// A batch's per-call cost varies uniformly within ± this fraction.
    pub jitter: f64,
    /// The op's iteration multiple.
    pub multiple: u64,
    /// Phases the op times separately.
    pub phases: usize,
    /// Signal an interrupt in this block (counting blocks of every cell
    /// from 1), after its second sample.
    pub interrupt_in_block: Option<usize>,
    /// Instances of cells of this size fail to prepare.
    pub fail_size: Option<u64>,
    /// The layout every instance shows.
    pub layout: Layout,
}

impl FakeBackend {
    /// An op of `cost_ns` per call, no jitter, one phase.
    pub fn new(cost_ns: f64) -> FakeBackend {
        let shared = Shared::default();
        shared.rng.set(0x9E37_79B9_7F4A_7C15);
        FakeBackend {
            shared,
            cost_ns,
            jitter: 0.0,
            multiple: 1,
            phases: 1,
            interrupt_in_block: None,
            fail_size: None,
            layout: Layout {
                matches: true,
                histogram: [(4096, 1)].into_iter().collect(),
                ..Layout::default()
            },
        }
    }

    /// Everything logged so far.
    pub fn log(&self) -> Vec<Ev> {
        self.shared.log.borrow().clone()
    }

    /// A reporter that logs the runner's phases.
    pub fn reporter(&self) -> impl Reporter {
        PhaseLog(self.shared.clone())
    }
}

/// A plan of a cell of `size` bytes on the fake.
pub fn plan(size: u64, budget: Budget, blocks: u32) -> CellPlan {
    CellPlan {
        workload: WorkloadKind::MprotectToggle,
        size,
        folio: FolioSpec::Base,
        regions: 1,
        neighbor: false,
        budget,
        allow_mismatch: false,
        verified: true,
        count_flushes: false,
        blocks,
        pinned_cpu: None,
        reclaim: None,
        windows: false,
        memory_probe: true,
        sample_target: super::SAMPLE_TARGET,
    }
}

struct PhaseLog(Shared);

impl Reporter for PhaseLog {
    fn event(&mut self, event: RunEvent<'_>) {
        if let RunEvent::Phase(p) = event {
            self.0.log.borrow_mut().push(Ev::Phase(p.to_string()));
        }
    }
}

struct FakeInstance(FakeOp, Layout);

impl Instance for FakeInstance {
    fn layout(&self) -> anyhow::Result<Layout> {
        Ok(self.1.clone())
    }
    fn vmas(&self) -> anyhow::Result<u64> {
        Ok(1)
    }
    fn bind(self: Box<Self>) -> anyhow::Result<Box<dyn KernelOp>> {
        Ok(Box::new(self.0))
    }
}

struct FakeOp {
    shared: Shared,
    cost_ns: f64,
    jitter: f64,
    multiple: u64,
    phases: usize,
}

impl FakeOp {
    /// Uniform in [-1, 1], from a xorshift64 sequence.
    fn unit(&self) -> f64 {
        let mut x = self.shared.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.shared.rng.set(x);
        (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

impl KernelOp for FakeOp {
    fn phases(&self) -> Vec<Option<&'static str>> {
        match self.phases {
            1 => vec![None],
            n => (0..n).map(|_| Some("phase")).collect(),
        }
    }
    fn calls_per_iteration(&self) -> u64 {
        1
    }
    fn iteration_multiple(&self) -> u64 {
        self.multiple
    }
    fn run(&mut self, iterations: u64) -> anyhow::Result<Vec<BatchTime>> {
        let per_call = self.cost_ns * (1.0 + self.jitter * self.unit());
        let ns = (per_call * iterations as f64).round() as u64;
        let took = Duration::from_nanos(ns);
        self.shared.now.set(self.shared.now.get() + took);
        self.shared
            .log
            .borrow_mut()
            .push(Ev::Run { iterations, took });
        Ok(vec![
            BatchTime {
                ns,
                calls: iterations
            };
            self.phases
        ])
    }
    fn regions(&self) -> &[Region] {
        &[]
    }
    fn pages_per_call(&self) -> u64 {
        1
    }
}

impl Backend for FakeBackend {
    fn prepare(&mut self, plan: &CellPlan) -> anyhow::Result<Box<dyn Instance>> {
        let s = &self.shared;
        s.prepares.set(s.prepares.get() + 1);
        s.probes_in_block.set(0);
        s.log.borrow_mut().push(Ev::Prepare { size: plan.size });
        if self.fail_size == Some(plan.size) {
            anyhow::bail!("fake: cannot map {} bytes", plan.size);
        }
        let op = FakeOp {
            shared: s.clone(),
            cost_ns: self.cost_ns,
            jitter: self.jitter,
            multiple: self.multiple,
            phases: self.phases,
        };
        Ok(Box::new(FakeInstance(op, self.layout.clone())))
    }
    fn observe(&mut self, _plan: &CellPlan, _op: &dyn KernelOp) -> anyhow::Result<(Layout, u64)> {
        Ok((self.layout.clone(), 1))
    }
    fn count_flushes(
        &mut self,
        _op: &mut dyn KernelOp,
        phases: usize,
    ) -> anyhow::Result<Vec<TlbFlushes>> {
        Ok(vec![TlbFlushes::default(); phases])
    }
    fn probes(&mut self, memory: bool) -> (f64, Option<f64>) {
        let s = &self.shared;
        s.probes_in_block.set(s.probes_in_block.get() + 1);
        (180.0, memory.then_some(90.0))
    }
    fn now(&self) -> Duration {
        self.shared.now.get()
    }
    fn interrupted(&self) -> bool {
        let s = &self.shared;
        // The first probe precedes the first sample: two samples are taken
        // once three probes are.
        self.interrupt_in_block.is_some_and(|b| {
            s.prepares.get() > b || (s.prepares.get() == b && s.probes_in_block.get() >= 3)
        })
    }
}
