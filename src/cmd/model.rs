//! `ptelab model WORKLOAD --arch x86_64|arm64 [--granule 4K] --strategy NAME|all
//! --size S --folio SPEC [--offset PAGES] [--no-contpte] [--bbml2] [--json]`:
//! the workload on the executable model (`ptelab-model`), page-table
//! primitives per mm call for each kernel strategy side by side.
//!
//! The plan and the run are `crate::model` (which `ptelab reproduce` runs
//! too); this command validates the flags, stores and prints.
//!
//! # JSON (`--json`)
//!
//! ```json
//! {"schema": "ptelab/model/v1", "workload": "mprotect-toggle", "arch": "arm64",
//!  "granule": "4K", "contpte": true, "bbml2": false, "size_bytes": 409600,
//!  "folio": "64K", "offset_pages": 0, "pages": 100, "calls_per_iteration": 2,
//!  "strategies": [{"name": "v6.16", "kernel": "v6.12 … v6.16",
//!                  "counters": {"pte_loads": 80.0, ...},          // per call
//!                  "ratio_vs_first": {"pte_loads": 1.0, ...},
//!                  "batch_sizes": {"1": 100},
//!                  "functions": {"vm_normal_page": 100.0, ...},    // out-of-line entries per call
//!                  "calls": [{"label": "mprotect(PROT_NONE)", "counters": {...},
//!                             "flushes": [{"start": 0, "pages": 100, "full": true,
//!                                          "ops": 1, "source": "mmu-gather", "trace_pages": -1}]}],
//!                  "outside": {...}, "notes": [...]}, ...],
//!  "ptes_simulated": 1600}
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use ptelab_model::{ArchConfig, FlushSource, ModelOutcome, RmapImpl, Strategy};
use serde_json::{json, Value};

use crate::cli::flags::ModelArgs;
use crate::error::bail_usage;
use crate::model::{arch_config, model_cells, parse_strategies, validate, ModelPlan};
#[cfg(feature = "host")]
use crate::predict::{self, Observed};
#[cfg(feature = "host")]
use crate::store::Store;
use crate::text::table::Table;
use crate::workload::size::format_size;
use crate::workload::FolioSpec;

/// Schema tag of the JSON document.
pub const SCHEMA: &str = "ptelab/model/v1";

