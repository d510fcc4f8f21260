//! `compare A B --functions`: per kernel function, what changed between two
//! profiled runs (`vm --profile`), per call and exactly: a `perf diff` whose
//! figures are counts, not samples.

use serde::{Deserialize, Serialize};

use super::pair::{key, require_comparable};
use crate::error::bail_usage;
use crate::record::{CellResult, Profile};
use crate::store::StoredRun;

/// One function in two cells: per call, `None` where it did not run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionRow {
    pub name: String,
    pub entries_a: Option<f64>,
    pub entries_b: Option<f64>,
    pub instructions_a: Option<f64>,
    pub instructions_b: Option<f64>,
    /// Instructions per call, B minus A.
    pub instructions_change: f64,
}

/// One TLB-maintenance kind in two cells, per call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TlbRow {
    pub kind: String,
    pub a: f64,
    pub b: f64,
}

/// The changes of one pair of cells.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellFunctions {
    /// `mprotect-toggle 400K 4K` (and the phase, when the workload has several).
    pub cell: String,
    pub kernel_instructions_a: f64,
    pub kernel_instructions_b: f64,
    pub tlb: Vec<TlbRow>,
    /// Largest change first.
    pub functions: Vec<FunctionRow>,
}

/// Every pair of profiled cells of two runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionsView {
    pub a: String,
    pub b: String,
    pub cells: Vec<CellFunctions>,
}

fn label(c: &CellResult) -> String {
    let mut s = format!(
        "{} {} {}",
        c.workload.name(),
        crate::text::format::size(c.size_bytes),
        c.folio
    );
    if let Some(p) = &c.phase {
        s.push_str(&format!(" ({p})"));
    }
    s
}

impl FunctionsView {
    /// Keep only the function `name`; a usage error naming the nearest
    /// names when it ran in no cell of either run.
    pub fn only(&mut self, name: &str) -> anyhow::Result<()> {
        let known = self
            .cells
            .iter()
            .any(|c| c.functions.iter().any(|f| f.name == name));
        if !known {
            let all = self
                .cells
                .iter()
                .flat_map(|c| c.functions.iter().map(|f| f.name.as_str()));
            let near = crate::text::nearest::nearest(all, name, 5);
            bail_usage!(
                "no kernel function '{name}' ran in the counted cells of {} or {}; the nearest \
                 names that did: {}",
                self.a,
                self.b,
                near.join(", ")
            );
        }
        for c in &mut self.cells {
            c.functions.retain(|f| f.name == name);
        }
        Ok(())
    }
}

/// The per-function changes of two profiles, largest change first.
pub fn diff(a: &Profile, b: &Profile) -> Vec<FunctionRow> {
    let mut names: Vec<&str> = a
        .functions
        .iter()
        .chain(&b.functions)
        .map(|f| f.name.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut rows: Vec<FunctionRow> = names
        .into_iter()
        .map(|n| {
            let (fa, fb) = (a.function(n), b.function(n));
            let ia = fa.map(|f| f.instructions);
            let ib = fb.map(|f| f.instructions);
            FunctionRow {
                name: n.to_string(),
                entries_a: fa.map(|f| f.entries),
                entries_b: fb.map(|f| f.entries),
                instructions_a: ia,
                instructions_b: ib,
                instructions_change: ib.unwrap_or(0.0) - ia.unwrap_or(0.0),
            }
        })
        .collect();
    rows.sort_by(|x, y| {
        y.instructions_change
            .abs()
            .total_cmp(&x.instructions_change.abs())
            .then_with(|| x.name.cmp(&y.name))
    });
    rows
}

fn tlb_rows(a: &Profile, b: &Profile) -> Vec<TlbRow> {
    let mut kinds: Vec<&String> = a.tlb.keys().chain(b.tlb.keys()).collect();
    kinds.sort();
    kinds.dedup();
    kinds
        .into_iter()
        .map(|k| TlbRow {
            kind: k.clone(),
            a: a.tlb.get(k).copied().unwrap_or(0.0),
            b: b.tlb.get(k).copied().unwrap_or(0.0),
        })
        .collect()
}

/// Pair the cells of `a` and `b` (named as the user named them) and diff
/// every pair whose both sides were counted; a usage error when none was.
pub fn compare_functions(
    (name_a, a): (&str, &StoredRun),
    (name_b, b): (&str, &StoredRun),
) -> anyhow::Result<FunctionsView> {
    require_comparable(
        (name_a, std::slice::from_ref(a)),
        (name_b, std::slice::from_ref(b)),
    )?;
    let mut cells = Vec::new();
    let mut uncounted = Vec::new();
    for ca in a.kernel_cells() {
        let Some(cb) = b.kernel_cells().find(|cb| key(cb, false) == key(ca, false)) else {
            continue;
        };
        match (&ca.profile, &cb.profile) {
            (Some(pa), Some(pb)) => cells.push(CellFunctions {
                cell: label(ca),
                kernel_instructions_a: pa.kernel_instructions,
                kernel_instructions_b: pb.kernel_instructions,
                tlb: tlb_rows(pa, pb),
                functions: diff(pa, pb),
            }),
            _ => uncounted.push(label(ca)),
        }
    }
    if cells.is_empty() {
        let why = if uncounted.is_empty() {
            "the runs have no cell in common".to_string()
        } else {
            format!(
                "their cells in common ({}) were not counted on both sides",
                uncounted.join(", ")
            )
        };
        bail_usage!(
            "--functions compares the mechanism counters of runs made with `ptelab vm --profile` \
             (TCG guests), and runs {} ('{name_a}') and {} ('{name_b}') have none to compare: \
             {why}",
            a.run.id,
            b.run.id
        );
    }
    Ok(FunctionsView {
        a: name_a.to_string(),
        b: name_b.to_string(),
        cells,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::FunctionCount;

    fn profile(fs: &[(&str, f64, f64)]) -> Profile {
        Profile {
            windows: 3,
            kernel_instructions: fs.iter().map(|f| f.2).sum(),
            functions: fs
                .iter()
                .map(|&(name, entries, instructions)| FunctionCount {
                    name: name.into(),
                    entries,
                    instructions,
                })
                .collect(),
            ..Profile::default()
        }
    }

    #[test]
    fn largest_change_first_and_missing_is_none() {
        let a = profile(&[
            ("change_protection", 1.0, 9000.0),
            ("can_change_pte_writable", 50.0, 900.0),
        ]);
        let b = profile(&[
            ("change_pte_range", 1.0, 15059.0),
            ("vm_normal_page", 100.0, 3300.0),
            ("can_change_pte_writable", 50.0, 950.0),
        ]);
        let rows = diff(&a, &b);
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "change_pte_range",
                "change_protection",
                "vm_normal_page",
                "can_change_pte_writable"
            ]
        );
        assert_eq!(rows[1].instructions_change, -9000.0);
        assert_eq!(rows[1].entries_b, None);
        assert_eq!(rows[2].entries_a, None);
        assert_eq!(rows[2].entries_b, Some(100.0));
        assert_eq!(rows[3].instructions_change, 50.0);
    }
}
