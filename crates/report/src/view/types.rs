//! The view types: plain serializable structs a renderer reads. Values stay
//! as measured (`f64` nanoseconds, bytes); renderers decide how to print.

use serde::{Deserialize, Serialize};

pub use crate::record::{Guest, Metric};

fn is_time(m: &Metric) -> bool {
    *m == Metric::Time
}

/// `schema` value of the JSON document.
pub const SCHEMA: &str = "ptelab/report/v1";

/// Everything a report shows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReportModel {
    pub schema: String,
    pub title: String,
    /// Every run the report reads, in the order given.
    pub runs: Vec<RunInfo>,
    /// Present when a baseline was given.
    pub comparison: Option<ComparisonInfo>,
    /// Measured cells, one section per (run, workload).
    pub workloads: Vec<WorkloadSection>,
    /// Model counters, one table per (run, workload, arch, parameters).
    pub models: Vec<ModelTable>,
    /// Published figure vs measured vs model, with a verdict per claim.
    pub claims: Vec<ClaimRow>,
    /// Cells measured across kernels in guests (reproduce --kernels), one
    /// section per (seed, workload, arch).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<KernelSection>,
    /// Set when the measured runs were not all measured in one metric (time
    /// and guest instructions): says which is which. Each run keeps its own
    /// plots; nothing draws the two units on one axis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_note: Option<String>,
    /// Per kernel function, the run against its baseline, when both were
    /// counted (`vm --profile`; `compare --functions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub functions: Option<crate::analysis::functions::FunctionsView>,
}

/// Why a run is in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunRole {
    /// Its measured (and model) cells are reported.
    Measured,
    /// Compared against: ratios are run / baseline.
    Baseline,
    /// Read for its model cells only.
    Model,
}

impl RunRole {
    /// The word renderers print.
    pub fn text(self) -> &'static str {
        match self {
            RunRole::Measured => "run",
            RunRole::Baseline => "baseline",
            RunRole::Model => "model",
        }
    }
}

/// One run and the machine it ran on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub role: RunRole,
    /// The name as given on the command line (id, `latest`, tag).
    pub name: String,
    pub id: i64,
    pub kind: String,
    pub command: String,
    pub status: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub tags: Vec<String>,
    /// Cells stored in the run.
    pub cells: u64,
    pub env: Environment,
    /// Set when the run ran in a QEMU guest (`record::Guest`); `env` is then
    /// the guest's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<Guest>,
}

/// The environment recorded with a run (its host record), as far as the
/// record has it: fields a record of another ptelab version lacks are `None`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub kernel_release: String,
    pub kernel_version: Option<String>,
    pub kernel_cmdline: Option<String>,
    pub arch: String,
    pub page_size: Option<u64>,
    pub cpu_model: Option<String>,
    pub cores: Option<u64>,
    pub mem_total_bytes: Option<u64>,
    /// How the machine is virtualized, `None` on bare metal.
    pub paravirt: Option<String>,
    /// Every THP/mTHP knob, path under /sys/kernel/mm/transparent_hugepage.
    pub thp_knobs: Vec<Knob>,
    pub machine_id: String,
    pub tool_version: String,
    pub git_revision: Option<String>,
}

/// One THP/mTHP knob and its value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Knob {
    pub name: String,
    pub value: String,
}

/// How the comparison was computed and what it found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComparisonInfo {
    /// Run id of A (the baseline) and B (the run); ratio = B / A.
    pub a: i64,
    pub b: i64,
    pub a_name: String,
    pub b_name: String,
    pub statistic: String,
    pub confidence: f64,
    pub resamples: usize,
    pub seed: String,
    pub test: String,
    pub correction: String,
    pub alpha: f64,
    pub noise: f64,
    /// "Noise threshold N%: where it came from." (compare's sentence); None
    /// in reports written before ptelab calibrated machines.
    #[serde(default)]
    pub noise_line: Option<String>,
    pub min_samples: usize,
    /// Machine drift between the runs and whether ratios were corrected
    /// for it, in words (`compare`'s sentence); None when not measured.
    #[serde(default)]
    pub drift: Option<String>,
    /// The sides ran under different QEMU releases, in words
    /// (`compare`'s sentence); None when they did not.
    #[serde(default)]
    pub qemu: Option<String>,
    pub cells: usize,
    pub regressions: usize,
    pub improvements: usize,
    pub no_change: usize,
    pub not_comparable: usize,
}

