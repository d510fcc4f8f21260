//! The evidence a claim is judged on: guest cells on the kernels that
//! bracket a change, model counters, and the words that report them.

use ptelab_model::workload::ModelOutcome;

use super::{judge_with, noise_pct, Word, FLAT_PCT};
use crate::analysis::bias::{self, within, BiasUsed, GuestCell};
use crate::guest::source::Version;
use crate::guests::GuestEvidence;
pub(super) use crate::predicted::At;
use crate::record::Metric;
use crate::workload::Arch;
use crate::workload::{FolioSpec, WorkloadKind};
use crate::{ClaimRow, Evidence};

pub(super) fn row(seed: &str, claim: &str) -> ClaimRow {
    ClaimRow {
        seed: seed.into(),
        claim: claim.into(),
        published: None,
        measured: None,
        model: None,
        predicted: None,
        verdict: String::new(),
        uncalibrated: Vec::new(),
    }
}

/// Per-call value of a model counter.
pub(super) fn per_call(o: &ModelOutcome, name: &str) -> f64 {
    o.per_call().get(name).copied().unwrap_or(0.0)
}

/// A counter summed over the calls whose label contains `label`.
pub(super) fn on_call(o: &ModelOutcome, label: &str, name: &str) -> f64 {
    o.calls
        .iter()
        .filter(|c| c.label.contains(label))
        .map(|c| c.counters.per_call(1).get(name).copied().unwrap_or(0.0))
        .sum()
}

/// One cell measured on the kernels before and after a change.
#[derive(Clone, Debug)]
pub(super) struct Delta {
    pub(super) before: Version,
    pub(super) after: Version,
    pub(super) a: f64,
    pub(super) b: f64,
    pub(super) metric: Metric,
    /// Instruction counts: the cell's guest bias (`calibrate --guest`), or
    /// why there is none and the command that measures it.
    pub(super) bias: Option<Result<BiasUsed, String>>,
}

impl Delta {
    pub(super) fn pct(&self) -> f64 {
        (self.b / self.a - 1.0) * 100.0
    }

    /// The smallest change (percent) that is more than the metric's noise:
    /// the cell's guest bias when calibrated.
    pub(super) fn noise_pct(&self) -> f64 {
        match &self.bias {
            Some(Ok(b)) => b.bias * 100.0,
            _ => noise_pct(self.metric),
        }
    }

    /// Whether the change stays within the cell's guest bias.
    pub(super) fn within_bias(&self) -> bool {
        matches!(&self.bias, Some(Ok(b)) if within(self.b / self.a, b.bias))
    }

    /// "a -> b (+x%)", with the guest bias the change was judged against.
    pub(super) fn figures(&self) -> String {
        let bias = match &self.bias {
            Some(Ok(b)) if self.within_bias() => format!(", {}", b.within_words()),
            Some(Ok(b)) => format!(", guest bias {}", b.words()),
            // The command that calibrates it is said once per claim
            // (`measured_line`).
            Some(Err(_)) => ", guest bias not calibrated".into(),
            None => String::new(),
        };
        format!(
            "{} -> {} ({}{bias})",
            value(self.a, self.metric),
            value(self.b, self.metric),
            crate::text::format::signed_pct(self.pct(), 1)
        )
    }

    /// The rule of [`judge`] with this cell's guest bias as the noise: a
    /// change within it reproduces only a published "no change".
    pub(super) fn judge(&self, published: f64) -> Word {
        if self.within_bias() {
            return if published.abs() < FLAT_PCT {
                Word::Reproduced
            } else {
                Word::NotReproduced
            };
        }
        judge_with(published, self.pct(), self.noise_pct())
    }
}

pub(super) fn value(v: f64, m: Metric) -> String {
    match m {
        Metric::Instructions => format!("{v:.0}"),
        Metric::Time => crate::text::format::nanos(v),
    }
}

/// What a guest comparison was: arch, kernels, unit.
pub(super) fn guests_words(arch: Arch, d: &Delta) -> String {
    format!(
        "{} guests {} -> {}, {}",
        arch.name(),
        d.before,
        d.after,
        d.metric.per_call_words()
    )
}

