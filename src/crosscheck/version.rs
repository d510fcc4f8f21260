//! Which model strategy stands for a kernel: one function from the kernel's
//! release string (`uname -r`) and arch to the strategy, with the reason in
//! words (docs/model.md, "Strategies").
//!
//! The releases that change the modelled paths (docs/model.md):
//! - v6.17: mprotect PTE batching (cac1db8c3aad, cf1b80dc31a1), mremap
//!   batching (f822a9a81a31), arm64 batched `modify_prot_*` (7efa1cd5f89b):
//!   `per-pte` before it, `batched` from it;
//! - v6.19: the arm64 `pte_needs_flush()` (c320dbb7c80d): `batched-v6.19`.
//!   On x86-64 it changes nothing the model counts, so `batched` and
//!   `batched-v6.19` are the same there; the later is named for the release.
//!
//! `smallfast` models the 2026 mm tree (Pedro Falcato's v3), which the model
//! ties to no release, so no release maps to it.

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
    let (strategy, rule) = if v < (6, 17) {
        (
            Strategy::PerPte,
            "before 6.17: mprotect and mremap walk PTE by PTE".to_string(),
        )
    } else if v < (6, 19) {
        (
            Strategy::Batched,
            "6.17 or 6.18: mprotect and mremap batch PTEs per folio (v6.17-rc1)".to_string(),
        )
    } else {
        let what = if arch == Arch::Arm64 {
            "arm64 pte_needs_flush() elides flushes that change no hardware permission"
        } else {
            "on x86_64 the same as batched (its change, the arm64 pte_needs_flush(), is arm64's)"
        };
        (
            Strategy::BatchedV619,
            format!(
                "6.19 or later, the newest release modelled: {what}; smallfast is the 2026 mm \
                 tree, tied to no release"
            ),
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
    fn the_release_picks_the_strategy_on_both_arches() {
        for arch in Arch::ALL {
            assert_eq!(s("6.16.12+deb13-cloud-amd64", arch), Strategy::PerPte);
            assert_eq!(s("6.16.3-arch1", arch), Strategy::PerPte);
            assert_eq!(s("5.15.0-91-generic", arch), Strategy::PerPte);
            assert_eq!(s("4.19.0", arch), Strategy::PerPte);
            assert_eq!(s("6.17.13+deb13-cloud-arm64", arch), Strategy::Batched);
            assert_eq!(s("6.17.0-rc1", arch), Strategy::Batched);
            assert_eq!(s("6.18.44-fc-v669", arch), Strategy::Batched);
            assert_eq!(s("6.19.0-rc1", arch), Strategy::BatchedV619);
            assert_eq!(s("6.20.1", arch), Strategy::BatchedV619);
            assert_eq!(s("7.0.1", arch), Strategy::BatchedV619);
        }
    }

    #[test]
    fn the_reason_names_version_strategy_and_arch() {
        let c = strategy_for_kernel("6.16.12+deb13-cloud-amd64", Arch::X86_64).unwrap();
        assert_eq!(c.version, (6, 16));
        assert_eq!(
            c.reason,
            "Linux 6.16 on x86_64 -> model strategy per-pte (v6.16): before 6.17: mprotect and \
             mremap walk PTE by PTE"
        );
        let a = strategy_for_kernel("6.19.2", Arch::Arm64).unwrap();
        assert!(a.reason.contains("on arm64") && a.reason.contains("pte_needs_flush() elides"));
        let x = strategy_for_kernel("6.19.2", Arch::X86_64).unwrap();
        assert!(x.reason.contains("the same as batched"), "{}", x.reason);
    }

    #[test]
    fn bad_input_says_what_is_accepted() {
        let e = strategy_for_kernel("garbage", Arch::X86_64).unwrap_err();
        assert!(e.contains("MAJOR.MINOR"), "{e}");
        assert!(strategy_for_kernel("6", Arch::X86_64).is_err());
        assert!(strategy_for_kernel("", Arch::X86_64).is_err());
    }
}
