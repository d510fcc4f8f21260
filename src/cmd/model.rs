//! `ptelab model WORKLOAD --arch x86_64|arm64 [--granule 4K] --strategy NAME|all
//! --size S --folio SPEC [--offset PAGES] [--no-contpte] [--bbml2] [--json]`:
//! the workload on the executable model (`ptelab-model`), page-table
//! primitives per mm call for each kernel strategy side by side.
//!
//! Other commands (crosscheck, reproduce) call [`model_cells`] /
//! [`model_outcomes`] with a validated [`ModelPlan`]; the per-call flush lists
//! are in each outcome's `calls[i].flushes`.
//!
//! # JSON (`--json`)
//!
//! ```json
//! {"schema": "ptelab/model/v1", "workload": "mprotect-toggle", "arch": "arm64",
//!  "granule": "4K", "contpte": true, "bbml2": false, "size_bytes": 409600,
//!  "folio": "64K", "offset_pages": 0, "pages": 100, "calls_per_iteration": 2,
//!  "strategies": [{"name": "per-pte", "kernel": "v6.16",
//!                  "counters": {"pte_loads": 80.0, ...},          // per call
//!                  "ratio_vs_first": {"pte_loads": 1.0, ...},
//!                  "batch_sizes": {"1": 100},
//!                  "calls": [{"label": "mprotect(PROT_NONE)", "counters": {...},
//!                             "flushes": [{"start": 0, "pages": 100, "full": true,
//!                                          "ops": 1, "source": "mmu-gather", "trace_pages": -1}]}],
//!                  "outside": {...}, "notes": [...]}, ...],
//!  "ptes_simulated": 1600}
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use ptelab_model::{
    run_model, ArchConfig, Arm64, FlushSource, Granule, ModelConfig, ModelError, ModelOutcome,
    RmapImpl, Strategy, Workload,
};
use serde_json::{json, Value};

use crate::bail_usage;
use crate::cli::flags::ModelArgs;
use crate::error::usage;
use crate::record::ModelCellRecord;
use crate::workload::size::format_size;
use crate::workload::{FolioSpec, WorkloadKind};

/// Schema tag of the JSON document.
pub const SCHEMA: &str = "ptelab/model/v1";

/// A validated `ptelab model` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelPlan {
    pub workload: WorkloadKind,
    pub arch: ArchConfig,
    pub strategies: Vec<Strategy>,
    pub size_bytes: u64,
    pub folio: FolioSpec,
    pub offset_pages: u64,
}

/// The model's name for a catalogue workload, or a usage error.
pub fn model_workload(w: WorkloadKind) -> anyhow::Result<Workload> {
    Ok(match w {
        WorkloadKind::MprotectToggle => Workload::MprotectToggle,
        WorkloadKind::MprotectRoRw => Workload::MprotectRoRw,
        WorkloadKind::ProtTransition => Workload::ProtTransition,
        WorkloadKind::MremapMove => Workload::MremapMove,
        // Classic LRU: folio_referenced() per folio (the library also has
        // Workload::ReclaimMglru, not selectable here).
        WorkloadKind::Reclaim => Workload::Reclaim,
    })
}

/// Parse `--arch`, `--granule`, `--no-contpte`, `--bbml2`.
pub fn parse_arch(
    arch: &str,
    granule: &str,
    no_contpte: bool,
    bbml2: bool,
) -> anyhow::Result<ArchConfig> {
    let g = Granule::parse(granule).ok_or_else(|| {
        usage(format!(
            "unknown granule '{granule}': accepted granules are 4K, 16K, 64K (arm64)"
        ))
    })?;
    match arch.trim().to_ascii_lowercase().as_str() {
        "x86_64" | "x86-64" | "x86" | "amd64" => {
            if g != Granule::K4 {
                bail_usage!(
                    "granule '{granule}' is not available on x86_64: accepted granule is 4K"
                );
            }
            if no_contpte || bbml2 {
                bail_usage!("--no-contpte and --bbml2 apply to arm64 only: use --arch arm64");
            }
            Ok(ArchConfig::X86)
        }
        "arm64" | "aarch64" => Ok(ArchConfig::Arm64(Arm64 {
            granule: g,
            contpte: !no_contpte,
            bbml2,
            tlbi_range: true,
        })),
        other => bail_usage!("unknown arch '{other}': accepted architectures are x86_64, arm64"),
    }
}

