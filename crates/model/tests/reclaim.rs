//! Reclaim young-bit paths (seed 004): golden counts per folio, the cases of
//! the review thread (a range spanning several contpte blocks, a range whose
//! first PTE is not contig), partially young folios, contpte on/off, and
//! invariants over random layouts (every pass ends with no young PTE, the
//! same `folio_referenced()` answers in every kernel, consistent arm64
//! blocks, no young-clearing flush on x86).

use proptest::prelude::*;
use ptelab_model::layout::{build, FolioPlacement, LayoutSpec, PteTweak};
use ptelab_model::workload::reclaim_scan;
use ptelab_model::{
    run_model, Arch, ArchConfig, Arm64, Counters, Granule, Lru, ModelConfig, Strategy, VmFlags,
    Workload, X86,
};

const K: u64 = 1 << 10;

const PRE_2026: Strategy = Strategy::V6_16;
const Y2026: Strategy = Strategy::V7_1;

fn arm64(contpte: bool) -> Arm64 {
    Arm64 {
        granule: Granule::K4,
        contpte,
        bbml2: false,
        tlbi_range: true,
        lpa2: false,
    }
}

fn pass(
    arch: ArchConfig,
    w: Workload,
    s: Strategy,
    size: u64,
    folio: u64,
    offset: u64,
) -> Counters {
    let mut cfg = ModelConfig::new(w, arch, s, size, folio);
    cfg.offset_pages = offset;
    let out = run_model(&cfg).unwrap_or_else(|e| panic!("{w:?} {s} {arch:?}: {e}"));
    assert_eq!(out.calls.len(), 1);
    out.calls[0].counters.clone()
}

#[test]
fn golden_64k_folio_fully_young() {
    let a = ArchConfig::Arm64(arm64(true));
    for w in [Workload::Reclaim, Workload::ReclaimMglru] {
        // arm64, contpte: v6.16..v6.19 clears the whole block for each of its 16 PTEs.
        let old = pass(a, w, PRE_2026, 64 * K, 64 * K, 0);
        assert_eq!((old.young_tests, old.young_clears), (256, 256), "{w:?}");
        let new = pass(a, w, Y2026, 64 * K, 64 * K, 0);
        assert_eq!((new.young_tests, new.young_clears), (16, 16), "{w:?}");
        assert_eq!(new.batch_sizes.get(&16), Some(&1));
        assert!(
            new.pte_loads * 10 < old.pte_loads,
            "{} vs {}",
            new.pte_loads,
            old.pte_loads
        );
        assert_eq!(old.folios_scanned, 1);
    }
    // Classic LRU flushes once per young block either way (later PTEs of the
    // block find it old); the 2026 flush is one nosync range TLBI.
    let old = pass(a, Workload::Reclaim, PRE_2026, 64 * K, 64 * K, 0);
    let new = pass(a, Workload::Reclaim, Y2026, 64 * K, 64 * K, 0);
    for c in [&old, &new] {
        assert_eq!(
            (
                c.young_flushes,
                c.tlb_flush_calls,
                c.tlb_flush_pages,
                c.tlbi_ops
            ),
            (1, 1, 16, 1)
        );
    }
    // MGLRU never flushes.
    let m = pass(a, Workload::ReclaimMglru, Y2026, 64 * K, 64 * K, 0);
    assert_eq!((m.young_flushes, m.tlbi_ops), (0, 0));

    // x86: 16 loads + 16 lock btr per folio either way, never a flush.
    for s in [PRE_2026, Y2026] {
        for w in [Workload::Reclaim, Workload::ReclaimMglru] {
            let c = pass(ArchConfig::X86, w, s, 64 * K, 64 * K, 0);
            assert_eq!((c.young_tests, c.young_clears), (16, 16));
            assert_eq!((c.tlb_flush_calls, c.tlbi_ops, c.young_flushes), (0, 0, 0));
        }
    }
    // arm64 without contpte: one CAS per PTE and one page TLBI per young PTE
    // in both kernels (the generic loop of clear_flush_young_ptes).
    for s in [PRE_2026, Y2026] {
        let c = pass(
            ArchConfig::Arm64(arm64(false)),
            Workload::Reclaim,
            s,
            64 * K,
            64 * K,
            0,
        );
        assert_eq!(
            (c.young_clears, c.young_flushes, c.tlbi_ops),
            (16, 16, 16),
            "{s}"
        );
    }
}

