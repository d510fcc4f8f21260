//! The shape of one measured cell, shared by the runner, the store, reports
//! and JSON output (`"schema": "ptelab/bench/v1"`).

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_text as text;
use ptelab_workload as workload;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::workload::{FolioSpec, WorkloadKind};

pub mod cells;
pub mod counter;
pub use counter::Counter;

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

impl Layout {
    /// Short human form of a layout: `100% 64K` or `94% 2M, 6% 4K (PMD-mapped 0%)`.
    pub fn summary(&self) -> String {
        let total: u64 = self.histogram.iter().map(|(b, n)| b * n).sum();
        if total == 0 {
            return "-".into();
        }
        let mut parts: Vec<String> = self
            .histogram
            .iter()
            .rev()
            .map(|(b, n)| {
                let pct = 100.0 * (*b * *n) as f64 / total as f64;
                format!("{pct:.0}% {}", crate::workload::size::format_size(*b))
            })
            .collect();
        if self.pmd_mapped_bytes > 0 {
            parts.push(format!(
                "{:.0}% PMD-mapped",
                100.0 * self.pmd_mapped_bytes as f64 / total as f64
            ));
        }
        parts.join(", ")
    }
}

/// Summary of per-call times of one cell. A figure the samples do not define
/// is NaN: the interval of one sample (as `--iters` may leave), every figure
/// of a cell without samples. JSON has no NaN: it is written and read as
/// `null` ([`undefined`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NsPerCall {
    #[serde(with = "undefined")]
    pub median: f64,
    /// 95% confidence interval of the median (distribution-free, order statistics).
    #[serde(with = "undefined")]
    pub ci_low: f64,
    #[serde(with = "undefined")]
    pub ci_high: f64,
    #[serde(with = "undefined")]
    pub min: f64,
    #[serde(with = "undefined")]
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
    /// Printed as `per_call` with its `unit` by the documents of stored and
    /// guest runs (`report::json`), which this reads back too.
    #[serde(alias = "per_call")]
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
    #[serde(
        default,
        alias = "probe",
        skip_serializing_if = "Vec::is_empty",
        with = "undefined::each"
    )]
    pub probe_ns: Vec<f64>,
    /// The memory-latency probe of each block, in order: ns per dependent
    /// load through a 64 MiB random cycle, the median of the probes taken
    /// between the block's timed batches. Empty in older results.
    #[serde(
        default,
        alias = "memory_probe",
        skip_serializing_if = "Vec::is_empty",
        with = "undefined::each"
    )]
    pub memory_probe_ns: Vec<f64>,
    /// Median ns per call divided by the pages one call covers.
    #[serde(alias = "per_page", with = "undefined")]
    pub ns_per_page: f64,
    /// Calls timed in total, and per sample.
    pub calls: u64,
    pub calls_per_sample: u64,
    pub pinned_cpu: Option<usize>,
    pub tlb_flushes: TlbFlushes,
    /// Wall time the cell took, including setup.
    #[serde(with = "undefined")]
    pub elapsed_s: f64,
    /// Warnings raised while measuring (high outlier share, budget spent before
    /// the precision target, ...).
    pub warnings: Vec<String>,
    /// The sample windows a guest marked for ptelab's QEMU plugin (`vm
    /// --profile`): what the host needs to turn the plugin's counts into
    /// [`Profile`]. Only in a guest's answer; never stored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<SampleWindow>,
    /// Mechanism counters per call (`vm --profile`, TCG guests only);
    /// `None` where nothing was counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
}

/// One sample of a cell as the guest marked it for the plugin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleWindow {
    /// The commit's running number in the guest (the plugin's window number).
    pub seq: u64,
    /// The phase's index among the workload's phases.
    pub phase: u8,
    /// mm calls timed in the window.
    pub calls: u64,
    /// The window holds one marked part of the cell's calls
    /// ([`crate::workload::WorkloadKind::marked_parts`], `phase` being the
    /// part's index): the cell's window is its parts' windows added.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub part: bool,
}

/// What ptelab's QEMU plugin counted for a cell (docs/guests.md,
/// "Mechanism counters"): per mm call, the median over the cell's sample
/// windows of each figure, so that a window disturbed by asynchronous
/// kernel work moves none of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Sample windows counted.
    pub windows: u64,
    /// Guest instructions per call executed in the kernel and in user space
    /// inside the timed sections.
    pub kernel_instructions: f64,
    pub user_instructions: f64,
    /// TLB-maintenance instructions per call by kind (`tlbi-page`,
    /// `tlbi-range`, `tlbi-asid`, `tlbi-all`, `tlbi-other`, `dsb`, `invlpg`,
    /// `invpcid`, `cr3-write`); kinds never seen are left out.
    pub tlb: BTreeMap<String, f64>,
    /// Kernel functions executed, most instructions first. Inlined code
    /// counts in the function it was inlined into.
    pub functions: Vec<FunctionCount>,
    /// Where the function names come from, or why there are none.
    pub symbols: String,
    /// The largest deviation of one window's kernel instructions per call
    /// from their median, as a fraction: how much asynchronous work the
    /// median kept out.
    pub max_window_deviation: f64,
    /// The same counts for each part of the calls the guest marked apart
    /// (the toggle's two directions), in the workload's order; empty for
    /// most workloads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<ProfilePart>,
}

