//! The cost model behind `ptelab model --predict` (docs/model.md, "The cost
//! model"): guest instructions per call = a fixed part + Σ counter × cost per
//! counter, where the counters are the model's page-table primitives for the
//! cell (its workload, size, folio and the strategy of the kernel's release)
//! and the costs are fitted, per arch, on TCG guest figures of the kernels
//! given to `--fit`.
//!
//! The fit is `ptelab_stats::fit` (least squares on relative residuals). It
//! says which costs the data determines: a sweep of one workload on one
//! kernel moves its per-PTE counters together, so only their sum is known.
//! A prediction whose counters the fit data never varied that way is refused
//! with the counters that lack a cost, and with the workloads that would
//! supply it on the fit kernels (found by running the model on them), never
//! filled in from the kernel being predicted.
//!
//! Pure apart from running the model: the command reads the store and hands
//! the observed cells in.

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_model_run as model;
use ptelab_record as record;
use ptelab_text as text;
use ptelab_workload as workload;

pub mod mechanism;
pub mod render;

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use ptelab_model::{Counters, Granule, Strategy};
use ptelab_stats::fit::Fit;
use serde::Serialize;

use crate::model::{arch_config, model_outcomes, ModelPlan};
use crate::record::{FunctionCount, ProfilePart};
use crate::workload::size::format_size;
use crate::workload::{Arch, FolioSpec, WorkloadKind};

/// Counters that are not columns: re-touch faults are outside the measured
/// call; the young-bit counters belong to reclaim, which is not fitted (its
/// figure includes the untimed refill's effects on caches); `calls` is the
/// sum of the per-function `call:NAME` columns; `tlb_flush_pages` is the
/// size of the ranges asked for, which costs nothing by itself (an x86
/// range above the ceiling is one full flush, and the per-page work of a
/// shorter one is its INVLPGs or TLBIs, `tlbi_ops`).
const NOT_COLUMNS: &[&str] = &[
    "tlb_flush_pages",
    "write_faults",
    "young_tests",
    "young_clears",
    "young_flushes",
    "folios_scanned",
    "calls",
];

/// The column of out-of-line calls of kernel function `name`.
fn call_column(name: &str) -> String {
    format!("call:{name}")
}

/// The fixed-part column of a workload's call: one per syscall, since the
/// syscalls' own work (VMA lookups, splits and merges, locking, page-table
/// allocation on the way down) differs.
fn fixed_column(workload: WorkloadKind) -> &'static str {
    match workload {
        WorkloadKind::MremapMove => "fixed:mremap",
        _ => "fixed:mprotect",
    }
}

/// The columns for `cells`: `fixed:SYSCALL` (one per call of that syscall;
/// mprotect's first), every model counter that can cost instructions in the
/// call in the model's display order, then `call:NAME` for each out-of-line
/// function any of the cells calls.
pub fn columns_of<'a>(cells: impl IntoIterator<Item = &'a Cell>) -> Vec<String> {
    let mut calls: Vec<&String> = Vec::new();
    let mut fixed: Vec<&String> = Vec::new();
    for c in cells {
        for k in c.counters.keys() {
            let list = if k.starts_with("call:") {
                &mut calls
            } else if k.starts_with("fixed:") {
                &mut fixed
            } else {
                continue;
            };
            if !list.contains(&k) {
                list.push(k);
            }
        }
    }
    calls.sort();
    fixed.sort_by_key(|k| (k.as_str() != "fixed:mprotect", k.as_str()));
    fixed
        .into_iter()
        .cloned()
        .chain(
            Counters::NAMES
                .iter()
                .filter(|n| !NOT_COLUMNS.contains(n))
                .map(|n| n.to_string()),
        )
        .chain(calls.into_iter().cloned())
        .collect()
}

/// The kernel functions that are a counter's primitive, where one is
/// (docs/model.md, "The cost model"): the plugin's instructions in them per
/// unit of the counter are that counter's cost as counted, which the fit
/// uses to split a joint cost the sweep cannot separate. A `call:NAME`
/// column is supported by NAME itself.
pub const SUPPORT: &[(&str, &[&str])] = &[
    ("folio_lookups", &["vm_normal_page", "vm_normal_folio"]),
    ("needs_flush_evals", &["pte_needs_flush"]),
    ("contpte_gathers", &["contpte_ptep_get"]),
    ("contpte_unfolds", &["__contpte_try_unfold"]),
    ("contpte_folds", &["__contpte_try_fold"]),
    ("tlbi_sync", &["contpte_convert"]),
    ("tlb_flush_calls", &["flush_tlb_mm_range", "flush_tlb_func"]),
];

