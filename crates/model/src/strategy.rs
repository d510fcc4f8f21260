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
    /// The release whose code and whose Debian build (GCC, x86 with
    /// `CONFIG_PARAVIRT_XXL`) this kernel mirrors: the switches below follow
    /// from it, and it decides which helpers are out of line
    /// ([`Strategy::out_of_line`]).
    pub release: Strategy,
    /// mprotect PTE walk.
    pub mprotect: MprotectImpl,
    /// 89e613bc0b2d (v7.1, Pedro Falcato, "mm/mprotect: special-case small
    /// folios when applying permissions"): `change_present_ptes()` and the
    /// commit helpers are `__always_inline`, with an `nr_ptes == 1`
    /// specialisation. Same primitives; which helpers stay out of line then
    /// depends on the compiler (see [`Strategy::out_of_line`]).
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
    /// Baolin Wang's young-bit batching (v7.0: `clear_flush_young_ptes()` in
    /// `folio_referenced_one()`, arm64 `contpte_clear_flush_young_ptes()`;
    /// v7.1: `test_and_clear_young_ptes()` for MGLRU, 9970a9a27ffc). The
    /// model has one switch for both (docs/model.md, "Reclaim").
    pub young_ptes_batched: bool,
    /// Injected bugs (tests only).
    pub faults: Faults,
}

/// A kernel function the model counts entries of when the build emits it
/// out of line (`Counters::functions`, `calls`). Names are the kernel's
/// symbols as `/proc/kallsyms` prints them, without GCC's clone suffixes
/// (`.isra.0`, `.constprop.0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KFn {
    /// mm/memory.c, exported.
    VmNormalPage,
    /// x86 paravirt: the copy of `pte_val()` GCC emits out of line in
    /// mm/memory.c (`vm_normal_page()` calls it once up to v6.17, twice from
    /// v6.18).
    PteVal,
    /// mm/mprotect.c (v6.16), global.
    CanChangePteWritable,
    /// mm/mprotect.c (v6.17+), static: an `.isra.0` clone up to v7.1.
    MaybeChangePteWritable,
    /// mm/mprotect.c (v6.17 … v7.0), static, out of line until 89e613bc0b2d.
    ProtCommitFlushPtes,
    /// mm/mprotect.c (v6.17+), static; GCC inlines it in every build seen.
    SetWriteProtCommitFlushPtes,
    /// mm/mprotect.c (v6.17+), static; GCC inlines it in every build seen.
    CommitAnonFolioBatch,
    /// mm/mprotect.c (v6.17+), static; GCC inlines it in every build seen.
    PageAnonExclusiveSubBatch,
    /// x86: arch/x86/mm/pgtable.c `pte_mkwrite(pte, vma)` (shadow stacks).
    PteMkwrite,
    /// x86 `pte_modify()` (static inline): out of line in mprotect from v7.3.
    PteModify,
    /// x86 `pte_advance_pfn()` (static inline), out of line in mm/mprotect.c.
    PteAdvancePfn,
    /// x86 `pte_needs_flush()` (static inline), out of line in v7.1+.
    PteNeedsFlush,
    /// mm/internal.h `folio_pte_batch_flags()`: a `.constprop.0` clone on arm64.
    FolioPteBatchFlags,
    /// mm/util.c `folio_pte_batch()` (the 2026 rmap calls it).
    FolioPteBatch,
    /// x86 paravirt `ptep_modify_prot_start` op: `__ptep_modify_prot_start`.
    PvPtepModifyProtStart,
    /// x86 paravirt `ptep_modify_prot_commit` op: `__ptep_modify_prot_commit`.
    PvPtepModifyProtCommit,
    /// x86 paravirt `set_pte` op: `native_set_pte`.
    NativeSetPte,
    /// arm64 arch/arm64/mm/mmu.c.
    PtepModifyProtStart,
    /// arm64 arch/arm64/mm/mmu.c.
    PtepModifyProtCommit,
    /// arm64 arch/arm64/mm/mmu.c (v6.17+); x86: the generic static inline,
    /// out of line in v7.1+ only.
    ModifyProtStartPtes,
    /// arm64 arch/arm64/mm/mmu.c (v6.17+); x86: the generic static inline,
    /// out of line in v7.1+ only.
    ModifyProtCommitPtes,
    /// arm64 contpte.c.
    ContpteTryUnfold,
    /// arm64 contpte.c.
    ContpteTryFold,
    /// arm64 contpte.c.
    ContpteConvert,
    /// arm64 tlbflush.h, the out-of-line `.constprop.0` clone that
    /// `contpte_convert()` calls (up to v7.0).
    FlushTlbRangeNosync,
    /// arm64 contpte.c.
    ContptePtepGet,
    /// arm64 contpte.c.
    ContpteSetPtes,
    /// arm64 pgtable.h `__set_ptes_anysz()`, out of line (`.constprop.0`)
    /// under `contpte_set_ptes()`.
    SetPtesAnysz,
    /// arm64 contpte.c.
    ContpteGetAndClearFullPtes,
    /// arm64 contpte.c.
    ContpteTryUnfoldPartial,
    /// arm64 contpte.c (v6.16 … v6.19).
    ContptePtepTestAndClearYoung,
    /// arm64 contpte.c (v6.16 … v6.19).
    ContptePtepClearFlushYoung,
    /// arm64 contpte.c (v7.0+).
    ContpteTestAndClearYoungPtes,
    /// arm64 contpte.c (v7.0+).
    ContpteClearFlushYoungPtes,
}

