//! Distribution-free confidence interval of the median from order statistics.
//!
//! Whatever the distribution of the values (skewed, heavy-tailed, with
//! outliers, as timings always are), the number of values below the true
//! median is Binomial(n, ½). So the interval between the j-th smallest and the
//! j-th largest value, [X₍ⱼ₎, X₍ₙ₋ⱼ₊₁₎], misses the median with probability
//! 2·P(B ≤ j − 1), B ~ Binomial(n, ½). We take the largest j whose miss
//! probability is at most 1 − confidence (the interval is conservative: its
//! true coverage, [`MedianCi::coverage`], is at least the confidence asked for).
//! Reference: Conover, *Practical Nonparametric Statistics* (3rd ed.), §3.2;
//! Hahn & Meeker, *Statistical Intervals*, §5.2.
//!
//! The runner stops sampling once [`MedianCi::relative_half_width`] of the
//! 95% interval is under 1%.

use crate::{check_confidence, Error, Sample};

/// The median with its order-statistic confidence interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MedianCi {
    /// Sample median.
    pub median: f64,
    /// Lower bound: the `lower_rank`-th smallest value.
    pub low: f64,
    /// Upper bound: the `upper_rank`-th smallest value.
    pub high: f64,
    /// Confidence level asked for.
    pub confidence: f64,
    /// Exact coverage of [low, high] for a continuous distribution:
    /// 1 − 2·P(B ≤ lower_rank − 1). At least `confidence`, except when the
    /// sample is too small to reach it (n ≤ 5 for 95%), where the interval is
    /// [min, max] and this says how much less it covers.
    pub coverage: f64,
    /// 1-based rank of the lower bound.
    pub lower_rank: usize,
    /// 1-based rank of the upper bound (n − lower_rank + 1).
    pub upper_rank: usize,
}

impl MedianCi {
    /// The larger distance from the median to either bound.
    pub fn half_width(&self) -> f64 {
        (self.median - self.low).max(self.high - self.median)
    }

    /// [`half_width`](Self::half_width) over |median|; infinite when the
    /// median is 0.
    pub fn relative_half_width(&self) -> f64 {
        if self.median == 0.0 {
            f64::INFINITY
        } else {
            self.half_width() / self.median.abs()
        }
    }

    /// Whether the interval reaches the confidence asked for.
    pub fn reaches_confidence(&self) -> bool {
        self.coverage >= self.confidence
    }
}

/// Confidence interval of the median of `sample` at level `confidence`.
///
/// Cost: O(n) (a partial binomial CDF; the sample is already sorted).
///
/// # Errors
/// [`Error::InvalidParameter`] if `confidence` is not in (0, 1).
pub fn median_ci(sample: &Sample, confidence: f64) -> Result<MedianCi, Error> {
    check_confidence(confidence)?;
    let n = sample.len();
    let (j, tail) = lower_rank(n, confidence);
    let sorted = sample.sorted();
    Ok(MedianCi {
        median: sample.median(),
        low: sorted[j - 1],
        high: sorted[n - j],
        confidence,
        coverage: 1.0 - 2.0 * tail,
        lower_rank: j,
        upper_rank: n - j + 1,
    })
}

/// The largest 1-based rank j with 2·P(B ≤ j − 1) ≤ 1 − confidence, and that
/// tail P(B ≤ j − 1); j = 1 with tail P(B = 0) when no rank qualifies.
fn lower_rank(n: usize, confidence: f64) -> (usize, f64) {
    let half_alpha = (1.0 - confidence) / 2.0;
    let mut cdf = 0.0;
    let mut j = 0;
    for (k, p) in BinomialHalf::new(n).enumerate() {
        if cdf + p > half_alpha || k >= n / 2 {
            break;
        }
        cdf += p;
        j = k + 1;
    }
    if j == 0 {
        (1, 0.5f64.powi(n as i32))
    } else {
        (j, cdf)
    }
}

/// P(B = 0), P(B = 1), ... for B ~ Binomial(n, ½), computed in log space so
/// that large n does not underflow 2⁻ⁿ before the binomial coefficient grows.
struct BinomialHalf {
    n: usize,
    k: usize,
    ln_choose: f64,
}

