//! Count `tlb:tlb_flush` tracepoint events caused by the calling thread, with
//! `perf_event_open`, and break them down by `reason` and `pages` from sampled
//! raw records.
//!
//! # What is counted
//!
//! Both perf events are per-thread (`pid = 0`, `cpu = -1`, inherit off): they
//! count every `tlb:tlb_flush` event emitted on whatever CPU while *this
//! thread* is the current task, in any context (syscall, fault, interrupt).
//! On x86 (`arch/x86/mm/tlb.c`) that means:
//!
//! * seen: `local_mm_shootdown` (this thread's own `flush_tlb_func` for its mm,
//!   e.g. the single flush at the end of `mprotect`), `remote_ipi_send` (emitted
//!   by the initiator in `native_flush_tlb_multi` *before* deciding which CPUs
//!   really get an IPI: lazy-TLB CPUs are skipped but the event is still
//!   emitted), `local_shootdown` (kernel-address flushes this thread does);
//! * not counted: `remote_shootdown` / `remote_wrong_cpu` events handled in
//!   IRQ context on this thread's CPU while it runs. They are someone
//!   else's flush (another process that once ran on this CPU and frees page
//!   tables, a migration of our pages from another CPU), seen under load: a
//!   filter on both perf events drops them (`format::FOREIGN_REASONS`), and
//!   where the kernel refuses the filter they are subtracted from the count
//!   by the sampled breakdown;
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
//!
//! # The parts
//!
//! `format` parses the tracepoint's format file, `tracefs` finds (or mounts)
//! tracefs and reads the id and format, `sys` holds every system call and all
//! `unsafe` code (perf_event_open, ioctls, the mmap'd ring buffer, mount),
//! and this file is the counting API.

mod format;
mod sys;
#[cfg(test)]
mod tests;
mod tracefs;

use std::collections::BTreeMap;
use std::fmt;

use anyhow::bail;

use crate::record::TlbFlushes;
use format::TlbFormat;
use sys::{Event, Sampler};

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

