//! Percentiles of a sorted sample, linearly interpolated between order
//! statistics (criterion `src/stats/univariate/percentiles.rs`; the same rule
//! as NumPy's default and R's type 7).

/// A view of ascending, finite values (usually [`crate::Sample::sorted`]).
#[derive(Clone, Copy, Debug)]
pub struct Percentiles<'a> {
    sorted: &'a [f64],
}

impl<'a> Percentiles<'a> {
    /// Wrap an ascending slice.
    ///
    /// # Panics
    /// If `sorted` is empty. In debug builds, also if it is not ascending.
    pub fn new(sorted: &'a [f64]) -> Percentiles<'a> {
        assert!(!sorted.is_empty(), "percentiles of an empty slice");
        debug_assert!(
            sorted.windows(2).all(|w| w[0] <= w[1]),
            "percentiles need sorted input"
        );
        Percentiles { sorted }
    }

    /// The `p`-th percentile, `p` in [0, 100]. O(1).
    ///
    /// With n values, percentile p sits at rank h = (n − 1)·p/100 and is
    /// interpolated between the values at ⌊h⌋ and ⌈h⌉.
    ///
    /// # Panics
    /// If `p` is NaN or outside [0, 100].
    pub fn at(&self, p: f64) -> f64 {
        assert!(
            (0.0..=100.0).contains(&p),
            "percentile {p} outside [0, 100]"
        );
        let n = self.sorted.len();
        let h = (n - 1) as f64 * p / 100.0;
        let lo = h.floor() as usize;
        let hi = h.ceil() as usize;
        let frac = h - lo as f64;
        self.sorted[lo] + (self.sorted[hi] - self.sorted[lo]) * frac
    }

    /// The median (50th percentile). O(1).
    pub fn median(&self) -> f64 {
        self.at(50.0)
    }

    /// First quartile, median and third quartile. O(1).
    pub fn quartiles(&self) -> (f64, f64, f64) {
        (self.at(25.0), self.at(50.0), self.at(75.0))
    }

    /// Interquartile range Q3 − Q1. O(1).
    pub fn iqr(&self) -> f64 {
        self.at(75.0) - self.at(25.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn interpolates_like_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        let p = Percentiles::new(&v);
        assert_eq!(p.at(0.0), 1.0);
        assert_eq!(p.at(100.0), 4.0);
        assert_eq!(p.median(), 2.5);
        assert_eq!(p.at(25.0), 1.75);
        assert_eq!(p.quartiles(), (1.75, 2.5, 3.25));
        assert_eq!(p.iqr(), 1.5);
    }

    #[test]
    #[should_panic(expected = "outside [0, 100]")]
    fn refuses_out_of_range() {
        Percentiles::new(&[1.0, 2.0]).at(101.0);
    }

    proptest! {
        #[test]
        fn monotone_and_bounded(mut v in prop::collection::vec(-1e6f64..1e6, 1..60), p in 0.0f64..100.0, q in 0.0f64..100.0) {
            v.sort_by(f64::total_cmp);
            let pc = Percentiles::new(&v);
            let (lo, hi) = if p <= q { (p, q) } else { (q, p) };
            prop_assert!(pc.at(lo) <= pc.at(hi));
            prop_assert!(pc.at(lo) >= v[0] && pc.at(hi) <= v[v.len() - 1]);
        }
    }
}
