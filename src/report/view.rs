//! The report's view model: plain serializable structs of rows, comparisons
//! and plot series, built once from stored runs and read by every renderer
//! ([`crate::report::html::render_html`], [`crate::report::markdown::render_markdown`]).
//!
//! Nothing here formats numbers or draws: values stay as measured (`f64`
//! nanoseconds, bytes) and renderers decide how to print them. Plots are
//! data ([`Plot`]: axes with a scale and a unit, series of points with
//! optional confidence bounds and verdict markers); [`crate::report::plot`]
//! turns them into SVG.
//!
//! # Building
//!
//! [`ReportBuilder`] collects named runs and builds a [`ReportModel`]:
//!
//! - [`ReportBuilder::run`]: a run whose measured cells become one
//!   [`WorkloadSection`] per workload (tables, layout evidence, plots) and
//!   whose model cells become [`ModelTable`]s. Call it once per run; a
//!   report may hold several (`ptelab reproduce`).
//! - [`ReportBuilder::baseline`]: the run compared against, with the
//!   [`CompareView`] that `ptelab compare` computes
//!   (`crate::analysis::compare_runs(baseline, run)`: A is the
//!   baseline, B the run, ratio B/A). Adds ratio curves and the baseline's
//!   own curves (dashed) to the plots.
//! - [`ReportBuilder::model_run`]: a run read for its model cells only.
//! - [`ReportBuilder::claim`]: a "published vs measured vs model" row.
//!
//! # JSON (`"schema": "ptelab/report/v1"`)
//!
//! `ptelab report --json` prints the model as one document: `title`,
//! `runs` ([`RunInfo`] with the [`Environment`] from the run's host record),
//! `comparison` ([`ComparisonInfo`], or `null`), `workloads`
//! ([`WorkloadSection`]), `models` ([`ModelTable`]) and `claims`
//! ([`ClaimRow`]).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::record::{CellResult, ModelCellRecord};
use crate::report::compare::{CompareRow, CompareView};
use crate::store::StoredRun;
use crate::workload::size::format_size;

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
    fn of(c: &CellResult) -> SeriesKey {
        SeriesKey {
            folio: c.folio.to_string(),
            phase: c.phase.clone(),
            regions: c.regions,
            neighbor: c.neighbor,
        }
    }

    fn of_row(r: &CompareRow) -> SeriesKey {
        SeriesKey {
            folio: r.folio.clone(),
            phase: r.phase.clone(),
            regions: r.regions,
            neighbor: r.neighbor,
        }
    }

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
pub use crate::report::compare::VerdictKind as Verdict;

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
    pub median_ns: f64,
    pub ns_per_page: f64,
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
    pub verdict: String,
}

/// Collects runs and builds a [`ReportModel`].
pub struct ReportBuilder<'a> {
    title: String,
    runs: Vec<(&'a str, &'a StoredRun)>,
    baseline: Option<(&'a str, &'a StoredRun, &'a CompareView)>,
    model_runs: Vec<(&'a str, &'a StoredRun)>,
    claims: Vec<ClaimRow>,
}

