//! Seed 000's claims: mprotect PROT_READ then PROT_READ|PROT_WRITE over 1 GiB.

use super::evidence::*;
use super::{Word, K};
use crate::workload::Arch;
use crate::workload::{FolioSpec, WorkloadKind};
use crate::{ClaimRow, Evidence};

pub(super) fn claims(ev: &Evidence, quick: bool, rows: &mut Vec<ClaimRow>) {
    let size = crate::ro_rw_size(quick);
    let scaled = if quick {
        " (64M, scaled from the seed's 1G by --quick)"
    } else {
        ""
    };
    let f64k = FolioSpec::Mthp(64 * K);
    let w = WorkloadKind::MprotectRoRw;
    let key = "mprotect-batching";

    let arm: [(&str, FolioSpec, f64); 3] = [
        ("T1 2M-pte", FolioSpec::PmdPte, pct(2.1, 0.65)),
        ("T2 64K", f64k, pct(2.0, 0.7)),
        ("T3 4K", FolioSpec::Base, pct(1.0, 1.1)),
    ];
    let mut r = row("000", "arm64: PTE batching makes mprotect of large folios (T1, T2) much cheaper and order-0 (T3) slightly dearer");
    r.published = Some("Apple M3, seconds for the whole test: T1 2.1 -> 0.65, T2 2 -> 0.7, T3 1 -> 1.1 (cover letter)".into());
    let (m, words, d) = per_folio_claim(ev, Arch::Arm64, key, w, size, &arm, None);
    r.measured = Some(measured_line(
        Arch::Arm64,
        d,
        &format!("{scaled}, the two mprotect calls"),
        &m,
    ));
    r.verdict = verdict(
        Word::all(&words),
        &format!("published {}", published_pcts(&arm)),
    );
    r.predicted = predicted_line(ev, Arch::Arm64, key, w, &folio_cells(size, &arm, None));
    if let (Some(a), Some(b)) = (
        ev.model(Arch::Arm64, w, size, f64k, "v6.16"),
        ev.model(Arch::Arm64, w, size, f64k, "v6.17"),
    ) {
        let blocks = a.pages as f64 / 16.0;
        let (xa, xb) = (
            per_call(a, "pte_xchg") / blocks,
            per_call(b, "pte_xchg") / blocks,
        );
        let (sa, sb) = (
            per_call(a, "tlbi_sync") / blocks,
            per_call(b, "tlbi_sync") / blocks,
        );
        let agrees = (xa - 48.0).abs() < 0.5 && (xb - 16.0).abs() < 0.5 && sb < 0.01;
        r.model = Some(format!(
            "counts per 64K contpte block, v6.16 -> v6.17 code: {xa:.0} -> {xb:.0} atomic PTE clears, \
             {sa:.1} -> {sb:.1} synchronous TLBIs ({} the cover letter's \"16x reduction in ptep_get()\" mechanism)",
            if agrees { "the model derives" } else { "the model does not derive" }
        ));
    }
    rows.push(r);

    let x86: [(&str, FolioSpec, f64); 3] = [
        ("T1 2M-pte", FolioSpec::PmdPte, pct(3.75, 3.7)),
        ("T2 64K", f64k, pct(3.7, 3.7)),
        ("T3 4K", FolioSpec::Base, pct(3.85, 3.9)),
    ];
    let mut r = row("000", "x86: \"a minor improvement\" for large folios and \"a slight degradation in the small folio case\"");
    r.published = Some("x86, seconds for the whole test: T1 3.75 -> 3.7, T2 3.7 -> 3.7, T3 3.85 -> 3.9 (cover letter)".into());
    let (m, words, d) = per_folio_claim(ev, Arch::X86_64, key, w, size, &x86, None);
    r.measured = Some(measured_line(
        Arch::X86_64,
        d,
        &format!("{scaled}, the two mprotect calls"),
        &m,
    ));
    let mut why = format!("published {}", published_pcts(&x86));
    if words.contains(&Word::NotReproduced) {
        why.push_str("; the published seconds include the memset and re-touch of the whole region in every loop, which ptelab does not time");
    }
    r.verdict = verdict(Word::all(&words), &why);
    r.predicted = predicted_line(ev, Arch::X86_64, key, w, &folio_cells(size, &x86, None));
    if let (Some(a), Some(b)) = (
        ev.model(Arch::X86_64, w, size, FolioSpec::Base, "v6.16"),
        ev.model(Arch::X86_64, w, size, FolioSpec::Base, "v6.17"),
    ) {
        let pages = a.pages as f64;
        let d = (per_call(b, "page_reads") - per_call(a, "page_reads")) / pages;
        r.model = Some(format!(
            "counts, order-0, v6.16 -> v6.17 code: {d:+.2} struct page reads per PTE (the cover letter's \"overhead of vm_normal_folio() + folio_test_large()\")"
        ));
    }
    rows.push(r);
}