/// A [`Profile`]'s counts for one marked part of the cell's calls, per
/// call of that part.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfilePart {
    /// The part's name (`rw-to-none`).
    pub phase: String,
    pub kernel_instructions: f64,
    pub user_instructions: f64,
    pub tlb: BTreeMap<String, f64>,
    pub functions: Vec<FunctionCount>,
}

impl ProfilePart {
    /// TLB invalidations per call of the part, as [`Profile::tlb_invalidations`].
    pub fn tlb_invalidations(&self) -> f64 {
        invalidations(&self.tlb)
    }
}

/// TLB invalidations among TLB-maintenance counts by kind: every kind but
/// the DSB barrier.
fn invalidations(tlb: &BTreeMap<String, f64>) -> f64 {
    tlb.iter()
        .filter(|(k, _)| ptelab_counts::Tlb::from_name(k).is_some_and(|t| t.invalidates()))
        .map(|(_, v)| v)
        .sum::<f64>()
}

/// One kernel function's counts per call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionCount {
    /// The symbol (or `0x…` when the guest's symbols were not available).
    pub name: String,
    /// Times execution entered the function at its first instruction.
    pub entries: f64,
    /// Instructions executed in it, inlined code included.
    pub instructions: f64,
}

impl Profile {
    /// TLB invalidations per call, every kind but the DSB barrier.
    pub fn tlb_invalidations(&self) -> f64 {
        invalidations(&self.tlb)
            // An empty sum is -0.0.
            + 0.0
    }

    /// A function's counts, when it ran.
    pub fn function(&self, name: &str) -> Option<&FunctionCount> {
        self.functions.iter().find(|f| f.name == name)
    }
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

/// The environment of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// `uname -r`.
    pub kernel_release: String,
    /// `uname -v` (build number and date).
    pub kernel_version: String,
    /// /proc/cmdline.
    pub kernel_cmdline: String,
    /// `uname -m`.
    pub arch: String,
    /// Base page size in bytes.
    pub page_size: u64,
    pub cpu_model: String,
    /// Online CPUs.
    pub cores: usize,
    pub mem_total_bytes: u64,
    pub mem_available_bytes: u64,
    /// Effective uid 0.
    pub is_root: bool,
    /// How we are virtualized, e.g. "KVM guest; CONFIG_PARAVIRT_XXL: page-table
    /// writes are pv_ops calls"; `None` on bare metal.
    pub paravirt: Option<String>,
    /// Every THP/mTHP knob (`thp::read_knobs`).
    pub thp_knobs: BTreeMap<String, String>,
    /// An application-specific hash of /etc/machine-id (the raw id is meant
    /// to stay on the machine, machine-id(5)): same machine, same value.
    pub machine_id: String,
    /// ptelab's version.
    pub tool_version: String,
    /// Git revision ptelab was built from, when built from a git checkout.
    pub git_revision: Option<String>,
    /// Set when the run ran in a QEMU guest (`ptelab vm`): how, and in what
    /// unit. The fields above are then the guest's own, as the guest binary
    /// captured them. Absent (runs stored before guests existed, and every
    /// host run): measured on the host, in time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<Guest>,
}

impl Host {
    // Read by `ptelab vm` (src/guest) when it stores a guest's run.
    #[allow(dead_code)]
    /// The unit of every per-call figure of the run.
    pub fn metric(&self) -> Metric {
        metric_of(self.guest.as_ref())
    }
}

/// The unit of a run given its guest provenance: time unless a guest says
/// otherwise.
pub fn metric_of(guest: Option<&Guest>) -> Metric {
    guest.map_or(Metric::Time, |g| g.metric)
}

/// What a run's per-call figures count. The record's fields keep their `ns`
/// names (`ns_per_call`, `probe_ns`, ...) as the measuring process wrote
/// them; under [`Metric::Instructions`] they hold guest instructions, not
/// nanoseconds, and the documents of stored and guest runs print them as
/// `per_call`, `per_page`, ... with a `unit` (`report::json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Nanoseconds of wall-clock time (the host, or a KVM guest).
    #[default]
    Time,
    /// Executed guest instructions: a TCG guest under `-icount shift=0`,
    /// whose clock advances one "nanosecond" per instruction. Blind to
    /// cycles, IPC, cache and TLB misses (docs/statistics.md).
    Instructions,
}

