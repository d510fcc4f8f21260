//! The phases of one block of a cell on the running kernel, in order (a cell
//! is measured in `blocks` blocks, each a fresh instance; see
//! [`DEFAULT_BLOCKS`]):
//!
//! 1. prepare: configure THP knobs for the folio spec (guarded), map each
//!    region (aligned, isolated), populate, verify the layout;
//! 2. warm up for `WARMUP` (first calls settle the page tables, e.g. the first
//!    mprotect after population write-protects nothing yet);
//! 3. calibrate (first block): double the batch until one batch takes about
//!    `SAMPLE_TARGET` (`ICOUNT_SAMPLE_TARGET` in a TCG guest);
//! 4. sample: batches until the 95% CI half-width of the median over every
//!    block so far is under `PRECISION` of the median, or the block's share
//!    of the time budget is spent;
//! 5. count TLB flushes in a separate pass (first block; the tracepoint
//!    perturbs timing);
//! 6. verify the layout again, count VMAs, tear down.
//!
//! The runner emits [`RunEvent`]s and never prints. Everything it needs from
//! the machine (a fresh instance per block, layout observation, flush
//! counts, the probes, the clock, the stop signal) comes through a
//! [`Backend`]: [`KernelBackend`] is the running kernel, and the unit tests
//! drive the same code with a fake op and a fake clock (hyperfine's
//! Executor/MockExecutor split).

use std::time::Duration;

use anyhow::Context;

use super::marker;
use super::ops::KernelOp;
use crate::record::{CellResult, Layout, NsPerCall, SampleWindow, TlbFlushes};
use crate::workload::{FolioSpec, WorkloadKind};

mod kernel;
pub use kernel::KernelBackend;

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
mod tests;

/// Time spent warming up before calibration.
const WARMUP: Duration = Duration::from_millis(50);
/// Target duration of one sample (a batch of calls).
pub const SAMPLE_TARGET: Duration = Duration::from_millis(10);
/// Target of one sample in a TCG guest under icount, where the clock counts
/// instructions: a quarter of the 4 ms timer tick of Debian's kernels
/// (HZ=250), so that at most one sample in four takes a tick and the
/// median is the figure of the calls alone. 10 ms samples hold two or three
/// ticks each, and the figure then carried their cost, 29 to 45
/// instructions a call on `prot-transition` 400K 4K (Debian 6.17.8): under
/// QEMU 10.0 and 11.1 it was 41,077 a call, under 7.2, whose calibration
/// had chosen 30 calls a sample instead of 129, 41,032, the calls alone
/// (docs/guests.md, "QEMU versions").
pub const ICOUNT_SAMPLE_TARGET: Duration = Duration::from_millis(1);
/// Stop sampling once the CI half-width of the median is under this fraction.
const PRECISION: f64 = 0.01;
/// Never stop on precision before this many samples.
const MIN_SAMPLES: usize = 10;
/// Hard cap on samples per cell.
const MAX_SAMPLES: usize = 5000;

/// How long to sample.
#[derive(Clone, Copy, Debug)]
pub enum Budget {
    /// Adaptive: until the precision target or this much time.
    Time(Duration),
    /// Exactly this many timed iterations.
    Iters(u64),
}

/// Everything that defines one cell on the kernel.
#[derive(Clone, Debug)]
pub struct CellPlan {
    pub workload: WorkloadKind,
    pub size: u64,
    pub folio: FolioSpec,
    pub regions: u32,
    pub neighbor: bool,
    pub budget: Budget,
    pub allow_mismatch: bool,
    /// Layout control and verification available (root).
    pub verified: bool,
    pub count_flushes: bool,
    /// Blocks the time budget is split into (fresh instance each).
    pub blocks: u32,
    pub pinned_cpu: Option<usize>,
    /// The reclaim workload's options (`None` for every other workload).
    pub reclaim: Option<super::reclaim::ReclaimOptions>,
    /// Keep each sample's window number for the QEMU plugin (a guest of
    /// `vm --profile`; docs/guests.md, "Mechanism counters").
    pub windows: bool,
    /// Take the memory-latency probe between batches. Not under TCG icount:
    /// a load is one instruction there, and building the probe's 64 MiB
    /// cycle costs a guest about a second of emulation (its mappings are
    /// still made: `probe::reserve_memory_probe`).
    pub memory_probe: bool,
    /// How long one sample should take: [`SAMPLE_TARGET`], or
    /// [`ICOUNT_SAMPLE_TARGET`] in a TCG guest.
    pub sample_target: Duration,
}

