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
//! threshold is skipped rather than guessed. A mechanism counter
//! (`--metric tlbi`, `calls:FUNCTION`, …) is counted under TCG too, and
//! classified the same way, in its own unit.

use serde::{Deserialize, Serialize};

use crate::error::bail_usage;
use crate::record::{Counter, Metric};
use crate::text::format;

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

/// What a bisect's figures are: the bench cell's figure per call in the
/// guests' metric, or a mechanism counter of it (then counted under TCG,
/// `metric` instructions). Old state files have no counter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quantity {
    pub metric: Metric,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counter: Option<Counter>,
}

impl Quantity {
    #[cfg(test)]
    pub fn figure(metric: Metric) -> Quantity {
        Quantity {
            metric,
            counter: None,
        }
    }

    /// `instructions`, `time`, or the counter's name (`calls:vm_normal_page`).
    pub fn name(&self) -> String {
        self.counter
            .as_ref()
            .map_or_else(|| self.metric.name().to_string(), Counter::name)
    }

    /// The step table's column: `instr_per_call`, `tlbi/call`, …
    pub fn column(&self) -> String {
        match &self.counter {
            None => self.metric.per_call_column().into(),
            Some(c) => c.unit(),
        }
    }

    /// The unit after a figure: `instr/call`, `vm_normal_page calls/call`.
    pub fn unit(&self) -> String {
        match &self.counter {
            None => self.metric.per_call_unit().into(),
            Some(c) => c.unit(),
        }
    }

    /// The figure in words, for a heading.
    pub fn words(&self) -> String {
        match &self.counter {
            None => self.metric.per_call_words().into(),
            Some(c) => c.words(),
        }
    }

    /// What was measured and how, in a sentence's words.
    pub fn how(&self) -> String {
        match (&self.counter, self.metric) {
            (Some(c), _) => format!(
                "{}, counted exactly by ptelab's QEMU plugin in TCG guests",
                c.words()
            ),
            (None, Metric::Instructions) => {
                "guest instructions per call (TCG: counted, not timed)".into()
            }
            (None, Metric::Time) => "nanoseconds per call (KVM guest)".into(),
        }
    }

    /// A number as the table prints it: a counter with up to 2 decimals,
    /// other figures as the seeds print theirs.
    pub fn number(&self, v: f64) -> String {
        match self.counter {
            None => format::ns(v),
            Some(_) => format::counter(Some((v * 100.0).round() / 100.0)),
        }
    }

    /// A number with its unit, as messages print it.
    pub fn with_unit(&self, v: f64) -> String {
        format!("{} {}", self.number(v), self.unit())
    }
}

/// The threshold between the endpoints, and the side bad is on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Classifier {
    pub good: f64,
    pub bad: f64,
    pub threshold: f64,
    #[serde(flatten)]
    pub quantity: Quantity,
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