/// The measured cells of one workload in one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSection {
    pub workload: String,
    /// The seed document the workload reproduces ("001").
    pub seed: String,
    pub run: i64,
    /// The unit of every per-call figure of the section: under
    /// `"instructions"` the `*_ns` fields hold guest instructions (names
    /// kept for schema stability). Absent: `"time"`, nanoseconds.
    #[serde(default, skip_serializing_if = "is_time")]
    pub metric: Metric,
    /// One series per (folio, phase, regions, placement), rows by size.
    pub series: Vec<MeasuredSeries>,
    /// Ratio to the baseline per series; empty without a baseline.
    pub comparison: Vec<RatioSeries>,
    /// ns/call, ns/page, and the ratio when there is a baseline.
    pub plots: Vec<Plot>,
    /// Warnings raised while measuring, prefixed with their cell.
    pub warnings: Vec<String>,
}

/// What selects a series within a workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesKey {
    pub folio: String,
    pub phase: Option<String>,
    pub regions: u32,
    pub neighbor: bool,
}

impl SeriesKey {
    /// `64K`, `64K none-to-rw`, `4K x4 regions`, `4K merged`.
    pub fn label(&self) -> String {
        let mut s = self.folio.clone();
        if let Some(p) = &self.phase {
            s.push(' ');
            s.push_str(p);
        }
        if self.regions != 1 {
            s.push_str(&format!(" x{} regions", self.regions));
        }
        if self.neighbor {
            s.push_str(" merged");
        }
        s
    }
}

/// The cells of one series.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredSeries {
    pub key: SeriesKey,
    pub label: String,
    pub rows: Vec<MeasuredRow>,
}

/// One measured cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredRow {
    pub size_bytes: u64,
    pub median_ns: f64,
    /// 95% CI of the median.
    pub ci_low_ns: f64,
    pub ci_high_ns: f64,
    pub min_ns: f64,
    pub ns_per_page: f64,
    pub samples: usize,
    pub flushes_per_call: Option<f64>,
    /// Why flushes were not counted, when they were not.
    pub flushes_unavailable: Option<String>,
    pub vmas_before: u64,
    pub vmas_after: u64,
    pub layout: LayoutEvidence,
}

impl MeasuredRow {
    /// Half-width of the CI as a fraction of the median, when finite.
    pub fn ci_half(&self) -> Option<f64> {
        (self.ci_low_ns.is_finite() && self.ci_high_ns.is_finite() && self.median_ns > 0.0)
            .then(|| (self.ci_high_ns - self.ci_low_ns) / 2.0 / self.median_ns)
    }
}

/// The observed folio layout of one cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayoutEvidence {
    /// The layout requested (`--folio`).
    pub requested: String,
    /// Whether pagemap/kpageflags verification was available.
    pub verified: bool,
    /// `96% 64K, 4% 4K`.
    pub summary: String,
    pub matches: bool,
    pub mismatch: Option<String>,
    /// Folio sizes seen before the timed phase, largest first.
    pub histogram: Vec<HistogramBin>,
    pub pages_present: u64,
    pub pages_total: u64,
    pub pmd_mapped_bytes: u64,
    pub misaligned_folios: u64,
    /// Summary after the timed phase, when it differs from before.
    pub after: Option<String>,
}

/// Folios of one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistogramBin {
    pub folio_bytes: u64,
    /// `64K`.
    pub folio: String,
    pub count: u64,
    /// Share of the region's mapped bytes, 0..=1.
    pub share: f64,
}

/// Ratio to the baseline, per size, for one series.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RatioSeries {
    pub key: SeriesKey,
    pub label: String,
    pub rows: Vec<RatioRow>,
}

/// One compared cell: median run / median baseline with its bootstrap CI.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RatioRow {
    pub size_bytes: u64,
    pub baseline_ns: Option<f64>,
    pub run_ns: Option<f64>,
    pub ratio: Option<f64>,
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    pub p_holm: Option<f64>,
    pub verdict: Verdict,
    /// Why there is no verdict.
    pub reason: Option<String>,
}

/// A comparison verdict (the compare command's, kebab-case in JSON).
pub use crate::compare::VerdictKind as Verdict;

/// One plot: axes and series, no pixels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plot {
    /// Unique within the report (used for SVG ids).
    pub id: String,
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    /// A horizontal reference line (1.0 on ratio plots).
    pub reference: Option<f64>,
}

/// One axis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Axis {
    /// With its unit: "region size (bytes, log2)".
    pub label: String,
    pub scale: Scale,
    pub unit: Unit,
}

