//! `ptelab model --predict` as text, Markdown and JSON: the fitted costs
//! with the per-function counts behind them, where costs differ between
//! kernels, each predicted cell beside its measured figure, and the
//! predicted against the measured ratio between two kernels.

use serde::Serialize;

use std::collections::{BTreeMap, BTreeSet};

use super::{fit_costs, with_model_rows, Cell, Cost, CostModel, Observed, Prediction};
use crate::text::format::fixed;
use crate::text::table::Table;
use crate::workload::size::format_size;
use crate::workload::{Arch, FolioSpec, WorkloadKind};

/// Schema tag of the JSON document.
pub const SCHEMA: &str = "ptelab/predict/v1";

/// Differences above this between a kernel's own costs and the pooled fit
/// are reported.
const DIFFERS: f64 = 0.10;

/// `kernel`'s fit cell like `cell` (workload, size, folio, phase): as
/// fitted, or, for a cell fitted as its directions (the toggle), those put
/// back together.
fn fitted_as(model: &CostModel, kernel: &str, cell: &Observed) -> Option<Observed> {
    let like: Vec<&Observed> = model
        .cells
        .iter()
        .map(|c| &c.obs)
        .filter(|o| {
            o.kernel == kernel
                && o.workload == cell.workload
                && o.size_bytes == cell.size_bytes
                && o.folio == cell.folio
        })
        .collect();
    if let Some(o) = like.iter().find(|o| o.phase == cell.phase) {
        return Some((*o).clone());
    }
    let marked = cell.workload.marked_parts();
    let parts: Vec<&Observed> = like
        .into_iter()
        .filter(|o| cell.phase.is_none() && o.phase.as_deref().is_some_and(|p| marked.contains(&p)))
        .collect();
    if parts.len() == marked.len() {
        super::whole_of(&parts)
    } else {
        None
    }
}

/// What the figures are.
pub const UNIT: &str = "guest instructions per call inside the calls, kernel and user, as the \
     QEMU plugin counted them (TCG; a cell that was not profiled: its icount figure, which \
     also holds the harness's loop and clock reads, noted \"icount\")";

/// Everything `model --predict` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub arch: Arch,
    pub unit: &'static str,
    pub fit_kernels: Vec<String>,
    pub fit_workloads: Vec<WorkloadKind>,
    pub fit_cells: usize,
    /// The fit's largest |relative residual| on its own cells.
    pub fit_max_residual: f64,
    pub costs: Vec<Cost>,
    /// Each fit cell, measured and as the fit gives it (in sample).
    pub fitted: Vec<Fitted>,
    /// Costs that one fit kernel alone puts more than 10% away from the
    /// pooled fit.
    pub differences: Vec<Difference>,
    /// Costs that a predicted workload's own cells determine more than 10%
    /// away from the cost its predictions used.
    pub workload_differences: Vec<WorkloadDifference>,
    pub predictions: Vec<Prediction>,
    /// Predicted against measured ratios to a fit kernel, where both
    /// kernels measured the cell.
    pub ratios: Vec<Ratio>,
}

/// One fit cell: its measured figure, and the fit's.
#[derive(Clone, Debug, Serialize)]
pub struct Fitted {
    pub kernel: String,
    pub workload: WorkloadKind,
    pub cell: String,
    pub measured: f64,
    pub fitted: f64,
    /// (fitted − measured) / measured.
    pub residual: f64,
}

/// A cost that differs between kernels.
#[derive(Clone, Debug, Serialize)]
pub struct Difference {
    pub counter: String,
    pub kernel: String,
    pub alone: f64,
    pub pooled: f64,
}

/// A cost that differs between workloads: what the measured cells of a
/// predicted workload determine alone (fitted on them, all their kernels
/// pooled, for this report only), against the cost its predictions used.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadDifference {
    pub counter: String,
    pub workload: WorkloadKind,
    /// Instructions per unit the workload's cells determine.
    pub alone: f64,
    /// Instructions per unit the predictions used.
    pub used: f64,
    /// Whether the fit determined `used` (else it is a share of a joint
    /// cost the fit cells could not separate).
    pub used_identified: bool,
}

/// One cell's ratio of a predicted kernel to a fit kernel.
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    pub workload: WorkloadKind,
    pub size_bytes: u64,
    pub folio: FolioSpec,
    pub phase: Option<String>,
    pub base_kernel: String,
    pub kernel: String,
    pub measured_ratio: f64,
    /// None when the cell was refused.
    pub predicted_ratio: Option<f64>,
    /// Where the measured kernels differ: the kernel functions whose
    /// instructions per call grew or shrank most from the fit kernel to the
    /// predicted one (when both were profiled), largest change first.
    pub functions_changed: Vec<(String, f64)>,
}