/// One measured guest cell: a figure per call and where it came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Observed {
    /// The kernel as the user names it (`debian:6.16.12`).
    pub kernel: String,
    pub arch: Arch,
    pub strategy: Strategy,
    pub workload: WorkloadKind,
    pub size_bytes: u64,
    pub folio: FolioSpec,
    pub phase: Option<String>,
    /// Guest instructions per call: those the QEMU plugin counted inside
    /// the calls (kernel and user) where the guest was profiled, else the
    /// cell's TCG icount figure, which also holds the harness's loop and
    /// clock reads (20 to 100 instructions a call on x86-64; on arm64,
    /// where a clock read is a system call under TCG, about 700 a timed
    /// section: a quarter of a 4K prot-transition call).
    pub instructions: f64,
    /// Whether `instructions` is the plugin's count.
    pub counted: bool,
    /// The plugin's per-function counts, when the guest was profiled.
    #[serde(skip)]
    pub functions: Vec<FunctionCount>,
    /// The plugin's TLB invalidations per call, when profiled.
    #[serde(skip)]
    pub tlb_invalidations: Option<f64>,
    /// The cell's calls by direction, where the guest marked them apart
    /// (the toggle's, [`WorkloadKind::marked_parts`]), as the plugin
    /// counted each. Empty otherwise.
    #[serde(skip)]
    pub parts: Vec<Observed>,
}

impl Observed {
    /// The comparable cells of a TCG guest run of `kernel` (one region, no
    /// neighbour, a positive figure): guest instructions per call, with the
    /// plugin's counts where the guest was profiled.
    pub fn from_guest_cells<'a>(
        kernel: &'a str,
        arch: Arch,
        strategy: Strategy,
        cells: impl IntoIterator<Item = &'a crate::record::CellResult> + 'a,
    ) -> impl Iterator<Item = (&'a crate::record::CellResult, Observed)> + 'a {
        cells
            .into_iter()
            .filter(|c| c.regions == 1 && !c.neighbor)
            .filter_map(move |c| {
                // Under TCG the figure is guest instructions per call; the
                // plugin's count leaves the harness out.
                let counted = c
                    .profile
                    .as_ref()
                    .map(|p| p.kernel_instructions + p.user_instructions)
                    .filter(|v| *v > 0.0 && v.is_finite());
                let instructions = counted.unwrap_or(c.ns_per_call.median);
                (instructions > 0.0 && instructions.is_finite()).then(|| {
                    let mut obs = Observed {
                        kernel: kernel.to_string(),
                        arch,
                        strategy,
                        workload: c.workload,
                        size_bytes: c.size_bytes,
                        folio: c.folio,
                        phase: c.phase.clone(),
                        instructions,
                        counted: counted.is_some(),
                        tlb_invalidations: c.profile.as_ref().map(|p| p.tlb_invalidations()),
                        functions: c
                            .profile
                            .as_ref()
                            .map(|p| p.functions.clone())
                            .unwrap_or_default(),
                        parts: Vec::new(),
                    };
                    if let (Some(p), true) = (&c.profile, obs.counted) {
                        obs.parts = parts_of(&obs, &p.parts);
                    }
                    (c, obs)
                })
            })
    }

    /// `64K 400K`, `4K 4M rw-to-none`.
    pub fn label(&self) -> String {
        let mut s = format!("{} {}", self.folio, format_size(self.size_bytes));
        if let Some(p) = &self.phase {
            s.push(' ');
            s.push_str(p);
        }
        s
    }
}

/// A counted cell's marked parts as cells of their own: the plugin's
/// count per call of each part. None when a part counted nothing.
fn parts_of(cell: &Observed, parts: &[ProfilePart]) -> Vec<Observed> {
    let counted = |p: &ProfilePart| p.kernel_instructions + p.user_instructions;
    if parts.len() < 2 || !parts.iter().all(|p| counted(p) > 0.0) {
        return Vec::new();
    }
    parts
        .iter()
        .map(|p| Observed {
            phase: Some(p.phase.clone()),
            instructions: counted(p),
            counted: true,
            functions: p.functions.clone(),
            tlb_invalidations: Some(p.tlb_invalidations()),
            parts: Vec::new(),
            ..cell.clone()
        })
        .collect()
}

/// A cell from its marked parts (equally many calls each): the parts'
/// mean figure and function counts. None without parts.
pub fn whole_of(parts: &[&Observed]) -> Option<Observed> {
    let first = parts.first()?;
    let n = parts.len() as f64;
    let mut functions: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for p in parts {
        for f in &p.functions {
            let e = functions.entry(&f.name).or_default();
            e.0 += f.entries / n;
            e.1 += f.instructions / n;
        }
    }
    let mut functions: Vec<FunctionCount> = functions
        .into_iter()
        .map(|(name, (entries, instructions))| FunctionCount {
            name: name.to_string(),
            entries,
            instructions,
        })
        .collect();
    functions.sort_by(|a, b| b.instructions.total_cmp(&a.instructions));
    Some(Observed {
        phase: None,
        instructions: parts.iter().map(|p| p.instructions).sum::<f64>() / n,
        counted: parts.iter().all(|p| p.counted),
        functions,
        tlb_invalidations: parts
            .iter()
            .map(|p| p.tlb_invalidations)
            .sum::<Option<f64>>()
            .map(|t| t / n),
        parts: Vec::new(),
        ..(*first).clone()
    })
}