impl CellPlan {
    /// Blocks the cell is measured in (one for a fixed `--iters` budget).
    pub fn blocks_planned(&self) -> u32 {
        match self.budget {
            Budget::Iters(_) => 1,
            Budget::Time(_) => self.blocks.max(1),
        }
    }
}

/// What the runner reports while it works.
#[derive(Debug)]
pub enum RunEvent<'a> {
    /// A block of this cell begins.
    Block(&'a str),
    /// A phase of the block begins (prepare, warm-up, calibrate, ...).
    Phase(&'a str),
    /// A sample was taken: samples pooled so far, their median's CI.
    Sample { done: usize, rel_ci: f64 },
    /// This many blocks are done (or given up, for a failed cell).
    BlocksDone(u64),
    /// A cell is finished: one result per phase, as stored.
    Finished {
        cell: &'a str,
        result: &'a CellResult,
    },
}

/// Receives [`RunEvent`]s; the default ignores them.
pub trait Reporter {
    fn event(&mut self, _event: RunEvent<'_>) {}
}

/// The cell was stopped by SIGINT/SIGTERM.
#[derive(Debug, thiserror::Error)]
#[error("interrupted")]
pub struct Interrupted;

/// Where the blocks of a cell run, and how they are observed and timed.
pub trait Backend {
    /// A fresh instance of `plan`: regions mapped and populated (THP knobs
    /// set for its folio spec first), not yet bound to the workload's op.
    fn prepare(&mut self, plan: &CellPlan) -> anyhow::Result<Box<dyn Instance>>;
    /// The layout and VMA count of the op's regions, after sampling.
    fn observe(&mut self, plan: &CellPlan, op: &dyn KernelOp) -> anyhow::Result<(Layout, u64)>;
    /// Flush counts per phase, in a pass outside the timed samples.
    fn count_flushes(
        &mut self,
        op: &mut dyn KernelOp,
        phases: usize,
    ) -> anyhow::Result<Vec<TlbFlushes>>;
    /// The kernel-speed and (when `memory`) memory-latency probes (ns per
    /// getppid, ns per load), taken between batches.
    fn probes(&mut self, memory: bool) -> (f64, Option<f64>);
    /// Monotonic time since an arbitrary start.
    fn now(&self) -> Duration;
    /// SIGINT or SIGTERM asked the run to stop.
    fn interrupted(&self) -> bool;
}

/// One prepared instance of a cell, before the runner decides to measure it
/// (a layout mismatch stops the block before the op is built: building a
/// reclaim op makes a swapfile).
pub trait Instance {
    /// The layout observed after population.
    fn layout(&self) -> anyhow::Result<Layout>;
    /// VMAs the instance's regions span.
    fn vmas(&self) -> anyhow::Result<u64>;
    /// Bind the workload's op to the instance.
    fn bind(self: Box<Self>) -> anyhow::Result<Box<dyn KernelOp>>;
}

/// Pin the calling thread to `cpu`.
pub fn pin_to(cpu: usize) -> anyhow::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes in bounds
    // (checked against CPU_SETSIZE below).
    unsafe {
        if cpu >= libc::CPU_SETSIZE as usize {
            anyhow::bail!("CPU {cpu} is out of range");
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error()).context(format!("pinning to CPU {cpu}"));
        }
    }
    Ok(())
}

/// Environment variable telling a re-executed ptelab which CPU it was pinned to.
const PINNED_ENV: &str = "PTELAB_PINNED_CPU";

