//! The report's view model: plain serializable structs of rows, comparisons
//! and plot series, built once from stored runs and read by every renderer
//! ([`crate::html::render_html`], [`crate::markdown::render_markdown`]).
//!
//! Nothing here formats numbers or draws: values stay as measured (`f64`
//! nanoseconds, bytes) and renderers decide how to print them. Plots are
//! data ([`Plot`]: axes with a scale and a unit, series of points with
//! optional confidence bounds and verdict markers); [`crate::plot`]
//! turns them into SVG.
//!
//! The types are in `types.rs`, the builder in `build.rs`.
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

mod build;
pub mod claims;
mod types;

pub use build::ReportBuilder;
pub use types::*;

// The tests below build stored runs; they read these through `super::*`.
#[cfg(test)]
use crate::record::{CellResult, ModelCellRecord};
#[cfg(test)]
use crate::store::StoredRun;

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
                guest: None,
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
                predicted: None,
                verdict: "reproduced".into(),
                uncalibrated: Vec::new(),
            })
            .build()
    }

    /// `run` as if measured in a QEMU TCG guest (instructions).
    fn in_tcg_guest(mut run: StoredRun) -> StoredRun {
        let g = crate::record::Guest::new(
            crate::record::Accel::Tcg,
            "QEMU emulator version 10.0.2",
            &format!("debian:{}", run.run.kernel_release),
            &"ab".repeat(32),
        );
        run.host["guest"] = serde_json::to_value(&g).unwrap();
        run.run.guest = Some(g);
        run
    }

    #[test]
    fn a_guest_report_is_in_instructions_throughout() {
        let (base, run) = fixture_runs();
        let (base, run) = (in_tcg_guest(base), in_tcg_guest(run));
        let opts = CompareOpts {
            resamples: 500,
            ..CompareOpts::default()
        };
        let cmp = compare_runs("1", &base, "latest", &run, &opts, &NoiseRule::Fixed).unwrap();
        let m = ReportBuilder::new("ptelab report: run 2 vs run 1")
            .run("latest", &run)
            .baseline("1", &base, &cmp)
            .build();
        assert_eq!(m.metric_note, None);
        let md = String::from_utf8(crate::markdown::render_markdown(&m).unwrap()).unwrap();
        for unit in ["nsec", " ns/", " ns ", " ns per", "time per"] {
            assert!(!md.contains(unit), "{unit} in {md}");
        }
        // The run's own section: the seeds' block, the tables, the ratios.
        let from = md.find("## mprotect-toggle").unwrap();
        let to = md.find("### Layout").unwrap_or(md.len());
        insta::assert_snapshot!(&md[from..to]);
        assert!(
            md.contains("- guest:   tcg (QEMU emulator version 10.0.2), kernel debian:6.17.0-rc1")
        );

        let html = String::from_utf8(crate::html::render_html(&m).unwrap()).unwrap();
        assert!(
            html.contains("guest instructions per call (log scale)"),
            "axis"
        );
        assert!(
            html.contains("guest instructions per 4K page (log scale)"),
            "axis"
        );
        assert!(html.contains("K instr</text>"), "ticks");
        assert!(html.contains("<th class=\"n\">instr_per_call</th>"));
        assert!(html.contains("baseline instr/call"));
        for unit in ["nsec", "ns/page", " ns<", "time per"] {
            assert!(!html.contains(unit), "{unit} in the HTML report");
        }
    }

    #[test]
    fn an_unobservable_flush_count_reads_why_in_reports() {
        let (_, mut run) = fixture_runs();
        let why = "tlb:tlb_flush cannot be counted: not observable on this arch (aarch64): \
                   only x86 emits the tracepoint";
        for c in run.cells.iter_mut() {
            if let StoredCell::Kernel(k) = c {
                k.tlb_flushes = crate::record::TlbFlushes {
                    calls: 64,
                    unavailable: Some(why.into()),
                    ..Default::default()
                };
            }
        }
        let m = ReportBuilder::new("arm64").run("2", &run).build();
        let md = String::from_utf8(crate::markdown::render_markdown(&m).unwrap()).unwrap();
        assert!(
            md.contains("not observable on this") && md.contains("(aarch64)"),
            "{md}"
        );
        assert_eq!(md.matches("Flushes per call n/a").count(), 1, "{md}");
        assert!(!md.contains("0.00"), "{md}");
        let html = String::from_utf8(crate::html::render_html(&m).unwrap()).unwrap();
        assert!(html.contains("Flushes per call n/a: tlb:tlb_flush cannot be counted: not observable on this arch (aarch64)"));
    }

    #[test]
    fn a_report_of_time_and_instructions_says_so_and_keeps_their_axes_apart() {
        let (base, run) = fixture_runs();
        let guest = in_tcg_guest(run);
        let m = ReportBuilder::new("mixed")
            .run("1", &base)
            .run("2", &guest)
            .build();
        let note = m.metric_note.clone().unwrap();
        assert!(
            note.contains("run 1 in nsec per call; run 2 in instructions per call"),
            "{note}"
        );
        // Each run's plots are its own, each in its own unit.
        for w in &m.workloads {
            let want = if w.run == 1 {
                Unit::Nanoseconds
            } else {
                Unit::Instructions
            };
            assert!(w
                .plots
                .iter()
                .filter(|p| p.y.unit != Unit::Ratio)
                .all(|p| p.y.unit == want));
        }
        let md = String::from_utf8(crate::markdown::render_markdown(&m).unwrap()).unwrap();
        assert!(md.contains("measured in different units"), "{md}");
        let html = String::from_utf8(crate::html::render_html(&m).unwrap()).unwrap();
        assert!(html.contains("measured in different units"));
    }

    #[test]
    fn view_model_snapshot() {
        insta::assert_json_snapshot!(fixture_model());
    }

    #[test]
    fn markdown_snapshot() {
        let md =
            String::from_utf8(crate::markdown::render_markdown(&fixture_model()).unwrap()).unwrap();
        insta::assert_snapshot!(md);
    }

    #[test]
    fn markdown_fits_in_80_columns_but_for_command_lines() {
        let md =
            String::from_utf8(crate::markdown::render_markdown(&fixture_model()).unwrap()).unwrap();
        // The claims' table is one line per claim, as `reproduce` closes;
        // their full text, below it, wraps.
        let mut in_claims_table = false;
        for line in md.lines() {
            if line.starts_with("## ") || line.starts_with("### ") {
                in_claims_table = line == "## Claims";
            }
            if line.starts_with("- cmdline:")
                || line.starts_with("- command:")
                || (in_claims_table && line.starts_with('|'))
            {
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
        let html = String::from_utf8(crate::html::render_html(&fixture_model()).unwrap()).unwrap();
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
