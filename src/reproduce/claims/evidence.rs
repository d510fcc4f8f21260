//! The evidence a claim is judged on: guest cells on the kernels that
//! bracket a change, model counters, and the words that report them.

use ptelab_model::workload::ModelOutcome;

use super::{judge, Word};
use crate::guest::source::Version;
use crate::record::Metric;
use crate::reproduce::guests::GuestEvidence;
pub(super) use crate::reproduce::predicted::At;
use crate::reproduce::{ClaimRow, Evidence};
use crate::workload::Arch;
use crate::workload::{FolioSpec, WorkloadKind};

pub(super) fn row(seed: &str, claim: &str) -> ClaimRow {
    ClaimRow {
        seed: seed.into(),
        claim: claim.into(),
        published: None,
        measured: None,
        model: None,
        predicted: None,
        verdict: String::new(),
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
#[derive(Clone, Copy, Debug)]
pub(super) struct Delta {
    pub(super) before: Version,
    pub(super) after: Version,
    pub(super) a: f64,
    pub(super) b: f64,
    pub(super) metric: Metric,
}

impl Delta {
    pub(super) fn pct(&self) -> f64 {
        (self.b / self.a - 1.0) * 100.0
    }

    pub(super) fn figures(&self) -> String {
        format!(
            "{} -> {} ({:+.1}%)",
            value(self.a, self.metric),
            value(self.b, self.metric),
            self.pct()
        )
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
        Some(d) => format!("{}{what}: {}", guests_words(arch, &d), parts.join("; ")),
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
    Ok(Delta {
        before,
        after,
        a: ca.ns_per_call.median,
        b: cb.ns_per_call.median,
        metric,
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
                let word = judge(*published, d.pct(), d.metric);
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
