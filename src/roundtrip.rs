//! Property test: every run the store takes (`store::roundtrip` generates
//! them) reads back and renders through `show` (text, JSON, CSV), `report`
//! (HTML, Markdown, alone and against a baseline) and `compare` (paired and
//! replicated; text, Markdown, JSON) without error, and `compare` draws no
//! verdict from a cell too small to have an interval. It calls the pure
//! renderers the commands use, so it sits above every layer, like main.rs.

use proptest::prelude::*;
use ptelab_stats::compare::CompareOpts;

use crate::analysis::{compare_replicated, compare_runs, NoiseRule};
use crate::cmd::show::{render_csv, render_text};
use crate::cmd::ReportFormat;
use crate::report::compare::{render, CompareView, Format, VerdictKind};
use crate::report::view::ReportBuilder;
use crate::store::roundtrip::{check, run_spec, write, RunSpec, CASES};
use crate::store::{Store, StoredCell, StoredRun};

/// A second run with the measured cells of `a` (so that cells pair), each
/// sample scaled by `factor`, and the cells of `b`, measured where `a` was
/// (so that the runs' metrics agree).
fn rerun(a: &RunSpec, b: &RunSpec, factor: f64) -> RunSpec {
    let mut cells: Vec<StoredCell> = a
        .cells
        .iter()
        .filter_map(StoredCell::kernel)
        .map(|c| {
            let mut c = c.clone();
            // A measured figure is finite: a figure near f64::MAX scaled up
            // stays at the largest finite value instead of becoming inf,
            // which no run holds (JSON has no inf).
            let scale = |v: &mut f64| {
                let x = *v * factor;
                *v = if x.is_infinite() { f64::MAX } else { x };
            };
            let ns = &mut c.ns_per_call;
            ns.samples.iter_mut().for_each(scale);
            for v in [&mut ns.median, &mut ns.ci_low, &mut ns.ci_high, &mut ns.min] {
                scale(v);
            }
            StoredCell::Kernel(c)
        })
        .collect();
    cells.extend(b.cells.iter().cloned());
    RunSpec {
        cells,
        guest: a.guest.clone(),
        ..b.clone()
    }
}

/// No verdict without enough samples on both sides and a finite interval.
fn verdicts_are_earned(view: &CompareView, min_samples: usize) -> Result<(), TestCaseError> {
    for r in &view.rows {
        if r.verdict == VerdictKind::NotComparable {
            prop_assert!(r.reason.is_some(), "{:?}", r);
            continue;
        }
        let samples = |s: &Option<crate::analysis::SideView>| s.as_ref().map(|s| s.samples);
        let replicated = view.method.replicated.is_some();
        if !replicated {
            prop_assert!(samples(&r.a).unwrap_or(0) >= min_samples, "{:?}", r);
            prop_assert!(samples(&r.b).unwrap_or(0) >= min_samples, "{:?}", r);
        }
        let (lo, hi) = (r.ci_low.unwrap_or(f64::NAN), r.ci_high.unwrap_or(f64::NAN));
        prop_assert!(lo.is_finite() && hi.is_finite() && lo <= hi, "{:?}", r);
        prop_assert!(r.ratio.is_some_and(f64::is_finite), "{:?}", r);
    }
    Ok(())
}

/// Render `view` every way `ptelab compare` prints it.
fn render_compare(view: &CompareView) {
    for format in [Format::Text, Format::Markdown] {
        assert!(!render(view, format).is_empty());
    }
    let json: serde_json::Value = serde_json::from_str(&render(view, Format::Json)).unwrap();
    assert_eq!(json["rows"].as_array().unwrap().len(), view.rows.len());
}

fn has_kernel_cells(r: &StoredRun) -> bool {
    r.kernel_cells().next().is_some()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn every_stored_run_renders(
        a in run_spec(),
        b in run_spec(),
        c in run_spec(),
        factor in prop_oneof![Just(1.0), 0.5..2.0f64],
    ) {
        let b = rerun(&a, &b, factor);
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("t.db")).unwrap();
        let mut runs = Vec::new();
        for spec in [&a, &b, &c] {
            let id = write(&store, spec).unwrap();
            let run = store.load(id).unwrap();
            check(spec, &run)?;
            runs.push(run);
        }
        let [ra, rb, rc] = &runs[..] else { unreachable!() };

        // show
        for r in &runs {
            let head = format!("run {}:", r.run.id);
            prop_assert!(render_text(r).starts_with(&head));
            let csv = render_csv(r);
            prop_assert!(csv.lines().count() > r.cells.len());
            let doc: StoredRun = serde_json::from_str(&serde_json::to_string_pretty(r).unwrap())
                .unwrap();
            prop_assert_eq!(doc.cells.len(), r.cells.len());
        }

        // compare, as `ptelab compare` and `report --vs` run it
        let opts = CompareOpts { resamples: 200, ..CompareOpts::default() };
        let paired = compare_runs("1", ra, "2", rb, &opts, &NoiseRule::Fixed);
        if has_kernel_cells(ra) && has_kernel_cells(rb) {
            let view = paired.unwrap();
            verdicts_are_earned(&view, opts.min_samples)?;
            render_compare(&view);
        } else {
            // Nothing measured on a side is bad input, said as such.
            prop_assert!(crate::error::is_usage(&paired.unwrap_err()));
        }
        let sets = compare_replicated(
            ("1,3", &[ra.clone(), rc.clone()]),
            ("2", std::slice::from_ref(rb)),
            &opts,
            false,
            false,
        );
        let one_metric = runs.iter().all(|r| {
            let how = |r: &StoredRun| (r.run.metric(), r.run.guest.as_ref().map(|g| g.accel));
            how(r) == how(ra)
        });
        if runs.iter().all(has_kernel_cells) {
            if one_metric {
                let view = sets.unwrap();
                verdicts_are_earned(&view, opts.min_samples)?;
                render_compare(&view);
            } else {
                // Instructions and time, or two accelerators: bad input.
                prop_assert!(crate::error::is_usage(&sets.unwrap_err()));
            }
        }

        // report, alone, against a baseline, with a model run
        for r in &runs {
            let mut builder = ReportBuilder::new("round trip").run("latest", r);
            let baseline = compare_runs("1", ra, "latest", r, &opts, &NoiseRule::Fixed).ok();
            if let Some(cmp) = &baseline {
                builder = builder.baseline("1", ra, cmp);
            }
            let model = builder.model_run("3", rc).build();
            for format in [ReportFormat::Html, ReportFormat::Markdown] {
                prop_assert!(!format.render(&model).unwrap().is_empty());
            }
        }
    }
}
