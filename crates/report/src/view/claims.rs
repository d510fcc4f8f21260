//! A claim in one line: the verdict word, the arch, and the measured
//! changes beside the published ones, as `reproduce`'s closing table and the
//! report's claims table print them (details a click away); and the cells'
//! text without the sentence a claim repeats once per size.
//!
//! The one-line forms are read from the row's text, which the claims write
//! in fixed shapes (`reproduce::claims`: "word: why", "published -36.8%",
//! measured changes as "(+1.5%" and ratios as "1.74x").

use super::ClaimRow;
use crate::text::table::Table;

/// Longest claim text in a one-line table before it is cut with `…`.
const CLAIM_CHARS: usize = 60;
/// Measured figures named in a one-line summary before `…`.
const FIGURES: usize = 6;

impl ClaimRow {
    /// The verdict's word: `reproduced`, `partly reproduced`, …, or
    /// `counted` for a mechanism.
    pub fn word(&self) -> &str {
        self.verdict
            .split_once(':')
            .map_or(self.verdict.as_str(), |(w, _)| w)
            .trim()
    }

    /// The arch the claim is about: its own prefix (`arm64: …`), else the
    /// arches whose guests its measured line names; `-` for neither.
    pub fn arch(&self) -> String {
        if let Some((head, _)) = self.claim.split_once(':') {
            match head.trim() {
                "arm64" => return "arm64".into(),
                "x86" | "x86_64" | "x86-64" => return "x86_64".into(),
                _ => {}
            }
        }
        let measured = self.measured.as_deref().unwrap_or("");
        let named: Vec<&str> = ["x86_64", "arm64"]
            .into_iter()
            .filter(|a| measured.contains(&format!("{a} guests")))
            .collect();
        if named.is_empty() {
            "-".into()
        } else {
            named.join(", ")
        }
    }

    /// The claim without its arch prefix, cut to [`CLAIM_CHARS`].
    pub fn short_claim(&self) -> String {
        let claim = match self.claim.split_once(':') {
            Some((head, rest)) if matches!(head.trim(), "arm64" | "x86" | "x86_64" | "x86-64") => {
                rest.trim()
            }
            _ => self.claim.as_str(),
        };
        cut(claim, CLAIM_CHARS)
    }

    /// "measured -73.6% vs published -36.8%": the measured changes and
    /// ratios, and the published change the verdict names; a mechanism's
    /// counts; or what is missing.
    pub fn brief(&self) -> String {
        let why = self.verdict.split_once(':').map_or("", |(_, w)| w.trim());
        if self.word() == "counted" {
            return cut(why, 2 * CLAIM_CHARS);
        }
        let figures = figures(self.measured.as_deref().unwrap_or(""));
        let measured = if figures.is_empty() {
            "no figure measured".to_string()
        } else if figures.len() > FIGURES {
            format!("measured {}, …", figures[..FIGURES].join(", "))
        } else {
            format!("measured {}", figures.join(", "))
        };
        let published = why
            .split("; ")
            .find_map(|p| p.strip_prefix("published "))
            .map(str::to_string);
        match published {
            Some(p) => format!("{measured} vs published {p}"),
            None => measured,
        }
    }
}

/// `s` cut to `n` characters, with `…` when it was longer.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let head: String = s.chars().take(n - 1).collect();
        format!("{}…", head.trim_end())
    }
}

/// The signed changes (`+1.5%`, `-73.6%`) and ratios (`1.74x`) in a
/// measured line, in order.
fn figures(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    for (i, &c) in b.iter().enumerate() {
        if c != b'%' && c != b'x' {
            continue;
        }
        let mut j = i;
        while j > 0 && (b[j - 1].is_ascii_digit() || b[j - 1] == b'.') {
            j -= 1;
        }
        let digits = &text[j..i];
        if !digits.bytes().any(|d| d.is_ascii_digit()) {
            continue;
        }
        let next_alnum = b.get(i + 1).is_some_and(|n| n.is_ascii_alphanumeric());
        let figure = if c == b'%' {
            // A change has a sign; a share ("40% of the regression") does not.
            match j.checked_sub(1).map(|k| b[k]) {
                Some(s @ (b'+' | b'-')) => format!("{}{digits}%", s as char),
                _ => continue,
            }
        } else if digits.contains('.') && !next_alnum {
            format!("{digits}x")
        } else {
            continue;
        };
        out.push(figure);
    }
    out
}

