//! [`ReportBuilder`]: stored runs (and a comparison) into a [`ReportModel`].

use std::collections::BTreeSet;

use super::types::*;
use crate::compare::{CompareRow, CompareView};
use crate::record::{CellResult, Metric, ModelCellRecord};
use crate::store::StoredRun;
use crate::text::format::size as format_size;

/// Collects runs and builds a [`ReportModel`].
pub struct ReportBuilder<'a> {
    title: String,
    runs: Vec<(&'a str, &'a StoredRun)>,
    baseline: Option<Baseline<'a>>,
    model_runs: Vec<(&'a str, &'a StoredRun)>,
    claims: Vec<ClaimRow>,
    kernels: Vec<KernelSection>,
    functions: Option<crate::analysis::functions::FunctionsView>,
}

impl<'a> ReportBuilder<'a> {
    pub fn new(title: impl Into<String>) -> ReportBuilder<'a> {
        ReportBuilder {
            title: title.into(),
            runs: Vec::new(),
            baseline: None,
            model_runs: Vec::new(),
            claims: Vec::new(),
            kernels: Vec::new(),
            functions: None,
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
    /// A seed's cells across kernels (reproduce --kernels).
    pub fn kernel_section(mut self, section: KernelSection) -> Self {
        self.kernels.push(section);
        self
    }

    /// The per-function comparison of the run against its baseline.
    pub fn functions(mut self, view: crate::analysis::functions::FunctionsView) -> Self {
        self.functions = Some(view);
        self
    }

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

        let measured: Vec<(&StoredRun, &CellResult)> = self
            .runs
            .iter()
            .flat_map(|(_, r)| r.kernel_cells().map(move |c| (*r, c)))
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
            kernels: self.kernels,
            metric_note: metric_note(
                self.runs
                    .iter()
                    .map(|(_, r)| *r)
                    .chain(self.baseline.map(|(_, r, _)| r)),
            ),
            functions: self.functions,
        }
    }
}

/// "Runs in different units: …" when `runs` were not all measured in one
/// metric.
fn metric_note<'r>(runs: impl Iterator<Item = &'r StoredRun>) -> Option<String> {
    let runs: Vec<&StoredRun> = runs.collect();
    let first = runs.first()?.run.metric();
    if runs.iter().all(|r| r.run.metric() == first) {
        return None;
    }
    let which = |m: Metric| {
        let ids: Vec<String> = runs
            .iter()
            .filter(|r| r.run.metric() == m)
            .map(|r| r.run.id.to_string())
            .collect();
        format!(
            "run{} {} in {}",
            if ids.len() == 1 { "" } else { "s" },
            ids.join(", "),
            m.per_call_words()
        )
    };
    Some(format!(
        "These runs were measured in different units ({}; {}): their figures are not \
         comparable, and each run is plotted on its own axes.",
        which(Metric::Time),
        which(Metric::Instructions)
    ))
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
        guest: s.guest.clone(),
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
        noise_line: Some(crate::compare::noise_line(m)),
        min_samples: m.min_samples,
        drift: crate::compare::drift_line(&v.drift, v.method.replicated.is_some(), v.metric),
        qemu: crate::compare::qemu_line(&v.a, &v.b),
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

/// The baseline's name, run and comparison, as [`ReportBuilder::baseline`] took them.
type Baseline<'a> = (&'a str, &'a StoredRun, &'a CompareView);

/// The section of `workload` in run `r`: its series, the ratios to the
/// baseline, the plots and the warnings.
fn section(r: &StoredRun, workload: &'static str, baseline: Option<Baseline>) -> WorkloadSection {
    let metric = r.run.metric();
    let groups = grouped(r.kernel_cells(), workload);
    // A baseline in another unit shares no axis with the run (compare
    // refuses the pair, so this only guards a hand-built report).
    let baseline = baseline.filter(|(_, b, _)| b.run.metric() == metric);
    let base_groups =
        baseline.map_or_else(Vec::new, |(_, b, _)| grouped(b.kernel_cells(), workload));
    let comparison = baseline.map_or_else(Vec::new, |(_, _, cmp)| ratio_series(cmp, workload));
    let colors = Colors::new(&groups, &base_groups, &comparison);
    let id = format!("run{}-{workload}", r.run.id);
    let base = baseline.map(|(_, b, _)| (b.run.id, base_groups.as_slice()));
    let mut plots: Vec<Plot> = [false, true]
        .into_iter()
        .map(|per_page| {
            let run = (r.run.id, groups.as_slice());
            time_plot(&id, workload, run, base, (per_page, metric), &colors)
        })
        .collect();
    if !comparison.is_empty() {
        plots.push(ratio_plot(
            &id,
            workload,
            r.run.id,
            &comparison,
            &colors,
            metric,
        ));
    }
    WorkloadSection {
        workload: workload.to_string(),
        seed: seed_of(r, workload),
        run: r.run.id,
        metric,
        series: measured_series(&groups),
        comparison,
        plots,
        warnings: warnings_of(&groups),
    }
}