#[test]
fn range_spanning_several_blocks() {
    // 256K folios: 64 PTEs = 4 contpte blocks per batch.
    let a = ArchConfig::Arm64(arm64(true));
    let old = pass(a, Workload::Reclaim, PRE_2026, 1024 * K, 256 * K, 0);
    let new = pass(a, Workload::Reclaim, Y2026, 1024 * K, 256 * K, 0);
    assert_eq!(new.folios_scanned, 4);
    assert_eq!(new.batch_sizes.get(&64), Some(&4));
    assert_eq!(new.young_clears, 256);
    assert_eq!(old.young_clears, 256 * 16);
    // One range TLBI over 64 pages per folio vs one block TLBI per block.
    assert_eq!((new.young_flushes, new.tlb_flush_pages), (4, 256));
    assert_eq!((old.young_flushes, old.tlb_flush_pages), (16, 256));
}

#[test]
fn first_pte_not_contig() {
    // A 128K folio mapped from its page 3: block 0 is partial (painted
    // non-contig), block 1 contig. folio_pte_batch() stops at the CONT bit.
    let a = ArchConfig::Arm64(arm64(true));
    let new = pass(a, Workload::Reclaim, Y2026, 29 * 4 * K, 128 * K, 3);
    assert_eq!(new.batch_sizes.get(&13), Some(&1));
    assert_eq!(new.batch_sizes.get(&16), Some(&1));
    assert_eq!(new.young_clears, 29);
    assert_eq!(new.young_flushes, 2);
    let old = pass(a, Workload::Reclaim, PRE_2026, 29 * 4 * K, 128 * K, 3);
    assert_eq!(old.young_clears, 13 + 16 * 16);
    assert_eq!(old.young_flushes, 13 + 1);
}

/// The thread's case (b): one call over a range whose first PTE is not
/// contig but whose later PTEs are. `contpte_align_addr_ptep()` widens only
/// ends that are contig; every entry is cleared, blocks stay consistent.
#[test]
fn one_call_over_noncontig_then_contig_entries() {
    let spec = LayoutSpec {
        base: 512,
        vma_flags: VmFlags::READ | VmFlags::WRITE,
        folios: vec![FolioPlacement {
            mapped: (3, 32),
            ..FolioPlacement::whole(5)
        }],
        extra_window: 0,
    };
    let (mut cx, placed) = build(arm64(true), Y2026.kernel_features(), &spec, true);
    let va = placed.folios[0].0;
    assert!(!cx.arch.pte_cont(cx.peek(va + 3)) && cx.arch.pte_cont(cx.peek(va + 16)));
    assert!(<Arm64 as Arch>::clear_flush_young_ptes(&mut cx, va + 3, 29));
    let c = cx.take_counters();
    assert_eq!(c.young_clears, 29);
    assert_eq!(c.young_flushes, 1);
    for a in va + 3..va + 32 {
        assert!(!cx.arch.pte_young(cx.peek(a)));
    }
    Arm64::check_contig(&cx, va, va + 32).unwrap();
    cx.tlb_check().unwrap();
    // The contig tail as one call from mid-block: widened to the whole block.
    for a in va + 16..va + 32 {
        let p = cx.arch.pte_mkyoung(cx.peek(a));
        cx.poke(a, p);
    }
    assert!(<Arm64 as Arch>::test_and_clear_young_ptes(
        &mut cx,
        va + 20,
        4
    ));
    assert_eq!(cx.take_counters().young_clears, 16);
}