/// Fold one ring record into a breakdown.
fn account_record(format: &TlbFormat, ty: u32, body: &[u8], into: &mut Breakdown) {
    match ty {
        sys::PERF_RECORD_SAMPLE => {
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
        sys::PERF_RECORD_LOST => {
            // u64 id, u64 lost.
            if let Some(n) = body.get(8..16) {
                into.lost += u64::from_ne_bytes(n.try_into().expect("8 bytes"));
            }
        }
        sys::PERF_RECORD_LOST_SAMPLES => {
            if let Some(n) = body.get(0..8) {
                into.lost += u64::from_ne_bytes(n.try_into().expect("8 bytes"));
            }
        }
        _ => {}
    }
}

/// Counts `tlb:tlb_flush` events of the calling thread, and optionally samples
/// every event for a breakdown by reason and pages.
///
/// Bound to the thread that opened it (`pid = 0`): not `Send`.
pub struct FlushCounter {
    counter: Event,
    sampler: Option<Sampler>,
    format: TlbFormat,
    tally: Breakdown,
    /// The kernel drops other contexts' flushes
    /// ([`TlbFormat::own_flushes_filter`]) before counting and sampling.
    filtered: bool,
}

/// Why `tlb:tlb_flush` cannot count anything on `arch` (`uname -m`), when
/// it cannot. The tracepoint is defined in generic code
/// (include/trace/events/tlb.h) and exists on every arch, but only x86
/// (arch/x86/mm/tlb.c) emits it: elsewhere a count would read 0 flushes
/// whatever the kernel did.
pub fn arch_unobservable(arch: &str) -> Option<Unavailable> {
    (!matches!(arch, "x86_64" | "x86" | "i386" | "i686")).then(|| {
        Unavailable::new(format!(
            "not observable on this arch ({arch}): only x86 emits the tracepoint"
        ))
    })
}

/// [`arch_unobservable`] for the arch this binary runs on (a native binary
/// runs on a kernel of its own arch).
fn this_arch_unobservable() -> Result<(), Unavailable> {
    arch_unobservable(std::env::consts::ARCH).map_or(Ok(()), Err)
}

impl FlushCounter {
    /// Open the counter (and, with `with_breakdown`, the sampler) disabled.
    pub fn open(with_breakdown: bool) -> Result<FlushCounter, Unavailable> {
        this_arch_unobservable()?;
        let info = tracefs::tracepoint_info()?;
        let counter = Event::open(info.id)?;
        let sampler = if with_breakdown {
            Some(Sampler::open(info.id, &counter)?)
        } else {
            None
        };
        // Both events or neither, so that the breakdown sums to the count.
        let filtered = info.format.own_flushes_filter().is_some_and(|f| {
            counter.set_filter(&f).is_ok()
                && sampler.as_ref().is_none_or(|s| s.set_filter(&f).is_ok())
        });
        if !filtered {
            // Undo a filter the counter took when the sampler refused one.
            let _ = counter.set_filter("");
        }
        Ok(FlushCounter {
            counter,
            sampler,
            format: info.format,
            tally: Breakdown::default(),
            filtered,
        })
    }

    /// With the breakdown sampler when it can be had, else counting only:
    /// what a measurement uses.
    pub fn open_best() -> Result<FlushCounter, Unavailable> {
        FlushCounter::open(true).or_else(|_| FlushCounter::open(false))
    }

    /// Whether a breakdown is being sampled.
    pub fn has_breakdown(&self) -> bool {
        self.sampler.is_some()
    }

    /// Start counting (and sampling).
    pub fn start(&mut self) -> anyhow::Result<()> {
        self.counter.enable()
    }

    /// Stop counting (and sampling).
    pub fn stop(&mut self) -> anyhow::Result<()> {
        self.counter.disable()
    }

    /// Zero the count and forget samples taken so far.
    pub fn reset(&mut self) -> anyhow::Result<()> {
        self.counter.reset()?;
        if let Some(s) = self.sampler.as_mut() {
            s.drain(|_, _| {})?;
        }
        self.tally = Breakdown::default();
        Ok(())
    }

    /// Events counted since open or the last reset, other contexts' flushes
    /// left out (by the kernel's filter, or else by the sampled breakdown:
    /// exact unless records were lost).
    pub fn count(&mut self) -> anyhow::Result<u64> {
        let n = self.counter.count()?;
        if self.filtered || self.sampler.is_none() {
            return Ok(n);
        }
        self.drain()?;
        let foreign: u64 = self
            .tally
            .events
            .iter()
            .filter(|(k, _)| TlbFormat::is_foreign_key(k))
            .map(|(_, v)| *v)
            .sum();
        Ok(n.saturating_sub(foreign))
    }

    /// Move records out of the ring buffer into the running tally. Cheap when
    /// the ring is empty; call it between measured calls when many events are
    /// expected, so the ring does not overflow.
    pub fn drain(&mut self) -> anyhow::Result<()> {
        let (format, tally) = (&self.format, &mut self.tally);
        match self.sampler.as_mut() {
            Some(s) => s.drain(|ty, body| account_record(format, ty, body, tally)),
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
        let mut b = self.tally.clone();
        b.events.retain(|k, _| !TlbFormat::is_foreign_key(k));
        Ok(b)
    }
}

/// What a measurement of this machine would get from the tracepoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Availability {
    /// The tracepoint id.
    pub id: u64,
    /// Why the per-reason breakdown cannot be sampled (counting still works).
    pub no_breakdown: Option<Unavailable>,
    /// tracefs was not mounted: it was mounted to read the id and format,
    /// and unmounted again.
    pub tracefs_mounted_for_read: bool,
}

/// Open (and close) the counter exactly as a measurement does
/// ([`count_flushes_with`]): `Err` says why flushes cannot be counted here.
pub fn availability() -> Result<Availability, Unavailable> {
    this_arch_unobservable()?;
    let info = tracefs::tracepoint_info()?;
    let counter = FlushCounter::open_best()?;
    let no_breakdown = match counter.has_breakdown() {
        true => None,
        false => FlushCounter::open(true).err(),
    };
    Ok(Availability {
        id: info.id,
        no_breakdown,
        tracefs_mounted_for_read: info.mounted_for_read,
    })
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
    let mut counter = match FlushCounter::open_best() {
        Ok(c) => c,
        Err(e) => return unavailable(e.to_string()),
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