impl<'a> ReportBuilder<'a> {
    pub fn new(title: impl Into<String>) -> ReportBuilder<'a> {
        ReportBuilder {
            title: title.into(),
            runs: Vec::new(),
            baseline: None,
            model_runs: Vec::new(),
            claims: Vec::new(),
        }
    }

    /// A run to report, named as the user named it.
    pub fn run(mut self, name: &'a str, run: &'a StoredRun) -> Self {
        self.runs.push((name, run));
        self
    }

    /// The baseline and the comparison of the report's run against it
    /// (A = baseline, B = run).
    pub fn baseline(mut self, name: &'a str, run: &'a StoredRun, cmp: &'a CompareView) -> Self {
        self.baseline = Some((name, run, cmp));
        self
    }

    /// A run read for its model cells.
    pub fn model_run(mut self, name: &'a str, run: &'a StoredRun) -> Self {
        self.model_runs.push((name, run));
        self
    }

    /// A published-vs-measured-vs-model row.
    #[allow(dead_code)] // for `ptelab reproduce`
    pub fn claim(mut self, claim: ClaimRow) -> Self {
        self.claims.push(claim);
        self
    }

    pub fn build(self) -> ReportModel {
        let mut runs: Vec<RunInfo> = Vec::new();
        for (name, r) in &self.runs {
            runs.push(run_info(RunRole::Measured, name, r));
        }
        if let Some((name, r, _)) = self.baseline {
            runs.push(run_info(RunRole::Baseline, name, r));
        }
        for (name, r) in &self.model_runs {
            runs.push(run_info(RunRole::Model, name, r));
        }

        let mut workloads = Vec::new();
        for (_, r) in &self.runs {
            for w in workloads_of(r) {
                workloads.push(section(r, w, self.baseline));
            }
        }

        let measured: Vec<(i64, &CellResult)> = self
            .runs
            .iter()
            .flat_map(|(_, r)| r.kernel_cells().map(|c| (r.run.id, c)))
            .collect();
        let mut models = Vec::new();
        for (_, r) in self.runs.iter().chain(&self.model_runs) {
            models.extend(model_tables(r, &measured));
        }

        ReportModel {
            schema: SCHEMA.into(),
            title: self.title,
            runs,
            comparison: self.baseline.map(|(_, _, cmp)| comparison_info(cmp)),
            workloads,
            models,
            claims: self.claims,
        }
    }
}

fn host_str(host: &serde_json::Value, key: &str) -> Option<String> {
    match host.get(key)? {
        serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

fn run_info(role: RunRole, name: &str, r: &StoredRun) -> RunInfo {
    let s = &r.run;
    let h = &r.host;
    let thp_knobs = h
        .get("thp_knobs")
        .and_then(|k| k.as_object())
        .map(|o| {
            o.iter()
                .map(|(k, v)| Knob {
                    name: k.clone(),
                    value: v.as_str().map_or_else(|| v.to_string(), str::to_string),
                })
                .collect()
        })
        .unwrap_or_default();
    RunInfo {
        role,
        name: name.to_string(),
        id: s.id,
        kind: s.kind.clone(),
        command: s.command.clone(),
        status: s.status.to_string(),
        started_at: s.started_at.clone(),
        finished_at: s.finished_at.clone(),
        tags: s.tags.clone(),
        cells: s.cells,
        env: Environment {
            kernel_release: host_str(h, "kernel_release").unwrap_or(s.kernel_release.clone()),
            kernel_version: host_str(h, "kernel_version"),
            kernel_cmdline: host_str(h, "kernel_cmdline"),
            arch: host_str(h, "arch").unwrap_or(s.arch.clone()),
            page_size: h.get("page_size").and_then(|v| v.as_u64()),
            cpu_model: host_str(h, "cpu_model"),
            cores: h.get("cores").and_then(|v| v.as_u64()),
            mem_total_bytes: h.get("mem_total_bytes").and_then(|v| v.as_u64()),
            paravirt: host_str(h, "paravirt"),
            thp_knobs,
            machine_id: s.machine_id.clone(),
            tool_version: s.tool_version.clone(),
            git_revision: s.git_revision.clone(),
        },
    }
}

fn comparison_info(v: &CompareView) -> ComparisonInfo {
    let m = &v.method;
    let s = &v.summary;
    ComparisonInfo {
        a: v.a.id,
        b: v.b.id,
        a_name: v.a.name.clone(),
        b_name: v.b.name.clone(),
        statistic: m.statistic.clone(),
        confidence: m.confidence,
        resamples: m.resamples,
        seed: m.seed.clone(),
        test: m.test.clone(),
        correction: m.correction.clone(),
        alpha: m.alpha,
        noise: m.noise,
        noise_line: Some(crate::report::compare::noise_line(m)),
        min_samples: m.min_samples,
        drift: crate::report::compare::drift_line(&v.drift, v.method.replicated.is_some()),
        cells: s.cells,
        regressions: s.regressions,
        improvements: s.improvements,
        no_change: s.no_change,
        not_comparable: s.not_comparable,
    }
}

/// Workload names of a run's measured cells, in first-seen order.
fn workloads_of(r: &StoredRun) -> Vec<&'static str> {
    let mut out = Vec::new();
    for c in r.kernel_cells() {
        if !out.contains(&c.workload.name()) {
            out.push(c.workload.name());
        }
    }
    out
}

/// Cells of `workload` grouped by series key, keys in first-seen order and
/// rows by size.
fn grouped<'c>(
    cells: impl Iterator<Item = &'c CellResult>,
    workload: &str,
) -> Vec<(SeriesKey, Vec<&'c CellResult>)> {
    let mut groups: Vec<(SeriesKey, Vec<&CellResult>)> = Vec::new();
    for c in cells.filter(|c| c.workload.name() == workload) {
        let k = SeriesKey::of(c);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, v)) => v.push(c),
            None => groups.push((k, vec![c])),
        }
    }
    for (_, v) in &mut groups {
        v.sort_by_key(|c| c.size_bytes);
    }
    groups
}