/// For each predicted workload the fit did not include, the costs its own
/// measured cells determine (a fit on them alone, every predicted kernel
/// pooled) that are more than [`DIFFERS`] away from what its predictions
/// used: which counter a residual comes from, and by how much, rather than
/// left inside it. Counters its cells cannot separate are not compared.
fn workload_differences(
    model: &CostModel,
    costs: &[Cost],
    predictions: &[Prediction],
) -> anyhow::Result<Vec<WorkloadDifference>> {
    let fitted: BTreeSet<WorkloadKind> = model.cells.iter().map(|c| c.obs.workload).collect();
    let others: BTreeSet<WorkloadKind> = predictions
        .iter()
        .map(|p| p.cell.workload)
        .filter(|w| !fitted.contains(w))
        .collect();
    let mut out = Vec::new();
    for w in others {
        let obs: Vec<Observed> = predictions
            .iter()
            .filter(|p| p.cell.workload == w)
            .map(|p| p.cell.clone())
            .collect();
        let cells = with_model_rows(obs)?;
        if cells.is_empty() {
            continue;
        }
        for a in fit_costs(model.arch, cells, &mut [])?.costs() {
            let Some(alone) = a.instructions else {
                continue;
            };
            let Some(p) = costs.iter().find(|p| p.counter == a.counter && p.seen) else {
                continue;
            };
            // Costs that both print as 0.0 do not differ.
            let zero = alone.abs() < 0.05 && p.split.abs() < 0.05;
            if !zero && p.split != 0.0 && ((alone - p.split) / p.split).abs() > DIFFERS {
                out.push(WorkloadDifference {
                    counter: a.counter,
                    workload: w,
                    alone,
                    used: p.split,
                    used_identified: p.instructions.is_some(),
                });
            }
        }
    }
    Ok(out)
}

/// A relative residual as `+1.8%`, never `-0.0%`.
pub fn pct(r: f64) -> String {
    let v = (r * 1000.0).round() / 10.0;
    format!("{:+.1}%", if v == 0.0 { 0.0 } else { v })
}

/// Up to three names, and how many more.
pub fn few(names: &[String]) -> String {
    match names.len() {
        0..=3 => names.join(", "),
        n => format!("{} and {} more", names[..3].join(", "), n - 3),
    }
}

/// The three kernel functions whose instructions per call changed most
/// between two profiled cells.
fn functions_changed(base: &Observed, new: &Observed) -> Vec<(String, f64)> {
    let per_call = |o: &Observed| -> BTreeMap<String, f64> {
        o.functions
            .iter()
            .map(|f| (f.name.clone(), f.instructions))
            .collect()
    };
    let (a, b) = (per_call(base), per_call(new));
    if a.is_empty() || b.is_empty() {
        return Vec::new();
    }
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let mut d: Vec<(String, f64)> = names
        .into_iter()
        .map(|k| {
            (
                k.clone(),
                b.get(k).unwrap_or(&0.0) - a.get(k).unwrap_or(&0.0),
            )
        })
        .collect();
    d.sort_by(|x, y| y.1.abs().total_cmp(&x.1.abs()).then(x.0.cmp(&y.0)));
    d.truncate(3);
    d
}

/// What a prediction's figure rests on, or why it has none: empty for a
/// figure the fit determines.
pub fn note(p: &Prediction) -> String {
    let why = reason(p);
    match (p.cell.counted, why.is_empty()) {
        (true, _) => why,
        (false, true) => "icount".into(),
        (false, false) => format!("icount; {why}"),
    }
}

fn reason(p: &Prediction) -> String {
    if p.predicted.is_some() {
        return if p.unseparated.is_empty() {
            String::new()
        } else {
            format!("extrapolated: splits {}", few(&p.unseparated))
        };
    }
    if p.lacking.is_empty() {
        return "the fitted costs give a figure at or below zero here: they do not transfer".into();
    }
    let would: Vec<&str> = p.would_identify.iter().map(|w| w.name()).collect();
    let mut note = format!("no fit cell executes {}", p.lacking.join(", "));
    if would.is_empty() {
        note.push_str("; no workload on the fit kernels executes these: fit on a kernel that does");
    } else {
        note.push_str(&format!(
            "; measuring {} on the fit kernels would give its cost",
            would.join(" or ")
        ));
    }
    note
}

