//! Kernel behaviours ("strategies"): which version of each modelled path runs.
//!
//! Kernel counterpart: the git history of mm/mprotect.c, mm/mremap.c,
//! arch/arm64/mm/contpte.c and arch/arm64/include/asm/tlbflush.h between
//! v6.16 and the 2026 mm tree (docs/kernel.md §1). A strategy is a bundle of
//! [`Kernel`] feature switches; everything downstream is shared code, so two
//! strategies differ only where the kernel versions differ.

use core::fmt;
use core::str::FromStr;

use serde::{Deserialize, Serialize};

/// How `change_pte_range()` walks present PTEs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MprotectImpl {
    /// v6.16: one `ptep_modify_prot_start/commit` pair per PTE.
    PerPte,
    /// v6.17+: `mprotect_folio_pte_batch()` + `modify_prot_{start,commit}_ptes()`
    /// with AnonExclusive sub-batches (cac1db8c3aad + cf1b80dc31a1).
    Batched,
}

/// Deliberately broken kernels, for negative tests only: the property tests
/// must catch each of them. Never selectable from the command line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Faults {
    /// `pte_needs_flush()` answers false when the new PTE is PROT_NONE
    /// (an elided flush on RW→NONE: stale writable TLB entries survive).
    pub elide_protnone_flush: bool,
    /// v6.17-rc1: `commit_anon_folio_batch()` scans AnonExclusive from the
    /// folio's head page (`folio_page(folio, 0)`) instead of the batch's first
    /// page — wrong when the batch starts mid-folio (fixed by cf1b80dc31a1).
    pub anon_exclusive_from_folio_head: bool,
}

impl Faults {
    /// True when any fault is injected.
    pub fn any(&self) -> bool {
        self.elide_protnone_flush || self.anon_exclusive_from_folio_head
    }
}

/// Feature switches of one modelled kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Kernel {
    /// mprotect PTE walk.
    pub mprotect: MprotectImpl,
    /// Pedro Falcato v3 (2026): `change_present_ptes()` and the commit helpers
    /// are `__always_inline`, with an `nr_ptes == 1` specialisation. Same
    /// primitives; fewer out-of-line calls.
    pub always_inline_commit: bool,
    /// 093ae7a033cf (v6.17): `contpte_ptep_get()` stops scanning once it has
    /// seen both a dirty and a young entry.
    pub contpte_gather_early_exit: bool,
    /// 83bbd6be7d17 (v6.17): `contpte_convert()` skips its TLBI on CPUs with
    /// BBML2-noabort.
    pub contpte_bbml2_elision: bool,
    /// c320dbb7c80d (v6.19): arm64 overrides `pte_needs_flush()` (no flush
    /// when the old entry was invalid or only software bits changed).
    pub arm64_pte_needs_flush: bool,
    /// f822a9a81a31 + 0b5be138ce00 + 04d1c9d60c6e (v6.17, 6.17.y): mremap
    /// `move_ptes()` batches with `mremap_folio_pte_batch()`.
    pub mremap_batched: bool,
    /// Injected bugs (tests only).
    pub faults: Faults,
}

/// The strategies `ptelab model --list-strategies` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Strategy {
    /// v6.16: per-PTE mprotect and mremap.
    PerPte,
    /// v6.17 / v6.18: batched mprotect and mremap.
    Batched,
    /// v6.19: v6.17 + arm64 `pte_needs_flush()` elision.
    BatchedV619,
    /// mm-unstable 2026: v6.19 + Pedro Falcato v3 small-folio fast path.
    SmallFast,
}

impl Strategy {
    /// Every strategy, oldest kernel first.
    pub const ALL: [Strategy; 4] = [
        Strategy::PerPte,
        Strategy::Batched,
        Strategy::BatchedV619,
        Strategy::SmallFast,
    ];