/// The cells a fit takes from `obs`: each cell's directions where the guest
/// marked them apart (the toggle's two, which the cell's mean cannot price
/// apart), the cell itself otherwise.
pub fn by_direction(obs: Vec<Observed>) -> Vec<Observed> {
    obs.into_iter()
        .flat_map(|o| if o.parts.is_empty() { vec![o] } else { o.parts })
        .collect()
}

/// An observed cell with the model's counters per call for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    pub obs: Observed,
    /// The model's counters per call (`fixed` = 1, `call:NAME`).
    pub counters: BTreeMap<String, f64>,
    /// `counters` along a model's columns (set by [`fit_costs`]).
    pub x: Vec<f64>,
}

impl Cell {
    pub fn new(obs: Observed, counters: BTreeMap<String, f64>) -> Cell {
        Cell {
            obs,
            counters,
            x: Vec::new(),
        }
    }

    fn align(&mut self, columns: &[String]) {
        self.x = columns
            .iter()
            .map(|c| self.counters.get(c).copied().unwrap_or(0.0))
            .collect();
    }
}

/// The model's counters per call for a cell: `None`
/// when the cell's phase is not one the model counts (mremap-move's whole
/// iteration maps, fills and unmaps too) or the workload is reclaim.
pub fn model_row(
    arch: Arch,
    strategy: Strategy,
    workload: WorkloadKind,
    size_bytes: u64,
    folio: FolioSpec,
    phase: Option<&str>,
) -> anyhow::Result<Option<BTreeMap<String, f64>>> {
    let wanted: Option<&str> = match (workload, phase) {
        (WorkloadKind::Reclaim, _) => return Ok(None),
        (WorkloadKind::MremapMove, Some("mremap")) => None,
        (WorkloadKind::MremapMove, _) => return Ok(None),
        // The toggle's directions (its marked parts) are prot-transition's.
        (WorkloadKind::ProtTransition | WorkloadKind::MprotectToggle, Some("none-to-rw")) => {
            Some("mprotect(PROT_READ|PROT_WRITE)")
        }
        (WorkloadKind::ProtTransition | WorkloadKind::MprotectToggle, Some("rw-to-none")) => {
            Some("mprotect(PROT_NONE)")
        }
        (WorkloadKind::ProtTransition, _) => return Ok(None),
        (_, None) => None,
        (_, Some(_)) => return Ok(None),
    };
    let plan = ModelPlan {
        workload,
        arch: arch_config(arch, Granule::K4, false, false)?,
        strategies: vec![strategy],
        size_bytes,
        folio,
        offset_pages: 0,
    };
    let outcome = model_outcomes(&plan)?
        .pop()
        .expect("one outcome per strategy");
    let calls: Vec<&Counters> = outcome
        .calls
        .iter()
        .filter(|c| wanted.is_none_or(|w| c.label == w))
        .map(|c| &c.counters)
        .collect();
    anyhow::ensure!(
        !calls.is_empty(),
        "the model counted no call {wanted:?} for {workload}"
    );
    let mut sum = Counters::default();
    for c in &calls {
        sum.add(c);
    }
    let n = calls.len() as f64;
    let mut per_call: BTreeMap<String, f64> = sum
        .scalars()
        .into_iter()
        .filter(|(k, _)| !NOT_COLUMNS.contains(k))
        .map(|(k, v)| (k.to_string(), v as f64 / n))
        .collect();
    per_call.insert(fixed_column(workload).into(), 1.0);
    for (f, v) in &sum.functions {
        per_call.insert(call_column(f), *v as f64 / n);
    }
    Ok(Some(per_call))
}

/// The model's row for each observed cell; cells the model does not count
/// (reclaim, mremap-move's whole iteration, several regions) are left out.
pub fn with_model_rows(obs: Vec<Observed>) -> anyhow::Result<Vec<Cell>> {
    let mut cells = Vec::new();
    for o in obs {
        let row = model_row(
            o.arch,
            o.strategy,
            o.workload,
            o.size_bytes,
            o.folio,
            o.phase.as_deref(),
        )?;
        if let Some(counters) = row {
            cells.push(Cell::new(o, counters));
        }
    }
    Ok(cells)
}

/// What went into a fit and what it gave.
#[derive(Clone, Debug)]
pub struct CostModel {
    pub arch: Arch,
    /// The fit's columns (those of the fit cells and of the cells to predict).
    pub columns: Vec<String>,
    /// The fit cells, in the order of `fit.residuals`.
    pub cells: Vec<Cell>,
    pub fit: Fit,
}

/// One row of the fitted-costs table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cost {
    pub counter: String,
    /// Instructions per unit, when the fit determines it alone.
    pub instructions: Option<f64>,
    /// The cost predictions use: the identified one, else this counter's
    /// share of a joint cost, split by the counted per-function figures
    /// where there are some and evenly (minimum norm) otherwise.
    pub split: f64,
    /// Whether any fit cell has this counter non-zero.
    pub seen: bool,
    /// Counters it moved with in every fit cell, when not determined alone.
    pub moves_with: Vec<String>,
    /// Instructions per entry of the kernel functions that implement the
    /// counter, median over the fit cells where they ran, with the kernel.
    pub support: Vec<Support>,
}

