//! The Mann-Whitney U (Wilcoxon rank-sum) test, two-sided.
//!
//! Pool both samples, rank them (tied values get the mean of their ranks),
//! and count U_A = R_A − n_A(n_A + 1)/2, the number of (a, b) pairs with
//! a > b plus half the ties. Under the null hypothesis that A and B come from
//! one distribution, U_A has mean n_A·n_B/2 and, with ties,
//! variance n_A·n_B/12 · [(N + 1) − Σ(t³ − t)/(N(N − 1))] for tie groups of
//! size t (Lehmann, *Nonparametrics*, 1975, §1.4). We use the normal
//! approximation with a continuity correction of ½, accurate for n_A, n_B ≥ 8
//! or so; below that ptelab does not give a verdict anyway (too few samples).
//!
//! The test is about ranks only, so a few wild outliers do not move it, and it
//! needs no normality, which timings never have. Google Benchmark's
//! `compare.py` uses the same test.

use statrs::distribution::{ContinuousCDF, Normal};

use crate::Sample;

/// The outcome of a two-sided rank-sum test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MannWhitney {
    /// U statistic of A: pairs (a, b) with a > b, ties counted ½.
    pub u_a: f64,
    /// U statistic of B; u_a + u_b = n_A·n_B.
    pub u_b: f64,
    /// Standardised statistic of A (continuity-corrected); positive when A
    /// tends to be larger than B.
    pub z: f64,
    /// Two-sided p-value from the normal approximation; 1 when every value is
    /// tied.
    pub p_value: f64,
}

/// Two-sided Mann-Whitney U test of A against B.
///
/// Cost: O((n_A + n_B) log(n_A + n_B)) time and O(n_A + n_B) memory (one sort
/// of the pooled values). Does not panic.
pub fn mann_whitney_u(a: &Sample, b: &Sample) -> MannWhitney {
    let (na, nb) = (a.len(), b.len());
    let n = na + nb;
    // (value, from A?)
    let mut pooled: Vec<(f64, bool)> = a
        .values()
        .iter()
        .map(|&v| (v, true))
        .chain(b.values().iter().map(|&v| (v, false)))
        .collect();
    pooled.sort_by(|x, y| x.0.total_cmp(&y.0));

    let mut rank_sum_a = 0.0;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i + 1;
        while j < n && pooled[j].0 == pooled[i].0 {
            j += 1;
        }
        // Ranks i+1 ..= j share their mean.
        let mid_rank = (i + 1 + j) as f64 / 2.0;
        let from_a = pooled[i..j].iter().filter(|p| p.1).count();
        rank_sum_a += mid_rank * from_a as f64;
        let t = (j - i) as f64;
        tie_term += t * t * t - t;
        i = j;
    }

    let (na_f, nb_f, n_f) = (na as f64, nb as f64, n as f64);
    let u_a = rank_sum_a - na_f * (na_f + 1.0) / 2.0;
    let u_b = na_f * nb_f - u_a;
    let mean = na_f * nb_f / 2.0;
    let variance = na_f * nb_f / 12.0 * ((n_f + 1.0) - tie_term / (n_f * (n_f - 1.0)));
    if variance <= 0.0 {
        return MannWhitney {
            u_a,
            u_b,
            z: 0.0,
            p_value: 1.0,
        };
    }
    let diff = u_a - mean;
    let z = diff.signum() * (diff.abs() - 0.5).max(0.0) / variance.sqrt();
    MannWhitney {
        u_a,
        u_b,
        z,
        p_value: two_sided_p(z),
    }
}

/// Two-sided tail probability of the standard normal, P(|Z| ≥ |z|), clamped
/// to [0, 1]. O(1).
fn two_sided_p(z: f64) -> f64 {
    (2.0 * Normal::standard().sf(z.abs())).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(v: &[f64]) -> Sample {
        Sample::from_slice(v).unwrap()
    }

    #[test]
    fn matches_scipy_on_fixed_inputs() {
        // scipy.stats.mannwhitneyu(a, b, alternative='two-sided',
        // method='asymptotic', use_continuity=True)
        let a = s(&[1.1, 2.2, 3.3, 4.4, 5.5, 6.6, 7.7, 8.8]);
        let b = s(&[5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
        let r = mann_whitney_u(&a, &b);
        assert_eq!(r.u_a, 10.0);
        assert_eq!(r.u_a + r.u_b, 64.0);
        // mean 32, var 64*17/12 = 90.667, z = -(22-0.5)/9.522 = -2.2579
        assert!((r.z + 2.257_9).abs() < 1e-3, "{r:?}");
        assert!((r.p_value - 0.023_95).abs() < 2e-4, "{r:?}");
    }

    #[test]
    fn ties_are_corrected() {
        let a = s(&[1.0, 1.0, 2.0, 2.0, 3.0]);
        let b = s(&[2.0, 3.0, 3.0, 4.0, 4.0]);
        let r = mann_whitney_u(&a, &b);
        // Ranks: 1,1 -> 1.5; 2,2,2 -> 4; 3,3,3 -> 7; 4,4 -> 9.5.
        // R_A = 1.5+1.5+4+4+7 = 18, U_A = 3. Tie term = 6+24+24+6 = 60.
        assert_eq!(r.u_a, 3.0);
        let var: f64 = 25.0 / 12.0 * (11.0 - 60.0 / 90.0);
        assert!((r.z - (-(12.5 - 3.0 - 0.5) / var.sqrt())).abs() < 1e-12);
    }

    #[test]
    fn normal_tail_matches_tables() {
        // Reference values: scipy.special.erfc(abs(z) / sqrt(2)).
        assert!((two_sided_p(0.0) - 1.0).abs() < 1e-9);
        assert!((two_sided_p(1.959_963_984_540_054) - 0.05).abs() < 1e-9);
        assert!((two_sided_p(-3.290_526_731_491_926) - 0.001).abs() < 1e-9);
        assert!((two_sided_p(1.0) - 0.317_310_507_862_914_1).abs() < 1e-9);
    }

    #[test]
    fn all_tied_is_p_one() {
        let r = mann_whitney_u(&s(&[5.0; 6]), &s(&[5.0; 7]));
        assert_eq!(r.p_value, 1.0);
        assert_eq!(r.z, 0.0);
    }

    proptest! {
        #[test]
        fn symmetric_and_bounded(a in prop::collection::vec(0.0f64..100.0, 2..40), b in prop::collection::vec(0.0f64..100.0, 2..40)) {
            let (a, b) = (Sample::new(a).unwrap(), Sample::new(b).unwrap());
            let ab = mann_whitney_u(&a, &b);
            let ba = mann_whitney_u(&b, &a);
            prop_assert!((ab.p_value - ba.p_value).abs() < 1e-12);
            prop_assert!((ab.u_a - ba.u_b).abs() < 1e-9);
            prop_assert!((0.0..=1.0).contains(&ab.p_value));
        }
    }
}