impl KFn {
    /// Every function, in display order.
    pub const ALL: [KFn; 34] = [
        KFn::VmNormalPage,
        KFn::PteVal,
        KFn::CanChangePteWritable,
        KFn::MaybeChangePteWritable,
        KFn::ProtCommitFlushPtes,
        KFn::SetWriteProtCommitFlushPtes,
        KFn::CommitAnonFolioBatch,
        KFn::PageAnonExclusiveSubBatch,
        KFn::PteMkwrite,
        KFn::PteModify,
        KFn::PteAdvancePfn,
        KFn::PteNeedsFlush,
        KFn::FolioPteBatchFlags,
        KFn::FolioPteBatch,
        KFn::PvPtepModifyProtStart,
        KFn::PvPtepModifyProtCommit,
        KFn::NativeSetPte,
        KFn::PtepModifyProtStart,
        KFn::PtepModifyProtCommit,
        KFn::ModifyProtStartPtes,
        KFn::ModifyProtCommitPtes,
        KFn::ContpteTryUnfold,
        KFn::ContpteTryFold,
        KFn::ContpteConvert,
        KFn::FlushTlbRangeNosync,
        KFn::ContptePtepGet,
        KFn::ContpteSetPtes,
        KFn::SetPtesAnysz,
        KFn::ContpteGetAndClearFullPtes,
        KFn::ContpteTryUnfoldPartial,
        KFn::ContptePtepTestAndClearYoung,
        KFn::ContptePtepClearFlushYoung,
        KFn::ContpteTestAndClearYoungPtes,
        KFn::ContpteClearFlushYoungPtes,
    ];