/// A counter's cost as the plugin counted it on one kernel.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Support {
    pub kernel: String,
    /// The counter's functions that ran.
    pub functions: Vec<String>,
    /// Their instructions per unit of the counter, median over the fit
    /// cells of the kernel where the counter is non-zero.
    pub instructions_per_unit: f64,
}

/// Fit the costs on `cells` (one arch), splitting what the cells cannot
/// separate by the per-function counts where a counter has them; `targets`
/// (the cells to predict) are aligned to the same columns, so that a
/// primitive only they execute is a column the fit never saw.
pub fn fit_costs(
    arch: Arch,
    mut cells: Vec<Cell>,
    targets: &mut [Cell],
) -> anyhow::Result<CostModel> {
    anyhow::ensure!(!cells.is_empty(), "no cells to fit");
    let columns = columns_of(cells.iter().chain(targets.iter()));
    for c in cells.iter_mut().chain(targets.iter_mut()) {
        c.align(&columns);
    }
    let rows: Vec<Vec<f64>> = cells.iter().map(|c| c.x.clone()).collect();
    let y: Vec<f64> = cells.iter().map(|c| c.obs.instructions).collect();
    let prior: Vec<Option<f64>> = columns
        .iter()
        .enumerate()
        .map(|(j, c)| {
            let v: Vec<f64> = cells
                .iter()
                .filter_map(|cell| counted_cost(cell, j, c))
                .collect();
            (!v.is_empty()).then(|| median(v))
        })
        .collect();
    let fit = ptelab_stats::fit::fit_near(&rows, &y, &prior)?;
    Ok(CostModel {
        arch,
        columns,
        cells,
        fit,
    })
}

/// The kernel functions column `name` is, if any.
fn functions_of(name: &str) -> Vec<&str> {
    if let Some(f) = name.strip_prefix("call:") {
        return vec![f];
    }
    SUPPORT
        .iter()
        .find(|(c, _)| *c == name)
        .map(|(_, f)| f.to_vec())
        .unwrap_or_default()
}

/// Instructions in column `name`'s functions per unit of it, in one cell.
fn counted_cost(cell: &Cell, j: usize, name: &str) -> Option<f64> {
    let functions = functions_of(name);
    if functions.is_empty() || cell.x[j] <= 0.0 {
        return None;
    }
    let ran: Vec<&FunctionCount> = cell
        .obs
        .functions
        .iter()
        .filter(|f| functions.contains(&f.name.as_str()) && f.entries > 0.0)
        .collect();
    (!ran.is_empty()).then(|| ran.iter().map(|f| f.instructions).sum::<f64>() / cell.x[j])
}

impl CostModel {
    /// The fitted costs, one per column.
    pub fn costs(&self) -> Vec<Cost> {
        let cols = &self.columns;
        cols.iter()
            .enumerate()
            .map(|(j, counter)| {
                let seen = self.cells.iter().any(|c| c.x[j] != 0.0);
                let identified = self.fit.identified[j];
                let moves_with = if identified || !seen {
                    Vec::new()
                } else {
                    // The columns that are never apart from this one: a
                    // unit vector's part outside the span names them.
                    let mut e = vec![0.0; cols.len()];
                    e[j] = 1.0;
                    self.fit
                        .space
                        .missing(&e)
                        .into_iter()
                        .filter(|&k| k != j && self.cells.iter().any(|c| c.x[k] != 0.0))
                        .map(|k| cols[k].clone())
                        .collect()
                };
                Cost {
                    counter: counter.clone(),
                    instructions: identified.then(|| self.fit.coef[j]),
                    split: self.fit.coef[j],
                    seen,
                    moves_with,
                    support: self.support(counter),
                }
            })
            .collect()
    }

    fn support(&self, counter: &str) -> Vec<Support> {
        let Some(j) = self.columns.iter().position(|c| c == counter) else {
            return Vec::new();
        };
        let functions = functions_of(counter);
        let mut by_kernel: BTreeMap<&str, (Vec<f64>, Vec<String>)> = BTreeMap::new();
        for c in &self.cells {
            if let Some(v) = counted_cost(c, j, counter) {
                let e = by_kernel.entry(&c.obs.kernel).or_default();
                e.0.push(v);
                for f in &c.obs.functions {
                    if functions.contains(&f.name.as_str()) && !e.1.contains(&f.name) {
                        e.1.push(f.name.clone());
                    }
                }
            }
        }
        by_kernel
            .into_iter()
            .map(|(kernel, (v, functions))| Support {
                kernel: kernel.to_string(),
                functions,
                instructions_per_unit: median(v),
            })
            .collect()
    }

