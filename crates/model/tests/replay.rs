//! `change_pte_range()` replays a recorded step on like PTEs (x86, order-0
//! folios; `mprotect::Step`). Property: with the replay on, every call ends
//! in the same counters, histograms, function entries, flushes, page
//! table, memmap and TLB model as the step-by-step walk, on random x86
//! layouts dense in small folios (mixed with large ones, partial mapping,
//! AnonExclusive patterns, tweaks, shared, file and uffd-wp VMAs, re-touches
//! between calls), under every strategy and the injected faults.

use proptest::prelude::*;
use proptest::test_runner::Config;
use ptelab_model::layout::{build, build_file, FolioPlacement, LayoutSpec, PteTweak};
use ptelab_model::mprotect::mprotect;
use ptelab_model::workload::{check_invariants, retouch};
use ptelab_model::{Cx, Faults, Prot, Strategy as KStrategy, VmFlags, X86};

fn tweak() -> impl Strategy<Value = PteTweak> {
    prop_oneof![
        Just(PteTweak::Old),
        Just(PteTweak::Clean),
        Just(PteTweak::ClearSoftDirty),
        Just(PteTweak::UffdWp),
        Just(PteTweak::WrProtect),
        Just(PteTweak::WriteFault),
        Just(PteTweak::SoftDirty),
    ]
}

/// Mostly order-0 folios, in runs of like ones, some large ones between.
fn folio() -> impl Strategy<Value = FolioPlacement> {
    prop_oneof![6 => Just(0u8), 1 => 1u8..=4]
        .prop_flat_map(|order| {
            let n = 1u64 << order;
            (
                Just(order),
                prop_oneof![4 => Just((0, n)), 1 => (0..n).prop_flat_map(move |lo| (Just(lo), lo + 1..=n))],
                prop_oneof![4 => Just(Vec::new()), 1 => proptest::collection::vec(prop::bool::weighted(0.7), n as usize)],
                prop_oneof![4 => Just(Vec::new()), 1 => proptest::collection::vec((0..n, tweak()), 1..3)],
            )
        })
        .prop_map(|(order, mapped, exclusive, tweaks)| FolioPlacement {
            order,
            mapped,
            exclusive,
            tweaks,
            va_misaligned: false,
        })
}

#[derive(Clone, Debug)]
enum Op {
    Mprotect(u64, u64, Prot),
    Retouch,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..1200, 1u64..1200, prop_oneof![Just(Prot::None), Just(Prot::Read), Just(Prot::ReadWrite)])
            .prop_map(|(o, n, p)| Op::Mprotect(o, n, p)),
        1 => Just(Op::Retouch),
    ]
}

#[derive(Clone, Debug)]
struct Case {
    layout: LayoutSpec,
    file: bool,
    strategy: KStrategy,
    faults: Faults,
    ops: Vec<Op>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec((folio(), 1usize..40), 1..8),
        0u8..4,
        prop::bool::weighted(0.7),
        prop::bool::weighted(0.15),
        proptest::sample::select(KStrategy::ALL.to_vec()),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
        proptest::collection::vec(op(), 1..6),
    )
        .prop_map(
            |(groups, kind, softdirty, uffd, strategy, elide, head, ops)| {
                let folios = groups
                    .into_iter()
                    .flat_map(|(f, n)| std::iter::repeat_n(f, n))
                    .collect();
                let mut vma_flags = VmFlags::READ | VmFlags::WRITE;
                if kind >= 2 {
                    vma_flags |= VmFlags::SHARED;
                }
                if softdirty {
                    vma_flags |= VmFlags::SOFTDIRTY;
                }
                if uffd {
                    vma_flags |= VmFlags::UFFD_WP;
                }
                Case {
                    layout: LayoutSpec {
                        base: 4096 + 512 - 64,
                        vma_flags,
                        folios,
                        extra_window: 0,
                    },
                    file: kind == 3,
                    strategy,
                    faults: Faults {
                        elide_protnone_flush: elide,
                        anon_exclusive_from_folio_head: head,
                    },
                    ops,
                }
            },
        )
}

/// Everything a call leaves behind, call by call.
fn run(case: &Case, replay: bool) -> Vec<String> {
    let mut kernel = case.strategy.kernel_features();
    kernel.faults = case.faults;
    let (mut cx, placed): (Cx<X86>, _) = if case.file {
        build_file(X86, kernel, &case.layout, true)
    } else {
        build(X86, kernel, &case.layout, true)
    };
    cx.run_replay = replay;
    let (vs, ve) = placed.vma;
    let mut out = Vec::new();
    for op in &case.ops {
        match *op {
            Op::Mprotect(off, len, prot) => {
                let start = vs + off % (ve - vs);
                let len = len.clamp(1, ve - start);
                let (wb, wn) = (cx.mm.pt.base(), cx.mm.pt.len());
                cx.tlb_fill(wb, wb + wn);
                let r = mprotect(&mut cx, start, len, prot).map_err(|e| e.to_string());
                let inv = check_invariants(&cx).map_err(|e| e.to_string());
                out.push(format!(
                    "{r:?} {inv:?} {:?} {:?} {:?} {:?} {:?}",
                    cx.take_counters(),
                    cx.take_flushes(),
                    cx.mm,
                    cx.tlb,
                    cx.mm.vmas
                ));
            }
            Op::Retouch => {
                retouch(&mut cx, vs, ve);
                out.push(format!("{:?} {:?}", cx.take_counters(), cx.mm.pt));
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(Config { cases: 1000, ..Config::default() })]

    #[test]
    fn replayed_steps_end_where_the_walk_does(case in case()) {
        let walk = run(&case, false);
        let replayed = run(&case, true);
        prop_assert_eq!(walk.len(), replayed.len());
        for (i, (w, r)) in walk.iter().zip(&replayed).enumerate() {
            prop_assert!(w == r, "op {} ({:?}) differs:\nwalk     {}\nreplayed {}", i, case.ops[i], w, r);
        }
    }
}

/// The replay does happen on such layouts (else the property says nothing):
/// a region of like small folios takes the walk's step once per PTE table.
#[test]
fn like_small_folios_are_replayed() {
    let spec = LayoutSpec {
        base: 4096,
        vma_flags: VmFlags::READ | VmFlags::WRITE,
        folios: vec![FolioPlacement::whole(0); 1024],
        extra_window: 0,
    };
    let (mut cx, _): (Cx<X86>, _) = build(X86, KStrategy::V7_3.kernel_features(), &spec, true);
    mprotect(&mut cx, 4096, 1024, Prot::Read).unwrap();
    let c = cx.take_counters();
    assert_eq!(
        (c.ptes_changed, c.pte_xchg, c.pte_stores),
        (1024, 1024, 1024)
    );
    assert_eq!(c.batch_sizes.get(&1), Some(&1024));
}