    /// The kernel symbol (clone suffixes dropped).
    pub fn name(self) -> &'static str {
        match self {
            KFn::VmNormalPage => "vm_normal_page",
            KFn::PteVal => "pte_val",
            KFn::CanChangePteWritable => "can_change_pte_writable",
            KFn::MaybeChangePteWritable => "maybe_change_pte_writable",
            KFn::ProtCommitFlushPtes => "prot_commit_flush_ptes",
            KFn::SetWriteProtCommitFlushPtes => "set_write_prot_commit_flush_ptes",
            KFn::CommitAnonFolioBatch => "commit_anon_folio_batch",
            KFn::PageAnonExclusiveSubBatch => "page_anon_exclusive_sub_batch",
            KFn::PteMkwrite => "pte_mkwrite",
            KFn::PteModify => "pte_modify",
            KFn::PteAdvancePfn => "pte_advance_pfn",
            KFn::PteNeedsFlush => "pte_needs_flush",
            KFn::FolioPteBatchFlags => "folio_pte_batch_flags",
            KFn::FolioPteBatch => "folio_pte_batch",
            KFn::PvPtepModifyProtStart => "__ptep_modify_prot_start",
            KFn::PvPtepModifyProtCommit => "__ptep_modify_prot_commit",
            KFn::NativeSetPte => "native_set_pte",
            KFn::PtepModifyProtStart => "ptep_modify_prot_start",
            KFn::PtepModifyProtCommit => "ptep_modify_prot_commit",
            KFn::ModifyProtStartPtes => "modify_prot_start_ptes",
            KFn::ModifyProtCommitPtes => "modify_prot_commit_ptes",
            KFn::ContpteTryUnfold => "__contpte_try_unfold",
            KFn::ContpteTryFold => "__contpte_try_fold",
            KFn::ContpteConvert => "contpte_convert",
            KFn::FlushTlbRangeNosync => "__flush_tlb_range_nosync",
            KFn::ContptePtepGet => "contpte_ptep_get",
            KFn::ContpteSetPtes => "contpte_set_ptes",
            KFn::SetPtesAnysz => "__set_ptes_anysz",
            KFn::ContpteGetAndClearFullPtes => "contpte_get_and_clear_full_ptes",
            KFn::ContpteTryUnfoldPartial => "contpte_try_unfold_partial",
            KFn::ContptePtepTestAndClearYoung => "contpte_ptep_test_and_clear_young",
            KFn::ContptePtepClearFlushYoung => "contpte_ptep_clear_flush_young",
            KFn::ContpteTestAndClearYoungPtes => "contpte_test_and_clear_young_ptes",
            KFn::ContpteClearFlushYoungPtes => "contpte_clear_flush_young_ptes",
        }
    }

    /// Index into a dense per-function array.
    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The architecture a build targets, for [`Strategy::out_of_line`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BuildArch {
    /// x86-64, `CONFIG_PARAVIRT_XXL` (Debian's amd64 kernels).
    X86_64,
    /// arm64 (Debian's arm64 kernels).
    Arm64,
}

/// The strategies `ptelab model --list-strategies` names: one per kernel
/// release whose code or Debian build differs on the modelled paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Strategy {
    /// v6.16 (and every release before it that ptelab offers, 6.12 on):
    /// per-PTE mprotect and mremap.
    V6_16,
    /// v6.17: batched mprotect and mremap.
    V6_17,
    /// v6.18: v6.17's paths; `vm_normal_page()` grows (x86: two out-of-line
    /// `pte_val` calls instead of one).
    V6_18,
    /// v6.19: arm64 `pte_needs_flush()` elision.
    V6_19,
    /// v7.0: Baolin Wang's batched `folio_referenced_one()` (reclaim).
    V7_0,
    /// v7.1: the small-folio change 89e613bc0b2d.
    V7_1,
    /// v7.2: v7.1's paths; Debian's build (GCC 16) calls only the first
    /// `pte_advance_pfn()` of an x86 `folio_pte_batch()` out of line again.
    V7_2,
    /// v7.3: x86 `pte_modify()` out of line.
    V7_3,
}

impl Strategy {
    /// Every strategy, oldest kernel first.
    pub const ALL: [Strategy; 8] = [
        Strategy::V6_16,
        Strategy::V6_17,
        Strategy::V6_18,
        Strategy::V6_19,
        Strategy::V7_0,
        Strategy::V7_1,
        Strategy::V7_2,
        Strategy::V7_3,
    ];

