//! Tests of comparisons of guest runs: a metric or accelerator that differs
//! is refused, and instruction counts, which repeat exactly (zero spread in
//! samples, blocks and probes), still get finite figures and the right
//! verdict.

use super::tests::{exact_cell, guest_run, opts, stored};
use super::*;
use crate::record::{Accel, Metric};
use crate::workload::FolioSpec;

/// Every figure of every row with a verdict is finite.
fn all_finite(v: &CompareView) {
    for r in &v.rows {
        if r.verdict == VerdictKind::NotComparable {
            continue;
        }
        for x in [r.ratio, r.ci_low, r.ci_high, r.p_value, r.p_holm] {
            assert!(x.is_some_and(f64::is_finite), "{r:?}");
        }
    }
}

fn grid(scale: f64) -> Vec<crate::record::CellResult> {
    vec![
        exact_cell(400, FolioSpec::Base, 34_530.0 * scale),
        exact_cell(4096, FolioSpec::Base, 180_400.0 * scale),
        exact_cell(40960, FolioSpec::Base, 1_804_000.0 * scale),
    ]
}

#[test]
fn exact_instruction_counts_get_verdicts_without_nan() {
    let a = guest_run(1, Accel::Tcg, grid(1.0));
    let same = guest_run(2, Accel::Tcg, grid(1.0));
    let slower = guest_run(3, Accel::Tcg, grid(1.9));
    for normalize in [Normalize::Auto, Normalize::Probe, Normalize::None] {
        let rules = Rules {
            normalize,
            ..Rules::default()
        };
        let v = compare_runs_paired("1", &a, "2", &same, &opts(), &rules).unwrap();
        assert_eq!(v.metric, Metric::Instructions);
        assert_eq!(v.summary.no_change, 3, "{v:?}");
        all_finite(&v);
        assert_eq!(v.rows[0].ratio, Some(1.0));
        let v = compare_runs_paired("1", &a, "3", &slower, &opts(), &rules).unwrap();
        assert_eq!(v.summary.regressions, 3, "{v:?}");
        all_finite(&v);
        assert!((v.rows[0].ratio.unwrap() - 1.9).abs() < 1e-9);
        // Instructions are never drift-corrected, and the line says why.
        assert!(!v.drift.corrected);
        assert!(
            v.drift.why.contains("guest instructions"),
            "{}",
            v.drift.why
        );
        assert_eq!(v.method.statistic, "median instructions per call");
    }
    let v = compare_runs_paired("3", &slower, "1", &a, &opts(), &Rules::default()).unwrap();
    assert_eq!(v.summary.improvements, 3);
}

#[test]
fn constant_probes_under_time_correct_without_nan() {
    // Host runs whose probes happen to be constant: the drift fit has no
    // spread in its covariate, and must still give finite figures.
    let a = stored(1, grid(1.0));
    let b = stored(2, grid(1.9));
    let rules = Rules {
        normalize: Normalize::Probe,
        ..Rules::default()
    };
    let v = compare_runs_paired("1", &a, "2", &b, &opts(), &rules).unwrap();
    assert_eq!(v.metric, Metric::Time);
    assert_eq!(v.summary.regressions, 3, "{v:?}");
    all_finite(&v);
    let v = compare_runs_paired("1", &a, "1", &a, &opts(), &rules).unwrap();
    assert_eq!(v.summary.no_change, 3, "{v:?}");
    all_finite(&v);
}

