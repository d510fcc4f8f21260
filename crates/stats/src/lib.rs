//! Statistics for ptelab: validated samples, robust summaries, outlier labels,
//! confidence intervals and the A/B comparison behind `ptelab compare`.
//!
//! This crate is pure: no file system, no clock, no global RNG. Every random
//! quantity (the bootstrap) is drawn from a ChaCha generator seeded by the
//! caller, and the seed travels with the result so an interval can be
//! recomputed bit for bit. The method is explained in prose in
//! `docs/statistics.md`; the module split follows criterion.rs
//! (`src/stats/univariate/`).
//!
//! - [`sample`]: the [`Sample`] newtype (n ≥ 2, finite values) and its
//!   summaries.
//! - [`percentiles`]: linear-interpolated percentiles of a sorted slice.
//! - [`outliers`]: the modified Z-score ([`outliers::mad`]) and Tukey's
//!   fences ([`outliers::tukey`]). Outliers are labelled, never dropped.
//! - [`median_ci`]: the distribution-free confidence interval of the median
//!   from order statistics (the runner's stop rule).
//! - [`bootstrap`]: seeded percentile bootstrap of the ratio of medians.
//! - [`drift`]: adjusting for machine drift with a per-block covariate
//!   (within-run slope on logs).
//! - [`mann_whitney`]: the rank-sum test, normal approximation with tie and
//!   continuity corrections.
//! - [`holm`]: Holm's step-down correction across the cells of a grid.
//! - [`repeatability`]: a machine's between-run repeatability coefficient
//!   from A/A comparisons (`ptelab calibrate`).
//! - [`bias`]: the spread of an exact figure over setups that differ only in
//!   what the code under test does not depend on (`ptelab calibrate --guest`).
//! - [`replicated`]: comparing sets of runs, one value per run (Student's
//!   pooled t on ln run medians).
//! - [`fit`]: linear cost models fitted on relative residuals, with which
//!   costs and predictions the data determines (`ptelab model --predict`).
//! - [`compare`]: one typed [`compare::Comparison`] per cell with a
//!   [`compare::Verdict`] decided against an explicit noise threshold.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod bias;
#[cfg(feature = "analysis")]
pub mod bootstrap;
#[cfg(feature = "analysis")]
pub mod compare;
pub mod drift;
#[cfg(feature = "analysis")]
pub mod fit;
pub mod holm;
#[cfg(feature = "analysis")]
pub mod mann_whitney;
pub mod median_ci;
pub mod outliers;
pub mod percentiles;
pub mod repeatability;
#[cfg(feature = "analysis")]
pub mod replicated;
pub mod sample;

pub use sample::Sample;

/// Errors for inputs a caller can get wrong (a sample too small, a NaN, a
/// confidence level outside (0, 1)).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Fewer values than the statistic needs.
    #[error("a sample needs at least {min} values, got {n}")]
    TooFewValues {
        /// Values given.
        n: usize,
        /// Values needed.
        min: usize,
    },
    /// A value is NaN or infinite.
    #[error("sample value #{index} is not a finite number ({value})")]
    NotFinite {
        /// Position of the offending value in the input.
        index: usize,
        /// The value itself.
        value: f64,
    },
    /// A value is zero or negative where only positive values make sense
    /// (a ratio of times).
    #[error("sample value #{index} is not above zero ({value})")]
    NotPositive {
        /// Position of the offending value in the input.
        index: usize,
        /// The value itself.
        value: f64,
    },
    /// A parameter is outside its domain.
    #[error("{name} = {value} is outside {accepted}")]
    InvalidParameter {
        /// Parameter name.
        name: &'static str,
        /// The value given.
        value: f64,
        /// The accepted range, in words.
        accepted: &'static str,
    },
}

/// Check that a confidence level lies strictly between 0 and 1.
pub(crate) fn check_confidence(confidence: f64) -> Result<(), Error> {
    if confidence > 0.0 && confidence < 1.0 {
        Ok(())
    } else {
        Err(Error::InvalidParameter {
            name: "confidence",
            value: confidence,
            accepted: "(0, 1), e.g. 0.95",
        })
    }
}
