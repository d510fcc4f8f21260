//! Between-run repeatability: how far apart two runs of the same cells land
//! on one machine when nothing changed (A/A comparisons).
//!
//! The quantity is the *repeatability coefficient* of Bland and Altman
//! (1986; ISO 5725-1 calls it the repeatability limit): the value below which
//! the absolute difference between two repeated measurements lies with a
//! stated probability, 95% by default. Here a difference is the log ratio of
//! two runs' medians of one cell, so the coefficient is relative
//! (`exp(q) − 1`). It is estimated without a distributional assumption, as
//! the empirical quantile of |ln ratio| over every pair of calibration runs
//! and every cell: the drift of a shared VM is not normal (it switches
//! between states), and the tail is what makes an A/A comparison fail.
//!
//! `ptelab compare` uses the coefficient as its noise threshold when the
//! machine has one: a change smaller than what this machine produces
//! between two runs of one kernel is not evidence about the kernel.

use crate::percentiles::Percentiles;
use crate::Error;

/// The share of A/A differences the coefficient covers, by default.
pub const COVERAGE: f64 = 0.95;

/// Fewest A/A differences for a coefficient: below 20 the 95% quantile is
/// the maximum and says little.
pub const MIN_DIFFERENCES: usize = 20;

/// The estimate from a set of A/A log ratios.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Repeatability {
    /// Relative coefficient: `exp(q) − 1`, with q the `coverage` quantile of
    /// |ln ratio|. 0.048 = 95% of A/A differences are under 4.8%.
    pub coefficient: f64,
    /// Root mean square of the log ratios: the spread a normal model would
    /// assume (printed beside the quantile, not used for decisions).
    pub rms: f64,
    /// Largest |ln ratio| seen, as a relative change.
    pub max: f64,
    /// Differences the estimate rests on.
    pub n: usize,
    /// The probability the coefficient covers, e.g. 0.95.
    pub coverage: f64,
}

/// Estimate the repeatability coefficient from A/A `log_ratios` (ln of the
/// ratio of two runs' medians of one cell; one value per cell and pair of
/// runs).
pub fn repeatability(log_ratios: &[f64], coverage: f64) -> Result<Repeatability, Error> {
    crate::check_confidence(coverage)?;
    if log_ratios.len() < MIN_DIFFERENCES {
        return Err(Error::TooFewValues {
            n: log_ratios.len(),
            min: MIN_DIFFERENCES,
        });
    }
    if let Some((index, &value)) = log_ratios.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(Error::NotFinite { index, value });
    }
    let mut abs: Vec<f64> = log_ratios.iter().map(|v| v.abs()).collect();
    abs.sort_by(f64::total_cmp);
    let q = Percentiles::new(&abs).at(coverage * 100.0);
    let rms = (log_ratios.iter().map(|v| v * v).sum::<f64>() / log_ratios.len() as f64).sqrt();
    Ok(Repeatability {
        coefficient: q.exp_m1(),
        rms: rms.exp_m1(),
        max: abs[abs.len() - 1].exp_m1(),
        n: log_ratios.len(),
        coverage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn quantile_of_absolute_log_ratios() {
        // |ln r| = 0.00, 0.01, ..., 0.19 with alternating signs: the 95%
        // quantile sits at rank 18.05 of 0..19 -> 0.1805.
        let v: Vec<f64> = (0..20)
            .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 } * i as f64 / 100.0)
            .collect();
        let r = repeatability(&v, 0.95).unwrap();
        assert!((r.coefficient - 0.1805f64.exp_m1()).abs() < 1e-12);
        assert!((r.max - 0.19f64.exp_m1()).abs() < 1e-12);
        assert_eq!(r.n, 20);
    }

    #[test]
    fn normal_drift_gives_about_1_96_sigma() {
        // Differences N(0, 0.02²): the 95% quantile of |d| is 1.96 σ.
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let v: Vec<f64> = (0..20_000)
            .map(|_| {
                // Box-Muller.
                let (u1, u2): (f64, f64) = (rng.gen(), rng.gen());
                0.02 * (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
            })
            .collect();
        let r = repeatability(&v, 0.95).unwrap();
        let expect = (1.96f64 * 0.02).exp_m1();
        assert!(
            (r.coefficient / expect - 1.0).abs() < 0.03,
            "{} vs {expect}",
            r.coefficient
        );
        assert!((r.rms / 0.02f64.exp_m1() - 1.0).abs() < 0.03);
    }

    #[test]
    fn a_state_switch_shows_in_the_tail_not_the_rms() {
        // 90% of pairs agree to 0.5%, 10% straddle a 6% state switch: the
        // coefficient reports the switch, which is what fails an A/A test.
        let v: Vec<f64> = (0..100)
            .map(|i| if i % 10 == 0 { 0.06 } else { 0.005 })
            .collect();
        let r = repeatability(&v, 0.95).unwrap();
        assert!(r.coefficient > 0.05, "{}", r.coefficient);
        assert!(r.rms < 0.025, "{}", r.rms);
    }

    #[test]
    fn refuses_too_few_or_bad_values() {
        assert!(matches!(
            repeatability(&[0.01; 5], 0.95),
            Err(Error::TooFewValues { n: 5, min: 20 })
        ));
        let mut v = vec![0.01; 25];
        v[3] = f64::NAN;
        assert!(matches!(
            repeatability(&v, 0.95),
            Err(Error::NotFinite { index: 3, .. })
        ));
        assert!(repeatability(&[0.01; 25], 1.5).is_err());
    }
}