/// "<arch> guests A -> B, <unit><what>: <parts>", or the parts alone (each
/// saying why it is missing) when no cell was compared.
pub(super) fn measured_line(arch: Arch, d: Option<Delta>, what: &str, parts: &[String]) -> String {
    match d {
        Some(d) => {
            let remedy = match &d.bias {
                Some(Err(why)) => format!(" ({why})"),
                _ => String::new(),
            };
            format!(
                "{}{what}: {}{remedy}",
                guests_words(arch, &d),
                parts.join("; ")
            )
        }
        None => parts.join("; "),
    }
}

/// One cell on the kernels that bracket change `key` among those measured.
#[allow(clippy::too_many_arguments)]
pub(super) fn delta(
    g: &GuestEvidence,
    arch: Arch,
    key: &str,
    w: WorkloadKind,
    size: u64,
    folio: FolioSpec,
    phase: Option<&str>,
) -> Result<Delta, String> {
    let (before, after) = g.bracket(arch, w, key).map_err(|why| {
        if g.versions(arch, w).is_empty() {
            g.why_missing(arch, None, w)
        } else {
            format!("{} guests: {why}", arch.name())
        }
    })?;
    let cell = |v: Version| {
        g.cell(arch, v, w, size, folio, phase)
            .ok_or_else(|| g.why_missing(arch, Some(v), w))
    };
    let (ca, cb) = (cell(before)?, cell(after)?);
    let metric = g.run(arch, after, w).map(|r| r.metric).unwrap_or_default();
    let bias = (metric == Metric::Instructions).then(|| {
        let runs = [g.run(arch, before, w), g.run(arch, after, w)];
        let found = runs.map(|r| {
            r.and_then(|r| {
                bias::find(
                    &g.biases,
                    &GuestCell {
                        release: &r.release,
                        arch,
                        workload: w,
                        size_bytes: size,
                        folio,
                        phase,
                    },
                )
            })
        });
        let missing: Vec<String> = runs
            .iter()
            .zip(&found)
            .filter(|(_, f)| f.is_none())
            .filter_map(|(r, _)| r.map(|r| r.kernel.clone()))
            .collect();
        let [fa, fb] = found;
        bias::for_pair(fa, fb).ok_or_else(|| bias::not_calibrated(&missing, arch, w, size, folio))
    });
    Ok(Delta {
        before,
        after,
        a: ca.ns_per_call.median,
        b: cb.ns_per_call.median,
        metric,
        bias,
    })
}

/// The arches whose guests decide a claim about both: those asked for
/// (every arch when none was, so that each row says why it is unmeasured).
pub(super) fn guest_arches(ev: &Evidence) -> Vec<Arch> {
    if ev.guests.asked.is_empty() {
        Arch::ALL.to_vec()
    } else {
        Arch::ALL
            .into_iter()
            .filter(|a| ev.guests.asked.contains(a))
            .collect()
    }
}

/// Said of a measured difference that falls short: the two kernels differ
/// by whole releases, not by the seed's change alone.
pub(super) fn confound(d: &Delta) -> String {
    format!(
        "{} and {} differ by more than this change (every other commit between them counts too)",
        d.before, d.after
    )
}

/// The verdict line: the word, then why.
pub(super) fn verdict(word: Word, why: &str) -> String {
    if why.is_empty() {
        word.text().to_string()
    } else {
        format!("{}: {why}", word.text())
    }
}

/// Published T1/T2/T3 changes against the measured ones on `arch`.
pub(super) fn per_folio_claim(
    ev: &Evidence,
    arch: Arch,
    key: &str,
    w: WorkloadKind,
    size: u64,
    parts: &[(&str, FolioSpec, f64)],
    phase: Option<&str>,
) -> (Vec<String>, Vec<Word>, Option<Delta>) {
    let mut measured = Vec::new();
    let mut words = Vec::new();
    let mut any = None;
    for (name, folio, published) in parts {
        match delta(&ev.guests, arch, key, w, size, *folio, phase) {
            Ok(d) => {
                let word = d.judge(*published);
                measured.push(format!("{name} {}", d.figures()));
                words.push(word);
                any = Some(d);
            }
            Err(why) => {
                measured.push(format!("{name}: {why}"));
                words.push(Word::NotMeasured);
            }
        }
    }
    (measured, words, any)
}