/// Parse `--strategy NAME|all`.
pub fn parse_strategies(text: &str) -> anyhow::Result<Vec<Strategy>> {
    if text.trim().eq_ignore_ascii_case("all") {
        return Ok(Strategy::ALL.to_vec());
    }
    let mut v = Vec::new();
    for name in text.split(',').filter(|s| !s.trim().is_empty()) {
        let s: Strategy = name
            .parse()
            .map_err(|e: ptelab_model::strategy::UnknownStrategy| usage(e.to_string()))?;
        if !v.contains(&s) {
            v.push(s);
        }
    }
    if v.is_empty() {
        bail_usage!("empty --strategy: accepted are {}", Strategy::accepted());
    }
    Ok(v)
}

/// Folio bytes of `spec` as PTE-mapped folios in `granule`, or a usage error.
pub fn folio_bytes(spec: FolioSpec, granule: Granule) -> anyhow::Result<u64> {
    if spec.pmd_mapped() {
        bail_usage!(
            "folio spec '2M' (PMD-mapped THP) is not modelled at the PTE level: accepted specs are {} except 2M \
             (use 2M-pte for PMD-sized folios mapped by PTEs)",
            FolioSpec::accepted()
        );
    }
    let bytes = spec.folio_bytes();
    if bytes < granule.page_size() {
        bail_usage!(
            "folio spec '{spec}' is smaller than the {} granule: accepted specs are those of at least {}",
            granule.name(),
            granule.name()
        );
    }
    Ok(bytes)
}

/// Validate the flags into a plan (everything a user can get wrong → exit 2).
pub fn plan(args: &ModelArgs) -> anyhow::Result<ModelPlan> {
    let Some(workload) = args.workload else {
        bail_usage!("a workload is required: accepted workloads are mprotect-toggle, mprotect-ro-rw, prot-transition, mremap-move, reclaim")
    };
    model_workload(workload)?;
    let arch = parse_arch(
        args.arch.name(),
        args.granule.name(),
        args.no_contpte,
        args.bbml2,
    )?;
    let strategies = parse_strategies(&args.strategy)?;
    let folio = args.folio;
    let size_bytes = args.size.unwrap_or_else(|| workload.default_size());
    let plan = ModelPlan {
        workload,
        arch,
        strategies,
        size_bytes,
        folio,
        offset_pages: args.offset,
    };
    validate(&plan)?;
    Ok(plan)
}

fn config(plan: &ModelPlan, strategy: Strategy) -> anyhow::Result<ModelConfig> {
    let granule = plan.arch.granule();
    let mut cfg = ModelConfig::new(
        model_workload(plan.workload)?,
        plan.arch,
        strategy,
        plan.size_bytes,
        folio_bytes(plan.folio, granule)?,
    );
    cfg.offset_pages = plan.offset_pages;
    Ok(cfg)
}

fn model_error(e: ModelError, plan: &ModelPlan) -> anyhow::Error {
    let g = plan.arch.granule();
    match e {
        ModelError::Size { size, .. } => usage(format!(
            "size {size} bytes is not a multiple of the {} base page: accepted sizes are positive multiples of {}",
            g.name(),
            g.name()
        )),
        ModelError::Folio { .. } => usage(format!(
            "folio spec '{}' does not fit the {} granule: accepted specs are {}",
            plan.folio,
            g.name(),
            FolioSpec::accepted()
        )),
        ModelError::Offset { offset, folio_pages } => usage(format!(
            "offset {offset} is past the {} folio: accepted offsets are 0..{} base pages",
            plan.folio,
            folio_pages.saturating_sub(1)
        )),
        ModelError::Unsupported(what) => usage(format!("{what} is not modelled")),
        other => anyhow::anyhow!("model: {other}"),
    }
}

