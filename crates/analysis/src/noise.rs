//! The noise threshold: `--noise`, or the machine's calibrated between-run
//! repeatability (docs/statistics.md, "Calibrating the noise threshold").

use ptelab_stats::repeatability::{repeatability, Repeatability, COVERAGE};

use super::view::Drift;
use crate::record::Metric;
use crate::store::{Calibration, StoredRun};

/// Where the noise threshold comes from.
#[derive(Clone, Debug)]
pub enum NoiseRule {
    /// `opts.noise` as given (`--noise`).
    Fixed,
    /// The machine's between-run repeatability, pooled over its
    /// `ptelab calibrate` runs, when both runs ran on the calibrated machine
    /// and it exceeds `opts.noise`, which is the floor (docs/statistics.md,
    /// "Calibrating the noise threshold").
    Calibrated(Vec<Calibration>),
}

/// The noise threshold for comparing `a` with `b`, and where it came from in
/// words. `floor` is `--noise` or its default; `drift` says whether the
/// cells are corrected for drift, which picks the calibrated coefficient.
pub(super) fn noise_threshold(
    floor: f64,
    rule: &NoiseRule,
    drift: &Drift,
    metric: Metric,
    a: &StoredRun,
    b: &StoredRun,
) -> (f64, String) {
    let how = "`ptelab calibrate` measures this machine's between-run repeatability";
    let cals = match rule {
        NoiseRule::Fixed => return (floor, "as set (--noise)".into()),
        // A calibration is of the host's times, not of instruction counts.
        NoiseRule::Calibrated(_) if metric == Metric::Instructions => {
            return (
                floor,
                "default; calibrations measure time, these runs count instructions".into(),
            )
        }
        NoiseRule::Calibrated(cals) => cals,
    };
    let machine = &a.run.machine_id;
    let cals: Vec<&Calibration> = cals.iter().filter(|c| &c.machine_id == machine).collect();
    if cals.is_empty() {
        return (floor, format!("default; {how}"));
    }
    if &b.run.machine_id != machine {
        return (
            floor,
            format!("default; the runs ran on different machines and {how}"),
        );
    }
    let Some(rep) = pooled(&cals, drift.corrected) else {
        return (floor, format!("default; {how}"));
    };
    let which = if drift.corrected {
        "drift-corrected"
    } else {
        "raw"
    };
    let date = |c: &Calibration| {
        c.measured_at
            .get(..10)
            .unwrap_or(&c.measured_at)
            .to_string()
    };
    let (first, last) = (date(cals[0]), date(cals[cals.len() - 1]));
    let when = if first == last {
        first
    } else {
        format!("{first} to {last}")
    };
    let from = format!(
        "{} A/A differences from {} calibration{} of {when}",
        rep.n,
        cals.len(),
        if cals.len() == 1 { "" } else { "s" }
    );
    let noise = calibrated_noise(Some(&rep), floor);
    if noise == MAX_NOISE {
        (
            noise,
            format!(
                "the most the verdict rule accepts: this machine's {which} between-run \
                 repeatability is {:.0}% ({from}), too noisy for any finer verdict; calibrate \
                 again when it is quieter, or compare replicated runs",
                rep.coefficient * 100.0
            ),
        )
    } else if noise > floor {
        (
            noise,
            format!(
                "this machine's {which} between-run repeatability: {:.0}% of {from} were \
                 under it; --noise overrides",
                rep.coverage * 100.0
            ),
        )
    } else {
        (
            noise,
            format!(
                "default; this machine's {which} between-run repeatability is {:.1}% ({from})",
                rep.coefficient * 100.0
            ),
        )
    }
}

/// The largest noise threshold (the verdict band 1 ± noise must keep its
/// lower end above 0). A calibration above it is capped, and says so.
pub const MAX_NOISE: f64 = 0.99;

/// The noise threshold a pooled calibration gives, over `floor`.
pub fn calibrated_noise(rep: Option<&Repeatability>, floor: f64) -> f64 {
    rep.map_or(floor, |r| r.coefficient.clamp(floor, MAX_NOISE))
}

