//! The shape of one measured cell, shared by the runner, the store, reports
//! and JSON output (`"schema": "ptelab/bench/v1"`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::workload::{FolioSpec, WorkloadKind};

/// Folio layout observed from /proc/self/pagemap + /proc/kpageflags.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Layout {
    /// Folio size in bytes -> number of folios of that size seen in the region.
    /// Order-0 pages count as 4096-byte folios.
    pub histogram: BTreeMap<u64, u64>,
    /// Base pages present in the region.
    pub pages_present: u64,
    /// Base pages in the region (present or not).
    pub pages_total: u64,
    /// Bytes mapped by PMD entries (smaps AnonHugePages over the region's VMAs).
    pub pmd_mapped_bytes: u64,
    /// Folios whose head page is not aligned (virtually) to the folio size.
    pub misaligned_folios: u64,
    /// Whether the observation matches the requested spec.
    pub matches: bool,
    /// Why it does not match, in words, when it does not.
    pub mismatch: Option<String>,
}

/// Summary of per-call times of one cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NsPerCall {
    pub median: f64,
    /// 95% confidence interval of the median (distribution-free, order statistics).
    pub ci_low: f64,
    pub ci_high: f64,
    pub min: f64,
    pub mean: f64,
    /// Every sample: mean ns per call within one batch of calls.
    pub samples: Vec<f64>,
}

/// TLB flushes counted from the `tlb:tlb_flush` tracepoint in a separate pass.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TlbFlushes {
    /// Mean tracepoint events per mm call, when counted.
    pub per_call: Option<f64>,
    /// Events counted and the calls they were counted over.
    pub events: u64,
    pub calls: u64,
    /// Breakdown from sampled raw records: "reason/pages" -> events.
    /// pages is "all" for a full flush (TLB_FLUSH_ALL) or the page count.
    pub breakdown: BTreeMap<String, u64>,
    /// Why no count is given, when none is.
    pub unavailable: Option<String>,
}

/// One measured cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    pub workload: WorkloadKind,
    pub size_bytes: u64,
    /// The requested folio layout.
    pub folio: FolioSpec,
    pub regions: u32,
    /// Placement: the region merged with a neighbour mapping on purpose.
    pub neighbor: bool,
    /// Named phase of the workload timed, when a workload times several
    /// (prot-transition: "none-to-rw", "rw-to-none").
    pub phase: Option<String>,
    /// Observed layout before and after the timed phase.
    pub layout: Layout,
    pub layout_after: Option<Layout>,
    /// Whether layout control and verification were available.
    pub verified: bool,
    /// VMAs covering the region(s) before and after the timed phase.
    pub vmas_before: u64,
    pub vmas_after: u64,
    pub ns_per_call: NsPerCall,
    /// Samples per block, in measurement order (each block is a fresh
    /// instance of the cell; see `runner::DEFAULT_BLOCKS`). Empty in results
    /// stored before blocks existed: one block.
    #[serde(default)]
    pub blocks: Vec<u64>,
    /// The kernel-speed probe of each block, in order: ns per getppid(2),
    /// the median of the probes taken between the block's timed batches
    /// (see `measure::probe`). `ptelab compare` divides machine drift out
    /// with it. Empty in results stored before the probe existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probe_ns: Vec<f64>,
    /// The memory-latency probe of each block, in order: ns per dependent
    /// load through a 64 MiB random cycle, the median of the probes taken
    /// between the block's timed batches. Empty in older results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_probe_ns: Vec<f64>,
    /// Median ns per call divided by the pages one call covers.
    pub ns_per_page: f64,
    /// Calls timed in total, and per sample.
    pub calls: u64,
    pub calls_per_sample: u64,
    pub pinned_cpu: Option<usize>,
    pub tlb_flushes: TlbFlushes,
    /// Wall time the cell took, including setup.
    pub elapsed_s: f64,
    /// Warnings raised while measuring (high outlier share, budget spent before
    /// the precision target, ...).
    pub warnings: Vec<String>,
}

/// One model cell: counters per call for one workload, arch and strategy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelCellRecord {
    pub workload: WorkloadKind,
    pub size_bytes: u64,
    pub folio: FolioSpec,
    /// "x86_64" or "arm64".
    pub arch: String,
    /// Strategy name as `ptelab model --list-strategies` prints it.
    pub strategy: String,
    /// Everything else that selects the cell (granule, offset, contpte, bbml2, ...).
    pub params: serde_json::Value,
    /// Counter name -> value per mm call.
    pub counters: BTreeMap<String, f64>,
}
