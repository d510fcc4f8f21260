//! The bias of an exact measurement: how far one figure moves when only
//! things unrelated to the code under test change (setup randomization,
//! Mytkowicz et al., "Producing wrong data without doing anything obviously
//! wrong!", ASPLOS 2009).
//!
//! A QEMU TCG guest counts instructions exactly: one boot repeats to the last
//! digit, so no within-run statistic sees anything. What moves the figure is
//! the setup: the guest's memory layout, its random seed, the length of its
//! kernel command line. K boots that differ only in such things give K
//! figures of one cell; their spread is the bias a single boot carries.
//!
//! A verdict compares two figures, each from one boot, so the bias it must
//! clear is the largest change setup alone made between two boots: the
//! range, `max / min − 1` ([`Spread::range`]). The maximum, because with
//! K = 5 there is no tail to take a quantile of, and a verdict should not
//! call a change that two setups produced by themselves. The largest
//! deviation of one boot from the median of the K figures,
//! `max |x_i / median − 1|`, is kept beside it: how far one figure strays
//! from its kernel's typical one (about half the range when boots spread
//! evenly).

use crate::percentiles::Percentiles;
use crate::Error;

/// Fewest boots a spread is estimated from.
pub const MIN_BOOTS: usize = 2;

/// The spread of one cell's figures over boots.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spread {
    /// Median of the boots' figures.
    pub median: f64,
    /// Largest |figure / median − 1| (0.0066 = 0.66%).
    pub max_deviation: f64,
    /// Smallest figure.
    pub min: f64,
    /// Largest figure.
    pub max: f64,
    /// Boots it rests on.
    pub n: usize,
}

impl Spread {
    /// max / min − 1: the largest change between two boots' figures (the
    /// bias a verdict must clear).
    pub fn range(&self) -> f64 {
        self.max / self.min - 1.0
    }
}

/// The spread of `figures` (one per boot; positive and finite).
pub fn spread(figures: &[f64]) -> Result<Spread, Error> {
    if figures.len() < MIN_BOOTS {
        return Err(Error::TooFewValues {
            n: figures.len(),
            min: MIN_BOOTS,
        });
    }
    for (index, &value) in figures.iter().enumerate() {
        if !value.is_finite() {
            return Err(Error::NotFinite { index, value });
        }
        if value <= 0.0 {
            return Err(Error::NotPositive { index, value });
        }
    }
    let mut sorted = figures.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = Percentiles::new(&sorted).median();
    let max_deviation = sorted
        .iter()
        .map(|x| (x / median - 1.0).abs())
        .fold(0.0, f64::max);
    Ok(Spread {
        median,
        max_deviation,
        min: sorted[0],
        max: sorted[sorted.len() - 1],
        n: sorted.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_boots_have_no_spread() {
        let s = spread(&[38_821.0; 5]).unwrap();
        assert_eq!(s.max_deviation, 0.0);
        assert_eq!((s.median, s.n, s.range()), (38_821.0, 5, 0.0));
    }

    #[test]
    fn the_largest_deviation_from_the_median_of_boots() {
        // The cell: 38,821 and 38,566 instructions per call, with
        // three boots between.
        let s = spread(&[38_821.0, 38_566.0, 38_700.0, 38_750.0, 38_690.0]).unwrap();
        assert_eq!(s.median, 38_700.0);
        let expect = (38_566.0f64 / 38_700.0 - 1.0).abs();
        assert!((s.max_deviation - expect).abs() < 1e-15, "{s:?}");
        assert!((s.range() - (38_821.0 / 38_566.0 - 1.0)).abs() < 1e-15);
        // One wild boot moves the spread, not the centre.
        let s = spread(&[100.0, 100.0, 100.0, 100.0, 150.0]).unwrap();
        assert_eq!((s.median, s.max_deviation), (100.0, 0.5));
    }

    #[test]
    fn two_boots_deviate_by_half_their_difference_each_way() {
        // The median of two is their mean.
        let s = spread(&[99.0, 101.0]).unwrap();
        assert_eq!(s.median, 100.0);
        assert!((s.max_deviation - 0.01).abs() < 1e-12);
    }

    #[test]
    fn bad_figures_are_refused() {
        assert!(matches!(spread(&[1.0]), Err(Error::TooFewValues { .. })));
        assert!(matches!(
            spread(&[1.0, f64::NAN]),
            Err(Error::NotFinite { index: 1, .. })
        ));
        assert!(matches!(
            spread(&[1.0, 0.0]),
            Err(Error::NotPositive { index: 1, .. })
        ));
    }
}