fn validate(plan: &ModelPlan) -> anyhow::Result<()> {
    let cfg = config(plan, plan.strategies[0])?;
    ptelab_model::workload::geometry(&cfg).map_err(|e| model_error(e, plan))?;
    Ok(())
}

/// Run every strategy of `plan` on the model.
pub fn model_outcomes(plan: &ModelPlan) -> anyhow::Result<Vec<ModelOutcome>> {
    let configs = plan
        .strategies
        .iter()
        .map(|&s| config(plan, s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Strategies are independent: run them on separate threads.
    let results: Vec<Result<ModelOutcome, ModelError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = configs
            .iter()
            .map(|cfg| scope.spawn(move || run_model(cfg)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("model thread panicked"))
            .collect()
    });
    results
        .into_iter()
        .map(|r| r.map_err(|e| model_error(e, plan)))
        .collect()
}

/// Everything besides workload/size/folio/arch/strategy that selects a cell.
pub fn params(plan: &ModelPlan, outcome: &ModelOutcome) -> Value {
    let (contpte, bbml2) = match plan.arch {
        ArchConfig::X86 => (false, false),
        ArchConfig::Arm64(a) => (a.contpte, a.bbml2),
    };
    json!({
        "granule": plan.arch.granule().name(),
        "offset_pages": plan.offset_pages,
        "contpte": contpte,
        "bbml2": bbml2,
        "kernel": outcome.kernel,
    })
}

/// The result records of `plan` (counters per mm call), one per strategy,
/// with the outcomes they came from.
pub fn model_cells(plan: &ModelPlan) -> anyhow::Result<Vec<(ModelOutcome, ModelCellRecord)>> {
    let outcomes = model_outcomes(plan)?;
    Ok(outcomes
        .into_iter()
        .map(|o| {
            let rec = ModelCellRecord {
                workload: plan.workload,
                size_bytes: plan.size_bytes,
                folio: plan.folio,
                arch: plan.arch.name().to_string(),
                strategy: o.strategy.clone(),
                params: params(plan, &o),
                counters: o.per_call(),
            };
            (o, rec)
        })
        .collect())
}

pub fn run(args: &ModelArgs) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    if args.list_strategies {
        if args.out.json {
            let v: Vec<Value> = Strategy::ALL
                .iter()
                .map(|s| {
                    json!({"name": s.name(), "kernel": s.kernel(), "summary": s.summary(),
                           "reclaim": RmapImpl::of_strategy(*s).summary()})
                })
                .collect();
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&json!({"schema": SCHEMA, "strategies": v}))?
            )?;
        } else {
            writeln!(out, "{:<15} {:<38} changes", "strategy", "kernel")?;
            for s in Strategy::ALL {
                writeln!(out, "{:<15} {:<38} {}", s.name(), s.kernel(), s.summary())?;
                writeln!(
                    out,
                    "{:<15} {:<38} {}",
                    "",
                    "",
                    RmapImpl::of_strategy(s).summary()
                )?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let plan = plan(args)?;
    let cells = model_cells(&plan)?;
    if !args.out.no_store {
        let store = crate::store::Store::open(&args.out.db)?;
        let host = crate::kernel::host::capture()?;
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        let run = store.begin_run("model", &command, &host, &args.out.tags)?;
        for (_, rec) in &cells {
            store.insert_model_cell(run, rec)?;
        }
        store.finish_run(run, crate::store::RunStatus::Complete)?;
    }
    let outcomes: Vec<ModelOutcome> = cells.into_iter().map(|(o, _)| o).collect();
    if args.out.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&to_json(&plan, &outcomes))?
        )?;
    } else {
        out.write_all(render_table(&plan, &outcomes).as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn ratio(v: f64, base: f64) -> Option<f64> {
    (base != 0.0).then(|| v / base)
}

/// The JSON document (schema `ptelab/model/v1`).
pub fn to_json(plan: &ModelPlan, outcomes: &[ModelOutcome]) -> Value {
    let (contpte, bbml2) = match plan.arch {
        ArchConfig::X86 => (false, false),
        ArchConfig::Arm64(a) => (a.contpte, a.bbml2),
    };
    let first = outcomes.first().map(|o| o.per_call()).unwrap_or_default();
    let strategies: Vec<Value> = outcomes
        .iter()
        .map(|o| {
            let pc = o.per_call();
            let ratios: BTreeMap<String, Option<f64>> = pc
                .iter()
                .map(|(k, v)| (k.clone(), ratio(*v, first.get(k).copied().unwrap_or(0.0))))
                .collect();
            let calls: Vec<Value> = o
                .calls
                .iter()
                .map(|c| {
                    // contpte repaint TLBIs are counted (`tlbi_sync`), not listed.
                    let flushes: Vec<Value> = c
                        .flushes
                        .iter()
                        .filter(|f| f.source != FlushSource::ContpteConvert)
                        .map(|f| {
                            json!({"start": f.start, "pages": f.pages, "full": f.full, "ops": f.ops,
                                   "source": f.source, "trace_pages": f.trace_pages()})
                        })
                        .collect();
                    json!({"label": c.label, "counters": c.counters.to_map(), "flushes": flushes})
                })
                .collect();
            json!({
                "name": o.strategy,
                "kernel": o.kernel,
                "counters": pc,
                "ratio_vs_first": ratios,
                "batch_sizes": o.total().batch_sizes,
                "calls": calls,
                "outside": o.outside.to_map(),
                "notes": o.notes,
            })
        })
        .collect();
    json!({
        "schema": SCHEMA,
        "workload": plan.workload.name(),
        "arch": plan.arch.name(),
        "granule": plan.arch.granule().name(),
        "contpte": contpte,
        "bbml2": bbml2,
        "size_bytes": plan.size_bytes,
        "folio": plan.folio.to_string(),
        "offset_pages": plan.offset_pages,
        "pages": outcomes.first().map_or(0, |o| o.pages),
        "calls_per_iteration": outcomes.first().map_or(0, |o| o.calls.len()),
        "strategies": strategies,
        "ptes_simulated": outcomes.iter().map(|o| o.ptes_simulated).sum::<u64>(),
    })
}

fn fmt_num(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.2}")
    }
}

