//! Comparing two **sets of runs** of one cell: the run is the unit.
//!
//! Two single runs can only be compared against an outside estimate of how
//! far runs land apart (`crate::repeatability`), because everything shared
//! by the samples of one run (the host's state in that minute, the physical
//! pages it got) is invisible inside it. With several runs per side the
//! between-run variation is measured by the comparison itself: each run
//! contributes one value, the logarithm of its median, and the two sets of
//! values are compared with Student's two-sample t on pooled variance
//! (Student 1908; as in mmtests' Welch/t comparisons of iterations, and
//! Google Benchmark's rule that repetitions, not samples, are the unit).
//!
//! Why pooled and not Welch: both sides ran on one machine and differ only
//! in the kernel or layout under test, so their run-to-run noise is the same
//! process; with 2-3 runs a side Welch's degrees of freedom collapse toward
//! 1 and its interval becomes useless, while the pooled test keeps
//! n_A + n_B − 2. Logs make the test one of ratios, and the interval of the
//! mean log difference exponentiates to an interval of the ratio of
//! geometric means of the run medians.

use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::{check_confidence, Error};

/// Fewest runs on both sides together: 3 gives one degree of freedom.
pub const MIN_RUNS: usize = 3;

/// The comparison of one cell over runs: ratio of the geometric means of
/// B's and A's run medians, its t interval, and the t test's p-value.
#[derive(Clone, Debug, PartialEq)]
pub struct RunsEstimate {
    /// Runs on side A.
    pub n_a: usize,
    /// Runs on side B.
    pub n_b: usize,
    /// Geometric mean of A's run medians.
    pub mean_a: f64,
    /// Geometric mean of B's run medians.
    pub mean_b: f64,
    /// mean_b / mean_a.
    pub ratio: f64,
    /// Lower bound of the ratio's interval.
    pub ci_low: f64,
    /// Upper bound of the ratio's interval.
    pub ci_high: f64,
    /// Confidence level of the interval.
    pub confidence: f64,
    /// Two-sided p-value of the pooled t test of equal means.
    pub p_value: f64,
    /// Degrees of freedom, n_A + n_B − 2.
    pub df: f64,
    /// Pooled standard deviation of ln(run median): the machine's
    /// between-run noise as this comparison saw it (0.03 ≈ 3%).
    pub sd: f64,
}

