//! Seed 003's claims: flush elision (arm64 pte_needs_flush()).

use super::evidence::*;
use super::{Word, K};
use crate::record::Metric;
use crate::workload::Arch;
use crate::workload::{FolioSpec, WorkloadKind};
use crate::{ClaimRow, Evidence};

pub(super) fn claims(ev: &Evidence, rows: &mut Vec<ClaimRow>) {
    let w = WorkloadKind::ProtTransition;
    let key = "arm64-pte-needs-flush";
    let f4k = FolioSpec::Base;

    let mut r = row(
        "003",
        "arm64: mprotect NONE->RW no longer flushes the TLB (pte_needs_flush), so the transition is cheaper",
    );
    r.published = Some("\"the average time taken for the none->rw transition ... a reduction from 3.2 microseconds to 2.85 microseconds, giving a 12.3% improvement\" (region size not stated)".into());
    let parts = [
        ("4K none-to-rw", f4k, pct(3.2, 2.85)),
        ("400K none-to-rw", f4k, pct(3.2, 2.85)),
    ];
    let mut measured = Vec::new();
    let mut words = Vec::new();
    let mut used = None;
    for (i, size) in [4 * K, 400 * K].into_iter().enumerate() {
        let (m, w2, d) = per_folio_claim(
            ev,
            Arch::Arm64,
            key,
            w,
            size,
            &parts[i..=i],
            Some("none-to-rw"),
        );
        measured.extend(m);
        words.extend(w2);
        used = used.or(d);
        if let Ok(d) = delta(
            &ev.guests,
            Arch::Arm64,
            key,
            w,
            size,
            f4k,
            Some("rw-to-none"),
        ) {
            measured.push(format!(
                "{} rw-to-none {}",
                crate::workload::size::format_size(size),
                d.figures()
            ));
        }
    }
    r.measured = Some(measured_line(Arch::Arm64, used.clone(), "", &measured));
    let cells: Vec<At> = [4 * K, 400 * K]
        .into_iter()
        .flat_map(|size| {
            ["none-to-rw", "rw-to-none"].map(|p| {
                let label = format!("{} {p}", crate::workload::size::format_size(size));
                At::new(label, size, f4k, Some(p))
            })
        })
        .collect();
    r.predicted = predicted_line(ev, Arch::Arm64, key, w, &cells);
    let mut word = Word::all(&words);
    let mut why =
        "published -10.9%; rw-to-none is shown for contrast (no published figure)".to_string();
    // The claim is that the flush goes: counted, that decides it; what the
    // flush cost in time an instruction count cannot show.
    let flushes = crate::mechanism::catalogue(false)
        .into_iter()
        .find(|m| m.seed == "003")
        .and_then(|m| crate::mechanism::count(&m, &ev.guests).ok())
        .and_then(|c| c.rows.first().map(|r| (c.before, c.after, r.1, r.2)));
    if let Some((before, after, a, b)) = flushes.filter(|f| f.2 > 0.0 && f.3 == 0.0) {
        word = Word::Reproduced;
        why = format!(
            "the flush is gone: TLB invalidations per NONE->RW call counted {a} -> {b} on arm64 \
             guests {before} -> {after} (QEMU plugin); published -10.9% in time, which a TLBI \
             and a DSB, a few guest instructions, cannot show here (a KVM guest on arm64 \
             hardware can)"
        );
    } else if used.is_some_and(|d| d.metric == Metric::Instructions) && word != Word::Reproduced {
        why.push_str("; a TLB flush is a few instructions (TLBI, DSB): an instruction count cannot show what it costs in time, which a KVM guest on arm64 hardware can");
    }
    r.verdict = verdict(word, &why);
    if let (Some(a), Some(b)) = (
        ev.model(Arch::Arm64, w, 400 * K, f4k, "v6.17"),
        ev.model(Arch::Arm64, w, 400 * K, f4k, "v6.19"),
    ) {
        r.model = Some(format!(
            "counts, arm64 NONE->RW TLB flushes per call, v6.18 -> v6.19 code: {:.0} -> {:.0}",
            on_call(a, "READ", "tlb_flush_calls"),
            on_call(b, "READ", "tlb_flush_calls")
        ));
    }
    rows.push(r);

    let mut r = row(
        "003",
        "x86-64 for contrast: it already skips the flush on NONE->RW, so the arm64 change does nothing there",
    );
    r.published = Some("\"Currently arm64 does an unconditional TLB flush in mprotect()\" (x86 not measured in the seed)".into());
    let mut measured = Vec::new();
    let mut words = Vec::new();
    let up = ev.cell(w, 400 * K, f4k, Some("none-to-rw"));
    let down = ev.cell(w, 400 * K, f4k, Some("rw-to-none"));
    if let (Some(u), Some(d)) = (up, down) {
        match (u.tlb_flushes.per_call, d.tlb_flushes.per_call) {
            (Some(fu), Some(fd)) => {
                measured.push(format!(
                    "this host (tlb:tlb_flush tracepoint), 400K: NONE->RW {fu:.2} flushes per call, RW->NONE {fd:.2}"
                ));
                words.push(if fu == 0.0 && (fd - 1.0).abs() < 1e-9 {
                    Word::Reproduced
                } else {
                    Word::NotReproduced
                });
            }
            _ => measured.push(format!(
                "this host: {}",
                u.tlb_flushes
                    .unavailable
                    .clone()
                    .unwrap_or_else(|| "no flush count".into())
            )),
        }
    }
    let (m, w2, d) = per_folio_claim(
        ev,
        Arch::X86_64,
        key,
        w,
        400 * K,
        &[("400K none-to-rw", f4k, 0.0)],
        Some("none-to-rw"),
    );
    measured.push(measured_line(Arch::X86_64, d, "", &m));
    r.predicted = predicted_line(
        ev,
        Arch::X86_64,
        key,
        w,
        &[At::new("400K none-to-rw", 400 * K, f4k, Some("none-to-rw"))],
    );
    words.extend(w2);
    r.measured = Some(measured.join(". "));
    r.verdict = verdict(
        Word::all(&words),
        "0 flushes for NONE->RW and 1 for RW->NONE, and the x86 guests within 3% across the arm64 change",
    );
    if let Some(m) = ev.model(Arch::X86_64, w, 400 * K, f4k, "v6.17") {
        r.model = Some(format!(
            "counts, x86 flushes per call: NONE->RW {:.0}, RW->NONE {:.0}",
            on_call(m, "READ", "tlb_flush_calls"),
            on_call(m, "NONE", "tlb_flush_calls")
        ));
    }
    rows.push(r);
}
