//! Adjusting a comparison for machine drift with a per-block covariate.
//!
//! ptelab measures a kernel-speed probe in every block (ns per getppid; see
//! `docs/statistics.md`, "Machine drift"). When the machine's kernel-mode
//! speed drifts, block medians move with the probe, but not necessarily in
//! proportion: on the VM ptelab was built on, a 4 MiB order-0 mprotect moved
//! one for one with getppid, a 400 KiB one with 64K folios about half as much.
//! So the response is estimated per cell, as an analysis of covariance on
//! logs:
//!
//! ```text
//! ln(block median) = μ_run + β · ln(probe) + ε
//! ```
//!
//! β is the **within-run** pooled slope: each run's blocks are centred on
//! their own means before the slope is fitted, so a difference between the
//! runs (the effect being measured) cannot leak into β. Each block's samples
//! are then multiplied by `(reference / probe)^β`, which puts every sample
//! at the reference kernel speed; the ratio, its bootstrap interval (which
//! refits β in every resample, so β's uncertainty widens the interval) and
//! the rank test all run on the adjusted values.
//!
//! β is clamped to [0, [`MAX_SLOPE`]]: a cell cannot get faster because the
//! kernel got slower, and a steeper response than 1.5 was never seen here
//! except as noise in cells with few, long samples. When the probe does not
//! vary within either run, the data say nothing about β and it is 0: no
//! adjustment. Errors in the probe bias β toward 0 (regression dilution),
//! which under-corrects rather than invents an effect.

/// Largest slope the adjustment uses.
pub const MAX_SLOPE: f64 = 1.5;

/// Within-run pooled slope of `y` on `x` over the two runs' blocks, clamped
/// to [0, [`MAX_SLOPE`]]. `a` and `b` are (ln covariate, ln block median)
/// pairs. 0 when x does not vary within either run. O(n).
pub fn within_slope(a: &[(f64, f64)], b: &[(f64, f64)]) -> f64 {
    let mut num = 0.0;
    let mut den = 0.0;
    for run in [a, b] {
        if run.len() < 2 {
            continue;
        }
        let n = run.len() as f64;
        let mx = run.iter().map(|p| p.0).sum::<f64>() / n;
        let my = run.iter().map(|p| p.1).sum::<f64>() / n;
        for &(x, y) in run {
            num += (x - mx) * (y - my);
            den += (x - mx) * (x - mx);
        }
    }
    if den <= 1e-12 {
        return 0.0;
    }
    (num / den).clamp(0.0, MAX_SLOPE)
}

/// The factor a block's samples are multiplied by: `(reference / covariate)^slope`.
pub fn factor(covariate: f64, reference: f64, slope: f64) -> f64 {
    (reference / covariate).powf(slope)
}

/// Whether `covariate` can adjust a side of `n` values in blocks of
/// `blocks`: one positive finite value per block (an empty `blocks` is one
/// block).
pub fn fits(n: usize, blocks: &[usize], covariate: &[f64]) -> bool {
    let nblocks = if blocks.is_empty() { 1 } else { blocks.len() };
    covariate.len() == nblocks
        && covariate.iter().all(|c| c.is_finite() && *c > 0.0)
        && (blocks.is_empty() || blocks.iter().sum::<usize>() == n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
        points.iter().map(|&(x, y)| (x.ln(), y.ln())).collect()
    }

    #[test]
    fn proportional_response_gives_slope_one() {
        // Time proportional to the probe in both runs; B is 10% slower at
        // any probe. The run effect does not leak into the slope.
        let a = pairs(&[(200.0, 2000.0), (250.0, 2500.0), (186.0, 1860.0)]);
        let b = pairs(&[(200.0, 2200.0), (260.0, 2860.0)]);
        assert!((within_slope(&a, &b) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn half_response_and_clamping() {
        let a = pairs(&[(100.0, 1000.0), (400.0, 2000.0)]);
        assert!((within_slope(&a, &[]) - 0.5).abs() < 1e-9);
        let inverse = pairs(&[(100.0, 2000.0), (400.0, 1000.0)]);
        assert_eq!(within_slope(&inverse, &[]), 0.0);
        let steep = pairs(&[(100.0, 100.0), (200.0, 1600.0)]);
        assert_eq!(within_slope(&steep, &[]), MAX_SLOPE);
    }

    #[test]
    fn a_constant_probe_says_nothing() {
        // Between-run drift alone cannot identify the slope.
        let a = pairs(&[(200.0, 1000.0), (200.0, 1010.0)]);
        let b = pairs(&[(250.0, 1300.0), (250.0, 1290.0)]);
        assert_eq!(within_slope(&a, &b), 0.0);
    }

    #[test]
    fn factor_and_fit() {
        assert!((factor(500.0, 250.0, 1.0) - 0.5).abs() < 1e-12);
        assert_eq!(factor(500.0, 250.0, 0.0), 1.0);
        assert!(fits(5, &[2, 3], &[1.0, 2.0]));
        assert!(fits(5, &[], &[1.0]));
        assert!(!fits(5, &[2, 3], &[1.0]));
        assert!(!fits(5, &[2, 2], &[1.0, 2.0]));
        assert!(!fits(5, &[2, 3], &[1.0, 0.0]));
        assert!(!fits(5, &[2, 3], &[]));
    }
}
