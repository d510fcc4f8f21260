//! Golden counts: the docs/kernel.md formulas (§4.7, §6.10, §11) as exact
//! assertions, and counter ledgers of canonical scenarios as insta snapshots
//! (a changed count is a reviewed diff).

use std::collections::BTreeMap;

use ptelab_model::layout::{build, FolioPlacement, LayoutSpec};
use ptelab_model::mprotect::mprotect;
use ptelab_model::{
    run_model, ArchConfig, Arm64, Counters, Granule, ModelConfig, ModelOutcome, Prot, Strategy,
    VmFlags, Workload,
};

const K: u64 = 1024;

fn arm64() -> ArchConfig {
    ArchConfig::arm64(Granule::K4)
}

fn run(
    wl: Workload,
    arch: ArchConfig,
    s: Strategy,
    size: u64,
    folio: u64,
    offset: u64,
) -> ModelOutcome {
    let mut cfg = ModelConfig::new(wl, arch, s, size, folio);
    cfg.offset_pages = offset;
    run_model(&cfg).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn call<'a>(o: &'a ModelOutcome, label: &str) -> &'a Counters {
    &o.calls
        .iter()
        .find(|c| c.label.contains(label))
        .unwrap_or_else(|| panic!("no call {label}"))
        .counters
}

#[test]
fn arm64_64k_folio_rw_to_ro_whole_blocks() {
    // docs/kernel.md §6.10: per fully covered, aligned block (C = 16).
    let blocks = 8;
    let v616 = run(
        Workload::MprotectRoRw,
        arm64(),
        Strategy::V6_16,
        blocks * 64 * K,
        64 * K,
        0,
    );
    let ro = call(&v616, "PROT_READ)");
    assert_eq!(ro.pte_xchg, 48 * blocks);
    assert_eq!(ro.pte_stores, 48 * blocks);
    assert_eq!(ro.tlbi_sync, 2 * blocks);
    assert_eq!(ro.contpte_unfolds, blocks);
    assert_eq!(ro.contpte_folds, blocks);
    assert_eq!(ro.needs_flush_evals, 16 * blocks);
    // 5C raw loads: gather 1 + C, 15 plain ptep_get, C in start, C in commit, C in the fold scan.
    assert_eq!(ro.pte_loads, 80 * blocks);
    let v617 = run(
        Workload::MprotectRoRw,
        arm64(),
        Strategy::V6_17,
        blocks * 64 * K,
        64 * K,
        0,
    );
    let ro = call(&v617, "PROT_READ)");
    assert_eq!(ro.pte_xchg, 16 * blocks);
    assert_eq!(ro.pte_stores, 16 * blocks);
    assert_eq!(ro.tlbi_sync, 0);
    assert_eq!(ro.contpte_unfolds + ro.contpte_folds, 0);
    assert_eq!(ro.needs_flush_evals, blocks);
    // Gather only, early exit on a dirty+young first entry: 1 + 2 loads.
    assert_eq!(ro.pte_loads, 3 * blocks);
    assert_eq!(ro.contpte_gathers, blocks);
    // Same mmu_gather hull: one flush of the whole range.
    assert_eq!(ro.tlb_flush_calls, 1);
    assert_eq!(ro.tlb_flush_pages, 16 * blocks);
}

#[test]
fn arm64_multi_block_folio_is_one_batch() {
    // F = kC: one batch of F, k gathers, F xchg, F stores, no TLBI_SYNC.
    let v617 = run(
        Workload::MprotectRoRw,
        arm64(),
        Strategy::V6_17,
        256 * K,
        256 * K,
        0,
    );
    let ro = call(&v617, "PROT_READ)");
    assert_eq!(ro.batch_sizes, BTreeMap::from([(64, 1)]));
    assert_eq!(ro.contpte_gathers, 4);
    assert_eq!((ro.pte_xchg, ro.pte_stores, ro.tlbi_sync), (64, 64, 0));
}