    /// The name used on the command line and in results.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::V6_16 => "v6.16",
            Strategy::V6_17 => "v6.17",
            Strategy::V6_18 => "v6.18",
            Strategy::V6_19 => "v6.19",
            Strategy::V7_0 => "v7.0",
            Strategy::V7_1 => "v7.1",
            Strategy::V7_2 => "v7.2",
            Strategy::V7_3 => "v7.3",
        }
    }

    /// The kernel releases the strategy stands for.
    pub fn kernel(self) -> &'static str {
        match self {
            Strategy::V6_16 => "v6.12 … v6.16",
            Strategy::V6_17 => "v6.17",
            Strategy::V6_18 => "v6.18",
            Strategy::V6_19 => "v6.19",
            Strategy::V7_0 => "v7.0",
            Strategy::V7_1 => "v7.1",
            Strategy::V7_2 => "v7.2",
            Strategy::V7_3 => "v7.3",
        }
    }

    /// One line: what changes relative to the previous strategy.
    pub fn summary(self) -> &'static str {
        match self {
            Strategy::V6_16 => {
                "per-PTE change_pte_range and move_ptes; contpte unfold/refold per block; full-scan contpte gather"
            }
            Strategy::V6_17 => {
                "PTE batching (cac1db8c3aad, cf1b80dc31a1, f822a9a81a31), arm64 batched modify_prot (7efa1cd5f89b), \
                 gather early exit, BBML2 TLBI elision in contpte_convert; prot_commit_flush_ptes out of line"
            }
            Strategy::V6_18 => "same paths as v6.17; vm_normal_page reworked (x86: 2 pte_val calls, was 1)",
            Strategy::V6_19 => "arm64 pte_needs_flush() elision (c320dbb7c80d); prot_numa changes not modelled",
            Strategy::V7_0 => "batched young-bit clearing in folio_referenced_one (Baolin Wang); mprotect as v6.19",
            Strategy::V7_1 => {
                "89e613bc0b2d (Pedro Falcato): commit helpers __always_inline, same primitives; arm64 loses the \
                 prot_commit_flush_ptes call, x86 (GCC) gains out-of-line modify_prot_commit_ptes, \
                 pte_needs_flush and pte_advance_pfn calls"
            }
            Strategy::V7_2 => {
                "as v7.1; the x86 build (GCC 16) calls one pte_advance_pfn per folio_pte_batch, not one per PTE"
            }
            Strategy::V7_3 => "as v7.1 (GCC 14 build), with pte_modify out of line in the x86 build",
        }
    }

    /// Names accepted by [`FromStr`], for error messages.
    pub fn accepted() -> String {
        let mut v: Vec<String> = Strategy::ALL.iter().map(|s| s.name().to_string()).collect();
        v.extend(
            [
                "per-pte",
                "batched",
                "batched-v6.19",
                "smallfast",
                "v7.2",
                "all",
            ]
            .map(String::from),
        );
        v.join(", ")
    }

    /// The feature switches of this strategy.
    pub fn kernel_features(self) -> Kernel {
        let v616 = Kernel {
            release: self,
            mprotect: MprotectImpl::PerPte,
            always_inline_commit: false,
            contpte_gather_early_exit: false,
            contpte_bbml2_elision: false,
            arm64_pte_needs_flush: false,
            mremap_batched: false,
            young_ptes_batched: false,
            faults: Faults::default(),
        };
        if self < Strategy::V6_17 {
            return v616;
        }
        Kernel {
            mprotect: MprotectImpl::Batched,
            contpte_gather_early_exit: true,
            contpte_bbml2_elision: true,
            mremap_batched: true,
            arm64_pte_needs_flush: self >= Strategy::V6_19,
            young_ptes_batched: self >= Strategy::V7_0,
            always_inline_commit: self >= Strategy::V7_1,
            ..v616
        }
    }

    /// Whether this release's Debian build (GCC; x86 with
    /// `CONFIG_PARAVIRT_XXL`) has `f` as an out-of-line function at the call
    /// sites the model counts, so that a call of it is a counted function
    /// entry. Read from the builds' symbol tables and disassembly and the
    /// entries counted in guests (docs/model.md, "Out-of-line calls").
    pub fn out_of_line(self, arch: BuildArch, f: KFn) -> bool {
        let x86 = arch == BuildArch::X86_64;
        let inline_commit = self >= Strategy::V7_1;
        match f {
            // Exported or arch out-of-line code: always a call.
            KFn::VmNormalPage
            | KFn::CanChangePteWritable
            | KFn::FolioPteBatch
            | KFn::MaybeChangePteWritable => true,
            KFn::ProtCommitFlushPtes => !inline_commit,
            KFn::SetWriteProtCommitFlushPtes
            | KFn::CommitAnonFolioBatch
            | KFn::PageAnonExclusiveSubBatch => false,
            // x86 only: the arm64 7.3.4 build has a pte_modify symbol, but
            // mprotect inlines it (no entry counted).
            KFn::PteModify => x86 && self >= Strategy::V7_3,
            // x86 only.
            KFn::PteVal
            | KFn::PteMkwrite
            | KFn::PvPtepModifyProtStart
            | KFn::PvPtepModifyProtCommit
            | KFn::NativeSetPte => x86,
            KFn::PteAdvancePfn => x86,
            KFn::PteNeedsFlush => x86 && inline_commit,
            KFn::ModifyProtStartPtes => !x86 && self >= Strategy::V6_17,
            KFn::ModifyProtCommitPtes => {
                (!x86 && self >= Strategy::V6_17) || (x86 && inline_commit)
            }
            // arm64 only.
            KFn::FolioPteBatchFlags
            | KFn::PtepModifyProtStart
            | KFn::PtepModifyProtCommit
            | KFn::ContpteTryUnfold
            | KFn::ContpteTryFold
            | KFn::ContpteConvert
            | KFn::ContptePtepGet
            | KFn::ContpteSetPtes
            | KFn::ContpteGetAndClearFullPtes
            | KFn::ContpteTryUnfoldPartial
            | KFn::ContptePtepTestAndClearYoung
            | KFn::ContptePtepClearFlushYoung
            | KFn::ContpteTestAndClearYoungPtes
            | KFn::ContpteClearFlushYoungPtes => !x86,
            KFn::FlushTlbRangeNosync => !x86 && self < Strategy::V7_1,
            KFn::SetPtesAnysz => !x86 && self >= Strategy::V6_17,
        }
    }

    /// x86: out-of-line `pte_val` calls inside one `vm_normal_page()`
    /// (1 up to v6.17; 2 from v6.18, whose `vm_normal_page()` reads the
    /// entry twice).
    pub fn vm_normal_page_pte_vals(self) -> u64 {
        if self >= Strategy::V6_18 {
            2
        } else {
            1
        }
    }

    /// x86: out-of-line `pte_advance_pfn` calls inside one
    /// `folio_pte_batch_flags()` that returned `nr` (v6.17 … v7.0: the first
    /// only, the loop's are inlined; v7.1+: every one).
    pub fn folio_pte_batch_advances(self, nr: u64) -> u64 {
        // A compiler's inlining choice, not a source change: the 7.1 and
        // 7.3 builds (GCC 14) call every one, 7.2's (GCC 16) the first only.
        if self >= Strategy::V7_1 && self != Strategy::V7_2 {
            nr
        } else {
            1
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

    /// A strategy's name, or a name used before strategies were named after
    /// releases (`per-pte`, `batched`, `batched-v6.19`, `smallfast`: stored
    /// results carry them).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        let found = match t.as_str() {
            "v6.16" | "per-pte" => Some(Strategy::V6_16),
            "v6.17" | "batched" => Some(Strategy::V6_17),
            "v6.18" => Some(Strategy::V6_18),
            "v6.19" | "batched-v6.19" => Some(Strategy::V6_19),
            "v7.0" => Some(Strategy::V7_0),
            "v7.1" | "smallfast" | "small-fast" | "v3" => Some(Strategy::V7_1),
            "v7.2" => Some(Strategy::V7_2),
            "v7.3" => Some(Strategy::V7_3),
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
    fn names_round_trip_and_old_names_are_aliases() {
        for s in Strategy::ALL {
            assert_eq!(s.name().parse::<Strategy>().unwrap(), s);
        }
        for (old, new) in [
            ("per-pte", Strategy::V6_16),
            ("batched", Strategy::V6_17),
            ("batched-v6.19", Strategy::V6_19),
            ("smallfast", Strategy::V7_1),
        ] {
            assert_eq!(old.parse::<Strategy>().unwrap(), new, "{old}");
        }
        assert!("v5.0"
            .parse::<Strategy>()
            .unwrap_err()
            .to_string()
            .contains("v6.16"));
    }

    #[test]
    fn kfn_table_is_complete_and_dense() {
        for (i, f) in KFn::ALL.iter().enumerate() {
            assert_eq!(f.index(), i, "{f:?}");
        }
        let mut names: Vec<_> = KFn::ALL.iter().map(|f| f.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KFn::ALL.len());
    }

    #[test]
    fn v71_differs_from_v70_only_in_inlining_and_is_v619_on_mprotect() {
        let a = Strategy::V7_0.kernel_features();
        let b = Strategy::V7_1.kernel_features();
        assert_eq!(
            Kernel {
                release: Strategy::V7_1,
                always_inline_commit: true,
                ..a
            },
            b
        );
        let c = Strategy::V6_19.kernel_features();
        assert_eq!(
            Kernel {
                release: Strategy::V7_0,
                young_ptes_batched: true,
                ..c
            },
            a
        );
    }

    #[test]
    fn the_small_folio_change_moves_calls_differently_per_arch() {
        use BuildArch::{Arm64, X86_64};
        // arm64: prot_commit_flush_ptes is inlined, nothing new goes out of line.
        assert!(Strategy::V7_0.out_of_line(Arm64, KFn::ProtCommitFlushPtes));
        assert!(!Strategy::V7_1.out_of_line(Arm64, KFn::ProtCommitFlushPtes));
        assert!(!Strategy::V7_1.out_of_line(Arm64, KFn::PteNeedsFlush));
        // x86 (GCC): prot_commit_flush_ptes is inlined, and its own inlined
        // helpers come out of line.
        assert!(!Strategy::V7_1.out_of_line(X86_64, KFn::ProtCommitFlushPtes));
        for f in [KFn::PteNeedsFlush, KFn::ModifyProtCommitPtes] {
            assert!(!Strategy::V7_0.out_of_line(X86_64, f), "{f:?}");
            assert!(Strategy::V7_1.out_of_line(X86_64, f), "{f:?}");
        }
        assert_eq!(Strategy::V7_0.folio_pte_batch_advances(16), 1);
        assert_eq!(Strategy::V7_1.folio_pte_batch_advances(16), 16);
        // Debian's 7.2.13 x86 build (GCC 16): the first only, counted.
        assert_eq!(Strategy::V7_2.folio_pte_batch_advances(16), 1);
        assert_eq!(Strategy::V7_3.folio_pte_batch_advances(16), 16);
        assert_eq!(Strategy::V6_17.vm_normal_page_pte_vals(), 1);
        assert_eq!(Strategy::V6_18.vm_normal_page_pte_vals(), 2);
        // The helpers that v3 marked __always_inline were inlined by GCC before it, too.
        for s in Strategy::ALL {
            for a in [X86_64, Arm64] {
                assert!(!s.out_of_line(a, KFn::CommitAnonFolioBatch));
            }
        }
    }
}