    /// The name used on the command line and in results.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::PerPte => "per-pte",
            Strategy::Batched => "batched",
            Strategy::BatchedV619 => "batched-v6.19",
            Strategy::SmallFast => "smallfast",
        }
    }

    /// The kernel version(s) the strategy stands for.
    pub fn kernel(self) -> &'static str {
        match self {
            Strategy::PerPte => "v6.16",
            Strategy::Batched => "v6.17, v6.18",
            Strategy::BatchedV619 => "v6.19",
            Strategy::SmallFast => "mm-unstable 2026 (Pedro Falcato v3)",
        }
    }

    /// One line: what changes relative to the previous strategy.
    pub fn summary(self) -> &'static str {
        match self {
            Strategy::PerPte => {
                "per-PTE change_pte_range and move_ptes; contpte unfold/refold per block; full-scan contpte gather"
            }
            Strategy::Batched => {
                "PTE batching (cac1db8c3aad, cf1b80dc31a1, f822a9a81a31), arm64 batched modify_prot (7efa1cd5f89b), \
                 gather early exit, BBML2 TLBI elision in contpte_convert"
            }
            Strategy::BatchedV619 => "arm64 pte_needs_flush() elision (c320dbb7c80d); prot_numa changes not modelled",
            Strategy::SmallFast => {
                "small-folio fast path: same primitive counts as v6.17/v6.19, commit helpers always_inline (fewer calls)"
            }
        }
    }

    /// Names accepted by [`FromStr`], for error messages.
    pub fn accepted() -> String {
        let mut v: Vec<String> = Strategy::ALL.iter().map(|s| s.name().to_string()).collect();
        v.extend(["v6.16", "v6.17", "v6.18", "v6.19", "all"].map(String::from));
        v.join(", ")
    }

    /// The feature switches of this strategy.
    pub fn kernel_features(self) -> Kernel {
        let v616 = Kernel {
            mprotect: MprotectImpl::PerPte,
            always_inline_commit: false,
            contpte_gather_early_exit: false,
            contpte_bbml2_elision: false,
            arm64_pte_needs_flush: false,
            mremap_batched: false,
            faults: Faults::default(),
        };
        let v617 = Kernel {
            mprotect: MprotectImpl::Batched,
            contpte_gather_early_exit: true,
            contpte_bbml2_elision: true,
            mremap_batched: true,
            ..v616
        };
        let v619 = Kernel {
            arm64_pte_needs_flush: true,
            ..v617
        };
        match self {
            Strategy::PerPte => v616,
            Strategy::Batched => v617,
            Strategy::BatchedV619 => v619,
            Strategy::SmallFast => Kernel {
                always_inline_commit: true,
                ..v619
            },
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown strategy name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown strategy '{name}': accepted are {accepted}")]
pub struct UnknownStrategy {
    /// What was given.
    pub name: String,
    /// What is accepted.
    pub accepted: String,
}

impl FromStr for Strategy {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        let found = match t.as_str() {
            "per-pte" | "v6.16" => Some(Strategy::PerPte),
            "batched" | "v6.17" | "v6.18" => Some(Strategy::Batched),
            "batched-v6.19" | "v6.19" => Some(Strategy::BatchedV619),
            "smallfast" | "small-fast" | "v3" => Some(Strategy::SmallFast),
            _ => None,
        };
        found.ok_or_else(|| UnknownStrategy {
            name: s.to_string(),
            accepted: Strategy::accepted(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in Strategy::ALL {
            assert_eq!(s.name().parse::<Strategy>().unwrap(), s);
        }
        assert_eq!("v6.18".parse::<Strategy>().unwrap(), Strategy::Batched);
        assert!("v5.0"
            .parse::<Strategy>()
            .unwrap_err()
            .to_string()
            .contains("per-pte"));
    }

    #[test]
    fn smallfast_differs_from_v619_only_in_inlining() {
        let a = Strategy::BatchedV619.kernel_features();
        let b = Strategy::SmallFast.kernel_features();
        assert_eq!(
            Kernel {
                always_inline_commit: true,
                ..a
            },
            b
        );
    }
}