/// First mprotect of a freshly faulted (folded) layout.
fn first_call(arch: Arm64, kernel: Strategy, offset: u64, pages: u64, prot: Prot) -> Counters {
    let spec = LayoutSpec {
        base: 4096,
        vma_flags: VmFlags::READ | VmFlags::WRITE | VmFlags::SOFTDIRTY,
        folios: vec![FolioPlacement::whole(4); 2],
        extra_window: 0,
    };
    let (mut cx, _) = build(arch, kernel.kernel_features(), &spec, true);
    mprotect(&mut cx, 4096 + offset, pages, prot).unwrap();
    cx.take_counters()
}

#[test]
fn arm64_partial_blocks_unfold_in_both_versions() {
    // docs/kernel.md §6.10: the range starts 8 pages into a 64K folio and
    // ends mid-block: both versions unfold the two partial blocks once (TLBI
    // each).
    let a = Arm64 {
        granule: Granule::K4,
        contpte: true,
        bbml2: false,
        tlbi_range: true,
        lpa2: false,
    };
    for s in [Strategy::V6_16, Strategy::V6_17] {
        let c = first_call(a, s, 8, 16, Prot::Read);
        assert_eq!(
            (c.contpte_unfolds, c.contpte_folds, c.tlbi_sync),
            (2, 0, 2),
            "{s}"
        );
    }
    // BBML2-noabort elides the repaint TLBIs from v6.17 on, not in v6.16.
    let b = Arm64 { bbml2: true, ..a };
    assert_eq!(
        first_call(b, Strategy::V6_17, 8, 16, Prot::Read).tlbi_sync,
        0
    );
    assert_eq!(
        first_call(b, Strategy::V6_16, 8, 16, Prot::Read).tlbi_sync,
        2
    );
}

#[test]
fn arm64_partial_blocks_in_steady_state() {
    // Steady state differs from the first call: v6.16 refolds the first block
    // on the RW call (its last entry is in range and the block is uniform
    // again) and unfolds it on the next RO call; v6.17 never repaints a
    // partial block, so its blocks stay unfolded and cost nothing more.
    let v616 = run(
        Workload::MprotectRoRw,
        arm64(),
        Strategy::V6_16,
        64 * K,
        64 * K,
        8,
    );
    assert_eq!(call(&v616, "PROT_READ)").contpte_unfolds, 1);
    assert_eq!(call(&v616, "PROT_READ|PROT_WRITE").contpte_folds, 1);
    let v617 = run(
        Workload::MprotectRoRw,
        arm64(),
        Strategy::V6_17,
        64 * K,
        64 * K,
        8,
    );
    let t = v617.total();
    assert_eq!((t.contpte_unfolds, t.contpte_folds, t.tlbi_sync), (0, 0, 0));
}

#[test]
fn x86_order0_v617_adds_one_page_read_per_pte_off_the_upgrade_path() {
    let n = 100;
    for label in ["PROT_NONE", "PROT_READ|PROT_WRITE"] {
        let a = run(
            Workload::MprotectToggle,
            ArchConfig::X86,
            Strategy::V6_16,
            n * 4 * K,
            4 * K,
            0,
        );
        let b = run(
            Workload::MprotectToggle,
            ArchConfig::X86,
            Strategy::V6_17,
            n * 4 * K,
            4 * K,
            0,
        );
        let (a, b) = (call(&a, label), call(&b, label));
        for (x, y) in [
            (a.pte_loads, b.pte_loads),
            (a.pte_xchg, b.pte_xchg),
            (a.pte_stores, b.pte_stores),
        ] {
            assert_eq!((x, y), (n, n), "{label}");
        }
        assert_eq!(a.needs_flush_evals, b.needs_flush_evals);
        if label == "PROT_NONE" {
            // Non-upgrade path: v6.16 reads no struct page; v6.17 one per PTE.
            assert_eq!(a.page_reads, 0);
            assert_eq!(b.page_reads, n);
            assert_eq!(b.folio_lookups, n);
        } else {
            // Upgrade path (private, exclusive): both look the page up.
            assert_eq!(a.folio_lookups, n);
            assert_eq!(b.anon_exclusive_tests, n);
        }
    }
}

