//! Comparing two runs cell by cell: ratio of medians, bootstrap CI, rank test,
//! Holm across the grid, and a verdict against an explicit noise threshold.
//!
//! A cell is a **regression** only when both hold:
//!
//! 1. the rank test says B differs from A after Holm's correction across
//!    every comparable cell of the grid (adjusted p < α), and
//! 2. the whole bootstrap confidence interval of median(B)/median(A) lies
//!    above 1 + noise.
//!
//! An **improvement** mirrors it (adjusted p < α and the whole interval below
//! 1 − noise). Anything else is **no change**. The first condition alone
//! flags real but tiny shifts that large samples make significant; back to
//! back runs of the same kernel differ by a percent or so through page
//! placement, frequency and cache state, which no within-run test can see.
//! The second condition alone would trust an interval without multiplicity
//! control. Requiring both is criterion's "significant *and* above the noise
//! threshold", with the noise threshold made explicit (`--noise`, default 2%).
//!
//! Times are compared, so a ratio above 1 means B is slower.

use std::fmt;

use crate::bootstrap::{
    derive_seed, ratio_of_medians_adjusted, ratio_of_medians_blocked, BootstrapOpts, Covariates,
    DEFAULT_RESAMPLES,
};
use crate::holm::holm;
use crate::mann_whitney::mann_whitney_u;
use crate::{check_confidence, Error, Sample};

/// Fewest samples per side for a verdict. Below that the rank test cannot
/// reach p < 0.05 at all after even a small Holm family, and the bootstrap
/// distribution of a median takes only a handful of values.
pub const MIN_SAMPLES: usize = 5;

/// Master seed used when the caller does not choose one: the bytes of
/// "ptelab" followed by 1. Fixed, so two invocations on the same database
/// print the same intervals.
pub const DEFAULT_SEED: u64 = 0x7074_656c_6162_0001;

/// Parameters of a grid comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompareOpts {
    /// Relative change that counts as noise, e.g. 0.02 for 2%.
    pub noise: f64,
    /// Family-wise significance level for Holm's procedure.
    pub alpha: f64,
    /// Confidence level of the bootstrap interval.
    pub confidence: f64,
    /// Bootstrap resamples per cell.
    pub resamples: usize,
    /// Master seed; cell i uses [`derive_seed`]`(seed, i)`.
    pub seed: u64,
    /// Fewest samples per side for a verdict.
    pub min_samples: usize,
}

impl Default for CompareOpts {
    fn default() -> CompareOpts {
        CompareOpts {
            noise: 0.02,
            alpha: 0.05,
            confidence: 0.95,
            resamples: DEFAULT_RESAMPLES,
            seed: DEFAULT_SEED,
            min_samples: MIN_SAMPLES,
        }
    }
}

impl CompareOpts {
    /// Check every parameter's domain.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming the first bad parameter.
    pub fn validate(&self) -> Result<(), Error> {
        check_confidence(self.confidence)?;
        if !(self.noise >= 0.0 && self.noise < 1.0) {
            return Err(Error::InvalidParameter {
                name: "noise",
                value: self.noise,
                accepted: "[0, 1), e.g. 0.02",
            });
        }
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return Err(Error::InvalidParameter {
                name: "alpha",
                value: self.alpha,
                accepted: "(0, 1), e.g. 0.05",
            });
        }
        if self.resamples < 100 {
            return Err(Error::InvalidParameter {
                name: "resamples",
                value: self.resamples as f64,
                accepted: "at least 100",
            });
        }
        if self.min_samples < 2 {
            return Err(Error::InvalidParameter {
                name: "min_samples",
                value: self.min_samples as f64,
                accepted: "at least 2",
            });
        }
        Ok(())
    }
}

/// Which side of a comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The baseline.
    A,
    /// The candidate.
    B,
}