impl Report {
    /// Assemble the report of `model` and its `predictions`.
    pub fn new(model: &CostModel, predictions: Vec<Prediction>) -> anyhow::Result<Report> {
        let mut fit_kernels: Vec<String> =
            model.cells.iter().map(|c| c.obs.kernel.clone()).collect();
        fit_kernels.sort();
        fit_kernels.dedup();
        let mut fit_workloads: Vec<WorkloadKind> =
            model.cells.iter().map(|c| c.obs.workload).collect();
        fit_workloads.sort();
        fit_workloads.dedup();
        let costs = model.costs();
        let mut differences = Vec::new();
        if fit_kernels.len() > 1 {
            for k in &fit_kernels {
                let own: Vec<Cell> = model
                    .cells
                    .iter()
                    .filter(|c| &c.obs.kernel == k)
                    .cloned()
                    .collect();
                let alone = fit_costs(model.arch, own, &mut [])?.costs();
                for a in &alone {
                    let Some(p) = costs.iter().find(|p| p.counter == a.counter) else {
                        continue;
                    };
                    if let (Some(a_v), Some(p_v)) = (a.instructions, p.instructions) {
                        // Costs that both print as 0.0 do not differ.
                        let zero = a_v.abs() < 0.05 && p_v.abs() < 0.05;
                        if !zero && p_v != 0.0 && ((a_v - p_v) / p_v).abs() > DIFFERS {
                            differences.push(Difference {
                                counter: a.counter.clone(),
                                kernel: k.clone(),
                                alone: a_v,
                                pooled: p_v,
                            });
                        }
                    }
                }
            }
        }
        let workload_differences = workload_differences(model, &costs, &predictions)?;
        let mut ratios = Vec::new();
        for p in &predictions {
            for base in &fit_kernels {
                if base == &p.cell.kernel {
                    continue;
                }
                if let Some(b) = fitted_as(model, base, &p.cell) {
                    ratios.push(Ratio {
                        workload: p.cell.workload,
                        size_bytes: p.cell.size_bytes,
                        folio: p.cell.folio,
                        phase: p.cell.phase.clone(),
                        base_kernel: base.clone(),
                        kernel: p.cell.kernel.clone(),
                        measured_ratio: p.cell.instructions / b.instructions,
                        predicted_ratio: p.predicted.map(|v| v / b.instructions),
                        functions_changed: functions_changed(&b, &p.cell),
                    });
                }
            }
        }
        let fitted = model
            .cells
            .iter()
            .zip(&model.fit.residuals)
            .map(|(c, r)| Fitted {
                kernel: c.obs.kernel.clone(),
                workload: c.obs.workload,
                cell: if c.obs.counted {
                    c.obs.label()
                } else {
                    format!("{} (icount)", c.obs.label())
                },
                measured: c.obs.instructions,
                fitted: c.obs.instructions * (1.0 + r),
                residual: *r,
            })
            .collect();
        Ok(Report {
            schema: SCHEMA,
            arch: model.arch,
            unit: UNIT,
            fit_kernels,
            fit_workloads,
            fit_cells: model.cells.len(),
            fit_max_residual: model.fit.residuals.iter().fold(0.0, |m, r| m.max(r.abs())),
            costs,
            fitted,
            differences,
            workload_differences,
            predictions,
            ratios,
        })
    }

    fn headline(&self) -> String {
        let workloads: Vec<&str> = self.fit_workloads.iter().map(|w| w.name()).collect();
        format!(
            "cost model, {}: {} fitted on {} cells of {} on {}; figures are {}; \
             fit residuals within ±{}%",
            self.arch,
            "instructions per call = a fixed part per syscall + Σ counter × cost",
            self.fit_cells,
            workloads.join(", "),
            self.fit_kernels.join(", "),
            self.unit,
            fixed(self.fit_max_residual * 100.0, 1),
        )
    }

    fn cost_table(&self) -> Table {
        let mut t = Table::new()
            .left("counter")
            .right("instructions per unit")
            .left("counted: the counter's kernel functions, instructions per unit (kernel)");
        let mut never = Vec::new();
        for c in &self.costs {
            if !c.seen {
                never.push(c.counter.as_str());
                continue;
            }
            let cost = match c.instructions {
                Some(v) => fixed(v, 1),
                None if c.moves_with.is_empty() => "not determined".into(),
                None => format!(
                    "{} (split: moves with {})",
                    fixed(c.split, 1),
                    few(&c.moves_with)
                ),
            };
            let support: Vec<String> = c
                .support
                .iter()
                .map(|s| {
                    format!(
                        "{} {} ({})",
                        s.functions.join("+"),
                        fixed(s.instructions_per_unit, 1),
                        s.kernel
                    )
                })
                .collect();
            t.row([c.counter.to_string(), cost, support.join("; ")]);
        }
        if !never.is_empty() {
            t.row([
                "(never non-zero here)".to_string(),
                "-".into(),
                never.join(", "),
            ]);
        }
        t
    }