impl Metric {
    /// `time` or `instructions`, as JSON and `ptelab runs` write it.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Time => "time",
            Metric::Instructions => "instructions",
        }
    }

    /// The seeds' per-call column: `nsec_per_call`, `instr_per_call`.
    pub fn per_call_column(self) -> &'static str {
        match self {
            Metric::Time => "nsec_per_call",
            Metric::Instructions => "instr_per_call",
        }
    }

    /// Per-page column and unit: `ns/page`, `instr/page`.
    pub fn per_page_column(self) -> &'static str {
        match self {
            Metric::Time => "ns/page",
            Metric::Instructions => "instr/page",
        }
    }

    /// Unit of a per-call figure: `ns/call`, `instr/call`.
    pub fn per_call_unit(self) -> &'static str {
        match self {
            Metric::Time => "ns/call",
            Metric::Instructions => "instr/call",
        }
    }

    /// A side's column in comparisons: `nsec`, `instr/call`.
    pub fn side_column(self) -> &'static str {
        match self {
            Metric::Time => "nsec",
            Metric::Instructions => "instr/call",
        }
    }

    /// Per-call quantity in words: `nsec per call`, `instructions per call`.
    pub fn per_call_words(self) -> &'static str {
        match self {
            Metric::Time => "nsec per call",
            Metric::Instructions => "instructions per call",
        }
    }

    /// Unit in words: `ns`, `instructions`.
    pub fn unit_words(self) -> &'static str {
        match self {
            Metric::Time => "ns",
            Metric::Instructions => "instructions",
        }
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How QEMU ran a guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Hardware virtualization: guest code runs natively, clocks are time.
    Kvm,
    /// QEMU's translator, with icount: the clock counts instructions.
    Tcg,
}

impl Accel {
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }

    /// The metric a guest under this accelerator is measured in.
    #[allow(dead_code)] // for `ptelab vm` (src/guest), through Guest::new
    pub fn metric(self) -> Metric {
        match self {
            Accel::Kvm => Metric::Time,
            Accel::Tcg => Metric::Instructions,
        }
    }
}

impl std::fmt::Display for Accel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Provenance of a run made in a QEMU guest, filled on the host side.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guest {
    pub accel: Accel,
    /// The unit of the run's figures ([`Accel::metric`] unless stated).
    pub metric: Metric,
    /// `qemu-system-* --version`, first line.
    pub qemu_version: String,
    /// Where the kernel came from: `debian:6.17.13 linux-image-… 6.17.13-1`,
    /// or the path of the user's image.
    pub kernel_source: String,
    /// sha256 of the kernel image booted, hex.
    pub kernel_sha256: String,
    /// Cells the guest's command could not measure, each with its reason
    /// (`mprotect-toggle 2M 2M: …`): what a reader of the stored run is told
    /// in place of their figures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_measured: Vec<String>,
}

impl Guest {
    /// A guest run's provenance; its metric follows the accelerator.
    #[allow(dead_code)] // for `ptelab vm` (src/guest), storing a guest's run
    pub fn new(accel: Accel, qemu_version: &str, kernel_source: &str, kernel_sha256: &str) -> Self {
        Guest {
            accel,
            metric: accel.metric(),
            qemu_version: qemu_version.into(),
            kernel_source: kernel_source.into(),
            kernel_sha256: kernel_sha256.into(),
            not_measured: Vec::new(),
        }
    }
}

/// Where a run ran, in a few words: `host`, or `tcg guest aarch64` (the
/// kernel release is beside it wherever it is printed).
pub fn place(guest: Option<&Guest>, arch: &str) -> String {
    match guest {
        None => "host".into(),
        Some(g) => format!("{} guest {arch}", g.accel),
    }
}

/// Serde for a number that may be undefined (NaN): `null` in JSON, which has
/// no NaN, and `null` back to NaN, so that a stored cell always reads back.
pub mod undefined {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    fn defined(v: f64) -> Option<f64> {
        (!v.is_nan()).then_some(v)
    }

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        defined(*v).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }

    /// The same for each number of a list.
    pub mod each {
        use super::*;

        pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(v.iter().map(|v| defined(*v)))
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
            let v = Vec::<Option<f64>>::deserialize(d)?;
            Ok(v.into_iter().map(|v| v.unwrap_or(f64::NAN)).collect())
        }
    }
}

/// Where finished cells go (the results database), one call per finished cell
/// so that an interrupted session keeps everything it finished.
pub trait CellSink {
    /// Start a run; returns its id.
    fn begin(&self, kind: &str, command: &str, host: &Host) -> anyhow::Result<i64>;
    /// Store one finished cell (one transaction).
    fn cell(&self, run: i64, cell: &CellResult) -> anyhow::Result<()>;
    /// Mark the run finished: `failed` when an error stopped it (every cell
    /// failed, or the sink refused one), `interrupted` by a signal.
    fn finish(&self, run: i64, interrupted: bool, failed: bool) -> anyhow::Result<()>;
}

