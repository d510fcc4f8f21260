//! The model held to what each kernel executed (`ptelab crosscheck
//! --stored`): per profiled TCG guest cell, every out-of-line kernel
//! function the model counts (`Counters::functions`) against the entries
//! ptelab's QEMU plugin counted in it, and the model's TLB invalidations
//! against the counted ones (docs/model.md, "Model counters and the kernel
//! functions that implement them").
//!
//! Left out, with the reason in [`Skipped`]: cells whose region is not a
//! whole number of folios (the guest maps the tail as small folios, the
//! model as part of a folio), and the order-0 `__contpte_try_fold` calls
//! (whether a fold is attempted depends on where the guest's pages land
//! physically).

use ptelab_model::KFn;
use serde::Serialize;

use crate::text::format::counter;
use crate::text::table::Table;

use super::Cell;
use crate::workload::FolioSpec;

/// A count and the model's figure for it agree when they differ by at most
/// this per call, plus [`RELATIVE`] of the count: the plugin's figures are
/// medians of exact counts over windows of many calls, so one entry more
/// per call is a mismatch, a rounding of the per-call division is not.
const SLACK: f64 = 0.01;
const RELATIVE: f64 = 1e-3;

/// One mechanism row: a counter of one cell on one kernel.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// `debian:6.17.8 arm64`.
    pub kernel: String,
    /// `mprotect-toggle 4K 400K`.
    pub cell: String,
    /// `call:vm_normal_page` or `tlbi_ops`.
    pub counter: String,
    /// The model's figure per call.
    pub model: f64,
    /// The plugin's count per call.
    pub counted: f64,
}

impl Row {
    pub fn matches(&self) -> bool {
        (self.model - self.counted).abs() <= SLACK + RELATIVE * self.counted.abs()
    }
}

/// A cell left out, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skipped {
    /// `debian:6.17.8 arm64`.
    pub kernel: String,
    pub cell: String,
    pub why: &'static str,
}

/// The mechanism rows of `cells` (profiled ones; others are skipped).
pub fn rows(cells: &[Cell]) -> (Vec<Row>, Vec<Skipped>) {
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    for c in cells {
        let o = &c.obs;
        let kernel = format!("{} {}", o.kernel, o.arch);
        let cell = format!("{} {}", o.workload, o.label());
        let skip = |why| Skipped {
            kernel: kernel.clone(),
            cell: cell.clone(),
            why,
        };
        if o.functions.is_empty() {
            skipped.push(skip(
                "not profiled: run the guest with `ptelab vm --profile`",
            ));
            continue;
        }
        if o.size_bytes % o.folio.folio_bytes() != 0 {
            skipped.push(skip(
                "the region is not a whole number of folios: the guest maps the tail as small folios, the model as part of one",
            ));
            continue;
        }
        for f in KFn::ALL {
            if f == KFn::ContpteTryFold && o.folio == FolioSpec::Base {
                continue;
            }
            let name = f.name();
            let model = c
                .counters
                .get(&format!("call:{name}"))
                .copied()
                .unwrap_or(0.0);
            // Clones (`.isra.0`, `.constprop.0`) count as the function.
            let counted: f64 = o
                .functions
                .iter()
                .filter(|fc| fc.name.split('.').next() == Some(name))
                .map(|fc| fc.entries)
                .sum();
            if model == 0.0 && counted == 0.0 {
                continue;
            }
            rows.push(Row {
                kernel: kernel.clone(),
                cell: cell.clone(),
                counter: format!("call:{name}"),
                model,
                counted,
            });
        }
        if let (Some(model), Some(counted)) = (c.counters.get("tlbi_ops"), o.tlb_invalidations) {
            rows.push(Row {
                kernel: kernel.clone(),
                cell: cell.clone(),
                counter: "tlbi_ops".into(),
                model: *model,
                counted,
            });
        }
    }
    (rows, skipped)
}

