//! Property tests: every batched kernel ends in the per-PTE kernel's page
//! table (modulo the batch-granular A/D merge), keeps the TLB honest at every
//! syscall return, never leaves a mixed arm64 contig block and never makes a
//! non-exclusive anon page writable — over random layouts. The deliberately
//! broken kernels must be caught.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use ptelab_model::layout::{FolioPlacement, LayoutSpec, PteTweak};
use ptelab_model::testutil::{batched_kernels, check_case, Case};
use ptelab_model::{
    ArchConfig, Arm64, Faults, Granule, Kernel, Prot, Strategy as KStrategy, VmFlags,
};

fn arch_strategy() -> impl Strategy<Value = ArchConfig> {
    prop_oneof![
        3 => Just(ArchConfig::X86),
        3 => (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(bbml2, tlbi_range, lpa2)| ArchConfig::Arm64(Arm64 {
            granule: Granule::K4, contpte: true, bbml2, tlbi_range, lpa2 })),
        1 => Just(ArchConfig::Arm64(Arm64 { granule: Granule::K4, contpte: false, bbml2: false, tlbi_range: true, lpa2: false })),
        1 => Just(ArchConfig::Arm64(Arm64 { granule: Granule::K64, contpte: true, bbml2: false, tlbi_range: true, lpa2: false })),
    ]
}

fn tweak_strategy() -> impl Strategy<Value = PteTweak> {
    prop_oneof![
        Just(PteTweak::Old),
        Just(PteTweak::Clean),
        Just(PteTweak::ClearSoftDirty),
        Just(PteTweak::UffdWp),
        Just(PteTweak::WrProtect),
    ]
}

fn folio_strategy(max_order: u8) -> impl Strategy<Value = FolioPlacement> {
    (0..=max_order)
        .prop_flat_map(|order| {
            let n = 1u64 << order;
            (
                Just(order),
                prop_oneof![3 => Just((0, n)), 1 => (0..n).prop_flat_map(move |lo| (Just(lo), lo + 1..=n))],
                prop_oneof![3 => Just(Vec::new()), 1 => proptest::collection::vec(any::<bool>(), n as usize)],
                proptest::collection::vec((0..n, tweak_strategy()), 0..3),
                prop::bool::weighted(0.1),
            )
        })
        .prop_map(|(order, mapped, exclusive, tweaks, va_misaligned)| FolioPlacement {
            order,
            mapped,
            exclusive,
            tweaks,
            va_misaligned,
        })
}

fn prot_strategy() -> impl Strategy<Value = Prot> {
    prop_oneof![Just(Prot::None), Just(Prot::Read), Just(Prot::ReadWrite)]
}

fn case_strategy() -> impl Strategy<Value = Case> {
    arch_strategy().prop_flat_map(|arch| {
        let max_order = match arch {
            ArchConfig::Arm64(a) if a.granule == Granule::K64 => 6,
            _ => 6,
        };
        (
            Just(arch),
            proptest::collection::vec(folio_strategy(max_order), 1..6),
            any::<bool>(),
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.2),
            proptest::collection::vec((0u64..512, 1u64..300, prot_strategy()), 1..4),
        )
            .prop_map(|(arch, folios, shared, softdirty_flag, uffd, ops)| {
                let mut vma_flags = VmFlags::READ | VmFlags::WRITE;
                if shared {
                    vma_flags |= VmFlags::SHARED;
                }
                if softdirty_flag {
                    vma_flags |= VmFlags::SOFTDIRTY;
                }
                if uffd {
                    vma_flags |= VmFlags::UFFD_WP;
                }
                Case {
                    arch,
                    layout: LayoutSpec {
                        base: 4096 + 512 - 64,
                        vma_flags,
                        folios,
                        extra_window: 0,
                    },
                    ops,
                }
            })
    })
}

proptest! {
    #![proptest_config(Config { cases: 1000, ..Config::default() })]

    #[test]
    fn batched_equals_per_pte_and_keeps_invariants(case in case_strategy()) {
        let r = check_case(&case, &batched_kernels());
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
    }
}

fn faulty(faults: Faults) -> Vec<(String, Kernel)> {
    let mut k = KStrategy::V6_17.kernel_features();
    k.faults = faults;
    vec![("faulty".to_string(), k)]
}

/// The properties above must fail for a kernel that elides the flush on
/// RW→NONE and for the v6.17-rc1 AnonExclusive bug.
fn property_catches(faults: Faults) -> String {
    let mut runner = TestRunner::new(Config {
        cases: 2000,
        failure_persistence: None,
        ..Config::default()
    });
    let kernels = faulty(faults);
    let result = runner.run(&case_strategy(), |case| {
        let r = check_case(&case, &kernels);
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        Ok(())
    });
    match result {
        Err(e) => e.to_string(),
        Ok(()) => panic!("the property did not catch {faults:?}"),
    }
}

#[test]
fn catches_elided_flush_on_rw_to_none() {
    let msg = property_catches(Faults {
        elide_protnone_flush: true,
        ..Faults::default()
    });
    assert!(msg.contains("stale"), "{msg}");
}

#[test]
fn catches_anon_exclusive_from_folio_head() {
    let msg = property_catches(Faults {
        anon_exclusive_from_folio_head: true,
        ..Faults::default()
    });
    assert!(
        msg.contains("non-exclusive") || msg.contains("vs per-PTE"),
        "{msg}"
    );
}