/// Why a cell gets no verdict.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NotComparable {
    /// Either side has fewer than the minimum number of samples.
    TooFewSamples {
        /// Samples in A.
        a: usize,
        /// Samples in B.
        b: usize,
        /// Samples needed per side.
        min: usize,
    },
    /// The observed folio layouts differ, or one does not match its request
    /// (decided by the caller, which knows what a layout is).
    LayoutsDiffer(String),
    /// The cell exists in one run only.
    Missing {
        /// The side that lacks the cell.
        absent_from: Side,
    },
    /// A sample holds a value that a ratio of times cannot use (≤ 0, NaN).
    InvalidSamples(String),
    /// A replicated comparison has too few runs of the cell.
    TooFewRuns {
        /// Runs of A holding the cell.
        a: usize,
        /// Runs of B holding the cell.
        b: usize,
    },
}

impl fmt::Display for NotComparable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotComparable::TooFewSamples { a, b, min } => {
                write!(f, "too few samples ({a} vs {b}, need {min} each)")
            }
            NotComparable::LayoutsDiffer(why) => write!(f, "layouts differ: {why}"),
            NotComparable::Missing {
                absent_from: Side::A,
            } => f.write_str("only in B"),
            NotComparable::Missing {
                absent_from: Side::B,
            } => f.write_str("only in A"),
            NotComparable::InvalidSamples(why) => write!(f, "invalid samples: {why}"),
            NotComparable::TooFewRuns { a, b } => write!(
                f,
                "too few runs ({a} vs {b}; need one per side and {} in all)",
                crate::replicated::MIN_RUNS
            ),
        }
    }
}

/// The decision for one cell.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// B is slower: significant after Holm and the whole CI above 1 + noise.
    Regression,
    /// B is faster: significant after Holm and the whole CI below 1 − noise.
    Improvement,
    /// Neither: not significant, or not clearly beyond the noise threshold.
    NoChange,
    /// No verdict can be given, and why.
    NotComparable(NotComparable),
}

impl Verdict {
    /// Short name: "regression", "improvement", "no change", "not comparable".
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Regression => "regression",
            Verdict::Improvement => "improvement",
            Verdict::NoChange => "no change",
            Verdict::NotComparable(_) => "not comparable",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::NotComparable(why) => write!(f, "not comparable: {why}"),
            v => f.write_str(v.name()),
        }
    }
}

/// The numbers behind one cell's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// Median of A.
    pub median_a: f64,
    /// Median of B.
    pub median_b: f64,
    /// Samples in A.
    pub n_a: usize,
    /// Samples in B.
    pub n_b: usize,
    /// median(B)/median(A).
    pub ratio: f64,
    /// Bootstrap CI lower bound of the ratio.
    pub ci_low: f64,
    /// Bootstrap CI upper bound of the ratio.
    pub ci_high: f64,
    /// Confidence level of the CI.
    pub confidence: f64,
    /// Seed of this cell's bootstrap.
    pub seed: u64,
    /// Resamples drawn.
    pub resamples: usize,
    /// Two-sided Mann-Whitney p-value, before correction.
    pub p_value: f64,
    /// The drift slopes β_k, one per covariate, when the values were
    /// adjusted for machine drift (`crate::drift`; the ratio, interval and
    /// test are then on adjusted values); empty otherwise.
    pub drift_slopes: Vec<f64>,
}

impl Estimate {
    /// Relative change (ratio − 1), e.g. 0.036 for +3.6%.
    pub fn change(&self) -> f64 {
        self.ratio - 1.0
    }
}