impl Axis {
    /// The region-size axis of every per-size plot.
    pub fn sizes() -> Axis {
        Axis {
            label: "region size (bytes, log2)".into(),
            scale: Scale::Log2,
            unit: Unit::Bytes,
        }
    }
}

/// How values map to positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Octaves: ticks at powers of two.
    Log2,
    /// Decades: ticks at powers of ten.
    Log10,
    Linear,
}

/// What tick labels say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// Binary sizes: 4K, 64K, 1M, 4G.
    Bytes,
    /// Times: 100 ns, 1 µs, 10 ms.
    Nanoseconds,
    /// Guest instruction counts (TCG icount): 100 instr, 1K instr, 1M instr.
    Instructions,
    /// Plain numbers: 0.8, 1.0, 1.2.
    Ratio,
}

/// One curve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub label: String,
    /// Palette index; a series and its baseline share one colour.
    pub color: usize,
    /// Drawn dashed (the baseline's curves).
    pub dashed: bool,
    pub points: Vec<Point>,
    /// Positions on the x axis where the series has no value (a cell not
    /// measured): its line is broken there rather than drawn across.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<f64>,
}

/// One point, with its confidence interval and verdict when known.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    pub lo: Option<f64>,
    pub hi: Option<f64>,
    pub marker: Option<Verdict>,
}

/// Model counters of one workload, arch and parameter set, per cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelTable {
    pub run: i64,
    pub workload: String,
    pub arch: String,
    /// The parameters shared by the cells (`granule=4K, contpte=true`).
    pub params: String,
    /// Strategy names, in the order the run stored them (columns).
    pub strategies: Vec<String>,
    pub cells: Vec<ModelCellView>,
}

/// The counters of one (size, folio) cell for every strategy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelCellView {
    pub size_bytes: u64,
    pub folio: String,
    /// Measured cells with this workload, size and folio in the report's runs.
    pub measured: Vec<MeasuredRef>,
    /// Counters non-zero for some strategy, by name.
    pub counters: Vec<CounterRow>,
}

/// A measured time beside the model's counters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredRef {
    pub run: i64,
    pub phase: Option<String>,
    /// In `metric`'s unit (ns, or guest instructions).
    pub median_ns: f64,
    pub ns_per_page: f64,
    #[serde(default, skip_serializing_if = "is_time")]
    pub metric: Metric,
}

/// One counter, per call, per strategy (`None`: the strategy has no cell).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CounterRow {
    pub name: String,
    pub values: Vec<Option<f64>>,
    /// Strategies disagree on it: this is what the batching changes.
    pub differs: bool,
}

/// One claim of a seed document checked against this machine and the model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRow {
    /// Seed document id ("001").
    pub seed: String,
    pub claim: String,
    pub published: Option<String>,
    pub measured: Option<String>,
    pub model: Option<String>,
    /// The cost model's figures beside the measured guest cells (guest
    /// instructions per call), or why there are none.
    #[serde(default)]
    pub predicted: Option<String>,
    pub verdict: String,
    /// Guest cells of the claim whose bias is not calibrated, each with the
    /// `calibrate --guest` command that measures it; said once for the run,
    /// not in every claim.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uncalibrated: Vec<String>,
}

impl KernelSection {
    /// The table every renderer draws: the cell's keys (folio, phase) to
    /// the left, sizes and per-kernel figures to the right.
    pub fn table(&self) -> crate::text::table::Table {
        let mut t = crate::text::table::Table::new();
        for c in &self.columns {
            t = if c == "folio" || c == "phase" {
                t.left(c.clone())
            } else {
                t.right(c.clone())
            };
        }
        for r in &self.rows {
            t.row(r.clone());
        }
        t
    }
}

/// One workload of a seed measured in guests of several kernels: a table
/// in the seed's shape (one column per kernel, then each kernel's ratio to
/// the baseline kernel), a plot of the per-call figure against region size,
/// one line per kernel, and beside it the same lines relative to the
/// baseline kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelSection {
    pub seed: String,
    /// Arch, unit and accelerator: `x86_64 guests, instructions per call (TCG …)`.
    pub heading: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// The kernel the ratio columns and the relative plot divide by, and
    /// why it is the baseline: `6.16.12, the newest kernel measured without
    /// cac1db8c3aad (…)`. Absent when no ratio is shown (one kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// Absent when the cells have one size only.
    pub plot: Option<Plot>,
    /// Every kernel's figure over the baseline kernel's, on a linear axis
    /// with 1.0 marked; absent when `plot` is, or without a baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative: Option<Plot>,
}
