//! `ptelab sweep WORKLOAD --sizes LIST --folios LIST`: the seeds' region-size
//! sweep, one cell per size and folio layout, each stored as it finishes.

use std::process::ExitCode;

use crate::cli::flags::SweepArgs;

pub fn run(args: &SweepArgs) -> anyhow::Result<ExitCode> {
    let (sizes, folios) = (&args.sizes, &args.folios);
    if sizes.is_empty() || folios.is_empty() {
        crate::error::bail_usage!("--sizes and --folios need at least one value each");
    }
    super::run_kernel(
        "sweep",
        args.workload,
        sizes,
        folios,
        &args.measure,
        &args.out,
    )
}
