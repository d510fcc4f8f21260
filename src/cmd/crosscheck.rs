//! `ptelab crosscheck [WORKLOAD...] [--sizes ...] [--folios ...] [--json]`:
//! every workload on this kernel and on the model (this arch, the strategy of
//! this kernel's version), every observable compared per call. Exit 0 when
//! all observable rows match, 1 when any does not (each mismatch is printed
//! as a finding). See `crate::crosscheck`. With `--stored`, the model is
//! held to stored, profiled TCG guest runs instead (`predict::mechanism`).

use std::process::ExitCode;

use ptelab_model::{ArchConfig, Granule};
use serde_json::json;

use crate::cli::flags::CrosscheckArgs;
use crate::crosscheck::probe::FlushProbe;
use crate::crosscheck::run::{compared_workloads, run_plan, Plan};
use crate::crosscheck::summary::render_document;
use crate::crosscheck::version::strategy_for_kernel;
use crate::crosscheck::SCHEMA;
use crate::error::usage;
use crate::kernel::host;
use crate::kernel::thp::KnobGuard;
use crate::measure::runner;
#[cfg(feature = "host")]
use crate::predict::{self, mechanism};
use crate::store::RunStatus;
use crate::workload::Arch;

pub fn run(args: &CrosscheckArgs) -> anyhow::Result<ExitCode> {
    if args.stored {
        #[cfg(feature = "host")]
        return stored(args);
        #[cfg(not(feature = "host"))]
        crate::error::bail_usage!("--stored reads the results database, which a guest has none of");
    }
    let (sizes, folios) = (args.sizes.clone(), args.folios.clone());
    let mut workloads = if args.workloads.is_empty() {
        compared_workloads()
    } else {
        args.workloads.clone()
    };
    workloads.dedup();
    let accepted = compared_workloads();
    if let Some(w) = workloads.iter().find(|w| !accepted.contains(w)) {
        let names: Vec<&str> = accepted.iter().map(|w| w.name()).collect();
        return Err(usage(format!(
            "workload '{}' is not modelled: accepted workloads are {}",
            w.name(),
            names.join(", ")
        )));
    }
    // The model's arm64: 4K pages (ptelab's regions assume them), contpte
    // as Debian builds it, FEAT_TLBIRANGE, and LPA2 when the kernel runs
    // with 52-bit VA (its flushes issue single-page TLBIs up to a 64K
    // boundary, which TLBI rows counted in a guest see). BBML2 is left out.
    let Some(host_arch) = Arch::host() else {
        anyhow::bail!(
            "crosscheck models x86_64 and arm64 kernels, not {}",
            std::env::consts::ARCH
        )
    };
    let arch = match host_arch {
        Arch::X86_64 => ArchConfig::X86,
        Arch::Arm64 => ArchConfig::Arm64(ptelab_model::Arm64 {
            lpa2: crate::crosscheck::probe::va_above_48_bits(),
            ..ptelab_model::Arm64::new(Granule::K4)
        }),
    };
    // The mm must only ever have run on one CPU, or every flush also shows
    // a remote_ipi_send (see kernel::tlbtrace).
    runner::pin_process(args.pin)?;
    let host = host::capture()?;
    let choice =
        strategy_for_kernel(&host.kernel_release, host_arch).map_err(anyhow::Error::msg)?;
    let (strategy, why) = (choice.strategy, choice.reason);
    eprintln!("ptelab: {why}");
    let soft_dirty = crate::crosscheck::probe::soft_dirty_supported()?;
    // Only x86 kernels emit tlb:tlb_flush; elsewhere the flush rows are
    // reported as not observable.
    let mut probe = match arch {
        ArchConfig::X86 => Some(FlushProbe::open()?),
        ArchConfig::Arm64(_) => None,
    };
    let mut guard = KnobGuard::acquire(&mut |m: &str| eprintln!("ptelab: {m}"))?;
    let plan = Plan {
        workloads,
        sizes,
        folios,
        strategy,
        arch,
        scenarios: !args.no_scenarios,
        soft_dirty,
        windows: args.windows,
    };
    let quiet = args.out.json;
    let outcome = run_plan(&plan, &mut guard, probe.as_mut(), &mut |cell: &str| {
        if !quiet {
            eprintln!("ptelab: crosscheck {cell}");
        }
    });
    guard.restore()?;
    let mut outcome = outcome?;
    if !soft_dirty {
        // The model's x86 has the bit; its arm64 has none, as the kernels.
        let model = match arch {
            ArchConfig::X86 => "; the model assumes tracking",
            ArchConfig::Arm64(_) => "",
        };
        outcome.skipped.push(format!(
            "soft-dirty: this kernel does not track it (no CONFIG_MEM_SOFT_DIRTY: pagemap bit 55 \
             never set, clear_refs 4 does nothing), so pagemap soft-dirty and the clear_refs steps \
             are not compared{model}"
        ));
    }
    let all_match = outcome.rows.iter().all(|r| r.matches || r.unobservable);
    if let Some(store) = super::open_store(&args.out)? {
        let command = crate::kernel::host::invocation();
        let id = store.begin_run("crosscheck", &command, &host, &args.out.tags)?;
        for c in &outcome.model_cells {
            store.insert_model_cell(id, c)?;
        }
        store.finish_run(id, RunStatus::Complete)?;
    }
    let doc = json!({
        "schema": SCHEMA,
        "kernel": host.kernel_release,
        "arch": arch.name(),
        "strategy": strategy.name(),
        "strategy_kernel": strategy.kernel(),
        "strategy_reason": why,
        "skipped": outcome.skipped,
        "rows": outcome.rows,
        "all_match": all_match,
    });
    // Text is rendered from the document, as `vm` renders a guest's.
    let (text, summary) = render_document(&doc)?;
    if args.out.json {
        crate::cmd::print_json(&doc)?;
    } else {
        print!("{text}");
    }
    eprintln!("ptelab: crosscheck: {}", summary.line());
    Ok(if all_match {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `crosscheck --stored`: the model against the stored profiled guest runs.
#[cfg(feature = "host")]
fn stored(args: &CrosscheckArgs) -> anyhow::Result<ExitCode> {
    let store = crate::store::Store::open_existing(&args.out.db)?;
    let arches = match args.arch {
        Some(a) => vec![a],
        None => vec![Arch::X86_64, Arch::Arm64],
    };
    let mut cells = Vec::new();
    for arch in arches {
        let all = super::stored_guest_cells(&store, arch)?;
        // Kernels by identity, however they were spelt when they ran.
        let kernels = super::kernels_named(&args.kernel, arch, &all, &store)?.concat();
        let obs = all
            .into_iter()
            .filter(|o| args.kernel.is_empty() || kernels.contains(&o.kernel))
            .filter(|o| args.workloads.is_empty() || args.workloads.contains(&o.workload))
            .collect();
        cells.extend(predict::with_model_rows(obs)?);
    }
    let (rows, skipped) = mechanism::rows(&cells);
    if rows.is_empty() {
        return Err(usage(format!(
            "no profiled TCG guest cells to check in {}{}: measure some with `ptelab vm --profile \
             --kernel debian:6.17.8 -- sweep mprotect-toggle --sizes 400K,4M --folios 4K,64K`",
            store.location(),
            if skipped.is_empty() {
                String::new()
            } else {
                format!(" ({} cells left out: {})", skipped.len(), skipped[0].why)
            }
        )));
    }
    if args.out.json {
        let doc = json!({
            "schema": "ptelab/crosscheck-stored/v1",
            "rows": rows.iter().map(|r| json!({"row": r, "matches": r.matches()})).collect::<Vec<_>>(),
            "skipped": skipped,
        });
        super::print_json(&doc)?;
    } else {
        super::print_text(&mechanism::render_text(&rows, &skipped))?;
    }
    Ok(if rows.iter().all(mechanism::Row::matches) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
