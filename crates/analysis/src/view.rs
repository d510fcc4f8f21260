//! What a comparison produces ([`CompareView`]): the runs compared, the
//! method, machine drift, one row per cell key and the verdict counts. The
//! renderers (`report::compare`) read it; `ptelab compare --json` prints it
//! as is (`"schema": "ptelab/compare/v1"`, fields described there).

use serde::{Deserialize, Serialize};

use crate::record::{Guest, Metric};

/// `schema` value of the JSON document.
pub const SCHEMA: &str = "ptelab/compare/v1";

/// One run taking part in the comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunRef {
    /// The name as given: an id, `latest`, `latest~1`, or a tag.
    pub name: String,
    pub id: i64,
    pub kind: String,
    pub kernel_release: String,
    pub machine_id: String,
    pub started_at: String,
    pub tags: Vec<String>,
    /// Set when the run ran in a QEMU guest: accelerator, metric, QEMU
    /// version, kernel source and sha256 (`record::Guest`). Absent: the host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest: Option<Guest>,
    /// Every run of the side in a replicated comparison (`id` is the
    /// first); empty for a single run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<i64>,
}

/// How the comparison was computed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Method {
    /// "median ns per call" ("median instructions per call" under
    /// `metric: "instructions"`).
    pub statistic: String,
    pub confidence: f64,
    pub resamples: usize,
    /// Master seed of the bootstrap, as `0x` + 16 hex digits.
    pub seed: String,
    /// "mann-whitney-u (normal approximation, tie and continuity corrected)".
    pub test: String,
    /// "holm".
    pub correction: String,
    /// Cells in the Holm family (those that got a verdict).
    pub family: usize,
    pub alpha: f64,
    /// Noise threshold as a fraction (0.02 = 2%).
    pub noise: f64,
    /// Where the threshold came from, in words (`--noise`, the default, or
    /// the machine's calibration).
    pub noise_source: String,
    /// Guest runs: which guest biases (`calibrate --guest`) were each
    /// cell's noise threshold, and the command for cells none covers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest_bias: Option<String>,
    pub min_samples: usize,
    /// Set when each side is several runs and the run is the unit
    /// (`ptelab_stats::replicated`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicated: Option<Replicated>,
}

/// The design of a replicated comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Replicated {
    pub runs_a: usize,
    pub runs_b: usize,
}

/// Machine drift between the runs, seen by the kernel-speed probe
/// (`measure::probe`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Drift {
    /// Median probe of each run, ns per getppid (None: measured before
    /// ptelab recorded the probe).
    pub probe_a_ns: Option<f64>,
    pub probe_b_ns: Option<f64>,
    /// Median memory-latency probe of each run, ns per load (None: not
    /// recorded).
    pub memory_a_ns: Option<f64>,
    pub memory_b_ns: Option<f64>,
    /// Whether each cell's ratio was divided by its probe drift.
    pub corrected: bool,
    /// Why it was or was not, in words.
    pub why: String,
}

/// One side of one cell.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SideView {
    /// Median per call, in the view's `metric`: ns, or guest instructions
    /// (the name is kept for schema stability).
    pub median_ns: f64,
    pub samples: usize,
    /// Short observed layout (`100% 64K`).
    pub layout: String,
    /// Replicated comparisons: runs holding the cell (`median_ns` is then
    /// the geometric mean of their medians, `samples` their total).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<usize>,
}

/// The verdict of a row, in the words the tables print.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VerdictKind {
    Regression,
    Improvement,
    NoChange,
    /// A guest figure's change within the cell's guest bias
    /// (`calibrate --guest`): no direction can be told.
    WithinGuestBias,
    NotComparable,
}

impl VerdictKind {
    /// The words the tables print.
    pub fn text(self) -> &'static str {
        match self {
            VerdictKind::Regression => "REGRESSION",
            VerdictKind::Improvement => "improvement",
            VerdictKind::NoChange => "no change",
            VerdictKind::WithinGuestBias => "within guest bias",
            VerdictKind::NotComparable => "not comparable",
        }
    }
}

/// One cell key compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompareRow {
    pub workload: String,
    pub size_bytes: u64,
    pub folio: String,
    pub phase: Option<String>,
    pub regions: u32,
    pub neighbor: bool,
    pub a: Option<SideView>,
    pub b: Option<SideView>,
    /// median B / median A (corrected for machine drift when the view's
    /// `drift.corrected` and both cells have probes).
    pub ratio: Option<f64>,
    /// The uncorrected median B / median A, when `ratio` was corrected.
    pub ratio_raw: Option<f64>,
    /// How this cell's time responds to the kernel-speed probe (β: 1 =
    /// proportionally, 0 = not at all), fitted within runs, when corrected.
    pub drift_slope: Option<f64>,
    /// How it responds to the memory-latency probe, when both cells
    /// recorded it and the cell was corrected.
    pub memory_slope: Option<f64>,
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    /// Mann-Whitney two-sided p-value.
    pub p_value: Option<f64>,
    /// Holm-adjusted p-value (cells with a verdict only).
    pub p_holm: Option<f64>,
    /// This cell's bootstrap seed, `0x` + 16 hex digits.
    pub seed: Option<String>,
    pub verdict: VerdictKind,
    /// Why there is no verdict.
    pub reason: Option<String>,
    /// The guest bias this cell was judged against (`±0.66%, calibrate
    /// --guest on debian:6.17.8 x86_64`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest_bias: Option<String>,
    /// Replicated comparisons: the pooled standard deviation of ln(run
    /// median), i.e. how far this cell's runs spread (0.03 ≈ 3%).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_sd: Option<f64>,
}

/// Counts per verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub cells: usize,
    pub regressions: usize,
    pub improvements: usize,
    pub no_change: usize,
    /// Guest cells whose change stayed within their guest bias.
    #[serde(skip_serializing_if = "is_zero")]
    pub within_guest_bias: usize,
    pub not_comparable: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Summary {
    /// Count the verdicts of `rows`.
    pub fn of(rows: &[CompareRow]) -> Summary {
        let mut s = Summary {
            cells: rows.len(),
            ..Summary::default()
        };
        for r in rows {
            match r.verdict {
                VerdictKind::Regression => s.regressions += 1,
                VerdictKind::Improvement => s.improvements += 1,
                VerdictKind::NoChange => s.no_change += 1,
                VerdictKind::WithinGuestBias => s.within_guest_bias += 1,
                VerdictKind::NotComparable => s.not_comparable += 1,
            }
        }
        s
    }
}

/// Everything `ptelab compare` prints.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompareView {
    pub schema: &'static str,
    /// The unit of every per-call figure and probe in the document:
    /// `"instructions"` (guest instructions, TCG icount) for guest runs
    /// under TCG; absent means `"time"` (nanoseconds), as in documents
    /// written before guests existed. Both sides always share it.
    #[serde(skip_serializing_if = "is_time")]
    pub metric: Metric,
    pub a: RunRef,
    pub b: RunRef,
    pub method: Method,
    pub drift: Drift,
    pub rows: Vec<CompareRow>,
    pub summary: Summary,
}

fn is_time(m: &Metric) -> bool {
    *m == Metric::Time
}
