//! Linear cost models: a figure `y` per observation explained as `X·c`, a
//! cost `c[j]` per unit of each column (counters, and a column of ones for a
//! fixed part), fitted by least squares on *relative* residuals, so that a
//! 3,000-instruction cell weighs as much as a 3,000,000-instruction one.
//!
//! A sweep of one workload on one kernel rarely moves every column
//! independently: per-PTE counters grow together. Least squares then has many
//! solutions, and only some combinations of costs are determined by the
//! data. This module says which: [`RowSpace`] is the span of the (scaled)
//! rows, a prediction `x·c` is *estimable* exactly when `x` lies in it (then
//! every least-squares solution gives the same value), and a single cost is
//! *identified* when its unit vector does. The solution reported is the
//! minimum-norm one (SVD pseudo-inverse) in scaled columns; it is unique on
//! the identified costs and on every estimable prediction.

use nalgebra::{DMatrix, DVector};

/// Relative tolerance of the rank decision and of the estimability test.
/// Counters are exact integers divided by calls, so true dependencies hold
/// to rounding error and independent columns differ at order one.
const TOL: f64 = 1e-9;

/// Why a fit cannot be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    /// No observations, or rows of different lengths.
    #[error("no observations to fit, or rows of different lengths")]
    Shape,
    /// A figure is zero, negative or not finite: a relative residual needs a
    /// positive figure.
    #[error("observation {0} has figure {1}: a fit on relative residuals needs positive, finite figures")]
    BadFigure(usize, f64),
    /// A column value is not finite.
    #[error("observation {0}, column {1} is not finite")]
    BadValue(usize, usize),
}

/// The span of a matrix's rows, after each column is divided by its norm.
#[derive(Debug, Clone)]
pub struct RowSpace {
    /// Column norms (1 for an all-zero column).
    scale: Vec<f64>,
    /// Orthonormal basis of the row space, in scaled columns: `rank` vectors.
    basis: Vec<DVector<f64>>,
}

impl RowSpace {
    /// The row space of `rows` (each of the same length).
    pub fn of(rows: &[Vec<f64>]) -> Result<Self, FitError> {
        let (m, n) = shape(rows)?;
        let scale = column_norms(rows, n);
        let a = DMatrix::from_fn(m, n, |i, j| rows[i][j] / scale[j]);
        let svd = a.svd(false, true);
        let v_t = svd.v_t.expect("asked for V^T");
        let smax = svd.singular_values.max();
        let basis = svd
            .singular_values
            .iter()
            .enumerate()
            .filter(|(_, s)| smax > 0.0 && **s > smax * TOL * (m.max(n) as f64))
            .map(|(k, _)| v_t.row(k).transpose())
            .collect();
        Ok(RowSpace { scale, basis })
    }

    /// The dimension: how many independent combinations the data fixes.
    pub fn rank(&self) -> usize {
        self.basis.len()
    }

    /// The part of `x` outside the row space, per column, in scaled units,
    /// relative to `x`'s own (scaled) length: all zeros when `x` lies in it.
    pub fn outside(&self, x: &[f64]) -> Vec<f64> {
        let z = DVector::from_fn(self.scale.len(), |j, _| x[j] / self.scale[j]);
        let norm = z.norm();
        if norm == 0.0 {
            return vec![0.0; z.len()];
        }
        let mut r = z.clone();
        for b in &self.basis {
            r -= b * b.dot(&z);
        }
        r.iter().map(|v| v / norm).collect()
    }

    /// Whether `x·c` is the same for every least-squares solution `c`.
    pub fn contains(&self, x: &[f64]) -> bool {
        self.outside(x).iter().all(|v| v.abs() < 1e-6)
    }

    /// The columns of `x` that carry its part outside the row space, largest
    /// first: what the data never varied on its own.
    pub fn missing(&self, x: &[f64]) -> Vec<usize> {
        let out = self.outside(x);
        let mut cols: Vec<usize> = (0..out.len()).filter(|&j| out[j].abs() >= 1e-6).collect();
        cols.sort_by(|&a, &b| out[b].abs().total_cmp(&out[a].abs()));
        cols
    }