fn counter_table(title: &str, names: &[&str], columns: &[(&str, BTreeMap<String, f64>)]) -> String {
    let mut s = format!("{title}\n");
    let mut header = format!("  {:<22}", "counter");
    for (i, (name, _)) in columns.iter().enumerate() {
        header.push_str(&format!(" {name:>14}"));
        if i > 0 {
            header.push_str(&format!(" {:>7}", "ratio"));
        }
    }
    s.push_str(header.trim_end());
    s.push('\n');
    let base = &columns[0].1;
    for &n in names {
        let vals: Vec<f64> = columns
            .iter()
            .map(|(_, m)| m.get(n).copied().unwrap_or(0.0))
            .collect();
        if vals.iter().all(|v| *v == 0.0) {
            continue;
        }
        let mut line = format!("  {n:<22}");
        for (i, v) in vals.iter().enumerate() {
            line.push_str(&format!(" {:>14}", fmt_num(*v)));
            if i > 0 {
                let r = ratio(*v, base.get(n).copied().unwrap_or(0.0));
                line.push_str(&format!(
                    " {:>7}",
                    r.map_or("-".to_string(), |r| format!("{r:.2}x"))
                ));
            }
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}

/// The human-readable report.
pub fn render_table(plan: &ModelPlan, outcomes: &[ModelOutcome]) -> String {
    let arch_desc = match plan.arch {
        ArchConfig::X86 => "x86_64 (4K)".to_string(),
        ArchConfig::Arm64(a) => format!(
            "arm64 ({} granule, contpte {}, BBML2 {})",
            a.granule.name(),
            if a.contpte { "on" } else { "off" },
            if a.bbml2 { "on" } else { "off" }
        ),
    };
    let pages = outcomes.first().map_or(0, |o| o.pages);
    let mut s = format!(
        "ptelab model {}: {}, size {} ({} pages), folio {}, offset {}\n\n",
        plan.workload.name(),
        arch_desc,
        format_size(plan.size_bytes),
        pages,
        plan.folio,
        plan.offset_pages
    );
    let names = ptelab_model::Counters::NAMES;
    let ncalls = outcomes.first().map_or(0, |o| o.calls.len());
    let labels: Vec<String> = outcomes
        .first()
        .map(|o| o.calls.iter().map(|c| c.label.clone()).collect())
        .unwrap_or_default();
    let avg: Vec<(&str, BTreeMap<String, f64>)> = outcomes
        .iter()
        .map(|o| (o.strategy.as_str(), o.per_call()))
        .collect();
    s.push_str(&counter_table(
        &format!(
            "per mm call (mean over {ncalls} calls: {}); ratio = vs {}",
            labels.join(", "),
            avg[0].0
        ),
        names,
        &avg,
    ));
    if ncalls > 1 {
        for (i, label) in labels.iter().enumerate() {
            let cols: Vec<(&str, BTreeMap<String, f64>)> = outcomes
                .iter()
                .map(|o| (o.strategy.as_str(), o.calls[i].counters.per_call(1)))
                .collect();
            s.push('\n');
            s.push_str(&counter_table(&format!("{label}:"), names, &cols));
        }
    }
    let outside: Vec<(&str, BTreeMap<String, f64>)> = outcomes
        .iter()
        .map(|o| (o.strategy.as_str(), o.outside.per_call(1)))
        .collect();
    if outside.iter().any(|(_, m)| m.values().any(|v| *v != 0.0)) {
        s.push('\n');
        s.push_str(&counter_table(
            "outside the counted calls, per iteration (not mprotect primitives):",
            names,
            &outside,
        ));
    }
    s.push_str("\nstrategies:\n");
    for o in outcomes {
        s.push_str(&format!("  {:<15} {}\n", o.strategy, o.kernel));
    }
    let mut notes: Vec<&String> = outcomes.iter().flat_map(|o| o.notes.iter()).collect();
    notes.dedup();
    if !notes.is_empty() {
        s.push_str("notes:\n");
        let mut seen = std::collections::BTreeSet::new();
        for n in notes {
            if seen.insert(n) {
                s.push_str(&format!("  - {n}\n"));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(
        arch: &str,
        granule: &str,
        folio: &str,
        size: u64,
        offset: u64,
    ) -> anyhow::Result<ModelPlan> {
        let p = ModelPlan {
            workload: WorkloadKind::MprotectToggle,
            arch: parse_arch(arch, granule, false, false)?,
            strategies: Strategy::ALL.to_vec(),
            size_bytes: size,
            folio: folio.parse()?,
            offset_pages: offset,
        };
        validate(&p)?;
        Ok(p)
    }

    #[test]
    fn bad_inputs_are_usage_errors() {
        for err in [
            plan_of("sparc", "4K", "4K", 4096, 0).unwrap_err(),
            plan_of("arm64", "8K", "4K", 4096, 0).unwrap_err(),
            plan_of("x86_64", "16K", "4K", 4096, 0).unwrap_err(),
            plan_of("arm64", "16K", "4K", 16384, 0).unwrap_err(),
            plan_of("x86_64", "4K", "64K", 65536, 16).unwrap_err(),
            plan_of("x86_64", "4K", "4K", 5000, 0).unwrap_err(),
            plan_of("x86_64", "4K", "2M", 2 << 20, 0).unwrap_err(),
            parse_strategies("v5.4").unwrap_err(),
        ] {
            assert!(crate::error::is_usage(&err), "{err}");
            assert!(!err.to_string().contains('\n'), "{err}");
        }
    }

    #[test]
    fn cells_carry_per_call_counters() {
        let p = plan_of("arm64", "4K", "64K", 64 << 10, 0).unwrap();
        let cells = model_cells(&p).unwrap();
        assert_eq!(cells.len(), 4);
        let (_, rec) = &cells[0];
        assert_eq!(rec.strategy, "per-pte");
        assert!(rec.counters["pte_xchg"] > 0.0);
        assert_eq!(rec.params["granule"], "4K");
    }
}
