//! Holm's step-down correction for many comparisons at once.
//!
//! A sweep compares tens of cells; at a 5% level each, a grid of 40 unchanged
//! cells would flag two on average. Holm (*A simple sequentially rejective
//! multiple test procedure*, Scand. J. Statist. 6, 1979) controls the
//! family-wise error rate, the chance of flagging *any* unchanged cell, at α
//! without assuming the cells are independent, and is uniformly more powerful
//! than Bonferroni. Sort the m p-values ascending, p₍₁₎ ≤ … ≤ p₍ₘ₎; the
//! adjusted value of the i-th is max over j ≤ i of min(1, (m − j + 1)·p₍ⱼ₎).
//! A cell is significant when its adjusted p-value is below α.

/// Holm-adjusted p-values, in the order given.
///
/// Cost: O(m log m). An empty input gives an empty output.
///
/// # Panics
/// If a p-value is NaN or outside [0, 1].
pub fn holm(p_values: &[f64]) -> Vec<f64> {
    for &p in p_values {
        assert!((0.0..=1.0).contains(&p), "p-value {p} outside [0, 1]");
    }
    let m = p_values.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&i, &j| p_values[i].total_cmp(&p_values[j]));
    let mut adjusted = vec![0.0; m];
    let mut running_max: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        let scaled = ((m - rank) as f64 * p_values[i]).min(1.0);
        running_max = running_max.max(scaled);
        adjusted[i] = running_max;
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        // R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm")
        //    -> 0.03 0.06 0.06 0.02
        let adj = holm(&[0.01, 0.04, 0.03, 0.005]);
        let want = [0.03, 0.06, 0.06, 0.02];
        for (a, w) in adj.iter().zip(want) {
            assert!((a - w).abs() < 1e-12, "{adj:?}");
        }
        assert!(holm(&[]).is_empty());
        assert_eq!(holm(&[0.7]), vec![0.7]);
    }

    #[test]
    #[should_panic(expected = "outside [0, 1]")]
    fn refuses_nan() {
        holm(&[0.1, f64::NAN]);
    }

    proptest! {
        #[test]
        fn monotone_bounded_and_above_raw(p in prop::collection::vec(0.0f64..=1.0, 0..50)) {
            let adj = holm(&p);
            for i in 0..p.len() {
                prop_assert!(adj[i] >= p[i] && adj[i] <= 1.0);
                for j in 0..p.len() {
                    if p[i] <= p[j] {
                        prop_assert!(adj[i] <= adj[j]);
                    }
                }
            }
        }
    }
}