    /// Whether column `j`'s cost alone is determined.
    pub fn identifies(&self, j: usize) -> bool {
        let mut e = vec![0.0; self.scale.len()];
        e[j] = 1.0;
        self.contains(&e)
    }
}

/// A fitted linear cost model.
#[derive(Debug, Clone)]
pub struct Fit {
    /// Cost per unit of each column (minimum-norm solution in scaled
    /// columns; meaningful alone only where [`Fit::identified`]).
    pub coef: Vec<f64>,
    /// Per column: whether the data determines its cost alone.
    pub identified: Vec<bool>,
    /// Per observation: (fitted − figure) / figure.
    pub residuals: Vec<f64>,
    /// The rows' span, for [`Fit::predict`].
    pub space: RowSpace,
}

/// A prediction the fit cannot make: `x` has a part the data never varied.
#[derive(Debug, Clone, PartialEq)]
pub struct NotEstimable {
    /// Columns carrying that part, largest first.
    pub columns: Vec<usize>,
}

impl Fit {
    /// `x·c` with the minimum-norm costs, whether or not the data
    /// determines it: where columns always moved together, this splits
    /// their joint cost in proportion to their scales.
    pub fn extrapolate(&self, x: &[f64]) -> f64 {
        dot(x, &self.coef)
    }

    /// `x·c`, when every least-squares solution agrees on it.
    pub fn predict(&self, x: &[f64]) -> Result<f64, NotEstimable> {
        if self.space.contains(x) {
            Ok(dot(x, &self.coef))
        } else {
            Err(NotEstimable {
                columns: self.space.missing(x),
            })
        }
    }
}

/// Fit `y ≈ X·c` on relative residuals: minimise Σ ((x_i·c − y_i) / y_i)².
pub fn fit(rows: &[Vec<f64>], y: &[f64]) -> Result<Fit, FitError> {
    fit_near(rows, y, &vec![None; rows.first().map_or(0, Vec::len)])
}