fn evidence(c: &CellResult) -> LayoutEvidence {
    let l = &c.layout;
    let total: u64 = l.histogram.iter().map(|(b, n)| b * n).sum();
    let histogram = l
        .histogram
        .iter()
        .rev()
        .map(|(&b, &n)| HistogramBin {
            folio_bytes: b,
            folio: format_size(b),
            count: n,
            share: if total == 0 {
                0.0
            } else {
                (b * n) as f64 / total as f64
            },
        })
        .collect();
    let after = c
        .layout_after
        .as_ref()
        .filter(|a| a.histogram != l.histogram || a.pmd_mapped_bytes != l.pmd_mapped_bytes)
        .map(crate::record::Layout::summary);
    LayoutEvidence {
        requested: c.folio.to_string(),
        verified: c.verified,
        summary: l.summary(),
        matches: l.matches,
        mismatch: l.mismatch.clone(),
        histogram,
        pages_present: l.pages_present,
        pages_total: l.pages_total,
        pmd_mapped_bytes: l.pmd_mapped_bytes,
        misaligned_folios: l.misaligned_folios,
        after,
    }
}

fn measured_row(c: &CellResult) -> MeasuredRow {
    let ns = &c.ns_per_call;
    MeasuredRow {
        size_bytes: c.size_bytes,
        median_ns: ns.median,
        ci_low_ns: ns.ci_low,
        ci_high_ns: ns.ci_high,
        min_ns: ns.min,
        ns_per_page: c.ns_per_page,
        samples: ns.samples.len(),
        flushes_per_call: c.tlb_flushes.per_call,
        flushes_unavailable: c.tlb_flushes.unavailable.clone(),
        vmas_before: c.vmas_before,
        vmas_after: c.vmas_after,
        layout: evidence(c),
    }
}

/// Points of one series: ns/call or ns/page with the CI scaled alike.
fn time_points(cells: &[&CellResult], per_page: bool) -> Vec<Point> {
    cells
        .iter()
        .map(|c| {
            let ns = &c.ns_per_call;
            let k = if per_page && ns.median > 0.0 {
                c.ns_per_page / ns.median
            } else {
                1.0
            };
            let finite = |v: f64| (v.is_finite() && v > 0.0).then_some(v * k);
            Point {
                x: c.size_bytes as f64,
                y: ns.median * k,
                lo: finite(ns.ci_low),
                hi: finite(ns.ci_high),
                marker: None,
            }
        })
        .collect()
}

fn size_axis() -> Axis {
    Axis {
        label: "region size (bytes, log scale)".into(),
        scale: Scale::Log2,
        unit: Unit::Bytes,
    }
}