#[test]
fn x86_64k_folios_batch_per_folio() {
    // docs/kernel.md §11: 64 KiB mTHP aligned, RW→RO, N = 16k: k batches,
    // 16k loads (1 + 15 each), k page lookups, 16k xchg/stores, k
    // pte_needs_flush.
    let k = 4;
    let o = run(
        Workload::MprotectRoRw,
        ArchConfig::X86,
        Strategy::V6_17,
        k * 64 * K,
        64 * K,
        0,
    );
    let ro = call(&o, "PROT_READ)");
    assert_eq!(ro.batches, k);
    assert_eq!(ro.pte_loads, 16 * k);
    assert_eq!(ro.folio_lookups, k);
    assert_eq!((ro.pte_xchg, ro.pte_stores), (16 * k, 16 * k));
    assert_eq!((ro.needs_flush_evals, ro.tlb_gather_ranges), (k, k));
    // Upgrade path: N + (S − B) AnonExclusive tests with S = B (all exclusive).
    assert_eq!(
        call(&o, "PROT_READ|PROT_WRITE").anon_exclusive_tests,
        16 * k
    );
}

#[test]
fn x86_flushes_match_the_tracepoint_rule() {
    // 400K = 100 pages > 33: one full flush on RW→NONE, none on NONE→RW.
    for s in Strategy::ALL {
        let o = run(
            Workload::MprotectToggle,
            ArchConfig::X86,
            s,
            400 * K,
            4 * K,
            0,
        );
        let none = &o.calls[0];
        assert_eq!(none.flushes.len(), 1);
        assert_eq!(none.flushes[0].trace_pages(), -1);
        assert!(
            o.calls[1].flushes.is_empty(),
            "{s}: NONE→RW needs no flush on x86"
        );
    }
    // 32 pages ≤ 33: INVLPG per page, and RO→RW flushes too (RW changes).
    let o = run(
        Workload::MprotectRoRw,
        ArchConfig::X86,
        Strategy::V6_17,
        128 * K,
        4 * K,
        0,
    );
    for c in &o.calls {
        assert_eq!(c.flushes.len(), 1);
        assert_eq!(c.flushes[0].trace_pages(), 32);
        assert_eq!(c.counters.tlbi_ops, 32);
    }
}

#[test]
fn arm64_v619_elides_the_flush_for_none_to_rw() {
    let o = run(
        Workload::MprotectToggle,
        arm64(),
        Strategy::V6_17,
        400 * K,
        4 * K,
        0,
    );
    assert_eq!(call(&o, "PROT_READ|PROT_WRITE").tlb_flush_calls, 1);
    let o = run(
        Workload::MprotectToggle,
        arm64(),
        Strategy::V6_19,
        400 * K,
        4 * K,
        0,
    );
    assert_eq!(call(&o, "PROT_READ|PROT_WRITE").tlb_flush_calls, 0);
    assert_eq!(call(&o, "PROT_NONE").tlb_flush_calls, 1);
}

/// Out-of-line function entries per PTE of one call (label) of an order-0
/// 400 KiB toggle.
fn entries_per_pte(arch: ArchConfig, s: Strategy, label: &str) -> BTreeMap<String, u64> {
    let o = run(Workload::MprotectToggle, arch, s, 400 * K, 4 * K, 0);
    let c = call(&o, label);
    assert_eq!(c.calls, c.functions.values().sum::<u64>());
    c.functions
        .iter()
        .map(|(k, v)| {
            assert_eq!(v % 100, 0, "{s} {k}: {v} is not a whole number per PTE");
            (k.clone(), v / 100)
        })
        .collect()
}