/// As [`fit`], but among the least-squares solutions (they differ only
/// where columns moved together) take the one nearest, in scaled columns,
/// to the costs known from elsewhere (`prior[j]`, e.g. instructions per
/// entry of the function a counter is). The residuals are those of [`fit`];
/// only the split of a joint cost between columns the data cannot separate
/// changes, and identified costs do not move.
pub fn fit_near(rows: &[Vec<f64>], y: &[f64], prior: &[Option<f64>]) -> Result<Fit, FitError> {
    let (m, n) = shape(rows)?;
    if y.len() != m {
        return Err(FitError::Shape);
    }
    if let Some((i, &v)) = y
        .iter()
        .enumerate()
        .find(|(_, v)| !(v.is_finite() && **v > 0.0))
    {
        return Err(FitError::BadFigure(i, v));
    }
    // Rows weighted by 1/y: the residual of each row is then relative.
    let weighted: Vec<Vec<f64>> = rows
        .iter()
        .zip(y)
        .map(|(r, yi)| r.iter().map(|v| v / yi).collect())
        .collect();
    let space = RowSpace::of(&weighted)?;
    let a = DMatrix::from_fn(m, n, |i, j| weighted[i][j] / space.scale[j]);
    let ones = DVector::from_element(m, 1.0);
    // b = pinv(A)·1, through the row-space basis: A = U Σ Vᵀ.
    let svd = a.svd(true, true);
    let eps = svd.singular_values.max() * TOL * (m.max(n) as f64);
    let pinv = svd.pseudo_inverse(eps).expect("computed U and V");
    let mut b = pinv * ones;
    if prior.len() != n {
        return Err(FitError::Shape);
    }
    if prior.iter().any(Option::is_some) {
        // Q = I − V Vᵀ projects on the directions the data leaves free; move
        // b by the Q t that brings the columns with a prior nearest to it:
        // t minimises |S (Q t − (b0 − b))|, S selecting those columns.
        let mut q = DMatrix::<f64>::identity(n, n);
        for v in &space.basis {
            q -= v * v.transpose();
        }
        let sel = |j: usize| prior[j].is_some();
        let sq = DMatrix::from_fn(n, n, |i, j| if sel(i) { q[(i, j)] } else { 0.0 });
        let d = DVector::from_fn(n, |j, _| {
            prior[j].map_or(0.0, |p| p * space.scale[j] - b[j])
        });
        let t = sq
            .pseudo_inverse(TOL)
            .expect("a square matrix has a pseudo-inverse")
            * d;
        b += q * t;
    }
    let coef: Vec<f64> = (0..n).map(|j| b[j] / space.scale[j]).collect();
    let identified = (0..n).map(|j| space.identifies(j)).collect();
    let residuals = rows
        .iter()
        .zip(y)
        .map(|(r, yi)| (dot(r, &coef) - yi) / yi)
        .collect();
    Ok(Fit {
        coef,
        identified,
        residuals,
        space,
    })
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn shape(rows: &[Vec<f64>]) -> Result<(usize, usize), FitError> {
    let n = rows.first().map(Vec::len).ok_or(FitError::Shape)?;
    if n == 0 || rows.iter().any(|r| r.len() != n) {
        return Err(FitError::Shape);
    }
    for (i, r) in rows.iter().enumerate() {
        if let Some(j) = r.iter().position(|v| !v.is_finite()) {
            return Err(FitError::BadValue(i, j));
        }
    }
    Ok((rows.len(), n))
}

fn column_norms(rows: &[Vec<f64>], n: usize) -> Vec<f64> {
    (0..n)
        .map(|j| {
            let s = rows.iter().map(|r| r[j] * r[j]).sum::<f64>().sqrt();
            if s > 0.0 {
                s
            } else {
                1.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Rows of (1, pages, folios, flushes) with known costs.
    fn synthetic(costs: &[f64; 4]) -> (Vec<Vec<f64>>, Vec<f64>) {
        let mut rows = Vec::new();
        for pages in [1.0, 10.0, 100.0, 1000.0, 10000.0] {
            for per_folio in [1.0, 16.0] {
                let flushes = if pages > 33.0 { 1.0 } else { pages };
                rows.push(vec![1.0, pages, pages / per_folio, flushes]);
            }
        }
        let y = rows.iter().map(|r| dot(r, costs)).collect();
        (rows, y)
    }

    #[test]
    fn recovers_known_costs() {
        let costs = [2700.0, 36.0, 120.0, 90.0];
        let (rows, y) = synthetic(&costs);
        let f = fit(&rows, &y).unwrap();
        assert!(f.identified.iter().all(|&b| b), "{:?}", f.identified);
        for (got, want) in f.coef.iter().zip(costs) {
            assert!((got - want).abs() < 1e-6 * want, "{got} vs {want}");
        }
        assert!(f.residuals.iter().all(|r| r.abs() < 1e-9));
    }

    /// A fixed part of 500 and two columns that always move together, at
    /// 30 and 10 per unit: only their sum, 40, is in the data.
    fn twin_columns() -> (Vec<Vec<f64>>, Vec<f64>) {
        let rows: Vec<Vec<f64>> = [1.0, 10.0, 100.0, 1000.0]
            .iter()
            .map(|&p| vec![1.0, p, p])
            .collect();
        let y = rows
            .iter()
            .map(|r| 500.0 + 30.0 * r[1] + 10.0 * r[2])
            .collect();
        (rows, y)
    }

    #[test]
    fn collinear_columns_are_not_identified_but_their_sum_predicts() {
        // Column 2 always equals column 1 (two per-PTE primitives).
        let (rows, y) = twin_columns();
        let f = fit(&rows, &y).unwrap();
        assert_eq!(f.identified, vec![true, false, false]);
        assert_eq!(f.space.rank(), 2);
        // Same ratio as the data: estimable.
        let p = f.predict(&[1.0, 5000.0, 5000.0]).unwrap();
        assert!((p - (500.0 + 40.0 * 5000.0)).abs() < 1e-6 * p);
        // Column 2 without column 1: never seen.
        let e = f.predict(&[1.0, 5000.0, 0.0]).unwrap_err();
        assert!(e.columns.contains(&1) && e.columns.contains(&2), "{e:?}");
    }

    #[test]
    fn a_column_never_nonzero_blocks_only_predictions_that_use_it() {
        let rows = vec![vec![1.0, 1.0, 0.0], vec![1.0, 2.0, 0.0]];
        let y = vec![3.0, 5.0];
        let f = fit(&rows, &y).unwrap();
        assert_eq!(f.identified, vec![true, true, false]);
        assert!((f.predict(&[1.0, 10.0, 0.0]).unwrap() - 21.0).abs() < 1e-9);
        assert_eq!(f.predict(&[1.0, 1.0, 1.0]).unwrap_err().columns, vec![2]);
        // Adding a row that moves column 2 makes it estimable.
        let mut more = rows.clone();
        more.push(vec![0.0, 0.0, 1.0]);
        assert!(RowSpace::of(&more).unwrap().contains(&[1.0, 1.0, 1.0]));
    }

    #[test]
    fn a_prior_splits_what_the_data_cannot_and_moves_nothing_else() {
        // Columns 1 and 2 always equal: only their sum (40) is known.
        let (rows, y) = twin_columns();
        let f = fit_near(&rows, &y, &[Some(9999.0), Some(30.0), None]).unwrap();
        // The identified fixed part ignores its prior.
        assert!((f.coef[0] - 500.0).abs() < 1e-6, "{:?}", f.coef);
        // Column 1 takes its prior, column 2 the rest of the joint 40.
        assert!(
            (f.coef[1] - 30.0).abs() < 1e-6 && (f.coef[2] - 10.0).abs() < 1e-6,
            "{:?}",
            f.coef
        );
        assert!(f.residuals.iter().all(|r| r.abs() < 1e-9));
        // Which now predicts a cell that moves column 2 alone.
        assert!((f.extrapolate(&[1.0, 0.0, 100.0]) - 1500.0).abs() < 1e-6);
    }

    #[test]
    fn bad_input_is_refused() {
        assert_eq!(fit(&[], &[]).unwrap_err(), FitError::Shape);
        assert_eq!(
            fit(&[vec![1.0]], &[0.0]).unwrap_err(),
            FitError::BadFigure(0, 0.0)
        );
        assert_eq!(
            fit(&[vec![1.0, f64::NAN]], &[1.0]).unwrap_err(),
            FitError::BadValue(0, 1)
        );
        assert_eq!(
            fit(&[vec![1.0], vec![1.0, 2.0]], &[1.0, 1.0]).unwrap_err(),
            FitError::Shape
        );
    }

    proptest! {
        /// Any positive costs on the synthetic design come back.
        #[test]
        fn recovers_any_positive_costs(
            fixed in 1.0..1e5f64, per_page in 0.0..1e3f64,
            per_folio in 0.0..1e3f64, per_flush in 0.0..1e3f64,
        ) {
            let costs = [fixed, per_page, per_folio, per_flush];
            let (rows, y) = synthetic(&costs);
            let f = fit(&rows, &y).unwrap();
            for (got, want) in f.coef.iter().zip(costs) {
                prop_assert!((got - want).abs() <= 1e-6 * want.max(1.0), "{} vs {}", got, want);
            }
        }

        /// An estimable prediction does not depend on which solution the
        /// fit picked: adding a null-space vector to the costs leaves it.
        #[test]
        fn estimable_predictions_are_unique(k in -50.0..50.0f64, p in 1.0..1e5f64) {
            let rows: Vec<Vec<f64>> = [1.0, 10.0, 100.0].iter().map(|&p| vec![1.0, p, 2.0 * p]).collect();
            let y: Vec<f64> = rows.iter().map(|r| 100.0 + r[1] + r[2]).collect();
            let f = fit(&rows, &y).unwrap();
            let x = [1.0, p, 2.0 * p];
            let shifted = [f.coef[0], f.coef[1] + 2.0 * k, f.coef[2] - k];
            let a = f.predict(&x).unwrap();
            prop_assert!((a - dot(&x, &shifted)).abs() <= 1e-6 * a.abs().max(1.0));
        }
    }
}
