//! Counters of page-table primitives, named after what the kernel does.
//!
//! Kernel counterpart: none — these are the model's measurement. The
//! vocabulary is docs/kernel.md §2 (`LOAD`, `GATHER`, `XCHG0`, `STORE`,
//! `PGREAD`, `NEEDS_FLUSH`, `GATHER_RANGE`, `TLB_FLUSH`, `TLBI_SYNC`,
//! `CALL(f)`). Counters live in the context ([`crate::Cx`]) that every model
//! function receives, never in globals, so two strategies can run side by side.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// Every counted event. Each field is one primitive; see the field docs
        /// and docs/model.md for the exact counting rule.
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct Counters {
            $( $(#[$doc])* pub $name: u64, )*
            /// Histogram of mprotect/mremap batch sizes (`nr_ptes` per loop
            /// iteration over present PTEs): size -> count.
            pub batch_sizes: BTreeMap<u64, u64>,
            /// Entries of out-of-line kernel functions, by symbol name (see
            /// [`crate::strategy::KFn`]); their sum is `calls`. Only the
            /// functions the build has out of line are counted
            /// ([`crate::Strategy::out_of_line`]).
            #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
            pub functions: BTreeMap<String, u64>,
        }

        impl Counters {
            /// Counter names in display order (the histogram excluded).
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name)),*];

            /// `(name, value)` for every scalar counter, in display order.
            pub fn scalars(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name)),*]
            }

            /// Number of scalar counters.
            pub const LEN: usize = [$(stringify!($name)),*].len();

            /// The scalar counters, in display order.
            pub fn scalar_array(&self) -> [u64; Self::LEN] {
                [$(self.$name),*]
            }

            /// Add `k` times `delta` (scalars in display order).
            pub fn add_scalars(&mut self, delta: &[u64; Self::LEN], k: u64) {
                let mut it = delta.iter();
                $( self.$name += it.next().copied().unwrap_or(0) * k; )*
            }

            /// Add `other` into `self` (histograms merged).
            pub fn add(&mut self, other: &Counters) {
                $( self.$name += other.$name; )*
                for (k, v) in &other.batch_sizes {
                    *self.batch_sizes.entry(*k).or_default() += v;
                }
                for (k, v) in &other.functions {
                    *self.functions.entry(k.clone()).or_default() += v;
                }
            }
        }
    };
}

