//! `ptelab crosscheck [WORKLOAD...] [--sizes ...] [--folios ...] [--json]`:
//! every workload on this kernel and on the model (this arch, the strategy of
//! this kernel's version), every observable compared per call. Exit 0 when
//! all rows match, 1 when any does not (each mismatch is printed as a
//! finding). See `crate::crosscheck`.

use std::process::ExitCode;

use anyhow::Context;
use serde_json::json;

use crate::cli::flags::CrosscheckArgs;
use crate::crosscheck::probe::FlushProbe;
use crate::crosscheck::run::{run_plan, Plan};
use crate::crosscheck::{render_table, strategy_for_release, SCHEMA};
use crate::error::usage;
use crate::kernel::host;
use crate::kernel::thp::KnobGuard;
use crate::measure::runner;
use crate::store::RunStatus;
use crate::workload::WorkloadKind;

/// Workloads checked when none is named.
const DEFAULT: [WorkloadKind; 4] = [
    WorkloadKind::MprotectToggle,
    WorkloadKind::MprotectRoRw,
    WorkloadKind::MremapMove,
    WorkloadKind::ProtTransition,
];

pub fn run(args: &CrosscheckArgs) -> anyhow::Result<ExitCode> {
    let (sizes, folios) = (args.sizes.clone(), args.folios.clone());
    let mut workloads = if args.workloads.is_empty() {
        DEFAULT.to_vec()
    } else {
        args.workloads.clone()
    };
    workloads.dedup();
    if workloads.contains(&WorkloadKind::Reclaim) {
        return Err(usage(
            "workload 'reclaim' is not modelled: accepted workloads are mprotect-toggle, \
             mprotect-ro-rw, mremap-move, prot-transition",
        ));
    }
    if std::env::consts::ARCH != "x86_64" {
        anyhow::bail!(
            "crosscheck compares tlb:tlb_flush records, which only x86-64 kernels emit \
             (this is {})",
            std::env::consts::ARCH
        );
    }
    // The mm must only ever have run on one CPU, or every flush also shows
    // a remote_ipi_send (see kernel::tlbtrace).
    runner::pin_process(args.pin)?;
    let host = host::capture()?;
    let (strategy, why) = strategy_for_release(&host.kernel_release).with_context(|| {
        format!(
            "cannot tell the kernel version from release '{}'",
            host.kernel_release
        )
    })?;
    eprintln!("ptelab: {why}");
    let soft_dirty = crate::crosscheck::probe::soft_dirty_supported()?;
    let mut probe = FlushProbe::open()?;
    let mut guard = KnobGuard::acquire(&mut |m: &str| eprintln!("ptelab: {m}"))?;
    let plan = Plan {
        workloads,
        sizes,
        folios,
        strategy,
        scenarios: !args.no_scenarios,
        soft_dirty,
    };
    let quiet = args.out.json;
    let outcome = run_plan(&plan, &mut guard, &mut probe, &mut |cell: &str| {
        if !quiet {
            eprintln!("ptelab: crosscheck {cell}");
        }
    });
    guard.restore()?;
    let mut outcome = outcome?;
    if !soft_dirty {
        outcome.skipped.push(
            "soft-dirty: this kernel does not track it (no CONFIG_MEM_SOFT_DIRTY: pagemap bit 55 \
             never set, clear_refs 4 does nothing), so pagemap soft-dirty and the clear_refs steps \
             are not compared; the model assumes tracking"
                .to_string(),
        );
    }
    let all_match = outcome.rows.iter().all(|r| r.matches);
    if let Some(store) = super::open_store(&args.out)? {
        let command = crate::kernel::host::invocation();
        let id = store.begin_run("crosscheck", &command, &host, &args.out.tags)?;
        for c in &outcome.model_cells {
            store.insert_model_cell(id, c)?;
        }
        store.finish_run(id, RunStatus::Complete)?;
    }
    if args.out.json {
        crate::cmd::print_json(&json!({
            "schema": SCHEMA,
            "kernel": host.kernel_release,
            "arch": "x86_64",
            "strategy": strategy.name(),
            "strategy_reason": why,
            "skipped": outcome.skipped,
            "rows": outcome.rows,
            "all_match": all_match,
        }))?;
    } else {
        let header = format!(
            "crosscheck: kernel {} (x86_64) vs model strategy {} ({})",
            host.kernel_release,
            strategy.name(),
            strategy.kernel()
        );
        print!("{}", render_table(&header, &outcome.rows));
        for s in &outcome.skipped {
            println!("skipped: {s}");
        }
    }
    Ok(if all_match {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
