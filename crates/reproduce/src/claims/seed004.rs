//! Seed 004's claims: batched young-bit clearing in reclaim.

use ptelab_model::workload::ModelOutcome;

use super::evidence::*;
use super::{Word, K, M};
use crate::workload::Arch;
use crate::workload::{FolioSpec, WorkloadKind};
use crate::{ClaimRow, Evidence};

pub(super) fn claims(ev: &Evidence, quick: bool, rows: &mut Vec<ClaimRow>) {
    let w = WorkloadKind::Reclaim;
    let size = crate::reclaim_guest_size(quick);
    let key = "mglru-young-batching";
    let f64k = FolioSpec::Mthp(64 * K);
    let scaled = format!(
        "{} of clean ext4 page cache in a memory cgroup, MGLRU on, reclaimed through memory.reclaim (scaled from the seed's 10G/8G to fit the guest)",
        crate::workload::size::format_size(size)
    );
    let model = model_line(ev);
    for (arch, published, figure) in [
        (Arch::Arm64, "arm64 32-core server: \"W/o patchset: real 0m0.470s ... W/ patchset: real 0m0.180s\" (\"60%+ performance improvement\")", pct(0.470, 0.180)),
        (Arch::X86_64, "\"about 15% improvement on my X86 machine\" (no timings given)", -15.0),
    ] {
        let mut r = row("004", &format!("{}: batched young-bit checks make MGLRU reclaim of large file folios faster", arch.name()));
        r.published = Some(published.into());
        let (m, mut words, d) =
            per_folio_claim(ev, arch, key, w, size, &[("64K", f64k, figure)], None);
        // The seed's figures are MGLRU's: a guest whose reclaim went
        // through the classic LRU (its phase names the LRU) does not count.
        let lru = ev
            .guests
            .runs
            .iter()
            .filter(|r| r.arch == arch && r.workload == w)
            .flat_map(|r| r.cells.iter().filter_map(|c| c.phase.clone()))
            .find(|p| !p.ends_with("mglru"));
        if lru.is_some() {
            words = vec![Word::NotMeasured];
        }
        let mut measured = measured_line(arch, d, &format!(", {scaled}"), &m);
        if let Ok(c) = delta(&ev.guests, arch, key, w, size, FolioSpec::Base, None) {
            measured.push_str(&format!("; 4K control {}", c.figures()));
        }
        r.measured = Some(measured);
        r.predicted = predicted_line(
            ev,
            arch,
            key,
            w,
            &[
                At::new("64K", size, f64k, None),
                At::new("4K control", size, FolioSpec::Base, None),
            ],
        );
        let why = match &lru {
            Some(p) => format!("published {figure:+.1}%; a guest reclaimed through {p}, not MGLRU"),
            None => format!("published {figure:+.1}%"),
        };
        r.verdict = verdict(Word::all(&words), &why);
        r.model = model.clone();
        rows.push(r);
    }
}

/// The model's line for seed 004. The model implements the classic-LRU
/// rmap path (`folio_referenced()`, batched in 7.0 by 52e054f71840), not
/// the MGLRU look-around the seed's patch changes: the line says so.
fn model_line(ev: &Evidence) -> Option<String> {
    let w = WorkloadKind::Reclaim;
    let f = FolioSpec::Mthp(64 * K);
    let get = |arch, s| ev.model(arch, w, 64 * M, f, s);
    let (Some(a0), Some(a1), Some(x0), Some(x1)) = (
        get(Arch::Arm64, "v6.16"),
        get(Arch::Arm64, "v7.1"),
        get(Arch::X86_64, "v6.16"),
        get(Arch::X86_64, "v7.1"),
    ) else {
        return None;
    };
    let per_folio =
        |o: &ModelOutcome, name: &str| per_call(o, name) / per_call(o, "folios_scanned").max(1.0);
    let (cas0, cas1) = (per_folio(a0, "young_clears"), per_folio(a1, "young_clears"));
    let (tlbi0, tlbi1) = (
        per_folio(a0, "young_flushes"),
        per_folio(a1, "young_flushes"),
    );
    let (xc0, xc1) = (per_folio(x0, "young_clears"), per_folio(x1, "young_clears"));
    Some(format!(
        "counts for the classic-LRU rmap path (folio_referenced(), batched in v7.0 by 52e054f71840), not the MGLRU \
         look-around this patch batches: per 64K folio, arm64 contpte {cas0:.0} -> {cas1:.0} young-bit CAS, \
         {tlbi0:.0} -> {tlbi1:.0} TLBIs; x86 {xc0:.0} -> {xc1:.0} atomic clears"
    ))
}