/// The seed document `workload` reproduces, from its first cell in `r`.
fn seed_of(r: &StoredRun, workload: &str) -> String {
    r.kernel_cells()
        .find(|c| c.workload.name() == workload)
        .map_or(String::new(), |c| c.workload.seed().to_string())
}

/// Cells grouped by series key (see [`grouped`]).
type Groups<'c> = [(SeriesKey, Vec<&'c CellResult>)];

fn measured_series(groups: &Groups) -> Vec<MeasuredSeries> {
    groups
        .iter()
        .map(|(k, cells)| MeasuredSeries {
            key: k.clone(),
            label: k.label(),
            rows: cells.iter().map(|c| measured_row(c)).collect(),
        })
        .collect()
}

/// Warnings raised while measuring, each prefixed with its cell.
fn warnings_of(groups: &Groups) -> Vec<String> {
    groups
        .iter()
        .flat_map(|(k, cells)| {
            cells.iter().flat_map(move |c| {
                c.warnings
                    .iter()
                    .map(move |w| format!("{} {}: {w}", k.label(), format_size(c.size_bytes)))
            })
        })
        .collect()
}

/// One palette index per series key across the run's, the baseline's and
/// the ratio curves, so that a key keeps its colour on every plot.
struct Colors(Vec<SeriesKey>);

impl Colors {
    fn new(groups: &Groups, base_groups: &Groups, comparison: &[RatioSeries]) -> Colors {
        let mut keys: Vec<SeriesKey> = Vec::new();
        let all = groups
            .iter()
            .chain(base_groups)
            .map(|(k, _)| k)
            .chain(comparison.iter().map(|s| &s.key));
        for k in all {
            if !keys.contains(k) {
                keys.push(k.clone());
            }
        }
        Colors(keys)
    }

    fn of(&self, k: &SeriesKey) -> usize {
        self.0.iter().position(|x| x == k).unwrap_or(0)
    }
}

/// ns (or instructions) per call, or per page, against region size: the
/// run's curves, and the baseline's dashed in the same colours.
fn time_plot(
    id: &str,
    workload: &str,
    (run, groups): (i64, &Groups),
    baseline: Option<(i64, &Groups)>,
    (per_page, metric): (bool, Metric),
    colors: &Colors,
) -> Plot {
    // Curves are named by run only when a baseline shares the plot.
    let label = |k: &SeriesKey, run: i64| match baseline {
        Some(_) => format!("{} (run {run})", k.label()),
        None => k.label(),
    };
    let curves = |run: i64, groups: &Groups, dashed: bool| -> Vec<Series> {
        groups
            .iter()
            .map(|(k, cells)| Series {
                label: label(k, run),
                color: colors.of(k),
                dashed,
                points: time_points(cells, per_page),
                gaps: Vec::new(),
            })
            .collect()
    };
    let mut series = curves(run, groups, false);
    if let Some((b, base_groups)) = baseline {
        series.extend(curves(b, base_groups, true));
    }
    let (what, per, unit_label, unit) = match (metric, per_page) {
        (Metric::Time, true) => (
            "ns-page",
            "ns per page",
            "time per 4K page (log scale)",
            Unit::Nanoseconds,
        ),
        (Metric::Time, false) => (
            "ns-call",
            "ns per call",
            "time per call (log scale)",
            Unit::Nanoseconds,
        ),
        (Metric::Instructions, true) => (
            "instr-page",
            "instructions per page",
            "guest instructions per 4K page (log scale)",
            Unit::Instructions,
        ),
        (Metric::Instructions, false) => (
            "instr-call",
            "instructions per call",
            "guest instructions per call (log scale)",
            Unit::Instructions,
        ),
    };
    Plot {
        id: format!("{id}-{what}"),
        title: format!("{workload}: {per} vs region size"),
        x: Axis::sizes(),
        y: Axis {
            label: unit_label.into(),
            scale: Scale::Log10,
            unit,
        },
        series,
        reference: None,
    }
}