fn section(
    r: &StoredRun,
    workload: &'static str,
    baseline: Option<(&str, &StoredRun, &CompareView)>,
) -> WorkloadSection {
    let groups = grouped(r.kernel_cells(), workload);
    let seed = r
        .kernel_cells()
        .find(|c| c.workload.name() == workload)
        .map_or(String::new(), |c| c.workload.seed().to_string());
    let series: Vec<MeasuredSeries> = groups
        .iter()
        .map(|(k, cells)| MeasuredSeries {
            key: k.clone(),
            label: k.label(),
            rows: cells.iter().map(|c| measured_row(c)).collect(),
        })
        .collect();
    let base_groups =
        baseline.map_or_else(Vec::new, |(_, b, _)| grouped(b.kernel_cells(), workload));
    let comparison = baseline.map_or_else(Vec::new, |(_, _, cmp)| ratio_series(cmp, workload));

    // One colour per key across the run's, the baseline's and the ratio curves.
    let mut keys: Vec<&SeriesKey> = groups.iter().map(|(k, _)| k).collect();
    for k in base_groups
        .iter()
        .map(|(k, _)| k)
        .chain(comparison.iter().map(|s| &s.key))
    {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let color = |k: &SeriesKey| keys.iter().position(|x| *x == k).unwrap_or(0);
    let base_label = baseline.map(|(_, b, _)| format!("run {}", b.run.id));

    let id = format!("run{}-{workload}", r.run.id);
    let mut plots = Vec::new();
    for (per_page, what, unit_label) in [
        (false, "ns-call", "time per call (log scale)"),
        (true, "ns-page", "time per 4K page (log scale)"),
    ] {
        let label = |k: &SeriesKey, run: Option<&str>| match (run, &base_label) {
            (Some(run), Some(_)) => format!("{} ({run})", k.label()),
            _ => k.label(),
        };
        let own = format!("run {}", r.run.id);
        let mut s: Vec<Series> = groups
            .iter()
            .map(|(k, cells)| Series {
                label: label(k, Some(&own)),
                color: color(k),
                dashed: false,
                points: time_points(cells, per_page),
            })
            .collect();
        if let Some(bl) = &base_label {
            s.extend(base_groups.iter().map(|(k, cells)| Series {
                label: label(k, Some(bl)),
                color: color(k),
                dashed: true,
                points: time_points(cells, per_page),
            }));
        }
        plots.push(Plot {
            id: format!("{id}-{what}"),
            title: format!(
                "{workload}: {} vs region size",
                if per_page {
                    "ns per page"
                } else {
                    "ns per call"
                }
            ),
            x: size_axis(),
            y: Axis {
                label: unit_label.into(),
                scale: Scale::Log10,
                unit: Unit::Nanoseconds,
            },
            series: s,
            reference: None,
        });
    }
    if !comparison.is_empty() {
        plots.push(Plot {
            id: format!("{id}-ratio"),
            title: format!(
                "{workload}: run {} / baseline, median ns per call",
                r.run.id
            ),
            x: size_axis(),
            y: Axis {
                label: "ratio of medians (95% bootstrap CI)".into(),
                scale: Scale::Linear,
                unit: Unit::Ratio,
            },
            series: comparison
                .iter()
                .map(|s| Series {
                    label: s.label.clone(),
                    color: color(&s.key),
                    dashed: false,
                    points: s
                        .rows
                        .iter()
                        // Like `ptelab compare`: no ratio where there is no verdict.
                        .filter(|row| row.verdict != Verdict::NotComparable)
                        .filter_map(|row| {
                            Some(Point {
                                x: row.size_bytes as f64,
                                y: row.ratio?,
                                lo: row.ci_low,
                                hi: row.ci_high,
                                marker: Some(row.verdict),
                            })
                        })
                        .collect(),
                })
                .collect(),
            reference: Some(1.0),
        });
    }

    let warnings = groups
        .iter()
        .flat_map(|(k, cells)| {
            cells.iter().flat_map(move |c| {
                c.warnings
                    .iter()
                    .map(move |w| format!("{} {}: {w}", k.label(), format_size(c.size_bytes)))
            })
        })
        .collect();
    WorkloadSection {
        workload: workload.to_string(),
        seed,
        run: r.run.id,
        series,
        comparison,
        plots,
        warnings,
    }
}

fn ratio_series(cmp: &CompareView, workload: &str) -> Vec<RatioSeries> {
    let mut out: Vec<RatioSeries> = Vec::new();
    for row in cmp.rows.iter().filter(|r| r.workload == workload) {
        let key = SeriesKey::of_row(row);
        let ratio = RatioRow {
            size_bytes: row.size_bytes,
            baseline_ns: row.a.as_ref().map(|s| s.median_ns),
            run_ns: row.b.as_ref().map(|s| s.median_ns),
            ratio: row.ratio,
            ci_low: row.ci_low,
            ci_high: row.ci_high,
            p_holm: row.p_holm,
            verdict: row.verdict,
            reason: row.reason.clone(),
        };
        match out.iter_mut().find(|s| s.key == key) {
            Some(s) => s.rows.push(ratio),
            None => out.push(RatioSeries {
                label: key.label(),
                key,
                rows: vec![ratio],
            }),
        }
    }
    for s in &mut out {
        s.rows.sort_by_key(|r| r.size_bytes);
    }
    out
}

/// `granule=4K, contpte=true` from a model cell's parameters.
fn params_text(p: &serde_json::Value) -> String {
    match p.as_object() {
        Some(o) => o
            .iter()
            .map(|(k, v)| match v.as_str() {
                Some(s) => format!("{k}={s}"),
                None => format!("{k}={v}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        None if p.is_null() => String::new(),
        None => p.to_string(),
    }
}

fn model_tables(r: &StoredRun, measured: &[(i64, &CellResult)]) -> Vec<ModelTable> {
    let cells: Vec<&ModelCellRecord> = r.model_cells().collect();
    let mut tables: Vec<ModelTable> = Vec::new();
    for m in &cells {
        let params = params_text(&m.params);
        let t = match tables
            .iter_mut()
            .find(|t| t.workload == m.workload.name() && t.arch == m.arch && t.params == params)
        {
            Some(t) => t,
            None => {
                tables.push(ModelTable {
                    run: r.run.id,
                    workload: m.workload.name().to_string(),
                    arch: m.arch.clone(),
                    params,
                    strategies: Vec::new(),
                    cells: Vec::new(),
                });
                tables.last_mut().expect("just pushed")
            }
        };
        if !t.strategies.contains(&m.strategy) {
            t.strategies.push(m.strategy.clone());
        }
    }
    for t in &mut tables {
        let mine: Vec<&&ModelCellRecord> = cells
            .iter()
            .filter(|m| {
                m.workload.name() == t.workload
                    && m.arch == t.arch
                    && params_text(&m.params) == t.params
            })
            .collect();
        let mut sizes: Vec<(u64, String)> = Vec::new();
        for m in &mine {
            let k = (m.size_bytes, m.folio.to_string());
            if !sizes.contains(&k) {
                sizes.push(k);
            }
        }
        sizes.sort_by_key(|(s, _)| *s);
        for (size, folio) in sizes {
            let at: Vec<&&&ModelCellRecord> = mine
                .iter()
                .filter(|m| m.size_bytes == size && m.folio.to_string() == folio)
                .collect();
            let names: BTreeSet<&str> = at
                .iter()
                .flat_map(|m| m.counters.keys().map(String::as_str))
                .collect();
            let counters = names
                .into_iter()
                .filter_map(|name| {
                    let values: Vec<Option<f64>> = t
                        .strategies
                        .iter()
                        .map(|s| {
                            at.iter()
                                .find(|m| m.strategy == *s)
                                .and_then(|m| m.counters.get(name).copied())
                        })
                        .collect();
                    if values.iter().all(|v| v.unwrap_or(0.0) == 0.0) {
                        return None;
                    }
                    let present: Vec<f64> = values.iter().flatten().copied().collect();
                    let differs = present.iter().any(|v| *v != present[0]);
                    Some(CounterRow {
                        name: name.to_string(),
                        values,
                        differs,
                    })
                })
                .collect();
            let refs = measured
                .iter()
                .filter(|(_, c)| {
                    c.workload.name() == t.workload
                        && c.size_bytes == size
                        && c.folio.to_string() == folio
                        && c.regions == 1
                        && !c.neighbor
                })
                .map(|(run, c)| MeasuredRef {
                    run: *run,
                    phase: c.phase.clone(),
                    median_ns: c.ns_per_call.median,
                    ns_per_page: c.ns_per_page,
                })
                .collect();
            t.cells.push(ModelCellView {
                size_bytes: size,
                folio,
                measured: refs,
                counters,
            });
        }
    }
    tables
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use ptelab_stats::compare::CompareOpts;

    use super::*;
    use crate::analysis::{compare_runs, NoiseRule};
    use crate::record::fixtures::fixture;
    use crate::store::StoredCell;
    use crate::store::{RunStatus, RunSummary, RUN_SCHEMA};
    use crate::workload::{FolioSpec, WorkloadKind};

    /// A measured cell with deterministic samples spread ±0.5% around `median`.
    fn cell(size_kib: u64, median: f64, folio: FolioSpec) -> CellResult {
        let mut c = fixture(size_kib, median, folio);
        c.ns_per_call.samples = (0..20)
            .map(|i| median * (1.0 + ((i * 7) % 11) as f64 / 1000.0 - 0.005))
            .collect();
        c
    }

    fn model_cell(strategy: &str, folio_lookups: f64) -> StoredCell {
        StoredCell::Model(ModelCellRecord {
            workload: WorkloadKind::MprotectToggle,
            size_bytes: 400 << 10,
            folio: FolioSpec::Base,
            arch: "x86_64".into(),
            strategy: strategy.into(),
            params: serde_json::json!({ "granule": "4K", "contpte": false }),
            counters: BTreeMap::from([
                ("pte_loads".to_string(), 100.0),
                ("folio_lookups".to_string(), folio_lookups),
                ("tlb_flush_calls".to_string(), 0.5),
                ("contpte_folds".to_string(), 0.0),
            ]),
        })
    }

    fn stored(id: i64, kernel: &str, cells: Vec<StoredCell>) -> StoredRun {
        StoredRun {
            schema: RUN_SCHEMA.into(),
            run: RunSummary {
                id,
                kind: "sweep".into(),
                command: "ptelab sweep mprotect-toggle --sizes 4K,40K,400K,4000K --folios 4K,64K"
                    .into(),
                started_at: format!("2026-05-0{id}T10:00:00Z"),
                finished_at: Some(format!("2026-05-0{id}T10:05:00Z")),
                status: RunStatus::Complete,
                kernel_release: kernel.into(),
                arch: "x86_64".into(),
                machine_id: "0123456789abcdef".into(),
                tool_version: "0.1.0".into(),
                git_revision: Some("abc1234".into()),
                tags: vec![format!("v{kernel}")],
                cells: cells.len() as u64,
            },
            host: serde_json::json!({
                "kernel_release": kernel,
                "kernel_version": "#1 SMP PREEMPT_DYNAMIC",
                "kernel_cmdline": "console=ttyS0 quiet",
                "arch": "x86_64",
                "page_size": 4096,
                "cpu_model": "AMD EPYC 7713 (test)",
                "cores": 2,
                "mem_total_bytes": 25_769_803_776u64,
                "paravirt": null,
                "thp_knobs": {
                    "enabled": "madvise",
                    "defrag": "madvise",
                    "hugepages-64kB/enabled": "never",
                    "hugepages-2048kB/enabled": "inherit",
                },
                "machine_id": "0123456789abcdef",
                "tool_version": "0.1.0",
                "git_revision": "abc1234",
            }),
            cells,
        }
    }

    /// Seed 001 in miniature: a v6.16-like baseline and a v6.17-like run
    /// (2.4x slower from 400K up for 4K folios), a 64K cell whose layout came
    /// out wrong, a warning, and model cells for two strategies.
    pub(crate) fn fixture_runs() -> (StoredRun, StoredRun) {
        let base = stored(
            1,
            "6.16.0",
            vec![
                cell(4, 1713.0, FolioSpec::Base),
                cell(40, 2071.0, FolioSpec::Base),
                cell(400, 3453.0, FolioSpec::Base),
                cell(4000, 18804.0, FolioSpec::Base),
                cell(400, 2100.0, FolioSpec::Mthp(64 << 10)),
                cell(4000, 9000.0, FolioSpec::Mthp(64 << 10)),
            ]
            .into_iter()
            .map(StoredCell::Kernel)
            .collect(),
        );
        let mut mismatched = cell(400, 5993.0, FolioSpec::Mthp(64 << 10));
        mismatched.layout.histogram = BTreeMap::from([(4096, 100)]);
        mismatched.layout.matches = false;
        mismatched.layout.mismatch = Some("requested 64K folios: none found".into());
        let mut warned = cell(4000, 44116.0, FolioSpec::Base);
        warned.warnings = vec!["high outlier share: 12% of samples".into()];
        let mut cells: Vec<StoredCell> = vec![
            cell(4, 1775.0, FolioSpec::Base),
            cell(40, 2362.0, FolioSpec::Base),
            cell(400, 5993.0, FolioSpec::Base),
            warned,
            mismatched,
            cell(4000, 8950.0, FolioSpec::Mthp(64 << 10)),
        ]
        .into_iter()
        .map(StoredCell::Kernel)
        .collect();
        cells.push(model_cell("per-pte", 50.0));
        cells.push(model_cell("batched", 100.0));
        (base, stored(2, "6.17.0-rc1", cells))
    }

    /// The report `ptelab report 2 --vs 1` makes of [`fixture_runs`], with
    /// one claim row.
    pub(crate) fn fixture_model() -> ReportModel {
        let (base, run) = fixture_runs();
        let opts = CompareOpts {
            resamples: 500,
            ..CompareOpts::default()
        };
        let cmp = compare_runs("1", &base, "latest", &run, &opts, &NoiseRule::Fixed).unwrap();
        ReportBuilder::new("ptelab report: run 2 vs run 1")
            .run("latest", &run)
            .baseline("1", &base, &cmp)
            .claim(ClaimRow {
                seed: "001".into(),
                claim: "mprotect of 4K folios is 2.4x slower at 400K".into(),
                published: Some("3453 -> 5993 ns (1.74x)".into()),
                measured: Some("1.74x".into()),
                model: Some("folio lookups 2.00x".into()),
                verdict: "reproduced".into(),
            })
            .build()
    }

    #[test]
    fn view_model_snapshot() {
        insta::assert_json_snapshot!(fixture_model());
    }

    #[test]
    fn markdown_snapshot() {
        let md =
            String::from_utf8(crate::report::markdown::render_markdown(&fixture_model()).unwrap())
                .unwrap();
        insta::assert_snapshot!(md);
    }

    #[test]
    fn markdown_fits_in_80_columns_but_for_command_lines() {
        let md =
            String::from_utf8(crate::report::markdown::render_markdown(&fixture_model()).unwrap())
                .unwrap();
        for line in md.lines() {
            if line.starts_with("- cmdline:") || line.starts_with("- command:") {
                continue;
            }
            assert!(line.chars().count() <= 80, "too wide: {line}");
        }
    }

    #[test]
    fn series_plots_and_ratios_follow_the_cells() {
        let m = fixture_model();
        assert_eq!(m.runs.len(), 2);
        assert_eq!(m.runs[1].role, RunRole::Baseline);
        let w = &m.workloads[0];
        assert_eq!(w.series.len(), 2);
        assert_eq!(w.series[0].rows.len(), 4);
        let kinds: Vec<&str> = w.plots.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "run2-mprotect-toggle-ns-call",
                "run2-mprotect-toggle-ns-page",
                "run2-mprotect-toggle-ratio"
            ]
        );
        // Run and baseline curves share a colour; baseline dashed.
        let ns = &w.plots[0];
        assert_eq!(ns.series.len(), 4);
        assert_eq!(ns.series[0].color, ns.series[2].color);
        assert!(ns.series[2].dashed && !ns.series[0].dashed);
        // ns/page scales the CI with the median.
        let p = &w.plots[1].series[0].points[2];
        assert!((p.y - 5993.0 / 100.0).abs() < 1e-9);
        assert!((p.lo.unwrap() - 5993.0 * 0.995 / 100.0).abs() < 1e-9);
        // The mismatched 64K cell is not comparable: no ratio drawn.
        let r = &w.comparison[1].rows[0];
        assert_eq!(r.verdict, Verdict::NotComparable);
        assert_eq!(w.plots[2].reference, Some(1.0));
        let marks: Vec<Option<Verdict>> = w.plots[2].series[1]
            .points
            .iter()
            .map(|p| p.marker)
            .collect();
        assert_eq!(marks, [Some(Verdict::NoChange)]);
        assert_eq!(w.comparison[0].rows[2].verdict, Verdict::Regression);
        // Model: zero counters dropped, folio_lookups differs, measured beside.
        let t = &m.models[0];
        assert_eq!(t.strategies, ["per-pte", "batched"]);
        let c = &t.cells[0];
        let names: Vec<(&str, bool)> = c
            .counters
            .iter()
            .map(|r| (r.name.as_str(), r.differs))
            .collect();
        assert_eq!(
            names,
            [
                ("folio_lookups", true),
                ("pte_loads", false),
                ("tlb_flush_calls", false)
            ]
        );
        assert_eq!(c.measured[0].median_ns, 5993.0);
    }

    #[test]
    fn html_is_one_file_without_scripts_or_network() {
        let html =
            String::from_utf8(crate::report::html::render_html(&fixture_model()).unwrap()).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert_eq!(html.matches("<svg ").count(), 3);
        assert!(!html.contains("<script"));
        assert!(!html.contains("<link"));
        assert!(!html.contains("@import") && !html.contains("url(http"));
        let external = html
            .match_indices("http")
            .filter(|(i, _)| !html[*i..].starts_with("http://www.w3.org/2000/svg"))
            .count();
        assert_eq!(external, 0);
        for want in [
            "mprotect-toggle (seed 001), run 2",
            "REGRESSION",
            "requested 64K folios: none found",
            "AMD EPYC 7713 (test)",
            "console=ttyS0 quiet",
            "0.1.0 (abc1234)",
            "hugepages-2048kB/enabled=inherit",
            "folio_lookups",
            "mprotect of 4K folios is 2.4x slower at 400K",
            "high outlier share",
        ] {
            assert!(html.contains(want), "missing {want}");
        }
    }

    #[test]
    fn the_model_round_trips_through_json() {
        let m = fixture_model();
        // Floats may differ in the last bit through serde_json; the shape must not.
        let back: ReportModel = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back.runs, m.runs);
        assert_eq!(back.models, m.models);
        assert_eq!(back.claims, m.claims);
        assert_eq!(back.workloads[0].warnings, m.workloads[0].warnings);
        assert_eq!(back.workloads[0].plots.len(), m.workloads[0].plots.len());
    }
}