/// A cell's text with each repeated sentence said once: exact repeats
/// (`. ` and `; ` separated) dropped, and parts that end alike ("400 KiB:
/// no kernel offered brackets …; 4000 KiB: no kernel offered brackets …")
/// joined under their labels ("400 KiB, 4000 KiB: no kernel offered …").
pub fn dedup_sentences(text: &str) -> String {
    let mut sentences: Vec<String> = Vec::new();
    for s in text.split(". ") {
        let s = dedup_parts(s);
        if !sentences.contains(&s) {
            sentences.push(s);
        }
    }
    sentences.join(". ")
}

/// Shortest repeated tail worth joining (shorter ones are figures).
const MIN_TAIL: usize = 24;

/// [`dedup_sentences`] within one sentence, over its `; ` parts.
fn dedup_parts(sentence: &str) -> String {
    // (labels, tail): one label-less entry is a part said once.
    let mut groups: Vec<(Vec<String>, String)> = Vec::new();
    'part: for part in sentence.split("; ") {
        if groups.iter().any(|(l, t)| l.is_empty() && t == part) {
            continue;
        }
        for (k, _) in part.match_indices(": ") {
            let (label, tail) = (&part[..k], &part[k + 2..]);
            if tail.len() < MIN_TAIL {
                break;
            }
            for (labels, t) in groups.iter_mut() {
                if labels.is_empty() {
                    if let Some(head) = t.strip_suffix(tail).and_then(|h| h.strip_suffix(": ")) {
                        *labels = vec![head.to_string(), label.to_string()];
                        *t = tail.to_string();
                        continue 'part;
                    }
                } else if t == tail {
                    if !labels.iter().any(|l| l == label) {
                        labels.push(label.to_string());
                    }
                    continue 'part;
                }
            }
        }
        groups.push((Vec::new(), part.to_string()));
    }
    groups
        .into_iter()
        .map(|(labels, tail)| {
            if labels.is_empty() {
                tail
            } else {
                format!("{}: {tail}", labels.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The one-line table of claims: seed, claim, arch, verdict, measured vs
/// published.
pub fn verdict_table(claims: &[ClaimRow]) -> Table {
    let mut t = Table::new()
        .left("seed")
        .left("claim")
        .left("arch")
        .left("verdict")
        .left("measured vs published");
    for c in claims {
        t.row([
            c.seed.clone(),
            c.short_claim(),
            c.arch(),
            c.word().to_string(),
            c.brief(),
        ]);
    }
    t
}

/// "11 reproduced, 2 not reproduced, 1 counted": claims per verdict word,
/// in the order of the words' first appearance.
pub fn verdict_counts(claims: &[ClaimRow]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for c in claims {
        match counts.iter_mut().find(|(w, _)| *w == c.word()) {
            Some((_, n)) => *n += 1,
            None => counts.push((c.word(), 1)),
        }
    }
    counts
        .iter()
        .map(|(w, n)| format!("{n} {w}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(any(test, feature = "testing"))]
pub mod tests {
    use super::*;

    pub(crate) fn claim(seed: &str, claim: &str, measured: &str, verdict: &str) -> ClaimRow {
        ClaimRow {
            seed: seed.into(),
            claim: claim.into(),
            published: Some("\"reduces from 1.9 to 1.2 seconds\"".into()),
            measured: Some(measured.into()),
            model: None,
            predicted: None,
            verdict: verdict.into(),
            uncalibrated: Vec::new(),
        }
    }

    /// Claims in the shapes `reproduce` writes them.
    pub fn sample_claims() -> Vec<ClaimRow> {
        let why = "x86_64 guests: no kernel offered brackets 89e613bc0b2d (v7.1); --kernels auto picks one";
        let mut fix = claim(
            "001",
            "the 2026 small-folio fix (89e613bc0b2d, v7.1) recovers part of the regression",
            &format!("x86_64: 400 KiB: {why}; 4000 KiB: {why}; 40000 KiB: {why}"),
            "not measured: at least 2.5% fewer per call at every size from 400 KiB counts as reproduced",
        );
        fix.published = Some("\"a 14% speedup in mprotect\"".into());
        let mut mremap = claim(
            "002",
            "arm64: batched mremap of 1M of 64K folios is much faster",
            "arm64 guests 6.16.12 -> 6.17.8, instructions per call, 1M: 64K 275747 -> 72851 (-73.6%, guest bias not calibrated)",
            "reproduced: published -36.8%; ptelab times the mremap alone; the published seconds include mmap, memset and munmap",
        );
        mremap.predicted =
            Some("arm64 guests 6.16.12 -> 6.17.8: 64K 270000 -> 75000 (extrapolated)".into());
        mremap.uncalibrated = vec!["guest bias not calibrated for debian:6.16.12, debian:6.17.8 arm64: run `ptelab calibrate --guest --kernel debian:6.16.12,debian:6.17.8 --arch arm64 -- bench mremap-move --size 1M --folio 64K`".into()];
        vec![
            claim(
                "000",
                "x86: \"a minor improvement\" for large folios and \"a slight degradation in the small folio case\"",
                "x86_64 guests 6.16.12 -> 6.17.8, instructions per call, the two mprotect calls: T1 2M-pte 100 -> 90 (-10.0%); T2 64K 100 -> 99 (-1.0%); T3 4K 100 -> 104 (+4.0%)",
                "partly reproduced: published T1 -1.3%, T2 +0.0%, T3 +1.3%",
            ),
            claim(
                "001",
                "x86_64: order-0 mprotect toggling is 2x+ slower per call for >=400 KiB regions since PTE batching (cac1db8c3aad)",
                "x86_64 guests 6.16.12 -> 6.17.8, instructions per call: 400 KiB 1000 -> 1840 (1.84x); 4000 KiB 9000 -> 17400 (1.93x)",
                "reproduced: a regression of at least 1.5x at every size from 400 KiB counts as reproduced",
            ),
            fix,
            mremap,
            claim(
                "003",
                "arm64: mechanism, TLB invalidations of the NONE->RW call",
                "arm64 guests 6.18.15 -> 6.19.6, 4K none-to-rw, per call (exact counts, QEMU plugin): tlbi 1 -> 0",
                "counted: tlbi 1 -> 0 per call",
            ),
        ]
    }

    #[test]
    fn a_repeated_sentence_is_said_once() {
        let why = "x86_64 guests: no kernel offered brackets 89e613bc0b2d (v7.1)";
        let text = format!("x86_64: 400 KiB: {why}; 4000 KiB: {why}; 40000 KiB: {why}");
        assert_eq!(
            dedup_sentences(&text),
            format!("x86_64: 400 KiB, 4000 KiB, 40000 KiB: {why}")
        );
        // Exact repeats, across sentences and parts.
        assert_eq!(dedup_sentences("a b c. a b c"), "a b c");
        assert_eq!(dedup_sentences("a; a; b"), "a; b");
        // Figures that differ stay, and short tails are not joined.
        let figures = "4K 2265 -> 2077 (-8.3%); 400K 112150 -> 106819 (-4.8%)";
        assert_eq!(dedup_sentences(figures), figures);
        assert_eq!(
            dedup_sentences("4K: 1 -> 2; 64K: 1 -> 2"),
            "4K: 1 -> 2; 64K: 1 -> 2"
        );
    }

    #[test]
    fn one_line_per_claim() {
        let r = claim(
            "002",
            "arm64: batched mremap of 1M of 64K folios is much faster",
            "arm64 guests 6.16.12 -> 6.17.8, instructions per call, 1M: 64K 275747 -> 72851 (-73.6%, guest bias not calibrated)",
            "reproduced: published -36.8%; ptelab times the mremap alone",
        );
        assert_eq!(r.word(), "reproduced");
        assert_eq!(r.arch(), "arm64");
        assert_eq!(
            r.short_claim(),
            "batched mremap of 1M of 64K folios is much faster"
        );
        assert_eq!(r.brief(), "measured -73.6% vs published -36.8%");
        let r = claim(
            "001",
            "the regression is still present in the kernels before the small-folio fix",
            "x86_64 guests, 4000 KiB: 7.0.13 1.94x of 6.16.12; arm64 guests, 4000 KiB: 7.0.13 1.60x of 6.16.12",
            "reproduced: at least 1.5x the last kernel without batching",
        );
        assert_eq!(r.arch(), "x86_64, arm64");
        assert_eq!(r.brief(), "measured 1.94x, 1.60x");
        let r = claim(
            "003",
            "arm64: mechanism, TLBI",
            "x",
            "counted: tlbi 1 -> 0 per call",
        );
        assert_eq!(
            (r.word(), r.brief().as_str()),
            ("counted", "tlbi 1 -> 0 per call")
        );
        let r = claim(
            "004",
            "x86-64: reclaim",
            "x86_64 guests: not measured",
            "not measured",
        );
        assert_eq!(r.brief(), "no figure measured");
        assert_eq!(figures("0x10, x86, 40% of it, (+0.0%"), vec!["+0.0%"]);
    }

    #[test]
    fn counts_by_verdict_word() {
        let rows = [
            claim("1", "a", "", "reproduced: x"),
            claim("1", "b", "", "not reproduced: y"),
            claim("2", "c", "", "reproduced"),
        ];
        assert_eq!(verdict_counts(&rows), "2 reproduced, 1 not reproduced");
    }
}
