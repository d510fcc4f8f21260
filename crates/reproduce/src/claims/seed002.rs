//! Seed 002's claims: mremap PTE batching.

use super::evidence::*;
use super::{Word, K, M};
use crate::workload::Arch;
use crate::workload::{FolioSpec, WorkloadKind};
use crate::{ClaimRow, Evidence};

pub(super) fn claims(ev: &Evidence, rows: &mut Vec<ClaimRow>) {
    let w = WorkloadKind::MremapMove;
    let f64k = FolioSpec::Mthp(64 * K);
    let key = "mremap-batching";
    let phase = Some("mremap");
    let note =
        "ptelab times the mremap alone; the published seconds include mmap, memset and munmap";

    let mut r = row(
        "002",
        "arm64: batched mremap of 1M of 64K folios is much faster",
    );
    r.published = Some("\"reduces from 1.9 to 1.2 seconds, giving a 37% performance optimization, on Apple M3 (arm64)\" (10,000 loops)".into());
    let parts = [("64K", f64k, pct(1.9, 1.2))];
    let (m, words, d) = per_folio_claim(ev, Arch::Arm64, key, w, M, &parts, phase);
    r.measured = Some(measured_line(Arch::Arm64, d, ", 1M", &m));
    r.verdict = verdict(Word::all(&words), &format!("published -36.8%; {note}"));
    r.predicted = predicted_line(ev, Arch::Arm64, key, w, &folio_cells(M, &parts, phase));
    if let (Some(a), Some(b)) = (
        ev.model(Arch::Arm64, w, M, f64k, "v6.16"),
        ev.model(Arch::Arm64, w, M, f64k, "v6.17"),
    ) {
        r.model = Some(format!(
            "counts per mremap, v6.16 -> v6.17 code: {:.0} -> {:.0} atomic PTE clears, {:.0} -> {:.0} synchronous TLBIs",
            per_call(a, "pte_xchg"),
            per_call(b, "pte_xchg"),
            per_call(a, "tlbi_sync"),
            per_call(b, "tlbi_sync")
        ));
    }
    rows.push(r);

    let mut r = row(
        "002",
        "no regression for small folios (arm64 4K; x86-64 4K and 64K, where mremap never batches)",
    );
    r.published = Some("\"No regression is observed for small folios.\"".into());
    let mut measured = Vec::new();
    let mut predicted = Vec::new();
    let mut words = Vec::new();
    for (arch, folios) in [
        (Arch::Arm64, vec![("4K", FolioSpec::Base, 0.0)]),
        (
            Arch::X86_64,
            vec![("4K", FolioSpec::Base, 0.0), ("64K", f64k, 0.0)],
        ),
    ] {
        if !guest_arches(ev).contains(&arch) {
            continue;
        }
        let (m, w2, d) = per_folio_claim(ev, arch, key, w, M, &folios, phase);
        measured.push(measured_line(arch, d, ", 1M", &m));
        predicted.push(predicted_line(
            ev,
            arch,
            key,
            w,
            &folio_cells(M, &folios, phase),
        ));
        words.extend(w2);
    }
    r.measured = Some(measured.join(". "));
    r.predicted = joined(predicted);
    let word = Word::all(&words);
    let mut why = "within 3% counts as no regression".to_string();
    if let (true, Ok(d)) = (
        matches!(word, Word::NotReproduced | Word::PartlyReproduced),
        delta(&ev.guests, Arch::X86_64, key, w, M, FolioSpec::Base, phase),
    ) {
        why.push_str(&format!("; {}", confound(&d)));
    }
    r.verdict = verdict(word, &why);
    if let (Some(a), Some(b)) = (
        ev.model(Arch::X86_64, w, M, f64k, "v6.16"),
        ev.model(Arch::X86_64, w, M, f64k, "v6.17"),
    ) {
        r.model = Some(format!(
            "counts, x86 64K, v6.16 -> v6.17 code including the v6.17-rc2 hotfix 0b5be138ce00 (no folio lookup unless pte_batch_hint() > 1; every released 6.17 has it): per-call counters {}",
            if a.per_call() == b.per_call() { "identical" } else { "differ" }
        ));
    }
    rows.push(r);
}
