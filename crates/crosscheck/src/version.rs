//! Which model strategy stands for a kernel: one function from the kernel's
//! release string (`uname -r`) and arch to the strategy, with the reason in
//! words (docs/model.md, "Strategies"). Every strategy is named after the
//! release it mirrors; every Debian kernel ptelab offers (6.12 … 7.3) maps
//! to one here, and nowhere else:
//! - before 6.17 (6.12, 6.16): `v6.16`, per-PTE mprotect and mremap;
//! - 6.17: `v6.17`, PTE batching (cac1db8c3aad, f822a9a81a31, 7efa1cd5f89b);
//! - 6.18: `v6.18`, the same paths, a larger `vm_normal_page()`;
//! - 6.19: `v6.19`, the arm64 `pte_needs_flush()` (c320dbb7c80d);
//! - 7.0: `v7.0`, batched young-bit clearing in reclaim;
//! - 7.1: `v7.1`, the small-folio change 89e613bc0b2d;
//! - 7.2: `v7.2`, 7.1's paths as Debian's GCC 16 build calls them;
//! - 7.3 and later: `v7.3`, x86 `pte_modify()` out of line.

use ptelab_model::Strategy;

use crate::workload::Arch;

/// The strategy chosen for a kernel, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StrategyChoice {
    pub strategy: Strategy,
    /// `major.minor` of the release.
    pub version: (u32, u32),
    /// One line: the version, the rule that applied, what it means on this arch.
    pub reason: String,
}

/// The model strategy for kernel `release` on `arch`. An error (one line,
/// saying what is accepted) when the release does not start with
/// `MAJOR.MINOR`.
pub fn strategy_for_kernel(release: &str, arch: Arch) -> Result<StrategyChoice, String> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let version = match (it.next(), it.next()) {
        (Some(a), Some(b)) => a.parse::<u32>().ok().zip(b.parse::<u32>().ok()),
        _ => None,
    };
    let Some((major, minor)) = version else {
        return Err(format!(
            "cannot tell the kernel version from release '{release}': expected MAJOR.MINOR… \
             as uname -r prints it (e.g. 6.17.13+deb13-cloud-amd64)"
        ));
    };
    let v = (major, minor);
    let x86 = arch != Arch::Arm64;
    let (strategy, rule) = if v < (6, 17) {
        (
            Strategy::V6_16,
            "before 6.17: mprotect and mremap walk PTE by PTE",
        )
    } else if v < (6, 18) {
        (
            Strategy::V6_17,
            "6.17: mprotect and mremap batch PTEs per folio",
        )
    } else if v < (6, 19) {
        (
            Strategy::V6_18,
            if x86 {
                "6.18: the paths of 6.17; vm_normal_page() calls pte_val() twice"
            } else {
                "6.18: the paths of 6.17"
            },
        )
    } else if v < (7, 0) {
        (
            Strategy::V6_19,
            if x86 {
                "6.19: on x86_64 the paths of 6.18 (its change, the arm64 pte_needs_flush(), is arm64's)"
            } else {
                "6.19: arm64 pte_needs_flush() elides flushes that change no hardware permission"
            },
        )
    } else if v < (7, 1) {
        (
            Strategy::V7_0,
            "7.0: batched young-bit clearing in folio_referenced_one(); mprotect as 6.19",
        )
    } else if v < (7, 2) {
        (
            Strategy::V7_1,
            if x86 {
                "7.1: the small-folio change 89e613bc0b2d; on x86_64 (GCC) it moves \
                 pte_needs_flush, modify_prot_commit_ptes and pte_advance_pfn out of line"
            } else {
                "7.1: the small-folio change 89e613bc0b2d inlines prot_commit_flush_ptes"
            },
        )
    } else if v < (7, 3) {
        (
            Strategy::V7_2,
            if x86 {
                "7.2: the paths of 7.1; Debian's GCC 16 build calls one pte_advance_pfn() per \
                 folio_pte_batch() instead of one per PTE"
            } else {
                "7.2: the paths and calls of 7.1"
            },
        )
    } else {
        (
            Strategy::V7_3,
            if x86 {
                "7.3 or later, the newest release modelled: pte_modify() out of line"
            } else {
                "7.3 or later, the newest release modelled: on arm64 the calls of 7.1"
            },
        )
    };
    Ok(StrategyChoice {
        strategy,
        version: v,
        reason: format!(
            "Linux {major}.{minor} on {arch} -> model strategy {} ({}): {rule}",
            strategy.name(),
            strategy.kernel()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(release: &str, arch: Arch) -> Strategy {
        strategy_for_kernel(release, arch).unwrap().strategy
    }

    #[test]
    fn every_debian_release_picks_the_strategy_of_its_version_on_both_arches() {
        for arch in Arch::ALL {
            assert_eq!(s("6.12.117+deb13-cloud-amd64", arch), Strategy::V6_16);
            assert_eq!(s("6.16.12+deb13-cloud-amd64", arch), Strategy::V6_16);
            assert_eq!(s("6.16.3-arch1", arch), Strategy::V6_16);
            assert_eq!(s("5.15.0-91-generic", arch), Strategy::V6_16);
            assert_eq!(s("4.19.0", arch), Strategy::V6_16);
            assert_eq!(s("6.17.13+deb13-cloud-arm64", arch), Strategy::V6_17);
            assert_eq!(s("6.17.0-rc1", arch), Strategy::V6_17);
            assert_eq!(s("6.18.44-fc-v669", arch), Strategy::V6_18);
            assert_eq!(s("6.19.0-rc1", arch), Strategy::V6_19);
            assert_eq!(s("6.20.1", arch), Strategy::V6_19);
            assert_eq!(s("7.0.13", arch), Strategy::V7_0);
            assert_eq!(s("7.1.3+deb13-cloud-amd64", arch), Strategy::V7_1);
            assert_eq!(s("7.2.13+deb14-cloud-amd64", arch), Strategy::V7_2);
            assert_eq!(s("7.3.4+deb13-cloud-arm64", arch), Strategy::V7_3);
            assert_eq!(s("8.0.0", arch), Strategy::V7_3);
        }
    }

    #[test]
    fn the_reason_names_version_strategy_and_arch() {
        let c = strategy_for_kernel("6.16.12+deb13-cloud-amd64", Arch::X86_64).unwrap();
        assert_eq!(c.version, (6, 16));
        assert_eq!(
            c.reason,
            "Linux 6.16 on x86_64 -> model strategy v6.16 (v6.12 … v6.16): before 6.17: mprotect \
             and mremap walk PTE by PTE"
        );
        let a = strategy_for_kernel("6.19.2", Arch::Arm64).unwrap();
        assert!(a.reason.contains("on arm64") && a.reason.contains("pte_needs_flush() elides"));
        let x = strategy_for_kernel("6.19.2", Arch::X86_64).unwrap();
        assert!(x.reason.contains("the paths of 6.18"), "{}", x.reason);
        let f = strategy_for_kernel("7.1.3", Arch::X86_64).unwrap();
        assert!(f.reason.contains("89e613bc0b2d"), "{}", f.reason);
    }

    #[test]
    fn bad_input_says_what_is_accepted() {
        let e = strategy_for_kernel("garbage", Arch::X86_64).unwrap_err();
        assert!(e.contains("MAJOR.MINOR"), "{e}");
        assert!(strategy_for_kernel("6", Arch::X86_64).is_err());
        assert!(strategy_for_kernel("", Arch::X86_64).is_err());
    }
}