/// Median of every positive finite value `per_cell` gives over `cells`
/// (None when there is none): a run's median probe.
pub fn run_median<'a>(
    cells: impl IntoIterator<Item = &'a CellResult>,
    per_cell: impl Fn(&CellResult) -> &[f64],
) -> Option<f64> {
    let mut all: Vec<f64> = cells
        .into_iter()
        .flat_map(|c| per_cell(c).iter().copied())
        .filter(|p| p.is_finite() && *p > 0.0)
        .collect();
    (!all.is_empty()).then(|| ptelab_stats::sample::median_in_place(&mut all))
}

/// Fixed records for tests of every layer above this one.
#[cfg(any(test, feature = "testing"))]
pub mod fixtures {
    use std::collections::BTreeMap;

    use super::*;

    /// A fixed cell for renderer snapshots.
    pub fn fixture(size_kib: u64, median: f64, folio: FolioSpec) -> CellResult {
        let fb = folio.folio_bytes();
        CellResult {
            workload: WorkloadKind::MprotectToggle,
            size_bytes: size_kib * 1024,
            folio,
            regions: 1,
            neighbor: false,
            phase: None,
            layout: Layout {
                histogram: BTreeMap::from([(fb, size_kib * 1024 / fb)]),
                pages_present: size_kib / 4,
                pages_total: size_kib / 4,
                pmd_mapped_bytes: 0,
                misaligned_folios: 0,
                matches: true,
                mismatch: None,
            },
            layout_after: None,
            verified: true,
            vmas_before: 1,
            vmas_after: 1,
            ns_per_call: NsPerCall {
                median,
                ci_low: median * 0.995,
                ci_high: median * 1.005,
                min: median * 0.98,
                mean: median,
                samples: vec![median; 10],
            },
            ns_per_page: median / (size_kib / 4) as f64,
            blocks: vec![],
            probe_ns: vec![],
            memory_probe_ns: vec![],
            calls: 1000,
            calls_per_sample: 100,
            pinned_cpu: Some(1),
            tlb_flushes: TlbFlushes {
                per_call: Some(0.5),
                events: 32,
                calls: 64,
                ..Default::default()
            },
            elapsed_s: 1.0,
            warnings: vec![],
            windows: vec![],
            profile: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::fixture;
    use super::*;

    #[test]
    fn old_hosts_read_as_host_runs_in_time_and_guests_round_trip() {
        let mut host: serde_json::Value = serde_json::json!({
            "kernel_release": "6.18", "kernel_version": "#1", "kernel_cmdline": "",
            "arch": "x86_64", "page_size": 4096, "cpu_model": "c", "cores": 2,
            "mem_total_bytes": 1, "mem_available_bytes": 1, "is_root": true,
            "paravirt": null, "thp_knobs": {}, "machine_id": "m",
            "tool_version": "0.1.0", "git_revision": null
        });
        let old: Host = serde_json::from_value(host.clone()).unwrap();
        assert_eq!(old.guest, None);
        assert_eq!(old.metric(), Metric::Time);
        // A host run writes no `guest` key: its JSON is what it always was.
        assert_eq!(serde_json::to_value(&old).unwrap(), host);
        let g = Guest::new(
            Accel::Tcg,
            "QEMU emulator version 10.0.2",
            "debian:6.17.13",
            "ab",
        );
        host["guest"] = serde_json::to_value(&g).unwrap();
        assert_eq!(host["guest"]["metric"], "instructions");
        assert_eq!(host["guest"]["accel"], "tcg");
        let guest: Host = serde_json::from_value(host).unwrap();
        assert_eq!(guest.metric(), Metric::Instructions);
        assert_eq!(place(guest.guest.as_ref(), "aarch64"), "tcg guest aarch64");
        assert_eq!(place(None, "aarch64"), "host");
        assert_eq!(Guest::new(Accel::Kvm, "", "", "").metric, Metric::Time);
    }

    #[test]
    fn run_probe_is_the_median_over_every_block() {
        let mut c = fixture(4096, 100.0, FolioSpec::Base);
        let mut d = c.clone();
        c.probe_ns = vec![250.0, 500.0, 225.0];
        d.probe_ns = vec![186.0, f64::NAN];
        assert_eq!(run_median([&c, &d], |c| &c.probe_ns), Some(237.5));
        let old = fixture(4, 1.0, FolioSpec::Base);
        assert_eq!(run_median([&old], |c| &c.probe_ns), None);
        assert_eq!(run_median([&c], |c| &c.memory_probe_ns), None);
    }
}
