//! Each seed's mechanism, counted: the kernel functions and TLB
//! invalidations its change is about, per call (or per PTE, block or folio),
//! on the TCG guests of the kernels just before and after the change, as
//! ptelab's QEMU plugin counted them (docs/guests.md, "Mechanism
//! counters"). A mechanism verdict reads "counted" and names what it
//! counted; it never compares a count with a published time.

use super::guests::GuestEvidence;
use super::{reclaim_guest_size, ro_rw_size, ClaimRow};
use crate::guest::source::Version;
use crate::record::{CellResult, Profile};
use crate::text::format::{counter, size as fmt_size};
use crate::workload::Arch;
use crate::workload::{FolioSpec, WorkloadKind};

const K: u64 = 1 << 10;
const M: u64 = 1 << 20;

/// What one mechanism row counts.
#[derive(Clone, Copy, Debug)]
pub enum Counted {
    /// Entries of the functions whose names contain one of these.
    Functions(&'static [&'static str]),
    /// TLB invalidations (every kind but the DSB barrier).
    TlbInvalidations,
}

/// The unit a count is divided into.
#[derive(Clone, Copy, Debug)]
pub enum Per {
    Call,
    /// Per 4K PTE of the region.
    Pte,
    /// Per folio of the cell's folio size (a 64K contpte block on arm64).
    Folio,
}

/// One mechanism of one seed on one arch.
#[derive(Clone, Copy, Debug)]
pub struct Mechanism {
    pub seed: &'static str,
    pub arch: Arch,
    /// The change (`changes.rs`) whose bracketing kernels are compared.
    pub change: &'static str,
    pub workload: WorkloadKind,
    pub size: u64,
    pub folio: FolioSpec,
    pub phase: Option<&'static str>,
    pub what: &'static str,
    pub counted: Counted,
    pub per: Per,
}

/// Every seed's mechanisms.
pub fn catalogue(quick: bool) -> Vec<Mechanism> {
    let f4k = FolioSpec::Base;
    let f64k = FolioSpec::Mthp(64 * K);
    let toggle = |arch| {
        Mechanism {
        seed: "001",
        arch,
        change: "mprotect-batching",
        workload: WorkloadKind::MprotectToggle,
        size: 400 * K,
        folio: f4k,
        phase: None,
        what: "folio lookups per PTE (mprotect-toggle averages its PROT_NONE and PROT_READ|PROT_WRITE calls)",
        counted: Counted::Functions(&["vm_normal_page", "vm_normal_folio"]),
        per: Per::Pte,
    }
    };
    let mremap = |arch, counted, what| Mechanism {
        seed: "002",
        arch,
        change: "mremap-batching",
        workload: WorkloadKind::MremapMove,
        size: M,
        folio: f64k,
        phase: Some("mremap"),
        what,
        counted,
        per: Per::Call,
    };
    let ro_rw = |what, counted| Mechanism {
        seed: "000",
        arch: Arch::Arm64,
        change: "mprotect-batching",
        workload: WorkloadKind::MprotectRoRw,
        size: ro_rw_size(quick),
        folio: f64k,
        phase: None,
        what,
        counted,
        per: Per::Folio,
    };
    let reclaim = |arch| Mechanism {
        seed: "004",
        arch,
        change: "mglru-young-batching",
        workload: WorkloadKind::Reclaim,
        size: reclaim_guest_size(quick),
        folio: f64k,
        phase: None,
        what: "young-bit test-and-clear calls per 64K folio reclaimed",
        counted: Counted::Functions(&["young"]),
        per: Per::Folio,
    };
    vec![
        ro_rw(
            "contpte unfolds and refolds and the ptep_get family per 64K block",
            Counted::Functions(&["contpte", "ptep_get", "modify_prot"]),
        ),
        ro_rw("TLB invalidations per 64K block", Counted::TlbInvalidations),
        toggle(Arch::X86_64),
        toggle(Arch::Arm64),
        mremap(
            Arch::Arm64,
            Counted::Functions(&["get_and_clear"]),
            "get-and-clear calls per mremap of 1M in 64K folios",
        ),
        mremap(
            Arch::Arm64,
            Counted::TlbInvalidations,
            "TLB invalidations per mremap of 1M in 64K folios",
        ),
        Mechanism {
            seed: "003",
            arch: Arch::Arm64,
            change: "arm64-pte-needs-flush",
            workload: WorkloadKind::ProtTransition,
            size: 4 * K,
            folio: f4k,
            phase: Some("none-to-rw"),
            what: "TLB invalidations per NONE->RW call",
            counted: Counted::TlbInvalidations,
            per: Per::Call,
        },
        reclaim(Arch::Arm64),
        reclaim(Arch::X86_64),
    ]
}

impl Mechanism {
    fn per_words(&self) -> String {
        match self.per {
            Per::Call => "per call".into(),
            Per::Pte => "per PTE".into(),
            Per::Folio => format!("per {} folio", self.folio),
        }
    }

    /// Calls → the row's unit: a count per call is divided by this.
    fn units(&self) -> f64 {
        match self.per {
            Per::Call => 1.0,
            Per::Pte => (self.size / 4096) as f64,
            Per::Folio => (self.size / self.folio.folio_bytes()).max(1) as f64,
        }
    }

    /// (name, count per unit) of what this row counts in `p`.
    fn counts(&self, p: &Profile) -> Vec<(String, f64)> {
        let u = self.units();
        match self.counted {
            Counted::TlbInvalidations => {
                vec![("TLB invalidations".into(), p.tlb_invalidations() / u)]
            }
            Counted::Functions(pats) => p
                .functions
                .iter()
                .filter(|f| pats.iter().any(|s| f.name.contains(s)) && f.entries > 0.0)
                .map(|f| (f.name.clone(), f.entries / u))
                .collect(),
        }
    }

