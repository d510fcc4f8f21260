//! Adjusting a comparison for machine drift with per-block covariates.
//!
//! ptelab measures machine-speed probes in every block (kernel speed as ns
//! per getppid, memory latency as ns per dependent load; see
//! `docs/statistics.md`, "Machine drift"). When the machine drifts, block
//! medians move with the probes, but not necessarily in proportion: on the
//! VM ptelab was built on, a 4 MiB order-0 mprotect moved one for one with
//! getppid, a 400 KiB one with 64K folios about half as much, and a 40 MiB
//! one mostly with memory latency. So the response is estimated per cell, as
//! an analysis of covariance on logs:
//!
//! ```text
//! ln(block median) = μ_run + Σ_k β_k · ln(probe_k) + ε
//! ```
//!
//! The β are **within-run** pooled slopes: each run's blocks are centred on
//! their own means before the slopes are fitted, so a difference between the
//! runs (the effect being measured) cannot leak into them. Each block's
//! samples are then multiplied by Π_k `(reference_k / probe_k)^β_k`, which
//! puts every sample at the reference machine speed; the ratio, its
//! bootstrap interval (which refits the slopes in every resample, so their
//! uncertainty widens the interval) and the rank test all run on the
//! adjusted values.
//!
//! Slopes are non-negative (a cell cannot get faster because the machine got
//! slower: the fit is a non-negative least squares over subsets of the
//! covariates) and clamped to [`MAX_SLOPE`]. A probe that does not vary
//! within either run says nothing about its slope, which is then 0. Errors
//! in a probe bias its slope toward 0 (regression dilution), which
//! under-corrects rather than invents an effect.

/// Largest slope the adjustment uses.
pub const MAX_SLOPE: f64 = 2.0;

/// Within-run pooled slopes of y on the covariates x over the runs, as
/// non-negative least squares: the unconstrained fit on every subset of
/// covariates, keeping the fit with every slope ≥ 0 that explains the most;
/// slopes are then clamped to [`MAX_SLOPE`]. A covariate that does not vary
/// within any run gets slope 0. Each run is `(x, y)` with `x[k][i]` the
/// ln covariate k of block i and `y[i]` its ln block median; every run must
/// have the same number of covariates. O(n·k² + 2^k·k³), k ≤ 4.
pub fn within_slopes(runs: &[(&[Vec<f64>], &[f64])]) -> Vec<f64> {
    let k = runs.first().map_or(0, |r| r.0.len());
    assert!(k <= 4, "at most 4 covariates");
    // Centred cross-products, pooled over runs.
    let mut sxx = vec![vec![0.0; k]; k];
    let mut sxy = vec![0.0; k];
    for (x, y) in runs {
        let n = y.len();
        if n < 2 {
            continue;
        }
        let my = y.iter().sum::<f64>() / n as f64;
        let mx: Vec<f64> = x.iter().map(|c| c.iter().sum::<f64>() / n as f64).collect();
        for i in 0..n {
            for a in 0..k {
                let da = x[a][i] - mx[a];
                sxy[a] += da * (y[i] - my);
                for b in 0..k {
                    sxx[a][b] += da * (x[b][i] - mx[b]);
                }
            }
        }
    }
    let mut best = vec![0.0; k];
    let mut best_explained = 0.0;
    for subset in 1u32..(1 << k) {
        let idx: Vec<usize> = (0..k).filter(|i| subset & (1 << i) != 0).collect();
        let m: Vec<Vec<f64>> = idx
            .iter()
            .map(|&a| idx.iter().map(|&b| sxx[a][b]).collect())
            .collect();
        let v: Vec<f64> = idx.iter().map(|&a| sxy[a]).collect();
        let Some(beta) = solve(m, v) else { continue };
        if beta.iter().any(|b| *b < 0.0) {
            continue;
        }
        // Sum of squares the fit explains: β·Sxy.
        let explained: f64 = beta.iter().zip(&idx).map(|(b, &a)| b * sxy[a]).sum();
        if explained > best_explained {
            best_explained = explained;
            best = vec![0.0; k];
            for (b, &a) in beta.iter().zip(&idx) {
                best[a] = b.min(MAX_SLOPE);
            }
        }
    }
    best
}

/// Solve the small system m·β = v by Gaussian elimination with partial
/// pivoting; None when m is (numerically) singular.
fn solve(mut m: Vec<Vec<f64>>, mut v: Vec<f64>) -> Option<Vec<f64>> {
    let n = v.len();
    let scale = m.iter().flatten().fold(0.0f64, |a, x| a.max(x.abs()));
    if scale <= 1e-12 {
        return None;
    }
    for col in 0..n {
        let p = (col..n).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[p][col].abs() <= 1e-9 * scale {
            return None;
        }
        m.swap(col, p);
        v.swap(col, p);
        let pivot_row = m[col].clone();
        for r in (0..n).filter(|&r| r != col) {
            let f = m[r][col] / pivot_row[col];
            for (x, p) in m[r].iter_mut().zip(&pivot_row).skip(col) {
                *x -= f * p;
            }
            v[r] -= f * v[col];
        }
    }
    Some((0..n).map(|i| v[i] / m[i][i]).collect())
}