counters! {
    /// Raw loads of one PTE word (`READ_ONCE`/`__ptep_get`), including the
    /// loads made inside an arm64 contpte gather.
    pte_loads,
    /// arm64 `contpte_ptep_get()` calls: a `ptep_get()` that hit a valid
    /// contiguous entry and scanned its block for access/dirty bits.
    contpte_gathers,
    /// Atomic exchanges of a PTE with zero (`ptep_get_and_clear`, `xchg`).
    pte_xchg,
    /// Plain stores of a PTE word (`set_pte`, `__set_ptes`, `WRITE_ONCE`).
    pte_stores,
    /// Cache lines of `struct page` metadata read (memmap): a helper that
    /// reads the same struct page as the previous read costs nothing.
    page_reads,
    /// `vm_normal_page()`/`vm_normal_folio()` lookups (+ `page_folio()`).
    folio_lookups,
    /// `PageAnonExclusive()` tests.
    anon_exclusive_tests,
    /// Evaluations of `pte_needs_flush(old, new)`.
    needs_flush_evals,
    /// `tlb_flush_pte_range()` calls (mmu_gather range bookkeeping).
    tlb_gather_ranges,
    /// Arch TLB flush calls (`tlb_flush()` from the mmu_gather, or
    /// `flush_tlb_range()`), not counting contpte repaint TLBIs.
    tlb_flush_calls,
    /// Pages asked for by those flush calls (before any full-flush conversion).
    tlb_flush_pages,
    /// Flush calls executed as a full (whole-mm/ASID) flush.
    full_flushes,
    /// Hardware invalidation instructions: x86 INVLPG (or 1 per full flush),
    /// arm64 TLBI operations (range or single page, or 1 ASID-wide), including
    /// those of contpte repaints.
    tlbi_ops,
    /// arm64 synchronous range TLBIs issued inside `contpte_convert()`
    /// (break-before-make), one per repaint not elided by BBML2.
    tlbi_sync,
    /// arm64 contpte blocks unfolded (`__contpte_try_unfold` → convert).
    contpte_unfolds,
    /// arm64 contpte blocks folded (`__contpte_try_fold` → convert).
    contpte_folds,
    /// Present PTEs whose protection `change_pte_range()` changed (its
    /// `pages` return value) or PTEs `move_ptes()` moved.
    ptes_changed,
    /// Loop iterations over present PTEs (batches; 1 PTE each when per-PTE).
    batches,
    /// PTE tables mremap moved whole (`move_normal_pmd()`: an extent of a
    /// full PMD at both ends), their PTEs neither read nor written.
    pmd_moves,
    /// Entries of out-of-line kernel functions on the modelled paths, as a
    /// QEMU plugin counts them in a guest of the release's Debian build: the
    /// sum of `functions` (per-function figures there).
    calls,
    /// Write faults taken by the workload's re-touch (not an mprotect
    /// primitive; reported separately).
    write_faults,
    /// Per-PTE tests of the accessed bit by a young helper
    /// (`ptep_test_and_clear_young()`; arm64 `__ptep_test_and_clear_young()`).
    young_tests,
    /// Atomic clears of the accessed bit executed: x86 `lock btr` (only when
    /// young), arm64 `cmpxchg` (every test, young or not), generic `set_pte_at`.
    young_clears,
    /// TLB flushes issued by clear-flush-young helpers (arm64 TLBI nosync of
    /// one page or of the block-expanded range; also in `tlb_flush_calls`).
    young_flushes,
    /// `folio_referenced()` calls (folios the reclaim scan checked).
    folios_scanned,
}

impl Counters {
    /// Record one batch of `nr` PTEs.
    pub fn record_batch(&mut self, nr: u64) {
        self.batches += 1;
        *self.batch_sizes.entry(nr).or_default() += 1;
    }

    /// Scalar counters as a name → value map (for JSON and result records).
    pub fn to_map(&self) -> BTreeMap<String, u64> {
        self.scalars()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    /// `functions` divided by `calls` (mm calls), as a name → per-call map.
    pub fn functions_per_call(&self, calls: u64) -> BTreeMap<String, f64> {
        let d = calls.max(1) as f64;
        self.functions
            .iter()
            .map(|(k, v)| (k.clone(), *v as f64 / d))
            .collect()
    }

    /// Scalar counters divided by `calls`, as a name → per-call value map.
    pub fn per_call(&self, calls: u64) -> BTreeMap<String, f64> {
        let d = calls.max(1) as f64;
        self.scalars()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v as f64 / d))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_merges_histograms() {
        let mut a = Counters::default();
        a.record_batch(16);
        a.pte_loads = 3;
        let mut b = Counters::default();
        b.record_batch(16);
        b.record_batch(1);
        b.pte_loads = 4;
        a.add(&b);
        assert_eq!(a.pte_loads, 7);
        assert_eq!(a.batches, 3);
        assert_eq!(a.batch_sizes[&16], 2);
        assert_eq!(Counters::NAMES[0], "pte_loads");
    }

    #[test]
    fn add_merges_function_entries() {
        let mut a = Counters::default();
        a.functions.insert("vm_normal_page".into(), 2);
        let mut b = Counters::default();
        b.functions.insert("vm_normal_page".into(), 3);
        b.functions.insert("pte_val".into(), 1);
        a.add(&b);
        assert_eq!(a.functions["vm_normal_page"], 5);
        assert_eq!(a.functions_per_call(2)["pte_val"], 0.5);
    }
}