    fn prediction_table(&self) -> Table {
        let mut t = Table::new()
            .left("kernel")
            .left("workload")
            .left("cell")
            .right("measured")
            .right("predicted")
            .right("residual")
            .left("note");
        for p in &self.predictions {
            let (pred, res) = match (p.predicted, p.residual) {
                (Some(v), Some(r)) => (fixed(v, 0), pct(r)),
                _ => ("-".into(), "-".into()),
            };
            let note = note(p);
            t.row([
                p.cell.kernel.clone(),
                p.cell.workload.name().to_string(),
                p.cell.label(),
                fixed(p.cell.instructions, 0),
                pred,
                res,
                note,
            ]);
        }
        t
    }

    fn fitted_table(&self) -> Table {
        let mut t = Table::new()
            .left("kernel")
            .left("workload")
            .left("cell")
            .right("measured")
            .right("fitted")
            .right("residual");
        for f in &self.fitted {
            t.row([
                f.kernel.clone(),
                f.workload.name().to_string(),
                f.cell.clone(),
                fixed(f.measured, 0),
                fixed(f.fitted, 0),
                pct(f.residual),
            ]);
        }
        t
    }

    fn ratio_table(&self) -> Table {
        let mut t = Table::new()
            .left("workload")
            .left("cell")
            .left("kernels")
            .right("measured ratio")
            .right("predicted ratio")
            .right("off")
            .left("measured: functions changed most (instructions per call)");
        for r in &self.ratios {
            let mut cell = format!("{} {}", r.folio, format_size(r.size_bytes));
            if let Some(p) = &r.phase {
                cell.push(' ');
                cell.push_str(p);
            }
            t.row([
                r.workload.name().to_string(),
                cell,
                format!("{} -> {}", r.base_kernel, r.kernel),
                format!("{:.2}x", r.measured_ratio),
                r.predicted_ratio.map_or("-".into(), |v| format!("{v:.2}x")),
                r.predicted_ratio
                    .map_or("-".into(), |v| pct(v / r.measured_ratio - 1.0)),
                r.functions_changed
                    .iter()
                    .map(|(f, d)| format!("{f} {d:+.0}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ]);
        }
        t
    }

    fn difference_lines(&self) -> Vec<String> {
        self.differences
            .iter()
            .map(|d| {
                format!(
                    "{}: {} instructions per unit fitted on {} alone, {} pooled ({:+.0}%)",
                    d.counter,
                    fixed(d.alone, 1),
                    d.kernel,
                    fixed(d.pooled, 1),
                    (d.alone / d.pooled - 1.0) * 100.0
                )
            })
            .collect()
    }

    fn workload_difference_lines(&self) -> Vec<String> {
        self.workload_differences
            .iter()
            .map(|d| {
                format!(
                    "{}: {} instructions per unit determined by {} alone, {} used ({}; {:+.0}%)",
                    d.counter,
                    fixed(d.alone, 1),
                    d.workload.name(),
                    fixed(d.used, 1),
                    if d.used_identified {
                        "fitted"
                    } else {
                        "a split of a joint cost"
                    },
                    (d.alone / d.used - 1.0) * 100.0
                )
            })
            .collect()
    }

    /// The text report.
    pub fn text(&self) -> String {
        self.render(|t| format!("\n{t}\n"), "  ", |t| t.text(" | "))
    }

    /// The Markdown report.
    pub fn markdown(&self) -> String {
        self.render(|t| format!("\n#### {t}\n\n"), "- ", Table::markdown)
    }

    /// The report with one style of headings, list items and tables.
    fn render(
        &self,
        heading: impl Fn(&str) -> String,
        item: &str,
        table: impl Fn(&Table) -> String,
    ) -> String {
        let mut s = format!("{}\n", self.headline());
        s.push_str(&heading("Fitted costs"));
        s.push_str(&table(&self.cost_table()));
        s.push_str(&heading("Fit cells: measured and fitted (in sample)"));
        s.push_str(&table(&self.fitted_table()));
        let diffs = self.difference_lines();
        if !diffs.is_empty() {
            s.push_str(&heading(
                "Costs that differ between kernels (more than 10%)",
            ));
            for d in diffs {
                s.push_str(&format!("{item}{d}\n"));
            }
        }
        let diffs = self.workload_difference_lines();
        if !diffs.is_empty() {
            s.push_str(&heading(
                "Costs that differ between workloads (more than 10%)",
            ));
            for d in diffs {
                s.push_str(&format!("{item}{d}\n"));
            }
        }
        if !self.predictions.is_empty() {
            s.push_str(&heading("Predicted and measured"));
            s.push_str(&table(&self.prediction_table()));
        }
        if !self.ratios.is_empty() {
            s.push_str(&heading(
                "Ratios to a fit kernel: measured, and predicted before running",
            ));
            s.push_str(&table(&self.ratio_table()));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::super::{model_row, predict_all, Strategy};
    use super::*;

    /// A cost per counter name, the same whatever the column order.
    fn known_cost(name: &str) -> f64 {
        10.0 + name.bytes().map(u64::from).sum::<u64>() as f64 % 97.0
    }

    fn cell(
        w: WorkloadKind,
        s: Strategy,
        size: u64,
        folio: FolioSpec,
        cost: &dyn Fn(&str) -> f64,
    ) -> Cell {
        let x = model_row(Arch::X86_64, s, w, size, folio, None)
            .unwrap()
            .unwrap();
        let o = Observed {
            kernel: s.name().into(),
            arch: Arch::X86_64,
            strategy: s,
            workload: w,
            size_bytes: size,
            folio,
            phase: None,
            instructions: x.iter().map(|(k, v)| v * cost(k)).sum(),
            functions: Vec::new(),
            tlb_invalidations: None,
            counted: false,
            parts: Vec::new(),
        };
        Cell::new(o, x)
    }

    fn sweep(w: WorkloadKind, cost: &dyn Fn(&str) -> f64) -> Vec<Cell> {
        let mut cells = Vec::new();
        for s in [Strategy::V6_16, Strategy::V6_17] {
            for size in [4u64 << 10, 40 << 10, 400 << 10, 4 << 20] {
                for f in [FolioSpec::Base, FolioSpec::Mthp(64 << 10)] {
                    if size >= f.folio_bytes() {
                        cells.push(cell(w, s, size, f, cost));
                    }
                }
            }
        }
        cells
    }

    /// A predicted workload whose own cells price a counter otherwise than
    /// the fit did: the report names that counter, the workload and both
    /// costs; a workload priced as the fit prices it shows no difference.
    #[test]
    fn a_cost_a_predicted_workload_sets_otherwise_is_named() {
        let fit = sweep(WorkloadKind::MprotectToggle, &known_cost);
        let mut same = sweep(WorkloadKind::MprotectRoRw, &known_cost);
        let model = fit_costs(Arch::X86_64, fit.clone(), &mut same).unwrap();
        let p = predict_all(&model, same).unwrap();
        let r = Report::new(&model, p).unwrap();
        assert!(
            r.workload_differences.is_empty(),
            "{:?}",
            r.workload_differences
        );

        // The counter ro-rw's cells determine alone whose cost the toggle
        // fit also determines.
        let alone = fit_costs(
            Arch::X86_64,
            sweep(WorkloadKind::MprotectRoRw, &known_cost),
            &mut [],
        )
        .unwrap()
        .costs();
        let costs = model.costs();
        let changed = alone
            .iter()
            .filter(|a| a.instructions.is_some())
            .map(|a| a.counter.clone())
            .find(|c| {
                costs
                    .iter()
                    .any(|p| &p.counter == c && p.instructions.is_some())
            })
            .expect("a counter both fits determine");
        let doubled = |k: &str| known_cost(k) * if k == changed { 2.0 } else { 1.0 };
        let mut other = sweep(WorkloadKind::MprotectRoRw, &doubled);
        let model = fit_costs(Arch::X86_64, fit, &mut other).unwrap();
        let p = predict_all(&model, other).unwrap();
        let r = Report::new(&model, p).unwrap();
        let d: Vec<&WorkloadDifference> = r
            .workload_differences
            .iter()
            .filter(|d| d.counter == changed)
            .collect();
        assert_eq!(d.len(), 1, "{changed}: {:?}", r.workload_differences);
        let want = known_cost(&changed);
        assert_eq!(d[0].workload, WorkloadKind::MprotectRoRw);
        assert!((d[0].alone - 2.0 * want).abs() < 1e-6 * want, "{:?}", d[0]);
        assert!(
            (d[0].used - want).abs() < 1e-6 * want && d[0].used_identified,
            "{:?}",
            d[0]
        );
        let text = r.text();
        assert!(
            text.contains("Costs that differ between workloads"),
            "{text}"
        );
        assert!(text.contains(&format!("{changed}: ")), "{text}");
    }
}