/// "published T1 -69.0%, T2 -65.0%, T3 +10.0%" for the verdict line.
pub(super) fn published_pcts(parts: &[(&str, FolioSpec, f64)]) -> String {
    parts
        .iter()
        .map(|(n, _, p)| format!("{n} {p:+.1}%"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn pct(before: f64, after: f64) -> f64 {
    (after / before - 1.0) * 100.0
}

/// The cost model's line for `cells` of `w` on `arch`, on the kernels that
/// bracket change `key` (the cells the measured line compares); `None` when
/// they were not measured, which the measured line says.
pub(super) fn predicted_line(
    ev: &Evidence,
    arch: Arch,
    key: &str,
    w: WorkloadKind,
    cells: &[At],
) -> Option<String> {
    let bracket = ev.guests.bracket(arch, w, key).ok()?;
    ev.predicted.between(&ev.guests, arch, bracket, w, cells)
}

/// The lines of several arches as one.
pub(super) fn joined(lines: impl IntoIterator<Item = Option<String>>) -> Option<String> {
    let v: Vec<String> = lines.into_iter().flatten().collect();
    (!v.is_empty()).then(|| v.join(". "))
}

/// The cells of [`per_folio_claim`]'s parts.
pub(super) fn folio_cells<'a>(
    size: u64,
    parts: &[(&str, FolioSpec, f64)],
    phase: Option<&'a str>,
) -> Vec<At<'a>> {
    parts
        .iter()
        .map(|(name, folio, _)| At::new(*name, size, *folio, phase))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn used(bias: f64) -> BiasUsed {
        BiasUsed {
            bias,
            kernel: "debian:6.18.15".into(),
            arch: Arch::Arm64,
            size_bytes: 4096,
            exact: true,
        }
    }

    /// Seed 003's arm64 4K NONE->RW cell: -1.7%.
    fn delta(bias: Option<Result<BiasUsed, String>>) -> Delta {
        Delta {
            before: Version::parse("6.18.15").unwrap(),
            after: Version::parse("6.19.6").unwrap(),
            a: 4292.0,
            b: 4219.0,
            metric: Metric::Instructions,
            bias,
        }
    }

    #[test]
    fn a_change_within_the_guest_bias_has_no_direction() {
        let d = delta(Some(Ok(used(0.02))));
        assert!(d.within_bias());
        assert_eq!(
            d.figures(),
            "4292 -> 4219 (-1.7%, within guest bias (±2.00%, calibrate --guest on \
             debian:6.18.15 arm64))"
        );
        // A published -10.9% is not reproduced by a change the setup alone
        // can make; a published "no change" is.
        assert_eq!(d.judge(-10.9), Word::NotReproduced);
        assert_eq!(d.judge(1.0), Word::Reproduced);
    }

    #[test]
    fn beyond_the_guest_bias_it_is_the_noise_of_the_rule() {
        // ±0.06% (measured for this cell): -1.7% goes the published way
        // beyond it, short of half the published change.
        let d = delta(Some(Ok(used(0.0006))));
        assert!(!d.within_bias());
        assert!((d.noise_pct() - 0.06).abs() < 1e-12);
        assert_eq!(d.judge(-10.9), Word::PartlyReproduced);
        assert_eq!(d.judge(-3.0), Word::Reproduced);
        assert!(d
            .figures()
            .ends_with("(-1.7%, guest bias ±0.06%, calibrate --guest on debian:6.18.15 arm64)"));
        // The metric's fixed 1% stands in where no bias is calibrated, and
        // the figures say how to calibrate it.
        let d = delta(Some(Err("guest bias not calibrated for …".into())));
        assert_eq!(d.noise_pct(), 1.0);
        assert_eq!(d.judge(-10.9), Word::PartlyReproduced);
        assert!(d.figures().ends_with("(-1.7%, guest bias not calibrated)"));
        assert!(measured_line(Arch::Arm64, Some(d), "", &["4K".into()])
            .ends_with(": 4K (guest bias not calibrated for …)"));
        // Time has no guest bias.
        let d = Delta {
            metric: Metric::Time,
            ..delta(None)
        };
        assert_eq!((d.noise_pct(), d.judge(-10.9)), (5.0, Word::NotReproduced));
        assert_eq!(d.figures(), "4.29 µs -> 4.22 µs (-1.7%)");
    }
}