fn partial_young_layout(order: u8, young: &[u64]) -> LayoutSpec {
    let n = 1u64 << order;
    let tweaks = (0..n)
        .filter(|i| !young.contains(i))
        .map(|i| (i, PteTweak::Old))
        .collect();
    LayoutSpec {
        base: 512,
        vma_flags: VmFlags::READ | VmFlags::WRITE,
        folios: vec![
            FolioPlacement {
                tweaks,
                ..FolioPlacement::whole(order)
            },
            FolioPlacement {
                tweaks: (0..n).map(|i| (i, PteTweak::Old)).collect(),
                ..FolioPlacement::whole(order)
            },
        ],
        extra_window: 0,
    }
}

#[test]
fn partially_young_folios() {
    let spec = partial_young_layout(4, &[5, 11]);
    for s in [PRE_2026, Y2026] {
        let (mut cx, placed) = build(X86, s.kernel_features(), &spec, true);
        let rec = reclaim_scan(&mut cx, &placed.folios, Lru::Classic).unwrap();
        // x86: every PTE read, lock btr only on the 2 young ones.
        assert_eq!(
            (rec.counters.young_tests, rec.counters.young_clears),
            (32, 2),
            "{s}"
        );
        assert!(rec.label.contains("1 referenced"), "{}", rec.label);

        let (mut cx, placed) = build(arm64(true), s.kernel_features(), &spec, true);
        let rec = reclaim_scan(&mut cx, &placed.folios, Lru::Classic).unwrap();
        assert!(rec.label.contains("1 referenced"), "{}", rec.label);
        // Only the young folio's block is flushed.
        assert_eq!(rec.counters.young_flushes, 1, "{s}");
    }
}

fn arch_of(i: u8) -> Option<Arm64> {
    match i % 3 {
        0 => None,
        1 => Some(arm64(true)),
        _ => Some(arm64(false)),
    }
}

fn run_random(arch: Option<Arm64>, s: Strategy, spec: &LayoutSpec, lru: Lru) -> (String, Counters) {
    let r = match arch {
        None => {
            let (mut cx, p) = build(X86, s.kernel_features(), spec, true);
            reclaim_scan(&mut cx, &p.folios, lru)
        }
        Some(a) => {
            let (mut cx, p) = build(a, s.kernel_features(), spec, true);
            reclaim_scan(&mut cx, &p.folios, lru)
        }
    };
    let r = r.unwrap_or_else(|e| panic!("{s} {arch:?} {lru:?}: {e}"));
    (r.label, r.counters)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Every kernel and LRU clears every young bit, answers the same
    /// per-folio result (checked inside `reclaim_scan`, and the totals
    /// agree here), keeps arm64 blocks consistent, and x86 never flushes.
    #[test]
    fn reclaim_invariants(
        archi in 0u8..3,
        folios in prop::collection::vec((0u8..7, 0u64..64, 0u64..64, prop::collection::vec(0u64..64, 0..8), any::<bool>()), 1..6),
        mglru in any::<bool>(),
    ) {
        let arch = arch_of(archi);
        let lru = if mglru { Lru::Mglru } else { Lru::Classic };
        let placements: Vec<FolioPlacement> = folios
            .iter()
            .map(|(order, a, b, old, mis)| {
                let n = 1u64 << order;
                let (lo, hi) = ((a % n).min(b % n), (a % n).max(b % n) + 1);
                FolioPlacement {
                    mapped: (lo, hi),
                    tweaks: old.iter().map(|i| (i % n, PteTweak::Old)).collect(),
                    va_misaligned: *mis,
                    ..FolioPlacement::whole(*order)
                }
            })
            .collect();
        let spec = LayoutSpec {
            base: 512,
            vma_flags: VmFlags::READ | VmFlags::WRITE,
            folios: placements,
            extra_window: 0,
        };
        let (l0, c0) = run_random(arch, PRE_2026, &spec, lru);
        let (l1, c1) = run_random(arch, Y2026, &spec, lru);
        prop_assert_eq!(l0, l1);
        prop_assert!(c1.young_clears <= c0.young_clears);
        if arch.is_none() {
            prop_assert_eq!(c0.tlb_flush_calls + c1.tlb_flush_calls, 0);
            prop_assert_eq!(c0.young_clears, c1.young_clears);
        }
        if lru == Lru::Mglru {
            prop_assert_eq!(c0.young_flushes + c1.young_flushes, 0);
        }
    }
}
