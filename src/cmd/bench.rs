//! `ptelab bench WORKLOAD`: one measurement cell on the running kernel.
//! `ptelab sweep` runs the same code over a grid; see
//! [`super::run_kernel`].

use std::process::ExitCode;

use crate::cli::flags::BenchArgs;

pub fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let size = args.size.unwrap_or_else(|| args.workload.default_size());
    super::run_kernel(
        "bench",
        args.workload,
        &[size],
        &[args.folio],
        &args.measure,
        &args.out,
    )
}