/// Estimate the ratio, its interval and the rank-test p-value of one cell,
/// adjusted for machine drift when `cov` gives a covariate per block of each
/// side (`crate::drift`).
///
/// Cost: dominated by the bootstrap, O(resamples · (n_A + n_B)).
///
/// # Errors
/// As [`crate::bootstrap::ratio_of_medians`] (non-positive values, bad confidence or resamples),
/// and as [`ratio_of_medians_adjusted`] for a covariate that does not fit.
pub fn estimate(
    a: &Sample,
    b: &Sample,
    blocks: (&[usize], &[usize]),
    cov: Option<Covariates<'_>>,
    confidence: f64,
    resamples: usize,
    seed: u64,
) -> Result<Estimate, Error> {
    let opts = BootstrapOpts {
        resamples,
        confidence,
        seed,
    };
    let ci = match cov {
        Some(c) => ratio_of_medians_adjusted(a, blocks.0, b, blocks.1, c, &opts)?,
        None => ratio_of_medians_blocked(a, blocks.0, b, blocks.1, &opts)?,
    };
    // The rank test runs on the experimental units: with at least
    // `MIN_TEST_BLOCKS` blocks a side, the block medians (samples within a
    // block are pseudo-replicates of one instance, Hurlbert 1984), adjusted
    // for drift at the point estimate's slope; otherwise the samples.
    let adjust = |m: Sample, cov: Option<&[&[f64]]>, reference: &[f64]| match cov {
        Some(c) if !ci.drift_slopes.is_empty() => {
            let f = crate::drift::block_factors(c, reference, &ci.drift_slopes);
            Sample::new(m.values().iter().zip(&f).map(|(v, f)| v * f).collect()).unwrap_or(m)
        }
        _ => m,
    };
    let reference = cov.map_or_else(Vec::new, |c| crate::drift::reference(c.a));
    let mw = match (block_medians(a, blocks.0), block_medians(b, blocks.1)) {
        (Some(ma), Some(mb)) => mann_whitney_u(
            &adjust(ma, cov.map(|c| c.a), &reference),
            &adjust(mb, cov.map(|c| c.b), &reference),
        ),
        _ => mann_whitney_u(a, b),
    };
    Ok(Estimate {
        median_a: a.median(),
        median_b: b.median(),
        n_a: a.len(),
        n_b: b.len(),
        ratio: ci.estimate,
        ci_low: ci.low,
        ci_high: ci.high,
        confidence,
        seed,
        resamples,
        p_value: mw.p_value,
        drift_slopes: ci.drift_slopes,
    })
}

/// The verdict for an estimate whose Holm-adjusted p-value is `p_adjusted`.
/// O(1).
pub fn decide(est: &Estimate, p_adjusted: f64, noise: f64, alpha: f64) -> Verdict {
    decide_interval((est.ci_low, est.ci_high), p_adjusted, noise, alpha)
}

/// The verdict rule on its own: significant after Holm (`p_adjusted` <
/// `alpha`) and the whole interval `(low, high)` of the ratio beyond
/// 1 ± `noise`. Shared by every estimator (`crate::replicated` too). O(1).
pub fn decide_interval(
    (low, high): (f64, f64),
    p_adjusted: f64,
    noise: f64,
    alpha: f64,
) -> Verdict {
    if p_adjusted >= alpha {
        Verdict::NoChange
    } else if low > 1.0 + noise {
        Verdict::Regression
    } else if high < 1.0 - noise {
        Verdict::Improvement
    } else {
        Verdict::NoChange
    }
}

/// One cell to compare: both sides' samples, and a reason the caller already
/// knows for refusing a verdict (layouts differ, cell missing on one side).
#[derive(Clone, Copy, Debug)]
pub struct CellInput<'a> {
    /// Samples of A (may be empty when the cell is missing from A).
    pub a: &'a [f64],
    /// Samples of B.
    pub b: &'a [f64],
    /// Values per block of A, in order (empty: one block).
    pub a_blocks: &'a [usize],
    /// Values per block of B, in order (empty: one block).
    pub b_blocks: &'a [usize],
    /// A's machine-drift covariates, each one value per block (empty: no
    /// adjustment; see `crate::drift`). Used only when both sides have the
    /// same number of covariates and every one fits.
    pub a_cov: &'a [&'a [f64]],
    /// B's covariates.
    pub b_cov: &'a [&'a [f64]],
    /// Set when the caller refuses a verdict for a reason of its own.
    pub refuse: Option<&'a NotComparable>,
}

/// Fewest blocks a side needs before the rank test runs on block medians.
pub const MIN_TEST_BLOCKS: usize = 3;