/// The text report: per kernel, how many rows match; every mismatch with
/// both figures; what was left out and why.
pub fn render_text(rows: &[Row], skipped: &[Skipped]) -> String {
    let mut kernels: Vec<&str> = rows.iter().map(|r| r.kernel.as_str()).collect();
    kernels.sort();
    kernels.dedup();
    let mut s = String::from(
        "mechanism rows: the model's out-of-line calls per kernel function and TLB invalidations, \
         per call, against ptelab's QEMU plugin counts in each guest\n",
    );
    for k in &kernels {
        let of: Vec<&Row> = rows.iter().filter(|r| r.kernel == *k).collect();
        let ok = of.iter().filter(|r| r.matches()).count();
        s.push_str(&format!("  {k}: {ok} of {} rows match\n", of.len()));
    }
    let bad: Vec<&Row> = rows.iter().filter(|r| !r.matches()).collect();
    if !bad.is_empty() {
        let mut t = Table::new()
            .left("kernel")
            .left("cell")
            .left("counter")
            .right("model")
            .right("counted");
        for r in &bad {
            t.row([
                r.kernel.clone(),
                r.cell.clone(),
                r.counter.clone(),
                counter(Some(r.model)),
                counter(Some(r.counted)),
            ]);
        }
        s.push_str(&format!("\nmismatches\n{}", t.text(" | ")));
    }
    if !skipped.is_empty() {
        s.push_str(&format!("\nleft out: {} cells\n", skipped.len()));
        let mut whys: Vec<&str> = skipped.iter().map(|k| k.why).collect();
        whys.sort();
        whys.dedup();
        for w in whys {
            let n = skipped.iter().filter(|k| k.why == w).count();
            s.push_str(&format!("  {n}: {w}\n"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::record::FunctionCount;
    use crate::workload::{Arch, WorkloadKind};
    use crate::Observed;

    fn cell(size: u64, folio: FolioSpec, counted: &[(&str, f64)], model: &[(&str, f64)]) -> Cell {
        let obs = Observed {
            kernel: "debian:6.17.8".into(),
            arch: Arch::X86_64,
            strategy: ptelab_model::Strategy::V6_17,
            workload: WorkloadKind::MprotectToggle,
            size_bytes: size,
            folio,
            phase: None,
            instructions: 1.0,
            functions: counted
                .iter()
                .map(|(n, e)| FunctionCount {
                    name: n.to_string(),
                    entries: *e,
                    instructions: 10.0 * e,
                })
                .collect(),
            tlb_invalidations: Some(0.5),
            counted: true,
            parts: Vec::new(),
        };
        let mut counters: BTreeMap<String, f64> =
            model.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        counters.insert("tlbi_ops".into(), 0.5);
        Cell::new(obs, counters)
    }

    #[test]
    fn clones_count_as_the_function_and_a_difference_is_a_mismatch() {
        let c = cell(
            400 << 10,
            FolioSpec::Base,
            &[
                ("maybe_change_pte_writable.isra.0", 50.0),
                ("vm_normal_page", 100.0),
            ],
            &[
                ("call:maybe_change_pte_writable", 50.0),
                ("call:vm_normal_page", 99.0),
            ],
        );
        let (rows, skipped) = rows(&[c]);
        assert!(skipped.is_empty());
        let get = |n: &str| rows.iter().find(|r| r.counter == n).unwrap();
        assert!(get("call:maybe_change_pte_writable").matches());
        assert!(!get("call:vm_normal_page").matches());
        assert!(get("tlbi_ops").matches());
        let text = render_text(&rows, &skipped);
        assert!(text.contains("2 of 3 rows match"), "{text}");
        assert!(text.contains("call:vm_normal_page"), "{text}");
    }

    #[test]
    fn partial_folios_and_unprofiled_cells_are_left_out_with_the_reason() {
        let partial = cell(400 << 10, FolioSpec::Mthp(64 << 10), &[("x", 1.0)], &[]);
        let unprofiled = cell(4 << 20, FolioSpec::Base, &[], &[]);
        let (rows, skipped) = rows(&[partial, unprofiled]);
        assert!(rows.is_empty());
        assert_eq!(skipped.len(), 2);
        assert!(skipped[0].why.contains("whole number of folios"));
        assert!(skipped[1].why.contains("--profile"));
    }
}
