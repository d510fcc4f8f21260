//! A labelled every-configuration tester: one scenario through arch ×
//! contpte × kernel behaviour, checking invariants after every syscall and
//! comparing final page tables with the per-PTE kernel.
//!
//! Kernel counterpart: none (test support, in the style of ripgrep's
//! `SearcherTester`). Public so the integration tests and property tests of
//! this crate, and the binary's tests, can drive the model.

use crate::arch::Arch;
use crate::check::equivalent;
use crate::cx::Cx;
use crate::layout::{build, LayoutSpec};
use crate::mm::PageTable;
use crate::mprotect::mprotect;
use crate::strategy::{Kernel, Strategy};
use crate::types::{Prot, VmFlags};
use crate::workload::{check_invariants, ArchConfig};
use crate::{Arm64, X86};

/// One scenario: a layout and a sequence of mprotect calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// Architecture.
    pub arch: ArchConfig,
    /// Address-space layout.
    pub layout: LayoutSpec,
    /// `(offset from VMA start, pages, prot)`; clamped into the VMA.
    pub ops: Vec<(u64, u64, Prot)>,
}

/// Final page table of a run, as raw values (arch-independent).
pub type RawTable = Vec<u64>;

fn run_generic<A: Arch>(
    arch: A,
    kernel: Kernel,
    case: &Case,
) -> Result<(PageTable<A::Pte>, u64, u64), String> {
    let (mut cx, placed): (Cx<A>, _) = build(arch, kernel, &case.layout, true);
    let (vs, ve) = placed.vma;
    check_invariants(&cx).map_err(|e| format!("after fault-in: {e}"))?;
    for (i, &(off, len, prot)) in case.ops.iter().enumerate() {
        let span = ve - vs;
        let start = vs + off % span;
        let len = len.clamp(1, ve - start);
        let (wb, wn) = (cx.mm.pt.base(), cx.mm.pt.len());
        cx.tlb_fill(wb, wb + wn);
        mprotect(&mut cx, start, len, prot).map_err(|e| e.to_string())?;
        check_invariants(&cx)
            .map_err(|e| format!("after op {i} mprotect({start:#x}, {len}, {prot}): {e}"))?;
    }
    Ok((cx.mm.pt.clone(), vs, ve))
}

fn compare_generic<A: Arch>(
    arch: A,
    case: &Case,
    kernels: &[(String, Kernel)],
) -> Result<(), String> {
    let base = Strategy::V6_16.kernel_features();
    let (reference, vs, ve) = run_generic(arch, base, case).map_err(|e| format!("per-pte: {e}"))?;
    let shared = case.layout.vma_flags.contains(VmFlags::SHARED);
    for (name, k) in kernels {
        let (pt, _, _) = run_generic(arch, *k, case).map_err(|e| format!("{name}: {e}"))?;
        equivalent(&arch, &pt, &reference, vs, ve, shared)
            .map_err(|e| format!("{name} vs per-pte: {e}"))?;
    }
    Ok(())
}

/// Run `case` under per-PTE v6.16 and under each of `kernels`; every run must
/// keep the invariants, and every final state must equal per-PTE's modulo the
/// documented batch-granular A/D merge.
///
/// # Errors
/// A description of the first failure, labelled with the kernel.
pub fn check_case(case: &Case, kernels: &[(String, Kernel)]) -> Result<(), String> {
    match case.arch {
        ArchConfig::X86 => compare_generic(X86, case, kernels),
        ArchConfig::Arm64(a) => compare_generic::<Arm64>(a, case, kernels),
    }
}

/// The batched strategies, labelled, for [`check_case`].
pub fn batched_kernels() -> Vec<(String, Kernel)> {
    Strategy::ALL
        .iter()
        .filter(|s| **s != Strategy::V6_16)
        .map(|s| (s.name().to_string(), s.kernel_features()))
        .collect()
}

/// Every arch configuration worth testing a scenario under.
pub fn all_arch_configs() -> Vec<(String, ArchConfig)> {
    use crate::types::Granule;
    let mut v = vec![("x86_64".to_string(), ArchConfig::X86)];
    for g in [Granule::K4, Granule::K16, Granule::K64] {
        for contpte in [true, false] {
            for bbml2 in [false, true] {
                if !contpte && bbml2 {
                    continue;
                }
                let a = Arm64 {
                    granule: g,
                    contpte,
                    bbml2,
                    tlbi_range: true,
                    lpa2: false,
                };
                v.push((
                    format!("arm64/{}/contpte={contpte}/bbml2={bbml2}", g.name()),
                    ArchConfig::Arm64(a),
                ));
            }
        }
    }
    v
}