/// Validate the flags into a plan (everything a user can get wrong → exit 2).
pub fn plan(args: &ModelArgs) -> anyhow::Result<ModelPlan> {
    let Some(workload) = args.workload else {
        bail_usage!("a workload is required: accepted workloads are mprotect-toggle, mprotect-ro-rw, prot-transition, mremap-move, reclaim")
    };
    let arch = arch_config(args.arch, args.granule, args.no_contpte, args.bbml2)?;
    let strategies = parse_strategies(&args.strategy)?;
    let folio = args.folio.unwrap_or(FolioSpec::Base);
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
    if args.predict {
        #[cfg(feature = "host")]
        return predict(args, &mut out);
        #[cfg(not(feature = "host"))]
        bail_usage!("--predict reads the results database, which a guest has none of");
    }
    let plan = plan(args)?;
    let cells = model_cells(&plan)?;
    if let Some(store) = super::open_store(&args.out)? {
        let host = crate::kernel::host::capture()?;
        let command = crate::kernel::host::invocation();
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
                    json!({"label": c.label, "counters": c.counters.to_map(),
                           "functions": c.counters.functions, "flushes": flushes})
                })
                .collect();
            json!({
                "name": o.strategy,
                "kernel": o.kernel,
                "counters": pc,
                "ratio_vs_first": ratios,
                "batch_sizes": o.total().batch_sizes,
                "functions": o.total().functions_per_call(o.calls.len() as u64),
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
    let mut table = Table::new().left("counter").min_width(22);
    for (i, (name, _)) in columns.iter().enumerate() {
        table = table.right(*name).min_width(14);
        if i > 0 {
            table = table.right("ratio").min_width(7);
        }
    }
    let base = &columns[0].1;
    for &n in names {
        let vals: Vec<f64> = columns
            .iter()
            .map(|(_, m)| m.get(n).copied().unwrap_or(0.0))
            .collect();
        if vals.iter().all(|v| *v == 0.0) {
            continue;
        }
        let mut row = vec![n.to_string()];
        for (i, v) in vals.iter().enumerate() {
            row.push(fmt_num(*v));
            if i > 0 {
                let r = ratio(*v, base.get(n).copied().unwrap_or(0.0));
                row.push(r.map_or("-".to_string(), |r| format!("{r:.2}x")));
            }
        }
        table.row(row);
    }
    let mut s = format!("{title}\n");
    for line in table.text(" ").lines() {
        s.push_str("  ");
        s.push_str(line);
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
    // Out-of-line function entries (their sum is `calls`), per mm call.
    let fns: Vec<(&str, BTreeMap<String, f64>)> = outcomes
        .iter()
        .map(|o| {
            (
                o.strategy.as_str(),
                o.total().functions_per_call(ncalls as u64),
            )
        })
        .collect();
    let fn_names: std::collections::BTreeSet<&str> = fns
        .iter()
        .flat_map(|(_, m)| m.keys().map(String::as_str))
        .collect();
    if !fn_names.is_empty() {
        let fn_names: Vec<&str> = fn_names.into_iter().collect();
        s.push('\n');
        s.push_str(&counter_table(
            "out-of-line calls per mm call, by function (Debian's build of each release; sum = calls):",
            &fn_names,
            &fns,
        ));
    }
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

/// `model --predict`: fit the costs on the stored guest runs of `--fit`,
/// predict the selected cells of `--kernel`, print.
#[cfg(feature = "host")]
fn predict(args: &ModelArgs, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    let arch = args.arch;
    let store = Store::open_existing(&args.out.db)?;
    let stored = super::stored_guest_cells(&store, arch)?;
    let kernels: Vec<String> = {
        let mut k: Vec<String> = stored.iter().map(|o| o.kernel.clone()).collect();
        k.sort();
        k.dedup();
        k
    };
    let gather = |kernels: &str, workload: &str| {
        format!(
            "`ptelab vm --profile --arch {arch} --kernel {kernels} -- sweep {workload} \
             --sizes 4K,40K,400K,4M,40M --folios 4K,64K`"
        )
    };
    // A spec names a kernel by identity: `debian:6.16.12` is the kernel
    // `reproduce` stored as `debian:6.16.12-x86_64`.
    let named = |specs: &[String]| -> anyhow::Result<Vec<String>> {
        let labels = super::kernels_named(specs, arch, &stored, &store)?;
        for (k, found) in specs.iter().zip(&labels) {
            if found.is_empty() {
                let have = if kernels.is_empty() {
                    "none".to_string()
                } else {
                    kernels.join(", ")
                };
                bail_usage!(
                    "no stored TCG guest runs of {k} on {arch} in {} (kernels with stored guest \
                     runs: {have}); measure it with {}",
                    store.location(),
                    gather(k, "mprotect-toggle")
                );
            }
        }
        Ok(labels.concat())
    };
    let (fit, kernel) = (named(&args.fit)?, named(&args.kernel)?);
    let selected = |list: &[String], o: &Observed| list.is_empty() || list.contains(&o.kernel);
    let fit_obs: Vec<Observed> = stored
        .iter()
        .filter(|o| selected(&fit, o) && args.fit_workloads.contains(&o.workload))
        .cloned()
        .collect();
    if fit_obs.is_empty() {
        let fit = if args.fit.is_empty() {
            "debian:6.16.12,debian:6.17.8,debian:7.1.3".to_string()
        } else {
            args.fit.join(",")
        };
        let workloads: Vec<&str> = args.fit_workloads.iter().map(|w| w.name()).collect();
        bail_usage!(
            "nothing to fit: no stored TCG guest runs of {} on {arch} for {} in {}; measure them \
             with {}",
            if args.fit.is_empty() {
                "any kernel"
            } else {
                "those kernels"
            },
            workloads.join(", "),
            store.location(),
            gather(&fit, workloads[0])
        );
    }
    let targets: Vec<Observed> = stored
        .into_iter()
        .filter(|o| selected(&kernel, o))
        .filter(|o| args.workload.is_none_or(|w| w == o.workload))
        .filter(|o| args.sizes.is_empty() || args.sizes.contains(&o.size_bytes))
        .filter(|o| args.folio.is_none_or(|f| f == o.folio))
        .filter(|o| !fit_obs.contains(o))
        .collect();
    let report = predict::fit_and_predict(arch, fit_obs, targets)?.report;
    if args.out.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else if args.markdown {
        out.write_all(report.markdown().as_bytes())?;
    } else {
        out.write_all(report.text().as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}