/// Pin the process to `cpu` and, unless already done, re-execute ptelab there.
///
/// Why re-execute: x86 keeps every CPU an mm has ever run on in its
/// `mm_cpumask`, so a process that started on CPU 0 and was then pinned to
/// CPU 1 makes every TLB flush also consider CPU 0 (a `remote_ipi_send`
/// tracepoint event per flush, measured on this VM). A fresh exec on the
/// pinned CPU gives a fresh mm that has only ever run there, which is what
/// `taskset -c N ./reproducer` gives the seeds' programs.
pub fn pin_process(cpu: usize) -> anyhow::Result<()> {
    pin_to(cpu)?;
    if std::env::var(PINNED_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        == Some(cpu)
    {
        return Ok(());
    }
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new("/proc/self/exe")
        .args(std::env::args_os().skip(1))
        .arg0(std::env::args_os().next().unwrap_or_default())
        .env(PINNED_ENV, cpu.to_string())
        .exec();
    Err(anyhow::Error::new(err).context("re-executing ptelab on the pinned CPU"))
}

/// Blocks a cell's time budget is split into by default. Each block measures
/// a fresh instance of the cell (new regions, populated and verified again),
/// and a sweep runs the blocks of its cells round-robin, so that a burst of
/// host noise, or an unlucky placement of one region, touches one block of a
/// cell instead of all of it. Measured on this VM: back-to-back single-block
/// sweeps differed by up to 48% in one cell while their minima agreed to 0.6%
/// in the others.
pub const DEFAULT_BLOCKS: u32 = 10;
/// Samples every block collects before the precision rule may end it.
const MIN_BLOCK_SAMPLES: usize = 3;

/// One block: the samples and observations of one instance of a cell.
struct Block {
    /// Samples taken (per phase; every phase gets one per batch).
    samples: u64,
    /// Wall time of the block, setup included.
    elapsed: Duration,
    calls: u64,
    layout: Layout,
    layout_after: Layout,
    vmas_before: u64,
    vmas_after: u64,
    flushes: Option<Vec<TlbFlushes>>,
    /// Median kernel-speed probe over the block (ns per getppid).
    probe_ns: f64,
    /// Median memory-latency probe over the block (ns per load), if taken.
    memory_probe_ns: Option<f64>,
}

/// What one block's sampling took.
struct Sampled {
    /// Samples (batches) taken.
    n: usize,
    /// mm calls made in the timed batches.
    calls: u64,
    /// (kernel-speed, memory-latency) probes, before the first batch and
    /// after each.
    probes: Vec<(f64, Option<f64>)>,
}

/// A cell being measured block by block.
pub struct CellRun {
    plan: CellPlan,
    /// Per phase, every sample of every block so far, in order.
    pooled: Vec<Vec<f64>>,
    blocks: Vec<Block>,
    /// Calls per sample, calibrated in the first block.
    batch: Option<u64>,
    phases: Vec<Option<&'static str>>,
    pages: u64,
    /// mm calls one iteration of the op makes (all regions).
    calls_per_iteration: u64,
    warnings: Vec<String>,
    /// Per phase, the plugin's window of every sample so far (`plan.windows`).
    windows: Vec<Vec<SampleWindow>>,
}

impl CellRun {
    /// A cell with no block measured yet.
    pub fn new(plan: CellPlan) -> CellRun {
        CellRun {
            plan,
            pooled: Vec::new(),
            blocks: Vec::new(),
            batch: None,
            phases: Vec::new(),
            pages: 1,
            calls_per_iteration: 1,
            warnings: Vec::new(),
            windows: Vec::new(),
        }
    }

    /// The plan this cell runs.
    pub fn plan(&self) -> &CellPlan {
        &self.plan
    }

    /// Blocks this cell is measured in (one for a fixed `--iters` budget).
    pub fn blocks_planned(&self) -> u32 {
        self.plan.blocks_planned()
    }

    /// Blocks measured so far.
    pub fn blocks_done(&self) -> u32 {
        self.blocks.len() as u32
    }

    /// Every planned block is measured.
    pub fn finished(&self) -> bool {
        self.blocks.len() as u32 >= self.blocks_planned()
    }

    /// Measure the next block: prepare a fresh instance, warm up, (calibrate),
    /// sample its share of the budget, count flushes (first block), verify.
    /// Interrupted, the block leaves nothing behind: the cell keeps its
    /// finished blocks only.
    pub fn run_block(
        &mut self,
        backend: &mut dyn Backend,
        reporter: &mut dyn Reporter,
    ) -> anyhow::Result<()> {
        let block_started = backend.now();
        let plan = self.plan.clone();
        let first = self.blocks.is_empty();
        reporter.event(RunEvent::Phase("prepare"));
        let instance = backend.prepare(&plan)?;
        let layout = instance.layout()?;
        if plan.verified && !layout.matches && !plan.allow_mismatch {
            anyhow::bail!(
                "{}\nThe cell was not measured; pass --allow-mismatch to measure it anyway.",
                layout.mismatch.clone().unwrap_or_default()
            );
        }
        if let (true, true, Some(m)) = (first, plan.verified, &layout.mismatch) {
            self.warnings.push(format!("layout mismatch accepted: {m}"));
        }
        let vmas_before = instance.vmas()?;
        let mut op = instance.bind()?;
        self.phases = op.phases();
        let multiple = op.iteration_multiple();

        reporter.event(RunEvent::Phase("warm-up"));
        let t = backend.now();
        while backend.now() - t < WARMUP {
            op.run(multiple)?;
        }

        let batch = match self.batch {
            Some(b) => b,
            None => {
                reporter.event(RunEvent::Phase("calibrate"));
                let b = calibrate(op.as_mut(), &*backend, plan.budget, plan.sample_target)?;
                self.batch = Some(b);
                b
            }
        };

        reporter.event(RunEvent::Phase("sample"));
        let pooled_before: Vec<usize> = self.pooled.iter().map(Vec::len).collect();
        let windows_before: Vec<usize> = self.windows.iter().map(Vec::len).collect();
        let sampled = self.sample(op.as_mut(), backend, reporter, batch);
        let Sampled { n, calls, probes } = match sampled {
            Ok(s) => s,
            Err(e) => {
                // An unfinished block's samples are not the cell's.
                for (s, &len) in self.pooled.iter_mut().zip(&pooled_before) {
                    s.truncate(len);
                }
                self.pooled.truncate(pooled_before.len());
                for (w, &len) in self.windows.iter_mut().zip(&windows_before) {
                    w.truncate(len);
                }
                self.windows.truncate(windows_before.len());
                return Err(e);
            }
        };
        let nphases = self.phases.len();
        let flushes = if first && plan.count_flushes {
            reporter.event(RunEvent::Phase("count TLB flushes"));
            Some(backend.count_flushes(op.as_mut(), nphases)?)
        } else {
            None
        };

        reporter.event(RunEvent::Phase("verify"));
        let (layout_after, vmas_after) = backend.observe(&plan, op.as_ref())?;
        if plan.verified && layout_after.histogram != layout.histogram {
            self.warnings.push(format!(
                "layout changed during block {}: before {}, after {}",
                self.blocks.len() + 1,
                layout.summary(),
                layout_after.summary()
            ));
        }
        self.pages = op.pages_per_call();
        self.calls_per_iteration = op.calls_per_iteration();
        drop(op);
        let (mut kernel, memory): (Vec<f64>, Vec<Option<f64>>) = probes.into_iter().unzip();
        let mut memory: Vec<f64> = memory.into_iter().flatten().collect();
        self.blocks.push(Block {
            samples: n as u64,
            elapsed: backend.now() - block_started,
            calls,
            layout,
            layout_after,
            vmas_before,
            vmas_after,
            flushes,
            probe_ns: ptelab_stats::sample::median_in_place(&mut kernel),
            memory_probe_ns: (!memory.is_empty())
                .then(|| ptelab_stats::sample::median_in_place(&mut memory)),
        });
        Ok(())
    }

    /// Take the block's samples: batches of `batch` calls until the stop
    /// rule says the block is done (or `--iters` are spent).
    fn sample(
        &mut self,
        op: &mut dyn KernelOp,
        backend: &mut dyn Backend,
        reporter: &mut dyn Reporter,
        batch: u64,
    ) -> anyhow::Result<Sampled> {
        let multiple = op.iteration_multiple();
        self.pooled.resize(self.phases.len(), Vec::new());
        if self.plan.windows {
            self.windows.resize(self.phases.len(), Vec::new());
        }
        let mut n = 0usize;
        let mut rel = f64::INFINITY;
        let mut calls = 0u64;
        let mut iters_done = 0u64;
        // The probes run before the first batch and after every batch, so
        // they see the machine in the state the batches saw.
        let mut probes = vec![backend.probes(self.plan.memory_probe)];
        let parts = op.marked_parts();
        let t = backend.now();
        loop {
            if backend.interrupted() {
                return Err(Interrupted.into());
            }
            let this = match self.plan.budget {
                Budget::Iters(n) => {
                    let left = n.saturating_sub(iters_done);
                    if left == 0 {
                        break;
                    }
                    batch.min(left).div_ceil(multiple) * multiple
                }
                Budget::Time(_) => batch,
            };
            marker::reset();
            let times = op.run(this)?;
            let seq = marker::commit();
            for (p, (w, bt)) in self.windows.iter_mut().zip(&times).enumerate() {
                if parts.is_empty() {
                    w.push(SampleWindow {
                        seq,
                        phase: p as u8,
                        calls: bt.calls,
                        part: false,
                    });
                    continue;
                }
                // One timed phase, its calls marked apart in equal parts:
                // a window per part, under the part's marker phase.
                debug_assert!(bt.calls.is_multiple_of(parts.len() as u64));
                for i in 0..parts.len() {
                    w.push(SampleWindow {
                        seq,
                        phase: i as u8,
                        calls: bt.calls / parts.len() as u64,
                        part: true,
                    });
                }
            }
            probes.push(backend.probes(self.plan.memory_probe));
            iters_done += this;
            for (s, bt) in self.pooled.iter_mut().zip(&times) {
                s.push(bt.ns as f64 / bt.calls.max(1) as f64);
            }
            n += 1;
            calls += times[0].calls;
            let pooled_n = self.pooled[0].len();
            // The CI sorts every sample so far: re-evaluate it each time the
            // pool has grown by about 5%, not after every batch.
            if pooled_n < 100 || pooled_n.is_multiple_of(pooled_n / 20) {
                rel = self
                    .pooled
                    .iter()
                    .map(|s| relative_ci(s))
                    .fold(0.0, f64::max);
            }
            reporter.event(RunEvent::Sample {
                done: pooled_n,
                rel_ci: rel,
            });
            if let Budget::Time(budget) = self.plan.budget {
                let share = budget / self.blocks_planned();
                if block_done(n, pooled_n, rel, backend.now() - t, share) {
                    break;
                }
            }
        }
        Ok(Sampled { n, calls, probes })
    }

    /// The cell's results (one per phase) from every block measured.
    pub fn finish(mut self) -> Vec<CellResult> {
        let plan = &self.plan;
        let first = &self.blocks[0];
        let last = self.blocks.last().expect("a finished cell has blocks");
        for (k, b) in self.blocks.iter().enumerate().skip(1) {
            if plan.verified && b.layout.histogram != first.layout.histogram {
                self.warnings.push(format!(
                    "block {} observed {} where block 1 observed {}",
                    k + 1,
                    b.layout.summary(),
                    first.layout.summary()
                ));
            }
        }
        let calls: u64 = self.blocks.iter().map(|b| b.calls).sum();
        let block_sizes: Vec<u64> = self.blocks.iter().map(|b| b.samples).collect();
        let flushes = first.flushes.clone().unwrap_or_else(|| {
            let why = if plan.count_flushes {
                "not counted"
            } else {
                "not counted (--no-flush-count)"
            };
            vec![
                TlbFlushes {
                    unavailable: Some(why.into()),
                    ..Default::default()
                };
                self.phases.len()
            ]
        });
        let elapsed_s = self
            .blocks
            .iter()
            .map(|b| b.elapsed)
            .sum::<Duration>()
            .as_secs_f64();
        let batch = self.batch.unwrap_or(1);
        if let Some(w) = speed_change_warning(self.blocks.iter().map(|b| b.probe_ns)) {
            self.warnings.push(w);
        }
        let mut out = Vec::with_capacity(self.phases.len());
        for (p, phase) in self.phases.iter().enumerate() {
            let pooled = std::mem::take(&mut self.pooled[p]);
            let rel = relative_ci(&pooled);
            let mut warnings = self.warnings.clone();
            if matches!(plan.budget, Budget::Time(_)) && rel >= PRECISION {
                warnings.push(format!(
                    "time budget spent before the precision target: CI half-width {:.1}% of the median",
                    rel * 100.0
                ));
            }
            let ns = summarize(pooled);
            out.push(CellResult {
                workload: plan.workload,
                size_bytes: plan.size,
                folio: plan.folio,
                regions: plan.regions,
                neighbor: plan.neighbor,
                phase: phase.map(str::to_string),
                layout: first.layout.clone(),
                layout_after: Some(last.layout_after.clone()),
                verified: plan.verified,
                vmas_before: first.vmas_before,
                vmas_after: last.vmas_after,
                ns_per_page: ns.median / self.pages as f64,
                ns_per_call: ns,
                blocks: block_sizes.clone(),
                probe_ns: self.blocks.iter().map(|b| b.probe_ns).collect(),
                memory_probe_ns: self
                    .blocks
                    .iter()
                    .filter_map(|b| b.memory_probe_ns)
                    .collect(),
                calls,
                calls_per_sample: batch * self.calls_per_iteration,
                pinned_cpu: plan.pinned_cpu,
                tlb_flushes: flushes[p].clone(),
                elapsed_s,
                warnings,
                windows: self
                    .windows
                    .get_mut(p)
                    .map(std::mem::take)
                    .unwrap_or_default(),
                profile: None,
            });
        }
        out
    }
}

/// Calls per sample: double the batch until one batch takes a quarter of
/// `target`, then scale it to the target (a whole number of iteration
/// multiples; never more than a fixed `--iters` budget).
fn calibrate(
    op: &mut dyn KernelOp,
    clock: &dyn Backend,
    budget: Budget,
    target: Duration,
) -> anyhow::Result<u64> {
    let multiple = op.iteration_multiple();
    let mut batch = multiple;
    loop {
        let t = clock.now();
        op.run(batch)?;
        let el = clock.now() - t;
        if el >= target / 4 || batch >= 1 << 30 {
            let scale = target.as_secs_f64() / el.as_secs_f64().max(1e-9);
            batch = ((batch as f64 * scale) as u64).max(multiple);
            batch = batch.div_ceil(multiple) * multiple;
            break;
        }
        batch *= 2;
    }
    if let Budget::Iters(n) = budget {
        batch = batch.min(n.max(multiple));
    }
    Ok(batch)
}

/// The stop rule of a block under a time budget: `n` samples in this block,
/// `pooled_n` in the cell, the CI half-width `rel` of the pooled median,
/// `elapsed` sampling time of the block and its `share` of the budget.
fn block_done(n: usize, pooled_n: usize, rel: f64, elapsed: Duration, share: Duration) -> bool {
    if n >= MIN_BLOCK_SAMPLES
        && ((pooled_n >= MIN_SAMPLES && rel < PRECISION) || pooled_n >= MAX_SAMPLES)
    {
        return true;
    }
    // Slow cells (one call of several ms) still get a minimum.
    elapsed >= share && (n >= MIN_BLOCK_SAMPLES || elapsed >= share * 5)
}

/// Kernel-speed probes of a cell's blocks further apart than this mean the
/// machine changed speed state during the cell (the two states of the VM
/// ptelab was built on are ~37% apart; within a state blocks agree to ~4%).
const SPEED_CHANGE: f64 = 1.10;

/// A warning when the machine's kernel speed changed between the blocks
/// (`probes`: the blocks' kernel-speed probes).
fn speed_change_warning(probes: impl Iterator<Item = f64>) -> Option<String> {
    let (lo, hi) = probes.fold((f64::INFINITY, 0.0f64), |(lo, hi), p| {
        (lo.min(p), hi.max(p))
    });
    (lo > 0.0 && hi / lo > SPEED_CHANGE).then(|| {
        format!(
            "the machine's kernel speed changed during the cell (probe {lo:.0}-{hi:.0} ns per \
             getppid across blocks): another invocation may differ by as much; \
             `ptelab compare` adjusts for it"
        )
    })
}

/// Relative half-width of the 95% CI of the median (infinite below 6 samples).
fn relative_ci(samples: &[f64]) -> f64 {
    ptelab_stats::Sample::from_slice(samples)
        .and_then(|s| ptelab_stats::median_ci::median_ci(&s, 0.95))
        .map_or(f64::INFINITY, |ci| ci.relative_half_width())
}

/// Median, its 95% CI, min, mean of per-call samples.
pub fn summarize(samples: Vec<f64>) -> NsPerCall {
    let mut sorted = samples.clone();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    let (ci_low, ci_high) = ptelab_stats::Sample::new(sorted.clone())
        .and_then(|s| ptelab_stats::median_ci::median_ci(&s, 0.95))
        .map_or((f64::NAN, f64::NAN), |ci| (ci.low, ci.high));
    NsPerCall {
        median,
        ci_low,
        ci_high,
        min: sorted.first().copied().unwrap_or(f64::NAN),
        mean: if n == 0 {
            f64::NAN
        } else {
            sorted.iter().sum::<f64>() / n as f64
        },
        samples,
    }
}