#[test]
fn replicated_exact_runs_get_verdicts_without_nan() {
    let side = |first: i64, scale: f64| -> Vec<crate::store::StoredRun> {
        (first..first + 3)
            .map(|id| guest_run(id, Accel::Tcg, grid(scale)))
            .collect()
    };
    let (a, same, slower) = (side(1, 1.0), side(4, 1.0), side(7, 1.9));
    let v = compare_replicated(("a", &a), ("b", &same), &opts(), false, false).unwrap();
    assert_eq!(v.metric, Metric::Instructions);
    assert_eq!(v.summary.no_change, 3, "{v:?}");
    all_finite(&v);
    let v = compare_replicated(("a", &a), ("c", &slower), &opts(), false, false).unwrap();
    assert_eq!(v.summary.regressions, 3, "{v:?}");
    all_finite(&v);
    assert_eq!(
        v.method.statistic,
        "geometric mean of run medians of instructions per call"
    );
}

#[test]
fn a_metric_or_accelerator_that_differs_is_refused() {
    let host = stored(1, grid(1.0));
    let tcg = guest_run(2, Accel::Tcg, grid(1.0));
    let kvm = guest_run(3, Accel::Kvm, grid(1.0));
    let refused = |a: &crate::store::StoredRun, b: &crate::store::StoredRun| {
        let err = compare_runs("A", a, "B", b, &opts(), &NoiseRule::Fixed).unwrap_err();
        assert!(crate::error::is_usage(&err), "{err}");
        err.to_string()
    };
    assert_eq!(
        refused(&host, &tcg),
        "run 1 ('A') was measured as x86_64 time on the host but run 2 ('B') as x86_64 \
         instructions in a tcg guest: compare runs of one arch, one metric and one accelerator"
    );
    // Both in time, but a KVM guest's time is not the host's.
    assert!(refused(&kvm, &host).contains("time in a kvm guest"));
    assert!(refused(&tcg, &kvm).contains("instructions in a tcg guest"));
    // Replicated: one odd run on a side is enough.
    let err = compare_replicated(
        ("a", &[tcg.clone(), guest_run(4, Accel::Tcg, grid(1.0))]),
        ("b", &[guest_run(5, Accel::Tcg, grid(1.0)), kvm]),
        &opts(),
        false,
        false,
    )
    .unwrap_err();
    assert!(
        crate::error::is_usage(&err) && err.to_string().contains("run 3 ('b')"),
        "{err}"
    );
}

#[test]
fn an_arch_that_differs_is_refused() {
    // The same kernel's counts on x86-64 and arm64 are different programs'
    // counts: no ratio of them is a regression.
    let x86 = guest_run(1, Accel::Tcg, grid(1.0));
    let mut arm = guest_run(2, Accel::Tcg, grid(2.0));
    arm.run.arch = "aarch64".into();
    let err = compare_runs("A", &x86, "B", &arm, &opts(), &NoiseRule::Fixed).unwrap_err();
    assert!(crate::error::is_usage(&err), "{err}");
    assert!(
        err.to_string()
            .contains("as x86_64 instructions in a tcg guest but run 2 ('B') as arm64"),
        "{err}"
    );
    let err = compare_replicated(
        ("a", &[x86.clone(), guest_run(3, Accel::Tcg, grid(1.0))]),
        ("b", std::slice::from_ref(&arm)),
        &opts(),
        false,
        false,
    )
    .unwrap_err();
    assert!(crate::error::is_usage(&err), "{err}");
    // An arch spelt otherwise is the same arch.
    let mut x86_too = guest_run(4, Accel::Tcg, grid(1.0));
    x86_too.run.arch = "amd64".into();
    assert!(compare_runs("A", &x86, "B", &x86_too, &opts(), &NoiseRule::Fixed).is_ok());
}

#[test]
fn a_time_calibration_does_not_set_the_noise_of_instruction_counts() {
    let a = guest_run(1, Accel::Tcg, grid(1.0));
    let b = guest_run(2, Accel::Tcg, grid(1.0));
    let v = compare_runs("1", &a, "2", &b, &opts(), &NoiseRule::Calibrated(vec![])).unwrap();
    assert_eq!(v.method.noise, opts().noise);
    assert!(
        v.method.noise_source.contains("calibrations measure time"),
        "{}",
        v.method.noise_source
    );
}
