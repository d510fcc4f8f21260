//! Claims of each seed, judged from the evidence of one reproduce run.
//!
//! A verdict is one of `reproduced`, `partly reproduced`, `not reproduced`
//! or `not measured`, followed by the measured evidence that decided it:
//! what was compared, on which kernels and arch, in which unit. The rule
//! (`judge`) compares the measured change between the kernels before and
//! after the seed's change with the published one, in the published
//! direction; it is stated in docs/guests.md. Published figures are quoted,
//! labelled with their machine and unit, never compared as if measured here.
//!
//! The model's line stays beside the verdict: its counts come from the
//! kernel's code for the strategy of each kernel version; where a model
//! line rests on an assumption rather than on counts, it says so. The model
//! never decides a timing claim.
//!
//! One file per seed holds its claims (`seed000` … `seed004`); `evidence`
//! reads the measured and modelled cells they are judged on.

use super::{ClaimRow, Evidence};
use crate::record::Metric;

mod evidence;
mod seed000;
mod seed001;
mod seed002;
mod seed003;
mod seed004;

const K: u64 = 1 << 10;
const M: u64 = 1 << 20;

/// A published change below this (percent) is "no change".
pub(super) const FLAT_PCT: f64 = 3.0;

/// The verdict words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Word {
    Reproduced,
    PartlyReproduced,
    NotReproduced,
    NotMeasured,
}

impl Word {
    pub fn text(self) -> &'static str {
        match self {
            Word::Reproduced => "reproduced",
            Word::PartlyReproduced => "partly reproduced",
            Word::NotReproduced => "not reproduced",
            Word::NotMeasured => "not measured",
        }
    }

    /// The verdict of several parts of one claim: all reproduced is
    /// reproduced, none is not reproduced, anything between is partly.
    fn all(words: &[Word]) -> Word {
        let measured: Vec<Word> = words
            .iter()
            .copied()
            .filter(|w| *w != Word::NotMeasured)
            .collect();
        if measured.is_empty() {
            Word::NotMeasured
        } else if measured.len() == words.len() && measured.iter().all(|w| *w == Word::Reproduced) {
            Word::Reproduced
        } else if measured.iter().all(|w| *w == Word::NotReproduced) {
            Word::NotReproduced
        } else {
            Word::PartlyReproduced
        }
    }
}

/// Measurement noise of a metric between kernels (percent): instruction
/// counts under TCG repeat to 0.01%, but a rebuilt guest binary shifts them
/// by up to 0.4% (docs/guests.md); wall time in a KVM guest is taken as the
/// host's typical run-to-run spread.
pub(super) fn noise_pct(m: Metric) -> f64 {
    match m {
        Metric::Instructions => 1.0,
        Metric::Time => 5.0,
    }
}

/// The rule: a published change of `published` percent (after vs before)
/// is reproduced by a measured change of `measured` percent when it goes
/// the same way and reaches half the published size; partly when it goes
/// the same way beyond the `noise` (percent: the metric's, or a guest
/// cell's calibrated bias, `calibrate --guest`); a published "no change"
/// (under 3%) is reproduced when the measured change is under 3% too.
pub fn judge_with(published: f64, measured: f64, noise: f64) -> Word {
    if published.abs() < FLAT_PCT {
        return if measured.abs() < FLAT_PCT {
            Word::Reproduced
        } else {
            Word::NotReproduced
        };
    }
    let same_way = published.signum() == measured.signum();
    if same_way && measured.abs() >= published.abs() / 2.0 {
        Word::Reproduced
    } else if same_way && measured.abs() >= noise {
        Word::PartlyReproduced
    } else {
        Word::NotReproduced
    }
}

/// Every claim of every seed in `ids`.
pub fn judge_all(ids: &[&str], ev: &Evidence, quick: bool) -> Vec<ClaimRow> {
    let mut rows = Vec::new();
    for id in ids {
        match *id {
            "000" => seed000::claims(ev, quick, &mut rows),
            "001" => seed001::claims(ev, quick, &mut rows),
            "002" => seed002::claims(ev, &mut rows),
            "003" => seed003::claims(ev, &mut rows),
            "004" => seed004::claims(ev, quick, &mut rows),
            _ => {}
        }
        rows.extend(super::mechanism::rows(&[id], &ev.guests, quick));
    }
    for r in &mut rows {
        take_remedies(r);
    }
    rows
}

