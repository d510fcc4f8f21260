//! A validated univariate sample (criterion `src/stats/univariate/sample.rs`).
//!
//! In ptelab one value is the mean ns per call within one timed batch of calls;
//! a cell's sample is every batch it timed, in the order they were taken.

use crate::percentiles::Percentiles;
use crate::Error;

/// At least two finite values, kept in the order given and sorted.
///
/// Construction is the only place the invariants are checked; every statistic
/// in this crate can then rely on them (no NaN to poison a sort, a median that
/// exists, a spread that is defined).
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    values: Vec<f64>,
    sorted: Vec<f64>,
}

impl Sample {
    /// Validate `values`: n ≥ 2 and every value finite.
    ///
    /// Cost: O(n log n) (one sort). Does not panic.
    pub fn new(values: Vec<f64>) -> Result<Sample, Error> {
        if values.len() < 2 {
            return Err(Error::TooFewValues {
                n: values.len(),
                min: 2,
            });
        }
        if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(Error::NotFinite { index, value });
        }
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        Ok(Sample { values, sorted })
    }

    /// Validate a copy of `values` (see [`Sample::new`]).
    pub fn from_slice(values: &[f64]) -> Result<Sample, Error> {
        Sample::new(values.to_vec())
    }

    /// Number of values (always ≥ 2).
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Always false: a `Sample` holds at least two values. Present for clippy's
    /// `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The values in the order they were given.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// The values in ascending order.
    pub fn sorted(&self) -> &[f64] {
        &self.sorted
    }

    /// Smallest value. O(1).
    pub fn min(&self) -> f64 {
        self.sorted[0]
    }

    /// Largest value. O(1).
    pub fn max(&self) -> f64 {
        self.sorted[self.sorted.len() - 1]
    }

    /// Arithmetic mean. O(n).
    pub fn mean(&self) -> f64 {
        self.values.iter().sum::<f64>() / self.values.len() as f64
    }

    /// Sample standard deviation (n − 1 denominator). O(n).
    pub fn std_dev(&self) -> f64 {
        let mean = self.mean();
        let ss: f64 = self.values.iter().map(|v| (v - mean) * (v - mean)).sum();
        (ss / (self.values.len() - 1) as f64).sqrt()
    }

    /// Median (mean of the two middle values when n is even). O(1).
    pub fn median(&self) -> f64 {
        self.percentiles().median()
    }

    /// Median absolute deviation from the median, unscaled. O(n log n).
    pub fn mad(&self) -> f64 {
        let median = self.median();
        let mut dev: Vec<f64> = self.sorted.iter().map(|v| (v - median).abs()).collect();
        dev.sort_by(f64::total_cmp);
        Percentiles::new(&dev).median()
    }

    /// Percentiles over the sorted values. O(1) to build, O(1) per query.
    pub fn percentiles(&self) -> Percentiles<'_> {
        Percentiles::new(&self.sorted)
    }
}

/// Median of an unsorted slice, reordering it in place. O(n) expected.
///
/// The bootstrap calls this once per resample, so it uses selection rather
/// than a sort.
///
/// # Panics
/// If `values` is empty.
pub fn median_in_place(values: &mut [f64]) -> f64 {
    assert!(!values.is_empty(), "median of an empty slice");
    let n = values.len();
    let mid = n / 2;
    let (lower, &mut upper_mid, _) = values.select_nth_unstable_by(mid, f64::total_cmp);
    if n % 2 == 1 {
        upper_mid
    } else {
        let lower_mid = lower.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lower_mid + upper_mid) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_too_few_and_non_finite() {
        assert_eq!(
            Sample::new(vec![]),
            Err(Error::TooFewValues { n: 0, min: 2 })
        );
        assert_eq!(
            Sample::new(vec![1.0]),
            Err(Error::TooFewValues { n: 1, min: 2 })
        );
        assert!(matches!(
            Sample::new(vec![1.0, f64::NAN, 2.0]),
            Err(Error::NotFinite { index: 1, .. })
        ));
        assert!(matches!(
            Sample::new(vec![1.0, f64::INFINITY]),
            Err(Error::NotFinite { index: 1, .. })
        ));
    }

    #[test]
    fn summaries_of_a_fixed_sample() {
        let s = Sample::new(vec![5.0, 1.0, 4.0, 2.0, 3.0, 100.0]).unwrap();
        assert_eq!(s.values()[0], 5.0);
        assert_eq!(s.sorted(), &[1.0, 2.0, 3.0, 4.0, 5.0, 100.0]);
        assert_eq!(s.min(), 1.0);
        assert_eq!(s.max(), 100.0);
        assert_eq!(s.median(), 3.5);
        assert!((s.mean() - 115.0 / 6.0).abs() < 1e-12);
        // |x - 3.5| = 2.5 1.5 0.5 0.5 1.5 96.5 -> median 1.5
        assert_eq!(s.mad(), 1.5);
    }

    #[test]
    fn median_in_place_matches_sorted_median() {
        let mut odd = vec![9.0, 1.0, 5.0];
        assert_eq!(median_in_place(&mut odd), 5.0);
        let mut even = vec![9.0, 1.0, 5.0, 3.0];
        assert_eq!(median_in_place(&mut even), 4.0);
    }
}
