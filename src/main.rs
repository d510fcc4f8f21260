//! ptelab: measure and model Linux large-folio PTE batching. This binary is
//! the commands (`cmd`); the layers below them are the workspace's crates
//! (docs/architecture.md), named here by their layer names. Built without
//! the `host` feature it is the static binary a QEMU guest boots: its init
//! and the commands a guest runs (docs/guests.md, "Guest binary").

use std::process::ExitCode;

use clap::Parser;

use ptelab_cli as cli;
use ptelab_crosscheck as crosscheck;
use ptelab_error as error;
use ptelab_guest as guest;
use ptelab_kernel as kernel;
use ptelab_measure as measure;
use ptelab_model_run as model;
use ptelab_record as record;
use ptelab_store as store;
use ptelab_text as text;
use ptelab_workload as workload;
#[cfg(feature = "host")]
use {
    ptelab_analysis as analysis, ptelab_bisect as bisect, ptelab_fleet as fleet,
    ptelab_predict as predict, ptelab_report as report, ptelab_reproduce as reproduce,
};

mod cmd;
#[cfg(test)]
mod roundtrip;

use cli::flags::{Cli, Command};

#[global_allocator]
static ALLOC: kernel::hugealloc::Huge = kernel::hugealloc::Huge;

fn main() -> ExitCode {
    if guest::boot::init::is_guest_init() {
        guest::boot::init::main(measure::marker::step);
    }
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            // A closed stdout (ptelab ... | head) is not a failure.
            if err.chain().any(|e| {
                e.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("ptelab: error: {err:#}");
            // Whatever failed after SIGINT/SIGTERM failed because of it.
            if kernel::thp::interrupted().load(std::sync::atomic::Ordering::Relaxed) {
                return ExitCode::from(130);
            }
            ExitCode::from(if error::is_usage(&err) { 2 } else { 1 })
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Doctor(args) => cmd::doctor::run(&args),
        Command::Bench(args) => cmd::bench::run(&args),
        Command::Sweep(args) => cmd::sweep::run(&args),
        Command::Model(args) => {
            // The cells' page tables and TLB models in huge pages.
            kernel::hugealloc::enable();
            cmd::model::run(&args)
        }
        Command::Crosscheck(args) => cmd::crosscheck::run(&args),
        #[cfg(feature = "host")]
        command => host(command),
        #[cfg(not(feature = "host"))]
        _ => error::bail_usage!(
            "this ptelab is a guest build (no `host` feature): it runs doctor, bench, sweep, \
             model and crosscheck; the other commands run on the host"
        ),
    }
}

/// The commands only the host runs.
#[cfg(feature = "host")]
fn host(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Runs(args) => cmd::runs::run(&args),
        Command::Show(args) => cmd::show::run(&args),
        Command::Compare(args) => cmd::compare::run(&args),
        Command::Calibrate(args) => cmd::calibrate::run(&args),
        Command::Report(args) => cmd::report::run(&args),
        Command::Reproduce(args) => match args.as_patch()? {
            Some(patch) => cmd::patch::run(&patch),
            None => cmd::reproduce::run(&args),
        },
        Command::Kernel(args) => cmd::kernel::run(&args),
        Command::Vm(args) => cmd::vm::run(&args),
        Command::Bisect(args) => cmd::bisect::run(&args),
        Command::Patch(args) => cmd::patch::run(&args),
        Command::Task(args) => cmd::task::run(&args),
        Command::Doctor(_)
        | Command::Bench(_)
        | Command::Sweep(_)
        | Command::Model(_)
        | Command::Crosscheck(_) => unreachable!("run() takes these"),
    }
}