/// What `measured_line` appends when a cell's guest bias is not calibrated.
const REMEDY: &str = " (guest bias not calibrated for ";

/// Move each "(guest bias not calibrated for …: run `…`)" out of the
/// measured line into `uncalibrated`: `reproduce` says it once for the run.
fn take_remedies(r: &mut super::ClaimRow) {
    let Some(mut text) = r.measured.take() else {
        return;
    };
    while let Some(start) = text.find(REMEDY) {
        let inner = start + 2;
        let mut depth = 1;
        let end = text[inner..].char_indices().find_map(|(i, c)| {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(inner + i)
        });
        let Some(end) = end else { break };
        let remedy = text[inner..end].to_string();
        if !r.uncalibrated.contains(&remedy) {
            r.uncalibrated.push(remedy);
        }
        text.replace_range(start..=end, "");
    }
    r.measured = Some(text);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge(published: f64, measured: f64, metric: Metric) -> Word {
        judge_with(published, measured, noise_pct(metric))
    }

    #[test]
    fn the_rule_needs_the_published_direction_and_half_its_size() {
        let i = Metric::Instructions;
        assert_eq!(judge(-37.0, -40.0, i), Word::Reproduced);
        assert_eq!(judge(-37.0, -18.5, i), Word::Reproduced);
        assert_eq!(judge(-37.0, -10.0, i), Word::PartlyReproduced);
        assert_eq!(judge(-37.0, -0.5, i), Word::NotReproduced);
        assert_eq!(judge(-37.0, 20.0, i), Word::NotReproduced);
        assert_eq!(judge(10.0, 73.0, i), Word::Reproduced);
        // A published "no change" needs a measured one.
        assert_eq!(judge(1.3, 2.0, i), Word::Reproduced);
        assert_eq!(judge(1.3, 50.0, i), Word::NotReproduced);
        // Time is noisier: 3% is within its noise.
        assert_eq!(judge(-37.0, -3.0, Metric::Time), Word::NotReproduced);
        assert_eq!(judge(-37.0, -3.0, i), Word::PartlyReproduced);
    }

    #[test]
    fn the_calibration_remedy_leaves_the_measured_line() {
        let mut r = evidence::row("002", "c");
        r.measured = Some(
            "arm64 guests a -> b: 64K 1 -> 2 (+100.0%, guest bias not calibrated) (guest bias \
             not calibrated for debian:a, debian:b arm64: run `ptelab calibrate --guest`). \
             x86_64 guests a -> b: 4K 1 -> 1 (+0.0%, guest bias not calibrated) (guest bias \
             not calibrated for debian:a, debian:b x86_64: run `ptelab calibrate (x)`)"
                .into(),
        );
        take_remedies(&mut r);
        assert_eq!(
            r.measured.as_deref(),
            Some(
                "arm64 guests a -> b: 64K 1 -> 2 (+100.0%, guest bias not calibrated). \
                 x86_64 guests a -> b: 4K 1 -> 1 (+0.0%, guest bias not calibrated)"
            )
        );
        assert_eq!(
            r.uncalibrated,
            [
                "guest bias not calibrated for debian:a, debian:b arm64: run `ptelab calibrate --guest`",
                "guest bias not calibrated for debian:a, debian:b x86_64: run `ptelab calibrate (x)`"
            ]
        );
    }

    #[test]
    fn parts_combine_into_one_word() {
        use Word::*;
        assert_eq!(Word::all(&[Reproduced, Reproduced]), Reproduced);
        assert_eq!(Word::all(&[Reproduced, NotReproduced]), PartlyReproduced);
        assert_eq!(Word::all(&[NotReproduced, NotReproduced]), NotReproduced);
        assert_eq!(Word::all(&[NotMeasured, NotMeasured]), NotMeasured);
        assert_eq!(Word::all(&[Reproduced, NotMeasured]), PartlyReproduced);
        assert_eq!(Word::all(&[]), NotMeasured);
    }
}
