//! Good or bad, from a step's figures: the endpoints set the threshold, and
//! a step is classified only when every replicate falls on one side of it.
//!
//! Both endpoints are measured first. They must differ beyond the noise
//! threshold (docs/statistics.md, "The verdict, and the noise threshold"),
//! and, when replicated, their replicates must not overlap; otherwise
//! there is nothing a bisect could find and it refuses to start. Under the
//! instruction metric (a TCG guest) figures repeat to about 0.3%
//! (docs/guests.md), so one measurement per step suffices; under a time
//! metric each step is replicated and a step whose replicates straddle the
//! threshold is skipped rather than guessed.

use serde::Serialize;

use crate::error::bail_usage;
use crate::record::Metric;

/// What a step's figures say.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "verdict", content = "why", rename_all = "lowercase")]
pub enum Verdict {
    Good,
    Bad,
    /// Neither: replicates on both sides, or no figure (build or boot
    /// failure), with the reason.
    Skip(String),
}

impl Verdict {
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Good => "good",
            Verdict::Bad => "bad",
            Verdict::Skip(_) => "skip",
        }
    }
}

/// The threshold between the endpoints, and the side bad is on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Classifier {
    pub good: f64,
    pub bad: f64,
    pub threshold: f64,
    pub metric: Metric,
}

/// Median of a non-empty list.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn range(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// A per-call figure with its unit, as messages print it.
pub fn figure(v: f64, metric: Metric) -> String {
    format!("{} {}", crate::text::format::ns(v), metric.per_call_unit())
}

impl Classifier {
    /// The classifier of two measured endpoints, or a usage error saying by
    /// how much they differ when that is within `noise` (a fraction) or
    /// their replicates overlap. `threshold` overrides the midpoint and
    /// must lie strictly between the endpoints' figures.
    pub fn new(
        good: &[f64],
        bad: &[f64],
        metric: Metric,
        noise: f64,
        threshold: Option<f64>,
    ) -> anyhow::Result<Classifier> {
        assert!(!good.is_empty() && !bad.is_empty(), "endpoints measured");
        let (g, b) = (median(good), median(bad));
        let diff = (b - g).abs() / g.min(b);
        let show = |v| figure(v, metric);
        if diff <= noise {
            bail_usage!(
                "the endpoints are not separated beyond the noise: good {} and bad {} differ by {:.2}% \
                 (the threshold is {:.1}%): nothing to bisect with this command; choose endpoints \
                 (or a size) where the figure changes",
                show(g),
                show(b),
                diff * 100.0,
                noise * 100.0
            );
        }
        let ((glo, ghi), (blo, bhi)) = (range(good), range(bad));
        if (b > g && blo <= ghi) || (b < g && bhi >= glo) {
            bail_usage!(
                "the endpoints' replicates overlap: good {}..{} and bad {}..{} (medians differ by {:.2}%): \
                 nothing to bisect; measure a larger change or a steadier figure",
                show(glo),
                show(ghi),
                show(blo),
                show(bhi),
                diff * 100.0
            );
        }
        let threshold = match threshold {
            None => (g + b) / 2.0,
            Some(t) => {
                let (lo, hi) = if b > g { (ghi, blo) } else { (bhi, glo) };
                if !(t > lo && t < hi) {
                    bail_usage!(
                        "--threshold {t} is not between the endpoints: pass a figure between {} and {}",
                        crate::text::format::ns(lo),
                        crate::text::format::ns(hi)
                    );
                }
                t
            }
        };
        Ok(Classifier {
            good: g,
            bad: b,
            threshold,
            metric,
        })
    }

    /// Good when every figure is on the good side of the threshold, bad when
    /// every one is on the bad side, else skip.
    pub fn classify(&self, figures: &[f64]) -> Verdict {
        let is_bad = |x: f64| {
            if self.bad > self.good {
                x > self.threshold
            } else {
                x < self.threshold
            }
        };
        let bad = figures.iter().filter(|&&x| is_bad(x)).count();
        match bad {
            _ if figures.is_empty() => Verdict::Skip("no figure".into()),
            0 => Verdict::Good,
            n if n == figures.len() => Verdict::Bad,
            n => Verdict::Skip(format!(
                "{n} of {} replicates beyond the threshold {}: ambiguous",
                figures.len(),
                crate::text::format::ns(self.threshold)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: Metric = Metric::Instructions;

    #[test]
    fn separated_endpoints_set_the_midpoint() {
        let c = Classifier::new(&[370_670.0], &[880_000.0], I, 0.02, None).unwrap();
        assert_eq!(c.threshold, 625_335.0);
        assert_eq!(c.classify(&[371_000.0]), Verdict::Good);
        assert_eq!(c.classify(&[879_000.0]), Verdict::Bad);
        // An improvement bisects too: bad below good.
        let d = Classifier::new(&[880_000.0], &[370_670.0], I, 0.02, None).unwrap();
        assert_eq!(d.classify(&[371_000.0]), Verdict::Bad);
        assert_eq!(d.classify(&[900_000.0]), Verdict::Good);
    }

    #[test]
    fn endpoints_within_the_noise_are_refused_with_their_difference() {
        let e = Classifier::new(&[1000.0], &[1010.0], I, 0.02, None).unwrap_err();
        assert!(crate::error::is_usage(&e));
        assert!(e.to_string().contains("differ by 1.00%"), "{e}");
        assert!(e.to_string().contains("instr/call"), "{e}");
        // Medians apart, replicates overlapping.
        let e = Classifier::new(
            &[100.0, 104.0, 130.0],
            &[125.0, 140.0, 150.0],
            Metric::Time,
            0.02,
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("replicates overlap"), "{e}");
        assert!(e.to_string().contains("ns/call"), "{e}");
    }

    #[test]
    fn replicates_straddling_the_threshold_are_skipped() {
        let c = Classifier::new(
            &[100.0, 101.0, 102.0],
            &[200.0, 201.0, 199.0],
            Metric::Time,
            0.02,
            None,
        )
        .unwrap();
        assert_eq!(c.threshold, 150.5);
        assert_eq!(c.classify(&[120.0, 140.0, 130.0]), Verdict::Good);
        assert_eq!(c.classify(&[160.0, 190.0, 155.0]), Verdict::Bad);
        let Verdict::Skip(why) = c.classify(&[140.0, 160.0, 145.0]) else {
            panic!("not skipped")
        };
        assert!(why.contains("1 of 3 replicates"), "{why}");
    }

    #[test]
    fn a_given_threshold_must_lie_between_the_endpoints() {
        let c = Classifier::new(&[100.0], &[200.0], I, 0.02, Some(120.0)).unwrap();
        assert_eq!(c.classify(&[125.0]), Verdict::Bad);
        for t in [90.0, 100.0, 200.0, 250.0] {
            let e = Classifier::new(&[100.0], &[200.0], I, 0.02, Some(t)).unwrap_err();
            assert!(crate::error::is_usage(&e), "{t}");
        }
    }
}