    /// Predict `cell`: the figure, or the counters that lack a cost.
    pub fn predict(&self, cell: &Cell) -> Result<f64, Vec<String>> {
        self.fit.predict(&cell.x).map_err(|e| {
            e.columns
                .into_iter()
                .map(|j| self.columns[j].clone())
                .collect()
        })
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One predicted (or refused) cell.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Prediction {
    pub cell: Observed,
    /// Instructions per call, unless a counter of the cell has no cost.
    pub predicted: Option<f64>,
    /// (predicted − measured) / measured.
    pub residual: Option<f64>,
    /// Counters the cell executes that no fit cell did: no cost at all.
    pub lacking: Vec<String>,
    /// Workloads that, measured on the fit kernels, would give those costs.
    pub would_identify: Vec<WorkloadKind>,
    /// Counters the fit saw only in fixed proportions that this cell mixes
    /// otherwise: the prediction splits their joint cost evenly (minimum
    /// norm), so it is an extrapolation, not determined by the data.
    pub unseparated: Vec<String>,
}

/// Predict every cell of `targets`. A cell executing a counter no fit cell
/// did is refused, naming the workloads that, measured on the strategies of
/// the fit kernels, would give its cost.
pub fn predict_all(model: &CostModel, targets: Vec<Cell>) -> anyhow::Result<Vec<Prediction>> {
    let cols = &model.columns;
    let fit_strategies: Vec<Strategy> = {
        let mut s: Vec<Strategy> = model.cells.iter().map(|c| c.obs.strategy).collect();
        s.sort();
        s.dedup();
        s
    };
    let fit_workloads: Vec<WorkloadKind> = model.cells.iter().map(|c| c.obs.workload).collect();
    let seen: Vec<bool> = (0..cols.len())
        .map(|j| model.cells.iter().any(|c| c.x[j] != 0.0))
        .collect();
    let mut candidates: BTreeMap<(WorkloadKind, FolioSpec), Vec<BTreeMap<String, f64>>> =
        BTreeMap::new();
    let mut out = Vec::new();
    for t in targets {
        let lacking: Vec<String> = (0..cols.len())
            .filter(|&j| t.x[j] != 0.0 && !seen[j])
            .map(|j| cols[j].clone())
            .collect();
        let mut would = Vec::new();
        let (predicted, unseparated) = if lacking.is_empty() {
            let unseparated = match model.predict(&t) {
                Ok(_) => Vec::new(),
                Err(cols) => cols,
            };
            // A figure at or below zero means the costs (some negative
            // where the fit could not separate columns) do not transfer.
            let p = model.fit.extrapolate(&t.x);
            ((p > 0.0).then_some(p), unseparated)
        } else {
            for w in WorkloadKind::ALL {
                if w == WorkloadKind::Reclaim || fit_workloads.contains(&w) {
                    continue;
                }
                let rows = match candidates.entry((w, t.obs.folio)) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => {
                        e.insert(candidate_rows(model.arch, &fit_strategies, w, t.obs.folio)?)
                    }
                };
                let gives = |l: &String| rows.iter().any(|r| r.get(l).is_some_and(|v| *v != 0.0));
                if lacking.iter().all(gives) {
                    would.push(w);
                }
            }
            (None, Vec::new())
        };
        out.push(Prediction {
            residual: predicted.map(|p| (p - t.obs.instructions) / t.obs.instructions),
            cell: t.obs,
            predicted,
            lacking,
            would_identify: would,
            unseparated,
        });
    }
    Ok(out)
}

/// The sizes a candidate workload is modelled at when looking for one that
/// would give a refused prediction its costs.
const CANDIDATE_SIZES: &[u64] = &[4 << 10, 40 << 10, 400 << 10, 4 << 20];

/// The model's rows for workload `w` at the candidate sizes, in `folio`
/// and order-0, on each strategy, every phase the model counts.
fn candidate_rows(
    arch: Arch,
    strategies: &[Strategy],
    w: WorkloadKind,
    folio: FolioSpec,
) -> anyhow::Result<Vec<BTreeMap<String, f64>>> {
    let phases: &[Option<&str>] = match w {
        WorkloadKind::ProtTransition => &[Some("none-to-rw"), Some("rw-to-none")],
        WorkloadKind::MremapMove => &[Some("mremap")],
        _ => &[None],
    };
    let mut rows = Vec::new();
    let mut folios = vec![FolioSpec::Base];
    if folio != FolioSpec::Base {
        folios.push(folio);
    }
    for &s in strategies {
        for &f in &folios {
            for &size in CANDIDATE_SIZES {
                if size < f.folio_bytes() {
                    continue;
                }
                for &p in phases {
                    if let Ok(Some(r)) = model_row(arch, s, w, size, f, p) {
                        rows.push(r);
                    }
                }
            }
        }
    }
    Ok(rows)
}

/// The cost model fitted and applied: what `model --predict` prints and
/// what `reproduce` sets beside each measured guest cell.
pub struct Predicted {
    /// The fit and the predictions of the targets (out of sample).
    pub report: render::Report,
    /// The fit cells as measured (a toggle cell, not its directions),
    /// predicted by their own fit (in sample).
    pub in_sample: Vec<Prediction>,
}

/// Fit `arch`'s costs on `fit` (each toggle cell split into its
/// directions) and predict `targets` and the fit cells themselves.
pub fn fit_and_predict(
    arch: Arch,
    fit: Vec<Observed>,
    targets: Vec<Observed>,
) -> anyhow::Result<Predicted> {
    let fit_cells = with_model_rows(by_direction(fit.clone()))?;
    // The fit cells aligned with the targets, then split off.
    let mut cells = with_model_rows(fit)?;
    let fitted = cells.len();
    cells.extend(with_model_rows(targets)?);
    let model = fit_costs(arch, fit_cells, &mut cells)?;
    let targets = cells.split_off(fitted);
    let in_sample = predict_all(&model, cells)?;
    let out = predict_all(&model, targets)?;
    Ok(Predicted {
        report: render::Report::new(&model, out)?,
        in_sample,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(strategy: Strategy, w: WorkloadKind, size: u64, folio: FolioSpec) -> Observed {
        Observed {
            kernel: strategy.name().into(),
            arch: Arch::X86_64,
            strategy,
            workload: w,
            size_bytes: size,
            folio,
            phase: None,
            instructions: 0.0,
            functions: Vec::new(),
            tlb_invalidations: None,
            counted: false,
            parts: Vec::new(),
        }
    }

    /// A cost per counter name, the same whatever the column order.
    fn known_cost(name: &str) -> f64 {
        10.0 + name.bytes().map(u64::from).sum::<u64>() as f64 % 97.0
    }

    /// A synthetic kernel whose figures are the model's counters times
    /// known costs: the fit recovers what it can identify, and predicts
    /// the other strategies exactly where it says it can.
    #[test]
    fn synthetic_kernel_is_recovered() {
        let cell = |s, w, size, folio| {
            let x = model_row(Arch::X86_64, s, w, size, folio, None)
                .unwrap()
                .unwrap();
            let mut o = obs(s, w, size, folio);
            o.instructions = x.iter().map(|(k, v)| v * known_cost(k)).sum();
            Cell::new(o, x)
        };
        let mut fit_cells = Vec::new();
        for s in [Strategy::V6_16, Strategy::V6_17] {
            for size in [4u64 << 10, 40 << 10, 400 << 10, 4 << 20] {
                for f in [FolioSpec::Base, FolioSpec::Mthp(64 << 10)] {
                    if size >= f.folio_bytes() {
                        fit_cells.push(cell(s, WorkloadKind::MprotectToggle, size, f));
                    }
                }
            }
        }
        let mut t = vec![cell(
            Strategy::V6_17,
            WorkloadKind::MprotectToggle,
            40 << 20,
            FolioSpec::Base,
        )];
        let m = fit_costs(Arch::X86_64, fit_cells, &mut t).unwrap();
        assert!(m.fit.residuals.iter().all(|r| r.abs() < 1e-9));
        let mut identified = 0;
        for c in m.costs() {
            if let Some(v) = c.instructions {
                identified += 1;
                let want = known_cost(&c.counter);
                assert!((v - want).abs() < 1e-6 * want, "{}: {v}", c.counter);
            }
        }
        assert!(identified >= 2, "{:?}", m.costs());
        let p = m.predict(&t[0]).unwrap();
        assert!((p - t[0].obs.instructions).abs() < 1e-6 * p);
    }

    fn cell_on(arch: Arch, s: Strategy, w: WorkloadKind, size: u64, folio: FolioSpec) -> Cell {
        let x = model_row(arch, s, w, size, folio, None).unwrap().unwrap();
        let mut o = obs(s, w, size, folio);
        o.arch = arch;
        o.instructions = 1000.0 + x.values().sum::<f64>();
        Cell::new(o, x)
    }

    /// Fitted on order-0 toggles, an arm64 64K toggle executes contpte
    /// primitives no fit cell did: refused, naming them, and naming
    /// prot-transition (the same calls) as a workload that would price them.
    #[test]
    fn a_primitive_the_fit_never_saw_is_refused_with_a_remedy() {
        let fit_cells: Vec<Cell> = [4u64 << 10, 40 << 10, 400 << 10, 4 << 20]
            .iter()
            .map(|&s| {
                cell_on(
                    Arch::Arm64,
                    Strategy::V6_16,
                    WorkloadKind::MprotectToggle,
                    s,
                    FolioSpec::Base,
                )
            })
            .collect();
        let mut t = vec![cell_on(
            Arch::Arm64,
            Strategy::V6_16,
            WorkloadKind::MprotectToggle,
            400 << 10,
            FolioSpec::Mthp(64 << 10),
        )];
        let m = fit_costs(Arch::Arm64, fit_cells, &mut t).unwrap();
        let p = predict_all(&m, t).unwrap();
        assert!(p[0].predicted.is_none(), "{:?}", p[0]);
        assert!(
            p[0].lacking.iter().any(|c| c.starts_with("contpte_")),
            "{:?}",
            p[0].lacking
        );
        assert!(
            p[0].would_identify.contains(&WorkloadKind::ProtTransition),
            "{:?}",
            p[0]
        );
    }

    fn per_pte_toggles() -> Vec<Cell> {
        [4u64 << 10, 40 << 10, 400 << 10, 4 << 20]
            .iter()
            .map(|&s| {
                cell_on(
                    Arch::X86_64,
                    Strategy::V6_16,
                    WorkloadKind::MprotectToggle,
                    s,
                    FolioSpec::Base,
                )
            })
            .collect()
    }

    /// Seed 001 before 6.17: v6.16 never calls the batching helpers, so no
    /// v6.16 workload prices them, and the v6.17 toggle is refused.
    #[test]
    fn batching_helpers_are_priced_only_by_a_kernel_that_runs_them() {
        let mut t = vec![cell_on(
            Arch::X86_64,
            Strategy::V6_17,
            WorkloadKind::MprotectToggle,
            400 << 10,
            FolioSpec::Base,
        )];
        let m = fit_costs(Arch::X86_64, per_pte_toggles(), &mut t).unwrap();
        let p = predict_all(&m, t).unwrap();
        assert!(p[0].predicted.is_none(), "{:?}", p[0]);
        assert!(
            p[0].lacking
                .contains(&"call:prot_commit_flush_ptes".to_string()),
            "{:?}",
            p[0].lacking
        );
        assert!(p[0].would_identify.is_empty(), "{:?}", p[0]);
    }

    /// Fitted on per-PTE toggles, a prot-transition call mixes the per-PTE
    /// counters in proportions the fit never saw (the toggle averages both
    /// directions): predicted, but marked as an extrapolation.
    #[test]
    fn an_unseparated_split_is_marked_as_extrapolated() {
        let x = model_row(
            Arch::X86_64,
            Strategy::V6_16,
            WorkloadKind::ProtTransition,
            400 << 10,
            FolioSpec::Base,
            Some("rw-to-none"),
        )
        .unwrap()
        .unwrap();
        let mut o = obs(
            Strategy::V6_16,
            WorkloadKind::ProtTransition,
            400 << 10,
            FolioSpec::Base,
        );
        o.instructions = 1000.0 + x.values().sum::<f64>();
        let mut t = vec![Cell::new(o, x)];
        let m = fit_costs(Arch::X86_64, per_pte_toggles(), &mut t).unwrap();
        let p = predict_all(&m, t).unwrap();
        assert!(p[0].lacking.is_empty(), "{:?}", p[0]);
        assert!(!p[0].unseparated.is_empty(), "{:?}", p[0]);
    }

    /// The same toggles, with each direction counted apart by the plugin
    /// (a part per direction, instructions in known costs that differ by
    /// direction): fitted by direction, prot-transition's calls are no
    /// longer an extrapolation and are predicted exactly, while the cells'
    /// means alone leave them unseparated.
    #[test]
    fn toggle_directions_price_each_direction() {
        let row = |w, size, phase| {
            model_row(
                Arch::X86_64,
                Strategy::V6_16,
                w,
                size,
                FolioSpec::Base,
                phase,
            )
            .unwrap()
            .unwrap()
        };
        let figure =
            |x: &BTreeMap<String, f64>| -> f64 { x.iter().map(|(k, v)| v * known_cost(k)).sum() };
        let toggles: Vec<Observed> = [4u64 << 10, 40 << 10, 400 << 10, 4 << 20]
            .iter()
            .map(|&size| {
                let mut o = obs(
                    Strategy::V6_16,
                    WorkloadKind::MprotectToggle,
                    size,
                    FolioSpec::Base,
                );
                let parts: Vec<(&str, f64)> = crate::workload::PROT_TRANSITION_PHASES
                    .iter()
                    .map(|&p| (p, figure(&row(WorkloadKind::MprotectToggle, size, Some(p)))))
                    .collect();
                // The cell's icount figure also has the harness (100 a
                // call); the parts are what the plugin counted in the calls.
                o.instructions = parts.iter().map(|(_, f)| f).sum::<f64>() / 2.0 + 100.0;
                let counted: Vec<ProfilePart> = parts
                    .iter()
                    .map(|&(phase, f)| ProfilePart {
                        phase: phase.into(),
                        kernel_instructions: f - 20.0,
                        user_instructions: 20.0,
                        ..ProfilePart::default()
                    })
                    .collect();
                o.parts = parts_of(&o, &counted);
                let whole = whole_of(&o.parts.iter().collect::<Vec<_>>()).unwrap();
                assert!((whole.instructions + 100.0 - o.instructions).abs() < 1e-6);
                o
            })
            .collect();
        let split = by_direction(toggles.clone());
        assert_eq!(split.len(), 8);
        assert!(split.iter().all(|o| o.phase.is_some()));
        let transition = |phase| {
            let x = row(WorkloadKind::ProtTransition, 400 << 10, Some(phase));
            let mut o = obs(
                Strategy::V6_16,
                WorkloadKind::ProtTransition,
                400 << 10,
                FolioSpec::Base,
            );
            o.phase = Some(phase.into());
            o.instructions = figure(&x);
            Cell::new(o, x)
        };
        let mut t: Vec<Cell> = crate::workload::PROT_TRANSITION_PHASES
            .iter()
            .map(|&p| transition(p))
            .collect();
        let m = fit_costs(Arch::X86_64, with_model_rows(split).unwrap(), &mut t).unwrap();
        for p in predict_all(&m, t.clone()).unwrap() {
            assert!(p.unseparated.is_empty(), "{p:?}");
            assert!(p.residual.unwrap().abs() < 1e-9, "{p:?}");
        }
        let m = fit_costs(Arch::X86_64, with_model_rows(toggles).unwrap(), &mut t).unwrap();
        let p = predict_all(&m, t).unwrap();
        assert!(p.iter().any(|p| !p.unseparated.is_empty()), "{p:?}");
    }

    /// A part that counted nothing gives the cell no directions.
    #[test]
    fn a_cell_with_an_empty_part_stays_whole() {
        let mut o = obs(
            Strategy::V6_16,
            WorkloadKind::MprotectToggle,
            4096,
            FolioSpec::Base,
        );
        o.instructions = 3000.0;
        let part = |phase: &str, k| ProfilePart {
            phase: phase.into(),
            kernel_instructions: k,
            ..ProfilePart::default()
        };
        assert!(parts_of(&o, &[part("none-to-rw", 100.0), part("rw-to-none", 0.0)]).is_empty());
        assert!(parts_of(&o, &[part("none-to-rw", 100.0)]).is_empty());
        let two = parts_of(&o, &[part("none-to-rw", 100.0), part("rw-to-none", 300.0)]);
        assert_eq!(two[0].instructions, 100.0);
        assert_eq!(two[1].instructions, 300.0);
        assert!(two.iter().all(|p| p.counted));
        let whole = whole_of(&two.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!((whole.instructions, whole.phase.as_deref()), (200.0, None));
        assert_eq!(by_direction(vec![o.clone()]), vec![o]);
    }

    /// An mremap call pays its own syscall's fixed part, which no toggle
    /// prices: refused, naming mremap-move as the workload that would.
    #[test]
    fn an_mremap_is_refused_by_a_toggle_fit_for_its_fixed_part() {
        let x = model_row(
            Arch::X86_64,
            Strategy::V6_16,
            WorkloadKind::MremapMove,
            4 << 20,
            FolioSpec::Base,
            Some("mremap"),
        )
        .unwrap()
        .unwrap();
        assert_eq!(x.get("fixed:mremap"), Some(&1.0));
        assert!(!x.contains_key("fixed:mprotect"), "{x:?}");
        let mut o = obs(
            Strategy::V6_16,
            WorkloadKind::MremapMove,
            4 << 20,
            FolioSpec::Base,
        );
        o.phase = Some("mremap".into());
        o.instructions = 11_000.0;
        let mut t = vec![Cell::new(o, x)];
        let m = fit_costs(Arch::X86_64, per_pte_toggles(), &mut t).unwrap();
        let p = predict_all(&m, t).unwrap();
        assert!(p[0].predicted.is_none(), "{:?}", p[0]);
        assert!(
            p[0].lacking.contains(&"fixed:mremap".to_string()),
            "{:?}",
            p[0]
        );
        assert!(
            p[0].would_identify.contains(&WorkloadKind::MremapMove),
            "{:?}",
            p[0]
        );
    }

    #[test]
    fn columns_leave_out_what_the_call_does_not_pay() {
        let t = per_pte_toggles();
        let c = columns_of(&t);
        assert_eq!(c[0], "fixed:mprotect");
        for out in ["write_faults", "calls", "young_tests", "tlb_flush_pages"] {
            assert!(!c.iter().any(|n| n == out), "{out} in {c:?}");
        }
        assert!(c.iter().any(|n| n == "folio_lookups"));
        assert!(c.iter().any(|n| n.starts_with("call:")), "{c:?}");
        for (counter, _) in SUPPORT {
            assert!(c.iter().any(|n| n == counter), "{counter}");
        }
    }

    #[test]
    fn phases_the_model_does_not_count_have_no_row() {
        let r = |w, p| {
            model_row(
                Arch::X86_64,
                Strategy::V6_16,
                w,
                64 << 10,
                FolioSpec::Base,
                p,
            )
            .unwrap()
        };
        assert!(r(WorkloadKind::MremapMove, Some("iteration")).is_none());
        assert!(r(WorkloadKind::MremapMove, Some("mremap")).is_some());
        let none = r(WorkloadKind::ProtTransition, Some("rw-to-none")).unwrap();
        let rw = r(WorkloadKind::ProtTransition, Some("none-to-rw")).unwrap();
        assert_ne!(none, rw);
        assert!(r(WorkloadKind::Reclaim, None).is_none());
    }
}