/// The factor a block's samples are multiplied by:
/// Π_k `(reference[k] / covariate[k])^slope[k]`.
pub fn factor(covariate: &[f64], reference: &[f64], slope: &[f64]) -> f64 {
    covariate
        .iter()
        .zip(reference)
        .zip(slope)
        .map(|((c, r), s)| (r / c).powf(*s))
        .product()
}

/// The reference of each covariate: its median over A's blocks.
pub fn reference(cov_a: &[&[f64]]) -> Vec<f64> {
    cov_a
        .iter()
        .map(|v| crate::sample::median_in_place(&mut v.to_vec()))
        .collect()
}

/// The [`factor`] of every block of a side whose covariates are `cov`
/// (`cov[k][i]`: covariate k of block i).
pub fn block_factors(cov: &[&[f64]], reference: &[f64], slopes: &[f64]) -> Vec<f64> {
    let blocks = cov.first().map_or(0, |c| c.len());
    (0..blocks)
        .map(|i| {
            let c: Vec<f64> = cov.iter().map(|c| c[i]).collect();
            factor(&c, reference, slopes)
        })
        .collect()
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

    /// One covariate: (x, y) points on logs, as a run for [`within_slopes`].
    fn run(points: &[(f64, f64)]) -> (Vec<Vec<f64>>, Vec<f64>) {
        (
            vec![points.iter().map(|p| p.0.ln()).collect()],
            points.iter().map(|p| p.1.ln()).collect(),
        )
    }

    fn slopes(runs: &[&(Vec<Vec<f64>>, Vec<f64>)]) -> Vec<f64> {
        let r: Vec<(&[Vec<f64>], &[f64])> = runs.iter().map(|r| (&r.0[..], &r.1[..])).collect();
        within_slopes(&r)
    }

    #[test]
    fn proportional_response_gives_slope_one() {
        // Time proportional to the probe in both runs; B is 10% slower at
        // any probe. The run effect does not leak into the slope.
        let a = run(&[(200.0, 2000.0), (250.0, 2500.0), (186.0, 1860.0)]);
        let b = run(&[(200.0, 2200.0), (260.0, 2860.0)]);
        assert!((slopes(&[&a, &b])[0] - 1.0).abs() < 1e-9);
    }

    #[test]
    fn half_response_and_clamping() {
        let a = run(&[(100.0, 1000.0), (400.0, 2000.0)]);
        assert!((slopes(&[&a])[0] - 0.5).abs() < 1e-9);
        let inverse = run(&[(100.0, 2000.0), (400.0, 1000.0)]);
        assert_eq!(slopes(&[&inverse]), [0.0]);
        let steep = run(&[(100.0, 100.0), (200.0, 1600.0)]);
        assert_eq!(slopes(&[&steep]), [MAX_SLOPE]);
    }

    #[test]
    fn a_constant_probe_says_nothing() {
        // Between-run drift alone cannot identify the slope.
        let a = run(&[(200.0, 1000.0), (200.0, 1010.0)]);
        let b = run(&[(250.0, 1300.0), (250.0, 1290.0)]);
        assert_eq!(slopes(&[&a, &b]), [0.0]);
    }

    #[test]
    fn two_covariates_are_separated() {
        // y = 1.0·ln(kernel) + 0.5·ln(memory), the two varying independently.
        let k = [200.0f64, 250.0, 186.0, 255.0, 190.0, 260.0];
        let m = [180.0f64, 180.0, 230.0, 230.0, 200.0, 190.0];
        let y: Vec<f64> = k
            .iter()
            .zip(&m)
            .map(|(k, m)| k.ln() + 0.5 * m.ln())
            .collect();
        let x = vec![
            k.iter().map(|v| v.ln()).collect(),
            m.iter().map(|v| v.ln()).collect(),
        ];
        let s = within_slopes(&[(&x, &y)]);
        assert!(
            (s[0] - 1.0).abs() < 1e-9 && (s[1] - 0.5).abs() < 1e-9,
            "{s:?}"
        );
        // A covariate with a negative fitted slope is dropped, the other refitted.
        let y: Vec<f64> = k
            .iter()
            .zip(&m)
            .map(|(k, m)| k.ln() - 0.5 * m.ln())
            .collect();
        let s = within_slopes(&[(&x, &y)]);
        assert_eq!(s[1], 0.0, "{s:?}");
        assert!(s[0] > 0.0, "{s:?}");
        // Collinear covariates: the single best one carries the fit.
        let x2 = vec![x[0].clone(), x[0].clone()];
        let y: Vec<f64> = k.iter().map(|k| k.ln()).collect();
        let s = within_slopes(&[(&x2, &y)]);
        assert!((s[0] + s[1] - 1.0).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn factor_and_fit() {
        assert!((factor(&[500.0], &[250.0], &[1.0]) - 0.5).abs() < 1e-12);
        assert_eq!(factor(&[500.0], &[250.0], &[0.0]), 1.0);
        assert!((factor(&[500.0, 100.0], &[250.0, 400.0], &[1.0, 0.5]) - 1.0).abs() < 1e-12);
        assert!(fits(5, &[2, 3], &[1.0, 2.0]));
        assert!(fits(5, &[], &[1.0]));
        assert!(!fits(5, &[2, 3], &[1.0]));
        assert!(!fits(5, &[2, 2], &[1.0, 2.0]));
        assert!(!fits(5, &[2, 3], &[1.0, 0.0]));
        assert!(!fits(5, &[2, 3], &[]));
    }
}
