//! The standard normal distribution, as far as the rank test needs it.

/// Complementary error function erfc(x) = 1 − erf(x).
///
/// Chebyshev-fitted rational approximation from Press et al., *Numerical
/// Recipes in C* (2nd ed.), §6.2 (`erfcc`): fractional error below 1.2e-7
/// everywhere, which is far finer than any p-value is read. O(1).
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let ans = t * poly.exp();
    if x >= 0.0 {
        ans
    } else {
        2.0 - ans
    }
}

/// Φ(z), the standard normal cumulative distribution function. O(1).
pub fn cdf(z: f64) -> f64 {
    0.5 * erfc(-z / std::f64::consts::SQRT_2)
}

/// Two-sided tail probability P(|Z| ≥ |z|) = erfc(|z|/√2), clamped to [0, 1]. O(1).
pub fn two_sided_p(z: f64) -> f64 {
    erfc(z.abs() / std::f64::consts::SQRT_2).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // Reference values from any table of Φ.
        assert!((cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((cdf(1.96) - 0.975_002_1).abs() < 1e-6);
        assert!((cdf(-1.0) - 0.158_655_25).abs() < 1e-6);
        assert!((two_sided_p(1.959_964) - 0.05).abs() < 1e-6);
        assert!((two_sided_p(3.290_527) - 0.001).abs() < 1e-7);
        assert!((erfc(3.0) - 2.209_049_7e-5).abs() / 2.209_049_7e-5 < 1.2e-7 * 2.0);
    }
}
