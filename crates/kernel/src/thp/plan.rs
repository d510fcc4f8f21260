//! What a folio spec needs: the pure policy from current knob values to the
//! knob writes, in one place.

use std::collections::BTreeMap;

use anyhow::bail;

use super::knobs::size_knob;
use super::THP_ROOT;
use crate::workload::folio::FolioSpec;

/// `defrag` values under which a MADV_HUGEPAGE fault direct-reclaims/compacts.
const DEFRAG_OK_FOR_MADVISE: [&str; 3] = ["always", "defer+madvise", "madvise"];

/// The knob writes that make `knobs` (current values) give `spec`, in write
/// order; only knobs whose value differs. Pure: the policy in one place.
///
/// - `4K`: every `hugepages-*kB/enabled` (PMD size included) `never`.
/// - `16K`..`1M`: that size allowed for MADV_HUGEPAGE regions (left alone when
///   already `always`, `madvise`, or `inherit` with top-level `enabled` not
///   `never`; else set to `madvise`, so processes that did not madvise are
///   unaffected), every other size `never`.
/// - `2M`, `2M-pte`: the PMD size allowed the same way (or, on kernels without
///   per-size knobs, top-level `enabled` `madvise` unless `always`), every
///   other size `never` (a failed PMD fault then falls back to 4K, which
///   verification sees, not to a smaller mTHP).
/// - `defrag` is made `madvise` for large specs only if it would not let a
///   MADV_HUGEPAGE fault compact (`defer`, `never`).
pub fn plan_for(
    spec: FolioSpec,
    knobs: &BTreeMap<String, String>,
    pmd_size: u64,
) -> anyhow::Result<Vec<(String, String)>> {
    let top_allows = matches!(
        knobs.get("enabled").map(String::as_str),
        Some("always" | "madvise")
    );
    let allows = |v: &str| matches!(v, "always" | "madvise") || (v == "inherit" && top_allows);
    let size_knobs: Vec<&String> = knobs
        .keys()
        .filter(|k| k.starts_with("hugepages-") && k.ends_with("/enabled"))
        .collect();
    let wanted: Option<String> = match spec {
        FolioSpec::Base => None,
        FolioSpec::Mthp(bytes) => Some(size_knob(bytes)),
        FolioSpec::Pmd | FolioSpec::PmdPte => Some(size_knob(pmd_size)),
    };
    let mut plan = Vec::new();
    let mut set = |name: &str, value: &str| {
        if knobs.get(name).map(String::as_str) != Some(value) {
            plan.push((name.to_owned(), value.to_owned()));
        }
    };
    if let Some(w) = &wanted {
        match knobs.get(w) {
            Some(v) if allows(v) => {}
            Some(_) => set(w, "madvise"),
            None if matches!(spec, FolioSpec::Pmd | FolioSpec::PmdPte) => {
                // Before Linux 6.8 (no per-size knobs): the top-level knob rules.
                if !knobs.contains_key("enabled") {
                    bail!(
                        "this kernel has no transparent hugepages ({THP_ROOT}/enabled is missing)"
                    );
                }
                if !top_allows {
                    set("enabled", "madvise");
                }
            }
            None => bail!(
                "this kernel has no mTHP knob {w}: check the folio spec with check_offered first"
            ),
        }
    }
    for k in &size_knobs {
        if Some(k.as_str()) != wanted.as_deref() {
            set(k, "never");
        }
    }
    if wanted.is_some() {
        if let Some(d) = knobs.get("defrag") {
            if !DEFRAG_OK_FOR_MADVISE.contains(&d.as_str()) {
                set("defrag", "madvise");
            }
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::folio::PMD_SIZE;

    fn machine_knobs() -> BTreeMap<String, String> {
        let mut k = BTreeMap::new();
        k.insert("enabled".into(), "madvise".into());
        k.insert("defrag".into(), "madvise".into());
        for kb in [16, 32, 64, 128, 256, 512, 1024] {
            k.insert(format!("hugepages-{kb}kB/enabled"), "never".into());
        }
        k.insert("hugepages-2048kB/enabled".into(), "inherit".into());
        k
    }

    fn plan(spec: &str, k: &BTreeMap<String, String>) -> Vec<(String, String)> {
        plan_for(spec.parse().unwrap(), k, PMD_SIZE).unwrap()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|&(a, b)| (a.to_owned(), b.to_owned()))
            .collect()
    }

    #[test]
    fn plan_sets_only_what_differs() {
        let k = machine_knobs();
        assert_eq!(
            plan("4K", &k),
            pairs(&[("hugepages-2048kB/enabled", "never")])
        );
        assert_eq!(
            plan("64K", &k),
            pairs(&[
                ("hugepages-64kB/enabled", "madvise"),
                ("hugepages-2048kB/enabled", "never")
            ])
        );
        // inherit + top-level madvise already gives PMD THP to MADV_HUGEPAGE regions.
        assert!(plan("2M", &k).is_empty());
        assert!(plan("2M-pte", &k).is_empty());

        let mut k2 = k.clone();
        k2.insert("enabled".into(), "never".into());
        k2.insert("defrag".into(), "never".into());
        k2.insert("hugepages-16kB/enabled".into(), "always".into());
        assert_eq!(
            plan("2M", &k2),
            pairs(&[
                ("hugepages-2048kB/enabled", "madvise"),
                ("hugepages-16kB/enabled", "never"),
                ("defrag", "madvise")
            ])
        );
        // Already-permissive settings of the wanted size are left alone.
        assert_eq!(
            plan("16K", &k2),
            pairs(&[("hugepages-2048kB/enabled", "never"), ("defrag", "madvise")])
        );
        assert_eq!(
            plan("4K", &k2),
            pairs(&[
                ("hugepages-16kB/enabled", "never"),
                ("hugepages-2048kB/enabled", "never")
            ])
        );
    }

    #[test]
    fn plan_on_a_kernel_without_mthp_uses_the_top_level_knob() {
        let mut k = BTreeMap::new();
        k.insert("enabled".to_owned(), "never".to_owned());
        k.insert("defrag".to_owned(), "madvise".to_owned());
        assert_eq!(plan("2M", &k), pairs(&[("enabled", "madvise")]));
        assert!(plan("4K", &k).is_empty());
        assert!(plan_for(FolioSpec::Mthp(65536), &k, PMD_SIZE).is_err());
        assert!(plan_for(FolioSpec::Pmd, &BTreeMap::new(), PMD_SIZE).is_err());
    }
}