    fn cell<'a>(&self, g: &'a GuestEvidence, v: Version) -> Option<&'a CellResult> {
        g.cell(
            self.arch,
            v,
            self.workload,
            self.size,
            self.folio,
            self.phase,
        )
    }
}

/// Two decimals are all a count per unit needs.
fn num(v: f64) -> String {
    counter(Some((v * 100.0).round() / 100.0))
}

/// A count per unit on the kernels before and after, by name.
pub struct Counts {
    pub before: Version,
    pub after: Version,
    /// (name, before, after); 0 where it did not run.
    pub rows: Vec<(String, f64, f64)>,
}

/// The counts of `m` on the kernels that bracket its change, or why there
/// are none.
pub fn count(m: &Mechanism, g: &GuestEvidence) -> Result<Counts, String> {
    let (before, after) = g
        .bracket(m.arch, m.workload, m.change)
        .map_err(|why| format!("{} guests: {why}", m.arch.name()))?;
    let profile = |v: Version| -> Result<&Profile, String> {
        let c = m
            .cell(g, v)
            .ok_or_else(|| g.why_missing(m.arch, Some(v), m.workload))?;
        c.profile.as_ref().ok_or_else(|| g.why_uncounted(m.arch, v))
    };
    let (pa, pb) = (profile(before)?, profile(after)?);
    let (ca, cb) = (m.counts(pa), m.counts(pb));
    let mut names: Vec<&String> = ca.iter().chain(&cb).map(|(n, _)| n).collect();
    names.sort();
    names.dedup();
    let get = |c: &[(String, f64)], n: &str| c.iter().find(|(x, _)| x == n).map_or(0.0, |x| x.1);
    let rows = names
        .into_iter()
        .map(|n| (n.clone(), get(&ca, n), get(&cb, n)))
        .collect();
    Ok(Counts {
        before,
        after,
        rows,
    })
}

/// The claim rows of the mechanisms of `ids`.
pub fn rows(ids: &[&str], g: &GuestEvidence, quick: bool) -> Vec<ClaimRow> {
    catalogue(quick)
        .into_iter()
        .filter(|m| ids.contains(&m.seed))
        .filter(|m| g.asked.is_empty() || g.asked.contains(&m.arch))
        .map(|m| row(&m, g))
        .collect()
}

fn row(m: &Mechanism, g: &GuestEvidence) -> ClaimRow {
    let phase = m.phase.map_or(String::new(), |p| format!(" {p}"));
    let cell = format!(
        "{} {} {}{phase}",
        m.workload.name(),
        fmt_size(m.size),
        m.folio
    );
    let mut r = ClaimRow {
        seed: m.seed.into(),
        claim: format!("{}: mechanism, {}", m.arch.name(), m.what),
        published: None,
        measured: None,
        model: None,
        predicted: None,
        verdict: String::new(),
        uncalibrated: Vec::new(),
    };
    match count(m, g) {
        Ok(c) if c.rows.is_empty() => {
            r.measured = Some(format!(
                "{} guests {} -> {}, {cell}: no such function ran ({})",
                m.arch.name(),
                c.before,
                c.after,
                match m.counted {
                    Counted::Functions(p) => p.join(", "),
                    Counted::TlbInvalidations => "TLB invalidations".into(),
                }
            ));
            r.verdict = "counted: none on either kernel (inlined, or not on this path)".into();
        }
        Ok(c) => {
            let parts: Vec<String> = c
                .rows
                .iter()
                .map(|(n, a, b)| format!("{n} {} -> {}", num(*a), num(*b)))
                .collect();
            r.measured = Some(format!(
                "{} guests {} -> {}, {cell}, {} (exact counts, QEMU plugin): {}",
                m.arch.name(),
                c.before,
                c.after,
                m.per_words(),
                parts.join("; ")
            ));
            r.verdict = format!("counted: {} {}", parts.join("; "), m.per_words());
        }
        Err(why) => {
            r.measured = Some(why);
            r.verdict = "not counted".into();
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_has_a_mechanism_and_units_divide() {
        let all = catalogue(true);
        for seed in ["000", "001", "002", "003", "004"] {
            assert!(all.iter().any(|m| m.seed == seed), "{seed}");
        }
        let toggle = all.iter().find(|m| m.seed == "001").unwrap();
        assert_eq!(toggle.units(), 100.0, "400K of 4K PTEs");
        let block = all.iter().find(|m| m.seed == "000").unwrap();
        assert_eq!(block.units(), 1024.0, "64M in 64K blocks");
        let p = Profile {
            tlb: [("tlbi-page".to_string(), 1.0), ("dsb".to_string(), 2.0)].into(),
            functions: vec![
                crate::record::FunctionCount {
                    name: "vm_normal_page".into(),
                    entries: 100.0,
                    instructions: 3300.0,
                },
                crate::record::FunctionCount {
                    name: "change_pte_range".into(),
                    entries: 1.0,
                    instructions: 15059.0,
                },
            ],
            ..Profile::default()
        };
        assert_eq!(toggle.counts(&p), [("vm_normal_page".to_string(), 1.0)]);
        let tlb = all.iter().find(|m| m.seed == "003").unwrap();
        assert_eq!(tlb.counts(&p), [("TLB invalidations".to_string(), 1.0)]);
    }
}
