//! Modified Z-scores (hyperfine `src/outlier_detection.rs`).
//!
//! Iglewicz & Hoaglin, *How to Detect and Handle Outliers* (ASQC Basic
//! References in Quality Control, vol. 16, 1993): Mᵢ = 0.6745·(xᵢ − x̃)/MAD,
//! with x̃ the median and MAD the median absolute deviation from it. The
//! factor 0.6745 (the 75th percentile of the standard normal) makes the expected MAD on
//! normal data equal to 0.6745·σ, so Mᵢ reads like an ordinary Z-score, but
//! neither x̃ nor MAD is moved by the outliers it is looking for.

use crate::Sample;

/// |Mᵢ| above this labels a value an outlier.
///
/// Iglewicz and Hoaglin recommend 3.5: on normal data a modified Z-score
/// beyond ±3.5 is about as rare as an ordinary Z-score beyond ±3.5 (well
/// under one value in a thousand), so in a clean sample of a few hundred
/// timings this rule labels almost nothing, while one interrupted batch
/// stands out by tens. hyperfine uses the same value.
pub const OUTLIER_THRESHOLD: f64 = 3.5;

/// Normal-consistency factor Φ⁻¹(0.75) of the modified Z-score.
const MAD_FACTOR: f64 = 0.6745;

/// When MAD is 0 (more than half the values equal), Iglewicz & Hoaglin's
/// fallback divides by the mean absolute deviation scaled by √(2/π) ≈ 0.7979
/// (the expected ratio of mean absolute deviation to σ on normal data).
const MEAN_AD_FACTOR: f64 = 0.7979;

/// Modified Z-score of every value, in the sample's original order.
///
/// When both MAD and the mean absolute deviation are 0 (all values equal)
/// every score is 0. Cost: O(n log n). Does not panic.
pub fn modified_z_scores(sample: &Sample) -> Vec<f64> {
    let median = sample.median();
    let mad = sample.mad();
    let values = sample.values();
    let scale = if mad > 0.0 {
        mad / MAD_FACTOR
    } else {
        let mean_ad = values.iter().map(|v| (v - median).abs()).sum::<f64>() / values.len() as f64;
        mean_ad / MEAN_AD_FACTOR
    };
    if scale == 0.0 {
        return vec![0.0; values.len()];
    }
    values.iter().map(|v| (v - median) / scale).collect()
}

/// Indices (in original order) of values whose |modified Z| exceeds
/// [`OUTLIER_THRESHOLD`]. Cost: O(n log n).
pub fn outliers(sample: &Sample) -> Vec<usize> {
    modified_z_scores(sample)
        .iter()
        .enumerate()
        .filter(|(_, z)| z.abs() > OUTLIER_THRESHOLD)
        .map(|(i, _)| i)
        .collect()
}

/// Share of values labelled outliers, in [0, 1]. Cost: O(n log n).
pub fn outlier_fraction(sample: &Sample) -> f64 {
    outliers(sample).len() as f64 / sample.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_known_outliers() {
        // hyperfine's test_detect_outliers, in spirit: a tight cluster plus two strays.
        let s = Sample::new(vec![
            50.0, 51.0, 49.0, 50.5, 49.5, 50.2, 49.8, 80.0, 10.0, 50.1,
        ])
        .unwrap();
        assert_eq!(outliers(&s), vec![7, 8]);
        assert!((outlier_fraction(&s) - 0.2).abs() < 1e-12);
    }

    #[test]
    fn scores_are_signed_and_scaled() {
        let s = Sample::new(vec![1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        // median 3, MAD 1 -> M = 0.6745 (x - 3)
        let z = modified_z_scores(&s);
        assert!((z[0] + 2.0 * 0.6745).abs() < 1e-12);
        assert!((z[4] - 2.0 * 0.6745).abs() < 1e-12);
        assert!(outliers(&s).is_empty());
    }

    #[test]
    fn zero_mad_falls_back_to_mean_deviation() {
        let s = Sample::new(vec![10.0, 10.0, 10.0, 10.0, 10.0, 11.0, 100.0]).unwrap();
        assert_eq!(s.mad(), 0.0);
        assert_eq!(outliers(&s), vec![6]);
        let flat = Sample::new(vec![3.0; 8]).unwrap();
        assert!(modified_z_scores(&flat).iter().all(|&z| z == 0.0));
    }
}