fn fns(list: &[(&str, u64)]) -> BTreeMap<String, u64> {
    list.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[test]
fn x86_out_of_line_calls_per_pte_are_those_counted_in_debian_guests() {
    // Entries per PTE of mprotect(PROT_NONE), order-0, 400 KiB, counted with
    // ptelab's QEMU plugin in x86-64 guests of Debian's builds (the fit18
    // sweeps): 6.16.12 3, 6.17.8 6, 7.0.13 7, 7.1.3 10, 7.3.4 11.
    let pv = [
        ("__ptep_modify_prot_start", 1),
        ("__ptep_modify_prot_commit", 1),
        ("native_set_pte", 1),
    ];
    let with = |extra: &[(&str, u64)]| {
        let mut v: Vec<(&str, u64)> = pv.to_vec();
        v.extend_from_slice(extra);
        fns(&v)
    };
    let x = ArchConfig::X86;
    assert_eq!(entries_per_pte(x, Strategy::V6_16, "NONE"), with(&[]));
    let v617 = with(&[
        ("vm_normal_page", 1),
        ("pte_val", 1),
        ("prot_commit_flush_ptes", 1),
    ]);
    assert_eq!(entries_per_pte(x, Strategy::V6_17, "NONE"), v617);
    let v70 = with(&[
        ("vm_normal_page", 1),
        ("pte_val", 2),
        ("prot_commit_flush_ptes", 1),
    ]);
    for s in [Strategy::V6_18, Strategy::V6_19, Strategy::V7_0] {
        assert_eq!(entries_per_pte(x, s, "NONE"), v70, "{s}");
    }
    let v71 = [
        ("vm_normal_page", 1),
        ("pte_val", 2),
        ("modify_prot_commit_ptes", 1),
        ("pte_needs_flush", 1),
        ("pte_advance_pfn", 2),
    ];
    assert_eq!(entries_per_pte(x, Strategy::V7_1, "NONE"), with(&v71));
    let mut v73 = v71.to_vec();
    v73.push(("pte_modify", 1));
    assert_eq!(entries_per_pte(x, Strategy::V7_3, "NONE"), with(&v73));
    // The write upgrade of mprotect(PROT_READ|PROT_WRITE) adds the check and
    // pte_mkwrite (x86 has it out of line): 6.16 through its own
    // can_change_pte_writable() and vm_normal_page().
    assert_eq!(
        entries_per_pte(x, Strategy::V6_16, "WRITE"),
        with(&[
            ("can_change_pte_writable", 1),
            ("vm_normal_page", 1),
            ("pte_val", 1),
            ("pte_mkwrite", 1)
        ])
    );
    let mut rw = v71.to_vec();
    rw.extend([("maybe_change_pte_writable", 1), ("pte_mkwrite", 1)]);
    assert_eq!(entries_per_pte(x, Strategy::V7_1, "WRITE"), with(&rw));
}

#[test]
fn arm64_out_of_line_calls_per_pte_are_those_counted_in_debian_guests() {
    // arm64 guests, same cell: 6.16.12 2, 6.17.8 4, 7.1.3 and 7.3.4 3 per PTE.
    let a = arm64();
    assert_eq!(
        entries_per_pte(a, Strategy::V6_16, "NONE"),
        fns(&[
            ("ptep_modify_prot_start", 1),
            ("ptep_modify_prot_commit", 1)
        ])
    );
    let v617 = [
        ("vm_normal_page", 1),
        ("modify_prot_start_ptes", 1),
        ("modify_prot_commit_ptes", 1),
        ("prot_commit_flush_ptes", 1),
    ];
    for s in [
        Strategy::V6_17,
        Strategy::V6_18,
        Strategy::V6_19,
        Strategy::V7_0,
    ] {
        assert_eq!(entries_per_pte(a, s, "NONE"), fns(&v617), "{s}");
    }
    // 89e613bc0b2d on arm64: prot_commit_flush_ptes is inlined, nothing else
    // comes out of line.
    assert_eq!(entries_per_pte(a, Strategy::V7_1, "NONE"), fns(&v617[..3]));
    // 7.3.4 has a pte_modify symbol on arm64 too, but mprotect inlines it.
    assert_eq!(entries_per_pte(a, Strategy::V7_3, "NONE"), fns(&v617[..3]));
}

#[test]
fn arm64_64k_toggle_calls_per_batch_and_per_block() {
    // 4 MiB of 64K folios (64 batches, 64 contpte blocks), per call averaged
    // over the two directions, as counted in the 6.16.12, 6.17.8 and 7.1.3
    // arm64 guests.
    let per_call = |s: Strategy| {
        let o = run(Workload::MprotectToggle, arm64(), s, 4096 * K, 64 * K, 0);
        let t = o.total();
        t.functions
            .iter()
            .map(|(k, v)| (k.clone(), v / 2))
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(
        per_call(Strategy::V6_16),
        fns(&[
            ("ptep_modify_prot_start", 1024),
            ("ptep_modify_prot_commit", 1024),
            ("can_change_pte_writable", 512),
            ("vm_normal_page", 512),
            ("contpte_convert", 64),
            ("__flush_tlb_range_nosync", 64),
            ("__contpte_try_fold", 32),
            ("__contpte_try_unfold", 32),
            ("contpte_ptep_get", 32),
        ])
    );
    let v617 = [
        ("folio_pte_batch_flags", 64),
        ("__set_ptes_anysz", 64),
        ("contpte_get_and_clear_full_ptes", 64),
        ("contpte_set_ptes", 64),
        ("contpte_try_unfold_partial", 64),
        ("vm_normal_page", 64),
        ("modify_prot_start_ptes", 64),
        ("modify_prot_commit_ptes", 64),
        ("contpte_ptep_get", 32),
        ("maybe_change_pte_writable", 32),
    ];
    let mut with_commit = v617.to_vec();
    with_commit.push(("prot_commit_flush_ptes", 64));
    assert_eq!(per_call(Strategy::V6_17), fns(&with_commit));
    assert_eq!(per_call(Strategy::V7_1), fns(&v617));
}

#[test]
fn x86_64k_toggle_pte_advance_pfn_follows_the_inlining() {
    // 4 MiB of 64K folios: 6.17.8 and 7.0.13 call pte_advance_pfn once per
    // batch (the first step of folio_pte_batch_flags); 7.1.3 calls every step
    // (16) and the two of the inlined prot_commit_flush_ptes: 18 per batch.
    let adv = |s: Strategy| {
        let o = run(
            Workload::MprotectToggle,
            ArchConfig::X86,
            s,
            4096 * K,
            64 * K,
            0,
        );
        o.total()
            .functions
            .get("pte_advance_pfn")
            .copied()
            .unwrap_or(0)
            / 2
    };
    assert_eq!(adv(Strategy::V6_16), 0);
    assert_eq!(adv(Strategy::V6_17), 64);
    assert_eq!(adv(Strategy::V7_0), 64);
    assert_eq!(adv(Strategy::V7_1), 64 * 18);
}

#[test]
fn v71_has_the_primitives_of_v70() {
    for arch in [ArchConfig::X86, arm64()] {
        for folio in [4 * K, 64 * K] {
            for wl in [Workload::MprotectToggle, Workload::MprotectRoRw] {
                let a = run(wl, arch, Strategy::V7_0, 400 * K, folio, 0).total();
                let b = run(wl, arch, Strategy::V7_1, 400 * K, folio, 0).total();
                let strip = |c: Counters| Counters {
                    calls: 0,
                    functions: BTreeMap::new(),
                    ..c
                };
                assert_ne!(a.functions, b.functions);
                assert_eq!(strip(a), strip(b));
            }
        }
    }
}

#[test]
fn granules_translate_folio_sizes() {
    // 2M on 16K pages is order 7 = one 128-entry contpte block.
    let a16 = ArchConfig::arm64(Granule::K16);
    let o = run(
        Workload::MprotectRoRw,
        a16,
        Strategy::V6_16,
        2048 * K,
        2048 * K,
        0,
    );
    let ro = call(&o, "PROT_READ)");
    assert_eq!((ro.pte_xchg, ro.tlbi_sync), (3 * 128, 2));
    let a64 = ArchConfig::arm64(Granule::K64);
    let o = run(
        Workload::MprotectRoRw,
        a64,
        Strategy::V6_17,
        2048 * K,
        2048 * K,
        0,
    );
    assert_eq!(call(&o, "PROT_READ)").pte_xchg, 32);
}

fn ledger(
    arch: ArchConfig,
    wl: Workload,
    size: u64,
    folio: u64,
    offset: u64,
) -> BTreeMap<String, BTreeMap<String, BTreeMap<String, u64>>> {
    let mut out = BTreeMap::new();
    for s in Strategy::ALL {
        let o = run(wl, arch, s, size, folio, offset);
        let calls = o
            .calls
            .iter()
            .map(|c| {
                let mut m: BTreeMap<String, u64> = c
                    .counters
                    .to_map()
                    .into_iter()
                    .filter(|(_, v)| *v != 0)
                    .collect();
                for (nr, n) in &c.counters.batch_sizes {
                    m.insert(format!("batch_size_{nr}"), *n);
                }
                for (f, n) in &c.counters.functions {
                    m.insert(format!("fn:{f}"), *n);
                }
                (c.label.clone(), m)
            })
            .collect();
        out.insert(s.name().to_string(), calls);
    }
    out
}

#[test]
fn ledger_x86_toggle_400k_order0() {
    insta::assert_json_snapshot!(ledger(
        ArchConfig::X86,
        Workload::MprotectToggle,
        400 * K,
        4 * K,
        0
    ));
}

#[test]
fn ledger_x86_ro_rw_2m_64k() {
    insta::assert_json_snapshot!(ledger(
        ArchConfig::X86,
        Workload::MprotectRoRw,
        2048 * K,
        64 * K,
        0
    ));
}

#[test]
fn ledger_arm64_toggle_400k_64k() {
    insta::assert_json_snapshot!(ledger(
        arm64(),
        Workload::MprotectToggle,
        400 * K,
        64 * K,
        0
    ));
}

#[test]
fn ledger_arm64_ro_rw_2m_2m_pte_offset() {
    insta::assert_json_snapshot!(ledger(
        arm64(),
        Workload::MprotectRoRw,
        1024 * K,
        2048 * K,
        5
    ));
}

#[test]
fn ledger_arm64_no_contpte_toggle_64k() {
    let a = ArchConfig::Arm64(Arm64 {
        granule: Granule::K4,
        contpte: false,
        bbml2: false,
        tlbi_range: true,
        lpa2: false,
    });
    insta::assert_json_snapshot!(ledger(a, Workload::MprotectToggle, 256 * K, 64 * K, 0));
}

#[test]
fn mremap_move_counts() {
    // docs/kernel.md §7.2: x86 never batches (pte_batch_hint() == 1 returns
    // before any folio lookup): N loads, N xchg, N stores, one flush of the
    // old range.
    for s in Strategy::ALL {
        let o = run(
            Workload::MremapMove,
            ArchConfig::X86,
            s,
            1024 * K,
            64 * K,
            0,
        );
        let c = &o.calls[0].counters;
        assert_eq!(
            (c.pte_loads, c.pte_xchg, c.pte_stores, c.folio_lookups),
            (256, 256, 256, 0),
            "{s}"
        );
        assert_eq!(o.calls[0].flushes.len(), 1);
    }
    // arm64 contpte, aligned 64K folios, congruent destination: v6.16 unfolds
    // each block at the source and refolds it at the destination; v6.17
    // moves whole blocks (C xchg + C stores, CONT painted at the destination).
    let v616 = run(
        Workload::MremapMove,
        arm64(),
        Strategy::V6_16,
        1024 * K,
        64 * K,
        0,
    );
    let c = &v616.calls[0].counters;
    assert_eq!(
        (c.contpte_unfolds, c.contpte_folds, c.tlbi_sync),
        (16, 16, 32)
    );
    assert_eq!((c.pte_xchg, c.pte_stores), (3 * 256, 3 * 256));
    let v617 = run(
        Workload::MremapMove,
        arm64(),
        Strategy::V6_17,
        1024 * K,
        64 * K,
        0,
    );
    let c = &v617.calls[0].counters;
    assert_eq!((c.contpte_unfolds, c.contpte_folds, c.tlbi_sync), (0, 0, 0));
    assert_eq!((c.pte_xchg, c.pte_stores, c.batches), (256, 256, 16));
}

#[test]
fn mremap_of_whole_pmds_moves_page_tables() {
    // move_normal_pmd(): a 2M extent aligned at both ends moves its PTE
    // table, touching no PTE; one flush of the old 512 pages per PMD (a full
    // flush on x86). 1M stays on the move_ptes() path (mremap_move_counts).
    for s in Strategy::ALL {
        let o = run(
            Workload::MremapMove,
            ArchConfig::X86,
            s,
            4096 * K,
            64 * K,
            0,
        );
        let c = &o.calls[0].counters;
        assert_eq!(
            (c.pte_loads, c.pte_xchg, c.pte_stores, c.ptes_changed),
            (0, 0, 0, 0),
            "{s}"
        );
        assert_eq!(c.pmd_moves, 2, "{s}");
        let f = &o.calls[0].flushes;
        assert_eq!(f.len(), 2, "{s}");
        assert!(f.iter().all(|f| f.pages == 512 && f.full), "{s}");
    }
    // arm64 contpte: the blocks move as they are, nothing unfolds.
    let o = run(
        Workload::MremapMove,
        arm64(),
        Strategy::V6_16,
        2048 * K,
        64 * K,
        0,
    );
    let c = &o.calls[0].counters;
    assert_eq!((c.contpte_unfolds, c.contpte_folds, c.pte_xchg), (0, 0, 0));
    assert_eq!(o.calls[0].flushes.len(), 1);
}

#[test]
fn mremap_out_of_line_calls_follow_the_release() {
    // mremap of 4 MiB: two whole PMDs move (move_normal_pmd), one
    // flush_tlb_range each; arm64 up to 7.0 enters the out-of-line
    // __flush_tlb_range_nosync for each (counted: 2 per call on 6.16.12,
    // 6.17.8, 7.0.13; none on 7.1.3).
    let f = |s: Strategy, size: u64, folio: u64, name: &str| {
        let o = run(Workload::MremapMove, arm64(), s, size, folio, 0);
        o.calls[0]
            .counters
            .functions
            .get(name)
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(
        f(Strategy::V6_16, 4096 * K, 4 * K, "__flush_tlb_range_nosync"),
        2
    );
    assert_eq!(
        f(Strategy::V7_0, 4096 * K, 4 * K, "__flush_tlb_range_nosync"),
        2
    );
    assert_eq!(
        f(Strategy::V7_1, 4096 * K, 4 * K, "__flush_tlb_range_nosync"),
        0
    );
    // Under a PMD the PTEs move batch by batch: 6.17.8 calls the exported
    // folio_pte_batch() per 64K folio, later releases inline the batching.
    assert_eq!(f(Strategy::V6_17, 256 * K, 64 * K, "folio_pte_batch"), 4);
    assert_eq!(f(Strategy::V6_18, 256 * K, 64 * K, "folio_pte_batch"), 0);
    assert_eq!(
        f(Strategy::V6_18, 256 * K, 64 * K, "folio_pte_batch_flags"),
        0
    );
    assert_eq!(f(Strategy::V6_18, 256 * K, 64 * K, "contpte_set_ptes"), 4);
}

#[test]
fn v73_arm64_sets_prot_none_blocks_in_one_call() {
    // A PTE-mapped 2M folio made PROT_NONE: 7.3.4 enters __set_ptes_anysz
    // once per contpte_set_ptes() call, 7.1.3 once per 16-entry block.
    let f = |s: Strategy| {
        let o = run(Workload::ProtTransition, arm64(), s, 2048 * K, 2048 * K, 0);
        let c = call(&o, "PROT_NONE");
        c.functions.get("__set_ptes_anysz").copied().unwrap_or(0)
    };
    assert_eq!(f(Strategy::V7_1), 32);
    assert_eq!(f(Strategy::V7_3), 1);
}