/// Run / baseline per series with the bootstrap CI and verdict markers.
fn ratio_plot(
    id: &str,
    workload: &str,
    run: i64,
    comparison: &[RatioSeries],
    colors: &Colors,
    metric: Metric,
) -> Plot {
    let per = match metric {
        Metric::Time => "ns per call",
        Metric::Instructions => "instructions per call",
    };
    Plot {
        id: format!("{id}-ratio"),
        title: format!("{workload}: run {run} / baseline, median {per}"),
        x: Axis::sizes(),
        y: Axis {
            label: "ratio of medians (95% bootstrap CI)".into(),
            scale: Scale::Linear,
            unit: Unit::Ratio,
        },
        series: comparison
            .iter()
            .map(|s| {
                // Like `ptelab compare`: no ratio where there is no verdict;
                // the line is broken there.
                let (points, gaps): (Vec<_>, Vec<_>) = s
                    .rows
                    .iter()
                    .map(|row| match row.ratio {
                        Some(y) if row.verdict != Verdict::NotComparable => Ok(Point {
                            x: row.size_bytes as f64,
                            y,
                            lo: row.ci_low,
                            hi: row.ci_high,
                            marker: Some(row.verdict),
                        }),
                        _ => Err(row.size_bytes as f64),
                    })
                    .partition(Result::is_ok);
                Series {
                    label: s.label.clone(),
                    color: colors.of(&s.key),
                    dashed: false,
                    points: points.into_iter().flatten().collect(),
                    gaps: gaps.into_iter().filter_map(Result::err).collect(),
                }
            })
            .collect(),
        reference: Some(1.0),
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

/// The model cells of `r`, one table per (workload, arch, parameters) with
/// a column per strategy and a cell view per (size, folio), the measured
/// times of the same cell beside them.
fn model_tables(r: &StoredRun, measured: &[(&StoredRun, &CellResult)]) -> Vec<ModelTable> {
    let cells: Vec<&ModelCellRecord> = r.model_cells().collect();
    let mut tables = empty_model_tables(r.run.id, &cells);
    for t in &mut tables {
        let mine: Vec<&ModelCellRecord> = cells
            .iter()
            .copied()
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
            let at: Vec<&ModelCellRecord> = mine
                .iter()
                .copied()
                .filter(|m| m.size_bytes == size && m.folio.to_string() == folio)
                .collect();
            t.cells.push(ModelCellView {
                counters: counter_rows(&t.strategies, &at),
                measured: measured_refs(measured, &t.workload, size, &folio),
                size_bytes: size,
                folio,
            });
        }
    }
    tables
}

/// One table per (workload, arch, parameters) in first-seen order, with
/// its strategies and no cells yet.
fn empty_model_tables(run: i64, cells: &[&ModelCellRecord]) -> Vec<ModelTable> {
    let mut tables: Vec<ModelTable> = Vec::new();
    for m in cells {
        let params = params_text(&m.params);
        let t = match tables
            .iter_mut()
            .find(|t| t.workload == m.workload.name() && t.arch == m.arch && t.params == params)
        {
            Some(t) => t,
            None => {
                tables.push(ModelTable {
                    run,
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
    tables
}

/// The counters of one (size, folio) cell, a value per strategy; counters
/// zero (or absent) for every strategy are left out.
fn counter_rows(strategies: &[String], at: &[&ModelCellRecord]) -> Vec<CounterRow> {
    let names: BTreeSet<&str> = at
        .iter()
        .flat_map(|m| m.counters.keys().map(String::as_str))
        .collect();
    names
        .into_iter()
        .filter_map(|name| {
            let values: Vec<Option<f64>> = strategies
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
        .collect()
}

/// Measured single-region, unmerged cells of the same workload, size and
/// folio, to show beside the model's counters.
fn measured_refs(
    measured: &[(&StoredRun, &CellResult)],
    workload: &str,
    size: u64,
    folio: &str,
) -> Vec<MeasuredRef> {
    measured
        .iter()
        .filter(|(_, c)| {
            c.workload.name() == workload
                && c.size_bytes == size
                && c.folio.to_string() == folio
                && c.regions == 1
                && !c.neighbor
        })
        .map(|(run, c)| MeasuredRef {
            run: run.run.id,
            phase: c.phase.clone(),
            median_ns: c.ns_per_call.median,
            ns_per_page: c.ns_per_page,
            metric: run.run.metric(),
        })
        .collect()
}

impl SeriesKey {
    pub(super) fn of(c: &CellResult) -> SeriesKey {
        SeriesKey {
            folio: c.folio.to_string(),
            phase: c.phase.clone(),
            regions: c.regions,
            neighbor: c.neighbor,
        }
    }

    pub(super) fn of_row(r: &CompareRow) -> SeriesKey {
        SeriesKey {
            folio: r.folio.clone(),
            phase: r.phase.clone(),
            regions: r.regions,
            neighbor: r.neighbor,
        }
    }
}
