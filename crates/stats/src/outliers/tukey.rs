//! Tukey's fences, labelled as criterion does (`src/stats/univariate/outliers/tukey.rs`).
//!
//! With quartiles Q1, Q3 and IQR = Q3 − Q1, the inner fences are
//! Q1 − 1.5·IQR and Q3 + 1.5·IQR and the outer fences use 3·IQR (Tukey,
//! *Exploratory Data Analysis*, 1977). A value between an inner and an outer
//! fence is a *mild* outlier, beyond an outer fence a *severe* one. For a
//! normal distribution the inner fences sit at ±2.7σ, so about 0.7% of clean
//! values are labelled mild.

use crate::Sample;

/// Multiplier of the IQR for the inner fences.
pub const MILD: f64 = 1.5;
/// Multiplier of the IQR for the outer fences.
pub const SEVERE: f64 = 3.0;

/// The four fences, ascending.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fences {
    /// Q1 − 3·IQR.
    pub low_severe: f64,
    /// Q1 − 1.5·IQR.
    pub low_mild: f64,
    /// Q3 + 1.5·IQR.
    pub high_mild: f64,
    /// Q3 + 3·IQR.
    pub high_severe: f64,
}

/// Where a value falls relative to the fences.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Label {
    /// Below the lower outer fence.
    LowSevere,
    /// Between the lower outer and inner fences.
    LowMild,
    /// Inside the inner fences.
    NotAnOutlier,
    /// Between the upper inner and outer fences.
    HighMild,
    /// Above the upper outer fence.
    HighSevere,
}

impl Label {
    /// True for every label but [`Label::NotAnOutlier`].
    pub fn is_outlier(self) -> bool {
        self != Label::NotAnOutlier
    }
}

/// Counts per label.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Values below the lower outer fence.
    pub low_severe: usize,
    /// Values between the lower fences.
    pub low_mild: usize,
    /// Values between the upper fences.
    pub high_mild: usize,
    /// Values above the upper outer fence.
    pub high_severe: usize,
}

impl Counts {
    /// All outliers, mild and severe.
    pub fn total(&self) -> usize {
        self.low_severe + self.low_mild + self.high_mild + self.high_severe
    }
}

/// A sample's fences and the label of each value, in original order.
#[derive(Clone, Debug, PartialEq)]
pub struct Labeled {
    /// The fences used.
    pub fences: Fences,
    /// One label per value, in the sample's original order.
    pub labels: Vec<Label>,
}

impl Labeled {
    /// Counts per label.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for l in &self.labels {
            match l {
                Label::LowSevere => c.low_severe += 1,
                Label::LowMild => c.low_mild += 1,
                Label::HighMild => c.high_mild += 1,
                Label::HighSevere => c.high_severe += 1,
                Label::NotAnOutlier => {}
            }
        }
        c
    }
}

/// The fences of `sample`. O(1).
pub fn fences(sample: &Sample) -> Fences {
    let (q1, _, q3) = sample.percentiles().quartiles();
    let iqr = q3 - q1;
    Fences {
        low_severe: q1 - SEVERE * iqr,
        low_mild: q1 - MILD * iqr,
        high_mild: q3 + MILD * iqr,
        high_severe: q3 + SEVERE * iqr,
    }
}

/// Label every value of `sample`. O(n). Does not panic.
pub fn classify(sample: &Sample) -> Labeled {
    let f = fences(sample);
    let labels = sample
        .values()
        .iter()
        .map(|&x| {
            if x < f.low_severe {
                Label::LowSevere
            } else if x < f.low_mild {
                Label::LowMild
            } else if x > f.high_severe {
                Label::HighSevere
            } else if x > f.high_mild {
                Label::HighMild
            } else {
                Label::NotAnOutlier
            }
        })
        .collect();
    Labeled { fences: f, labels }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_a_fixed_sample() {
        // 1..=9 plus two strays: interpolated quartiles 2.5 and 7.5, IQR 5.
        let s = Sample::new(vec![
            1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 20.0, -30.0,
        ])
        .unwrap();
        let l = classify(&s);
        let (q1, _, q3) = s.percentiles().quartiles();
        assert_eq!((q1, q3), (2.5, 7.5));
        assert_eq!(l.fences.high_mild, 15.0);
        assert_eq!(l.fences.high_severe, 22.5);
        assert_eq!(l.labels[9], Label::HighMild);
        assert_eq!(l.labels[10], Label::LowSevere);
        assert_eq!(
            l.counts(),
            Counts {
                low_severe: 1,
                low_mild: 0,
                high_mild: 1,
                high_severe: 0
            }
        );
        assert_eq!(l.counts().total(), 2);
        assert!(l.labels[..9].iter().all(|x| !x.is_outlier()));
    }
}