/// Compare the run medians `a` and `b` (one positive value per run).
///
/// Cost: O(n_A + n_B).
///
/// # Errors
/// [`Error::InvalidParameter`] for a confidence outside (0, 1), an empty
/// side or fewer than [`MIN_RUNS`] runs in all; [`Error::NotPositive`] for
/// a value that is not a positive finite number.
pub fn compare_runs(a: &[f64], b: &[f64], confidence: f64) -> Result<RunsEstimate, Error> {
    check_confidence(confidence)?;
    if a.is_empty() || b.is_empty() || a.len() + b.len() < MIN_RUNS {
        return Err(Error::InvalidParameter {
            name: "runs",
            value: (a.len().min(b.len())) as f64,
            accepted: "at least one run per side and 3 in all",
        });
    }
    if let Some((index, &value)) = a
        .iter()
        .chain(b)
        .enumerate()
        .find(|(_, v)| !(v.is_finite() && **v > 0.0))
    {
        return Err(Error::NotPositive { index, value });
    }
    let ln = |v: &[f64]| -> Vec<f64> { v.iter().map(|x| x.ln()).collect() };
    let (la, lb) = (ln(a), ln(b));
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let ss = |v: &[f64], m: f64| v.iter().map(|x| (x - m).powi(2)).sum::<f64>();
    let (ma, mb) = (mean(&la), mean(&lb));
    let df = (a.len() + b.len() - 2) as f64;
    let sd = ((ss(&la, ma) + ss(&lb, mb)) / df).sqrt();
    let se = sd * (1.0 / a.len() as f64 + 1.0 / b.len() as f64).sqrt();
    let diff = mb - ma;
    let t = StudentsT::new(0.0, 1.0, df).expect("df >= 1");
    let q = t.inverse_cdf(0.5 + confidence / 2.0);
    let p_value = if se > 0.0 {
        2.0 * t.sf((diff / se).abs())
    } else if diff == 0.0 {
        1.0
    } else {
        0.0
    };
    Ok(RunsEstimate {
        n_a: a.len(),
        n_b: b.len(),
        mean_a: ma.exp(),
        mean_b: mb.exp(),
        ratio: diff.exp(),
        ci_low: (diff - q * se).exp(),
        ci_high: (diff + q * se).exp(),
        confidence,
        p_value,
        df,
        sd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn matches_a_hand_computed_t_test() {
        // ln values A = ln(100) + {0, 0.02, -0.02}, B = ln(110) + {0.01, -0.01}:
        // pooled ss = 0.0008 + 0.0002 = 0.001 over df 3.
        let a = [100.0, 100.0 * 0.02f64.exp(), 100.0 * (-0.02f64).exp()];
        let b = [110.0 * 0.01f64.exp(), 110.0 * (-0.01f64).exp()];
        let e = compare_runs(&a, &b, 0.95).unwrap();
        assert_eq!((e.n_a, e.n_b, e.df), (3, 2, 3.0));
        assert!((e.ratio - 1.1).abs() < 1e-12);
        let sd = (0.001f64 / 3.0).sqrt();
        assert!((e.sd - sd).abs() < 1e-12);
        // t(0.975, 3) = 3.182446; se = sd * sqrt(1/3 + 1/2).
        let half = 3.182446 * sd * (1.0f64 / 3.0 + 0.5).sqrt();
        assert!((e.ci_low.ln() - (1.1f64.ln() - half)).abs() < 1e-5);
        assert!((e.ci_high.ln() - (1.1f64.ln() + half)).abs() < 1e-5);
        // t = ln 1.1 / se = 5.71 on 3 df: two-sided p = 0.0106.
        assert!((e.p_value - 0.0106).abs() < 0.0005, "{}", e.p_value);
    }

    #[test]
    fn identical_sets_give_ratio_one_and_p_one() {
        let v = [5.0, 5.1, 4.9];
        let e = compare_runs(&v, &v, 0.95).unwrap();
        assert!((e.ratio - 1.0).abs() < 1e-15);
        assert!((e.p_value - 1.0).abs() < 1e-12);
        assert!(e.ci_low < 1.0 && e.ci_high > 1.0);
    }

    #[test]
    fn refuses_too_few_runs_and_bad_values() {
        assert!(compare_runs(&[1.0], &[1.0], 0.95).is_err());
        assert!(compare_runs(&[], &[1.0, 2.0, 3.0], 0.95).is_err());
        assert!(matches!(
            compare_runs(&[1.0, 0.0], &[1.0], 0.95),
            Err(Error::NotPositive { .. })
        ));
        assert!(compare_runs(&[1.0, 2.0], &[1.0], 1.5).is_err());
    }

    #[test]
    fn one_run_against_several_uses_the_other_sides_spread() {
        let e = compare_runs(&[100.0], &[104.0, 106.0, 105.0], 0.95).unwrap();
        assert_eq!(e.df, 2.0);
        assert!(e.ci_low < e.ratio && e.ratio < e.ci_high);
    }

    proptest! {
        /// The interval holds the estimate, is symmetric in log space, and
        /// swapping the sides inverts everything.
        #[test]
        fn interval_is_ordered_and_swapping_inverts(
            a in prop::collection::vec(1.0f64..1e6, 1..6),
            b in prop::collection::vec(1.0f64..1e6, 2..6),
        ) {
            let e = compare_runs(&a, &b, 0.95).unwrap();
            prop_assert!(e.ci_low <= e.ratio && e.ratio <= e.ci_high);
            prop_assert!(((e.ratio / e.ci_low).ln() - (e.ci_high / e.ratio).ln()).abs() < 1e-9);
            prop_assert!((0.0..=1.0).contains(&e.p_value));
            let s = compare_runs(&b, &a, 0.95).unwrap();
            prop_assert!((s.ratio * e.ratio - 1.0).abs() < 1e-9);
            prop_assert!((s.p_value - e.p_value).abs() < 1e-9);
        }
    }
}