/// The repeatability coefficient of `cals` pooled: the [`COVERAGE`] quantile over
/// all their A/A differences, drift-corrected or raw.
pub fn pooled(cals: &[&Calibration], corrected: bool) -> Option<Repeatability> {
    let diffs: Vec<f64> = cals
        .iter()
        .flat_map(|c| {
            if corrected {
                &c.differences.adjusted
            } else {
                &c.differences.raw
            }
        })
        .copied()
        .collect();
    repeatability(&diffs, COVERAGE).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{cell, opts, stored};
    use crate::workload::FolioSpec;
    use crate::{compare_runs_paired, Rules, VerdictKind};

    /// A calibration whose 40 A/A differences are spread evenly up to
    /// `adjusted` and `raw` (relative).
    fn calibration(machine: &str, adjusted: f64, raw: f64) -> Calibration {
        let c = |coefficient| Repeatability {
            coefficient,
            rms: coefficient / 2.0,
            max: coefficient,
            n: 40,
            coverage: COVERAGE,
        };
        let spread =
            |top: f64| -> Vec<f64> { (1..=40).map(|i| top.ln_1p() * i as f64 / 40.0).collect() };
        Calibration {
            id: Some(3),
            machine_id: machine.into(),
            kernel_release: "6.18".into(),
            measured_at: "2026-11-23T09:40:00Z".into(),
            runs: (1..=8).collect(),
            span_s: 60.0,
            adjusted: c(adjusted),
            raw: c(raw),
            cells: vec![],
            differences: crate::store::Differences {
                adjusted: spread(adjusted),
                raw: spread(raw),
            },
        }
    }

    #[test]
    fn calibrated_noise_threshold_applies_to_its_machine_only() {
        // B is 5% slower: a regression at the 2% default, not on a machine
        // whose A/A runs differ by up to 7.2%.
        let a = stored(1, vec![cell(4, FolioSpec::Base, 1000.0, 30)]);
        let b = stored(2, vec![cell(4, FolioSpec::Base, 1050.0, 30)]);
        let verdict = |rule: NoiseRule| {
            let rules = Rules {
                noise: rule,
                ..Rules::default()
            };
            let v = compare_runs_paired("1", &a, "2", &b, &opts(), &rules).unwrap();
            (v.rows[0].verdict, v.method.noise, v.method.noise_source)
        };
        let (v, noise, why) = verdict(NoiseRule::Calibrated(vec![]));
        assert_eq!((v, noise), (VerdictKind::Regression, 0.02));
        assert!(why.starts_with("default; `ptelab calibrate`"), "{why}");

        // No probes in these cells: compare does not correct, so the raw
        // differences apply. 40 spread evenly up to 7.2%: the 95% quantile
        // is at rank 37.05 of 40.
        let (v, noise, why) = verdict(NoiseRule::Calibrated(vec![calibration("m", 0.05, 0.072)]));
        let expect = (0.072f64.ln_1p() * 38.05 / 40.0).exp_m1();
        assert_eq!(v, VerdictKind::NoChange);
        assert!((noise - expect).abs() < 1e-12, "{noise} vs {expect}");
        assert!(
            why.contains(
                "raw between-run repeatability: 95% of 40 A/A differences from 1 \
                          calibration of 2026-11-23"
            ),
            "{why}"
        );

        // Calibrations pool: a quiet one and a noisy one.
        let (_, noise, why) = verdict(NoiseRule::Calibrated(vec![
            calibration("m", 0.004, 0.006),
            calibration("m", 0.05, 0.072),
        ]));
        assert!(noise > 0.02 && noise < expect, "{noise}");
        assert!(
            why.contains("80 A/A differences from 2 calibrations"),
            "{why}"
        );

        // Another machine's calibration does not apply.
        let (v, noise, why) = verdict(NoiseRule::Calibrated(vec![calibration(
            "other", 0.05, 0.072,
        )]));
        assert_eq!((v, noise), (VerdictKind::Regression, 0.02));
        assert!(why.starts_with("default; `ptelab calibrate`"), "{why}");

        // A quiet machine keeps the default floor.
        let (v, noise, why) = verdict(NoiseRule::Calibrated(vec![calibration("m", 0.004, 0.006)]));
        assert_eq!((v, noise), (VerdictKind::Regression, 0.02));
        assert!(why.contains("repeatability is 0.6%"), "{why}");

        let (_, noise, why) = verdict(NoiseRule::Fixed);
        assert_eq!((noise, why.as_str()), (0.02, "as set (--noise)"));

        // A machine whose A/A runs differ by up to 3x (seen on CI, with the
        // whole test suite beside the calibration) caps at what the verdict
        // rule accepts, and says so.
        let (v, noise, why) = verdict(NoiseRule::Calibrated(vec![calibration("m", 0.5, 2.0)]));
        assert_eq!((v, noise), (VerdictKind::NoChange, MAX_NOISE));
        assert!(why.contains("too noisy for any finer verdict"), "{why}");
    }
}