impl Classifier {
    /// The classifier of two measured endpoints, or a usage error saying by
    /// how much they differ when that is within `noise` (a fraction) or
    /// their replicates overlap. `threshold` overrides the midpoint and
    /// must lie strictly between the endpoints' figures.
    pub fn new(
        good: &[f64],
        bad: &[f64],
        quantity: Quantity,
        noise: f64,
        threshold: Option<f64>,
    ) -> anyhow::Result<Classifier> {
        assert!(!good.is_empty() && !bad.is_empty(), "endpoints measured");
        let (g, b) = (median(good), median(bad));
        // A counter may be 0 on one side (a function that no longer runs):
        // any change from 0 is separated, none at all is not.
        let diff = if b == g {
            0.0
        } else {
            (b - g).abs() / g.min(b)
        };
        let show = |v| quantity.with_unit(v);
        if diff <= noise {
            if quantity.counter.is_some() {
                let by = if diff == 0.0 {
                    "equal".to_string()
                } else {
                    format!(
                        "{:.2}% apart, within --noise {:.1}%",
                        diff * 100.0,
                        noise * 100.0
                    )
                };
                bail_usage!(
                    "the mechanism does not change between the endpoints: good {} and bad {} \
                     ({by}): nothing to bisect with this metric; choose a counter that changes \
                     (`ptelab compare --functions` of the two endpoints' runs lists them) or \
                     endpoints where this one does",
                    show(g),
                    show(b),
                );
            }
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
                        quantity.number(lo),
                        quantity.number(hi)
                    );
                }
                t
            }
        };
        Ok(Classifier {
            good: g,
            bad: b,
            threshold,
            quantity,
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
                self.quantity.number(self.threshold)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i() -> Quantity {
        Quantity::figure(Metric::Instructions)
    }

    fn t() -> Quantity {
        Quantity::figure(Metric::Time)
    }

    fn counter(name: &str) -> Quantity {
        Quantity {
            metric: Metric::Instructions,
            counter: Some(Counter::parse(name).unwrap()),
        }
    }

    #[test]
    fn separated_endpoints_set_the_midpoint() {
        let c = Classifier::new(&[370_670.0], &[880_000.0], i(), 0.02, None).unwrap();
        assert_eq!(c.threshold, 625_335.0);
        assert_eq!(c.classify(&[371_000.0]), Verdict::Good);
        assert_eq!(c.classify(&[879_000.0]), Verdict::Bad);
        // An improvement bisects too: bad below good.
        let d = Classifier::new(&[880_000.0], &[370_670.0], i(), 0.02, None).unwrap();
        assert_eq!(d.classify(&[371_000.0]), Verdict::Bad);
        assert_eq!(d.classify(&[900_000.0]), Verdict::Good);
    }

    #[test]
    fn endpoints_within_the_noise_are_refused_with_their_difference() {
        let e = Classifier::new(&[1000.0], &[1010.0], i(), 0.02, None).unwrap_err();
        assert!(crate::error::is_usage(&e));
        assert!(e.to_string().contains("differ by 1.00%"), "{e}");
        assert!(e.to_string().contains("instr/call"), "{e}");
        // Medians apart, replicates overlapping.
        let e = Classifier::new(
            &[100.0, 104.0, 130.0],
            &[125.0, 140.0, 150.0],
            t(),
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
            t(),
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
        let c = Classifier::new(&[100.0], &[200.0], i(), 0.02, Some(120.0)).unwrap();
        assert_eq!(c.classify(&[125.0]), Verdict::Bad);
        for t in [90.0, 100.0, 200.0, 250.0] {
            let e = Classifier::new(&[100.0], &[200.0], i(), 0.02, Some(t)).unwrap_err();
            assert!(crate::error::is_usage(&e), "{t}");
        }
    }

    #[test]
    fn a_counter_bisects_at_the_midpoint_in_its_own_unit() {
        // vm_normal_page per mprotect of 100 order-0 PTEs: none, then one each.
        let c = Classifier::new(
            &[0.0],
            &[100.0],
            counter("calls:vm_normal_page"),
            0.02,
            None,
        )
        .unwrap();
        assert_eq!(c.threshold, 50.0);
        assert_eq!(c.classify(&[0.0]), Verdict::Good);
        assert_eq!(c.classify(&[100.0]), Verdict::Bad);
        assert_eq!(
            c.quantity.with_unit(c.threshold),
            "50 vm_normal_page calls/call"
        );
        // Fewer TLB invalidations is a change too (bad below good).
        let d = Classifier::new(&[1.0], &[0.0], counter("tlbi"), 0.02, None).unwrap();
        assert_eq!(d.threshold, 0.5);
        assert_eq!(d.classify(&[0.0]), Verdict::Bad);
        assert_eq!(d.quantity.number(0.25), "0.25");
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["metric"], "instructions");
        assert_eq!(json["counter"], "calls:vm_normal_page");
    }

    #[test]
    fn a_counter_that_does_not_change_is_refused_with_both_figures() {
        for (g, b, needle) in [
            (100.0, 100.0, "(equal)"),
            (0.0, 0.0, "(equal)"),
            (100.0, 101.0, "1.00% apart, within --noise 2.0%"),
        ] {
            let e = Classifier::new(&[g], &[b], counter("calls:vm_normal_page"), 0.02, None)
                .unwrap_err();
            assert!(crate::error::is_usage(&e));
            let e = e.to_string();
            assert!(e.contains("the mechanism does not change"), "{e}");
            assert!(e.contains(needle), "{e}");
            assert!(
                e.contains(&format!("good {g} vm_normal_page calls/call and bad {b} ")),
                "{e}"
            );
        }
        // A smaller change is bisected when --noise allows it.
        assert!(Classifier::new(&[100.0], &[101.0], counter("tlbi"), 0.005, None).is_ok());
    }
}