/// Medians of the blocks of `s` (consecutive runs of `sizes` values), when
/// `sizes` partitions `s` into at least [`MIN_TEST_BLOCKS`] blocks.
fn block_medians(s: &Sample, sizes: &[usize]) -> Option<Sample> {
    if sizes.len() < MIN_TEST_BLOCKS || sizes.iter().sum::<usize>() != s.len() || sizes.contains(&0)
    {
        return None;
    }
    let mut start = 0;
    let medians = sizes
        .iter()
        .map(|&n| {
            let m = Sample::from_slice(&s.values()[start..start + n])
                .map_or(s.values()[start], |b| b.median());
            start += n;
            m
        })
        .collect();
    Sample::new(medians).ok()
}

/// The comparison of one cell.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// The estimate, whenever both sides have at least two valid values (also
    /// for cells without a verdict, so that a report can still show the
    /// numbers beside the reason).
    pub estimate: Option<Estimate>,
    /// Holm-adjusted p-value, for cells in the family (those with a verdict).
    pub p_adjusted: Option<f64>,
    /// The decision.
    pub verdict: Verdict,
}

/// Compare every cell of a grid. The Holm family is the set of cells that can
/// get a verdict (enough samples, not refused by the caller).
///
/// Cost: O(Σ resamples · (n_A + n_B)) over the cells, plus O(m log m) for Holm.
///
/// # Errors
/// [`Error::InvalidParameter`] when `opts` fails [`CompareOpts::validate`].
/// Bad samples do not fail the grid; they make their cell not comparable.
pub fn compare_grid(cells: &[CellInput<'_>], opts: &CompareOpts) -> Result<Vec<Comparison>, Error> {
    opts.validate()?;
    let mut out: Vec<Comparison> = Vec::with_capacity(cells.len());
    for (i, cell) in cells.iter().enumerate() {
        let seed = derive_seed(opts.seed, i as u64);
        let samples = Sample::from_slice(cell.a).and_then(|a| Ok((a, Sample::from_slice(cell.b)?)));
        let (est, invalid) = match samples {
            Ok((a, b)) => match estimate(
                &a,
                &b,
                (cell.a_blocks, cell.b_blocks),
                (!cell.a_cov.is_empty()
                    && cell.a_cov.len() == cell.b_cov.len()
                    && cell
                        .a_cov
                        .iter()
                        .all(|c| crate::drift::fits(a.len(), cell.a_blocks, c))
                    && cell
                        .b_cov
                        .iter()
                        .all(|c| crate::drift::fits(b.len(), cell.b_blocks, c)))
                .then_some(Covariates {
                    a: cell.a_cov,
                    b: cell.b_cov,
                }),
                opts.confidence,
                opts.resamples,
                seed,
            ) {
                Ok(e) => (Some(e), None),
                Err(e) => (None, Some(e.to_string())),
            },
            Err(Error::TooFewValues { .. }) => (None, None),
            Err(e) => (None, Some(e.to_string())),
        };
        let verdict = if let Some(why) = cell.refuse {
            Verdict::NotComparable(why.clone())
        } else if cell.a.len() < opts.min_samples || cell.b.len() < opts.min_samples {
            Verdict::NotComparable(NotComparable::TooFewSamples {
                a: cell.a.len(),
                b: cell.b.len(),
                min: opts.min_samples,
            })
        } else if let Some(why) = invalid {
            Verdict::NotComparable(NotComparable::InvalidSamples(why))
        } else {
            // Placeholder until Holm has seen the whole family.
            Verdict::NoChange
        };
        out.push(Comparison {
            estimate: est,
            p_adjusted: None,
            verdict,
        });
    }
    let family: Vec<usize> = (0..out.len())
        .filter(|&i| !matches!(out[i].verdict, Verdict::NotComparable(_)))
        .collect();
    let raw: Vec<f64> = family
        .iter()
        .map(|&i| {
            out[i]
                .estimate
                .as_ref()
                .expect("family cells have estimates")
                .p_value
        })
        .collect();
    for (&i, p_adj) in family.iter().zip(holm(&raw)) {
        let est = out[i]
            .estimate
            .as_ref()
            .expect("family cells have estimates");
        let verdict = decide(est, p_adj, opts.noise, opts.alpha);
        out[i].p_adjusted = Some(p_adj);
        out[i].verdict = verdict;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {

    #[test]
    fn rank_test_uses_block_medians() {
        // Ten blocks a side; within-block spread is tiny, so pooled samples
        // look wildly significant, but the blocks of A and B interleave.
        let mut a = Vec::new();
        let mut b = Vec::new();
        for k in 0..10 {
            let (la, lb) = (
                100.0 + (k % 2) as f64 * 30.0,
                100.0 + ((k + 1) % 3 == 0) as u8 as f64 * 30.0,
            );
            a.extend((0..20).map(|i| la + (i % 3) as f64 * 0.01));
            b.extend((0..20).map(|i| lb + (i % 3) as f64 * 0.01));
        }
        let (sa, sb) = (Sample::new(a).unwrap(), Sample::new(b).unwrap());
        let pooled = estimate(&sa, &sb, (&[], &[]), None, 0.95, 500, 1).unwrap();
        let blocked = estimate(&sa, &sb, (&[20; 10], &[20; 10]), None, 0.95, 500, 1).unwrap();
        assert!(pooled.p_value < 0.01, "{}", pooled.p_value);
        assert!(blocked.p_value > 0.05, "{}", blocked.p_value);
    }
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Timing-like noise: a log-normal body plus occasional slow outliers
    /// (an interrupt landing in a batch).
    fn noisy(rng: &mut ChaCha8Rng, n: usize, center: f64, spread: f64) -> Vec<f64> {
        (0..n)
            .map(|_| {
                // Box-Muller from two uniforms.
                let (u1, u2): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen());
                let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                let body = center * (spread * z).exp();
                if rng.gen_bool(0.03) {
                    body * rng.gen_range(1.2..3.0)
                } else {
                    body
                }
            })
            .collect()
    }

    fn opts() -> CompareOpts {
        CompareOpts {
            resamples: 1000,
            ..CompareOpts::default()
        }
    }

    fn run(a: &[f64], b: &[f64]) -> Comparison {
        compare_grid(
            &[CellInput {
                a,
                b,
                refuse: None,
                a_blocks: &[],
                b_blocks: &[],
                a_cov: &[],
                b_cov: &[],
            }],
            &opts(),
        )
        .unwrap()
        .remove(0)
    }

    #[test]
    fn clear_regression_and_improvement() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let a = noisy(&mut rng, 40, 1000.0, 0.01);
        let slow = noisy(&mut rng, 40, 1100.0, 0.01);
        let fast = noisy(&mut rng, 40, 900.0, 0.01);
        let r = run(&a, &slow);
        assert_eq!(r.verdict, Verdict::Regression, "{r:?}");
        let e = r.estimate.clone().unwrap();
        assert!(e.ci_low > 1.05 && e.ci_high < 1.15 && e.ci_low <= e.ratio && e.ratio <= e.ci_high);
        assert_eq!(run(&a, &fast).verdict, Verdict::Improvement);
    }

    #[test]
    fn significant_but_within_noise_is_no_change() {
        // +1%: clearly significant with 200 tight samples, but under 2% noise.
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let a = noisy(&mut rng, 200, 1000.0, 0.002);
        let b = noisy(&mut rng, 200, 1010.0, 0.002);
        let r = run(&a, &b);
        assert!(r.p_adjusted.unwrap() < 1e-6);
        assert_eq!(r.verdict, Verdict::NoChange);
    }

    #[test]
    fn large_but_not_significant_is_no_change() {
        // +10% medians, but five wildly spread samples each.
        let a = [100.0, 300.0, 1000.0, 3000.0, 9000.0];
        let b = [110.0, 330.0, 1100.0, 3300.0, 9900.0];
        let r = run(&a, &b);
        assert!(r.estimate.clone().unwrap().p_value > 0.05);
        assert_eq!(r.verdict, Verdict::NoChange);
    }

    #[test]
    fn too_few_and_refused_cells_are_not_comparable_and_leave_the_family() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let a = noisy(&mut rng, 30, 1000.0, 0.01);
        let b = noisy(&mut rng, 30, 1200.0, 0.01);
        let layouts = NotComparable::LayoutsDiffer("A 512x4K, B 8x256K".into());
        let cells = [
            CellInput {
                a: &a,
                b: &b,
                refuse: None,
                a_blocks: &[],
                b_blocks: &[],
                a_cov: &[],
                b_cov: &[],
            },
            CellInput {
                a: &a[..4],
                b: &b,
                refuse: None,
                a_blocks: &[],
                b_blocks: &[],
                a_cov: &[],
                b_cov: &[],
            },
            CellInput {
                a: &a,
                b: &b,
                refuse: Some(&layouts),
                a_blocks: &[],
                b_blocks: &[],
                a_cov: &[],
                b_cov: &[],
            },
            CellInput {
                a: &[],
                b: &b,
                refuse: Some(&NotComparable::Missing {
                    absent_from: Side::A,
                }),
                a_blocks: &[],
                b_blocks: &[],
                a_cov: &[],
                b_cov: &[],
            },
        ];
        let r = compare_grid(&cells, &opts()).unwrap();
        assert_eq!(r[0].verdict, Verdict::Regression);
        // Family of one: Holm leaves the p-value as is.
        assert_eq!(
            r[0].p_adjusted,
            Some(r[0].estimate.clone().unwrap().p_value)
        );
        assert_eq!(
            r[1].verdict,
            Verdict::NotComparable(NotComparable::TooFewSamples {
                a: 4,
                b: 30,
                min: 5
            })
        );
        assert!(r[1].estimate.is_some() && r[1].p_adjusted.is_none());
        assert_eq!(r[2].verdict, Verdict::NotComparable(layouts.clone()));
        assert!(r[2].estimate.is_some());
        assert!(r[3].estimate.is_none());
        assert_eq!(r[3].verdict.to_string(), "not comparable: only in B");
        assert_eq!(
            r[1].verdict.to_string(),
            "not comparable: too few samples (4 vs 30, need 5 each)"
        );
    }

    #[test]
    fn invalid_samples_are_not_comparable() {
        let r = run(&[1.0, 2.0, 3.0, 4.0, 0.0], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        assert!(matches!(
            r.verdict,
            Verdict::NotComparable(NotComparable::InvalidSamples(_))
        ));
    }

    #[test]
    fn refuses_bad_options() {
        for bad in [
            CompareOpts {
                noise: -0.1,
                ..opts()
            },
            CompareOpts {
                alpha: 0.0,
                ..opts()
            },
            CompareOpts {
                confidence: 1.0,
                ..opts()
            },
            CompareOpts {
                resamples: 5,
                ..opts()
            },
        ] {
            assert!(compare_grid(&[], &bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn seeds_are_per_cell_and_reproducible() {
        let a: Vec<f64> = (0..20).map(|i| 100.0 + i as f64).collect();
        let cells = [CellInput {
            a: &a,
            b: &a,
            refuse: None,
            a_blocks: &[],
            b_blocks: &[],
            a_cov: &[],
            b_cov: &[],
        }; 2];
        let x = compare_grid(&cells, &opts()).unwrap();
        let y = compare_grid(&cells, &opts()).unwrap();
        assert_eq!(x, y);
        let (s0, s1) = (
            x[0].estimate.as_ref().unwrap().seed,
            x[1].estimate.as_ref().unwrap().seed,
        );
        assert_ne!(s0, s1);
        assert_eq!(s0, derive_seed(DEFAULT_SEED, 0));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
        /// Swapping A and B inverts the ratio and mirrors the verdict; the
        /// p-value does not change.
        #[test]
        fn swapping_sides_mirrors_the_verdict(
            a in proptest::collection::vec(900.0f64..1100.0, 5..30),
            scale in 0.5f64..2.0,
        ) {
            let b: Vec<f64> = a.iter().enumerate().map(|(i, v)| v * scale + (i % 3) as f64).collect();
            let ab = run(&a, &b);
            let ba = run(&b, &a);
            let (e_ab, e_ba) = (ab.estimate.unwrap(), ba.estimate.unwrap());
            proptest::prop_assert!((e_ab.ratio * e_ba.ratio - 1.0).abs() < 1e-9);
            proptest::prop_assert!((e_ab.p_value - e_ba.p_value).abs() < 1e-12);
            let mirrored = match ab.verdict {
                Verdict::Regression => Verdict::Improvement,
                Verdict::Improvement => Verdict::Regression,
                ref v => v.clone(),
            };
            // The noise band is 1 ± noise, not symmetric in log space, so a
            // cell right at its edge may flip to no change; never to the
            // opposite verdict.
            proptest::prop_assert!(ba.verdict == mirrored || ba.verdict == Verdict::NoChange || mirrored == Verdict::NoChange,
                "{:?} vs {:?}", ab.verdict, ba.verdict);
        }
    }

    /// A/A simulation: grids of `cells` cells, A and B drawn from one
    /// distribution per cell, plus a run-to-run offset of the whole B run
    /// (σ = 0.7%, the "same kernel, next boot" drift that no within-run test
    /// sees). Returns how many grids flagged at least one cell with the 2%
    /// noise threshold, and how many would have without it.
    fn a_a_flagged(grids: usize, cells: usize, n: usize, resamples: usize) -> (usize, usize) {
        let mut rng = ChaCha8Rng::seed_from_u64(0xA_A);
        let opts = CompareOpts {
            resamples,
            ..CompareOpts::default()
        };
        let (mut flagged, mut flagged_without_noise) = (0, 0);
        let is_flag = |v: &Verdict| matches!(v, Verdict::Regression | Verdict::Improvement);
        for _ in 0..grids {
            let (u1, u2): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen());
            let drift =
                1.0 + 0.007 * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            let data: Vec<(Vec<f64>, Vec<f64>)> = (0..cells)
                .map(|c| {
                    let center = 1000.0 * (1 + c) as f64;
                    (
                        noisy(&mut rng, n, center, 0.01),
                        noisy(&mut rng, n, center * drift, 0.01),
                    )
                })
                .collect();
            let input: Vec<CellInput> = data
                .iter()
                .map(|(a, b)| CellInput {
                    a,
                    b,
                    refuse: None,
                    a_blocks: &[],
                    b_blocks: &[],
                    a_cov: &[],
                    b_cov: &[],
                })
                .collect();
            let r = compare_grid(&input, &opts).unwrap();
            flagged += usize::from(r.iter().any(|c| is_flag(&c.verdict)));
            flagged_without_noise += usize::from(r.iter().any(|c| {
                is_flag(&decide(
                    c.estimate.as_ref().unwrap(),
                    c.p_adjusted.unwrap(),
                    0.0,
                    opts.alpha,
                ))
            }));
        }
        eprintln!(
            "A/A: {flagged}/{grids} grids of {cells} cells flagged with the 2% noise threshold, \
             {flagged_without_noise}/{grids} without it"
        );
        (flagged, flagged_without_noise)
    }

    /// The verdict must flag no cell in at least 9 of 10 A/A grids.
    #[test]
    fn a_a_false_positive_rate() {
        let (flagged, without) = a_a_flagged(30, 10, 40, 200);
        assert!(flagged * 10 <= 30, "{flagged}/30 A/A grids flagged");
        // The noise threshold is what carries the A/A property once runs drift.
        assert!(without > flagged);
    }

    /// The full-size simulation (run with `--release --ignored`): 200 grids of
    /// 20 cells, 60 samples per side, 2000 resamples.
    #[test]
    #[ignore = "slow in debug builds; run with --release -- --ignored"]
    fn a_a_false_positive_rate_full() {
        let (flagged, _) = a_a_flagged(200, 20, 60, 2000);
        assert!(flagged * 10 <= 200, "{flagged}/200 A/A grids flagged");
    }
}
