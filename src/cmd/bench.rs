//! `ptelab bench WORKLOAD`: one measurement cell on the running kernel.
//! `ptelab sweep` runs the same code over a grid; see
//! [`super::run_kernel`].

use std::process::ExitCode;

use crate::cli::flags::BenchArgs;
use crate::workload::size::parse_size;
use crate::workload::FolioSpec;

pub fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let size = match &args.size {
        Some(s) => parse_size(s)?,
        None => args.workload.default_size(),
    };
    let folio: FolioSpec = args.folio.parse()?;
    super::run_kernel(
        "bench",
        args.workload,
        &[size],
        &[folio],
        &args.measure,
        &args.out,
        &args.tags,
    )
}