impl BinomialHalf {
    fn new(n: usize) -> BinomialHalf {
        BinomialHalf {
            n,
            k: 0,
            ln_choose: 0.0,
        }
    }
}

impl Iterator for BinomialHalf {
    type Item = f64;
    fn next(&mut self) -> Option<f64> {
        if self.k > self.n {
            return None;
        }
        let p = (self.ln_choose - self.n as f64 * std::f64::consts::LN_2).exp();
        self.ln_choose += ((self.n - self.k) as f64).ln() - ((self.k + 1) as f64).ln();
        self.k += 1;
        Some(p)
    }
}

/// P(B ≤ k) for B ~ Binomial(n, ½). O(k).
pub fn binomial_half_cdf(n: usize, k: usize) -> f64 {
    BinomialHalf::new(n)
        .take(k.min(n) + 1)
        .sum::<f64>()
        .min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(n: usize) -> Sample {
        Sample::new((1..=n).map(|i| i as f64).collect()).unwrap()
    }

    #[test]
    fn binomial_cdf_known_values() {
        assert!((binomial_half_cdf(10, 1) - 11.0 / 1024.0).abs() < 1e-12);
        assert!((binomial_half_cdf(20, 5) - 21700.0 / 1_048_576.0).abs() < 1e-12);
        assert!((binomial_half_cdf(5000, 2500) - 0.505_641).abs() < 1e-5);
    }

    #[test]
    fn table_ranks() {
        // Conover's table / the usual 95% ranks: n=10 -> (2, 9), n=20 -> (6, 15),
        // n=100 -> (40, 61).
        let ci = median_ci(&sample(10), 0.95).unwrap();
        assert_eq!((ci.lower_rank, ci.upper_rank), (2, 9));
        assert!((ci.coverage - (1.0 - 2.0 * 11.0 / 1024.0)).abs() < 1e-12);
        let ci = median_ci(&sample(20), 0.95).unwrap();
        assert_eq!((ci.lower_rank, ci.upper_rank), (6, 15));
        assert_eq!((ci.low, ci.high), (6.0, 15.0));
        let ci = median_ci(&sample(100), 0.95).unwrap();
        assert_eq!((ci.lower_rank, ci.upper_rank), (40, 61));
        assert!(ci.coverage >= 0.95);
    }

    #[test]
    fn small_samples_say_they_fall_short() {
        let ci = median_ci(&sample(5), 0.95).unwrap();
        assert_eq!((ci.low, ci.high), (1.0, 5.0));
        assert!((ci.coverage - (1.0 - 2.0 / 32.0)).abs() < 1e-12);
        assert!(!ci.reaches_confidence());
        assert!(median_ci(&sample(6), 0.95).unwrap().reaches_confidence());
    }

    #[test]
    fn large_samples_do_not_underflow() {
        let ci = median_ci(&sample(20_000), 0.95).unwrap();
        assert!(ci.reaches_confidence());
        // Normal approximation: n/2 - 1.96 sqrt(n)/2 ~ 9861.
        assert!(
            (ci.lower_rank as i64 - 9861).abs() <= 2,
            "{}",
            ci.lower_rank
        );
    }

    #[test]
    fn refuses_bad_confidence() {
        assert!(median_ci(&sample(10), 1.0).is_err());
        assert!(median_ci(&sample(10), 0.0).is_err());
    }

    proptest! {
        #[test]
        fn ordered_and_contains_median(v in prop::collection::vec(0.0f64..1e6, 2..300), conf in 0.5f64..0.999) {
            let s = Sample::new(v).unwrap();
            let ci = median_ci(&s, conf).unwrap();
            prop_assert!(ci.low <= ci.median && ci.median <= ci.high);
            prop_assert!(ci.lower_rank <= ci.upper_rank);
            prop_assert!(ci.coverage <= 1.0 && ci.coverage > 0.0);
            if ci.lower_rank > 1 {
                prop_assert!(ci.coverage >= conf);
            }
        }
    }
}
